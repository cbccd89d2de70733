"""HGEMM_* knobs: defaults, parsing, typed errors naming the variable, read once per Runtime."""

import os

import pytest

from runtime import knobs, state
from runtime.errors import KnobError


def test_defaults():
    k = knobs.Knobs.from_env({})
    assert (k.kernel_dir, k.verify_sha256, k.log_level, k.log_level_set) == (None, True, "warning", False)
    assert (k.check_pointers, k.allow_peer_pointers, k.num_sms) == ("auto", False, None)


@pytest.mark.parametrize("raw,value", [("", None), ("  ", None), ("114", 114), (" 8 ", 8), ("1", 1)])
def test_num_sms(raw, value):
    assert knobs.Knobs.from_env({"HGEMM_NUM_SMS": raw}).num_sms == value


@pytest.mark.parametrize(
    "raw,value",
    [("0", False), ("off", False), ("NO", False), ("1", True), ("true", True), (" yes ", True), ("", True)],
)
def test_verify_sha256(raw, value):
    assert knobs.Knobs.from_env({"HGEMM_VERIFY_SHA256": raw}).verify_sha256 is value


def test_kernel_dir_is_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    k = knobs.Knobs.from_env({"HGEMM_KERNEL_DIR": "built/kernels"})
    assert k.kernel_dir == os.path.join(str(tmp_path), "built", "kernels")


@pytest.mark.parametrize(
    "env,name",
    [
        ({"HGEMM_VERIFY_SHA256": "maybe"}, "HGEMM_VERIFY_SHA256"),
        ({"HGEMM_LOG_LEVEL": "loud"}, "HGEMM_LOG_LEVEL"),
        ({"HGEMM_CHECK_POINTERS": "sometimes"}, "HGEMM_CHECK_POINTERS"),
        ({"HGEMM_NUM_SMS": "0"}, "HGEMM_NUM_SMS"),
        ({"HGEMM_NUM_SMS": "-4"}, "HGEMM_NUM_SMS"),
        ({"HGEMM_NUM_SMS": "half"}, "HGEMM_NUM_SMS"),
        ({"HGEMM_NUM_SMS": "96.5"}, "HGEMM_NUM_SMS"),
        ({"HGEMM_NUM_SMS": "\u00b2"}, "HGEMM_NUM_SMS"),  # a digit to isdigit(), not to int()
    ],
)
def test_bad_values_name_the_variable(env, name):
    with pytest.raises(KnobError, match=name):
        knobs.Knobs.from_env(env)


def test_a_runtime_reads_the_environment_once(monkeypatch):
    monkeypatch.setenv("HGEMM_LOG_LEVEL", "debug")
    rt = state.Runtime()
    monkeypatch.setenv("HGEMM_LOG_LEVEL", "error")
    assert rt.knobs.log_level == "debug" and rt.knobs.log_level_set
    assert rt.logger.level == 10 and rt.logger is rt.logger


def test_a_bad_knob_fails_at_first_use_not_at_import(monkeypatch):
    import subprocess
    import sys

    env = {**os.environ, "HGEMM_VERIFY_SHA256": "maybe"}
    code = (
        "import runtime\nfrom runtime import state\ntry:\n    state.runtime()\nexcept runtime.KnobError "
        "as e:\n    print('KnobError', e.knob)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=os.path.dirname(os.path.dirname(knobs.__file__)),
    )
    assert out.stdout.strip() == "KnobError HGEMM_VERIFY_SHA256"
