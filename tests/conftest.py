"""Shared fixtures: the `ci` profile compiled once per session with the real DSL (the CPU build tier).

The build goes through the same content-addressed cache as `python -m codegen.build` (HGEMM_BUILD_CACHE,
default under the repository's .cache/), so a second test session, or the wheel build in the e2e test,
reuses the compiled instances instead of compiling again.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def pytest_configure(config):
    """Configure the DSL for sm_90a cross-compilation before any test imports cutlass: the DSL reads its
    target arch and artifact settings once, at import, so whichever test imported it first would otherwise
    decide for all (seen: an sm_100a cubin when a module imported the kernel before a test set the arch).
    Without the DSL there is nothing to configure (the `compiler` tests are then skipped, see below)."""
    if importlib.util.find_spec("cutlass") is None:
        return
    import tempfile

    from codegen.dsl import configure_environment

    dump = tempfile.mkdtemp(prefix="hgemm-test-dsl-dump-")
    config.add_cleanup(lambda: shutil.rmtree(dump, ignore_errors=True))
    configure_environment(dump)


REQUIRE_COMPILER_TIER = "HGEMM_REQUIRE_COMPILER_TIER"  # CI sets it to 1 (.ci/run)
_COMPILER_PASSED_IDS: list[str] = []  # `compiler` tests that passed in this session


def pytest_collection_modifyitems(config, items):
    """Skip every test marked `compiler` where the CPU build tier cannot run (no DSL, or no C compiler), so
    that a machine without them gets skips that say why instead of import errors and failures.

    With HGEMM_REQUIRE_COMPILER_TIER=1 (CI) the tier cannot be skipped silently: a missing DSL or compiler
    is a usage error, and a session in which no `compiler` test passed fails (pytest_sessionfinish)."""
    why = have_compiler_tier()
    if why is None:
        return
    if os.environ.get(REQUIRE_COMPILER_TIER) == "1":
        raise pytest.UsageError(f"{REQUIRE_COMPILER_TIER}=1 but the compiler tier cannot run: {why}")
    skip = pytest.mark.skip(reason=why)
    for item in items:
        if item.get_closest_marker("compiler") is not None:
            item.add_marker(skip)


def pytest_runtest_logreport(report):
    if report.when == "call" and report.passed and "compiler" in report.keywords:
        _COMPILER_PASSED_IDS.append(report.nodeid)


def pytest_sessionfinish(session, exitstatus):
    if os.environ.get(REQUIRE_COMPILER_TIER) != "1" or _COMPILER_PASSED_IDS:
        return
    if exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        msg = f"{REQUIRE_COMPILER_TIER}=1 but no test marked `compiler` passed: the compiler tier did not run"
        if reporter is not None:
            reporter.write_line(f"ERROR: {msg}", red=True)
        else:
            print(f"ERROR: {msg}", file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def have_compiler_tier() -> str | None:
    """None if the CPU build tier can run here, else why not."""
    if importlib.util.find_spec("cutlass") is None:
        return "the CuTe DSL (nvidia-cutlass-dsl) is not installed"
    from codegen.toolchain import c_compiler

    try:
        cc = c_compiler()[0]
    except ValueError:
        return f"CC={os.environ.get('CC')!r} is not a valid command"
    if shutil.which(cc) is None:
        return f"no C compiler ({cc}; set CC) for the DSL host-code oracle"
    return None


def build_cache_dir() -> Path:
    return Path(os.environ.get("HGEMM_BUILD_CACHE", REPO / ".cache" / "build"))


@pytest.fixture(scope="session")
def ci_build(tmp_path_factory):
    """(specs, {id: CacheEntry}, kernel dir with manifest.json) for the `ci` profile."""
    why = have_compiler_tier()
    if why:
        pytest.skip(why)
    from codegen.build import build_entries, write_kernel_dir
    from codegen.cache import BuildCache
    from codegen.matrix import load_matrix

    specs = load_matrix(REPO / "kernel_specs.yaml").expand("ci").specs
    cache = BuildCache(build_cache_dir())
    entries = build_entries(specs, cache=cache, jobs=os.cpu_count() or 1, progress=False)
    out = tmp_path_factory.mktemp("kernels")
    write_kernel_dir(entries, out, "ci")
    return specs, entries, out
