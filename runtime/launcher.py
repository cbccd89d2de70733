"""The driver side of a launch: ``CUlaunchConfig``s, per-thread parameter buffers with their
``kernelParams`` arrays, and what a failed ``cuLaunchKernelEx`` means.

A launch needs a ``CUlaunchConfig`` (grid, block, dynamic shared memory, stream, and the cluster-dimension
attribute where the cluster holds more than one CTA: `launches_as_cluster`) and ``kernelParams``, a
``void**`` whose i-th entry points at parameter i inside the packed parameter buffer (each parameter at
its manifest offset). Building the config costs ~3 µs in cuda-bindings
and the pointer array ~1.2 µs (CPU dev box, 2026-11-29), as much as the launch itself: on the H200 host
(2026-11-29, tiny kernel, 20k launches, driver 580, cuda-bindings 12.9.10 / 13.3.1) a bare cuLaunchKernelEx
with prebuilt arguments took 4.8-5.0 µs per call. So neither is built per call: a config lives in the
launch entry of its (instance, shape, stream, pdl) (runtime/plan.py), and each thread packs into its own
buffer, whose address, and so whose pointer array, never changes (``ThreadBuffers``). The driver copies
the parameter values at launch (also into a graph node under capture), so a thread may reuse its buffer
as soon as the call returns. Nothing here allocates device memory, synchronizes or copies host<->device:
launches can be captured.
"""

from __future__ import annotations

import ctypes
import threading

from .driver import result_name
from .errors import CudaDriverError

# The driver refuses a handle that names a destroyed (or another) context with one of these; a launch
# whose cached stream -> context entry went stale sees them, drops the entry and retries once.
STALE_RESULTS = frozenset(
    {"CUDA_ERROR_INVALID_HANDLE", "CUDA_ERROR_INVALID_CONTEXT", "CUDA_ERROR_CONTEXT_IS_DESTROYED"}
)


# The launch rules that change a kernel's speed without changing its cubin, in words. The tuning table
# stamps each point's times with them (runtime/tuning.py `kernels_digest`), so a change here makes every
# point stale: `python -m build_tools.tune --stale` re-times them and `doctor` counts them until then.
# Before 2026-12-04 (unrecorded) every launch named its cluster.
LAUNCH_RULES = "1x1 clusters launch as plain grids"


def launches_as_cluster(record) -> bool:
    """Whether a launch of ``record`` carries the cluster-dimension attribute: only where its cluster holds
    more than one CTA. A kernel of 1x1 clusters launches as a plain grid, which runs the same CTAs (PTX
    treats a CTA launched outside a cluster as a cluster of one: %clusterid is %ctaid, cluster barriers
    and multicast masks cover the CTA alone) but starts faster: on the H200 (2026-12-04, docs/PERF.md
    session 44), gemm() with 1x1 picks took 0.979 of the time of the same kernels launched as 1x1
    clusters (20 shapes, two processes; up to 0.92 on memory-bound decode shapes), while picks of larger
    clusters, unchanged, ran at 0.994-1.003; at M >= 4096 the 1x1 instances that dispatch did not pick then
    run 5-11% faster (median per class, session 45: docs/KERNEL.md). The DSL's own host code launches 1x1
    clusters as clusters; the manifest's ``cluster`` stays the kernel's, and the occupancy query still
    names it (runtime/loader.py). Changing this rule means changing `LAUNCH_RULES`."""
    return record.cluster_size > 1


def build_config(
    cu,
    record,
    grid: tuple[int, int, int],
    stream: int,
    programmatic_serialization: bool = False,
    *,
    cluster_attribute: bool | None = None,
):
    """A new ``CUlaunchConfig`` for ``record`` (an ``InstanceRecord``) on ``grid`` and ``stream`` (an int
    handle). ``cluster_attribute``: whether to name the cluster dimension (default: `launches_as_cluster`;
    an occupancy query needs it whatever the cluster)."""
    if cluster_attribute is None:
        cluster_attribute = launches_as_cluster(record)
    attrs = []
    if cluster_attribute:
        cluster = cu.CUlaunchAttribute()
        cluster.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        dim = cluster.value.clusterDim
        dim.x, dim.y, dim.z = record.cluster
        attrs.append(cluster)
    if programmatic_serialization:
        # Lets this kernel start before its stream predecessor finishes; only correct for a kernel
        # that waits on it (griddepcontrol.wait), hence opt-in per launch.
        pss = cu.CUlaunchAttribute()
        pss.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        pss.value.programmaticStreamSerializationAllowed = 1
        attrs.append(pss)
    cfg = cu.CUlaunchConfig()
    cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = grid
    cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = record.block
    cfg.sharedMemBytes = record.smem_bytes
    cfg.hStream = stream
    cfg.attrs = attrs  # the binding copies the list into the C struct
    cfg.numAttrs = len(attrs)
    return cfg


class ThreadBuffers(threading.local):
    """Per thread: one zeroed parameter buffer of ``param_bytes`` bytes and the address of its
    ``kernelParams`` array (``buffer + offset`` per parameter). ``pair`` is (buffer, array address); the
    array object rides along so it lives as long as the buffer does."""

    def __init__(self, param_bytes: int, offsets: tuple[int, ...]):
        buf = (ctypes.c_char * param_bytes)()
        base = ctypes.addressof(buf)
        arr = (ctypes.c_void_p * max(1, len(offsets)))(*[base + o for o in offsets])
        self.pair = (buf, ctypes.addressof(arr))
        self._keep = arr


class PlainBuffers(ThreadBuffers):
    """Per thread, for one launch entry's plain form (runtime/api.py): a parameter buffer that only that
    form writes (``pair[0]``), and ``state``: (the (a, b, d) it was last packed with, or None; its
    ``kernelParams`` address). A launch that repeats the pointers sends the buffer as it is: every other
    byte is the entry's own (its shape, alpha 1), and the driver copies the buffer at each launch and
    never writes it."""

    def __init__(self, param_bytes: int, offsets: tuple[int, ...]):
        super().__init__(param_bytes, offsets)
        self.state = (None, self.pair[1])


def launch_error(err, instance: str) -> CudaDriverError:
    """The error of a refused ``cuLaunchKernelEx``; ``.result in STALE_RESULTS`` says a retry with fresh
    stream facts may succeed."""
    return CudaDriverError("cuLaunchKernelEx", result_name(err), instance, int(err))
