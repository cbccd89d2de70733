"""The compile driver's failure handling and its artifacts (CPU build tier, real DSL in worker processes)."""

from __future__ import annotations

import json

import pytest

from codegen.build import BuildError, build_entries, check_no_spills
from codegen.cache import BuildCache
from codegen.cubin_info import parse_cubin
from codegen.oracle import cubin_from_object
from runtime.spec import GemmSpec

pytestmark = pytest.mark.compiler


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


def test_keep_going_reports_every_failure(tmp_path):
    bad = [_spec(tile=[96, 128]), _spec(cluster=[3, 1])]
    with pytest.raises(BuildError) as err:
        build_entries(bad, cache=BuildCache(tmp_path), jobs=2, keep_going=True, progress=False)
    text = str(err.value)
    assert text.startswith("2 instance(s) failed")
    assert all(s.name() in text for s in bad)


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
        assert (out / f"{spec.name()}.cubin").read_bytes() == cubin
