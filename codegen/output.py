"""Writing a kernel directory: the cubins, then `manifest.json` last; and the run's `build_report.json`.

One writer serves the unsharded build (codegen/build.py) and the merge of shards (codegen/shards.py), so a
merged directory is byte-identical to an unsharded one by construction: the same cubin bytes (checked
against each record's sha256 on the way), the same records, the same toolchain stamp, serialized by the
same code with sorted keys.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from runtime.contract import InstanceRecord, Manifest

MANIFEST = "manifest.json"
BUILD_REPORT = "build_report.json"  # beside manifest.json; not installed (CMakeLists.txt), not shipped
SHARD_RECORD = "shard.json"  # what a shard directory holds (codegen/shards.py); never in a kernel dir


def write_atomic(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a temporary file and a rename: readers never see half a file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def write_cubins(out: Path, cubins: Mapping[str, bytes]) -> None:
    """`out`/<id>.cubin for each id, and remove any other cubin left there by an earlier build."""
    out.mkdir(parents=True, exist_ok=True)
    for name in sorted(cubins):
        write_atomic(out / f"{name}.cubin", cubins[name])
    for stale in out.glob("*.cubin"):
        if stale.stem not in cubins:
            stale.unlink()


def manifest_bytes(
    profile: str, toolchain: Mapping[str, str], records: Mapping[str, InstanceRecord]
) -> bytes:
    """The exact bytes of manifest.json for these records (sorted keys and instances)."""
    manifest = Manifest(profile=profile, toolchain=dict(toolchain), instances=dict(records))
    return (json.dumps(manifest.to_json(), sort_keys=True, indent=1) + "\n").encode()


def write_kernel_files(
    out: Path,
    cubins: Mapping[str, bytes],
    records: Mapping[str, InstanceRecord],
    profile: str,
    toolchain: Mapping[str, str],
) -> Manifest:
    """A complete kernel directory: cubins first, then manifest.json, atomically and last, so a crash never
    leaves a manifest naming a missing cubin. A shard record left by an earlier sharded build into the same
    directory is removed: this directory is a whole build now."""
    write_cubins(out, cubins)
    (out / SHARD_RECORD).unlink(missing_ok=True)
    write_atomic(out / MANIFEST, manifest_bytes(profile, toolchain, records))
    return Manifest(
        profile=profile,
        toolchain=dict(toolchain),
        instances=dict(records),
        path=str((out / MANIFEST).resolve()),
    )


def write_build_report(out: Path, doc: dict, instances: Mapping[str, dict]) -> Path:
    """`out`/build_report.json: the facts of a run, which differ between two builds of one commit.

    `doc` holds the run's own facts (profile, seconds, executor, shard, ...); `instances` maps each id to
    {"from": "cached" | "compiled" | "rebuilt", "compile_seconds": s}; the counts of each origin are
    added. `codegen.shards.load_costs` reads the compile seconds back to balance shards."""
    counts = {
        how: sum(1 for i in instances.values() if i.get("from") == how)
        for how in ("cached", "compiled", "rebuilt")
    }
    full = {**doc, **counts, "instances": {name: instances[name] for name in sorted(instances)}}
    path = out / BUILD_REPORT
    write_atomic(path, (json.dumps(full, sort_keys=True, indent=1) + "\n").encode())
    return path
