"""build_tools/nvmmh_judge.py: how an instance is put to nvMatmulHeuristics, and how its picks are scored
beside the cost model's. The library itself is optional (a maintainer installs it to run the judge); these
tests give the judge a fake estimator."""

from __future__ import annotations

import pytest

from build_tools import nvmmh_judge
from build_tools.dispatch_loo import HeldOutCase
from runtime.spec import GemmSpec

PREFIX = "sm90_bf16_bf16_bf16_fp32acc_kkn_"
WIDE = PREFIX + "128x256x64_c2x1_coop"
SQUARE = PREFIX + "128x128x64_c1x1_coop"
SWAPPED = PREFIX + "64x8x128_c1x1_coop_swapab"
SPLIT = PREFIX + "128x128x64_c1x1_coop_splitk"
STREAM = PREFIX + "128x256x64_c1x1_coop_streamk"


def test_swap_ab_is_asked_about_the_transposed_problem_and_split_k_about_each_split():
    plain = nvmmh_judge.nvmmh_config(GemmSpec.parse(WIDE), 300, 5000, 7000)
    assert plain == nvmmh_judge.NvmmhConfig("TST", (300, 5000, 7000), (128, 256, 64), (2, 1), (1,))
    swapped = nvmmh_judge.nvmmh_config(GemmSpec.parse(SWAPPED), 4, 4096, 1024)
    assert swapped.problem == (4096, 4, 1024) and swapped.cta == (64, 8, 128)
    assert nvmmh_judge.nvmmh_config(GemmSpec.parse(SPLIT), 64, 4096, 8192).splits == nvmmh_judge.SPLITS
    fp8 = GemmSpec.parse("sm90_e4m3_e4m3_bf16_fp32acc_kkn_128x128x128_c1x1_coop_fastacc")
    assert nvmmh_judge.nvmmh_config(fp8, 512, 512, 512).precision == "QQTST"


def test_what_the_library_has_no_configuration_for_is_never_asked():
    assert nvmmh_judge.nvmmh_config(GemmSpec.parse(STREAM), 300, 5000, 7000) is None
    e5m2 = GemmSpec.parse("sm90_e5m2_e5m2_bf16_fp32acc_kkn_128x128x128_c1x1_coop")
    assert nvmmh_judge.nvmmh_config(e5m2, 512, 512, 512) is None


def test_a_split_k_instance_counts_at_its_best_split_and_an_unmodelled_one_not_at_all():
    asked = []

    def estimator(precision, problem, cta, cluster, splits):
        asked.append(splits)
        return {1: None, 2: 3e-5, 3: 2e-5}.get(splits, 4e-5)

    seconds = nvmmh_judge.nvmmh_seconds(estimator, GemmSpec.parse(SPLIT), 64, 4096, 8192)
    assert seconds == 2e-5 and asked == list(nvmmh_judge.SPLITS)
    assert nvmmh_judge.nvmmh_seconds(lambda *a: None, GemmSpec.parse(SQUARE), 64, 64, 64) is None


def _case(times):
    return HeldOutCase("NVIDIA H200/132", "bf16_bf16_bf16_kkn", 2048, 4096, 4096, times)


def test_each_pick_is_scored_by_the_measured_times():
    times = {WIDE: 100.0, SQUARE: 125.0, STREAM: 80.0}

    def prefers_square(precision, problem, cta, cluster, splits):
        return 1e-5 if cta[1] == 128 else 2e-5

    s = nvmmh_judge.score_case(_case(times), prefers_square)
    assert s.nvmmh == pytest.approx(80.0 / 125.0)  # its pick, by the fastest measured (stream-K's)
    assert s.reachable == pytest.approx(80.0 / 100.0)  # stream-K is outside its set
    # The cost model takes the wide tile (2048 x 4096: 128 tiles of 128 x 256 fill one wave, 512 of 128 x
    # 128 four) over all three and over the library's two alike.
    assert s.model == s.model_on_set == pytest.approx(80.0 / 100.0)


def test_a_case_the_library_cannot_estimate_keeps_only_the_models_score():
    s = nvmmh_judge.score_case(_case({WIDE: 100.0, SQUARE: 125.0}), lambda *a: None)
    assert s.nvmmh is s.model_on_set is s.reachable is None and s.model == 1.0


def test_without_the_library_the_judge_says_how_to_install_it(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "nvMatmulHeuristics", None)  # import fails as if not installed
    with pytest.raises(SystemExit, match="pip install nvidia-matmul-heuristics"):
        nvmmh_judge.Nvmmh("H200_SXM")
