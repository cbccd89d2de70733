"""No shipped kernel lets ptxas serialize its WGMMAs (build_tools/wgmma_check.py says why that matters).

Runs the check on every `ci` instance (one per feature: each mainloop variant, schedule and epilogue) in a
fresh process, since the PTX dump must be requested before the DSL is imported. Needs the CUDA toolkit's
ptxas; skipped without it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from build_tools.wgmma_check import find_ptxas
from codegen.matrix import load_matrix

pytestmark = pytest.mark.compiler
REPO = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(find_ptxas() is None, reason="no ptxas (CUDA toolkit) on PATH or in $CUDA_HOME/bin")
def test_ci_instances_keep_their_wgmmas_asynchronous():
    """Every ci instance's WGMMAs stay asynchronous, except the known case: fp16 accumulators, which the
    DSL (nvidia-cutlass-dsl 4.8.1) keeps as 16-bit registers and packs around every WGMMA, so ptxas waits
    for each (C7517). Those instances still beat fp32 accumulation (docs/PERF.md) and ship as they are;
    this test says so when a DSL release stops serializing them."""
    ids = load_matrix(REPO / "kernel_specs.yaml").expand("ci").names()
    done = subprocess.run(
        [sys.executable, "-m", "build_tools.wgmma_check", *ids],
        cwd=REPO, capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip
    verdicts = {}
    for line in done.stdout.splitlines():
        word, _, name = line.strip().partition(" ")
        if name.strip() in ids:
            verdicts[name.strip()] = word
    assert set(verdicts) == set(ids), done.stdout + done.stderr[-3000:]
    for iid, word in verdicts.items():
        assert word == ("SERIALIZED" if "_fp16acc_" in iid else "ok"), (iid, done.stdout)
