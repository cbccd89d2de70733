"""GemmSpec: strict parsing, canonical ids and their inverse, JSON round trip, validity rules, smem plan."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from codegen import validity
from codegen.validity import (
    SmemPlan,
    acc_regs,
    check_rules,
    epilogue_tile,
    register_plan,
    smem_plan,
    why_unsupported,
)
from runtime.spec import AMajor, BMajor, DMajor, DType, GemmSpec, Schedule, SpecError

BASE_ROW = {
    "a_dtype": "bf16",
    "b_dtype": "bf16",
    "d_dtype": "bf16",
    "a_major": "k",
    "b_major": "k",
    "d_major": "n",
    "tile": [128, 256],
    "cluster": [2, 1],
    "schedule": "cooperative",
}
BASE_ID = "sm90_bf16_bf16_bf16_fp32acc_kkn_128x256x64_c2x1_coop"


def spec(**changes) -> GemmSpec:
    return GemmSpec.from_row({**BASE_ROW, **changes})


# --- enums ---------------------------------------------------------------------------------------------


def test_dtype_bits_and_float8():
    assert [(d.value, d.bits, d.is_float8) for d in DType] == [
        ("bf16", 16, False),
        ("fp16", 16, False),
        ("fp32", 32, False),
        ("e4m3", 8, True),
        ("e5m2", 8, True),
    ]
    assert [m.value for m in AMajor] == ["k", "m"]
    assert [m.value for m in BMajor] == ["k", "n"]
    assert [m.value for m in DMajor] == ["n", "m"]
    assert [s.value for s in Schedule] == ["cooperative", "pingpong"]


# --- construction --------------------------------------------------------------------------------------


def test_from_row_normalizes_to_enums_and_tuples():
    s = spec()
    assert s.a_dtype is DType.bf16 and s.schedule is Schedule.cooperative and s.d_major is DMajor.n
    assert s.acc_dtype is DType.fp32  # default
    assert s.tile == (128, 256, 64) and s.cluster == (2, 1)
    assert s.c_dtype is None and s.c_major is None and s.fp8_fast_accum is False and not s.has_c  # defaults
    c = spec(c_dtype="fp32", c_major="m", fp8_fast_accum=True)
    assert c.c_dtype is DType.fp32 and c.c_major is DMajor.m and c.fp8_fast_accum is True and c.has_c
    assert spec(c_dtype=None, c_major=None) == spec()  # explicit null is the default


def test_c_major_and_c_dtype_come_together():
    with pytest.raises(SpecError) as e:
        spec(c_major="n")
    assert "c_major n given without c_dtype" in str(e.value) and "set c_dtype" in str(e.value)
    with pytest.raises(SpecError) as e:
        spec(c_dtype="bf16")
    assert "c_dtype bf16 given without c_major" in str(e.value) and "set c_major to n or m" in str(e.value)


@pytest.mark.parametrize(
    ("dtype", "tile", "want_k"),
    [
        ("bf16", [128, 128], 64),
        ("fp16", [128, 128, 0], 64),
        ("e4m3", [128, 128], 128),
        ("e5m2", [64, 64, 0], 128),
    ],
)
def test_default_tile_k_is_four_mma_k_steps(dtype, tile, want_k):
    s = spec(a_dtype=dtype, b_dtype=dtype, tile=tile)
    assert s.tile[2] == want_k


def test_explicit_and_default_k_are_the_same_spec():
    assert spec(tile=[128, 256]) == spec(tile=[128, 256, 0]) == spec(tile=[128, 256, 64])
    assert spec(tile=[128, 256]) != spec(tile=[128, 256, 128])
    assert len({spec(tile=[128, 256]), spec(tile=[128, 256, 64])}) == 1  # hashable, equal hash


def test_spec_is_frozen_and_keyword_only():
    s = spec()
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.tile = (64, 64, 64)  # type: ignore[misc]
    with pytest.raises(TypeError):
        GemmSpec("bf16", "bf16", "bf16")  # type: ignore[misc]


def test_unknown_key_names_key_and_valid_keys():
    with pytest.raises(SpecError) as e:
        GemmSpec.from_row({**BASE_ROW, "tiles": [128, 128]})
    assert "tiles" in str(e.value) and "valid keys" in str(e.value) and "cluster" in str(e.value)


def test_missing_key_is_named():
    row = dict(BASE_ROW)
    del row["schedule"]
    with pytest.raises(SpecError, match="missing key.*schedule"):
        GemmSpec.from_row(row)


@pytest.mark.parametrize(
    ("field", "value", "must_mention"),
    [
        ("a_dtype", "bf8", ["a_dtype", "'bf8'", "bf16, fp16, fp32, e4m3, e5m2"]),
        ("d_dtype", 16, ["d_dtype", "16"]),
        ("a_major", "n", ["a_major", "'n'", "k, m"]),
        ("b_major", "m", ["b_major", "k, n"]),
        ("d_major", "k", ["d_major", "n, m"]),
        ("schedule", "coop", ["schedule", "'coop'", "cooperative, pingpong"]),
        ("schedule", True, ["schedule", "True"]),
        ("tile", [128], ["tile", "[128]", "[M, N]"]),
        ("tile", [128, 128, 64, 1], ["tile"]),
        ("tile", [128, "128"], ["tile"]),
        ("tile", [128, 128.0], ["tile"]),
        ("tile", [True, 128], ["tile"]),
        ("tile", [0, 128], ["tile"]),
        ("tile", [128, 128, -64], ["tile"]),
        ("tile", "128x128", ["tile"]),
        ("cluster", [2], ["cluster", "[2]"]),
        ("cluster", [0, 1], ["cluster"]),
        ("cluster", [2, 1, 1], ["cluster"]),
        ("c_dtype", "bf8", ["c_dtype", "'bf8'", "null (none), bf16"]),
        ("c_major", "k", ["c_major", "'k'", "null (none), n, m"]),
        ("fp8_fast_accum", "true", ["fp8_fast_accum", "'true'", "true, false"]),
        ("fp8_fast_accum", 1, ["fp8_fast_accum", "1"]),
        ("fp8_fast_accum", None, ["fp8_fast_accum", "None"]),
    ],
)
def test_bad_values_name_field_value_and_allowed(field, value, must_mention):
    with pytest.raises(SpecError) as e:
        spec(**{field: value})
    for text in must_mention:
        assert text in str(e.value), str(e.value)


def test_from_row_rejects_non_mapping():
    with pytest.raises(SpecError, match="mapping"):
        GemmSpec.from_row([("a_dtype", "bf16")])  # type: ignore[arg-type]


# --- naming --------------------------------------------------------------------------------------------


def test_name_format():
    assert spec().name() == BASE_ID
    s = spec(a_dtype="e4m3", b_dtype="e5m2", d_dtype="fp32", acc_dtype="fp16", a_major="m", b_major="n",
             d_major="m", tile=[64, 48], cluster=[1, 4], schedule="pingpong")  # fmt: skip
    assert s.name() == "sm90_e4m3_e5m2_fp32_fp16acc_mnm_64x48x128_c1x4_pp"


@pytest.mark.parametrize(
    ("changes", "suffix"),
    [
        ({"c_dtype": "bf16", "c_major": "n"}, "_coop_cbf16n"),
        ({"c_dtype": "fp32", "c_major": "m"}, "_coop_cfp32m"),
        ({"fp8_fast_accum": True}, "_coop_fastacc"),
        ({"c_dtype": "fp16", "c_major": "n", "fp8_fast_accum": True}, "_coop_cfp16n_fastacc"),
    ],
)
def test_optional_suffixes_follow_the_schedule_in_order(changes, suffix):
    assert spec(**changes).name() == BASE_ID.removesuffix("_coop") + suffix


def test_name_of_the_documented_example():
    example = "sm90_e4m3_e5m2_bf16_fp32acc_kkn_128x128x128_c1x1_pp_cbf16n_fastacc"
    s = GemmSpec.parse(example)
    assert (s.a_dtype, s.b_dtype, s.c_dtype, s.c_major, s.fp8_fast_accum) == (
        "e4m3",
        "e5m2",
        "bf16",
        "n",
        True,
    )
    assert s.schedule is Schedule.pingpong and s.tile == (128, 128, 128) and s.name() == example


def _every_spec_in_the_closed_sets():
    cs = [(None, None)] + [(c, m) for c in DType for m in DMajor]
    for a in DType:
        for am in AMajor:
            for sch in Schedule:
                for (c, cm), fast in zip(cs, [False, True] * len(cs)):
                    yield GemmSpec(a_dtype=a, b_dtype=DType.fp16, d_dtype=DType.fp32, a_major=am,
                                   b_major=BMajor.n, d_major=DMajor.m, tile=(256, 16, 0), cluster=(4, 1),
                                   schedule=sch, c_dtype=c, c_major=cm, fp8_fast_accum=fast)  # fmt: skip


@pytest.mark.parametrize("s", list(_every_spec_in_the_closed_sets()), ids=GemmSpec.name)
def test_parse_is_the_inverse_of_name(s):
    assert GemmSpec.parse(s.name()) == s
    assert GemmSpec.parse(s.name()).name() == s.name()


@pytest.mark.parametrize(
    ("bad_id", "must_mention"),
    [
        ("sm80_bf16_bf16_bf16_fp32acc_kkn_128x256x64_c2x1_coop", "prefix 'sm80'"),
        ("sm90_bf8_bf16_bf16_fp32acc_kkn_128x256x64_c2x1_coop", "a_dtype: bad value 'bf8'"),
        ("sm90_bf16_bf16_bf16_fp32_kkn_128x256x64_c2x1_coop", "does not end in 'acc'"),
        ("sm90_bf16_bf16_bf16_fp32acc_kk_128x256x64_c2x1_coop", "majors token"),
        ("sm90_bf16_bf16_bf16_fp32acc_nkn_128x256x64_c2x1_coop", "a_major: bad value 'n'"),
        ("sm90_bf16_bf16_bf16_fp32acc_kkn_128x256_c2x1_coop", "tile token"),
        ("sm90_bf16_bf16_bf16_fp32acc_kkn_128x256x64_2x1_coop", "cluster token"),
        ("sm90_bf16_bf16_bf16_fp32acc_kkn_128x256x64_c2x1_cooperative", "schedule token"),
        ("sm90_bf16_bf16_bf16_fp32acc_kkn_128x256x64_c2x1", "need 9"),
        ("sm90_bf16_bf16_bf16_fp32acc_kkn_128x256x64_c2x1_coop_fast", "unknown optional token 'fast'"),
        ("sm90_bf16_bf16_bf16_fp32acc_kkn_128x256x64_c2x1_coop_cbf8n", "unknown optional token 'cbf8n'"),
        ("sm90_bf16_bf16_bf16_fp32acc_kkn_128x256x64_c2x1_coop_cbf16k", "c_major: bad value 'k'"),
        ("sm90_bf16_bf16_bf16_fp32acc_kkn_128x256x64_c2x1_coop_fastacc_cbf16n", "'cbf16n' is out of order"),
        ("sm90_bf16_bf16_bf16_fp32acc_kkn_128x256x64_c2x1_coop_fastacc_fastacc", "out of order or repeated"),
        ("sm90_bf16_bf16_bf16_fp32acc_kkn_128x256x64_c2x1_coop_cbf16n_cbf16n", "out of order or repeated"),
        ("sm90_bf16_bf16_bf16_fp32acc_kkn_128x256x64_c2x1_coop_", "unknown optional token ''"),
        ("sm90_bf16_bf16_bf16_fp32acc_kkn_128x256x0_c2x1_coop", "not canonical"),
        ("sm90_bf16_bf16_bf16_fp32acc_kkn_0128x256x64_c2x1_coop", "not canonical"),
        ("sm90_bf16_bf16_bf16_fp32acc_kkn_128x256x64_c0x1_coop", "cluster: bad value"),
        ("", "need 9"),
    ],
)
def test_parse_rejects_malformed_ids_clearly(bad_id, must_mention):
    with pytest.raises(SpecError) as e:
        GemmSpec.parse(bad_id)
    assert must_mention in str(e.value)
    assert "expected sm90_" in str(e.value)


# --- JSON ----------------------------------------------------------------------------------------------


def test_to_json_matches_the_contract_and_round_trips():
    j = spec().to_json()
    assert j == {
        "a_dtype": "bf16", "b_dtype": "bf16", "d_dtype": "bf16", "acc_dtype": "fp32",
        "a_major": "k", "b_major": "k", "d_major": "n",
        "tile": [128, 256, 64], "cluster": [2, 1], "schedule": "cooperative",
        "c_dtype": None, "c_major": None, "fp8_fast_accum": False, "swap_ab": False, "k_split": "none",
        "varlen": "none", "gather_a": False,
    }  # fmt: skip
    assert all(type(v) in (str, list, type(None), bool) for v in j.values())
    assert GemmSpec.from_json(json.loads(json.dumps(j))) == spec()
    c = spec(c_dtype="bf16", c_major="m", fp8_fast_accum=True)
    jc = c.to_json()
    assert (jc["c_dtype"], jc["c_major"], jc["fp8_fast_accum"]) == ("bf16", "m", True)
    assert GemmSpec.from_json(json.loads(json.dumps(jc))) == c


@pytest.mark.parametrize("field", ["acc_dtype", "c_dtype", "c_major", "fp8_fast_accum"])
def test_from_json_requires_every_field(field):
    # The manifest writes every field; a missing one is a damaged record, not "feature off".
    j = spec().to_json()
    del j[field]
    with pytest.raises(SpecError, match=field):
        GemmSpec.from_json(j)


def test_spec_module_is_stdlib_only():
    code = (
        "import sys, runtime.spec; bad = {'yaml', 'jinja2', 'typing'} & set(sys.modules); sys.exit(len(bad))"
    )
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_dtype_facts_cover_every_dtype():
    for d in DType:
        assert d.bits in (8, 16, 32) and d.bytes * 8 == d.bits
        assert d.dlpack[1] == d.bits and d.tma_format in range(16) and d.array_name


def test_operands_follow_the_spec():
    s = spec(a_major="m", c_dtype="fp32", c_major="m")
    assert s.operands == ("a", "b", "d", "c")
    assert [s.contiguous_extent(op) for op in s.operands] == ["m", "k", "n", "m"]
    assert s.dtype_of("c") == DType.fp32 and spec().operands == ("a", "b", "d")


# --- validity ------------------------------------------------------------------------------------------

# One spec per rule that fails that rule; the coverage test below makes every new rule add a case here.
FP8 = {"a_dtype": "e4m3", "b_dtype": "e4m3", "tile": [128, 128]}
FAILING = {
    "input_dtypes": ({"a_dtype": "fp32", "b_dtype": "fp32"}, "use bf16, fp16, e4m3 or e5m2"),
    "input_widths": ({"b_dtype": "e4m3"}, "cannot mix a 16-bit with an 8-bit input"),
    "same_16bit_inputs": ({"b_dtype": "fp16"}, "16-bit inputs must have one dtype"),
    "fp8_k_major": ({**FP8, "b_major": "n"}, "fp8 WGMMA reads K-major A and B only"),
    "acc_dtype": ({"acc_dtype": "fp16"}, "fp16 accumulation takes fp16 inputs"),
    "d_dtype": ({"d_dtype": "e5m2"}, "use bf16, fp16 or fp32"),
    "c_dtype": ({"c_dtype": "e4m3", "c_major": "n"}, "8-bit C operands are not supported"),
    "fast_accum": ({"fp8_fast_accum": True}, "fast accumulation is an fp8 option"),
    "tile_m": ({"tile": [96, 128]}, "must be 64, 128, 192, 256, 320 for the cooperative schedule"),
    "tile_n": ({"tile": [128, 264]}, "must be a multiple of 8 in [8, 256]"),
    "tile_k": ({"tile": [128, 128, 48]}, "2, 4 or 8 MMA k-steps of 16 for bf16 inputs, i.e. 32, 64, 128"),
    "acc_registers": ({"tile": [256, 256]}, "256 registers of fp32 values per consumer thread"),
    "cluster_dims": ({"cluster": [3, 1]}, "must be 1, 2 or 4"),
    "cluster_size": ({"cluster": [4, 4]}, "portable cluster size of 8"),
    # 98304 B per A/B stage next to 32768 B of fp32 D and 32768 B of fp32 C: one stage
    "smem": ({"tile": [256, 128, 128], "d_dtype": "fp32", "c_dtype": "fp32", "c_major": "n"}, "need 2"),
    "swap_ab": ({"tile": [64, 8], "cluster": [1, 2], "swap_ab": True}, "run 1x1 or 2x1 clusters"),
    "k_split": ({"k_split": "split", "schedule": "pingpong"}, "split-K and stream-K run cooperative tiles"),
    "varlen": ({"varlen": "m", "d_major": "m"}, "grouped instances take row-major A and D"),
    "gather_a": ({"gather_a": True}, "gathered A belongs to grouped instances"),
}


@pytest.mark.parametrize(
    ("rule", "changes", "must_mention"),
    [
        # Branches that the FAILING case above (one a rule) leaves: the grouped forms' C and gathering.
        ("varlen", {"varlen": "m", "c_dtype": "bf16", "c_major": "m"}, "use c_major n"),
        ("gather_a", {"varlen": "k", "gather_a": True}, "use a_major m"),
        ("gather_a", {"varlen": "k", "gather_a": True, "a_major": "m", "c_dtype": "bf16", "c_major": "n"},
         "drop c_dtype"),
        # Gathering pairs: 1x2 under varlen M only, with a 128-byte k-tile row.
        ("gather_a", {"varlen": "m", "gather_a": True, "cluster": [2, 1]}, "or [1, 2] under varlen m"),
        ("gather_a", {"varlen": "k", "gather_a": True, "a_major": "m", "b_major": "n", "cluster": [1, 2]},
         "use cluster [1, 1]"),
        ("gather_a", {"varlen": "m", "gather_a": True, "cluster": [1, 2], "tile": [128, 128, 32]},
         "use tile K = 128 bytes of A"),
        # Split-K: any cluster for plain tiles, 1x1 for swap-AB ones.
        ("k_split", {"k_split": "split", "tile": [64, 8], "cluster": [2, 1], "swap_ab": True},
         "swap-AB split-K instances (decode sizes) run 1x1 clusters"),
        # Stream-K: the same reduction, so cooperative tiles without C.
        ("k_split", {"k_split": "stream", "schedule": "pingpong"}, "split-K and stream-K run cooperative"),
        ("k_split", {"k_split": "stream", "tile": [128, 256], "c_dtype": "bf16", "c_major": "n"},
         "drop c_dtype"),
    ],
)  # fmt: skip
def test_further_branches_of_rules_name_the_fix(rule, changes, must_mention):
    reason = dict(check_rules(spec(**changes)))[rule]
    assert reason is not None and must_mention in reason, reason


@pytest.mark.parametrize("cluster", [[1, 1], [2, 1], [1, 2], [2, 2]])
def test_split_k_runs_plain_cooperative_tiles_in_any_cluster(cluster):
    assert why_unsupported(spec(k_split="split", tile=[128, 128], cluster=cluster)) is None


@pytest.mark.parametrize(
    ("tile", "cluster", "swap_ab"),
    [([128, 256], [1, 1], False), ([128, 256], [1, 2], False), ([256, 128], [2, 1], False),
     ([128, 128], [2, 2], False), ([128, 176], [1, 1], True), ([128, 176], [2, 1], True)],
)  # fmt: skip
def test_stream_k_runs_cooperative_tiles_in_any_cluster_also_swapped(tile, cluster, swap_ab):
    assert why_unsupported(spec(k_split="stream", tile=tile, cluster=cluster, swap_ab=swap_ab)) is None


def test_grouped_c_and_gathered_k_combinations_that_ship_pass_every_rule():
    one = {"cluster": [1, 1]}  # grouped-K instances run 1x1 clusters
    for changes in (
        {"varlen": "m", "c_dtype": "bf16", "c_major": "n"},
        {**one, "varlen": "k", "gather_a": True, "a_major": "m", "b_major": "n"},
        {"varlen": "m", "gather_a": True, "cluster": [1, 2]},  # a gathering pair (bf16, K 64)
        {**FP8, "varlen": "m", "gather_a": True, "cluster": [1, 2]},  # e4m3, K 128
        {
            **one,
            "varlen": "k",
            "d_dtype": "fp32",
            "c_dtype": "fp32",
            "c_major": "n",
            "a_major": "m",
            "b_major": "n",
        },
    ):
        assert why_unsupported(spec(**changes)) is None, changes


def test_base_spec_passes_every_rule():
    assert why_unsupported(spec()) is None
    assert all(reason is None for _, reason in check_rules(spec()))


def test_every_rule_has_a_failing_case():
    assert set(FAILING) == {name for name, _ in validity.RULES}


@pytest.mark.parametrize("rule", list(FAILING))
def test_each_rule_can_fail_with_a_reason_naming_the_fix(rule):
    changes, must_mention = FAILING[rule]
    verdicts = dict(check_rules(spec(**changes)))
    reason = verdicts[rule]
    assert reason is not None and must_mention in reason, reason
    assert any(word in reason for word in ("use ", "give ", "set ")), f"reason names no fix: {reason}"
    assert why_unsupported(spec(**changes)) is not None


def test_why_unsupported_returns_the_first_failure():
    s = spec(a_dtype="e4m3", b_dtype="e4m3", a_major="m", tile=[256, 256])
    assert why_unsupported(s) == dict(check_rules(s))["fp8_k_major"]


# --- the kernel scope, case by case (codegen/validity.py) ----------------------------------------------

_16 = [("bf16", "bf16"), ("fp16", "fp16")]
_8 = [(a, b) for a in ("e4m3", "e5m2") for b in ("e4m3", "e5m2")]


@pytest.mark.parametrize(("a", "b"), _16 + _8)
def test_supported_input_pairs(a, b):
    assert why_unsupported(spec(a_dtype=a, b_dtype=b, d_dtype="fp32", tile=[128, 128])) is None


@pytest.mark.parametrize(("a", "b"), [("bf16", "fp16"), ("fp16", "bf16"), ("bf16", "e4m3"), ("e5m2", "fp16")])
def test_refused_input_pairs(a, b):
    assert why_unsupported(spec(a_dtype=a, b_dtype=b, d_dtype="fp32")) is not None


@pytest.mark.parametrize("majors", ["kkn", "kkm", "knn", "knm", "mkn", "mkm", "mnn", "mnm"])
def test_16bit_inputs_take_every_layout(majors):
    assert why_unsupported(spec(a_major=majors[0], b_major=majors[1], d_major=majors[2])) is None


@pytest.mark.parametrize(
    ("am", "bm", "dm", "ok"),
    [("k", "k", "n", True), ("k", "k", "m", True), ("m", "k", "n", False), ("k", "n", "n", False)],
)
def test_fp8_inputs_need_k_major_a_and_b(am, bm, dm, ok):
    s = spec(**FP8, a_major=am, b_major=bm, d_major=dm, d_dtype="bf16")
    assert (validity.fp8_k_major(s) is None) == ok


@pytest.mark.parametrize("d", ["bf16", "fp16", "fp32", "e4m3", "e5m2"])
def test_d_dtypes(d):
    assert validity.d_dtype(spec(**FP8, d_dtype=d)) is None
    assert (validity.d_dtype(spec(d_dtype=d)) is None) == (d in ("bf16", "fp16", "fp32"))


@pytest.mark.parametrize(("c", "ok"), [("bf16", True), ("fp16", True), ("fp32", True), ("e4m3", False),
                                       ("e5m2", False)])  # fmt: skip
def test_c_dtypes(c, ok):
    for major in ("n", "m"):
        assert (why_unsupported(spec(tile=[128, 128], c_dtype=c, c_major=major)) is None) == ok


def test_fast_accum_only_for_fp8():
    assert why_unsupported(spec(**FP8, fp8_fast_accum=True)) is None
    assert why_unsupported(spec(**FP8, fp8_fast_accum=False)) is None
    assert validity.fast_accum(spec(fp8_fast_accum=True)) is not None


@pytest.mark.parametrize(
    ("sched", "m", "ok"),
    [("cooperative", 64, True), ("cooperative", 128, True), ("cooperative", 192, True),
     ("cooperative", 256, True), ("cooperative", 320, True), ("pingpong", 64, True), ("pingpong", 128, True),
     ("pingpong", 192, True), ("pingpong", 256, False)],
)  # fmt: skip
def test_tile_m_per_schedule(sched, m, ok):
    s = spec(schedule=sched, tile=[m, 64])
    assert (validity.tile_m(s) is None) == ok
    if sched == "pingpong" and not ok:
        assert "must be 64, 128, 192 for the pingpong schedule" in validity.tile_m(s)


@pytest.mark.parametrize(
    ("n", "epilogue_cols"), [(8, 8), (24, 8), (72, 8), (88, 8), (136, 8), (200, 8), (96, 32)]
)
def test_tile_n_takes_multiples_of_8_and_stores_them_in_8_column_sub_tiles(n, epilogue_cols):
    # Odd multiples of 8 past 8 build since the kernel slices staged layouts under the swizzle
    # (codegen/kernels/gemm_sm90.py `_one_stage`); their epilogue stores 8-column sub-tiles.
    assert validity.tile_n(spec(tile=[128, n])) is None
    assert epilogue_tile(spec(tile=[128, n])) == (128, epilogue_cols)
    for bad in (n + 4, 260):
        assert validity.tile_n(spec(tile=[128, bad])).startswith(f"tile N {bad}: must be a multiple of 8")


@pytest.mark.parametrize(
    ("n", "ok"), [(64, True), (128, True), (160, True), (192, True), (224, False), (256, True)]
)
def test_cooperative_192_rows_take_n_up_to_192_or_split_256(n, ok):
    reason = validity.tile_n(spec(tile=[192, n]))
    assert (reason is None) == ok
    if not ok:
        assert "cannot hold one WGMMA of N > 192" in reason and "use N <= 192 or N = 256" in reason


def test_192x256_splits_its_columns_between_two_warpgroups():
    s = spec(tile=[192, 256])
    assert validity.n_split(s) and validity.mma_atom_layout(s) == (1, 2)
    assert tuple(register_plan(s)) == (2, 40, 232, 192, 0)  # each warpgroup: 192 x 128
    assert epilogue_tile(s) == (64, 32)  # each warpgroup stores its half, with its own staging buffers
    assert validity.epi_smem_bytes(s) == 2 * 64 * 32 * 2 * 4
    assert validity.mma_atom_layout(spec(tile=[192, 128])) == (3, 1)
    assert validity.mma_atom_layout(spec(tile=[192, 256], schedule="pingpong")) == (1, 1)
    assert validity.acc_registers(spec(tile=[192, 256], schedule="pingpong")) is not None  # 384 values
    assert validity.tile_n(spec(tile=[192, 256], schedule="pingpong")) is None  # acc_registers decides there


@pytest.mark.parametrize(
    ("n", "ok"), [(32, True), (64, True), (96, True), (128, True), (160, True), (144, False), (192, False)]
)
def test_cooperative_320_rows_split_columns_up_to_160(n, ok):
    s = spec(tile=[320, n])
    reason = validity.tile_n(s)
    assert (reason is None) == ok
    if ok:
        assert validity.n_split(s) and validity.mma_atom_layout(s) == (1, 2)
        assert register_plan(s).acc_regs == 320 * n // 256  # each warpgroup: 320 x N/2
        assert epilogue_tile(s) == (64, 32 if n // 2 % 32 == 0 else 16)
    else:
        assert "multiple of 32 and at most 160" in reason and "use such an N" in reason
    assert validity.tile_m(spec(tile=[320, 128], schedule="pingpong")) is not None  # 320 rows: cooperative
    assert why_unsupported(spec(**{**FP8, "tile": [320, 64]})) is None  # promoted: 2 x 80 values
    assert "fp8 promoted" in validity.acc_registers(spec(**{**FP8, "tile": [320, 128]}))


@pytest.mark.parametrize(
    ("dtype", "k", "ok"),
    [("bf16", 32, True), ("bf16", 64, True), ("bf16", 128, True), ("bf16", 256, False), ("bf16", 16, False),
     ("fp16", 96, False), ("e4m3", 64, True), ("e4m3", 128, True), ("e4m3", 256, True), ("e5m2", 32, False),
     ("e5m2", 192, False)],
)  # fmt: skip
def test_tile_k_is_2_4_or_8_mma_k_steps(dtype, k, ok):
    assert (validity.tile_k(spec(a_dtype=dtype, b_dtype=dtype, tile=[128, 128, k])) is None) == ok


@pytest.mark.parametrize(
    ("changes", "regs", "ok"),
    [
        ({"tile": [128, 256]}, 128, True),  # cooperative: two warpgroups share 128 rows
        ({"tile": [256, 128]}, 128, True),
        ({"tile": [256, 256]}, 256, False),
        ({"tile": [64, 256]}, 128, True),  # M = 64: one warpgroup owns the tile
        ({"tile": [192, 128]}, 64, True),  # M = 192: three warpgroups (160 registers each)
        ({"tile": [64, 256], "schedule": "pingpong"}, 128, True),
        ({"tile": [128, 128], "schedule": "pingpong"}, 128, True),  # pingpong: each warpgroup a whole tile
        ({"tile": [192, 128], "schedule": "pingpong"}, 192, True),
        ({"tile": [128, 256], "schedule": "pingpong"}, 256, False),
        ({**FP8, "tile": [128, 128]}, 64, True),  # fp8 promoted: 64 + 2 x 64 k-tile buffers fit in 200
        ({**FP8, "tile": [192, 128]}, 64, True),  # ... 64 + 1 x 64 fits in 128 (three warpgroups)
        ({**FP8, "tile": [64, 128]}, 64, True),
        ({**FP8, "tile": [128, 256]}, 128, False),  # ... 2 x 128 does not fit in 200
        ({**FP8, "tile": [128, 256], "fp8_fast_accum": True}, 128, True),
        ({**FP8, "tile": [128, 128], "schedule": "pingpong"}, 128, False),
        ({**FP8, "tile": [128, 128], "schedule": "pingpong", "fp8_fast_accum": True}, 128, True),
    ],
)
def test_accumulator_registers(changes, regs, ok):
    s = spec(**changes)
    assert acc_regs(s) == regs
    reason = validity.acc_registers(s)
    assert (reason is None) == ok
    if reason is not None:
        assert "65536 per SM" in reason and "232 registers per thread after setmaxnreg" in reason
        assert "the accumulators may take 200" in reason
        if s.a_dtype.is_float8 and not s.fp8_fast_accum:
            assert "at least one k-tile accumulator" in reason and "use fp8_fast_accum true" in reason


@pytest.mark.parametrize(
    ("changes", "want"),
    [
        # (consumer warpgroups, producer regs, consumer regs, acc regs, k-tile accumulator buffers)
        ({"tile": [128, 256]}, (2, 40, 232, 128, 0)),
        ({"tile": [64, 128]}, (1, 40, 232, 64, 0)),
        ({"tile": [192, 128]}, (3, 32, 160, 64, 0)),
        ({"tile": [64, 256], "schedule": "pingpong"}, (2, 40, 232, 128, 0)),
        ({**FP8, "tile": [128, 128]}, (2, 40, 232, 64, 2)),  # double-buffered promotion fits
        ({**FP8, "tile": [64, 128]}, (1, 40, 232, 64, 2)),
        ({**FP8, "tile": [192, 128]}, (3, 32, 160, 64, 1)),  # 3 x 64 > 128: one buffer
        # Two buffers are planned against the mainloop's margin: 3 x 72 = 216 <= 232 - 16, 3 x 80 > 216.
        ({**FP8, "tile": [128, 144]}, (2, 40, 232, 72, 2)),
        ({**FP8, "tile": [128, 160]}, (2, 40, 232, 80, 1)),
        ({**FP8, "tile": [128, 128], "fp8_fast_accum": True}, (2, 40, 232, 64, 0)),
    ],
)
def test_register_plan(changes, want):
    plan = register_plan(spec(**changes))
    assert tuple(plan) == want
    # The setmaxnreg split never exceeds the register file (65536 per SM, one CTA per SM).
    assert (plan.producer_regs + plan.consumer_wgs * plan.consumer_regs) * 128 <= 65536
    assert plan.acc_total <= plan.acc_limit


# --- shared memory plan --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "want"),
    [
        ({"tile": [128, 256]}, (128, 32)),
        ({"tile": [256, 128]}, (128, 32)),
        ({"tile": [128, 128]}, (128, 32)),
        ({"tile": [64, 128]}, (64, 32)),
        ({"tile": [128, 128], "schedule": "pingpong"}, (64, 32)),  # each warpgroup stores its own tile
        ({"tile": [64, 256], "schedule": "pingpong"}, (64, 32)),
        ({"tile": [192, 128]}, (192, 32)),  # three warpgroups, 64 rows each
        ({"tile": [192, 128], "schedule": "pingpong"}, (64, 32)),
    ],
)
def test_epilogue_tile(changes, want):
    assert epilogue_tile(spec(**changes)) == want


@pytest.mark.parametrize(
    ("changes", "want"),
    [
        ({"tile": [128, 256]}, (4, 4, 0)),  # 49152 B/stage; 232448 - 1024 - 32768 = 198656
        ({"tile": [128, 256], "d_dtype": "fp32"}, (4, 2, 0)),  # epilogue 2 x 16384 B
        ({"tile": [128, 128]}, (6, 4, 0)),
        ({"tile": [64, 128]}, (8, 4, 0)),  # epilogue tile 64x32: 16384 B
        ({"tile": [256, 128], "d_dtype": "fp32"}, (4, 2, 0)),
        ({"tile": [256, 256, 128]}, (1, 4, 0)),
        # C: 2 stages of a 128x32 bf16 tile = 16384 B: (232448 - 1024 - 32768 - 16384) // 49152 = 3
        ({"tile": [128, 256], "c_dtype": "bf16", "c_major": "n"}, (3, 4, 2)),
        ({"tile": [128, 128], "c_dtype": "bf16", "c_major": "m"}, (5, 4, 2)),  # 182272 // 32768
        # fp32 D and fp32 C: 32768 + 32768 B; 165888 // 49152 = 3
        ({"tile": [128, 256], "d_dtype": "fp32", "c_dtype": "fp32", "c_major": "n"}, (3, 2, 2)),
        # fp8: each input's own bits: 128x128 + 256x128 bytes = 49152 B/stage; fp8 D keeps 4 stages
        ({**FP8, "tile": [128, 256], "d_dtype": "e4m3"}, (4, 4, 0)),  # 232448 - 1024 - 16384 = 215040
        ({**FP8, "d_dtype": "bf16"}, (6, 4, 0)),
        # pingpong 64x256 bf16: 40960 B/stage, epilogue 64x32 bf16 x 4 = 16384 B: 215040 // 40960 = 5
        ({"tile": [64, 256], "schedule": "pingpong"}, (5, 4, 0)),
        # split-K keeps its arrival word in a 1024-byte slot of its own: 128 x 112 (30720 B/stage, epilogue
        # 128x16 x 4 = 16384 B) gets (232448 - 2048 - 16384) // 30720 = 6 stages; with 7 it asked the H200
        # for 233472 B, over the 232448 B limit
        ({"tile": [128, 112], "k_split": "split"}, (6, 4, 0)),
        ({"tile": [128, 112]}, (7, 4, 0)),  # 215040 // 30720
    ],
)
def test_smem_plan(changes, want):
    plan = smem_plan(spec(**changes))
    assert isinstance(plan, SmemPlan) and plan == want
    assert (plan.ab_stages, plan.epi_stages, plan.c_stages) == want


@pytest.mark.parametrize("k_split", ["none", "split", "stream"])
def test_planned_smem_bytes_fit_the_device(k_split):
    """What the build holds each kernel's shared memory to (codegen/contract.py) fits the opt-in limit."""
    for tile in ([128, 112], [128, 256], [64, 144, 128], [128, 96]):
        s = spec(tile=tile, k_split=k_split)
        plan = smem_plan(s)
        extra = 0 if k_split == "none" else validity.SPLIT_ARRIVAL_RESERVE_BYTES
        assert validity.planned_smem_bytes(s) == (
            plan.ab_stages * validity.ab_stage_bytes(s)
            + validity.epi_smem_bytes(s)
            + validity.BARRIER_RESERVE_BYTES
            + extra
        )
        assert validity.planned_smem_bytes(s) <= validity.SMEM_CAPACITY_BYTES


def test_smem_rule_agrees_with_smem_plan():
    ok, too_big = (
        spec(tile=[256, 128, 128]),
        spec(tile=[256, 128, 128], d_dtype="fp32", c_dtype="fp32", c_major="n"),
    )
    assert smem_plan(ok).ab_stages == validity.MIN_AB_STAGES and validity.smem(ok) is None
    assert smem_plan(too_big).ab_stages == 1 and validity.smem(too_big) is not None
    assert "32768 B C buffer" in validity.smem(too_big)
    assert [name for name, r in check_rules(too_big) if r is not None] == ["smem"]  # only the smem rule


# --- swap-AB ---------------------------------------------------------------------------------------------

SWAP = {"tile": [64, 8], "cluster": [1, 1], "swap_ab": True}


def test_swap_ab_id_round_trips_and_defaults_off():
    s = spec(**SWAP)
    assert s.name() == "sm90_bf16_bf16_bf16_fp32acc_kkn_64x8x64_c1x1_coop_swapab"
    assert GemmSpec.parse(s.name()) == s and not spec().swap_ab
    fp8 = spec(**{**FP8, **SWAP}, fp8_fast_accum=True)
    assert fp8.name().endswith("_fastacc_swapab") and GemmSpec.parse(fp8.name()) == fp8
    with pytest.raises(SpecError, match="out of order"):
        GemmSpec.parse("sm90_e4m3_e4m3_bf16_fp32acc_kkn_64x8x128_c1x1_coop_swapab_fastacc")


@pytest.mark.parametrize(
    "majors, kernel_majors",
    [("kkn", "kkm"), ("kkm", "kkn"), ("mnn", "mnm"), ("knm", "mkn")],
)
def test_swap_ab_kernel_spec_is_the_transposed_problem(majors, kernel_majors):
    s = spec(**SWAP, a_major=majors[0], b_major=majors[1], d_major=majors[2], c_dtype="fp32", c_major="n")
    k = s.kernel_spec()
    # The kernel's A is the caller's B (and vice versa); each majorness names the same memory order.
    assert (k.a_major, k.b_major, k.d_major) == tuple(kernel_majors) and k.c_major == "m"
    assert (k.tile, k.cluster, k.swap_ab, k.c_dtype) == (s.tile, s.cluster, False, "fp32")
    assert s.launch_operands == ("b", "a", "d", "c") and s.operands == ("a", "b", "d", "c")
    assert s.kernel_extents("d") == ("n", "m") and s.kernel_extents("a") == ("m", "k")
    assert s.problem_tile == (8, 64) and spec().problem_tile == (128, 256)
    assert s.problem_cluster == (1, 1) and spec().problem_cluster == (2, 1)
    # A swap-AB pair along the weight (kernel cluster 2x1) pairs CTAs along the caller's N.
    assert spec(**{**SWAP, "cluster": [2, 1]}).problem_cluster == (1, 2)
    plain = spec()
    assert plain.kernel_spec() is plain  # no swap: the instance is its own kernel spec


def test_swap_ab_mixed_dtypes_trade_places():
    s = spec(**{**SWAP, "tile": [64, 16]}, a_dtype="e5m2", b_dtype="e4m3")
    assert (s.kernel_spec().a_dtype, s.kernel_spec().b_dtype) == ("e4m3", "e5m2")


def test_swap_ab_rules_judge_the_kernel_spec():
    assert why_unsupported(spec(**SWAP)) is None
    # A K-major-only fp8 rule sees the kernel's operands: the caller's n-major B is the kernel's m-major A.
    bad = spec(**{**FP8, **SWAP}, b_major="n")
    assert "fp8 WGMMA reads K-major A and B only" in why_unsupported(bad)
    assert why_unsupported(spec(**{**SWAP, "tile": [64, 20]})).startswith("tile N 20")
    assert epilogue_tile(spec(**SWAP)) == (64, 8) and epilogue_tile(spec(tile=[64, 48])) == (64, 16)
