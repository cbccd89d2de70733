"""build_tools/hbm_ceiling.py: the most any kernel could gain over cuBLAS when it must move every byte."""

import json
import math

from build_tools import hbm_ceiling


def verdict(cls, nbytes, cublas_us, gemm_us):
    return {"cls": cls, "bytes": nbytes, "cublas_us": cublas_us, "gemm_us": gemm_us}


def test_the_ceiling_is_cublas_over_the_byte_time_plus_the_fixed_cost():
    # 4.8 MB at 4.8 TB/s is 1 µs; cuBLAS took 2 µs, so nothing that reads them can be more than 2x faster.
    rows = [verdict("a", 4_800_000, 2.0, 1.6)]
    c = hbm_ceiling.ceilings(rows, read_tbps=4.8, fixed_us=0.0)["a"]
    assert math.isclose(c["ceiling"], 2.0)
    assert math.isclose(c["measured"], 1.25)
    assert math.isclose(c["share"], 1.0 / 1.6)
    assert math.isclose(hbm_ceiling.ceilings(rows, 4.8, fixed_us=1.0)["a"]["ceiling"], 1.0)


def test_classes_are_kept_apart_and_shapes_without_a_cublas_time_left_out():
    rows = [
        verdict("a", 4_800_000, 2.0, 1.0),
        verdict("a", 9_600_000, 8.0, 4.0),
        verdict("b", 4_800_000, 3.0, 3.0),
    ]
    rows.append(verdict("b", 4_800_000, None, 1.0))
    out = hbm_ceiling.ceilings(rows, 4.8, 0.0)
    assert math.isclose(out["a"]["ceiling"], math.sqrt(2.0 * 4.0)) and out["a"]["shapes"] == 2
    assert out["b"]["shapes"] == 1 and math.isclose(out["b"]["ceiling"], 3.0)


def test_the_command_reads_an_evaluate_json_and_prints_one_row_per_class_rate_and_cost(tmp_path, capsys):
    path = tmp_path / "eval.json"
    path.write_text(json.dumps({"verdicts": [verdict("a", 4_800_000, 2.0, 1.0)]}))
    assert hbm_ceiling.main([str(path), "--read-tbps", "4.8", "4.41", "--fixed-us", "0", "1"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| a |")]
    assert len(rows) == 4


def test_an_unreadable_file_is_one_line_and_exit_2(tmp_path, capsys):
    assert hbm_ceiling.main([str(tmp_path / "missing.json")]) == 2
    assert capsys.readouterr().err.count("\n") == 1
