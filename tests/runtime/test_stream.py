"""stream_handle: every accepted spelling of a stream, and clear rejections."""

import enum
import sys
import timeit

import pytest

from runtime.errors import InvalidArgumentError
from runtime.stream import stream_handle


class ProtocolStream:  # cuda.core / cupy / numba style
    def __init__(self, handle):
        self.handle = handle

    def __cuda_stream__(self):
        return (0, self.handle)


class PropertyProtocolStream:  # early cuda.core exposed the protocol as a property
    @property
    def __cuda_stream__(self):
        return (0, 0xBEEF)


class TorchLikeStream:  # torch.cuda.Stream / ExternalStream
    cuda_stream = 0x7F00_0000_1234


class CUstream:  # what older cuda-bindings CUstream looks like to us: int() gives the handle
    __module__ = "cuda.bindings.driver"

    def __int__(self):
        return 0xABC


class Ordinal(enum.IntEnum):
    PER_THREAD = 2


@pytest.mark.parametrize(
    "stream,handle",
    [
        (0, 0),
        (1, 1),
        (2, 2),
        (0xDEADBEEF, 0xDEADBEEF),
        ((1 << 64) - 1, (1 << 64) - 1),
        (ProtocolStream(0x5555), 0x5555),
        (PropertyProtocolStream(), 0xBEEF),
        (TorchLikeStream(), 0x7F00_0000_1234),
        (CUstream(), 0xABC),
        (Ordinal.PER_THREAD, 2),
    ],
    ids=lambda v: type(v).__name__,
)
def test_accepted(stream, handle):
    assert stream_handle(stream) == handle and type(stream_handle(stream)) is int


def test_real_custream_if_bindings_installed():
    driver = pytest.importorskip("cuda.bindings.driver")
    assert stream_handle(driver.CUstream(0x1234)) == 0x1234


class Nothing:
    pass


class BadProtocol:
    def __cuda_stream__(self):
        return 0x1234  # not a (version, handle) pair


class BadAttr:
    cuda_stream = "0x1234"


@pytest.mark.parametrize(
    "stream,why",
    [
        (None, "not a stream"),
        (True, "not a stream"),
        (1.0, "not a stream"),
        ("0", "not a stream"),
        (-1, "unsigned 64-bit"),
        (1 << 64, "unsigned 64-bit"),
        (Nothing(), "neither __cuda_stream__"),
        (BadProtocol(), "not a \\(version, handle\\) pair"),
        (BadAttr(), "not an int handle"),
        (ProtocolStream(-5), "outside the range"),
    ],
    ids=lambda v: type(v).__name__,
)
def test_rejected_with_the_accepted_forms(stream, why):
    with pytest.raises(InvalidArgumentError, match=why) as e:
        stream_handle(stream)
    assert "__cuda_stream__" in e.value.fix and ".cuda_stream" in e.value.fix and "int" in e.value.fix


def test_no_driver_import():
    # Normalizing must never pull in the driver bindings (it runs on every launch, GPU or not).
    before = "cuda.bindings.driver" in sys.modules
    stream_handle(ProtocolStream(3))
    stream_handle(TorchLikeStream())
    assert ("cuda.bindings.driver" in sys.modules) == before


def test_fast_for_ints():
    per_call = min(timeit.repeat(lambda: stream_handle(0), number=20000, repeat=3)) / 20000
    assert per_call < 5e-6, f"{per_call * 1e9:.0f} ns per call"
