"""The compile driver: kernel_specs.yaml profile -> cubins + manifest.json (`python -m codegen.build`).

Runs on a CPU-only machine. For each instance of the profile: look it up in the content-addressed cache
(codegen/cache.py); on a miss, compile it with the DSL for sm_90a in a worker process, read the cubin's
facts (codegen/cubin_info.py), capture its launch contract by running the DSL's own host code against a
stub CUDA runtime (codegen/contract.py), and store the entry. Then copy the cubins into the output
directory and write `manifest.json` last, atomically: a crash never leaves a manifest that
names a missing cubin. Facts of the run (what was compiled or cached, compile seconds) go to
`build_report.json` in the same directory, never into the manifest: CMakeLists.txt installs only `*.cubin`
and `manifest.json` from it, so the report does not reach the wheel, and two builds of one commit ship the
same bytes.

What can be checked before compiling is checked first, each failure one line naming the fix (exit 1): the
spec file and the profile (codegen/matrix.py), the pinned DSL and the C compiler (codegen/toolchain.py).

A failing instance fails the build with its id and the DSL's message; `--keep-going` collects every
failure first and reports them together (still exiting non-zero).
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

from runtime.contract import Manifest
from runtime.spec import GemmSpec, SpecError

from .cache import BuildCache, CacheEntry, cache_key
from .matrix import MatrixError, load_matrix
from .toolchain import ToolchainError, check_c_compiler, check_pinned_dsl, toolchain_stamp

REPO_ROOT = Path(__file__).resolve().parent.parent
BUILD_REPORT = "build_report.json"  # beside manifest.json; not installed (CMakeLists.txt), not shipped


class BuildError(RuntimeError):
    pass


# ----------------------------------------------------------------------------- worker side
_WORKER_DUMP_DIR: str | None = None


def _worker_init() -> None:
    """Runs once per worker process, before the DSL is imported there."""
    global _WORKER_DUMP_DIR
    from .dsl import configure_environment

    _WORKER_DUMP_DIR = tempfile.mkdtemp(prefix="hgemm-dsl-dump-")
    # The DSL dumps intermediates there; spawn workers run atexit handlers when the pool shuts down cleanly.
    atexit.register(shutil.rmtree, _WORKER_DUMP_DIR, True)
    configure_environment(_WORKER_DUMP_DIR)


def compile_and_capture(spec: GemmSpec, cache: BuildCache, stamp: dict) -> CacheEntry:
    """Compile one instance and capture its launch contract; returns the (new) cache entry."""
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
        key = cache_key(spec.to_json(), stamp)
        return cache.store(
            key,
            {"kernel.cubin": compiled.cubin, "host.o": compiled.host_object, "host.h": compiled.host_header},
            record,
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


def _worker_job(spec_json: dict, cache_root: str, stamp: dict) -> tuple[str, str | None, str | None]:
    """(instance id, cache entry path or None, error text or None). Never raises across the pool."""
    name = str(spec_json)
    try:
        spec = GemmSpec.from_json(spec_json)
        name = spec.name()
        entry = compile_and_capture(spec, BuildCache(Path(cache_root)), stamp)
        return name, str(entry.path), None
    except Exception as exc:  # noqa: BLE001  (any failure is reported with the instance id by the parent)
        return name, None, f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"


# ----------------------------------------------------------------------------- parent side
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


def build_entries(
    specs: list[GemmSpec],
    *,
    cache: BuildCache,
    jobs: int,
    keep_going: bool = False,
    progress: bool = True,
    outcome: dict[str, str] | None = None,
) -> dict[str, CacheEntry]:
    """Compile (or fetch from cache) every spec; returns id -> cache entry. Raises BuildError on failure.

    Every cache hit is verified (codegen/cache.py); a damaged entry is rebuilt, with one warning line.
    `outcome`, if given, is filled with id -> "cached", "compiled" or "rebuilt" (was damaged)."""
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

        bar = tqdm(total=len(missing), desc="compiling sm_90a cubins", unit="kernel", disable=not progress)
        ctx = get_context("spawn")  # the DSL holds MLIR contexts and threads: never fork it
        with ProcessPoolExecutor(max_workers=max(1, jobs), mp_context=ctx, initializer=_worker_init) as pool:
            futures = [pool.submit(_worker_job, s.to_json(), str(cache.root), stamp) for s in missing]
            for fut in as_completed(futures):
                name, path, error = fut.result()
                bar.update(1)
                if error is None:
                    entries[name] = CacheEntry(Path(path))
                    continue
                failures.append((name, error))
                if not keep_going:
                    for other in futures:
                        other.cancel()
                    break
        bar.close()
    if outcome is not None:
        outcome.update({name: how[name] for name in entries})
    if failures:
        detail = "\n\n".join(f"--- {name}\n{err}" for name, err in failures)
        hint = "" if keep_going else " (use --keep-going to collect every failure)"
        raise BuildError(f"{len(failures)} instance(s) failed to build{hint}:\n{detail}")
    return entries


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def write_kernel_dir(entries: dict[str, CacheEntry], out: Path, profile: str) -> Manifest:
    """Copy cubins to `out`, then write manifest.json last. Returns the manifest."""
    out.mkdir(parents=True, exist_ok=True)
    instances = {}
    for name in sorted(entries):
        record = entries[name].record
        _write_atomic(out / record.cubin, entries[name].cubin.read_bytes())
        instances[name] = record
    for stale in out.glob("*.cubin"):
        if stale.stem not in instances:
            stale.unlink()
    manifest = Manifest(
        profile=profile,
        toolchain=toolchain_stamp(),
        instances=instances,
        path=str((out / "manifest.json").resolve()),
    )
    doc = json.dumps(manifest.to_json(), sort_keys=True, indent=1) + "\n"
    _write_atomic(out / "manifest.json", doc.encode())
    return manifest


def write_build_report(
    out: Path, profile: str, entries: dict[str, CacheEntry], outcome: dict[str, str], seconds: float
) -> Path:
    """`out`/build_report.json: the facts of this run, which differ between two builds of one commit."""
    instances = {
        name: {"from": outcome.get(name, "cached"), "compile_seconds": entries[name].compile_seconds}
        for name in sorted(entries)
    }
    counts = {
        how: sum(1 for i in instances.values() if i["from"] == how)
        for how in ("cached", "compiled", "rebuilt")
    }
    doc = {"profile": profile, "seconds": round(seconds, 3), **counts, "instances": instances}
    path = out / BUILD_REPORT
    _write_atomic(path, (json.dumps(doc, sort_keys=True, indent=1) + "\n").encode())
    return path


def plan(args: BuildArgs) -> list[GemmSpec]:
    """Everything that can fail before a compile, checked in order of cost; returns the specs to build.
    Each failure is a one-line BuildError or ToolchainError naming the fix."""
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
    check_c_compiler()
    check_pinned_dsl()
    return list(expansion.specs)


def run(args: BuildArgs) -> Manifest:
    specs = plan(args)
    t0 = time.perf_counter()
    outcome: dict[str, str] = {}
    entries = build_entries(
        specs,
        cache=BuildCache(args.cache_dir),
        jobs=args.jobs,
        keep_going=args.keep_going,
        progress=not args.quiet,
        outcome=outcome,
    )
    manifest = write_kernel_dir(entries, args.out, args.profile)
    seconds = time.perf_counter() - t0
    report = write_build_report(args.out, args.profile, entries, outcome, seconds)
    if not args.quiet:
        total = sum(r.cubin_bytes for r in manifest.instances.values())
        cached = sum(1 for how in outcome.values() if how == "cached")
        print(
            f"hgemm-sm90: {len(entries)} instances of profile {args.profile!r} -> {args.out} "
            f"({len(entries) - cached} compiled, {cached} from the cache; {total / 1e6:.1f} MB of cubins, "
            f"{seconds:.1f} s; report: {report})",
            file=sys.stderr,
        )
    return manifest


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m codegen.build", description=__doc__.splitlines()[0])
    p.add_argument("--spec", type=Path, default=REPO_ROOT / "kernel_specs.yaml")
    p.add_argument("--profile", default=os.environ.get("HGEMM_PROFILE", "default"))
    p.add_argument("--out", type=Path, default=REPO_ROOT / "build" / "kernels")
    p.add_argument("--kernels", nargs="*", default=[], metavar="GLOB", help="only instances matching")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    p.add_argument("--keep-going", action="store_true", help="build everything, then report all failures")
    p.add_argument("--cache-dir", type=Path, default=None, help="default: $HGEMM_BUILD_CACHE or ~/.cache")
    p.add_argument("--quiet", action="store_true")
    args = BuildArgs(**vars(p.parse_args(argv)))
    try:
        run(args)
    # Checked before any compile: one line, no traceback.
    except (MatrixError, SpecError, ToolchainError) as exc:
        print(f"hgemm-sm90 build failed: {_one_line(exc)}", file=sys.stderr)
        return 1
    except BuildError as exc:  # instance failures carry the DSL's message (several lines each)
        print(f"hgemm-sm90 build failed: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
