"""``python -m hgemm_sm90 bench M N K ...`` (runtime/cli.py parses the command line): the instance
``select()`` picks (or ``--instance``) against cuBLAS through torch, timed with CUDA events. Imports torch
only when run.
"""

from __future__ import annotations

import json

from .cli import PROG, UsageError, _one_line, _problem_kwargs, _us
from .errors import InvalidArgumentError, MissingDependencyError, NoDeviceError


def _import_torch():
    try:
        import torch
    except ImportError:
        raise MissingDependencyError(
            "bench needs torch (it allocates the operands, times with CUDA events and runs cuBLAS through "
            "it), which cannot be imported",
            "pip install torch (a CUDA build) into this environment; the runtime itself does not need it",
        ) from None
    return torch


def cmd_bench(args) -> int:
    class_opts = ("dtype", "b_dtype", "out_dtype", "c_dtype", "c_major")
    if args.instance is None and args.dtype is None:
        raise UsageError(f"{PROG} bench: give --dtype (or --instance ID) (see {PROG} bench --help)")
    if args.instance is not None and (
        any(getattr(args, o) is not None for o in class_opts)
        or args.fast_accum
        or args.fp16_accum
        or args.layout != "kkn"
    ):
        raise UsageError(
            f"{PROG} bench: --instance fixes the dtypes, layout and C; drop --dtype/--b-dtype/--out-dtype/"
            "--layout/--c-dtype/--c-major/--fast-accum/--fp16-accum, or drop --instance"
        )
    torch = _import_torch()
    if not torch.cuda.is_available():
        raise NoDeviceError(
            "bench needs a CUDA GPU, and torch sees none",
            "run on an H100/H200/GH200 with a CUDA build of torch (check nvidia-smi and "
            "CUDA_VISIBLE_DEVICES); `select --gpu H200` shows the choice without a GPU",
        )
    from . import api, state
    from .dispatch import ProblemClass, select
    from .spec import DType

    device = args.device if args.device is not None else 0
    if not 0 <= device < torch.cuda.device_count():
        raise InvalidArgumentError(
            f"--device {device} is not a CUDA device here ({torch.cuda.device_count()} visible)",
            "pass an ordinal in range",
        )
    torch.cuda.set_device(device)
    m, n, k, batch = args.M, args.N, args.K, args.batch
    for name, v in (("M", m), ("N", n), ("K", k), ("--batch", batch)):
        if v < 1:  # select() would say so, but --instance skips it and torch would fail first
            raise InvalidArgumentError(f"{name}={v} is not a positive size", f"pass {name} >= 1")
    if args.instance is not None:
        choice = None
        spec = state.runtime().manifest.record(args.instance).spec
    else:
        choice = select(m, n, k, **_problem_kwargs(args), device=device)
        spec = state.runtime().manifest.record(choice.instance_id).spec
    dev = torch.device("cuda", device)

    def tdt(dt):
        return getattr(torch, DType(dt).array_name)

    def operand(rows, cols, major_is_cols, dt, fill=True):
        """Storage (batch, rows, cols) if the contiguous extent is cols, else (batch, cols, rows); and the
        logical (batch, rows, cols) view of it."""
        shape = (batch, rows, cols) if major_is_cols else (batch, cols, rows)
        if fill:  # random values: zeros run faster and would flatter both sides
            t = torch.randn(shape, device=dev, dtype=torch.float32).to(tdt(dt))
        else:
            t = torch.empty(shape, device=dev, dtype=tdt(dt))
        return t, (t if major_is_cols else t.mT)

    try:
        a, a_log = operand(m, k, spec.a_major == "k", spec.a_dtype)
        b, b_log = operand(n, k, spec.b_major == "k", spec.b_dtype)
        d, d_log = operand(m, n, spec.d_major == "n", spec.d_dtype, fill=False)
        c = c_log = None
        if spec.has_c:
            c, c_log = operand(m, n, spec.c_major == "n", spec.c_dtype)
    except RuntimeError as e:  # torch's out-of-memory error is one
        raise InvalidArgumentError(
            f"torch cannot allocate the operands: {_one_line(str(e))[:300]}",
            "pick smaller sizes, or free device memory",
        ) from None
    stream = torch.cuda.Stream(device=dev)
    overrides = choice.launch_overrides() if choice is not None else {}
    extra = {"c": c.data_ptr(), "beta": 1.0} if c is not None else {}
    ws_bytes = api.workspace_bytes(spec.id, m, n, k, batch, k_splits=overrides.get("k_splits"))
    if ws_bytes:  # split-K: a zeroed workspace, kept alive with the closure below
        workspace = torch.zeros(ws_bytes, dtype=torch.uint8, device=dev)
        extra["workspace"] = workspace.data_ptr()
    ptrs = (a.data_ptr(), b.data_ptr(), d.data_ptr())
    handle = stream.cuda_stream  # the int handle: launch's cheapest stream form

    def ours():
        api.launch_general(spec.id, ptrs, handle, m=m, n=n, k=k, batch=batch, **extra, **overrides)

    baseline, label, same, why_not = _cublas(torch, spec, a_log, b_log, c_log, tdt(spec.d_dtype), stream)
    stream.wait_stream(torch.cuda.current_stream())  # the operands' (and workspace's) fills
    with torch.cuda.stream(stream):
        for _ in range(args.warmup):
            ours()
            if baseline is not None:
                baseline()
        stream.synchronize()
        agreement = None
        if baseline is not None and same:  # the same product (with C where ours reads C)
            ref = baseline()
            stream.synchronize()
            got = d_log[0] if ref.dim() == 2 else d_log
            agreement = ((got.float() - ref.float()).norm() / ref.float().norm().clamp_min(1e-30)).item()
        ours_us, base_us = _time(torch, ours, baseline, args.iters, args.reps, stream)
    flops = 2.0 * m * n * k * batch

    def tf(us):
        return flops / (us * 1e-6) / 1e12

    result = {
        "problem": {"m": m, "n": n, "k": k, "batch": batch, "class": ProblemClass.of(spec).key},
        "gpu": {"device": device, "name": torch.cuda.get_device_name(device)},
        "iters": args.iters,
        "reps": args.reps,
        "ours": {
            "instance_id": spec.id,
            "source": choice.source if choice is not None else "--instance",
            "launch_overrides": overrides,
            "us": ours_us,
            "tflops": tf(ours_us),
        },
        "cublas": None if baseline is None else {"call": label, "us": base_us, "tflops": tf(base_us)},
        "no_cublas_reason": why_not,
        "speedup_vs_cublas": None if baseline is None else base_us / ours_us,
        "relative_error_vs_cublas": agreement,
    }
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    u = _us()
    how = f"median of {args.reps} timings of {args.iters} launches each"
    print(
        f"{'problem':<10} M={m} N={n} K={k} batch={batch} on {result['gpu']['name']} (device {device}), {how}"
    )
    source = result["ours"]["source"]
    over = ", ".join(f"{k_}={v!r}" for k_, v in overrides.items() if v is not None)
    print(f"{'ours':<10} {spec.id} ({source}{': ' + over if over else ''})")
    print(f"{'':<10} {ours_us:10.2f} {u}  {tf(ours_us):8.1f} TFLOP/s")
    if baseline is None:
        print(f"{'cuBLAS':<10} no baseline: {why_not}")
        return 0
    print(f"{'cuBLAS':<10} {label}")
    print(f"{'':<10} {base_us:10.2f} {u}  {tf(base_us):8.1f} TFLOP/s")
    print(f"{'ratio':<10} {base_us / ours_us:.3f}x (cuBLAS time / ours: above 1 means ours is faster)")
    if agreement is not None:
        print(f"{'agreement':<10} relative Frobenius difference {agreement:.2e} from cuBLAS's result")
    return 0


def _cublas(torch, spec, a_log, b_log, c_log, d_dtype, stream):
    """(call, label, same, None): cuBLAS through torch computing the product, ``same`` when it also adds C
    where ours does; or (None, None, False, why) when torch has no cuBLAS call for the problem."""
    from functools import partial

    single = a_log.shape[0] == 1  # a single GEMM: cuBLAS's 2-D path, as a user would call it
    A, B = (a_log[0], b_log[0]) if single else (a_log, b_log)
    C = None if c_log is None else (c_log[0] if single else c_log)
    label = ""
    if spec.a_dtype.is_float8:
        if not single:
            return None, None, False, "torch._scaled_mm has no batched form"
        # cuBLASLt's fp8 GEMM takes A row-major and B column-major: give it packed copies in that layout.
        one = torch.ones((), device=A.device, dtype=torch.float32)
        call = partial(
            torch._scaled_mm,
            A.contiguous(),
            B.contiguous().mT,
            scale_a=one,
            scale_b=one,
            out_dtype=d_dtype,
            use_fast_accum=spec.fp8_fast_accum,
        )
        label = f"torch._scaled_mm(unit scales, use_fast_accum={spec.fp8_fast_accum})"
    elif d_dtype == A.dtype:
        if C is not None and C.dtype == d_dtype:
            call = partial(torch.addmm if single else torch.baddbmm, C, A, B.mT)
            label = "torch.addmm (with C)" if single else "torch.baddbmm (with C)"
        else:
            call = partial(torch.matmul, A, B.mT)
            label = "torch.matmul"
    else:  # 16-bit inputs, fp32 out
        call = partial(torch.mm if single else torch.bmm, A, B.mT, out_dtype=d_dtype)
        label = f"torch.{'mm' if single else 'bmm'}(out_dtype={d_dtype})"
    same = C is None or "with C" in label
    if not same:
        label += " (without C)"
    try:
        with torch.cuda.stream(stream):
            call()
        stream.synchronize()
    except (RuntimeError, TypeError, ValueError, NotImplementedError) as e:
        return None, None, False, f"{label} refused this problem: {_one_line(str(e))[:200]}"
    return call, label, same, None


def _time(torch, ours, baseline, iters: int, reps: int, stream) -> tuple[float, float | None]:
    """Median µs per launch of each side: ``reps`` timings of ``iters`` launches, the sides alternating
    (so clock and power drift hit both alike)."""
    import statistics

    sleep = getattr(torch.cuda, "_sleep", None)
    # ~30 µs of GPU sleep per launch to enqueue (at ~1.5-2 GHz): the batch is queued before the start
    # event fires, so host launch cost is not timed (a tiny GEMM takes less GPU time than its launch
    # takes host time).
    lead_cycles = 50_000 * iters
    runners = [ours] if baseline is None else [ours, baseline]
    times: list[list[float]] = [[] for _ in runners]
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for rep in range(reps):
        order = range(len(runners)) if rep % 2 == 0 else reversed(range(len(runners)))
        for i in order:
            if sleep is not None:
                sleep(lead_cycles)
            start.record(stream)
            for _ in range(iters):
                runners[i]()
            end.record(stream)
            end.synchronize()
            times[i].append(start.elapsed_time(end) * 1e3 / iters)
    medians = [statistics.median(t) for t in times]
    return medians[0], (medians[1] if baseline is not None else None)
