"""Tiles whose N is an odd multiple of 8 (24, 88, ...) trace and compile.

The DSL (nvidia-cutlass-dsl 4.8.1) aborts the whole process, with no message, when it slices one stage out
of a staged swizzled shared-memory layout whose rows span an odd number of 8-row swizzle atoms; the kernel
takes its stages under the swizzle instead (`_one_stage` in codegen/kernels/gemm_sm90.py, docs/KERNEL.md).
Each compile runs in a fresh process, as the build's workers do (the DSL is configured before import), so
an abort fails this test instead of the session.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.compiler
REPO = Path(__file__).resolve().parents[2]

COMPILE = """
import sys, tempfile
from pathlib import Path
from codegen import worker
from codegen.dsl import compile_instance
from runtime.spec import GemmSpec
worker._ensure_ready()
with tempfile.TemporaryDirectory() as tmp:
    compiled = compile_instance(GemmSpec.parse(sys.argv[1]), Path(tmp) / "export")
print("cubin bytes", len(compiled.cubin))
"""


@pytest.mark.parametrize(
    "instance_id",
    [
        # B's 88 rows (11 swizzle atoms) under the A/B ring, 8-column epilogue sub-tiles.
        "sm90_bf16_bf16_bf16_fp32acc_kkn_128x88x64_c1x2_coop",
        # Swap-AB: the activation's 72 rows in the ring, D^T's sub-tiles of a 192-row tile (three warpgroups).
        "sm90_e4m3_e4m3_bf16_fp32acc_kkn_192x72x128_c1x1_coop_fastacc_swapab",
        # The epilogue's C stages too (the caller's n-major C is the kernel's m-major one, like D^T).
        "sm90_bf16_bf16_bf16_fp32acc_kkn_192x72x64_c1x1_coop_cbf16n_swapab",
    ],
)
def test_odd_multiple_of_8_tile_n_compiles(instance_id):
    done = subprocess.run(
        [sys.executable, "-c", COMPILE, instance_id],
        cwd=REPO, capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, (done.returncode, done.stderr[-3000:])
    assert "cubin bytes" in done.stdout
