"""``python -m hgemm_sm90 doctor`` (runtime/cli.py parses the command line): every link of the chain a
launch depends on, each reported OK / WARN / FAIL / INFO with the fix: versions, knobs, driver, GPUs,
manifest, cubin integrity (every sha256), the driver version the kernels need, the tuning table's coverage
of this machine's GPUs and whether its points were timed with the installed cubins, and one real kernel
load per GPU. It reports rather than stops, so it says as much
as it can on a machine without a driver or GPU; the exit status is 1 if any check failed.
"""

from __future__ import annotations

import json
import os
import sys

from .cli import _n, _one_line, _own_version
from .errors import HgemmError, UnsupportedDeviceError

# The knobs of runtime/knobs.py, by Knobs field, as their environment variables (doctor prints them).
KNOB_VARS = {
    "kernel_dir": "HGEMM_KERNEL_DIR",
    "verify_sha256": "HGEMM_VERIFY_SHA256",
    "log_level": "HGEMM_LOG_LEVEL",
    "check_pointers": "HGEMM_CHECK_POINTERS",
    "allow_peer_pointers": "HGEMM_ALLOW_PEER_POINTERS",
    "num_sms": "HGEMM_NUM_SMS",
}
# The runtime's dependency range (pyproject.toml); doctor warns outside it.
BINDINGS_RANGE = ((12, 8), (14, 0))
# doctor's sample problem for "what would be loaded": large enough for every tile, 16-byte aligned for
# every dtype, so select() can always answer it.
SAMPLE_MNK = 4096


class _Report:
    """doctor's checks, printed as they are made (so a slow step shows where it is)."""

    def __init__(self, as_json: bool):
        self.as_json = as_json
        self.checks: list[dict] = []

    def add(self, status: str, name: str, summary: str, details=(), fix: str | None = None) -> None:
        check = {"status": status, "name": name, "summary": summary, "details": list(details), "fix": fix}
        self.checks.append(check)
        if self.as_json:
            return
        print(f"{status:<5} {name:<13} {summary}")
        for line in details:
            print(f"{'':<20}{line}")
        if fix:
            print(f"{'':<20}fix: {fix}")

    def error(self, name: str, e: HgemmError, summary: str | None = None) -> None:
        where = f" [instance {e.instance}]" if e.instance else ""
        self.add("FAIL", name, _one_line(summary or f"{e.problem}{where}"), fix=_one_line(e.fix))

    @property
    def failed(self) -> list[str]:
        return [c["name"] for c in self.checks if c["status"] == "FAIL"]


def cmd_doctor(args) -> int:
    from . import state

    report = _Report(args.json)
    _check_package(report)
    rt, fallback = _doctor_runtime(report)
    if fallback:
        with state.install(rt):  # select() below reads the process's runtime
            _doctor_checks(report, rt)
    else:
        _doctor_checks(report, rt)
    failed = report.failed
    if args.json:
        print(json.dumps({"ok": not failed, "failed": failed, "checks": report.checks}, indent=1))
    elif failed:
        print(f"\n{_n(len(failed), 'check')} failed: {', '.join(dict.fromkeys(failed))}")
    else:
        warned = sum(c["status"] == "WARN" for c in report.checks)
        print("\nno check failed" + (f" ({_n(warned, 'warning')})" if warned else ""))
    return 1 if failed else 0


def _check_package(report: _Report) -> None:
    import platform

    here = os.path.dirname(os.path.abspath(__file__))
    report.add("INFO", "hgemm_sm90", f"{_own_version()} at {here}")
    report.add("INFO", "python", f"{platform.python_version()} ({sys.executable})")


def _doctor_runtime(report: _Report):
    """The runtime to examine and whether it is a stand-in: the process's own, or, when a knob is
    malformed (which makes the process's runtime impossible to build), one built from the knobs that
    parse, each bad knob reported as a FAIL."""
    from . import knobs, state
    from .errors import KnobError

    try:
        rt = state.runtime()
    except KnobError:
        env, bad = dict(os.environ), []
        while True:
            try:
                values = knobs.Knobs.from_env(env)
                break
            except KnobError as e:
                bad.append(e)
                env.pop(e.knob, None)
        for e in bad:
            report.error("knobs", e)
        rt = state.Runtime(values)
        ignored = {e.knob for e in bad}
        _report_knobs(report, rt.knobs, ignored, status="INFO", note="(the invalid ones at their defaults)")
        return rt, True
    _report_knobs(report, rt.knobs)
    return rt, False


def _report_knobs(report: _Report, values, ignored=(), status: str = "OK", note: str = "") -> None:
    from .manifest import kernel_dir

    lines = []
    for field, var in KNOB_VARS.items():
        value = getattr(values, field)
        if value is None:
            shown = "(unset)"
        elif isinstance(value, bool):
            shown = "1" if value else "0"
        else:
            shown = str(value)
        if var in ignored:
            source = "default: the environment's value is invalid"
        else:
            source = "from the environment" if os.environ.get(var, "").strip() else "default"
        lines.append(f"{var}={shown} ({source})")
    lines.append(f"kernels are read from {kernel_dir(values)}")
    report.add(status, "knobs", f"in effect {note}".rstrip(), lines)


def _doctor_checks(report: _Report, rt) -> None:
    gpus = _check_driver_and_gpus(report, rt)
    catalog = _check_manifest(report, rt)
    if catalog is not None:
        _check_cubins(report, catalog)
        if gpus is not None:
            _check_driver_need(report, rt, catalog)
    _check_tuning(report, catalog, gpus)
    if catalog is not None and gpus:
        _check_loading(report, rt, catalog, gpus)


def _check_driver_and_gpus(report: _Report, rt):
    """cuda-bindings, the driver and every visible GPU; the supported GPUs as (ordinal, GpuId), or None
    when the driver cannot be used."""
    from importlib import metadata

    from .device import SUPPORTED_CAPABILITY
    from .gpus import GpuId

    for dist in ("cuda-bindings", "cuda-python"):
        try:
            version = metadata.version(dist)
            break
        except metadata.PackageNotFoundError:
            continue
    else:
        version = None
    if version is None:
        report.add(
            "FAIL",
            "cuda-bindings",
            "not installed",
            fix="pip install 'cuda-bindings>=12.8,<14' (the major version of the CUDA your driver supports)",
        )
    else:
        parts = version.split(".")
        lo, hi = BINDINGS_RANGE
        try:
            mm = (int(parts[0]), int(parts[1]))
        except (ValueError, IndexError):
            mm = None
        if mm is None or not lo <= mm < hi:
            report.add(
                "WARN",
                "cuda-bindings",
                f"{dist} {version}, outside the tested range >={lo[0]}.{lo[1]},<{hi[0]}",
                fix=f"pip install 'cuda-bindings>={lo[0]}.{lo[1]},<{hi[0]}'",
            )
        else:
            report.add("OK", "cuda-bindings", version if dist == "cuda-bindings" else f"{dist} {version}")
    try:
        rt.cu  # noqa: B018 - imports the bindings and runs cuInit
        installed = rt.devices.driver_version()
    except HgemmError as e:
        report.error("driver", e)
        return None
    report.add("OK", "driver", f"supports CUDA {installed // 1000}.{installed % 1000 // 10} ({installed})")
    try:
        count = rt.devices.device_count()
        infos = [rt.devices.device_info(i) for i in range(count)]
    except HgemmError as e:
        report.error("gpu", e)
        return None
    if not infos:
        report.add(
            "FAIL", "gpu", "no CUDA device is visible", fix="check nvidia-smi and CUDA_VISIBLE_DEVICES"
        )
        return []
    supported = []
    for info in infos:
        cc = f"{info.capability[0]}.{info.capability[1]}"
        what = f"device {info.ordinal}: {info.name}, compute capability {cc}, {info.sm_count} SMs"
        if info.capability == SUPPORTED_CAPABILITY:
            supported.append((info.ordinal, GpuId(info.name, info.sm_count)))
            report.add("OK", "gpu", what + ": supported")
        else:
            report.add(
                "WARN", "gpu", what + ": not supported (the kernels are sm_90a: compute capability 9.0)"
            )
    if not supported:
        first = infos[0]
        report.error(
            "gpu",
            UnsupportedDeviceError(first.ordinal, first.name, first.capability),
            "no GPU here can run the kernels: they are sm_90a cubins, which run only on compute "
            "capability 9.0",
        )
    return supported


def _check_manifest(report: _Report, rt):
    from .contract import CONTRACT_VERSION

    try:
        catalog = rt.manifest
        catalog.check_all()  # every record's launch contract (a process checks each on first use)
    except HgemmError as e:
        report.error("manifest", e)
        return None
    built = catalog.toolchain.get("dists")
    report.add(
        "OK",
        "manifest",
        f"{len(catalog.instances)} instances, profile {catalog.profile!r}, "
        f"contract version {CONTRACT_VERSION}",
        [catalog.path] + ([f"built with {built.replace(';', ', ')}"] if built else []),
    )
    return catalog


def _check_cubins(report: _Report, catalog) -> None:
    from .errors import CorruptArtifactError
    from .manifest import read_cubin

    bad = []
    for _, rec in sorted(catalog.instances.items()):
        try:
            read_cubin(rec, verify=True)  # always the sha256 here, whatever HGEMM_VERIFY_SHA256 says
        except CorruptArtifactError as e:
            bad.append(e)
    total = len(catalog.instances)
    if not bad:
        report.add(
            "OK", "cubins", f"{total} of {total} intact (size, ELF header, sha256 as the manifest says)"
        )
        return
    shown = [f"{e.instance}: {_one_line(e.problem)}" for e in bad[:5]]
    if len(bad) > 5:
        shown.append(f"... and {len(bad) - 5} more")
    report.add("FAIL", "cubins", f"{len(bad)} of {total} damaged or missing", shown, _one_line(bad[0].fix))


def _check_driver_need(report: _Report, rt, catalog) -> None:
    from .errors import DriverTooOldError

    if not catalog.instances:
        return
    need = max(rec.min_driver_version for rec in catalog.instances.values())
    installed = rt.devices.driver_version()
    if installed < need:
        report.error("compat", DriverTooOldError(installed, need))
    else:
        report.add(
            "OK",
            "compat",
            f"the driver is new enough: the kernels need CUDA {need // 1000}.{need % 1000 // 10}",
        )


def _check_tuning(report: _Report, catalog, gpus) -> None:
    from . import tuning
    from .dispatch import ProblemClass

    try:
        table = tuning.shipped_table()
        summary = table.summary() if table is not None else {}  # parses (validates) every point
    except HgemmError as e:
        report.error("tuning", e)
        return
    if table is None:
        report.add(
            "WARN",
            "tuning",
            "no tuning table in this installation: select() uses the cost model for every problem",
            fix="install a wheel built from the repository (it ships runtime/tuning.json)",
        )
        return
    # Which cubins each point was timed with (runtime/tuning.py `kernels_digest`), against the manifest's.
    fresh = table.freshness({iid: rec.sha256 for iid, rec in catalog.instances.items()}) if catalog else {}
    covered = [
        f"{g}: {_n(len(classes), 'class', 'classes')}, {_n(sum(classes.values()), 'grid point')}"
        + (f"; {_timed_with(fresh[g])}" if g in fresh else "")
        for g, classes in sorted(summary.items())
    ]
    report.add("OK", "tuning", f"table {table.path}", covered or ["(covers no GPU)"])
    for g, f in sorted(fresh.items()):
        if f.stale:
            report.add(
                "WARN",
                "tuning",
                f"{g}: {_n(f.stale, 'grid point')} timed with other cubins than the installed ones, or "
                "under other launch rules (a kernel or runtime/launcher.py `LAUNCH_RULES` changed after "
                "the table was measured): select() still uses those times, which may misjudge the "
                "changed instances",
                fix="re-time them on that GPU: python -m build_tools.tune --stale (docs/DISPATCH.md)",
            )
    shipped = {ProblemClass.of(spec).key for spec in catalog.specs.values()} if catalog else set()
    if gpus is None or not gpus:
        report.add(
            "INFO",
            "dispatch",
            "no usable GPU here: select(gpu=NAME) still plans from the table for the GPUs above",
        )
        return
    for gpu in {g.key: g for _, g in gpus}.values():
        key = gpu.key
        ordinals = ", ".join(str(i) for i, g in gpus if g.key == key)
        stand_in = table.stand_in(gpu)  # its own rows, or those of a measured GPU with its SM count
        classes = summary.get(stand_in) if stand_in else None
        if classes:
            n_in = len(shipped & set(classes)) if shipped else len(classes)
            rest = (
                f"; the model for the other {len(shipped) - n_in}" if shipped and n_in < len(shipped) else ""
            )
            whose = "" if stand_in == key else f" (the rows of {stand_in}, which has its SM count)"
            report.add(
                "OK",
                "dispatch",
                f"{key} (device {ordinals}): dispatch uses the table{whose} for {n_in} of the "
                f"{len(shipped) or len(classes)} shipped classes{rest}",
            )
        else:
            report.add(
                "INFO",
                "dispatch",
                f"{key} (device {ordinals}): not in the table, dispatch falls back to the model",
            )


def _timed_with(f) -> str:
    """One GPU's `tuning.Freshness` in words."""
    parts = [f"{f.fresh} timed with the installed cubins"]
    if f.stale:
        parts.append(f"{f.stale} with other cubins or launch rules")
    if f.unknown:
        parts.append(f"{f.unknown} without a record of them or naming instances not installed")
    return ", ".join(parts)


def _sample_spec(catalog):
    """The class doctor asks select() about: bf16 kkn without C where it ships, else the first instance's."""
    specs = [spec for _, spec in sorted(catalog.specs.items())]
    for s in specs:
        if (
            (s.a_dtype, s.b_dtype, s.d_dtype) == ("bf16",) * 3
            and (s.a_major, s.b_major, s.d_major) == tuple("kkn")
            and not s.has_c
        ):
            return s
    return specs[0] if specs else None


def _check_loading(report: _Report, rt, catalog, gpus) -> None:
    """Per supported GPU: select()'s pick for a sample problem, loaded for real in the device's primary
    context (device and driver checks, cubin, module, function, shared memory, occupancy)."""
    from .dispatch import select
    from .driver import check, handle

    spec = _sample_spec(catalog)
    if spec is None:
        return
    s = SAMPLE_MNK
    problem = f"a {s}x{s}x{s} {spec.a_dtype} {spec.a_major}{spec.b_major}{spec.d_major} GEMM"
    for ordinal, _ in gpus:
        try:
            choice = select(
                s,
                s,
                s,
                a_dtype=spec.a_dtype,
                b_dtype=spec.b_dtype,
                d_dtype=spec.d_dtype,
                a_major=spec.a_major,
                b_major=spec.b_major,
                d_major=spec.d_major,
                c_dtype=spec.c_dtype,
                c_major=spec.c_major,
                fp8_fast_accum=spec.fp8_fast_accum,
                device=ordinal,
            )
            cu = rt.cu
            ctx = handle(check(cu.cuDevicePrimaryCtxRetain(ordinal), "cuDevicePrimaryCtxRetain"))
            try:
                loaded = rt.kernels.get(ctx, choice.instance_id)
            finally:
                # The primary context may die with this release; nothing cached may outlive it.
                rt.forget_context(ctx)
                check(cu.cuDevicePrimaryCtxRelease(ordinal), "cuDevicePrimaryCtxRelease")
        except HgemmError as e:
            report.error("load", e)
            continue
        report.add(
            "OK",
            "load",
            f"device {ordinal}: {problem} runs {choice.instance_id}",
            [
                f"chosen by the {choice.source}: {choice.reason}",
                f"loaded in the primary context: up to {_n(loaded.max_active_clusters, 'cluster')} of "
                f"{_n(loaded.record.cluster_size, 'CTA')} resident at once, "
                f"{loaded.record.smem_bytes} bytes of shared memory per CTA",
                "other instances load the same way, each on its first launch in a context",
            ],
        )
