"""`python -m build_tools.tune evaluate`: judge dispatch on shapes the tuning table does not contain.

A maintainer command, run on a GPU with the wheel installed and torch available (docs/DISPATCH.md); its
options are `build_tools/tune.py`'s (`parse_args`), whose `main` runs it.

`evaluate` draws shapes off the grid (`held_out_shapes`: seeded; M log-uniform, N and K log-uniform
multiples of 128, no shape on a grid column), asks `hgemm_sm90.select` for each tuned class, and times the
selected instance against every shipped instance of the class (screened, the selected one always kept for
the full rounds) and cuBLAS: dispatched / fastest shipped and dispatched / cuBLAS, per class and geomean.
Then the host cost of one `gemm()` call against `torch.matmul` and of a cached `select()` (`host_costs`).
`--json` keeps every verdict with every instance's time at the shape (`Verdict`): the held-out draws that
`python -m build_tools.dispatch_loo --held-out` judges later changes to dispatch on (docs/evals/).
"""

from __future__ import annotations

import itertools
import json
import random
import statistics
import time
from dataclasses import dataclass

from build_tools import bench, tune


def held_out_shapes(seed: int, count: int) -> list[bench.Shape]:
    """``count`` shapes off the grid: half with M in [1, 256), half in [256, 16384] (log-uniform), N and K
    log-uniform in [1024, 16384] rounded to multiples of 128, FLOPs capped like the grid's."""
    rng = random.Random(seed)
    cols = set(tune.GRID_NK)
    shapes: list[bench.Shape] = []
    while len(shapes) < count:
        lo, hi = (0, 8) if len(shapes) < count // 2 else (8, 14)
        m = max(1, round(2 ** rng.uniform(lo, hi)))
        n, k = (128 * max(8, round(2 ** rng.uniform(10, 14) / 128)) for _ in range(2))
        s = bench.Shape(m, n, k)
        if (n, k) in cols or s.flops > tune.MAX_TFLOP * 1e12 or s in shapes:
            continue
        shapes.append(s)
    return shapes


@dataclass
class Verdict:
    """One class at one shape: dispatch through `gemm()` against the fastest shipped instance and cuBLAS."""

    combo: str
    cls: str
    shape: str
    selected: str  # what select() names for the problem
    source: str
    gemm_us: float  # hgemm_sm90.gemm(a, b.T, out=d): dispatch picking, as a caller gets it
    sel_us: float | None  # the selected instance through launch(), when it reached the full rounds
    fastest: str
    fastest_us: float
    cublas_us: float | None
    bytes: int  # A + B + D
    # Every instance of the class timed at the shape, µs (`table_point`'s times: the finalists' medians, the
    # others' screening times on that scale), so a later change to dispatch can be judged on this draw
    # offline: `python -m build_tools.dispatch_loo --held-out FILE` (before session 20: not recorded).
    times: dict[str, float] | None = None
    # The walk select() chose ([raster_along_m, group_size]: build_tools/tune_walks.py found it), or None
    # for the launch's default walk. With a walk, sel_us / gemm_us is its gain (recorded since session 42).
    walk: list | None = None

    @property
    def m(self) -> int:
        return int(self.shape.split("x")[0])

    @property
    def vs_fastest(self) -> float:
        return self.fastest_us / self.gemm_us

    @property
    def vs_cublas(self) -> float | None:
        return self.cublas_us / self.gemm_us if self.cublas_us else None

    @property
    def tbps(self) -> float:
        """Effective bandwidth of gemm(): A, B and D bytes over its time, TB/s."""
        return self.bytes / (self.gemm_us * 1e-6) / 1e12


def host_costs(torch, hg, calls: int = 2000, runs: int = 5) -> dict:
    """µs per call of gemm() and torch.matmul (same small bf16 problem, out allocated by each) and of a
    cached select(), interleaved run by run, median of runs; a synchronize between chunks (untimed) keeps the
    launch queue from filling. Two more rows take the allocating call apart (since session 45): the
    allocation alone (`a.new_empty`, what gemm() makes), and gemm() into two outputs in turn, as torch's
    caching allocator hands an allocating caller its outputs: every call's pointers differ from the last
    call's, which since session 46 a launch entry still finds among those it accepted (runtime/plan.py
    `accept`), so this row should cost what out=d does."""
    a = torch.randn(128, 64, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(128, 64, device="cuda", dtype=torch.bfloat16).T
    d = torch.empty(128, 128, device="cuda", dtype=torch.bfloat16)
    outs = itertools.cycle([d, torch.empty_like(d)])
    fns = {
        "gemm(a, b)": lambda: hg.gemm(a, b),
        "torch.matmul(a, b)": lambda: torch.matmul(a, b),
        "gemm(a, b, out=d)": lambda: hg.gemm(a, b, out=d),
        "torch.matmul(a, b, out=d)": lambda: torch.matmul(a, b, out=d),
        "select(...) cached": lambda: hg.select(128, 128, 64, a_dtype="bf16"),
        "a.new_empty(128, 128)": lambda: a.new_empty(128, 128),
        "gemm(a, b, out=d or e, in turn)": lambda: hg.gemm(a, b, out=next(outs)),
    }
    for f in fns.values():
        f()
    torch.cuda.synchronize()
    per: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(runs):
        for name, f in fns.items():
            spent = 0.0
            for _ in range(calls // 200):
                t0 = time.perf_counter()
                for _ in range(200):
                    f()
                spent += time.perf_counter() - t0
                torch.cuda.synchronize()
            per[name].append(spent / calls * 1e6)
    return {name: statistics.median(v) for name, v in per.items()}


def evaluate(args) -> int:
    import torch

    hg, env, stream = tune.setup(torch)
    instances = hg.instances()
    if args.suite:
        shapes, suite_combos = bench.SUITES[args.suite]
        combos = [c for c in suite_combos if c in tune.TUNED and c.a in args.dtype]
    else:
        shapes = held_out_shapes(args.seed, args.count)
        combos = [c for c in tune.TUNED if c.a in args.dtype]
    verdicts: list[Verdict] = []
    progress = tune.Progress(len(shapes) * len(combos), "shapes")
    with torch.cuda.stream(stream):
        bench.warm_up_clocks(torch, 3.0)
        for combo in combos:
            for shape in shapes:
                keys = dict(tune.TUNED[combo])
                cands = [i for i in instances if tune.class_key(i) in keys]
                chosen = {}
                for ck, _ in tune.TUNED[combo]:
                    probe = next(i for i in cands if tune.class_key(i) == ck)
                    chosen[ck] = hg.select(
                        shape.m, shape.n, shape.k, a_dtype=probe.a_dtype, b_dtype=probe.b_dtype,
                        d_dtype=probe.d_dtype, fp8_fast_accum=probe.fp8_fast_accum, pdl=args.pdl,
                    )  # fmt: skip
                keep = {c.instance_id for c in chosen.values()}
                res = bench.bench_shape(
                    torch, hg, shape, combo, cands, tune.bench_args(args), stream, env, keep, dispatch=True
                )
                nbytes = bench.set_bytes(shape, combo)
                for ck, series in tune.TUNED[combo]:
                    timed = [r for r in res["runners"] if r["series"] == series and "median_ms" in r]
                    ours = {r["name"]: r["median_ms"] * 1e3 for r in timed if r["kind"] == "hgemm"}
                    via = next(r["median_ms"] * 1e3 for r in timed if r["kind"] == "gemm")
                    cublas = next((r["median_ms"] * 1e3 for r in timed if r["kind"] == "cublas"), None)
                    sel = chosen[ck]
                    fastest = min(ours, key=ours.get)
                    point = tune.table_point(shape, [r for r in res["runners"] if r["series"] == series])
                    walk = [sel.raster_along_m, sel.group_size] if sel.raster_along_m is not None else None
                    verdicts.append(
                        Verdict(str(combo), ck, str(shape), sel.instance_id, sel.source, via,
                                ours.get(sel.instance_id), fastest, ours[fastest], cublas, nbytes,
                                {t[0]: t[3] for t in point["times"]}, walk)
                    )  # fmt: skip
                v = verdicts[-1]
                progress.step(
                    f"{combo} {shape}: {v.vs_fastest:.3f} of fastest, {v.vs_cublas or 0:.3f}x cuBLAS"
                )
                torch.cuda.empty_cache()
    try:
        host = {} if args.suite else host_costs(torch, hg)
    except Exception as e:  # noqa: BLE001 - the verdicts above still stand; say why the host figures are missing
        print(f"tune: host costs not measured ({type(e).__name__}: {e})")
        host = {}
    text = render(verdicts, host, env, args)
    print(text)
    if args.markdown:
        args.markdown.write_text(text, encoding="utf-8")
    if args.json:
        doc = {"env": env, "pdl": bool(args.pdl), "verdicts": [v.__dict__ for v in verdicts], "host_us": host}
        args.json.write_text(json.dumps(doc, indent=1, default=str) + "\n", encoding="utf-8")
    if args.plot:
        from build_tools import perf_plot

        perf_plot.plot(plot_doc(verdicts, env), args.plot)
    return 0


def plot_doc(verdicts: list[Verdict], env: dict) -> dict:
    """gemm() / cuBLAS per shape and class, in build_tools/perf_plot.py's input form."""
    results: dict[str, dict] = {}
    for v in verdicts:
        res = results.setdefault(v.shape, {"shape": v.shape, "timing": "graph", "series": []})
        res["series"].append({"label": f"gemm() {v.cls}", "ratio": v.vs_cublas})
    return {"env": env, "results": list(results.values())}


# Weights this large stream from HBM at full rate in the decode goal (issue: >= 85% of 4.8 TB/s at M <= 16).
BIG_WEIGHT_BYTES = 48 * 2**20
# The M from which issue 9 holds gemm() to cuBLAS's speed (docs/PERF.md): the summary's last column, and
# build_tools/dispatch_loo.py's cuBLAS line.
CUBLAS_GOAL_M = 256
HBM_TBPS = 4.8


def render(verdicts: list[Verdict], host: dict, env: dict, args) -> str:
    what = (
        f"Suite `{args.suite}` (build_tools/bench.py)"
        if args.suite
        else f"Held-out shapes: seed {args.seed}, {args.count} shapes "
        "(build_tools/tune_evaluate.py `held_out_shapes`)"
    )
    lines = [
        f"{what}; {env['gpu']}, torch {env['torch']}, {env['date']}. gemm(): `hgemm_sm90.gemm(a, b.T, "
        f"out=d{', pdl=True, b_ready=True' if args.pdl else ''})`, dispatch picking; TB/s: (A + B + D "
        "bytes) / time.",
        "",
        "| class | shape | selected (source) | gemm() µs | TFLOP/s | TB/s | gemm() / fastest "
        "| gemm() / cuBLAS | fastest shipped |",
        "|---|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for v in verdicts:
        vs_c = f"{v.vs_cublas:.3f}" if v.vs_cublas else "n/a"
        m, n, k = (int(x) for x in v.shape.split("x")[:3])
        lines.append(
            f"| {v.cls} | {v.shape} | {tune.short_id(v.selected)}{_walk_text(v.walk)} ({v.source}) | "
            f"{v.gemm_us:.2f} | "
            f"{2 * m * n * k / (v.gemm_us * 1e-6) / 1e12:.1f} | {v.tbps:.2f} | {v.vs_fastest:.3f} | {vs_c} | "
            f"{tune.short_id(v.fastest)} |"
        )
    lines += [
        "",
        "| class | shapes | gemm()/fastest geomean | min | gemm()/cuBLAS geomean | min | under 0.95 "
        f"| (M >= {CUBLAS_GOAL_M}) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for ck in dict.fromkeys(v.cls for v in verdicts):
        vs = [v for v in verdicts if v.cls == ck]
        big = [v for v in vs if v.m >= CUBLAS_GOAL_M]
        ratios = [v.vs_cublas for v in vs if v.vs_cublas]
        lines.append(
            f"| {ck} | {len(vs)} | {tune.geomean(v.vs_fastest for v in vs):.3f} | "
            f"{min(v.vs_fastest for v in vs):.3f} | {tune.geomean(ratios):.3f} | "
            f"{min(ratios, default=float('nan')):.3f} | {sum(r < 0.95 for r in ratios)} | "
            f"{tune.geomean(v.vs_cublas for v in big):.3f} |"
        )
    streams = [v for v in verdicts if v.m <= 16 and v.bytes >= BIG_WEIGHT_BYTES]
    if streams:
        lines += ["", f"M <= 16 with >= 48 MB of operands: effective bandwidth as a share of {HBM_TBPS} TB/s"]
        for ck in dict.fromkeys(v.cls for v in streams):
            share = [v.tbps / HBM_TBPS for v in streams if v.cls == ck]
            lines.append(
                f"- {ck}: min {min(share):.0%}, geomean {tune.geomean(share):.0%} over {len(share)} shapes"
            )
    if host:
        lines += ["", "Host µs per call (median of 5 runs x 2000 calls): " + ", ".join(
            f"{name} {us:.2f}" for name, us in host.items())]  # fmt: skip
    return "\n".join(lines) + "\n"


def _walk_text(walk: list | None) -> str:
    return "" if walk is None else f" walk {int(walk[0])},{walk[1]}"
