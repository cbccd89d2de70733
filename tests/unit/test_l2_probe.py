"""build_tools/l2_probe.py without a GPU: the walk argument, the cases and their ncu command lines, the
parsing of ncu's CSV and the summary of a launch's kernels, and the whole parent path against a stand-in
for ncu that prints a canned report."""

import argparse
import stat
import sys
import textwrap

import pytest

from build_tools import l2_probe

ID = "sm90_bf16_bf16_bf16_fp32acc_kkn_128x128x64_c2x1_pp"


def ncu_csv(kernels: dict[str, dict[str, str | tuple[str, str]]]) -> str:
    """A report as `ncu --csv --metrics ...` prints it: its own messages, then one row per metric."""
    lines = [
        "==PROF== Connected to process 123",
        '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size",'
        '"Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"',
    ]
    for kid, metrics in kernels.items():
        for name, value in metrics.items():
            value, unit = (
                value if isinstance(value, tuple) else (value, "ns" if "duration" in name else "sector")
            )
            lines.append(
                f'"{kid}","123","python3","127.0.0.1","k{kid}","1","7","(384, 1, 1)","(130, 1, 1)","0","9.0",'
                f'"Command line profiler metrics","{name}","{unit}","{value}"'
            )
    lines.append("==PROF== Disconnected from process 123")
    return "\n".join(lines) + "\n"


def full(**over) -> dict[str, str]:
    base = dict.fromkeys(l2_probe.METRICS.values(), "1,000")
    base[l2_probe.METRICS["us"]] = "38,304"
    base[l2_probe.METRICS["coalescable"]] = "10,000"
    base[l2_probe.METRICS["hardware"]] = "1,400"
    base.update(over)
    return base


def test_walks_parse_and_reject():
    assert l2_probe.parse_walk("1,4") == (1, 4)
    for bad in ("2,4", "1,0", "1", "a,b"):
        with pytest.raises(argparse.ArgumentTypeError):
            l2_probe.parse_walk(bad)


def test_cases_and_their_ncu_commands():
    cs = l2_probe.cases([(1, 3)], cublas=True)
    assert [c.label for c in cs] == ["ours, default walk", "ours, walk 1,3", "cuBLAS"]
    cmd = l2_probe.ncu_command("ncu", cs[1], "1255x1664x6528", ID)
    assert cmd[:4] == ["ncu", "--profile-from-start", "off", "--clock-control"]
    assert cmd[cmd.index("--metrics") + 1].split(",") == list(l2_probe.METRICS.values())
    assert cmd[cmd.index("--child") :] == [
        "--child",
        "--shape",
        "1255x1664x6528",
        "--instance",
        ID,
        "--walk",
        "1,3",
    ]
    cub = l2_probe.ncu_command("ncu", cs[2], "1255x1664x6528", ID)
    assert "--cublas" in cub and "--walk" not in cub
    assert l2_probe.cases([], cublas=False) == [l2_probe.Case("ours, default walk")]


def test_parse_and_summarize_two_kernels():
    text = ncu_csv({"0": full(), "1": full(**{l2_probe.METRICS["us"]: "1,696"})})
    kernels = l2_probe.parse_ncu_csv(text)
    assert set(kernels) == {"0", "1"}
    assert kernels["0"][l2_probe.METRICS["us"]] == 38304.0
    row = l2_probe.summarize(kernels)
    assert row["kernels"] == 2
    assert row["us"] == pytest.approx(40.0)  # (38304 + 1696) ns
    assert row["hardware"] == 2800 and row["coalescable"] == 20000
    assert row["hardware_share"] == pytest.approx(0.14)


def test_unavailable_metric_is_missing_not_zero():
    row = l2_probe.summarize(
        l2_probe.parse_ncu_csv(ncu_csv({"0": full(**{l2_probe.METRICS["hardware"]: "n/a"})}))
    )
    assert row["hardware"] is None and row["hardware_share"] is None
    assert "n/a (n/a)" in l2_probe.render("1x1x1", [(l2_probe.Case("cuBLAS", cublas=True), row)])


def test_scaled_units_are_read_in_base_units():
    scaled = full(
        **{l2_probe.METRICS["us"]: ("38.304", "us"), l2_probe.METRICS["asked"]: ("8.75", "Msector")}
    )
    row = l2_probe.summarize(l2_probe.parse_ncu_csv(ncu_csv({"0": scaled})))
    assert row["us"] == pytest.approx(38.304)
    assert row["asked"] == pytest.approx(8.75e6)


def test_no_header_means_no_kernels():
    assert l2_probe.parse_ncu_csv("==PROF== Connected\n==ERROR== no kernels were profiled\n") == {}


def fake_ncu(tmp_path, report: str, rc: int = 0):
    """An executable that ignores its arguments and prints `report` (as ncu would after profiling)."""
    (tmp_path / "report.csv").write_text(report)
    exe = tmp_path / "ncu"
    exe.write_text(
        textwrap.dedent(
            f"""\
            #!{sys.executable}
            import sys
            sys.stdout.write(open({str(tmp_path / "report.csv")!r}).read())
            sys.exit({rc})
            """
        )
    )
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return str(exe)


def test_parent_runs_every_case_and_prints_the_table(tmp_path, capsys):
    exe = fake_ncu(tmp_path, ncu_csv({"0": full()}))
    assert l2_probe.main(["--shape", "1255x1664x6528", "--instance", ID, "--walk", "1,3", "--ncu", exe]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith(("| ours", "| cuBLAS"))]
    assert [r.split(" | ")[0] for r in rows] == ["| ours, default walk", "| ours, walk 1,3", "| cuBLAS"]
    assert "| 38.30 |" in rows[0] and "(14%)" in rows[0]


def test_parent_reports_a_case_without_kernels(tmp_path, capsys):
    exe = fake_ncu(tmp_path, "==ERROR== The application returned an error code (2).\n", rc=2)
    assert l2_probe.main(["--shape", "1x1x1", "--instance", ID, "--no-cublas", "--ncu", exe]) == 1
    err = capsys.readouterr().err
    assert err.startswith("l2_probe: ours, default walk: ncu found no kernel")
