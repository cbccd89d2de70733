"""A content-addressed, crash-safe cache of compiled instances that verifies what it hands out.

Key: sha256 of the canonical spec JSON plus the toolchain stamp (codegen/toolchain.py: the pinned DSL and
a hash of every source that can shape a record). An entry is a directory holding the cubin, the exported
host object and its entry point (`host.json`: the oracle's input), `artifacts.json` (the size and sha256
of every other file of the entry, record.json included, and the compile's own facts such as its seconds)
and `record.json` — the instance's launch contract (runtime/contract.py's `InstanceRecord`). Entries are
assembled in a private temporary directory and renamed into place in one step, with `record.json`
written last inside it, so a crash never leaves a half entry that looks complete.

Every lookup verifies the entry: `record.json` must parse as an `InstanceRecord` and every file listed in
`artifacts.json` must be there with its size and sha256. Anything else (a truncated, emptied or
bit-flipped file, a missing one, an entry of an older layout) is a miss, reported as one warning line on
stderr naming the instance and what was wrong; the rebuilt entry then replaces the damaged one. The
default root is `~/.cache/hgemm-sm90/build` (override: HGEMM_BUILD_CACHE).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from runtime.contract import InstanceRecord

RECORD = "record.json"
HOST_FUNCTION = "host.json"
ARTIFACTS = "artifacts.json"  # {"files": {name: {"size": n, "sha256": hex}}, "compile_seconds": s}
REQUIRED_FILES = ("kernel.cubin", "host.o", "host.h", HOST_FUNCTION, RECORD)


def default_root() -> Path:
    env = os.environ.get("HGEMM_BUILD_CACHE")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "hgemm-sm90" / "build"


def cache_key(spec_json: dict, stamp: dict) -> str:
    blob = json.dumps({"spec": spec_json, "toolchain": stamp}, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()


def _digest(data: bytes) -> dict:
    return {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


@dataclass(frozen=True)
class CacheEntry:
    path: Path

    @property
    def record(self) -> InstanceRecord:
        path = self.path / RECORD
        return InstanceRecord.from_json(json.loads(path.read_text()), path=str(path))

    @property
    def host_function(self) -> dict:
        """The exported host entry point: {"prefix": ..., "name": ...} (codegen/dsl.py)."""
        return json.loads((self.path / HOST_FUNCTION).read_text())

    @property
    def compile_seconds(self) -> float | None:
        """How long the DSL compile of this entry took (a build fact, never part of the record)."""
        try:
            value = json.loads((self.path / ARTIFACTS).read_text()).get("compile_seconds")
        except (OSError, ValueError, AttributeError):
            return None
        return value if isinstance(value, (int, float)) else None

    @property
    def cubin(self) -> Path:
        return self.path / "kernel.cubin"

    @property
    def host_object(self) -> Path:
        return self.path / "host.o"

    @property
    def host_header(self) -> Path:
        return self.path / "host.h"

    def problem(self) -> str | None:
        """None if the entry is complete and intact, else what is wrong with it (one line)."""
        if not (self.path / RECORD).is_file():
            return f"{RECORD} is missing"
        try:
            index = json.loads((self.path / ARTIFACTS).read_text())
        except FileNotFoundError:
            return f"{ARTIFACTS} is missing (an entry of an older layout, or damaged)"
        except (OSError, ValueError) as exc:
            return f"{ARTIFACTS} is unreadable ({exc})"
        files = index.get("files") if isinstance(index, dict) else None
        if not isinstance(files, dict) or any(name not in files for name in REQUIRED_FILES):
            return f"{ARTIFACTS} does not list every file of the entry"
        for name in sorted(files):
            want = files[name]
            path = self.path / name
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                return f"{name} is missing"
            except OSError as exc:
                return f"{name} is unreadable ({exc.strerror or exc})"
            if not isinstance(want, dict):
                return f"{ARTIFACTS} has no size and sha256 for {name}"
            if len(data) != want.get("size"):
                return f"{name} has {len(data)} bytes, expected {want.get('size')}"
            if hashlib.sha256(data).hexdigest() != want.get("sha256"):
                return f"{name} has the wrong sha256: its content changed"
        try:
            record = self.record
            json.loads((self.path / HOST_FUNCTION).read_text())
        except Exception as exc:  # noqa: BLE001  (any parse or validation failure makes the entry a miss)
            return f"{RECORD} does not parse as an instance record ({type(exc).__name__}: {exc})"
        cubin = files["kernel.cubin"]
        if record.cubin_bytes != cubin["size"] or record.sha256 != cubin["sha256"]:
            return f"{RECORD} describes another cubin than kernel.cubin"
        return None


def warn(message: str) -> None:
    """One line on stderr, no traceback."""
    print(f"hgemm-sm90: warning: {message}", file=sys.stderr, flush=True)


class BuildCache:
    def __init__(self, root: Path | None = None):
        self.root = Path(root) if root else default_root()

    def entry_path(self, key: str) -> Path:
        return self.root / key[:2] / key

    def lookup(self, key: str, name: str | None = None) -> CacheEntry | None:
        """The verified entry `key`, or None. A damaged entry is a miss with one warning line naming
        `name` (the instance id; default: the key) and what was wrong; the next `store` replaces it."""
        entry = CacheEntry(self.entry_path(key))
        if not entry.path.exists():
            return None
        why = entry.problem()
        if why is None:
            return entry
        warn(f"cached build of {name or key} is damaged ({why}); rebuilding it [{entry.path}]")
        return None

    def store(
        self,
        key: str,
        files: dict[str, Path | bytes],
        record: InstanceRecord,
        host_function: dict,
        compile_seconds: float | None = None,
    ) -> CacheEntry:
        """Atomically create (or replace a damaged) entry `key` from `files` (name -> source path or
        bytes), the exported host entry point, the index of artifacts and `record` (written last)."""
        final = self.entry_path(key)
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{key[:12]}.", dir=final.parent))
        try:
            blobs = {
                name: src if isinstance(src, bytes) else Path(src).read_bytes() for name, src in files.items()
            }
            blobs[HOST_FUNCTION] = json.dumps(host_function, sort_keys=True).encode()
            record_bytes = json.dumps(record.to_json(), sort_keys=True, indent=1).encode()
            index = {"files": {name: _digest(data) for name, data in {**blobs, RECORD: record_bytes}.items()}}
            if compile_seconds is not None:
                index["compile_seconds"] = round(compile_seconds, 3)
            for name, data in blobs.items():
                (tmp / name).write_bytes(data)
            (tmp / ARTIFACTS).write_text(json.dumps(index, sort_keys=True, indent=1))
            (tmp / RECORD).write_bytes(record_bytes)  # the commit marker: last
            self._install(tmp, final)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        return CacheEntry(final)

    @staticmethod
    def _install(tmp: Path, final: Path) -> None:
        """Rename `tmp` to `final`. An intact entry already there (another process stored the same key
        first) is kept: it is equivalent. A damaged one is moved aside and replaced."""
        for _ in range(3):
            try:
                os.replace(tmp, final)
                return
            except OSError:
                if not final.exists():
                    continue  # it vanished meanwhile: try again
                if CacheEntry(final).problem() is None:
                    return
                trash = final.with_name(f".{final.name}.damaged.{os.getpid()}")
                try:
                    os.replace(final, trash)
                except OSError:
                    continue  # someone else moved it first
                shutil.rmtree(trash, ignore_errors=True)
        os.replace(tmp, final)  # a last try, raising what stops it
