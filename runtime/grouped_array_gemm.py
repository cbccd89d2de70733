"""`grouped_gemm()`: one launch for a grouped GEMM (a mixture-of-experts layer or its weight gradient), on
GPU arrays, dispatched.

Semantics (as ``torch._grouped_mm(a, b, offs)``, with the offsets given with their leading 0):

- per-group rows (``cu_seqlens_m``; a 2-D a and a 3-D b): a is (M, K) with the rows of G groups one
  after another, b is (G, K, N), out is (M, N), and ``cu_seqlens_m`` holds G + 1 row offsets
  0 = s_0 <= s_1 <= ... <= s_G <= M; group g computes
  ``out[s_g:s_g+1] = alpha * a[s_g:s_g+1] @ b[g] + beta * c[s_g:s_g+1]`` (with ``a_idx``,
  ``a[a_idx[s_g:s_g+1]]``: the rows gathered in the load). Rows of out past s_G are not written.
- per-group K (``cu_seqlens_k``; a 2-D a and a 2-D b, the weight gradient of such a layer): a is (M, K)
  and b is (K, N) with the K positions of G groups one after another, out is (G, M, N), and group g
  computes ``out[g] = alpha * a[:, s_g:s_g+1] @ b[s_g:s_g+1] + beta * c[g]`` (zeros, plus beta * c[g],
  for an empty group). ``c=out, beta=1`` accumulates into an existing gradient; with ``a_idx`` the
  columns of a are gathered: ``a[:, a_idx[s_g:s_g+1]]``.

The offsets are read by the kernel only: no synchronization, and a CUDA graph captured once runs
whatever sizes they hold at replay.

Layouts: per-group rows take a, out and c row-major (unit stride on their last dim, any row pitch that
keeps TMA's 16-byte rule) and b with K contiguous in each group (``b[g]`` is the transpose of a row-major
N x K weight, e.g. ``w.transpose(-2, -1)`` of a (G, N, K) tensor), any group stride. Per-group K takes a
with K or M contiguous (``dy.t()`` of a (K, M) gradient has M contiguous) and b with K or N contiguous,
out and c row-major in each group. The instance comes from `select_grouped()` (hgemm_sm90.dispatch);
`launch()` checks the rest and its errors surface unchanged. Operands are read through
runtime/arrays.py, so torch tensors and any ``__cuda_array_interface__`` or DLPack array work;
``out=None`` allocates with torch (torch inputs only).
"""

from __future__ import annotations

import sys

from .api import launch_general
from .arrays import view
from .dispatch import select_grouped
from .errors import InvalidArgumentError
from .spec import DType
from .stream import stream_handle


def grouped_gemm(
    a,
    b,
    cu_seqlens_m=None,
    out=None,
    *,
    cu_seqlens_k=None,
    a_idx=None,
    c=None,
    alpha=1.0,
    beta=0.0,
    fp8_fast_accum=False,
    stream=None,
):
    """A grouped GEMM in one launch; returns out (module doc for the two forms).

    Give exactly one of cu_seqlens_m (a: (M, K), b: (G, K, N), out and c: (M, N)) and cu_seqlens_k (a:
    (M, K), b: (K, N), out and c: (G, M, N)): a CUDA int32 torch tensor of shape (G + 1,), or the int
    device address of G + 1 contiguous int32 (G comes from b under cu_seqlens_m, from out under
    cu_seqlens_k). out=None (torch only) is allocated, bf16 for fp8 inputs, else a's dtype. c: added as
    beta * c (c may be out itself). fp8_fast_accum: for fp8 inputs, accumulate without periodic
    promotion. stream: as `gemm()` (None: torch's current stream for torch tensors, else the legacy
    default stream). Asynchronous; raises an `HgemmError` before launching anything.

    a_idx: gather A (a mixture-of-experts layer's token permutation fused into the load). Per-group
    rows: row i of the groups' A is ``a[a_idx[i]]``, so out has len(a_idx) rows while a holds each token
    once (a CUDA int32 tensor, or the int device address of out's row count of int32s; K must be a
    multiple of the gathering instance's tile K). Per-group K: column p of the groups' A is
    ``a[:, a_idx[p]]``, so b's K (its rows) is len(a_idx) while a holds each token's column once (a
    needs M contiguous, e.g. ``x.t()``). Indices outside a are clamped into it."""
    if fp8_fast_accum is not False and fp8_fast_accum is not True:
        raise InvalidArgumentError(f"fp8_fast_accum={fp8_fast_accum!r}", "pass True or False")
    if (cu_seqlens_m is None) == (cu_seqlens_k is None):
        raise InvalidArgumentError(
            "both cu_seqlens_m and cu_seqlens_k given" if cu_seqlens_m is not None else "no offsets given",
            "pass cu_seqlens_m (groups of rows: a (M, K), b (G, K, N)) or cu_seqlens_k (groups of K: "
            "a (M, K), b (K, N), out (G, M, N)), not both",
        )
    if c is None and beta != 0.0:
        raise InvalidArgumentError(f"beta={beta!r} without c", "pass c= (or leave beta at 0.0)")
    va, vb = view(a, "a"), view(b, "b")
    fast = fp8_fast_accum and va.dtype.is_float8
    if cu_seqlens_k is not None:
        return _grouped_k(a, va, vb, cu_seqlens_k, out, a_idx, c, alpha, beta, fast, stream)
    if len(va.shape) != 2 or len(vb.shape) != 3:
        raise InvalidArgumentError(
            f"a has shape {va.shape} and b {vb.shape}: a grouped GEMM over rows takes a 2-D a (M, K) and a "
            "3-D b (G, K, N)",
            "pass the tokens of all groups as one (M, K) matrix and the weights as (G, K, N)",
        )
    a_rows, k = va.shape
    groups, kb, n = vb.shape
    m = a_rows if a_idx is None else _gathered_rows(a_idx, out)
    if kb != k:
        raise InvalidArgumentError(
            f"a is (M, K) = {va.shape} but b[g] is (K, N) = {vb.shape[1:]}", "make K agree"
        )
    offsets = _int32_address(cu_seqlens_m, groups + 1, "cu_seqlens_m")
    if va.strides[1] != 1 and k > 1:
        raise InvalidArgumentError(f"a has strides {va.strides}: K is not contiguous", "pass a row-major a")
    if vb.strides[1] != 1 and k > 1:
        raise InvalidArgumentError(
            f"b has strides {vb.strides}: K is not contiguous in each group",
            "pass b as the transpose of row-major (G, N, K) weights (w.transpose(-2, -1))",
        )
    out = _out(a, va, out, (m, n))
    vo = _row_major(out, "out", (m, n))
    vc = _row_major(c, "c", (m, n))
    indices = None if a_idx is None else _int32_address(a_idx, m, "a_idx")
    if m == 0 or n == 0 or a_rows == 0:
        return out
    choice = select_grouped(
        m,
        n,
        k,
        groups,
        a_dtype=va.dtype,
        b_dtype=vb.dtype,
        d_dtype=vo.dtype,
        c_dtype=None if vc is None else vc.dtype,
        fp8_fast_accum=fast,
        gather_a=indices is not None,
    )
    launch_general(
        choice.instance_id,
        (va.ptr, vb.ptr, vo.ptr),
        _stream(a, stream),
        m=m,
        n=n,
        k=k,
        lda=va.strides[0] if a_rows > 1 else None,
        ldb=vb.strides[2] if n > 1 else None,
        ldd=vo.strides[0] if m > 1 else None,
        ldc=None if vc is None or m <= 1 else vc.strides[0],
        batch_stride_b=vb.strides[0] if groups > 1 else None,
        c=None if vc is None else vc.ptr,
        alpha=alpha,
        beta=beta,
        cu_seqlens_m=offsets,
        num_groups=groups,
        a_idx=indices,
        a_rows=None if indices is None else a_rows,
    )
    return out


def _grouped_k(a, va, vb, cu_seqlens_k, out, a_idx, c, alpha, beta, fast, stream):
    """grouped_gemm's per-group K form (the weight gradient): a (M, K), b (K, N), out and c (G, M, N)."""
    if len(va.shape) != 2 or len(vb.shape) != 2:
        raise InvalidArgumentError(
            f"a has shape {va.shape} and b {vb.shape}: a grouped GEMM over K takes a 2-D a (M, K) and a "
            "2-D b (K, N)",
            "pass every group's K positions one after another along K of a and b",
        )
    (m, a_cols), (k, n) = va.shape, vb.shape
    if a_idx is None and a_cols != k:
        raise InvalidArgumentError(f"a is (M, K) = {va.shape} but b is (K, N) = {vb.shape}", "make K agree")
    if out is None:
        raise InvalidArgumentError(
            "out=None with cu_seqlens_k: the group count G is out's first extent",
            "pass out=, a (G, M, N) array (torch.empty(G, M, N, ...))",
        )
    vo = view(out, "out")
    if len(vo.shape) != 3:
        raise InvalidArgumentError(f"out has shape {vo.shape}", "pass a (G, M, N) out")
    groups = vo.shape[0]
    _check_row_major(vo, "out", (groups, m, n))
    vc = _row_major(c, "c", (groups, m, n))
    # Which extent of each operand is contiguous decides the instance's layout (a: K or M, b: K or N).
    a_major = _major(va, "a", ("m", "k"))
    b_major = _major(vb, "b", ("k", "n"))
    offsets = _int32_address(cu_seqlens_k, groups + 1, "cu_seqlens_k")
    indices = None
    if a_idx is not None:  # column p of the groups' A is a[:, a_idx[p]]: whole M columns, M contiguous
        if a_major != "m":
            raise InvalidArgumentError(
                f"a_idx with cu_seqlens_k and a of strides {va.strides}: gathered K positions are copied as "
                "whole columns of a, which needs M contiguous",
                "pass a as the transpose of a row-major (tokens, M) array (x.t())",
            )
        indices = _int32_address(a_idx, k, "a_idx")
    if m == 0 or n == 0 or groups == 0:
        return out
    if k == 0:  # there is no A or B to read, but out must still be written
        raise InvalidArgumentError(
            "K = 0 with cu_seqlens_k: every group is empty, so out[g] = beta * c[g]",
            "fill out directly (out.zero_(), or out.copy_(beta * c)); the kernel needs K >= 1",
        )
    choice = select_grouped(
        m,
        n,
        k,
        groups,
        a_dtype=va.dtype,
        b_dtype=vb.dtype,
        d_dtype=vo.dtype,
        a_major=a_major,
        b_major=b_major,
        c_dtype=None if vc is None else vc.dtype,
        fp8_fast_accum=fast,
        gather_a=indices is not None,
        varlen="k",
    )
    launch_general(
        choice.instance_id,
        (va.ptr, vb.ptr, vo.ptr),
        _stream(a, stream),
        m=m,
        n=n,
        k=k,
        lda=va.strides[0] if a_major == "k" else va.strides[1],
        ldb=vb.strides[1] if b_major == "k" else vb.strides[0],
        ldd=vo.strides[1],
        ldc=None if vc is None else vc.strides[1],
        batch_stride_d=vo.strides[0] if groups > 1 else None,
        batch_stride_c=None if vc is None or groups <= 1 else vc.strides[0],
        c=None if vc is None else vc.ptr,
        alpha=alpha,
        beta=beta,
        cu_seqlens_k=offsets,
        num_groups=groups,
        a_idx=indices,
        a_cols=None if indices is None else a_cols,
    )
    return out


def _major(v, name: str, extents: tuple[str, str]) -> str:
    """Which of a 2-D operand's extents (rows, cols named by `extents`) is contiguous."""
    if v.strides[1] == 1 or v.shape[1] <= 1:
        return extents[1]
    if v.strides[0] == 1 or v.shape[0] <= 1:
        return extents[0]
    raise InvalidArgumentError(
        f"{name} has strides {v.strides}: neither extent is contiguous",
        f"pass {name}.contiguous() (or a transposed view of a contiguous array)",
    )


def _row_major(x, name: str, shape: tuple[int, ...]):
    """The view of out or c (None: None), which must have `shape` and a unit stride on its last dim."""
    return None if x is None else _check_row_major(view(x, name), name, shape)


def _check_row_major(v, name: str, shape: tuple[int, ...]):
    """`v` (an array view), after checking that it has `shape` and a unit stride on its last dim."""
    if v.shape != shape or (v.strides[-1] != 1 and shape[-1] > 1):
        raise InvalidArgumentError(
            f"{name} has shape {v.shape} and strides {v.strides}", f"pass a row-major {shape} {name}"
        )
    return v


def _out(a, va, out, shape):
    """out, or (out=None, torch inputs) a new torch tensor of `shape`: bf16 for fp8 a, else a's dtype."""
    if out is not None:
        return out
    torch = sys.modules.get("torch")
    if torch is None or not type(a).__module__.startswith("torch"):
        raise InvalidArgumentError("out=None for a non-torch array", f"pass out=, a {shape} array")
    d_dtype = DType.bf16 if va.dtype.is_float8 else va.dtype
    return torch.empty(shape, dtype=getattr(torch, d_dtype.array_name), device=a.device)


def _stream(a, stream) -> int:
    """The stream handle: `stream`, else torch's current stream for a torch a, else the legacy default."""
    if stream is None:
        torch = sys.modules.get("torch")
        on_torch = torch is not None and type(a).__module__.startswith("torch")
        stream = torch.cuda.current_stream(a.device).cuda_stream if on_torch else 0
    return stream_handle(stream)


def _gathered_rows(a_idx, out) -> int:
    """The rows of out when A is gathered: len(a_idx), or out's rows when a_idx is a raw address."""
    if type(a_idx) is int:
        if out is None:
            raise InvalidArgumentError(
                "a_idx is a raw address and out is None: the row count is unknown",
                "pass a_idx as a CUDA int32 tensor, or pass out=",
            )
        return view(out, "out").shape[0]
    shape = tuple(getattr(a_idx, "shape", ()))
    if len(shape) != 1:
        raise InvalidArgumentError(f"a_idx has shape {shape}", "pass a 1-D CUDA int32 tensor of row indices")
    return shape[0]


def _int32_address(x, length: int, name: str) -> int:
    """The device address of `length` contiguous int32s: a torch CUDA int32 tensor of that shape, or an
    int address (checked by `launch()`)."""
    if type(x) is int:
        return x
    if not type(x).__module__.startswith("torch"):
        raise InvalidArgumentError(
            f"{name} is a {type(x).__name__}",
            "pass a CUDA int32 torch tensor, or its device address as an int",
        )
    torch = sys.modules["torch"]
    if x.dtype != torch.int32 or not x.is_cuda or tuple(x.shape) != (length,):
        raise InvalidArgumentError(
            f"{name} is a {x.dtype} tensor of shape {tuple(x.shape)} on {x.device}",
            f"pass {length} int32 values as a CUDA int32 tensor of shape ({length},)",
        )
    if length > 1 and x.stride(0) != 1:
        raise InvalidArgumentError(f"{name} is not contiguous", f"pass {name}.contiguous()")
    return x.data_ptr()
