"""The compile driver: kernel_specs.yaml profile -> cubins + manifest.json (`python -m codegen.build`).

Runs on a CPU-only machine. For each instance of the profile: look it up in the content-addressed cache
(codegen/cache.py); on a miss, have a worker compile it with the DSL for sm_90a, read the cubin's facts
(codegen/cubin_info.py) and capture its launch contract by running the DSL's own host code against a stub
CUDA runtime (codegen/contract.py) — all in codegen/worker.py — and store what the worker returns. Workers
are a local process pool by default, or a Dask cluster (`--executor`, codegen/executors.py); either way
only this process writes the cache and the output. Then the cubins are copied into the output directory
and `manifest.json` is written last, atomically: a crash never leaves a manifest that names a missing
cubin (codegen/output.py). Facts of the run (what was compiled or cached, compile seconds, the executor)
go to `build_report.json` in the same directory, never into the manifest: CMakeLists.txt installs only
`*.cubin` and `manifest.json` from it, so the report does not reach the wheel, and two builds of one
commit ship the same bytes.

`--shard I/N` builds only the I-th of N disjoint parts of the profile into a shard directory, and
`python -m codegen.build merge SHARD_DIR... --out DIR` joins N of them into the kernel directory an
unsharded build would write, byte for byte (codegen/shards.py).

What can be checked before compiling is checked first, each failure one line naming the fix (exit 1): the
shard, balance and executor arguments, the spec file and the profile (codegen/matrix.py), the pinned DSL
and the C compiler (codegen/toolchain.py).

A failing instance fails the build with its id and the DSL's message; `--keep-going` collects every
failure first and reports them together (still exiting non-zero).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from runtime.contract import InstanceRecord, Manifest
from runtime.spec import GemmSpec, SpecError

from .cache import BuildCache, CacheEntry, cache_key
from .executors import ExecutorChoice, ExecutorError, open_runner, parse_executor
from .matrix import MatrixError, load_matrix
from .output import BUILD_REPORT, write_kernel_files
from .output import write_build_report as _write_report
from .prebuilt import PrebuiltError, adopt_kernel_dir
from .shards import Shard, ShardError, load_costs, merge, parse_shard, split, split_digest, write_shard_dir
from .toolchain import ToolchainError, check_c_compiler, check_pinned_dsl, toolchain_stamp
from .worker import BuildError, Compiled, check_no_spills, compile_job

REPO_ROOT = Path(__file__).resolve().parent.parent

__all__ = [  # what tests and tools import from here; BuildError and check_no_spills live in codegen/worker.py
    "BUILD_REPORT",
    "BuildArgs",
    "BuildError",
    "build_entries",
    "check_no_spills",
    "main",
    "plan",
    "run",
    "write_build_report",
    "write_kernel_dir",
]


@dataclass(frozen=True)
class BuildArgs:
    spec: Path
    profile: str
    out: Path
    kernels: list[str]
    jobs: int
    keep_going: bool
    cache_dir: Path | None
    quiet: bool
    shard: str | None = None  # "I/N"
    balance: Path | None = None  # a build_report.json whose compile seconds balance the shards
    executor: str = "pool"  # pool | dask | dask-local:N (codegen/executors.py)
    scheduler: str | None = None  # the Dask scheduler's address, for --executor dask
    kernels_from: Path | None = None  # adopt this (merged) kernel directory instead of compiling


def build_entries(
    specs: list[GemmSpec],
    *,
    cache: BuildCache,
    jobs: int,
    keep_going: bool = False,
    progress: bool = True,
    outcome: dict[str, str] | None = None,
    executor: ExecutorChoice | None = None,
) -> dict[str, CacheEntry]:
    """Compile (or fetch from cache) every spec; returns id -> cache entry. Raises BuildError on failure.

    Every cache hit is verified (codegen/cache.py); a damaged entry is rebuilt, with one warning line.
    Misses are compiled by `executor` (default: a pool of `jobs` processes); the workers return bytes and
    this process alone stores them in the cache. `outcome`, if given, is filled with id -> "cached",
    "compiled" or "rebuilt" (was damaged)."""
    stamp = toolchain_stamp()
    entries: dict[str, CacheEntry] = {}
    missing: list[GemmSpec] = []
    how: dict[str, str] = {}
    for spec in specs:
        key = cache_key(spec.to_json(), stamp)
        present = cache.entry_path(key).exists()
        hit = cache.lookup(key, name=spec.name())
        if hit is not None:
            entries[spec.name()] = hit
            how[spec.name()] = "cached"
        else:
            missing.append(spec)
            how[spec.name()] = "rebuilt" if present else "compiled"
    failures: list[tuple[str, str]] = []
    if missing:
        from tqdm import tqdm

        runner = open_runner(executor or parse_executor("pool"), jobs)  # may fail: before the bar
        bar = tqdm(total=len(missing), desc="compiling sm_90a cubins", unit="kernel", disable=not progress)
        try:
            for i, result in runner.results(compile_job, [(s.to_json(), stamp) for s in missing]):
                spec = missing[i]
                bar.update(1)
                if isinstance(result, Compiled):
                    entries[spec.name()] = _store(cache, spec, stamp, result)
                    continue
                failures.append((spec.name(), result.error))  # Failed (the job's error) or Lost
                if not keep_going:
                    runner.cancel()
                    break
        finally:
            runner.close()
            bar.close()
    if outcome is not None:
        outcome.update({name: how[name] for name in entries})
    if failures:
        detail = "\n\n".join(f"--- {name}\n{err}" for name, err in failures)
        hint = "" if keep_going else " (use --keep-going to collect every failure)"
        raise BuildError(f"{len(failures)} instance(s) failed to build{hint}:\n{detail}")
    return entries


def _store(cache: BuildCache, spec: GemmSpec, stamp: dict, result: Compiled) -> CacheEntry:
    """File a worker's result in the cache under the key the driver computes (its stamp, its spec)."""
    if result.name != spec.name():
        raise BuildError(f"a worker returned {result.name} for {spec.name()}")
    return cache.store(
        cache_key(spec.to_json(), stamp),
        result.files,
        InstanceRecord.from_json(result.record, where=spec.name()),
        host_function=result.host_function,
        compile_seconds=result.compile_seconds,  # a build fact: the cache's index, not the record
    )


def write_kernel_dir(entries: dict[str, CacheEntry], out: Path, profile: str) -> Manifest:
    """Copy cubins to `out`, then write manifest.json last. Returns the manifest."""
    return write_kernel_files(
        out,
        {name: entry.cubin.read_bytes() for name, entry in entries.items()},
        {name: entry.record for name, entry in entries.items()},
        profile,
        toolchain_stamp(),
    )


def write_build_report(
    out: Path,
    profile: str,
    entries: dict[str, CacheEntry],
    outcome: dict[str, str],
    seconds: float,
    **facts,
) -> Path:
    """`out`/build_report.json: the facts of this run, which differ between two builds of one commit.
    `facts` adds run facts such as the executor or the shard."""
    instances = {
        name: {"from": outcome.get(name, "cached"), "compile_seconds": entries[name].compile_seconds}
        for name in entries
    }
    return _write_report(out, {"profile": profile, "seconds": round(seconds, 3), **facts}, instances)


@dataclass(frozen=True)
class Plan:
    """What a build will do, decided before any compile."""

    selection: list[GemmSpec]  # every instance the profile (and --kernels) selects
    specs: list[GemmSpec]  # the ones this run builds: the selection, or this shard's part of it
    executor: ExecutorChoice
    shard: Shard | None = None
    split_sha256: str | None = None


def select(args: BuildArgs) -> list[GemmSpec]:
    """The instances the spec file's profile (and --kernels) selects; one-line BuildError otherwise."""
    try:
        matrix = load_matrix(args.spec)
        if args.profile not in matrix.profiles:
            raise BuildError(
                f"unknown profile {args.profile!r}; set HGEMM_PROFILE (or --profile) to one of the profiles "
                f"of {args.spec.name}: {', '.join(matrix.profiles)}"
            )
        expansion = matrix.expand(args.profile, only_globs=tuple(args.kernels))
    except OSError as exc:
        raise BuildError(
            f"cannot read the spec file {args.spec}: {exc.strerror or exc}; pass --spec PATH"
        ) from None
    except (MatrixError, SpecError) as exc:
        msg = _one_line(exc)
        where = "" if str(args.spec) in msg else f"{args.spec}: "
        raise BuildError(f"{where}{msg}") from None
    if not expansion.specs:
        raise BuildError(f"profile {args.profile!r} with --kernels {args.kernels} selects no instance")
    return list(expansion.specs)


BALANCE_FROM_CACHE = "cache"  # `--balance cache`: the compile seconds the build cache recorded


def cached_compile_seconds(cache: BuildCache, specs: list[GemmSpec]) -> dict[str, float]:
    """id -> compile seconds recorded by the (verified) cache entries of ``specs`` under this toolchain;
    ids the cache does not know are left out (shards.split costs them the median). Only for shard jobs
    that share one cache (e.g. a CI cache restored into every job): jobs whose caches differ split
    differently, and the merge refuses their shards (docs/BUILD.md)."""
    stamp = toolchain_stamp()
    costs = {}
    for spec in specs:
        entry = cache.lookup(cache_key(spec.to_json(), stamp), name=spec.name())
        seconds = entry.compile_seconds if entry is not None else None
        if seconds:
            costs[spec.name()] = seconds
    return costs


def plan(args: BuildArgs) -> Plan:
    """Everything that can fail before a compile, checked in order of cost; returns what to build.
    Each failure is a one-line BuildError, ShardError, ExecutorError or ToolchainError naming the fix."""
    shard = parse_shard(args.shard) if args.shard else None
    if args.balance and not shard:
        raise ShardError("--balance only balances a sharded build; add --shard I/N")
    from_cache = args.balance is not None and str(args.balance) == BALANCE_FROM_CACHE
    costs = load_costs(args.balance) if args.balance and not from_cache else None
    executor = parse_executor(args.executor, args.scheduler)
    selection = select(args)
    check_c_compiler()
    check_pinned_dsl()
    if from_cache:
        costs = cached_compile_seconds(BuildCache(args.cache_dir), selection)
    if shard is None:
        return Plan(selection, selection, executor)
    parts = split([s.name() for s in selection], shard.count, costs)
    mine = set(parts[shard.index - 1])
    specs = [s for s in selection if s.name() in mine]
    return Plan(selection, specs, executor, shard, split_digest(parts))


def run_adopt(args: BuildArgs) -> Manifest:
    """--kernels-from DIR: write DIR to --out if it is exactly this build (codegen/prebuilt.py)."""
    if args.shard:
        raise ShardError("--kernels-from adopts a whole (merged) build; it does not take --shard")
    t0 = time.perf_counter()
    selection = [s.name() for s in select(args)]
    manifest = adopt_kernel_dir(args.kernels_from, args.out, args.profile, selection, toolchain_stamp())
    doc = {
        "profile": args.profile,
        "seconds": round(time.perf_counter() - t0, 3),
        "adopted": str(args.kernels_from),
    }
    report = _write_report(args.out, doc, {name: {"from": "adopted"} for name in manifest.instances})
    if not args.quiet:
        print(
            f"hgemm-sm90: {len(manifest.instances)} instances of profile {args.profile!r} adopted from "
            f"{args.kernels_from} -> {args.out} (nothing compiled; report: {report})",
            file=sys.stderr,
        )
    return manifest


def run(args: BuildArgs) -> Manifest | None:
    """Build `args.out`: a kernel directory (returns its Manifest), or with --shard a shard directory
    (returns None; `merge` makes the kernel directory)."""
    if args.kernels_from:
        return run_adopt(args)
    todo = plan(args)
    t0 = time.perf_counter()
    outcome: dict[str, str] = {}
    entries = build_entries(
        todo.specs,
        cache=BuildCache(args.cache_dir),
        jobs=args.jobs,
        keep_going=args.keep_going,
        progress=not args.quiet,
        outcome=outcome,
        executor=todo.executor,
    )
    facts: dict = {"executor": todo.executor.describe(args.jobs)}
    manifest = None
    if todo.shard is None:
        manifest = write_kernel_dir(entries, args.out, args.profile)
    else:
        facts["shard"] = str(todo.shard)
        write_shard_dir(
            args.out,
            todo.shard,
            cubins={name: entry.cubin.read_bytes() for name, entry in entries.items()},
            records={name: entry.record for name, entry in entries.items()},
            profile=args.profile,
            kernels=args.kernels,
            toolchain=toolchain_stamp(),
            selection=[s.name() for s in todo.selection],
            digest=todo.split_sha256,
        )
    seconds = time.perf_counter() - t0
    report = write_build_report(args.out, args.profile, entries, outcome, seconds, **facts)
    if not args.quiet:
        total = sum(e.record.cubin_bytes for e in entries.values())
        cached = sum(1 for how in outcome.values() if how == "cached")
        what = f"{len(entries)} instances of profile {args.profile!r}"
        if todo.shard is not None:
            what = f"shard {todo.shard}: {len(entries)} of the {len(todo.selection)} instances of profile"
            what += f" {args.profile!r}"
        print(
            f"hgemm-sm90: {what} -> {args.out} ({len(entries) - cached} compiled, {cached} from the cache; "
            f"{total / 1e6:.1f} MB of cubins, {seconds:.1f} s; report: {report})",
            file=sys.stderr,
        )
    return manifest


def run_merge(dirs: list[Path], out: Path, quiet: bool = False) -> Manifest:
    """`merge`: check the shard directories and write their union to `out` (codegen/shards.py), with a
    build report that joins the shards' reports."""
    t0 = time.perf_counter()
    manifest, shards = merge(dirs, out)
    instances: dict[str, dict] = {}
    for s in shards:
        # A shard's report is a run fact, not part of the build: merge without it if it is unreadable.
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            instances.update(json.loads((s.path / BUILD_REPORT).read_text())["instances"])
    instances = {name: instances.get(name, {"from": "unknown"}) for name in manifest.instances}
    order = sorted(shards, key=lambda s: s.shard.index)
    doc = {
        "profile": manifest.profile,
        "seconds": round(time.perf_counter() - t0, 3),
        "merged": [{"shard": str(s.shard), "from": str(s.path)} for s in order],
    }
    report = _write_report(Path(out), doc, instances)
    if not quiet:
        print(
            f"hgemm-sm90: merged {len(shards)} shards of profile {manifest.profile!r}: "
            f"{len(manifest.instances)} instances -> {out} (report: {report})",
            file=sys.stderr,
        )
    return manifest


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


# Checked before any compile (or, for merge, before anything is written): one line, no traceback.
_ONE_LINE_ERRORS = (MatrixError, SpecError, ToolchainError, ShardError, ExecutorError, PrebuiltError)


def merge_main(argv: list[str]) -> int:
    """`python -m codegen.build merge SHARD_DIR... --out DIR`."""
    p = argparse.ArgumentParser(
        prog="python -m codegen.build merge",
        description="Merge the shard directories of one `--shard I/N` build into a kernel directory "
        "byte-identical to an unsharded build of the profile.",
    )
    p.add_argument("shards", nargs="+", type=Path, metavar="SHARD_DIR")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    try:
        run_merge(args.shards, args.out, args.quiet)
    except _ONE_LINE_ERRORS as exc:
        print(f"hgemm-sm90 merge failed: {_one_line(exc)}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["merge"]:
        return merge_main(argv[1:])
    p = argparse.ArgumentParser(
        prog="python -m codegen.build",
        description=__doc__.splitlines()[0],
        epilog="python -m codegen.build merge SHARD_DIR... --out DIR joins the shards of a --shard build "
        "(see its --help). docs/BUILD.md describes both.",
    )
    p.add_argument("--spec", type=Path, default=REPO_ROOT / "kernel_specs.yaml")
    p.add_argument("--profile", default=os.environ.get("HGEMM_PROFILE", "default"))
    p.add_argument("--out", type=Path, default=REPO_ROOT / "build" / "kernels")
    p.add_argument("--kernels", nargs="*", default=[], metavar="GLOB", help="only instances matching")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="pool processes (--executor pool)")
    p.add_argument("--keep-going", action="store_true", help="build everything, then report all failures")
    p.add_argument("--cache-dir", type=Path, default=None, help="default: $HGEMM_BUILD_CACHE or ~/.cache")
    p.add_argument("--quiet", action="store_true")
    p.add_argument(
        "--shard", metavar="I/N", help="build only the I-th of N disjoint parts of the profile into --out"
    )
    p.add_argument(
        "--balance",
        type=Path,
        metavar="REPORT",
        help="balance the shards by the compile seconds in this build_report.json (every shard job must "
        "get the same file), or 'cache': those the build cache recorded (only when every shard job "
        "shares one cache)",
    )
    p.add_argument(
        "--executor",
        default=os.environ.get("HGEMM_BUILD_EXECUTOR", "pool"),
        help="pool (default; $HGEMM_BUILD_EXECUTOR), dask (with --scheduler) or dask-local:N",
    )
    p.add_argument(
        "--scheduler",
        default=os.environ.get("HGEMM_DASK_SCHEDULER") or None,
        metavar="ADDRESS",
        help="the Dask scheduler for --executor dask (default: $HGEMM_DASK_SCHEDULER)",
    )
    p.add_argument(
        "--kernels-from",
        type=Path,
        default=os.environ.get("HGEMM_KERNELS_FROM") or None,
        metavar="DIR",
        help="adopt this merged kernel directory instead of compiling, if it is exactly this build "
        "(default: $HGEMM_KERNELS_FROM; how a sharded CI build becomes a wheel)",
    )
    args = BuildArgs(**vars(p.parse_args(argv)))
    try:
        run(args)
    except _ONE_LINE_ERRORS as exc:
        print(f"hgemm-sm90 build failed: {_one_line(exc)}", file=sys.stderr)
        return 1
    except BuildError as exc:  # instance failures carry the DSL's message (several lines each)
        print(f"hgemm-sm90 build failed: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
