"""A fake CUDA driver module for the runtime tests (no GPU, no cuda-bindings needed).

It implements the handful of ``cu*`` functions and enums the runtime calls, with the cuda-bindings
calling convention (every call returns a tuple whose first item is a CUresult), records every call,
keeps a per-thread context stack like the real driver, and can be told to fail any call.
"""

from __future__ import annotations

import ctypes
import enum
import itertools
import threading
import time
from dataclasses import dataclass


class CUresult(enum.IntEnum):
    CUDA_SUCCESS = 0
    CUDA_ERROR_INVALID_VALUE = 1
    CUDA_ERROR_OUT_OF_MEMORY = 2
    CUDA_ERROR_NOT_INITIALIZED = 3
    CUDA_ERROR_NO_DEVICE = 100
    CUDA_ERROR_INVALID_IMAGE = 200
    CUDA_ERROR_INVALID_CONTEXT = 201
    CUDA_ERROR_NO_BINARY_FOR_GPU = 209
    CUDA_ERROR_INVALID_HANDLE = 400
    CUDA_ERROR_NOT_FOUND = 500
    CUDA_ERROR_ILLEGAL_ADDRESS = 700
    CUDA_ERROR_LAUNCH_FAILED = 719
    CUDA_ERROR_INVALID_CLUSTER_SIZE = 912


class CUfunction_attribute(enum.IntEnum):
    CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
    CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 14


class CUdevice_attribute(enum.IntEnum):
    CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76


class CUlaunchAttributeID(enum.IntEnum):
    CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4
    CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6


class CUpointer_attribute(enum.IntEnum):
    CU_POINTER_ATTRIBUTE_CONTEXT = 1
    CU_POINTER_ATTRIBUTE_IS_MANAGED = 8
    CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9


class Handle:
    """Stands in for CUcontext/CUmodule/CUfunction: an opaque object convertible with int()."""

    def __init__(self, value: int):
        self.value = value

    def __int__(self) -> int:
        return self.value

    def __repr__(self) -> str:
        return f"<Handle {self.value:#x}>"


class _Dim:
    x = y = z = 0


class _AttrValue:
    def __init__(self):
        self.clusterDim = _Dim()
        self.programmaticStreamSerializationAllowed = 0


class CUlaunchAttribute:
    def __init__(self):
        self.id = None
        self.value = _AttrValue()


class CUlaunchConfig:
    gridDimX = gridDimY = gridDimZ = blockDimX = blockDimY = blockDimZ = sharedMemBytes = 0
    hStream = 0
    attrs = ()
    numAttrs = 0


@dataclass
class Device:
    capability: tuple[int, int] = (9, 0)
    sm_count: int = 132
    name: str = "NVIDIA H200"


@dataclass
class Launch:
    """What one cuLaunchKernelEx saw, decoded while the parameter buffer was alive."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    smem: int
    stream: int
    attrs: list
    function: object
    pointers: tuple[int, ...]
    values: tuple[bytes, ...]
    config: object


class FakeDriver:
    CUresult = CUresult
    CUfunction_attribute = CUfunction_attribute
    CUdevice_attribute = CUdevice_attribute
    CUlaunchAttributeID = CUlaunchAttributeID
    CUpointer_attribute = CUpointer_attribute
    CUlaunchConfig = CUlaunchConfig
    CUlaunchAttribute = CUlaunchAttribute

    def __init__(
        self, devices: dict[int, Device] | None = None, version: int = 12090, max_active_clusters: int = 66
    ):
        self.devices = devices if devices is not None else {0: Device()}
        self.contexts = {0x1000 + d: d for d in self.devices}  # context handle -> device ordinal
        self.streams: dict[int, int] = {}  # stream handle -> context handle
        self.pointers: dict[int, tuple[int, bool]] = {}  # address -> (device, managed)
        self.version, self.max_active_clusters = version, max_active_clusters
        self.peer_ok = False
        self.calls: list[tuple[str, tuple]] = []
        self.failures: dict[str, CUresult] = {}
        self.launches: list[Launch] = []
        self.param_sizes: tuple[int, ...] = ()  # how many bytes to read behind each kernel param
        self.load_delay = 0.0
        self._tls = threading.local()
        self._ids = itertools.count(0x9000)
        self.func_attrs: dict[int, dict] = {}
        self.owner: dict[int, int] = {}  # module or function handle -> the context it was loaded in

    # --- test helpers -------------------------------------------------------------------------
    def ctx(self, device: int = 0) -> int:
        return 0x1000 + device

    def fail(self, call: str, result: str = "CUDA_ERROR_INVALID_VALUE") -> None:
        self.failures[call] = CUresult[result]

    def count(self, call: str) -> int:
        return sum(1 for name, _ in self.calls if name == call)

    def args(self, call: str) -> list[tuple]:
        return [a for name, a in self.calls if name == call]

    def set_current(self, ctx: int | None) -> None:
        self._tls.stack = [ctx] if ctx else []

    def new_stream(self, ctx: int) -> int:
        handle = next(self._ids)
        self.streams[handle] = ctx
        return handle

    def _stack(self) -> list:
        if not hasattr(self._tls, "stack"):
            self._tls.stack = []
        return self._tls.stack

    def _enter(self, name: str, *args):
        self.calls.append((name, args))
        return self.failures.get(name)

    # --- driver API -----------------------------------------------------------------------------
    def cuInit(self, flags):
        return (self._enter("cuInit", flags) or CUresult.CUDA_SUCCESS,)

    def cuDriverGetVersion(self):
        err = self._enter("cuDriverGetVersion")
        return (err, 0) if err else (CUresult.CUDA_SUCCESS, self.version)

    def cuCtxGetCurrent(self):
        err = self._enter("cuCtxGetCurrent")
        stack = self._stack()
        return (err, Handle(0)) if err else (CUresult.CUDA_SUCCESS, Handle(stack[-1] if stack else 0))

    def cuStreamGetCtx(self, stream):
        err = self._enter("cuStreamGetCtx", stream)
        if err or stream not in self.streams:
            return (err or CUresult.CUDA_ERROR_INVALID_HANDLE, Handle(0))
        return (CUresult.CUDA_SUCCESS, Handle(self.streams[stream]))

    def cuCtxPushCurrent(self, ctx):
        err = self._enter("cuCtxPushCurrent", int(ctx))
        if not err:
            self._stack().append(int(ctx))
        return (err or CUresult.CUDA_SUCCESS,)

    def cuCtxPopCurrent(self):
        err = self._enter("cuCtxPopCurrent")
        stack = self._stack()
        if err or not stack:
            return (err or CUresult.CUDA_ERROR_INVALID_CONTEXT, Handle(0))
        return (CUresult.CUDA_SUCCESS, Handle(stack.pop()))

    def cuCtxGetDevice(self):
        err = self._enter("cuCtxGetDevice")
        stack = self._stack()
        if err or not stack:
            return (err or CUresult.CUDA_ERROR_INVALID_CONTEXT, 0)
        return (CUresult.CUDA_SUCCESS, self.contexts[stack[-1]])

    def cuDeviceGetCount(self):
        err = self._enter("cuDeviceGetCount")
        return (err, 0) if err else (CUresult.CUDA_SUCCESS, len(self.devices))

    def cuDeviceGetAttribute(self, attr, dev):
        err = self._enter("cuDeviceGetAttribute", attr, dev)
        d = self.devices[int(dev)]
        value = {
            CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: d.capability[0],
            CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: d.capability[1],
            CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: d.sm_count,
        }[attr]
        return (err, 0) if err else (CUresult.CUDA_SUCCESS, value)

    def cuDeviceGetName(self, length, dev):
        err = self._enter("cuDeviceGetName", length, dev)
        return (err or CUresult.CUDA_SUCCESS, self.devices[int(dev)].name.encode().ljust(length, b"\0"))

    def cuModuleLoadData(self, image):
        err = self._enter("cuModuleLoadData", bytes(image[:4]))
        if not err and not self._stack():
            err = CUresult.CUDA_ERROR_INVALID_CONTEXT  # the real call loads into the current context
        time.sleep(self.load_delay)
        if err:
            return (err, Handle(0))
        module = next(self._ids)
        self.owner[module] = self._stack()[-1]
        return (CUresult.CUDA_SUCCESS, Handle(module))

    def cuModuleGetFunction(self, module, name):
        err = self._enter("cuModuleGetFunction", int(module), name)
        if err:
            return (err, Handle(0))
        fn = next(self._ids)
        self.owner[fn] = self.owner.get(int(module))
        return (CUresult.CUDA_SUCCESS, Handle(fn))

    def cuModuleUnload(self, module):
        return (self._enter("cuModuleUnload", int(module)) or CUresult.CUDA_SUCCESS,)

    def cuFuncLoad(self, fn):
        return (self._enter("cuFuncLoad", int(fn)) or CUresult.CUDA_SUCCESS,)

    def cuFuncSetAttribute(self, fn, attr, value):
        err = self._enter("cuFuncSetAttribute", int(fn), attr, value)
        if not err:
            self.func_attrs.setdefault(int(fn), {})[attr] = value
        return (err or CUresult.CUDA_SUCCESS,)

    def cuOccupancyMaxActiveClusters(self, fn, config):
        err = self._enter("cuOccupancyMaxActiveClusters", int(fn), config)
        return (err, 0) if err else (CUresult.CUDA_SUCCESS, self.max_active_clusters)

    def cuLaunchKernelEx(self, config, fn, kernel_params, extra):
        err = self._enter("cuLaunchKernelEx", config, fn, kernel_params, extra)
        stream = config.hStream
        stack = self._stack()
        ctx = self.streams.get(stream) if stream not in (0, 1, 2) else (stack[-1] if stack else None)
        if not err and self.owner.get(int(fn), ctx) != ctx:
            err = CUresult.CUDA_ERROR_INVALID_HANDLE  # a function of another context than the stream's
        if err:
            return (err,)  # a refused launch enqueues nothing
        n = len(self.param_sizes)
        ptrs = tuple((ctypes.c_void_p * n).from_address(kernel_params)) if n else ()
        values = tuple(ctypes.string_at(p, s) for p, s in zip(ptrs, self.param_sizes, strict=True))
        self.launches.append(
            Launch(
                grid=(config.gridDimX, config.gridDimY, config.gridDimZ),
                block=(config.blockDimX, config.blockDimY, config.blockDimZ),
                smem=config.sharedMemBytes,
                stream=config.hStream,
                attrs=list(config.attrs)[: config.numAttrs],
                function=fn,
                pointers=ptrs,
                values=values,
                config=config,
            )
        )
        return (CUresult.CUDA_SUCCESS,)

    def cuPointerGetAttribute(self, attr, ptr):
        err = self._enter("cuPointerGetAttribute", attr, ptr)
        if err or ptr not in self.pointers:
            return (err or CUresult.CUDA_ERROR_INVALID_VALUE, 0)
        dev, managed = self.pointers[ptr]
        if attr == CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
            return (CUresult.CUDA_SUCCESS, dev)
        if attr == CUpointer_attribute.CU_POINTER_ATTRIBUTE_CONTEXT:
            return (CUresult.CUDA_SUCCESS, Handle(self.ctx(dev)) if dev is not None else Handle(0))
        return (CUresult.CUDA_SUCCESS, int(managed))

    def cuEventCreate(self, flags):
        err = self._enter("cuEventCreate", flags)
        if not err and not self._stack():
            err = CUresult.CUDA_ERROR_INVALID_CONTEXT  # the event belongs to the current context
        if err:
            return (err, Handle(0))
        event = next(self._ids)
        self.owner[event] = self._stack()[-1]
        return (CUresult.CUDA_SUCCESS, Handle(event))

    def cuEventRecord(self, event, stream):
        return (self._enter("cuEventRecord", int(event), stream) or CUresult.CUDA_SUCCESS,)

    def cuStreamWaitEvent(self, stream, event, flags):
        return (self._enter("cuStreamWaitEvent", stream, int(event), flags) or CUresult.CUDA_SUCCESS,)

    def cuDeviceCanAccessPeer(self, dev, peer):
        err = self._enter("cuDeviceCanAccessPeer", dev, peer)
        return (err, 0) if err else (CUresult.CUDA_SUCCESS, int(self.peer_ok))
