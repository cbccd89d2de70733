"""Helpers of tests/gpu/test_multi_gpu.py that its per-GPU child processes import (a child sees one GPU,
so it cannot import the test module itself, which skips below two GPUs)."""

from __future__ import annotations

from pathlib import Path

import torch

import hgemm_sm90
from tests.gpu.gemm_util import EDGE_CASES, REL_BOUND, make_problem, reference
from tests.gpu.gemm_util import launch as launch_problem

REPO = Path(__file__).resolve().parents[2]
CASE = next(c for c in EDGE_CASES if c.name == "batch3")  # ragged, batched, small: quick on every GPU


def ci_instances():
    from codegen.matrix import load_matrix

    ci = set(load_matrix(REPO / "kernel_specs.yaml").expand("ci").names())
    shipped = [i for i in hgemm_sm90.instances() if i.id in ci]
    assert len(shipped) == len(ci), f"the wheel lacks ci instances {sorted(ci - {i.id for i in shipped})}"
    return [i for i in shipped if i.varlen == "none"]  # grouped GEMMs take another problem (test_grouped.py)


def run_all_on(dev: int, results: dict) -> None:
    """Every ci instance on GPU `dev`, each on its own stream; results[(dev, id)] = (rel err, any NaN,
    device of D)."""
    torch.cuda.set_device(dev)
    with torch.cuda.device(dev):
        gen = torch.Generator(device=f"cuda:{dev}").manual_seed(1234 + dev)
        for inst in ci_instances():
            stream = torch.cuda.Stream(device=dev)
            with torch.cuda.stream(stream):
                p = make_problem(inst, CASE, gen)
                launch_problem(p, stream=stream)
            stream.synchronize()
            ref, _ = reference(p)
            out = p.d.t.double()
            rel = (torch.linalg.vector_norm(out - ref) / torch.linalg.vector_norm(ref)).item()
            results[(dev, inst.id)] = (rel, bool(torch.isnan(out).any()), p.d.t.device.index)


def check(results: dict) -> list:
    """The (key, result) pairs that failed: NaN, wrong device, or error over the dtype's bound."""
    insts = {i.id: i for i in ci_instances()}
    return [
        (key, r)
        for key, r in sorted(results.items())
        if r[1] or r[2] != key[0] or r[0] >= REL_BOUND[insts[key[1]].d_dtype]
    ]
