"""The command line, ``python -m hgemm_sm90 <command>``: what ships, what dispatch picks, whether this
machine can run it, and how fast it runs.

- ``list``: the shipped instances as a table (or ``--json``), filtered by dtype, layout, tile, cluster,
  schedule, C, fp8 accumulation and id patterns. Needs no GPU.
- ``select M N K --dtype ...``: the instance and launch overrides ``select()`` picks for a problem, where
  the choice came from (tuning table or cost model) and why. ``--gpu H200`` plans without a GPU.
- ``doctor``: every link of the chain a launch depends on, each reported OK / WARN / FAIL with the fix:
  versions, knobs, driver, GPUs, manifest, cubin integrity (every sha256), the driver version the kernels
  need, the tuning table's coverage of this machine's GPUs, and one real kernel load per GPU. It reports
  rather than stops, so it says as much as it can on a machine without a driver or GPU.
- ``bench M N K --dtype ...``: the selected instance against cuBLAS through torch, timed with CUDA events.

Why a CLI in the runtime at all: the answers to "which instance would I get and why" and "why does it not
load here" live in the installed package (its manifest, cubins, tuning table and knobs), so the package
itself must be able to print them; a user should not need the repository's build tools to ask.

Exit status: 0 on success; 1 when something is broken (an ``HgemmError``, or a doctor check that failed);
2 for a command line that cannot be run (argparse's convention), which includes an ``InvalidArgumentError``
from the runtime for the given values. Errors are one line on stderr (the ``HgemmError`` text, which names
the fix), never a traceback; a traceback means a bug in this module.

Like the rest of the runtime this imports only the standard library at import time (argparse, json): the
runtime's modules are imported per command, the driver bindings only by commands that need a GPU, and
torch only by ``bench``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from .errors import (
    HgemmError,
    InvalidArgumentError,
    MissingDependencyError,
    NoDeviceError,
    UnsupportedDeviceError,
)

PROG = "python -m hgemm_sm90"

# The knobs of runtime/knobs.py, by Knobs field, as their environment variables (doctor prints them).
KNOB_VARS = {
    "kernel_dir": "HGEMM_KERNEL_DIR",
    "verify_sha256": "HGEMM_VERIFY_SHA256",
    "log_level": "HGEMM_LOG_LEVEL",
    "check_pointers": "HGEMM_CHECK_POINTERS",
    "allow_peer_pointers": "HGEMM_ALLOW_PEER_POINTERS",
}
# The runtime's dependency range (pyproject.toml); doctor warns outside it.
BINDINGS_RANGE = ((12, 8), (14, 0))
# doctor's sample problem for "what would be loaded": large enough for every tile, 16-byte aligned for
# every dtype, so select() can always answer it.
SAMPLE_MNK = 4096


# --- argument parsing ------------------------------------------------------------------------------------


class UsageError(Exception):
    """A command line that cannot be run: reported as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    # argparse prints the usage block and the error on separate lines and exits; we want one line and a
    # return code (main() is called by tests and by other programs, not only by the interpreter).
    def error(self, message):
        raise UsageError(f"{self.prog}: {message} (see {self.prog} --help)")


def _dims(text: str, count: tuple[int, ...], what: str) -> tuple[int, ...]:
    parts = text.lower().split("x")
    if len(parts) not in count or not all(p.isdecimal() and int(p) > 0 for p in parts):
        forms = " or ".join("x".join("MNK"[:n]) for n in count)
        raise argparse.ArgumentTypeError(f"{what} {text!r} is not {forms} of positive integers")
    return tuple(int(p) for p in parts)


def _tile(text: str) -> tuple[int, ...]:
    return _dims(text, (2, 3), "tile")


def _cluster(text: str) -> tuple[int, ...]:
    return _dims(text, (2,), "cluster")


_MAJORS = ("km", "kn", "nm")  # the letters A, B and D may be major in (runtime/spec.py: AMajor, ...)


def _layout(text: str) -> str:
    """Three majorness letters, A B D, e.g. ``kkn`` (the id's layout token)."""
    t = text.lower()
    if len(t) != 3 or any(ch not in allowed for ch, allowed in zip(t, _MAJORS)):
        raise argparse.ArgumentTypeError(
            f"layout {text!r} is not three majorness letters A B D: A k|m, B k|n, D n|m (e.g. kkn)"
        )
    return t


def _layout_pattern(text: str) -> str:
    """Like `_layout`, but ``?`` matches any letter (``list --layout k?n``)."""
    t = text.lower()
    if len(t) != 3 or any(ch not in allowed + "?" for ch, allowed in zip(t, _MAJORS)):
        raise argparse.ArgumentTypeError(
            f"layout {text!r} is not three majorness letters A B D: A k|m, B k|n, D n|m, ? for any "
            "(e.g. kkn, k?n)"
        )
    return t


def _positive(text: str) -> int:
    if not text.isdecimal() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return int(text)


def _add_problem_args(p: argparse.ArgumentParser, dtypes: list[str], dtype_required: bool) -> None:
    """The problem, as `select()` takes it: sizes, dtypes, layout, C, fp8 accumulation, batch, device."""
    for name in ("M", "N", "K"):
        p.add_argument(name, type=int, help=f"problem size {name} (per batch A is M x K, B N x K, D M x N)")
    p.add_argument("--dtype", choices=dtypes, required=dtype_required, help="A's element type")
    p.add_argument("--b-dtype", choices=dtypes, help="B's element type (default: --dtype)")
    p.add_argument(
        "--out-dtype", choices=dtypes, help="D's element type (default: --dtype; bf16 for fp8 inputs)"
    )
    p.add_argument(
        "--layout",
        type=_layout,
        default="kkn",
        help="majorness of A, B, D: A k|m, B k|n, D n|m (default kkn: A M x K and B N x K row-major, "
        "D M x N row-major)",
    )
    p.add_argument("--c-dtype", choices=dtypes, help="read a C operand of this type: D = A @ B^T + C")
    p.add_argument("--c-major", choices=("n", "m"), help="C's majorness (default: D's)")
    p.add_argument("--fast-accum", action="store_true", help="fp8 inputs: accumulate without promotion")
    p.add_argument("--batch", type=int, default=1, help="number of GEMMs in the batch (default 1)")
    p.add_argument("--device", type=int, help="CUDA device ordinal (default 0)")


def build_parser() -> argparse.ArgumentParser:
    from .spec import DType, Schedule

    dtypes = [d.value for d in DType]
    schedules = [s.value for s in Schedule] + ["coop", "pp"]
    parser = _Parser(
        prog=PROG,
        description="Hopper GEMM kernels: list what ships, show what dispatch picks, check the "
        "installation, benchmark against cuBLAS.",
    )
    parser.add_argument("--version", action="store_true", help="print the package version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser(
        "list",
        help="the shipped kernel instances (no GPU needed)",
        description="The shipped kernel instances, filtered; every filter given must match.",
    )
    p.add_argument("--dtype", choices=dtypes, help="A's element type")
    p.add_argument("--b-dtype", choices=dtypes, help="B's element type")
    p.add_argument("--out-dtype", choices=dtypes, help="D's element type")
    p.add_argument("--layout", type=_layout_pattern, help="majorness of A, B, D, e.g. kkn; ? for any")
    p.add_argument("--tile", type=_tile, help="CTA tile MxN or MxNxK, e.g. 128x256")
    p.add_argument("--cluster", type=_cluster, help="cluster shape MxN, e.g. 2x1")
    p.add_argument("--schedule", choices=schedules, help="kernel schedule")
    c = p.add_mutually_exclusive_group()
    c.add_argument(
        "--with-c", dest="with_c", action="store_const", const=True, help="only instances reading C"
    )
    c.add_argument(
        "--no-c", dest="with_c", action="store_const", const=False, help="only instances without C"
    )
    p.add_argument("--c-dtype", choices=dtypes, help="C's element type (implies --with-c)")
    p.add_argument("--c-major", choices=("n", "m"), help="C's majorness (implies --with-c)")
    p.add_argument(
        "--fast-accum",
        action=argparse.BooleanOptionalAction,
        help="only fp8 instances with fast accumulation (--no-fast-accum: all others)",
    )
    p.add_argument(
        "--grep",
        action="append",
        default=[],
        metavar="PATTERN",
        help="id contains PATTERN, or matches it as a glob when it holds * ? [ (repeatable: all must match)",
    )
    p.add_argument("--json", action="store_true", help="one JSON array of specs with their ids")
    p.set_defaults(run=cmd_list)

    p = sub.add_parser(
        "select",
        help="the instance dispatch picks for a problem, and why",
        description="The instance and launch overrides select() picks for a problem, and why. Plans for "
        "device 0 unless --device or --gpu is given; --gpu needs no GPU.",
    )
    _add_problem_args(p, dtypes, dtype_required=True)
    p.add_argument("--gpu", help="plan for this GPU by name (e.g. H200, 'H100 PCIe') instead of a device")
    p.add_argument("--json", action="store_true", help="the choice as one JSON object")
    p.set_defaults(run=cmd_select)

    p = sub.add_parser(
        "doctor",
        help="check driver, GPUs, kernels, tuning table; exit 1 if something is broken",
        description="Check everything a launch depends on; each check says OK, WARN or FAIL with the "
        "fix. Exit status 1 if a check failed.",
    )
    p.add_argument("--json", action="store_true", help="the checks as one JSON object")
    p.set_defaults(run=cmd_doctor)

    p = sub.add_parser(
        "bench",
        help="the selected instance against cuBLAS (needs torch and a GPU)",
        description="Time the instance select() picks (or --instance) against cuBLAS through torch "
        "(torch.matmul; torch._scaled_mm with unit scales for fp8), with CUDA events: each timing is "
        "--iters back-to-back launches queued behind a GPU-side sleep (so host time is not counted), "
        "ours and cuBLAS alternate, and the figure is the median of --reps timings.",
    )
    _add_problem_args(p, dtypes, dtype_required=False)
    p.add_argument("--instance", help="time this instance id instead of select()'s pick")
    p.add_argument("--iters", type=_positive, default=20, help="launches per timing (default 20)")
    p.add_argument(
        "--reps", type=_positive, default=10, help="timings per side; the median counts (default 10)"
    )
    p.add_argument("--warmup", type=_positive, default=3, help="untimed launches per side first (default 3)")
    p.add_argument("--json", action="store_true", help="the result as one JSON object")
    p.set_defaults(run=cmd_bench)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command line (``sys.argv[1:]`` by default); the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except UsageError as e:
        print(e, file=sys.stderr)
        return 2
    except SystemExit as e:  # --help
        return e.code if isinstance(e.code, int) else 0
    if args.version:
        print(f"hgemm_sm90 {_own_version()}")
        return 0
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return args.run(args)
    except UsageError as e:
        print(e, file=sys.stderr)
        return 2
    except HgemmError as e:
        print(f"{PROG} {args.command}: {_one_line(str(e))}", file=sys.stderr)
        return 2 if isinstance(e, InvalidArgumentError) else 1
    except BrokenPipeError:
        # `... list | head`: the reader left. Point stdout at devnull so the interpreter's final flush
        # does not raise again, and stop quietly.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


def _n(count: int, one: str, many: str | None = None) -> str:
    return f"{count} {one if count == 1 else many or one + 's'}"


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _us() -> str:
    """'µs', or 'us' where stdout cannot encode it."""
    try:
        "µs".encode(getattr(sys.stdout, "encoding", None) or "ascii")
        return "µs"
    except (UnicodeEncodeError, LookupError):
        return "us"


def _own_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("hgemm-sm90")
    except metadata.PackageNotFoundError:
        return "(not installed as a distribution: a source tree)"


# --- list ------------------------------------------------------------------------------------------------


_SCHEDULE_SHORT = {"cooperative": "coop", "pingpong": "pp"}  # as in the ids
_SCHEDULE_LONG = {short: long for long, short in _SCHEDULE_SHORT.items()}


def _matches(spec, args) -> bool:
    from fnmatch import fnmatchcase

    if args.dtype and spec.a_dtype != args.dtype:
        return False
    if args.b_dtype and spec.b_dtype != args.b_dtype:
        return False
    if args.out_dtype and spec.d_dtype != args.out_dtype:
        return False
    if args.layout and not fnmatchcase(f"{spec.a_major}{spec.b_major}{spec.d_major}", args.layout):
        return False
    if args.tile and spec.tile[: len(args.tile)] != args.tile:
        return False
    if args.cluster and spec.cluster != args.cluster:
        return False
    if args.schedule and spec.schedule != _SCHEDULE_LONG.get(args.schedule, args.schedule):
        return False
    with_c = True if (args.c_dtype or args.c_major) else args.with_c
    if with_c is not None and spec.has_c != with_c:
        return False
    if args.c_dtype and spec.c_dtype != args.c_dtype:
        return False
    if args.c_major and spec.c_major != args.c_major:
        return False
    if args.fast_accum is not None and spec.fp8_fast_accum != args.fast_accum:
        return False
    for pat in args.grep:
        if any(ch in pat for ch in "*?[") and not fnmatchcase(spec.id, pat):
            return False
        if not any(ch in pat for ch in "*?[") and pat not in spec.id:
            return False
    return True


def _row(spec) -> dict[str, str]:
    accum = ("fast" if spec.fp8_fast_accum else "promoted") if spec.a_dtype.is_float8 else "-"
    return {
        "id": spec.id,
        "A,B->D": f"{spec.a_dtype},{spec.b_dtype}->{spec.d_dtype}",
        "layout": f"{spec.a_major}{spec.b_major}{spec.d_major}",
        "tile": "x".join(map(str, spec.tile)),
        "cluster": "x".join(map(str, spec.cluster)),
        "schedule": _SCHEDULE_SHORT.get(str(spec.schedule), str(spec.schedule)),
        "C": f"{spec.c_dtype}{spec.c_major}" if spec.has_c else "-",
        "fp8 accum": accum,
    }


def _table(rows: list[dict[str, str]]) -> list[str]:
    cols = list(rows[0])
    width = {c: max(len(c), *(len(r[c]) for r in rows)) for c in cols}
    lines = ["  ".join(c.ljust(width[c]) for c in cols).rstrip()]
    lines += ["  ".join(r[c].ljust(width[c]) for c in cols).rstrip() for r in rows]
    return lines


def cmd_list(args) -> int:
    from . import api, state

    specs = api.instances()
    picked = [s for s in specs if _matches(s, args)]
    if args.json:
        print(json.dumps([{"id": s.id, **s.to_json()} for s in picked], indent=1))
        return 0
    if picked:
        print("\n".join(_table([_row(s) for s in picked])))
    path = state.runtime().manifest.path
    print(f"{len(picked)} of {len(specs)} shipped instances (manifest {path})")
    return 0


# --- select ----------------------------------------------------------------------------------------------


def _problem_kwargs(args) -> dict:
    """`select()`'s keyword arguments from the problem options."""
    return {
        "a_dtype": args.dtype,
        "b_dtype": args.b_dtype,
        "d_dtype": args.out_dtype,
        "a_major": args.layout[0],
        "b_major": args.layout[1],
        "d_major": args.layout[2],
        "c_dtype": args.c_dtype,
        "c_major": args.c_major,
        "fp8_fast_accum": args.fast_accum,
        "batch": args.batch,
    }


def _overrides_text(choice) -> str:
    given = {k: v for k, v in choice.launch_overrides().items() if v is not None}
    if not given:
        return "none (the launch's default walk over tiles)"
    return ", ".join(f"{k}={v!r}" for k, v in given.items())


def cmd_select(args) -> int:
    from . import state
    from .dispatch import problem_class, select, target

    kwargs = _problem_kwargs(args)
    # Without --gpu the CLI has no current CUDA context to take a device from (select()'s default), so it
    # plans for device 0 unless told otherwise.
    device = args.device if args.device is not None or args.gpu is not None else 0
    m, n, k = args.M, args.N, args.K
    try:
        choice = select(m, n, k, **kwargs, device=device, gpu=args.gpu)
    except (NoDeviceError, MissingDependencyError, UnsupportedDeviceError) as e:
        if args.gpu is None:  # say the way around it that needs no GPU
            e.fix += "; or plan for a GPU by name without one: --gpu H200"
        raise
    rt = state.runtime()
    gpu = target(rt, device, args.gpu)
    cls = problem_class(
        *(kwargs[f] for f in ("a_dtype", "b_dtype", "d_dtype", "a_major", "b_major", "d_major")),
        kwargs["c_dtype"],
        kwargs["c_major"],
        kwargs["fp8_fast_accum"],
    )
    flops = 2.0 * m * n * k * args.batch
    tflops = flops / (choice.estimate_us * 1e-6) / 1e12 if choice.estimate_us > 0 else float("nan")
    if args.json:
        out = {
            "problem": {"m": m, "n": n, "k": k, "batch": args.batch, "class": cls.key},
            "gpu": {"name": gpu.name, "sm_count": gpu.sm_count, "key": gpu.key, "device": device},
            "instance_id": choice.instance_id,
            "launch_overrides": choice.launch_overrides(),
            "source": choice.source,
            "reason": choice.reason,
            "estimate_us": choice.estimate_us,
        }
        print(json.dumps(out, indent=1))
        return 0
    where = f"device {device}: " if args.gpu is None else ""
    text = [
        ("problem", f"M={m} N={n} K={k} batch={args.batch}, class {cls.key}"),
        ("gpu", f"{where}{gpu.name}, {gpu.sm_count} SMs"),
        ("instance", choice.instance_id),
        ("overrides", _overrides_text(choice)),
        (
            "source",
            {"table": "tuning table (measured)", "model": "cost model (estimated)"}.get(
                choice.source, choice.source
            ),
        ),
        ("reason", choice.reason),
        ("estimate", f"{choice.estimate_us:.2f} {_us()} ({tflops:.0f} TFLOP/s)"),
    ]
    for label, value in text:
        print(f"{label:<10} {value}")
    return 0


# --- doctor ----------------------------------------------------------------------------------------------


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
    summary = table.summary()
    covered = [
        f"{g}: {_n(len(classes), 'class', 'classes')}, {_n(sum(classes.values()), 'grid point')}"
        for g, classes in sorted(summary.items())
    ]
    report.add("OK", "tuning", f"table {table.path}", covered or ["(covers no GPU)"])
    shipped = {ProblemClass.of(rec.spec).key for rec in catalog.instances.values()} if catalog else set()
    if gpus is None or not gpus:
        report.add(
            "INFO",
            "dispatch",
            "no usable GPU here: select(gpu=NAME) still plans from the table for the GPUs above",
        )
        return
    for key in dict.fromkeys(g.key for _, g in gpus):
        ordinals = ", ".join(str(i) for i, g in gpus if g.key == key)
        classes = summary.get(key)
        if classes:
            n_in = len(shipped & set(classes)) if shipped else len(classes)
            rest = (
                f"; the model for the other {len(shipped) - n_in}" if shipped and n_in < len(shipped) else ""
            )
            report.add(
                "OK",
                "dispatch",
                f"{key} (device {ordinals}): dispatch uses the table for {n_in} of the "
                f"{len(shipped) or len(classes)} shipped classes{rest}",
            )
        else:
            report.add(
                "INFO",
                "dispatch",
                f"{key} (device {ordinals}): not in the table, dispatch falls back to the model",
            )


def _sample_spec(catalog):
    """The class doctor asks select() about: bf16 kkn without C where it ships, else the first instance's."""
    specs = [rec.spec for _, rec in sorted(catalog.instances.items())]
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


# --- bench -----------------------------------------------------------------------------------------------


def _import_torch():
    try:
        import torch
    except ImportError:
        raise MissingDependencyError(
            "bench needs torch (it allocates the operands, times with CUDA events and runs cuBLAS through "
            "it), which cannot be imported",
            "pip install torch (a CUDA build) into this environment; the runtime itself does not need it",
        ) from None
    return torch


def cmd_bench(args) -> int:
    class_opts = ("dtype", "b_dtype", "out_dtype", "c_dtype", "c_major")
    if args.instance is None and args.dtype is None:
        raise UsageError(f"{PROG} bench: give --dtype (or --instance ID) (see {PROG} bench --help)")
    if args.instance is not None and (
        any(getattr(args, o) is not None for o in class_opts) or args.fast_accum or args.layout != "kkn"
    ):
        raise UsageError(
            f"{PROG} bench: --instance fixes the dtypes, layout and C; drop --dtype/--b-dtype/--out-dtype/"
            "--layout/--c-dtype/--c-major/--fast-accum, or drop --instance"
        )
    torch = _import_torch()
    if not torch.cuda.is_available():
        raise NoDeviceError(
            "bench needs a CUDA GPU, and torch sees none",
            "run on an H100/H200/GH200 with a CUDA build of torch (check nvidia-smi and "
            "CUDA_VISIBLE_DEVICES); `select --gpu H200` shows the choice without a GPU",
        )
    from . import api, state
    from .dispatch import ProblemClass, select
    from .spec import DType

    device = args.device if args.device is not None else 0
    if not 0 <= device < torch.cuda.device_count():
        raise InvalidArgumentError(
            f"--device {device} is not a CUDA device here ({torch.cuda.device_count()} visible)",
            "pass an ordinal in range",
        )
    torch.cuda.set_device(device)
    m, n, k, batch = args.M, args.N, args.K, args.batch
    for name, v in (("M", m), ("N", n), ("K", k), ("--batch", batch)):
        if v < 1:  # select() would say so, but --instance skips it and torch would fail first
            raise InvalidArgumentError(f"{name}={v} is not a positive size", f"pass {name} >= 1")
    if args.instance is not None:
        choice = None
        spec = state.runtime().manifest.record(args.instance).spec
    else:
        choice = select(m, n, k, **_problem_kwargs(args), device=device)
        spec = state.runtime().manifest.record(choice.instance_id).spec
    dev = torch.device("cuda", device)

    def tdt(dt):
        return getattr(torch, DType(dt).array_name)

    def operand(rows, cols, major_is_cols, dt, fill=True):
        """Storage (batch, rows, cols) if the contiguous extent is cols, else (batch, cols, rows); and the
        logical (batch, rows, cols) view of it."""
        shape = (batch, rows, cols) if major_is_cols else (batch, cols, rows)
        if fill:  # random values: zeros run faster and would flatter both sides
            t = torch.randn(shape, device=dev, dtype=torch.float32).to(tdt(dt))
        else:
            t = torch.empty(shape, device=dev, dtype=tdt(dt))
        return t, (t if major_is_cols else t.mT)

    try:
        a, a_log = operand(m, k, spec.a_major == "k", spec.a_dtype)
        b, b_log = operand(n, k, spec.b_major == "k", spec.b_dtype)
        d, d_log = operand(m, n, spec.d_major == "n", spec.d_dtype, fill=False)
        c = c_log = None
        if spec.has_c:
            c, c_log = operand(m, n, spec.c_major == "n", spec.c_dtype)
    except RuntimeError as e:  # torch's out-of-memory error is one
        raise InvalidArgumentError(
            f"torch cannot allocate the operands: {_one_line(str(e))[:300]}",
            "pick smaller sizes, or free device memory",
        ) from None
    stream = torch.cuda.Stream(device=dev)
    overrides = choice.launch_overrides() if choice is not None else {}
    extra = {"c": c.data_ptr(), "beta": 1.0} if c is not None else {}
    ptrs = (a.data_ptr(), b.data_ptr(), d.data_ptr())
    handle = stream.cuda_stream  # the int handle: launch's cheapest stream form

    def ours():
        api.launch(spec.id, ptrs, handle, m=m, n=n, k=k, batch=batch, **extra, **overrides)

    baseline, label, same, why_not = _cublas(torch, spec, a_log, b_log, c_log, tdt(spec.d_dtype), stream)
    with torch.cuda.stream(stream):
        for _ in range(args.warmup):
            ours()
            if baseline is not None:
                baseline()
        stream.synchronize()
        agreement = None
        if baseline is not None and same:  # the same product (with C where ours reads C)
            ref = baseline()
            stream.synchronize()
            got = d_log[0] if ref.dim() == 2 else d_log
            agreement = ((got.float() - ref.float()).norm() / ref.float().norm().clamp_min(1e-30)).item()
        ours_us, base_us = _time(torch, ours, baseline, args.iters, args.reps, stream)
    flops = 2.0 * m * n * k * batch

    def tf(us):
        return flops / (us * 1e-6) / 1e12

    result = {
        "problem": {"m": m, "n": n, "k": k, "batch": batch, "class": ProblemClass.of(spec).key},
        "gpu": {"device": device, "name": torch.cuda.get_device_name(device)},
        "iters": args.iters,
        "reps": args.reps,
        "ours": {
            "instance_id": spec.id,
            "source": choice.source if choice is not None else "--instance",
            "launch_overrides": overrides,
            "us": ours_us,
            "tflops": tf(ours_us),
        },
        "cublas": None if baseline is None else {"call": label, "us": base_us, "tflops": tf(base_us)},
        "no_cublas_reason": why_not,
        "speedup_vs_cublas": None if baseline is None else base_us / ours_us,
        "relative_error_vs_cublas": agreement,
    }
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    u = _us()
    how = f"median of {args.reps} timings of {args.iters} launches each"
    print(
        f"{'problem':<10} M={m} N={n} K={k} batch={batch} on {result['gpu']['name']} (device {device}), {how}"
    )
    source = result["ours"]["source"]
    over = ", ".join(f"{k_}={v!r}" for k_, v in overrides.items() if v is not None)
    print(f"{'ours':<10} {spec.id} ({source}{': ' + over if over else ''})")
    print(f"{'':<10} {ours_us:10.2f} {u}  {tf(ours_us):8.1f} TFLOP/s")
    if baseline is None:
        print(f"{'cuBLAS':<10} no baseline: {why_not}")
        return 0
    print(f"{'cuBLAS':<10} {label}")
    print(f"{'':<10} {base_us:10.2f} {u}  {tf(base_us):8.1f} TFLOP/s")
    print(f"{'ratio':<10} {base_us / ours_us:.3f}x (cuBLAS time / ours: above 1 means ours is faster)")
    if agreement is not None:
        print(f"{'agreement':<10} relative Frobenius difference {agreement:.2e} from cuBLAS's result")
    return 0


def _cublas(torch, spec, a_log, b_log, c_log, d_dtype, stream):
    """(call, label, same, None): cuBLAS through torch computing the product, ``same`` when it also adds C
    where ours does; or (None, None, False, why) when torch has no cuBLAS call for the problem."""
    from functools import partial

    single = a_log.shape[0] == 1  # a single GEMM: cuBLAS's 2-D path, as a user would call it
    A, B = (a_log[0], b_log[0]) if single else (a_log, b_log)
    C = None if c_log is None else (c_log[0] if single else c_log)
    label = ""
    if spec.a_dtype.is_float8:
        if not single:
            return None, None, False, "torch._scaled_mm has no batched form"
        # cuBLASLt's fp8 GEMM takes A row-major and B column-major: give it packed copies in that layout.
        one = torch.ones((), device=A.device, dtype=torch.float32)
        call = partial(
            torch._scaled_mm,
            A.contiguous(),
            B.contiguous().mT,
            scale_a=one,
            scale_b=one,
            out_dtype=d_dtype,
            use_fast_accum=spec.fp8_fast_accum,
        )
        label = f"torch._scaled_mm(unit scales, use_fast_accum={spec.fp8_fast_accum})"
    elif d_dtype == A.dtype:
        if C is not None and C.dtype == d_dtype:
            call = partial(torch.addmm if single else torch.baddbmm, C, A, B.mT)
            label = "torch.addmm (with C)" if single else "torch.baddbmm (with C)"
        else:
            call = partial(torch.matmul, A, B.mT)
            label = "torch.matmul"
    else:  # 16-bit inputs, fp32 out
        call = partial(torch.mm if single else torch.bmm, A, B.mT, out_dtype=d_dtype)
        label = f"torch.{'mm' if single else 'bmm'}(out_dtype={d_dtype})"
    same = C is None or "with C" in label
    if not same:
        label += " (without C)"
    try:
        with torch.cuda.stream(stream):
            call()
        stream.synchronize()
    except (RuntimeError, TypeError, ValueError, NotImplementedError) as e:
        return None, None, False, f"{label} refused this problem: {_one_line(str(e))[:200]}"
    return call, label, same, None


def _time(torch, ours, baseline, iters: int, reps: int, stream) -> tuple[float, float | None]:
    """Median µs per launch of each side: ``reps`` timings of ``iters`` launches, the sides alternating
    (so clock and power drift hit both alike)."""
    import statistics

    sleep = getattr(torch.cuda, "_sleep", None)
    # ~30 µs of GPU sleep per launch to enqueue (at ~1.5-2 GHz): the batch is queued before the start
    # event fires, so host launch cost is not timed (a tiny GEMM takes less GPU time than its launch
    # takes host time).
    lead_cycles = 50_000 * iters
    runners = [ours] if baseline is None else [ours, baseline]
    times: list[list[float]] = [[] for _ in runners]
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for rep in range(reps):
        order = range(len(runners)) if rep % 2 == 0 else reversed(range(len(runners)))
        for i in order:
            if sleep is not None:
                sleep(lead_cycles)
            start.record(stream)
            for _ in range(iters):
                runners[i]()
            end.record(stream)
            end.synchronize()
            times[i].append(start.elapsed_time(end) * 1e3 / iters)
    medians = [statistics.median(t) for t in times]
    return medians[0], (medians[1] if baseline is not None else None)
