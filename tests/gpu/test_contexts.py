"""The runtime across CUDA contexts and threads on one GPU (the part of the multi-GPU issue one GPU can run).

- Two contexts on one device: a launch on a stream of a second, driver-created context loads the kernel
  there (its own module; the first context's handle would be invalid in it) and computes the right result,
  while the primary (torch) context keeps working.
- Threads: many threads launching on their own streams at once, with the kernel cache empty at the start,
  race on first use (one load per context) and each gets its own correct result.
"""

from __future__ import annotations

import threading

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
    pytest.skip("needs an sm_90 GPU (H100/H200)", allow_module_level=True)
hgemm_sm90 = pytest.importorskip("hgemm_sm90")

from hgemm_sm90 import driver, state

pytestmark = pytest.mark.gpu


def _plain_bf16():
    """A bf16 -> bf16, K-major A/B, N-major D instance without C (the most common kind)."""
    return next(
        i.id
        for i in hgemm_sm90.instances()
        if (i.a_dtype, i.d_dtype, i.a_major, i.b_major, i.d_major) == ("bf16", "bf16", "k", "k", "n")
        and not i.has_c
        and i.varlen == "none"
        and i.schedule == "cooperative"
    )


def _check(res, call):
    err = res[0]
    assert int(err) == 0, f"{call} failed: {err}"
    return res[1] if len(res) == 2 else res[1:]


def _create_context(cu, dev: int):
    """A new (non-primary) context on `dev`, current on this thread. cuCtxCreate's signature differs
    between cuda-bindings 12.x (flags, dev) and 13.x (params, flags, dev)."""
    try:
        return _check(cu.cuCtxCreate(None, 0, dev), "cuCtxCreate")
    except TypeError:
        return _check(cu.cuCtxCreate(0, dev), "cuCtxCreate")


def test_a_second_context_on_the_same_device_loads_and_runs_its_own_module():
    import numpy as np

    rt = state.runtime()
    cu = rt.cu
    torch.cuda.synchronize()
    iid = _plain_bf16()
    m, n, k = 256, 384, 320
    rng = np.random.default_rng(7)
    a32 = rng.standard_normal((m, k), dtype=np.float32)
    b32 = rng.standard_normal((n, k), dtype=np.float32)
    a16 = torch.from_numpy(a32).to(torch.bfloat16)
    b16 = torch.from_numpy(b32).to(torch.bfloat16)
    ref = a16.double() @ b16.double().T

    # Primary context (torch): the reference result there too.
    at, bt = a16.cuda(), b16.cuda()
    dt = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    hgemm_sm90.launch(
        iid, (at.data_ptr(), bt.data_ptr(), dt.data_ptr()), torch.cuda.current_stream(), m=m, n=n, k=k
    )
    loads_before = len(rt.kernels)

    ctx = _create_context(cu, torch.cuda.current_device())
    try:
        stream = _check(cu.cuStreamCreate(0), "cuStreamCreate")
        nbytes = {"a": m * k * 2, "b": n * k * 2, "d": m * n * 2}
        ptr = {name: int(_check(cu.cuMemAlloc(size), "cuMemAlloc")) for name, size in nbytes.items()}
        a_host = np.ascontiguousarray(a16.view(torch.int16).numpy())
        b_host = np.ascontiguousarray(b16.view(torch.int16).numpy())
        _check(cu.cuMemcpyHtoD(ptr["a"], a_host.ctypes.data, nbytes["a"]), "cuMemcpyHtoD")
        _check(cu.cuMemcpyHtoD(ptr["b"], b_host.ctypes.data, nbytes["b"]), "cuMemcpyHtoD")
        _check(cu.cuMemsetD16(ptr["d"], 0x7FC0, m * n), "cuMemsetD16")  # bf16 NaN: unwritten outputs show
        hgemm_sm90.launch(iid, (ptr["a"], ptr["b"], ptr["d"]), driver.handle(stream), m=m, n=n, k=k)
        _check(cu.cuStreamSynchronize(stream), "cuStreamSynchronize")
        host = np.empty(m * n, dtype=np.int16)
        _check(cu.cuMemcpyDtoH(host.ctypes.data, ptr["d"], nbytes["d"]), "cuMemcpyDtoH")
        out = torch.from_numpy(host).view(torch.bfloat16).reshape(m, n).double()
        assert len(rt.kernels) == loads_before + 1  # one more module: this context's
        for p in ptr.values():
            _check(cu.cuMemFree(p), "cuMemFree")
        _check(cu.cuStreamDestroy(stream), "cuStreamDestroy")
    finally:
        _check(cu.cuCtxPopCurrent(), "cuCtxPopCurrent")
        rt.forget_context(driver.handle(ctx))  # its modules, launch entries and stream facts
        _check(cu.cuCtxDestroy(ctx), "cuCtxDestroy")

    assert not torch.isnan(out).any()
    rel = ((out - ref).norm() / ref.norm()).item()
    assert rel < 1e-2, rel
    # The primary context still works after the other context is gone.
    torch.cuda.synchronize()
    rel_primary = ((dt.double().cpu() - ref).norm() / ref.norm()).item()
    assert rel_primary < 1e-2
    dt.fill_(float("nan"))
    hgemm_sm90.launch(
        iid, (at.data_ptr(), bt.data_ptr(), dt.data_ptr()), torch.cuda.current_stream(), m=m, n=n, k=k
    )
    torch.cuda.synchronize()
    assert not torch.isnan(dt).any()


def test_threads_race_on_first_use_and_keep_their_own_results():
    ids = [
        i.id
        for i in hgemm_sm90.instances()
        if (i.a_dtype, i.d_dtype, i.a_major, i.b_major, i.d_major) == ("bf16", "bf16", "k", "k", "n")
        and not i.has_c
        and i.varlen == "none"
    ][:4]
    # A fresh Runtime (no kernel loaded, no plan): the threads below all hit first use together.
    fresh = state.Runtime()
    dev = torch.cuda.current_device()
    jobs = []
    for t in range(8):
        m, n, k = 128 * (t + 1), 256 + 64 * t, 192
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        jobs.append((ids[t % len(ids)], a, b, d, torch.cuda.Stream()))
    torch.cuda.synchronize()
    start = threading.Barrier(len(jobs))
    errors = []

    def work(job):
        iid, a, b, d, stream = job
        try:
            torch.cuda.set_device(dev)
            start.wait()
            for _ in range(20):
                hgemm_sm90.launch(
                    iid,
                    (a.data_ptr(), b.data_ptr(), d.data_ptr()),
                    stream,
                    m=a.shape[0],
                    n=b.shape[0],
                    k=a.shape[1],
                )
        except Exception as e:  # noqa: BLE001 - reported by the assertion below, in the main thread
            errors.append(e)

    with state.install(fresh):
        threads = [threading.Thread(target=work, args=(j,)) for j in jobs]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    assert not errors, errors
    torch.cuda.synchronize()
    assert len(fresh.kernels) == len({j[0] for j in jobs})  # one load per (context, instance)
    assert fresh.kernels.contexts() == {fresh.devices.current_context()}
    for iid, a, b, d, _ in jobs:
        ref = a.double() @ b.double().T
        rel = ((d.double() - ref).norm() / ref.norm()).item()
        assert rel < 1e-2 and not torch.isnan(d).any(), (iid, rel)
