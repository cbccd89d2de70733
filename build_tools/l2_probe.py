"""`python -m build_tools.l2_probe`: how the L2 serves one GEMM launch, ours against cuBLAS's (ncu).

Why this exists: on cuBLAS's own tile, cluster and grid our kernels run 3-19% slower at M of a few hundred
to a few thousand rows, with the same bytes read from DRAM and delivered into the SMs; what differs is how
many of the SMs' identical L2 read requests the L2 request coalescer merges (docs/PERF.md session 40,
docs/KERNEL.md). This tool measures that for any shipped instance, shape and tile walk next to cuBLAS, so a
change to the walk or the producer can be judged by the merging it buys, not by time alone.

    python -m build_tools.l2_probe --shape 1255x1664x6528 \\
        --instance sm90_bf16_bf16_bf16_fp32acc_kkn_128x128x64_c2x1_pp [--walk 1,3 0,4 ...] [--no-cublas]

Needs a GPU, torch, the wheel installed and `ncu` (on the PATH or in /usr/local/cuda/bin). Each case runs in
a child process under `ncu --profile-from-start off --clock-control none` (caches flushed before the
launch, as ncu does by default): the child makes one input set (build_tools/bench.py's `make_set`),
launches the GEMM four times, then profiles a fifth launch between cudaProfilerStart and Stop. cuBLAS's
case is `torch.matmul` (or `torch._scaled_mm` for fp8) on the same dtypes; its kernels in the window (a
split-K reduction too, if it runs one) are summed. One row per case:

- sectors into the SMs (`lrc__xbar2gpc_sectors_op_read`): what the tile's loads deliver;
- L2 sectors the SMs ask for (`lts__t_sectors_srcunit_tex`, loads and stores);
- DRAM fill sectors (`lts__d_sectors_fill_device`);
- sectors merged by multicast (the coalescer's "programmatic" kind: the extra CTAs a TMA multicast
  delivers to) and by the hardware (identical requests that arrive together), the latter also as a
  share of the coalescable ones.
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass

METRICS = {
    "us": "gpu__time_duration.sum",  # read in ns (`_in_base_unit`), reported in µs
    "active": "sm__cycles_active.avg",
    "into_sms": "lrc__xbar2gpc_sectors_op_read.sum",
    "asked": "lts__t_sectors_srcunit_tex.sum",
    "dram": "lts__d_sectors_fill_device.sum",
    "coalescable": "lrc__request_sectors_op_read_coalescable.sum",
    "multicast": "lrc__request_sectors_op_read_coalescing_achieved_type_programmatic.sum",
    "hardware": "lrc__request_sectors_op_read_coalescing_achieved_type_hardware.sum",
}
WARM_LAUNCHES = 4
NCU_FALLBACK = "/usr/local/cuda/bin/ncu"


@dataclass(frozen=True)
class Case:
    """One profiled launch: the probed instance under a walk (None: the launch's default), or cuBLAS."""

    label: str
    cublas: bool = False
    walk: tuple[int, int] | None = None

    def child_args(self, shape: str, instance: str) -> list[str]:
        """The child's command-line arguments (cuBLAS's case names the instance too: its dtypes)."""
        args = ["--child", "--shape", shape, "--instance", instance]
        if self.cublas:
            args.append("--cublas")
        if self.walk is not None:
            args += ["--walk", f"{self.walk[0]},{self.walk[1]}"]
        return args


def parse_walk(text: str) -> tuple[int, int]:
    """'R,G' -> (raster_along_m, group_size), as `launch` takes them."""
    try:
        raster, group = (int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"walk {text!r}: expected RASTER,GROUP such as 1,4") from None
    if raster not in (0, 1) or group < 1:
        raise argparse.ArgumentTypeError(f"walk {text!r}: RASTER is 0 or 1 and GROUP >= 1")
    return raster, group


def cases(walks: list[tuple[int, int]], cublas: bool) -> list[Case]:
    """The default walk first, then each --walk, then cuBLAS."""
    out = [Case("ours, default walk")]
    out += [Case(f"ours, walk {r},{g}", walk=(r, g)) for r, g in walks]
    if cublas:
        out.append(Case("cuBLAS", cublas=True))
    return out


def ncu_command(ncu: str, case: Case, shape: str, instance: str) -> list[str]:
    return [
        ncu,
        "--profile-from-start",
        "off",
        "--clock-control",
        "none",
        "--metrics",
        ",".join(METRICS.values()),
        "--csv",
        sys.executable,
        "-m",
        "build_tools.l2_probe",
        *case.child_args(shape, instance),
    ]


# ncu may print a value in a scaled unit ("usecond", "Msector"): factors to the base unit (ns, sector, ...).
TIME_UNITS_NS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}  # the short names ncu's CSV prints
TIME_UNITS_NS |= {"nsecond": 1.0, "usecond": 1e3, "msecond": 1e6, "second": 1e9}  # and the long ones
COUNT_PREFIXES = {"K": 1e3, "M": 1e6, "G": 1e9}


def _in_base_unit(value: str, unit: str) -> float | None:
    """A metric value in its base unit (ns for durations, plain counts otherwise); None for "n/a"."""
    try:
        number = float(value.strip().replace(",", ""))
    except ValueError:
        return None
    unit = unit.strip()
    if unit in TIME_UNITS_NS:
        return number * TIME_UNITS_NS[unit]
    if len(unit) > 1 and unit[0] in COUNT_PREFIXES and unit[1].islower():
        return number * COUNT_PREFIXES[unit[0]]
    return number


def parse_ncu_csv(text: str) -> dict[str, dict[str, float | None]]:
    """ncu's `--csv` metric rows -> {kernel ID: {metric name: value}} (lines before the header, such as
    ncu's own `==PROF==` messages and the child's output, are skipped)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        return {}
    kernels: dict[str, dict[str, float | None]] = {}
    for row in csv.DictReader(io.StringIO("\n".join(lines[start:]))):
        if row.get("Metric Name"):
            value = _in_base_unit(row.get("Metric Value", ""), row.get("Metric Unit", ""))
            kernels.setdefault(row["ID"], {})[row["Metric Name"]] = value
    return kernels


def summarize(kernels: dict[str, dict[str, float | None]]) -> dict[str, float | None]:
    """One case's row: each metric summed over the window's kernels (a cuBLAS split-K GEMM is two), the
    duration in µs, and the hardware-merged share of the coalescable sectors."""
    row: dict[str, float | None] = {"kernels": float(len(kernels))}
    for key, metric in METRICS.items():
        values = [k.get(metric) for k in kernels.values()]
        row[key] = None if not values or any(v is None for v in values) else sum(values)
    if row["us"] is not None:
        row["us"] /= 1000.0  # gpu__time_duration is in ns
    hw, able = row["hardware"], row["coalescable"]
    row["hardware_share"] = hw / able if hw is not None and able else None
    return row


def render(shape: str, rows: list[tuple[Case, dict]]) -> str:
    def fmt(v, scale=1e6, digits=2):
        return "n/a" if v is None else f"{v / scale:.{digits}f}"

    out = [
        f"L2 service of one launch, {shape} (Nsight Compute; sector counts in millions)",
        "",
        "| case | kernels | µs | SM active cycles (mean per SM) | into SMs | L2 asked | DRAM fills | "
        "merged: multicast | merged: hardware (share) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for case, r in rows:
        share = "n/a" if r.get("hardware_share") is None else f"{100 * r['hardware_share']:.0f}%"
        out.append(
            f"| {case.label} | {r['kernels']:.0f} | {fmt(r['us'], 1)} | {fmt(r['active'], 1, 0)} | "
            f"{fmt(r['into_sms'])} | {fmt(r['asked'])} | {fmt(r['dram'])} | {fmt(r['multicast'])} | "
            f"{fmt(r['hardware'])} ({share}) |"
        )
    return "\n".join(out)


def find_ncu(given: str | None) -> str | None:
    if given:
        return given
    return shutil.which("ncu") or (NCU_FALLBACK if os.path.exists(NCU_FALLBACK) else None)


def child(args: argparse.Namespace) -> int:
    """In the profiled process: warm up, then one launch between cudaProfilerStart and Stop."""
    import torch

    import hgemm_sm90 as hg
    from build_tools import bench

    inst = next((i for i in hg.instances() if i.id == args.instance), None)
    if inst is None:
        print(f"l2_probe: no shipped instance {args.instance!r} (python -m hgemm_sm90 list)", file=sys.stderr)
        return 2
    shape = bench.Shape.parse(args.shape)
    combo = bench.Combo(str(inst.a_dtype), str(inst.b_dtype), str(inst.d_dtype))
    fast = bool(getattr(inst, "fp8_fast_accum", False))
    layout = bench.Layout() if args.cublas else bench.Layout.of(inst)
    a, b, d, c = bench.make_set(torch, shape, layout, combo)
    if args.cublas:
        wanted = bench.series_of(combo, fast)
        call = next(
            (f for f, _, series in bench.cublas_calls(torch, a, b, d, combo) if series == wanted), None
        )
        if call is None:
            print(f"l2_probe: torch offers no cuBLAS GEMM for {combo} ({wanted or 'plain'})", file=sys.stderr)
            return 2
    else:
        size = {"m": shape.m, "n": shape.n, "k": shape.k, "batch": shape.batch}
        walk = {} if args.walk is None else {"raster_along_m": args.walk[0], "group_size": args.walk[1]}
        stream = torch.cuda.current_stream().cuda_stream
        # `workspace` (split-K / stream-K) must outlive the launches: it stays bound until the child returns.
        (call,), workspace = bench.instance_calls(torch, hg, inst, [(a, b, d, c)], size, stream, **walk)
    for _ in range(WARM_LAUNCHES):
        call()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    call()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    return 0


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m build_tools.l2_probe", description=__doc__.split("\n")[0])
    p.add_argument("--shape", required=True, help="MxNxK[xBATCH]")
    p.add_argument("--instance", required=True, help="a shipped instance id (its dtypes pick cuBLAS's)")
    p.add_argument(
        "--walk", type=parse_walk, nargs="*", default=[], help="extra walks RASTER,GROUP to profile"
    )
    p.add_argument("--no-cublas", dest="cublas_row", action="store_false", help="leave out cuBLAS's row")
    p.add_argument("--ncu", default=None, help=f"the ncu binary (default: on the PATH, else {NCU_FALLBACK})")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--cublas", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child and len(args.walk) > 1:
        p.error("a child runs one walk")
    if args.child:
        args.walk = args.walk[0] if args.walk else None
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.child:
        return child(args)
    ncu = find_ncu(args.ncu)
    if ncu is None:
        print("l2_probe: ncu not found; put Nsight Compute on the PATH or pass --ncu", file=sys.stderr)
        return 2
    rows = []
    for case in cases(args.walk, args.cublas_row):
        run = subprocess.run(
            ncu_command(ncu, case, args.shape, args.instance), capture_output=True, text=True
        )
        kernels = parse_ncu_csv(run.stdout)
        if run.returncode != 0 or not kernels:
            tail = (run.stderr or run.stdout).strip().splitlines()[-3:]
            print(f"l2_probe: {case.label}: ncu found no kernel ({' / '.join(tail)})", file=sys.stderr)
            return 1
        rows.append((case, summarize(kernels)))
    print(render(args.shape, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
