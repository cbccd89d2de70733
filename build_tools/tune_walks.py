"""`python -m build_tools.tune_walks`: tune the persistent walk of the tuning table's fastest instances.

Why: a persistent instance walks its output tiles in bands (runtime/scheduling.py; `launch()`'s
`raster_along_m` and `group_size`), and the walk decides which operand tiles the CTAs of one wave share
in L2 (docs/KERNEL.md, "The L2 request coalescer"). `python -m build_tools.tune` times every instance at
its default walk only, yet another walk took 5% off 515 x 1536 x 1664 on a 64 x 128 tile (docs/PERF.md,
session 41), and the table's format and `select()` already carry a walk per candidate.

What it does, on a GPU with the wheel installed and torch available (a maintainer command, like `tune`):
at each grid point that the table holds in the M band asked for, for each tuned class, the
`--contenders` fastest instances at their default walk are timed again together with every distinct
walk of theirs (`walk_variants`: raster along M or along N, bands of 1 to 16 cluster tiles; walks that
the problem's tile grid makes identical counted once) and cuBLAS, by the method of build_tools/bench.py
(screened, then the finalists in interleaved full rounds; the default walks always reach the full rounds).
Where an instance's best walk beats its own default walk by more than `--margin` in the full rounds, that
walk is written to the point as one more candidate (`walk_point`), its time the instance's table time
times that ratio: both walks come from one interleaved run, and the table's other times stand as they
were measured. `select()` then picks it like an instance, but only near the point that holds it
(runtime/tuning.py `estimate`). Each point worked records ``"walks"`` (how many contenders per class were
tried), so an interrupted run resumes; a point that `tune` times afresh loses the record and is worked
again by the next run.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from build_tools import bench, tune
from runtime import scheduling
from runtime.spec import GemmSpec
from runtime.tuning import FORMAT, read_document, write_document

# Band widths tried, in cluster tiles. The default is 8 (runtime/scheduling.py DEFAULT_GROUP_SIZE); 16
# lets a wave of 132 CTAs span two default bands.
WALK_GROUPS = (1, 2, 4, 8, 16)
# Beyond it the full rounds' medians of one run tell walks apart: their spread between rounds is under
# ~1% at the table's sizes (docs/PERF.md), and the best of ~9 walks would otherwise win on noise alone.
DEFAULT_MARGIN = 0.01


def walk_variants(instance_id: str, m: int, n: int) -> list[tuple[bool, int]]:
    """The walks of an instance at a problem of ``m`` x ``n`` (batch 1) other than its default walk, as
    `launch()`'s overrides (raster_along_m in the problem's view, group_size), each distinct on the
    kernel's tile grid: a band at least as wide as the grid is the whole grid, so wider ones are the same
    walk (codegen/kernels/tile_scheduler.py)."""
    spec = GemmSpec.parse(instance_id)
    cm, cn, _ = scheduling.cluster_tiles(m, n, 1, *spec.problem_tile, *spec.problem_cluster)
    km, kn = (cn, cm) if spec.swap_ab else (cm, cn)  # the kernel's own grid (runtime/plan.py)

    def effective(along_m: int, group: int) -> tuple[int, int]:
        return along_m, min(group, kn if along_m else km)

    seen = {effective(*scheduling.default_raster(km, kn))}
    out = []
    for raster in (False, True):
        along_m = int(raster) ^ spec.swap_ab
        for group in WALK_GROUPS:
            walk = effective(along_m, group)
            if walk not in seen:
                seen.add(walk)
                out.append((raster, group))
    return out


def contenders(point: dict, shipped: set[str], count: int) -> list[str]:
    """The ``count`` fastest instances of ``shipped`` at their default walk in a table point."""
    out: list[str] = []
    for iid, raster, group, _ in point["times"]:
        if raster is None and group is None and iid in shipped and iid not in out:
            out.append(iid)
    return out[:count]


def walk_point(point: dict, runners: list[dict], tried: list[str], margin: float) -> dict:
    """``point`` (one class's, expanded form) after a walk run of the instances ``tried``: each one's
    earlier walk entries dropped, and its best walk added where that walk's full-round median beats the
    instance's own default walk in the same run by more than ``margin``, at the instance's table time times
    that ratio. ``runners``: bench_shape's rows of the class's series."""
    medians: dict[str, list[tuple[float, bool | None, int | None]]] = {}
    for r in runners:
        if r["kind"] == "hgemm" and "median_ms" in r:
            iid, raster, group = bench.parse_runner_name(r["name"])
            medians.setdefault(iid, []).append((r["median_ms"], raster, group))
    table_us = {t[0]: t[3] for t in point["times"] if t[1] is None and t[2] is None}
    times = [t for t in point["times"] if t[0] not in tried or (t[1] is None and t[2] is None)]
    for iid in tried:
        rows = medians.get(iid, [])
        default = next((ms for ms, raster, group in rows if raster is None and group is None), None)
        walks = [row for row in rows if row[1] is not None]
        if default is None or not walks or iid not in table_us:
            continue
        ms, raster, group = min(walks)
        if ms < default * (1.0 - margin):
            times.append([iid, raster, group, round(table_us[iid] * ms / default, 3)])
    out = {f: v for f, v in point.items() if f not in ("walks", "times")}  # as `Point.to_json` orders them
    return {**out, "walks": len(tried), "times": sorted(times, key=lambda t: t[3])}


def work_list(args, classes: dict) -> list[tuple[bench.Combo, bench.Shape]]:
    """The (combo, grid shape) pairs to work: in the M band, where some chosen class holds a point whose
    walks were not tuned (all of them with --retime)."""
    out = []
    for combo in tune.TUNED:
        chosen = tune.tuned_classes(args, combo) if combo.a in args.dtype else []
        for shape in tune.grid():
            if not (args.m_min <= shape.m and (not args.m_max or shape.m <= args.m_max)):
                continue
            if not tune.in_columns(args, shape):
                continue
            held = [tune.held_point(classes.get(ck, ()), shape) for ck, _ in chosen]
            if any(p is not None and (args.retime or "walks" not in p) for p in held):
                out.append((combo, shape))
    return out[: args.limit] if args.limit else out


def run(args) -> int:
    import torch

    hg, env, stream = tune.setup(torch)
    key = tune.gpu_key(torch)
    doc = read_document(args.out) if args.out.exists() else {}
    entry = doc.get("gpus", {}).get(key) if doc.get("format") == FORMAT else None
    if not entry or not entry.get("classes"):
        raise SystemExit(
            f"tune_walks: {args.out} holds no points for {key}: run `python -m build_tools.tune`"
        )
    classes = entry["classes"]
    # Every run that worked points is recorded (a band at a time, or a resumed run, each adds one).
    runs = entry.setdefault("measured", {}).setdefault("walks", {}).setdefault("runs", [])
    runs.append({
        "date": env["date"], "command": "python -m build_tools.tune_walks " + shlex.join(args.argv),
        "torch": env["torch"], "margin": args.margin,
    })  # fmt: skip
    instances = {inst.id: inst for inst in hg.instances()}
    shipped: dict[str, set[str]] = {}
    for inst in instances.values():
        shipped.setdefault(tune.class_key(inst), set()).add(inst.id)
    work = work_list(args, classes)
    print(f"tune_walks: {key}, {len(work)} grid points to work in {args.out}")
    progress = tune.Progress(len(work), "grid points")
    found = 0
    with torch.cuda.stream(stream):
        bench.warm_up_clocks(torch, 3.0)
        for combo, shape in work:
            tried = {}
            for ck, _ in tune.tuned_classes(args, combo):
                point = tune.held_point(classes.get(ck, ()), shape)
                if point is not None:
                    tried[ck] = (point, contenders(point, shipped.get(ck, set()), args.contenders))
            ids = sorted({iid for _, ids in tried.values() for iid in ids})
            walks = {iid: walk_variants(iid, shape.m, shape.n) for iid in ids}
            res = bench.bench_shape(
                torch, hg, shape, combo, [instances[i] for i in ids], tune.bench_args(args), stream, env,
                keep=frozenset(ids), walks=walks,
            )  # fmt: skip
            labels = []
            for ck, series in tune.tuned_classes(args, combo):
                if ck not in tried:
                    continue
                point, ids = tried[ck]
                rows = [r for r in res["runners"] if r["series"] == series]
                new = walk_point(point, rows, ids, args.margin)
                classes[ck][classes[ck].index(point)] = new
                gained = [t for t in new["times"] if t[1] is not None and t[0] in ids]
                found += len(gained)
                best = new["times"][0]
                labels.append(f"{ck}: {len(gained)} walk(s), fastest {tune.short_id(best[0])} {best[1:3]}")
            write_document(args.out, doc)  # atomic: a stopped run keeps every point it worked
            progress.step(f"{combo} {shape}: " + "; ".join(labels))
            torch.cuda.empty_cache()
    print(f"tune_walks: wrote {args.out} ({found} walks beat their default by > {args.margin:.1%})")
    return 0


def parse_args(argv: list[str]):
    p = argparse.ArgumentParser(prog="python -m build_tools.tune_walks", description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=Path("runtime/tuning.json"), help="the table to work on")
    tune.add_grid_arguments(p, m_min=256)
    p.add_argument("--contenders", type=int, default=3, help="instances per class whose walks are tried")
    p.add_argument(
        "--margin", type=float, default=DEFAULT_MARGIN, help="a walk kept must beat the default by this"
    )
    p.add_argument(
        "--top", type=int, default=4, help="finalists per class re-timed (the defaults always are)"
    )
    tune.add_timing_arguments(p)
    p.add_argument("--limit", type=int, default=0, help="work at most this many points (a smoke run)")
    p.add_argument("--retime", action="store_true", help="work points whose walks were tuned already")
    args = p.parse_args(argv)
    args.argv, args.pdl = argv, False  # the plain rows: PDL rows are decode sizes, one wave or less
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        import torch  # noqa: F401
    except ImportError:
        print("tune_walks: needs torch with CUDA (allocation, timing)", file=sys.stderr)
        return 2
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
