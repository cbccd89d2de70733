"""Fixtures for the runtime tests. The runtime is imported one way, as the source package `runtime` (as
codegen imports it); each test that touches the driver gets its own `Runtime` (runtime/state.py) built
around a fake driver (fake_driver.py) and a kernel folder, installed as the process's runtime for the
test, so no test reaches into module globals and nothing leaks between tests."""

from __future__ import annotations

import pytest
from fake_driver import FakeDriver
from fake_kernels import RECORDS, make_doc, write_kernels

from runtime import manifest, state
from runtime.knobs import Knobs


@pytest.fixture
def doc() -> dict:
    return make_doc(RECORDS)


@pytest.fixture
def kernels(tmp_path, doc):
    """The Manifest of a fake kernel folder (three bf16 instances)."""
    return manifest.load(str(write_kernels(tmp_path / "kernels", doc)))


@pytest.fixture
def fake() -> FakeDriver:
    """A FakeDriver with one H200 whose context is current on this thread."""
    f = FakeDriver()
    f.set_current(f.ctx(0))
    yield f
    f.set_current(None)


@pytest.fixture
def make_runtime(fake):
    """`make_runtime(catalog=None, **knobs)`: a Runtime around the fake driver, installed for the rest of
    the test (default knobs, whatever HGEMM_* the developer's shell exports)."""
    installed = []

    def make(catalog=None, **knob_values) -> state.Runtime:
        rt = state.Runtime(Knobs(**knob_values), import_bindings=lambda: fake, catalog=catalog)
        ctx = state.install(rt)
        ctx.__enter__()
        installed.append(ctx)
        return rt

    yield make
    for ctx in reversed(installed):
        ctx.__exit__(None, None, None)


@pytest.fixture
def rt(make_runtime, kernels) -> state.Runtime:
    """The installed Runtime over the fake kernel folder."""
    return make_runtime(kernels)
