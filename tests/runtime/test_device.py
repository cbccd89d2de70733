"""Driver init, target context/device resolution, device and driver checks, pointer checks."""

import pytest
from fake_driver import Device

from runtime import driver, state
from runtime.errors import (
    CudaDriverError,
    DeviceMismatchError,
    DriverTooOldError,
    InvalidArgumentError,
    MissingDependencyError,
    NoDeviceError,
    UnsupportedDeviceError,
)
from runtime.knobs import Knobs


def test_cuinit_once(fake, rt):
    assert rt.cu is fake and rt.cu is fake
    rt.devices.current_context()
    assert fake.count("cuInit") == 1


def test_no_device_at_init(fake, rt):
    fake.fail("cuInit", "CUDA_ERROR_NO_DEVICE")
    with pytest.raises(NoDeviceError, match="cuInit found no CUDA device"):
        _ = rt.cu
    del fake.failures["cuInit"]
    assert rt.cu is fake  # a failed init is retried, not cached


def test_other_init_failure_is_a_driver_error(fake, rt):
    fake.fail("cuInit", "CUDA_ERROR_OUT_OF_MEMORY")
    with pytest.raises(CudaDriverError) as e:
        _ = rt.cu
    assert e.value.call == "cuInit" and e.value.result == "CUDA_ERROR_OUT_OF_MEMORY"


def test_missing_libcuda_is_no_device(monkeypatch, fake, rt):
    def cuInit(flags):
        raise RuntimeError('"cuda" is an NVIDIA driver library and can only be found via system search')

    monkeypatch.setattr(fake, "cuInit", cuInit)
    with pytest.raises(NoDeviceError, match="libcuda.so") as e:
        _ = rt.cu
    assert "nvidia-smi" in e.value.fix and isinstance(e.value.__cause__, RuntimeError)


def test_missing_bindings(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_cuda(name, *args, **kwargs):
        if name == "cuda" or name.startswith("cuda."):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_cuda)
    with pytest.raises(MissingDependencyError, match="pip install cuda-bindings"):
        driver.import_bindings()
    with pytest.raises(MissingDependencyError):  # what a Runtime without a seam meets first
        _ = state.Runtime(Knobs()).cu


def test_check_returns_values(fake):
    assert driver.check((fake.CUresult.CUDA_SUCCESS,), "x") is None
    assert driver.check((fake.CUresult.CUDA_SUCCESS, 5), "x") == 5
    assert driver.check((fake.CUresult.CUDA_SUCCESS, 5, 6), "x") == (5, 6)
    with pytest.raises(CudaDriverError) as e:
        driver.check((fake.CUresult.CUDA_ERROR_INVALID_HANDLE, None), "cuX", "inst")
    assert (e.value.call, e.value.result, e.value.instance, e.value.code) == (
        "cuX",
        "CUDA_ERROR_INVALID_HANDLE",
        "inst",
        400,
    )
    with pytest.raises(CudaDriverError, match=r"CUresult\(4242\)"):
        driver.check((4242,), "cuY")  # a plain int code the binding does not know


def test_default_stream_uses_current_context(fake, rt):
    assert rt.devices.stream_context(0) == fake.ctx(0)
    assert rt.devices.stream_context(2) == fake.ctx(0)
    assert fake.count("cuStreamGetCtx") == 0


def test_default_stream_without_context(fake, rt):
    fake.set_current(None)
    with pytest.raises(NoDeviceError, match="no CUDA context is current") as e:
        rt.devices.stream_context(0)
    assert "make a context current" in e.value.fix and "pass a stream" in e.value.fix


def test_stream_owner_context(fake, rt):
    fake.devices[1] = Device()
    fake.contexts[fake.ctx(1)] = 1
    s = fake.new_stream(fake.ctx(1))
    assert rt.devices.stream_context(s) == fake.ctx(1)
    assert rt.devices.context_device(fake.ctx(1)) == 1
    with pytest.raises(CudaDriverError, match="cuStreamGetCtx failed with CUDA_ERROR_INVALID_HANDLE"):
        rt.devices.stream_context(0xDEAD)


def test_context_device_pushes_pops_and_caches(fake, rt):
    fake.set_current(None)
    assert rt.devices.context_device(fake.ctx(0)) == 0
    assert rt.devices.context_device(fake.ctx(0)) == 0
    assert fake.count("cuCtxPushCurrent") == fake.count("cuCtxPopCurrent") == 1
    assert fake._stack() == []  # nothing left current


def test_device_info_cached(fake, rt):
    info = rt.devices.device_info(0)
    assert (info.capability, info.sm_count, info.name) == ((9, 0), 132, "NVIDIA H200")
    rt.devices.device_info(0)
    assert fake.count("cuDeviceGetName") == 1


def test_unsupported_device(fake, make_runtime):
    fake.devices[0] = Device(capability=(8, 0), sm_count=108, name="NVIDIA A100-SXM4-80GB")
    with pytest.raises(UnsupportedDeviceError, match="compute capability 8.0") as e:
        make_runtime().devices.check_device(0)
    assert e.value.capability == (8, 0) and "A100" in str(e.value)
    fake.devices[0] = Device(capability=(10, 0), name="NVIDIA B200")
    with pytest.raises(UnsupportedDeviceError, match="10.0"):
        make_runtime().devices.check_device(0)


def test_driver_version_check(fake, rt):
    fake.version = 12020
    with pytest.raises(DriverTooOldError) as e:
        rt.devices.check_driver(12080)
    assert (e.value.installed, e.value.needed) == (12020, 12080)
    assert "CUDA 12.2 (12020)" in str(e.value) and "12.8" in e.value.fix
    assert rt.devices.check_driver(12000) == 12020


def _second_gpu(fake):
    fake.devices[1] = Device()
    fake.contexts[fake.ctx(1)] = 1


def test_pointer_device(fake, rt):
    _second_gpu(fake)
    fake.pointers[0x7000] = (0, False)
    fake.pointers[0x7800] = (1, False)
    fake.pointers[0x8000] = (None, False)  # memory no context owns (a stream-ordered pool)
    assert rt.devices.pointer_device(0x7000) == 0
    assert rt.devices.pointer_device(0x7800) == 1  # through the owning context, not DEVICE_ORDINAL
    assert rt.devices.pointer_device(0x8000) is None
    with pytest.raises(InvalidArgumentError, match="operand 'b': address 0x1234 is not memory CUDA"):
        rt.devices.pointer_device(0x1234, "b", "inst")


def test_check_pointer(fake, rt):
    _second_gpu(fake)
    fake.pointers.update({0x1000: (0, False), 0x2000: (1, False), 0x3000: (1, True)})
    rt.devices.check_pointer(0x1000, 0, "a")
    rt.devices.check_pointer(0x3000, 0, "a")  # managed memory is accessible everywhere
    with pytest.raises(DeviceMismatchError) as e:
        rt.devices.check_pointer(0x2000, 0, "b", "inst")
    assert (e.value.operand, e.value.pointer_device, e.value.target_device) == ("b", 1, 0)
    with pytest.raises(DeviceMismatchError):
        rt.devices.check_pointer(0x2000, 0, "b", allow_peer=True)  # not peer-capable
    fake.peer_ok = True
    rt.devices.check_pointer(0x2000, 0, "b", allow_peer=True)


def test_the_installed_runtime_is_restored(fake, make_runtime):
    before = state._default
    rt = make_runtime()
    assert state.runtime() is rt
    with state.install(state.Runtime(Knobs(), import_bindings=lambda: fake)) as inner:
        assert state.runtime() is inner
    assert state.runtime() is rt and before is not rt
