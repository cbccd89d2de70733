"""`hgemm_sm90.launch` / `instances()` on the real `ci` manifest, against the fake driver.

What reaches cuLaunchKernelEx must be exactly what the contract says (ParamPacker, which the oracle tests
hold to the DSL's host code) — also on the cached fast path, where only the addresses and alpha/beta are
re-written — and every bad input must raise its typed error before anything is launched.
"""

from __future__ import annotations

import copy
import json
import random
import struct
import threading
from pathlib import Path

import pytest

import hgemm_sm90
from hgemm_sm90 import api, manifest, plan, problem, scheduling
from hgemm_sm90.args import ParamPacker
from hgemm_sm90.loader import KernelCache

pytestmark = pytest.mark.compiler
A, B, D, C = 0x7F10_0000_0000, 0x7F20_0000_0000, 0x7F30_0000_0000, 0x7F40_0000_0000
PSS = 6  # CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION


def _use(monkeypatch, man):
    """Point the api module at `man`, with fresh per-test caches."""
    monkeypatch.setattr(manifest, "default", lambda: man)
    monkeypatch.setattr(api, "_cache", KernelCache(man))
    monkeypatch.setattr(api, "_plans", {})
    return man


@pytest.fixture
def ci(ci_build, fake, monkeypatch):
    _, _, out = ci_build
    return _use(monkeypatch, manifest.load(str(out / "manifest.json")))


def _plain(man) -> str:
    """A bf16 instance with K-major A, B, N-major D and no C: the layout the literal sizes below fit."""
    return next(i for i, r in sorted(man.instances.items())
                if "_bf16_bf16_bf16_" in i and "_kkn_" in i and not problem.has_c(r.spec))


def _with_c(man) -> str:
    ids = [i for i, r in sorted(man.instances.items()) if problem.has_c(r.spec)]
    assert ids, "the ci profile must hold an instance that reads C (kernel_specs.yaml)"
    return ids[0]


def _expect(man, iid, values, clusters=66):
    rec = man.record(iid)
    buf = ParamPacker(rec).pack(values)
    want = [bytes(buf[p.offset : p.offset + p.size]) for p in rec.params]
    _, _, total = scheduling.cluster_tiles(
        values["m"], values["n"], values["l"], rec.grid["tile_m"], rec.grid["tile_n"], *rec.cluster[:2]
    )
    return want, scheduling.persistent_grid(total, clusters, *rec.cluster[:2])


def _values(rec, ptrs, m, n, k, batch=1, lds=(None,) * 4, bss=(None,) * 4, raster=None, group=None,
            c=None, alpha=1.0, beta=0.0):
    ops = problem.layouts(rec.spec)
    values = problem.resolve(rec.id, ops, m, n, k, batch, lds[: len(ops)], bss[: len(ops)])
    cm, cn, _ = scheduling.cluster_tiles(m, n, batch, rec.grid["tile_m"], rec.grid["tile_n"], *rec.cluster[:2])
    along, g = scheduling.default_raster(cm, cn)
    values.update(a=ptrs[0], b=ptrs[1], d=ptrs[2], c=c, alpha=alpha, beta=beta,
                  raster_along_m=along if raster is None else int(raster))
    values["group_size"] = g if group is None else group
    return values


def _assert_sent(got, rec, want):
    for p, w, g in zip(rec.params, want, got.values, strict=True):
        if p.kind != "opaque":
            assert g == w, (rec.id, p)


def test_instances_lists_the_manifest(ci):
    insts = {i.id: i for i in hgemm_sm90.instances()}
    assert list(insts) == sorted(ci.instances)
    i = next(x for x in insts.values() if x.id.endswith("64x128x64_c1x2_coop"))
    assert (i.a_dtype, i.d_dtype, i.a_major, i.b_major, i.d_major) == ("bf16", "fp32", "k", "k", "n")
    assert i.tile == (64, 128, 64) and i.cluster == (1, 2) and i.schedule == "cooperative"
    assert (i.has_c, i.c_dtype, i.c_major, i.fp8_fast_accum) == (False, None, None, False)
    for iid, rec in ci.instances.items():  # every record reports its epilogue as its spec says
        s, i = rec.spec, insts[iid]
        assert i.has_c == (s["c_dtype"] is not None) and (i.c_dtype, i.c_major) == (s["c_dtype"], s["c_major"])
        assert i.fp8_fast_accum == s["fp8_fast_accum"]
    assert any(i.has_c for i in insts.values()) and any(i.fp8_fast_accum for i in insts.values())


def _random_problem(rng: random.Random, rec) -> dict:
    """Valid for `rec`: aligned leading dims (padded or packed), batch strides, disjoint operands."""
    ops = problem.layouts(rec.spec)
    ext = {x: rng.randint(1, 3000) for x in "mnk"}
    for op in ops:  # extents stored contiguously by some operand are 16-byte multiples (TMA)
        ext[op.contiguous] = -(-ext[op.contiguous] // (16 // op.elem)) * (16 // op.elem)
    m, n, k = ext["m"], ext["n"], ext["k"]
    lds = []
    for op in ops:
        align = 16 // op.elem
        lds.append(-(-ext[op.contiguous] // align) * align + align * rng.randint(0, 3))
    return dict(m=m, n=n, k=k, batch=rng.randint(1, 3), lds=tuple(lds),
                alpha=rng.uniform(-4, 4), beta=rng.uniform(-4, 4) if problem.has_c(rec.spec) else 0.0)


def test_launch_sends_the_contract_bytes_also_on_the_cached_fast_path(ci, fake):
    rng = random.Random(7)
    for iid in ci.instances:
        rec = ci.record(iid)
        has_c = problem.has_c(rec.spec)
        fake.param_sizes = tuple(p.size for p in rec.params)
        for _ in range(6):
            pr = _random_problem(rng, rec)
            lds = pr.pop("lds")
            kw = dict(m=pr["m"], n=pr["n"], k=pr["k"], batch=pr["batch"], lda=lds[0], ldb=lds[1], ldd=lds[2])
            if has_c:
                kw["ldc"] = lds[3]
            # 2nd call: a cache hit with new pointers and scales, which must be patched in.
            calls = [((A, B, D), C, pr["alpha"], pr["beta"]),
                     ((A + 16 * rng.randint(1, 999), B + 64, D + 1024), C + 4096, 0.1, -2.5 if has_c else 0.0)]
            for ptrs, c, alpha, beta in calls:
                hgemm_sm90.launch(iid, ptrs, 0, c=c if has_c else None, alpha=alpha, beta=beta, **kw)
                values = _values(rec, ptrs, pr["m"], pr["n"], pr["k"], pr["batch"], lds, c=c, alpha=alpha,
                                 beta=beta)
                want, grid = _expect(ci, iid, values)
                got = fake.launches[-1]
                assert got.grid == grid and got.block == rec.block and got.smem == rec.smem_bytes
                _assert_sent(got, rec, want)


def test_alpha_and_beta_reach_the_launch_as_float32(ci, fake):
    iid = _with_c(ci)
    rec = ci.record(iid)
    fake.param_sizes = tuple(p.size for p in rec.params)
    f32 = {p.name: i for i, p in enumerate(rec.params) if p.kind == "f32"}
    assert set(f32) == {"alpha", "beta"}
    for alpha, beta in [(1.0, 0.0), (0.1, -0.75), (-3e38, 1e-40), (2, 1)]:  # ints are taken too
        hgemm_sm90.launch(iid, (A, B, D), 0, m=256, n=256, k=64, c=C, alpha=alpha, beta=beta)
        sent = fake.launches[-1].values
        assert sent[f32["alpha"]] == struct.pack("<f", alpha) and sent[f32["beta"]] == struct.pack("<f", beta)


def test_launch_passes_strides_and_walk_overrides(ci, fake):
    iid = _plain(ci)
    rec = ci.record(iid)
    fake.param_sizes = tuple(p.size for p in rec.params)
    kw = dict(m=300, n=136, k=200, batch=3, lda=264, ldb=208, ldd=160, batch_stride_a=300 * 264 + 64,
              batch_stride_b=136 * 208 + 8, batch_stride_d=300 * 160 + 8)
    hgemm_sm90.launch(iid, (A, B, D), 0, raster_along_m=False, group_size=3, **kw)
    values = _values(rec, (A, B, D), 300, 136, 200, 3, (264, 208, 160),
                     (kw["batch_stride_a"], kw["batch_stride_b"], kw["batch_stride_d"]), raster=0, group=3)
    want, _ = _expect(ci, iid, values)
    _assert_sent(fake.launches[-1], rec, want)


def test_launch_accepts_stream_objects(ci, fake):
    iid = _plain(ci)
    s = fake.new_stream(fake.ctx(0))

    class TorchLike:
        cuda_stream = s

    class Protocol:
        def __cuda_stream__(self):
            return (0, s)

    for stream in (s, TorchLike(), Protocol()):
        hgemm_sm90.launch(iid, (A, B, D), stream, m=64, n=64, k=64)
        assert fake.launches[-1].stream == s


def _attrs(launch) -> dict:
    return {int(a.id): a for a in launch.attrs}


def test_pdl_is_opt_in_and_sets_programmatic_stream_serialization(ci, fake):
    iid = _plain(ci)
    hgemm_sm90.launch(iid, (A, B, D), 0, m=64, n=64, k=64)
    assert PSS not in _attrs(fake.launches[-1])
    hgemm_sm90.launch(iid, (A, B, D), 0, m=64, n=64, k=64, pdl=True)
    attr = _attrs(fake.launches[-1])[PSS]
    assert attr.value.programmaticStreamSerializationAllowed == 1
    hgemm_sm90.launch(iid, (A, B, D), 0, m=64, n=64, k=64, pdl=False)  # a cached config must not leak
    assert PSS not in _attrs(fake.launches[-1])


BAD = [
    (dict(ptrs=(A + 2, B, D)), "not a 16-byte aligned"),
    (dict(ptrs=(A, 0, D)), "pointer b is null"),
    (dict(ptrs=(A, B)), "three device pointers"),
    (dict(ptrs=(A, B, D, C)), "C goes in c="),
    (dict(ptrs=(A, B, 1.5)), "not an int"),
    (dict(m=0), "m=0 is outside"),
    (dict(n=2**31), "n=2147483648 is outside"),
    (dict(k=12), "k=12 is the contiguous extent of a"),
    (dict(k=16, lda=20), "lda=20 elements is 40 bytes"),
    (dict(k=64, lda=32), "lda=32 is smaller than the contiguous extent"),
    (dict(ldd=260), "ldd=260 elements is 520 bytes"),
    (dict(batch=2, batch_stride_d=128), "overlapping output batches would race"),
    (dict(batch_stride_b=12), "batch_stride_b=12 elements is 24 bytes"),
    (dict(batch=0), "batch=0 is outside"),
    (dict(m=64.0), "m=64.0 is not an integer"),
    (dict(raster_along_m=2), "raster_along_m=2"),
    (dict(group_size=0), "group_size=0"),
    (dict(m=[64]), "is not an integer"),
    (dict(c=C), "c given, but this instance does not read a C operand"),
    (dict(beta=0.5), "beta=0.5 given, but this instance does not read a C operand"),
    (dict(ldc=256), "ldc given, but this instance does not read"),
    (dict(batch_stride_c=2**16), "batch_stride_c given, but this instance does not read"),
    (dict(alpha=float("nan")), "alpha=nan is not a finite float32"),
    (dict(alpha=float("inf")), "alpha=inf is not a finite float32"),
    (dict(alpha=1e39), "alpha=1e[+]?39 is not a finite float32"),
    (dict(alpha="2"), "alpha='2' is not a real number"),
    (dict(alpha=True), "alpha=True is not a real number"),
    (dict(pdl=1), "pdl=1"),
    (dict(ptrs=(A, B, A + 4096)), r"output d \[0x7f1000001000, .*overlaps input a"),
    (dict(ptrs=(A, B, B - 16)), "overlaps input b"),
    (dict(ptrs=(A, B, A)), "overlaps input a"),  # D = A in place would race too
]


@pytest.mark.parametrize(("override", "message"), BAD, ids=[b[1][:30] for b in BAD])
def test_bad_input_raises_before_launching(ci, fake, override, message):
    iid = _plain(ci)
    args = dict(ptrs=(A, B, D), m=256, n=256, k=128)
    args.update(override)
    ptrs = args.pop("ptrs")
    with pytest.raises(hgemm_sm90.InvalidArgumentError, match=message) as err:
        hgemm_sm90.launch(iid, ptrs, 0, **args)
    assert "Fix:" in str(err.value) and err.value.instance == iid
    assert fake.count("cuLaunchKernelEx") == 0


def _c_layout(ci):
    """(C instance id, kwargs of a valid 256 x 256 x 128 problem for it, with C separate from D)."""
    iid = _with_c(ci)
    return iid, dict(m=256, n=256, k=128, c=C)


def _d_bytes(ci, iid, m=256, n=256) -> int:
    return m * n * problem.layouts(ci.record(iid).spec)[2].elem


BAD_C = [
    (dict(c=None), "reads a C operand .* but c is None"),
    (dict(c=C + 8), "pointer c=0x7f4000000008 is not a 16-byte aligned"),
    (dict(c=D + 1024), "overlaps input c.*C may alias D only exactly"),
    (dict(c=D - 1024), "overlaps input c.*C may alias D only exactly"),
    (dict(c=D, ldc=264), "same pointer .* lay out the matrix differently"),
    (dict(c=D, batch=2, batch_stride_c=256 * 256 * 2), "same pointer .* lay out the matrix differently"),
    (dict(beta=float("-inf")), "beta=-inf is not a finite float32"),
    (dict(beta=None), "beta=None is not a real number"),
    (dict(ldc=260), "ldc=260 elements is 520 bytes"),
    (dict(ldc=128), "ldc=128 is smaller than the contiguous extent"),
]


@pytest.mark.parametrize(("override", "message"), BAD_C, ids=[b[1][:30] for b in BAD_C])
def test_bad_c_input_raises_before_launching(ci, fake, override, message):
    iid, args = _c_layout(ci)
    assert problem.layouts(ci.record(iid).spec)[3].elem == 2, "BAD_C's literals assume a 16-bit C"
    args.update(override)
    with pytest.raises(hgemm_sm90.InvalidArgumentError, match=message) as err:
        hgemm_sm90.launch(iid, (A, B, D), 0, **args)
    assert "Fix:" in str(err.value) and err.value.instance == iid
    assert fake.count("cuLaunchKernelEx") == 0


def test_c_may_alias_d_exactly_for_an_in_place_update(ci, fake):
    iid, args = _c_layout(ci)
    rec = ci.record(iid)
    fake.param_sizes = tuple(p.size for p in rec.params)
    hgemm_sm90.launch(iid, (A, B, D), 0, **dict(args, c=D, batch=2, beta=1.0))
    hgemm_sm90.launch(iid, (A, B, D), 0, **dict(args, c=D, batch=1, ldc=272, ldd=272, beta=1.0))
    desc = {p.operand: i for i, p in enumerate(rec.params) if p.kind == "tensormap"}
    sent = fake.launches[-1].values
    assert sent[desc["c"]][:8] == sent[desc["d"]][:8] == D.to_bytes(8, "little")
    # Right next to D (no shared byte) is fine too, on either side.
    size = _d_bytes(ci, iid)
    hgemm_sm90.launch(iid, (A, B, D), 0, **dict(args, c=D + size))
    hgemm_sm90.launch(iid, (A, B, D), 0, **dict(args, c=D - size))
    assert fake.count("cuLaunchKernelEx") == 4


def test_outputs_beside_inputs_in_one_wide_buffer_are_not_an_overlap(ci, fake):
    # A (m x k) in columns [0, k) and D (m x n) in columns [k, k + n) of one m x (k + n) row-major buffer:
    # their byte ranges interleave but share no byte.
    iid = _plain(ci)
    m, n, k = 256, 128, 64
    ld = k + n
    hgemm_sm90.launch(iid, (A, B, A + 2 * k), 0, m=m, n=n, k=k, lda=ld, ldd=ld)
    assert fake.count("cuLaunchKernelEx") == 1
    with pytest.raises(hgemm_sm90.InvalidArgumentError, match="overlaps input a"):  # one column too far left
        hgemm_sm90.launch(iid, (A, B, A + 2 * k - 16), 0, m=m, n=n, k=k, lda=ld, ldd=ld)


def _twin_without_c(ci, monkeypatch):
    """The ci manifest plus a copy of its C instance that does not read C (as if both shipped)."""
    doc = json.loads(Path(ci.path).read_text())
    iid = _with_c(ci)
    twin = copy.deepcopy(doc["instances"][iid])
    twin["spec"].update(c_dtype=None, c_major=None)
    twin["params"] = [p for p in twin["params"] if p.get("operand") != "c" and p.get("name") != "beta"]
    twin_id = iid.rsplit("_c", 1)[0] + "_twin"
    doc["instances"][twin_id] = twin
    return iid, twin_id, _use(monkeypatch, manifest.parse(doc, ci.path))


def test_c_errors_name_the_instances_that_fit(ci, fake, monkeypatch):
    iid, twin_id, _ = _twin_without_c(ci, monkeypatch)
    with pytest.raises(hgemm_sm90.InvalidArgumentError, match=f"use an instance that reads C: {iid}"):
        hgemm_sm90.launch(twin_id, (A, B, D), 0, m=256, n=256, k=64, c=C)
    with pytest.raises(hgemm_sm90.InvalidArgumentError, match=f"use an instance without C: {twin_id}"):
        hgemm_sm90.launch(iid, (A, B, D), 0, m=256, n=256, k=64)
    assert fake.count("cuLaunchKernelEx") == 0


def test_record_whose_descriptors_contradict_its_spec_is_refused(ci, fake, monkeypatch):
    iid = _with_c(ci)
    doc = json.loads(Path(ci.path).read_text())
    doc["instances"][iid]["spec"].update(c_dtype=None, c_major=None)  # spec says no C, params have one
    _use(monkeypatch, manifest.parse(doc, ci.path))
    with pytest.raises(hgemm_sm90.CorruptArtifactError, match=r"descriptors \['a', 'b', 'c', 'd'\]"):
        hgemm_sm90.launch(iid, (A, B, D), 0, m=256, n=256, k=64)


def test_records_without_alpha_take_only_alpha_one(kernels, fake, monkeypatch):
    # Manifests from before alpha existed (tests/runtime/fake_kernels.py's records) compute D = A @ B^T.
    _use(monkeypatch, kernels)
    iid = next(iter(kernels.instances))
    hgemm_sm90.launch(iid, (A, B, D), 0, m=256, n=256, k=64)
    hgemm_sm90.launch(iid, (A, B, D), 0, m=256, n=256, k=64, alpha=1)
    with pytest.raises(hgemm_sm90.InvalidArgumentError, match="built without alpha"):
        hgemm_sm90.launch(iid, (A, B, D), 0, m=256, n=256, k=64, alpha=2.0)
    assert fake.count("cuLaunchKernelEx") == 2


def test_unknown_instance_suggests_close_ids(ci, fake):
    good = _plain(ci)
    with pytest.raises(hgemm_sm90.UnknownInstanceError) as err:
        hgemm_sm90.launch(good.replace("_coop", "_cop"), (A, B, D), 0, m=64, n=64, k=64)
    assert err.value.suggestions[0] == good
    assert fake.count("cuLaunchKernelEx") == 0


def test_wrong_gpu_is_refused(ci, fake):
    fake.devices[0].capability = (8, 0)
    with pytest.raises(hgemm_sm90.UnsupportedDeviceError, match="compute capability 8.0"):
        hgemm_sm90.launch(_plain(ci), (A, B, D), 0, m=64, n=64, k=64)
    assert fake.count("cuLaunchKernelEx") == 0


def test_too_old_driver_is_refused(ci, fake):
    fake.version = 12040  # the ci cubins declare CUDA 12.9 (EIATTR_CUDA_API_VERSION)
    with pytest.raises(hgemm_sm90.DriverTooOldError, match="12.9"):
        hgemm_sm90.launch(_plain(ci), (A, B, D), 0, m=64, n=64, k=64)
    assert fake.count("cuLaunchKernelEx") == 0


def test_concurrent_launches_keep_their_own_parameters(ci, fake):
    iid = _with_c(ci)  # the most per-launch patching: four addresses, alpha and beta
    rec = ci.record(iid)
    fake.param_sizes = tuple(p.size for p in rec.params)
    stream = fake.new_stream(fake.ctx(0))  # worker threads have no current context of their own
    errors = []

    def worker(t):
        try:
            for i in range(200):
                hgemm_sm90.launch(iid, (A + 16 * t, B + 16 * i, D), stream, m=128 * (t + 1), n=256, k=64,
                                  c=C, alpha=float(t), beta=float(i))
        except Exception as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(fake.launches) == 1600
    index = {(p.kind, p.operand or p.name): i for i, p in enumerate(rec.params)}
    for launch in fake.launches:  # each launch's A address, M, alpha and beta agree with one thread's call
        v = launch.values
        t = (int.from_bytes(v[index["tensormap", "a"]][:8], "little") - A) // 16
        i = (int.from_bytes(v[index["tensormap", "b"]][:8], "little") - B) // 16
        assert int.from_bytes(v[index["shape", "a"]][:4], "little") == 128 * (t + 1)
        assert struct.unpack("<f", v[index["f32", "alpha"]]) == (t,)
        assert struct.unpack("<f", v[index["f32", "beta"]]) == (i,)


def test_batches_side_by_side_in_one_workspace_are_not_an_overlap(ci, fake):
    # Per batch i: A_i then D_i, in one allocation (batch strides equal, each batch's pair disjoint).
    iid = _plain(ci)
    m, n, k, batch = 128, 128, 64, 3
    a_bytes, d_bytes = m * k * 2, m * n * 2
    stride = (a_bytes + d_bytes) // 2  # in bf16 elements
    kw = dict(m=m, n=n, k=k, batch=batch, batch_stride_a=stride, batch_stride_d=stride)
    hgemm_sm90.launch(iid, (A, B, A + a_bytes), 0, **kw)
    assert fake.count("cuLaunchKernelEx") == 1
    with pytest.raises(hgemm_sm90.InvalidArgumentError, match="overlaps input a"):
        hgemm_sm90.launch(iid, (A, B, A + a_bytes - 16), 0, **kw)


def _bytes_of(fp, ptr, values) -> set[int]:
    op = fp.layout
    out = set()
    for batch in range(values["l"]):
        for row in range(values[op.other]):
            start = ptr + op.elem * (batch * values[f"batch_stride_{op.name}"] + row * values[f"ld{op.name}"])
            out.update(range(start, start + op.elem * values[op.contiguous]))
    return out


def test_overlap_check_never_passes_operands_that_share_a_byte():
    """Soundness against brute force on small random layouts (shared pitches and batch strides, pointers
    close together): whenever D shares a byte with an input other than as the exact C alias, it raises."""
    rng = random.Random(3)
    spec = {"a_dtype": "bf16", "b_dtype": "bf16", "d_dtype": "bf16", "c_dtype": "bf16",
            "a_major": "k", "b_major": "k", "d_major": "n", "c_major": "n"}
    ops = problem.layouts(spec)
    raised = passed = 0
    for case in range(1500):
        m, n, k, batch = rng.randint(1, 6), rng.choice([8, 16]), rng.choice([8, 16]), rng.randint(1, 3)
        pitch = rng.choice([16, 24, 32])
        lds = (pitch, pitch, pitch, rng.choice([pitch, 16 * rng.randint(1, 2)]))
        bss = tuple(rng.choice([None, pitch * rng.randint(1, 8), 8 * rng.randint(1, 24)]) for _ in range(4))
        try:
            values = problem.resolve("t", ops, m, n, k, batch, lds, bss)
        except hgemm_sm90.InvalidArgumentError:
            continue  # e.g. ld below the extent, or overlapping D batches
        fps = problem.footprints(ops, values)
        ptrs = {"a": 4096, "b": 8192 * 4, "d": 4096 + 16 * rng.randint(0, 64)}
        ptrs["c"] = rng.choice([ptrs["d"], ptrs["d"] + 16 * rng.randint(-40, 40), 8192 * 8])
        bytes_d = _bytes_of(fps["d"], ptrs["d"], values)
        clash = bool(bytes_d & _bytes_of(fps["a"], ptrs["a"], values))
        alias = ptrs["c"] == ptrs["d"] and problem.same_layout(fps["c"], fps["d"])
        clash |= not alias and bool(bytes_d & _bytes_of(fps["c"], ptrs["c"], values))
        try:
            problem.check_overlaps("t", fps, ptrs)
            passed += 1
        except hgemm_sm90.InvalidArgumentError:
            raised += 1
            continue
        assert not clash, (case, values, ptrs)
    assert raised > 100 and passed > 100, (raised, passed)  # both verdicts were exercised


def test_pdl_needs_a_kernel_that_waits_for_its_predecessor(ci, fake, monkeypatch):
    import dataclasses

    iid = next(i for i in ci.instances if "_c" not in i.split("coop")[-1])
    rec = ci.record(iid)
    assert rec.pdl  # every kernel of this source tree issues griddepcontrol.wait
    hgemm_sm90.launch(iid, (A, B, D), 0, m=64, n=64, k=64, pdl=True)
    monkeypatch.setitem(api._plans, iid, plan.LaunchPlan(dataclasses.replace(rec, pdl=False), ci))
    with pytest.raises(hgemm_sm90.InvalidArgumentError, match="does not wait for its predecessor"):
        hgemm_sm90.launch(iid, (A, B, D), 0, m=64, n=64, k=64, pdl=True)


def _without_c(man) -> str:
    return next(i for i in man.instances if not man.record(i).spec.get("c_dtype"))


@pytest.fixture
def pointer_checks(monkeypatch):
    """Re-decide HGEMM_CHECK_POINTERS for this test (the runtime decides once per process)."""
    from hgemm_sm90 import device, knobs

    monkeypatch.setattr(api, "_pointer_checks", None)
    monkeypatch.setattr(device, "_device_count", None)

    def set_mode(mode="auto", allow_peer=False):
        monkeypatch.setattr(knobs, "_knobs", knobs.Knobs(check_pointers=mode, allow_peer_pointers=allow_peer))

    return set_mode


def test_single_gpu_processes_skip_the_pointer_query(ci, fake, pointer_checks):
    pointer_checks("auto")
    hgemm_sm90.launch(_without_c(ci), (A, B, D), 0, m=64, n=64, k=64)
    assert fake.count("cuPointerGetAttribute") == 0 and fake.count("cuLaunchKernelEx") == 1


def test_pointers_on_another_gpu_are_refused_before_launching(ci, fake, pointer_checks):
    from fake_driver import Device

    fake.devices[1] = Device()
    fake.contexts[0x1001] = 1
    pointer_checks("auto")
    iid = _without_c(ci)
    stream0 = fake.new_stream(fake.ctx(0))
    fake.pointers.update({A: (0, False), B: (1, False), D: (0, False)})
    with pytest.raises(hgemm_sm90.DeviceMismatchError) as err:
        hgemm_sm90.launch(iid, (A, B, D), stream0, m=64, n=64, k=64)
    assert "'b'" in str(err.value) and err.value.instance == iid
    assert fake.count("cuLaunchKernelEx") == 0
    fake.pointers[B] = (1, True)  # managed memory is accessible from every device
    hgemm_sm90.launch(iid, (A, B, D), stream0, m=64, n=64, k=64)
    fake.pointers[B] = (1, False)
    fake.peer_ok = True  # peer-capable, but only the caller knows whether peer access is enabled
    with pytest.raises(hgemm_sm90.DeviceMismatchError):
        hgemm_sm90.launch(iid, (A, B, D), stream0, m=64, n=64, k=64)
    pointer_checks("auto", allow_peer=True)
    hgemm_sm90.launch(iid, (A, B, D), stream0, m=64, n=64, k=64)
    assert fake.count("cuLaunchKernelEx") == 2


def test_unknown_memory_is_refused_when_checking(ci, fake, pointer_checks):
    pointer_checks("always")
    with pytest.raises(hgemm_sm90.InvalidArgumentError, match="not memory CUDA knows"):
        hgemm_sm90.launch(_without_c(ci), (A, B, D), 0, m=64, n=64, k=64)
    assert fake.count("cuLaunchKernelEx") == 0
