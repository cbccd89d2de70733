"""The build cache verifies what it hands out (codegen/cache.py).

A damaged entry must never reach a wheel: every lookup checks that record.json parses as an
InstanceRecord and that each artifact has the size and sha256 recorded when it was stored. Each kind of
damage below is a miss with one warning line naming the instance and what was wrong, and the next store
replaces the damaged entry. The fast tests use fake artifacts; the last one compiles one `ci` instance.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from codegen.cache import ARTIFACTS, HOST_FUNCTION, RECORD, BuildCache, CacheEntry
from runtime.contract import InstanceRecord
from tests.runtime import fake_kernels

KEY = "ab" + "0" * 62


def _record() -> InstanceRecord:
    rec = fake_kernels.record(fake_kernels.spec())
    stats = {k: v for k, v in rec.stats.items() if k != "compile_seconds"}
    return InstanceRecord.from_json({**rec.to_json(), "stats": stats})


def _store(cache: BuildCache) -> CacheEntry:
    rec = _record()
    files = {
        "kernel.cubin": fake_kernels.cubin_bytes(rec.id),
        "host.o": b"\x7fELF host object " * 64,
        "host.h": b"/* exported host entry */\n",
    }
    return cache.store(KEY, files, rec, host_function={"prefix": "p", "name": "f"}, compile_seconds=1.25)


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


DAMAGE = {
    "truncated cubin": ("kernel.cubin", _truncate, "kernel.cubin has"),
    "bit-flipped cubin": ("kernel.cubin", _flip, "kernel.cubin has the wrong sha256"),
    "emptied cubin": ("kernel.cubin", lambda p: p.write_bytes(b""), "kernel.cubin has 0 bytes"),
    "missing cubin": ("kernel.cubin", Path.unlink, "kernel.cubin is missing"),
    "truncated record.json": (RECORD, _truncate, "record.json has"),
    "missing host.o": ("host.o", Path.unlink, "host.o is missing"),
    "bit-flipped host.o": ("host.o", _flip, "host.o has the wrong sha256"),
    "missing host.json": (HOST_FUNCTION, Path.unlink, "host.json is missing"),
    "missing artifact index": (ARTIFACTS, Path.unlink, "artifacts.json is missing"),
    "missing record.json": (RECORD, Path.unlink, "record.json is missing"),
}


def test_an_intact_entry_is_a_hit_and_keeps_compile_seconds_out_of_the_record(tmp_path, capsys):
    cache = BuildCache(tmp_path)
    stored = _store(cache)
    hit = cache.lookup(KEY, name="x")
    assert hit == stored and hit.problem() is None
    assert hit.record == _record() and hit.host_function == {"prefix": "p", "name": "f"}
    assert hit.compile_seconds == 1.25
    assert "compile_seconds" not in json.loads((hit.path / RECORD).read_text())["stats"]
    assert cache.lookup("cd" + "0" * 62) is None  # absent: a plain miss
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("case", list(DAMAGE))
def test_a_damaged_entry_is_a_miss_with_one_warning_line(tmp_path, capsys, case):
    name, damage, why = DAMAGE[case]
    cache = BuildCache(tmp_path)
    entry = _store(cache)
    damage(entry.path / name)
    assert cache.lookup(KEY, name="sm90_the_instance") is None
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("hgemm-sm90: warning: cached build of sm90_the_instance is damaged (")
    assert why in err and "rebuilding it" in err


@pytest.mark.parametrize("case", ["bit-flipped cubin", "missing host.o", "truncated record.json"])
def test_storing_again_replaces_a_damaged_entry(tmp_path, capsys, case):
    name, damage, _ = DAMAGE[case]
    cache = BuildCache(tmp_path)
    damage(_store(cache).path / name)
    assert cache.lookup(KEY) is None
    entry = _store(cache)  # what build_entries' worker does after the miss
    assert cache.lookup(KEY) == entry and entry.problem() is None
    cubin = entry.cubin.read_bytes()
    assert hashlib.sha256(cubin).hexdigest() == entry.record.sha256
    assert sorted(p.name for p in tmp_path.joinpath(KEY[:2]).iterdir()) == [KEY]  # nothing left aside
    capsys.readouterr()


def test_a_concurrent_store_of_an_intact_entry_keeps_the_first(tmp_path):
    cache = BuildCache(tmp_path)
    first = _store(cache)
    before = (first.path / RECORD).stat().st_ino
    assert _store(cache) == first and (first.path / RECORD).stat().st_ino == before


@pytest.mark.compiler
def test_a_damaged_cached_cubin_is_rebuilt_through_build_entries(tmp_path, capsys):
    from codegen.build import build_entries
    from codegen.matrix import load_matrix

    specs = load_matrix(Path(__file__).resolve().parents[2] / "kernel_specs.yaml").expand("ci").specs
    spec = min(specs, key=lambda s: (s.tile[0] * s.tile[1], s.name()))  # the smallest tile: quickest
    cache = BuildCache(tmp_path / "cache")
    outcome: dict[str, str] = {}
    entry = build_entries([spec], cache=cache, jobs=1, progress=False, outcome=outcome)[spec.name()]
    assert outcome == {spec.name(): "compiled"} and entry.problem() is None
    good = entry.cubin.read_bytes()
    _flip(entry.cubin)
    capsys.readouterr()

    again = build_entries([spec], cache=cache, jobs=1, progress=False, outcome=outcome)[spec.name()]
    err = capsys.readouterr().err
    assert outcome == {spec.name(): "rebuilt"}
    assert again.path == entry.path and again.problem() is None
    assert again.cubin.read_bytes() == good  # the DSL is deterministic: the very cubin of the first build
    warnings = [line for line in err.splitlines() if "warning" in line]
    assert len(warnings) == 1 and spec.name() in warnings[0] and "kernel.cubin" in warnings[0], err
    assert "Traceback" not in err


def test_a_record_that_is_not_an_instance_record_is_a_miss(tmp_path, capsys):
    """Even with an index that vouches for it (sizes and hashes match), record.json must parse."""
    cache = BuildCache(tmp_path)
    entry = _store(cache)
    bad = json.dumps({"spec": "nope"}).encode()
    (entry.path / RECORD).write_bytes(bad)
    index = json.loads((entry.path / ARTIFACTS).read_text())
    index["files"][RECORD] = {"size": len(bad), "sha256": hashlib.sha256(bad).hexdigest()}
    (entry.path / ARTIFACTS).write_text(json.dumps(index))
    assert cache.lookup(KEY, name="sm90_x") is None
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "record.json does not parse as an instance record" in err, err
