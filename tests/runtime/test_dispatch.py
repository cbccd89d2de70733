"""Dispatch on the CPU: `select()` (runtime/dispatch.py), the shipped tuning table (runtime/tuning.py,
runtime/tuning.json) and the cost model (runtime/model.py).

The catalog here is the real default profile (kernel_specs.yaml expanded by codegen/matrix.py) as fake
records, so "never picks an instance that cannot run" is checked against every class that ships."""

from __future__ import annotations

import itertools
import json
import math
import random
from pathlib import Path

import pytest
from fake_kernels import record

from codegen.matrix import load_matrix
from runtime import gpus, model, tuning
from runtime.contract import Manifest
from runtime.dispatch import ProblemClass, select, select_grouped
from runtime.errors import CorruptArtifactError, InvalidArgumentError, NoInstanceError
from runtime.spec import GemmSpec

ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "runtime" / "tuning.json"
H200 = gpus.named("H200")


@pytest.fixture(scope="module")
def default_specs() -> list[GemmSpec]:
    return list(load_matrix(ROOT / "kernel_specs.yaml").expand("default").specs)


@pytest.fixture
def catalog_rt(make_runtime, default_specs):
    """A runtime whose manifest holds every default-profile instance (fake cubins: nothing is launched)."""
    catalog = Manifest(profile="default", instances={s.id: record(s) for s in default_specs}, toolchain={})
    return make_runtime(catalog)


def _problem_kwargs(cls: ProblemClass) -> dict:
    kw = dict(
        a_dtype=cls.a_dtype,
        b_dtype=cls.b_dtype,
        d_dtype=cls.d_dtype,
        a_major=cls.a_major,
        b_major=cls.b_major,
        d_major=cls.d_major,
        fp8_fast_accum=cls.fp8_fast_accum,
        fp16_accum=cls.fp16_accum,
    )
    if cls.c_dtype is not None:
        kw.update(c_dtype=cls.c_dtype, c_major=cls.c_major)
    return kw


# --- the shipped table --------------------------------------------------------------------------------


def test_shipped_table_schema_round_trips():
    doc = tuning.read_document(TABLE)
    table = tuning.TuningTable.from_json(doc, str(TABLE))
    assert table.to_json()["gpus"] == doc["gpus"]
    assert H200.key in table.summary()
    for classes in table.gpus.values():
        for points in classes.values():
            for p in points:
                assert [us for _, us in p.times] == sorted(us for _, us in p.times)  # fastest first


def test_shipped_table_agrees_with_the_matrix(default_specs):
    """Every id the table names ships in the default profile and belongs to the class it is filed under."""
    by_id = {s.id: s for s in default_specs}
    table = tuning.load(str(TABLE))
    assert table.instance_ids() <= set(by_id)
    for classes in table.gpus.values():
        for key, points in classes.items():
            for p in points:  # PDL rows (key + "@pdl") hold the instances of the class they time
                want = key.removesuffix(tuning.PDL_SUFFIX)
                assert {ProblemClass.of(by_id[c.instance_id]).key for c, _ in p.times} == {want}


def test_table_refuses_malformed_documents(tmp_path):
    bad = {"format": "hgemm-sm90-tuning", "version": 1, "gpus": {"X/1": {"classes": {"c": [{"m": 0}]}}}}
    with pytest.raises(CorruptArtifactError, match="malformed"):
        tuning.TuningTable.from_json(bad)
    point = {"m": 1, "n": 1, "k": 1, "kernels": 5, "times": [[A, None, None, 1.0]]}  # a digest is a string
    with pytest.raises(CorruptArtifactError, match="malformed"):
        tuning.TuningTable.from_json({**bad, "gpus": {"X/1": {"classes": {"c": [point]}}}})
    with pytest.raises(CorruptArtifactError, match="version-1"):
        tuning.TuningTable.from_json({"format": "something else"})
    path = tmp_path / "t.json"
    path.write_text("{not json")
    with pytest.raises(CorruptArtifactError, match="cannot be read"):
        tuning.load(str(path))


def test_a_loaded_table_parses_a_class_on_its_first_lookup(tmp_path):
    """`load` (what select() reads) parses each class's points when first used: a malformed point of one
    class is refused at that class's first lookup, typed, and the other classes still answer."""
    good = {"m": 64, "n": 1024, "k": 1024, "times": [[A, None, None, 5.0], [B, None, None, 6.0]]}
    doc = {
        "format": "hgemm-sm90-tuning",
        "version": 1,
        "gpus": {H200.key: {"classes": {"bf16_bf16_bf16_kkn": [good], "fp16_fp16_fp16_kkn": [{"m": 0}]}}},
    }
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    table = tuning.load(str(path))  # the malformed class is not parsed yet
    assert table.covers(H200, "bf16_bf16_bf16_kkn", 64)
    pick = table.lookup(H200, "bf16_bf16_bf16_kkn", 64, 1024, 1024, 1, {A, B})
    assert pick is not None and pick.instance_id == A
    with pytest.raises(CorruptArtifactError, match="malformed"):
        table.lookup(H200, "fp16_fp16_fp16_kkn", 64, 1024, 1024, 1, {A, B})
    with pytest.raises(CorruptArtifactError, match="malformed"):
        table.summary()  # parses every class (doctor reports it)
    with pytest.raises(CorruptArtifactError, match="not a list"):
        tuning.TuningTable.from_json({**doc, "gpus": {H200.key: {"classes": {"c": {"m": 1}}}}}, lazy=True)


def test_the_shipped_table_is_stored_compact_as_write_document_writes_it():
    """runtime/tuning.json is the compact form (runtime/tuning.py: each class's candidates once, times
    aligned with them), byte for byte what `write_document` writes for its expanded document: a table
    edited by hand or written by an older tool fails here."""
    text = TABLE.read_text(encoding="utf-8")
    assert json.loads(text)["version"] == tuning.COMPACT_VERSION
    assert tuning.encode_document(tuning.read_document(TABLE)) == text


def _sorted_times(table: tuning.TuningTable) -> dict:
    return {
        (g, c, p.m, p.n, p.k): (
            sorted((us, cand) for cand, us in p.times),
            p.cublas_us,
            p.finalists,
            p.kernels,
        )
        for g, classes in table.gpus.items()
        for c, points in classes.items()
        for p in points
    }


def test_the_compact_and_the_expanded_form_hold_the_same_points(tmp_path):
    """Expanding the shipped table and storing it compact again loses nothing: every point's times,
    cuBLAS time, finalist count and kernels digest read back the same from either form."""
    expanded = tuning.read_document(TABLE)
    assert expanded["version"] == tuning.VERSION and all(
        "times" in p for e in expanded["gpus"].values() for pts in e["classes"].values() for p in pts
    )
    path = tmp_path / "expanded.json"
    path.write_text(json.dumps(expanded))
    assert _sorted_times(tuning.load(str(path))) == _sorted_times(tuning.load(str(TABLE)))
    again = tmp_path / "again.json"
    tuning.write_document(again, tuning.read_document(path))  # the tools' round trip
    assert again.read_text(encoding="utf-8") == TABLE.read_text(encoding="utf-8")


def test_a_compact_table_refuses_malformed_classes_at_their_first_lookup(tmp_path):
    """A compact class whose times list does not align with its candidates, or whose candidate is
    malformed, is refused typed at the class's first use; a class that is not {"candidates", "points"}
    at load."""
    expanded = {
        "format": tuning.FORMAT,
        "version": tuning.VERSION,
        "gpus": {
            H200.key: {
                "classes": {
                    "bf16_bf16_bf16_kkn": [
                        {"m": 64, "n": 1024, "k": 1024, "times": [[A, None, None, 5.0], [B, None, None, 6.0]]}
                    ]
                }
            }
        },
    }
    compact = json.loads(tuning.encode_document(expanded))
    cls = compact["gpus"][H200.key]["classes"]["bf16_bf16_bf16_kkn"]
    assert cls["candidates"] == [[A, None, None], [B, None, None]] and cls["points"][0]["us"] == [5.0, 6.0]
    table = tuning.TuningTable.from_json(compact, lazy=True)
    assert table.lookup(H200, "bf16_bf16_bf16_kkn", 64, 1024, 1024, 1, {A, B}).instance_id == A
    for broken, match in (
        ({"us": [5.0]}, "not aligned"),
        ({"us": [5.0, -1.0]}, "bad time entry"),
        ({"us": [None, None]}, "no times"),
        ({"m": 0}, "bad extents"),
    ):
        bad = json.loads(json.dumps(compact))
        bad["gpus"][H200.key]["classes"]["bf16_bf16_bf16_kkn"]["points"][0].update(broken)
        table = tuning.TuningTable.from_json(bad, lazy=True)
        with pytest.raises(CorruptArtifactError, match=match):
            table.lookup(H200, "bf16_bf16_bf16_kkn", 64, 1024, 1024, 1, {A, B})
    bad = json.loads(json.dumps(compact))
    bad["gpus"][H200.key]["classes"]["bf16_bf16_bf16_kkn"]["candidates"][1] = [B, "yes", None]
    with pytest.raises(CorruptArtifactError, match="candidates are malformed"):
        tuning.TuningTable.from_json(bad).summary()
    bad["gpus"][H200.key]["classes"]["bf16_bf16_bf16_kkn"] = [[A, None, None, 5.0]]
    with pytest.raises(CorruptArtifactError, match="no points list"):
        tuning.TuningTable.from_json(bad, lazy=True)


# --- lookup ---------------------------------------------------------------------------------------------

A, B = (
    "sm90_bf16_bf16_bf16_fp32acc_kkn_128x256x64_c1x1_coop",
    "sm90_bf16_bf16_bf16_fp32acc_kkn_64x128x64_c1x1_coop",
)


def _point(m, n, k, **times) -> tuning.Point:
    ordered = sorted(((tuning.Candidate(iid), us) for iid, us in times.items()), key=lambda t: t[1])
    return tuning.Point(m, n, k, tuple(ordered))


def _table(points) -> tuning.TuningTable:
    return tuning.TuningTable({H200.key: {"bf16_bf16_bf16_kkn": list(points)}})


def test_lookup_on_a_grid_point_returns_its_measured_winner():
    t = _table(
        [_point(256, 4096, 4096, **{A: 30.0, B: 40.0}), _point(1024, 4096, 4096, **{A: 90.0, B: 80.0})]
    )
    for m, want, us in ((256, A, 30.0), (1024, B, 80.0)):
        pick = t.lookup(H200, "bf16_bf16_bf16_kkn", m, 4096, 4096, 1, {A, B})
        assert (pick.instance_id, pick.us) == (want, pytest.approx(us))


def test_lookup_interpolates_monotonically_in_log_m():
    """Between two grid points each candidate's log time moves from one (model-scaled) end point to the
    other as M grows: the blend weight rises monotonically from 0 to 1."""
    col = [_point(256, 4096, 4096, **{A: 30.0}), _point(1024, 4096, 4096, **{A: 90.0})]
    weights = []
    for m in range(256, 1025, 16):
        points, _ = tuning._m_bracket(col, m)
        weights.append({p.m: w for p, w in points}.get(1024, 0.0))
    assert weights[0] == 0.0 and weights[-1] == 1.0
    assert all(a <= b for a, b in itertools.pairwise(weights))
    spec = GemmSpec.parse(A)
    m = 512
    est = tuning.estimate(tuning._m_bracket(col, m)[0], (m, 4096, 4096, 1), 132, {A})
    scaled = [
        us * model.estimate_s(spec, m, 4096, 4096, 1, 132) / model.estimate_s(spec, p.m, p.n, p.k, 1, 132)
        for p, us in ((col[0], 30.0), (col[1], 90.0))
    ]
    assert min(scaled) <= next(iter(est.values())) <= max(scaled)
    assert next(iter(est.values())) == pytest.approx(math.sqrt(scaled[0] * scaled[1]))  # halfway in log M


def test_lookup_is_deterministic_and_independent_of_point_order():
    pts = [_point(m, 4096, 4096, **{A: m * 0.1 + 5, B: m * 0.09 + 9}) for m in (64, 256, 1024, 4096)]
    pts += [_point(m, 8192, 8192, **{A: m * 0.4 + 5, B: m * 0.5 + 9}) for m in (64, 256, 1024, 4096)]
    picks = set()
    for seed in range(5):
        shuffled = pts[:]
        random.Random(seed).shuffle(shuffled)
        t = _table(shuffled)
        picks.add(tuple(t.lookup(H200, "bf16_bf16_bf16_kkn", 700, 6000, 5000, 1, {A, B}) for _ in range(2)))
    assert len(picks) == 1


def test_an_instance_a_bracketing_point_did_not_time_is_estimated_from_the_points_that_did():
    """B was added after the M = 64 point was timed: that point's missing time is missing data (not a
    slow result), so at M = 86, between the rows, B's estimate is its M = 96 time carried by the model,
    and it wins there as it does at M = 96. (Counted at M = 64's slowest time it lost to A.)"""
    col = [_point(64, 4096, 4096, **{A: 20.0}), _point(96, 4096, 4096, **{A: 30.0, B: 21.0})]
    t = _table(col)
    pick = t.lookup(H200, "bf16_bf16_bf16_kkn", 86, 4096, 4096, 1, {A, B})
    spec = GemmSpec.parse(B)
    carried = (
        21.0 * model.estimate_s(spec, 86, 4096, 4096, 1, 132) / model.estimate_s(spec, 96, 4096, 4096, 1, 132)
    )
    assert (pick.instance_id, pick.us) == (B, pytest.approx(carried))
    # Below the rows that timed it, B is no candidate.
    assert t.lookup(H200, "bf16_bf16_bf16_kkn", 48, 4096, 4096, 1, {A, B}).instance_id == A


def test_an_instance_the_nearest_row_did_not_time_is_no_candidate():
    """B has a time only at M = 96. At M = 70, nearer the M = 64 row (which did not time it), B's estimate
    would rest on the farther row alone: it is no candidate there, though carried from M = 96 it looks
    faster than A. Nearer M = 96 it is (previous test); and with only B allowed, B is still picked."""
    col = [_point(64, 4096, 4096, **{A: 20.0}), _point(96, 4096, 4096, **{A: 30.0, B: 18.0})]
    t = _table(col)
    bracket, _ = tuning._m_bracket(col, 70)
    carried = tuning.estimate(bracket, (70, 4096, 4096, 1), 132, {A, B})
    assert carried[tuning.Candidate(B)] < carried[tuning.Candidate(A)]  # what the rule keeps from winning
    assert t.lookup(H200, "bf16_bf16_bf16_kkn", 70, 4096, 4096, 1, {A, B}).instance_id == A
    assert t.lookup(H200, "bf16_bf16_bf16_kkn", 90, 4096, 4096, 1, {A, B}).instance_id == B
    assert t.lookup(H200, "bf16_bf16_bf16_kkn", 70, 4096, 4096, 1, {B}).instance_id == B


def test_a_walk_override_competes_only_near_the_point_that_holds_it():
    """build_tools/tune_walks.py adds A with another walk at M = 512 only (where it beat A's default walk
    by more than its margin). Nearer M = 512 it is picked, with its overrides; nearer M = 1024, whose
    tile grid differs, it is no candidate, and A's default walk (interpolated) is picked; an installation
    that lacks A never gets its walk."""
    walk = tuning.Candidate(A, True, 4)
    col = [
        tuning.Point(
            512, 4096, 4096, ((walk, 40.0), (tuning.Candidate(A), 42.0), (tuning.Candidate(B), 45.0))
        ),
        _point(1024, 4096, 4096, **{A: 80.0, B: 85.0}),
    ]
    t = _table(col)
    near = t.lookup(H200, "bf16_bf16_bf16_kkn", 600, 4096, 4096, 1, {A, B})
    assert (near.instance_id, near.raster_along_m, near.group_size) == (A, True, 4)
    far = t.lookup(H200, "bf16_bf16_bf16_kkn", 900, 4096, 4096, 1, {A, B})
    assert (far.instance_id, far.raster_along_m, far.group_size) == (A, None, None)
    assert t.lookup(H200, "bf16_bf16_bf16_kkn", 600, 4096, 4096, 1, {B}).instance_id == B
    # The walk's estimate comes from its own point alone, carried by the model like any candidate's.
    bracket, _ = tuning._m_bracket(col, 600)
    spec = GemmSpec.parse(A)
    carried = (
        40.0
        * model.estimate_s(spec, 600, 4096, 4096, 1, 132)
        / model.estimate_s(spec, 512, 4096, 4096, 1, 132)
    )
    assert tuning.estimate(bracket, (600, 4096, 4096, 1), 132, {A, B})[walk] == pytest.approx(carried)


def test_lookup_skips_instances_this_installation_lacks():
    t = _table([_point(256, 4096, 4096, **{A: 30.0, B: 40.0})])
    assert t.lookup(H200, "bf16_bf16_bf16_kkn", 256, 4096, 4096, 1, {B}).instance_id == B
    assert t.lookup(H200, "bf16_bf16_bf16_kkn", 256, 4096, 4096, 1, set()) is None
    assert t.lookup(gpus.named("H100 PCIe"), "bf16_bf16_bf16_kkn", 256, 4096, 4096, 1, {A, B}) is None


def test_a_board_with_the_h200s_sm_count_reads_its_rows_and_says_so():
    """An H100 SXM (132 SMs) has no rows of its own: the H200's stand in (the same SMs and wave counts),
    and the reason names both. A board with another SM count (an H100 PCIe's 114) gets none, and its own
    rows win over a stand-in once the table has them."""
    t = _table(
        [_point(256, 4096, 4096, **{A: 30.0, B: 40.0}), _point(1024, 4096, 4096, **{A: 90.0, B: 80.0})]
    )
    sxm, pcie = gpus.named("H100 SXM"), gpus.named("H100 PCIe")
    assert (t.stand_in(H200), t.stand_in(sxm), t.stand_in(pcie)) == (H200.key, H200.key, None)
    for m in (256, 700, 1024):
        own, borrowed = (t.lookup(g, "bf16_bf16_bf16_kkn", m, 4096, 4096, 1, {A, B}) for g in (H200, sxm))
        assert (borrowed.instance_id, borrowed.us) == (own.instance_id, own.us)
    assert f"table {H200.key} (for {sxm.key}: the same SM count) bf16_bf16_bf16_kkn" in borrowed.reason
    assert f"table {H200.key} bf16_bf16_bf16_kkn" in own.reason and sxm.key not in own.reason
    assert t.covers(sxm, "bf16_bf16_bf16_kkn", 1024) and not t.covers(pcie, "bf16_bf16_bf16_kkn", 1)
    assert t.lookup(pcie, "bf16_bf16_bf16_kkn", 256, 4096, 4096, 1, {A, B}) is None
    # Rows of its own: they decide.
    both = tuning.TuningTable(
        {
            H200.key: {"bf16_bf16_bf16_kkn": [_point(256, 4096, 4096, **{A: 30.0, B: 40.0})]},
            sxm.key: {"bf16_bf16_bf16_kkn": [_point(256, 4096, 4096, **{A: 50.0, B: 40.0})]},
        }
    )
    assert both.stand_in(sxm) == sxm.key
    assert both.lookup(sxm, "bf16_bf16_bf16_kkn", 256, 4096, 4096, 1, {A, B}).instance_id == B
    assert both.lookup(H200, "bf16_bf16_bf16_kkn", 256, 4096, 4096, 1, {A, B}).instance_id == A
    # Grouped rows likewise.
    grouped = _grouped_table()
    pick = grouped.lookup_grouped(sxm, GROUPED_KEY, 4096, *OFF_COLUMN, {SMALL_G, WIDE_G})
    assert pick.instance_id == WIDE_G and f"for {sxm.key}" in pick.reason
    assert grouped.lookup_grouped(pcie, GROUPED_KEY, 4096, *OFF_COLUMN, {SMALL_G, WIDE_G}) is None


# --- select ---------------------------------------------------------------------------------------------


def test_select_never_returns_an_instance_that_cannot_run(catalog_rt, default_specs):
    """Every shipped class, on the tuned GPU (table) and on one the table lacks (model), over random
    problems: the choice is of the query's class, so it runs the problem."""
    rng = random.Random(7)
    classes = sorted({ProblemClass.of(s) for s in default_specs}, key=lambda c: c.key)
    sources = set()
    for cls in classes:
        for gpu in ("H200", "H100 PCIe"):
            for _ in range(4):
                m, n, k = (16 * max(1, round(2 ** rng.uniform(0, 10))) for _ in range(3))
                if cls.grouped or cls.grouped_k:  # chosen by select_grouped (the cost model)
                    kw = _problem_kwargs(cls)
                    del kw["d_major"], kw["fp16_accum"]
                    groups = rng.choice((1, 8, 256))
                    varlen = "m" if cls.grouped else "k"
                    gather = cls.gathered
                    choice = select_grouped(m, n, k, groups, gather_a=gather, varlen=varlen, gpu=gpu, **kw)
                    # The same dtypes and layouts as a plain problem: never a grouped instance.
                    if cls.c_dtype is None:
                        plain = select(m, n, k, gpu=gpu, **_problem_kwargs(cls))
                        assert GemmSpec.parse(plain.instance_id).varlen == "none"
                else:
                    choice = select(m, n, k, batch=rng.choice((1, 3)), gpu=gpu, **_problem_kwargs(cls))
                spec = GemmSpec.parse(choice.instance_id)
                assert ProblemClass.of(spec) == cls
                assert choice.instance_id in catalog_rt.manifest.instances
                sources.add(choice.source)
    assert sources == {"table", "model"}


def test_fp16_accumulation_is_chosen_only_when_asked_for(catalog_rt, default_specs):
    assert any(s.acc_dtype == "fp16" for s in default_specs)
    for m, n, k in ((4096, 4096, 4096), (128, 1024, 512), (8192, 1920, 4096)):
        plain = GemmSpec.parse(select(m, n, k, a_dtype="fp16", gpu="H200").instance_id)
        asked = GemmSpec.parse(select(m, n, k, a_dtype="fp16", fp16_accum=True, gpu="H200").instance_id)
        assert plain.acc_dtype == "fp32" and asked.acc_dtype == "fp16"
        assert ProblemClass.of(asked).key == "fp16_fp16_fp16_kkn_fp16acc"


def test_select_caches_choices(catalog_rt):
    first = select(512, 4096, 4096, a_dtype="bf16", gpu="H200")
    assert select(512, 4096, 4096, a_dtype="bf16", gpu="H200") is first
    assert first.source == "table" and "table NVIDIA H200/132" in first.reason
    assert first.launch_overrides() == {"raster_along_m": None, "group_size": None}
    # An H100 SXM plans from the H200's rows (the same SM count); an H100 PCIe from the cost model.
    sxm = select(512, 4096, 4096, a_dtype="bf16", gpu="H100 SXM")
    assert (sxm.source, sxm.instance_id) == ("table", first.instance_id) and "H100" in sxm.reason
    assert select(512, 4096, 4096, a_dtype="bf16", gpu="H100 PCIe").source == "model"


@pytest.mark.parametrize(
    "first, second, match",
    [
        (dict(pdl=True), dict(pdl=1), "pdl must be a bool"),
        (dict(a_dtype="e4m3", fp8_fast_accum=True), dict(a_dtype="e4m3", fp8_fast_accum=1), "must be a bool"),
        (dict(m=256), dict(m=256.0), "m=256.0 is not an integer"),
    ],
)
def test_a_cached_choice_is_not_returned_for_equal_but_invalid_arguments(catalog_rt, first, second, match):
    """1 == True and 256.0 == 256 hash alike, so they would find a valid call's cached choice: refused."""
    base = dict(m=256, n=4096, k=4096, a_dtype="bf16", gpu="H200")
    select(**{**base, **first})
    with pytest.raises(InvalidArgumentError, match=match):
        select(**{**base, **first, **second})


def test_select_on_the_current_device_uses_its_name_and_sm_count(catalog_rt, fake):
    choice = select(512, 4096, 4096, a_dtype="bf16")  # the fake driver's device 0 is an "NVIDIA H200"
    assert choice == select(512, 4096, 4096, a_dtype="bf16", gpu="H200")


def test_with_num_sms_select_plans_for_that_many_sms(make_runtime, default_specs, fake):
    """HGEMM_NUM_SMS = 96 on the fake H200: the device's choices are made for a 96-SM GPU (no table rows
    for one: the cost model on 96 SMs); a GPU named explicitly is planned for as it is."""
    catalog = Manifest(profile="default", instances={s.id: record(s) for s in default_specs}, toolchain={})
    make_runtime(catalog, num_sms=96)
    here = select(512, 4096, 4096, a_dtype="bf16")
    assert here.source == "model" and "on 96 SMs" in here.reason
    named = select(512, 4096, 4096, a_dtype="bf16", gpu="H200")
    assert named.source == "table" and "NVIDIA H200/132" in named.reason
    make_runtime(catalog, num_sms=132)  # the whole GPU: as without the knob
    assert select(512, 4096, 4096, a_dtype="bf16") == named


def test_no_instance_lists_the_nearest(catalog_rt):
    with pytest.raises(NoInstanceError) as info:
        select(256, 256, 256, a_dtype="bf16", b_dtype="fp16")
    assert info.value.nearest and all(i.startswith("sm90_") for i in info.value.nearest)
    assert "nearest shipped instances" in str(info.value)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(m=256, n=4100, k=256), "n=4100 is the contiguous extent of d"),
        (dict(m=256, n=256, k=4100), "k=4100 is the contiguous extent of a"),
        (dict(m=0, n=256, k=256), "m=0 is outside 1..2"),
        (dict(m=256, n=256, k=256, a_dtype="int8"), "a_dtype='int8'"),
        (dict(m=256, n=256, k=256, gpu="A100"), "unknown GPU 'A100'"),
        (dict(m=256, n=256, k=256, gpu="H200", device=0), "both device"),
        (dict(m=256, n=256, k=256, c_major="n"), "c_major='n' given without c_dtype"),
        (dict(m=256, n=256, k=256, fp8_fast_accum=1), "fp8_fast_accum must be a bool"),
        (dict(m=256, n=256, k=256, fp16_accum=1), "fp16_accum must be a bool"),
        (dict(m=256, n=256, k=256, fp16_accum=True), "fp16 accumulation takes fp16 inputs"),
        (dict(m=256, n=256, k=256, pdl=1), "pdl must be a bool"),
    ],
)
def test_select_refuses_bad_arguments(catalog_rt, kwargs, match):
    kwargs.setdefault("a_dtype", "bf16")
    with pytest.raises(InvalidArgumentError, match=match):
        select(**kwargs)


def test_select_for_pdl_reads_the_pdl_rows_where_they_cover_m(catalog_rt, monkeypatch):
    """select(pdl=True) takes the class's "@pdl" rows (timed in PDL chains, decode sizes only) up to their
    largest M, and the plain rows beyond it or without pdl; the choices are cached apart."""
    swap = "sm90_bf16_bf16_bf16_fp32acc_kkn_64x64x128_c1x1_coop_swapab"
    plain = [_point(m, 4096, 4096, **{B: 20.0, swap: 25.0}) for m in (64, 128, 1024)]
    pdl_rows = [_point(m, 4096, 4096, **{B: 22.0, swap: 19.0}) for m in (64, 128)]
    t = tuning.TuningTable(
        {H200.key: {"bf16_bf16_bf16_kkn": plain, "bf16_bf16_bf16_kkn" + tuning.PDL_SUFFIX: pdl_rows}}
    )
    monkeypatch.setattr(tuning, "_shipped", [t])
    assert t.covers(H200, "bf16_bf16_bf16_kkn@pdl", 128) and not t.covers(H200, "bf16_bf16_bf16_kkn@pdl", 129)
    at_64 = select(64, 4096, 4096, a_dtype="bf16", gpu="H200", pdl=True)
    assert at_64.instance_id == swap and "bf16_bf16_bf16_kkn@pdl" in at_64.reason
    assert select(64, 4096, 4096, a_dtype="bf16", gpu="H200").instance_id == B
    beyond = select(1024, 4096, 4096, a_dtype="bf16", gpu="H200", pdl=True)
    assert "@pdl" not in beyond.reason and beyond == select(1024, 4096, 4096, a_dtype="bf16", gpu="H200")
    # A class without PDL rows: pdl changes nothing.
    fp16 = dict(a_dtype="fp16", gpu="H200")
    assert select(64, 4096, 4096, pdl=True, **fp16) == select(64, 4096, 4096, **fp16)


SMALL_G = "sm90_bf16_bf16_bf16_fp32acc_kkn_64x128x64_c1x1_coop_varlenm"
WIDE_G = "sm90_bf16_bf16_bf16_fp32acc_kkn_128x128x64_c1x2_pp_varlenm"
GROUPED_KEY = "bf16_bf16_bf16_kkn" + tuning.GROUPED_TAG
OFF_COLUMN = (6144, 3072)  # a layer's (N, K) that the table did not measure


def _grouped_table() -> tuning.TuningTable:
    """MoE layers (m = rows per group): the 64-row tile wins small groups, the 1x2 tile large ones."""
    small = [_point(16, n, k, **{SMALL_G: 100.0, WIDE_G: 130.0}) for n, k in ((1536, 2048), (2048, 768))]
    large = [_point(4096, n, k, **{SMALL_G: 900.0, WIDE_G: 500.0}) for n, k in ((14336, 4096), (4096, 14336))]
    return tuning.TuningTable({H200.key: {GROUPED_KEY: small + large}})


def test_grouped_lookup_weighs_the_moe_layers_by_group_size():
    t = _grouped_table()
    assert tuning.is_grouped_key(GROUPED_KEY) and not tuning.is_grouped_key("bf16_bf16_bf16_kkn")
    picks = [
        t.lookup_grouped(H200, GROUPED_KEY, rows, *OFF_COLUMN, {SMALL_G, WIDE_G})
        for rows in (1, 16, 64, 4096, 10**5)
    ]
    assert [p.instance_id for p in picks] == [SMALL_G, SMALL_G, SMALL_G, WIDE_G, WIDE_G]
    assert all(p.us >= 1.0 for p in picks) and picks[1].us < picks[2].us  # further from 16: a worse fit
    # The weight falls off with distance in octaves: the crossover sits between the two measured sizes.
    sizes = [2**e for e in range(4, 13)]
    wide = [
        r
        for r in sizes
        if t.lookup_grouped(H200, GROUPED_KEY, r, *OFF_COLUMN, {SMALL_G, WIDE_G}).instance_id == WIDE_G
    ]
    assert wide and wide == [r for r in sizes if r >= wide[0]] and 16 < wide[0] <= 4096
    # Only allowed, timed instances; no points for another GPU or class.
    assert t.lookup_grouped(H200, GROUPED_KEY, 4096, *OFF_COLUMN, {SMALL_G}).instance_id == SMALL_G
    assert t.lookup_grouped(H200, GROUPED_KEY, 4096, *OFF_COLUMN, {"sm90_other"}) is None
    assert (
        t.lookup_grouped(gpus.named("H100 PCIe"), GROUPED_KEY, 4096, *OFF_COLUMN, {SMALL_G, WIDE_G}) is None
    )
    assert t.lookup_grouped(H200, "e4m3_e4m3_bf16_kkn_varlenm", 4096, *OFF_COLUMN, {SMALL_G, WIDE_G}) is None


def test_grouped_lookup_of_a_measured_layer_uses_its_own_points():
    """On a (N, K) the table measured, that column's points alone decide, whatever the other layers of the
    same group size say; off the columns, all layers weigh in."""
    allowed = {SMALL_G, WIDE_G}
    # At 4096 rows the 64-row tile won (4096, 14336) by a little, the 1x2 tile the other two layers by far.
    points = [
        _point(4096, 4096, 14336, **{SMALL_G: 480.0, WIDE_G: 500.0}),
        _point(4096, 14336, 4096, **{SMALL_G: 900.0, WIDE_G: 500.0}),
        _point(4096, 2048, 7168, **{SMALL_G: 900.0, WIDE_G: 500.0}),
        _point(4096, 1536, 2048, **{SMALL_G: 100.0}),
    ]
    t = tuning.TuningTable({H200.key: {GROUPED_KEY: points}})
    own = t.lookup_grouped(H200, GROUPED_KEY, 4096, 4096, 14336, allowed)
    assert own.instance_id == SMALL_G and "N=4096 K=14336" in own.reason
    assert t.lookup_grouped(H200, GROUPED_KEY, 2048, 14336, 4096, allowed).instance_id == WIDE_G
    off = t.lookup_grouped(H200, GROUPED_KEY, 4096, *OFF_COLUMN, allowed)
    assert off.instance_id == WIDE_G and "N=" not in off.reason
    # A column that timed none of the allowed instances does not count as measured: the others decide.
    fallback = t.lookup_grouped(H200, GROUPED_KEY, 4096, 1536, 2048, {WIDE_G})
    assert fallback.instance_id == WIDE_G and "N=" not in fallback.reason


def test_select_grouped_reads_the_tables_moe_layers_where_it_has_them(catalog_rt, monkeypatch):
    monkeypatch.setattr(tuning, "_shipped", [_grouped_table()])
    small = select_grouped(8 * 16, 1536, 2048, 8, a_dtype="bf16", gpu="H200")
    large = select_grouped(8 * 4096, 14336, 4096, 8, a_dtype="bf16", gpu="H200")
    assert (small.instance_id, small.source) == (SMALL_G, "table")
    assert (large.instance_id, large.source) == (WIDE_G, "table")
    assert GROUPED_KEY in large.reason and "4096 rows" in large.reason and large.estimate_us > 0
    # Another GPU, a gathered A or grouped K: no points, the cost model decides.
    assert select_grouped(8 * 4096, 14336, 4096, 8, a_dtype="bf16", gpu="H100 PCIe").source == "model"
    gathered = select_grouped(8 * 4096, 14336, 4096, 8, a_dtype="bf16", gather_a=True, gpu="H200")
    assert gathered.source == "model" and gathered.instance_id.endswith("_gathera")


def test_the_shipped_table_has_moe_layers_for_every_grouped_class_without_c(default_specs):
    """bench_moe times the grouped (varlen M) classes without C, gathered A or not: each has points on the
    H200 with its run recorded, and the ungathered ones rank their 1x2 tiles (docs/DISPATCH.md)."""
    table = tuning.load(str(TABLE))
    want = {ProblemClass.of(s).key for s in default_specs if s.varlen == "m" and not s.c_dtype}
    assert want == {k for k in table.gpus[H200.key] if tuning.is_grouped_key(k)}
    assert set(table.meta["measured"][H200.key]["grouped"]) == want
    for key in want - {k for k in want if k.endswith("_gathera")}:
        timed = {c.instance_id for p in table.gpus[H200.key][key] for c, _ in p.times}
        assert any("_c1x2_" in iid for iid in timed)


# --- the model ------------------------------------------------------------------------------------------


def test_model_sees_wave_quantization(monkeypatch):
    """133 tiles on 132 SMs take two waves: the model must price that above 132 tiles. The waves' time
    doubles (seen alone with the floors combined by max); the floors count bytes, not waves, and with the
    shipped p-norm they damp the step but do not hide it."""
    spec = GemmSpec.parse(A)  # 128 x 256 tiles
    one_wave = model.estimate_s(spec, 128 * 12, 256 * 11, 8192, 1, 132)  # 132 tiles
    two_waves = model.estimate_s(spec, 128 * 19, 256 * 7, 8192, 1, 132)  # 133 tiles
    assert two_waves > 1.4 * one_wave
    monkeypatch.setattr(model, "ROOFLINE_P", 0.0)
    one_wave = model.estimate_s(spec, 128 * 12, 256 * 11, 8192, 1, 132)
    two_waves = model.estimate_s(spec, 128 * 19, 256 * 7, 8192, 1, 132)
    assert two_waves > 1.7 * one_wave


def test_model_holds_fifteen_8_cta_clusters_resident_on_132_sms():
    """On the H200 15 clusters of 8 CTAs fit at once, not 16 (64 x 96 2x4: 120 tiles ran in one wave,
    128 in two, session 23): a 2x4 problem of 16 clusters is priced as two waves, one of 15 as one."""
    spec = GemmSpec.parse("sm90_bf16_bf16_bf16_fp32acc_kkn_64x96x64_c2x4_coop")
    fifteen = model.estimate_s(spec, 64 * 6, 96 * 20, 8192, 1, 132)  # 3 x 5 clusters
    sixteen = model.estimate_s(spec, 64 * 8, 96 * 16, 8192, 1, 132)  # 4 x 4 clusters
    assert sixteen > 1.7 * fifteen


def test_model_prefers_narrow_tiles_for_decode_shapes(default_specs):
    bf16 = [s for s in default_specs if ProblemClass.of(s).key == "bf16_bf16_bf16_kkn"]
    _, spec, why = model.best(bf16, 8, 4096, 4096, 1, 132)
    assert spec.tile[0] == 64 and "cost model" in why


def test_hbm_reach_grows_with_the_streaming_sms_and_saturates():
    """A few SMs pull about their own streaming rate each; all of them together approach, never pass, HBM."""
    reach = [model.hbm_reach(n) for n in (1, 8, 32, 64, 96, 132)]
    assert reach == sorted(reach) and reach[-1] < model.HBM_BYTES_PER_S
    assert reach[0] == pytest.approx(model.SM_STREAM_BYTES_PER_S, rel=0.02)
    assert reach[2] < 0.5 * model.HBM_BYTES_PER_S < reach[-1] * 0.6


def test_table_transfer_scales_a_weight_streaming_tile_by_its_bytes(catalog_rt):
    """M = 6 on a 10880 x 3712 weight (between the table's columns): a non-swapped 64-row tile on few CTAs
    streams the weight as the swap-AB tiles do, so carrying its time from the 6144- and 16384-wide columns
    must scale it by the bytes too. Held to the full 4.8 TB/s floor it looked compute-bound and flat in N,
    and select() took the 64 x 128 tile at 0.85x of the fastest (docs/DISPATCH.md, session 8). Session 46:
    once the table timed the 64 x 192 2x4 tile at these rows, the model counted its cluster's padding CTA
    (rows past M = 6) as a second streamer and carried it nearly flat, so select() took it; held out, such
    picks ran 0.956-0.972 of the fastest (docs/PERF.md session 46)."""
    for dtype in ("bf16", "fp16"):
        choice = select(6, 10880, 3712, a_dtype=dtype, gpu="H200")
        assert GemmSpec.parse(choice.instance_id).swap_ab, choice


def test_re_read_operands_cost_l2_time(catalog_rt):
    """219 x 1792 x 11392 (bf16, a held-out shape, off the grid): four 64-row tiles re-read a 41 MB weight
    over a long K. Measured on the H200 (docs/PERF.md, session 16): split-K 128 x 128 25.7 µs, the 64 x 64
    1x2 tile that select() took before the model's L2 floor 35.2 µs (the table's estimates for the two lay
    within 0.4%); with the floor, scaling the 64 x 64 tile's grid times to this problem charges its L2
    traffic."""
    spec = GemmSpec.parse(select(219, 1792, 11392, a_dtype="bf16", gpu="H200").instance_id)
    assert spec.k_split.value == "split" and spec.tile[:2] == (128, 128), spec.name()


def test_freshness_counts_points_by_the_cubins_they_were_timed_with():
    hashes = {"a": "1" * 64, "b": "2" * 64}
    here = tuning.kernels_digest(["a", "b"], hashes)
    elsewhere = tuning.kernels_digest(["a", "b"], {**hashes, "b": "3" * 64})  # b's kernel changed since

    def point(m, ids, kernels):
        doc = {"m": m, "n": 8, "k": 8, "times": [[i, None, None, 1.0 + j] for j, i in enumerate(ids)]}
        return doc if kernels is None else {**doc, "kernels": kernels}

    points = [
        point(1, ["a", "b"], here),
        point(2, ["b", "a"], here),  # the digest is over the set of timed instances
        point(3, ["a", "b"], elsewhere),
        point(4, ["a", "b"], None),  # no record
        point(
            5, ["a", "b", "c"], tuning.kernels_digest(["a", "b", "c"], {**hashes, "c": "4" * 64})
        ),  # c: not here
    ]
    doc = {
        "format": tuning.FORMAT,
        "version": tuning.VERSION,
        "gpus": {"G/1": {"classes": {"x_kkn": points}}},
    }
    table = tuning.TuningTable.from_json(doc)
    assert table.freshness(hashes) == {"G/1": tuning.Freshness(fresh=2, stale=1, unknown=2)}


def test_a_short_k_is_not_split_on_the_strength_of_a_longer_one(catalog_rt):
    """e4m3 fast 202 x 1152 x 4608 (held-out seed 2020, off the grid): its neighbours on the 2112 x 7168 and
    2048 x 8192 columns run 14 k-steps per split unit, the problem 6. Measured on the H200 (docs/PERF.md,
    session 20): the swap-AB 64 x 128 split-K tile that select() took there ran 9.05 µs, 0.78x of the fastest
    shipped instance (swap-AB 64 x 32, unsplit); a split unit's fixed cost (runtime/model.py
    `SPLIT_UNIT_S`) keeps the model from scaling its neighbours' times down with the k-range alone."""
    choice = select(202, 1152, 4608, a_dtype="e4m3", d_dtype="bf16", fp8_fast_accum=True, gpu="H200")
    assert GemmSpec.parse(choice.instance_id).k_split.value == "none", choice.instance_id


def test_m_just_above_256_takes_a_swap_ab_tile_that_fits_m(catalog_rt):
    """266 x 10880 x 2560 (a held-out shape, off the grid): a 128-row tile computes 384 rows there, three
    96-column swap-AB tiles 288. Measured on the H200 (docs/PERF.md, session 15): the swap-AB 128 x 96 pair
    ran 0.88x cuBLAS where the 128 x 256 tile that select() took before ran 0.66x; the table's re-timed
    rows must keep carrying that to the problem. Since session 22 the pick is a 192 x 144 swap-AB tile
    (two 144-column tiles: 288 rows again, 114 tiles of one wave instead of 255); it was not timed at this
    shape, so this holds what made the measured pick fast: swap-AB, M covered in at most 288 rows."""
    for dtype in ("bf16", "fp16"):
        spec = GemmSpec.parse(select(266, 10880, 2560, a_dtype=dtype, gpu="H200").instance_id)
        m_side = spec.tile[1]
        assert spec.swap_ab and -(-266 // m_side) * m_side <= 288, spec.name()
