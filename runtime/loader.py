"""Load each kernel instance once per CUDA context, lazily and thread-safely.

Why ``cuModuleLoadData`` + ``cuModuleGetFunction`` per context rather than the context-independent
``cuLibraryLoadData`` + ``cuKernelGetFunction``: a module's lifetime is exactly its context's, which is
what this cache is keyed by, so there is no process-global library object whose per-context copies the
driver materializes behind our back and that nothing could ever unload; it is the path run on the H200
(2026-11-29; tests/gpu/test_contexts.py loads into two contexts of one device); and it behaves
the same on every driver >= 12.0 whether lazy loading is on or off. The price, reading and hashing the
cubin once per context rather than once per process, is about a millisecond per MB, once.

Everything a launch needs that is not per-call is done here, once per (context, instance): the device
check (compute capability 9.0) and driver-version check, ``cuFuncLoad`` (so the first launch, possibly
inside CUDA-graph capture, does not trigger lazy loading), ``MAX_DYNAMIC_SHARED_SIZE_BYTES`` (and
``NON_PORTABLE_CLUSTER_SIZE_ALLOWED`` for clusters > 8), and ``max_active_clusters``, which the grid rule
needs and ``cuOccupancyMaxActiveClusters`` computes in ~µs.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from .driver import check
from .errors import HgemmError
from .launcher import build_config
from .manifest import read_cubin

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (~10 ms)
if TYPE_CHECKING:
    from .contract import InstanceRecord

# Clusters of up to 8 CTAs are "portable"; larger ones (up to 16 on H100/H200) must be opted into.
PORTABLE_CLUSTER_SIZE = 8
# cuFuncLoad exists from CUDA 12.4 (driver and bindings).
_FUNC_LOAD_VERSION = 12040


@dataclass(frozen=True, slots=True, eq=False)
class LoadedKernel:
    """A kernel instance loaded in one context (immutable; what a launch entry is built from)."""

    record: InstanceRecord
    function: object  # CUfunction, valid in `context`
    module: object  # CUmodule holding it; kept so the handle stays referenced
    context: int
    device: int
    max_active_clusters: int  # for the record's block, cluster and smem_bytes on this device


class KernelCache:
    """Per (context handle, instance id) cache of ``LoadedKernel``s of one ``Runtime`` (runtime/state.py:
    its manifest, driver, device facts, knobs and logger).

    ``get`` is lock-free once an entry exists. On a miss, a per-key lock makes racing threads wait for a
    single load (different kernels still load in parallel). A failed load caches nothing: the next
    ``get`` retries and raises again if the cause persists.
    """

    def __init__(self, runtime):
        self._rt = runtime
        self._loaded: dict[tuple[int, str], LoadedKernel] = {}
        self._lock = threading.Lock()  # guards _key_locks
        self._key_locks: dict[tuple[int, str], threading.Lock] = {}

    def get(self, ctx: int, instance_id: str) -> LoadedKernel:
        """The kernel ``instance_id`` loaded in context ``ctx`` (an int handle); loads it on first use."""
        key = (ctx, instance_id)
        hit = self._loaded.get(key)
        if hit is not None:
            return hit
        record = self._rt.manifest.record(instance_id)  # UnknownInstanceError before taking any lock
        with self._lock:
            key_lock = self._key_locks.setdefault(key, threading.Lock())
        with key_lock:
            hit = self._loaded.get(key)  # another thread may have finished the load while we waited
            if hit is None:
                hit = self._load(ctx, record)
                self._loaded[key] = hit
        with self._lock:
            self._key_locks.pop(key, None)
        return hit

    def forget_context(self, ctx: int) -> None:
        """Drop every kernel loaded in ``ctx`` (its modules die with it)."""
        for key in [k for k in self._loaded if k[0] == ctx]:
            self._loaded.pop(key, None)

    def contexts(self) -> set[int]:
        """The contexts something is loaded in."""
        return {ctx for ctx, _ in self._loaded}

    def __len__(self) -> int:
        return len(self._loaded)

    def _load(self, ctx: int, rec: InstanceRecord) -> LoadedKernel:
        t0 = time.perf_counter()
        devices = self._rt.devices
        dev = devices.context_device(ctx)
        info = devices.check_device(dev)
        version = devices.check_driver(rec.min_driver_version)
        image = read_cubin(rec, self._rt.knobs.verify_sha256)
        iid = rec.id
        with devices.pushed(ctx, iid) as cu:
            module = check(cu.cuModuleLoadData(image), "cuModuleLoadData", iid)
            try:
                fn = check(cu.cuModuleGetFunction(module, rec.symbol.encode()), "cuModuleGetFunction", iid)
                if version >= _FUNC_LOAD_VERSION and hasattr(cu, "cuFuncLoad"):
                    check(cu.cuFuncLoad(fn), "cuFuncLoad", iid)
                fa = cu.CUfunction_attribute
                check(
                    cu.cuFuncSetAttribute(
                        fn, fa.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, rec.smem_bytes
                    ),
                    "cuFuncSetAttribute",
                    iid,
                )
                if rec.cluster_size > PORTABLE_CLUSTER_SIZE:
                    check(
                        cu.cuFuncSetAttribute(fn, fa.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1),
                        "cuFuncSetAttribute",
                        iid,
                    )
                # Occupancy of the launch shape: the query needs the cluster size even for a 1x1 cluster,
                # which launches as a plain grid (`launches_as_cluster`) with as many CTAs resident.
                one_cluster = build_config(cu, rec, rec.cluster, 0, cluster_attribute=True)
                clusters = int(
                    check(
                        cu.cuOccupancyMaxActiveClusters(fn, one_cluster), "cuOccupancyMaxActiveClusters", iid
                    )
                )
            except BaseException:
                # Best effort: the error being raised is the one to report; a failing unload here
                # would only hide it, and the module dies with its context anyway.
                cu.cuModuleUnload(module)
                raise
        cap = self._rt.knobs.num_sms
        if cap is not None and clusters >= 1:
            # HGEMM_NUM_SMS (runtime/knobs.py): the grid leaves the other SMs to concurrent kernels.
            clusters = min(clusters, max(1, cap // rec.cluster_size))
        if clusters < 1:
            raise HgemmError(
                f"not one cluster of {rec.cluster} CTAs x {rec.block} threads with {rec.smem_bytes} "
                f"bytes of shared memory fits on device {dev} ({info.name}, {info.sm_count} SMs)",
                "use the full GPU rather than a small MIG slice, or an instance with a smaller cluster",
                iid,
            )
        self._rt.logger.debug(
            "loaded %s in context %#x (device %d): max_active_clusters=%d, %.2f ms",
            iid,
            ctx,
            dev,
            clusters,
            (time.perf_counter() - t0) * 1e3,
        )
        return LoadedKernel(
            record=rec, function=fn, module=module, context=ctx, device=dev, max_active_clusters=clusters
        )
