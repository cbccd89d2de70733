"""`python -m build_tools.regen`: drift check on the committed tree, writes, --list and --explain.

Tests that edit files work on a copy in tmp_path (--spec points there; derived files live beside it).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from build_tools.regen import derived_files, main
from codegen.matrix import load_matrix

REPO = Path(__file__).resolve().parents[2]
DOC = Path("docs/INSTANCES.md")
KNOWN = "sm90_bf16_bf16_bf16_fp32acc_kkn_128x256x64_c2x1_coop"
EXCLUDED = "sm90_bf16_bf16_fp16_fp32acc_kkn_128x256x64_c2x1_coop"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of kernel_specs.yaml and its derived files."""
    shutil.copy(REPO / "kernel_specs.yaml", tmp_path / "kernel_specs.yaml")
    for rel in derived_files(load_matrix(REPO / "kernel_specs.yaml")):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / rel, tmp_path / rel)
    return tmp_path


def run(tree: Path, *argv: str) -> int:
    return main(["--spec", str(tree / "kernel_specs.yaml"), *argv])


# --- derived files -------------------------------------------------------------------------------------


def test_check_passes_on_the_committed_tree(capsys):
    assert main(["--check"]) == 0, capsys.readouterr().out


def test_derived_files_are_relative_and_include_instances_doc():
    files = derived_files(load_matrix(REPO / "kernel_specs.yaml"))
    assert DOC in files and all(not p.is_absolute() for p in files)


def test_check_fails_with_a_diff_when_the_doc_is_edited(tree, capsys):
    real_before = (REPO / DOC).read_bytes()
    doc = tree / DOC
    doc.write_text(doc.read_text().replace("| 6, 4, 0 |", "| 7, 4, 0 |", 1))
    assert run(tree, "--check") == 1
    out, err = capsys.readouterr()
    assert f"--- a/{DOC}" in out and "-| `sm90_" in out and "| 7, 4, 0 |" in out
    assert "stale" in err
    # a plain run repairs the copy, after which --check passes; the real doc was never touched
    assert run(tree) == 0
    assert run(tree, "--check") == 0
    assert doc.read_bytes() == real_before == (REPO / DOC).read_bytes()


def test_check_fails_when_the_spec_changes(tree, capsys):
    spec = tree / "kernel_specs.yaml"
    text = spec.read_text()
    assert "[256, 128], " in text
    spec.write_text(text.replace("[256, 128], ", "", 1))
    assert run(tree, "--check") == 1
    assert "-| `sm90_bf16_bf16_bf16_fp32acc_kkn_256x128x64_c1x1_coop`" in capsys.readouterr().out


def test_check_is_byte_exact(tree):
    doc = tree / DOC
    doc.write_bytes(doc.read_bytes().rstrip(b"\n"))  # only the final newline differs
    assert run(tree, "--check") == 1


def test_check_fails_when_the_doc_is_missing(tree):
    (tree / DOC).unlink()
    assert run(tree, "--check") == 1


def test_write_is_byte_stable_and_skips_unchanged_files(tree, capsys):
    (tree / DOC).unlink()
    assert run(tree) == 0
    assert f"wrote {DOC}" in capsys.readouterr().out
    first = (tree / DOC).read_bytes()
    mtime = (tree / DOC).stat().st_mtime_ns
    assert run(tree) == 0
    assert "up to date" in capsys.readouterr().out
    assert (tree / DOC).read_bytes() == first and (tree / DOC).stat().st_mtime_ns == mtime
    assert first == (REPO / DOC).read_bytes()


def test_invalid_spec_exits_2_with_the_yaml_path(tree, capsys):
    spec = tree / "kernel_specs.yaml"
    spec.write_text(spec.read_text().replace("d_major: n", "d_majr: n"))
    assert run(tree, "--check") == 2
    assert "groups.dense16.axes.d_majr: unknown key" in capsys.readouterr().err


# --- --list --------------------------------------------------------------------------------------------


def test_list_default_profile(capsys):
    assert main(["--list"]) == 0
    ids = capsys.readouterr().out.split()
    assert ids == load_matrix(REPO / "kernel_specs.yaml").expand("default").names()


def test_list_ci_profile_and_kernel_globs(capsys):
    assert main(["--list", "--profile", "ci"]) == 0
    assert capsys.readouterr().out.split() == load_matrix(REPO / "kernel_specs.yaml").expand("ci").names()
    assert (
        main(["--list", "--kernels", "sm90_fp16_*_64x128x64_*", "*_bf16_fp32acc_*_256x128x64_c2x2_coop"]) == 0
    )
    assert capsys.readouterr().out.split() == [
        "sm90_bf16_bf16_bf16_fp32acc_kkn_256x128x64_c2x2_coop",
        "sm90_fp16_fp16_fp16_fp32acc_kkn_64x128x64_c1x1_coop",
        "sm90_fp16_fp16_fp16_fp32acc_kkn_64x128x64_c1x2_coop",
        "sm90_fp16_fp16_fp32_fp32acc_kkn_64x128x64_c1x1_coop",
        "sm90_fp16_fp16_fp32_fp32acc_kkn_64x128x64_c1x2_coop",
    ]


def test_list_errors(capsys):
    assert main(["--list", "--kernels", "nothing*"]) == 2
    assert main(["--list", "--profile", "nope"]) == 2
    assert "no such profile" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["--check", "--kernels", "sm90_*"])  # --kernels only filters --list
    assert e.value.code == 2


def test_runs_as_a_module():
    r = subprocess.run(
        [sys.executable, "-m", "build_tools.regen", "--list", "--profile", "ci"],
        cwd=REPO, capture_output=True, text=True,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == load_matrix(REPO / "kernel_specs.yaml").expand("ci").names()


# --- --explain -----------------------------------------------------------------------------------------


def test_explain_known_id_without_manifest(tree, capsys):
    assert run(tree, "--explain", KNOWN) == 0
    out = capsys.readouterr().out
    assert "shipped in profiles: default" in out
    assert "group dense16: kept; left out by the kernels: list of ci" in out
    assert "tile: [128, 256, 64]" in out
    assert "c_dtype: null" in out and "c_major: null" in out and "fp8_fast_accum: false" in out
    assert "pass  acc_registers" in out and "FAIL" not in out
    assert "registers: 2 consumer warpgroup(s) x 232 per thread, producer 40 (setmaxnreg)" in out
    assert "accumulator: 128 fp32 registers per consumer thread (limit 200" in out
    assert "A/B stage: 128x64 bf16 + 256x64 bf16 = 49152 B" in out
    assert "D epilogue: 128x32 bf16 tile x 4 stages = 32768 B" in out
    assert "C epilogue: none (no C operand)" in out
    assert "A/B budget: 232448 - 1024 (barriers) - 32768 (D) = 198656 B" in out
    assert "-> SmemPlan(ab_stages=4, epi_stages=4, c_stages=0); A/B ring 196608 B" in out
    assert "no built manifest" in out and "--manifest PATH" in out


def test_explain_shows_the_c_operand_and_fp8_accumulation(tree, capsys):
    with_c = "sm90_bf16_bf16_bf16_fp32acc_kkm_128x256x64_c1x1_coop_cbf16m"
    assert run(tree, "--explain", with_c) == 0
    out = capsys.readouterr().out
    assert "shipped in profiles: default, ci" in out
    assert "c_dtype: bf16" in out and "c_major: m" in out and "fp8_fast_accum: false" in out
    assert "C epilogue: 128x32 bf16 tile x 2 stages = 16384 B" in out
    assert "A/B budget: 232448 - 1024 (barriers) - 32768 (D) - 16384 (C) = 182272 B" in out
    assert "-> SmemPlan(ab_stages=3, epi_stages=4, c_stages=2)" in out
    slow = "sm90_e4m3_e4m3_bf16_fp32acc_kkn_128x256x128_c1x1_coop"
    assert run(tree, "--explain", slow) == 1  # a dropped id is explained, with why, but is not shipped
    out, err = capsys.readouterr()
    assert "dropped from profile default: accumulator registers: fp8 promoted (slow) accumulation" in out
    assert "group fp8: dropped: rule acc_registers: accumulator registers: fp8 promoted" in out
    assert (
        f"error: {slow} is not in any profile of kernel_specs.yaml: group fp8: dropped: rule acc_registers"
        in err
    )
    assert (
        "accumulator: 128 fp32 registers per consumer thread + 1 k-tile buffer(s) (fp8 promoted "
        "accumulation) = 256 (limit 200" in out
    )
    assert "FAIL  acc_registers" in out


def test_explain_prints_the_manifest_record(tree, capsys):
    record = {"symbol": "kernel_x", "block": [384, 1, 1], "smem_bytes": 232448}
    manifest = tree / "build" / "kernels" / "manifest.json"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(json.dumps({"profile": "default", "instances": {KNOWN: record}}))
    assert run(tree, "--explain", KNOWN) == 0
    out = capsys.readouterr().out
    assert f"launch contract ({manifest})" in out and '"symbol": "kernel_x"' in out
    assert run(tree, "--explain", "sm90_bf16_bf16_bf16_fp32acc_kkn_128x128x64_c1x1_coop") == 0
    assert "has no record for" in capsys.readouterr().out


def test_explain_with_a_missing_or_broken_manifest(tree, capsys):
    assert run(tree, "--explain", KNOWN, "--manifest", str(tree / "nope.json")) == 1
    assert "no manifest at" in capsys.readouterr().err
    (tree / "bad.json").write_text("{not json")
    assert run(tree, "--explain", KNOWN, "--manifest", str(tree / "bad.json")) == 1
    assert "cannot read manifest" in capsys.readouterr().err


def test_explain_excluded_id_says_why_and_fails(tree, capsys):
    assert run(tree, "--explain", EXCLUDED) == 1
    out, err = capsys.readouterr()
    assert "shipped in profiles: (none)" in out
    assert "dropped from profile default: excluded by groups.dense16.exclude[0]" in out
    assert err.strip().splitlines() == [
        f"error: {EXCLUDED} is not in any profile of kernel_specs.yaml: group dense16: dropped: excluded by "
        "groups.dense16.exclude[0] {a_dtype: bf16, d_dtype: fp16}"
    ]


def test_explain_unsupported_id_shows_the_failing_rule_and_suggests(tree, capsys):
    assert run(tree, "--explain", KNOWN.replace("_coop", "_pp")) == 1
    out, err = capsys.readouterr()
    assert (
        "FAIL  acc_registers: accumulator registers: a pingpong 128x256 tile holds 256 registers of fp32"
        in out
    )
    assert "not in any profile" in err and "no group's product contains it" in err and KNOWN in err


def test_explain_malformed_id_suggests_closest(tree, capsys):
    typo = KNOWN.replace("fp32acc", "fp32")
    assert run(tree, "--explain", typo) == 1
    err = capsys.readouterr().err
    assert "malformed instance id" in err
    assert "closest known ids:" in err
    assert err.split("closest known ids:")[1].split()[0] == KNOWN


# --- what regen drops (temporary spec files) -----------------------------------------------------------

ROW = {"d_dtype": "bf16", "a_major": "k", "b_major": "k", "d_major": "n", "schedule": "cooperative"}
AB = [{"a_dtype": ["bf16", "fp16"], "b_dtype": ["bf16", "fp16"]}]
BIG_TILE = "sm90_bf16_bf16_bf16_fp32acc_kkn_256x256x64_c1x1_coop"  # acc_registers: 256 > 200 per thread


def group(tiles, clusters, **extra) -> dict:
    return {"axes": {**ROW, "tile": tiles, "cluster": clusters}, "zip": AB, **extra}


def spec_file(tmp_path: Path, groups: dict, profiles: dict | None = None) -> Path:
    """A small kernel_specs.yaml in tmp_path (derived files are written beside it)."""
    data = {"version": 1, "groups": groups, "profiles": profiles or {"default": {"groups": list(groups)}}}
    path = tmp_path / "kernel_specs.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def regen_run(spec: Path, *argv: str) -> int:
    return main(["--spec", str(spec), *argv])


def test_summary_shows_refused_tile_and_cluster_with_their_reasons(tmp_path, capsys):
    spec = spec_file(tmp_path, {"g": group([[128, 128], [256, 256]], [[1, 1], [4, 4]])})
    assert regen_run(spec) == 0  # drops are reported, not fatal
    out, err = capsys.readouterr()
    assert f"wrote {DOC}" in out
    lines = err.splitlines()
    assert "  g: 8 combination(s), 2 kept, 6 dropped" in lines
    # one line per reason: count, first id, the rule's own message (codegen/validity.py); a spec failing
    # two rules counts under the first (256x256 with a 4x4 cluster: acc_registers)
    assert (
        f"    rule acc_registers: 4, e.g. {BIG_TILE}: accumulator registers: a cooperative 256x256 tile "
        "holds 256 registers of fp32 values per consumer thread" in err
    )
    assert (
        "    rule cluster_size: 2, e.g. sm90_bf16_bf16_bf16_fp32acc_kkn_128x128x64_c4x4_coop: cluster 4x4: "
        "16 CTAs exceeds" in err
    )
    assert BIG_TILE.replace("bf16", "fp16") not in err  # the summary names one example per reason
    assert "warning" not in err
    # deterministic: validity rules in codegen.validity order; the same text every run
    assert lines.index(next(x for x in lines if "acc_registers" in x)) < lines.index(
        next(x for x in lines if "cluster_size" in x)
    )
    assert regen_run(spec) == 0
    assert capsys.readouterr().err == err


def test_summary_lists_exclusions_with_their_entry(tmp_path, capsys):
    ex = [{"a_dtype": "fp16"}]
    spec = spec_file(tmp_path, {"g": group([[128, 128], [64, 128]], [1, 1], exclude=ex)})
    assert regen_run(spec) == 0
    err = capsys.readouterr().err
    assert "  g: 4 combination(s), 2 kept, 2 dropped" in err
    assert (
        "    excluded by groups.g.exclude[0] {a_dtype: fp16}: 2, e.g. "
        "sm90_fp16_fp16_bf16_fp32acc_kkn_128x128x64_c1x1_coop" in err
    )


def test_verbose_lists_every_dropped_id_with_its_reason(tmp_path, capsys):
    spec = spec_file(tmp_path, {"g": group([[128, 128], [256, 256]], [[1, 1], [4, 4]])})
    assert regen_run(spec, "-v") == 0
    err = capsys.readouterr().err
    dropped = [x.strip() for x in err.splitlines() if x.startswith("    sm90_")]
    assert len(dropped) == 6 and dropped == sorted(dropped)
    assert any(
        d.startswith(f"{BIG_TILE}: rule acc_registers: accumulator registers: a coop") for d in dropped
    )
    for d in dropped:
        rule = "acc_registers" if "_256x256x64_" in d else "cluster_size"
        assert f": rule {rule}: " in d, d
    assert regen_run(spec, "--check", "--verbose") == 0
    assert [x.strip() for x in capsys.readouterr().err.splitlines() if x.startswith("    sm90_")] == dropped


def test_empty_group_and_empty_profile_warn(tmp_path, capsys):
    groups = {"g": group([128, 128], [1, 1]), "empty": group([256, 256], [1, 1])}
    profiles = {"default": {"groups": ["g", "empty"]}, "nothing": {"groups": ["empty"]}}
    spec = spec_file(tmp_path, groups, profiles)
    assert regen_run(spec) == 0
    err = capsys.readouterr().err.splitlines()
    warnings = [x for x in err if x.startswith("warning:")]
    assert warnings == [
        "warning: group empty yields no instance: all 2 combination(s) are dropped",
        "warning: profile nothing yields no instance (groups: empty)",
    ]
    assert "## Profile `nothing`: 0 instances" in (tmp_path / DOC).read_text()
    assert regen_run(spec, "--check") == 0  # warnings do not fail --check
    assert regen_run(spec, "--list", "--profile", "nothing") == 2  # nothing to list is still an error


def test_group_in_no_profile_warns(tmp_path, capsys):
    groups = {"g": group([128, 128], [1, 1]), "spare": group([64, 128], [1, 1])}
    spec = spec_file(tmp_path, groups, {"default": {"groups": ["g"]}})
    assert regen_run(spec) == 0
    assert "warning: group spare is in no profile: nothing ships its instances" in capsys.readouterr().err


def test_group_repeated_in_a_profile_is_an_error(tmp_path, capsys):
    spec = spec_file(tmp_path, {"g": group([128, 128], [1, 1])}, {"default": {"groups": ["g", "g"]}})
    for argv in ((), ("--check",), ("--list",)):
        assert regen_run(spec, *argv) == 2
        err = capsys.readouterr().err
        assert err.strip().splitlines() == [
            "error: profiles.default.groups[1]: group 'g' is listed twice in profile default; list each "
            "group once"
        ]
    assert not (tmp_path / DOC).exists()


def test_explain_of_ids_the_spec_does_not_ship_fails_and_says_why(tmp_path, capsys):
    groups = {
        "g": group([[128, 128], [256, 256]], [1, 1], exclude=[{"a_dtype": "fp16"}]),
        "spare": group([64, 128], [1, 1]),
    }
    spec = spec_file(tmp_path, groups, {"default": {"groups": ["g"]}})
    ok = "sm90_bf16_bf16_bf16_fp32acc_kkn_128x128x64_c1x1_coop"
    excluded = "sm90_fp16_fp16_bf16_fp32acc_kkn_128x128x64_c1x1_coop"
    assert regen_run(spec, "--explain", ok) == 0
    capsys.readouterr()
    cases = {
        BIG_TILE: "group g: dropped: rule acc_registers: accumulator registers: a cooperative 256x256",
        excluded: "group g: dropped: excluded by groups.g.exclude[0] {a_dtype: fp16}",
        ok.replace("128x128", "64x128"): "group spare: kept, but the group is in no profile",
        ok.replace("128x128", "192x128"): "no group's product contains it",
    }
    for instance, why in cases.items():
        assert regen_run(spec, "--explain", instance) == 1, instance
        err = capsys.readouterr().err
        assert f"error: {instance} is not in any profile of kernel_specs.yaml: {why}" in err, err


def test_committed_spec_summary(capsys):
    assert main(["--check"]) == 0
    err = capsys.readouterr().err
    assert "  dense16: 96 combination(s), 56 kept, 40 dropped" in err
    assert "    excluded by groups.dense16.exclude[0] {a_dtype: bf16, d_dtype: fp16}: 16, e.g. " in err
    assert "  fp8: 160 combination(s), 120 kept, 40 dropped\n    rule acc_registers: 40, e.g. " in err
    assert "warning" not in err


# --- the tuning table ----------------------------------------------------------------------------------


def test_check_fails_when_the_tuning_table_names_an_unshipped_instance(tree, capsys):
    """runtime/tuning.json may only name instances the default profile ships (dispatch would skip the
    rest silently): regen and --check fail, naming the strays and the fix."""
    (tree / "runtime").mkdir(exist_ok=True)
    table = tree / "runtime" / "tuning.json"
    text = (REPO / "runtime" / "tuning.json").read_text()
    table.write_text(text)
    assert run(tree, "--check") == 0
    table.write_text(text.replace(f'"{KNOWN}"', f'"{EXCLUDED}"'))  # whole ids (KNOWN + "_streamk" ships)
    assert run(tree, "--check") == 1
    err = capsys.readouterr().err
    assert "runtime/tuning.json names 1 instance(s)" in err and EXCLUDED in err and "build_tools.tune" in err
    table.write_text("{broken")
    assert run(tree, "--check") == 2
    assert "tuning table cannot be read" in capsys.readouterr().err
