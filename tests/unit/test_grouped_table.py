"""build_tools/grouped_table.py: bench_moe runs -> the tuning table's grouped points (no GPU)."""

from __future__ import annotations

import json
import types

import pytest

from build_tools import grouped_table
from runtime import tuning

WIDE = "sm90_bf16_bf16_bf16_fp32acc_kkn_128x128x64_c1x2_pp_varlenm"
SMALL = "sm90_bf16_bf16_bf16_fp32acc_kkn_64x128x64_c1x1_coop_varlenm"
TRIAL = "sm90_bf16_bf16_bf16_fp32acc_kkn_128x256x64_c2x1_coop_varlenm"  # a trial build's, not shipped


def _run(gpu_key="NVIDIA H200/132"):
    forward = {"problem": "mixtral.up T=4096", "experts": 8, "rows": 8190, "n": 14336, "k": 4096,
               "us": {WIDE: 1400.0, SMALL: 2500.0, TRIAL: 1300.0, "torch._grouped_mm": 1500.0}}  # fmt: skip
    gather = {"problem": "mixtral.up T=4096", "rows": 8190, "us": {"gathered": 1.0, "gather + grouped": 1.0}}
    return {"date": "2026-12-01", "gpu_key": gpu_key, "torch": "2.11", "results": [forward, gather]}


def test_points_hold_the_shipped_instances_at_the_average_group_size():
    classes = grouped_table.points_of(_run()["results"], grouped_table.shipped_ids())
    (key,) = classes
    assert key == "bf16_bf16_bf16_kkn_varlenm" and tuning.is_grouped_key(key)
    (point,) = classes[key]
    assert (point["m"], point["n"], point["k"]) == (1024, 14336, 4096)  # ceil(8190 / 8)
    assert [t[0] for t in point["times"]] == [WIDE, SMALL]  # fastest first; the trial tile dropped


def test_a_layer_timed_by_several_runs_is_one_point_at_the_geometric_mean():
    first, second = _run()["results"][0], _run()["results"][0]
    second["us"] = {WIDE: 1600.0, SMALL: 1600.0}
    other = dict(first, rows=16380)  # another layer of the same class: its own point
    classes = grouped_table.points_of([first, second, other], grouped_table.shipped_ids())
    points = sorted(classes["bf16_bf16_bf16_kkn_varlenm"], key=lambda p: p["m"])
    assert [p["m"] for p in points] == [1024, 2048]
    times = {t[0]: t[3] for t in points[0]["times"]}
    assert times == {WIDE: pytest.approx((1400.0 * 1600.0) ** 0.5), SMALL: 2000.0}
    assert [t[0] for t in points[0]["times"]] == [WIDE, SMALL]


def test_gathered_runs_file_their_instances_under_the_gathered_class():
    gathered = "sm90_bf16_bf16_bf16_fp32acc_kkn_128x256x64_c1x1_coop_varlenm_gathera"
    run = {"problem": "mixtral.up T=4096", "experts": 8, "rows": 8192, "n": 14336, "k": 4096,
           "us": {"gathered": 1.0, "gather + grouped": 1.0, gathered: 1500.0}}  # fmt: skip
    classes = grouped_table.points_of([run], grouped_table.shipped_ids())
    assert list(classes) == ["bf16_bf16_bf16_kkn_varlenm_gathera"]
    assert tuning.is_grouped_key("bf16_bf16_bf16_kkn_varlenm_gathera")


def test_merge_replaces_the_measured_classes_and_keeps_the_rest(tmp_path):
    table = tuning.read_document(tuning.shipped_path())
    dense_before = json.dumps(table["gpus"]["NVIDIA H200/132"]["classes"]["bf16_bf16_bf16_kkn"])
    path = tmp_path / "tuning.json"
    path.write_text(json.dumps(table))
    runs = tmp_path / "run.json"
    runs.write_text(json.dumps(_run()))
    assert grouped_table.main([str(runs), "--table", str(path)]) == 0
    doc = tuning.read_document(path)
    classes = doc["gpus"]["NVIDIA H200/132"]["classes"]
    assert json.dumps(classes["bf16_bf16_bf16_kkn"]) == dense_before
    assert len(classes["bf16_bf16_bf16_kkn_varlenm"]) == 1  # the run's point replaced the class's points
    assert "e4m3_e4m3_bf16_kkn_varlenm" in classes  # a class the run did not measure stays
    records = doc["gpus"]["NVIDIA H200/132"]["measured"]["grouped"]
    assert records["bf16_bf16_bf16_kkn_varlenm"]["command"].endswith("(run.json)")
    assert "e4m3_e4m3_bf16_kkn_varlenm" in records  # and so does its record
    table = tuning.TuningTable.from_json(doc)
    assert table.to_json()["gpus"] == doc["gpus"]  # what the runtime reads, and writes back the same


def test_runs_without_a_gpu_key_need_one(tmp_path):
    run = _run(gpu_key=None)
    path = tmp_path / "run.json"
    path.write_text(json.dumps(run))
    with pytest.raises(SystemExit, match="--gpu-key"):
        grouped_table.main([str(path), "--table", str(tmp_path / "t.json")])


def _stamped(result: dict, rules: str = tuning.LAUNCH_RULES, sha: str = "ab" * 32) -> dict:
    """``result`` as bench_moe records it since session 45: the launch rules and each timed cubin's sha256."""
    return {
        **result,
        "launch_rules": rules,
        "cubins": {i: sha for i in result["us"] if i.startswith("sm90_")},
    }


def test_a_layer_is_stamped_with_the_cubins_and_launch_rules_its_runs_recorded():
    """The point's `kernels` is the digest of the shipped instances it holds (the trial tile, dropped, is
    not in it) under the runs' launch rules, so `freshness` counts it fresh against the same cubins and
    stale against others; runs that recorded nothing, or disagree, leave the point unstamped."""
    forward = _run()["results"][0]
    hashes = {WIDE: "ab" * 32, SMALL: "ab" * 32}
    (point,) = grouped_table.points_of([_stamped(forward)], grouped_table.shipped_ids())[
        "bf16_bf16_bf16_kkn_varlenm"
    ]
    assert point["kernels"] == tuning.kernels_digest([WIDE, SMALL], hashes)
    doc = {"format": tuning.FORMAT, "version": tuning.VERSION, "gpus": {"G/132": {"classes": {
        "bf16_bf16_bf16_kkn_varlenm": [point]}}}}  # fmt: skip
    table = tuning.TuningTable.from_json(doc)
    assert table.freshness(hashes)["G/132"] == tuning.Freshness(1, 0, 0)
    assert table.freshness({**hashes, SMALL: "cd" * 32})["G/132"] == tuning.Freshness(0, 1, 0)
    assert tuning.TuningTable.from_json(table.to_json()).to_json() == table.to_json()

    other_rules = grouped_table.points_of(
        [_stamped(forward, rules="another rule")], grouped_table.shipped_ids()
    )
    assert other_rules["bf16_bf16_bf16_kkn_varlenm"][0]["kernels"] != point["kernels"]
    for results in (
        [forward],  # recorded nothing
        [_stamped(forward), forward],  # one of two runs recorded nothing
        [_stamped(forward), _stamped(forward, rules="another rule")],  # two launch rules
        [_stamped(forward), _stamped(forward, sha="cd" * 32)],  # two cubins of the same instances
    ):
        (unstamped,) = grouped_table.points_of(results, grouped_table.shipped_ids())[
            "bf16_bf16_bf16_kkn_varlenm"
        ]
        assert "kernels" not in unstamped
    two_rounds = [_stamped(forward), _stamped(forward)]
    (same,) = grouped_table.points_of(two_rounds, grouped_table.shipped_ids())["bf16_bf16_bf16_kkn_varlenm"]
    assert same["kernels"] == point["kernels"]


def test_bench_moe_records_the_launch_rules_and_cubins_of_what_each_result_timed(monkeypatch):
    """`record_provenance` stamps each result with the installed package's launch rules (here the source
    tree's runtime/, which the wheel ships as hgemm_sm90/) and the cubin sha256 of each instance it timed,
    not of its baselines; grouped_table reads them back into the point's stamp."""
    from build_tools import bench_moe, tune

    monkeypatch.setattr(
        tune, "cubin_hashes", lambda hg: {WIDE: "ab" * 32, SMALL: "cd" * 32, TRIAL: "ef" * 32}
    )
    results = _run()["results"]
    bench_moe.record_provenance(results, types.SimpleNamespace(__name__="runtime"))
    forward, gather = results
    assert forward["launch_rules"] == gather["launch_rules"] == tuning.LAUNCH_RULES
    assert (
        forward["cubins"] == {WIDE: "ab" * 32, SMALL: "cd" * 32, TRIAL: "ef" * 32} and gather["cubins"] == {}
    )
    (point,) = grouped_table.points_of(results, grouped_table.shipped_ids())["bf16_bf16_bf16_kkn_varlenm"]
    assert point["kernels"] == tuning.kernels_digest([WIDE, SMALL], {WIDE: "ab" * 32, SMALL: "cd" * 32})
