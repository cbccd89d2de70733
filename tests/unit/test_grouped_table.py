"""build_tools/grouped_table.py: bench_moe runs -> the tuning table's grouped points (no GPU)."""

from __future__ import annotations

import json

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
