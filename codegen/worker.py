"""What runs on a compile worker: one instance in, its compiled bytes and launch contract out.

A worker is a process of the local pool or of a Dask cluster (codegen/executors.py); either way it only
computes. It returns everything the cache needs (the cubin, the exported host object and header, the
record as JSON, the host entry point, the compile seconds) as plain picklable data, and the driver
(codegen/build.py) alone writes the build cache and the output directory: a remote worker has neither,
and one writer means no two processes race on an entry.

A worker's own toolchain stamp must equal the driver's: the cache key is computed by the driver from its
stamp, so a worker on another DSL version or another checkout would file its cubin under a key that
promises something else. Each worker checks once and refuses every job if they differ.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
import threading
import traceback
from dataclasses import dataclass
from pathlib import Path

from runtime.spec import GemmSpec


class BuildError(RuntimeError):
    pass


@dataclass(frozen=True)
class Compiled:
    """One compiled instance as it travels from a worker to the driver."""

    name: str
    files: dict[str, bytes]  # kernel.cubin, host.o, host.h: the cache entry's artifacts
    record: dict  # runtime.contract.InstanceRecord.to_json()
    host_function: dict  # {"prefix": ..., "name": ...}: the exported host entry point
    compile_seconds: float


@dataclass(frozen=True)
class Failed:
    """A job that ran and failed: the instance id and the error with its traceback."""

    name: str
    error: str


# One set-up per worker process. A Dask worker may run tasks on several threads; the DSL keeps
# process-wide state (MLIR contexts, its environment read at import), so compiles in one process are
# serialized: parallelism comes from processes (pool workers, Dask workers started with --nthreads 1).
_READY_LOCK = threading.Lock()
_COMPILE_LOCK = threading.Lock()
_WORKER_STAMP: dict | None = None


def _ensure_ready() -> dict:
    """Configure the DSL for sm_90a before it is imported in this process; returns this worker's stamp."""
    global _WORKER_STAMP
    with _READY_LOCK:
        if _WORKER_STAMP is not None:
            return _WORKER_STAMP
        from .dsl import configure_environment
        from .toolchain import toolchain_stamp

        if "cutlass" in sys.modules and os.environ.get("CUTE_DSL_ARCH") != "sm_90a":
            # The DSL reads its target at import: too late to configure this process.
            raise BuildError(
                "this worker imported the CuTe DSL before hgemm-sm90 configured it for sm_90a; "
                "compile on fresh worker processes"
            )
        dump = tempfile.mkdtemp(prefix="hgemm-dsl-dump-")
        # The DSL dumps intermediates there; pool and Dask worker processes run atexit handlers on a
        # clean shutdown, so the directory goes with the worker.
        atexit.register(shutil.rmtree, dump, True)
        configure_environment(dump)
        _WORKER_STAMP = toolchain_stamp()
        return _WORKER_STAMP


def compile_and_capture(spec: GemmSpec) -> Compiled:
    """Compile one instance for sm_90a and capture its launch contract (no cache, no output written)."""
    from .contract import capture_contract
    from .cubin_info import parse_cubin
    from .dsl import compile_instance
    from .validity import why_unsupported

    # The matrix expansion already drops these; a direct caller must not get a silently wrong cubin (the
    # DSL happily traces some shapes this kernel does not handle, e.g. a 96-row tile).
    reason = why_unsupported(spec)
    if reason is not None:
        raise BuildError(f"{spec.name()} is not supported by this kernel: {reason}")
    with tempfile.TemporaryDirectory(prefix="hgemm-build-") as tmp:
        compiled = compile_instance(spec, Path(tmp) / "export")
        info = parse_cubin(compiled.cubin)
        record = capture_contract(spec, compiled, info, Path(tmp) / "oracle")
        check_no_spills(spec, record.stats)
        return Compiled(
            name=spec.name(),
            files={
                "kernel.cubin": compiled.cubin,
                "host.o": compiled.host_object.read_bytes(),
                "host.h": compiled.host_header.read_bytes(),
            },
            record=record.to_json(),
            host_function={"prefix": compiled.prefix, "name": compiled.function_name},
            compile_seconds=compiled.compile_seconds,  # a build fact: the cache's index, not the record
        )


def check_no_spills(spec: GemmSpec, stats: dict) -> None:
    """BuildError if the kernel uses local memory: a spilling GEMM mainloop is several times slower and
    nothing else would say so. The register plan (codegen/validity.py) is meant to make this unreachable
    for supported specs; this is the measured check behind it."""
    if stats["local_bytes"] > 0:
        raise BuildError(
            f"{spec.name()} spills: ptxas placed {stats['local_bytes']} bytes per thread in local memory "
            f"({stats['registers']} registers at launch). The register plan is too optimistic for this tile: "
            "use a smaller tile (or fp8_fast_accum), or raise codegen.validity.NON_ACC_REGS so the rules "
            "refuse it"
        )


def _stamp_mismatch(mine: dict, driver: dict) -> str | None:
    for key in sorted(set(mine) | set(driver)):
        if mine.get(key) != driver.get(key):
            return f"{key}: worker {mine.get(key)!r}, driver {driver.get(key)!r}"
    return None


def compile_job(spec_json: dict, driver_stamp: dict) -> Compiled | Failed:
    """The unit of work an executor runs. Never raises: a failure comes back as `Failed` with the id."""
    name = str(spec_json)
    try:
        spec = GemmSpec.from_json(spec_json)
        name = spec.name()
        differs = _stamp_mismatch(_ensure_ready(), driver_stamp)
        if differs is not None:
            raise BuildError(
                f"this worker's toolchain differs from the build driver's ({differs}); run the workers "
                "from a checkout of the same commit with the same Python and DSL versions"
            )
        with _COMPILE_LOCK:
            return compile_and_capture(spec)
    except Exception as exc:  # noqa: BLE001  (any failure is reported with the instance id by the driver)
        return Failed(name, f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")
