"""`python -m build_tools.launch_cost [--instance ID] [--calls N]`: host µs per `hgemm_sm90.launch`
against a bare `cuLaunchKernelEx` of the same kernel, in one process, on an sm_90 GPU.

Why: the launch path's goal (2026-11-30) is a cost per `launch` of the same problem at most 1.3x that of
a bare `cuLaunchKernelEx` issued from Python with a prebuilt parameter buffer (same kernel, same launch
config): the runtime's Python on top of the driver call must stay near 1 µs. Measured on the H200 host
before the launch path was rebuilt (2026-11-30): `launch` 9.3-9.6 µs, a bare cuLaunchKernelEx with a
prebuilt void** 4.0-5.5 µs, torch.current_stream() alone 4.8-6.0 µs. On 2026-12-01, after the plain
form got its own path and memos (runtime/api.py): launch / bare 1.18-1.24 (docs/PERF.md).

What it times, interleaved (one chunk of each per round, the order rotating), µs per call:
- `launch`: `hgemm_sm90.launch(id, (a, b, d), stream, m=, n=, k=)` with pointers as ints and the stream as
  an int handle, the same small problem every call (the plain form: no options);
- `launch(alpha=1.0)`: the same launch with one option given, which takes the general path
  (`launch_general`, what gemm() calls);
- `bare`: `cuLaunchKernelEx(config, function, kernelParams, 0)` through cuda.bindings with the very
  objects that launch uses, taken from the runtime's state after a first launch: its launch entry's
  `CUlaunchConfig` (grid, block, shared memory, cluster, stream) and function, and this thread's packed
  parameter buffer's `void**`;
- `torch.matmul(a, b.T, out=d)` for reference (cuBLAS through torch's dispatcher).
Method: after a warm-up, chunks of `--chunk` calls (default 200) timed with time.perf_counter on a side
stream, with a synchronize between chunks (not timed) so the launch queue never fills and blocks the
host; the figure is the median over all chunks. Prints each case and the ratio launch / bare.

Needs the wheel installed (`pip install --no-deps --target /tmp/site wheels/hgemm_sm90-*.whl` and
PYTHONPATH=/tmp/site), torch with CUDA and cuda-bindings. Takes a few seconds. `measure` and
`runtime_cases` need no GPU (tests/runtime/test_launch_cost.py runs them on the fake driver).
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
import time

TARGET_RATIO = 1.3
M = N = K = 256


def measure(cases: dict, calls: int, chunk: int, sync, warmup_chunks: int = 3) -> dict[str, list[float]]:
    """µs per call of each callable in `cases`, one sample per chunk of `chunk` calls; rounds interleave
    the cases (rotating which goes first) and call `sync()` after every chunk, outside the timing."""
    names = list(cases)
    samples = {name: [] for name in names}
    rounds = max(1, calls // chunk)
    clock = time.perf_counter
    for r in range(warmup_chunks + rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            fn = cases[name]
            t0 = clock()
            for _ in range(chunk):
                fn()
            dt = clock() - t0
            sync()
            if r >= warmup_chunks:
                samples[name].append(dt / chunk * 1e6)
    return samples


def runtime_cases(
    hg,
    instance_id: str,
    ptrs: tuple[int, int, int],
    stream: int,
    m: int,
    n: int,
    k: int,
    other_ptrs: tuple[int, int, int] | None = None,
) -> dict:
    """{"launch": ..., "bare": ..., "launch(alpha=1.0)": ...}: `hg.launch` of one problem, cuLaunchKernelEx
    of the launch entry that this first launch built (runtime/plan.py) with the parameter buffer it
    packed, and the launch with one option; with `other_ptrs`, also "launch, 2 pointer sets": the plain
    launch alternating between two sets of operands (the entry's memo of accepted pointers and its
    packed buffer miss on every call; a list reversal per call included)."""
    launch = hg.launch
    launch(instance_id, ptrs, stream, m=m, n=n, k=k)  # the first call: validates and builds the entry
    launch(instance_id, ptrs, stream, m=m, n=n, k=k)  # the plain form's path: packs its buffer
    rt = importlib.import_module(hg.__name__ + ".state").runtime()
    entry = next(e for e in rt.plans[instance_id].entries.values() if e.stream == stream)
    _, params = entry.plain_buffers.state  # this thread's buffer, holding this problem's parameters
    cu_launch, config, function = rt.cu.cuLaunchKernelEx, entry.config, entry.function
    err = cu_launch(config, function, params, 0)[0]
    if err:
        raise RuntimeError(f"bare cuLaunchKernelEx failed: {err!r}")

    def ours():
        launch(instance_id, ptrs, stream, m=m, n=n, k=k)

    def ours_with_an_option():
        launch(instance_id, ptrs, stream, m=m, n=n, k=k, alpha=1.0)

    def bare():
        cu_launch(config, function, params, 0)

    cases = {"launch": ours, "bare": bare, "launch(alpha=1.0)": ours_with_an_option}
    if other_ptrs is not None:
        sets = [other_ptrs, ptrs]

        def ours_alternating():
            launch(instance_id, sets[0], stream, m=m, n=n, k=k)
            sets.reverse()

        cases["launch, 2 pointer sets"] = ours_alternating
    return cases


def summary(samples: dict[str, list[float]]) -> tuple[list[str], float]:
    """Report lines and the ratio median(launch) / median(bare)."""
    lines = [
        f"{name:>17}: median {statistics.median(v):6.2f} us/call  (min {min(v):6.2f}, {len(v)} chunks)"
        for name, v in samples.items()
    ]
    ratio = statistics.median(samples["launch"]) / statistics.median(samples["bare"])
    # The same, round by round: a launch chunk and a bare chunk run back to back, so a host that
    # speeds up or slows down during the run (seen on the H200 host: medians moving 1.5x between runs)
    # shifts both; the median of those ratios is the steadier figure.
    paired = statistics.median(x / y for x, y in zip(samples["launch"], samples["bare"], strict=True))
    lines.append(
        f"launch / bare = {ratio:.2f} (ratio of medians), {paired:.2f} (median of per-round ratios); "
        f"goal <= {TARGET_RATIO}; launch - bare = "
        f"{statistics.median(samples['launch']) - statistics.median(samples['bare']):.2f} us"
    )
    return lines, ratio


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m build_tools.launch_cost", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument(
        "--instance",
        help="instance id (default: the first bf16 K-major A/B, N-major D cooperative instance without C)",
    )
    ap.add_argument("--calls", type=int, default=20000, help="timed calls per case (default 20000)")
    ap.add_argument("--chunk", type=int, default=200, help="calls per timed chunk (default 200)")
    args = ap.parse_args(argv)

    import torch

    import hgemm_sm90 as hg

    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        print("needs an sm_90 GPU (H100/H200)", file=sys.stderr)
        return 2
    iid = args.instance or next(
        i.id
        for i in hg.instances()
        if (i.a_dtype, i.b_dtype, i.d_dtype, i.a_major, i.b_major, i.d_major)
        == ("bf16",) * 3 + ("k", "k", "n")
        and not i.has_c
        and i.schedule == "cooperative"
    )
    spec = next(i for i in hg.instances() if i.id == iid)
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(str(spec.a_dtype), torch.bfloat16)
    if spec.has_c or (spec.a_major, spec.b_major) != ("k", "k") or str(spec.a_dtype) not in ("bf16", "fp16"):
        print(f"{iid}: pick a 16-bit K-major A/B instance without C", file=sys.stderr)
        return 2
    a = torch.randn(M, K, device="cuda", dtype=dt)
    b = torch.randn(N, K, device="cuda", dtype=dt)
    d = torch.empty(
        (M, N) if spec.d_major == "n" else (N, M),
        device="cuda",
        dtype={"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[str(spec.d_dtype)],
    )
    if spec.d_major != "n":
        d = d.T
    side = torch.cuda.Stream()
    handle = side.cuda_stream
    with torch.cuda.stream(side):
        a2, b2, d2 = a.clone(), b.clone(), d.clone()
        cases = runtime_cases(
            hg,
            iid,
            (a.data_ptr(), b.data_ptr(), d.data_ptr()),
            handle,
            M,
            N,
            K,
            (a2.data_ptr(), b2.data_ptr(), d2.data_ptr()),
        )
        out = torch.empty(M, N, device="cuda", dtype=dt)
        bt = b.T
        cases["torch.matmul"] = lambda: torch.matmul(a, bt, out=out)
        samples = measure(cases, args.calls, args.chunk, side.synchronize)
    torch.cuda.synchronize()
    lines, _ = summary(samples)
    print(f"{iid}, {M}x{N}x{K}, {torch.cuda.get_device_name()}, side stream {handle:#x}")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
