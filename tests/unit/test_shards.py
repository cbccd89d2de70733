"""Sharded builds (`--shard I/N`) and their merge (codegen/shards.py).

The split must be a pure function of what every shard job agrees on, and a merge must either write the
very bytes of an unsharded build or refuse in one line: a missing, overlapping or foreign shard never
yields a kernel directory. The fast tests use fake records and cubins; the `compiler` tests build the
`ci` profile in three real shards (from the build cache that the session's `ci_build` fills) and run the
command line as CI would.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from codegen.output import BUILD_REPORT, MANIFEST, SHARD_RECORD, write_kernel_files
from codegen.prebuilt import PrebuiltError, adopt_kernel_dir
from codegen.shards import (
    Shard,
    ShardError,
    load_costs,
    merge,
    parse_shard,
    split,
    split_digest,
    write_shard_dir,
)
from tests.runtime import fake_kernels
from tests.unit.test_build_errors import _build as one_line_build_failure

REPO = Path(__file__).resolve().parents[2]
TOOLCHAIN = {"python": "3.11", "dists": "nvidia-cutlass-dsl==4.8.1", "src_sha256": "0" * 64}


# ----------------------------------------------------------------------------- the split rule
def test_parse_shard():
    assert parse_shard("2/3") == Shard(2, 3) and str(parse_shard(" 1 / 1 ")) == "1/1"
    for bad in ("0/3", "4/3", "1/0", "a/b", "2", "-1/3", "1/3/5"):
        with pytest.raises(ShardError, match="write I/N"):
            parse_shard(bad)


IDS = [f"id{i:02d}" for i in range(11)]


@pytest.mark.parametrize("count", [1, 2, 3, 5, 11, 13])
def test_the_parts_are_disjoint_cover_everything_and_do_not_depend_on_input_order(count):
    parts = split(IDS, count)
    assert len(parts) == count
    flat = [i for p in parts for i in p]
    assert sorted(flat) == IDS and len(set(flat)) == len(flat)
    assert split(list(reversed(IDS)), count) == parts
    assert max(map(len, parts)) - min(map(len, parts)) <= 1


def test_without_costs_it_is_round_robin_over_the_sorted_ids():
    assert split(["c", "a", "e", "b", "d"], 2) == [["a", "c", "e"], ["b", "d"]]


def test_costs_balance_the_parts_longest_first():
    costs = {"a": 5.0, "b": 4.0, "c": 3.0, "d": 3.0, "e": 3.0}
    parts = split(list(costs), 2, costs)
    # a -> 0 (5), b -> 1 (4), c -> 1 (7), d -> 0 (8), e -> 1 (10): 8 vs 10, where round-robin gives 11 vs 7
    assert parts == [["a", "d"], ["b", "c", "e"]]
    assert split(list(costs), 2) != parts and split_digest(parts) != split_digest(split(list(costs), 2))


def test_an_id_without_a_recorded_cost_costs_the_median():
    parts = split(["a", "b", "c", "new"], 2, {"a": 10.0, "b": 1.0, "c": 2.0})
    assert parts == [["a"], ["b", "c", "new"]]  # new costs 2: b + c + new = 5 < 10


def test_costs_come_from_a_build_report(tmp_path):
    report = tmp_path / BUILD_REPORT
    doc = {"profile": "ci", "instances": {"a": {"compile_seconds": 1.5}, "b": {"compile_seconds": None}}}
    report.write_text(json.dumps(doc))
    assert load_costs(report) == {"a": 1.5}
    report.write_text("[1, 2]")
    with pytest.raises(ShardError, match="not a build report"):
        load_costs(report)
    with pytest.raises(ShardError, match="cannot read it"):
        load_costs(tmp_path / "nope.json")


@pytest.mark.parametrize(
    "args, message",
    [
        (["--shard", "4/3"], "--shard '4/3': write I/N with 1 <= I <= N"),
        (["--balance", "report.json"], "--balance only balances a sharded build; add --shard I/N"),
        (["--shard", "1/2", "--balance", "/nonexistent/report.json"], "cannot read it"),
    ],
)
def test_bad_shard_arguments_fail_in_one_line_before_compiling(tmp_path, args, message):
    err, _ = one_line_build_failure(tmp_path, "--profile", "ci", *args)
    assert message in err


# ----------------------------------------------------------------------------- merge, on fake shards
def _records():
    specs = [
        fake_kernels.spec(cluster=c, tile=t, with_c=w)
        for c in ((1, 1), (2, 1), (1, 2))
        for t in ((128, 256, 64), (128, 128, 64))
        for w in (False, True)
    ]
    return {s.name(): fake_kernels.record(s) for s in specs}


def _fake_shards(root: Path, count: int = 3, profile: str = "ci", toolchain=None, costs=None) -> list[Path]:
    records = _records()
    parts = split(sorted(records), count, costs)
    dirs = []
    for index, part in enumerate(parts, 1):
        out = root / f"shard{index}"
        write_shard_dir(
            out,
            Shard(index, count),
            cubins={i: fake_kernels.cubin_bytes(i) for i in part},
            records={i: records[i] for i in part},
            profile=profile,
            kernels=[],
            toolchain=toolchain or TOOLCHAIN,
            selection=sorted(records),
            digest=split_digest(parts),
        )
        dirs.append(out)
    return dirs


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.suffix == ".cubin"} | {
        MANIFEST: (directory / MANIFEST).read_bytes()
    }


def test_a_merge_writes_the_bytes_of_the_whole_build(tmp_path):
    records = _records()
    whole = tmp_path / "whole"
    write_kernel_files(whole, {i: fake_kernels.cubin_bytes(i) for i in records}, records, "ci", TOOLCHAIN)
    dirs = _fake_shards(tmp_path)
    assert not any((d / MANIFEST).exists() for d in dirs), "a shard must not look like a kernel directory"
    manifest, _ = merge(list(reversed(dirs)), tmp_path / "merged")
    assert sorted(manifest.instances) == sorted(records)
    assert _files(tmp_path / "merged") == _files(whole)
    assert not (tmp_path / "merged" / SHARD_RECORD).exists()


def test_more_shards_than_instances_leaves_some_empty_and_still_merges(tmp_path):
    records = _records()
    whole = tmp_path / "whole"
    write_kernel_files(whole, {i: fake_kernels.cubin_bytes(i) for i in records}, records, "ci", TOOLCHAIN)
    dirs = _fake_shards(tmp_path, count=len(records) + 2)
    assert [len(list(d.glob("*.cubin"))) for d in dirs][-2:] == [0, 0]
    merge(dirs, tmp_path / "merged")
    assert _files(tmp_path / "merged") == _files(whole)


def test_a_shard_and_a_whole_build_into_one_directory_do_not_mix(tmp_path):
    """Each writer removes the other's marker, so a directory is never both a shard and a kernel dir."""
    records = _records()
    cubins = {i: fake_kernels.cubin_bytes(i) for i in records}
    d = _fake_shards(tmp_path)[0]
    write_kernel_files(d, cubins, records, "ci", TOOLCHAIN)
    assert (d / MANIFEST).exists() and not (d / SHARD_RECORD).exists()
    assert len(list(d.glob("*.cubin"))) == len(records)
    one = sorted(records)[:1]
    digest = split_digest([one])
    write_shard_dir(
        d,
        Shard(1, 1),
        cubins={i: cubins[i] for i in one},
        records={i: records[i] for i in one},
        profile="ci",
        kernels=[],
        toolchain=TOOLCHAIN,
        selection=one,
        digest=digest,
    )
    assert not (d / MANIFEST).exists() and (d / SHARD_RECORD).exists()
    assert [p.stem for p in d.glob("*.cubin")] == one


def _merge_error(dirs, out) -> str:
    with pytest.raises(ShardError) as err:
        merge(dirs, out)
    text = str(err.value)
    assert "\n" not in text
    assert not (Path(out) / MANIFEST).exists(), "a refused merge wrote a manifest"
    return text


def test_merge_refuses_a_missing_shard(tmp_path):
    d = _fake_shards(tmp_path)
    assert "missing shard(s) 2/3 of profile 'ci': got 1/3, 3/3" in _merge_error([d[0], d[2]], tmp_path / "m")


def test_merge_refuses_overlapping_shards(tmp_path):
    d = _fake_shards(tmp_path)
    copy = tmp_path / "copy_of_1"
    shutil.copytree(d[0], copy)
    text = _merge_error([d[0], d[1], d[2], copy], tmp_path / "m")
    assert text.startswith("overlapping shards:") and "both shard 1/3" in text


def test_merge_refuses_a_shard_of_another_split(tmp_path):
    d3 = _fake_shards(tmp_path / "three")
    d2 = _fake_shards(tmp_path / "two", count=2)
    text = _merge_error([d3[0], d3[1], d2[1]], tmp_path / "m")
    assert text.startswith("foreign shard:") and "one of 2 shards" in text
    balanced = _fake_shards(tmp_path / "balanced", costs={i: n for n, i in enumerate(sorted(_records()))})
    text = _merge_error([d3[0], d3[1], balanced[2]], tmp_path / "m")
    assert "split differently" in text and "--balance" in text


def test_merge_refuses_a_shard_of_another_profile_or_toolchain(tmp_path):
    ours = _fake_shards(tmp_path / "ours")
    other_profile = _fake_shards(tmp_path / "p", profile="default")
    text = _merge_error([ours[0], ours[1], other_profile[2]], tmp_path / "m")
    assert text.startswith("foreign shard:") and "profile 'default'" in text
    other_tools = _fake_shards(tmp_path / "t", toolchain={**TOOLCHAIN, "src_sha256": "1" * 64})
    text = _merge_error([ours[0], other_tools[1], ours[2]], tmp_path / "m")
    assert "another toolchain" in text and "src_sha256" in text


def test_merge_refuses_what_is_not_a_complete_shard(tmp_path):
    d = _fake_shards(tmp_path)
    assert "missing shard directory" in _merge_error([d[0], tmp_path / "nope", d[2]], tmp_path / "m")
    (d[1] / SHARD_RECORD).unlink()  # a shard job that died before its record
    text = _merge_error(d, tmp_path / "m")
    assert f"has no {SHARD_RECORD}" in text and "--shard I/N" in text
    d = _fake_shards(tmp_path / "again")
    victim = next(d[1].glob("*.cubin"))
    victim.write_bytes(victim.read_bytes()[:-1])
    assert f"{victim.name} does not match its record" in _merge_error(d, tmp_path / "m")
    victim.unlink()
    assert f"{victim.name} is missing" in _merge_error(d, tmp_path / "m")
    assert "one of the shard directories" in _merge_error(d, d[0])


def test_adopting_a_kernel_dir_checks_it_is_exactly_this_build(tmp_path):
    records = _records()
    src = tmp_path / "merged"
    write_kernel_files(src, {i: fake_kernels.cubin_bytes(i) for i in records}, records, "ci", TOOLCHAIN)
    ids = sorted(records)
    manifest = adopt_kernel_dir(src, tmp_path / "out", "ci", ids, TOOLCHAIN)
    assert sorted(manifest.instances) == ids and _files(tmp_path / "out") == _files(src)

    def refused(**change) -> str:
        args = {"src": src, "out": tmp_path / "no", "profile": "ci", "selection": ids, "toolchain": TOOLCHAIN}
        with pytest.raises(PrebuiltError) as err:
            adopt_kernel_dir(**{**args, **change})
        assert "\n" not in str(err.value) and not (tmp_path / "no").exists()
        return str(err.value)

    assert "profile 'ci', not 'default'" in refused(profile="default")
    assert "another toolchain (src_sha256" in refused(toolchain={**TOOLCHAIN, "src_sha256": "f" * 64})
    assert "(1 missing, 0 extra)" in refused(selection=[*ids, "sm90_extra"])
    assert "no manifest.json there" in refused(src=tmp_path)
    victim = src / f"{ids[0]}.cubin"
    victim.write_bytes(b"\0" + victim.read_bytes()[1:])
    assert f"{victim.name} does not match its record" in refused()


# ----------------------------------------------------------------------------- the real ci profile
_OURS = ("HGEMM_PROFILE", "HGEMM_BUILD_EXECUTOR", "HGEMM_DASK_SCHEDULER", "HGEMM_KERNELS_FROM")


def _cli(*args: str, cache: Path, **env: str) -> subprocess.CompletedProcess:
    env = {**{k: v for k, v in os.environ.items() if k not in _OURS}, **env}
    env["HGEMM_BUILD_CACHE"] = str(cache)
    return subprocess.run(
        [sys.executable, "-m", "codegen.build", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def _one_line_failure(done: subprocess.CompletedProcess) -> str:
    err = done.stderr
    assert done.returncode == 1, (done.returncode, err)
    assert "Traceback" not in err and err.count("\n") == 1, err
    assert err.startswith("hgemm-sm90 merge failed: "), err
    return err.strip()


@pytest.fixture(scope="module")
def ci_shards(ci_build, tmp_path_factory):
    """The `ci` profile built as shards 1/3, 2/3, 3/3 through the command line, from the cache that
    `ci_build` (the unsharded build) filled: (the unsharded kernel dir, [shard dirs], the cache)."""
    from tests.conftest import build_cache_dir

    _, _, whole = ci_build
    root = tmp_path_factory.mktemp("shards")
    dirs = []
    for i in (1, 2, 3):
        out = root / f"shard{i}"
        done = _cli(
            "--profile", "ci", "--shard", f"{i}/3", "--out", str(out), "--quiet", cache=build_cache_dir()
        )
        assert done.returncode == 0, done.stderr
        dirs.append(out)
    return whole, dirs, build_cache_dir()


@pytest.mark.compiler
def test_three_merged_ci_shards_equal_the_unsharded_build_byte_for_byte(ci_shards, tmp_path):
    whole, dirs, cache = ci_shards
    held = [json.loads((d / SHARD_RECORD).read_text())["instances"] for d in dirs]
    assert sorted(map(len, held)) == [9, 9, 9]  # 27 instances, round-robin
    for d in dirs:
        report = json.loads((d / BUILD_REPORT).read_text())
        # Every instance of the shard a cache hit (no compile).
        assert report["shard"] in ("1/3", "2/3", "3/3") and report["cached"] == len(report["instances"])
    out = tmp_path / "merged"
    done = _cli("merge", *map(str, reversed(dirs)), "--out", str(out), cache=cache)
    assert done.returncode == 0, done.stderr
    assert "merged 3 shards of profile 'ci': 27 instances" in done.stderr
    assert _files(out) == _files(whole)
    assert len(_files(out)) == 28  # 27 cubins and the manifest, nothing missing on either side
    merged_report = json.loads((out / BUILD_REPORT).read_text())
    assert sorted(merged_report["instances"]) == sorted(
        json.loads((whole / MANIFEST).read_text())["instances"]
    )


@pytest.mark.compiler
def test_the_merge_command_refuses_bad_shard_sets_in_one_line(ci_shards, tmp_path):
    _, dirs, cache = ci_shards
    err = _one_line_failure(
        _cli("merge", str(dirs[0]), str(dirs[2]), "--out", str(tmp_path / "m"), cache=cache)
    )
    assert "missing shard(s) 2/3" in err
    err = _one_line_failure(
        _cli("merge", *map(str, dirs), str(dirs[1]), "--out", str(tmp_path / "m"), cache=cache)
    )
    assert "overlapping shards" in err and "both shard 2/3" in err
    # A real foreign shard: 1/3 of another selection (a --kernels subset, built from the cache).
    other = tmp_path / "other"
    done = _cli(
        "--profile",
        "ci",
        "--kernels",
        "*bf16*",
        "--shard",
        "1/3",
        "--out",
        str(other),
        "--quiet",
        cache=cache,
    )
    assert done.returncode == 0, done.stderr
    err = _one_line_failure(
        _cli("merge", str(other), *map(str, dirs[1:]), "--out", str(tmp_path / "m"), cache=cache)
    )
    assert "foreign shard" in err and "selects other instances" in err
    # And one of another toolchain (as a shard job on another DSL version would record).
    moved = tmp_path / "moved"
    shutil.copytree(dirs[2], moved)
    doc = json.loads((moved / SHARD_RECORD).read_text())
    doc["toolchain"]["dists"] = "nvidia-cutlass-dsl==0.0.1"
    (moved / SHARD_RECORD).write_text(json.dumps(doc))
    err = _one_line_failure(
        _cli("merge", *map(str, dirs[:2]), str(moved), "--out", str(tmp_path / "m"), cache=cache)
    )
    assert "foreign shard" in err and "another toolchain" in err and "dists" in err
    assert not (tmp_path / "m").exists()


@pytest.mark.compiler
def test_balance_cache_splits_by_the_compile_seconds_the_cache_recorded(ci_shards, tmp_path):
    """`--balance cache`: the split weighs each id by the compile seconds its verified cache entry holds
    (the cache `ci_build` filled), exactly as `split` would with those costs; the shard it writes says so
    through its split digest."""
    from codegen.build import cached_compile_seconds
    from codegen.cache import BuildCache
    from codegen.matrix import load_matrix

    _, _, cache = ci_shards
    specs = list(load_matrix(REPO / "kernel_specs.yaml").expand("ci").specs)
    costs = cached_compile_seconds(BuildCache(cache), specs)
    assert sorted(costs) == sorted(s.name() for s in specs) and all(v > 0 for v in costs.values())
    out = tmp_path / "balanced1"
    args = ("--profile", "ci", "--shard", "1/3", "--balance", "cache", "--out", str(out), "--quiet")
    done = _cli(*args, cache=cache)
    assert done.returncode == 0, done.stderr
    record = json.loads((out / SHARD_RECORD).read_text())
    parts = split([s.name() for s in specs], 3, costs)
    assert sorted(record["instances"]) == parts[0]
    assert record["split_sha256"] == split_digest(parts)
