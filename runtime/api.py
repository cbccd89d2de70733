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

from . import device, knobs, manifest, problem
from .errors import InvalidArgumentError
from .launcher import launch_raw
from .loader import KernelCache
from .plan import FLT_MAX as _FLT_MAX
from .plan import LaunchPlan
from .spec import GemmSpec
from .stream import stream_handle


Instance = GemmSpec  # what `instances()` lists: each shipped instance's spec; `.id` is its id


_memmove, _pack_into = ctypes.memmove, struct.pack_into
_MAX_ADDRESS = problem.MAX_ADDRESS
_lock = threading.Lock()
_plans: dict[str, LaunchPlan] = {}
_cache: KernelCache | None = None


def _kernel_cache() -> KernelCache:
    global _cache
    if _cache is None:
        with _lock:
            if _cache is None:
                _cache = KernelCache(manifest.default())
    return _cache


def _plan(instance_id: str) -> LaunchPlan:
    plan = _plans.get(instance_id)
    if plan is None:
        catalog = _kernel_cache().manifest
        record = catalog.record(instance_id)  # UnknownInstanceError with suggestions
        with _lock:
            plan = _plans.setdefault(instance_id, LaunchPlan(record, catalog))
    return plan


def instances() -> list[Instance]:
    """Every kernel instance shipped in this installation (its spec; `.id` is the id), sorted by id.
    Needs no GPU."""
    return [rec.spec for _, rec in sorted(manifest.default().instances.items())]


_pointer_checks: bool | None = None


def _check_pointers() -> bool:
    """Whether launches verify their operands' device (HGEMM_CHECK_POINTERS; decided once)."""
    global _pointer_checks
    if _pointer_checks is None:
        mode = knobs.get().check_pointers
        _pointer_checks = mode == "always" or (mode == "auto" and device.device_count() > 1)
    return _pointer_checks


def _pointers_on(loaded, instance_id: str, a: int, b: int, d: int, c: int | None) -> None:
    """DeviceMismatchError unless every operand is accessible from the device the kernel runs on."""
    allow_peer = knobs.get().allow_peer_pointers
    for operand, ptr in (("a", a), ("b", b), ("d", d), ("c", c)):
        if ptr is not None:
            device.check_pointer(ptr, loaded.device, operand, instance_id, allow_peer=allow_peer)


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
    c: int | None = None,
    ldc: int | None = None,
    batch_stride_c: int | None = None,
    alpha: float = 1.0,
    beta: float = 0.0,
    pdl: bool = False,
    raster_along_m: bool | None = None,
    group_size: int | None = None,
) -> None:
    """Enqueue D = alpha * A @ B^T + beta * C (per batch) with kernel instance `instance_id` on `stream`.

    ptrs: (a, b, d) device pointers as ints; per batch A is m x k, B is n x k, D is m x n, laid out as the
    instance's majorness says (see `instances()`). Leading dimensions and batch strides are in elements
    and default to packed. stream: an int handle (0 = the current context's default stream), a
    cuda.bindings CUstream, or an object with `__cuda_stream__` / `.cuda_stream` (torch, cupy).

    C: instances with `has_c` read an m x n C (their own `c_dtype` and `c_major`) and need `c` (a device
    pointer; `ldc`, `batch_stride_c` as for D); C batches may overlap. `c=d` with D's layout updates D in
    place; any other overlap of D with A, B or C is refused, as is D sharing a byte with A or B. Instances
    without C compute D = alpha * A @ B^T: `c`, `ldc`, `batch_stride_c` must be None and `beta` 0.0 (the
    error lists the shipped instances that read C). alpha and beta are finite floats, rounded to float32;
    C is read even when beta == 0 (NaN in C then reaches D: IEEE 0 * NaN = NaN).

    pdl=True (opt-in) launches with programmatic stream serialization (programmatic dependent launch):
    the kernel may start while the previous kernel in `stream` is still running, overlapping its set-up
    with that kernel's tail; it waits for the previous grid to complete and flush its memory
    (griddepcontrol.wait) before its first load, and lets its own dependents start early once its
    consumers are done (griddepcontrol.launch_dependents). Correct after any predecessor, since ours
    waits; a successor launched with PDL must itself wait before reading our D. Off by default: it only
    pays off for back-to-back short kernels, and a profiler shows the overlapping grids.

    raster_along_m / group_size override the persistent walk over output tiles (default: see
    hgemm_sm90.scheduling). Returns once the launch is enqueued; raises an `HgemmError` subclass, before
    launching anything, for an unknown id, bad arguments, a non-sm_90 device or a too-old driver.
    """
    plan = _plans.get(instance_id) or _plan(instance_id)
    key = (m, n, k, batch, lda, ldb, ldd, ldc, batch_stride_a, batch_stride_b, batch_stride_d, batch_stride_c,
           raster_along_m, group_size)
    try:
        entry = plan.prepared[key]
    except KeyError:
        entry = plan.prepare(key)
    except TypeError:  # an unhashable argument: validation names it
        entry = plan.prepare(key, cache=False)
    image, total, ext_a, ext_b, ext_d, ext_c, alias_ok, fps = entry
    try:
        a, b, d = ptrs
        fast = type(a) is int and type(b) is int and type(d) is int
    except (TypeError, ValueError):
        fast = False
    if not (fast and not (a | b | d) & 15 and 0 < a < _MAX_ADDRESS and 0 < b < _MAX_ADDRESS and 0 < d < _MAX_ADDRESS):
        a, b, d = problem.pointers(instance_id, ptrs)  # converts or raises with the reason
    if plan.has_c:
        if not (type(c) is int and not c & 15 and 0 < c < _MAX_ADDRESS):
            c = plan.c_pointer(c)
        if not (type(beta) is float and -_FLT_MAX <= beta <= _FLT_MAX):  # False for NaN too
            alpha, beta = plan.scales(alpha, beta)
        # D may not share a byte with an input, C excepted when it is exactly D (in place: c == d with the
        # same layout, decided per shape). The exact checks run only when byte ranges meet.
        if (a < d + ext_d and d < a + ext_a) or (b < d + ext_d and d < b + ext_b) or (
                (c != d or not alias_ok) and c < d + ext_d and d < c + ext_c):
            problem.check_overlaps(instance_id, fps, {"a": a, "b": b, "c": c, "d": d})
    else:
        if c is not None:
            raise plan.without_c("c")
        if beta != 0.0:
            raise plan.without_c(f"beta={beta!r}")
        if (a < d + ext_d and d < a + ext_a) or (b < d + ext_d and d < b + ext_b):
            problem.check_overlaps(instance_id, fps, {"a": a, "b": b, "d": d})
    if not (type(alpha) is float and -_FLT_MAX <= alpha <= _FLT_MAX):
        alpha, beta = plan.scales(alpha, beta)
    if pdl is not False:
        if pdl is not True:
            raise InvalidArgumentError(f"pdl={pdl!r}", "pass pdl=True or pdl=False", instance_id)
        if not plan.record.pdl:
            raise InvalidArgumentError(
                "pdl=True, but this instance's kernel does not wait for its predecessor (the manifest does "
                "not mark it pdl-capable), so an early start would race",
                "launch it with pdl=False, or rebuild the kernels with this source tree",
                instance_id,
            )
    handle = stream_handle(stream)
    loaded = _kernel_cache().get(device.stream_context(handle), instance_id)
    if _check_pointers():
        _pointers_on(loaded, instance_id, a, b, d, c if plan.has_c else None)
    clusters = loaded.max_active_clusters
    grid = (plan.cluster_m * (total if total < clusters else clusters), plan.cluster_n, 1)
    buf = plan.buffer()
    _memmove(buf, image, len(image))
    _pack_into("<Q", buf, plan.off_a, a)
    _pack_into("<Q", buf, plan.off_b, b)
    _pack_into("<Q", buf, plan.off_d, d)
    _pack_into("<f", buf, plan.off_alpha, alpha)
    if plan.has_c:
        _pack_into("<Q", buf, plan.off_c, c)
        _pack_into("<f", buf, plan.off_beta, beta)
    launch_raw(loaded, grid, handle, buf, programmatic_serialization=pdl)
