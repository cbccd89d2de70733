"""`python -m build_tools.tune`: measure the tuning table that dispatch ships (runtime/tuning.json), and
`python -m build_tools.tune evaluate`: judge dispatch on shapes the table does not contain.

Maintainer commands, run on a GPU with the wheel installed and torch available (docs/DISPATCH.md).

`tune` times, at every point of the grid below and for every tuned problem class, all shipped instances of
the class together with cuBLAS, by the method of build_tools/bench.py (`bench_shape`): clocks warmed up
first (the H200 throttles to its 700 W cap within seconds), every candidate screened in interleaved short
rounds, then the `--top` fastest per class re-timed with cuBLAS in interleaved full rounds (CUDA events;
graph replays for small problems; inputs rotated to defeat L2 for small problems), medians kept. Each
point's finalists and their times are written to the table as soon as the point is done, so an
interrupted run resumes where it stopped (the default when --out exists: a run times only the points the
table lacks, or holds without a time for an instance the wheel ships, `work_list`; `--retime` times them
all again). At a point that only lacks instances added since, just those and the point's finalists are
timed, and the point's other times are carried over on the new run's scale (`fill_candidates`,
`merge_point`): adding a few instances costs a fraction of a full run. Each point records which cubins
its times were measured with (runtime/tuning.py `kernels_digest` of its instances' cubin sha256s, since
session 19) and under which launch rules (runtime/launcher.py `LAUNCH_RULES`, since session 44); after a
kernel change `--stale` also times again, in full, the points measured with other cubins or rules (or that
do not say), and resumes the same way. Where the change touched known instances only (`--changed GLOB`,
e.g. `'*_c1x1_*'` after 1x1 clusters began to launch as plain grids), a stale point times just those and
its finalists among the others, and carries the others' times over (`without_changed`). A progress line
per point says how far it is and how long is left.

The grid (`GRID_M` x `GRID_NK`, minus points above `MAX_TFLOP`): M log-spaced from 1 to 16384; (N, K) the
projection GEMMs of Llama-3-8B-like (hidden 4096, FFN 14336: QKV 6144 x 4096, O 4096 x 4096, gate+up
28672 x 4096, down 4096 x 14336), 70B-like (hidden 8192: QKV 10240 x 8192, O 8192 x 8192, down
8192 x 28672), 1B-class (hidden 2048, FFN 8192: gate+up 16384 x 2048, down 2048 x 8192) and DeepSeek-V3-like
attention (2112 x 7168, 24576 x 1536) layers, grouped-query attention's key/value projections (1024 x 4096,
1024 x 8192), a hidden-1536 model's down-projection (1536 x 8960), mixture-of-experts expert layers
(4096 x 1536, 7168 x 2048, 4096 x 7168), a Llama-2-7B-like gate/up (11008 x 4096), and
squares' columns (1024, 2048, 4096, 16384; 8192 is an LLM column). Points above MAX_TFLOP are compute-bound
at every tile, where the choice no longer changes with M; lookups beyond a column's largest timed M use it.

`evaluate` (build_tools/tune_evaluate.py) judges dispatch on shapes off the grid: dispatched / fastest
shipped and dispatched / cuBLAS, and gemm()'s host cost.
"""

from __future__ import annotations

import argparse
import fnmatch
import gzip
import importlib
import json
import math
import shlex
import statistics
import sys
import time
from pathlib import Path

from build_tools import bench
from runtime.tuning import (
    FORMAT,
    PDL_SUFFIX,
    VERSION,
    kernels_digest,
    read_document,
    timed_with,
    write_document,
)

GRID_M = (
    1,
    8,
    16,
    32,
    64,
    96,
    128,
    192,
    256,
    384,
    512,
    768,
    1024,
    1536,
    2048,
    3072,
    4096,
    6144,
    8192,
    12288,
    16384,
)
GRID_NK = ((1024, 1024), (2048, 2048), (4096, 4096), (16384, 16384))  # squares' columns
GRID_NK += ((6144, 4096), (4096, 14336), (28672, 4096))  # hidden 4096, FFN 14336 (Llama-3-8B-like)
GRID_NK += ((10240, 8192), (8192, 8192), (8192, 28672))  # hidden 8192, FFN 28672 (70B-like)
# 70B-like gate/up (added 2026-12-01: without it, M <= 64 at N = 28672, K = 8192 was read off the 10240 x
# 8192 column, where a 128 x 256 tile's single wave hid that it streams 2.8x the weights at 28672).
GRID_NK += ((28672, 8192),)
GRID_NK += ((16384, 2048), (2048, 8192))  # hidden 2048, FFN 8192 (1B-class): gate+up fused, down
# Multi-head latent attention (DeepSeek-V3-like, hidden 7168): the fused q/kv down-projection 2112 x 7168
# and q's up-projection 24576 x 1536 (added 2026-12-01: read off the 16384 x 2048 column, M = 8-64 at
# 24576 x 1536 picked ping-pong tiles that ran 0.83-0.94x cuBLAS where swap-AB tiles ran 1.0-1.2x).
GRID_NK += ((2112, 7168), (24576, 1536))
# Narrow weights with a long K (added 2026-12-04, session 42): grouped-query attention's key and value
# projections (8 KV heads of 128: N = 1024) of the hidden-4096 and hidden-8192 models above, and the
# down-projection of a hidden-1536 model (Qwen2.5-1.5B-like, FFN 8960). Until then N of 1024-2047 with K
# of 4096-16383 was read off the 2048-2112 columns, where the held-out picks ran furthest from the
# fastest instance (0.980-0.987 over 14 draws, docs/PERF.md session 42).
GRID_NK += ((1024, 4096), (1024, 8192), (1536, 8960))
# Low-K and mid-width layers (added 2026-12-04, session 47): the expert down-projections of a hidden-4096
# mixture-of-experts model with 1536-wide experts (Qwen3-235B-like, 4096 x 1536) and of DeepSeek-V3
# (hidden 7168, 2048-wide experts: 7168 x 2048), DeepSeek-V3's fused expert gate+up (4096 x 7168), and
# a hidden-4096 / FFN-11008 model's gate or up projection (Llama-2-7B-like, 11008 x 4096). They fill
# the grid's widest gaps under the held-out draws' distribution (N and K log-uniform in 1024-16384:
# the mean log distance to the nearest column 0.41 -> 0.32; build_tools/tune_evaluate.py
# `held_out_shapes`). On the four draws timed under today's launch rules, the 16-bit picks at M >= 256
# ran at 0.997 / 0.986 / 0.983 of the fastest instance where the nearest column lay under 0.25 /
# 0.25-0.5 / beyond 0.5 away in log space (docs/DISPATCH.md, session 47).
GRID_NK += ((4096, 1536), (7168, 2048), (11008, 4096), (4096, 7168))
MAX_TFLOP = 2.5
# `tune --pdl` times the decode rows again in PDL chains (pdl=True, b_ready=True), where PDL changes which
# tiles are fastest (docs/PERF.md, session 10); they are written under the class key + "@pdl"
# (runtime/tuning.py `PDL_SUFFIX`), read by select(pdl=True) up to this M.
PDL_M_MAX = 128

# The classes tuned: the ones with many instances to choose from (docs/INSTANCES.md). Every other class has
# at most four and is left to the cost model (runtime/model.py). combo -> [(class key, bench series)].
TUNED = {
    bench.Combo("bf16", "bf16", "bf16"): [("bf16_bf16_bf16_kkn", "")],
    bench.Combo("fp16", "fp16", "fp16"): [("fp16_fp16_fp16_kkn", "")],
    bench.Combo("e4m3", "e4m3", "bf16"): [
        ("e4m3_e4m3_bf16_kkn", "promoted accum"),
        ("e4m3_e4m3_bf16_kkn_fastacc", "fast accum"),
    ],
}


def grid() -> list[bench.Shape]:
    return [bench.Shape(m, n, k) for n, k in GRID_NK for m in GRID_M if 2 * m * n * k <= MAX_TFLOP * 1e12]


def class_key(inst) -> str:
    """The problem class key of an installed instance (the installed runtime's own `ProblemClass`, so the
    table's keys are exactly what dispatch looks up)."""
    from hgemm_sm90.dispatch import ProblemClass

    return ProblemClass.of(inst).key


def bench_args(args) -> bench.BenchArgs:
    """The bench method's knobs for one grid point (fewer rounds than the suite: the table ranks)."""
    return bench.BenchArgs(
        suite=None, shapes=None, dtype=None, b_dtype=None, out_dtype=None, kernels=None,
        reps=args.reps, iters=args.iters, graph_iters=args.graph_iters, timing="auto", top=args.top,
        screen_reps=args.screen_reps, screen_iters=3, lead_ms=1.0, warmup_s=0.0, host_calls=0, json=None,
        markdown=None, plot=None, pdl=args.pdl,
    )  # fmt: skip


class Progress:
    """A progress report per unit of work: done/total, elapsed, and the time left at the average pace.

    On a terminal, a tqdm bar. Otherwise (a log file, a device run's captured output) a plain line at most
    every `LOG_EVERY_S` seconds and one at the end: a bar redrawn with carriage returns would fill a
    captured log's tail and push out what else the run printed (it did on the H200, session 24)."""

    LOG_EVERY_S = 30.0

    def __init__(self, total: int, what: str, stream=None):
        self.stream = stream if stream is not None else sys.stdout
        self.total, self.what, self.done = total, what, 0
        self.t0 = self.last_line = time.perf_counter()
        self.bar = None
        if self.stream.isatty():
            try:
                from tqdm import tqdm

                self.bar = tqdm(total=total, desc=what, unit="point", file=self.stream)
            except ImportError:  # the GPU machine may lack tqdm: plain lines say the same
                pass

    def step(self, label: str) -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.set_postfix_str(label)
            self.bar.update(1)
            return
        now = time.perf_counter()
        if now - self.last_line < self.LOG_EVERY_S and self.done < self.total:
            return
        self.last_line = now
        spent = now - self.t0
        left = spent / self.done * (self.total - self.done)
        print(
            f"[{self.done}/{self.total} {self.what}] {spent:.0f} s, ~{left:.0f} s left: {label}",
            file=self.stream,
            flush=True,
        )


def setup(torch):
    """(hgemm_sm90, env dict, stream) after the checks every mode needs."""
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        raise SystemExit("tune: needs an sm_90 GPU (H100/H200/GH200) visible to torch")
    import hgemm_sm90 as hg

    env = bench.environment(torch, hg)
    env["smi_id"] = env["gpu_uuid"] if bench.nvidia_smi(env["gpu_uuid"]) else None
    env["lead_cycles"] = int(1e-3 * 1980e6) if hasattr(torch.cuda, "_sleep") else 0
    return hg, env, torch.cuda.Stream()


def gpu_key(torch) -> str:
    props = torch.cuda.get_device_properties(0)
    return f"{props.name}/{props.multi_processor_count}"


def table_point(shape: bench.Shape, runners: list[dict]) -> dict:
    """One grid point of one class from bench_shape's runner rows, fastest first: the finalists' medians
    (their count in "finalists") and every screened-out candidate's best screening time scaled by the
    finalists' median ratio of full-round median to best screening time (screening takes the best of a
    few short batches, which reads a few percent fast). So the table knows every instance at every point,
    the finalists precisely."""
    final = sorted(
        (r["median_ms"] * 1e3, r["name"]) for r in runners if r["kind"] == "hgemm" and "median_ms" in r
    )
    ratios = [
        r["median_ms"] / min(r["screen_ms"])
        for r in runners
        if r["kind"] == "hgemm" and "median_ms" in r and r["screen_ms"]
    ]
    scale = statistics.median(ratios) if ratios else 1.0
    screened = sorted(
        (min(r["screen_ms"]) * scale * 1e3, r["name"])
        for r in runners
        if r["kind"] == "hgemm" and "median_ms" not in r and r["screen_ms"] and not r["error"]
    )
    cublas = next((r["median_ms"] * 1e3 for r in runners if r["kind"] == "cublas" and "median_ms" in r), None)
    return {
        "m": shape.m,
        "n": shape.n,
        "k": shape.k,
        "cublas_us": cublas and round(cublas, 3),
        "finalists": len(final),
        "times": [[*bench.parse_runner_name(name), round(us, 3)] for us, name in sorted(final + screened)],
    }


def row_key(args, class_key: str) -> str:
    """The table key that this run's rows of a class go under: the class key, with --pdl its PDL rows'."""
    return class_key + PDL_SUFFIX if args.pdl else class_key


def tuned_classes(args, combo: bench.Combo) -> list[tuple[str, str]]:
    """The (class key, bench series) pairs of ``combo`` that this run tunes: all of them, or those named
    by --class (e.g. only fp8 promoted accumulation after a change to its mainloop; cuBLAS is still timed
    for every series of the combo, the candidates are the named classes' instances only)."""
    return [(ck, series) for ck, series in TUNED[combo] if not args.classes or ck in args.classes]


def untimed(point: dict, shipped: set[str]) -> set[str]:
    """The instances of ``shipped`` (ids of one class) that a table point of that class holds no time for:
    instances added since the point was timed. The lookup estimates such an instance from the points that
    did time it (runtime/tuning.py `estimate`)."""
    return shipped - {t[0] for t in point["times"]}


def cubin_hashes(hg) -> dict[str, str]:
    """Instance id -> sha256 of its cubin, from the manifest the installed runtime launches from (read
    through the manifest's records, which every installed runtime has)."""
    manifest = importlib.import_module(hg.__name__ + ".state").runtime().manifest
    return {iid: rec.sha256 for iid, rec in manifest.instances.items()}


def stale(point: dict, hashes: dict[str, str]) -> bool:
    """A point whose times were not measured with the installed cubins, or that cannot say so (points
    timed before session 19, carried over from stale times by `merge_point`, or naming an instance the
    wheel no longer ships): runtime/tuning.py `timed_with`."""
    return timed_with(point.get("kernels"), (t[0] for t in point["times"]), hashes) is not True


def without_changed(point: dict, changed: set[str]) -> dict:
    """A stale point with every entry of the ``changed`` instances dropped (their walk overrides too), for
    `--changed`: `fill_candidates` then times those instances again with the point's finalists among the
    unchanged ones, whose old and new times put the carried-over entries on the new run's scale
    (`merge_point`); a changed instance must not be such an anchor, its speed is what changed. The walks
    dropped come back with build_tools/tune_walks.py."""
    return {**point, "times": [t for t in point["times"] if t[0] not in changed]}


def changed_instances(patterns: list[str], shipped: dict[str, set[str]]) -> dict[str, set[str]]:
    """Class key -> its shipped instances matching any of ``patterns`` (fnmatch globs of instance ids);
    a pattern that matches no shipped instance is a mistake (a typo would re-time nothing) and raises."""
    out = {
        ck: {i for i in ids if any(fnmatch.fnmatchcase(i, pat) for pat in patterns)}
        for ck, ids in shipped.items()
    }
    for pat in patterns:
        if not any(fnmatch.fnmatchcase(i, pat) for ids in shipped.values() for i in ids):
            raise SystemExit(
                f"tune: --changed {pat!r} matches no shipped instance; give a glob of instance ids"
            )
    return out


def fill_candidates(point: dict | None, shipped: set[str], top: int) -> set[str]:
    """The instances of one class (``shipped``: its ids) to time at a grid point: all of them for a point
    the table lacks (or --retime times afresh: None); for a point that only lacks instances added since it
    was timed (`untimed`), those and the point's finalists (the fastest ``point["finalists"]`` entries,
    else ``top``), which `merge_point` needs to carry the point's other times over. An up-to-date point:
    nothing."""
    if point is None:
        return set(shipped)
    missing = untimed(point, shipped)
    if not missing:
        return set()
    finalists = point.get("finalists") or top
    return (missing | {t[0] for t in point["times"][:finalists]}) & shipped


def held_point(points, shape: bench.Shape) -> dict | None:
    """The point of ``points`` (one class's rows) at ``shape``, if the table holds it."""
    return next((p for p in points if (p["m"], p["n"], p["k"]) == (shape.m, shape.n, shape.k)), None)


def merge_point(old: dict, new: dict) -> dict:
    """A point re-timed for some instances only (`fill_candidates`): the new run's times, and every other
    entry of ``old`` scaled by the median ratio new / old over the instances timed in both (the finalists
    carried over), so that times measured in two runs (clocks, power) rank on one scale. Entries are
    matched by instance and walk (an old entry with a walk override, build_tools/tune_walks.py, is carried
    over like any other). The finalist count is the new run's."""
    new_us = {tuple(t[:3]): t[3] for t in new["times"]}
    ratios = [new_us[tuple(t[:3])] / t[3] for t in old["times"] if tuple(t[:3]) in new_us and t[3] > 0]
    scale = statistics.median(ratios) if ratios else 1.0
    carried = [[*t[:3], round(t[3] * scale, 3)] for t in old["times"] if tuple(t[:3]) not in new_us]
    return {**new, "times": sorted(new["times"] + carried, key=lambda t: t[3])}


def work_list(
    args, classes: dict, shipped: dict | None = None, hashes: dict | None = None
) -> list[tuple[bench.Combo, bench.Shape]]:
    """The (combo, grid shape) pairs to time, in order: the chosen dtypes and classes, the M band (with
    --pdl at most PDL_M_MAX), and unless --retime only points that some chosen class lacks in ``classes``
    (the table's, by table key: `row_key`) or holds without a time for one of its instances in
    ``shipped`` (class key -> instance ids: what the installed wheel ships), so that after instances are
    added a plain run times exactly the points that lack them, and an interrupted run resumes. With
    ``hashes`` (`cubin_hashes`: --stale) also the points timed with other cubins (`stale`): after a kernel
    change, a run re-times exactly those, and resumes where a time limit stopped it."""
    done = set()
    if not args.retime:
        done = {
            (ck, p["m"], p["n"], p["k"])
            for ck, pts in classes.items()
            for p in pts
            if not (shipped and untimed(p, shipped.get(ck.removesuffix(PDL_SUFFIX), set())))
            and not (hashes is not None and stale(p, hashes))
        }
    m_max = min(args.m_max or PDL_M_MAX, PDL_M_MAX) if args.pdl else args.m_max
    work = [
        (combo, shape)
        for combo in TUNED
        if combo.a in args.dtype and tuned_classes(args, combo)
        for shape in grid()
        if (not m_max or shape.m <= m_max)
        and shape.m >= args.m_min
        and in_columns(args, shape)
        and not all(
            (row_key(args, ck), shape.m, shape.n, shape.k) in done for ck, _ in tuned_classes(args, combo)
        )
    ]
    return work[: args.limit] if args.limit else work


def in_columns(args, shape: bench.Shape) -> bool:
    """Whether ``shape`` lies on one of the (N, K) columns named by --column (all of them without it):
    adding a column to `GRID_NK` then times that column alone. Without it a plain run would also time
    every other point lacking an instance, such as the rows below M = 32, which predate instances added
    for larger M (tests/unit/test_tune_work.py; session 42's run re-timed 117 of them that way)."""
    return not args.columns or (shape.n, shape.k) in args.columns


def parse_column(text: str) -> tuple[int, int]:
    """'NxK' -> (N, K), a column of `GRID_NK`."""
    try:
        n, k = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"column {text!r}: expected NxK such as 1024x4096") from None
    if (n, k) not in GRID_NK:
        cols = ", ".join(f"{n}x{k}" for n, k in GRID_NK)
        raise argparse.ArgumentTypeError(f"column {text!r} is not on the grid (GRID_NK: {cols})")
    return n, k


# The records of a GPU's ``measured`` entry that other tools write (build_tools/grouped_table.py's runs,
# build_tools/tune_walks.py's), which a tuning run keeps.
KEPT_RECORDS = ("grouped", "walks")


# What ``earlier`` keeps of each earlier tuning run: enough to say when and how its points were timed.
EARLIER_FIELDS = ("date", "command", "kept")


def measured_entry(previous: dict, run: dict) -> dict:
    """A GPU's ``measured`` record after a tuning run: this run's, with the earlier runs' dates and commands
    in ``earlier`` (oldest first: a run that times one column or class leaves the others' points as an
    earlier run timed them), keeping the records of `KEPT_RECORDS`, which the tuner neither times nor
    replaces."""
    earlier = list(previous.get("earlier", ()))
    if "command" in previous:
        earlier.append({key: previous[key] for key in EARLIER_FIELDS if key in previous})
    kept = {key: previous[key] for key in KEPT_RECORDS if key in previous}
    return {**run, **({"earlier": earlier} if earlier else {}), **kept}


def tune(args) -> int:
    import torch

    hg, env, stream = setup(torch)
    key = gpu_key(torch)
    doc = read_document(args.out) if args.out.exists() else {}
    if doc.get("format") != FORMAT:
        doc = {"format": FORMAT, "version": VERSION, "gpus": {}}
    doc["grid"] = {"m": list(GRID_M), "nk": [list(c) for c in GRID_NK], "max_tflop": MAX_TFLOP}
    entry = doc["gpus"].setdefault(key, {"measured": {}, "classes": {}})
    entry["measured"] = measured_entry(
        entry.get("measured", {}),
        {
            "date": env["date"], "command": "python -m build_tools.tune " + shlex.join(args.argv),
            "torch": env["torch"], "cuda_bindings": env["cuda_bindings"], "hgemm_sm90": env["hgemm_sm90"],
            "driver": bench.nvidia_smi(env["smi_id"]).get("driver"),
        },
    )  # fmt: skip
    classes = entry["classes"]
    instances = hg.instances()
    shipped: dict[str, set[str]] = {}
    for inst in instances:
        shipped.setdefault(class_key(inst), set()).add(inst.id)
    hashes = cubin_hashes(hg)
    changed = changed_instances(args.changed, shipped) if args.changed else None
    work = work_list(args, classes, shipped, hashes if args.stale else None)
    held_count = 0 if args.retime else sum(len(points) for points in classes.values())
    print(f"tune: {key}, {len(work)} points to time ({held_count} class points already in {args.out})")
    progress = Progress(len(work), "grid points")
    with torch.cuda.stream(stream):
        bench.warm_up_clocks(torch, 3.0)
        for combo, shape in work:
            # Per class to time here: the point the table holds (None: time it afresh) and the instances.
            todo = {}
            for ck, _ in tuned_classes(args, combo):
                held = None if args.retime else held_point(classes.get(row_key(args, ck), ()), shape)
                renewed = False  # the run re-times whatever made the point stale
                if args.stale and held is not None and stale(held, hashes):
                    if changed is None:
                        held = None  # timed with other cubins or rules: all of it afresh
                    else:  # only the changed instances (and the finalists as anchors)
                        held, renewed = without_changed(held, changed.get(ck, set())), True
                ids = fill_candidates(held, shipped.get(ck, set()), args.top)
                if ids:  # none: this class is up to date here (another class of the combo is not)
                    todo[ck] = (held, ids, renewed)
            wanted = set().union(*(ids for _, ids, _ in todo.values()))
            cands = [i for i in instances if i.id in wanted]
            res = bench.bench_shape(torch, hg, shape, combo, cands, bench_args(args), stream, env)
            for ck, series in tuned_classes(args, combo):
                if ck not in todo:
                    continue
                point = table_point(shape, [r for r in res["runners"] if r["series"] == series])
                held, _, renewed = todo[ck]
                # Carried-over times stay stale, unless --changed says the change spared their instances.
                fresh = held is None or renewed or not stale(held, hashes)
                if held is not None:
                    point = merge_point(held, point)
                if fresh:  # ordered as runtime/tuning.py `Point.to_json` writes a point
                    times = point.pop("times")
                    point.update(kernels=kernels_digest((t[0] for t in times), hashes), times=times)
                pts = classes.setdefault(row_key(args, ck), [])
                pts[:] = [p for p in pts if (p["m"], p["n"], p["k"]) != (shape.m, shape.n, shape.k)] + [point]
                pts.sort(key=lambda p: (p["n"], p["k"], p["m"]))
            write_document(args.out, doc)  # atomic: a stopped run keeps every point it timed
            best = min(
                (r for r in res["runners"] if r["kind"] == "hgemm" and "median_ms" in r),
                key=lambda r: r["median_ms"],
            )
            progress.step(f"{combo} {shape}: {best['name']} {best.get('vs_cublas', 0):.2f}x cuBLAS")
            torch.cuda.empty_cache()
    print(f"tune: wrote {args.out}")
    return 0


# --- shared with build_tools/tune_evaluate.py and tune_walks.py -------------------------------------------


def read_json(path: Path) -> dict:
    """A result file of `evaluate --json` (or `bench --json`), plain or gzip-compressed (``*.gz``: how the
    repository keeps past draws, docs/evals/). Raises OSError or ValueError on an unreadable file."""
    raw = path.read_bytes()
    return json.loads(gzip.decompress(raw) if path.suffix == ".gz" else raw)


def geomean(xs) -> float:
    """Geometric mean of the non-empty, non-zero values of xs (NaN if none)."""
    xs = [x for x in xs if x]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def short_id(iid: str) -> str:
    """An instance id without its dtype prefix (``sm90_bf16_bf16_bf16_fp32acc_kkn_`` ...), for tables."""
    return iid.split("_", 6)[-1] if iid.startswith("sm90_") else iid


def add_grid_arguments(p: argparse.ArgumentParser, m_min: int) -> None:
    """Which grid points a run works (`work_list`; build_tools/tune_walks.py too): --dtype, --class,
    --m-min (default ``m_min``), --m-max and --column."""
    p.add_argument(
        "--dtype", nargs="+", choices=sorted({c.a for c in TUNED}), default=sorted({c.a for c in TUNED})
    )
    p.add_argument(
        "--class",
        dest="classes",
        nargs="+",
        choices=sorted(ck for pairs in TUNED.values() for ck, _ in pairs),
        default=None,
        help="only these problem classes (default: every tuned class of the chosen dtypes)",
    )
    p.add_argument("--m-min", type=int, default=m_min, help="only grid points with M >= this")
    p.add_argument("--m-max", type=int, default=0, help="only grid points with M <= this (0: all)")
    p.add_argument(
        "--column",
        dest="columns",
        type=parse_column,
        nargs="+",
        default=None,
        metavar="NxK",
        help="only these (N, K) columns of the grid (a column just added to GRID_NK)",
    )


def add_timing_arguments(p: argparse.ArgumentParser) -> None:
    """The bench method's rounds that `bench_args` reads (--top, which differs per tool, is not here)."""
    p.add_argument("--reps", type=int, default=5, help="interleaved full rounds (median kept)")
    p.add_argument("--iters", type=int, default=6, help="eager launches per timed batch")
    p.add_argument("--screen-reps", type=int, default=3, help="interleaved screening rounds (best kept)")
    p.add_argument("--graph-iters", type=int, default=50, help="launches per CUDA graph (small problems)")


def parse_args(argv: list[str]):
    p = argparse.ArgumentParser(prog="python -m build_tools.tune", description=__doc__.split("\n")[0])
    p.add_argument("mode", nargs="?", choices=("tune", "evaluate"), default="tune")
    p.add_argument("--out", type=Path, default=Path("runtime/tuning.json"), help="the table (tune mode)")
    add_grid_arguments(p, m_min=0)
    p.add_argument("--top", type=int, default=4, help="finalists per class re-timed with cuBLAS")
    add_timing_arguments(p)
    p.add_argument("--limit", type=int, default=0, help="tune: time at most this many points (a smoke run)")
    p.add_argument(
        "--retime", action="store_true", help="tune: time points again that the table already holds"
    )
    p.add_argument(
        "--stale",
        action="store_true",
        help="tune: also time again the points the table holds from other cubins or launch rules (after "
        "a kernel or launch change; resumable)",
    )
    p.add_argument(
        "--changed",
        nargs="+",
        metavar="GLOB",
        default=None,
        help="tune --stale: the change touched only these instances (fnmatch globs of ids, e.g. "
        "'*_c1x1_*'): a stale point times them and its finalists, and carries the others' times over",
    )
    p.add_argument(
        "--suite",
        choices=sorted(bench.SUITES),
        default=None,
        help="evaluate: a named suite's shapes and dtypes (build_tools/bench.py) instead of random ones",
    )
    p.add_argument("--seed", type=int, default=20261130, help="evaluate: shape draw seed")
    p.add_argument("--count", type=int, default=16, help="evaluate: shapes per dtype")
    p.add_argument("--markdown", type=Path, default=None, help="evaluate: write the table here")
    p.add_argument("--json", type=Path, default=None, help="evaluate: write every verdict here")
    p.add_argument("--plot", type=Path, default=None, help="evaluate: gemm() / cuBLAS per shape as a PNG")
    p.add_argument(
        "--pdl",
        action="store_true",
        help="launch everything with pdl=True, b_ready=True (a chain of GEMMs on weights no launch writes); "
        "tune: time the decode rows (M <= 128) for the class keys + '@pdl'; evaluate: gemm() and every "
        "instance",
    )
    args = p.parse_args(argv)
    if args.changed and not args.stale:
        p.error("--changed narrows --stale: give both (e.g. --stale --changed '*_c1x1_*')")
    args.argv = argv
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        import torch  # noqa: F401
    except ImportError:
        print("tune: needs torch with CUDA (allocation, timing, the cuBLAS baseline)", file=sys.stderr)
        return 2
    if args.mode == "tune":
        return tune(args)
    from build_tools import tune_evaluate

    return tune_evaluate.evaluate(args)


if __name__ == "__main__":
    sys.exit(main())
