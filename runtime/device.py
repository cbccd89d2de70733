"""Which GPU a launch targets, and whether the shipped kernels may run there: ``Devices``, the runtime's
facts about contexts, streams and devices (one per ``Runtime``, runtime/state.py).

A launch targets the context that owns its stream (``cuStreamGetCtx``); the default-stream handles
0/1/2 have no owner and mean "the calling thread's current context" (``cuCtxGetCurrent``). Facts about a
context's device (compute capability, SM count, name) never change, so they are read once and cached.

The context -> device cache is keyed by a driver handle, which can go stale when a context is destroyed
and a new one gets the same address (frameworks keep their primary contexts alive, so this is rare):
``forget_context`` drops it (``Runtime.forget_context``, runtime/state.py, drops everything of a context).

Device of a context: ``cuCtxGetDevice`` reads the *current* context's device, so we push the context,
ask, and pop. ``cuCtxGetDevice_v2(ctx)`` avoids the push but exists only with CUDA 13 drivers and
cuda-bindings 13, and this runs once per context, so the portable push/pop is used everywhere.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from .driver import check, handle, result_name
from .errors import (
    DeviceMismatchError,
    DriverTooOldError,
    InvalidArgumentError,
    NoDeviceError,
    UnsupportedDeviceError,
)

# Stream handles naming "the default stream of the current context" rather than a stream object:
# 0 (the legacy NULL stream), CU_STREAM_LEGACY (0x1) and CU_STREAM_PER_THREAD (0x2).
DEFAULT_STREAMS = (0, 1, 2)
# sm_90a cubins (wgmma, setmaxnreg) run only on compute capability 9.0 exactly: not 8.x, not 10.x.
SUPPORTED_CAPABILITY = (9, 0)


@dataclass(frozen=True)
class DeviceInfo:
    ordinal: int
    name: str
    capability: tuple[int, int]
    sm_count: int


class Devices:
    """Contexts, streams and devices as the driver reports them, each fact asked once.

    ``runtime`` is the owning ``Runtime``: its ``cu`` attribute-like property gives the initialized driver.
    Dict reads and single writes are atomic in CPython, so threads may share the caches without a lock (a
    racing duplicate query is harmless: both write the same fact)."""

    def __init__(self, runtime):
        self._rt = runtime
        self._ctx_device: dict[int, int] = {}
        self._device_info: dict[int, DeviceInfo] = {}
        self._count: int | None = None
        self._version: int | None = None

    def current_context(self) -> int:
        """The calling thread's current context handle; ``NoDeviceError`` if there is none."""
        ctx = handle(check(self._rt.cu.cuCtxGetCurrent(), "cuCtxGetCurrent"))
        if not ctx:
            raise NoDeviceError(
                "no CUDA context is current on this thread, so the default stream names no device",
                "make a context current, e.g. by initializing torch / cuda on that device "
                "(torch.cuda.set_device(i) or any CUDA tensor operation), or pass a stream",
            )
        return ctx

    def stream_context(self, stream: int) -> int:
        """The handle of the context a launch on ``stream`` (an int handle) runs in: the stream's owner, or
        for the default streams the thread's current context. Asked every time: only a launch's first call
        asks (its launch entry then remembers the context, runtime/plan.py), and an answer cached here
        could outlive the stream."""
        if stream in DEFAULT_STREAMS:
            return self.current_context()
        return handle(check(self._rt.cu.cuStreamGetCtx(stream), "cuStreamGetCtx"))

    def forget_context(self, ctx: int) -> None:
        """Drop what is cached about ``ctx`` (call after destroying it)."""
        self._ctx_device.pop(ctx, None)

    @contextlib.contextmanager
    def pushed(self, ctx: int, instance: str | None = None):
        """Make ``ctx`` current on this thread for the block (yielding the driver module), restoring the
        previous one afterwards."""
        cu = self._rt.cu
        check(cu.cuCtxPushCurrent(ctx), "cuCtxPushCurrent", instance)
        try:
            yield cu
        finally:
            check(cu.cuCtxPopCurrent(), "cuCtxPopCurrent", instance)

    def context_device(self, ctx: int) -> int:
        """The device ordinal of context ``ctx`` (cached per context)."""
        dev = self._ctx_device.get(ctx)
        if dev is None:
            with self.pushed(ctx) as cu:
                dev = int(check(cu.cuCtxGetDevice(), "cuCtxGetDevice"))
            self._ctx_device[ctx] = dev
        return dev

    def device_count(self) -> int:
        """Number of CUDA devices visible to this process (read once)."""
        if self._count is None:
            self._count = int(check(self._rt.cu.cuDeviceGetCount(), "cuDeviceGetCount"))
        return self._count

    def driver_version(self) -> int:
        """cuDriverGetVersion(): 1000 * major + 10 * minor of the CUDA version the driver supports."""
        if self._version is None:
            self._version = int(check(self._rt.cu.cuDriverGetVersion(), "cuDriverGetVersion"))
        return self._version

    def device_info(self, dev: int) -> DeviceInfo:
        """Compute capability, SM count and name of device ``dev`` (cached per device)."""
        info = self._device_info.get(dev)
        if info is None:
            cu = self._rt.cu
            a = cu.CUdevice_attribute

            def attr(which) -> int:
                return int(check(cu.cuDeviceGetAttribute(which, dev), "cuDeviceGetAttribute"))

            raw = check(cu.cuDeviceGetName(256, dev), "cuDeviceGetName")
            info = DeviceInfo(
                ordinal=dev,
                name=bytes(raw).split(b"\0", 1)[0].decode(errors="replace"),
                capability=(
                    attr(a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
                    attr(a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR),
                ),
                sm_count=attr(a.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
            )
            self._device_info[dev] = info
        return info

    def check_device(self, dev: int) -> DeviceInfo:
        """``device_info(dev)``, or ``UnsupportedDeviceError`` unless it is compute capability 9.0."""
        info = self.device_info(dev)
        if info.capability != SUPPORTED_CAPABILITY:
            raise UnsupportedDeviceError(dev, info.name, info.capability)
        return info

    def check_driver(self, min_version: int) -> int:
        """The driver's CUDA version, or ``DriverTooOldError`` if it is below ``min_version``."""
        installed = self.driver_version()
        if installed < min_version:
            raise DriverTooOldError(installed, min_version)
        return installed

    def pointer_device(self, ptr: int, operand: str = "pointer", instance: str | None = None) -> int | None:
        """The ordinal of the device whose context owns ``ptr``, None for memory owned by no context (e.g.
        stream-ordered pool allocations); ``InvalidArgumentError`` if CUDA does not know the address.

        Read through ``CU_POINTER_ATTRIBUTE_CONTEXT`` and the (cached) device of that context, not through
        ``CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL``: on a 2 x H200 node (driver 580.159.04, cuda-bindings
        13.3.1, 2026-11-29) the latter answered 0 for memory of device 1, while the owning contexts were
        told apart."""
        cu = self._rt.cu
        res = cu.cuPointerGetAttribute(cu.CUpointer_attribute.CU_POINTER_ATTRIBUTE_CONTEXT, ptr)
        if res[0] and result_name(res[0], cu) == "CUDA_ERROR_INVALID_VALUE":
            raise InvalidArgumentError(
                f"operand {operand!r}: address {ptr:#x} is not memory CUDA knows (not allocated through "
                "CUDA, or already freed)",
                "pass device memory (e.g. a CUDA tensor's data_ptr()) and keep it alive until the GEMM "
                "has run",
                instance,
            )
        ctx = handle(check(res, "cuPointerGetAttribute", instance))
        return self.context_device(ctx) if ctx else None

    def check_pointer(
        self, ptr: int, device: int, operand: str, instance: str | None = None, allow_peer: bool = False
    ) -> None:
        """Raise ``DeviceMismatchError`` unless a kernel on ``device`` may read/write ``ptr``.

        What is checked, in order:
        1. the pointer's device ordinal equals ``device``: accessible;
        2. it is managed memory (``CU_POINTER_ATTRIBUTE_IS_MANAGED``): accessible, since every Hopper
           device has concurrent managed access on Linux and pages migrate on demand;
        3. ``allow_peer`` and ``cuDeviceCanAccessPeer(device, its device)``: accepted. The driver offers
           no query for whether peer access is actually *enabled* between two contexts, so this is the
           caller's promise; off by default, because launching on peer memory without it faults;
        otherwise: ``DeviceMismatchError``. Host memory (pinned or registered) is treated like device
        memory of the device it was registered with.
        """
        pdev = self.pointer_device(ptr, operand, instance)
        if pdev is None or pdev == device:
            # None: memory no context owns (e.g. a stream-ordered pool); no owner to compare.
            return
        cu = self._rt.cu
        managed = check(
            cu.cuPointerGetAttribute(cu.CUpointer_attribute.CU_POINTER_ATTRIBUTE_IS_MANAGED, ptr),
            "cuPointerGetAttribute",
            instance,
        )
        if managed:
            return
        if (
            allow_peer
            and pdev >= 0
            and check(cu.cuDeviceCanAccessPeer(device, pdev), "cuDeviceCanAccessPeer", instance)
        ):
            return
        raise DeviceMismatchError(operand, pdev, device, instance)
