"""KernelCache: one load per (context, instance), thread-safe, attributes and occupancy once at load."""

import threading
from pathlib import Path

import pytest
from fake_driver import Device
from fake_kernels import IDS

from runtime.errors import (
    CorruptArtifactError,
    CudaDriverError,
    DriverTooOldError,
    HgemmError,
    UnknownInstanceError,
    UnsupportedDeviceError,
)
from runtime.loader import KernelCache


def two_devices(fake):
    fake.devices[1] = Device()
    fake.contexts[fake.ctx(1)] = 1
    return fake.ctx(0), fake.ctx(1)


def test_same_context_loads_once(fake, rt):
    cache = KernelCache(rt)
    k1 = cache.get(fake.ctx(0), IDS[0])
    k2 = cache.get(fake.ctx(0), IDS[0])
    assert k1 is k2 and fake.count("cuModuleLoadData") == 1 and len(cache) == 1
    assert (k1.context, k1.device, k1.record.id) == (fake.ctx(0), 0, IDS[0])


def test_two_contexts_load_twice(fake, rt):
    c0, c1 = two_devices(fake)
    cache = KernelCache(rt)
    k0, k1 = cache.get(c0, IDS[0]), cache.get(c1, IDS[0])
    assert k0 is not k1 and (k0.device, k1.device) == (0, 1)
    assert fake.count("cuModuleLoadData") == 2

    # Each load ran with its own context pushed, and the stack is balanced afterwards.
    assert [a[0] for a in fake.args("cuCtxPushCurrent")].count(c1) >= 1
    assert fake.count("cuCtxPushCurrent") == fake.count("cuCtxPopCurrent")


def test_racing_threads_load_once(fake, rt):
    fake.load_delay = 0.05  # widen the window in which the racers overlap
    cache = KernelCache(rt)
    barrier = threading.Barrier(8)
    results, errors = [], []

    def worker():
        barrier.wait()
        try:
            results.append(cache.get(fake.ctx(0), IDS[0]))
        except BaseException as e:  # noqa: BLE001 - re-raised by the assertion below, in the main thread
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(results) == 8 and all(r is results[0] for r in results)
    assert fake.count("cuModuleLoadData") == 1 and fake.count("cuFuncSetAttribute") == 1


def test_attributes_set_once_at_load(fake, rt):
    cache = KernelCache(rt)
    k = cache.get(fake.ctx(0), IDS[0])
    for _ in range(3):
        cache.get(fake.ctx(0), IDS[0])
    fn = int(k.function)
    assert fake.func_attrs[fn] == {
        fake.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: 232448
    }
    assert fake.count("cuFuncSetAttribute") == 1 and fake.count("cuFuncLoad") == 1
    assert fake.args("cuModuleGetFunction")[0][1] == f"kernel_{IDS[0]}".encode()


def test_non_portable_cluster_only_above_8(fake, rt):
    k = KernelCache(rt).get(fake.ctx(0), IDS[2])  # cluster 4x4x1 = 16 CTAs
    attrs = fake.func_attrs[int(k.function)]
    assert attrs[fake.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED] == 1
    assert attrs[fake.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES] == 200000


def test_max_active_clusters_computed_once_with_the_right_config(fake, rt):
    fake.max_active_clusters = 33
    cache = KernelCache(rt)
    k = cache.get(fake.ctx(0), IDS[0])
    cache.get(fake.ctx(0), IDS[0])
    assert k.max_active_clusters == 33 and fake.count("cuOccupancyMaxActiveClusters") == 1
    ((fn, cfg),) = fake.args("cuOccupancyMaxActiveClusters")
    assert fn == int(k.function)
    assert (cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ, cfg.sharedMemBytes) == (384, 1, 1, 232448)
    assert (cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ) == (2, 1, 1)  # one cluster
    (attr,) = cfg.attrs
    assert attr.id == fake.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    assert (attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z) == (2, 1, 1)


def test_the_occupancy_query_names_a_1x1_cluster(fake, rt):
    """A 1x1 cluster launches without the cluster attribute (runtime/launcher.py `launches_as_cluster`),
    but cuOccupancyMaxActiveClusters needs the cluster size in its config."""
    KernelCache(rt).get(fake.ctx(0), IDS[1])
    ((_, cfg),) = fake.args("cuOccupancyMaxActiveClusters")
    (attr,) = cfg.attrs
    assert attr.id == fake.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    assert (attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z) == (1, 1, 1)


def test_zero_clusters_fit(fake, rt):
    fake.max_active_clusters = 0
    with pytest.raises(HgemmError, match="not one cluster") as e:
        KernelCache(rt).get(fake.ctx(0), IDS[0])
    assert e.value.instance == IDS[0]


def test_driver_error_names_call_and_instance_and_is_not_cached(fake, rt):
    fake.fail("cuModuleGetFunction", "CUDA_ERROR_NOT_FOUND")
    cache = KernelCache(rt)
    with pytest.raises(CudaDriverError) as e:
        cache.get(fake.ctx(0), IDS[1])
    assert (e.value.call, e.value.result, e.value.instance) == (
        "cuModuleGetFunction",
        "CUDA_ERROR_NOT_FOUND",
        IDS[1],
    )
    assert f"[instance {IDS[1]}]" in str(e.value) and "reinstall" in e.value.fix
    assert fake.count("cuModuleUnload") == 1  # the half-loaded module was released
    assert fake.count("cuCtxPushCurrent") == fake.count("cuCtxPopCurrent")
    del fake.failures["cuModuleGetFunction"]
    assert cache.get(fake.ctx(0), IDS[1]).record.id == IDS[1]  # retried, now succeeds
    assert fake.count("cuModuleLoadData") == 2


def test_unknown_instance(fake, rt):
    with pytest.raises(UnknownInstanceError) as e:
        KernelCache(rt).get(fake.ctx(0), IDS[0].replace("c2x1", "c2x9"))
    assert IDS[0] in e.value.suggestions and fake.count("cuModuleLoadData") == 0


def test_unsupported_device_refused_before_loading(fake, rt):
    fake.devices[0] = Device(capability=(8, 0), name="NVIDIA A100")
    with pytest.raises(UnsupportedDeviceError):
        KernelCache(rt).get(fake.ctx(0), IDS[0])
    assert fake.count("cuModuleLoadData") == 0


def test_old_driver_refused_before_loading(fake, rt):
    fake.version = 12040  # the test manifest needs 12080
    with pytest.raises(DriverTooOldError):
        KernelCache(rt).get(fake.ctx(0), IDS[0])
    assert fake.count("cuModuleLoadData") == 0


def test_corrupt_cubin_refused_before_loading(fake, rt):
    rec = rt.manifest.record(IDS[0])
    path = Path(rec.cubin_path)
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptArtifactError, match="sha256"):
        KernelCache(rt).get(fake.ctx(0), IDS[0])
    assert fake.count("cuModuleLoadData") == 0


def test_forget_context(fake, rt):
    cache = KernelCache(rt)
    cache.get(fake.ctx(0), IDS[0])
    cache.forget_context(fake.ctx(0))
    assert len(cache) == 0
    cache.get(fake.ctx(0), IDS[0])
    assert fake.count("cuModuleLoadData") == 2


def test_loaded_kernels_are_immutable_and_hold_no_launcher_state(fake, rt):
    import dataclasses

    k = KernelCache(rt).get(fake.ctx(0), IDS[0])
    with pytest.raises(dataclasses.FrozenInstanceError):
        k.max_active_clusters = 1
    assert not hasattr(k, "__dict__")  # slots: nothing can be cached on it
    assert {f.name for f in dataclasses.fields(k)} == {
        "record",
        "function",
        "module",
        "context",
        "device",
        "max_active_clusters",
    }
