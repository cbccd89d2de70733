"""Every runtime error is an HgemmError naming problem and fix, catchable by its builtin kind, picklable."""

import pickle

import pytest

import runtime
from runtime import errors

EXAMPLES = [
    errors.MissingDependencyError("cuda-bindings missing", "pip install cuda-bindings"),
    errors.KnobError("HGEMM_VERIFY_SHA256", "maybe", "one of 1/0"),
    errors.UnknownInstanceError("gemm_bf16_t128x256_c2x2", ["gemm_bf16_t128x256_c2x1", "gemm_fp8_x"]),
    errors.UnsupportedDeviceError(0, "NVIDIA A100", (8, 0)),
    errors.DriverTooOldError(12020, 12090),
    errors.NoDeviceError("no device", "plug one in"),
    errors.InvalidArgumentError("lda misaligned", "pad it", "inst"),
    errors.CorruptArtifactError("sha mismatch", "/x/y.cubin", instance="inst"),
    errors.CudaDriverError("cuModuleLoadData", "CUDA_ERROR_INVALID_IMAGE", "inst", 200),
    errors.DeviceMismatchError("a", 1, 0, "inst"),
]


@pytest.mark.parametrize("err", EXAMPLES, ids=lambda e: type(e).__name__)
def test_error_names_problem_and_fix(err):
    assert isinstance(err, runtime.HgemmError)
    text = str(err)
    assert err.problem in text and "Fix: " in text and err.fix in text
    if err.instance:
        assert err.instance in text


@pytest.mark.parametrize("err", EXAMPLES, ids=lambda e: type(e).__name__)
def test_error_pickles(err):
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is type(err) and str(back) == str(err) and back.__dict__ == err.__dict__


def test_builtin_kinds():
    assert isinstance(EXAMPLES[1], ValueError)  # KnobError
    assert isinstance(EXAMPLES[2], LookupError)  # UnknownInstanceError
    assert isinstance(EXAMPLES[0], ImportError)
    assert isinstance(EXAMPLES[6], ValueError) and isinstance(EXAMPLES[9], ValueError)
    assert all(isinstance(e, RuntimeError) for e in (EXAMPLES[3], EXAMPLES[4], EXAMPLES[7], EXAMPLES[8]))


def test_unknown_instance_suggests_close_ids():
    err = EXAMPLES[2]
    assert err.suggestions == ("gemm_bf16_t128x256_c2x1",)
    assert "did you mean 'gemm_bf16_t128x256_c2x1'" in str(err)
    assert errors.UnknownInstanceError("zzz", ["gemm_a"]).suggestions == ()


def test_driver_too_old_names_both_versions():
    text = str(EXAMPLES[4])
    assert "12.2 (12020)" in text and "12.9 (12090)" in text


def test_cuda_driver_error_fields():
    err = EXAMPLES[8]
    assert (err.call, err.result, err.instance, err.code) == (
        "cuModuleLoadData",
        "CUDA_ERROR_INVALID_IMAGE",
        "inst",
        200,
    )
    assert "cuModuleLoadData failed with CUDA_ERROR_INVALID_IMAGE [instance inst]" in str(err)
    assert "227 KB" in errors.CudaDriverError("cuFuncSetAttribute", "CUDA_ERROR_INVALID_VALUE").fix
    assert "227 KB" not in errors.CudaDriverError("cuLaunchKernelEx", "CUDA_ERROR_INVALID_VALUE").fix
    # An unknown result still gets a fix.
    assert "Fix: " in str(errors.CudaDriverError("cuX", "CUDA_ERROR_SOMETHING_NEW"))


def test_package_reexports_every_error_class():
    for name in dir(errors):
        obj = getattr(errors, name)
        if isinstance(obj, type) and issubclass(obj, errors.HgemmError):
            assert getattr(runtime, name) is obj
