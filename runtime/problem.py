"""Validate one GEMM problem against an instance and fill in defaults, before anything is launched.

Conventions (the seed kernel's): per batch, A is M x K, B is N x K, D is M x N. An operand's majorness
names its unit-stride extent ("k-major A": K is contiguous). Leading dimensions (`lda`, `ldb`, `ldd`) are
the strides, in elements, of the other extent; batch strides are in elements too. Both default to packed.

What is checked, each failure an `InvalidArgumentError` naming the fix:
- sizes are ints in 1 .. 2**31 - 1 (the kernel's extents are int32);
- pointers are non-null and 16-byte aligned, leading dimensions and batch strides are multiples of
  16 bytes (TMA's rules; the kernel was compiled assuming them, so violating them is undefined behaviour);
- a leading dimension is at least the contiguous extent (rows may not overlap), and D's batches do not
  overlap (two CTAs would race on the same outputs); input batches may overlap (a stride smaller than a
  batch re-reads data, which is well defined).
"""

from __future__ import annotations

from .errors import InvalidArgumentError

INT32_MAX = 2**31 - 1
TMA_ALIGN = 16
MAX_ADDRESS = 2**57  # a TMA descriptor holds address bits 4..56
_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4, "e4m3": 1, "e5m2": 1}
# (row extent, column extent) per operand
_EXTENTS = {"a": ("m", "k"), "b": ("n", "k"), "d": ("m", "n")}


class OperandLayout:
    """How one operand of an instance sits in memory: which extent is contiguous, element size."""

    __slots__ = ("name", "elem", "contiguous", "other")

    def __init__(self, name: str, dtype: str, major: str):
        rows, cols = _EXTENTS[name]
        self.name, self.elem = name, _BYTES[dtype]
        self.contiguous = rows if major == rows else cols
        self.other = cols if self.contiguous == rows else rows


def layouts(spec) -> tuple[OperandLayout, ...]:
    return (
        OperandLayout("a", spec["a_dtype"], spec["a_major"]),
        OperandLayout("b", spec["b_dtype"], spec["b_major"]),
        OperandLayout("d", spec["d_dtype"], spec["d_major"]),
    )


def _size(name: str, v, instance: str) -> int:
    if type(v) is not int:
        if isinstance(v, bool) or not hasattr(v, "__index__"):
            raise InvalidArgumentError(f"{name}={v!r} is not an integer", f"pass {name} as an int", instance)
        v = v.__index__()
    if not 1 <= v <= INT32_MAX:
        raise InvalidArgumentError(
            f"{name}={v} is outside 1..2**31-1",
            f"pass a positive {name} that fits in int32 (split larger problems into batches or pieces)",
            instance,
        )
    return v


def _stride(name: str, v, instance: str) -> int:
    """A batch stride: a positive int64 (the descriptor's 40-bit byte-stride limit is checked later)."""
    if type(v) is not int:
        if isinstance(v, bool) or not hasattr(v, "__index__"):
            raise InvalidArgumentError(f"{name}={v!r} is not an integer", f"pass {name} as an int", instance)
        v = v.__index__()
    if not 1 <= v < 2**63:
        raise InvalidArgumentError(f"{name}={v} is not positive", f"pass a positive {name} or None", instance)
    return v


def pointers(instance: str, ptrs) -> tuple[int, int, int]:
    """(a, b, d) as ints, each non-null, 16-byte aligned and inside TMA's 57-bit address range."""
    if not isinstance(ptrs, (tuple, list)) or len(ptrs) != 3:
        raise InvalidArgumentError(
            f"ptrs={ptrs!r} is not a sequence of three device pointers",
            "pass ptrs=(a, b, d) as ints, e.g. (a.data_ptr(), b.data_ptr(), d.data_ptr())",
            instance,
        )
    out = []
    for name, ptr in zip("abd", ptrs):
        if type(ptr) is not int:
            if isinstance(ptr, bool) or not hasattr(ptr, "__index__"):
                raise InvalidArgumentError(
                    f"pointer {name}={ptr!r} is not an int", "pass device pointers as ints", instance
                )
            ptr = ptr.__index__()
        if not 0 < ptr < MAX_ADDRESS or ptr % TMA_ALIGN:
            raise InvalidArgumentError(
                f"pointer {name}=0x{ptr:x} is not a {TMA_ALIGN}-byte aligned device address"
                if ptr
                else f"pointer {name} is null",
                f"pass a {TMA_ALIGN}-byte aligned device allocation (a view starting mid-row is not)",
                instance,
            )
        out.append(ptr)
    return out[0], out[1], out[2]


def resolve(instance: str, ops: tuple[OperandLayout, ...], m, n, k, batch, lds, batch_strides) -> dict:
    """Named extents and strides for `ParamPacker.pack` (+ the grid rule), validated; no pointers."""
    values = {"m": _size("m", m, instance), "n": _size("n", n, instance), "k": _size("k", k, instance)}
    values["l"] = _size("batch", batch, instance)
    for op, ld, bs in zip(ops, lds, batch_strides):
        name = op.name
        contiguous = values[op.contiguous]
        ld_name = f"ld{name}"
        ld = contiguous if ld is None else _size(ld_name, ld, instance)
        if ld < contiguous:
            raise InvalidArgumentError(
                f"{ld_name}={ld} is smaller than the contiguous extent {op.contiguous}={contiguous} of "
                f"{name}",
                f"pass {ld_name} >= {contiguous} (rows may not overlap), or None for packed",
                instance,
            )
        if (ld * op.elem) % TMA_ALIGN:
            raise InvalidArgumentError(
                f"{ld_name}={ld} elements is {ld * op.elem} bytes, not a multiple of {TMA_ALIGN}",
                f"pad {ld_name} to a multiple of {TMA_ALIGN // op.elem} elements",
                instance,
            )
        packed = values[op.other] * ld
        bs_name = f"batch_stride_{name}"
        if bs is None:
            bs = packed
        else:
            bs = _stride(bs_name, bs, instance)
            if (bs * op.elem) % TMA_ALIGN:
                raise InvalidArgumentError(
                    f"{bs_name}={bs} elements is {bs * op.elem} bytes, not a multiple of {TMA_ALIGN}",
                    f"pad {bs_name} to a multiple of {TMA_ALIGN // op.elem} elements",
                    instance,
                )
            if name == "d" and values["l"] > 1 and bs < packed:
                raise InvalidArgumentError(
                    f"{bs_name}={bs} is smaller than one batch of D ({op.other} x ld{name} = {packed})",
                    f"pass {bs_name} >= {packed}: overlapping output batches would race",
                    instance,
                )
        values[ld_name] = ld
        values[bs_name] = bs
    return values
