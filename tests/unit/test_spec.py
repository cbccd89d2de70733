"""GemmSpec: strict parsing, canonical ids and their inverse, JSON round trip, validity rules, smem plan."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from codegen import validity
from codegen.spec import AMajor, BMajor, DMajor, DType, GemmSpec, Schedule, SpecError
from codegen.validity import check_rules, smem_plan, why_unsupported

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


def _every_spec_in_the_closed_sets():
    for a in DType:
        for am in AMajor:
            for sch in Schedule:
                yield GemmSpec(a_dtype=a, b_dtype=DType.fp16, d_dtype=DType.fp32, a_major=am,
                               b_major=BMajor.n, d_major=DMajor.m, tile=(256, 16, 0), cluster=(4, 1),
                               schedule=sch)  # fmt: skip


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
        ("sm90_bf16_bf16_bf16_fp32acc_kkn_128x256x64_c2x1_coop_fastacc", "unknown optional token(s) fastacc"),
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
    }  # fmt: skip
    assert all(type(v) in (str, list) for v in j.values())
    assert GemmSpec.from_json(json.loads(json.dumps(j))) == spec()


def test_from_json_requires_every_field():
    j = spec().to_json()
    del j["acc_dtype"]
    with pytest.raises(SpecError, match="acc_dtype"):
        GemmSpec.from_json(j)


def test_spec_module_is_stdlib_only():
    code = "import sys, codegen.spec; bad = {'yaml', 'jinja2'} & set(sys.modules); sys.exit(len(bad))"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


# --- validity ------------------------------------------------------------------------------------------

# One spec per rule that fails that rule; the coverage test below makes every new rule add a case here.
FAILING = {
    "input_dtypes": ({"a_dtype": "e4m3", "b_dtype": "e4m3"}, "fp8 inputs: not yet supported"),
    "same_input_dtype": ({"b_dtype": "fp16"}, "mixed-input"),
    "d_dtype": ({"d_dtype": "e5m2"}, "use bf16, fp16 or fp32"),
    "acc_dtype": ({"acc_dtype": "fp16"}, "only fp32 accumulation"),
    "a_major": ({"a_major": "m"}, "not yet supported"),
    "b_major": ({"b_major": "n"}, "not yet supported"),
    "d_major": ({"d_major": "m"}, "not yet supported"),
    "tile_m": ({"tile": [192, 128]}, "must be 64, 128 or 256"),
    "tile_n": ({"tile": [128, 272]}, "multiple of 32 in [32, 256]"),
    "tile_k": ({"tile": [128, 128, 32]}, "must be 64 for bf16"),
    "schedule": ({"schedule": "pingpong"}, "pingpong: not yet supported"),
    "cluster_dims": ({"cluster": [3, 1]}, "must be 1, 2 or 4"),
    "cluster_size": ({"cluster": [4, 2]}, "limit of 4"),
    "smem": ({"tile": [256, 256, 128]}, "need 2"),
}


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
    assert any(word in reason for word in ("use ", "give ")), f"reason names no fix: {reason}"
    assert why_unsupported(spec(**changes)) is not None


def test_why_unsupported_returns_the_first_failure():
    s = spec(a_dtype="e4m3", b_dtype="e4m3", schedule="pingpong")
    assert why_unsupported(s) == dict(check_rules(s))["input_dtypes"]


@pytest.mark.parametrize(
    ("changes", "want"),
    [
        ({"tile": [128, 256]}, (4, 4)),  # 49152 B/stage; 232448 - 1024 - 32768 = 198656
        ({"tile": [128, 256], "d_dtype": "fp32"}, (4, 2)),  # epilogue 2 x 16384 B
        ({"tile": [128, 128]}, (6, 4)),
        ({"tile": [64, 128]}, (8, 4)),  # epilogue tile 64x32: 16384 B
        ({"tile": [256, 128], "d_dtype": "fp32"}, (4, 2)),
        ({"tile": [256, 256, 128]}, (1, 4)),
    ],
)
def test_smem_plan(changes, want):
    assert smem_plan(spec(**changes)) == want


def test_smem_rule_agrees_with_smem_plan():
    ok, too_big = spec(tile=[256, 256]), spec(tile=[256, 256, 128])
    assert smem_plan(ok)[0] >= validity.MIN_AB_STAGES and validity.smem(ok) is None
    assert smem_plan(too_big)[0] < validity.MIN_AB_STAGES and validity.smem(too_big) is not None
