"""`python -m codegen.build` fails fast and in one line on what it can check before compiling.

A bad spec file, an unknown profile and a missing C compiler are each reported as a single line naming
the fix, with exit status 1 and no traceback, before anything is compiled: quickly, and without creating
a cache entry or writing the kernel directory. No DSL or compiler is needed to run these.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FAST_S = 15.0  # measured ~0.3 s; generous for a loaded 2-core CI box, far below any compile


def _build(tmp_path: Path, *args: str, **env: str) -> tuple[str, float]:
    full_env = {k: v for k, v in os.environ.items() if k not in ("HGEMM_PROFILE", "CC")}
    full_env.update(HGEMM_BUILD_CACHE=str(tmp_path / "cache"), **env)
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "codegen.build", "--out", str(tmp_path / "kernels"), "--jobs", "1", *args],
        cwd=REPO,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    seconds = time.perf_counter() - t0
    err = done.stderr
    assert done.returncode == 1, (done.returncode, err)
    assert "Traceback" not in err, err
    assert err.endswith("\n") and err.count("\n") == 1, f"not one line: {err!r}"
    assert err.startswith("hgemm-sm90 build failed: "), err
    assert seconds < FAST_S, f"took {seconds:.1f} s: it compiled or imported the DSL before checking"
    assert not (tmp_path / "cache").exists() and not (tmp_path / "kernels").exists()
    return err.strip(), seconds


def test_a_spec_file_that_is_not_yaml(tmp_path):
    spec = tmp_path / "specs.yaml"
    spec.write_text("version: 1\ngroups: [1, 2\n")
    err, _ = _build(tmp_path, "--spec", str(spec), "--profile", "ci")
    assert f"{spec}: not valid YAML" in err


def test_a_spec_file_that_breaks_the_schema(tmp_path):
    text = (REPO / "kernel_specs.yaml").read_text()
    spec = tmp_path / "specs.yaml"
    spec.write_text(text.replace("\ngroups:\n", "\ngroups:\n  broken: {axes: {a_dtype: bf99}}\n", 1))
    err, _ = _build(tmp_path, "--spec", str(spec), "--profile", "ci")
    assert str(spec) in err and "broken" in err


def test_a_missing_spec_file(tmp_path):
    err, _ = _build(tmp_path, "--spec", str(tmp_path / "nope.yaml"))
    assert "cannot read the spec file" in err and "--spec" in err


@pytest.mark.parametrize("how", ["--profile", "HGEMM_PROFILE"])
def test_an_unknown_profile_lists_the_known_ones(tmp_path, how):
    args, env = (["--profile", "nightly"], {}) if how == "--profile" else ([], {"HGEMM_PROFILE": "nightly"})
    err, _ = _build(tmp_path, *args, **env)
    assert "unknown profile 'nightly'" in err and "HGEMM_PROFILE" in err
    assert "default" in err and "ci" in err


def test_a_missing_c_compiler_is_named_before_compiling(tmp_path):
    err, _ = _build(tmp_path, "--profile", "ci", CC="/nonexistent/cc")
    assert "no C compiler" in err and "/nonexistent/cc" in err and "set CC" in err


def test_the_c_compiler_is_cc_or_dollar_cc(monkeypatch):
    from codegen.toolchain import ToolchainError, c_compiler, check_c_compiler

    monkeypatch.delenv("CC", raising=False)
    assert c_compiler() == ["cc"]
    monkeypatch.setenv("CC", "ccache gcc -m64")
    assert c_compiler() == ["ccache", "gcc", "-m64"]
    monkeypatch.setenv("CC", sys.executable)  # any executable passes the existence check
    assert check_c_compiler() == [sys.executable]
    monkeypatch.setenv("CC", "'unbalanced")
    with pytest.raises(ToolchainError, match="not a valid command"):
        check_c_compiler()
