"""Decode a 128-byte TMA descriptor into its fields: the build's reading of the DSL's descriptors.

The inverse of runtime/tensormap.py's encoder, for the build side only (it does not ship): the contract
capture (codegen/contract.py) decodes the descriptors the DSL's host code produced for two probe problems
to learn each one's recipe, and the oracle tests compare fields. Any set bit the encoder cannot produce is
reported in ``unknown_bits``, so a DSL that starts emitting another encoding fails the build instead of
being silently mis-encoded by the runtime. The bit positions are the encoder's (docs/TENSORMAP.md).
"""

from __future__ import annotations

import struct

from runtime import tensormap as tm

_SWIZZLE_NAMES = {v: k for k, v in tm.SWIZZLE_CODES.items()}
_L2_NAMES = {v: k for k, v in tm.L2_PROMOTION_CODES.items()}
# Every dword-2 bit the encoder may set: the constant bit, rank, format, swizzle, L2 promotion, span flag.
_KNOWN_DWORD2 = (
    tm.CONST_BIT1
    | 7 << tm.RANK_SHIFT
    | 0xF << tm.FORMAT_SHIFT
    | 3 << tm.SWIZZLE_SHIFT
    | 3 << tm.L2_SHIFT
    | tm.SPAN_FLAG
)
_ADDRESS_MASK = (tm.ADDRESS_LIMIT - 1) & ~0xF


def decode(desc: bytes) -> dict:
    """The fields of a descriptor (names as in runtime/tensormap.make_template), plus any set bit the
    encoder cannot produce (``unknown_bits``)."""
    if len(desc) < tm.MEANINGFUL_BYTES:
        raise ValueError(f"a descriptor has {tm.DESCRIPTOR_BYTES} bytes, got {len(desc)}")
    word0, dword2 = struct.unpack_from("<QI", desc)
    stride_lo = struct.unpack_from("<4I", desc, 12)
    (stride_hi,) = struct.unpack_from("<I", desc, 28)
    rank = ((dword2 >> tm.RANK_SHIFT) & 7) + 1
    strides = tuple((stride_lo[i] << 4) | (((stride_hi >> (4 * i)) & 0xF) << 36) for i in range(rank - 1))
    dims = tuple(d + 1 for d in struct.unpack_from("<5I", desc, 32)[:rank])
    box = tuple(b + 1 for b in desc[55 : 55 + rank])
    unknown = {}
    if word0 & ~_ADDRESS_MASK:
        unknown["word0"] = word0 & ~_ADDRESS_MASK
    if dword2 & ~_KNOWN_DWORD2:
        unknown["dword2"] = dword2 & ~_KNOWN_DWORD2
    if stride_hi >> (4 * (rank - 1)):
        unknown["dword7"] = stride_hi >> (4 * (rank - 1)) << (4 * (rank - 1))
    if any(desc[52:55]) or any(desc[55 + rank : 64]):
        unknown["bytes52_63"] = desc[52:64].hex()
    l2 = _L2_NAMES.get((dword2 >> tm.L2_SHIFT) & 3)
    if l2 is None:
        unknown["l2_promotion"] = (dword2 >> tm.L2_SHIFT) & 3
    return {
        "global_address": word0 & _ADDRESS_MASK,
        "rank": rank,
        "format_code": (dword2 >> tm.FORMAT_SHIFT) & 0xF,
        "dims": dims,
        "strides_bytes": strides,
        "box": box,
        "swizzle": _SWIZZLE_NAMES[(dword2 >> tm.SWIZZLE_SHIFT) & 3],
        # The only values whose encoding is established; any other shows up in `unknown_bits`.
        "l2_promotion": l2,
        "element_strides": (1,) * rank,
        "interleave": "none",
        "oob_fill": "none",
        "span_flag": bool(dword2 & tm.SPAN_FLAG),
        "const_bit1": bool(dword2 & tm.CONST_BIT1),
        "unknown_bits": unknown,
        "tail_zero": not any(desc[tm.MEANINGFUL_BYTES : tm.DESCRIPTOR_BYTES]),
    }
