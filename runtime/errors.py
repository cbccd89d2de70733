"""Typed exceptions of the hgemm_sm90 runtime.

Every failure the runtime raises is an ``HgemmError`` whose message names the problem *and* the fix,
so a user reading one line of a traceback knows what to do. Subclasses also derive from the
builtin exception a caller would naturally catch (``ValueError`` for bad arguments, ``LookupError`` for
unknown ids, ``RuntimeError`` for environment and driver failures).

This module imports nothing but the standard library at import time: it is what ``import hgemm_sm90``
loads, and it must work on a machine with no GPU and no driver.
"""

from __future__ import annotations


class HgemmError(Exception):
    """Base class of every runtime error.

    Attributes: ``problem`` (what went wrong), ``fix`` (what to do about it) and ``instance`` (the
    kernel instance id involved, or None).
    """

    def __init__(self, problem: str, fix: str, instance: str | None = None):
        self.problem = problem.rstrip(". ")
        self.fix = fix
        self.instance = instance
        super().__init__(str(self))

    def __str__(self) -> str:
        where = f" [instance {self.instance}]" if self.instance else ""
        return f"{self.problem}{where}. Fix: {self.fix}"

    def __reduce__(self):
        # Subclasses have their own constructor signatures; rebuilding from the attribute dict keeps
        # every error picklable (multiprocessing, pytest-xdist) without per-class args bookkeeping.
        return (_rebuild, (type(self), self.__dict__.copy()))


def _rebuild(cls: type, state: dict) -> HgemmError:
    err = cls.__new__(cls)
    err.__dict__.update(state)
    err.args = (str(err),)
    return err


class MissingDependencyError(HgemmError, ImportError):
    """The CUDA driver bindings (cuda-bindings / cuda-python) cannot be imported."""


class KnobError(HgemmError, ValueError):
    """An HGEMM_* environment variable holds a value the runtime cannot use."""

    def __init__(self, name: str, value: str, expected: str):
        self.knob, self.value, self.expected = name, value, expected
        super().__init__(
            f"environment variable {name}={value!r} is not valid ({expected})",
            f"set {name} to {expected}, or unset it to get the default",
        )


class UnknownInstanceError(HgemmError, LookupError):
    """No kernel instance with this id ships in the manifest; ``suggestions`` holds close ids."""

    def __init__(self, instance_id: str, known=()):
        import difflib  # only on this error path: keeps import hgemm_sm90 small

        self.instance_id = instance_id
        self.suggestions = tuple(difflib.get_close_matches(instance_id, list(known), n=5, cutoff=0.6))
        hint = f"did you mean {', '.join(map(repr, self.suggestions))}? " if self.suggestions else ""
        super().__init__(
            f"no kernel instance {instance_id!r} in the manifest",
            hint + "instance ids are derived from kernel_specs.yaml; list the shipped ones with "
            "hgemm_sm90.instances(), or add the instance to the spec and rebuild the wheel",
        )


class UnsupportedDeviceError(HgemmError, RuntimeError):
    """The target GPU is not compute capability 9.0, so sm_90a cubins cannot run on it."""

    def __init__(self, device: int, name: str, capability: tuple[int, int]):
        self.device, self.device_name, self.capability = device, name, tuple(capability)
        major, minor = self.capability
        super().__init__(
            f"CUDA device {device} ({name}) has compute capability {major}.{minor}, but the shipped "
            "kernels are sm_90a cubins, which run only on compute capability 9.0 (H100, H200, GH200)",
            "run on an H100/H200/GH200 (select it with CUDA_VISIBLE_DEVICES, or pass a stream of that "
            "device), or use another GEMM (e.g. torch.matmul) on this GPU",
        )


def _cuda_version(v: int) -> str:
    return f"{v // 1000}.{v % 1000 // 10} ({v})"


class DriverTooOldError(HgemmError, RuntimeError):
    """The installed driver's CUDA version is below what a cubin needs (its ``min_driver_version``)."""

    def __init__(self, installed: int, needed: int):
        self.installed, self.needed = installed, needed
        super().__init__(
            f"the installed NVIDIA driver supports CUDA {_cuda_version(installed)}, but the shipped "
            f"kernels need CUDA {_cuda_version(needed)} or newer (cuDriverGetVersion encoding)",
            f"upgrade the NVIDIA driver to a release that supports CUDA {needed // 1000}."
            f"{needed % 1000 // 10}, or on data-center GPUs install the matching CUDA "
            "forward-compatibility package (cuda-compat)",
        )


class NoDeviceError(HgemmError, RuntimeError):
    """No usable GPU, driver, or CUDA context for the launch."""


class InvalidArgumentError(HgemmError, ValueError):
    """An argument cannot be launched: misaligned pointer/leading dim, bad size, wrong layout, ..."""


_REINSTALL = (
    "reinstall the wheel it came from (pip install --force-reinstall --no-deps "
    "<path>/hgemm_sm90-<version>-py3-none-any.whl), or rebuild the wheel from source; if "
    "HGEMM_KERNEL_DIR is set, point it at a complete build (manifest.json and its cubins)"
)


class CorruptArtifactError(HgemmError, RuntimeError):
    """A shipped artifact is damaged or inconsistent: sha256 mismatch, missing cubin, bad manifest."""

    def __init__(
        self, problem: str, path: str | None = None, fix: str = _REINSTALL, instance: str | None = None
    ):
        self.path = path
        super().__init__(f"{problem} (in {path})" if path else problem, fix, instance)


# Why-and-what-to-do for the CUresults a GEMM launch can plausibly meet; others get _DEFAULT_FIX.
_FAULT = (
    "a kernel faulted and the CUDA context is now unusable: restart the process; check the "
    "pointers, sizes and strides passed (an earlier kernel on the same stream may be the culprit, "
    "since errors surface asynchronously); rerun with compute-sanitizer to locate it"
)
_DRIVER_FIXES = {
    "CUDA_ERROR_NO_DEVICE": "no CUDA device is visible: check nvidia-smi and CUDA_VISIBLE_DEVICES",
    "CUDA_ERROR_NOT_INITIALIZED": "the driver is not initialized or is shutting down: do not launch "
    "from atexit handlers or after interpreter shutdown began",
    "CUDA_ERROR_DEINITIALIZED": "the driver is shutting down: do not launch from atexit handlers",
    "CUDA_ERROR_INVALID_CONTEXT": "make a CUDA context current on the target device (e.g. by "
    "initializing torch/cupy there) or pass a stream of that device",
    "CUDA_ERROR_CONTEXT_IS_DESTROYED": "the context was destroyed: launch on a live context (after "
    "destroying a context, hgemm_sm90.state.runtime().forget_context(ctx) "
    "drops what was loaded there)",
    "CUDA_ERROR_INVALID_HANDLE": "a handle is stale or foreign: the stream may have been destroyed or "
    "belong to another device than the kernel was loaded for",
    "CUDA_ERROR_NO_BINARY_FOR_GPU": "the cubin is sm_90a and runs only on H100/H200/GH200",
    "CUDA_ERROR_INVALID_IMAGE": "the cubin is damaged or not for this GPU: " + _REINSTALL,
    "CUDA_ERROR_UNSUPPORTED_PTX_VERSION": "upgrade the NVIDIA driver",
    "CUDA_ERROR_OUT_OF_MEMORY": "free device memory (other processes, caching allocators) and retry",
    "CUDA_ERROR_INVALID_CLUSTER_SIZE": "this GPU or GPU partition (MIG) cannot run the instance's "
    "cluster shape: pick an instance with a smaller cluster",
    "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES": "the kernel needs more registers or shared memory than this "
    "device offers: report it with the instance id",
    "CUDA_ERROR_ILLEGAL_ADDRESS": _FAULT,
    "CUDA_ERROR_MISALIGNED_ADDRESS": _FAULT,
    "CUDA_ERROR_ILLEGAL_INSTRUCTION": _FAULT,
    "CUDA_ERROR_LAUNCH_FAILED": _FAULT,
    "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED": "this call is not allowed while a CUDA graph is being "
    "captured: run the GEMM once before capture so its "
    "kernel is loaded, then capture",
    "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED": "the CUDA graph capture was already broken by an "
    "earlier call: end the capture and check that call",
}
# Where the same result means something more specific for one call.
_CALL_FIXES = {
    (
        "cuModuleGetFunction",
        "CUDA_ERROR_NOT_FOUND",
    ): "the kernel symbol is not in its cubin (manifest and cubin disagree): " + _REINSTALL,
    (
        "cuFuncSetAttribute",
        "CUDA_ERROR_INVALID_VALUE",
    ): "the instance needs more shared memory per block than this device allows (227 KB on "
    "H100/H200): report it with the instance id",
}
_DEFAULT_FIX = (
    "look the result up in the CUDA driver API docs; rerun with CUDA_LAUNCH_BLOCKING=1 "
    "to pin asynchronous errors to their call; report it with the instance id if it persists"
)


class CudaDriverError(HgemmError, RuntimeError):
    """A CUDA driver call returned an error; carries ``call``, ``result`` (CUresult name),
    ``code`` (its number, or None) and ``instance``."""

    def __init__(self, call: str, result: str, instance: str | None = None, code: int | None = None):
        self.call, self.result, self.code = call, result, code
        fix = _CALL_FIXES.get((call, result)) or _DRIVER_FIXES.get(result, _DEFAULT_FIX)
        super().__init__(f"{call} failed with {result}", fix, instance)


class DeviceMismatchError(HgemmError, ValueError):
    """An operand lives on another device than the launch's, and is not accessible from it."""

    def __init__(self, operand: str, pointer_device: int, target_device: int, instance: str | None = None):
        self.operand, self.pointer_device, self.target_device = operand, pointer_device, target_device
        super().__init__(
            f"operand {operand!r} lives on CUDA device {pointer_device}, but the launch targets "
            f"device {target_device} (the device of the stream's context) and cannot access it",
            f"move the operand to device {target_device}, or launch on a stream of device {pointer_device}",
            instance,
        )


class NoInstanceError(HgemmError, LookupError):
    """No shipped instance can run the problem (its dtypes, layouts or C); ``nearest`` holds the ids of
    the closest shipped instances (fewest differing dtype/layout/C fields)."""

    def __init__(self, wanted: str, nearest=()):
        self.wanted, self.nearest = wanted, tuple(nearest)
        listed = ", ".join(self.nearest) if self.nearest else "none"
        super().__init__(
            f"no shipped kernel instance computes {wanted}",
            f"the nearest shipped instances are: {listed}. Convert the operands to a shipped combination "
            "(python -m hgemm_sm90 list shows them), or add the combination to kernel_specs.yaml and rebuild "
            "the wheel",
        )
