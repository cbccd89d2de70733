"""What test_gemm_api.py and test_torch_ops.py share: the dtype/layout classes the wheel ships, operands in
`hgemm_sm90.gemm()`'s matmul convention, objects that expose a torch tensor through one array protocol
only, and the bridge from plain tensors to gemm_util's numerics check.

Conventions. `gemm()` takes a (..., M, K), b (..., K, N), out and c (..., M, N), like ``torch.matmul``;
the kernels (and gemm_util's problems) hold B as N x K. So a gemm_util problem ``p`` is called as
``gemm(p.a.t, p.b.t.mT, p.d.t)``: A k-major is a row-major (M, K) tensor and A m-major its transposed
storage, B k-major is ``w.T`` for a row-major (N, K) ``w`` (a linear layer's weight) and B n-major a
row-major (K, N) tensor, D/C n-major are row-major (M, N) tensors. Every numerics check goes through
``gemm_util.check_gemm`` (fp64 reference, budget relative to torch's own GEMM of the same inputs): no
tolerance of its own here.

Importing this module skips the importing test module where gemm_util does (no torch, CUDA, sm_90 or
hgemm_sm90).
"""

from __future__ import annotations

import pytest

from tests.gpu import gemm_util as g

torch = g.torch
hgemm_sm90 = g.hgemm_sm90

BY_ID = {i.id: i for i in g.INSTANCES}


# --- the dtype/layout classes ----------------------------------------------------------------------------


def class_name(inst) -> str:
    """The class of ``inst`` as a test id: dtypes, A/B/D majors, C, fp8 or fp16 accumulation (no tile)."""
    name = f"{inst.a_dtype}_{inst.b_dtype}_{inst.d_dtype}_{inst.a_major}{inst.b_major}{inst.d_major}"
    if inst.has_c:
        name += f"_c{inst.c_dtype}{inst.c_major}"
    name += "_fastacc" if g.is_fp8(inst) and inst.fp8_fast_accum else ""
    return name + ("_fp16acc" if g.fp16_accumulating(inst) else "")


def classes(instances=g.INSTANCES) -> list:
    """One representative instance (the first by id) per class the installation ships: what an instance
    computes (gemm_util.family) decides whether gemm() can run a problem, the tile only how fast."""
    first: dict[tuple, object] = {}
    for inst in sorted(instances, key=g._id):
        first.setdefault(g.family(inst), inst)
    return sorted(first.values(), key=class_name)


def class_args(inst) -> dict:
    """``inst``'s class as `hgemm_sm90.select`'s keyword arguments."""
    return {
        "a_dtype": str(inst.a_dtype),
        "b_dtype": str(inst.b_dtype),
        "d_dtype": str(inst.d_dtype),
        "a_major": str(inst.a_major),
        "b_major": str(inst.b_major),
        "d_major": str(inst.d_major),
        "c_dtype": None if inst.c_dtype is None else str(inst.c_dtype),
        "c_major": None if inst.c_major is None else str(inst.c_major),
        "fp8_fast_accum": bool(g.is_fp8(inst) and inst.fp8_fast_accum),
        "fp16_accum": g.fp16_accumulating(inst),
    }


def selected(m: int, n: int, k: int, batch: int = 1, **cls):
    """The spec of the instance `select()` names for this problem class and size: what gemm() dispatches
    to (for packed operands), and so what a numerics row reports. Asserted to be of the requested class,
    so the check's budget (which depends only on the class) is the right one."""
    choice = hgemm_sm90.select(m, n, k, batch=batch, **cls)
    spec = BY_ID[choice.instance_id]
    got = class_args(spec)
    want = {**got, **{key: value for key, value in cls.items() if value is not None}}
    assert got == want, f"select() named {spec.id} for class {cls}"
    return spec


# --- operands --------------------------------------------------------------------------------------------


def rand(shape, dtype, gen, std: float = 1.0, transposed: bool = False) -> torch.Tensor:
    """Random values on ``dtype``'s grid (gemm_util.random_values), in a fresh tensor of ``shape``; with
    ``transposed`` its storage is the transpose of the last two dimensions (column-major matrices)."""
    shape = tuple(shape)
    store = shape[:-2] + (shape[-1], shape[-2]) if transposed else shape
    t = g.random_values(store, dtype, gen, std).to(dtype)
    return t.mT if transposed else t


def _flat(x: torch.Tensor, batch: tuple) -> torch.Tensor:
    """x broadcast to ``batch`` and flattened to (L, rows, cols), as the reference wants it."""
    return x.expand(*batch, *x.shape[-2:]).reshape(-1, *x.shape[-2:])


def _operand(t: torch.Tensor) -> g.Operand:
    # check_gemm reads only .t; the buffer facts describe guard regions, which plain tensors do not have.
    return g.Operand(buf=t, t=t, rows=t.shape[1], cols=t.shape[2], ld=0, batch_stride=0)


def problem_of(
    inst,
    name: str,
    a: torch.Tensor,
    b: torch.Tensor,
    out: torch.Tensor,
    c_values: torch.Tensor | None = None,
    alpha: float | None = None,
    beta: float | None = None,
) -> g.Problem:
    """A gemm_util problem over plain tensors in gemm()'s convention, for gemm_util.check_gemm: ``out``
    the result, ``c_values`` C as it was before the call (fp32; it broadcasts to out), ``alpha``/``beta``
    None where they were left at their defaults. Batch dimensions of a and b broadcast to out's."""
    batch = tuple(out.shape[:-2])
    a3, b3, d3 = _flat(a, batch), _flat(b, batch).mT, _flat(out, batch)
    case = g.Case(name, a3.shape[1], b3.shape[1], a3.shape[2], batch=a3.shape[0])
    c3 = None if c_values is None else _flat(c_values.float().expand(out.shape), batch).clone()
    mode = None if c_values is None else "separate"
    scales = g.Scales(alpha, beta, mode, 1.0, 1.0)
    c_op = None if c3 is None else _operand(c3)
    return g.Problem(inst, case, _operand(a3), _operand(b3), _operand(d3), c_op, scales, c3)


# --- one array protocol only -----------------------------------------------------------------------------

# __cuda_array_interface__ type strings: NumPy's codes where the type has one; bf16 and fp8 have none, and
# producers send ml_dtypes' void codes (torch does for bf16).
_CAI_TYPESTR = {
    "bfloat16": "<V2",
    "float16": "<f2",
    "float32": "<f4",
    "float8_e4m3fn": "|V1",
    "float8_e5m2": "|V1",
}


class CudaArrayInterfaceOnly:
    """A torch tensor seen through ``__cuda_array_interface__`` alone, as gemm() sees a CuPy or Numba
    array: torch's own dict for the tensor where torch exports one, else the same dict built here."""

    def __init__(self, t: torch.Tensor):
        self.tensor = t  # keeps the memory alive; gemm() must not look here (not a protocol)

    @property
    def __cuda_array_interface__(self) -> dict:
        t = self.tensor
        try:
            return t.__cuda_array_interface__
        except (KeyError, TypeError):  # torch has no type string for fp8
            item = t.element_size()
            return {
                "shape": tuple(t.shape),
                "typestr": _CAI_TYPESTR[str(t.dtype).removeprefix("torch.")],
                "strides": None if t.is_contiguous() else tuple(s * item for s in t.stride()),
                "data": (t.data_ptr(), False),
                "version": 2,
            }


class DLPackOnly:
    """A torch tensor seen through DLPack alone (``__dlpack__`` / ``__dlpack_device__`` delegating to the
    tensor), as gemm() sees a JAX array or any other DLPack producer."""

    def __init__(self, t: torch.Tensor):
        self.tensor = t

    def __dlpack__(self, **kwargs):
        return self.tensor.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.tensor.__dlpack_device__()


def cai_readable(inst) -> bool:
    """Whether every operand of ``inst``'s class has a __cuda_array_interface__ type string gemm() reads:
    the protocol names fp16 and fp32 only (bf16 and fp8 are void types there)."""
    dtypes = {inst.a_dtype, inst.b_dtype, inst.d_dtype} | ({inst.c_dtype} if inst.has_c else set())
    return dtypes <= {"fp16", "fp32"}


def dlpack_unsupported(inst) -> str | None:
    """Why torch cannot export some operand dtype of ``inst``'s class through DLPack, or None."""
    dtypes = {inst.a_dtype, inst.b_dtype, inst.d_dtype} | ({inst.c_dtype} if inst.has_c else set())
    for d in sorted(dtypes):
        try:
            torch.empty(16, dtype=g.TORCH_DTYPE[d], device=g.DEVICE).__dlpack__()
        except (RuntimeError, TypeError, ValueError, BufferError) as e:  # torch's refusal, not gemm()'s
            return f"torch {torch.__version__} cannot export {d} through DLPack ({type(e).__name__}: {e})"
    return None


def skip_unless_dlpack(inst) -> None:
    why = dlpack_unsupported(inst)
    if why:
        pytest.skip(why)
