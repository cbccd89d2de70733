"""`hgemm_sm90.launch` / `instances()` on the real `ci` manifest, against the fake driver.

What reaches cuLaunchKernelEx must be exactly what the contract says (ParamPacker, which the oracle tests
hold to the DSL's host code) — also on the cached fast path, where only the addresses are re-written —
and every bad input must raise its typed error before anything is launched.
"""

from __future__ import annotations

import random
import threading

import pytest

import hgemm_sm90
from hgemm_sm90 import api, manifest, problem, scheduling
from hgemm_sm90.args import ParamPacker
from hgemm_sm90.loader import KernelCache

pytestmark = pytest.mark.compiler
A, B, D = 0x7F10_0000_0000, 0x7F20_0000_0000, 0x7F30_0000_0000


@pytest.fixture
def ci(ci_build, fake, monkeypatch):
    """The api module pointed at the ci build, with fresh per-test caches."""
    _, _, out = ci_build
    man = manifest.load(str(out / "manifest.json"))
    monkeypatch.setattr(manifest, "default", lambda: man)
    monkeypatch.setattr(api, "_cache", KernelCache(man))
    monkeypatch.setattr(api, "_plans", {})
    return man


def _expect(man, iid, values, clusters=66):
    rec = man.record(iid)
    buf = ParamPacker(rec).pack(values)
    want = [bytes(buf[p.offset : p.offset + p.size]) for p in rec.params]
    _, _, total = scheduling.cluster_tiles(
        values["m"], values["n"], values["l"], rec.grid["tile_m"], rec.grid["tile_n"], *rec.cluster[:2]
    )
    return want, scheduling.persistent_grid(total, clusters, *rec.cluster[:2])


def _values(rec, ptrs, m, n, k, batch=1, lds=(None,) * 3, bss=(None,) * 3, raster=None, group=None):
    values = problem.resolve(rec.id, problem.layouts(rec.spec), m, n, k, batch, lds, bss)
    cm, cn, _ = scheduling.cluster_tiles(m, n, batch, rec.grid["tile_m"], rec.grid["tile_n"], *rec.cluster[:2])
    along, g = scheduling.default_raster(cm, cn)
    values.update(a=ptrs[0], b=ptrs[1], d=ptrs[2], raster_along_m=along if raster is None else int(raster))
    values["group_size"] = g if group is None else group
    return values


def test_instances_lists_the_manifest(ci):
    insts = hgemm_sm90.instances()
    assert [i.id for i in insts] == sorted(ci.instances)
    i = next(x for x in insts if x.id.endswith("64x128x64_c1x2_coop"))
    assert (i.a_dtype, i.d_dtype, i.a_major, i.b_major, i.d_major) == ("bf16", "fp32", "k", "k", "n")
    assert i.tile == (64, 128, 64) and i.cluster == (1, 2) and i.schedule == "cooperative"


def test_launch_sends_the_contract_bytes_also_on_the_cached_fast_path(ci, fake):
    rng = random.Random(7)
    for iid in ci.instances:
        rec = ci.record(iid)
        fake.param_sizes = tuple(p.size for p in rec.params)
        for _ in range(6):
            m, n, k = rng.randint(1, 3000), rng.randint(1, 375) * 8, rng.randint(1, 300) * 8
            batch = rng.randint(1, 3)
            for ptrs in [(A, B, D), (A + 16 * rng.randint(1, 999), B + 64, D + 1024)]:  # 2nd call: cache hit
                hgemm_sm90.launch(iid, ptrs, 0, m=m, n=n, k=k, batch=batch)
                want, grid = _expect(ci, iid, _values(rec, ptrs, m, n, k, batch))
                got = fake.launches[-1]
                assert got.grid == grid and got.block == rec.block and got.smem == rec.smem_bytes
                for p, w, g in zip(rec.params, want, got.values):
                    if p.kind != "opaque":
                        assert g == w, (iid, p, m, n, k, batch, ptrs)


def test_launch_passes_strides_and_walk_overrides(ci, fake):
    iid = next(iter(ci.instances))
    rec = ci.record(iid)
    fake.param_sizes = tuple(p.size for p in rec.params)
    kw = dict(m=300, n=136, k=200, batch=3, lda=264, ldb=208, ldd=160, batch_stride_a=300 * 264 + 64,
              batch_stride_b=136 * 208 + 8, batch_stride_d=300 * 160 + 8)
    hgemm_sm90.launch(iid, (A, B, D), 0, raster_along_m=False, group_size=3, **kw)
    values = _values(rec, (A, B, D), 300, 136, 200, 3, (264, 208, 160),
                     (kw["batch_stride_a"], kw["batch_stride_b"], kw["batch_stride_d"]), raster=0, group=3)
    want, _ = _expect(ci, iid, values)
    assert list(fake.launches[-1].values) == [w if p.kind != "opaque" else g for p, w, g in
                                              zip(rec.params, want, fake.launches[-1].values)]


def test_launch_accepts_stream_objects(ci, fake):
    iid = next(iter(ci.instances))
    s = fake.new_stream(fake.ctx(0))

    class TorchLike:
        cuda_stream = s

    class Protocol:
        def __cuda_stream__(self):
            return (0, s)

    for stream in (s, TorchLike(), Protocol()):
        hgemm_sm90.launch(iid, (A, B, D), stream, m=64, n=64, k=64)
        assert fake.launches[-1].stream == s


BAD = [
    (dict(ptrs=(A + 2, B, D)), "not a 16-byte aligned"),
    (dict(ptrs=(A, 0, D)), "pointer b is null"),
    (dict(ptrs=(A, B)), "three device pointers"),
    (dict(ptrs=(A, B, 1.5)), "not an int"),
    (dict(m=0), "m=0 is outside"),
    (dict(n=2**31), "n=2147483648 is outside"),
    (dict(k=12), "lda=12 elements is 24 bytes"),
    (dict(k=64, lda=32), "lda=32 is smaller than the contiguous extent"),
    (dict(ldd=260), "ldd=260 elements is 520 bytes"),
    (dict(batch=2, batch_stride_d=128), "overlapping output batches would race"),
    (dict(batch_stride_b=12), "batch_stride_b=12 elements is 24 bytes"),
    (dict(batch=0), "batch=0 is outside"),
    (dict(m=64.0), "m=64.0 is not an integer"),
    (dict(raster_along_m=2), "raster_along_m=2"),
    (dict(group_size=0), "group_size=0"),
    (dict(m=[64]), "is not an integer"),
]


@pytest.mark.parametrize(("override", "message"), BAD, ids=[b[1][:30] for b in BAD])
def test_bad_input_raises_before_launching(ci, fake, override, message):
    iid = next(i for i in ci.instances if "_bf16_bf16_bf16_" in i)
    args = dict(ptrs=(A, B, D), m=256, n=256, k=128)
    args.update(override)
    ptrs = args.pop("ptrs")
    with pytest.raises(hgemm_sm90.InvalidArgumentError, match=message) as err:
        hgemm_sm90.launch(iid, ptrs, 0, **args)
    assert "Fix:" in str(err.value) and err.value.instance == iid
    assert fake.count("cuLaunchKernelEx") == 0


def test_unknown_instance_suggests_close_ids(ci, fake):
    good = next(iter(ci.instances))
    with pytest.raises(hgemm_sm90.UnknownInstanceError) as err:
        hgemm_sm90.launch(good.replace("_coop", "_pp"), (A, B, D), 0, m=64, n=64, k=64)
    assert err.value.suggestions[0] == good
    assert fake.count("cuLaunchKernelEx") == 0


def test_wrong_gpu_is_refused(ci, fake):
    fake.devices[0].capability = (8, 0)
    with pytest.raises(hgemm_sm90.UnsupportedDeviceError, match="compute capability 8.0"):
        hgemm_sm90.launch(next(iter(ci.instances)), (A, B, D), 0, m=64, n=64, k=64)
    assert fake.count("cuLaunchKernelEx") == 0


def test_too_old_driver_is_refused(ci, fake):
    fake.version = 12040  # the ci cubins declare CUDA 12.9 (EIATTR_CUDA_API_VERSION)
    with pytest.raises(hgemm_sm90.DriverTooOldError, match="12.9"):
        hgemm_sm90.launch(next(iter(ci.instances)), (A, B, D), 0, m=64, n=64, k=64)
    assert fake.count("cuLaunchKernelEx") == 0


def test_concurrent_launches_keep_their_own_parameters(ci, fake):
    iid = next(iter(ci.instances))
    rec = ci.record(iid)
    fake.param_sizes = tuple(p.size for p in rec.params)
    stream = fake.new_stream(fake.ctx(0))  # worker threads have no current context of their own
    errors = []

    def worker(t):
        try:
            for i in range(200):
                hgemm_sm90.launch(iid, (A + 16 * t, B + 16 * i, D), stream, m=128 * (t + 1), n=256, k=64)
        except Exception as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(fake.launches) == 1600
    desc_a = next(p for p in rec.params if p.kind == "tensormap" and p.operand == "a")
    shape_a = next(p for p in rec.params if p.kind == "shape" and p.operand == "a")
    for launch in fake.launches:  # each launch's A address and M agree with one thread's arguments
        addr = int.from_bytes(launch.values[rec.params.index(desc_a)][:8], "little")
        m = int.from_bytes(launch.values[rec.params.index(shape_a)][:4], "little")
        assert m == 128 * ((addr - A) // 16 + 1)
