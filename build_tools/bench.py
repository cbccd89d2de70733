"""`python -m build_tools.bench`: throughput of shipped instances against cuBLAS, and host cost per launch.

Why: DESIGN.md's performance yardsticks are ratios to cuBLAS measured in the same process on the same GPU,
and the host overhead of one launch. This prints both, writes the table for docs/PERF.md (--markdown) and
every raw timing (--json).

A benchmark, not a test: it checks nothing about the values the kernels compute (STYLE: correctness and
benchmarking stay apart). Run the GPU tier (tests/gpu) first. Needs torch (allocation, CUDA events, the
cuBLAS baseline) and an sm_90 GPU.

Method:
- Per shape, cuBLAS and every candidate take turns, one timed batch each per round (A/B/C, B/C/A, ...), so
  clock and power drift hits all alike (the H200 drops from ~1980 to ~1470 MHz at its power cap, DESIGN
  fact 8). A batch is `--iters` back-to-back launches between two CUDA events; after one untimed warm-up
  batch each, the figure is the median over `--reps` rounds.
- Inputs are random, never zeros (a bf16 GEMM ran 13% faster on zeros on an H200, 2026-10-28). When one set of
  A, B, D is smaller than 3x L2, launches rotate over enough sets to cover 3x L2, so small shapes
  are not timed out of a hot L2.
- Host overhead: time.perf_counter around chunks of 200 calls of a tiny GEMM on a side stream, with a
  synchronize between chunks that is not timed, so the launch queue never fills up and blocks the host;
  2000 calls per run, median of 5 runs, the measured calls interleaved run by run.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import math
import platform
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from functools import partial
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

DTYPES = ("bf16", "fp16", "fp32", "e4m3", "e5m2")
DEVICE = "cuda"
L2_FLOOR_BYTES = 60 << 20  # H200: torch reports 60 MB of L2; use at least that if the device reports less
MAX_SETS = 256  # tiny shapes stay L2-resident anyway; no point allocating thousands of sets
HOST_SHAPE = (128, 128, 64)  # one CTA: the GPU finishes a launch about as fast as the host issues one
HOST_CHUNK = 200  # well below the driver's launch queue depth, so issuing never blocks on the GPU
HOST_RUNS = 5


@dataclass(frozen=True)
class Shape:
    m: int
    n: int
    k: int
    batch: int = 1

    @classmethod
    def parse(cls, text: str) -> Shape:
        try:
            dims = [int(p) for p in text.lower().split("x")]
        except ValueError:
            dims = []
        if len(dims) not in (3, 4) or min(dims) <= 0:
            raise argparse.ArgumentTypeError(f"shape {text!r} is not MxNxK or MxNxKxBATCH of positive ints")
        return cls(*dims)

    def __str__(self) -> str:
        return f"{self.m}x{self.n}x{self.k}" + (f"x{self.batch}" if self.batch > 1 else "")

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k * self.batch


def _shapes(text: str) -> list[Shape]:
    return [Shape.parse(s) for s in text.split(",") if s.strip()]


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive integer")
    return value


@dataclass(frozen=True)
class BenchArgs:
    """Field names are argparse's `dest`s: `BenchArgs(**vars(ns))` keeps them in sync."""

    shapes: list[Shape]
    dtype: str
    out_dtype: str | None
    kernels: list[str] | None
    reps: int
    iters: int
    host_calls: int
    json: Path | None
    markdown: Path | None


def parse_args(argv: list[str] | None) -> BenchArgs:
    p = argparse.ArgumentParser(prog="python -m build_tools.bench", description=__doc__.split("\n")[0])
    p.add_argument("--shapes", type=_shapes, default=_shapes("4096x4096x4096,8192x8192x8192"),
                   help="comma-separated MxNxK[xBATCH] (default: 4096x4096x4096,8192x8192x8192)")
    p.add_argument("--dtype", choices=DTYPES, default="bf16", help="A and B dtype (default: bf16)")
    p.add_argument("--out-dtype", choices=DTYPES, default=None, help="D dtype (default: --dtype)")
    p.add_argument("--kernels", nargs="+", metavar="GLOB", help="instance id globs (default: all that match "
                   "the dtypes)")
    p.add_argument("--reps", type=_positive, default=10, help="timed rounds per shape; the median is kept")
    p.add_argument("--iters", type=_positive, default=20, help="back-to-back launches per timed batch")
    p.add_argument("--host-calls", type=int, default=2000, help="calls per host-overhead run (0: skip)")
    p.add_argument("--json", type=Path, default=None, help="write every timing as JSON here")
    p.add_argument("--markdown", type=Path, default=None, help="write the docs/PERF.md section here")
    return BenchArgs(**vars(p.parse_args(argv)))


# --- environment ---------------------------------------------------------------------------------------


def _dist_version(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def nvidia_smi(device_uuid: str | None) -> dict:
    """Driver version, SM clock and power now, from nvidia-smi; {} where it is missing."""
    fields = ["driver_version", "clocks.sm", "clocks.max.sm", "power.draw", "power.limit", "temperature.gpu"]
    cmd = ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"]
    if device_uuid:
        cmd += ["-i", device_uuid]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    values = [v.strip() for v in out.strip().splitlines()[0].split(",")] if out.strip() else []
    return dict(zip(["driver", "sm_clock_mhz", "max_sm_clock_mhz", "power_w", "power_limit_w", "temp_c"],
                    values))


def environment(torch, hg) -> dict:
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    uuid = getattr(props, "uuid", None)
    return {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "gpu": props.name, "sms": props.multi_processor_count,
        "l2_bytes": getattr(props, "L2_cache_size", None),
        "gpu_uuid": f"GPU-{uuid}" if uuid else None,
        "python": platform.python_version(), "torch": torch.__version__, "torch_cuda": torch.version.cuda,
        "cuda_bindings": _dist_version("cuda-bindings"), "hgemm_sm90": _dist_version("hgemm-sm90"),
        "hgemm_sm90_path": getattr(hg, "__file__", None),
    }


# --- operands and runners ------------------------------------------------------------------------------


def torch_dtype(torch, name: str):
    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32,
            "e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}[name]


def sets_needed(set_bytes: int, l2_bytes: int) -> int:
    """Buffer sets to rotate over so consecutive uses of one set are >= 3x L2 apart."""
    l2 = max(l2_bytes or 0, L2_FLOOR_BYTES)
    return 1 if set_bytes >= 3 * l2 else min(MAX_SETS, math.ceil(3 * l2 / set_bytes))


def random_tensor(torch, shape: tuple, dtype):
    return torch.randn(shape, device=DEVICE).to(dtype)  # fp32 randn then cast: works for fp8 too


def make_set(torch, shape: Shape, majors: str, in_dtype, out_dtype) -> tuple:
    """Packed A, B, D storage laid out as `majors` ("kkn": A row-major, B row-major N x K, D row-major)."""
    s, L = shape, shape.batch
    a = random_tensor(torch, (L, s.m, s.k) if majors[0] == "k" else (L, s.k, s.m), in_dtype)
    b = random_tensor(torch, (L, s.n, s.k) if majors[1] == "k" else (L, s.k, s.n), in_dtype)
    d = torch.empty((L, s.m, s.n) if majors[2] == "n" else (L, s.n, s.m), dtype=out_dtype, device=DEVICE)
    return a, b, d


def set_bytes(shape: Shape, in_size: int, out_size: int) -> int:
    s = shape
    return s.batch * ((s.m * s.k + s.n * s.k) * in_size + s.m * s.n * out_size)


def cublas_call(torch, a, b, d) -> tuple[Callable[[], object] | None, str]:
    """A zero-argument call of cuBLAS (through torch) computing d = a @ b^T, and its label; None if torch
    offers none for these dtypes. Each choice is tried once here: one that exists but fails drops out."""
    if a.shape[0] == 1:  # what users call for a single GEMM: the 2-D path, not a batch of one
        a, b, d = a[0], b[0], d[0]
    bt, mm = b.mT, torch.mm if a.dim() == 2 else torch.bmm
    half = (torch.bfloat16, torch.float16)
    options = []
    if d.dtype == a.dtype and a.dtype in half:
        options.append((partial(torch.matmul, a, bt, out=d), "torch.matmul(out=)"))
    elif d.dtype == torch.float32 and a.dtype in half:
        name = f"torch.{'mm' if mm is torch.mm else 'bmm'}(out_dtype=fp32"
        options.append((partial(mm, a, bt, out_dtype=torch.float32, out=d), name + ", out=)"))
        options.append((partial(mm, a, bt, out_dtype=torch.float32), name + ")"))  # allocates D per call
    elif a.dim() == 2 and a.element_size() == 1:
        one = torch.ones((), device=a.device)
        options.append((partial(torch._scaled_mm, a, bt, scale_a=one, scale_b=one, out_dtype=d.dtype, out=d),
                        "torch._scaled_mm(out=)"))
    for call, label in options:
        try:
            call()
            torch.cuda.synchronize()
            return call, label
        except (RuntimeError, TypeError, NotImplementedError):
            continue
    return None, "none (torch has no cuBLAS GEMM for these dtypes/shape)"


@dataclass
class Runner:
    name: str
    kind: str  # "hgemm" or "cublas"
    calls: list  # one zero-argument call per buffer set: rotation is indexing, not argument building
    cursor: int = 0
    ms: list = field(default_factory=list)
    error: str | None = None

    def batch(self, iters: int) -> None:
        calls, n, c = self.calls, len(self.calls), self.cursor
        for i in range(iters):
            calls[(c + i) % n]()
        self.cursor = (c + iters) % n


def time_batch(torch, runner: Runner, iters: int, stream) -> float:
    """Milliseconds per launch over one batch of back-to-back launches, by CUDA events."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record(stream)
    runner.batch(iters)
    end.record(stream)
    end.synchronize()
    return start.elapsed_time(end) / iters


def bench_shape(torch, hg, shape: Shape, cands: list, args: BenchArgs, stream, env: dict) -> dict:
    in_dt, out_dt = torch_dtype(torch, args.dtype), torch_dtype(torch, args.out_dtype or args.dtype)
    nbytes = set_bytes(shape, torch.empty((), dtype=in_dt).element_size(),
                       torch.empty((), dtype=out_dt).element_size())
    nsets = sets_needed(nbytes, env["l2_bytes"])
    majors = {"kkn"} | {f"{i.a_major}{i.b_major}{i.d_major}" for i in cands}  # cuBLAS runs on "kkn"
    sets = {mj: [make_set(torch, shape, mj, in_dt, out_dt) for _ in range(nsets)] for mj in sorted(majors)}
    runners = []
    calls, label = zip(*[cublas_call(torch, *s) for s in sets["kkn"]])
    if calls[0] is not None:
        runners.append(Runner(f"cuBLAS {label[0]}", "cublas", list(calls)))
    else:
        print(f"  no cuBLAS baseline: {label[0]}")
    size = {"m": shape.m, "n": shape.n, "k": shape.k, "batch": shape.batch}
    for inst in cands:
        own = sets[f"{inst.a_major}{inst.b_major}{inst.d_major}"]
        calls = [partial(hg.launch, inst.id, (a.data_ptr(), b.data_ptr(), d.data_ptr()), stream.cuda_stream,
                         **size) for a, b, d in own]
        runners.append(Runner(inst.id, "hgemm", calls))
    for r in runners:  # warm-up: module load, first-touch, clocks; a launch error drops the runner
        try:
            r.batch(args.iters)
            torch.cuda.synchronize()
        except hg.HgemmError as e:
            r.error = str(e)
    live = [r for r in runners if r.error is None]
    for rep in range(args.reps):  # interleaved rounds; the order rotates so no runner always goes first
        for r in live[rep % len(live):] + live[:rep % len(live)]:
            r.ms.append(time_batch(torch, r, args.iters, stream))
    return summarize(shape, nsets, nbytes, runners, nvidia_smi(env["smi_id"]).get("sm_clock_mhz"))


def summarize(shape: Shape, nsets: int, nbytes: int, runners: list[Runner], sm_clock) -> dict:
    rows = []
    for r in runners:
        row = {"name": r.name, "kind": r.kind, "ms": r.ms, "error": r.error}
        if r.ms:
            med = statistics.median(r.ms)
            row.update(median_ms=med, tflops=shape.flops / (med * 1e-3) / 1e12,
                       spread=(max(r.ms) - min(r.ms)) / med)
        rows.append(row)
    cublas = next((r for r in rows if r["kind"] == "cublas" and "tflops" in r), None)
    for row in rows:
        if cublas and "tflops" in row:
            row["vs_cublas"] = row["tflops"] / cublas["tflops"]
    ours = [r for r in rows if r["kind"] == "hgemm" and "tflops" in r]
    best = max(ours, key=lambda r: r["tflops"], default=None)
    return {"shape": str(shape), "flops": shape.flops, "buffer_sets": nsets, "set_bytes": nbytes,
            "sm_clock_after_mhz": sm_clock, "runners": rows, "best": best["name"] if best else None,
            "best_tflops": best["tflops"] if best else None,
            "cublas_tflops": cublas["tflops"] if cublas else None,
            "ratio": best["vs_cublas"] if best and cublas else None}


def print_shape(res: dict, args: BenchArgs) -> None:
    size = f"{res['set_bytes'] / 2**20:.1f} MiB" if res["set_bytes"] >= 2**20 else f"{res['set_bytes']} B"
    print(f"\n{res['shape']}  {args.dtype}->{args.out_dtype or args.dtype}  ({res['buffer_sets']} buffer "
          f"set(s) of {size}; {args.reps} rounds x {args.iters} launches; SM clock after: "
          f"{res['sm_clock_after_mhz'] or '?'} MHz)")
    print(f"  {'TFLOP/s':>8} {'ms':>9} {'vs cuBLAS':>9} {'spread':>7}  runner")
    for r in sorted(res["runners"], key=lambda r: -r.get("tflops", -1)):
        if r["error"]:
            print(f"  {'error':>8} {'':>9} {'':>9} {'':>7}  {r['name']}: {r['error']}")
        elif "tflops" in r:
            vs = f"{r['vs_cublas']:.3f}" if "vs_cublas" in r else "n/a"
            print(f"  {r['tflops']:8.1f} {r['median_ms']:9.4f} {vs:>9} {r['spread']:7.1%}  {r['name']}")


# --- host overhead -------------------------------------------------------------------------------------


def host_overhead(torch, hg, inst, args: BenchArgs, stream) -> dict:
    """Median µs per call, host side only, for our launch (int handle and torch stream) and torch.matmul."""
    m, n, k = HOST_SHAPE
    in_dt, out_dt = torch_dtype(torch, args.dtype), torch_dtype(torch, args.out_dtype or args.dtype)
    a, b, d = make_set(torch, Shape(m, n, k), f"{inst.a_major}{inst.b_major}{inst.d_major}", in_dt, out_dt)
    ptrs = (a.data_ptr(), b.data_ptr(), d.data_ptr())
    calls = {
        f"hgemm_sm90.launch, int stream handle ({inst.id})": partial(hg.launch, inst.id, ptrs,
                                                                       stream.cuda_stream, m=m, n=n, k=k),
        f"hgemm_sm90.launch, torch.cuda.Stream ({inst.id})": partial(hg.launch, inst.id, ptrs, stream,
                                                                       m=m, n=n, k=k),
    }
    ca, cb, cd = make_set(torch, Shape(m, n, k), "kkn", in_dt, out_dt)
    cublas, label = cublas_call(torch, ca, cb, cd)
    if cublas is not None:
        calls[f"cuBLAS {label}"] = cublas
    runs: dict[str, list[float]] = {name: [] for name in calls}
    for call in calls.values():  # warm-up: descriptor/config caches, allocator, cuBLAS handle
        for _ in range(HOST_CHUNK):
            call()
    for _ in range(HOST_RUNS):
        for name, call in calls.items():
            total = 0.0
            for _ in range(max(1, args.host_calls // HOST_CHUNK)):
                stream.synchronize()  # not timed
                t0 = time.perf_counter()
                for _ in range(HOST_CHUNK):
                    call()
                total += time.perf_counter() - t0
            runs[name].append(total / (max(1, args.host_calls // HOST_CHUNK) * HOST_CHUNK) * 1e6)
    stream.synchronize()
    return {"shape": "x".join(map(str, HOST_SHAPE)), "calls_per_run": args.host_calls,
            "us_per_call": {name: statistics.median(v) for name, v in runs.items()}, "runs_us": runs}


# --- reports -------------------------------------------------------------------------------------------


def render_markdown(env: dict, args: BenchArgs, command: str, results: list[dict], host: dict | None) -> str:
    out_dtype = args.out_dtype or args.dtype
    lines = [
        f"### {args.dtype} x {args.dtype} -> {out_dtype} vs cuBLAS, {env['gpu']} ({env['date'][:10]})", "",
        (f"`{command}`: median of {args.reps} rounds x {args.iters} back-to-back launches timed with CUDA "
         "events, cuBLAS and every candidate interleaved in one process; inputs rotate over buffer sets "
         "covering 3x L2 for small shapes."), "",
        "| shape M×N×K | best instance | ours TFLOP/s | cuBLAS TFLOP/s | ours / cuBLAS |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    for r in results:
        shape = r["shape"].replace("x", "×")
        best = f"`{r['best']}`" if r["best"] else "none ran"
        ours = f"{r['best_tflops']:.1f}" if r["best_tflops"] else "n/a"
        cub = f"{r['cublas_tflops']:.1f}" if r["cublas_tflops"] else "n/a"
        ratio = f"{r['ratio']:.3f}" if r["ratio"] else "n/a"
        lines.append(f"| {shape} | {best} | {ours} | {cub} | {ratio} |")
    if host:
        lines += ["", (f"Host overhead per call (µs; {host['shape']}, side stream, median of {HOST_RUNS} "
                       f"runs of {host['calls_per_run']} calls, synchronizing every {HOST_CHUNK} calls "
                       "untimed):"), ""]
        lines += [f"- {name}: {us:.2f}" for name, us in host["us_per_call"].items()]
    clocks = (f"SM clock {env.get('sm_clock_start_mhz') or '?'} MHz at start, "
              f"{env.get('sm_clock_end_mhz') or '?'} at end")
    lines += ["", (f"Environment: {env['gpu']} ({env['sms']} SMs), driver {env.get('driver', '?')}, "
                   f"torch {env['torch']} (CUDA {env['torch_cuda']}), cuda-bindings {env['cuda_bindings']}, "
                   f"hgemm-sm90 {env['hgemm_sm90']}, Python {env['python']}; {clocks}; power limit "
                   f"{env.get('power_limit_w', '?')} W."), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    try:
        import torch
    except ImportError:
        print("bench: needs torch with CUDA (allocation, timing, the cuBLAS baseline)", file=sys.stderr)
        return 2
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        print("bench: needs an sm_90 GPU (H100/H200/GH200) visible to torch", file=sys.stderr)
        return 2
    try:
        import hgemm_sm90 as hg
    except ImportError as e:
        print(f"bench: cannot import hgemm_sm90 ({e}): install the wheel first", file=sys.stderr)
        return 2
    out_dtype = args.out_dtype or args.dtype
    instances = hg.instances()
    cands = sorted((i for i in instances if i.a_dtype == i.b_dtype == args.dtype and i.d_dtype == out_dtype
                    and (not args.kernels or any(fnmatch.fnmatchcase(i.id, g) for g in args.kernels))),
                   key=lambda i: i.id)
    if not cands:
        combos = sorted({f"--dtype {i.a_dtype} --out-dtype {i.d_dtype}" for i in instances})
        print(f"bench: no shipped instance is {args.dtype} -> {out_dtype} and matches {args.kernels or '*'}; "
              f"shipped: {', '.join(combos) or 'none'}", file=sys.stderr)
        return 1

    env = environment(torch, hg)
    smi = nvidia_smi(env["gpu_uuid"])
    env["smi_id"] = env["gpu_uuid"] if smi else None  # else the first GPU nvidia-smi lists
    smi = smi or nvidia_smi(None)
    env.update({k: v for k, v in smi.items() if k != "sm_clock_mhz"},
               sm_clock_start_mhz=smi.get("sm_clock_mhz"))
    command = shlex.join(["python", "-m", "build_tools.bench", *argv])
    print(f"{command}\n{env['date']}  {env['gpu']} ({env['sms']} SMs)  driver {env.get('driver', '?')}  "
          f"torch {env['torch']} CUDA {env['torch_cuda']}  cuda-bindings {env['cuda_bindings']}  "
          f"hgemm-sm90 {env['hgemm_sm90']}  SM clock {env['sm_clock_start_mhz'] or '?'} MHz  "
          f"{len(cands)} candidate instances")

    stream = torch.cuda.Stream()
    results, host = [], None
    with torch.cuda.stream(stream):
        for shape in args.shapes:
            res = bench_shape(torch, hg, shape, cands, args, stream, env)
            print_shape(res, args)
            results.append(res)
        best = next((r["best"] for r in results if r["best"]), cands[0].id)
        if args.host_calls > 0:
            host = host_overhead(torch, hg, next(i for i in cands if i.id == best), args, stream)
    env["sm_clock_end_mhz"] = nvidia_smi(env["smi_id"]).get("sm_clock_mhz")

    markdown = render_markdown(env, args, command, results, host)
    print("\n" + markdown)
    if args.markdown:
        args.markdown.write_text(markdown, encoding="utf-8")
    if args.json:
        doc = {"command": command, "env": env, "args": asdict(args), "shapes": results, "host_overhead": host}
        args.json.write_text(json.dumps(doc, indent=1, default=str) + "\n", encoding="utf-8")
    return 0 if all(r["best"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
