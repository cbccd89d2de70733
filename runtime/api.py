"""The public entry points: `instances()` and `launch()`.

`launch` is the whole hot path: validate the problem against the instance (runtime/problem.py), find the
stream's context and the kernel loaded there (runtime/loader.py, once per context), size the persistent
grid (runtime/scheduling.py), pack the parameters from the manifest's contract (runtime/args.py) and call
`cuLaunchKernelEx` (runtime/launcher.py). It allocates no device memory, never synchronizes and copies
nothing between host and device, so it can be captured into a CUDA graph.
"""

from __future__ import annotations

import ctypes
import struct
import threading
from dataclasses import dataclass

from . import device, manifest, problem, scheduling
from .args import ParamPacker
from .errors import InvalidArgumentError
from .launcher import launch_raw
from .loader import KernelCache
from .stream import stream_handle


@dataclass(frozen=True)
class Instance:
    """One shipped kernel instance: what it computes and how it is tiled (from the manifest's spec)."""

    id: str
    a_dtype: str
    b_dtype: str
    d_dtype: str
    acc_dtype: str
    a_major: str  # "k" | "m": which extent of A (M x K) is contiguous
    b_major: str  # "k" | "n": which extent of B (N x K) is contiguous
    d_major: str  # "n" | "m": which extent of D (M x N) is contiguous
    tile: tuple[int, int, int]  # CTA tile (M, N, K)
    cluster: tuple[int, int]  # CTAs per cluster along (M, N)
    schedule: str  # "cooperative" | "pingpong"


class _Plan:
    """Everything per instance that `launch` needs and that never changes: built once, then shared.

    Per problem shape (extents, leading dims, batch strides, walk overrides) it caches the validated,
    packed parameter image with zero addresses and the number of cluster tiles (`prepare`); a launch of a
    known shape then costs a dict lookup, a copy of that image into this thread's parameter buffer and
    three 8-byte address writes. Reusing one buffer per thread keeps its address stable, so the
    launcher's pointer-array cache hits too (the driver copies parameter values at launch).
    """

    __slots__ = (
        "record", "ops", "packer", "tile_m", "tile_n", "cluster_m", "cluster_n", "address_offsets",
        "prepared", "local",
    )

    def __init__(self, record):
        self.record = record
        self.ops = problem.layouts(record.spec)
        self.packer = ParamPacker(record)
        self.tile_m, self.tile_n = record.grid["tile_m"], record.grid["tile_n"]
        self.cluster_m, self.cluster_n = record.cluster[0], record.cluster[1]
        self.address_offsets = self.packer.address_offsets()
        self.prepared: dict[tuple, tuple[bytes, int]] = {}
        self.local = threading.local()

    def prepare(self, key: tuple, cache: bool = True) -> tuple[bytes, int]:
        """Validate one problem shape; (parameter image without addresses, total cluster tiles)."""
        m, n, k, batch, lda, ldb, ldd, bsa, bsb, bsd, raster_along_m, group_size = key
        iid = self.record.id
        values = problem.resolve(iid, self.ops, m, n, k, batch, (lda, ldb, ldd), (bsa, bsb, bsd))
        clusters_m, clusters_n, total = scheduling.cluster_tiles(
            values["m"], values["n"], values["l"], self.tile_m, self.tile_n, self.cluster_m, self.cluster_n
        )
        values["raster_along_m"], values["group_size"] = _walk(
            iid, clusters_m, clusters_n, raster_along_m, group_size
        )
        for op in ("a", "b", "d"):
            values[op] = 0  # patched per launch
        entry = (bytes(self.packer.pack(values)), total)
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


_PREPARED_PER_INSTANCE = 1024
_memmove, _pack_into = ctypes.memmove, struct.pack_into
_MAX_ADDRESS = problem.MAX_ADDRESS
_lock = threading.Lock()
_plans: dict[str, _Plan] = {}
_cache: KernelCache | None = None


def _kernel_cache() -> KernelCache:
    global _cache
    if _cache is None:
        with _lock:
            if _cache is None:
                _cache = KernelCache(manifest.default())
    return _cache


def _plan(instance_id: str) -> _Plan:
    plan = _plans.get(instance_id)
    if plan is None:
        record = _kernel_cache().manifest.record(instance_id)  # UnknownInstanceError with suggestions
        with _lock:
            plan = _plans.setdefault(instance_id, _Plan(record))
    return plan


def instances() -> list[Instance]:
    """Every kernel instance shipped in this installation, sorted by id. Needs no GPU."""
    out = []
    for iid, rec in sorted(manifest.default().instances.items()):
        s = rec.spec
        out.append(
            Instance(
                id=iid,
                a_dtype=s["a_dtype"],
                b_dtype=s["b_dtype"],
                d_dtype=s["d_dtype"],
                acc_dtype=s["acc_dtype"],
                a_major=s["a_major"],
                b_major=s["b_major"],
                d_major=s["d_major"],
                tile=tuple(s["tile"]),
                cluster=tuple(s["cluster"]),
                schedule=s["schedule"],
            )
        )
    return out


def _walk(iid: str, clusters_m: int, clusters_n: int, raster_along_m, group_size) -> tuple[int, int]:
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


def launch(
    instance_id: str,
    ptrs,
    stream,
    *,
    m: int,
    n: int,
    k: int,
    batch: int = 1,
    lda: int | None = None,
    ldb: int | None = None,
    ldd: int | None = None,
    batch_stride_a: int | None = None,
    batch_stride_b: int | None = None,
    batch_stride_d: int | None = None,
    raster_along_m: bool | None = None,
    group_size: int | None = None,
) -> None:
    """Enqueue D = A @ B^T (per batch) with kernel instance `instance_id` on `stream`.

    ptrs: (a, b, d) device pointers as ints; per batch A is m x k, B is n x k, D is m x n, laid out as the
    instance's majorness says (see `instances()`). Leading dimensions and batch strides are in elements
    and default to packed. stream: an int handle (0 = the current context's default stream), a
    cuda.bindings CUstream, or an object with `__cuda_stream__` / `.cuda_stream` (torch, cupy).
    raster_along_m / group_size override the persistent walk over output tiles (default: see
    hgemm_sm90.scheduling). Returns once the launch is enqueued; raises an `HgemmError` subclass, before
    launching anything, for an unknown id, bad arguments, a non-sm_90 device or a too-old driver.
    """
    plan = _plans.get(instance_id) or _plan(instance_id)
    key = (m, n, k, batch, lda, ldb, ldd, batch_stride_a, batch_stride_b, batch_stride_d, raster_along_m, group_size)
    try:
        image, total = plan.prepared[key]
    except KeyError:
        image, total = plan.prepare(key)
    except TypeError:  # an unhashable argument: validation names it
        image, total = plan.prepare(key, cache=False)
    try:
        a, b, d = ptrs
        fast = type(a) is int and type(b) is int and type(d) is int
    except (TypeError, ValueError):
        fast = False
    if not (fast and not (a | b | d) & 15 and 0 < a < _MAX_ADDRESS and 0 < b < _MAX_ADDRESS and 0 < d < _MAX_ADDRESS):
        a, b, d = problem.pointers(instance_id, ptrs)  # converts or raises with the reason
    handle = stream_handle(stream)
    loaded = _kernel_cache().get(device.stream_context(handle), instance_id)
    clusters = loaded.max_active_clusters
    grid = (plan.cluster_m * (total if total < clusters else clusters), plan.cluster_n, 1)
    buf = plan.buffer()
    _memmove(buf, image, len(image))
    (off_a, off_b, off_d) = plan.address_offsets
    _pack_into("<Q", buf, off_a, a)
    _pack_into("<Q", buf, off_b, b)
    _pack_into("<Q", buf, off_d, d)
    launch_raw(loaded, grid, handle, buf)
