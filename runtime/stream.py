"""Normalize the many spellings of "a CUDA stream" to the raw ``CUstream`` handle, as an int.

Called on every launch, so it makes no driver call and does no import: a few type checks, fastest for a
plain int. Accepted, in the order tried:
- an int: the handle itself; 0 is the legacy default stream, 1 ``CU_STREAM_LEGACY``, 2
  ``CU_STREAM_PER_THREAD``;
- an object with ``__cuda_stream__`` (the CUDA stream protocol: returns ``(version, handle)``;
  cuda.core, cuda-bindings >= 13.1 ``CUstream``, recent torch/cupy/numba streams);
- a ``cuda.bindings.driver.CUstream`` (older bindings without the protocol);
- an object with an int ``.cuda_stream`` attribute (``torch.cuda.Stream``, ``torch.cuda.ExternalStream``);
- an integer-like scalar (``__index__``, e.g. ``numpy.uint64``).

Note: with ``CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM=1`` cuda-bindings calls the per-thread-default-stream
variants of the driver API, so handle 0 then means the per-thread stream, as in C with
``--default-stream per-thread``.
"""

from __future__ import annotations

from .errors import InvalidArgumentError

_ACCEPTED = (
    "an int stream handle (0 = legacy default stream), an object implementing the CUDA stream "
    "protocol __cuda_stream__ (cuda.core / cupy / numba / recent torch streams), a "
    "cuda.bindings.driver.CUstream, or an object with an int .cuda_stream attribute "
    "(torch.cuda.Stream)"
)
_MAX_HANDLE = (1 << 64) - 1


def _bad(stream, why: str) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"cannot use {type(stream).__name__} {stream!r} as a CUDA stream: {why}", f"pass {_ACCEPTED}"
    )


def _as_handle(stream, value, source: str) -> int:
    if type(value) is not int:
        if isinstance(value, int) and not isinstance(value, bool):
            value = int(value)
        else:
            raise _bad(stream, f"{source} gave {type(value).__name__} {value!r}, not an int handle")
    if not 0 <= value <= _MAX_HANDLE:
        raise _bad(stream, f"{source} gave {value}, outside the range of a CUstream handle")
    return value


def stream_handle(stream) -> int:
    """The ``CUstream`` handle of ``stream`` as an int; ``InvalidArgumentError`` listing the accepted
    forms for anything else (``None`` included: pass 0 to mean the legacy default stream)."""
    if type(stream) is int:  # fast path; type() rather than isinstance() also keeps bool out
        if 0 <= stream <= _MAX_HANDLE:
            return stream
        raise _bad(stream, "a stream handle is an unsigned 64-bit value")
    if stream is None or isinstance(stream, (bool, float, str, bytes)):
        raise _bad(stream, "not a stream")
    if isinstance(stream, int):  # int subclasses, e.g. an IntEnum
        return _as_handle(stream, int(stream), "int()")
    proto = getattr(stream, "__cuda_stream__", None)
    if proto is not None:
        # A method per the protocol; early cuda.core releases exposed it as a property.
        pair = proto() if callable(proto) else proto
        if not isinstance(pair, tuple) or len(pair) != 2:
            raise _bad(stream, f"__cuda_stream__ returned {pair!r}, not a (version, handle) pair")
        return _as_handle(stream, pair[1], "__cuda_stream__")
    cls = type(stream)
    if cls.__name__ == "CUstream" and cls.__module__.startswith("cuda"):
        # Recognized by name so that this module never imports cuda.bindings.
        from .driver import handle

        return _as_handle(stream, handle(stream), "CUstream")
    value = getattr(stream, "cuda_stream", None)
    if value is not None:
        return _as_handle(stream, value, ".cuda_stream")
    if hasattr(cls, "__index__"):  # integer-like scalars such as numpy.uint64
        return _as_handle(stream, cls.__index__(stream), "__index__")
    raise _bad(stream, "it has neither __cuda_stream__ nor .cuda_stream")
