"""Fixtures of the GPU tier: per-test seeded generators and the JSON-lines numerics report.

Why a report: a pass/fail line says nothing about margins. Each numerics check records its max abs error,
relative error and torch's own error so the lead can see how close instances run to their budget, and
keep the figures with the run (set HGEMM_GPU_REPORT=PATH; lines are appended, one JSON object each, the
first of a session describing the environment). The terminal summary prints the counts and worst errors
per D dtype and input kind at the end of every run.

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
    return {
        "kind": "environment",
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "hgemm_sm90": pkg,
    }


_ROWS: list[dict] = []  # every reported row of this session, for the terminal summary


@pytest.fixture(scope="session")
def report():
    """``report(**fields)`` records one row for the terminal summary and appends it as a JSON line to
    $HGEMM_GPU_REPORT (when set)."""
    path = os.environ.get(REPORT_ENV)

    def write(**fields) -> None:
        row = {k: _clean(v) for k, v in fields.items()}
        _ROWS.append(row)
        if path:
            with open(path, "a", encoding="utf-8") as f:  # append + flush per line: survives a crash mid-run
                f.write(json.dumps(row) + "\n")

    if path:
        write(**_environment())
    yield write


def _worst(rows: list[dict], key: str):
    vals = [r for r in rows if r.get(key) is not None]
    return max(vals, key=lambda r: r[key]) if vals else None


def pytest_terminal_summary(terminalreporter):
    """Counts and worst errors of the numerics checks, per D dtype and input kind (the figures the issue
    note asks for), so they need not be dug out of the JSON lines."""
    rows = [r for r in _ROWS if r.get("kind") == "numerics"]
    acc = [r for r in _ROWS if r.get("kind") == "fp8_accumulation"]
    if not rows and not acc:
        return
    tr = terminalreporter
    tr.section("hgemm numerics summary")
    n_inst = len({r["instance"] for r in rows})
    tr.write_line(
        f"{len(rows)} numerics checks on {n_inst} instances, {sum(not r['passed'] for r in rows)} over budget"
    )
    groups: dict[str, list[dict]] = {}
    for r in rows:
        fp8_in = r["a_dtype"] in ("e4m3", "e5m2") or r["b_dtype"] in ("e4m3", "e5m2")
        inputs = ("fp8 " + ("fast" if r.get("fp8_fast_accum") else "promoted")) if fp8_in else "16-bit"
        inputs += " fp16-acc" if r.get("acc_dtype") == "fp16" else ""
        groups.setdefault(f"{inputs} -> {r['d_dtype']}", []).append(r)
    for name in sorted(groups):
        g = groups[name]
        rel, ratio, ulp = _worst(g, "rel_err"), _worst(g, "err_over_budget"), _worst(g, "max_ulp")
        line = (
            f"  {name:<24} {len(g):5d} checks; worst rel err {rel['rel_err']:.2e} ({rel['instance']} "
            f"{rel['case']})"
            if rel
            else f"  {name:<24} {len(g):5d} checks"
        )
        if ratio:
            line += (
                f"; worst max-abs err / budget {ratio['err_over_budget']:.2f} ({ratio['instance']} "
                f"{ratio['case']})"
            )
        if ulp:
            line += f"; worst ulp distance {ulp['max_ulp']} ({ulp['instance']} {ulp['case']})"
        tr.write_line(line)

    def e(v) -> str:
        return "n/a" if v is None else f"{v:.2e}"

    for r in acc:
        tr.write_line(
            f"  fp8 accumulation K={r['k']} -> {r['d_dtype']}: rel err promoted "
            f"{e(r['slow_rel_err'])} vs fast {e(r['fast_rel_err'])} (cuBLASLt's fp32 accumulators: "
            f"{e(r.get('torch_promoted_acc_rel_err'))}, {e(r.get('torch_fast_acc_rel_err'))}) "
            f"{r['slow']}"
        )
