"""`gemm()`: ``out = alpha * a @ b + beta * c`` on the GPU arrays of any framework, dispatched.

`gemm` reads its operands through runtime/arrays.py (torch tensors directly, else
``__cuda_array_interface__``, else DLPack; no framework is imported for that), derives the problem
(sizes, batch, each operand's majorness, leading dimension and batch stride) from shapes and strides,
asks `select()` for the instance and launch overrides, and calls `launch()`. The derivation and the
choice depend only on shapes, strides, dtypes, devices and flags, so they are cached under those; a
repeated call costs the attribute reads, one key, one dict lookup and the launch.

Semantics, as `torch.matmul` / `torch.addmm`:
- a is (..., M, K), b is (..., K, N), out and c are (..., M, N). The batch dims of a and b broadcast
  against each other; out's (and c's) must be the broadcast batch shape exactly.
- Broadcasting rule: a kernel batch needs one positive batch stride per operand, so a batched operand's
  batch dims must collapse into one evenly spaced dim (else: `InvalidArgumentError` suggesting
  ``.contiguous()``). When b is not batched (2-D, or broadcast: size-1 or stride-0 batch dims) and a
  is, the batch dims of a, out and c are folded into M, as `torch.matmul` does: this needs a's batch
  and M dims to collapse into one dim (true for a contiguous a, or any a whose batch stride is M times
  its row stride), and out's and c's likewise. An unbatched a against a batched b is refused.
- Layout rule: each operand's last two dims must have a unit stride in one of them; that one is the
  contiguous extent (A: "k" when K is contiguous, else "m"; B (K x N): "k" when K is contiguous, else
  "n"; out and c: "n" when N is contiguous, else "m") and the other dim's stride is the leading
  dimension. Size-1 extents: a dim of size 1 has no meaningful stride (frameworks report anything),
  so (1) a unit stride on an extent larger than 1 decides; (2) otherwise an extent of size 1 counts as
  contiguous, the last dim first (row-major: A "k", B "n", out/c "n"); and a leading dimension whose
  dim has size 1 is taken as packed (the contiguous extent). A layout with no unit stride, or a
  non-positive stride on a dim of size > 1 (e.g. from ``expand``), is refused with the fix.
- dtypes come from the arrays: A's, B's, out's (and C's). With out=None the result is allocated with
  ``torch.empty`` on a's device (``a.new_empty`` where it takes a's dtype), only when a is a torch tensor
  (torch, already loaded then, is taken from ``sys.modules``), with the input dtype for 16-bit inputs
  and bf16 for fp8 inputs; other frameworks must pass ``out=``.
- c with ``beta == 0`` is not read at all (as `torch.addmm`: NaN in c does not reach out), which also
  lets an instance without a C epilogue run; ``beta != 0`` needs c.
- Empty problems: M, N or the batch count 0 launch nothing and return out; K = 0 (an empty inner dim,
  whose product is zero) is an `InvalidArgumentError` telling how to fill out instead: the kernels
  need K >= 1, and zero-filling through a memset path is left to the caller's framework.

Stream: ``stream=None`` means the framework's current stream: torch's current raw stream of a's
device (``torch._C._cuda_getCurrentRawStream``: a C call returning the handle, where
``torch.cuda.current_stream()`` builds a Stream object per call), CuPy's current stream for CuPy arrays
(only when CuPy is already imported), else 0, the legacy default stream of the current context
(DLPack producers are told so, and order their work before it). A DLPack producer gets our stream in
``__dlpack__(stream=...)``; a ``__cuda_array_interface__`` v3 producer stream that differs from ours is
waited for with an event (recorded on it, waited on ours; one cached event per context; no host
wait). torch tensors carry no stream: as with torch's own ops, work on another stream than the one
`gemm` launches on is the caller's to order. A default stream (0, and torch's default stream is 0 on
every device) runs in the calling thread's *current* context, as `launch()` documents: for arrays on
another GPU than the current one, make their device current (``torch.cuda.set_device``, a
``torch.cuda.device`` block) or pass a stream of it; on a multi-GPU machine `launch()`'s pointer check
(HGEMM_CHECK_POINTERS=auto) reports a mismatch as `DeviceMismatchError`.

Every error is an `HgemmError` raised before anything is launched; `launch()`'s rules (alignment, the
overlap of out with its inputs, ...) are not repeated here and surface from it. A DLPack export or a
CAI stream wait may already have been enqueued then: they order work, and write nothing.

Host cost, measured with the fake driver's no-op cuLaunchKernelEx on the CPU dev box (2026-11-30,
tests/runtime/test_gemm.py's cost test, best of 7 x 2000 calls): `launch()` alone 1.8-1.9 µs; `gemm()`
on torch-like tensors with a cached plan 1.7-1.8 µs more, of which ~0.7 µs are the stand-in tensors'
attribute reads (Python properties there, C getters on real torch). The other routes cost more per
operand and are not the fast path: ``__cuda_array_interface__`` ~3-4 µs (the dict and its parsing),
DLPack ~3-4 µs plus the producer's export.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import weakref

from . import state
from .api import launch_general, workspace_bytes
from .arrays import ArrayView, is_torch, view
from .dispatch import select
from .driver import check
from .errors import DeviceMismatchError, InvalidArgumentError
from .spec import DType, KSplit
from .stream import stream_handle

_CACHED_PLANS = 4096  # cleared when full
_TORCH_TYPES: set = set()  # tensor types seen through the torch route: the fast path takes them
_NOPE = object()  # "no single stride steps through these dims"
_torch_raw_stream = None  # torch._C._cuda_getCurrentRawStream, looked up once torch tensors are seen


class _Plans:
    """The plans of one runtime (a choice belongs to its manifest): replaced when the runtime is."""

    rt: object = object()  # never the runtime: the first call starts a cache
    plans: dict = {}


def gemm(
    a,
    b,
    out=None,
    *,
    c=None,
    alpha=1.0,
    beta=0.0,
    fp8_fast_accum=False,
    fp16_accum=False,
    stream=None,
    pdl=False,
    b_ready=False,
):
    """``out = alpha * a @ b + beta * c``, matmul semantics, on CUDA arrays; returns out.

    a: (..., M, K), b: (..., K, N), out and c: (..., M, N): torch tensors, or any array offering
    ``__cuda_array_interface__`` or DLPack (CuPy, JAX, ...). Leading batch dims broadcast; when only a
    is batched, its batch folds into M (see the module docstring for the exact rules). Majorness,
    leading dimensions and batch strides come from the strides; `select()` picks the instance. out=None
    allocates the result, for torch inputs only (bf16 for fp8 inputs, else the input dtype). c is read
    only when beta != 0. fp8_fast_accum: for fp8 inputs, accumulate without periodic promotion.
    fp16_accum: for fp16 inputs, accumulate in fp16 (opt-in: faster on large problems, with an error
    that grows with K, docs/PERF.md).
    stream: an int handle or stream object as `launch()` takes; None means the framework's current
    stream (torch, CuPy), else the legacy default stream.
    pdl, b_ready: programmatic dependent launch, as `launch()` takes them: pdl=True lets the kernel
    start while the stream's previous kernel finishes (it waits for it before reading); b_ready=True
    also declares that the previous kernel does not write b (a model's weights), so that b's first
    k-tiles load before that wait: for chains of decode-sized GEMMs (docs/PERF.md).

    Asynchronous like `launch()`: returns once the kernel is enqueued. Raises an `HgemmError` subclass
    (`InvalidArgumentError`, `NoInstanceError`, `DeviceMismatchError`, ...) before launching anything.
    """
    if fp8_fast_accum is not False and fp8_fast_accum is not True:
        raise InvalidArgumentError(f"fp8_fast_accum={fp8_fast_accum!r}", "pass True or False")
    if fp16_accum is not False and fp16_accum is not True:
        raise InvalidArgumentError(f"fp16_accum={fp16_accum!r}", "pass True or False")
    # launch()'s PDL options, passed only when given (its shortest cache key otherwise).
    modes = _NO_MODES if pdl is False and b_ready is False else {"pdl": pdl, "b_ready": b_ready}
    cache = _Plans if _Plans.rt is state._default else _fresh_plans()
    T = _TORCH_TYPES
    if type(a) in T and type(b) in T and (out is None or type(out) in T) and (c is None or type(c) in T):
        # torch: a few C-level attribute reads per tensor; `is_cuda` keeps another device type's tensor
        # with the same ordinal from matching a plan made for CUDA ones.
        da = a.get_device() if a.is_cuda else -1
        key = (
            a.shape,
            a.stride(),
            a.dtype,
            da,
            b.shape,
            b.stride(),
            b.dtype,
            b.get_device() if b.is_cuda else -1,
            None
            if out is None
            else (out.shape, out.stride(), out.dtype, out.get_device() if out.is_cuda else -1),
            None if c is None else (c.shape, c.stride(), c.dtype, c.get_device() if c.is_cuda else -1),
            beta == 0.0,
            fp8_fast_accum,
            fp16_accum,
            pdl is True,
        )
        try:
            p = cache.plans.get(key)
        except TypeError:  # e.g. an unhashable beta: the plan's builder explains
            p = None
        if p is None:
            p = _plan_for(
                key, a, b, out, c, beta, (fp8_fast_accum, fp16_accum, pdl is True), view(a, "a"), view(b, "b")
            )
        if out is None:
            out = p.allocate(a)
        if p.empty:
            return out
        if type(stream) is not int:
            if stream is None:
                raw = _torch_raw_stream
                stream = raw(da) if raw is not None else _torch_stream(da)
            else:
                stream = stream_handle(stream)
        if p.workspace:
            _launch_split(cache.rt, p, a.data_ptr(), b.data_ptr(), out.data_ptr(), stream, alpha, modes)
        elif p.simple:
            if p.use_c:
                launch_general(
                    p.instance,
                    (a.data_ptr(), b.data_ptr(), out.data_ptr()),
                    stream,
                    m=p.m,
                    n=p.n,
                    k=p.k,
                    batch=p.batch,
                    c=c.data_ptr(),
                    alpha=alpha,
                    beta=beta,
                    **modes,
                )
            else:
                launch_general(
                    p.instance,
                    (a.data_ptr(), b.data_ptr(), out.data_ptr()),
                    stream,
                    m=p.m,
                    n=p.n,
                    k=p.k,
                    batch=p.batch,
                    alpha=alpha,
                    **modes,
                )
        elif p.use_c:
            launch_general(
                p.instance,
                (a.data_ptr(), b.data_ptr(), out.data_ptr()),
                stream,
                c=c.data_ptr(),
                alpha=alpha,
                beta=beta,
                **modes,
                **p.kw,
            )
        else:
            launch_general(
                p.instance,
                (a.data_ptr(), b.data_ptr(), out.data_ptr()),
                stream,
                alpha=alpha,
                **modes,
                **p.kw,
            )
        return out
    return _gemm_views(
        cache, a, b, out, c, alpha, beta, (fp8_fast_accum, fp16_accum, pdl is True), stream, modes
    )


_NO_MODES: dict = {}


def _gemm_views(cache, a, b, out, c, alpha, beta, accum, stream, modes):
    """`gemm` for anything but all-torch operands: through `ArrayView`s (runtime/arrays.py). ``accum``:
    (fp8_fast_accum, fp16_accum, pdl is True), what the choice depends on besides the operands."""
    if type(stream) is not int:
        stream = _default_stream(a) if stream is None else stream_handle(stream)
    va, vb = view(a, "a", stream), view(b, "b", stream)
    vo = None if out is None else view(out, "out", stream)
    vc = None if c is None else view(c, "c", stream)
    for x, v in ((a, va), (b, vb), (out, vo), (c, vc)):
        if v is not None and v.source == "torch":
            _TORCH_TYPES.add(type(x))  # next time, the fast path
    key = (
        _view_key(va),
        _view_key(vb),
        None if vo is None else (*_view_key(vo), vo.readonly),
        None if vc is None else _view_key(vc),
        beta == 0.0,
        accum,
        va.source,  # out=None allocates through a's framework
    )
    try:
        p = cache.plans.get(key)
    except TypeError:
        p = None
    if p is None:
        p = _plan_for(key, a, b, out, c, beta, accum, va, vb, vo, vc)
    if out is None:
        out = p.allocate(a)
        pd = out.data_ptr()
    else:
        pd = vo.ptr
    if p.empty:
        return out
    rt = cache.rt
    for v in (va, vb, vo, vc if p.use_c else None):
        if v is not None and v.stream is not None:
            _wait_for_producer(rt, v.stream, stream)
    if p.workspace:
        _launch_split(rt, p, va.ptr, vb.ptr, pd, stream, alpha, modes)
    elif p.use_c:
        launch_general(
            p.instance, (va.ptr, vb.ptr, pd), stream, c=vc.ptr, alpha=alpha, beta=beta, **modes, **p.kw
        )
    else:
        launch_general(p.instance, (va.ptr, vb.ptr, pd), stream, alpha=alpha, **modes, **p.kw)
    return out


def _launch_split(rt, p, a: int, b: int, d: int, stream: int, alpha, modes: dict) -> None:
    """Launch a split-K or stream-K plan with the stream's workspace (runtime/workspace.py), or without
    one where the stream has none (captured before its first such call): one split, or (stream-K) every
    tile whole."""
    ws = rt.workspaces.get(stream, p.workspace)
    if ws is None:
        launch_general(p.instance, (a, b, d), stream, alpha=alpha, **p.without_workspace, **modes, **p.kw)
    else:
        launch_general(p.instance, (a, b, d), stream, alpha=alpha, workspace=ws, **modes, **p.kw)


def _view_key(v: ArrayView) -> tuple:
    return v[1:5]  # (shape, strides, dtype, device): what a plan depends on


def _fresh_plans():
    """Start a plan cache for the process's current runtime (tests install their own)."""
    _Plans.plans = {}
    _Plans.rt = state.runtime()
    return _Plans


# ---- streams -----------------------------------------------------------------------------------------


def _torch_stream(device: int) -> int:
    """torch's current stream on CUDA device `device` as a raw handle (the C-level getter: no Stream
    object is built)."""
    global _torch_raw_stream
    if _torch_raw_stream is None:
        _torch_raw_stream = sys.modules["torch"]._C._cuda_getCurrentRawStream
    return _torch_raw_stream(device)


def _default_stream(a) -> int:
    """The stream `stream=None` means for an operand `a` of whichever framework (module docstring)."""
    module = type(a).__module__
    if module.startswith("torch"):
        if a.is_cuda:
            return _torch_stream(a.get_device())
        return 0  # not a CUDA tensor: view() refuses it next
    if module.startswith("cupy") and "cupy" in sys.modules:
        return sys.modules["cupy"].cuda.get_current_stream().ptr
    return 0


_events: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # Runtime -> {context: CUevent}
_event_lock = threading.Lock()
CU_EVENT_DISABLE_TIMING = 0x2


def _wait_for_producer(rt, producer: int, ours: int) -> None:
    """Make stream `ours` wait for the work enqueued so far on `producer` (a __cuda_array_interface__ v3
    stream): record an event there, wait for it here; nothing waits on the host.

    One event per context (it must belong to the producer stream's context) is re-recorded each time;
    the record and the wait happen under a lock, so that two threads cannot interleave their records
    between the other's record and wait."""
    if producer == ours or (producer == 1 and ours == 0):  # 0 and 1 both name the legacy default stream
        return
    cu = rt.cu
    ctx = rt.devices.stream_context(producer)
    events = _events.get(rt)
    if events is None:
        events = _events.setdefault(rt, {})
    event = events.get(ctx)
    if event is None:
        with rt.devices.pushed(ctx):
            event = events.setdefault(ctx, check(cu.cuEventCreate(CU_EVENT_DISABLE_TIMING), "cuEventCreate"))
    with _event_lock:
        check(cu.cuEventRecord(event, producer), "cuEventRecord")
        check(cu.cuStreamWaitEvent(ours, event, 0), "cuStreamWaitEvent")


# ---- the plan: everything derived from shapes, strides, dtypes and devices ---------------------------


class _Plan:
    """What a call with these shapes, strides, dtypes, devices and flags launches: `instance` with the
    launch keywords `kw` (m, n, k, batch, and only the strides and overrides that differ from
    `launch()`'s defaults, so that packed problems take its shortest cache key); `simple` when `kw`
    holds m, n, k, batch alone; `use_c`: c is read; `empty`: nothing to launch. `alloc`: (torch.empty,
    or None for a.new_empty; shape, dtype, device) when out=None."""

    __slots__ = (
        "instance",
        "kw",
        "m",
        "n",
        "k",
        "batch",
        "simple",
        "use_c",
        "empty",
        "alloc",
        "choice",
        "workspace",
        "without_workspace",
    )

    def allocate(self, a):
        """The output, on torch tensor a's device. Sizes as separate arguments: torch parses them ~0.9 µs
        faster than one tuple (H200 host, torch 2.11, 2026-11-30: 2.04 vs 2.92 µs per torch.empty); where
        out takes a's dtype, ``a.new_empty`` also skips parsing a dtype and a device (2026-12-03: 2.00-2.07
        vs 2.14-2.20 µs; with dtype= it is slower than torch.empty, docs/PERF.md session 30)."""
        empty, shape, dtype, device = self.alloc
        if empty is None:
            return a.new_empty(*shape)
        return empty(*shape, dtype=dtype, device=device)


def _plan_for(key, a, b, out, c, beta, accum, va, vb, vo=None, vc=None) -> _Plan:
    """Build the plan of a call (`va`..`vc`: the operands' views; out and c views are made here for the
    torch fast path, which has none), cache it under `key`, and return it."""
    if vo is None and out is not None:
        vo = view(out, "out")
    if vc is None and c is not None:
        vc = view(c, "c")
    for x in (a, b, out, c):
        if x is not None and is_torch(x):
            _TORCH_TYPES.add(type(x))
    p = _derive(a, va, vb, vo, vc, beta, accum)
    plans = _Plans.plans
    if len(plans) >= _CACHED_PLANS:
        plans.clear()
    with contextlib.suppress(TypeError):  # unhashable key parts: not cached
        plans[key] = p
    return p


def _bad(problem: str, fix: str) -> InvalidArgumentError:
    return InvalidArgumentError(problem, fix)


def _derive(a, va, vb, vo, vc, beta, accum) -> _Plan:
    """The problem, layouts and choice of one call; every refusal an `HgemmError`."""
    for name, v in (("a", va), ("b", vb), ("out", vo), ("c", vc)):
        if v is not None and len(v.shape) < 2:
            raise _bad(
                f"{name} has shape {v.shape}: gemm multiplies matrices, (..., M, K) @ (..., K, N)",
                "make it 2-D or more: a row vector a as a[None, :] (1 x K), a column vector b as b[:, None] "
                "(K x 1)",
            )
    m, k = va.shape[-2:]
    kb, n = vb.shape[-2:]
    if k != kb:
        raise _bad(
            f"a is {va.shape} and b is {vb.shape}: a's last dim (K = {k}) differs from b's second-to-last "
            f"({kb})",
            "pass a of shape (..., M, K) and b of shape (..., K, N); for a @ b^T pass b.mT (a transposed "
            "view costs nothing: its strides say K is contiguous)",
        )
    batch = _broadcast(va.shape[:-2], vb.shape[:-2])
    if batch is None:
        raise _bad(
            f"the batch dims of a {va.shape[:-2]} and b {vb.shape[:-2]} do not broadcast",
            "give a and b equal batch dims (or size 1 / missing where one is shared)",
        )
    want = (*batch, m, n)
    for name, v in (("out", vo), ("c", vc)):
        if v is not None and v.shape != want:
            raise _bad(
                f"{name} is {v.shape}, but a {va.shape} @ b {vb.shape} is {want}",
                f"pass {name} of shape {want}"
                + (" (expand a bias with .expand(...).contiguous())" if name == "c" else ""),
            )
    use_c = beta != 0.0  # a NaN beta is not 0: it reaches launch(), which refuses it
    if use_c and vc is None:
        raise _bad(f"beta={beta!r} but c is None", "pass c= (the matrix beta scales), or leave beta=0.0")
    if vo is not None and vo.readonly:
        raise _bad("out is read-only (its producer exported it so)", "pass a writable out")
    device = _common_device(va, vb, vo, vc if use_c else None)
    d_dtype = vo.dtype if vo is not None else DType.bf16 if va.dtype.is_float8 else va.dtype
    p = _Plan()
    p.alloc = None
    if vo is None:
        if not is_torch(a):
            raise _bad(
                f"out=None, but a is a {type(a).__module__}.{type(a).__name__}: gemm allocates the result "
                "only for torch tensors",
                f"pass out=, a {d_dtype} array of shape {want} on a's device",
            )
        torch = sys.modules["torch"]
        out_dtype = getattr(torch, d_dtype.array_name)
        # (None, ...): allocate with a.new_empty (out takes a's dtype and device), else with torch.empty.
        p.alloc = (None if out_dtype == a.dtype else torch.empty, want, out_dtype, a.device)
    total = 1
    for x in batch:
        total *= x
    p.empty = m == 0 or n == 0 or total == 0
    p.use_c = use_c
    if p.empty:
        p.instance, p.kw, p.simple, p.choice, p.workspace = None, {}, True, None, 0
        return p
    if k == 0:
        raise _bad(
            f"a is {va.shape} and b is {vb.shape}: K = 0, an empty inner dimension (the product is all "
            "zeros)",
            "skip the call and fill out yourself (out.zero_(), or out.copy_(c).mul_(beta) with c): the "
            "kernels need K >= 1",
        )
    # ---- batch: one stride per operand, or a's batch folded into M -----------------------------------
    dims_a, dims_b = _batch_dims(va, batch), _batch_dims(vb, batch)
    dims_o = None if vo is None else list(zip(batch, vo.strides[:-2]))
    dims_c = list(zip(batch, vc.strides[:-2])) if use_c else None
    rows_a, s_rows_a = m, va.strides[-2]
    rows_o, s_rows_o = m, None if vo is None else vo.strides[-2]
    rows_c, s_rows_c = m, None if not use_c else vc.strides[-2]
    bs = {"a": None, "b": None, "d": None, "c": None}
    nbatch = total
    if total > 1:
        batched_a, batched_b = _is_batched(dims_a), _is_batched(dims_b)
        if batched_a and not batched_b:
            # b is shared by every batch: fold the batch into M (M' = batch * M), as torch.matmul does.
            rows_a, s_rows_a = total * m, _fold("a", va, dims_a + [(m, va.strides[-2])])
            if vo is not None:
                rows_o, s_rows_o = total * m, _fold("out", vo, dims_o + [(m, vo.strides[-2])])
            if use_c:
                rows_c, s_rows_c = total * m, _fold("c", vc, dims_c + [(m, vc.strides[-2])])
            nbatch = 1
        elif not batched_a:
            raise _bad(
                f"a {va.shape} is shared by every batch of b {vb.shape}: a kernel batch needs a positive "
                "batch stride for each operand, and only a batched a over a shared b folds into M",
                "expand a to b's batch dims and make it contiguous (a.expand(*batch, M, K).contiguous()), "
                "or call gemm once per batch",
            )
        else:
            bs["a"] = _batch_stride("a", va, dims_a)
            bs["b"] = _batch_stride("b", vb, dims_b)
            if vo is not None:
                bs["d"] = _batch_stride("out", vo, dims_o)
            if use_c:
                bs["c"] = _batch_stride("c", vc, dims_c)
    # ---- layouts -------------------------------------------------------------------------------------
    am, lda = _layout("a", va, rows_a, k, s_rows_a, va.strides[-1], ("m", "k"))
    bm, ldb = _layout("b", vb, k, n, vb.strides[-2], vb.strides[-1], ("k", "n"))
    if vo is None:  # allocated: compact row-major, so n-major with packed strides
        dm, ldd = "n", n
        if nbatch > 1:
            bs["d"] = m * n
    else:
        dm, ldd = _layout("out", vo, rows_o, n, s_rows_o, vo.strides[-1], ("m", "n"))
    cm = ldc = None
    if use_c:
        cm, ldc = _layout("c", vc, rows_c, n, s_rows_c, vc.strides[-1], ("m", "n"))
    M = rows_a
    extents = {"m": M, "n": n, "k": k}
    choice = select(
        M,
        n,
        k,
        a_dtype=va.dtype,
        b_dtype=vb.dtype,
        d_dtype=d_dtype,
        a_major=am,
        b_major=bm,
        d_major=dm,
        c_dtype=vc.dtype if use_c else None,
        c_major=cm,
        fp8_fast_accum=accum[0],
        fp16_accum=accum[1],
        pdl=accum[2],
        batch=nbatch,
        device=device,
    )
    kw = {"m": M, "n": n, "k": k, "batch": nbatch}
    # Only what differs from launch()'s defaults (packed ld = the contiguous extent; packed batch
    # stride = the other extent times ld) is passed: the shortest launch cache key, identical bytes.
    for op, major, ld, (rows, cols) in (
        ("a", am, lda, ("m", "k")),
        ("b", bm, ldb, ("n", "k")),
        ("d", dm, ldd, ("m", "n")),
        ("c", cm, ldc, ("m", "n")),
    ):
        if major is None:
            continue
        contiguous, other = (
            (extents[cols], extents[rows]) if major == cols else (extents[rows], extents[cols])
        )
        if ld != contiguous:
            kw[f"ld{op}"] = ld
        if nbatch > 1 and bs[op] != other * ld:
            kw[f"batch_stride_{op}"] = bs[op]
    for name, value in choice.launch_overrides().items():
        if value is not None:
            kw[name] = value
    p.instance, p.kw, p.choice = choice.instance_id, kw, choice
    p.m, p.n, p.k, p.batch = M, n, k, nbatch
    p.simple = len(kw) == 4
    # Split-K instances need a workspace unless the problem runs as one split (the launch default);
    # stream-K instances use one to share tiles out, and run every tile whole without.
    p.workspace = workspace_bytes(p.instance, M, n, k, nbatch)
    stream_k = state.runtime().manifest.specs[p.instance].k_split == KSplit.stream
    p.without_workspace = {} if stream_k else {"k_splits": 1}
    return p


def _broadcast(x: tuple, y: tuple) -> tuple | None:
    """The broadcast of batch shapes x and y (None if they do not broadcast)."""
    r = max(len(x), len(y))
    x, y = (1,) * (r - len(x)) + x, (1,) * (r - len(y)) + y
    out = []
    for i, j in zip(x, y):
        if i != j and i != 1 and j != 1:
            return None
        out.append(j if i == 1 else i)
    return tuple(out)


def _batch_dims(v: ArrayView, batch: tuple) -> list:
    """(size, stride) of each dim of the full batch shape for input `v`: a dim that v lacks, or holds once
    (size 1) while the batch has more, is broadcast: stride 0."""
    own = len(v.shape) - 2
    pad = len(batch) - own
    out = []
    for i, size in enumerate(batch):
        j = i - pad
        out.append((size, 0 if j < 0 or v.shape[j] == 1 else v.strides[j]))
    return out


def _is_batched(dims: list) -> bool:
    """Whether an input differs between batches (some dim of size > 1 with a nonzero stride)."""
    return any(size > 1 and stride != 0 for size, stride in dims)


def _merge(dims: list):
    """The one stride that steps through `dims` ((size, stride) pairs, outermost first) as if they were a
    single dim of their total size: None when every size is 1 (any stride would do), `_NOPE` when there
    is none (the dims are not evenly spaced, e.g. a permuted or partly broadcast batch)."""
    dims = [(size, stride) for size, stride in dims if size != 1]
    if not dims:
        return None
    for (_, outer), (size, inner) in zip(dims, dims[1:]):
        if outer != size * inner:
            return _NOPE
    return dims[-1][1]


def _batch_stride(name: str, v: ArrayView, dims: list) -> int:
    stride = _merge(dims)
    if stride is _NOPE or stride is None or stride <= 0:
        partly = any(size > 1 and s == 0 for size, s in dims)
        raise _bad(
            f"{name} {v.shape} with strides {v.strides} (elements): its batch dims do not collapse into one "
            "positive batch stride" + (" (it is broadcast along part of the batch)" if partly else ""),
            f"pass {name}.contiguous() (or a reshape to one batch dim)",
        )
    return stride


def _fold(name: str, v: ArrayView, dims: list) -> int | None:
    stride = _merge(dims)
    if stride is _NOPE:
        raise _bad(
            f"{name} {v.shape} with strides {v.strides} (elements): b is shared by every batch, so the batch "
            f"dims of {name} are folded into M, which needs them evenly spaced with its rows (a batch stride "
            "of M times the row stride)",
            f"pass {name}.contiguous(), or a b with the batch dims",
        )
    return stride


def _layout(name: str, v: ArrayView, rows: int, cols: int, s_rows, s_cols, names) -> tuple[str, int]:
    """(majorness, leading dimension) of a rows x cols matrix with these strides (elements), named by
    `names` = (row extent, column extent). The module docstring states the size-1 rule."""
    real_col = cols > 1 and s_cols == 1
    real_row = rows > 1 and s_rows == 1
    if real_col or (not real_row and cols == 1):
        major, ld, other, s_other = names[1], s_rows if rows > 1 else cols, rows, s_rows
    elif real_row or rows == 1:
        major, ld, other, s_other = names[0], s_cols if cols > 1 else rows, cols, s_cols
    else:
        raise _bad(
            f"{name} {v.shape} with strides {v.strides} (elements) has no unit stride in its last two dims: "
            "the kernels read rows that are contiguous in memory",
            f"pass {name}.contiguous() (row-major), or a transposed view of a contiguous array",
        )
    if other > 1 and ld <= 0:
        raise _bad(
            f"{name} {v.shape} with strides {v.strides} (elements) has a stride of {s_other} between its "
            f"rows (broadcast or reversed), which a TMA leading dimension cannot express",
            f"pass {name}.contiguous()",
        )
    return major, ld


def _common_device(*views) -> int | None:
    """The CUDA ordinal every operand lives on (None when none names one); `DeviceMismatchError`
    otherwise."""
    device = None
    for name, v in zip(("a", "b", "out", "c"), views):
        if v is None or v.device is None:
            continue
        if device is None:
            device = v.device
        elif v.device != device:
            raise DeviceMismatchError(name, v.device, device)
    return device
