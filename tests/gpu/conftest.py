"""Fixtures of the GPU tier: per-test seeded generators and the JSON-lines numerics report.

Why a report: a pass/fail line says nothing about margins. Each numerics check records its max abs error,
relative error and torch's own error so the lead can see how close instances run to their budget, and
keep the figures with the run (set HGEMM_GPU_REPORT=PATH; lines are appended, one JSON object each, the
first of a session describing the environment).

This file imports nothing beyond the standard library and pytest at import time: the test modules skip
themselves, with a reason, where torch, CUDA, an sm_90 device or hgemm_sm90 is missing, and this file must
not break that on a CPU-only machine.
"""

from __future__ import annotations

import json
import math
import os
import zlib
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version

import pytest

REPORT_ENV = "HGEMM_GPU_REPORT"


def seed_for(test_name: str) -> int:
    """A stable seed per test id: reruns of one test see the same data, different tests different data."""
    return zlib.crc32(test_name.encode())


@pytest.fixture
def gen(request):
    """A CUDA ``torch.Generator`` seeded from this test's id (parameters included)."""
    import torch

    return torch.Generator(device="cuda").manual_seed(seed_for(request.node.name))


def _clean(value):
    # JSON has no NaN/inf: a NaN error (unwritten outputs) is recorded as null, with passed=false beside it.
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _environment() -> dict:
    import torch

    try:
        pkg = version("hgemm-sm90")
    except PackageNotFoundError:  # e.g. HGEMM_KERNEL_DIR or a source tree on the path: informational only
        pkg = "unknown"
    return {"kind": "environment", "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda,
            "hgemm_sm90": pkg}


@pytest.fixture(scope="session")
def report():
    """``report(**fields)`` appends one JSON line to $HGEMM_GPU_REPORT (no-op when it is unset)."""
    path = os.environ.get(REPORT_ENV)
    if not path:
        yield lambda **fields: None
        return

    def write(**fields) -> None:
        with open(path, "a", encoding="utf-8") as f:  # append + flush per line: survives a crash mid-run
            f.write(json.dumps({k: _clean(v) for k, v in fields.items()}) + "\n")

    write(**_environment())
    yield write
