"""`python -m hgemm_sm90` (runtime/cli.py) on the CPU: a fake kernel folder of several classes, the fake
driver for the commands that ask a GPU, and real subprocesses for `__main__` itself.

What must hold: `list` filters exactly and its --json round-trips to the specs; `select --gpu` answers
without touching the driver and says the same as `select()`; `doctor` passes a healthy install, and on a
damaged one (corrupt or missing cubin, no driver, unsupported GPU, old driver, bad knob) reports FAIL with
the fix and exits 1 instead of raising; every error is one line on stderr (exit 2 for a bad command line,
1 for a broken environment), never a traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from dataclasses import fields
from pathlib import Path

import pytest
from fake_driver import CUresult, Device, FakeDriver, Handle
from fake_kernels import make_doc, record, spec, write_kernels

from runtime import cli, doctor, manifest, state, tuning
from runtime.dispatch import ProblemClass
from runtime.dispatch import select as select_api
from runtime.errors import MissingDependencyError
from runtime.knobs import Knobs
from runtime.spec import GemmSpec

REPO = Path(__file__).resolve().parents[2]


def _spec(**kw) -> GemmSpec:
    row = dict(
        a_dtype="bf16",
        b_dtype="bf16",
        d_dtype="bf16",
        a_major="k",
        b_major="k",
        d_major="n",
        tile=(128, 128, 0),
        cluster=(1, 1),
        schedule="cooperative",
    )
    row.update(kw)
    return GemmSpec(**row)


# Seven instances over five classes: bf16 kkn (three, one with C), e4m3 kkn fast and promoted, fp16 mnm.
SPECS = (
    spec((2, 1)),
    spec((1, 1)),
    spec((4, 4), tile=(128, 128, 64)),
    spec((1, 1), with_c=True),
    _spec(a_dtype="e4m3", b_dtype="e4m3", schedule="pingpong", fp8_fast_accum=True),
    _spec(a_dtype="e4m3", b_dtype="e4m3", cluster=(2, 1)),
    _spec(a_dtype="fp16", b_dtype="fp16", d_dtype="fp16", a_major="m", b_major="n", d_major="m"),
)
IDS = sorted(s.id for s in SPECS)
BF16_PLAIN = sorted(s.id for s in SPECS if s.a_dtype == "bf16" and not s.has_c)


@pytest.fixture(autouse=True)
def no_shipped_table(monkeypatch):
    """Dispatch without a tuning table unless a test installs one: the answers must not depend on
    whether the repository holds a runtime/tuning.json yet."""
    monkeypatch.setattr(tuning, "shipped_table", lambda: None)


@pytest.fixture
def kdir(tmp_path) -> Path:
    write_kernels(tmp_path / "kernels", make_doc([record(s) for s in SPECS]))
    return tmp_path / "kernels"


def with_primary_contexts(fake: FakeDriver) -> FakeDriver:
    """The two calls doctor's trial load adds to what the fake driver implements."""
    fake.cuDevicePrimaryCtxRetain = lambda dev: (CUresult.CUDA_SUCCESS, Handle(fake.ctx(int(dev))))
    fake.cuDevicePrimaryCtxRelease = lambda dev: (CUresult.CUDA_SUCCESS,)
    return fake


@pytest.fixture
def cli_rt(make_runtime, kdir, fake):
    with_primary_contexts(fake)
    return make_runtime(manifest.load(str(kdir / "manifest.json")))


def run(capsys, *argv) -> tuple[int, str, str]:
    rc = cli.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def run_line(capsys, line: str) -> tuple[int, str, str]:
    return run(capsys, *line.split())


def one_line_error(err: str) -> str:
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


# --- list --------------------------------------------------------------------------------------------------


def test_list_prints_every_instance_as_a_table(cli_rt, capsys):
    rc, out, err = run(capsys, "list")
    assert rc == 0 and err == ""
    lines = out.splitlines()
    header = ["id", "A,B->D", "layout", "tile", "cluster", "schedule", "C", "fp8", "accum", "variant"]
    assert lines[0].split() == header
    assert [line.split()[0] for line in lines[1:-1]] == IDS
    row = next(line.split() for line in lines if line.startswith(spec((1, 1), with_c=True).id))
    assert row[1:] == ["bf16,bf16->bf16", "kkn", "128x256x64", "1x1", "coop", "bf16n", "-", "-"]
    fast = next(line.split() for line in lines if " fast " in line)
    assert fast[1:] == ["e4m3,e4m3->bf16", "kkn", "128x128x128", "1x1", "pp", "-", "fast", "-"]
    assert lines[-1] == f"7 of 7 shipped instances (manifest {cli_rt.manifest.path})"


def test_list_names_how_each_instance_runs_the_problem():
    from runtime.cli import _row
    from runtime.spec import GemmSpec

    base = "sm90_bf16_bf16_bf16_fp32acc_kkn_128x256x64_c2x1_coop"
    for suffix, variant in (("", "-"), ("_streamk", "stream-K"), ("_splitk", "split-K")):
        assert _row(GemmSpec.parse(base + suffix))["variant"] == variant
    swap_split = GemmSpec.parse("sm90_bf16_bf16_bf16_fp32acc_kkn_64x8x128_c1x1_coop_swapab_splitk")
    assert _row(swap_split)["variant"] == "swap-AB split-K"


@pytest.mark.parametrize(
    "argv, want",
    [
        (["--dtype", "e4m3"], lambda s: s.a_dtype == "e4m3"),
        (["--b-dtype", "fp16"], lambda s: s.b_dtype == "fp16"),
        (["--out-dtype", "bf16", "--dtype", "bf16"], lambda s: s.a_dtype == "bf16"),
        (["--layout", "mnm"], lambda s: s.a_major == "m"),
        (["--layout", "k?n"], lambda s: s.a_major == "k"),
        (["--layout", "KKN"], lambda s: s.a_major == "k"),
        (["--tile", "128x128"], lambda s: s.tile[:2] == (128, 128)),
        (["--tile", "128x128x64"], lambda s: s.tile == (128, 128, 64)),
        (["--cluster", "2x1"], lambda s: s.cluster == (2, 1)),
        (["--schedule", "pp"], lambda s: s.schedule == "pingpong"),
        (["--schedule", "cooperative"], lambda s: s.schedule == "cooperative"),
        (["--with-c"], lambda s: s.has_c),
        (["--no-c"], lambda s: not s.has_c),
        (["--c-dtype", "bf16"], lambda s: s.has_c),
        (["--c-major", "m"], lambda s: False),
        (["--fast-accum"], lambda s: s.fp8_fast_accum),
        (["--no-fast-accum", "--dtype", "e4m3"], lambda s: s.a_dtype == "e4m3" and not s.fp8_fast_accum),
        (["--grep", "c4x4"], lambda s: "_c4x4_" in s.id),
        (["--grep", "*_pp*"], lambda s: s.schedule == "pingpong"),
        (["--grep", "sm90_bf16", "--grep", "c1x1"], lambda s: s.a_dtype == "bf16" and s.cluster == (1, 1)),
        (["--dtype", "bf16", "--no-c", "--cluster", "1x1"], lambda s: s.id == spec((1, 1)).id),
    ],
)
def test_list_filters_select_exactly_the_matching_instances(cli_rt, capsys, argv, want):
    rc, out, _ = run(capsys, "list", "--json", *argv)
    assert rc == 0
    got = [entry["id"] for entry in json.loads(out)]
    assert got == sorted(s.id for s in SPECS if want(s))
    # The table shows the same rows.
    rc, out, _ = run(capsys, "list", *argv)
    lines = out.splitlines()
    assert [line.split()[0] for line in lines[1:-1]] == got if got else lines == [lines[-1]]
    assert lines[-1].startswith(f"{len(got)} of 7 shipped instances")


def test_list_json_round_trips_to_the_specs(cli_rt, capsys):
    rc, out, _ = run(capsys, "list", "--json")
    assert rc == 0
    entries = json.loads(out)
    assert [e["id"] for e in entries] == IDS
    for e in entries:
        iid = e.pop("id")
        assert GemmSpec.from_json(e).id == iid
        assert cli_rt.manifest.record(iid).spec == GemmSpec.from_json(e)


def test_list_names_a_missing_manifest_in_one_line(make_runtime, tmp_path, capsys):
    make_runtime(kernel_dir=str(tmp_path / "nowhere"))
    rc, out, err = run(capsys, "list")
    assert rc == 1 and out == ""
    line = one_line_error(err)
    assert line.startswith("python -m hgemm_sm90 list: manifest.json is missing") and "Fix: reinstall" in line


# --- select ------------------------------------------------------------------------------------------------


def test_select_by_gpu_name_needs_no_driver_and_explains_the_choice(cli_rt, fake, capsys):
    fake.calls.clear()
    rc, out, err = run(capsys, "select", "4096", "4096", "4096", "--dtype", "bf16", "--gpu", "H200")
    assert rc == 0 and err == ""
    assert fake.calls == []  # planned without a GPU: not even cuInit
    fields_ = dict(line.split(None, 1) for line in out.splitlines())
    assert list(fields_) == ["problem", "gpu", "instance", "overrides", "source", "reason", "estimate"]
    want = select_api(4096, 4096, 4096, a_dtype="bf16", gpu="H200")
    assert fields_["instance"] == want.instance_id and want.instance_id in BF16_PLAIN
    assert fields_["problem"] == "M=4096 N=4096 K=4096 batch=1, class bf16_bf16_bf16_kkn"
    assert fields_["gpu"] == "NVIDIA H200, 132 SMs"
    assert fields_["source"] == "cost model (estimated)"
    assert fields_["reason"] == want.reason
    assert fields_["overrides"].startswith("none")
    assert fields_["estimate"].startswith(f"{want.estimate_us:.2f} ") and "TFLOP/s" in fields_["estimate"]


def test_select_json_matches_the_api(cli_rt, capsys):
    argv = [
        "select",
        "256",
        "8192",
        "4096",
        "--dtype",
        "e4m3",
        "--fast-accum",
        "--gpu",
        "H100 PCIe",
        "--json",
    ]
    rc, out, _ = run(capsys, *argv)
    assert rc == 0
    got = json.loads(out)
    want = select_api(256, 8192, 4096, a_dtype="e4m3", fp8_fast_accum=True, gpu="H100 PCIe")
    assert got == {
        "problem": {"m": 256, "n": 8192, "k": 4096, "batch": 1, "class": "e4m3_e4m3_bf16_kkn_fastacc"},
        "gpu": {"name": "NVIDIA H100 PCIe", "sm_count": 114, "key": "NVIDIA H100 PCIe/114", "device": None},
        "instance_id": want.instance_id,
        "launch_overrides": {"raster_along_m": None, "group_size": None},
        "source": "model",
        "reason": want.reason,
        "estimate_us": want.estimate_us,
    }


def test_select_passes_every_problem_option_through(cli_rt, capsys):
    rc, out, _ = run_line(
        capsys, "select 512 512 512 --dtype bf16 --c-dtype bf16 --c-major n --batch 3 --gpu H200 --json"
    )
    assert rc == 0
    got = json.loads(out)
    assert got["instance_id"] == spec((1, 1), with_c=True).id
    assert got["problem"] == {"m": 512, "n": 512, "k": 512, "batch": 3, "class": "bf16_bf16_bf16_kkn_cbf16n"}
    rc, out, _ = run_line(capsys, "select 64 64 64 --dtype fp16 --layout mnm --gpu H200 --json")
    assert rc == 0 and json.loads(out)["instance_id"] == SPECS[-1].id


def test_select_takes_fp16_accumulation_only_when_asked(make_runtime, tmp_path, fake, capsys):
    fp16acc = _spec(a_dtype="fp16", b_dtype="fp16", d_dtype="fp16", acc_dtype="fp16").id
    write_kernels(tmp_path / "k", make_doc([record(s) for s in (*SPECS, GemmSpec.parse(fp16acc))]))
    with_primary_contexts(fake)
    make_runtime(manifest.load(str(tmp_path / "k" / "manifest.json")))
    rc, out, _ = run_line(capsys, "select 4096 4096 4096 --dtype fp16 --fp16-accum --gpu H200 --json")
    assert rc == 0
    got = json.loads(out)
    assert got["instance_id"] == fp16acc and got["problem"]["class"] == "fp16_fp16_fp16_kkn_fp16acc"
    rc, out, err = run_line(capsys, "select 4096 4096 4096 --dtype fp16 --gpu H200 --json")
    assert rc == 1 and "no shipped kernel instance computes" in err  # fp16 accumulation is no fallback
    rc, out, _ = run_line(capsys, "list --dtype fp16")
    row = next(line for line in out.splitlines() if line.startswith(fp16acc))
    assert " fp16 " in row  # the accumulation column


def test_select_uses_device_0_of_this_machine_by_default(cli_rt, fake, capsys):
    rc, out, _ = run(capsys, "select", "1024", "1024", "1024", "--dtype", "bf16")
    assert rc == 0
    assert "gpu        device 0: NVIDIA H200, 132 SMs" in out.splitlines()
    assert fake.count("cuInit") == 1


def test_select_without_a_driver_points_at_gpu(make_runtime, kdir, capsys):
    def missing():
        raise MissingDependencyError(
            "the CUDA driver bindings are not installed", "pip install cuda-bindings"
        )

    rt = state.Runtime(Knobs(), import_bindings=missing, catalog=manifest.load(str(kdir / "manifest.json")))
    with state.install(rt):
        rc, out, err = run(capsys, "select", "64", "64", "64", "--dtype", "bf16")
    assert rc == 1 and out == ""
    line = one_line_error(err)
    assert "not installed" in line and line.endswith("or plan for a GPU by name without one: --gpu H200")


@pytest.mark.parametrize(
    "argv, says",
    [
        ("select 0 64 64 --dtype bf16 --gpu H200", "m=0"),
        ("select 64 64 60 --dtype e4m3 --layout kkn --gpu H200", "not a multiple of 16 bytes"),
        ("select 64 64 64 --dtype bf16 --gpu Z80", "unknown GPU 'Z80'"),
        ("select 64 64 64 --dtype bf16 --gpu H200 --device 0", "both device=0 and gpu='H200'"),
        ("select 64 64 64 --dtype bf16 --c-major n --gpu H200", "c_major='n' given without c_dtype"),
    ],
)
def test_values_the_runtime_refuses_are_one_line_and_exit_2(cli_rt, capsys, argv, says):
    rc, out, err = run(capsys, *argv.split())
    assert rc == 2 and out == ""
    line = one_line_error(err)
    assert line.startswith("python -m hgemm_sm90 select: ") and says in line and "Fix:" in line


def test_a_class_that_does_not_ship_is_one_line_listing_the_nearest(cli_rt, capsys):
    rc, _, err = run_line(capsys, "select 64 64 64 --dtype fp16 --gpu H200")
    assert rc == 1
    line = one_line_error(err)
    assert "no shipped kernel instance computes" in line and "nearest shipped instances are" in line


@pytest.mark.parametrize(
    "argv",
    [
        "frobnicate",
        "list --tile 128",
        "list --tile 128x0",
        "list --cluster 2x1x1",
        "list --layout kxn",
        "list --dtype int8",
        "list --with-c --no-c",
        "list --schedule fast",
        "select 64 64 --dtype bf16",
        "select a b c --dtype bf16",
        "select 64 64 64",
        "select 64 64 64 --dtype bf16 --layout kk",
        "bench 64 64 64",
        "bench 64 64 64 --instance x --dtype bf16",
        "bench 64 64 64 --dtype bf16 --iters 0",
        "doctor --verbose",
    ],
)
def test_bad_command_lines_are_one_line_and_exit_2(cli_rt, fake, capsys, argv):
    fake.calls.clear()
    rc, out, err = run(capsys, *argv.split())
    assert rc == 2 and out == ""
    assert one_line_error(err).startswith("python -m hgemm_sm90")
    assert fake.calls == []


def test_no_command_prints_the_help_and_exits_2(capsys):
    rc, out, err = run(capsys)
    assert rc == 2 and out == ""
    for command in ("list", "select", "doctor", "bench"):
        assert command in err


def test_help_exits_0(capsys):
    rc, out, _ = run(capsys, "select", "--help")
    assert rc == 0 and "--gpu" in out


# --- doctor ------------------------------------------------------------------------------------------------


def statuses(out: str) -> dict[str, list[str]]:
    """check name -> statuses, from doctor's text output."""
    got: dict[str, list[str]] = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] in ("OK", "WARN", "FAIL", "INFO"):
            got.setdefault(parts[1], []).append(parts[0])
    return got


def test_doctor_passes_a_healthy_install(cli_rt, fake, capsys):
    rc, out, err = run(capsys, "doctor")
    assert rc == 0, out
    assert err == ""
    got = statuses(out)
    assert "FAIL" not in sum(got.values(), [])
    for name in ("knobs", "cuda-bindings", "driver", "gpu", "manifest", "cubins", "compat", "load"):
        assert got[name] == ["OK"], (name, out)
    assert got["hgemm_sm90"] == ["INFO"] and got["tuning"] == ["WARN"]  # no table in this test
    assert "supports CUDA 12.9 (12090)" in out
    assert "device 0: NVIDIA H200, compute capability 9.0, 132 SMs: supported" in out
    assert "7 of 7 intact" in out and "contract version 7" in out and "profile 'test'" in out
    assert "HGEMM_VERIFY_SHA256=1" in out and "HGEMM_CHECK_POINTERS=auto" in out
    pick = select_api(4096, 4096, 4096, a_dtype="bf16", device=0).instance_id
    assert f"device 0: a 4096x4096x4096 bf16 kkn GEMM runs {pick}" in out
    assert fake.count("cuModuleLoadData") == 1  # one real load, then forgotten with the context
    assert cli_rt.kernels.contexts() == set()
    assert out.splitlines()[-1] == "no check failed (1 warning)"


def test_doctor_json(cli_rt, capsys):
    rc, out, _ = run(capsys, "doctor", "--json")
    assert rc == 0
    doc = json.loads(out)
    assert doc["ok"] is True and doc["failed"] == []
    assert {c["status"] for c in doc["checks"]} <= {"OK", "WARN", "INFO"}
    assert all(set(c) == {"status", "name", "summary", "details", "fix"} for c in doc["checks"])


def test_doctor_reports_a_corrupted_cubin_and_exits_1(cli_rt, kdir, capsys):
    victim = SPECS[4].id
    path = kdir / f"{victim}.cubin"
    data = bytearray(path.read_bytes())
    data[40] ^= 0xFF  # same size and ELF magic: only the sha256 can tell
    path.write_bytes(bytes(data))
    (kdir / f"{SPECS[6].id}.cubin").unlink()
    rc, out, err = run(capsys, "doctor")
    assert rc == 1 and err == ""
    assert statuses(out)["cubins"] == ["FAIL"]
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("FAIL  cubins"))
    assert "2 of 7 damaged or missing" in lines[at]
    detail = "\n".join(lines[at + 1 : at + 4])
    assert (
        f"{victim}: cubin sha256 is" in detail
        and f"{SPECS[6].id}: cubin" in detail
        and "is missing" in detail
    )
    assert "fix: reinstall the wheel" in detail
    assert lines[-1] == "1 check failed: cubins"


def test_doctor_validates_every_record_a_process_would_check_only_on_use(
    make_runtime, fake, tmp_path, capsys
):
    """A loaded manifest checks a record's launch contract on its first lookup; doctor checks them all,
    so a record damaged past its spec fails the manifest check."""
    doc = make_doc([record(s) for s in SPECS])
    doc["instances"][SPECS[3].id]["grid"] = "tiles"
    write_kernels(tmp_path / "kernels", doc)
    with_primary_contexts(fake)
    make_runtime(manifest.load(str(tmp_path / "kernels" / "manifest.json")))  # loads: specs are fine
    rc, out, _ = run(capsys, "doctor")
    assert rc == 1 and statuses(out)["manifest"] == ["FAIL"]
    assert f"instances.{SPECS[3].id}.grid must be one of" in out


def test_doctor_without_a_driver_reports_and_still_checks_the_kernels(kdir, capsys):
    def missing():
        raise MissingDependencyError(
            "the CUDA driver bindings are not installed", "pip install cuda-bindings"
        )

    rt = state.Runtime(Knobs(), import_bindings=missing, catalog=manifest.load(str(kdir / "manifest.json")))
    with state.install(rt):
        rc, out, err = run(capsys, "doctor")
    assert rc == 1 and err == ""
    got = statuses(out)
    assert got["driver"] == ["FAIL"] and got["manifest"] == ["OK"] and got["cubins"] == ["OK"]
    assert "gpu" not in got and "load" not in got
    assert "fix: pip install cuda-bindings" in out
    assert "WARN  tuning" in out  # this test's installation has no table
    assert out.splitlines()[-1] == "1 check failed: driver"


def test_doctor_on_a_gpu_that_is_not_hopper(make_runtime, kdir, capsys):
    fake = with_primary_contexts(FakeDriver({0: Device(capability=(8, 0), name="NVIDIA A100", sm_count=108)}))
    rt = state.Runtime(
        Knobs(), import_bindings=lambda: fake, catalog=manifest.load(str(kdir / "manifest.json"))
    )
    with state.install(rt):
        rc, out, _ = run(capsys, "doctor")
    assert rc == 1
    assert statuses(out)["gpu"] == ["WARN", "FAIL"]
    assert "compute capability 8.0, 108 SMs: not supported" in out
    assert "fix: run on an H100/H200/GH200" in out


def test_doctor_on_a_driver_too_old_for_the_kernels(make_runtime, kdir, capsys):
    fake = with_primary_contexts(FakeDriver(version=12040))
    fake.set_current(fake.ctx(0))
    rt = state.Runtime(
        Knobs(), import_bindings=lambda: fake, catalog=manifest.load(str(kdir / "manifest.json"))
    )
    with state.install(rt):
        rc, out, _ = run(capsys, "doctor")
    fake.set_current(None)
    assert rc == 1
    got = statuses(out)
    assert got["compat"] == ["FAIL"] and got["load"] == ["FAIL"]  # the real load refuses it too
    assert "supports CUDA 12.4 (12040), but the shipped kernels need CUDA 12.8 (12080)" in out


def test_doctor_reports_a_bad_knob_and_checks_the_rest(monkeypatch, kdir, capsys):
    monkeypatch.setattr(state, "_default", None)  # the process's runtime is built from the environment
    monkeypatch.setenv("HGEMM_VERIFY_SHA256", "maybe")
    monkeypatch.setenv("HGEMM_KERNEL_DIR", str(kdir))
    rc, out, err = run(capsys, "doctor")
    assert rc == 1 and "Traceback" not in err
    got = statuses(out)
    assert got["knobs"][0] == "FAIL" and got["manifest"] == ["OK"] and got["cubins"] == ["OK"]
    assert "HGEMM_VERIFY_SHA256='maybe' is not valid" in out
    assert f"kernels are read from {kdir}" in out
    assert state._default is None  # the stand-in runtime was only installed while doctor ran


def _table(gpu_key: str, class_key: str, iid: str, kernels: str | None = None) -> tuning.TuningTable:
    point = {"m": 4096, "n": 4096, "k": 4096, "cublas_us": 200.0, "times": [[iid, True, 8, 190.0]]}
    if kernels is not None:
        point["kernels"] = kernels
    doc = {
        "format": tuning.FORMAT,
        "version": tuning.VERSION,
        "gpus": {gpu_key: {"classes": {class_key: [point]}}},
    }
    return tuning.TuningTable.from_json(doc, "/somewhere/tuning.json")


def test_doctor_says_when_dispatch_uses_the_table(cli_rt, monkeypatch, capsys):
    iid = spec((1, 1)).id
    monkeypatch.setattr(tuning, "shipped_table", lambda: _table("NVIDIA H200/132", "bf16_bf16_bf16_kkn", iid))
    rc, out, _ = run(capsys, "doctor")
    assert rc == 0
    assert "table /somewhere/tuning.json" in out and "NVIDIA H200/132: 1 class, 1 grid point" in out
    assert "NVIDIA H200/132 (device 0): dispatch uses the table for 1 of the 5 shipped classes" in out
    assert f"runs {iid}" in out and "chosen by the table" in out


def test_doctor_says_which_cubins_the_table_was_timed_with(cli_rt, monkeypatch, capsys):
    """A point stamped with the installed cubin passes; one stamped with another cubin of the same instance
    (a kernel changed after the table was measured) is a warning that names the re-timing command."""
    iid = spec((1, 1)).id
    digest = tuning.kernels_digest([iid], {iid: cli_rt.manifest.instances[iid].sha256})
    monkeypatch.setattr(
        tuning, "shipped_table", lambda: _table("NVIDIA H200/132", "bf16_bf16_bf16_kkn", iid, digest)
    )
    rc, out, _ = run(capsys, "doctor")
    assert rc == 0 and statuses(out)["tuning"] == ["OK"]
    assert "NVIDIA H200/132: 1 class, 1 grid point; 1 timed with the installed cubins" in out

    other = tuning.kernels_digest([iid], {iid: "0" * 64})
    monkeypatch.setattr(
        tuning, "shipped_table", lambda: _table("NVIDIA H200/132", "bf16_bf16_bf16_kkn", iid, other)
    )
    rc, out, _ = run(capsys, "doctor")
    assert rc == 0 and statuses(out)["tuning"] == ["OK", "WARN"]
    assert "0 timed with the installed cubins, 1 with other cubins" in out
    assert "1 grid point timed with other cubins than the installed ones" in out
    assert "python -m build_tools.tune --stale" in out


def test_doctor_names_the_rows_that_stand_in_for_a_board_the_table_lacks(cli_rt, monkeypatch, capsys):
    """The device (an H200 here) is not in the table, but a board with its SM count is: its rows serve."""
    other = "NVIDIA H100 80GB HBM3/132"
    monkeypatch.setattr(tuning, "shipped_table", lambda: _table(other, "bf16_bf16_bf16_kkn", spec((1, 1)).id))
    rc, out, _ = run(capsys, "doctor")
    assert rc == 0
    assert (
        f"NVIDIA H200/132 (device 0): dispatch uses the table (the rows of {other}, which has its SM count) "
        "for 1 of the 5 shipped classes" in out
    )


def test_doctor_says_when_dispatch_falls_back_to_the_model(cli_rt, monkeypatch, capsys):
    monkeypatch.setattr(
        tuning, "shipped_table", lambda: _table("NVIDIA H100 PCIe/114", "bf16_bf16_bf16_kkn", spec((1, 1)).id)
    )
    rc, out, _ = run(capsys, "doctor")
    assert rc == 0
    assert "NVIDIA H200/132 (device 0): not in the table, dispatch falls back to the model" in out
    assert "chosen by the model" in out


def test_doctor_prints_every_knob():
    assert set(doctor.KNOB_VARS) == {f.name for f in fields(Knobs)} - {"log_level_set"}
    source = (REPO / "runtime" / "knobs.py").read_text()
    assert all(f'"{var}"' in source for var in doctor.KNOB_VARS.values())


# --- bench (its GPU path runs on the GPU machine; here only what it says without one) ----------------------


def test_bench_without_torch_is_one_line(cli_rt, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    rc, out, err = run_line(capsys, "bench 1024 1024 1024 --dtype bf16")
    assert rc == 1 and out == ""
    line = one_line_error(err)
    assert "bench needs torch" in line and "Fix: pip install torch" in line


def test_bench_without_a_gpu_is_one_line(cli_rt, monkeypatch, capsys):
    fake_torch = types.SimpleNamespace(cuda=types.SimpleNamespace(is_available=lambda: False))
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    rc, _, err = run_line(capsys, "bench 1024 1024 1024 --dtype bf16")
    assert rc == 1
    assert "bench needs a CUDA GPU, and torch sees none" in one_line_error(err)


# --- python -m hgemm_sm90, in a fresh interpreter under the installed name --------------------------------


@pytest.fixture
def module_env(tmp_path, kdir) -> dict:
    link = tmp_path / "site"
    link.mkdir()
    os.symlink(REPO / "runtime", link / "hgemm_sm90", target_is_directory=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HGEMM_")}
    env.update(PYTHONPATH=str(link), HGEMM_KERNEL_DIR=str(kdir))
    return env


def python_m(env, *argv) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "hgemm_sm90", *argv],
        env=env,
        cwd=env["PYTHONPATH"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_python_m_lists_and_selects_without_a_gpu(module_env):
    out = python_m(module_env, "list", "--json", "--dtype", "e4m3")
    assert out.returncode == 0, out.stderr
    assert [e["id"] for e in json.loads(out.stdout)] == sorted(s.id for s in SPECS if s.a_dtype == "e4m3")
    out = python_m(module_env, "select", "64", "4096", "4096", "--dtype", "bf16", "--gpu", "H200")
    assert out.returncode == 0, out.stderr
    assert "instance   sm90_bf16_bf16_bf16_fp32acc_kkn_" in out.stdout


def test_python_m_reports_errors_in_one_line(module_env):
    out = python_m(module_env, "select", "64", "64", "64", "--dtype", "bf16", "--gpu", "Z80")
    assert out.returncode == 2 and out.stdout == ""
    assert one_line_error(out.stderr).startswith("python -m hgemm_sm90 select: unknown GPU 'Z80'")


def test_python_m_doctor_reports_instead_of_crashing(module_env):
    # On the CPU box the driver check fails (no libcuda); on a GPU machine the fake cubins fail to load.
    # Either way: a report, exit status 1, no traceback.
    out = python_m(module_env, "doctor")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "Traceback" not in out.stderr and "FAIL" in out.stdout
    assert "OK    manifest" in out.stdout and "OK    cubins" in out.stdout


class FakeTensor:
    """Shape, dtype and an address: all `bench` asks of a tensor when its arithmetic is faked."""

    _next = [0x7F00_0000_0000]

    def __init__(self, shape, dtype, ptr=None):
        self.shape, self.dtype, self.device = tuple(shape), dtype, "cuda:0"
        if ptr is None:
            ptr, FakeTensor._next[0] = FakeTensor._next[0], FakeTensor._next[0] + (1 << 32)
        self.ptr = ptr

    def data_ptr(self):
        return self.ptr

    def dim(self):
        return len(self.shape)

    @property
    def mT(self):
        return FakeTensor((*self.shape[:-2], self.shape[-1], self.shape[-2]), self.dtype, self.ptr)

    def __getitem__(self, i):
        assert i == 0
        return FakeTensor(self.shape[1:], self.dtype, self.ptr)

    def to(self, dtype):
        return FakeTensor(self.shape, dtype)

    def contiguous(self):
        return FakeTensor(self.shape, self.dtype)

    def float(self):
        return FakeTensor(self.shape, "float32")

    def __sub__(self, other):
        assert self.shape == other.shape, (self.shape, other.shape)
        diff = FakeTensor(self.shape, "float32")
        diff.norm = lambda: FakeScalar(2e-3)  # |ours - cuBLAS| against a |cuBLAS| of 1
        return diff

    def norm(self):
        return FakeScalar(1.0)


class FakeScalar(float):
    def __truediv__(self, other):
        return FakeScalar(float(self) / float(other))

    def clamp_min(self, _):
        return self

    def item(self):
        return float(self)


def fake_torch(fake: FakeDriver, calls: list) -> types.ModuleType:
    """Just enough of torch for `bench`: allocation, products that check their operands' shapes, streams
    whose handles the fake driver knows, and events that say every launch took 10 µs."""
    torch = types.ModuleType("torch")
    for name in ("bfloat16", "float16", "float32", "float8_e4m3fn", "float8_e5m2"):
        setattr(torch, name, name)
    torch.device = lambda kind, index: f"{kind}:{index}"
    torch.randn = lambda shape, device, dtype: FakeTensor(shape, dtype)
    torch.empty = lambda shape, device, dtype: FakeTensor(shape, dtype)
    torch.ones = lambda shape, device, dtype: FakeTensor(shape, dtype)

    def product(name):
        def f(*args, out_dtype=None, **kw):
            calls.append(name)
            *_, a, bt = [x for x in args if isinstance(x, FakeTensor) and x.dim() >= 2]
            assert a.shape[-1] == bt.shape[-2] and a.shape[:-2] == bt.shape[:-2], (a.shape, bt.shape)
            return FakeTensor((*a.shape[:-1], bt.shape[-1]), out_dtype or a.dtype)

        return f

    for name in ("matmul", "addmm", "baddbmm", "_scaled_mm"):
        setattr(torch, name, product(name))

    class Stream:
        def __init__(self, device):
            self.cuda_stream = fake.new_stream(fake.ctx(0))

        def synchronize(self):
            pass

        def wait_stream(self, other):
            self.waited = other

    class Event:
        def __init__(self, enable_timing):
            self.at = 0

        def record(self, stream):
            self.at = len(fake.launches) + len(calls)

        def synchronize(self):
            pass

        def elapsed_time(self, end):
            return (end.at - self.at) * 0.010  # ms

    import contextlib

    torch.cuda = types.SimpleNamespace(
        is_available=lambda: True,
        device_count=lambda: 1,
        set_device=lambda d: None,
        get_device_name=lambda d: "NVIDIA H200",
        Stream=Stream,
        Event=Event,
        stream=lambda s: contextlib.nullcontext(),
        current_stream=lambda: "torch's current stream",
        _sleep=lambda cycles: None,
    )
    return torch


@pytest.mark.parametrize(
    "line, baseline",
    [
        ("bench 256 512 128 --dtype bf16", "torch.matmul"),
        ("bench 256 512 128 --dtype bf16 --batch 3", "torch.matmul"),
        ("bench 256 512 128 --dtype bf16 --c-dtype bf16", "torch.addmm (with C)"),
        ("bench 256 512 128 --dtype bf16 --c-dtype bf16 --batch 2", "torch.baddbmm (with C)"),
        ("bench 256 512 128 --dtype e4m3 --fast-accum", "torch._scaled_mm(unit scales, use_fast_accum=True)"),
        ("bench 256 512 128 --dtype fp16 --layout mnm", "torch.matmul"),
    ],
)
def test_bench_times_ours_against_cublas_on_a_fake_torch(cli_rt, fake, monkeypatch, capsys, line, baseline):
    calls: list = []
    monkeypatch.setitem(sys.modules, "torch", fake_torch(fake, calls))
    rc, out, err = run_line(capsys, line + " --iters 4 --reps 3 --warmup 1 --json")
    assert rc == 0, err
    got = json.loads(out)
    assert got["cublas"]["call"] == baseline
    assert got["ours"]["us"] == pytest.approx(10.0) and got["cublas"]["us"] == pytest.approx(10.0)
    assert got["speedup_vs_cublas"] == pytest.approx(1.0)
    assert got["relative_error_vs_cublas"] == pytest.approx(2e-3)
    # warm-up 1 + 3 timings x 4 launches each, all on the bench's own stream
    assert len(fake.launches) == 13 and {la.stream for la in fake.launches} == {fake.launches[0].stream}
    m, n, k, batch = 256, 512, 128, got["problem"]["batch"]
    spec_ = cli_rt.manifest.record(got["ours"]["instance_id"]).spec
    assert got["problem"]["class"] == ProblemClass.of(spec_).key
    assert got["ours"]["tflops"] == pytest.approx(2 * m * n * k * batch / 10e-6 / 1e12)
    rc, out, _ = run_line(capsys, line + " --iters 4 --reps 3 --warmup 1")
    assert rc == 0
    labels = [row.split()[0] for row in out.splitlines() if not row.startswith(" ")]
    assert labels == ["problem", "ours", "cuBLAS", "ratio", "agreement"]


def test_bench_refuses_sizes_before_allocating(cli_rt, fake, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torch", fake_torch(fake, []))
    rc, _, err = run_line(capsys, f"bench 0 512 128 --instance {SPECS[0].id}")
    assert rc == 2 and "M=0 is not a positive size" in one_line_error(err)
    assert fake.launches == []


def test_bench_reports_when_cublas_has_no_baseline(cli_rt, fake, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torch", fake_torch(fake, []))
    rc, out, _ = run_line(capsys, "bench 256 512 128 --dtype e4m3 --batch 2 --iters 2 --reps 2")
    assert rc == 0
    assert "cuBLAS     no baseline: torch._scaled_mm has no batched form" in out
    assert len(fake.launches) == 3 + 2 * 2


def test_select_pdl_matches_the_api(cli_rt, capsys):
    rc, out, _ = run(
        capsys, "select", "64", "4096", "4096", "--dtype", "bf16", "--gpu", "H200", "--pdl", "--json"
    )
    assert rc == 0
    want = select_api(64, 4096, 4096, a_dtype="bf16", gpu="H200", pdl=True)
    got = json.loads(out)
    assert (got["instance_id"], got["reason"]) == (want.instance_id, want.reason)
