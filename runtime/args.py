"""Build a kernel's packed parameter buffer from the manifest's contract and one problem.

Everything here follows the record alone (docs/CONTRACT.md): each parameter is written at its offset —
a TMA descriptor encoded from its recipe (runtime/tensormap.py, byte-equal to the DSL's host code), an
operand's int32 extents, a named int32 scalar or a named float32 scalar (alpha, beta; rounded to nearest
by `struct`, as a C cast does); opaque parameters stay zero. The CPU oracle tests hold
the result to the DSL's own host code for random problems.

Hot path: descriptors depend on (extents, strides) and, separately, on the pointer. Templates are cached
per (parameter, extents, strides), so a repeated shape costs one dict lookup and an 8-byte address patch
per descriptor instead of a full encode. `address_offsets` and `scalar_offsets` tell the launch API where
the per-launch values (pointers, alpha, beta) sit, so it can patch a cached image instead of re-packing.
"""

from __future__ import annotations

import struct
import threading

from . import tensormap

_TEMPLATES_MAX = 4096


class ParamPacker:
    """The compiled writer for one instance record: `pack(values) -> bytearray`."""

    def __init__(self, record):
        self.record = record
        self.param_bytes = record.param_bytes
        self._templates: dict[tuple, bytes] = {}
        self._lock = threading.Lock()
        descs, words, self._scalars, self._tensors = [], [], {}, {}
        for p in record.params:
            if p.kind == "tensor":  # a global tensor passed whole: address, int32 extents, int64 strides
                extents_at, strides_at, _ = p.tensor_layout()
                words.append((p.offset + extents_at, f"<{len(p.dims)}i", tuple(p.dims)))
                words.append((p.offset + strides_at, f"<{len(p.strides)}q", tuple(p.strides)))
                self._tensors[p.operand] = p.offset
            elif p.kind == "tensormap":
                r = p.tensormap
                descs.append((p.offset, p.offset, r, r.operand, r.dims, r.strides, r.dtype.bytes))
            elif p.kind == "shape":
                words.append((p.offset, f"<{len(p.dims)}i", tuple(p.dims)))
            elif p.kind in ("i32", "f32", "pointer"):
                fmt = {"i32": "<i", "f32": "<f", "pointer": "<Q"}[p.kind]
                words.append((p.offset, fmt, (p.name,)))
                self._scalars[p.name] = p.offset
            # "opaque": compile-time data; the buffer's zero bytes are what the kernel ignores
        self._descs = tuple(descs)
        self._words = tuple(words)  # (offset, struct format, value names)

    def address_offsets(self) -> dict[str, int]:
        """Offset of each operand's 8-byte address word (a descriptor's, or a tensor parameter's first
        word), by operand (a, b, d, and c if the kernel reads C)."""
        return {**{operand: offset for _, offset, _, operand, _, _, _ in self._descs}, **self._tensors}

    def scalar_offsets(self) -> dict[str, int]:
        """Offset of each named scalar parameter (i32, f32 and raw pointers such as the workspace), by
        name."""
        return dict(self._scalars)

    def pack(self, values: dict) -> bytearray:
        """The parameter buffer for a problem given as named values (m, n, k, l, a, b, d, lda, ...)."""
        buf = bytearray(self.param_bytes)
        for index, offset, recipe, operand, dims, strides, elem in self._descs:
            dim_values = tuple(values[n] for n in dims)
            stride_bytes = tuple(values[n] * elem for n in strides)
            key = (index, dim_values, stride_bytes)
            image = self._templates.get(key)
            if image is None:
                image = self._new_template(key, recipe, dim_values, stride_bytes)
            buf[offset : offset + tensormap.DESCRIPTOR_BYTES] = image
            tensormap.patch_address(buf, offset, values[operand])
        for offset, fmt, names in self._words:
            struct.pack_into(fmt, buf, offset, *[values[n] for n in names])
        for operand, offset in self._tensors.items():
            struct.pack_into("<Q", buf, offset, values[operand])
        return buf

    def _new_template(self, key, recipe, dims, strides_bytes) -> bytes:
        image = tensormap.template_from_recipe(recipe, dims, strides_bytes).image
        with self._lock:  # readers never see a half-built dict; a racing duplicate encode is harmless
            if len(self._templates) >= _TEMPLATES_MAX:
                self._templates.clear()
            self._templates[key] = image
        return image
