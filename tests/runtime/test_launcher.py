"""What reaches cuLaunchKernelEx: config, kernelParams, caching per launch entry, per-thread buffers, driver
errors and the stale-stream retry, and the Python cost per cached launch (fake driver)."""

import statistics
import struct
import threading
import timeit
from types import SimpleNamespace

import pytest
from fake_driver import Device
from fake_kernels import IDS

import runtime
from runtime import launcher
from runtime.errors import CudaDriverError

A, B, D = 0x7F10_0000_0000, 0x7F20_0000_0000, 0x7F30_0000_0000
SHAPE = dict(m=256, n=256, k=64)


@pytest.fixture
def rec(rt, fake):
    r = rt.manifest.record(IDS[0])
    fake.param_sizes = tuple(p.size for p in r.params)
    return r


def test_launch_sees_grid_block_smem_stream_cluster_and_params(fake, rt, rec):
    s = fake.new_stream(fake.ctx(0))
    runtime.launch(IDS[0], (A, B, D), s, **SHAPE)
    (launch,) = fake.launches
    # 256 x 256 in 128 x 256 tiles, clusters of 2 x 1: one cluster tile, so one cluster.
    assert launch.grid == (2, 1, 1) and launch.block == (384, 1, 1) and launch.smem == 232448
    assert launch.stream == s and int(launch.function) == int(rt.kernels.get(fake.ctx(0), IDS[0]).function)
    (attr,) = launch.attrs
    assert attr.id == fake.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    assert (attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z) == (2, 1, 1)
    # kernelParams[i] points at parameter i inside one buffer.
    assert [p - launch.pointers[0] + rec.params[0].offset for p in launch.pointers] == list(rec.param_offsets)
    values = dict(zip([(p.kind, p.operand or p.name) for p in rec.params], launch.values))
    assert values["tensormap", "a"][:8] == A.to_bytes(8, "little")
    assert values["shape", "d"] == struct.pack("<3i", 256, 256, 1)
    assert values["f32", "alpha"] == struct.pack("<f", 1.0)


def test_the_grid_is_the_persistent_rule(fake, rt, rec):
    fake.max_active_clusters = 5
    runtime.launch(IDS[0], (A, B, D), 0, m=4096, n=4096, k=64)  # 16 x 16 cluster tiles > 5 resident
    assert fake.launches[-1].grid == (2 * 5, 1, 1)


def test_a_cached_launch_asks_the_driver_nothing_else(fake, rt, rec):
    s = fake.new_stream(fake.ctx(0))
    runtime.launch(IDS[0], (A, B, D), s, **SHAPE)
    before = len(fake.calls)
    for i in range(5):
        runtime.launch(IDS[0], (A + 16 * i, B, D), s, **SHAPE, alpha=float(i))
    assert [name for name, _ in fake.calls[before:]] == ["cuLaunchKernelEx"] * 5
    configs = {id(launch.config) for launch in fake.launches}
    assert len(configs) == 1  # one config per (shape, stream, pdl), built once
    assert len({args[2] for args in fake.args("cuLaunchKernelEx")}) == 1  # one kernelParams array per thread
    runtime.launch(IDS[0], (A, B, D), 0, **SHAPE)  # the default stream: its context is the current one
    before = len(fake.calls)
    runtime.launch(IDS[0], (A, B, D), 0, **SHAPE)
    assert [name for name, _ in fake.calls[before:]] == ["cuCtxGetCurrent", "cuLaunchKernelEx"]
    assert fake.launches[-1].config is not fake.launches[0].config  # another stream, another entry


def test_buffer_contents_are_per_launch(fake, rt, rec):
    for alpha in (1.5, -2.0):
        runtime.launch(IDS[0], (A, B, D), 0, **SHAPE, alpha=alpha)
    index = [p.name for p in rec.params].index("alpha")
    assert [launch.values[index] for launch in fake.launches] == [
        struct.pack("<f", 1.5),
        struct.pack("<f", -2.0),
    ]


def test_programmatic_serialization_attribute(fake, rt, rec):
    runtime.launch(IDS[0], (A, B, D), 0, **SHAPE, pdl=True)
    attrs = fake.launches[0].attrs
    ids = fake.CUlaunchAttributeID
    assert [a.id for a in attrs] == [
        ids.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION,
        ids.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
    ]
    assert attrs[1].value.programmaticStreamSerializationAllowed == 1


def test_a_1x1_cluster_launches_as_a_plain_grid(fake, rt):
    """No cluster-dimension attribute for a kernel of 1x1 clusters (`launches_as_cluster`): the same CTAs,
    faster to start (docs/PERF.md session 44); PDL's attribute is still set when asked for."""
    fake.param_sizes = tuple(p.size for p in rt.manifest.record(IDS[1]).params)
    runtime.launch(IDS[1], (A, B, D), 0, **SHAPE)
    runtime.launch(IDS[1], (A, B, D), 0, **SHAPE, pdl=True)
    plain, chained = fake.launches
    assert plain.grid == (2, 1, 1) and plain.attrs == []  # two 128 x 256 tiles, one CTA each
    assert [a.id for a in chained.attrs] == [
        fake.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    ]
    assert launcher.launches_as_cluster(rt.manifest.record(IDS[1])) is False
    assert launcher.launches_as_cluster(rt.manifest.record(IDS[0])) is True


def test_ptx_trial_can_launch_a_1x1_kernel_as_a_cluster_again(fake, rt):
    """build_tools/ptx_trial.py `timeline --as-cluster`: the cached launch gets the cluster attribute back
    (the launch rule before session 44) on the same grid and stream, for an A/B of the rule."""
    from build_tools import ptx_trial

    fake.param_sizes = tuple(p.size for p in rt.manifest.record(IDS[1]).params)
    stream = fake.new_stream(fake.ctx(0))
    runtime.launch(IDS[1], (A, B, D), stream, **SHAPE)
    ptx_trial.launch_as_cluster(rt, IDS[1], launcher.build_config)
    runtime.launch(IDS[1], (A, B, D), stream, **SHAPE)
    plain, clustered = fake.launches
    assert plain.attrs == [] and clustered.grid == plain.grid == (2, 1, 1)
    assert [a.id for a in clustered.attrs] == [fake.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION]
    dim = clustered.attrs[0].value.clusterDim
    assert (dim.x, dim.y, dim.z) == (1, 1, 1)


def test_launch_failure_carries_call_and_instance_and_is_not_retried(fake, rt, rec):
    runtime.launch(IDS[0], (A, B, D), 0, **SHAPE)
    fake.fail("cuLaunchKernelEx", "CUDA_ERROR_ILLEGAL_ADDRESS")
    with pytest.raises(CudaDriverError) as e:
        runtime.launch(IDS[0], (A, B, D), 0, **SHAPE)
    assert (e.value.call, e.value.result, e.value.instance) == (
        "cuLaunchKernelEx",
        "CUDA_ERROR_ILLEGAL_ADDRESS",
        IDS[0],
    )
    assert "compute-sanitizer" in e.value.fix and fake.count("cuLaunchKernelEx") == 2


def test_a_stream_handle_reused_by_another_context_is_relaunched_there(fake, make_runtime, rec):
    rt = make_runtime(runtime.state.runtime().manifest, check_pointers="never")
    fake.devices[1] = Device()
    fake.contexts[fake.ctx(1)] = 1
    s = fake.new_stream(fake.ctx(0))
    runtime.launch(IDS[0], (A, B, D), s, **SHAPE)
    fake.streams[s] = fake.ctx(1)  # the stream was destroyed and its handle reused in another context
    runtime.launch(IDS[0], (A, B, D), s, **SHAPE)
    assert fake.count("cuLaunchKernelEx") == 3 and len(fake.launches) == 2  # one refusal, then relaunched
    assert fake.owner[int(fake.launches[-1].function)] == fake.ctx(1)
    assert fake.count("cuStreamGetCtx") == 2 and len(rt.kernels) == 2
    runtime.launch(IDS[0], (A, B, D), s, **SHAPE)  # cached again, in the right context
    assert fake.count("cuLaunchKernelEx") == 4 and fake.count("cuStreamGetCtx") == 2


def test_a_second_refusal_is_raised(fake, rt, rec):
    s = fake.new_stream(fake.ctx(0))
    runtime.launch(IDS[0], (A, B, D), s, **SHAPE)
    fake.fail("cuLaunchKernelEx", "CUDA_ERROR_INVALID_HANDLE")
    with pytest.raises(CudaDriverError, match="INVALID_HANDLE"):
        runtime.launch(IDS[0], (A, B, D), s, **SHAPE)
    # The first; the refused cached one (its stream's facts dropped); the freshly prepared one, refused
    # too, and launch_general's one retry: nothing enqueued, and the error raised.
    assert fake.count("cuLaunchKernelEx") == 4 and len(fake.launches) == 1


def test_forget_context_drops_kernels_and_entries(fake, rt, rec):
    s = fake.new_stream(fake.ctx(0))
    runtime.launch(IDS[0], (A, B, D), s, **SHAPE)
    rt.forget_context(fake.ctx(0))
    assert len(rt.kernels) == 0 and not rt.plans[IDS[0]].entries
    runtime.launch(IDS[0], (A, B, D), s, **SHAPE)
    assert fake.count("cuModuleLoadData") == 2 and fake.count("cuStreamGetCtx") == 2


def test_concurrent_launches_use_their_own_buffers(fake, rt, rec):
    per_thread, threads_n = 200, 8
    barrier = threading.Barrier(threads_n)
    errors = []
    index = [(p.kind, p.operand) for p in rec.params].index(("tensormap", "a"))

    def worker(t):
        barrier.wait()
        try:
            for _ in range(per_thread):
                runtime.launch(IDS[0], (A + 16 * t, B, D), t + 100, **SHAPE)
        except BaseException as e:  # noqa: BLE001 - re-raised by the assertion below, in the main thread
            errors.append(e)

    for t in range(threads_n):
        fake.streams[t + 100] = fake.ctx(0)
    threads = [threading.Thread(target=worker, args=(t,)) for t in range(threads_n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors and len(fake.launches) == per_thread * threads_n
    for launch in fake.launches:
        assert int.from_bytes(launch.values[index][:8], "little") == A + 16 * (launch.stream - 100)


def test_config_from_real_bindings_structs():
    """The attribute/field names used by build_config exist and behave as assumed in cuda-bindings
    (building structs needs no GPU)."""
    cu = pytest.importorskip("cuda.bindings.driver")
    rec = SimpleNamespace(cluster=(2, 1, 1), cluster_size=2, block=(384, 1, 1), smem_bytes=232448)
    cfg = launcher.build_config(cu, rec, (132, 1, 1), 0x1234, programmatic_serialization=True)
    assert (cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ) == (132, 1, 1)
    assert (cfg.blockDimX, cfg.sharedMemBytes, int(cfg.hStream), cfg.numAttrs) == (384, 232448, 0x1234, 2)
    cluster, pss = cfg.attrs
    assert cluster.id == cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    assert (cluster.value.clusterDim.x, cluster.value.clusterDim.y, cluster.value.clusterDim.z) == (2, 1, 1)
    assert pss.value.programmaticStreamSerializationAllowed == 1
    one = SimpleNamespace(cluster=(1, 1, 1), cluster_size=1, block=(384, 1, 1), smem_bytes=232448)
    assert launcher.build_config(cu, one, (132, 1, 1), 0).numAttrs == 0
    (named,) = launcher.build_config(cu, one, (1, 1, 1), 0, cluster_attribute=True).attrs
    assert (named.value.clusterDim.x, named.value.clusterDim.y, named.value.clusterDim.z) == (1, 1, 1)


def overhead(fake, iid: str, stream: int, n: int = 20000) -> tuple[float, float]:
    """Median seconds per call of `launch` (same problem every call) and of the driver call itself, with a
    cuLaunchKernelEx that does nothing; interleaved, 7 rounds each."""

    def noop(cfg, fn, kp, extra):
        return (0,)

    fake.cuLaunchKernelEx = noop
    launch = runtime.launch
    launch(iid, (A, B, D), stream, **SHAPE)  # warm the caches
    ours, bare = [], []
    for _ in range(7):
        ours.append(timeit.timeit(lambda: launch(iid, (A, B, D), stream, **SHAPE), number=n) / n)
        bare.append(timeit.timeit(lambda: noop(None, None, 0, 0), number=n) / n)
    return statistics.median(ours), statistics.median(bare)


def test_per_call_overhead(fake, rt, rec, capsys):
    ours, bare = overhead(fake, IDS[0], fake.new_stream(fake.ctx(0)))
    with capsys.disabled():
        print(
            f"\nlaunch: {ours * 1e6:.2f} us per call, of which the (no-op) driver call {bare * 1e6:.2f} us "
            "(fake driver)"
        )
    # A loose regression guard (CI machines are slow and shared); ~1.6 us on the dev box (2026-11-30).
    assert ours < 25e-6


def test_a_record_whose_per_launch_values_are_out_of_order_is_refused(kernels):
    import dataclasses

    from runtime.contract import Param
    from runtime.errors import CorruptArtifactError
    from runtime.plan import LaunchPlan

    rec = kernels.record(IDS[0])
    # alpha moved in front of descriptor A (offset 40): a valid record, but not the order the one-call
    # parameter writer is built for (docs/CONTRACT.md), so refused rather than launched wrongly.
    params = [Param("f32", 40, 4, name="alpha")] + [p for p in rec.params if p.name != "alpha"]
    with pytest.raises(CorruptArtifactError, match=r"in the order \['alpha', 'a', 'b', 'd'\]"):
        LaunchPlan(dataclasses.replace(rec, params=tuple(params)), kernels)
