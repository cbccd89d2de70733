"""hgemm_sm90: ahead-of-time compiled NVIDIA Hopper (sm_90a) GEMM kernels and a small driver-API runtime.

The wheel ships cubins, a manifest with each kernel instance's launch contract (docs/CONTRACT.md) and this
pure-Python runtime, which loads the cubins and launches them through the CUDA driver API
(cuda-bindings). Importing this package is cheap and needs no GPU: the driver bindings are imported on
the first GPU call. Every error raised is an ``HgemmError`` whose message names the problem and the fix.
"""

from .errors import (
    CorruptArtifactError,
    CudaDriverError,
    DeviceMismatchError,
    DriverTooOldError,
    HgemmError,
    InvalidArgumentError,
    KnobError,
    MissingDependencyError,
    NoDeviceError,
    NoInstanceError,
    UnknownInstanceError,
    UnsupportedDeviceError,
)

__all__ = [
    "gemm",
    "grouped_gemm",
    "select",
    "select_grouped",
    "Choice",
    "Instance",
    "instances",
    "launch",
    "workspace_bytes",
    "CorruptArtifactError",
    "CudaDriverError",
    "DeviceMismatchError",
    "DriverTooOldError",
    "HgemmError",
    "InvalidArgumentError",
    "KnobError",
    "MissingDependencyError",
    "NoDeviceError",
    "NoInstanceError",
    "UnknownInstanceError",
    "UnsupportedDeviceError",
]


# name -> the submodule that defines it. A submodule is never named like its function: importing it would
# set the package attribute of that name to the module (tests/runtime/test_package_api.py).
_API = {
    "Instance": "api",
    "instances": "api",
    "launch": "api",
    "workspace_bytes": "api",
    "gemm": "array_gemm",
    "grouped_gemm": "grouped_array_gemm",
    "select": "dispatch",
    "select_grouped": "dispatch",
    "Choice": "dispatch",
}


def __getattr__(name):
    # The API is imported on first use, so `import hgemm_sm90` stays a sub-millisecond import that needs no
    # GPU, driver or cuda-bindings.
    if name in _API:
        import importlib

        value = getattr(importlib.import_module(f".{_API[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'hgemm_sm90' has no attribute {name!r}")
