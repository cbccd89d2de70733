"""The runtime on every GPU of a node (needs >= 2 sm_90 GPUs; skipped otherwise).

Every `ci`-profile instance runs on each GPU from one process (one thread per GPU, each with its own
streams) and from one process per GPU, against the fp64 reference; a launch whose operands live on another
GPU than its stream's is refused before anything runs. NVLink multicast stays off (NCCL_NVLS_ENABLE=0): it
is not used here, and a process that used it could take the host's GPUs out of service.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
if torch.cuda.device_count() < 2 or any(
    torch.cuda.get_device_capability(i) != (9, 0) for i in range(torch.cuda.device_count())
):
    pytest.skip("needs at least two sm_90 GPUs", allow_module_level=True)
hgemm_sm90 = pytest.importorskip("hgemm_sm90")

from tests.gpu.gemm_util import EDGE_CASES, REL_BOUND, make_problem, reference  # noqa: E402
from tests.gpu.gemm_util import launch as launch_problem  # noqa: E402

pytestmark = pytest.mark.gpu
REPO = Path(__file__).resolve().parents[2]
CASE = next(c for c in EDGE_CASES if c.name == "batch3")  # ragged, batched, small: quick on every GPU


def ci_instances():
    from codegen.matrix import load_matrix

    ci = set(load_matrix(REPO / "kernel_specs.yaml").expand("ci").names())
    shipped = [i for i in hgemm_sm90.instances() if i.id in ci]
    assert len(shipped) == len(ci), f"the wheel lacks ci instances {sorted(ci - {i.id for i in shipped})}"
    return shipped


def _run_all_on(dev: int, results: dict, stream_per_instance: bool = True) -> None:
    torch.cuda.set_device(dev)
    gen = torch.Generator(device=f"cuda:{dev}").manual_seed(1234 + dev)
    for inst in ci_instances():
        stream = torch.cuda.Stream(device=dev) if stream_per_instance else torch.cuda.current_stream(dev)
        with torch.cuda.stream(stream):
            p = make_problem(inst, CASE, gen)
            launch_problem(p, stream=stream)
        stream.synchronize()
        ref, _ = reference(p)
        out = p.d.t.double()
        rel = (torch.linalg.vector_norm(out - ref) / torch.linalg.vector_norm(ref)).item()
        results[(dev, inst.id)] = (rel, bool(torch.isnan(out).any()), out.device.index)


def test_every_ci_instance_on_every_gpu_one_thread_per_gpu():
    results: dict = {}
    errors: list = []

    def work(dev):
        try:
            _run_all_on(dev, results)
        except Exception as e:  # reported below
            errors.append((dev, e))

    threads = [threading.Thread(target=work, args=(d,)) for d in range(torch.cuda.device_count())]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    insts = {i.id: i for i in ci_instances()}
    assert len(results) == len(insts) * torch.cuda.device_count()
    for (dev, iid), (rel, has_nan, where) in sorted(results.items()):
        print(f"gpu{dev} {iid}: rel err {rel:.2e}")
        assert where == dev and not has_nan and rel < REL_BOUND[insts[iid].d_dtype], (dev, iid, rel)


_CHILD = """
import os, sys, torch
sys.path.insert(0, {repo!r})
from tests.gpu.test_multi_gpu import _run_all_on, ci_instances
results = {{}}
_run_all_on(0, results)
from tests.gpu.gemm_util import REL_BOUND
insts = {{i.id: i for i in ci_instances()}}
bad = [(k, v) for k, v in results.items() if v[1] or v[0] >= REL_BOUND[insts[k[1]].d_dtype]]
print("GPU", os.environ["CUDA_VISIBLE_DEVICES"], "instances", len(results), "bad", bad)
sys.exit(1 if bad or len(results) != len(insts) else 0)
"""


def test_every_ci_instance_on_every_gpu_one_process_per_gpu():
    procs = []
    for dev in range(torch.cuda.device_count()):
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": str(dev), "NCCL_NVLS_ENABLE": "0"}
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", _CHILD.format(repo=str(REPO))],
                env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            )
        )
    outs = [(p.wait(timeout=300), p.stdout.read()) for p in procs]
    for rc, out in outs:
        print(out[-2000:])
        assert rc == 0, out[-4000:]


def test_operands_on_another_gpu_are_refused_before_launching():
    inst = next(i for i in ci_instances() if not i.has_c)
    torch.cuda.set_device(0)
    gen = torch.Generator(device="cuda:0").manual_seed(5)
    p = make_problem(inst, CASE, gen)
    with torch.cuda.device(1):
        b_other = torch.empty_like(p.b.t, device="cuda:1")  # same shape, on the wrong GPU
    before = p.d.t.clone()
    stream0 = torch.cuda.Stream(device=0)
    with pytest.raises(hgemm_sm90.DeviceMismatchError) as err:
        launch_problem(p, stream=stream0, ptrs=(p.a.ptr(), b_other.data_ptr(), p.d.ptr()))
    assert "device 1" in str(err.value) or "'b'" in str(err.value)
    stream0.synchronize()
    assert torch.equal(p.d.t.isnan(), before.isnan())  # nothing was launched
