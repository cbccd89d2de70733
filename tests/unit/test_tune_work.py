"""build_tools/tune.py's work list: which grid points a `tune` run times (no GPU needed to decide that)."""

from __future__ import annotations

import pytest

from build_tools import tune

PROMOTED, FAST = "e4m3_e4m3_bf16_kkn", "e4m3_e4m3_bf16_kkn_fastacc"


def test_class_filter_times_only_the_named_class():
    args = tune.parse_args(["--dtype", "e4m3", "--class", PROMOTED, "--m-min", "256", "--retime"])
    work = tune.work_list(args, {})
    assert work and {combo.a for combo, _ in work} == {"e4m3"}
    assert all(shape.m >= 256 for _, shape in work)
    (combo,) = {combo for combo, _ in work}
    assert tune.tuned_classes(args, combo) == [(PROMOTED, "promoted accum")]


def test_without_class_every_tuned_class_of_the_dtype():
    args = tune.parse_args(["--dtype", "e4m3"])
    (combo,) = {combo for combo, _ in tune.work_list(args, {})}
    assert [ck for ck, _ in tune.tuned_classes(args, combo)] == [PROMOTED, FAST]


def test_resume_skips_points_only_when_every_chosen_class_has_them():
    shape = tune.grid()[0]
    held = {FAST: [{"m": shape.m, "n": shape.n, "k": shape.k}]}
    assert shape in [s for _, s in tune.work_list(tune.parse_args(["--dtype", "e4m3"]), {})]
    # The fast class alone already holds the point: a fast-only run skips it, a run of both does not.
    fast_only = tune.work_list(tune.parse_args(["--dtype", "e4m3", "--class", FAST]), held)
    both = tune.work_list(tune.parse_args(["--dtype", "e4m3"]), held)
    assert shape not in [s for _, s in fast_only]
    assert shape in [s for _, s in both]
    # --retime times it again anyway.
    retime = tune.work_list(tune.parse_args(["--dtype", "e4m3", "--class", FAST, "--retime"]), held)
    assert shape in [s for _, s in retime]


def test_unknown_class_is_a_usage_error():
    with pytest.raises(SystemExit):
        tune.parse_args(["--class", "bf16_bf16_bf16_kkm"])


def test_pdl_run_times_decode_rows_under_their_own_key():
    """`tune --pdl` times M <= PDL_M_MAX only and files its rows under the class key + "@pdl": a point the
    plain rows hold is still to do, one the PDL rows hold is not."""
    args = tune.parse_args(["--dtype", "bf16", "--pdl"])
    work = tune.work_list(args, {})
    assert work and max(shape.m for _, shape in work) == tune.PDL_M_MAX
    assert tune.row_key(args, "bf16_bf16_bf16_kkn") == "bf16_bf16_bf16_kkn@pdl"
    shape = work[0][1]
    point = [{"m": shape.m, "n": shape.n, "k": shape.k}]
    assert shape in [s for _, s in tune.work_list(args, {"bf16_bf16_bf16_kkn": point})]
    assert shape not in [s for _, s in tune.work_list(args, {"bf16_bf16_bf16_kkn@pdl": point})]
    plain = tune.parse_args(["--dtype", "bf16"])
    assert tune.row_key(plain, "bf16_bf16_bf16_kkn") == "bf16_bf16_bf16_kkn"
    assert max(shape.m for _, shape in tune.work_list(plain, {})) > tune.PDL_M_MAX


def test_a_tuning_run_keeps_the_record_of_the_grouped_points():
    run = {"date": "2026-12-02", "command": "python -m build_tools.tune"}
    grouped = {"date": "2026-12-01", "command": "python -m build_tools.bench_moe (suite.json)"}
    assert tune.measured_entry({"date": "old", "grouped": grouped}, run) == {**run, "grouped": grouped}
    assert tune.measured_entry({"date": "old"}, run) == run
