"""build_tools/tune.py's work list: which grid points a `tune` run times (no GPU needed to decide that)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from build_tools import tune, tune_evaluate
from codegen.matrix import load_matrix
from runtime.dispatch import ProblemClass
from runtime.spec import GemmSpec
from runtime.tuning import PDL_SUFFIX, is_grouped_key, kernels_digest, read_document, shipped_path

REPO = Path(__file__).resolve().parents[2]

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


def test_a_tuning_run_keeps_the_earlier_runs_dates_and_commands_oldest_first():
    """A run that times some columns or classes leaves the other points as earlier runs timed them: the
    record says so instead of naming the last command alone."""
    first = {"date": "d1", "command": "python -m build_tools.tune", "torch": "2.11"}
    second = tune.measured_entry(first, {"date": "d2", "command": "python -m build_tools.tune --pdl"})
    assert second["earlier"] == [{"date": "d1", "command": "python -m build_tools.tune"}]
    third = tune.measured_entry({**second, "kept": "why"}, {"date": "d3", "command": "c3"})
    assert [run["date"] for run in third["earlier"]] == ["d1", "d2"]
    assert third["earlier"][1]["kept"] == "why" and "kept" not in third and third["command"] == "c3"


def test_a_point_without_a_time_for_a_shipped_instance_is_timed_again():
    """Instances added after a point was timed have no time there, and the lookup never picks them near it
    (runtime/tuning.py `estimate`): a plain run times such points again, and only those (session 17: the
    swap-AB 128-row tiles had times at M = 96-1024 alone)."""
    shape = tune.grid()[0]
    point = {"m": shape.m, "n": shape.n, "k": shape.k, "times": [["old", None, None, 1.0]]}
    held = {PROMOTED: [point], FAST: [dict(point)]}
    args = tune.parse_args(["--dtype", "e4m3"])
    shapes = lambda shipped: [s for _, s in tune.work_list(args, held, shipped)]  # noqa: E731
    assert shape not in shapes(None)  # without the wheel's instances: held is done
    assert shape not in shapes({PROMOTED: {"old"}, FAST: {"old"}})
    assert shape in shapes({PROMOTED: {"old"}, FAST: {"old", "new"}})
    assert tune.untimed(point, {"old", "new"}) == {"new"}
    # PDL rows are held to their class's instances too.
    pdl = tune.parse_args(["--dtype", "e4m3", "--pdl"])
    held_pdl = {PROMOTED + "@pdl": [point], FAST + "@pdl": [dict(point)]}
    assert shape in [s for _, s in tune.work_list(pdl, held_pdl, {PROMOTED: {"old", "new"}, FAST: {"old"}})]
    assert shape not in [s for _, s in tune.work_list(pdl, held_pdl, {PROMOTED: {"old"}, FAST: {"old"}})]


# Rows below this M may lack instances added for larger M (the swap-AB 128-row tiles of sessions 15-16,
# tile N between the powers of two, the 2x1 split-K pairs): at M <= 16 they would only add tuning time.
# The M = 32 and 64 rows were filled in session 18, because a problem with M between 64 and 96 brackets the
# M = 64 row (docs/PERF.md). `python -m build_tools.tune` times them. The PDL rows (M <= 128) are held to
# the same rule since session 29: exempt before, they went nine sessions without the instances shipped
# after session 20, and the decode suite's picks under PDL ran 0.993 of the fastest (min 0.869) until
# `python -m build_tools.tune --pdl` timed them (0.998, min 0.968).
FULLY_TIMED_FROM_M = 32


def test_the_shipped_table_times_every_shipped_instance_of_a_class_at_its_rows_from_m_32():
    """What an instance added to the matrix needs before it can be picked near a row: times in the
    table's rows (the lookup estimates an instance from the points that timed it only, and an instance no
    point near the problem timed is not a candidate). `python -m build_tools.tune --m-min 32` on a GPU
    times exactly the points that lack one (with each point's finalists); `--pdl` the PDL rows'."""
    shipped: dict[str, set[str]] = {}
    for name in load_matrix(REPO / "kernel_specs.yaml").expand("default").names():
        shipped.setdefault(ProblemClass.of(GemmSpec.parse(name)).key, set()).add(name)
    table = read_document(shipped_path())
    lacking = [
        (gpu, key, p["m"], p["n"], p["k"], sorted(missing)[:2])
        for gpu, entry in table["gpus"].items()
        for key, points in entry["classes"].items()
        if not is_grouped_key(key)
        for p in points
        if p["m"] >= FULLY_TIMED_FROM_M
        and (missing := tune.untimed(p, shipped[key.removesuffix(PDL_SUFFIX)]))
    ]
    assert not lacking, f"{len(lacking)} table points lack shipped instances, e.g. {lacking[:3]}"


def _point(times, finalists=2):
    return {"m": 256, "n": 4096, "k": 4096, "cublas_us": 10.0, "finalists": finalists, "times": times}


def test_a_point_lacking_new_instances_times_them_with_its_finalists_only():
    ids = {"a", "b", "c", "d", "new1", "new2"}
    held = _point(
        [["a", None, None, 10.0], ["b", None, None, 11.0], ["c", None, None, 12.0], ["d", None, None, 13.0]]
    )
    assert tune.fill_candidates(None, ids, 4) == ids  # a point the table lacks: every instance
    assert tune.fill_candidates(held, ids, 4) == {"new1", "new2", "a", "b"}
    assert tune.fill_candidates(held, {"a", "b", "c", "d"}, 4) == set()  # up to date


def test_merge_carries_the_other_times_over_on_the_new_runs_scale():
    held = _point(
        [["a", None, None, 10.0], ["b", None, None, 11.0], ["c", None, None, 12.0], ["d", None, None, 20.0]]
    )
    # The new run ran 10% slower clocks: a and b at 1.1x their old times; new1 beats them all.
    new = _point([["new1", None, None, 9.9], ["a", None, None, 11.0], ["b", None, None, 12.1]], finalists=3)
    merged = tune.merge_point(held, new)
    assert [t[0] for t in merged["times"]] == ["new1", "a", "b", "c", "d"]
    assert merged["times"][3][3] == pytest.approx(13.2) and merged["times"][4][3] == pytest.approx(22.0)
    assert merged["finalists"] == 3 and merged["cublas_us"] == 10.0
    assert tune.untimed(merged, {"a", "b", "c", "d", "new1"}) == set()


def test_a_tune_run_fills_a_point_with_the_new_instance_and_the_finalists_only(
    tmp_path, monkeypatch, fake_tuner
):
    """`tune` end to end with the GPU parts faked: at a grid point that lacks one shipped instance it
    times that instance and the point's two finalists, and writes the merged point."""
    import types

    from build_tools import bench

    shape = tune.grid()[0]
    key = "bf16_bf16_bf16_kkn"
    old = {"m": shape.m, "n": shape.n, "k": shape.k, "cublas_us": 10.0, "finalists": 2,
           "times": [["a", None, None, 10.0], ["b", None, None, 11.0], ["c", None, None, 14.0]]}  # fmt: skip
    out = tmp_path / "t.json"
    out.write_text(json.dumps({"format": "hgemm-sm90-tuning", "version": 1,
                               "gpus": {"FAKE/1": {"measured": {}, "classes": {key: [old]}}}}))  # fmt: skip
    insts = [types.SimpleNamespace(id=i) for i in ("a", "b", "c", "new")]
    hg = types.SimpleNamespace(instances=lambda: insts)
    env = {"date": "d", "torch": "t", "cuda_bindings": "c", "hgemm_sm90": "h", "smi_id": None}
    timed = []

    def bench_shape(torch, hg, s, combo, cands, args, stream, env):
        timed.append({i.id for i in cands})
        us = {"a": 11.0, "b": 12.1, "new": 9.0}  # this run's clocks: 1.1x the old times
        runners = [{"kind": "hgemm", "series": "", "name": i.id, "median_ms": us[i.id] / 1e3,
                    "screen_ms": [us[i.id] / 1e3], "error": None} for i in cands]  # fmt: skip
        return {"runners": runners + [{"kind": "cublas", "series": "", "median_ms": 0.01}]}

    fake_tuner(hg, env, key, bench_shape)
    monkeypatch.setattr(tune, "cubin_hashes", lambda hg: HASHES)
    assert tune.tune(tune.parse_args(["--out", str(out), "--dtype", "bf16", "--limit", "1"])) == 0
    assert timed == [{"new", "a", "b"}]
    (point,) = [p for p in read_document(out)["gpus"]["FAKE/1"]["classes"][key] if p["m"] == shape.m]
    assert [t[0] for t in point["times"]] == ["new", "a", "b", "c"]
    assert point["times"][3][3] == pytest.approx(15.4)  # c carried over on this run's scale
    # The old point did not say which cubins it was timed with, so c's carried time may be stale: the
    # merged point does not claim the installed cubins, and `--stale` would time it again.
    assert "kernels" not in point

    # --stale: the whole point afresh, stamped with the installed cubins; then nothing is left to time.
    timed.clear()
    stale_run = ["--out", str(out), "--dtype", "bf16", "--stale", "--limit", "1"]  # the grid's first: shape
    us_all = {"a": 11.0, "b": 12.1, "c": 15.0, "new": 9.0}

    def bench_all(torch, hg, s, combo, cands, args, stream, env):
        timed.append({i.id for i in cands})
        runners = [{"kind": "hgemm", "series": "", "name": i.id, "median_ms": us_all[i.id] / 1e3,
                    "screen_ms": [us_all[i.id] / 1e3], "error": None} for i in cands]  # fmt: skip
        return {"runners": runners + [{"kind": "cublas", "series": "", "median_ms": 0.01}]}

    monkeypatch.setattr(bench, "bench_shape", bench_all)
    assert tune.tune(tune.parse_args(stale_run)) == 0
    assert timed == [{"a", "b", "c", "new"}]
    (point,) = read_document(out)["gpus"]["FAKE/1"]["classes"][key]
    assert point["kernels"] == kernels_digest(["a", "b", "c", "new"], HASHES)
    assert list(point) == ["m", "n", "k", "cublas_us", "finalists", "kernels", "times"]  # as Point.to_json
    assert tune.tune(tune.parse_args(stale_run)) == 0  # the point is fresh now: the grid's next one is timed
    points = read_document(out)["gpus"]["FAKE/1"]["classes"][key]
    assert len(points) == 2 and point in points


HASHES = {i: f"{n:064x}" for n, i in enumerate(("a", "b", "c", "new"))}


def test_the_kernels_digest_changes_with_a_timed_cubin_not_with_an_added_instance():
    base = kernels_digest(["a", "b"], HASHES)
    assert kernels_digest(["b", "a", "a"], HASHES) == base  # a set of instances, in any order
    assert kernels_digest(["a", "b"], {**HASHES, "new": "f" * 64}) == base
    assert kernels_digest(["a", "b"], {**HASHES, "b": "f" * 64}) != base
    point = {"m": 1, "n": 2, "k": 3, "times": [["a", None, None, 1.0], ["b", None, None, 2.0]]}
    assert tune.stale(point, HASHES)  # says nothing: stale
    assert not tune.stale({**point, "kernels": base}, HASHES)
    assert tune.stale({**point, "kernels": base}, {**HASHES, "a": "e" * 64})


def test_a_change_of_the_launch_rules_makes_every_point_stale(monkeypatch):
    """The same cubins launched under other rules (runtime/launcher.py `LAUNCH_RULES`, e.g. 1x1 clusters as
    plain grids) run at other speeds: the digest records the rules, so `tune --stale` re-times the points."""
    from runtime import tuning

    times = [["a", None, None, 1.0]]
    point = {"m": 1, "n": 2, "k": 3, "times": times, "kernels": kernels_digest(["a"], HASHES)}
    assert not tune.stale(point, HASHES)
    monkeypatch.setattr(tuning, "LAUNCH_RULES", tuning.LAUNCH_RULES + ", and another")
    assert kernels_digest(["a"], HASHES) != point["kernels"] and tune.stale(point, HASHES)


def test_stale_points_are_worked_only_with_the_stale_flag():
    shapes = [s for s in tune.grid() if s.m >= 256][:2]
    key = "bf16_bf16_bf16_kkn"
    times = [["a", None, None, 1.0]]
    old = {"m": shapes[1].m, "n": shapes[1].n, "k": shapes[1].k, "times": times}
    fresh = {"m": shapes[0].m, "n": shapes[0].n, "k": shapes[0].k, "times": times}
    fresh["kernels"] = kernels_digest(["a"], HASHES)
    classes = {key: [fresh, old]}
    args = tune.parse_args(["--dtype", "bf16", "--class", key, "--m-min", "256", "--stale"])
    work = [s for _, s in tune.work_list(args, classes, {key: {"a"}}, HASHES)]
    assert shapes[1] in work and shapes[0] not in work
    work = [s for _, s in tune.work_list(args, classes, {key: {"a"}})]  # no hashes: neither is stale
    assert shapes[0] not in work and shapes[1] not in work


def test_stale_with_changed_times_the_changed_instances_and_anchors_only(tmp_path, monkeypatch, fake_tuner):
    """`tune --stale --changed GLOB` (a change that touched known instances, such as the launch rule for 1x1
    clusters): at a stale point it times the matching instances and the point's finalists among the
    others, carries the others over on the new run's scale, drops the changed instances' old walk entries,
    and stamps the point as timed with the installed cubins and rules."""
    import types

    shape = tune.grid()[0]
    key = "bf16_bf16_bf16_kkn"
    one, other = "t_c1x1_x", "t_c2x1_x"
    old = {"m": shape.m, "n": shape.n, "k": shape.k, "cublas_us": 10.0, "finalists": 2, "kernels": "0" * 16,
           "times": [[one, True, 4, 9.5], [one, None, None, 10.0], ["a", None, None, 10.5],
                     ["b", None, None, 11.0], [other, None, None, 14.0]]}  # fmt: skip
    out = tmp_path / "t.json"
    out.write_text(json.dumps({"format": "hgemm-sm90-tuning", "version": 1,
                               "gpus": {"FAKE/1": {"measured": {}, "classes": {key: [old]}}}}))  # fmt: skip
    insts = [types.SimpleNamespace(id=i) for i in (one, other, "a", "b")]
    hashes = {i.id: f"{n:064x}" for n, i in enumerate(insts)}
    timed = []

    def bench_shape(torch, hg, s, combo, cands, args, stream, env):
        timed.append({i.id for i in cands})
        us = {one: 9.0, "a": 11.55, "b": 12.1}  # 1.1x the old clocks; the changed instance got faster
        runners = [{"kind": "hgemm", "series": "", "name": i.id, "median_ms": us[i.id] / 1e3,
                    "screen_ms": [us[i.id] / 1e3], "error": None} for i in cands]  # fmt: skip
        return {"runners": runners + [{"kind": "cublas", "series": "", "median_ms": 0.01}]}

    env = {"date": "d", "torch": "t", "cuda_bindings": "c", "hgemm_sm90": "h", "smi_id": None}
    fake_tuner(types.SimpleNamespace(instances=lambda: insts), env, key, bench_shape)
    monkeypatch.setattr(tune, "cubin_hashes", lambda hg: hashes)
    run = ["--out", str(out), "--dtype", "bf16", "--stale", "--changed", "*_c1x1_*", "--limit", "1"]
    assert tune.tune(tune.parse_args(run)) == 0
    assert timed == [{one, "a", "b"}]  # not `other`: carried over
    (point,) = read_document(out)["gpus"]["FAKE/1"]["classes"][key]
    assert [t[:3] for t in point["times"]] == [[one, None, None], ["a", None, None], ["b", None, None],
                                               [other, None, None]]  # fmt: skip
    assert point["times"][3][3] == pytest.approx(15.4)  # 14.0 on the new run's scale (a and b: 1.1x)
    assert point["kernels"] == kernels_digest([one, other, "a", "b"], hashes)
    assert not tune.stale(point, hashes)


def test_changed_needs_stale_and_a_glob_that_matches(capsys):
    with pytest.raises(SystemExit):
        tune.parse_args(["--changed", "*_c1x1_*"])
    assert "--changed narrows --stale" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="matches no shipped instance"):
        tune.changed_instances(["*_c9x9_*"], {"k": {"t_c1x1_x"}})
    assert tune.changed_instances(["*_c1x1_*"], {"k": {"t_c1x1_x", "t_c2x1_x"}}) == {"k": {"t_c1x1_x"}}


def test_evaluate_records_every_instance_time_for_the_offline_judge(tmp_path, monkeypatch, fake_tuner):
    """`evaluate` end to end with the GPU parts faked: each verdict of its JSON keeps every instance's
    time (finalists' medians, the screened-out ones on their scale), which is what
    `python -m build_tools.dispatch_loo --held-out` scores a later dispatch change with."""
    import types

    from build_tools import dispatch_loo

    key = "bf16_bf16_bf16_kkn"
    dtypes = {"a_dtype": "bf16", "b_dtype": "bf16", "d_dtype": "bf16", "fp8_fast_accum": False}
    insts = [types.SimpleNamespace(id=i, **dtypes) for i in ("a", "b", "c")]
    choice = types.SimpleNamespace(instance_id="b", source="table", raster_along_m=True, group_size=4)
    hg = types.SimpleNamespace(instances=lambda: insts, select=lambda *args, **kw: choice)
    env = {"date": "d", "torch": "t", "gpu": "FAKE", "sms": 132, "cuda_bindings": "c", "hgemm_sm90": "h",
           "smi_id": None}  # fmt: skip

    def bench_shape(torch, hg, s, combo, cands, args, stream, env, keep, dispatch):
        assert keep == {"b"} and dispatch
        final = {"a": 10.0, "b": 12.0}  # µs; c screened out at 15 (screening reads 5% fast here)
        runners = [{"kind": "hgemm", "series": "", "name": i, "median_ms": us / 1e3,
                    "screen_ms": [us / 1.05e3], "error": None} for i, us in final.items()]  # fmt: skip
        runners.append(
            {"kind": "hgemm", "series": "", "name": "c", "screen_ms": [15 / 1.05e3], "error": None}
        )
        runners.append({"kind": "gemm", "series": "", "name": "gemm()", "median_ms": 0.0121})
        return {"runners": runners + [{"kind": "cublas", "series": "", "median_ms": 0.011}]}

    fake_tuner(hg, env, key, bench_shape)
    monkeypatch.setattr(tune_evaluate, "host_costs", lambda torch, hg: {})
    out = tmp_path / "eval.json"
    argv = ["evaluate", "--dtype", "bf16", "--seed", "3", "--count", "2", "--json", str(out)]
    assert tune_evaluate.evaluate(tune.parse_args(argv)) == 0
    doc = json.loads(out.read_text())
    assert doc["pdl"] is False and len(doc["verdicts"]) == 2
    v = doc["verdicts"][0]
    assert (v["selected"], v["fastest"], v["sel_us"]) == ("b", "a", pytest.approx(12.0))
    assert v["walk"] == [True, 4]  # the walk select() chose, as gemm() launched it
    assert v["times"] == {"a": pytest.approx(10.0), "b": pytest.approx(12.0), "c": pytest.approx(15.0)}
    cases = dispatch_loo.held_out_cases(doc)
    assert [c.times for c in cases] == [v["times"] for v in doc["verdicts"]] and not any(c.pdl for c in cases)
    assert {c.gpu for c in cases} == {"FAKE/132"}  # the GPU the draw ran on, as the table keys it


def test_progress_in_a_log_writes_a_line_at_most_every_interval_and_one_at_the_end():
    log = io.StringIO()  # a captured stream, not a terminal (isatty() is False), as a device run's or CI's
    progress = tune.Progress(100, "grid points", stream=log)
    for i in range(100):
        progress.step(f"point {i}")
    lines = log.getvalue().splitlines()
    assert lines == [lines[-1]] and lines[-1].startswith("[100/100 grid points]"), lines
    assert "\r" not in log.getvalue()


def test_progress_in_a_log_writes_each_step_once_the_interval_has_passed(monkeypatch):
    monkeypatch.setattr(tune.Progress, "LOG_EVERY_S", 0.0)
    log = io.StringIO()
    progress = tune.Progress(3, "shapes", stream=log)
    for i in range(3):
        progress.step(f"shape {i}")
    assert [line.split("]")[0] for line in log.getvalue().splitlines()] == [
        "[1/3 shapes",
        "[2/3 shapes",
        "[3/3 shapes",
    ]


def test_column_times_only_the_named_columns():
    """`--column NxK` (a column just added to GRID_NK): a plain run then times that column's points alone,
    not also the rows below M = 32 of the other columns, which lack instances added for larger M (session
    42's run without it re-timed 117 of those)."""
    shape = tune.grid()[0]  # M = 1 of the first column
    point = {"m": shape.m, "n": shape.n, "k": shape.k, "times": [["old", None, None, 1.0]]}
    held = {"bf16_bf16_bf16_kkn": [point]}
    shipped = {"bf16_bf16_bf16_kkn": {"old", "new"}}
    plain = tune.work_list(tune.parse_args(["--dtype", "bf16"]), held, shipped)
    assert shape in [s for _, s in plain]
    args = tune.parse_args(["--dtype", "bf16", "--column", "1024x4096", "1536X8960"])
    assert args.columns == [(1024, 4096), (1536, 8960)]
    work = [s for _, s in tune.work_list(args, held, shipped)]
    assert work and {(s.n, s.k) for s in work} == {(1024, 4096), (1536, 8960)}
    assert len(work) == len([s for s in tune.grid() if (s.n, s.k) in args.columns])


@pytest.mark.parametrize("text", ["1000x4096", "1024", "axb"])
def test_a_column_off_the_grid_is_a_usage_error(text, capsys):
    with pytest.raises(SystemExit):
        tune.parse_args(["--column", text])
    assert "column" in capsys.readouterr().err
