"""Rebuild a wheel from source and compare it byte for byte: `python -m build_tools.verify_wheel WHEEL`.

The wheel's profile is read from its own manifest (`hgemm_sm90/kernels/manifest.json`). The source tree
(this checkout unless --source says otherwise: its tracked files plus untracked files git does not ignore)
is copied into a temporary directory and built there with `pip wheel --no-build-isolation`, so the build
directory is fresh and the build environment is this interpreter's (the manifest's toolchain stamp names
the Python and distributions the rebuild must match). --cold also gives the rebuild an empty build cache
(HGEMM_BUILD_CACHE) instead of the usual one, so every instance is compiled again.

Exit 0 if the rebuilt wheel is identical, 1 if it differs (the first differing member is printed), 2 on
usage errors or a failed rebuild. docs/BUILD.md explains what makes the wheel reproducible.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
MANIFEST_MEMBER = "hgemm_sm90/kernels/manifest.json"
# Never part of the source a wheel is built from, even where git is not there to say so.
_NOT_SOURCE = {
    ".git",
    ".venv",
    ".cache",
    "build",
    "_skbuild",
    "dist",
    "wheels",
    "__pycache__",
    ".pytest_cache",
}


class VerifyError(RuntimeError):
    pass


def sha256_file(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def wheel_profile(wheel: Path) -> str:
    """The profile recorded in the wheel's manifest."""
    try:
        with zipfile.ZipFile(wheel) as z:
            doc = json.loads(z.read(MANIFEST_MEMBER))
    except (OSError, KeyError, zipfile.BadZipFile, ValueError) as exc:
        raise VerifyError(
            f"{wheel}: not an hgemm-sm90 wheel with a readable {MANIFEST_MEMBER} ({exc})"
        ) from exc
    profile = doc.get("profile") if isinstance(doc, dict) else None
    if not isinstance(profile, str) or not profile:
        raise VerifyError(f"{wheel}: {MANIFEST_MEMBER} names no profile")
    return profile


def source_files(root: Path) -> list[str]:
    """The files a build reads: git's tracked files plus untracked ones it does not ignore (so uncommitted
    work is included); without git, every file outside the usual build and environment directories."""
    if (root / ".git").exists() and shutil.which("git"):
        done = subprocess.run(
            ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            capture_output=True,
            check=True,
        )
        names = {n for n in done.stdout.decode().split("\0") if n}
        return sorted(n for n in names if (root / n).is_file())
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _NOT_SOURCE and not d.startswith(".venv"))
        rel = Path(dirpath).relative_to(root)
        found += [(rel / f).as_posix() for f in filenames if not f.endswith(".pyc")]
    return sorted(found)


def copy_source(root: Path, dst: Path) -> Path:
    """Copy the source tree at `root` (see source_files) into the new directory `dst`."""
    dst.mkdir(parents=True)
    for rel in source_files(root):
        target = dst / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / rel, target)
    return dst


def build_wheel(
    source: Path,
    out: Path,
    *,
    profile: str,
    cache: Path | None = None,
    extra_env: dict[str, str] | None = None,
) -> Path:
    """`pip wheel SOURCE --no-deps --no-build-isolation` with HGEMM_PROFILE=profile (and
    HGEMM_BUILD_CACHE=cache if given) into the directory `out`; returns the wheel. VerifyError with pip's
    output if it fails."""
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "HGEMM_PROFILE": profile, **(extra_env or {})}
    if cache is not None:
        env["HGEMM_BUILD_CACHE"] = str(cache)
    # --no-build-isolation: the build environment is this interpreter's, whose DSL and bindings versions are
    # part of the toolchain stamp the manifest records.
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        str(source),
        "--no-deps",
        "--no-build-isolation",
        "-w",
        str(out),
    ]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wheels = sorted(out.glob("hgemm_sm90-*.whl"))
    if done.returncode != 0 or len(wheels) != 1:
        raise VerifyError(
            f"the wheel build failed (exit {done.returncode}, {len(wheels)} wheels):\n"
            + done.stdout[-4000:]
            + done.stderr[-4000:]
        )
    return wheels[0]


def _first_json_difference(a, b, path: str = "") -> str | None:
    if type(a) is not type(b):
        return f"{path or '/'}: {a!r} != {b!r}"
    if isinstance(a, dict):
        for key in sorted(set(a) | set(b)):
            if key not in a or key not in b:
                return f"{path}/{key}: only in {'the first' if key in a else 'the second'}"
            found = _first_json_difference(a[key], b[key], f"{path}/{key}")
            if found:
                return found
        return None
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{path}: {len(a)} items != {len(b)} items"
        for i, (x, y) in enumerate(zip(a, b)):
            found = _first_json_difference(x, y, f"{path}/{i}")
            if found:
                return found
        return None
    return None if a == b else f"{path or '/'}: {a!r} != {b!r}"


def _member_facts(info: zipfile.ZipInfo) -> dict:
    return {
        "date_time": info.date_time,
        "mode": oct(info.external_attr >> 16),
        "compress_type": info.compress_type,
        "create_system": info.create_system,
        "extra": info.extra.hex(),
        "comment": info.comment.hex(),
    }


def diff_wheels(first: Path, second: Path) -> str | None:
    """None if the two files are byte-identical, else a description of the first difference: the member
    list, then member by member (in archive order) the content and the zip entry's metadata."""
    if Path(first).read_bytes() == Path(second).read_bytes():
        return None
    try:
        return _diff_archives(first, second)
    except (zipfile.BadZipFile, EOFError) as exc:
        return f"not both readable zip archives: {exc}"


def _diff_archives(first: Path, second: Path) -> str:
    with zipfile.ZipFile(first) as za, zipfile.ZipFile(second) as zb:
        names_a, names_b = za.namelist(), zb.namelist()
        if names_a != names_b:
            only_a, only_b = sorted(set(names_a) - set(names_b)), sorted(set(names_b) - set(names_a))
            if only_a or only_b:
                return f"member lists differ: only in the first {only_a}, only in the second {only_b}"
            i = next(i for i, (x, y) in enumerate(zip(names_a, names_b)) if x != y)
            return f"member order differs at #{i}: {names_a[i]} vs {names_b[i]}"
        for ia, ib in zip(za.infolist(), zb.infolist()):
            da, db = za.read(ia), zb.read(ib)
            if da != db:
                detail = f"{len(da)} vs {len(db)} bytes"
                if ia.filename.endswith(".json"):
                    with contextlib.suppress(ValueError):
                        detail = _first_json_difference(json.loads(da), json.loads(db)) or detail
                elif len(da) == len(db):
                    off = next(i for i, (x, y) in enumerate(zip(da, db)) if x != y)
                    detail = f"same size, first differing byte at offset {off}"
                return f"{ia.filename}: content differs ({detail})"
            fa, fb = _member_facts(ia), _member_facts(ib)
            if fa != fb:
                key = next(k for k in fa if fa[k] != fb[k])
                return f"{ia.filename}: zip entry {key} differs ({fa[key]} vs {fb[key]})"
    return "every member is identical but the archives differ (compression or zip framing)"


def verify(
    wheel: Path,
    *,
    profile: str | None = None,
    source: Path = REPO_ROOT,
    cold: bool = False,
    keep: bool = False,
) -> tuple[str, str | None, Path]:
    """Rebuild `wheel` from `source` in a temporary directory; (the rebuilt wheel's sha256, the first
    difference or None, the rebuilt wheel's path: it survives only with keep=True)."""
    recorded = wheel_profile(wheel)
    if profile is not None and profile != recorded:
        raise VerifyError(f"{wheel} was built with profile {recorded!r}, not {profile!r}")
    tmp = Path(tempfile.mkdtemp(prefix="hgemm-verify-"))
    try:
        src = copy_source(source, tmp / "src")
        rebuilt = build_wheel(src, tmp / "wheel", profile=recorded, cache=tmp / "cache" if cold else None)
        return sha256_file(rebuilt), diff_wheels(wheel, rebuilt), rebuilt
    finally:
        if not keep:
            shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m build_tools.verify_wheel", description=__doc__.splitlines()[0]
    )
    p.add_argument("wheel", type=Path, help="an hgemm_sm90-*.whl")
    p.add_argument(
        "--profile", default=None, help="expected profile (default: the one in the wheel's manifest)"
    )
    p.add_argument(
        "--source", type=Path, default=REPO_ROOT, help="source tree to rebuild from (default: this one)"
    )
    p.add_argument(
        "--cold", action="store_true", help="rebuild with an empty build cache (compile everything)"
    )
    p.add_argument("--keep", action="store_true", help="keep the temporary directory with the rebuilt wheel")
    args = p.parse_args(argv)
    try:
        rebuilt_sha, difference, rebuilt = verify(
            args.wheel, profile=args.profile, source=args.source.resolve(), cold=args.cold, keep=args.keep
        )
    except VerifyError as exc:
        print(f"verify_wheel: {exc}", file=sys.stderr)
        return 2
    print(f"given:   sha256 {sha256_file(args.wheel)}  {args.wheel}")
    print(f"rebuilt: sha256 {rebuilt_sha}  {rebuilt if args.keep else '(removed; --keep keeps it)'}")
    if difference is None:
        print("identical: the rebuild from source gives the same bytes")
        return 0
    print(f"DIFFERENT: {difference}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
