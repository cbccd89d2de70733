"""kernel_specs.yaml schema and expansion: strict errors with YAML paths, exclusions, drops, determinism."""

from __future__ import annotations

import copy
import itertools
from collections import Counter
from pathlib import Path

import pytest

from codegen.matrix import Matrix, MatrixError, load_matrix, parse_matrix
from codegen.validity import check_rules, why_unsupported
from runtime.spec import GemmSpec

REPO = Path(__file__).resolve().parents[2]
SPEC_FILE = REPO / "kernel_specs.yaml"

# Budgets, not change detectors (`python -m build_tools.regen --check` already catches any drift of the
# matrix against docs/INSTANCES.md): wheel build time and size grow linearly with the default profile, and
# the CPU test tier compiles every `ci` instance. Raising one is a decision, so it is a test edit.
# 339 + the grouped groups (issue 11, 2026-12-01) + fp16 accumulation (4) + grouped C (6) + gathered K (4)
# + ping-pong 128x192 (6) + tile N between the powers of two (35, tile_n_fit, 2026-12-01 session 8)
# + grouped tiles with multicast or 192 x 128 ping-pong (5, grouped_multicast, session 11)
# + gathering pairs (5, grouped_gather_pair, session 12)
# + swap-AB 128-row tiles for M = 256-512 (12, swap_mid16, session 15; 12, swap_mid_fp8, session 16)
# + split-K in 2x1 clusters (2, splitk_cluster, session 18)
# + stream-K bf16 tiles (6, streamk, session 21)
# + stream-K fp16 and e4m3 tiles (4, streamk; 6, streamk_fp8; session 22)
# + swap-AB tiles 192 and 256 rows along N (24, swap_wide16, session 22)
# + 64-row tiles of N 96-192 in clusters up to 2x4 (20, narrow64, session 23; fp16 twins 20, session 24)
# + their e4m3 twins (23 new of 24, narrow64_fp8, session 24)
# + swap-AB split-K tiles of M side 96-176 (6, swap_mid_splitk16; 6, swap_mid_splitk_fp8; session 25)
# + swap-AB tiles 192 and 256 rows along N for e4m3 (12, swap_wide_fp8, session 28)
# + swap-AB widths fitting mid-size M, 128 x 112-240 and 192 x 80-192 (32, swap_fit16, session 32)
# + tile N in odd multiples of 8, bf16 (9, swap_fit8; 1, pingpong_fit8; session 34)
# + their fp16 twins (10, session 35)
# + e4m3 promoted 128 x 192 (3, promoted_wide_fp8, session 35)
# + swap-AB ping-pong 128 x 104-192 (28, swap_pingpong16; 4, swap_pingpong_fp8; sessions 37-38)
DEFAULT_BUDGET = 674
CI_BUDGET = 27

# A small matrix: 2 dtypes x 2 tiles x 2 clusters = 8 candidates.
SMALL = {
    "version": 1,
    "groups": {
        "g": {
            "axes": {
                "d_dtype": "bf16",
                "a_major": "k",
                "b_major": "k",
                "d_major": "n",
                "tile": [[128, 128], [64, 128]],
                "cluster": [[1, 1], [2, 1]],
                "schedule": "cooperative",
            },
            "zip": [{"a_dtype": ["bf16", "fp16"], "b_dtype": ["bf16", "fp16"]}],
        }
    },
    "profiles": {"default": {"groups": ["g"]}},
}


def small(**edits) -> dict:
    """A deep copy of SMALL with dotted-path edits applied, e.g. small(**{"groups.g.axes.tile": ...})."""
    data = copy.deepcopy(SMALL)
    for dotted, value in edits.items():
        *parents, leaf = dotted.split(".")
        node = data
        for p in parents:
            node = node[p]
        if value is _DELETE:
            del node[leaf]
        else:
            node[leaf] = value
    return data


_DELETE = object()


def expand(data: dict, profile: str = "default", only=()) -> list[str]:
    return parse_matrix(data).expand(profile, only).names()


@pytest.fixture(scope="module")
def committed() -> Matrix:
    return load_matrix(SPEC_FILE)


# --- the committed kernel_specs.yaml -------------------------------------------------------------------


def test_committed_default_profile(committed):
    exp = committed.expand("default")
    # Every group the profile lists ships something of its own (a group wholly dropped or shadowed by an
    # earlier one is dead configuration).
    assert set(exp.group_of.values()) == set(committed.profiles["default"].groups)
    assert len(exp.specs) <= DEFAULT_BUDGET
    # What the wheel must cover at least (more is fine: these are floors, not a snapshot of the matrix).
    assert {s.a_dtype for s in exp.specs} >= {"bf16", "fp16", "e4m3", "e5m2"}
    assert {s.d_dtype for s in exp.specs} >= {"bf16", "fp16", "fp32", "e4m3", "e5m2"}
    tiles = {(128, 256), (128, 128), (64, 128), (256, 128), (64, 256), (64, 64), (64, 32)}
    tiles |= {(192, 128), (192, 256)}
    assert {s.tile[:2] for s in exp.specs} >= tiles
    assert {s.cluster for s in exp.specs} >= {(1, 1), (2, 1), (1, 2), (2, 2)}
    assert all(why_unsupported(s) is None for s in exp.specs)


def _shipped(exp, **want) -> list[GemmSpec]:
    return [s for s in exp.specs if all(getattr(s, k) == v for k, v in want.items())]


def test_committed_default_covers_every_supported_combination(committed):
    """At least one instance per dtype x layout x epilogue combination the issue asks the wheel to ship."""
    exp = committed.expand("default")
    for dt in ("bf16", "fp16"):
        for d in (dt, "fp32"):
            for am, bm, dm in itertools.product("km", "kn", "nm"):
                assert _shipped(exp, a_dtype=dt, d_dtype=d, a_major=am, b_major=bm, d_major=dm, c_dtype=None)
            for dm in "nm":  # C in D's dtype and layout
                assert _shipped(exp, a_dtype=dt, d_dtype=d, d_major=dm, c_dtype=d, c_major=dm)
        for sched in ("cooperative", "pingpong"):
            assert _shipped(exp, a_dtype=dt, schedule=sched)
    for a, b in itertools.product(("e4m3", "e5m2"), repeat=2):
        for d in ("bf16", "fp16", "fp32", "e4m3"):
            for fast in (True, False):
                assert _shipped(exp, a_dtype=a, b_dtype=b, d_dtype=d, d_major="n", fp8_fast_accum=fast)
        assert _shipped(exp, a_dtype=a, b_dtype=b, d_dtype="bf16", d_major="m")
    for fast in (True, False):
        assert _shipped(exp, a_dtype="e4m3", c_dtype="bf16", fp8_fast_accum=fast)
        assert _shipped(exp, d_dtype="e5m2", fp8_fast_accum=fast)
        assert _shipped(exp, a_dtype="e4m3", tile=(192, 128, 128), fp8_fast_accum=fast)
    assert _shipped(exp, a_dtype="e4m3", schedule="pingpong", fp8_fast_accum=True)
    # C with its own dtype or layout: an fp32 C into a 16-bit D, a transposed C, a 16-bit C into an fp32 D
    assert _shipped(exp, a_dtype="bf16", d_dtype="bf16", c_dtype="fp32")
    assert _shipped(exp, a_dtype="bf16", d_major="n", c_major="m")
    assert _shipped(exp, a_dtype="fp16", d_dtype="fp32", c_dtype="fp16")
    for dt in ("bf16", "fp16"):
        for sched in ("cooperative", "pingpong"):
            assert _shipped(exp, a_dtype=dt, tile=(192, 128, 64), schedule=sched)


def test_committed_ci_profile_covers_each_feature_within_budget(committed):
    """The `ci` profile is the smoke subset the CPU tier compiles and checks against the oracle: each
    feature of the default profile once (kernel_specs.yaml says which), in a bounded number of instances."""
    ci = committed.expand("ci")
    default = committed.expand("default")
    assert set(ci.names()) <= set(default.names())
    assert len(ci.specs) <= CI_BUDGET
    specs = ci.specs
    assert {"bf16", "fp16"} <= {s.a_dtype for s in specs}
    assert {s.d_dtype.bits for s in specs} == {s.d_dtype.bits for s in default.specs}  # fp32, 16-bit, fp8 out
    assert {s.cluster for s in specs} == {s.cluster for s in default.specs}
    assert {s.schedule for s in specs} == {s.schedule for s in default.specs}
    assert {s.tile[0] for s in specs} >= {64, 128, 192}  # one, two and three consumer warpgroups
    assert any(s.a_major == "m" for s in specs) and any(s.b_major == "n" for s in specs)
    assert any(s.d_major == "m" for s in specs)
    assert any(s.a_dtype.is_float8 and s.a_dtype != s.b_dtype for s in specs)  # mixed fp8 inputs
    fp8 = [s for s in specs if s.a_dtype.is_float8]
    assert {s.fp8_fast_accum for s in fp8} == {False, True}
    assert any(s.has_c for s in specs) and any(not s.has_c for s in specs)
    # A swap-AB pair: its cluster counts along the caller's N (GemmSpec.problem_cluster), which the oracle
    # holds byte for byte against the DSL's host code.
    assert any(s.swap_ab and s.cluster == (2, 1) for s in specs)


def test_committed_full_profile_is_everything_the_kernel_builds_at_scale(committed):
    """The `full` profile (build at scale, not shipped): the default profile plus full_* groups that widen
    the axes to every value the validity rules accept; what those groups drop is the rules' refusals, plus
    the one exclude entry for specs the rules accept but that spill (kernel_specs.yaml full_tiles)."""
    full = committed.expand("full")
    default = committed.expand("default")
    assert len(full.specs) >= 1000
    assert set(default.names()) <= set(full.names())
    assert all(why_unsupported(s) is None for s in full.specs)
    own = [g for g in committed.profiles["full"].groups if g not in committed.profiles["default"].groups]
    assert own and all(g.startswith("full_") for g in own)
    rules = {name for name, _ in check_rules(full.specs[0])}
    for g in own:
        dropped = committed.expand_group(g).dropped
        assert all(d.rule in rules or d.rule == "groups.full_tiles.exclude[0]" for d in dropped), g
    specs = full.specs
    # every dtype pairing the rules accept, fp8 fast and promoted, every output
    pairs = {(s.a_dtype, s.b_dtype) for s in specs}
    assert pairs == {("bf16", "bf16"), ("fp16", "fp16")} | set(itertools.product(("e4m3", "e5m2"), repeat=2))
    assert {s.d_dtype for s in specs} == {"bf16", "fp16", "fp32", "e4m3", "e5m2"}
    assert {s.fp8_fast_accum for s in specs if s.a_dtype.is_float8} == {False, True}
    # every layout, C dtype and major, schedule and cluster shape
    assert {(s.a_major, s.b_major, s.d_major) for s in specs} == set(itertools.product("km", "kn", "nm"))
    c_layouts = {(s.c_dtype, s.c_major) for s in specs if s.has_c}
    assert c_layouts == set(itertools.product(("bf16", "fp16", "fp32"), "nm"))
    assert {s.schedule for s in specs} == {"cooperative", "pingpong"}
    assert {s.cluster for s in specs} == {(1, 1), (2, 1), (1, 2), (2, 2), (4, 1), (1, 4), (2, 4)}
    assert {s.tile[:2] for s in specs} >= {s.tile[:2] for s in default.specs}


@pytest.mark.parametrize("profile", ["default", "ci", "full"])
def test_every_expanded_name_round_trips(committed, profile):
    exp = committed.expand(profile)
    for s in exp.specs + [d for d, _ in exp.dropped]:
        assert GemmSpec.parse(s.name()) == s


@pytest.mark.parametrize("profile", ["default", "ci", "full"])
def test_expansion_is_deterministic_sorted_and_unique(profile):
    first = load_matrix(SPEC_FILE).expand(profile)
    second = load_matrix(SPEC_FILE).expand(profile)
    assert first == second
    names = first.names()
    assert names == sorted(names) and len(set(names)) == len(names)
    dropped = [s.name() for s, _ in first.dropped]
    assert dropped == sorted(dropped) and not set(dropped) & set(names)


# --- expansion semantics -------------------------------------------------------------------------------


def test_product_of_axes_and_zip():
    names = expand(SMALL)
    assert len(names) == 8
    assert "sm90_fp16_fp16_bf16_fp32acc_kkn_64x128x64_c2x1_coop" in names
    assert not any("_bf16_fp16_" in n or "_fp16_bf16_bf16" in n for n in names)  # zip: a and b vary together


def test_scalar_tile_is_one_value():
    names = expand(small(**{"groups.g.axes.tile": [128, 128]}))
    assert len(names) == 4 and all("_128x128x64_" in n for n in names)


def test_exclude_drops_matching_instances_with_a_reason():
    data = small(
        **{
            "groups.g.exclude": [
                {"tile": [64, 128], "cluster": [2, 1]},
                {"a_dtype": "fp16", "cluster": [[1, 1]]},
            ]
        }
    )
    exp = parse_matrix(data).expand("default")
    assert len(exp.specs) == 8 - 2 - 2  # exclude[0]: both dtypes; exclude[1]: both tiles
    reasons = {s.name(): r for s, r in exp.dropped}
    assert reasons["sm90_bf16_bf16_bf16_fp32acc_kkn_64x128x64_c2x1_coop"].startswith(
        "excluded by groups.g.exclude[0]"
    )
    assert reasons["sm90_fp16_fp16_bf16_fp32acc_kkn_128x128x64_c1x1_coop"].startswith(
        "excluded by groups.g.exclude[1]"
    )


def test_exclude_tile_k_defaults_like_axes():
    data = small(**{"groups.g.exclude": [{"tile": [64, 128, 64]}]})
    assert len(expand(data)) == 4


def test_unsupported_combinations_are_dropped_with_the_validity_reason():
    data = small(**{"groups.g.axes.fp8_fast_accum": [False, True]})
    exp = parse_matrix(data).expand("default")
    assert len(exp.specs) == 8 and len(exp.dropped) == 8
    assert all(s.fp8_fast_accum and "fast accumulation is an fp8 option" in r for s, r in exp.dropped)


def test_c_dtype_null_is_a_value_and_c_major_applies_only_with_c():
    data = small(**{"groups.g.axes.c_dtype": [None, "bf16"], "groups.g.axes.c_major": ["n", "m"]})
    names = expand(data)
    assert len(names) == 8 * 3  # no C, C n-major, C m-major
    assert sum(n.endswith("_coop") for n in names) == 8
    assert (
        sum(n.endswith("_coop_cbf16n") for n in names) == sum(n.endswith("_coop_cbf16m") for n in names) == 8
    )
    specs = parse_matrix(data).expand("default").specs
    assert all((s.c_major is None) == (s.c_dtype is None) for s in specs)


def test_c_fields_zip_with_d_and_fp8_fast_accum_is_an_axis():
    data = small(
        **{
            "groups.g.axes.d_dtype": _DELETE,
            "groups.g.axes.d_major": _DELETE,
            "groups.g.axes.tile": [128, 128],
            "groups.g.axes.cluster": [1, 1],
            "groups.g.zip": [
                {"a_dtype": ["e4m3", "e5m2"], "b_dtype": ["e4m3", "e4m3"]},
                {"d_dtype": ["bf16", "fp32"], "c_dtype": ["bf16", "fp32"]},
                {"d_major": ["n", "m"], "c_major": ["n", "m"]},
            ],
            "groups.g.axes.fp8_fast_accum": [True, False],
        }
    )
    names = expand(data)
    assert len(names) == 2 * 2 * 2 * 2
    assert "sm90_e5m2_e4m3_fp32_fp32acc_kkm_128x128x128_c1x1_coop_cfp32m_fastacc" in names
    assert "sm90_e4m3_e4m3_bf16_fp32acc_kkn_128x128x128_c1x1_coop_cbf16n" in names


def test_c_dtype_without_c_major_names_the_group_and_the_fix():
    data = small(**{"groups.g.axes.c_dtype": ["bf16"]})
    with pytest.raises(MatrixError) as e:
        expand(data)
    msg = str(e.value)
    assert msg.startswith("groups.g: the combination {") and "c_dtype: bf16" in msg
    assert "given without c_major" in msg and "set c_major to n or m" in msg


def test_exclude_matches_null_c_and_bool_fields():
    data = small(
        **{
            "groups.g.axes.c_dtype": [None, "bf16"],
            "groups.g.axes.c_major": "n",
            "groups.g.exclude": [{"c_dtype": None, "a_dtype": "fp16"}],
        }
    )
    exp = parse_matrix(data).expand("default")
    assert len(exp.specs) == 16 - 4
    reason = {s.name(): r for s, r in exp.dropped}
    assert reason["sm90_fp16_fp16_bf16_fp32acc_kkn_128x128x64_c1x1_coop"] == (
        "excluded by groups.g.exclude[0] {c_dtype: null, a_dtype: fp16}"
    )


def test_group_of_records_the_first_group_that_ships_an_instance():
    data = small()
    data["groups"]["h"] = copy.deepcopy(data["groups"]["g"])
    data["groups"]["h"]["axes"]["tile"] = [[128, 128], [128, 256]]
    data["profiles"]["default"]["groups"] = ["g", "h"]
    exp = parse_matrix(data).expand("default")
    assert Counter(exp.group_of.values()) == {"g": 8, "h": 4}
    assert list(exp.group_of) == exp.names()


def test_instance_from_two_groups_appears_once_and_kept_wins_over_dropped():
    data = small()
    data["groups"]["h"] = copy.deepcopy(data["groups"]["g"])
    data["groups"]["h"]["exclude"] = [{"a_dtype": "bf16"}]
    data["profiles"]["default"]["groups"] = ["h", "g"]  # h drops bf16, g ships it
    exp = parse_matrix(data).expand("default")
    assert len(exp.names()) == 8 and exp.dropped == []


def test_profile_kernel_globs_filter_and_only_globs_narrow_further():
    data = small(**{"profiles.ci": {"groups": ["g"], "kernels": ["sm90_bf16_*", "sm90_fp16_*_c2x1_coop"]}})
    assert len(expand(data, "ci")) == 4 + 2
    assert expand(data, "ci", only=["*_64x128x64_*"]) == [
        "sm90_bf16_bf16_bf16_fp32acc_kkn_64x128x64_c1x1_coop",
        "sm90_bf16_bf16_bf16_fp32acc_kkn_64x128x64_c2x1_coop",
        "sm90_fp16_fp16_bf16_fp32acc_kkn_64x128x64_c2x1_coop",
    ]


def test_only_globs_matching_nothing_is_an_error():
    with pytest.raises(MatrixError, match="matches"):
        expand(SMALL, only=["sm90_e4m3*"])


# --- errors name their path ----------------------------------------------------------------------------


ZIP2 = {"a_dtype": ["bf16", "fp16"], "b_dtype": ["bf16"]}
SCHEMA_ERRORS = [
    ({"extra": 1}, "extra: unknown key; expected one of version, groups, profiles"),
    ({"version": 2}, "version: 2 is not supported"),
    ({"groups": {}}, "groups: must not be empty"),
    ({"groups.g.axis": {}}, "groups.g.axis: unknown key; expected one of axes, zip, exclude"),
    ({"groups.g.axes.tiles": [[128, 128]]}, "groups.g.axes.tiles: unknown key; expected one of a_dtype"),
    ({"groups.g.axes.tile": [[128, 128], [128, 0]]}, "groups.g.axes.tile[1]: tile: bad value [128, 0]"),
    ({"groups.g.axes.d_dtype": ["bf16", "bf8"]}, "groups.g.axes.d_dtype[1]: d_dtype: bad value 'bf8'"),
    ({"groups.g.axes.d_dtype": []}, "groups.g.axes.d_dtype: empty list"),
    ({"groups.g.axes.c_dtype": ["bf16", "e3m4"]}, "groups.g.axes.c_dtype[1]: c_dtype: bad value 'e3m4'"),
    (
        {"groups.g.axes.fp8_fast_accum": "yes"},
        "groups.g.axes.fp8_fast_accum: fp8_fast_accum: bad value 'yes'",
    ),
    ({"groups.g.axes.schedule": _DELETE}, "groups.g: no value for schedule"),
    (
        {"groups.g.axes.a_dtype": "bf16"},
        "groups.g.zip[0].a_dtype: a_dtype is already given at groups.g.axes.a_dtype",
    ),
    (
        {"groups.g.zip": [ZIP2]},
        "groups.g.zip[0]: zipped lists must have equal lengths, got a_dtype: 2, b_dtype: 1",
    ),
    (
        {"groups.g.zip": [{"a_dtype": "bf16", "b_dtype": ["bf16"]}]},
        "groups.g.zip[0].a_dtype: zip values must be a non-empty list",
    ),
    (
        {"groups.g.zip": [{"a_dtype": ["bf16"], "b_dtype": ["bf16"], "nope": [1]}]},
        "groups.g.zip[0].nope: unknown key",
    ),
    (
        {"groups.g.exclude": [{"tile": [64, 128], "clusters": [2, 1]}]},
        "groups.g.exclude[0].clusters: unknown key",
    ),
    ({"groups.g.exclude": [{"tile": [64, 256]}]}, "groups.g.exclude[0]: matches no instance of group g"),
    ({"groups.g.exclude": {"tile": [64, 128]}}, "groups.g.exclude: must be a list"),
    (
        {"profiles.default": {"groups": ["g", "nope"]}},
        "profiles.default.groups: unknown group 'nope'; known groups: g",
    ),
    ({"profiles.default": {"groups": []}}, "profiles.default.groups: must be a non-empty list"),
    (
        {"profiles.default": {"groups": ["g", "g"]}},
        "profiles.default.groups[1]: group 'g' is listed twice in profile default; list each group once",
    ),
    ({"profiles.default": {"groups": ["g"], "kernel": []}}, "profiles.default.kernel: unknown key"),
    (
        {"profiles.default": {"groups": ["g"], "kernels": ["sm90_bogus"]}},
        "profiles.default.kernels[0]: malformed instance id",
    ),
]


@pytest.mark.parametrize(("edits", "message"), SCHEMA_ERRORS)
def test_schema_errors_name_the_yaml_path(edits, message):
    with pytest.raises(MatrixError) as e:
        expand(small(**edits))
    assert message in str(e.value), str(e.value)


def test_unknown_profile():
    with pytest.raises(MatrixError, match="profiles.nope: no such profile; known: default"):
        expand(SMALL, "nope")


def test_profile_expanding_to_zero_instances_is_an_error():
    data = small(**{"groups.g.exclude": [{"a_dtype": ["bf16", "fp16"]}]})
    with pytest.raises(MatrixError, match="profiles.default: expands to zero instances"):
        expand(data)
    # regen documents (and warns about) an empty profile instead
    exp = parse_matrix(data).expand("default", allow_empty=True)
    assert exp.specs == [] and len(exp.dropped) == 8


def test_exact_kernel_that_is_unsupported_is_an_error_with_the_reason():
    fast = "sm90_bf16_bf16_bf16_fp32acc_kkn_128x128x64_c1x1_coop_fastacc"
    data = small(**{"groups.g.axes.fp8_fast_accum": [False, True], "profiles.default.kernels": [fast]})
    with pytest.raises(
        MatrixError, match=r"kernels\[0\]: .*_fastacc is not shipped: fp8_fast_accum with bf16 inputs"
    ):
        expand(data)


def test_exact_kernel_that_is_excluded_or_absent_is_an_error():
    fp16_id = "sm90_fp16_fp16_bf16_fp32acc_kkn_128x128x64_c1x1_coop"
    excluded = small(**{"groups.g.exclude": [{"a_dtype": "fp16"}], "profiles.default.kernels": [fp16_id]})
    with pytest.raises(MatrixError, match="is not shipped: excluded by groups.g.exclude"):
        expand(excluded)
    absent = small(**{"profiles.default.kernels": ["sm90_bf16_bf16_bf16_fp32acc_kkn_256x128x64_c1x1_coop"]})
    with pytest.raises(MatrixError, match="is not produced by groups g"):
        expand(absent)


def test_profile_glob_matching_nothing_is_an_error():
    data = small(**{"profiles.default.kernels": ["sm90_bf16_*", "sm90_e4m3_*"]})
    with pytest.raises(MatrixError, match=r"kernels\[1\]: glob 'sm90_e4m3_\*' matches no instance"):
        expand(data)


def test_yaml_duplicate_keys_and_syntax_errors(tmp_path):
    dup = tmp_path / "dup.yaml"
    dup.write_text("version: 1\nversion: 1\ngroups: {}\nprofiles: {}\n")
    with pytest.raises(MatrixError, match="duplicate key 'version'"):
        load_matrix(dup)
    broken = tmp_path / "broken.yaml"
    broken.write_text("version: [1\n")
    with pytest.raises(MatrixError, match="not valid YAML"):
        load_matrix(broken)


# --- per-group drops: the rule and its reason, recorded by the expansion ---------------------------------


def test_expand_group_records_the_rule_and_reason_of_each_drop():
    data = small(
        **{
            "groups.g.axes.tile": [[128, 128], [256, 256]],
            "groups.g.axes.cluster": [[1, 1], [4, 4]],
            "groups.g.exclude": [{"a_dtype": "fp16", "tile": [128, 128]}],
        }
    )
    g = parse_matrix(data).expand_group("g")
    assert g.name == "g" and g.n_combinations == 8
    assert [s.name() for s in g.specs] == ["sm90_bf16_bf16_bf16_fp32acc_kkn_128x128x64_c1x1_coop"]
    names = [d.spec.name() for d in g.dropped]
    assert names == sorted(names) and len(set(names)) == 7
    rules = {d.spec.name(): d.rule for d in g.dropped}
    # a validity rule wins over an exclude entry: fp16 128x128 c4x4 counts under cluster_size
    assert Counter(rules.values()) == {"acc_registers": 4, "cluster_size": 2, "groups.g.exclude[0]": 1}
    for d in g.dropped:
        if d.excluded:  # an exclude entry's path, its reason rendered from the entry
            assert d.reason == "excluded by groups.g.exclude[0] {a_dtype: fp16, tile: [128, 128]}"
        else:  # the first failing codegen.validity rule and its own message, never re-derived
            assert d.reason == why_unsupported(d.spec) == dict(check_rules(d.spec))[d.rule]
    # the profile's expansion keeps the same reasons
    exp = parse_matrix(data).expand("default")
    assert exp.dropped == [(d.spec, d.reason) for d in g.dropped]


def test_validity_wins_over_exclude_and_each_id_is_dropped_once():
    data = small(**{"groups.g.axes.c_dtype": None, "groups.g.axes.c_major": ["n", "m"]})  # rows repeat
    g = parse_matrix(data).expand_group("g")
    assert len(g.specs) == 8 and g.dropped == []
    data = small(**{"groups.g.axes.fp8_fast_accum": True, "groups.g.exclude": [{"a_dtype": "fp16"}]})
    g = parse_matrix(data).expand_group("g")
    assert g.specs == [] and {d.rule for d in g.dropped} == {"fast_accum"}


def test_expand_group_of_an_unknown_group():
    with pytest.raises(MatrixError, match="groups.nope: no such group; known: g"):
        parse_matrix(SMALL).expand_group("nope")


def test_committed_groups_drop_only_for_known_reasons(committed):
    """Every group ships something; what the committed spec drops is the fp8 promoted accumulator limit
    (acc_registers) and its own exclude entries: a new kind of drop shows up here and in regen's summary.
    The `full` profile's own groups (full_*) leave the product to every rule on purpose: the full-profile
    test checks theirs."""
    for name in committed.groups:
        g = committed.expand_group(name)
        if name.startswith("full_"):
            continue
        assert g.specs, name
        assert all(d.rule == "acc_registers" or d.excluded for d in g.dropped), name


def test_every_shipped_stream_k_instance_fits_gemms_workspace(committed):
    """A stream-K instance's workspace is one size for every problem; gemm() runs it without one (every
    tile whole, no sharing) where that size passes runtime/workspace.CAPACITY, so every shipped one must
    fit."""
    from runtime import scheduling, workspace

    stream = [s for s in committed.expand("default").specs if s.k_split == "stream"]
    assert stream
    for spec in stream:
        assert scheduling.stream_workspace_bytes(*spec.tile[:2]) <= workspace.CAPACITY, spec.id


def test_every_shipped_split_k_instance_fits_gemms_workspace_at_its_default_split(committed):
    """gemm() owns one workspace of runtime/workspace.CAPACITY bytes per stream and falls back to one split
    where a launch needs more: at the default split count (at most one wave of 132 units) no shipped
    split-K instance may need more, for any problem."""
    from runtime import scheduling, workspace

    split = [s for s in committed.expand("default").specs if s.k_split == "split"]
    assert split
    for spec in split:
        tile_m, tile_n, tile_k = spec.tile
        worst = 0
        for tiles in range(1, scheduling.SPLIT_TARGET_UNITS + 1):
            for k_tile_count in (1, 4, 63, 64, 10_000):
                splits = scheduling.default_k_splits(tiles, k_tile_count)
                assert tiles * splits <= max(tiles, scheduling.SPLIT_TARGET_UNITS)
                worst = max(worst, scheduling.split_workspace_bytes(tiles, splits, tile_m, tile_n))
        assert worst <= workspace.CAPACITY, (spec.id, worst)
