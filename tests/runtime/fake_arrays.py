"""Fake GPU arrays for the gemm() tests: no memory behind them, only the protocols' surfaces.

- `CaiArray`: only ``__cuda_array_interface__`` (v3 dict, byte strides, optional producer stream);
- `DLPackArray`: only ``__dlpack_device__`` / ``__dlpack__``; each export builds a real DLManagedTensor
  (or DLManagedTensorVersioned) with ctypes, wraps it in a real PyCapsule, and records the stream it
  was asked for and the capsule's name when the capsule died (still "dltensor": not consumed);
- `TorchTensor`: the attribute surface of a torch.Tensor that the runtime reads, its class's module set
  to "torch"; `torch_module()` builds a stand-in ``torch`` module (dtypes, ``empty``, the raw-stream
  getter) for ``sys.modules``.

Addresses come from a bump allocator in a fake device address range (16-byte aligned, below 2**57).
The C structures are declared here from dlpack.h, independently of runtime/arrays.py's, so the tests
check its parser against the ABI rather than against itself.
"""

from __future__ import annotations

import ctypes
import itertools
import types

from runtime.spec import DType

_next = itertools.count()


def alloc(nbytes: int) -> int:
    """A fresh fake device address with `nbytes` behind it (plus a gap), 256-byte aligned."""
    size = (max(nbytes, 1) + 4095) // 4096 * 4096 + 4096
    base = alloc.top
    alloc.top += size
    return base


alloc.top = 0x7F00_0000_0000


def contiguous(shape) -> tuple[int, ...]:
    out, acc = [], 1
    for n in reversed(shape):
        out.append(acc)
        acc *= n
    return tuple(reversed(out))


def span(shape, strides, elem: int) -> int:
    """Bytes from element 0 to the end of the last element (non-negative strides)."""
    if any(n == 0 for n in shape):
        return 0
    return elem * (1 + sum((n - 1) * s for n, s in zip(shape, strides)))


class _Array:
    def __init__(self, shape, dtype: DType, strides=None, ptr=None):
        self.shape_ = tuple(shape)
        self.dtype_ = dtype
        self.strides_ = contiguous(shape) if strides is None else tuple(strides)
        self.ptr = alloc(span(self.shape_, self.strides_, dtype.bytes)) if ptr is None else ptr


# ---- __cuda_array_interface__ ---------------------------------------------------------------------------

_TYPESTR = {DType.fp16: "<f2", DType.fp32: "<f4", DType.bf16: "<V2", DType.e4m3: "|V1", DType.e5m2: "|V1"}


class CaiArray(_Array):
    """Only ``__cuda_array_interface__``. `stream`: the producer stream (v3) or None; `omit_strides`: say
    None for C-contiguous strides, as the protocol allows."""

    def __init__(self, shape, dtype, strides=None, ptr=None, stream=None, readonly=False, omit_strides=False):
        super().__init__(shape, dtype, strides, ptr)
        self.stream, self.readonly, self.omit_strides = stream, readonly, omit_strides
        self.extra: dict = {}

    @property
    def __cuda_array_interface__(self):
        e = self.dtype_.bytes
        return {
            "version": 3,
            "shape": self.shape_,
            "typestr": _TYPESTR[self.dtype_],
            "data": (self.ptr, self.readonly),
            "strides": None if self.omit_strides else tuple(s * e for s in self.strides_),
            "stream": self.stream,
            **self.extra,
        }


# ---- DLPack -----------------------------------------------------------------------------------------------


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version", DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


_api = ctypes.pythonapi
_capsule_new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)(
    ("PyCapsule_New", _api)
)
# Called from the capsule's destructor with a raw pointer: no reference is taken on the dying object.
_capsule_name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.c_void_p)(("PyCapsule_GetName", _api))
_NAMES = {b"dltensor": ctypes.create_string_buffer(b"dltensor")}
_NAMES[b"dltensor_versioned"] = ctypes.create_string_buffer(b"dltensor_versioned")
_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class DLPackArray(_Array):
    """Only DLPack. `device`: (device_type, id); `code_bits`: override the DLPack dtype (code, bits);
    `null_strides`: export NULL strides (compact row-major); `versioned`: a DLPack 1.x capsule
    ("dltensor_versioned") with `flags`."""

    def __init__(
        self,
        shape,
        dtype,
        strides=None,
        ptr=None,
        device=(2, 0),
        byte_offset=0,
        code_bits=None,
        lanes=1,
        null_strides=False,
        versioned=False,
        flags=0,
    ):
        super().__init__(shape, dtype, strides, ptr)
        self.base, self.byte_offset = self.ptr - byte_offset, byte_offset
        self.device, self.code_bits, self.lanes = device, code_bits or dtype.dlpack, lanes
        self.null_strides, self.versioned, self.flags = null_strides, versioned, flags
        self.streams: list = []  # the stream= of each __dlpack__ call
        self.deaths: list = []  # per capsule: None while alive, then its name when it died
        self._keep: dict = {}  # per live capsule: what it points at (and its destructor)

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, stream=None, **kwargs):
        self.streams.append(stream)
        # Drop what dead capsules pointed at (not inside their destructors, which are still running then).
        self._keep = {i: k for i, k in self._keep.items() if self.deaths[i] is None}
        nd = len(self.shape_)
        shape = (ctypes.c_int64 * max(nd, 1))(*self.shape_)
        strides = (ctypes.c_int64 * max(nd, 1))(*self.strides_)
        t = DLTensor()
        t.data = self.base
        t.device = DLDevice(*self.device)
        t.ndim = nd
        t.dtype = DLDataType(self.code_bits[0], self.code_bits[1], self.lanes)
        t.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
        t.strides = None if self.null_strides else ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64))
        t.byte_offset = self.byte_offset
        if self.versioned:
            managed = DLManagedTensorVersioned(version=DLPackVersion(1, 0), flags=self.flags, dl_tensor=t)
            name = b"dltensor_versioned"
        else:
            managed = DLManagedTensor(dl_tensor=t)
            name = b"dltensor"
        deaths, index = self.deaths, len(self.deaths)
        deaths.append(None)

        @_DESTRUCTOR
        def destroy(capsule):
            # A producer frees its DLManagedTensor here if the name is still "dltensor" (not consumed).
            deaths[index] = _capsule_name(capsule)

        self._keep[index] = (managed, shape, strides, destroy)
        address = ctypes.cast(destroy, ctypes.c_void_p).value
        return _capsule_new(ctypes.addressof(managed), ctypes.addressof(_NAMES[name]), address)


class CpuArray(DLPackArray):
    """A NumPy-like host array: DLPack device kDLCPU."""

    def __init__(self, shape, dtype=DType.fp16):
        super().__init__(shape, dtype, device=(1, 0))


# ---- torch ---------------------------------------------------------------------------------------------


class TorchDtype:
    """Stands in for a torch.dtype: hashable by identity, str() is 'torch.<name>'."""

    def __init__(self, name: str):
        self.name = name

    def __str__(self) -> str:
        return f"torch.{self.name}"

    __repr__ = __str__


TORCH_DTYPES = {dt: TorchDtype(dt.array_name) for dt in DType}
FLOAT64 = TorchDtype("float64")


class TorchDevice:
    def __init__(self, type_: str, index):
        self.type, self.index = type_, index

    def __eq__(self, other):
        return isinstance(other, TorchDevice) and (self.type, self.index) == (other.type, other.index)

    def __hash__(self):
        return hash((self.type, self.index))

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"


class TorchTensor(_Array):
    """The torch.Tensor attributes the runtime reads. `device`: a CUDA ordinal, or "cpu"."""

    def __init__(self, shape, dtype, strides=None, ptr=None, device=0):
        torch_dtype = dtype if isinstance(dtype, TorchDtype) else TORCH_DTYPES[dtype]
        elem_type = next((d for d, t in TORCH_DTYPES.items() if t is torch_dtype), DType.fp32)
        super().__init__(shape, elem_type, strides, ptr)
        self.dtype = torch_dtype
        self.device = TorchDevice("cpu", None) if device == "cpu" else TorchDevice("cuda", device)

    @property
    def shape(self):
        return self.shape_

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    def stride(self):
        return self.strides_

    def get_device(self) -> int:
        return -1 if self.device.index is None else self.device.index

    def data_ptr(self) -> int:
        return self.ptr

    def new_empty(self, *shape):
        """As torch's: a tensor of this one's dtype and device, recorded like ``torch.empty`` (the stand-in
        module of the last `torch_module()` call)."""
        return _last_torch_module.empty(*shape, dtype=self.dtype, device=self.device)


TorchTensor.__module__ = "torch"  # how the runtime tells torch tensors apart, without importing torch


_last_torch_module = None  # what TorchTensor.new_empty allocates through


def torch_module(streams=None):
    """A stand-in ``torch`` module: the dtypes by name, ``empty`` (recording its calls in ``.allocated``)
    and ``_C._cuda_getCurrentRawStream`` (from `streams`: device -> raw handle, default 0)."""
    mod = types.ModuleType("torch")
    for t in TORCH_DTYPES.values():
        setattr(mod, t.name, t)
    mod.allocated = []
    mod.streams = dict(streams or {})

    def empty(*shape, dtype, device):  # sizes as arguments, as runtime/array_gemm.py calls torch.empty
        t = TorchTensor(tuple(shape), dtype, device=device.index)
        mod.allocated.append(((tuple(shape), dtype, device), t))
        return t

    mod.empty = empty
    global _last_torch_module
    _last_torch_module = mod
    mod._C = types.SimpleNamespace(_cuda_getCurrentRawStream=lambda device: mod.streams.get(device, 0))
    return mod
