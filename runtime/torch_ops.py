"""torch operators for hgemm_sm90: ``torch.ops.hgemm_sm90.{gemm, mm, addmm, bmm, gemm_out, grouped_mm}``.

Use::

    import hgemm_sm90.torch_ops as hops

    ops = hops.register()          # imports torch and defines the ops; idempotent, thread-safe
    y = ops.mm(x, w.T)             # the same op as torch.ops.hgemm_sm90.mm
    y = ops.addmm(bias, x, w.T, alpha=0.5)   # torch.addmm's convention; a bias row broadcasts
    y = ops.gemm(x8, w8.T, out_dtype=torch.float32, fp8_fast_accum=True)

Importing this module imports nothing but the runtime's own stdlib-only modules: torch is imported by
`register()` (the runtime must stay importable without it, tests/unit/test_layering.py). torch stays out
of the wheel's requirements.

The operators and their schemas::

    gemm(Tensor a, Tensor b, Tensor? c=None, float alpha=1.0, float beta=0.0, bool fp8_fast_accum=False,
         ScalarType? out_dtype=None, bool fp16_accum=False, bool pdl=False, bool b_ready=False) -> Tensor
    mm(Tensor a, Tensor b, *, bool fp8_fast_accum=False, ScalarType? out_dtype=None,
       bool fp16_accum=False, bool pdl=False, bool b_ready=False) -> Tensor
    addmm(Tensor c, Tensor a, Tensor b, *, float beta=1.0, float alpha=1.0, bool fp8_fast_accum=False,
          ScalarType? out_dtype=None, bool fp16_accum=False, bool pdl=False, bool b_ready=False) -> Tensor
    bmm(Tensor a, Tensor b, *, bool fp8_fast_accum=False, ScalarType? out_dtype=None,
        bool fp16_accum=False, bool pdl=False, bool b_ready=False) -> Tensor
    gemm_out(Tensor a, Tensor b, Tensor(a!) out, Tensor? c=None, float alpha=1.0, float beta=0.0,
             bool fp8_fast_accum=False, bool fp16_accum=False, bool pdl=False, bool b_ready=False) -> ()
    grouped_mm(Tensor a, Tensor b, Tensor offs, Tensor? a_idx=None, *, bool fp8_fast_accum=False,
               ScalarType? out_dtype=None) -> Tensor

All compute ``alpha * a @ b + beta * c`` with `hgemm_sm90.gemm` (dispatch picks the kernel instance):

- ``gemm`` has ``torch.matmul``'s shape rule for a (..., M, K) and b (..., K, N) with at least two
  dimensions each: batch dimensions broadcast. A 2-D b is folded into M (a (..., M, K) becomes one
  (B*M, K) problem, a view when a's strides allow, else a copy); otherwise the batch is flattened to
  one dimension, and an operand whose batch dimensions do not collapse into one positive stride (a
  broadcast one included) is copied, keeping each matrix's majorness: any matmul shape runs (in a
  shipped dtype/layout class), where `hgemm_sm90.gemm` refuses what it cannot launch without a copy.
  ``mm`` takes 2-D a and b, ``bmm`` 3-D ones with equal batch, ``addmm`` is ``torch.addmm``'s spelling
  (c first, ``beta`` / ``alpha`` keyword-only, defaults 1). K = 0 gives ``beta * c`` (or zeros) and an
  empty output nothing, without a launch (the kernels need K >= 1).
- c broadcasts to the output shape (e.g. a bias row of shape (N,)); one that does not already have the
  output's shape is materialized (contiguous, in its own dtype) before the launch. As in
  ``torch.addmm``, ``beta == 0`` ignores c entirely (NaN in c does not propagate), so the instances
  without C run; ``beta != 0`` without c is an error.
- The output is a new contiguous (row-major, n-major) tensor on a's device. Its dtype is ``out_dtype``,
  by default a's dtype for 16-bit inputs and **bfloat16 for fp8 inputs** (fp8 GEMMs feed 16-bit
  activations; fp8 D is an explicit choice: ``out_dtype=torch.float8_e4m3fn``; ``torch.float32`` keeps
  the full accumulator). This is `hgemm_sm90.gemm`'s own ``out=None`` rule.
- Which dtype/layout combinations run is whatever the wheel ships (`hgemm_sm90.instances()`): the
  majorness of each operand comes from its strides (e.g. fp8 needs K-major a and b, i.e. b = w.T for a
  row-major (N, K) w, as ``torch._scaled_mm``). An unshipped combination raises `NoInstanceError` naming
  the nearest shipped ones; the ops do not silently copy to another layout.
- ``fp16_accum=True`` (fp16 a and b only) asks for an instance that accumulates in fp16, as
  `hgemm_sm90.gemm`'s option of the same name: faster on large problems, with an error that grows with
  K; never chosen otherwise.
- ``pdl`` and ``b_ready`` are `hgemm_sm90.gemm`'s (programmatic dependent launch): ``pdl=True`` lets the
  kernel start while the stream's previous kernel finishes (it waits for it before reading a, and c);
  ``b_ready=True`` also lets it load b first, which is right when b is a weight that the previous
  kernel does not write: for chains of decode-sized GEMMs (docs/PERF.md). In a CUDA graph (and
  ``torch.compile(mode="reduce-overhead")``) the launches become programmatic graph edges.
- ``grouped_mm`` is `hgemm_sm90.grouped_gemm` (one launch for a mixture-of-experts layer): ``offs`` is the
  int32 CUDA tensor of the G + 1 group offsets *with* the leading 0 (``torch._grouped_mm`` takes them
  without it). A 3-D b (G, K, N) groups a's rows: the output is (M, N), M = a's rows, or len(a_idx) when
  ``a_idx`` gathers them; a 2-D b (K, N) groups K (the weight gradient): the output is (G, M, N) and
  ``a_idx`` gathers a's columns. The group sizes stay on the device (no synchronization, graph-safe).
- ``gemm_out`` writes into a given ``out`` (any strides the kernels accept: its strides pick D's layout,
  e.g. column-major D) and passes a, b and out to `hgemm_sm90.gemm` as they are (its own batch rules
  apply; only a broadcast c is materialized; ``c=out`` is the in-place update ``out = alpha * a @ b +
  beta * out``). It exists for preallocated outputs, CUDA-graph static buffers and in-place
  accumulation; under ``torch.compile`` it is functionalized like any mutating custom op.

Each op has a fake (meta) implementation that computes the output's shape, dtype and (contiguous)
strides from the inputs' metadata, so the ops trace under ``torch.compile(fullgraph=True)``, FakeTensor
mode and meta tensors; it raises the same `InvalidArgumentError`s for bad shapes and dtypes as the real
one. The real implementation allocates with ``torch.empty`` on a's device and launches on torch's current
raw stream of that device (``torch._C._cuda_getCurrentRawStream``: the cheap route), with no
synchronization and no host copy, so it can be captured in a CUDA graph (``torch.cuda.graph`` makes its
capture stream current). As for any capture, run each new shape once before capturing, so that the
cubin is loaded outside the capture.

The ops are CUDA-only (a CPU tensor gets torch's "no kernel for this backend" error) and have no autograd
formula: calling them on tensors that require grad works forward, and backward raises.
"""

from __future__ import annotations

import threading

from .errors import InvalidArgumentError, MissingDependencyError
from .spec import DType

NAMESPACE = "hgemm_sm90"

SCHEMAS = {
    "gemm": "(Tensor a, Tensor b, Tensor? c=None, float alpha=1.0, float beta=0.0, "
    "bool fp8_fast_accum=False, ScalarType? out_dtype=None, bool fp16_accum=False, bool pdl=False, "
    "bool b_ready=False) -> Tensor",
    "mm": "(Tensor a, Tensor b, *, bool fp8_fast_accum=False, ScalarType? out_dtype=None, "
    "bool fp16_accum=False, bool pdl=False, bool b_ready=False) -> Tensor",
    "addmm": "(Tensor c, Tensor a, Tensor b, *, float beta=1.0, float alpha=1.0, bool fp8_fast_accum=False, "
    "ScalarType? out_dtype=None, bool fp16_accum=False, bool pdl=False, bool b_ready=False) -> Tensor",
    "bmm": "(Tensor a, Tensor b, *, bool fp8_fast_accum=False, ScalarType? out_dtype=None, "
    "bool fp16_accum=False, bool pdl=False, bool b_ready=False) -> Tensor",
    "gemm_out": "(Tensor a, Tensor b, Tensor(a!) out, Tensor? c=None, float alpha=1.0, float beta=0.0, "
    "bool fp8_fast_accum=False, bool fp16_accum=False, bool pdl=False, bool b_ready=False) -> ()",
    # a_idx is positional: torch.library refuses keyword-only Tensor arguments (torch 2.11).
    "grouped_mm": "(Tensor a, Tensor b, Tensor offs, Tensor? a_idx=None, *, bool fp8_fast_accum=False, "
    "ScalarType? out_dtype=None) -> Tensor",
}
"""Each op's schema (without its name), as passed to ``torch.library.custom_op``."""

_BY_ARRAY_NAME = {d.array_name: d for d in DType}  # "bfloat16" -> DType.bf16, ...
_INPUT_DTYPES = frozenset(d for d in DType if d is not DType.fp32)  # what A and B can be; any DType is a D


# --- shape and dtype rules: plain Python, shared by the fake and the real implementations --------------
# They take shapes as sequences of ints (SymInts under torch.compile: each comparison becomes a guard) and
# dtypes by torch's name, so the fake implementation can never disagree with the real one and the rules
# are testable without torch.


def dtype_name(dtype) -> str:
    """torch's name of a dtype (``torch.bfloat16`` -> ``"bfloat16"``), without importing torch."""
    return str(dtype).rpartition(".")[2]


def _dtype(what: str, name: str, allowed) -> DType:
    d = _BY_ARRAY_NAME.get(name)
    if d is None or d not in allowed:
        names = ", ".join(f"torch.{x.array_name}" for x in DType if x in allowed)
        raise InvalidArgumentError(f"{what} has dtype torch.{name}", f"pass {what} as one of {names}")
    return d


def output_dtype_name(a_dtype: str, b_dtype: str, out_dtype: str | None) -> str:
    """The output dtype (torch's name) of a GEMM of these input dtypes: ``out_dtype`` if given, else a's
    dtype for 16-bit inputs and bfloat16 for fp8 inputs. `InvalidArgumentError` for a dtype no kernel
    reads or writes."""
    a = _dtype("a", a_dtype, _INPUT_DTYPES)
    _dtype("b", b_dtype, _INPUT_DTYPES)
    if out_dtype is not None:
        return _dtype("out_dtype", out_dtype, DType).array_name
    return DType.bf16.array_name if a.is_float8 else a.array_name


def _shape(shape) -> str:
    return "(" + ", ".join(map(str, shape)) + ")"  # SymInts print as their expressions


def matmul_shape(a_shape, b_shape, op: str = "gemm") -> tuple:
    """The output shape of ``a @ b`` (``torch.matmul``'s rule for operands of two or more dimensions:
    batch dimensions broadcast), with ``op``'s own rank rule: mm takes 2-D operands, bmm 3-D ones with the
    same batch. `InvalidArgumentError` otherwise."""
    a_shape, b_shape = tuple(a_shape), tuple(b_shape)
    rank = {"mm": 2, "addmm": 2, "bmm": 3}.get(op)
    if rank is not None and (len(a_shape) != rank or len(b_shape) != rank):
        raise InvalidArgumentError(
            f"{op} takes {rank}-D a and b, got a {_shape(a_shape)} and b {_shape(b_shape)}",
            f"pass {rank}-D tensors, or use hgemm_sm90::gemm, which takes any batch dimensions",
        )
    if len(a_shape) < 2 or len(b_shape) < 2:
        raise InvalidArgumentError(
            f"a {_shape(a_shape)} and b {_shape(b_shape)}: both need at least 2 dimensions (..., M, K) "
            "and (..., K, N)",
            "unsqueeze vectors to 1 x K or K x 1 matrices",
        )
    if a_shape[-1] != b_shape[-2]:
        raise InvalidArgumentError(
            f"a {_shape(a_shape)} and b {_shape(b_shape)}: a has K = {a_shape[-1]} columns but b has "
            f"{b_shape[-2]} rows",
            "pass a (..., M, K) and b (..., K, N) with the same K (a linear layer's weight w of shape "
            "(N, K) is b = w.T)",
        )
    if op == "bmm" and a_shape[0] != b_shape[0]:
        raise InvalidArgumentError(
            f"bmm: a {_shape(a_shape)} and b {_shape(b_shape)} have different batch sizes",
            "pass the same batch size (hgemm_sm90::gemm broadcasts batch dimensions)",
        )
    batch = _broadcast(a_shape[:-2], b_shape[:-2], a_shape, b_shape)
    return (*batch, a_shape[-2], b_shape[-1])


def _broadcast(x: tuple, y: tuple, a_shape, b_shape) -> tuple:
    n = max(len(x), len(y))
    x, y = (1,) * (n - len(x)) + x, (1,) * (n - len(y)) + y
    out = []
    for i, (p, q) in enumerate(zip(x, y)):
        if p == q or q == 1:
            out.append(p)
        elif p == 1:
            out.append(q)
        else:
            raise InvalidArgumentError(
                f"the batch dimensions of a {_shape(a_shape)} and b {_shape(b_shape)} do not broadcast "
                f"(batch dimension {i}: {p} vs {q})",
                "pass batch dimensions that are equal or 1",
            )
    return tuple(out)


def grouped_shape(a_shape, b_shape, offs_shape, a_idx_shape=None) -> tuple:
    """The output shape of ``grouped_mm``: (rows, N) for a 3-D b (G, K, N), rows = a's or len(a_idx);
    (G, M, N) for a 2-D b (K, N), G = len(offs) - 1. `InvalidArgumentError` for other ranks or a K
    mismatch (the rest is `grouped_gemm`'s to check)."""
    a_shape, b_shape, offs_shape = tuple(a_shape), tuple(b_shape), tuple(offs_shape)
    if len(a_shape) != 2 or len(b_shape) not in (2, 3) or len(offs_shape) != 1:
        raise InvalidArgumentError(
            f"grouped_mm: a {_shape(a_shape)}, b {_shape(b_shape)}, offs {_shape(offs_shape)}",
            "pass a 2-D a, a 3-D b (G, K, N) to group rows or a 2-D b (K, N) to group K, and 1-D offs",
        )
    gathered_k = a_idx_shape is not None and len(b_shape) == 2
    k = tuple(a_idx_shape)[0] if gathered_k else a_shape[1]
    if k != b_shape[-2]:
        raise InvalidArgumentError(
            f"grouped_mm: a {_shape(a_shape)} and b {_shape(b_shape)} have different K",
            "pass b as (G, K, N) or (K, N) with a's K (w.transpose(-2, -1) of (G, N, K) weights)",
        )
    if len(b_shape) == 3:
        rows = a_shape[0] if a_idx_shape is None else tuple(a_idx_shape)[0]
        return (rows, b_shape[2])
    return (offs_shape[0] - 1, a_shape[0], b_shape[1])


def check_c(c_shape, out_shape, beta: float) -> None:
    """c (None for no C) must broadcast to the output shape; ``beta != 0`` needs a c."""
    if c_shape is None:
        if beta != 0.0:
            raise InvalidArgumentError(
                f"beta={beta!r} without c: the beta * c term has no c", "pass c, or leave beta at 0.0"
            )
        return
    c_shape, out_shape = tuple(c_shape), tuple(out_shape)
    fits = len(c_shape) <= len(out_shape) and all(
        p == 1 or p == q for p, q in zip(reversed(c_shape), reversed(out_shape))
    )
    if not fits:
        raise InvalidArgumentError(
            f"c {_shape(c_shape)} does not broadcast to the output shape {_shape(out_shape)}",
            "pass c with the output's shape, or one that broadcasts to it (e.g. a bias of shape (N,))",
        )


# --- registration ------------------------------------------------------------------------------------

_lock = threading.Lock()
_ops = None  # torch.ops.hgemm_sm90 once registered
_defs: dict = {}  # op name -> its torch.library CustomOpDef (kept alive here; for introspection)
# Set by register(), read by the implementations below (module globals rather than closures, so that the
# implementations' signatures can be checked against SCHEMAS without torch).
_torch = None
_raw_stream = None  # device index -> torch's current CUstream handle on it, as an int
_hgemm = None  # hgemm_sm90.gemm
_grouped = None  # hgemm_sm90.grouped_gemm


def register():
    """Define the ``hgemm_sm90`` torch operators (once per process; later calls return at once) and
    return their namespace, ``torch.ops.hgemm_sm90``. Imports torch; `MissingDependencyError` without it."""
    global _ops
    if _ops is not None:
        return _ops
    with _lock:
        if _ops is None:
            try:
                import torch
            except ImportError as e:
                raise MissingDependencyError(
                    f"hgemm_sm90.torch_ops needs torch, which cannot be imported ({e})",
                    "install torch (pip install torch), or call hgemm_sm90.gemm() with any DLPack or "
                    "__cuda_array_interface__ arrays instead",
                ) from None
            _define(torch)
            _ops = getattr(torch.ops, NAMESPACE)
    return _ops


def _define(torch) -> None:
    global _torch, _raw_stream, _hgemm, _grouped
    _torch, _hgemm = torch, _gemm_function()
    from .grouped_array_gemm import grouped_gemm as _grouped

    _raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if _raw_stream is None:  # an older torch without it: the slower public route to the same stream
        _raw_stream = lambda index: torch.cuda.current_stream(index).cuda_stream  # noqa: E731
    for name, (real, fake) in IMPLS.items():
        op = torch.library.custom_op(
            f"{NAMESPACE}::{name}",
            mutates_args=("out",) if name == "gemm_out" else (),
            device_types="cuda",
            schema=SCHEMAS[name],
        )(real)
        op.register_fake(fake)
        _defs[name] = op


def _gemm_function():
    """`hgemm_sm90.gemm`, the function (runtime/array_gemm.py)."""
    from .array_gemm import gemm

    return gemm


# --- the implementations -------------------------------------------------------------------------------
# One real and one fake implementation per op; their parameters mirror SCHEMAS (checked on the CPU by
# tests/runtime/test_torch_ops_static.py): the dispatcher passes keyword-only arguments by keyword.


def _output(a, b, c, beta, out_dtype, op):
    """(shape, torch dtype) of the op's output, after every check the fake and real implementations share."""
    shape = matmul_shape(a.shape, b.shape, op)
    name = output_dtype_name(dtype_name(a.dtype), dtype_name(b.dtype), _opt_name(out_dtype))
    check_c(None if c is None else c.shape, shape, beta)
    return shape, getattr(_torch, name)


def _new(a, b, c, beta, out_dtype, op):
    shape, dtype = _output(a, b, c, beta, out_dtype, op)
    return _torch.empty(shape, dtype=dtype, device=a.device)


def _fake(a, b, c, beta, out_dtype, op):
    shape, dtype = _output(a, b, c, beta, out_dtype, op)
    return a.new_empty(shape, dtype=dtype)  # contiguous, on a's (fake) device, like the real output


def _launch(
    a, b, out, c, alpha, beta, fp8_fast_accum, fold, fp16_accum=False, pdl=False, b_ready=False
) -> None:
    """out = alpha * a @ b + beta * c on torch's current stream of a's device; with ``fold``, first bring
    a, b and c to the 2-D or 3-D problem `hgemm_sm90.gemm` runs (out is contiguous then)."""
    if c is not None and beta == 0.0:
        c = None  # torch.addmm's rule: c is not read, so its NaNs do not reach out
    if out.numel() == 0:
        return
    if a.shape[-1] == 0:  # K = 0: no products, and the kernels need K >= 1
        if c is None:
            out.zero_()
        else:
            out.copy_(c.expand(out.shape) * beta)
        return
    if c is not None and c.shape != out.shape:  # a broadcast c has zero strides, which no kernel reads
        c = c.expand(out.shape).contiguous()
    if fold:
        a, b, out, c = _fold(a, b, out, c)
    kw = {} if c is None else {"c": c, "beta": beta}
    if fp16_accum:
        kw["fp16_accum"] = True
    if pdl or b_ready:
        kw.update(pdl=pdl, b_ready=b_ready)
    _hgemm(a, b, out, alpha=alpha, fp8_fast_accum=fp8_fast_accum, stream=_raw_stream(a.device.index), **kw)


def _fold(a, b, out, c):
    """(a, b, out, c) as the 2-D or 3-D problem `hgemm_sm90.gemm` runs, for a contiguous ``out`` of
    matmul's broadcast shape (*batch, M, N) and c of that shape: no batch stays 2-D; a 2-D b folds the
    batch into M (a view of a when its strides allow); otherwise a, b and c are expanded to the full
    batch and flattened to one batch dimension (views when they already have it and it collapses, else
    copies that keep each matrix's majorness)."""
    shape = out.shape
    batch, (m, n), k = shape[:-2], shape[-2:], a.shape[-1]
    if not batch:
        return a, b, out, c
    if b.dim() == 2:
        a = a.expand(*batch, m, k).reshape(-1, k)
        return a, b, out.view(-1, n), None if c is None else c.reshape(-1, n)
    a, b = _flat(a.expand(*batch, m, k)), _flat(b.expand(*batch, k, n))
    return a, b, out.view(-1, m, n), None if c is None else _flat(c)


def _flat(x):
    """x (*batch, R, C) as (L, R, C) with a real batch stride: a view when the batch dimensions collapse,
    else a copy (also when the batch is broadcast: the kernels need one matrix per batch). A copy of
    column-major matrices stays column-major: reshape's copies are row-major, and e.g. fp8 B must be
    K-major."""
    r, c = x.shape[-2:]
    col = x.stride(-1) != 1 and c != 1 and x.stride(-2) == 1
    y = x.mT.reshape(-1, c, r).mT if col else x.reshape(-1, r, c)
    if y.shape[0] > 1 and y.stride(0) == 0:
        y = y.mT.contiguous().mT if col else y.contiguous()
    return y


def _opt_name(dtype):
    return None if dtype is None else dtype_name(dtype)


def _gemm(
    a,
    b,
    c=None,
    alpha=1.0,
    beta=0.0,
    fp8_fast_accum=False,
    out_dtype=None,
    fp16_accum=False,
    pdl=False,
    b_ready=False,
):
    out = _new(a, b, c, beta, out_dtype, "gemm")
    _launch(a, b, out, c, alpha, beta, fp8_fast_accum, True, fp16_accum, pdl, b_ready)
    return out


def _gemm_fake(
    a,
    b,
    c=None,
    alpha=1.0,
    beta=0.0,
    fp8_fast_accum=False,
    out_dtype=None,
    fp16_accum=False,
    pdl=False,
    b_ready=False,
):
    return _fake(a, b, c, beta, out_dtype, "gemm")


def _mm(a, b, *, fp8_fast_accum=False, out_dtype=None, fp16_accum=False, pdl=False, b_ready=False):
    out = _new(a, b, None, 0.0, out_dtype, "mm")
    _launch(a, b, out, None, 1.0, 0.0, fp8_fast_accum, False, fp16_accum, pdl, b_ready)
    return out


def _mm_fake(a, b, *, fp8_fast_accum=False, out_dtype=None, fp16_accum=False, pdl=False, b_ready=False):
    return _fake(a, b, None, 0.0, out_dtype, "mm")


def _addmm(
    c,
    a,
    b,
    *,
    beta=1.0,
    alpha=1.0,
    fp8_fast_accum=False,
    out_dtype=None,
    fp16_accum=False,
    pdl=False,
    b_ready=False,
):
    out = _new(a, b, c, beta, out_dtype, "addmm")
    _launch(a, b, out, c, alpha, beta, fp8_fast_accum, True, fp16_accum, pdl, b_ready)
    return out


def _addmm_fake(
    c,
    a,
    b,
    *,
    beta=1.0,
    alpha=1.0,
    fp8_fast_accum=False,
    out_dtype=None,
    fp16_accum=False,
    pdl=False,
    b_ready=False,
):
    return _fake(a, b, c, beta, out_dtype, "addmm")


def _bmm(a, b, *, fp8_fast_accum=False, out_dtype=None, fp16_accum=False, pdl=False, b_ready=False):
    out = _new(a, b, None, 0.0, out_dtype, "bmm")
    _launch(a, b, out, None, 1.0, 0.0, fp8_fast_accum, False, fp16_accum, pdl, b_ready)
    return out


def _bmm_fake(a, b, *, fp8_fast_accum=False, out_dtype=None, fp16_accum=False, pdl=False, b_ready=False):
    return _fake(a, b, None, 0.0, out_dtype, "bmm")


def _gemm_out_check(a, b, out, c, beta) -> None:
    shape = matmul_shape(a.shape, b.shape, "gemm")
    output_dtype_name(dtype_name(a.dtype), dtype_name(b.dtype), dtype_name(out.dtype))
    if len(out.shape) != len(shape) or any(p != q for p, q in zip(out.shape, shape)):
        raise InvalidArgumentError(
            f"out has shape {_shape(out.shape)}, but a {_shape(a.shape)} @ b {_shape(b.shape)} is "
            f"{_shape(shape)}",
            "pass out with the product's shape",
        )
    check_c(None if c is None else c.shape, shape, beta)


def _gemm_out(
    a, b, out, c=None, alpha=1.0, beta=0.0, fp8_fast_accum=False, fp16_accum=False, pdl=False, b_ready=False
):
    _gemm_out_check(a, b, out, c, beta)
    _launch(a, b, out, c, alpha, beta, fp8_fast_accum, False, fp16_accum, pdl, b_ready)


def _gemm_out_fake(
    a, b, out, c=None, alpha=1.0, beta=0.0, fp8_fast_accum=False, fp16_accum=False, pdl=False, b_ready=False
):
    _gemm_out_check(a, b, out, c, beta)


def _grouped_new(a, b, offs, a_idx, out_dtype):
    shape = grouped_shape(a.shape, b.shape, offs.shape, None if a_idx is None else a_idx.shape)
    name = output_dtype_name(dtype_name(a.dtype), dtype_name(b.dtype), _opt_name(out_dtype))
    return shape, getattr(_torch, name)


def _grouped_mm(a, b, offs, a_idx=None, *, fp8_fast_accum=False, out_dtype=None):
    shape, dtype = _grouped_new(a, b, offs, a_idx, out_dtype)
    out = _torch.empty(shape, dtype=dtype, device=a.device)
    stream = _raw_stream(a.device.index)
    if b.dim() == 3:
        _grouped(a, b, offs, out, a_idx=a_idx, fp8_fast_accum=fp8_fast_accum, stream=stream)
    else:
        _grouped(a, b, out=out, cu_seqlens_k=offs, a_idx=a_idx, fp8_fast_accum=fp8_fast_accum, stream=stream)
    return out


def _grouped_mm_fake(a, b, offs, a_idx=None, *, fp8_fast_accum=False, out_dtype=None):
    shape, dtype = _grouped_new(a, b, offs, a_idx, out_dtype)
    return a.new_empty(shape, dtype=dtype)


IMPLS = {
    "gemm": (_gemm, _gemm_fake),
    "mm": (_mm, _mm_fake),
    "addmm": (_addmm, _addmm_fake),
    "bmm": (_bmm, _bmm_fake),
    "gemm_out": (_gemm_out, _gemm_out_fake),
    "grouped_mm": (_grouped_mm, _grouped_mm_fake),
}
"""op name -> (real implementation, fake implementation)."""
