"""`python -m build_tools.hbm_ceiling`: how far any kernel could beat cuBLAS on a bandwidth-bound suite.

A GEMM must read A and B and write D at least once, so on a GPU that moves at most R bytes per second it
takes at least bytes / R, plus whatever a launch costs that no byte hides (``--fixed-us``). Against the
cuBLAS times that `python -m build_tools.tune evaluate --json` recorded, the geomean over a class's shapes of
cuBLAS time / that bound is the most any kernel could reach in the suite's "x cuBLAS" goal (docs/PERF.md,
session 29: issue 10's decode goal against the H200's measured read rate).

    python -m build_tools.hbm_ceiling EVAL.json [--read-tbps 4.41 4.8] [--fixed-us 0 1 2]
    python -m build_tools.hbm_ceiling --measure [--mib 256 1024 4096]   # on a GPU, with torch

``--measure`` times streaming reads by torch's reductions (sum and amax over flat buffers, CUDA-graph
replays, buffers rotated so each replay misses L2, interleaved rounds, medians) and prints the best rate per
size: the rate R that nothing in torch beats on this GPU. It is not a proof that no kernel can read faster;
docs/PERF.md compares it with the fastest rate our own kernels reached.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from functools import partial
from pathlib import Path

from build_tools.tune import geomean, read_json

DATASHEET_TBPS = 4.8  # H200 SXM HBM3e


def ceilings(verdicts: list[dict], read_tbps: float, fixed_us: float) -> dict[str, dict]:
    """Per class of ``verdicts`` (evaluate's JSON records: ``cls``, ``bytes``, ``cublas_us``, ``gemm_us``):
    the geomean of cuBLAS / (fixed_us + bytes / read_tbps) over its shapes ("ceiling"), gemm()'s measured
    geomean over cuBLAS ("measured") and its effective rate as a share of ``read_tbps`` ("share")."""
    out: dict[str, dict] = {}
    for cls in dict.fromkeys(v["cls"] for v in verdicts):
        rows = [v for v in verdicts if v["cls"] == cls and v.get("cublas_us")]
        bound = [fixed_us + v["bytes"] / (read_tbps * 1e6) for v in rows]  # µs: bytes / (TB/s * 1e6)
        out[cls] = {
            "shapes": len(rows),
            "ceiling": geomean(v["cublas_us"] / b for v, b in zip(rows, bound)),
            "measured": geomean(v["cublas_us"] / v["gemm_us"] for v in rows),
            "share": geomean(v["bytes"] / (v["gemm_us"] * 1e6) / read_tbps for v in rows),
        }
    return out


def measure(mibs: list[int], rounds: int = 9, iters: int = 20) -> dict[int, float]:
    """Best streaming read rate (TB/s) of torch's reductions per buffer size in MiB, on the current GPU:
    each reduction captured as a graph of `iters` calls over rotating buffers and timed in interleaved
    rounds by build_tools/bench.py's `Runner` / `interleaved` (the GEMM benchmarks' method)."""
    import torch

    from build_tools.bench import Runner, interleaved

    dev = torch.device("cuda")
    l2 = torch.cuda.get_device_properties(dev).L2_cache_size
    stream = torch.cuda.Stream()
    rates = {}
    for mib in mibs:
        nbytes = mib << 20
        sets = max(2, math.ceil(3 * l2 / nbytes))  # each replay reads buffers that L2 no longer holds
        bufs = [torch.randint(0, 100, (nbytes // 4,), device=dev, dtype=torch.int32) for _ in range(sets)]
        o_f32 = torch.empty((), device=dev, dtype=torch.float32)
        o_i32 = torch.empty((), device=dev, dtype=torch.int32)
        o_bf16 = torch.empty((), device=dev, dtype=torch.bfloat16)
        readers = {
            "sum bf16": lambda x, o=o_bf16: torch.sum(x.view(torch.bfloat16), dim=0, out=o),
            "amax f32": lambda x, o=o_f32: torch.amax(x.view(torch.float32), dim=0, out=o),
            "amax i32": lambda x, o=o_i32: torch.amax(x, dim=0, out=o),
        }
        runners = [
            Runner(name, "torch", "", [partial(read, x) for x in bufs]) for name, read in readers.items()
        ]
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for r in runners:
                r.eager(1)  # warm-up outside capture
            torch.cuda.synchronize()
            for r in runners:
                r.capture(torch, stream, iters)
            interleaved(torch, runners, rounds, iters, stream, "ms")
        best_ms = min(statistics.median(r.ms) for r in runners)
        rates[mib] = nbytes / (best_ms * 1e9)
        print(
            f"{mib} MiB: "
            + ", ".join(f"{r.name} {nbytes / (statistics.median(r.ms) * 1e9):.2f} TB/s" for r in runners),
            flush=True,
        )
        del runners, bufs
        torch.cuda.empty_cache()
    return rates


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m build_tools.hbm_ceiling", description=__doc__.split("\n")[0])
    p.add_argument("eval_json", nargs="?", type=Path, help="a `tune evaluate --json` file (plain or .gz)")
    p.add_argument("--read-tbps", type=float, nargs="+", default=[DATASHEET_TBPS])
    p.add_argument("--fixed-us", type=float, nargs="+", default=[0.0])
    p.add_argument("--measure", action="store_true", help="time torch's streaming reads on this GPU")
    p.add_argument("--mib", type=int, nargs="+", default=[256, 1024, 4096])
    args = p.parse_args(argv)
    if args.measure:
        measure(args.mib)
        return 0
    if args.eval_json is None:
        p.error("give an evaluate JSON, or --measure")
    try:
        verdicts = read_json(args.eval_json)["verdicts"]
    except (OSError, ValueError, KeyError) as e:
        print(f"hbm_ceiling: cannot read verdicts from {args.eval_json}: {e}", file=sys.stderr)
        return 2
    print("| class | shapes | read TB/s | fixed µs | ceiling x cuBLAS | gemm() x cuBLAS | rate / read |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for rate in args.read_tbps:
        for fixed in args.fixed_us:
            for cls, c in ceilings(verdicts, rate, fixed).items():
                print(
                    f"| {cls} | {c['shapes']} | {rate:.2f} | {fixed:g} | {c['ceiling']:.3f} | "
                    f"{c['measured']:.3f} | {c['share']:.3f} |"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
