"""Encode TMA descriptors (CUtensorMap, 128 bytes) in pure Python, byte-equal to the CuTe DSL's host code.

Why: a kernel compiled by the DSL takes its TMA descriptors as 128-byte kernel parameters, and the DSL's
own host code builds them inline (it never calls cuTensorMapEncodeTiled). Reproducing that encoding here
lets the runtime build launch arguments with no driver round trip (a driver encode cost 1.4-3.5 us per
call from Python on the H200 host, 2026-11-29), and lets CPU tests hold the runtime to the DSL's bytes
(the oracle).

The bit layout was read off the DSL's host LLVM IR and confirmed byte for byte against the oracle
(tests/oracle/test_tensormap.py); docs/TENSORMAP.md has the table and how each field was established.
Fast path: a descriptor's address lives alone in bytes 0-7 and nothing else depends on it, so the
runtime encodes a `TensorMapTemplate` once per (shape, strides) and only patches those 8 bytes per call.

Only the field values the DSL was seen to emit are accepted for interleave (none), L2 promotion (128B),
OOB fill (none) and element strides (all 1): the positions of the other values are not established.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .errors import InvalidArgumentError

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (~10 ms)
if TYPE_CHECKING:
    from .contract import TensorMapRecipe
    from .spec import DType

__all__ = ["DESCRIPTOR_BYTES", "TensorMapTemplate", "make_template", "patch_address", "template_from_recipe"]

DESCRIPTOR_BYTES = 128
# The DSL writes the first 64 bytes only (bytes 64-127 of its stack buffer stay uninitialized); the
# encoder writes zeros there, as the driver's encoder does.
MEANINGFUL_BYTES = 64
MAX_RANK = 5

# The bit layout (docs/TENSORMAP.md), public because codegen/tensormap_decode.py reads descriptors with it.
SWIZZLE_CODES = {"none": 0, "32B": 1, "64B": 2, "128B": 3}
SWIZZLE_SPAN = {"32B": 32, "64B": 64, "128B": 128}
L2_PROMOTION_CODES = {"128B": 2}  # at dword-2 bits 17-18 (hypothesis on the field width; see TENSORMAP.md)

# dword 2 (descriptor bytes 8-11)
CONST_BIT1 = 1 << 1  # always set by the DSL; the driver's encoder leaves it clear (docs/TENSORMAP.md)
RANK_SHIFT, FORMAT_SHIFT, SWIZZLE_SHIFT, L2_SHIFT = 4, 7, 13, 17
SPAN_FLAG = 1 << 21  # set when the tensor's byte span is >= 128 KiB (see _span_bytes)
SPAN_LIMIT = 1 << 17
ADDRESS_LIMIT = 1 << 57  # bits 4-56 of word 0 hold address bits 4-56
STRIDE_LIMIT = 1 << 40  # strides: bits 4-35 in dwords 3-6, bits 36-39 in nibbles of dword 7


def _fail(problem: str, fix: str) -> InvalidArgumentError:
    return InvalidArgumentError(problem, fix)


@dataclass(frozen=True, slots=True)
class TensorMapTemplate:
    """A complete descriptor for address 0: everything but bytes 0-7 is final."""

    image: bytes  # 128 bytes

    def with_address(self, global_address: int) -> bytes:
        _check_address(global_address)
        return struct.pack("<Q", global_address) + self.image[8:]


def patch_address(buf: bytearray, offset: int, global_address: int) -> None:
    """Set the address of a descriptor already written at `offset`: bytes offset..offset+7, nothing else.

    For a 16-byte aligned address below 2**57, word 0 of the descriptor *is* the address."""
    _check_address(global_address)
    struct.pack_into("<Q", buf, offset, global_address)


def make_template(
    dtype: DType,
    dims,
    strides_bytes,
    box,
    element_strides=None,
    swizzle: str = "none",
    interleave: str = "none",
    l2_promotion: str = "128B",
    oob_fill: str = "none",
) -> TensorMapTemplate:
    """Validate the parameters (cuTensorMapEncodeTiled's documented requirements) and encode them."""
    fmt, elem_bytes = dtype.tma_format, dtype.bytes
    dims, strides_bytes, box = tuple(dims), tuple(strides_bytes), tuple(box)
    rank = len(dims)
    if not 1 <= rank <= MAX_RANK:
        raise _fail(f"TMA rank {rank} is outside 1..{MAX_RANK}", "describe the tensor with 1 to 5 dimensions")
    if len(strides_bytes) != rank - 1 or len(box) != rank:
        raise _fail(
            f"rank {rank} needs {rank - 1} strides and {rank} box sizes, got {len(strides_bytes)} and "
            f"{len(box)}",
            "pass strides for dims 1..rank-1 only (dim 0 is contiguous)",
        )
    if element_strides is not None and tuple(element_strides) != (1,) * rank:
        raise _fail(
            f"element strides {tuple(element_strides)} are not supported",
            "use element strides of 1 (the only value whose encoding is established)",
        )
    if interleave != "none" or oob_fill != "none" or l2_promotion not in L2_PROMOTION_CODES:
        raise _fail(
            f"interleave={interleave!r}, l2_promotion={l2_promotion!r}, oob_fill={oob_fill!r} is "
            "not supported",
            "use interleave='none', l2_promotion='128B', oob_fill='none' (the only "
            "values whose encoding is established; see docs/TENSORMAP.md)",
        )
    if swizzle not in SWIZZLE_CODES:
        raise _fail(f"swizzle {swizzle!r} is not a TMA swizzle mode", f"use one of {sorted(SWIZZLE_CODES)}")
    for i, d in enumerate(dims):
        if not 1 <= d <= 1 << 32:
            raise _fail(f"TMA dim {i} = {d} is outside 1..2**32", "split or reshape the tensor")
    for i, s in enumerate(strides_bytes, start=1):
        if s <= 0 or s % 16 or s >= STRIDE_LIMIT:
            raise _fail(
                f"TMA stride of dim {i} = {s} bytes is not a positive multiple of 16 below 2**40",
                "make leading dimensions and batch strides multiples of 16 bytes",
            )
    for i, b in enumerate(box):
        if not 1 <= b <= 256:
            raise _fail(f"TMA box size {b} of dim {i} is outside 1..256", "use a smaller tile")
    inner = box[0] * elem_bytes
    if inner % 16:
        raise _fail(f"TMA box row of {inner} bytes is not a multiple of 16", "widen the box's dim 0")
    if swizzle != "none" and inner > SWIZZLE_SPAN[swizzle]:
        raise _fail(
            f"TMA box row of {inner} bytes exceeds the {swizzle} swizzle span",
            "narrow the box's dim 0 to the swizzle width",
        )

    dword2 = (
        CONST_BIT1
        | (rank - 1) << RANK_SHIFT
        | fmt << FORMAT_SHIFT
        | SWIZZLE_CODES[swizzle] << SWIZZLE_SHIFT
        | L2_PROMOTION_CODES[l2_promotion] << L2_SHIFT
    )
    if _span_bytes(dims, strides_bytes, elem_bytes) >= SPAN_LIMIT:
        dword2 |= SPAN_FLAG
    stride_lo = [(s >> 4) & 0xFFFFFFFF for s in strides_bytes] + [0] * (4 - len(strides_bytes))
    stride_hi = 0
    for i, s in enumerate(strides_bytes):
        stride_hi |= ((s >> 36) & 0xF) << (4 * i)
    dim_fields = [d - 1 for d in dims] + [0] * (MAX_RANK - rank)
    box_fields = [b - 1 for b in box] + [0] * (MAX_RANK - rank)
    image = (
        bytes(8)  # word 0: the address, patched per call
        + struct.pack("<I4II", dword2, *stride_lo, stride_hi)  # bytes 8-31
        + struct.pack("<5I", *dim_fields)  # bytes 32-51
        + bytes(3)  # bytes 52-54: zero in every DSL descriptor seen (element strides 1 live here?)
        + bytes(box_fields)  # bytes 55-59
        + bytes(DESCRIPTOR_BYTES - 60)
    )
    return TensorMapTemplate(image)


def template_from_recipe(recipe: TensorMapRecipe, dims, strides_bytes) -> TensorMapTemplate:
    """The template of a manifest tensormap recipe (runtime/contract.py) for concrete extents and byte
    strides."""
    return make_template(
        recipe.dtype,
        dims,
        strides_bytes,
        recipe.box,
        recipe.element_strides,
        recipe.swizzle,
        recipe.interleave,
        recipe.l2_promotion,
        recipe.oob_fill,
    )


def _span_bytes(dims, strides_bytes, elem_bytes: int) -> int:
    """The tensor's byte extent as the DSL computes it for the dword-2 bit 21 test:
    dims[0] * element bytes + sum((dims[i] - 1) * strides[i - 1])."""
    return dims[0] * elem_bytes + sum((d - 1) * s for d, s in zip(dims[1:], strides_bytes))


def _check_address(address: int) -> None:
    if address % 16 or not 0 <= address < ADDRESS_LIMIT:
        raise _fail(
            f"TMA global address 0x{address:x} is not 16-byte aligned (or beyond 2**57)",
            "pass tensors whose data pointer is 16-byte aligned (e.g. not a sliced view)",
        )
