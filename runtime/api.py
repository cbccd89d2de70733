"""The public entry points: `instances()` and `launch()`.

`launch` is the whole hot path: validate the problem against the instance (runtime/problem.py), find the
stream's context and the kernel loaded there (runtime/loader.py, once per context), size the persistent
grid (runtime/scheduling.py), pack the parameters from the manifest's contract (runtime/args.py) and call
`cuLaunchKernelEx` (runtime/launcher.py). It allocates no device memory, never synchronizes and copies
nothing between host and device, so it can be captured into a CUDA graph.
"""

from __future__ import annotations

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
    """Everything per instance that `launch` needs and that never changes: built once, then shared."""

    __slots__ = ("record", "ops", "packer", "tile_m", "tile_n", "cluster_m", "cluster_n")

    def __init__(self, record):
        self.record = record
        self.ops = problem.layouts(record.spec)
        self.packer = ParamPacker(record)
        self.tile_m, self.tile_n = record.grid["tile_m"], record.grid["tile_n"]
        self.cluster_m, self.cluster_n = record.cluster[0], record.cluster[1]


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


def _walk(plan: _Plan, clusters_m: int, clusters_n: int, raster_along_m, group_size) -> tuple[int, int]:
    along_m, group = scheduling.default_raster(clusters_m, clusters_n)
    if raster_along_m is not None:
        if raster_along_m not in (0, 1):  # True/False compare equal to 1/0
            raise InvalidArgumentError(
                f"raster_along_m={raster_along_m!r}", "pass True, False or None (automatic)", plan.record.id
            )
        along_m = int(raster_along_m)
    if group_size is not None:
        if type(group_size) is not int or not 1 <= group_size <= problem.INT32_MAX:
            raise InvalidArgumentError(
                f"group_size={group_size!r}", "pass a positive int or None (automatic)", plan.record.id
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
    plan = _plan(instance_id)
    values = problem.resolve(
        instance_id,
        plan.ops,
        ptrs,
        m,
        n,
        k,
        batch,
        (lda, ldb, ldd),
        (batch_stride_a, batch_stride_b, batch_stride_d),
    )
    handle = stream_handle(stream)
    loaded = _kernel_cache().get(device.stream_context(handle), instance_id)
    clusters_m, clusters_n, total = scheduling.cluster_tiles(
        values["m"], values["n"], values["l"], plan.tile_m, plan.tile_n, plan.cluster_m, plan.cluster_n
    )
    values["raster_along_m"], values["group_size"] = _walk(
        plan, clusters_m, clusters_n, raster_along_m, group_size
    )
    grid = scheduling.persistent_grid(total, loaded.max_active_clusters, plan.cluster_m, plan.cluster_n)
    launch_raw(loaded, grid, handle, plan.packer.pack(values))
