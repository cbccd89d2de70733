"""`python -m build_tools.nvmmh_judge [--table PATH] [--board NAME] [--held-out FILE ...] [--cls KEY]`:
NVIDIA's nvMatmulHeuristics (pip `nvidia-matmul-heuristics`, a performance model of CUTLASS 3 kernels
with Hopper boards built in) as the picker among our instances, scored beside runtime/model.py's picks on
the shapes the H200 measured. No GPU. The question it answers: could that library replace or inform the
cost model that `select()` falls back to on a GPU the tuning table lacks (issue 9 names it as a candidate)?

Each case is a tuning-table grid point (every instance it timed at its default walk), or with
--held-out a measured shape of evaluate JSONs (build_tools/dispatch_loo.py `held_out_draws`). Four
scores per case, each (the fastest measured time) / (the pick's measured time), as
`dispatch_loo --model-only` scores them:
- `model`: runtime/model.py `best` over every instance timed (the fallback as shipped);
- `nvmmh`: the instance with the least nvMatmulHeuristics runtime estimate, among those it can estimate;
- `model on its set`: runtime/model.py over that same subset, so the two rankings are compared on the
  same candidates;
- `reachable`: the fastest instance of the subset, the most any picker restricted to it could score.

How an instance maps to the library's kernel configuration (`nvmmh_config`): the CTA tile and cluster as
they are; a swap-AB instance computes D^T, so it is estimated on the problem (N, M, K); a split-K
instance at each of `SPLITS` splits, its least estimate counting (the runtime picks the split itself);
stream-K has no configuration in the library's API, so stream-K instances are never its pick. Its
estimate depends on neither the warp tile, nor the instruction tile, nor the stage count (checked), so
those are set to fixed values. The precision strings are the library's: bf16 "TST", fp16 "HSH", e4m3 ->
bf16 "QQTST" (fast and promoted accumulation are one precision to it). A configuration it does not model
(it returns 0: 192-row tiles, tile N not a multiple of 16, most of our fp8 tiles) is not a candidate.

Measured on 2026-12-04 (docs/DISPATCH.md "nvMatmulHeuristics as the fallback"): on the shipped
table's H200 grid points the library picks at 0.905 / 0.789 / 0.768 of the fastest instance (bf16 / e4m3
promoted / fp16), the cost model at 0.955 / 0.958 / 0.955, and at 0.938 / 0.846 / 0.935 on the
library's own candidates: not adopted.
"""

from __future__ import annotations

import argparse
import ctypes
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from build_tools.dispatch_loo import HeldOutCase, _model_score, default_walk_times, geomean, held_out_draws
from runtime import model
from runtime.gpus import GpuId
from runtime.spec import GemmSpec, KSplit, Varlen
from runtime.tuning import is_grouped_key, read_document, shipped_path

# The library's precision string per (A dtype, D dtype): A = B, fp32 compute.
PRECISION = {("bf16", "bf16"): "TST", ("fp16", "fp16"): "HSH", ("e4m3", "bf16"): "QQTST"}
# Split counts tried for a split-K instance; its least estimate counts.
SPLITS = (2, 3, 4, 6, 8)
# Our layouts kkn: A (M, K) and B (N, K) both K-contiguous, D (M, N) row-major: D = A @ B^T, which is the
# library's NT in row-major terms.
NT_ROW_MAJOR = 1

Estimator = Callable[[str, tuple[int, int, int], tuple[int, int, int], tuple[int, int], int], float | None]


@dataclass(frozen=True)
class NvmmhConfig:
    """What the library is asked about one instance at one problem: the problem it computes (swap-AB:
    N x M), its CTA tile and cluster, and the split counts to try."""

    precision: str
    problem: tuple[int, int, int]
    cta: tuple[int, int, int]
    cluster: tuple[int, int]
    splits: tuple[int, ...]


def nvmmh_config(spec: GemmSpec, m: int, n: int, k: int) -> NvmmhConfig | None:
    """The library's view of instance ``spec`` at problem (m, n, k), or None where it has no counterpart
    (a dtype pair without a precision string, stream-K, a grouped instance)."""
    precision = PRECISION.get((spec.a_dtype.value, spec.d_dtype.value))
    if precision is None or spec.k_split == KSplit.stream or spec.varlen != Varlen.none:
        return None
    problem = (n, m, k) if spec.swap_ab else (m, n, k)
    splits = SPLITS if spec.k_split == KSplit.split else (1,)
    return NvmmhConfig(precision, problem, tuple(spec.tile), tuple(spec.cluster), splits)


def nvmmh_seconds(estimator: Estimator, spec: GemmSpec, m: int, n: int, k: int) -> float | None:
    """The library's least runtime estimate for the instance at the problem over its split counts, or
    None where it estimates none of them (a configuration it does not model)."""
    cfg = nvmmh_config(spec, m, n, k)
    if cfg is None:
        return None
    estimates = [estimator(cfg.precision, cfg.problem, cfg.cta, cfg.cluster, s) for s in cfg.splits]
    valid = [e for e in estimates if e]
    return min(valid) if valid else None


@dataclass(frozen=True)
class CaseScores:
    cls: str
    m: int
    n: int
    k: int
    model: float
    nvmmh: float | None  # None: the library estimated none of the case's instances
    model_on_set: float | None
    reachable: float | None


def score_case(case: HeldOutCase, estimator: Estimator) -> CaseScores:
    """The four scores of one case (module docstring); ties in either ranking go to the smaller id."""
    times = case.times
    fastest = min(times.values())
    specs = {i: GemmSpec.parse(i) for i in sorted(times)}
    sms = GpuId.from_key(case.gpu).sm_count
    ours = _model_score(case.m, case.n, case.k, case.batch, times, sms).score  # as dispatch_loo --model-only
    estimates = {i: nvmmh_seconds(estimator, s, case.m, case.n, case.k) for i, s in specs.items()}
    modelled = [i for i, e in estimates.items() if e is not None]
    if not modelled:
        return CaseScores(case.cls, case.m, case.n, case.k, ours, None, None, None)
    theirs = min(modelled, key=lambda i: (estimates[i], i))
    _, ours_on_set, _ = model.best([specs[i] for i in modelled], case.m, case.n, case.k, case.batch, sms)
    return CaseScores(
        case.cls,
        case.m,
        case.n,
        case.k,
        ours,
        fastest / times[theirs],
        fastest / times[ours_on_set.id],
        fastest / min(times[i] for i in modelled),
    )


def grid_cases(doc: dict, classes: list[str] | None) -> list[HeldOutCase]:
    """Every dense grid point of the table as a case (each instance at its default walk)."""
    out = []
    for gpu_key, entry in sorted(doc["gpus"].items()):
        for cls, points in sorted(entry["classes"].items()):
            if is_grouped_key(cls) or (classes and cls not in classes):
                continue
            for p in points:
                times = default_walk_times(p)
                if times:
                    out.append(HeldOutCase(gpu_key, cls, p["m"], p["n"], p["k"], times))
    return out


def report(scored: list[CaseScores]) -> None:
    """One line per class: the four geomeans, and how many cases the library could estimate at all."""
    by_cls: dict[str, list[CaseScores]] = {}
    for s in scored:
        by_cls.setdefault(s.cls, []).append(s)
    for cls, rows in sorted(by_cls.items()):
        seen = [r for r in rows if r.nvmmh is not None]
        line = f"{cls}: {len(rows)} cases, model {geomean(r.model for r in rows):.3f}"
        if seen:
            line += (
                f"; on the {len(seen)} the library estimates: nvmmh {geomean(r.nvmmh for r in seen):.3f}, "
                f"model on its set {geomean(r.model_on_set for r in seen):.3f}, "
                f"reachable {geomean(r.reachable for r in seen):.3f}, "
                f"model on all {geomean(r.model for r in seen):.3f}"
            )
        print(line)


class Nvmmh:
    """The library, loaded through its own Python wrapper, on one of its built-in boards (e.g.
    H200_SXM, H100_PCIE): `__call__` is an `Estimator` (seconds, or None for a configuration it does
    not model)."""

    def __init__(self, board: str):
        try:
            import nvMatmulHeuristics as nvmmh  # optional: only this maintainer tool needs it
        except ImportError:
            raise SystemExit(
                "nvmmh_judge: nvMatmulHeuristics is not installed; pip install nvidia-matmul-heuristics"
            ) from None
        gpu = getattr(nvmmh.NvMatmulHeuristicsNvidiaGpu, board, None)
        if gpu is None:
            names = ", ".join(g.name for g in nvmmh.NvMatmulHeuristicsNvidiaGpu if g.name != "END")
            raise SystemExit(f"nvmmh_judge: no built-in board {board!r}; one of {names}")
        self._lib = nvmmh.NvMatmulHeuristicsInterfaceEx(
            backend=nvmmh.NvMatmulHeuristicsTarget.CUTLASS3,
            flags=nvmmh.NvMatmulHeuristicsFlags.PERF_MODEL_BASED_AUTO_TUNING,
            gpu=gpu,
        )
        self._config_type = nvmmh.NvMatmulHeuristicsInterface.nvmmhKernelConfiguration

    def __call__(self, precision, problem, cta, cluster, splits) -> float | None:
        lib = self._lib
        lib._ensure_discovery_loaded(lib.target, precision, NT_ROW_MAJOR)
        p = lib.makeNvMatmulHeuristicsProblem(*problem, NT_ROW_MAJOR)
        c = self._config_type()
        c.cta[:] = list(cta)
        c.warp[:] = [64, cta[1], cta[2]]  # the estimate does not depend on it (module docstring)
        c.instr[:] = [64, 8, 16]
        c.splitK = splits
        c.loadStages = 4
        c.gridSwizzle = 1
        c.ctaOrder = 0
        c.cluster[:] = list(cluster)
        seconds = lib.nvMatmulHeuristicsEstimateRuntime(
            lib.handle,
            precision.encode(),
            ctypes.c_int(lib.target),
            ctypes.byref(p),
            ctypes.byref(c),
            lib.hardware_descriptor,
        )
        return seconds if seconds > 0 else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m build_tools.nvmmh_judge", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument(
        "--table", type=Path, default=Path(shipped_path()), help="a tuning table (default: shipped)"
    )
    ap.add_argument("--board", default="H200_SXM", help="the library's built-in board (default H200_SXM)")
    ap.add_argument("--cls", action="append", help="only this class key (repeatable)")
    ap.add_argument("--held-out", type=Path, nargs="+", metavar="FILE", help="judge on these evaluate JSONs")
    args = ap.parse_args(argv)
    estimator = Nvmmh(args.board)
    if args.held_out:
        cases, _ = held_out_draws(args.held_out)
        cases = [c for c in cases if not c.pdl and (not args.cls or c.cls in args.cls)]
    else:
        cases = grid_cases(read_document(args.table), args.cls)
    report([score_case(c, estimator) for c in cases])
    return 0


if __name__ == "__main__":
    sys.exit(main())
