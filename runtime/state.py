"""The process-wide state of the runtime, in one object: ``Runtime``.

Everything the launch path remembers between calls lives on one ``Runtime``: the knobs (read from the
environment once), the driver bindings (imported and ``cuInit``-ed on first use, through the one seam
``import_bindings``), the manifest (read on first use), the per-context kernel cache (runtime/loader.py),
the device facts (runtime/device.py: context -> device, device info, device count, driver version),
whether launches check their pointers' device, and the launch plans per instance (runtime/plan.py, which
hold the per-shape launch entries). ``runtime()`` is the process's instance, created on first use; tests
build their own around a fake driver and a kernel folder and ``install`` it.

Why launch entries may remember a stream's context (asking the driver per launch, cuStreamGetCtx, costs a
round trip): a stream never changes context, and if a stream is destroyed and its handle reused by a
stream of another context, the entry's function belongs to the wrong context and the driver refuses the
launch (INVALID_HANDLE / INVALID_CONTEXT / CONTEXT_IS_DESTROYED), enqueueing nothing; `launch` then drops
the stream's entries and prepares the launch again, once (runtime/api.py). ``forget_stream`` and
``forget_context`` drop them up front.

Nothing here runs at import: ``import hgemm_sm90`` stays cheap and needs no GPU.
"""

from __future__ import annotations

import os
import threading

from . import driver, knobs, manifest
from .device import Devices
from .loader import KernelCache
from .plan import LaunchPlan
from .workspace import Workspaces

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (~10 ms)
if TYPE_CHECKING:
    from .contract import Manifest


class Runtime:
    """One process's (or one test's) runtime state. Thread-safe: lazy members are created under a lock,
    caches are dicts whose single reads and writes are atomic, and cached values are never mutated after
    they are published."""

    def __init__(
        self,
        knob_values: knobs.Knobs | None = None,
        import_bindings=None,
        manifest_path: str | None = None,
        catalog: Manifest | None = None,
    ):
        self.knobs = knob_values if knob_values is not None else knobs.Knobs.from_env()
        self._import_bindings = import_bindings or driver.import_bindings
        self._manifest_path = manifest_path
        self._manifest = catalog
        self._cu = None
        self._logger = None
        self._lock = threading.Lock()
        self.devices = Devices(self)
        self.kernels = KernelCache(self)
        self.plans: dict[str, LaunchPlan] = {}
        self.workspaces = Workspaces(self)  # gemm()'s split-K workspaces (runtime/workspace.py)
        # Dispatch (runtime/dispatch.py): choices by select()'s exact arguments, and the manifest's
        # instances grouped by problem class (built on the first choice).
        self.choices: dict = {}
        self.instance_classes: dict | None = None
        # Whether each launch asks the driver where its operands live (HGEMM_CHECK_POINTERS): decided on
        # the first launch (it needs the device count), so before any launch entry exists.
        self.check_pointers: bool | None = None

    def _once(self, name: str, make):
        """The lazy member `name`, made by `make()` under the lock on first use (a failure is raised and
        retried next time)."""
        with self._lock:
            value = getattr(self, name)
            if value is None:
                value = make()
                setattr(self, name, value)
        return value

    @property
    def cu(self):
        """The initialized driver module: imported and ``cuInit(0)``-ed on first use."""
        return self._cu or self._once("_cu", lambda: driver.initialize(self._import_bindings))

    @property
    def manifest(self) -> Manifest:
        """The manifest launches read (HGEMM_KERNEL_DIR, else the package's kernels/), read once."""
        return self._manifest or self._once(
            "_manifest",
            lambda: manifest.load(
                self._manifest_path or os.path.join(manifest.kernel_dir(self.knobs), manifest.MANIFEST_NAME)
            ),
        )

    @property
    def logger(self):
        """The ``hgemm_sm90`` logger, levelled by HGEMM_LOG_LEVEL (runtime/knobs.py)."""
        return self._logger or self._once("_logger", lambda: knobs.make_logger(self.knobs))

    def plan(self, instance_id) -> LaunchPlan:
        """The launch plan of ``instance_id``: ``InvalidArgumentError`` for a non-string id,
        ``UnknownInstanceError`` (with close ids) for an unknown one."""
        plan = self.plans.get(instance_id) if type(instance_id) is str else None
        if plan is None:
            catalog = self.manifest
            record = catalog.record(instance_id)
            with self._lock:
                plan = self.plans.setdefault(instance_id, LaunchPlan(record, catalog))
        return plan

    def decide_pointer_checks(self) -> bool:
        """HGEMM_CHECK_POINTERS: always, never, or (auto) when more than one device is visible — the only
        case where a pointer can belong to another GPU; a single-GPU process skips the ~1 µs-per-operand
        driver query."""
        if self.check_pointers is None:
            mode = self.knobs.check_pointers
            self.check_pointers = mode == "always" or (mode == "auto" and self.devices.device_count() > 1)
        return self.check_pointers

    def forget_stream(self, stream: int) -> None:
        """Drop the launch entries of stream handle ``stream`` (after destroying it)."""
        for plan in list(self.plans.values()):
            plan.forget(lambda e: e.stream == stream)

    def forget_context(self, ctx: int) -> None:
        """Drop every kernel, launch entry and device fact of context ``ctx`` (call after destroying it;
        its modules died with it)."""
        self.kernels.forget_context(ctx)
        self.devices.forget_context(ctx)
        for plan in list(self.plans.values()):
            plan.forget(lambda e: e.context == ctx)


_default: Runtime | None = None
_default_lock = threading.Lock()


def runtime() -> Runtime:
    """The process's ``Runtime``, created on first use (reads the HGEMM_* knobs then)."""
    rt = _default
    if rt is None:
        with _default_lock:
            if _default is None:
                _set(Runtime())
            rt = _default
    return rt


def _set(rt: Runtime | None) -> Runtime | None:
    global _default
    previous, _default = _default, rt
    return previous


class install:
    """``with install(Runtime(...)) as rt:`` makes ``rt`` the process's runtime for the block (tests: a
    runtime around a fake driver), restoring the previous one afterwards."""

    def __init__(self, rt: Runtime):
        self.rt = rt

    def __enter__(self) -> Runtime:
        with _default_lock:
            self._previous = _set(self.rt)
        return self.rt

    def __exit__(self, *exc) -> None:
        with _default_lock:
            _set(self._previous)
