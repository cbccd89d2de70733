"""Fixtures shared by the CPU tests of the GPU maintainer tools (build_tools/tune.py, tune_walks.py)."""

from __future__ import annotations

import contextlib
import sys
import types

import pytest


@pytest.fixture
def fake_tuner(monkeypatch):
    """A function that runs build_tools.tune's GPU modes without a GPU: torch is a stand-in whose stream
    context and cache emptying do nothing, `tune.setup` returns ``hg`` and ``env``, every instance is of
    class ``key`` on GPU "FAKE/1", and `bench.bench_shape` is ``bench_shape`` (which returns the runner
    rows a test wants)."""
    from build_tools import bench, tune

    def install(hg, env: dict, key: str, bench_shape) -> None:
        fake_torch = types.SimpleNamespace(
            cuda=types.SimpleNamespace(stream=lambda s: contextlib.nullcontext(), empty_cache=lambda: None)
        )
        monkeypatch.setitem(sys.modules, "torch", fake_torch)
        monkeypatch.setattr(tune, "setup", lambda torch: (hg, env, None))
        monkeypatch.setattr(tune, "gpu_key", lambda torch: "FAKE/1")
        monkeypatch.setattr(tune, "class_key", lambda inst: key)
        monkeypatch.setattr(bench, "nvidia_smi", lambda uuid: {})
        monkeypatch.setattr(bench, "warm_up_clocks", lambda torch, seconds: None)
        monkeypatch.setattr(bench, "bench_shape", bench_shape)

    return install
