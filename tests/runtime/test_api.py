"""`runtime.launch` / `instances()` on the real `ci` manifest, against the fake driver.

What reaches cuLaunchKernelEx must be exactly what the contract says (ParamPacker, which the oracle tests
hold to the DSL's host code) — also on the cached fast path, where only the addresses and alpha/beta are
re-written — and every bad input must raise its typed error before anything is launched.
"""

from __future__ import annotations

import copy
import json
import random
import struct
import sys
import threading
from pathlib import Path

import pytest
from fake_kernels import IDS

import runtime
from codegen.tensormap_decode import decode
from runtime import manifest, overlap, plan, problem, scheduling
from runtime.args import ParamPacker
from runtime.contract import Manifest
from runtime.spec import GemmSpec

pytestmark = pytest.mark.compiler
A, B, D, C = 0x7F10_0000_0000, 0x7F20_0000_0000, 0x7F30_0000_0000, 0x7F40_0000_0000
W = 0x7F50_0000_0000  # a split-K workspace
S = 0x7F60_0000_0004  # a grouped launch's row offsets (int32: 4-byte aligned)
PSS = 6  # CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION


@pytest.fixture
def ci(ci_build, make_runtime):
    """The ci manifest, launched through a fresh Runtime around the fake driver."""
    _, _, out = ci_build
    return make_runtime(manifest.load(str(out / "manifest.json"))).manifest


def _plain(man) -> str:
    """A bf16 instance with K-major A, B, N-major D and no C: the layout the literal sizes below fit."""
    return next(
        i
        for i, r in sorted(man.instances.items())
        if "_bf16_bf16_bf16_" in i and "_kkn_" in i and not r.spec.has_c
    )


def _first(man, keep, what: str) -> str:
    """The first instance id (sorted) of manifest ``man`` whose spec ``keep`` accepts; a clear failure
    naming ``what`` when the profile holds none (the ci profile must keep one of each family tested)."""
    ids = [i for i, r in sorted(man.instances.items()) if keep(r.spec)]
    assert ids, f"the ci profile must hold {what} (kernel_specs.yaml)"
    return ids[0]


def _with_c(man) -> str:
    return _first(man, lambda s: s.has_c, "an instance that reads C")


def _expect(man, iid, values, clusters=66):
    rec = man.record(iid)
    buf = ParamPacker(rec).pack(values)
    want = [bytes(buf[p.offset : p.offset + p.size]) for p in rec.params]
    _, _, total = scheduling.cluster_tiles(
        values["m"], values["n"], values["l"], *rec.spec.problem_tile, *rec.spec.problem_cluster
    )
    total *= values.get("k_splits", 1)  # split-K: one work unit per split of each tile
    if rec.spec.k_split == "stream":  # stream-K: up to STREAM_UNITS_PER_TILE clusters per tile
        total = scheduling.stream_work_units(total, scheduling.k_tiles(values["k"], rec.spec.tile[2]))
    if rec.spec.varlen_m:  # grouped: a bound from the total rows and the group count
        total = scheduling.grouped_cluster_tiles(
            values["m"], values["n"], values["g"], *rec.spec.problem_tile, *rec.spec.problem_cluster
        )
    if rec.spec.varlen_k:  # grouped K: the tile grid once per group
        total = scheduling.cluster_tiles(
            values["m"], values["n"], values["g"], *rec.spec.problem_tile, *rec.spec.problem_cluster
        )[2]
    return want, scheduling.persistent_grid(total, clusters, *rec.cluster[:2])


def _values(
    rec,
    ptrs,
    m,
    n,
    k,
    batch=1,
    lds=(None,) * 4,
    bss=(None,) * 4,
    raster=None,
    group=None,
    c=None,
    alpha=1.0,
    beta=0.0,
    k_splits=None,
    workspace=None,
    groups=None,
    cu_seqlens_m=None,
    a_rows=None,
    a_idx=None,
    prefetch=0,
):
    ops = problem.layouts(rec.spec)
    values = problem.resolve(rec.id, ops, m, n, k, batch, lds[: len(ops)], bss[: len(ops)], groups, a_rows)
    values["a_idx"] = a_idx
    cm, cn, _ = scheduling.cluster_tiles(m, n, batch, *rec.spec.problem_tile, *rec.spec.problem_cluster)
    if groups is not None and rec.spec.varlen_k:  # grouped K: the whole tile grid in every group
        values["cu_seqlens_k"] = cu_seqlens_m
    elif groups is not None:
        cm = -(-cm // groups)  # grouped: the walk of one group of the average size
        values["cu_seqlens_m"] = cu_seqlens_m
    swap = rec.spec.swap_ab  # the kernel walks its own (transposed) tile grid
    along, g = scheduling.default_raster(*((cn, cm) if swap else (cm, cn)))
    values.update(
        a=ptrs[0],
        b=ptrs[1],
        d=ptrs[2],
        c=c,
        alpha=alpha,
        beta=beta,
        raster_along_m=along if raster is None else int(raster) ^ swap,
    )
    values["group_size"] = g if group is None else group
    values["prefetch_operand"] = prefetch
    if rec.spec.k_split == "split":
        k_tile_count = scheduling.k_tiles(k, rec.spec.tile[2])
        cta_tiles = cm * cn * batch * rec.spec.cluster[0] * rec.spec.cluster[1]  # each CTA reduces its tile
        default = scheduling.default_k_splits(cta_tiles, k_tile_count)
        values["k_splits"] = default if k_splits is None else k_splits
        values["workspace"] = workspace or 0
    if rec.spec.k_split == "stream":  # stream-K: the workspace alone, optional (0: every tile whole)
        values["workspace"] = workspace or 0
    return values


def _assert_sent(got, rec, want):
    for p, w, g in zip(rec.params, want, got.values, strict=True):
        if p.kind != "opaque":
            assert g == w, (rec.id, p)


def test_instances_lists_the_manifest(ci):
    insts = {i.id: i for i in runtime.instances()}
    assert list(insts) == sorted(ci.instances)
    i = next(x for x in insts.values() if x.id.endswith("64x128x64_c1x2_coop"))
    assert (i.a_dtype, i.d_dtype, i.a_major, i.b_major, i.d_major) == ("bf16", "fp32", "k", "k", "n")
    assert i.tile == (64, 128, 64) and i.cluster == (1, 2) and i.schedule == "cooperative"
    assert (i.has_c, i.c_dtype, i.c_major, i.fp8_fast_accum) == (False, None, None, False)
    for iid, rec in ci.instances.items():  # every record reports its epilogue as its spec says
        s, i = rec.spec, insts[iid]
        assert i == s and i.has_c == (s.c_dtype is not None)
    assert any(i.has_c for i in insts.values()) and any(i.fp8_fast_accum for i in insts.values())


def _random_problem(rng: random.Random, rec) -> dict:
    """Valid for `rec`: aligned leading dims (padded or packed), batch strides, disjoint operands."""
    ops = problem.layouts(rec.spec)
    ext = {x: rng.randint(1, 3000) for x in "mnk"}
    for op in ops:  # extents stored contiguously by some operand are 16-byte multiples (TMA)
        ext[op.contiguous] = -(-ext[op.contiguous] // (16 // op.elem)) * (16 // op.elem)
    if rec.spec.gather_a:  # gathered rows are copied in whole k-tiles
        ext["k"] = -(-ext["k"] // rec.spec.tile[2]) * rec.spec.tile[2]
    m, n, k = ext["m"], ext["n"], ext["k"]
    lds = []
    for op in ops:
        align = 16 // op.elem
        lds.append(-(-ext[op.contiguous] // align) * align + align * rng.randint(0, 3))
    return dict(
        m=m,
        n=n,
        k=k,
        batch=1 if rec.spec.varlen != "none" else rng.randint(1, 3),
        lds=tuple(lds),
        alpha=rng.uniform(-4, 4),
        beta=rng.uniform(-4, 4) if rec.spec.has_c else 0.0,
        a_rows=rng.randint(1, 3000) if rec.spec.gather_a else None,
    )


def test_launch_sends_the_contract_bytes_also_on_the_cached_fast_path(ci, fake):
    rng = random.Random(7)
    for iid in ci.instances:
        rec = ci.record(iid)
        has_c = rec.spec.has_c
        fake.param_sizes = tuple(p.size for p in rec.params)
        for _ in range(6):
            pr = _random_problem(rng, rec)
            lds = pr.pop("lds")
            kw = dict(m=pr["m"], n=pr["n"], k=pr["k"], batch=pr["batch"], lda=lds[0], ldb=lds[1], ldd=lds[2])
            if has_c:
                kw["ldc"] = lds[3]
            groups = rng.choice([1, 8, 256]) if rec.spec.varlen != "none" else None
            if groups is not None:
                kw["num_groups"] = groups
            a_rows = pr.pop("a_rows")
            if a_rows is not None:  # the gathered extent: A's rows, or its K columns under varlen K
                kw["a_cols" if rec.spec.varlen_k else "a_rows"] = a_rows
            # 2nd call: a cache hit with new pointers and scales, which must be patched in.
            calls = [
                ((A, B, D), C, pr["alpha"], pr["beta"]),
                ((A + 16 * rng.randint(1, 999), B + 64, D + 1024), C + 4096, 0.1, -2.5 if has_c else 0.0),
            ]
            for ptrs, c, alpha, beta in calls:
                ws = W + 16 * len(fake.launches) if rec.spec.k_split != "none" else None
                cu = S + 4 * len(fake.launches) if groups is not None else None
                idx = S + 0x1000 + 4 * len(fake.launches) if a_rows is not None else None
                runtime.launch(
                    iid,
                    ptrs,
                    0,
                    c=c if has_c else None,
                    alpha=alpha,
                    beta=beta,
                    workspace=ws,
                    **{("cu_seqlens_k" if rec.spec.varlen_k else "cu_seqlens_m"): cu},
                    a_idx=idx,
                    **kw,
                )
                values = _values(
                    rec,
                    ptrs,
                    pr["m"],
                    pr["n"],
                    pr["k"],
                    pr["batch"],
                    lds,
                    c=c,
                    alpha=alpha,
                    beta=beta,
                    workspace=ws,
                    groups=groups,
                    cu_seqlens_m=cu,
                    a_rows=a_rows,
                    a_idx=idx,
                )
                want, grid = _expect(ci, iid, values)
                got = fake.launches[-1]
                assert got.grid == grid and got.block == rec.block and got.smem == rec.smem_bytes
                _assert_sent(got, rec, want)


def test_the_plain_form_sends_the_same_bytes_as_the_general_path(ci, fake):
    """launch() with no options takes its own cached path (runtime/api.py) where the instance's
    parameters are (A, B, D, alpha) alone, and hands the others (C, split-K, grouped) to launch_general:
    either way it must send launch_general's bytes, grid and config (first call, and hits with new
    pointers), or raise launch_general's error."""
    plain = 0
    for iid in ci.instances:
        rec = ci.record(iid)
        fake.param_sizes = tuple(p.size for p in rec.params)
        # Repeated pointers reuse the plain form's packed buffer; new ones repack it.
        for ptrs in ((A, B, D), (A, B, D), (A + 4096, B + 64, D + 1024), (A, B, D)):
            outcome = []
            for call in (runtime.launch, runtime.api.launch_general):
                before = len(fake.launches)
                try:
                    call(iid, ptrs, 0, m=304, n=208, k=128)
                    assert len(fake.launches) == before + 1
                    outcome.append(fake.launches[-1])
                except runtime.HgemmError as e:  # C or the groups' offsets missing
                    assert len(fake.launches) == before
                    outcome.append(str(e))
            ours, general = outcome
            if isinstance(ours, str):
                assert ours == general and (rec.spec.has_c or rec.spec.varlen != "none"), ours
                continue
            want, grid = _expect(ci, iid, _values(rec, ptrs, 304, 208, 128))
            _assert_sent(ours, rec, want)
            assert ours.values == general.values and ours.grid == general.grid == grid
            assert ours.config is general.config  # one cached entry serves both paths
        entry = next(iter(runtime.state.runtime().plans[iid].entries.values()), None)
        plain += entry is not None and entry.plain
    assert plain >= 3


def test_launch_documents_its_options_and_types_an_unknown_one(fake, rt):
    import inspect

    params = inspect.signature(runtime.launch).parameters
    assert list(params)[:6] == ["instance_id", "ptrs", "stream", "m", "n", "k"]
    assert {"batch", "lda", "c", "alpha", "beta", "pdl", "workspace", "cu_seqlens_m", "a_idx"} <= set(params)
    runtime.launch(IDS[0], (A, B, D), 0, m=256, n=256, k=64)
    with pytest.raises(runtime.InvalidArgumentError, match="unknown keyword argument.*bacth") as err:
        runtime.launch(IDS[0], (A, B, D), 0, m=256, n=256, k=64, bacth=2)
    assert "batch" in err.value.fix and len(fake.launches) == 1


def test_alpha_and_beta_reach_the_launch_as_float32(ci, fake):
    iid = _with_c(ci)
    rec = ci.record(iid)
    fake.param_sizes = tuple(p.size for p in rec.params)
    f32 = {p.name: i for i, p in enumerate(rec.params) if p.kind == "f32"}
    assert set(f32) == {"alpha", "beta"}
    for alpha, beta in [(1.0, 0.0), (0.1, -0.75), (-3e38, 1e-40), (2, 1)]:  # ints are taken too
        runtime.launch(iid, (A, B, D), 0, m=256, n=256, k=64, c=C, alpha=alpha, beta=beta)
        sent = fake.launches[-1].values
        assert sent[f32["alpha"]] == struct.pack("<f", alpha) and sent[f32["beta"]] == struct.pack("<f", beta)


def test_launch_passes_strides_and_walk_overrides(ci, fake):
    iid = _plain(ci)
    rec = ci.record(iid)
    fake.param_sizes = tuple(p.size for p in rec.params)
    kw = dict(
        m=300,
        n=136,
        k=200,
        batch=3,
        lda=264,
        ldb=208,
        ldd=160,
        batch_stride_a=300 * 264 + 64,
        batch_stride_b=136 * 208 + 8,
        batch_stride_d=300 * 160 + 8,
    )
    runtime.launch(iid, (A, B, D), 0, raster_along_m=False, group_size=3, **kw)
    values = _values(
        rec,
        (A, B, D),
        300,
        136,
        200,
        3,
        (264, 208, 160),
        (kw["batch_stride_a"], kw["batch_stride_b"], kw["batch_stride_d"]),
        raster=0,
        group=3,
    )
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
        runtime.launch(iid, (A, B, D), stream, m=64, n=64, k=64)
        assert fake.launches[-1].stream == s


def _attrs(launch) -> dict:
    return {int(a.id): a for a in launch.attrs}


def test_pdl_is_opt_in_and_sets_programmatic_stream_serialization(ci, fake):
    iid = _plain(ci)
    runtime.launch(iid, (A, B, D), 0, m=64, n=64, k=64)
    assert PSS not in _attrs(fake.launches[-1])
    runtime.launch(iid, (A, B, D), 0, m=64, n=64, k=64, pdl=True)
    attr = _attrs(fake.launches[-1])[PSS]
    assert attr.value.programmaticStreamSerializationAllowed == 1
    runtime.launch(iid, (A, B, D), 0, m=64, n=64, k=64, pdl=False)  # a cached config must not leak
    assert PSS not in _attrs(fake.launches[-1])


def test_b_ready_sends_the_operand_to_load_early_only_with_pdl(ci, fake):
    """launch(pdl=True, b_ready=True) sets the kernel's prefetch_operand to the slot that holds B (2; 1
    for a swap-AB kernel, whose A is the caller's B); without pdl, or without b_ready, it stays 0, and
    a cached entry of one mode never serves another. Grouped kernels have no such parameter and launch
    as with pdl alone."""
    plain = [iid for iid in ci.instances if ci.record(iid).spec.varlen == "none"]
    assert any(ci.record(i).spec.swap_ab for i in plain) and any(not ci.record(i).spec.swap_ab for i in plain)
    for iid in plain:
        rec = ci.record(iid)
        fake.param_sizes = tuple(p.size for p in rec.params)
        pr = _random_problem(random.Random(iid), rec)
        kw = dict(m=pr["m"], n=pr["n"], k=pr["k"])
        extra = {}
        if rec.spec.has_c:
            extra.update(c=C)
        if rec.spec.k_split == "split":
            extra.update(k_splits=1)
        early = 1 if rec.spec.swap_ab else 2
        for pdl, b_ready, want in [
            (True, True, early),
            (True, False, 0),
            (False, True, 0),
            (True, True, early),
        ]:
            runtime.launch(iid, (A, B, D), 0, pdl=pdl, b_ready=b_ready, **kw, **extra)
            sent = dict(zip((p.name for p in rec.params), fake.launches[-1].values))
            assert sent["prefetch_operand"] == struct.pack("<i", want), (iid, pdl, b_ready)
            assert (PSS in _attrs(fake.launches[-1])) == pdl
    grouped = next(iid for iid in ci.instances if ci.record(iid).spec.varlen == "m")
    assert all(p.name != "prefetch_operand" for p in ci.record(grouped).params)


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
    (dict(pdl=True, b_ready=1), "b_ready=1"),
    (dict(b_ready="yes"), "b_ready='yes'"),
    (dict(ptrs=(A, B, A + 4096)), r"output d \[0x7f1000001000, .*overlaps input a"),
    (dict(ptrs=(A, B, B - 16)), "overlaps input b"),
    (dict(ptrs=(A, B, A)), "overlaps input a"),  # D = A in place would race too
]


@pytest.mark.parametrize("after_a_good_launch", [False, True], ids=["first", "cached"])
@pytest.mark.parametrize(("override", "message"), BAD, ids=[b[1][:30] for b in BAD])
def test_bad_input_raises_before_launching(ci, fake, override, message, after_a_good_launch):
    iid = _plain(ci)
    if after_a_good_launch:  # the shape cached and its pointers remembered as accepted (plan.py)
        runtime.launch(iid, (A, B, D), 0, m=256, n=256, k=128)
    launched = fake.count("cuLaunchKernelEx")
    args = dict(ptrs=(A, B, D), m=256, n=256, k=128)
    args.update(override)
    ptrs = args.pop("ptrs")
    with pytest.raises(runtime.InvalidArgumentError, match=message) as err:
        runtime.launch(iid, ptrs, 0, **args)
    assert "Fix:" in str(err.value) and err.value.instance == iid
    assert fake.count("cuLaunchKernelEx") == launched


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


@pytest.mark.parametrize("after_a_good_launch", [False, True], ids=["first", "cached"])
@pytest.mark.parametrize(("override", "message"), BAD_C, ids=[b[1][:30] for b in BAD_C])
def test_bad_c_input_raises_before_launching(ci, fake, override, message, after_a_good_launch):
    iid, args = _c_layout(ci)
    assert problem.layouts(ci.record(iid).spec)[3].elem == 2, "BAD_C's literals assume a 16-bit C"
    if after_a_good_launch:  # the shape cached and (A, B, D, C) remembered as accepted (plan.py)
        runtime.launch(iid, (A, B, D), 0, **args)
    launched = fake.count("cuLaunchKernelEx")
    args.update(override)
    with pytest.raises(runtime.InvalidArgumentError, match=message) as err:
        runtime.launch(iid, (A, B, D), 0, **args)
    assert "Fix:" in str(err.value) and err.value.instance == iid
    assert fake.count("cuLaunchKernelEx") == launched


def test_pointers_equal_to_accepted_ones_but_not_ints_are_refused(ci, fake):
    iid, args = _c_layout(ci)
    runtime.launch(iid, (A, B, D), 0, **args)
    for bad, message in [(dict(c=float(C)), "pointer c=.* is not an int"), (dict(c=True), "pointer c=True")]:
        with pytest.raises(runtime.InvalidArgumentError, match=message):
            runtime.launch(iid, (A, B, D), 0, **{**args, **bad})
    runtime.launch(_plain(ci), (A, B, D), 0, m=256, n=256, k=128)
    with pytest.raises(runtime.InvalidArgumentError, match="pointer d=.* is not an int"):
        runtime.launch(_plain(ci), (A, B, float(D)), 0, m=256, n=256, k=128)
    assert fake.count("cuLaunchKernelEx") == 2


def test_c_may_alias_d_exactly_for_an_in_place_update(ci, fake):
    iid, args = _c_layout(ci)
    rec = ci.record(iid)
    fake.param_sizes = tuple(p.size for p in rec.params)
    runtime.launch(iid, (A, B, D), 0, **dict(args, c=D, batch=2, beta=1.0))
    runtime.launch(iid, (A, B, D), 0, **dict(args, c=D, batch=1, ldc=272, ldd=272, beta=1.0))
    desc = {p.operand: i for i, p in enumerate(rec.params) if p.kind == "tensormap"}
    sent = fake.launches[-1].values
    assert sent[desc["c"]][:8] == sent[desc["d"]][:8] == D.to_bytes(8, "little")
    # Right next to D (no shared byte) is fine too, on either side.
    size = _d_bytes(ci, iid)
    runtime.launch(iid, (A, B, D), 0, **dict(args, c=D + size))
    runtime.launch(iid, (A, B, D), 0, **dict(args, c=D - size))
    assert fake.count("cuLaunchKernelEx") == 4


def test_outputs_beside_inputs_in_one_wide_buffer_are_not_an_overlap(ci, fake):
    # A (m x k) in columns [0, k) and D (m x n) in columns [k, k + n) of one m x (k + n) row-major buffer:
    # their byte ranges interleave but share no byte.
    iid = _plain(ci)
    m, n, k = 256, 128, 64
    ld = k + n
    runtime.launch(iid, (A, B, A + 2 * k), 0, m=m, n=n, k=k, lda=ld, ldd=ld)
    assert fake.count("cuLaunchKernelEx") == 1
    with pytest.raises(runtime.InvalidArgumentError, match="overlaps input a"):  # one column too far left
        runtime.launch(iid, (A, B, A + 2 * k - 16), 0, m=m, n=n, k=k, lda=ld, ldd=ld)


def _twin_without_c(ci, make_runtime):
    """The ci manifest plus a copy of its C instance that does not read C (as if both shipped)."""
    doc = json.loads(Path(ci.path).read_text())
    iid = _with_c(ci)
    twin = copy.deepcopy(doc["instances"][iid])
    twin["spec"].update(c_dtype=None, c_major=None)
    twin["params"] = [p for p in twin["params"] if p.get("operand") != "c" and p.get("name") != "beta"]
    twin_id = GemmSpec.from_json(twin["spec"]).name()
    doc["instances"][twin_id] = twin
    return iid, twin_id, make_runtime(Manifest.from_json(doc, ci.path))


def test_c_errors_name_the_instances_that_fit(ci, fake, make_runtime):
    iid, twin_id, _ = _twin_without_c(ci, make_runtime)
    with pytest.raises(runtime.InvalidArgumentError, match=f"use an instance that reads C: {iid}"):
        runtime.launch(twin_id, (A, B, D), 0, m=256, n=256, k=64, c=C)
    with pytest.raises(runtime.InvalidArgumentError, match=f"use an instance without C: {twin_id}"):
        runtime.launch(iid, (A, B, D), 0, m=256, n=256, k=64)
    assert fake.count("cuLaunchKernelEx") == 0


def test_record_whose_descriptors_contradict_its_spec_is_refused(ci):
    iid = _with_c(ci)
    doc = json.loads(Path(ci.path).read_text())
    doc["instances"][iid]["spec"].update(c_dtype=None, c_major=None)  # spec says no C, params have one
    with pytest.raises(runtime.CorruptArtifactError, match=r"names instance"):
        Manifest.from_json(doc, ci.path)


def test_unknown_instance_suggests_close_ids(ci, fake):
    good = _plain(ci)
    with pytest.raises(runtime.UnknownInstanceError) as err:
        runtime.launch(good.replace("_coop", "_cop"), (A, B, D), 0, m=64, n=64, k=64)
    assert err.value.suggestions[0] == good
    assert fake.count("cuLaunchKernelEx") == 0


def test_wrong_gpu_is_refused(ci, fake):
    fake.devices[0].capability = (8, 0)
    with pytest.raises(runtime.UnsupportedDeviceError, match="compute capability 8.0"):
        runtime.launch(_plain(ci), (A, B, D), 0, m=64, n=64, k=64)
    assert fake.count("cuLaunchKernelEx") == 0


def test_too_old_driver_is_refused(ci, fake):
    fake.version = 12040  # the ci cubins declare CUDA 12.9 (EIATTR_CUDA_API_VERSION)
    with pytest.raises(runtime.DriverTooOldError, match="12.9"):
        runtime.launch(_plain(ci), (A, B, D), 0, m=64, n=64, k=64)
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
                runtime.launch(
                    iid,
                    (A + 16 * t, B + 16 * i, D),
                    stream,
                    m=128 * (t + 1),
                    n=256,
                    k=64,
                    c=C,
                    alpha=float(t),
                    beta=float(i),
                )
        except Exception as e:  # noqa: BLE001 - surfaced by the assertion below, in the main thread
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


def test_concurrent_plain_launches_of_one_entry_keep_their_own_pointers(ci, fake):
    """Threads share one launch entry (same shape and stream) and its memo of accepted pointers, but
    each packs its own buffer (launcher.PlainBuffers); pointers repeat, so buffers are reused too."""
    iid = _plain(ci)
    rec = ci.record(iid)
    fake.param_sizes = tuple(p.size for p in rec.params)
    stream = fake.new_stream(fake.ctx(0))
    errors = []

    def worker(t):
        try:
            for i in range(300):
                runtime.launch(iid, (A + 16 * t, B + 16 * (i % 3), D + 16 * t), stream, m=256, n=256, k=64)
        except Exception as e:  # noqa: BLE001 - surfaced by the assertion below, in the main thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads often, also between a pack and its launch
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert not errors and len(fake.launches) == 2400
    assert len(runtime.state.runtime().plans[iid].entries) == 1
    index = {(p.kind, p.operand or p.name): i for i, p in enumerate(rec.params)}
    seen = set()
    for launch in fake.launches:  # A and D name the same thread; B one of its three values
        v = launch.values
        pa, pb, pd = (int.from_bytes(v[index["tensormap", x]][:8], "little") for x in "abd")
        assert (pa - A) // 16 == (pd - D) // 16 and (pb - B) // 16 in (0, 1, 2)
        seen.add(((pa - A) // 16, (pb - B) // 16))
    assert len(seen) == 24


@pytest.mark.parametrize("options", [{}, {"alpha": 2.0}], ids=["plain form", "launch_general"])
def test_pointer_sets_used_in_turn_are_checked_once_each(ci, fake, monkeypatch, options):
    """An allocating caller's outputs come from a caching allocator that hands out a few blocks in turn:
    an entry remembers up to plan.ACCEPTED_MEMO pointer sets as checked, and forgets them all when full."""
    iid = _plain(ci)
    runtime.launch(iid, (A, B, D), 0, m=256, n=256, k=64, **options)
    entry = next(iter(runtime.state.runtime().plans[iid].entries.values()))
    checks = []
    check = entry.check_overlap
    monkeypatch.setattr(entry, "check_overlap", lambda *args: checks.append(args[1:]) or check(*args))
    outputs = [D + i * 0x100_0000 for i in range(plan.ACCEPTED_MEMO)]
    for _ in range(3):
        for d in outputs:
            runtime.launch(iid, (A, B, d), 0, m=256, n=256, k=64, **options)
    assert [c[2] for c in checks] == outputs[1:]  # D was checked by the first launch; each other once
    assert fake.count("cuLaunchKernelEx") == 1 + 3 * len(outputs)
    for i in range(3 * plan.ACCEPTED_MEMO):  # more sets than it holds: bounded, and each one checked
        runtime.launch(iid, (A, B, D + (i + 100) * 0x100_0000), 0, m=256, n=256, k=64, **options)
        assert 1 <= len(entry.accepted) <= plan.ACCEPTED_MEMO
    assert len(checks) == len(outputs) - 1 + 3 * plan.ACCEPTED_MEMO


def test_batches_side_by_side_in_one_workspace_are_not_an_overlap(ci, fake):
    # Per batch i: A_i then D_i, in one allocation (batch strides equal, each batch's pair disjoint).
    iid = _plain(ci)
    m, n, k, batch = 128, 128, 64, 3
    a_bytes, d_bytes = m * k * 2, m * n * 2
    stride = (a_bytes + d_bytes) // 2  # in bf16 elements
    kw = dict(m=m, n=n, k=k, batch=batch, batch_stride_a=stride, batch_stride_d=stride)
    runtime.launch(iid, (A, B, A + a_bytes), 0, **kw)
    assert fake.count("cuLaunchKernelEx") == 1
    with pytest.raises(runtime.InvalidArgumentError, match="overlaps input a"):
        runtime.launch(iid, (A, B, A + a_bytes - 16), 0, **kw)


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
    spec = GemmSpec(
        a_dtype="bf16",
        b_dtype="bf16",
        d_dtype="bf16",
        c_dtype="bf16",
        a_major="k",
        b_major="k",
        d_major="n",
        c_major="n",
        tile=(128, 128, 64),
        cluster=(1, 1),
        schedule="cooperative",
    )
    ops = problem.layouts(spec)
    raised = passed = 0
    for case in range(1500):
        m, n, k, batch = rng.randint(1, 6), rng.choice([8, 16]), rng.choice([8, 16]), rng.randint(1, 3)
        pitch = rng.choice([16, 24, 32])
        lds = (pitch, pitch, pitch, rng.choice([pitch, 16 * rng.randint(1, 2)]))
        bss = tuple(rng.choice([None, pitch * rng.randint(1, 8), 8 * rng.randint(1, 24)]) for _ in range(4))
        try:
            values = problem.resolve("t", ops, m, n, k, batch, lds, bss)
        except runtime.InvalidArgumentError:
            continue  # e.g. ld below the extent, or overlapping D batches
        fps = overlap.Footprints(ops, values)
        ptrs = {"a": 4096, "b": 8192 * 4, "d": 4096 + 16 * rng.randint(0, 64)}
        ptrs["c"] = rng.choice([ptrs["d"], ptrs["d"] + 16 * rng.randint(-40, 40), 8192 * 8])
        bytes_d = _bytes_of(fps.d, ptrs["d"], values)
        clash = bool(bytes_d & _bytes_of(fps.a, ptrs["a"], values))
        alias = ptrs["c"] == ptrs["d"] and overlap.same_layout(fps.c, fps.d)
        clash |= not alias and bool(bytes_d & _bytes_of(fps.c, ptrs["c"], values))
        try:
            fps.check("t", ptrs["a"], ptrs["b"], ptrs["d"], ptrs["c"])
            passed += 1
        except runtime.InvalidArgumentError:
            raised += 1
            continue
        assert not clash, (case, values, ptrs)
    assert raised > 100 and passed > 100, (raised, passed)  # both verdicts were exercised


def test_pdl_needs_a_kernel_that_waits_for_its_predecessor(ci, fake):
    import dataclasses

    iid = _plain(ci)
    rec = ci.record(iid)
    assert rec.pdl  # every kernel of this source tree issues griddepcontrol.wait
    runtime.launch(iid, (A, B, D), 0, m=64, n=64, k=64, pdl=True)
    runtime.state.runtime().plans[iid] = plan.LaunchPlan(dataclasses.replace(rec, pdl=False), ci)
    with pytest.raises(runtime.InvalidArgumentError, match="does not wait for its predecessor"):
        runtime.launch(iid, (A, B, D), 0, m=64, n=64, k=64, pdl=True)


def _without_c(man) -> str:
    return next(i for i in man.instances if not man.record(i).spec.has_c)


@pytest.fixture
def pointer_checks(ci, make_runtime):
    """`pointer_checks(mode, allow_peer)`: a fresh Runtime with these knobs (a runtime decides
    HGEMM_CHECK_POINTERS once)."""

    def set_mode(mode="auto", allow_peer=False):
        return make_runtime(ci, check_pointers=mode, allow_peer_pointers=allow_peer)

    return set_mode


def test_single_gpu_processes_skip_the_pointer_query(ci, fake, pointer_checks):
    pointer_checks("auto")
    runtime.launch(_without_c(ci), (A, B, D), 0, m=64, n=64, k=64)
    assert fake.count("cuPointerGetAttribute") == 0 and fake.count("cuLaunchKernelEx") == 1


def test_pointers_on_another_gpu_are_refused_before_launching(ci, fake, pointer_checks):
    from fake_driver import Device

    fake.devices[1] = Device()
    fake.contexts[0x1001] = 1
    pointer_checks("auto")
    iid = _without_c(ci)
    stream0 = fake.new_stream(fake.ctx(0))
    fake.pointers.update({A: (0, False), B: (1, False), D: (0, False)})
    with pytest.raises(runtime.DeviceMismatchError) as err:
        runtime.launch(iid, (A, B, D), stream0, m=64, n=64, k=64)
    assert "'b'" in str(err.value) and err.value.instance == iid
    assert fake.count("cuLaunchKernelEx") == 0
    fake.pointers[B] = (1, True)  # managed memory is accessible from every device
    runtime.launch(iid, (A, B, D), stream0, m=64, n=64, k=64)
    fake.pointers[B] = (1, False)
    fake.peer_ok = True  # peer-capable, but only the caller knows whether peer access is enabled
    with pytest.raises(runtime.DeviceMismatchError):
        runtime.launch(iid, (A, B, D), stream0, m=64, n=64, k=64)
    pointer_checks("auto", allow_peer=True)
    runtime.launch(iid, (A, B, D), stream0, m=64, n=64, k=64)
    assert fake.count("cuLaunchKernelEx") == 2


def test_unknown_memory_is_refused_when_checking(ci, fake, pointer_checks):
    pointer_checks("always")
    with pytest.raises(runtime.InvalidArgumentError, match="not memory CUDA knows"):
        runtime.launch(_without_c(ci), (A, B, D), 0, m=64, n=64, k=64)
    assert fake.count("cuLaunchKernelEx") == 0


def _split(man, clustered: bool = False) -> str:
    """The ci profile's split-K instance in a 1x1 cluster (swap-AB, decode-sized), or in a larger one."""
    return _first(
        man,
        lambda s: s.k_split == "split" and (s.cluster != (1, 1)) == clustered,
        f"a split-K instance, clustered={clustered}",
    )


def _launch_split_checked(ci, fake, iid, m, n, k, k_splits):
    """Launch split-K instance ``iid`` (a workspace unless one split), check the parameter bytes and the
    grid it sent against the test's own derivation, and return (the expected values, the grid)."""
    ws = None if k_splits == 1 else W
    runtime.launch(iid, (A, B, D), 0, m=m, n=n, k=k, k_splits=k_splits, workspace=ws)
    rec = ci.record(iid)
    values = _values(rec, (A, B, D), m, n, k, k_splits=k_splits, workspace=ws)
    want, grid = _expect(ci, iid, values)
    got = fake.launches[-1]
    _assert_sent(got, rec, want)
    assert got.grid == grid
    return values, grid


def test_split_k_sends_its_count_and_workspace_and_sizes_the_grid_by_units(ci, fake):
    iid = _split(ci)
    rec = ci.record(iid)
    fake.param_sizes = tuple(p.size for p in rec.params)
    tile_m, tile_n, tile_k = rec.spec.tile
    m, n, k = 8, 2048, 40 * tile_k  # swap-AB 64-row tiles along N: few tiles, 40 k-tiles
    for k_splits in (None, 1, 3, 7, 40):
        values, grid = _launch_split_checked(ci, fake, iid, m, n, k, k_splits)
        tiles = scheduling.cluster_tiles(m, n, 1, *rec.spec.problem_tile, 1, 1)[2]
        splits = values["k_splits"]
        assert grid[0] == min(tiles * splits, 66)  # 66: the fake device's resident CTAs
        want_bytes = 0 if splits == 1 else 4 * (4096 + tiles * splits * tile_m * tile_n)  # counters, partials
        assert runtime.workspace_bytes(iid, m, n, k, k_splits=k_splits) == want_bytes
    # The default split count comes from the problem alone: enough units for one H200 wave.
    assert values["k_splits"] == 40 and scheduling.default_k_splits(tiles, 40) == min(132 // tiles, 10)


def test_clustered_split_k_counts_its_workspace_and_default_splits_per_cta_tile(ci, fake):
    """In a cluster every CTA reduces its own tile: the counters, the partials and the default split
    count are per CTA tile (cluster tiles x CTAs per cluster), the grid counts cluster units."""
    iid = _split(ci, clustered=True)
    rec = ci.record(iid)
    fake.param_sizes = tuple(p.size for p in rec.params)
    tile_m, tile_n, tile_k = rec.spec.tile
    cm, cn = rec.spec.cluster
    m, n, k = 3 * tile_m - 20, 8 * tile_n + 8, 40 * tile_k  # the last cluster row and column partly outside
    clusters = scheduling.cluster_tiles(m, n, 1, tile_m, tile_n, cm, cn)[2]
    cta_tiles = clusters * cm * cn
    assert cta_tiles > scheduling.cluster_tiles(m, n, 1, tile_m, tile_n, 1, 1)[2]  # padded to whole clusters
    for k_splits in (None, 1, 3):
        values, _ = _launch_split_checked(ci, fake, iid, m, n, k, k_splits)
        splits = values["k_splits"]
        want_bytes = 0 if splits == 1 else 4 * (4096 + cta_tiles * splits * tile_m * tile_n)
        assert runtime.workspace_bytes(iid, m, n, k, k_splits=k_splits) == want_bytes
    # The default: enough CTA units for one H200 wave (36 CTA tiles here: 3 splits).
    assert _values(rec, (A, B, D), m, n, k)["k_splits"] == 132 // cta_tiles == 3


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"k_splits": 41}, r"k_splits=41 is more than the 40 k-tiles"),
        ({"k_splits": 0}, r"k_splits=0"),
        ({"k_splits": 2.0}, r"k_splits=2.0"),
        ({"k_splits": 3, "workspace": None}, r"needs a workspace of \d+ bytes but workspace is None"),
        ({"k_splits": 3, "workspace": W + 8}, r"pointer workspace=0x7f5000000008 is not a 16-byte aligned"),
        ({"k_splits": 3, "workspace": 0}, r"pointer workspace is null"),
        # 4097 tiles: one more than the workspace's fixed block of arrival counters.
        ({"k_splits": 2, "workspace": W, "n": 4097 * 64}, r"split-K takes at most 4096 tiles"),
    ],
)
def test_bad_split_k_input_raises_before_launching(ci, fake, kw, message):
    iid = _split(ci)
    fake.param_sizes = tuple(p.size for p in ci.record(iid).params)
    k = 40 * ci.record(iid).spec.tile[2]
    kw = {"n": 2048, **kw}
    for _ in range(2):  # also once the shape is cached
        with pytest.raises(runtime.InvalidArgumentError, match=message):
            runtime.launch(iid, (A, B, D), 0, m=8, k=k, **kw)
        assert not fake.launches
        runtime.launch(iid, (A, B, D), 0, m=8, n=2048, k=k, k_splits=3, workspace=W)
        fake.launches.clear()


def test_instances_without_split_k_refuse_its_arguments(ci, fake):
    iid = _plain(ci)
    fake.param_sizes = tuple(p.size for p in ci.record(iid).params)
    for kw in ({"k_splits": 2}, {"workspace": W}):
        with pytest.raises(runtime.InvalidArgumentError, match=r"does not split K .*_splitk"):
            runtime.launch(iid, (A, B, D), 0, m=256, n=256, k=64, **kw)
    assert not fake.launches
    assert runtime.workspace_bytes(iid, 256, 256, 64) == 0


def _stream(man) -> str:
    return _first(man, lambda s: s.k_split == "stream", "a stream-K instance")


def test_stream_k_takes_an_optional_workspace_of_one_size_and_no_split_count(ci, fake):
    iid = _stream(ci)
    rec = ci.record(iid)
    fake.param_sizes = tuple(p.size for p in rec.params)
    tile_m, tile_n, tile_k = rec.spec.tile
    # Two fp32 partial tiles per SM of a 132-SM board after the counters, whatever the problem.
    want = 4 * (4096 + 2 * 132 * tile_m * tile_n)
    for m, n, k in ((300, 1000, 14 * tile_k), (8192, 8192, 4096), (1, 16, 8)):
        assert runtime.workspace_bytes(iid, m, n, k) == want
    slot = next(i for i, p in enumerate(rec.params) if p.name == "workspace")
    _, _, tiles = scheduling.cluster_tiles(300, 1000, 1, *rec.spec.problem_tile, *rec.spec.problem_cluster)
    for ws in (W, None, W + 256):  # None is sent as 0: the kernel then runs every tile whole
        runtime.launch(iid, (A, B, D), 0, m=300, n=1000, k=14 * tile_k, workspace=ws)
        sent = fake.launches[-1]
        assert sent.values[slot] == struct.pack("<Q", ws or 0)
        # The grid: min(cluster tiles x min(k-tiles, 4), the clusters that fit (66 here)) clusters.
        clusters = min(tiles * 4, 66)
        assert sent.grid[0] == clusters * rec.spec.cluster[0]
    with pytest.raises(runtime.InvalidArgumentError, match=r"does not split K by a launch-time count"):
        runtime.launch(iid, (A, B, D), 0, m=300, n=1000, k=14 * tile_k, k_splits=2, workspace=W)
    with pytest.raises(runtime.InvalidArgumentError, match=r"stream-K instance's walk can number"):
        runtime.launch(iid, (A, B, D), 0, m=300, n=1000, k=tile_k * 50_000, workspace=W)
    assert len(fake.launches) == 3


def test_stream_k_gets_no_more_workers_than_its_workspace_has_slots_for(ci, fake):
    # A kernel that would fit several CTAs per SM (500 clusters of two here) is held to one CTA per SM
    # of a 132-SM board, for which stream_workspace_bytes sizes the partial slots.
    fake.max_active_clusters = 500  # read when the instance loads, below
    iid = _stream(ci)
    fake.param_sizes = tuple(p.size for p in ci.record(iid).params)
    runtime.launch(iid, (A, B, D), 0, m=8192, n=8192, k=4096, workspace=W)
    assert fake.launches[-1].grid == (132, 1, 1)
    plain = _plain(ci)
    fake.param_sizes = tuple(p.size for p in ci.record(plain).params)
    runtime.launch(plain, (A, B, D), 0, m=8192, n=8192, k=4096)
    assert fake.launches[-1].grid[0] > 132  # other instances take what the device reports


def test_num_sms_caps_every_persistent_grid_to_whole_clusters(ci, make_runtime, fake):
    """HGEMM_NUM_SMS = 40: a 1x1 instance's grid holds 40 CTAs, a two-CTA cluster's 20 clusters; a cap
    below one cluster still launches one, a cap above what fits changes nothing (66 clusters fit on the
    fake device), and a problem of fewer tiles is not padded up to the cap."""
    plain = _plain(ci)
    pair = _first(
        ci,
        lambda s: s.cluster in ((2, 1), (1, 2)) and s.k_split == "none" and not s.has_c and not s.swap_ab
        and s.varlen == "none" and (s.a_dtype, s.d_dtype, s.a_major, s.b_major, s.d_major)
        == ("bf16", "bf16", "k", "k", "n"),
        "a plain bf16 instance in a two-CTA cluster",
    )  # fmt: skip
    for cap, iid, ctas in ((40, plain, 40), (40, pair, 40), (1, pair, 2), (200, plain, 66)):
        make_runtime(ci, num_sms=cap)  # a fresh runtime: the cap is read when an instance loads
        fake.param_sizes = tuple(p.size for p in ci.record(iid).params)
        runtime.launch(iid, (A, B, D), 0, m=8192, n=8192, k=4096)
        grid = fake.launches[-1].grid
        assert grid[0] * grid[1] * grid[2] == ctas, (cap, iid, grid)
    make_runtime(ci, num_sms=40)
    fake.param_sizes = tuple(p.size for p in ci.record(plain).params)
    runtime.launch(plain, (A, B, D), 0, m=128, n=256, k=4096)  # 2 tiles of 128 x 128
    assert fake.launches[-1].grid == (2, 1, 1)


def _grouped(man, with_c: bool = False) -> str:
    return _first(man, lambda s: s.varlen_m and s.has_c == with_c, "a grouped instance")


def test_grouped_launch_sends_offsets_groups_and_d_and_bounds_the_grid(ci, fake):
    iid = _grouped(ci)
    rec = ci.record(iid)
    fake.param_sizes = tuple(p.size for p in rec.params)
    tile_m, tile_n, _ = rec.spec.tile
    for m, groups in ((1000, 8), (1000, 256), (5, 1), (40000, 3)):
        n, k = 1024, 512
        for cu in (S, S + 64):  # the second launch is a cache hit: the new address must be patched in
            runtime.launch(iid, (A, B, D), 0, m=m, n=n, k=k, num_groups=groups, cu_seqlens_m=cu)
            values = _values(rec, (A, B, D), m, n, k, groups=groups, cu_seqlens_m=cu)
            want, grid = _expect(ci, iid, values)
            got = fake.launches[-1]
            _assert_sent(got, rec, want)
            rows = tile_m * rec.cluster[0]
            assert got.grid == grid and grid[0] == min((m + groups * (rows - 1)) // rows * (n // tile_n), 66)
    # D travels as a plain tensor: its address word, extents (m, n, 1) and strides (ldd, m * ldd).
    d = next(p for p in rec.params if p.kind == "tensor")
    sent = fake.launches[-1].values[rec.params.index(d)]
    assert int.from_bytes(sent[:8], "little") == D and struct.unpack_from("<3i", sent, 8) == (40000, 1024, 1)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"num_groups": None}, r"num_groups=None: this grouped instance needs the number of groups"),
        ({"num_groups": 0}, r"num_groups=0"),
        ({"num_groups": 2.0}, r"num_groups=2.0"),
        ({"cu_seqlens_m": None}, r"needs the groups' row offsets, but cu_seqlens_m is None"),
        ({"cu_seqlens_m": S + 2}, r"cu_seqlens_m=.* is not a non-null, 4-byte aligned device address"),
        ({"cu_seqlens_m": 0}, r"cu_seqlens_m=0 is not"),
        ({"batch": 2}, r"batch=2 with a grouped instance"),
        ({"k_splits": 2}, r"k_splits given, but this instance does not split K"),
        ({"m": 2**31 - 100, "num_groups": 1000}, r"passes 2\*\*31 - 1, the kernel's bound"),
    ],
)
def test_bad_grouped_input_raises_before_launching(ci, fake, kw, message):
    iid = _grouped(ci)
    fake.param_sizes = tuple(p.size for p in ci.record(iid).params)
    args = dict(m=1000, n=1024, k=512, num_groups=8, cu_seqlens_m=S)
    args.update(kw)
    with pytest.raises(runtime.InvalidArgumentError, match=message):
        runtime.launch(iid, (A, B, D), 0, **args)
    assert not fake.launches


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"num_groups": 8}, r"num_groups=8 given, but this instance is not grouped"),
        ({"cu_seqlens_m": S}, r"cu_seqlens_m given, but this instance is not grouped"),
    ],
)
def test_grouped_arguments_on_a_plain_instance_are_refused(ci, fake, kw, message):
    iid = _plain(ci)
    fake.param_sizes = tuple(p.size for p in ci.record(iid).params)
    with pytest.raises(runtime.InvalidArgumentError, match=message):
        runtime.launch(iid, (A, B, D), 0, m=256, n=256, k=256, **kw)
    assert not fake.launches


def _gathering(man, over_k: bool = False, cluster=(1, 1)) -> str:
    return _first(
        man,
        lambda s: s.gather_a and s.varlen_k == over_k and tuple(s.cluster) == cluster,
        f"an instance that gathers A in a {cluster} cluster",
    )


def test_gathered_launch_sends_the_indices_and_a_as_its_own_tensor(ci, fake):
    iid = _gathering(ci)
    rec = ci.record(iid)
    fake.param_sizes = tuple(p.size for p in rec.params)
    tile_k = rec.spec.tile[2]
    m, n, k, a_rows = 3000, 1024, 4 * tile_k, 700
    for idx in (S + 0x100, S + 0x200):  # the second launch is a cache hit: the new address is patched in
        runtime.launch(
            iid, (A, B, D), 0, m=m, n=n, k=k, num_groups=8, cu_seqlens_m=S, a_idx=idx, a_rows=a_rows
        )
        values = _values(rec, (A, B, D), m, n, k, groups=8, cu_seqlens_m=S, a_rows=a_rows, a_idx=idx)
        want, grid = _expect(ci, iid, values)
        _assert_sent(fake.launches[-1], rec, want)
    a = next(p for p in rec.params if p.kind == "tensor" and p.operand == "a")
    sent = fake.launches[-1].values[rec.params.index(a)]
    assert int.from_bytes(sent[:8], "little") == A and struct.unpack_from("<3i", sent, 8) == (a_rows, k, 1)


def test_a_gathering_pair_gets_a_descriptor_of_one_row_boxes_over_a_rows(ci, fake):
    """A pair loads A's rows by TMA (one-row boxes at the gathered coordinates): its A is a descriptor
    whose extent is the A given (a_rows rows), not the m rows of the groups."""
    iid = _gathering(ci, cluster=(1, 2))
    rec = ci.record(iid)
    fake.param_sizes = tuple(p.size for p in rec.params)
    tile_k = rec.spec.tile[2]
    m, n, k, a_rows = 3000, 1024, 4 * tile_k, 700
    runtime.launch(
        iid, (A, B, D), 0, m=m, n=n, k=k, num_groups=8, cu_seqlens_m=S, a_idx=S + 0x100, a_rows=a_rows
    )
    values = _values(rec, (A, B, D), m, n, k, groups=8, cu_seqlens_m=S, a_rows=a_rows, a_idx=S + 0x100)
    want, _ = _expect(ci, iid, values)
    _assert_sent(fake.launches[-1], rec, want)
    a = next(p for p in rec.params if p.kind == "tensormap" and p.operand == "a")
    desc = decode(fake.launches[-1].values[rec.params.index(a)])
    row_elems = 128 * 8 // rec.spec.a_dtype.bits
    assert (desc["global_address"], desc["dims"][:2], desc["box"]) == (A, (k, a_rows), (row_elems, 1, 1))
    assert desc["swizzle"] == "128B"


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"a_idx": None}, r"gathers A's rows, but a_idx is None"),
        ({"a_idx": S + 1}, r"a_idx=.* is not a non-null, 4-byte aligned device address"),
        ({"k": 1000}, r"k=1000 with an instance that gathers A: its rows are copied in whole k-tiles"),
        ({"a_rows": 0}, r"a_rows=0 is outside"),
    ],
)
def test_bad_gathered_input_raises_before_launching(ci, fake, kw, message):
    iid = _gathering(ci)
    fake.param_sizes = tuple(p.size for p in ci.record(iid).params)
    args = dict(m=1000, n=1024, k=4 * ci.record(iid).spec.tile[2], num_groups=8, cu_seqlens_m=S, a_idx=S)
    args.update(kw)
    with pytest.raises(runtime.InvalidArgumentError, match=message):
        runtime.launch(iid, (A, B, D), 0, **args)
    assert not fake.launches


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"a_idx": S}, r"a_idx given, but this instance does not gather A"),
        ({"a_rows": 100}, r"a_rows=100 given, but this instance does not gather A"),
    ],
)
def test_gather_arguments_on_a_plain_grouped_instance_are_refused(ci, fake, kw, message):
    iid = _grouped(ci)
    fake.param_sizes = tuple(p.size for p in ci.record(iid).params)
    with pytest.raises(runtime.InvalidArgumentError, match=message):
        runtime.launch(iid, (A, B, D), 0, m=256, n=256, k=256, num_groups=2, cu_seqlens_m=S, **kw)
    assert not fake.launches


def test_gathered_k_launch_sends_the_indices_and_a_with_its_own_columns(ci, fake):
    """Grouped K with gathered A: a_idx indexes A's K columns; A travels as a tensor of (m, a_cols)."""
    iid = _gathering(ci, over_k=True)
    rec = ci.record(iid)
    fake.param_sizes = tuple(p.size for p in rec.params)
    m, n, k, a_cols = 264, 1024, 4100, 700
    for idx in (S + 0x100, S + 0x200):  # the second launch is a cache hit: the new address is patched in
        runtime.launch(
            iid, (A, B, D), 0, m=m, n=n, k=k, num_groups=8, cu_seqlens_k=S, a_idx=idx, a_cols=a_cols
        )
        values = _values(rec, (A, B, D), m, n, k, groups=8, cu_seqlens_m=S, a_rows=a_cols, a_idx=idx)
        want, grid = _expect(ci, iid, values)
        _assert_sent(fake.launches[-1], rec, want)
    a = next(p for p in rec.params if p.kind == "tensor" and p.operand == "a")
    sent = fake.launches[-1].values[rec.params.index(a)]
    assert int.from_bytes(sent[:8], "little") == A and struct.unpack_from("<3i", sent, 8) == (m, a_cols, 1)
    before = len(fake.launches)
    bad = [
        ({"a_rows": 700}, r"a_rows=700 given, but this instance gathers A's columns.*pass a_cols"),
        ({"a_cols": 0}, r"a_cols=0 is outside"),
        ({"a_idx": None}, r"gathers A's columns, but a_idx is None.*int32\[k\] column indices"),
    ]
    for kw, message in bad:
        args = dict(m=m, n=n, k=k, num_groups=8, cu_seqlens_k=S, a_idx=S)
        args.update(kw)
        with pytest.raises(runtime.InvalidArgumentError, match=message):
            runtime.launch(iid, (A, B, D), 0, **args)
    assert len(fake.launches) == before


def _grouped_k(man, with_c: bool = False) -> str:
    return _first(man, lambda s: s.varlen_k and s.has_c == with_c and not s.gather_a, "a grouped-K instance")


def test_grouped_k_launch_sends_its_offsets_and_one_tile_grid_per_group(ci, fake):
    iid = _grouped_k(ci)
    rec = ci.record(iid)
    fake.param_sizes = tuple(p.size for p in rec.params)
    m, n, k, groups = 1000, 1024, 4096, 8
    for cu in (S, S + 64):  # the second launch is a cache hit: the new address is patched in
        runtime.launch(iid, (A, B, D), 0, m=m, n=n, k=k, num_groups=groups, cu_seqlens_k=cu)
        values = _values(rec, (A, B, D), m, n, k, groups=groups, cu_seqlens_m=cu)
        want, grid = _expect(ci, iid, values)
        _assert_sent(fake.launches[-1], rec, want)
        tiles = scheduling.cluster_tiles(m, n, groups, *rec.spec.problem_tile, 1, 1)[2]
        assert fake.launches[-1].grid == grid and grid[0] == min(tiles, 66)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"cu_seqlens_k": None}, r"needs the groups' K offsets, but cu_seqlens_k is None"),
        ({"cu_seqlens_m": S}, r"cu_seqlens_m given, but this grouped instance takes cu_seqlens_k"),
        ({"num_groups": None}, r"needs the number of groups"),
        ({"cu_seqlens_k": S + 1}, r"cu_seqlens_k=.* is not a non-null, 4-byte aligned"),
    ],
)
def test_bad_grouped_k_input_raises_before_launching(ci, fake, kw, message):
    iid = _grouped_k(ci)
    fake.param_sizes = tuple(p.size for p in ci.record(iid).params)
    args = dict(m=256, n=256, k=1024, num_groups=4, cu_seqlens_k=S)
    args.update(kw)
    with pytest.raises(runtime.InvalidArgumentError, match=message):
        runtime.launch(iid, (A, B, D), 0, **args)
    assert not fake.launches


def test_grouped_launches_with_c_send_c_beta_and_the_offsets(ci, fake):
    """Grouped instances that read C (varlen M: C like D, all groups' rows; varlen K: one C per group, its
    batch stride is per group): C's descriptor and beta reach the kernel next to the offsets, also on a
    cache hit, and c=d (a gradient accumulated in place) passes the overlap rule."""
    m, n, k, groups = 1000, 1024, 4096, 8
    forms = ((_grouped(ci, with_c=True), "cu_seqlens_m"), (_grouped_k(ci, with_c=True), "cu_seqlens_k"))
    for iid, name in forms:
        rec = ci.record(iid)
        fake.param_sizes = tuple(p.size for p in rec.params)
        for c, beta, cu in ((C, 0.5, S), (D, 1.0, S + 64)):
            runtime.launch(iid, (A, B, D), 0, m=m, n=n, k=k, c=c, beta=beta, num_groups=groups, **{name: cu})
            values = _values(rec, (A, B, D), m, n, k, c=c, beta=beta, groups=groups, cu_seqlens_m=cu)
            want, grid = _expect(ci, iid, values)
            _assert_sent(fake.launches[-1], rec, want)
            assert fake.launches[-1].grid == grid
        if rec.spec.varlen_k:  # C's descriptor spans one m x n matrix per group
            assert values["batch_stride_c"] == m * n and values["g"] == groups
        before = len(fake.launches)
        with pytest.raises(runtime.InvalidArgumentError, match="reads a C operand .* but c is None"):
            runtime.launch(iid, (A, B, D), 0, m=m, n=n, k=k, num_groups=groups, **{name: S})
        with pytest.raises(runtime.InvalidArgumentError, match="overlap|shares"):  # C inside D, not D itself
            runtime.launch(iid, (A, B, D), 0, m=m, n=n, k=k, c=D + 64, num_groups=groups, **{name: S})
        assert len(fake.launches) == before


class _Index:
    """An int-like address (numpy integers behave so): only __index__."""

    def __init__(self, value: int):
        self.value = value

    def __index__(self) -> int:
        return self.value


def test_grouped_offsets_given_as_int_likes_reach_the_launch_converted(ci, fake):
    for iid, name in ((_grouped_k(ci), "cu_seqlens_k"), (_grouped(ci), "cu_seqlens_m")):
        rec = ci.record(iid)
        fake.param_sizes = tuple(p.size for p in rec.params)
        runtime.launch(iid, (A, B, D), 0, m=256, n=256, k=1024, num_groups=4, **{name: _Index(S + 0x40)})
        sent = fake.launches[-1].values[next(i for i, p in enumerate(rec.params) if p.name == name)]
        assert int.from_bytes(sent, "little") == S + 0x40
