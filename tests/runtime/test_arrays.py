"""runtime/arrays.py: what `gemm()` reads off an array through each protocol, and what it refuses.

The DLPack cases export real DLManagedTensor structures inside real PyCapsules (tests/runtime/
fake_arrays.py), so the ctypes parser is exercised against the C layout, and the capsule's own
destructor reports whether the capsule died unconsumed.
"""

from __future__ import annotations

import gc

import pytest
from fake_arrays import FLOAT64, CaiArray, CpuArray, DLPackArray, TorchTensor

from runtime import arrays
from runtime.arrays import ArrayView, view
from runtime.errors import InvalidArgumentError
from runtime.spec import DType

ALL = list(DType)


# ---- torch ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ALL, ids=str)
def test_torch_tensors_are_read_through_their_attributes(dtype):
    t = TorchTensor((2, 3, 64), dtype, strides=(400, 1, 3), device=1)
    assert view(t, "a") == ArrayView(t.ptr, (2, 3, 64), (400, 1, 3), dtype, 1, "torch")


def test_torch_refusals():
    with pytest.raises(InvalidArgumentError, match=r"a is a torch tensor on cpu, not on a CUDA device.*Fix:"):
        view(TorchTensor((8, 8), DType.bf16, device="cpu"), "a")
    with pytest.raises(InvalidArgumentError, match=r"b has dtype torch.float64.*Fix: convert it with \.to"):
        view(TorchTensor((8, 8), FLOAT64), "b")
    assert arrays.is_torch(TorchTensor((1, 1), DType.bf16)) and not arrays.is_torch(
        CaiArray((1,), DType.fp16)
    )


# ---- __cuda_array_interface__ ----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [DType.fp16, DType.fp32], ids=str)
def test_cai_strides_are_bytes_and_become_elements(dtype):
    x = CaiArray((3, 16, 32), dtype, strides=(40 * 16, 40, 1), stream=7, readonly=True)
    assert view(x, "a") == ArrayView(
        x.ptr, (3, 16, 32), (640, 40, 1), dtype, None, "cuda_array_interface", True, 7
    )


def test_cai_without_strides_is_c_contiguous():
    x = CaiArray((2, 3, 8), DType.fp16, omit_strides=True)
    assert view(x, "a").strides == (24, 8, 1)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"strides": (3, 1)}, r"strides \(3, 1\) \(bytes\) are not whole fp16 elements"),
        ({"mask": object()}, "has a mask"),
        ({"stream": 0}, "names stream 0"),
        ({"shape": None}, "is malformed"),
        ({"typestr": "<f8"}, r"typestr '<f8'.*Fix: pass bf16 and fp8 arrays through DLPack"),
    ],
)
def test_cai_refusals(extra, message):
    x = CaiArray((4, 8), DType.fp16)
    x.extra = extra
    with pytest.raises(InvalidArgumentError, match=message):
        view(x, "a")


def test_cai_bf16_is_refused_naming_dlpack():
    with pytest.raises(InvalidArgumentError, match=r"typestr '<V2'.*bf16 and fp8 have none.*through DLPack"):
        view(CaiArray((8, 8), DType.bf16), "a")


def test_an_object_with_both_protocols_takes_dlpack_for_what_cai_cannot_name():
    class Both(DLPackArray):
        @property
        def __cuda_array_interface__(self):
            return {"shape": self.shape_, "typestr": "<V2", "data": (self.ptr, False), "version": 3}

    x = Both((8, 16), DType.bf16)
    v = view(x, "a", 0)
    assert (v.source, v.dtype, v.ptr) == ("dlpack", DType.bf16, x.ptr) and x.streams == [1]


def test_a_failing_cai_property_falls_back_to_dlpack_or_is_refused():
    # torch's own __cuda_array_interface__ raises KeyError for dtypes without a type string (fp8).
    class Raising(DLPackArray):
        @property
        def __cuda_array_interface__(self):
            raise KeyError(self.dtype_)

    x = Raising((16, 16), DType.e4m3)
    assert view(x, "a").source == "dlpack"

    class RaisingOnly(CaiArray):
        @property
        def __cuda_array_interface__(self):
            raise KeyError(self.dtype_)

    with pytest.raises(InvalidArgumentError, match=r"a.__cuda_array_interface__ failed: KeyError"):
        view(RaisingOnly((16, 16), DType.e4m3), "a")


# ---- DLPack -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ALL, ids=str)
def test_dlpack_capsule_is_parsed(dtype):
    x = DLPackArray((2, 16, 32), dtype, strides=(1024, 1, 16), byte_offset=256, device=(2, 3))
    v = view(x, "a", 0x9000)
    assert v == ArrayView(x.ptr, (2, 16, 32), (1024, 1, 16), dtype, 3, "dlpack")
    assert v.ptr == x.base + 256  # data + byte_offset


def test_dlpack_capsule_is_not_consumed_and_dies_with_the_call():
    x = DLPackArray((16, 16), DType.bf16)
    view(x, "a", 0)
    gc.collect()
    # The capsule's destructor ran, and found the name unchanged: the producer's deleter would run.
    assert x.deaths == [b"dltensor"]


@pytest.mark.parametrize(("ours", "passed"), [(0, 1), (1, 1), (2, 2), (0x9000, 0x9000)])
def test_dlpack_gets_our_stream_with_0_spelled_1(ours, passed):
    x = DLPackArray((16, 16), DType.fp16)
    view(x, "a", ours)
    assert x.streams == [passed]


def test_dlpack_null_strides_mean_row_major_and_versioned_capsules_are_read():
    x = DLPackArray((2, 3, 16), DType.e5m2, null_strides=True)
    assert view(x, "a").strides == (48, 16, 1)
    y = DLPackArray((4, 16), DType.fp16, versioned=True, flags=1)
    v = view(y, "out")
    assert (v.shape, v.strides, v.readonly) == ((4, 16), (16, 1), True)
    gc.collect()
    assert y.deaths == [b"dltensor_versioned"]


def test_dlpack_managed_memory_has_no_device():
    assert view(DLPackArray((16, 16), DType.bf16, device=(13, 0)), "a").device is None


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        (dict(code_bits=(2, 64)), r"DLPack \(code 2, bits 64, lanes 1\).*Fix: convert it"),
        (dict(code_bits=(0, 8)), r"DLPack \(code 0, bits 8"),
        (dict(lanes=2), "lanes 2"),
        (dict(device=(3, 0)), "lives in CUDA pinned host memory, not on a CUDA device"),
        (dict(device=(10, 0)), "lives in ROCm memory"),
    ],
)
def test_dlpack_refusals(kw, message):
    with pytest.raises(InvalidArgumentError, match=message):
        view(DLPackArray((16, 16), DType.bf16, **kw), "a")


def test_non_cuda_and_non_array_objects_are_refused():
    with pytest.raises(
        InvalidArgumentError, match=r"lives in CPU memory, not on a CUDA device.*Fix: gemm runs"
    ):
        view(CpuArray((4, 4)), "a")
    with pytest.raises(
        InvalidArgumentError, match="list, which offers neither __cuda_array_interface__ nor DLPack"
    ):
        view([[1.0]], "b")


def test_a_consumed_capsule_is_refused():
    class Consumed(DLPackArray):
        def __dlpack__(self, stream=None):
            import ctypes

            cap = super().__dlpack__(stream)
            rename = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
                ("PyCapsule_SetName", ctypes.pythonapi)
            )
            rename(cap, b"used_dltensor")
            return cap

    with pytest.raises(InvalidArgumentError, match="did not return an unconsumed 'dltensor' capsule"):
        view(Consumed((16, 16), DType.bf16), "a")
