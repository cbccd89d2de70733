"""The compile driver's failure handling and its artifacts (compiler-marked tests: the CPU build tier, real
DSL in worker processes), and where the facts of a run go (fast, fake cache entries)."""

from __future__ import annotations

import json
import re
from fnmatch import fnmatch
from pathlib import Path

import pytest

from codegen.build import (
    BUILD_REPORT,
    BuildError,
    build_entries,
    check_no_spills,
    write_build_report,
    write_kernel_dir,
)
from codegen.cache import BuildCache
from codegen.cubin_info import parse_cubin
from codegen.oracle import cubin_from_object
from runtime.contract import InstanceRecord
from runtime.spec import GemmSpec
from tests.runtime import fake_kernels

REPO = Path(__file__).resolve().parents[2]


def _spec(**changes) -> GemmSpec:
    row = dict(
        a_dtype="bf16",
        b_dtype="bf16",
        d_dtype="bf16",
        a_major="k",
        b_major="k",
        d_major="n",
        tile=[128, 128],
        cluster=[1, 1],
        schedule="cooperative",
    )
    row.update(changes)
    return GemmSpec.from_row(row)


@pytest.mark.compiler
def test_a_failing_instance_fails_the_build_with_its_id_and_reason(tmp_path):
    bad = _spec(tile=[96, 128])
    with pytest.raises(BuildError) as err:
        build_entries([bad], cache=BuildCache(tmp_path), jobs=1, progress=False)
    text = str(err.value)
    assert bad.name() in text and "tile M 96" in text and "--keep-going" in text


def test_a_spilling_kernel_fails_the_build_naming_the_fix():
    check_no_spills(_spec(), {"local_bytes": 0, "registers": 168})  # the shipped matrix: no spills
    with pytest.raises(BuildError, match=r"spills: ptxas placed 48 bytes .* use a smaller tile"):
        check_no_spills(_spec(), {"local_bytes": 48, "registers": 168})


@pytest.mark.compiler
def test_keep_going_reports_every_failure(tmp_path):
    bad = [_spec(tile=[96, 128]), _spec(cluster=[3, 1])]
    with pytest.raises(BuildError) as err:
        build_entries(bad, cache=BuildCache(tmp_path), jobs=2, keep_going=True, progress=False)
    text = str(err.value)
    assert text.startswith("2 instance(s) failed")
    assert all(s.name() in text for s in bad)


@pytest.mark.compiler
def test_cache_entries_hold_one_cubin_in_two_forms_and_its_stats(ci_build):
    specs, entries, out = ci_build
    manifest = json.loads((out / "manifest.json").read_text())
    for spec in specs:
        entry = entries[spec.name()]
        cubin = entry.cubin.read_bytes()
        # The shipped cubin is exactly the one the oracle's host object embeds.
        assert cubin_from_object(entry.host_object.read_bytes()) == cubin
        info = parse_cubin(cubin)
        rec = manifest["instances"][spec.name()]
        assert rec["symbol"] == info.kernel.name and rec["min_driver_version"] == info.min_driver_version
        assert rec["stats"]["registers"] == info.kernel.registers > 0
        assert rec["stats"]["local_bytes"] == 0, f"{spec.name()} spills to local memory"
        assert "compile_seconds" not in rec["stats"]  # a run fact: the build report's, not the manifest's
        assert entry.compile_seconds is not None and entry.compile_seconds > 0
        assert (out / f"{spec.name()}.cubin").read_bytes() == cubin


@pytest.mark.compiler
def test_every_kernel_is_named_after_gemm_sm90s_classes(ci_build):
    """The DSL names a kernel after the module and class of the object it traced (`HopperGemm` or one of
    its host-entry subclasses). Moved to another module, they would rename every kernel, so every cubin's
    bytes would change and the shipped tuning table would be timed on other cubins (runtime/tuning.py
    `kernels_digest`); the kernel's other parts (producer.py, mainloop.py, epilogue.py, grouped.py) are
    mixins and may move freely. codegen/kernels/gemm_sm90.py's docstring says the same."""
    specs, _, out = ci_build
    manifest = json.loads((out / "manifest.json").read_text())
    prefix = "kernel_cutlass_kernel_codegenkernelsgemm_sm90HopperGemm"
    for spec in specs:
        symbol = manifest["instances"][spec.name()]["symbol"]
        assert symbol.startswith(prefix), f"{spec.name()}: {symbol[:80]}..."


def _installed_patterns() -> list[str]:
    """The FILES_MATCHING patterns of CMakeLists.txt's install of the kernel directory."""
    text = (REPO / "CMakeLists.txt").read_text()
    rule = re.search(r'install\(DIRECTORY "\$\{HGEMM_KERNEL_OUT\}/"(.*?)\)', text, re.S)
    assert rule, "CMakeLists.txt no longer installs the kernel directory as this test expects"
    return re.findall(r'PATTERN "([^"]+)"', rule.group(1))


def test_run_facts_go_to_the_build_report_not_the_manifest(tmp_path):
    """Two builds of one commit must ship the same manifest: compile seconds, what was cached, the wall
    time go to build_report.json, which CMakeLists.txt does not install into the wheel."""
    cache = BuildCache(tmp_path / "cache")
    entries = {}
    for i, s in enumerate([fake_kernels.spec(), fake_kernels.spec(cluster=(1, 1))]):
        rec = fake_kernels.record(s)
        rec = InstanceRecord.from_json({**rec.to_json(), "stats": {"registers": 168, "local_bytes": 0}})
        files = {"kernel.cubin": fake_kernels.cubin_bytes(rec.id), "host.o": b"o", "host.h": b"h"}
        key = f"{i:02d}" + "0" * 62
        entries[rec.id] = cache.store(key, files, rec, {"prefix": "p", "name": "f"}, compile_seconds=2.0 + i)
    out = tmp_path / "kernels"
    write_kernel_dir(entries, out, "ci")
    report = write_build_report(out, "ci", entries, dict.fromkeys(entries, "compiled"), seconds=3.5)
    assert report == out / BUILD_REPORT
    manifest = (out / "manifest.json").read_text()
    assert "compile_seconds" not in manifest and "seconds" not in manifest
    doc = json.loads(report.read_text())
    assert doc["profile"] == "ci" and doc["seconds"] == 3.5 and doc["compiled"] == 2 and doc["cached"] == 0
    assert sorted(i["compile_seconds"] for i in doc["instances"].values()) == [2.0, 3.0]
    patterns = _installed_patterns()
    assert any(fnmatch("manifest.json", p) for p in patterns) and any(fnmatch("x.cubin", p) for p in patterns)
    assert not any(fnmatch(BUILD_REPORT, p) for p in patterns), f"{BUILD_REPORT} would ship: {patterns}"
