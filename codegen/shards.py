"""Splitting one profile's build over N jobs (`--shard I/N`) and merging the parts (`merge`).

The split is a pure function of what every shard job agrees on: the sorted ids the profile selects, N, and
optionally a cost per id from a `--balance` build report (compile seconds of an earlier build). Ids are
taken in order of decreasing cost (ties by id) and each goes to the shard with the least total cost so far
(ties: the lower index), the longest-processing-time rule; with no costs every id costs 1 and this is
round-robin over the sorted ids. The local build cache is deliberately not a cost source: shard jobs on
different machines see different caches, and would split differently.

A shard directory holds the cubins of its ids and `shard.json` (written last: a shard whose job died has
none) recording what it is: the profile and `--kernels` globs, I and N, the toolchain stamp (the cache
key's toolchain half), the whole selection, a digest of the split, and the launch records of its ids. It has
no manifest.json, so it cannot be mistaken for a kernel directory, and CMakeLists.txt installs only
`*.cubin` and `manifest.json`, so shard.json never reaches a wheel.

`merge` proves the shards are the whole build before writing anything: every directory is a complete
shard; all have one profile, selection, toolchain, N and split; no index or id appears twice; every index
1..N is there and together they hold exactly the selection; every cubin matches its record's size and
sha256. It then writes through the unsharded build's own writer (codegen/output.py) with the shards'
toolchain stamp, so the cubins and manifest are byte-identical to an unsharded build of the profile.
"""

from __future__ import annotations

import hashlib
import json
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from runtime.contract import InstanceRecord

from .output import MANIFEST, SHARD_RECORD, write_atomic, write_cubins, write_kernel_files

FORMAT = "hgemm-sm90-shard"
VERSION = 1


class ShardError(ValueError):
    """A bad --shard or --balance argument, or shards that cannot be merged; one line naming the fix."""


@dataclass(frozen=True)
class Shard:
    index: int  # 1-based, as written on the command line
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str) -> Shard:
    """`I/N` with 1 <= I <= N."""
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
        raise ShardError(f"--shard {text!r}: write I/N with 1 <= I <= N, e.g. --shard 2/3")
    return Shard(int(m.group(1)), int(m.group(2)))


def split(ids: Sequence[str], count: int, costs: Mapping[str, float] | None = None) -> list[list[str]]:
    """The `count` disjoint parts of `ids` (each part sorted), balanced by `costs` (see the module doc).
    An id without a cost costs the median of the known ones; with no costs at all, 1 each."""
    known = [float(costs[i]) for i in ids if costs and i in costs]
    default = statistics.median(known) if known else 1.0
    cost = {i: float(costs[i]) if costs and i in costs else default for i in ids}
    loads = [0.0] * count
    parts: list[list[str]] = [[] for _ in range(count)]
    for i in sorted(set(ids), key=lambda i: (-cost[i], i)):
        target = min(range(count), key=lambda s: (loads[s], s))
        parts[target].append(i)
        loads[target] += cost[i]
    return [sorted(p) for p in parts]


def split_digest(parts: Sequence[Sequence[str]]) -> str:
    """sha256 of the whole assignment: shards with equal digests are parts of one split."""
    return hashlib.sha256(json.dumps([list(p) for p in parts]).encode()).hexdigest()


def load_costs(report: Path) -> dict[str, float]:
    """id -> compile seconds from a build_report.json (codegen/output.py), of a whole or merged build."""
    try:
        doc = json.loads(Path(report).read_text())
        instances = doc["instances"]
        return {
            name: float(facts["compile_seconds"])
            for name, facts in instances.items()
            if isinstance(facts, dict) and isinstance(facts.get("compile_seconds"), (int, float))
        }
    except OSError as exc:
        raise ShardError(f"--balance {report}: cannot read it ({exc.strerror or exc})") from None
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ShardError(
            f"--balance {report}: not a build report with per-instance compile seconds ({exc!r}); "
            "pass a build_report.json of an earlier build"
        ) from None


def write_shard_dir(
    out: Path,
    shard: Shard,
    *,
    cubins: Mapping[str, bytes],
    records: Mapping[str, InstanceRecord],
    profile: str,
    kernels: Sequence[str],
    toolchain: Mapping[str, str],
    selection: Sequence[str],
    digest: str,
) -> Path:
    """A shard directory: its cubins, then shard.json last. A manifest left by an earlier whole build into
    the same directory is removed (it would name cubins this shard does not hold)."""
    write_cubins(out, cubins)
    (out / MANIFEST).unlink(missing_ok=True)
    doc = {
        "format": FORMAT,
        "version": VERSION,
        "profile": profile,
        "kernels": list(kernels),
        "shard": [shard.index, shard.count],
        "toolchain": dict(toolchain),
        "selection": sorted(selection),
        "split_sha256": digest,
        "instances": {name: records[name].to_json() for name in sorted(records)},
    }
    path = out / SHARD_RECORD
    write_atomic(path, (json.dumps(doc, sort_keys=True, indent=1) + "\n").encode())
    return path


@dataclass(frozen=True)
class ShardDir:
    """A shard directory as read back by `merge`."""

    path: Path
    doc: dict

    @property
    def shard(self) -> Shard:
        return Shard(*self.doc["shard"])

    @property
    def ids(self) -> list[str]:
        return sorted(self.doc["instances"])

    def __str__(self) -> str:
        return f"{self.path} (shard {self.shard})"


def read_shard_dir(path: Path) -> ShardDir:
    """The shard at `path`, or ShardError saying why it is not one."""
    record = Path(path) / SHARD_RECORD
    if not Path(path).is_dir():
        raise ShardError(f"missing shard directory {path}")
    if not record.is_file():
        what = "a whole build's kernel directory" if (Path(path) / MANIFEST).is_file() else "not a shard"
        raise ShardError(
            f"{path} is {what}: it has no {SHARD_RECORD} (a shard build writes it last, so its build may "
            "not have finished); build it with `python -m codegen.build --shard I/N --out DIR`"
        )
    try:
        doc = json.loads(record.read_text())
        ok = (
            isinstance(doc, dict)
            and doc.get("format") == FORMAT
            and doc.get("version") == VERSION
            and isinstance(doc.get("instances"), dict)
            and isinstance(doc.get("selection"), list)
            and isinstance(doc.get("toolchain"), dict)
            and isinstance(doc.get("shard"), list)
            and len(doc["shard"]) == 2
            and all(isinstance(v, int) for v in doc["shard"])
        )
    except (OSError, ValueError) as exc:
        raise ShardError(f"{record} is unreadable ({exc}); rebuild that shard") from None
    if not ok:
        raise ShardError(f"{record} is not a {FORMAT} record of version {VERSION}; rebuild that shard")
    return ShardDir(Path(path), doc)


def _first_difference(a: Mapping, b: Mapping) -> str:
    for key in sorted(set(a) | set(b)):
        if a.get(key) != b.get(key):
            return f"{key} {a.get(key)!r} vs {b.get(key)!r}"
    return "none"


def check_shards(shards: Sequence[ShardDir]) -> None:
    """ShardError (one line) unless `shards` are the complete, disjoint parts of one split of one build."""
    if not shards:
        raise ShardError("merge needs the shard directories of one build")
    first = shards[0]
    for other in shards[1:]:
        a, b = first.doc, other.doc
        if a["profile"] != b["profile"]:
            raise ShardError(
                f"foreign shard: {other} is of profile {b['profile']!r}, {first} of {a['profile']!r}"
            )
        if a["toolchain"] != b["toolchain"]:
            raise ShardError(
                f"foreign shard: {other} was built with another toolchain than {first} "
                f"({_first_difference(b['toolchain'], a['toolchain'])}); rebuild every shard from one "
                "commit and one build environment"
            )
        if a["selection"] != b["selection"]:
            raise ShardError(
                f"foreign shard: {other} selects other instances than {first} (another kernel_specs.yaml "
                "or --kernels); rebuild every shard from one commit with the same arguments"
            )
        if a["shard"][1] != b["shard"][1]:
            raise ShardError(
                f"foreign shard: {other} is one of {b['shard'][1]} shards, {first} of {a['shard'][1]}"
            )
        if a.get("split_sha256") != b.get("split_sha256"):
            raise ShardError(
                f"foreign shard: {other} was split differently from {first} (another --balance report); "
                "give every shard job the same --balance file"
            )
    seen: dict[int, ShardDir] = {}
    owner: dict[str, ShardDir] = {}
    for s in shards:
        if s.shard.index in seen:
            raise ShardError(
                f"overlapping shards: {seen[s.shard.index].path} and {s.path} are both shard {s.shard}"
            )
        seen[s.shard.index] = s
        for name in s.ids:
            if name in owner:
                raise ShardError(f"overlapping shards: {name} is in both {owner[name]} and {s}")
            owner[name] = s
    count = first.shard.count
    absent = [f"{i}/{count}" for i in range(1, count + 1) if i not in seen]
    if absent:
        raise ShardError(
            f"missing shard(s) {', '.join(absent)} of profile {first.doc['profile']!r}: got "
            f"{', '.join(str(s.shard) for s in sorted(shards, key=lambda s: s.shard.index))}"
        )
    selection = set(first.doc["selection"])
    if set(owner) != selection:
        gone, extra = sorted(selection - set(owner)), sorted(set(owner) - selection)
        raise ShardError(
            f"the shards do not hold exactly their selection: {len(gone)} id(s) missing"
            f"{' (' + gone[0] + ', ...)' if gone else ''}, {len(extra)} extra"
            f"{' (' + extra[0] + ', ...)' if extra else ''}; rebuild the shards"
        )


def _shard_cubins(s: ShardDir) -> tuple[dict[str, bytes], dict[str, InstanceRecord]]:
    """Each id's cubin and record, the cubin checked against the record's size and sha256."""
    cubins, records = {}, {}
    for name in s.ids:
        path = s.path / f"{name}.cubin"
        try:
            record = InstanceRecord.from_json(s.doc["instances"][name], path=str(s.path / SHARD_RECORD))
            data = path.read_bytes()
        except FileNotFoundError:
            raise ShardError(f"{s}: {path.name} is missing; rebuild that shard") from None
        except Exception as exc:  # noqa: BLE001  (an invalid record: say where, in one line)
            raise ShardError(f"{s}: the record of {name} is invalid ({' '.join(str(exc).split())})") from None
        if record.id != name:
            raise ShardError(f"{s}: the record filed under {name} is of {record.id}; rebuild that shard")
        if len(data) != record.cubin_bytes or hashlib.sha256(data).hexdigest() != record.sha256:
            raise ShardError(
                f"{s}: {path.name} does not match its record (size or sha256); rebuild that shard"
            )
        cubins[name], records[name] = data, record
    return cubins, records


def merge(dirs: Sequence[Path], out: Path):
    """Check `dirs` (check_shards) and write their union to `out` as a whole build's kernel directory.
    Returns (the Manifest, the shards read)."""
    out_resolved = Path(out).resolve()
    if any(Path(d).resolve() == out_resolved for d in dirs):
        raise ShardError(f"--out {out} is one of the shard directories; merge into a new directory")
    shards = [read_shard_dir(Path(d)) for d in dirs]
    check_shards(shards)
    cubins: dict[str, bytes] = {}
    records: dict[str, InstanceRecord] = {}
    for s in shards:
        c, r = _shard_cubins(s)
        cubins.update(c)
        records.update(r)
    first = shards[0].doc
    manifest = write_kernel_files(Path(out), cubins, records, first["profile"], first["toolchain"])
    return manifest, shards
