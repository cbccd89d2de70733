"""The CUDA driver API's bindings: importing them, ``cuInit``, the one result checker, handles as ints.

Stateless: the imported module lives on the process's ``Runtime`` (runtime/state.py), which calls
``initialize`` once, through its one test seam (the ``import_bindings`` callable it is built with; tests
pass one that returns the fake driver of tests/runtime/fake_driver.py). Production code has no test
branches.

Importing ``cuda.bindings.driver`` costs ~75 ms (measured 2026-11-29 on the CPU dev box, cuda-bindings
13.5) and fails on machines without the package, so nothing imports it until a GPU call is actually made;
``import hgemm_sm90`` stays cheap and works without a GPU or driver.

Compatibility (cuda-bindings 12.x and 13.x; both were run on the H200 on 2026-11-29: 12.9.10 and 13.3.1
with driver 580): every function used by the runtime exists under the same name in both; the
differences handled here are
- the module path: ``cuda.bindings.driver`` (cuda-python >= 12.6.1 and cuda-bindings 13) vs the old
  ``cuda.cuda`` (cuda-python < 12.6.1; the trampoline was removed in 13.0);
- handle -> int: ``int(handle)`` is deprecated since 13.0 in favour of
  ``cuda.bindings.utils.get_cuda_native_handle``, which 12.x lacks (see ``handle``);
- enums are ``enum.IntEnum`` in 12.x and a faster int-based enum in 13.2+; both are ints with ``.name``,
  and CUDA_SUCCESS is 0, so ``if err:`` tests for failure in both.
Elsewhere: ``cuCtxGetDevice_v2`` is 13-only (runtime/device.py pushes the context instead), and a
pointer's device is read through its owning context (``CU_POINTER_ATTRIBUTE_CONTEXT``):
``..._DEVICE_ORDINAL`` answered 0 for memory of a second GPU with cuda-bindings 13.3.1 (runtime/device.py).
"""

from __future__ import annotations

from .errors import CudaDriverError, MissingDependencyError, NoDeviceError


def import_bindings():
    """Import the driver bindings module (what a ``Runtime`` uses unless a test hands it another)."""
    try:
        from cuda.bindings import driver as mod
    except ImportError:
        try:
            from cuda import cuda as mod  # cuda-python < 12.6.1
        except ImportError as e:
            raise MissingDependencyError(
                "the CUDA driver bindings are not installed (neither cuda.bindings.driver nor cuda.cuda "
                "can be imported)",
                "pip install cuda-bindings (or cuda-python) with the same major version as the CUDA "
                "version your driver supports (nvidia-smi shows it); hgemm-sm90 needs "
                "'cuda-bindings>=12.8,<14'",
            ) from e
    return mod


def initialize(import_fn):
    """``import_fn()`` then ``cuInit(0)``; the initialized module, or ``NoDeviceError`` /
    ``CudaDriverError`` saying why not. The caller caches the result (a failure is retried next time)."""
    mod = import_fn()
    try:
        res = mod.cuInit(0)
    except RuntimeError as e:
        # libcuda.so could not be loaded: 12.x raises RuntimeError("Failed to dlopen ..."), 13.x
        # cuda.pathfinder's DynamicLibNotFoundError, a RuntimeError subclass.
        raise NoDeviceError(
            f"the NVIDIA driver library (libcuda.so) could not be loaded: {e}",
            "install the NVIDIA driver (check with nvidia-smi); in a container, run it with GPU "
            "access (e.g. --gpus all)",
        ) from e
    err = res[0]
    if err:
        name = result_name(err, mod)
        if name == "CUDA_ERROR_NO_DEVICE":
            raise NoDeviceError(
                "cuInit found no CUDA device", "check nvidia-smi and that CUDA_VISIBLE_DEVICES is not empty"
            )
        raise CudaDriverError("cuInit", name, None, int(err))
    return mod


def result_name(err, mod=None) -> str:
    """The CUresult's name, e.g. 'CUDA_ERROR_INVALID_VALUE' (never raises)."""
    name = getattr(err, "name", None)
    if isinstance(name, str):
        return name
    try:
        return mod.CUresult(int(err)).name
    except (AttributeError, ValueError, TypeError):
        return f"CUresult({int(err)})"  # a code this binding version does not know


def check(result, call: str, instance: str | None = None):
    """Check a driver call's result tuple ``(CUresult, *values)``; raise ``CudaDriverError`` naming the
    call and the instance on failure; return None, the single value, or the tuple of values."""
    err = result[0]
    if err:
        raise CudaDriverError(call, result_name(err), instance, int(err))
    n = len(result)
    if n == 2:
        return result[1]
    return None if n == 1 else tuple(result[1:])


# handle type -> function returning the handle's address as an int: a memo of a pure function of the
# installed bindings (not process state), resolved once per type: 13.x's get_cuda_native_handle where it
# knows the type, else int(), which works on 12.x handles (and fakes).
_handle_getters: dict = {}


def handle(obj) -> int:
    """The address behind a driver handle (CUcontext, CUstream, CUfunction, ...) or an int, as an int."""
    if type(obj) is int:
        return obj
    getter = _handle_getters.get(type(obj))
    if getter is None:
        getter = _handle_getters[type(obj)] = _handle_getter_for(obj)
    return getter(obj)


def _handle_getter_for(obj):
    try:
        from cuda.bindings.utils import get_cuda_native_handle
    except ImportError:  # cuda-bindings 12.x: int(handle) is the supported way there
        return int
    try:
        get_cuda_native_handle(obj)
    except TypeError:  # a type it does not know (e.g. CUdevice, which is an ordinal, not a handle)
        return int
    return get_cuda_native_handle
