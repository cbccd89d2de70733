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

import pytest

torch = pytest.importorskip("torch")
if torch.cuda.device_count() < 2 or any(
    torch.cuda.get_device_capability(i) != (9, 0) for i in range(torch.cuda.device_count())
):
    pytest.skip("needs at least two sm_90 GPUs", allow_module_level=True)
hgemm_sm90 = pytest.importorskip("hgemm_sm90")

from tests.gpu.gemm_util import launch as launch_problem
from tests.gpu.gemm_util import make_problem
from tests.gpu.multi_gpu_util import CASE, REPO, check, ci_instances, run_all_on

pytestmark = pytest.mark.gpu


def test_every_ci_instance_on_every_gpu_one_thread_per_gpu():
    results: dict = {}
    errors: list = []

    def work(dev):
        try:
            run_all_on(dev, results)
        except Exception as e:  # noqa: BLE001  (any failure in a thread is reported below)
            errors.append((dev, e))

    threads = [threading.Thread(target=work, args=(d,)) for d in range(torch.cuda.device_count())]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(results) == len(ci_instances()) * torch.cuda.device_count()
    for (dev, iid), (rel, _, _) in sorted(results.items()):
        print(f"gpu{dev} {iid}: rel err {rel:.2e}")
    assert not check(results)


_CHILD = """
import os, sys
sys.path.insert(0, {repo!r})
from tests.gpu.multi_gpu_util import check, ci_instances, run_all_on
results = {{}}
run_all_on(0, results)
bad = check(results)
print("GPU", os.environ["CUDA_VISIBLE_DEVICES"], "instances", len(results), "bad", bad)
sys.exit(1 if bad or len(results) != len(ci_instances()) else 0)
"""


def test_every_ci_instance_on_every_gpu_one_process_per_gpu():
    procs = []
    for dev in range(torch.cuda.device_count()):
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": str(dev), "NCCL_NVLS_ENABLE": "0"}
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", _CHILD.format(repo=str(REPO))],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
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
    with torch.cuda.device(0):
        p = make_problem(inst, CASE, gen)
    assert p.b.t.device.index == 0
    b_other = torch.empty_like(p.b.t, device="cuda:1")  # same shape, on the wrong GPU
    assert b_other.device.index == 1
    before = p.d.t.clone()
    stream0 = torch.cuda.Stream(device=0)
    with pytest.raises(hgemm_sm90.DeviceMismatchError) as err:
        launch_problem(p, stream=stream0, ptrs=(p.a.ptr(), b_other.data_ptr(), p.d.ptr()))
    assert "device 1" in str(err.value) or "'b'" in str(err.value)
    stream0.synchronize()
    assert torch.equal(p.d.t.isnan(), before.isnan())  # nothing was launched
