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
    p.add_argument(
        "--fp16-accum",
        action="store_true",
        help="fp16 inputs: accumulate in fp16 (faster on large problems, coarser; never chosen otherwise; "
        "bench's cuBLAS baseline still accumulates in fp32)",
    )
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
    p.add_argument(
        "--pdl",
        action="store_true",
        help="the choice for launches with programmatic dependent launch (gemm(..., pdl=True))",
    )
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
    accum = "fp16" if spec.acc_dtype == "fp16" else accum
    return {
        "id": spec.id,
        "A,B->D": f"{spec.a_dtype},{spec.b_dtype}->{spec.d_dtype}",
        "layout": f"{spec.a_major}{spec.b_major}{spec.d_major}",
        "tile": "x".join(map(str, spec.tile)),
        "cluster": "x".join(map(str, spec.cluster)),
        "schedule": _SCHEDULE_SHORT.get(str(spec.schedule), str(spec.schedule)),
        "C": f"{spec.c_dtype}{spec.c_major}" if spec.has_c else "-",
        "fp8 accum": accum,
        # How the kernel runs the problem: transposed (swap-AB, decode-sized M), split along K (by a
        # launch-time count, or stream-K's partial wave shared out), grouped
        # (one launch for many groups of rows), with gathered A rows.
        "variant": " ".join(
            v
            for v, on in (
                ("swap-AB", spec.swap_ab),
                ("split-K", spec.k_split == "split"),
                ("stream-K", spec.k_split == "stream"),
                ("grouped", spec.varlen_m),
                ("grouped-K", spec.varlen_k),
                ("gathered-A", spec.gather_a),
            )
            if on
        )
        or "-",
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
        "fp16_accum": args.fp16_accum,
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
        choice = select(m, n, k, **kwargs, device=device, gpu=args.gpu, pdl=args.pdl)
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
        kwargs["fp16_accum"],
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


# --- doctor and bench live in their own modules (runtime/doctor.py, runtime/cli_bench.py) ----------------


def cmd_doctor(args) -> int:
    from . import doctor

    return doctor.cmd_doctor(args)


def cmd_bench(args) -> int:
    from . import cli_bench

    return cli_bench.cmd_bench(args)
