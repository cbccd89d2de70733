"""What `gemm()` needs to know about an array object, read without importing the array's framework.

`view(x)` turns a GPU array into an `ArrayView`: its device address (any offset included), shape,
strides in elements, `DType`, device ordinal, and which protocol it was read through. Routes, fastest
first:

1. torch tensors, recognized by their type's module name (torch is never imported here): `data_ptr()`,
   `shape`, `stride()`, `dtype`, `is_cuda`, `get_device()`: a handful of C-level attribute reads, which
   keeps `gemm()`'s host cost on torch tensors small (its fast path reads them itself, runtime/array_gemm.py);
2. ``__cuda_array_interface__`` (versions 2 and 3: CuPy, Numba, PyTorch, JAX, ...): a dict with the
   address, shape, typestr and byte strides. Version 3 may name the producer's stream; the view carries
   it, and `gemm()` makes its own stream wait for that stream (the protocol leaves ordering to the
   consumer). The protocol has type strings for fp16 and fp32 only: a bf16 or fp8 array there (``<V2``,
   ``|V1``) is read through DLPack when the object also offers it, and refused otherwise;
3. DLPack (``__dlpack_device__``, ``__dlpack__``): the device must be CUDA (or CUDA managed memory);
   ``__dlpack__(stream=<ours>)`` asks the producer to order its pending work before our stream, and the
   "dltensor" capsule it returns is read with ctypes but not consumed: its name stays unchanged, so the
   capsule's own destructor releases the producer's reference when the capsule is dropped (at the end of
   `view`). The memory stays valid because the caller still holds the array itself.

Anything that is not CUDA memory (a NumPy array, a CPU tensor) is an `InvalidArgumentError`.
"""

from __future__ import annotations

from collections import namedtuple
from struct import unpack as _unpack

from .errors import InvalidArgumentError
from .spec import DType

# DLPack device types: kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3, kDLCUDAManaged = 13 (dlpack.h).
DL_CUDA, DL_CUDA_MANAGED = 2, 13
_DL_DEVICE_NAMES = {1: "CPU", 2: "CUDA", 3: "CUDA pinned host", 4: "OpenCL", 7: "Vulkan", 8: "Metal"}
_DL_DEVICE_NAMES.update({9: "VPI", 10: "ROCm", 11: "ROCm host", 13: "CUDA managed", 14: "oneAPI"})
_DL_READ_ONLY = 1  # DLPACK_FLAG_BITMASK_READ_ONLY of a versioned capsule
# What producers raise when they cannot export (a deleted buffer, no stream support, a copy required, a
# dtype without a type string): turned into InvalidArgumentError (or, where the object offers another
# protocol, a fall-back to it); anything else is a bug worth its own traceback.
_PRODUCER_ERRORS = (TypeError, ValueError, KeyError, RuntimeError, BufferError, NotImplementedError)

_BY_DLPACK = {dt.dlpack: dt for dt in DType}
_BY_NAME = {dt.array_name: dt for dt in DType}
# __cuda_array_interface__ type strings (NumPy's array-interface codes); "=" is native, i.e. little-endian
# on every platform CUDA runs on.
_BY_TYPESTR = {"<f2": (DType.fp16, 2), "=f2": (DType.fp16, 2), "<f4": (DType.fp32, 4), "=f4": (DType.fp32, 4)}
_TORCH_DTYPES: dict = {}  # torch.dtype object -> DType, filled on first sight

SUPPORTED = ", ".join(f"{dt} ({dt.array_name})" for dt in DType)
NEEDS_CUDA = (
    "gemm runs on CUDA device memory: move the array to the GPU first (e.g. x.cuda(), cupy.asarray(x))"
)


class ArrayView(
    namedtuple("ArrayView", "ptr shape strides dtype device source readonly stream", defaults=(False, None))
):
    """One array as `gemm()` sees it (an immutable tuple).

    ptr: device address of element 0 (byte offsets included); shape: extents; strides: in elements
    (never bytes); dtype: a `DType`; device: CUDA ordinal, None for memory of no particular device
    (__cuda_array_interface__ does not say; CUDA managed memory); source: "torch",
    "cuda_array_interface" or "dlpack"; readonly: the producer marked it read-only; stream: the producer
    stream a consumer must make its work wait for (``__cuda_array_interface__`` v3), None when no
    ordering is needed."""

    __slots__ = ()


def is_torch(x) -> bool:
    """Whether `x` is a torch tensor (judged by its type's module, so torch is never imported)."""
    return type(x).__module__.startswith("torch")


def dlpack_stream(stream: int) -> int:
    """The value to pass as ``__dlpack__(stream=...)`` for our CUDA stream handle: DLPack forbids 0 (it
    would be ambiguous between the legacy and the per-thread default stream), and spells the legacy
    default stream, which handle 0 means in the driver API, as 1."""
    return 1 if stream == 0 else stream


def view(x, name: str = "array", stream: int = 0) -> ArrayView:
    """The `ArrayView` of GPU array `x` (`name` is how errors call it). `stream`: the CUDA stream handle
    (int) the caller will use the data on, passed to a DLPack producer so that it orders its pending
    work before that stream. Raises `InvalidArgumentError` for non-CUDA memory, unsupported dtypes and
    objects that offer none of the protocols."""
    if is_torch(x):
        return _torch(x, name)
    try:
        cai = getattr(x, "__cuda_array_interface__", None)
    except _PRODUCER_ERRORS as e:  # e.g. torch's KeyError for a dtype without a type string
        if not hasattr(x, "__dlpack__"):
            raise InvalidArgumentError(
                f"{name}.__cuda_array_interface__ failed: {type(e).__name__}: {e}",
                "pass an array whose dtype the protocol can name (fp16, fp32), or one offering DLPack",
            ) from None
        cai = None
    if cai is not None:
        v = _cai(x, cai, name)
        if v is not None:
            return v
    if hasattr(x, "__dlpack__") and hasattr(x, "__dlpack_device__"):
        return _dlpack(x, name, stream)
    raise InvalidArgumentError(
        f"{name} is a {_typename(x)}, which offers neither __cuda_array_interface__ nor DLPack "
        "(__dlpack__ / __dlpack_device__)",
        "pass a GPU array (a torch tensor, CuPy or JAX array, or any object with one of those protocols)",
    )


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The strides, in elements, of a compact row-major (C-order) array of `shape`."""
    out, acc = [], 1
    for n in reversed(shape):
        out.append(acc)
        acc *= n
    return tuple(reversed(out))


def _typename(x) -> str:
    t = type(x)
    return t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__name__}"


def _dtype_error(name: str, what: str, fix: str = "") -> InvalidArgumentError:
    return InvalidArgumentError(
        f"{name} has dtype {what}, which no gemm kernel reads or writes",
        (fix or "convert it") + f"; the kernels' dtypes are {SUPPORTED}",
    )


# ---- torch -----------------------------------------------------------------------------------------


def torch_dtype(dtype, name: str = "array") -> DType:
    """The `DType` of a torch.dtype object (mapped by its name, e.g. ``torch.bfloat16``; memoized)."""
    dt = _TORCH_DTYPES.get(dtype)
    if dt is None:
        text = str(dtype)
        dt = _BY_NAME.get(text.removeprefix("torch."))
        if dt is None:
            raise _dtype_error(name, text, "convert it with .to(torch.bfloat16) or another kernel dtype")
        _TORCH_DTYPES[dtype] = dt
    return dt


def _torch(x, name: str) -> ArrayView:
    if not x.is_cuda:
        raise InvalidArgumentError(
            f"{name} is a torch tensor on {x.device}, not on a CUDA device", NEEDS_CUDA
        )
    return ArrayView(
        x.data_ptr(), tuple(x.shape), tuple(x.stride()), torch_dtype(x.dtype, name), x.get_device(), "torch"
    )


# ---- __cuda_array_interface__ --------------------------------------------------------------------------


def _cai(x, cai, name: str) -> ArrayView | None:
    """The view from a __cuda_array_interface__ dict; None when its dtype has no type string we read and
    the object offers DLPack too (which names bf16 and fp8)."""
    try:
        shape = tuple(map(int, cai["shape"]))
        typestr = cai["typestr"]
        dtype, item = _BY_TYPESTR.get(typestr, (None, 0))
        ptr, readonly = cai["data"]
    except (KeyError, TypeError, ValueError) as e:
        raise InvalidArgumentError(
            f"{name}.__cuda_array_interface__ is malformed ({type(e).__name__}: {e})",
            "pass an array whose __cuda_array_interface__ follows the protocol (shape, typestr, data), or "
            "one offering DLPack",
        ) from None
    if dtype is None:
        if hasattr(x, "__dlpack__"):
            return None
        raise InvalidArgumentError(
            f"{name}.__cuda_array_interface__ has typestr {typestr!r}, which names no dtype gemm takes: the "
            "protocol's type strings cover fp16 ('<f2') and fp32 ('<f4'), and bf16 and fp8 have none",
            "pass bf16 and fp8 arrays through DLPack (an object with __dlpack__ / __dlpack_device__, e.g. "
            f"torch.from_dlpack / jax arrays), or convert; the kernels' dtypes are {SUPPORTED}",
        )
    if cai.get("mask") is not None:
        raise InvalidArgumentError(
            f"{name}.__cuda_array_interface__ has a mask (a masked array)",
            "pass an array without a mask (fill the masked elements first)",
        )
    strides = cai.get("strides")
    if strides is None:  # C-contiguous, per the protocol
        strides = contiguous_strides(shape)
    else:
        nbytes = tuple(map(int, strides))
        strides = tuple([s // item for s in nbytes])
        if len(strides) != len(shape) or sum(nbytes) != item * sum(strides):
            raise InvalidArgumentError(
                f"{name}.__cuda_array_interface__ strides {nbytes} (bytes) are not whole {dtype} elements "
                f"for shape {shape}",
                "pass an array whose strides are multiples of its element size (a .copy() is)",
            )
    stream = cai.get("stream")
    if stream is not None and (type(stream) is not int or stream <= 0):
        raise InvalidArgumentError(
            f"{name}.__cuda_array_interface__ names stream {stream!r}; the protocol allows None, 1 (legacy "
            "default), 2 (per-thread default) or a stream handle, never 0",
            "fix the producer, or pass the array through DLPack",
        )
    # The protocol's memory is device memory of the current context; the ordinal is not part of it.
    return ArrayView(
        int(ptr or 0), shape, strides, dtype, None, "cuda_array_interface", bool(readonly), stream
    )


# ---- DLPack ------------------------------------------------------------------------------------------

# dlpack.h's DLTensor on a 64-bit platform, 48 bytes: void* data; DLDevice {int32 device_type, device_id};
# int32 ndim; DLDataType {uint8 code, bits; uint16 lanes}; int64* shape; int64* strides (NULL: compact
# row-major); uint64 byte_offset. A legacy capsule ("dltensor") points at a DLManagedTensor, which starts
# with the DLTensor; a versioned one ("dltensor_versioned", DLPack >= 1.0) at a DLManagedTensorVersioned:
# DLPackVersion {uint32 major, minor}; void* manager_ctx; void* deleter; uint64 flags; then the DLTensor.
_DLTENSOR = "<QiiiBBHQQQ"
_VERSIONED_HEAD = "<IIQQQ"  # 32 bytes before the DLTensor
_dl = None  # (string_at, capsule pointer getter), made on first use


def _dl_functions():
    """``ctypes.string_at`` and a private prototype of ``PyCapsule_GetPointer`` (private, so that no other
    user of ``ctypes.pythonapi`` sees changed argtypes). ctypes is imported only here."""
    global _dl
    if _dl is None:
        import ctypes

        get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
            ("PyCapsule_GetPointer", ctypes.pythonapi)
        )
        _dl = (ctypes.string_at, get_pointer)
    return _dl


def _dlpack(x, name: str, stream: int) -> ArrayView:
    try:
        dev_type, dev_id = x.__dlpack_device__()
    except _PRODUCER_ERRORS as e:  # a producer's own refusal, e.g. a deleted buffer
        raise InvalidArgumentError(
            f"{name}.__dlpack_device__() failed: {type(e).__name__}: {e}", "pass a live GPU array"
        ) from None
    if dev_type not in (DL_CUDA, DL_CUDA_MANAGED):
        where = _DL_DEVICE_NAMES.get(int(dev_type), f"DLPack device type {dev_type}")
        raise InvalidArgumentError(
            f"{name} ({_typename(x)}) lives in {where} memory, not on a CUDA device", NEEDS_CUDA
        )
    try:
        capsule = x.__dlpack__(stream=dlpack_stream(stream))
    except _PRODUCER_ERRORS as e:
        raise InvalidArgumentError(
            f"{name}.__dlpack__(stream=...) failed: {type(e).__name__}: {e}",
            "pass a GPU array whose producer supports DLPack export on CUDA streams",
        ) from None
    string_at, get_pointer = _dl_functions()
    # The capsule is read in place, never renamed: its destructor releases the producer's reference when
    # it is dropped at the end of this function.
    readonly = False
    try:
        head = get_pointer(capsule, b"dltensor")
    except ValueError:  # another name: a versioned capsule, or a consumed one
        try:
            head = get_pointer(capsule, b"dltensor_versioned")
        except ValueError:
            raise InvalidArgumentError(
                f"{name}.__dlpack__() did not return an unconsumed 'dltensor' capsule",
                "pass a fresh array (a DLPack capsule can be consumed only once)",
            ) from None
        major, minor, _, _, flags = _unpack(_VERSIONED_HEAD, string_at(head, 32))
        if major != 1:
            raise InvalidArgumentError(
                f"{name}.__dlpack__() returned a DLPack {major}.{minor} tensor",
                "pass an array from a producer speaking DLPack 0.x or 1.x",
            ) from None
        readonly = bool(flags & _DL_READ_ONLY)
        head += 32
    data, dl_type, dl_id, nd, code, bits, lanes, shape_p, strides_p, offset = _unpack(
        _DLTENSOR, string_at(head, 48)
    )
    dtype = _BY_DLPACK.get((code, bits))
    if dtype is None or lanes != 1:
        raise _dtype_error(name, f"DLPack (code {code}, bits {bits}, lanes {lanes})")
    shape = _unpack(f"<{nd}q", string_at(shape_p, 8 * nd)) if nd else ()
    if strides_p:
        strides = _unpack(f"<{nd}q", string_at(strides_p, 8 * nd)) if nd else ()
    else:  # NULL strides: compact row-major (DLPack < 1.2)
        strides = contiguous_strides(shape)
    del capsule
    return ArrayView(
        data + offset, shape, strides, dtype, dl_id if dl_type == DL_CUDA else None, "dlpack", readonly
    )
