"""`grouped_gemm()`: one launch for a grouped GEMM (a mixture-of-experts layer), on GPU arrays, dispatched.

Semantics (as ``torch._grouped_mm(a, b, offs)`` for a 2-D a and a 3-D b, with the offsets given with their
leading 0): a is (M, K) with the rows of G groups one after another, b is (G, K, N), out is (M, N), and
``cu_seqlens_m`` is a device int32 array of G + 1 row offsets 0 = s_0 <= s_1 <= ... <= s_G <= M; group g
computes ``out[s_g:s_g+1] = alpha * a[s_g:s_g+1] @ b[g]`` (with ``a_idx``, ``a[a_idx[s_g:s_g+1]]``: the
rows gathered in the load). The offsets are read by the kernel only: no
synchronization, and a CUDA graph captured once runs whatever sizes they hold at replay. Rows of out past
s_G are not written.

Layouts: a and out row-major (unit stride on their last dim, any row pitch that keeps TMA's 16-byte rule);
b with K contiguous in each group (``b[g]`` is the transpose of a row-major N x K weight, e.g.
``w.transpose(-2, -1)`` of a (G, N, K) tensor), any group stride. The instance comes from
`select_grouped()` (hgemm_sm90.dispatch); `launch()` checks the rest and its errors surface unchanged.
Operands are read through runtime/arrays.py, so torch tensors and any ``__cuda_array_interface__`` or
DLPack array work; ``out=None`` allocates with torch (torch inputs only).
"""

from __future__ import annotations

import sys

from .api import launch_general
from .arrays import view
from .dispatch import select_grouped
from .errors import InvalidArgumentError
from .spec import DType
from .stream import stream_handle


def grouped_gemm(a, b, cu_seqlens_m, out=None, *, a_idx=None, alpha=1.0, fp8_fast_accum=False, stream=None):
    """``out[s_g:s_g+1] = alpha * a[s_g:s_g+1] @ b[g]`` for every group g; returns out (module doc).

    a: (M, K), b: (G, K, N), cu_seqlens_m: a CUDA int32 torch tensor of shape (G + 1,) (or the int device
    address of G + 1 contiguous int32), out: (M, N) or None (torch only:
    allocated, bf16 for fp8 inputs, else a's dtype). fp8_fast_accum: for fp8 inputs, accumulate without
    periodic promotion. stream: as `gemm()` (None: torch's current stream for torch tensors, else the
    legacy default stream). Asynchronous; raises an `HgemmError` before launching anything.

    a_idx: gather A's rows (a mixture-of-experts layer's token permutation fused into the load): row i of
    the groups' A is ``a[a_idx[i]]``, so out has len(a_idx) rows while a holds each token once (a CUDA
    int32 tensor, or the int device address of out's row count of int32s; K must be a multiple of the
    gathering instance's tile K). Indices outside [0, rows of a) are clamped into it."""
    if fp8_fast_accum is not False and fp8_fast_accum is not True:
        raise InvalidArgumentError(f"fp8_fast_accum={fp8_fast_accum!r}", "pass True or False")
    va, vb = view(a, "a"), view(b, "b")
    if len(va.shape) != 2 or len(vb.shape) != 3:
        raise InvalidArgumentError(
            f"a has shape {va.shape} and b {vb.shape}: a grouped GEMM takes a 2-D a (M, K) and a 3-D b "
            "(G, K, N)",
            "pass the tokens of all groups as one (M, K) matrix and the weights as (G, K, N)",
        )
    a_rows, k = va.shape
    groups, kb, n = vb.shape
    m = a_rows if a_idx is None else _gathered_rows(a_idx, out)
    if kb != k:
        raise InvalidArgumentError(
            f"a is (M, K) = {va.shape} but b[g] is (K, N) = {vb.shape[1:]}", "make K agree"
        )
    offsets = _offsets_address(cu_seqlens_m, groups)
    if va.strides[1] != 1 and k > 1:
        raise InvalidArgumentError(f"a has strides {va.strides}: K is not contiguous", "pass a row-major a")
    if vb.strides[1] != 1 and k > 1:
        raise InvalidArgumentError(
            f"b has strides {vb.strides}: K is not contiguous in each group",
            "pass b as the transpose of row-major (G, N, K) weights (w.transpose(-2, -1))",
        )
    fast = fp8_fast_accum and va.dtype.is_float8
    d_dtype = (DType.bf16 if va.dtype.is_float8 else va.dtype) if out is None else view(out, "out").dtype
    if out is None:
        torch = sys.modules.get("torch")
        if torch is None or not type(a).__module__.startswith("torch"):
            raise InvalidArgumentError("out=None for a non-torch array", "pass out=, an (M, N) array")
        out = torch.empty((m, n), dtype=getattr(torch, d_dtype.array_name), device=a.device)
    indices = None if a_idx is None else _int32_address(a_idx, m, "a_idx")
    vo = view(out, "out")
    if vo.shape != (m, n) or (vo.strides[1] != 1 and n > 1):
        raise InvalidArgumentError(
            f"out has shape {vo.shape} and strides {vo.strides}", f"pass a row-major ({m}, {n}) out"
        )
    if m == 0 or n == 0 or a_rows == 0:
        return out
    choice = select_grouped(
        m,
        n,
        k,
        groups,
        a_dtype=va.dtype,
        b_dtype=vb.dtype,
        d_dtype=d_dtype,
        fp8_fast_accum=fast,
        gather_a=indices is not None,
    )
    if stream is None:
        torch = sys.modules.get("torch")
        on_torch = torch is not None and type(a).__module__.startswith("torch")
        stream = torch.cuda.current_stream(a.device).cuda_stream if on_torch else 0
    launch_general(
        choice.instance_id,
        (va.ptr, vb.ptr, vo.ptr),
        stream_handle(stream),
        m=m,
        n=n,
        k=k,
        lda=va.strides[0] if a_rows > 1 else None,
        ldb=vb.strides[2] if n > 1 else None,
        ldd=vo.strides[0] if m > 1 else None,
        batch_stride_b=vb.strides[0] if groups > 1 else None,
        alpha=alpha,
        cu_seqlens_m=offsets,
        num_groups=groups,
        a_idx=indices,
        a_rows=None if indices is None else a_rows,
    )
    return out


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


def _offsets_address(offsets, groups: int) -> int:
    """The device address of the G + 1 int32 row offsets: a torch CUDA int32 tensor of that many
    contiguous elements, or an int address (checked by `launch()`)."""
    if type(offsets) is int:
        return offsets
    if not type(offsets).__module__.startswith("torch"):
        raise InvalidArgumentError(
            f"cu_seqlens_m is a {type(offsets).__name__}",
            "pass a CUDA int32 torch tensor of the G + 1 row offsets, or their device address as an int",
        )
    torch = sys.modules["torch"]
    if offsets.dtype != torch.int32 or not offsets.is_cuda or tuple(offsets.shape) != (groups + 1,):
        raise InvalidArgumentError(
            f"cu_seqlens_m is a {offsets.dtype} tensor of shape {tuple(offsets.shape)} on {offsets.device}; "
            f"b has {groups} groups",
            f"pass the {groups + 1} row offsets (0 first) as a CUDA int32 tensor",
        )
    if groups and offsets.stride(0) != 1:
        raise InvalidArgumentError("cu_seqlens_m is not contiguous", "pass cu_seqlens_m.contiguous()")
    return offsets.data_ptr()
