"""Fixtures for the runtime tests: the repo's runtime/ as the package hgemm_sm90, a fake driver injected
at the runtime's one seam (driver._import_bindings), and a generator of kernel folders (manifest.json +
fake cubins) to load from."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest
from fake_driver import FakeDriver
from fake_kernels import IDS, make_doc, make_record, write_kernels

ROOT = Path(__file__).resolve().parents[2]

if "hgemm_sm90" not in sys.modules:
    # Import the source tree's runtime/ under its installed name (an installed wheel must not shadow it).
    # Test modules, imported after this conftest, then simply `import hgemm_sm90`.
    _spec = importlib.util.spec_from_file_location(
        "hgemm_sm90", ROOT / "runtime" / "__init__.py", submodule_search_locations=[str(ROOT / "runtime")])
    _mod = importlib.util.module_from_spec(_spec)
    sys.modules["hgemm_sm90"] = _mod
    _spec.loader.exec_module(_mod)


@pytest.fixture
def doc() -> dict:
    return make_doc({IDS[0]: make_record(IDS[0]), IDS[1]: make_record(IDS[1], cluster=(1, 1, 1)),
                     IDS[2]: make_record(IDS[2], cluster=(4, 4, 1), smem=200000)})


@pytest.fixture
def kernels(tmp_path, doc):
    from hgemm_sm90 import manifest

    return manifest.load(str(write_kernels(tmp_path / "kernels", doc)))


@pytest.fixture(autouse=True)
def default_knobs(monkeypatch):
    """Every test starts from default knobs, whatever HGEMM_* the developer's shell exports."""
    from hgemm_sm90 import knobs

    monkeypatch.setattr(knobs, "_knobs", knobs.Knobs())


@pytest.fixture
def fake(monkeypatch) -> FakeDriver:
    """A FakeDriver handed to the runtime through its one seam, with driver/device caches reset."""
    from hgemm_sm90 import device, driver

    f = FakeDriver()
    monkeypatch.setattr(driver, "_import_bindings", lambda: f)
    monkeypatch.setattr(driver, "_cu", None)
    monkeypatch.setattr(driver, "_version", None)
    monkeypatch.setattr(device, "_ctx_device", {})
    monkeypatch.setattr(device, "_device_info", {})
    f.set_current(f.ctx(0))
    yield f
    f.set_current(None)


def pytest_report_header(config):
    return f"hgemm_sm90 from {os.path.dirname(sys.modules['hgemm_sm90'].__file__)}"
