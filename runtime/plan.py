"""The launch plan of one instance: what `launch` precomputes once per instance and once per problem shape.

A plan holds the instance's operand layouts and parameter packer; per problem shape (extents, leading
dimensions, batch strides, walk order) it validates once and caches the packed parameter image, so a
repeated launch only patches addresses and scales into a copy (runtime/api.py does that).
"""

from __future__ import annotations

import ctypes
import math
import numbers
import threading
from dataclasses import replace

from . import problem, scheduling
from .args import ParamPacker
from .errors import CorruptArtifactError, InvalidArgumentError

_PREPARED_PER_INSTANCE = 1024  # cached problem shapes per instance (cleared when full)
FLT_MAX = 3.4028234663852886e38  # largest finite float32 (api.py checks scales against it inline)


class LaunchPlan:
    """Everything per instance that `launch` needs and that never changes: built once, then shared.

    Per problem shape (extents, leading dims, batch strides, walk overrides) it caches the validated,
    packed parameter image with zero addresses and scalars, the number of cluster tiles and the operands'
    byte footprints (`prepare`); a launch of a known shape then costs a dict lookup, a copy of that image
    into this thread's parameter buffer and 8-byte address / 4-byte alpha, beta writes. Patching alpha and
    beta per launch (rather than keying the cache on them) costs ~0.1 µs each and keeps a sweep over
    scales from filling the cache. Reusing one buffer per thread keeps its address stable, so the
    launcher's pointer-array cache hits too (the driver copies parameter values at launch).
    """

    __slots__ = (
        "record", "catalog", "ops", "has_c", "packer", "tile_m", "tile_n", "cluster_m", "cluster_n",
        "off_a", "off_b", "off_d", "off_c", "off_alpha", "off_beta", "prepared", "local",
    )

    def __init__(self, record, catalog):
        self.record = record
        self.catalog = catalog  # the Manifest the record came from: error messages suggest its siblings
        self.ops = problem.layouts(record.spec)
        self.has_c = record.spec.has_c
        self.packer = ParamPacker(record)
        self.tile_m, self.tile_n = record.spec.tile[:2]
        self.cluster_m, self.cluster_n = record.cluster[0], record.cluster[1]
        addresses = self.packer.address_offsets()
        scalars = self.packer.scalar_offsets()
        operands = {op.name for op in self.ops}
        # A record whose descriptors disagree with its spec (C read or not) cannot be launched correctly.
        if set(addresses) != operands or self.has_c != ("beta" in scalars):
            raise CorruptArtifactError(
                f"the record's descriptors {sorted(addresses)} and scalars {sorted(scalars)} do not match "
                f"its spec's operands {sorted(operands)}", record.cubin_path, instance=record.id)
        self.off_a, self.off_b, self.off_d = addresses["a"], addresses["b"], addresses["d"]
        self.off_c = addresses.get("c")
        self.off_alpha, self.off_beta = scalars["alpha"], scalars.get("beta")
        self.prepared: dict[tuple, tuple] = {}
        self.local = threading.local()

    def prepare(self, key: tuple, cache: bool = True) -> tuple:
        """Validate one problem shape; (parameter image without addresses and scales, total cluster tiles,
        footprint extents of a, b, d, c in bytes, whether c=d would be an exact alias, all footprints)."""
        m, n, k, batch, lda, ldb, ldd, ldc, bsa, bsb, bsd, bsc, raster_along_m, group_size = key
        iid = self.record.id
        lds, bss = (lda, ldb, ldd), (bsa, bsb, bsd)
        if self.has_c:
            lds, bss = (*lds, ldc), (*bss, bsc)
        elif ldc is not None or bsc is not None:
            raise self.without_c("ldc" if ldc is not None else "batch_stride_c")
        values = problem.resolve(iid, self.ops, m, n, k, batch, lds, bss)
        clusters_m, clusters_n, total = scheduling.cluster_tiles(
            values["m"], values["n"], values["l"], self.tile_m, self.tile_n, self.cluster_m, self.cluster_n
        )
        values["raster_along_m"], values["group_size"] = walk_order(
            iid, clusters_m, clusters_n, raster_along_m, group_size
        )
        for op in self.ops:
            values[op.name] = 0  # patched per launch
        values["alpha"] = values["beta"] = 0.0  # patched per launch
        fps = problem.footprints(self.ops, values)
        ext_c = fps["c"].extent if self.has_c else 0
        alias_ok = self.has_c and problem.same_layout(fps["c"], fps["d"])
        entry = (bytes(self.packer.pack(values)), total, fps["a"].extent, fps["b"].extent, fps["d"].extent,
                 ext_c, alias_ok, fps)
        if not cache:
            return entry
        if len(self.prepared) >= _PREPARED_PER_INSTANCE:
            self.prepared.clear()
        self.prepared[key] = entry
        return entry

    def buffer(self):
        """This thread's parameter buffer (a ctypes char array of the record's param_bytes)."""
        buf = getattr(self.local, "buf", None)
        if buf is None:
            buf = self.local.buf = (ctypes.c_char * self.record.param_bytes)()
        return buf

    # ---- the slow paths of `launch`: conversions and errors -------------------------------------------
    def c_pointer(self, c) -> int:
        if c is None:
            others = _siblings(self.catalog, self.record, want_c=False)
            raise InvalidArgumentError(
                "this instance reads a C operand (D = alpha * A @ B^T + beta * C) but c is None",
                "pass c=<device pointer of C> (c=d for an in-place update)"
                + (f", or use an instance without C: {', '.join(others)}" if others else ""),
                self.record.id)
        return problem.pointer(self.record.id, "c", c)

    def without_c(self, what: str) -> InvalidArgumentError:
        others = _siblings(self.catalog, self.record, want_c=True)
        return InvalidArgumentError(
            f"{what} given, but this instance does not read a C operand (it computes D = alpha * A @ B^T)",
            "drop it (and leave beta=0.0)"
            + (f", or use an instance that reads C: {', '.join(others)}" if others else
               "; no shipped instance with this spec reads C"),
            self.record.id)

    def scales(self, alpha, beta) -> tuple[float, float]:
        """alpha, beta as checked floats (`launch` already took the no-C + beta != 0 case)."""
        alpha = _scale(self.record.id, "alpha", alpha)
        return alpha, _scale(self.record.id, "beta", beta) if self.has_c else 0.0


def _siblings(catalog, record, want_c: bool) -> list[str]:
    """Ids of shipped instances with `record`'s spec but with (want_c) or without a C operand."""
    def base(spec):
        return replace(spec, c_dtype=None, c_major=None)

    return sorted(iid for iid, rec in catalog.instances.items()
                  if rec.spec.has_c == want_c and base(rec.spec) == base(record.spec))


def _scale(iid: str, name: str, v) -> float:
    """A finite float32 scale. Non-finite values are refused: an inf or NaN scale is almost always an
    uninitialized variable, and would silently fill D with NaN."""
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise InvalidArgumentError(
            f"{name}={v!r} is not a real number",
            f"pass {name} as a Python float (float(t) for a CPU tensor; reading a CUDA tensor would "
            "synchronize, so keep scales on the host)", iid)
    v = float(v)
    if not math.isfinite(v) or abs(v) > FLT_MAX:
        raise InvalidArgumentError(
            f"{name}={v!r} is not a finite float32",
            f"pass a finite {name} with |{name}| <= 3.4e38 (the kernel scales in float32)", iid)
    return v


def walk_order(iid: str, clusters_m: int, clusters_n: int, raster_along_m, group_size) -> tuple[int, int]:
    """(raster_along_m, group_size) for the kernel: the documented default rule (runtime/scheduling.py),
    with the caller's overrides checked and applied."""
    along_m, group = scheduling.default_raster(clusters_m, clusters_n)
    if raster_along_m is not None:
        if raster_along_m not in (0, 1):  # True/False compare equal to 1/0
            raise InvalidArgumentError(
                f"raster_along_m={raster_along_m!r}", "pass True, False or None (automatic)", iid
            )
        along_m = int(raster_along_m)
    if group_size is not None:
        if type(group_size) is not int or not 1 <= group_size <= problem.INT32_MAX:
            raise InvalidArgumentError(
                f"group_size={group_size!r}", "pass a positive int or None (automatic)", iid
            )
        group = group_size
    return along_m, group
