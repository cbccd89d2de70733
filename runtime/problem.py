"""Validate one GEMM problem against an instance and fill in defaults, before anything is launched.

Conventions (the seed kernel's): per batch, A is M x K, B is N x K, D is M x N, and C (instances whose
epilogue reads it: D = alpha * acc + beta * C) is M x N with its own dtype and major. An operand's
majorness names its unit-stride extent ("k-major A": K is contiguous). Leading dimensions (`lda`, `ldb`,
`ldd`, `ldc`) are the strides, in elements, of the other extent; batch strides are in elements too. Both
default to packed.

What is checked, each failure an `InvalidArgumentError` naming the fix:
- sizes are ints in 1 .. 2**31 - 1 (the kernel's extents are int32);
- pointers are non-null and 16-byte aligned; leading dimensions, batch strides and every operand's
  contiguous extent are multiples of 16 bytes (TMA's rules; the kernel was compiled assuming them, so
  violating them is undefined behaviour — a ragged contiguous extent of D was seen overwriting row padding);
- a leading dimension is at least the contiguous extent (rows may not overlap), and D's batches do not
  overlap (two CTAs would race on the same outputs); input batches (A, B, C) may overlap (a stride smaller
  than a batch re-reads data, which is well defined);
- D shares no byte with A, B or C (CTAs would overwrite inputs other CTAs still read), except that C may
  be D itself: the same pointer with the same dtype, major, leading dimension and batch stride (an
  in-place update; each CTA reads its C tile before it writes the same D tile). This needs the pointers,
  so it runs per launch: `footprints` does the shape arithmetic once per shape, and `check_overlaps`
  (called only when two byte ranges intersect) decides.
"""

from __future__ import annotations

from .contract import TMA_ALIGN_BYTES as TMA_ALIGN
from .errors import InvalidArgumentError
from .spec import OPERAND_EXTENTS, GemmSpec

INT32_MAX = 2**31 - 1
MAX_ADDRESS = 2**57  # a TMA descriptor holds address bits 4..56


class OperandLayout:
    """How one operand of an instance sits in memory: which extent is contiguous, element size."""

    __slots__ = ("name", "dtype", "major", "elem", "contiguous", "other")

    def __init__(self, spec: GemmSpec, name: str):
        rows, cols = OPERAND_EXTENTS[name]
        self.name, self.dtype, self.major = name, spec.dtype_of(name), spec.major_of(name)
        self.elem = self.dtype.bytes
        self.contiguous = spec.contiguous_extent(name)
        self.other = cols if self.contiguous == rows else rows


def layouts(spec: GemmSpec) -> tuple[OperandLayout, ...]:
    """The instance's operands in launch order: A, B, D, then C if the epilogue reads it."""
    return tuple(OperandLayout(spec, op) for op in spec.operands)


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


def pointer(instance: str, name: str, ptr) -> int:
    """One device pointer as an int: non-null, 16-byte aligned and inside TMA's 57-bit address range."""
    if type(ptr) is not int:
        if isinstance(ptr, bool) or not hasattr(ptr, "__index__"):
            raise InvalidArgumentError(
                f"pointer {name}={ptr!r} is not an int", "pass device pointers as ints", instance
            )
        ptr = ptr.__index__()
    if not 0 < ptr < MAX_ADDRESS or ptr % TMA_ALIGN:
        raise InvalidArgumentError(
            f"pointer {name} is null" if ptr == 0
            else f"pointer {name}={ptr:#x} is negative" if ptr < 0
            else f"pointer {name}={ptr:#x} is not a {TMA_ALIGN}-byte aligned device address below 2**57",
            f"pass a {TMA_ALIGN}-byte aligned device allocation (a view starting mid-row is not)",
            instance,
        )
    return ptr


def pointers(instance: str, ptrs) -> tuple[int, int, int]:
    """(a, b, d) as ints, each checked by `pointer`."""
    if not isinstance(ptrs, (tuple, list)) or len(ptrs) != 3:
        raise InvalidArgumentError(
            f"ptrs={ptrs!r} is not a sequence of three device pointers",
            "pass ptrs=(a, b, d) as ints, e.g. (a.data_ptr(), b.data_ptr(), d.data_ptr()); C goes in c=",
            instance,
        )
    return pointer(instance, "a", ptrs[0]), pointer(instance, "b", ptrs[1]), pointer(instance, "d", ptrs[2])


def resolve(instance: str, ops: tuple[OperandLayout, ...], m, n, k, batch, lds, batch_strides) -> dict:
    """Named extents and strides for `ParamPacker.pack` (+ the grid rule), validated; no pointers."""
    values = {"m": _size("m", m, instance), "n": _size("n", n, instance), "k": _size("k", k, instance)}
    values["l"] = _size("batch", batch, instance)
    for op, ld, bs in zip(ops, lds, batch_strides):
        name = op.name
        contiguous = values[op.contiguous]
        if (contiguous * op.elem) % TMA_ALIGN:
            # TMA moves whole 16-byte chunks along the contiguous dimension: a row ending mid-chunk would
            # have the rest of its last chunk read (A, B, C) or, for D, overwritten (seen on an H200,
            # 2026-11-29: an m-major D with M = 1 had the 7 padding elements of every row zeroed).
            raise InvalidArgumentError(
                f"{op.contiguous}={contiguous} is the contiguous extent of {name} "
                f"({contiguous * op.elem} bytes per row), not a multiple of {TMA_ALIGN} bytes",
                f"pad {op.contiguous} to a multiple of {TMA_ALIGN // op.elem} elements (zero-padding A/B "
                "along K keeps the product; extra rows/columns of D can be ignored), or use an instance "
                "whose layout makes another extent contiguous",
                instance,
            )
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


# ---- overlap of D with the inputs -----------------------------------------------------------------------


class Footprint:
    """The bytes one operand covers, relative to its pointer: `extent` bytes from it (the last element's
    end); per batch `batch_extent` bytes every `batch_bytes` bytes (None: one batch), made of rows of
    `width` bytes every `pitch` bytes. `periodic`: every row starts at the same offset modulo the pitch
    (one batch, or batch strides a whole number of rows)."""

    __slots__ = ("batch_bytes", "batch_extent", "batch_stride", "extent", "layout", "ld", "periodic", "pitch",
                 "width")

    def __init__(self, op: OperandLayout, values: dict):
        ld, bs, l, e = values[f"ld{op.name}"], values[f"batch_stride_{op.name}"], values["l"], op.elem
        rows = values[op.other]
        self.layout, self.ld, self.batch_stride = op, ld, bs if l > 1 else None  # unused with one batch
        self.batch_extent = e * ((rows - 1) * ld + values[op.contiguous])
        self.batch_bytes = bs * e if l > 1 else None
        self.extent = e * (l - 1) * bs + self.batch_extent
        self.pitch, self.width = ld * e, values[op.contiguous] * e
        self.periodic = l == 1 or (bs * e) % self.pitch == 0


def footprints(ops: tuple[OperandLayout, ...], values: dict) -> dict[str, Footprint]:
    """Each operand's `Footprint` for a problem resolved by `resolve`."""
    return {op.name: Footprint(op, values) for op in ops}


def same_layout(x: Footprint, y: Footprint) -> bool:
    """Whether x and y at one pointer would be the same matrix (dtype, major, strides; one batch: any
    batch stride)."""
    lx, ly = x.layout, y.layout
    return (lx.dtype, lx.major, x.ld, x.batch_stride) == (ly.dtype, ly.major, y.ld, y.batch_stride)


def _disjoint_modulo(period: int, px: int, wx: int, py: int, wy: int) -> bool:
    """Whether the arcs [px, px + wx) and [py, py + wy) of a circle of `period` bytes do not meet."""
    delta = (py - px) % period
    return wx <= delta and delta + wy <= period


def _interleaved_disjoint(x: Footprint, px: int, y: Footprint, py: int) -> bool:
    """True if x and y, though their byte ranges intersect, provably share no byte. Every byte of an
    operand lies at its pointer plus (batch index * batch stride) plus an offset inside one batch, and at
    the pointer plus (row * pitch) plus a column offset inside a row; so two operands whose batches (or
    rows) repeat with one period are disjoint if their per-period windows are disjoint modulo it:
    - batches side by side (one workspace holding A_0, D_0, A_1, D_1, ...): one batch stride;
    - columns side by side (A and D in the columns of one wide row-major buffer): one pitch, periodic."""
    periods = {f.batch_bytes for f in (x, y) if f.batch_bytes is not None}
    if len(periods) == 1:
        s = periods.pop()
        if _disjoint_modulo(s, px, x.batch_extent, py, y.batch_extent):
            return True
    if x.pitch == y.pitch and x.periodic and y.periodic:
        return _disjoint_modulo(x.pitch, px, x.width, py, y.width)
    return False


def check_overlaps(instance: str, fps: dict[str, Footprint], ptrs: dict[str, int]) -> None:
    """Raise `InvalidArgumentError` if D shares a byte with A, B or C, unless C is exactly D (same pointer
    and layout). Conservative: ranges that intersect and are not provably disjoint (`_interleaved_disjoint`)
    count as overlapping."""
    d, pd = fps["d"], ptrs["d"]
    for name in ("a", "b", "c"):
        if name not in fps:
            continue
        x, px = fps[name], ptrs[name]
        if not (px < pd + d.extent and pd < px + x.extent):
            continue
        if name == "c" and px == pd:
            if same_layout(x, d):
                continue  # in-place update: D = alpha * acc + beta * D
            lc, ld_ = x.layout, d.layout
            raise InvalidArgumentError(
                f"c and d are the same pointer 0x{pd:x} but lay out the matrix differently (C: {lc.dtype} "
                f"{lc.major}-major, ldc={x.ld}, batch_stride_c={x.batch_stride}; D: {ld_.dtype} "
                f"{ld_.major}-major, ldd={d.ld}, batch_stride_d={d.batch_stride})",
                "for an in-place update (c=d) pass ldc=ldd and batch_stride_c=batch_stride_d with an "
                "instance whose C dtype and major equal D's; otherwise give D its own memory",
                instance,
            )
        if _interleaved_disjoint(d, pd, x, px):
            continue
        why = (
            "C may alias D only exactly (c=d with the same layout, an in-place update)"
            if name == "c"
            else f"D is written while other CTAs still read {name.upper()}"
        )
        raise InvalidArgumentError(
            f"output d [0x{pd:x}, 0x{pd + d.extent:x}) overlaps input {name} "
            f"[0x{px:x}, 0x{px + x.extent:x}): {why}",
            f"write D to memory that shares no byte with {name.upper()}"
            + (" (copy the input first for an in-place product)" if name != "c" else ""),
            instance,
        )
