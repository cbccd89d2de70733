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
  so it runs per launch: runtime/overlap.py;
- alpha and beta are real numbers, finite in float32.

The launch path caches validated shapes (runtime/plan.py); each rule here is one predicate or one
function that both the cached path and the first call run (runtime/api.py).
"""

from __future__ import annotations

import numbers

from .contract import TMA_ALIGN_BYTES as TMA_ALIGN
from .errors import InvalidArgumentError
from .spec import GemmSpec

INT32_MAX = 2**31 - 1
MAX_ADDRESS = 2**57  # a TMA descriptor holds address bits 4..56 (pointers_ok relies on a power of two)


class OperandLayout:
    """How one operand of an instance sits in memory: which extent is contiguous, element size."""

    __slots__ = ("name", "dtype", "major", "elem", "contiguous", "other", "batches")

    def __init__(self, spec: GemmSpec, name: str):
        rows, cols = spec.extents(name)
        self.name, self.dtype, self.major = name, spec.dtype_of(name), spec.major_of(name)
        self.elem = self.dtype.bytes
        self.contiguous = spec.contiguous_extent(name)
        self.other = rows if self.contiguous == cols else cols
        self.batches = spec.batch_extent(name)  # "l", or "g" for a grouped instance's B


def layouts(spec: GemmSpec) -> tuple[OperandLayout, ...]:
    """The instance's operands in launch order: A, B, D, then C if the epilogue reads it."""
    return tuple(OperandLayout(spec, op) for op in spec.operands)


FLT_MAX = 3.4028234663852886e38  # the largest finite float32


# ---- the argument rules. Each predicate is the rule itself; the fast path of `launch` (runtime/api.py)
# calls it as is, and the slow path calls it first and explains a failure. ----------------------------


def exact_ints(m, n, k, batch) -> bool:
    """Whether the required sizes are exactly ints: the form cached shapes are keyed with. A cache hit on
    equal values must mean the same validated arguments, but 128.0 == 128 and True == 1 hash alike while
    `size` refuses floats and bools; so a launch takes its cached shape only for exact ints (others,
    numpy ints too, are converted or refused by the first-call path)."""
    return int is type(m) is type(n) is type(k) is type(batch)


def overrides_canonical(
    lda, ldb, ldd, ldc, bsa, bsb, bsd, bsc, raster_along_m, group_size, k_splits=None
) -> bool:
    """`exact_ints` for the optional arguments: each is None or exactly an int, and `raster_along_m` may
    be a bool too (True and 1 mean the same walk; `group_size=True` is refused like `m=True`)."""
    for v in (lda, ldb, ldd, ldc, bsa, bsb, bsd, bsc, group_size, k_splits):
        if v is not None and type(v) is not int:
            return False
    return raster_along_m is None or type(raster_along_m) is int or type(raster_along_m) is bool


def pointers_ok(a, b, d, c=TMA_ALIGN) -> bool:
    """Whether every pointer is an int, non-null, 16-byte aligned and inside TMA's 57-bit address range
    (`c` defaults to a valid stand-in, for instances without C)."""
    if int is type(a) is type(b) is type(d) is type(c):
        # One OR bounds them all (every launch runs this): it is negative if any is, at least
        # MAX_ADDRESS (a power of two) if any is, and has a low bit set if any is misaligned.
        x = a | b | d | c
        return 0 <= x < MAX_ADDRESS and not x & (TMA_ALIGN - 1) and bool(a and b and d and c)
    return False


def workspace_ok(takes_workspace: bool, needed_bytes: int, workspace) -> bool:
    """Whether `workspace` is acceptable for a launch: None where it needs none, else a pointer as
    `pointers_ok` wants it, for a split-K instance (the only kind that takes one)."""
    if workspace is None:
        return not needed_bytes
    return takes_workspace and pointers_ok(workspace, workspace, workspace)


def offsets_ok(ptr) -> bool:
    """Whether `ptr` can be a grouped launch's cu_seqlens_m: an int, non-null, 4-byte aligned (int32s)."""
    return type(ptr) is int and 0 < ptr < MAX_ADDRESS and not ptr & 3


def offsets_pointer(instance: str, ptr, name: str = "cu_seqlens_m") -> int:
    """A device address of int32s (cu_seqlens_m, a_idx) as an int, checked by `offsets_ok`;
    `InvalidArgumentError` saying why not."""
    if type(ptr) is not int and not isinstance(ptr, bool) and hasattr(ptr, "__index__"):
        ptr = ptr.__index__()
    if offsets_ok(ptr):
        return ptr
    what = {
        "cu_seqlens_m": "int32[num_groups + 1] row offsets",
        "cu_seqlens_k": "int32[num_groups + 1] K offsets",
    }.get(name, "int32[m] row indices")
    raise InvalidArgumentError(
        f"{name}={ptr!r} is not a non-null, 4-byte aligned device address",
        f"pass {name} as an int: the device address of {what} (e.g. .data_ptr() of a CUDA int32 tensor)",
        instance,
    )


def scales_ok(alpha, beta=0.0) -> bool:
    """Whether the scales are floats that are finite in float32 (False for NaN too)."""
    return float is type(alpha) is type(beta) and -FLT_MAX <= alpha <= FLT_MAX and -FLT_MAX <= beta <= FLT_MAX


def _integer(name: str, v, instance: str) -> int:
    if type(v) is not int:
        if isinstance(v, bool) or not hasattr(v, "__index__"):
            raise InvalidArgumentError(f"{name}={v!r} is not an integer", f"pass {name} as an int", instance)
        v = v.__index__()
    return v


def size(name: str, v, instance: str) -> int:
    """An extent, leading dimension or batch count: an int in 1 .. 2**31 - 1 (the kernel's int32)."""
    v = _integer(name, v, instance)
    if not 1 <= v <= INT32_MAX:
        raise InvalidArgumentError(
            f"{name}={v} is outside 1..2**31-1",
            f"pass a positive {name} that fits in int32 (split larger problems into batches or pieces)",
            instance,
        )
    return v


def stride(name: str, v, instance: str) -> int:
    """A batch stride: a positive int64 (the descriptor's 40-bit byte-stride limit is checked later)."""
    v = _integer(name, v, instance)
    if not 1 <= v < 2**63:
        raise InvalidArgumentError(f"{name}={v} is not positive", f"pass a positive {name} or None", instance)
    return v


def pointer(instance: str, name: str, ptr) -> int:
    """One device pointer as an int, checked by `pointers_ok`; `InvalidArgumentError` saying why not."""
    if type(ptr) is not int:
        if isinstance(ptr, bool) or not hasattr(ptr, "__index__"):
            raise InvalidArgumentError(
                f"pointer {name}={ptr!r} is not an int", "pass device pointers as ints", instance
            )
        ptr = ptr.__index__()
    if pointers_ok(ptr, ptr, ptr):
        return ptr
    raise InvalidArgumentError(
        f"pointer {name} is null"
        if ptr == 0
        else f"pointer {name}={ptr:#x} is negative"
        if ptr < 0  # '-0x10', never '0x-10'
        else f"pointer {name}={ptr:#x} is not a {TMA_ALIGN}-byte aligned device address below 2**57",
        f"pass a {TMA_ALIGN}-byte aligned device allocation (a view starting mid-row is not)",
        instance,
    )


def pointers(instance: str, ptrs) -> tuple[int, int, int]:
    """(a, b, d) as ints, each checked by `pointer`."""
    if not isinstance(ptrs, (tuple, list)) or len(ptrs) != 3:
        raise InvalidArgumentError(
            f"ptrs={ptrs!r} is not a sequence of three device pointers",
            "pass ptrs=(a, b, d) as ints, e.g. (a.data_ptr(), b.data_ptr(), d.data_ptr()); C goes in c=",
            instance,
        )
    return pointer(instance, "a", ptrs[0]), pointer(instance, "b", ptrs[1]), pointer(instance, "d", ptrs[2])


def scale(instance: str, name: str, v) -> float:
    """A scale as a float checked by `scales_ok`. Non-finite values are refused: an inf or NaN scale is
    almost always an uninitialized variable, and would silently fill D with NaN."""
    if scales_ok(v):
        return v
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise InvalidArgumentError(
            f"{name}={v!r} is not a real number",
            f"pass {name} as a Python float (float(t) for a CPU tensor; reading a CUDA tensor would "
            "synchronize, so keep scales on the host)",
            instance,
        )
    v = float(v)
    if not scales_ok(v):
        raise InvalidArgumentError(
            f"{name}={v!r} is not a finite float32",
            f"pass a finite {name} with |{name}| <= 3.4e38 (the kernel scales in float32)",
            instance,
        )
    return v


def raster(instance: str, v):
    """A raster override: None (automatic) or 0/1 (True/False)."""
    if v is None or (type(v) in (bool, int) and v in (0, 1)):
        return None if v is None else int(v)
    raise InvalidArgumentError(f"raster_along_m={v!r}", "pass True, False or None (automatic)", instance)


def k_splits(instance: str, v):
    """A split-K count override: None (automatic) or an int in 1 .. 2**31 - 1 (checked against the
    problem's k-tiles when the shape is prepared, runtime/plan.py)."""
    if v is None or (type(v) is int and 1 <= v <= INT32_MAX):
        return v
    raise InvalidArgumentError(f"k_splits={v!r}", "pass a positive int or None (automatic)", instance)


def check_gathering(
    instance: str, gathered: bool, over_k: bool, m: int, k: int, tile_k: int, a_rows, a_cols
) -> int | None:
    """The extent of the A given that a gathering instance's a_idx indexes ("ma"): its rows (`a_rows`,
    default m; varlen M, whose K must also be a multiple of the tile's K: the gathered rows are copied in
    whole k-tiles) or, gathering over K (`over_k`), its columns (`a_cols`, default k). Each an int in
    1 .. 2**31 - 1; the other must be None, and other instances take neither: returns None then."""
    wanted = ("a_cols" if over_k else "a_rows") if gathered else None
    for name, v in (("a_rows", a_rows), ("a_cols", a_cols)):
        if v is not None and name != wanted:
            what = f"gathers A's {'columns' if over_k else 'rows'}" if gathered else "does not gather A"
            fix = (
                f" (pass {wanted})" if wanted else ", or use an instance that gathers A (id suffix _gathera)"
            )
            raise InvalidArgumentError(
                f"{name}={v!r} given, but this instance {what}", f"drop {name}{fix}", instance
            )
    if not gathered:
        return None
    m, k = size("m", m, instance), size("k", k, instance)
    if over_k:
        return k if a_cols is None else size("a_cols", a_cols, instance)
    if k % tile_k:
        raise InvalidArgumentError(
            f"k={k} with an instance that gathers A: its rows are copied in whole k-tiles of {tile_k}",
            f"pad K to a multiple of {tile_k} (zero columns of A and B keep the product), or gather A "
            "beforehand and use the instance without _gathera",
            instance,
        )
    return m if a_rows is None else size("a_rows", a_rows, instance)


def check_grouping(instance: str, grouped: bool, batch, groups) -> None:
    """A grouped (varlen M or K) instance takes `num_groups` (an int in 1 .. 2**31 - 1) and one batch (the
    groups come from its offsets array, not from batches); any other instance takes no `num_groups`."""
    if not grouped:
        if groups is not None:
            raise InvalidArgumentError(
                f"num_groups={groups!r} given, but this instance is not grouped",
                "drop num_groups (and the offsets), or use a grouped instance (id suffix _varlenm or "
                "_varlenk; hgemm_sm90.instances() reports varlen_m, varlen_k)",
                instance,
            )
        return
    if groups is None or type(groups) is not int or not 1 <= groups <= INT32_MAX:
        raise InvalidArgumentError(
            f"num_groups={groups!r}: this grouped instance needs the number of groups G",
            "pass num_groups=G, an int >= 1 (the offsets array holds G + 1 entries)",
            instance,
        )
    if batch != 1:
        raise InvalidArgumentError(
            f"batch={batch!r} with a grouped instance",
            "pass batch=1: a grouped launch is one problem cut into num_groups groups by its offsets",
            instance,
        )


def group(instance: str, v):
    """A group-size override: None (automatic) or an int in 1 .. 2**31 - 1."""
    if v is None or (type(v) is int and 1 <= v <= INT32_MAX):
        return v
    raise InvalidArgumentError(f"group_size={v!r}", "pass a positive int or None (automatic)", instance)


def resolve(
    instance: str,
    ops: tuple[OperandLayout, ...],
    m,
    n,
    k,
    batch,
    lds,
    batch_strides,
    groups=None,
    gathered=None,
) -> dict:
    """Named extents and strides for `ParamPacker.pack` (+ the grid rule), validated; no pointers.
    `groups`: a grouped instance's group count G (B's batches; A and D are one batch of all M rows).
    `gathered`: a gathering instance's own extent of A (`check_gathering`)."""
    values = {"m": size("m", m, instance), "n": size("n", n, instance), "k": size("k", k, instance)}
    values["l"] = size("batch", batch, instance)
    values["g"] = 1 if groups is None else groups
    # A gathered A's own extent where a_idx indexes it (rows, or K columns); else unused (m).
    values["ma"] = values["m"] if gathered is None else gathered
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
        ld = contiguous if ld is None else size(ld_name, ld, instance)
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
            bs = stride(bs_name, bs, instance)
            if (bs * op.elem) % TMA_ALIGN:
                raise InvalidArgumentError(
                    f"{bs_name}={bs} elements is {bs * op.elem} bytes, not a multiple of {TMA_ALIGN}",
                    f"pad {bs_name} to a multiple of {TMA_ALIGN // op.elem} elements",
                    instance,
                )
            if name == "d" and values[op.batches] > 1 and bs < packed:
                raise InvalidArgumentError(
                    f"{bs_name}={bs} is smaller than one batch of D ({op.other} x ld{name} = {packed})",
                    f"pass {bs_name} >= {packed}: overlapping output batches would race",
                    instance,
                )
        values[ld_name] = ld
        values[bs_name] = bs
    return values
