"""Encode TMA descriptors (CUtensorMap, 128 bytes) in pure Python, byte-equal to the CuTe DSL's host code.

Why: a kernel compiled by the DSL takes its TMA descriptors as 128-byte kernel parameters, and the DSL's
own host code builds them inline (it never calls cuTensorMapEncodeTiled). Reproducing that encoding here
lets the runtime build launch arguments with no driver round trip (DESIGN.md facts 6 and 7: a driver
encode costs 1.4-3.5 us per call), and lets CPU tests hold the runtime to the DSL's bytes (the oracle).

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

__all__ = [
    "DESCRIPTOR_BYTES",
    "TensorMapTemplate",
    "decode",
    "element_bytes",
    "encode_tiled",
    "make_template",
    "template_from_recipe",
    "patch_address",
]

DESCRIPTOR_BYTES = 128
# The DSL writes the first 64 bytes only (bytes 64-127 of its stack buffer stay uninitialized); the
# encoder writes zeros there, as the driver's encoder does.
MEANINGFUL_BYTES = 64
MAX_RANK = 5

# dtype name -> (4-bit data format code at descriptor bits 71-74, element bytes, extra flag bits of dword 2).
# Codes: the DSL's TmaDataFormat enum (U8=0, U16=1, U32=2, S32=3, U64=4, S64=5, F16=6, F32=7, F32_FTZ=8,
# F64=9, BF16=10, ...), which is *not* the driver's CUtensorMapDataType numbering (there BFLOAT16 = 9).
# Measured per DSL element type: fp8 and int8 -> U8; int16 -> U16; Int32 and Uint32 -> U32 (not S32);
# Int64 and Uint64 -> U64; TFloat32 -> F32 plus dword-2 bit 16.
_DTYPES: dict[str, tuple[int, int, int]] = {
    "u8": (0, 1, 0),
    "i8": (0, 1, 0),
    "e4m3": (0, 1, 0),
    "e5m2": (0, 1, 0),
    "u16": (1, 2, 0),
    "i16": (1, 2, 0),
    "u32": (2, 4, 0),
    "i32": (2, 4, 0),
    "u64": (4, 8, 0),
    "i64": (4, 8, 0),
    "fp16": (6, 2, 0),
    "f16": (6, 2, 0),
    "fp32": (7, 4, 0),
    "f32": (7, 4, 0),
    "tf32": (7, 4, 1 << 16),
    "f64": (9, 8, 0),
    "fp64": (9, 8, 0),
    "bf16": (10, 2, 0),
}
_FORMAT_NAMES = {
    0: "u8",
    1: "u16",
    2: "u32",
    3: "s32",
    4: "u64",
    5: "s64",
    6: "fp16",
    7: "fp32",
    8: "f32_ftz",
    9: "f64",
    10: "bf16",
}
_SWIZZLE = {"none": 0, "32B": 1, "64B": 2, "128B": 3}
_SWIZZLE_NAMES = {v: k for k, v in _SWIZZLE.items()}
_SWIZZLE_SPAN = {"32B": 32, "64B": 64, "128B": 128}
_L2_PROMOTION = {"128B": 2}  # at dword-2 bits 17-18 (hypothesis on the field width; see TENSORMAP.md)
_L2_NAMES = {v: k for k, v in _L2_PROMOTION.items()}

# dword 2 (descriptor bytes 8-11)
_CONST_BIT1 = 1 << 1  # always set by the DSL; the driver's encoder leaves it clear (DESIGN.md fact 6)
_RANK_SHIFT, _FORMAT_SHIFT, _SWIZZLE_SHIFT, _L2_SHIFT = 4, 7, 13, 17
_SPAN_FLAG = 1 << 21  # set when the tensor's byte span is >= 128 KiB (see _span_bytes)
_SPAN_LIMIT = 1 << 17
_KNOWN_DWORD2 = _CONST_BIT1 | (7 << 4) | (0xF << 7) | (3 << 13) | (1 << 16) | (3 << 17) | _SPAN_FLAG
_ADDRESS_LIMIT = 1 << 57  # bits 4-56 of word 0 hold address bits 4-56
_STRIDE_LIMIT = 1 << 40  # strides: bits 4-35 in dwords 3-6, bits 36-39 in nibbles of dword 7


def element_bytes(dtype: str) -> int:
    """Bytes per element of a TMA data type name (as used in manifest recipes)."""
    if dtype not in _DTYPES:
        raise _fail(f"TMA data type {dtype!r} is not supported", f"use one of {sorted(_DTYPES)}")
    return _DTYPES[dtype][1]


def _fail(problem: str, fix: str) -> InvalidArgumentError:
    return InvalidArgumentError(problem, fix)


@dataclass(frozen=True, slots=True)
class TensorMapTemplate:
    """A complete descriptor for address 0: everything but bytes 0-7 is final."""

    image: bytes  # 128 bytes

    def with_address(self, global_address: int) -> bytes:
        _check_address(global_address)
        return struct.pack("<Q", global_address) + self.image[8:]

    def write(self, buf: bytearray, offset: int, global_address: int) -> None:
        """Write the whole descriptor into a packed parameter buffer at `offset`."""
        buf[offset : offset + DESCRIPTOR_BYTES] = self.image
        patch_address(buf, offset, global_address)


def patch_address(buf: bytearray, offset: int, global_address: int) -> None:
    """Set the address of a descriptor already written at `offset`: bytes offset..offset+7, nothing else.

    For a 16-byte aligned address below 2**57, word 0 of the descriptor *is* the address."""
    _check_address(global_address)
    struct.pack_into("<Q", buf, offset, global_address)


def encode_tiled(
    dtype: str,
    global_address: int,
    dims: tuple[int, ...],
    strides_bytes: tuple[int, ...],
    box: tuple[int, ...],
    element_strides: tuple[int, ...] | None = None,
    swizzle: str = "none",
    interleave: str = "none",
    l2_promotion: str = "128B",
    oob_fill: str = "none",
) -> bytes:
    """The 128-byte descriptor, with the meaning of cuTensorMapEncodeTiled's parameters.

    `dims` (rank entries, contiguous dimension first), `strides_bytes` (rank - 1 entries: the byte
    strides of dims 1..rank-1), `box` and `element_strides` (rank entries each)."""
    t = make_template(
        dtype, dims, strides_bytes, box, element_strides, swizzle, interleave, l2_promotion, oob_fill
    )
    return t.with_address(global_address)


def make_template(
    dtype: str,
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
    if dtype not in _DTYPES:
        raise _fail(f"TMA data type {dtype!r} is not supported", f"use one of {sorted(_DTYPES)}")
    fmt, elem_bytes, flags = _DTYPES[dtype]
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
    if interleave != "none" or oob_fill != "none" or l2_promotion not in _L2_PROMOTION:
        raise _fail(
            f"interleave={interleave!r}, l2_promotion={l2_promotion!r}, oob_fill={oob_fill!r} is "
            "not supported",
            "use interleave='none', l2_promotion='128B', oob_fill='none' (the only "
            "values whose encoding is established; see docs/TENSORMAP.md)",
        )
    if swizzle not in _SWIZZLE:
        raise _fail(f"swizzle {swizzle!r} is not a TMA swizzle mode", f"use one of {sorted(_SWIZZLE)}")
    for i, d in enumerate(dims):
        if not 1 <= d <= 1 << 32:
            raise _fail(f"TMA dim {i} = {d} is outside 1..2**32", "split or reshape the tensor")
    for i, s in enumerate(strides_bytes, start=1):
        if s <= 0 or s % 16 or s >= _STRIDE_LIMIT:
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
    if swizzle != "none" and inner > _SWIZZLE_SPAN[swizzle]:
        raise _fail(
            f"TMA box row of {inner} bytes exceeds the {swizzle} swizzle span",
            "narrow the box's dim 0 to the swizzle width",
        )

    dword2 = (
        _CONST_BIT1
        | (rank - 1) << _RANK_SHIFT
        | fmt << _FORMAT_SHIFT
        | _SWIZZLE[swizzle] << _SWIZZLE_SHIFT
        | flags
        | _L2_PROMOTION[l2_promotion] << _L2_SHIFT
    )
    if _span_bytes(dims, strides_bytes, elem_bytes) >= _SPAN_LIMIT:
        dword2 |= _SPAN_FLAG
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


def template_from_recipe(recipe, dims, strides_bytes) -> TensorMapTemplate:
    """The template of a manifest tensormap recipe (docs/CONTRACT.md) for concrete extents and byte strides."""
    return make_template(
        recipe["dtype"],
        dims,
        strides_bytes,
        tuple(recipe["box"]),
        tuple(recipe["element_strides"]),
        recipe["swizzle"],
        recipe["interleave"],
        recipe["l2_promotion"],
        recipe["oob_fill"],
    )


def decode(desc: bytes) -> dict:
    """The fields of a descriptor (inverse of encode_tiled), plus any set bit this module cannot name."""
    if len(desc) < MEANINGFUL_BYTES:
        raise _fail(
            f"a descriptor has {DESCRIPTOR_BYTES} bytes, got {len(desc)}", "pass the whole CUtensorMap"
        )
    word0, dword2 = struct.unpack_from("<QI", desc)
    stride_lo = struct.unpack_from("<4I", desc, 12)
    (stride_hi,) = struct.unpack_from("<I", desc, 28)
    rank = ((dword2 >> _RANK_SHIFT) & 7) + 1
    fmt = (dword2 >> _FORMAT_SHIFT) & 0xF
    strides = tuple((stride_lo[i] << 4) | (((stride_hi >> (4 * i)) & 0xF) << 36) for i in range(rank - 1))
    dims = tuple(d + 1 for d in struct.unpack_from("<5I", desc, 32)[:rank])
    box = tuple(b + 1 for b in desc[55 : 55 + rank])
    unknown = {}
    if word0 & ~((_ADDRESS_LIMIT - 1) & ~0xF):
        unknown["word0"] = word0 & ~((_ADDRESS_LIMIT - 1) & ~0xF)
    if dword2 & ~_KNOWN_DWORD2:
        unknown["dword2"] = dword2 & ~_KNOWN_DWORD2
    if stride_hi >> (4 * (rank - 1)):
        unknown["dword7"] = stride_hi >> (4 * (rank - 1)) << (4 * (rank - 1))
    if any(desc[52:55]) or any(desc[55 + rank : 64]):
        unknown["bytes52_63"] = desc[52:64].hex()
    name = "tf32" if fmt == 7 and dword2 & (1 << 16) else _FORMAT_NAMES.get(fmt, f"format_{fmt}")
    return {
        "global_address": word0 & ((_ADDRESS_LIMIT - 1) & ~0xF),
        "rank": rank,
        "dtype": name,
        "format_code": fmt,
        "dims": dims,
        "strides_bytes": strides,
        "box": box,
        "swizzle": _SWIZZLE_NAMES[(dword2 >> _SWIZZLE_SHIFT) & 3],
        "l2_promotion_field": (dword2 >> _L2_SHIFT) & 3,
        # encode_tiled's remaining parameters, for the only values whose encoding is established; any
        # other encoding shows up in `unknown_bits` (callers that need a full recipe must check it).
        "l2_promotion": _L2_NAMES.get((dword2 >> _L2_SHIFT) & 3, "unknown"),
        "element_strides": (1,) * rank,
        "interleave": "none",
        "oob_fill": "none",
        "span_flag": bool(dword2 & _SPAN_FLAG),
        "const_bit1": bool(dword2 & _CONST_BIT1),
        "unknown_bits": unknown,
        "tail_zero": not any(desc[MEANINGFUL_BYTES:DESCRIPTOR_BYTES]),
    }


def _span_bytes(dims, strides_bytes, elem_bytes: int) -> int:
    """The tensor's byte extent as the DSL computes it for the dword-2 bit 21 test:
    dims[0] * element bytes + sum((dims[i] - 1) * strides[i - 1])."""
    return dims[0] * elem_bytes + sum((d - 1) * s for d, s in zip(dims[1:], strides_bytes))


def _check_address(address: int) -> None:
    if address % 16 or not 0 <= address < _ADDRESS_LIMIT:
        raise _fail(
            f"TMA global address 0x{address:x} is not 16-byte aligned (or beyond 2**57)",
            "pass tensors whose data pointer is 16-byte aligned (e.g. not a sliced view)",
        )
