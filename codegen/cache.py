"""A content-addressed, crash-safe cache of compiled instances.

Key: sha256 of the canonical spec JSON plus the toolchain stamp (codegen/toolchain.py: the pinned DSL and
a hash of every source that can shape a record). An entry is a directory holding the cubin, the exported
host object and its entry point (`host.json`: the oracle's input), and `record.json` — the instance's
launch contract (runtime/contract.py's `InstanceRecord`). Entries are assembled in a private temporary
directory and renamed into place in one step, with `record.json` written last inside it, so a crash never
leaves a half entry that looks complete. The default root is `~/.cache/hgemm-sm90/build` (override:
HGEMM_BUILD_CACHE).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from runtime.contract import InstanceRecord

RECORD = "record.json"
HOST_FUNCTION = "host.json"


def default_root() -> Path:
    env = os.environ.get("HGEMM_BUILD_CACHE")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "hgemm-sm90" / "build"


def cache_key(spec_json: dict, stamp: dict) -> str:
    blob = json.dumps({"spec": spec_json, "toolchain": stamp}, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()


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
    def cubin(self) -> Path:
        return self.path / "kernel.cubin"

    @property
    def host_object(self) -> Path:
        return self.path / "host.o"

    @property
    def host_header(self) -> Path:
        return self.path / "host.h"


class BuildCache:
    def __init__(self, root: Path | None = None):
        self.root = Path(root) if root else default_root()

    def lookup(self, key: str) -> CacheEntry | None:
        path = self.root / key[:2] / key
        return CacheEntry(path) if (path / RECORD).is_file() else None

    def store(
        self, key: str, files: dict[str, Path | bytes], record: InstanceRecord, host_function: dict
    ) -> CacheEntry:
        """Atomically create the entry `key` from `files` (name -> source path or bytes), the exported host
        entry point and `record` (written last)."""
        final = self.root / key[:2] / key
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{key[:12]}.", dir=final.parent))
        try:
            for name, src in files.items():
                if isinstance(src, bytes):
                    (tmp / name).write_bytes(src)
                else:
                    shutil.copyfile(src, tmp / name)
            (tmp / HOST_FUNCTION).write_text(json.dumps(host_function, sort_keys=True))
            (tmp / RECORD).write_text(json.dumps(record.to_json(), sort_keys=True, indent=1))
            try:
                os.replace(tmp, final)
            except OSError:
                # Another process stored the same key first; its entry is equivalent.
                if not (final / RECORD).is_file():
                    raise
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        return CacheEntry(final)
