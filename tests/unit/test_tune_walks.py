"""build_tools/tune_walks.py: which walks it tries, which it writes to a table point, which points it works
(no GPU needed to decide any of that); and the runner names that carry a walk through build_tools/bench.py."""

from __future__ import annotations

import json
import types

import pytest

from build_tools import bench, tune, tune_walks
from runtime.scheduling import default_raster
from runtime.tuning import read_document

TILE = "sm90_bf16_bf16_bf16_fp32acc_kkn_128x128x64_c1x1_pp"
SWAP = "sm90_bf16_bf16_bf16_fp32acc_kkn_128x112x64_c2x1_coop_swapab"


def test_walk_variants_are_the_distinct_walks_other_than_the_default():
    # 512 x 4096 on 128 x 128 tiles: 4 x 32 cluster tiles. The default rasters along M (more columns than
    # rows) in bands of 8 columns; along N a band of 4 rows or more is the whole grid, so 8 and 16 are 4.
    assert default_raster(4, 32) == (1, 8)
    assert tune_walks.walk_variants(TILE, 512, 4096) == [
        (False, 1), (False, 2), (False, 4), (True, 1), (True, 2), (True, 4), (True, 16),
    ]  # fmt: skip


def test_walk_variants_of_a_swap_ab_instance_are_in_the_problems_view():
    # The kernel of a swap-AB instance walks the transposed grid: its default raster, flipped into the
    # problem's view (as runtime/plan.py flips an override), is never among the variants.
    m, n = 512, 4096
    variants = tune_walks.walk_variants(SWAP, m, n)
    assert len(variants) == len(set(variants)) and variants
    # kernel grid: rows along the problem's N (4096 / (112 * 1)), columns along M (512 / (128 * 2))
    km, kn = -(-n // 112), -(-m // 256)
    along_m, group = default_raster(km, kn)
    problem_raster = bool(along_m ^ 1)
    assert (problem_raster, group) not in variants
    assert all(isinstance(r, bool) and g in tune_walks.WALK_GROUPS for r, g in variants)


def test_runner_names_carry_the_walk():
    name = bench.walk_runner_name(TILE, True, 4)
    assert bench.parse_runner_name(name) == (TILE, True, 4)
    assert bench.parse_runner_name(bench.walk_runner_name(TILE, False, 16)) == (TILE, False, 16)
    assert bench.parse_runner_name(TILE) == (TILE, None, None)


def test_table_point_files_a_walk_runner_under_its_overrides():
    rows = [
        {"kind": "hgemm", "name": "a", "median_ms": 0.010, "screen_ms": [0.010], "error": None},
        {"kind": "hgemm", "name": bench.walk_runner_name("a", False, 2), "median_ms": 0.009,
         "screen_ms": [0.009], "error": None},
    ]  # fmt: skip
    point = tune.table_point(bench.Shape(256, 1024, 1024), rows)
    assert point["times"] == [["a", False, 2, 9.0], ["a", None, None, 10.0]]


def _point(times, **extra):
    return {"m": 512, "n": 4096, "k": 4096, "cublas_us": 50.0, "finalists": 4, "times": times, **extra}


def test_contenders_are_the_fastest_default_walks_of_shipped_instances():
    point = _point([["a", True, 4, 9.0], ["x", None, None, 9.5], ["a", None, None, 10.0],
                    ["b", None, None, 11.0], ["c", None, None, 12.0]])  # fmt: skip
    assert tune_walks.contenders(point, {"a", "b", "c"}, 2) == ["a", "b"]  # x: no longer shipped


def _row(name, ms):
    return {"kind": "hgemm", "name": name, "median_ms": ms, "screen_ms": [ms], "error": None}


def test_walk_point_keeps_a_walk_only_where_it_beats_its_own_default_by_the_margin():
    point = _point(
        [["a", None, None, 10.0], ["b", None, None, 11.0], ["a", False, 2, 9.9], ["c", True, 1, 12.0],
         ["c", None, None, 12.5]]
    )  # fmt: skip
    w = bench.walk_runner_name
    # This run's clocks: defaults at 1.1x the table's. a's best walk is 5% faster than a's default; b's
    # best only 0.5%; b's other walk was screened out (no median).
    rows = [
        _row("a", 0.011), _row(w("a", True, 4), 0.01045), _row(w("a", True, 8), 0.0108),
        _row("b", 0.0121), _row(w("b", False, 1), 0.01204),
        {"kind": "hgemm", "name": w("b", True, 2), "screen_ms": [0.005], "error": None},
        {"kind": "cublas", "name": "cuBLAS", "median_ms": 0.010},
    ]  # fmt: skip
    new = tune_walks.walk_point(point, rows, ["a", "b"], 0.01)
    entries = {tuple(t[:3]): t[3] for t in new["times"]}
    # a's earlier walk is replaced by this run's best, at a's table time times the measured ratio
    assert ("a", False, 2) not in entries and entries["a", True, 4] == pytest.approx(9.5)
    assert not any(k[0] == "b" and k[1] is not None for k in entries)  # within the margin: not kept
    assert entries["c", True, 1] == 12.0  # an instance not tried keeps its entries
    assert entries["a", None, None] == 10.0 and entries["b", None, None] == 11.0  # as measured before
    assert [t[3] for t in new["times"]] == sorted(t[3] for t in new["times"])
    assert new["walks"] == 2 and new["finalists"] == 4
    assert list(new) == ["m", "n", "k", "cublas_us", "finalists", "walks", "times"]  # as Point.to_json


def test_work_list_resumes_and_stays_in_the_m_band():
    shapes = [s for s in tune.grid() if s.m in (128, 256, 512) and (s.n, s.k) == (4096, 4096)]
    key = "bf16_bf16_bf16_kkn"
    held = [{"m": s.m, "n": s.n, "k": s.k, "times": [["a", None, None, 1.0]]} for s in shapes]
    held[-1]["walks"] = 3
    args = tune_walks.parse_args(["--dtype", "bf16", "--class", key])
    work = [s for _, s in tune_walks.work_list(args, {key: held})]
    assert work == [shapes[1]]  # M = 128 is below the default band; M = 512's walks are done
    again = [
        s
        for _, s in tune_walks.work_list(tune_walks.parse_args(["--dtype", "bf16", "--retime"]), {key: held})
    ]
    assert again == shapes[1:]
    assert tune_walks.work_list(tune_walks.parse_args(["--dtype", "e4m3"]), {key: held}) == []


def test_merge_point_carries_walk_entries_by_instance_and_walk():
    """`tune` re-timing a point for a new instance keeps the point's walk entries (scaled like the other
    carried times), and times the default walks that it re-timed anew."""
    held = _point([["a", True, 4, 9.0], ["a", None, None, 10.0], ["b", None, None, 11.0]])
    new = _point([["new", None, None, 10.5], ["a", None, None, 11.0]], finalists=2)
    merged = tune.merge_point(held, new)
    entries = {tuple(t[:3]): t[3] for t in merged["times"]}
    assert entries == {("new", None, None): 10.5, ("a", None, None): 11.0, ("a", True, 4): pytest.approx(9.9),
                       ("b", None, None): pytest.approx(12.1)}  # fmt: skip


def test_a_tuning_run_keeps_the_walk_record():
    walks = {"date": "2026-12-04", "command": "python -m build_tools.tune_walks"}
    run = {"date": "2026-12-05", "command": "python -m build_tools.tune"}
    assert tune.measured_entry({"date": "old", "walks": walks}, run) == {**run, "walks": walks}


def test_a_run_end_to_end_with_the_gpu_faked(tmp_path, fake_tuner):
    """`tune_walks` with bench_shape faked: it times the two fastest default walks and their variants,
    keeps the one walk that wins by the margin, records the run, and a second run has nothing left."""
    shape = next(s for s in tune.grid() if s.m == 512 and (s.n, s.k) == (4096, 4096))
    key = "bf16_bf16_bf16_kkn"
    point = {"m": shape.m, "n": shape.n, "k": shape.k, "cublas_us": 50.0, "finalists": 2,
             "times": [[TILE, None, None, 40.0], [SWAP, None, None, 44.0]]}  # fmt: skip
    out = tmp_path / "t.json"
    gpu = {"measured": {"date": "tune"}, "classes": {key: [point]}}
    out.write_text(json.dumps({"format": "hgemm-sm90-tuning", "version": 1, "gpus": {"FAKE/1": gpu}}))
    insts = [types.SimpleNamespace(id=i) for i in (TILE, SWAP)]
    hg = types.SimpleNamespace(instances=lambda: insts)
    env = {"date": "d", "torch": "t", "cuda_bindings": "c", "hgemm_sm90": "h", "smi_id": None}
    calls = []

    def bench_shape(torch, hg, s, combo, cands, args, stream, env, keep, walks):
        calls.append((s, sorted(i.id for i in cands), dict(walks), set(keep)))
        rows = [_row(TILE, 0.040), _row(SWAP, 0.044)]
        rows += [_row(bench.walk_runner_name(TILE, r, g), 0.038 if (r, g) == (True, 4) else 0.041)
                 for r, g in walks[TILE]]  # fmt: skip
        return {"runners": [{**r, "series": ""} for r in rows]}

    fake_tuner(hg, env, key, bench_shape)
    argv = ["--out", str(out), "--dtype", "bf16", "--contenders", "2"]
    assert tune_walks.run(tune_walks.parse_args(argv)) == 0
    ((s, ids, walks, keep),) = calls
    assert s == shape and ids == sorted([TILE, SWAP]) and keep == {TILE, SWAP}
    assert walks == {i: tune_walks.walk_variants(i, shape.m, shape.n) for i in (TILE, SWAP)}
    doc = read_document(out)
    (new,) = doc["gpus"]["FAKE/1"]["classes"][key]
    assert new["times"][0] == [TILE, True, 4, 38.0] and new["walks"] == 2
    (record,) = doc["gpus"]["FAKE/1"]["measured"]["walks"]["runs"]
    assert record["command"].startswith("python -m build_tools.tune_walks") and record["margin"] == 0.01
    assert doc["gpus"]["FAKE/1"]["measured"]["date"] == "tune"  # the table's own record stands
    assert tune_walks.run(tune_walks.parse_args(argv)) == 0 and len(calls) == 1  # resumed: nothing left
    assert len(read_document(out)["gpus"]["FAKE/1"]["measured"]["walks"]["runs"]) == 1  # it worked nothing


def test_work_list_honours_column():
    key = "bf16_bf16_bf16_kkn"
    held = [
        {"m": s.m, "n": s.n, "k": s.k, "times": [["a", None, None, 1.0]]} for s in tune.grid() if s.m == 512
    ]
    args = tune_walks.parse_args(["--dtype", "bf16", "--column", "4096x4096"])
    assert [(s.m, s.n, s.k) for _, s in tune_walks.work_list(args, {key: held})] == [(512, 4096, 4096)]
