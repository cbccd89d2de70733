"""HGEMM_* knobs: defaults, parsing, and typed errors naming the variable."""

import os

import pytest
from hgemm_sm90 import knobs
from hgemm_sm90.errors import KnobError


def test_defaults():
    k = knobs.Knobs.from_env({})
    assert (k.kernel_dir, k.verify_sha256, k.log_level, k.log_level_set) == (None, True, "warning", False)


@pytest.mark.parametrize("raw,value", [("0", False), ("off", False), ("NO", False), ("1", True),
                                       ("true", True), (" yes ", True), ("", True)])
def test_verify_sha256(raw, value):
    assert knobs.Knobs.from_env({"HGEMM_VERIFY_SHA256": raw}).verify_sha256 is value


def test_kernel_dir_is_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    k = knobs.Knobs.from_env({"HGEMM_KERNEL_DIR": "built/kernels"})
    assert k.kernel_dir == os.path.join(str(tmp_path), "built", "kernels")


@pytest.mark.parametrize("env,name", [({"HGEMM_VERIFY_SHA256": "maybe"}, "HGEMM_VERIFY_SHA256"),
                                      ({"HGEMM_LOG_LEVEL": "loud"}, "HGEMM_LOG_LEVEL")])
def test_bad_values_name_the_variable(env, name):
    with pytest.raises(KnobError, match=name):
        knobs.Knobs.from_env(env)


def test_get_reads_the_environment_once(monkeypatch):
    monkeypatch.setattr(knobs, "_knobs", None)
    monkeypatch.setenv("HGEMM_LOG_LEVEL", "debug")
    first = knobs.get()
    monkeypatch.setenv("HGEMM_LOG_LEVEL", "error")
    assert knobs.get() is first and first.log_level == "debug" and first.log_level_set
