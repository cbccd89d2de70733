"""build_tools/bench.py's comparison set: by default one dense GEMM's instances (K-major A/B, N-major D,
no C); never a grouped one, even through --kernels (its launch needs offsets the suites do not pass)."""

from __future__ import annotations

from pathlib import Path

from build_tools.bench import Combo, candidates
from codegen.matrix import load_matrix

SPEC_FILE = Path(__file__).resolve().parents[2] / "kernel_specs.yaml"


def test_the_comparison_set_is_dense_even_through_globs():
    specs = load_matrix(SPEC_FILE).expand("default").specs
    combo = Combo("bf16", "bf16", "bf16")
    picked = candidates(specs, combo, None)
    assert picked and all(
        (s.a_major, s.b_major, s.d_major) == ("k", "k", "n") and not s.has_c for s in picked
    )
    assert not any(s.varlen != "none" or s.gather_a for s in picked)
    fp16 = candidates(specs, Combo("fp16", "fp16", "fp16"), None)
    assert fp16 and all(s.acc_dtype == "fp32" for s in fp16)  # fp16 accumulation only through a glob
    fp16acc = candidates(specs, Combo("fp16", "fp16", "fp16"), ["*_fp16acc_*"])
    assert fp16acc and all(s.acc_dtype == "fp16" for s in fp16acc)
    grouped_kkn = [
        s
        for s in specs
        if (s.a_dtype, s.b_dtype, s.d_dtype) == ("bf16",) * 3
        and (s.a_major, s.b_major, s.d_major) == ("k", "k", "n")
        and s.varlen != "none"
    ]
    assert grouped_kkn  # the matrix ships grouped siblings that the filter must drop
    assert candidates(specs, combo, ["*_varlen*"]) == []  # bench cannot launch them: bench_moe does
    globbed = candidates(specs, combo, ["*_fp32acc_kkn_128x128x64_c1x1_*"])
    assert any(s.has_c for s in globbed)  # a glob reaches C instances too
    assert {s.id for s in globbed} == {
        s.id
        for s in specs
        if "_bf16_bf16_bf16_fp32acc_kkn_128x128x64_c1x1_" in s.id and s.varlen == "none" and not s.gather_a
    }


def test_pdl_is_a_flag_of_the_command_and_off_by_default():
    """`--pdl` times ours in PDL chains, as `tune evaluate --pdl` measures the decode suite."""
    from build_tools.bench import parse_args

    assert parse_args(["--pdl", "--shapes", "8x4096x4096"]).pdl is True
    assert parse_args(["--shapes", "8x4096x4096"]).pdl is False
