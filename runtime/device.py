"""Which GPU a launch targets, and whether the shipped kernels may run there.

A launch targets the context that owns its stream (``cuStreamGetCtx``); the default-stream handles
0/1/2 have no owner and mean "the calling thread's current context" (``cuCtxGetCurrent``). Facts about a
context's device (compute capability, SM count, name) never change, so they are read once and cached.
Context handles are cache keys: if a context is destroyed and a new one is created at the same address,
call ``forget_context`` (frameworks use never-destroyed primary contexts, so this is rare).

Device of a context: ``cuCtxGetDevice`` reads the *current* context's device, so we push the context,
ask, and pop. ``cuCtxGetDevice_v2(ctx)`` avoids the push but exists only with CUDA 13 drivers and
cuda-bindings 13, and this runs once per context, so the portable push/pop is used everywhere.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from . import driver
from .driver import check, handle
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


_ctx_device: dict[int, int] = {}
_device_info: dict[int, DeviceInfo] = {}


def current_context() -> int:
    """The calling thread's current context handle; ``NoDeviceError`` if there is none."""
    ctx = handle(check(driver.cu().cuCtxGetCurrent(), "cuCtxGetCurrent"))
    if not ctx:
        raise NoDeviceError(
            "no CUDA context is current on this thread, so the default stream names no device",
            "make a context current, e.g. by initializing torch / cuda on that device "
            "(torch.cuda.set_device(i) or any CUDA tensor operation), or pass a stream")
    return ctx


def stream_context(stream: int) -> int:
    """The handle of the context a launch on ``stream`` (an int handle) runs in."""
    if stream in DEFAULT_STREAMS:
        return current_context()
    return handle(check(driver.cu().cuStreamGetCtx(stream), "cuStreamGetCtx"))


@contextlib.contextmanager
def pushed(ctx: int, instance: str | None = None):
    """Make ``ctx`` current on this thread for the block, restoring the previous one afterwards."""
    cu = driver.cu()
    check(cu.cuCtxPushCurrent(ctx), "cuCtxPushCurrent", instance)
    try:
        yield cu
    finally:
        check(cu.cuCtxPopCurrent(), "cuCtxPopCurrent", instance)


def context_device(ctx: int) -> int:
    """The device ordinal of context ``ctx`` (cached per context)."""
    dev = _ctx_device.get(ctx)
    if dev is None:
        with pushed(ctx) as cu:
            dev = int(check(cu.cuCtxGetDevice(), "cuCtxGetDevice"))
        _ctx_device[ctx] = dev
    return dev


_device_count: int | None = None


def device_count() -> int:
    """Number of CUDA devices visible to this process (read once)."""
    global _device_count
    if _device_count is None:
        _device_count = int(check(driver.cu().cuDeviceGetCount(), "cuDeviceGetCount"))
    return _device_count


def forget_context(ctx: int) -> None:
    """Drop what is cached about ``ctx`` (call after destroying it)."""
    _ctx_device.pop(ctx, None)


def device_info(dev: int) -> DeviceInfo:
    """Compute capability, SM count and name of device ``dev`` (cached per device)."""
    info = _device_info.get(dev)
    if info is None:
        cu = driver.cu()
        a = cu.CUdevice_attribute

        def attr(which) -> int:
            return int(check(cu.cuDeviceGetAttribute(which, dev), "cuDeviceGetAttribute"))

        raw = check(cu.cuDeviceGetName(256, dev), "cuDeviceGetName")
        info = DeviceInfo(
            ordinal=dev, name=bytes(raw).split(b"\0", 1)[0].decode(errors="replace"),
            capability=(attr(a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
                        attr(a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)),
            sm_count=attr(a.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT))
        _device_info[dev] = info
    return info


def check_device(dev: int) -> DeviceInfo:
    """``device_info(dev)``, or ``UnsupportedDeviceError`` unless it is compute capability 9.0."""
    info = device_info(dev)
    if info.capability != SUPPORTED_CAPABILITY:
        raise UnsupportedDeviceError(dev, info.name, info.capability)
    return info


def check_driver(min_version: int) -> int:
    """The installed driver's CUDA version, or ``DriverTooOldError`` if it is below ``min_version``."""
    installed = driver.driver_version()
    if installed < min_version:
        raise DriverTooOldError(installed, min_version)
    return installed


def pointer_device(ptr: int, operand: str = "pointer", instance: str | None = None) -> int | None:
    """The ordinal of the device whose context owns ``ptr``, None for memory owned by no context (e.g.
    stream-ordered pool allocations); ``InvalidArgumentError`` if CUDA does not know the address.

    Read through ``CU_POINTER_ATTRIBUTE_CONTEXT`` and the (cached) device of that context, not through
    ``CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL``: on a 2 x H200 node (driver 580.159.04, cuda-bindings 13.3.1,
    2026-11-29) the latter answered 0 for memory of device 1, while the owning contexts were told apart."""
    cu = driver.cu()
    res = cu.cuPointerGetAttribute(cu.CUpointer_attribute.CU_POINTER_ATTRIBUTE_CONTEXT, ptr)
    if res[0] and driver.result_name(res[0]) == "CUDA_ERROR_INVALID_VALUE":
        raise InvalidArgumentError(
            f"operand {operand!r}: address {ptr:#x} is not memory CUDA knows (not allocated through "
            "CUDA, or already freed)",
            "pass device memory (e.g. a CUDA tensor's data_ptr()) and keep it alive until the GEMM "
            "has run", instance)
    ctx = handle(check(res, "cuPointerGetAttribute", instance))
    return context_device(ctx) if ctx else None


def check_pointer(ptr: int, device: int, operand: str, instance: str | None = None,
                  allow_peer: bool = False) -> None:
    """Raise ``DeviceMismatchError`` unless a kernel on ``device`` may read/write ``ptr``.

    What is checked, in order:
    1. the pointer's device ordinal equals ``device``: accessible;
    2. it is managed memory (``CU_POINTER_ATTRIBUTE_IS_MANAGED``): accessible, since every Hopper device
       has concurrent managed access on Linux and pages migrate on demand;
    3. ``allow_peer`` and ``cuDeviceCanAccessPeer(device, its device)``: accepted. The driver offers no
       query for whether peer access is actually *enabled* between two contexts, so this is the caller's
       promise (it called ``cuCtxEnablePeerAccess``/``torch`` did); off by default, because launching on
       peer memory without it faults and poisons the context;
    otherwise: ``DeviceMismatchError``. Host memory (pinned or registered) is treated like device
    memory of the device it was registered with.
    """
    pdev = pointer_device(ptr, operand, instance)
    if pdev is None or pdev == device:
        # None: memory no context owns (e.g. a stream-ordered pool); the driver offers no owner to compare.
        return
    cu = driver.cu()
    managed = check(cu.cuPointerGetAttribute(cu.CUpointer_attribute.CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                             ptr), "cuPointerGetAttribute", instance)
    if managed:
        return
    if allow_peer and pdev >= 0 and check(cu.cuDeviceCanAccessPeer(device, pdev),
                                          "cuDeviceCanAccessPeer", instance):
        return
    raise DeviceMismatchError(operand, pdev, device, instance)
