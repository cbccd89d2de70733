"""`gemm()` against the fake driver: what it derives from strides, what reaches the launch, what it refuses.

The operands are the fake arrays of tests/runtime/fake_arrays.py, one class per protocol (torch's
attribute surface, ``__cuda_array_interface__`` only, DLPack only). The manifest holds one instance per
problem class the tests need, so the class decides the instance. Most tests replace `select` by a lookup
of that instance (recording its arguments) and spy on `launch` (recording its arguments, then calling
it); each layout case also repeats the launch through `launch()` with every stride spelled out and
compares the parameter bytes that reached cuLaunchKernelEx. A few tests go through the real `select`.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
import timeit
import types

import pytest
from fake_arrays import FLOAT64, CaiArray, CpuArray, DLPackArray, TorchTensor, contiguous, torch_module
from fake_kernels import make_doc, params, record, write_kernels

import runtime
from runtime import manifest
from runtime.dispatch import Choice
from runtime.errors import DeviceMismatchError, HgemmError, InvalidArgumentError, NoInstanceError
from runtime.spec import DType, GemmSpec

gemm_module = importlib.import_module("runtime.array_gemm")
M, N, K = 48, 80, 96  # multiples of 16 elements: every layout is TMA-legal for 8- and 16-bit dtypes
PAD, BATCH_PAD = 16, 64  # padded leading dimensions and batch strides, in elements
KINDS = ("torch", "cai", "dlpack")
_DESC_DIMS = {"k": ("k", "m", "l"), "m": ("m", "k", "l")}


def _spec(a, am="k", bm="k", dm="n", b=None, d=None, c=None, cm=None, fast=False, acc="fp32") -> GemmSpec:
    return GemmSpec(
        acc_dtype=acc,
        a_dtype=a,
        b_dtype=b or a,
        d_dtype=d or a,
        a_major=am,
        b_major=bm,
        d_major=dm,
        tile=(128, 128, 0),
        cluster=(1, 1),
        schedule="cooperative",
        c_dtype=c,
        c_major=cm,
        fp8_fast_accum=fast,
    )


SPECS = [_spec("fp16", am, bm, dm) for am in "km" for bm in "kn" for dm in "nm"]
SPECS += [_spec("fp16", "k", "k", dm, c="fp16", cm=cm) for dm in "nm" for cm in "nm"]
SPECS += [_spec("bf16"), _spec("bf16", d="fp32"), _spec("bf16", c="bf16", cm="n")]
SPECS += [_spec("e4m3", d="bf16"), _spec("e4m3", d="bf16", fast=True), _spec("fp16", acc="fp16")]


def _class(s) -> tuple:
    fast = s.fp8_fast_accum and DType(s.a_dtype).is_float8
    fields = (s.a_dtype, s.b_dtype, s.d_dtype, s.a_major, s.b_major, s.d_major, s.c_dtype, s.c_major)
    return (*(None if f is None else str(f) for f in fields), fast, s.acc_dtype == DType.fp16)


BY_CLASS = {_class(s): s.name() for s in SPECS}


def _record(s: GemmSpec):
    """fake_kernels.record with each descriptor's dims in the operand's own order (contiguous first) and
    a box one swizzle row wide for its dtype."""
    contiguous_first = {
        "a": {"k": ("k", "m", "l"), "m": ("m", "k", "l")},
        "b": {"k": ("k", "n", "l"), "n": ("n", "k", "l")},
        "d": {"n": ("n", "m", "l"), "m": ("m", "n", "l")},
        "c": {"n": ("n", "m", "l"), "m": ("m", "n", "l")},
    }
    ps, _ = params(s)
    fixed = tuple(
        dataclasses.replace(
            p,
            tensormap=dataclasses.replace(
                p.tensormap,
                dims=contiguous_first[p.operand][str(s.major_of(p.operand))],
                box=(128 // p.tensormap.dtype.bytes, 64, 1),  # one 128-byte swizzle row
            ),
        )
        if p.kind == "tensormap"
        else p
        for p in ps
    )
    return dataclasses.replace(record(s), params=fixed)


@pytest.fixture
def catalog(tmp_path):
    doc = make_doc([_record(s) for s in SPECS])
    return manifest.load(str(write_kernels(tmp_path / "gemm_kernels", doc)))


@pytest.fixture
def rt(make_runtime, catalog):
    return make_runtime(catalog)


@pytest.fixture(autouse=True)
def torch_mod(monkeypatch):
    """A stand-in torch module in sys.modules (gemm finds torch there, as it would after `import torch`)."""
    mod = torch_module()
    monkeypatch.setitem(sys.modules, "torch", mod)
    monkeypatch.setattr(gemm_module, "_torch_raw_stream", None)
    return mod


@pytest.fixture
def selects(monkeypatch):
    """Replace select() by the lookup of the one instance of the problem's class; record its arguments."""
    calls = []

    def fake_select(m, n, k, *, a_dtype, b_dtype, d_dtype, a_major, b_major, d_major, c_dtype, c_major,
                    fp8_fast_accum, batch, device, fp16_accum, pdl):  # fmt: skip
        args = dict(m=m, n=n, k=k, a_dtype=a_dtype, b_dtype=b_dtype, d_dtype=d_dtype, a_major=a_major)
        args.update(b_major=b_major, d_major=d_major, c_dtype=c_dtype, c_major=c_major)
        args.update(fp8_fast_accum=fp8_fast_accum, batch=batch, device=device, fp16_accum=fp16_accum)
        args.update(pdl=pdl)
        calls.append(args)
        fields = (a_dtype, b_dtype, d_dtype, a_major, b_major, d_major, c_dtype, c_major)
        fast = fp8_fast_accum and DType(a_dtype).is_float8
        key = (*(None if f is None else str(f) for f in fields), fast, fp16_accum)
        if key not in BY_CLASS:
            raise NoInstanceError(str(key), [])
        return Choice(BY_CLASS[key], None, None, "test", "the class's only instance", 1.0)

    monkeypatch.setattr(gemm_module, "select", fake_select)
    return calls


@pytest.fixture
def launches(monkeypatch):
    """Spy on the launch_general() that gemm calls: (instance, ptrs, stream, keywords) per call."""
    seen = []
    real = gemm_module.launch_general

    def spy(instance, ptrs, stream, **kw):
        seen.append((instance, ptrs, stream, kw))
        return real(instance, ptrs, stream, **kw)

    monkeypatch.setattr(gemm_module, "launch_general", spy)
    return seen


def make(kind, shape, dtype, strides=None, **kw):
    cls = {"torch": TorchTensor, "cai": CaiArray, "dlpack": DLPackArray}[kind]
    return cls(shape, dtype, strides, **kw)


def operand(kind, batch, rows, cols, unit, dtype=DType.fp16, pad=0, batch_pad=0, **kw):
    """A batch + (rows, cols) matrix whose `unit` extent ("rows" or "cols") has stride 1; the other has
    stride ld = (that extent + pad), and batches are bs = other * ld + batch_pad apart, batch dims in
    row-major order. Returns (array, ld, bs)."""
    if unit == "cols":
        ld, inner, other = cols + pad, None, rows
        inner = (ld, 1)
    else:
        ld, other = rows + pad, cols
        inner = (1, ld)
    bs = other * ld + batch_pad
    strides = tuple(s * bs for s in contiguous(batch)) + inner
    return make(kind, (*batch, rows, cols), dtype, strides, **kw), ld, bs


def _sizes(fake, catalog, iid):
    fake.param_sizes = tuple(p.size for p in catalog.record(iid).params)


def _same_bytes_as_spelled_out(fake, instance, ptrs, stream, full):
    """Launch again through launch() with every stride given, and compare what cuLaunchKernelEx got."""
    runtime.launch(instance, ptrs, stream, **full)
    ours, spelled = fake.launches[-2], fake.launches[-1]
    assert ours.values == spelled.values and ours.grid == spelled.grid


# ---- the layout matrix: every majorness, packed and padded, with and without batch dims -------------------

BATCHES = [(), (3,), (2, 3)]


@pytest.mark.parametrize("batch", BATCHES, ids=lambda b: "batch" + "x".join(map(str, b)) if b else "2d")
@pytest.mark.parametrize("padded", [False, True], ids=["packed", "padded"])
@pytest.mark.parametrize("dm", "nm")
@pytest.mark.parametrize("bm", "kn")
@pytest.mark.parametrize("am", "km")
@pytest.mark.parametrize("kind", KINDS)
def test_layout_derivation(kind, am, bm, dm, padded, batch, rt, fake, catalog, selects, launches):
    pad, bpad = (PAD, BATCH_PAD) if padded else (0, 0)
    a, lda, bsa = operand(kind, batch, M, K, "cols" if am == "k" else "rows", pad=pad, batch_pad=bpad)
    b, ldb, bsb = operand(kind, batch, K, N, "rows" if bm == "k" else "cols", pad=pad, batch_pad=bpad)
    d, ldd, bsd = operand(kind, batch, M, N, "cols" if dm == "n" else "rows", pad=pad, batch_pad=bpad)
    iid = BY_CLASS[_class(_spec("fp16", am, bm, dm))]
    _sizes(fake, catalog, iid)
    L = 1
    for x in batch:
        L *= x
    assert runtime.gemm(a, b, d) is d

    fp16 = DType.fp16
    assert selects[-1] == dict(m=M, n=N, k=K, a_dtype=fp16, b_dtype=fp16, d_dtype=fp16, a_major=am,
                               b_major=bm, d_major=dm, c_dtype=None, c_major=None, fp8_fast_accum=False,
                               batch=L, device=None if kind == "cai" else 0, fp16_accum=False,
                               pdl=False)  # fmt: skip
    want = dict(m=M, n=N, k=K, batch=L, alpha=1.0)
    if padded:
        want.update(lda=lda, ldb=ldb, ldd=ldd)
        if L > 1:
            want.update(batch_stride_a=bsa, batch_stride_b=bsb, batch_stride_d=bsd)
    instance, ptrs, stream, kw = launches[-1]
    assert (instance, ptrs, stream, kw) == (iid, (a.ptr, b.ptr, d.ptr), 0, want)
    full = dict(m=M, n=N, k=K, batch=L, lda=lda, ldb=ldb, ldd=ldd)
    if L > 1:
        full.update(batch_stride_a=bsa, batch_stride_b=bsb, batch_stride_d=bsd)
    _same_bytes_as_spelled_out(fake, iid, ptrs, 0, full)


@pytest.mark.parametrize("cm", "nm")
@pytest.mark.parametrize("dm", "nm")
@pytest.mark.parametrize("kind", KINDS)
def test_c_layouts(kind, dm, cm, rt, fake, catalog, selects, launches):
    batch = (2,)
    a, _, _ = operand(kind, batch, M, K, "cols")
    b, _, _ = operand(kind, batch, K, N, "rows")
    d, ldd, bsd = operand(kind, batch, M, N, "cols" if dm == "n" else "rows", pad=PAD)
    c, ldc, bsc = operand(
        kind, batch, M, N, "cols" if cm == "n" else "rows", pad=2 * PAD, batch_pad=BATCH_PAD
    )
    iid = BY_CLASS[_class(_spec("fp16", "k", "k", dm, c="fp16", cm=cm))]
    _sizes(fake, catalog, iid)
    runtime.gemm(a, b, d, c=c, alpha=0.5, beta=-2.0)
    assert (selects[-1]["c_dtype"], selects[-1]["c_major"]) == (DType.fp16, cm)
    want = dict(m=M, n=N, k=K, batch=2, ldd=ldd, ldc=ldc, batch_stride_c=bsc, c=c.ptr, alpha=0.5, beta=-2.0)
    assert launches[-1] == (iid, (a.ptr, b.ptr, d.ptr), 0, want)
    full = dict(m=M, n=N, k=K, batch=2, ldd=ldd, batch_stride_d=bsd, c=c.ptr, ldc=ldc, batch_stride_c=bsc)
    _same_bytes_as_spelled_out(fake, iid, (a.ptr, b.ptr, d.ptr), 0, dict(full, alpha=0.5, beta=-2.0))


def test_c_in_place_and_c_ignored_when_beta_is_zero(rt, fake, selects, launches):
    a, _, _ = operand("torch", (), M, K, "cols")
    b, _, _ = operand("torch", (), K, N, "rows")
    d, _, _ = operand("torch", (), M, N, "cols")
    runtime.gemm(a, b, d, c=d, beta=1.0)  # out += a @ b
    assert launches[-1][0] == BY_CLASS[_class(_spec("fp16", c="fp16", cm="n"))]
    assert launches[-1][3]["c"] == d.ptr
    nan_c, _, _ = operand("torch", (), M, N, "rows")  # beta = 0: c is not read (torch.addmm's rule)
    runtime.gemm(a, b, d, c=nan_c, beta=0.0)
    assert launches[-1][0] == BY_CLASS[_class(_spec("fp16"))] and "c" not in launches[-1][3]
    assert selects[-1]["c_dtype"] is None


# ---- size-1 extents, folding, multiple batch dims ----------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_size_one_extents_take_packed_strides(kind, rt, fake, selects, launches):
    # M = 1 with a row stride that means nothing; N = 1: b (K, 1) and out (M, 1) as frameworks make them.
    a = make(kind, (1, K), DType.fp16, (12345, 1))
    b = make(kind, (K, 1), DType.fp16, (1, 1))
    d = make(kind, (M, 1), DType.fp16, (1, 1))
    runtime.gemm(make(kind, (M, K), DType.fp16), b, d)
    assert (selects[-1]["b_major"], selects[-1]["d_major"]) == ("k", "m")  # the unit stride of size > 1 wins
    assert launches[-1][3] == dict(m=M, n=1, k=K, batch=1, alpha=1.0)  # ldb = K, ldd = M: packed
    with pytest.raises(InvalidArgumentError, match="TMA|16"):  # a (1, K) @ b (K, 1) -> D is 1 x 1: no layout
        runtime.gemm(a, b, make(kind, (1, 1), DType.fp16))
    out = make(kind, (1, N), DType.fp16, (7, 1))
    runtime.gemm(a, make(kind, (K, N), DType.fp16), out)
    assert (selects[-1]["a_major"], selects[-1]["d_major"]) == ("k", "n")
    assert launches[-1][3] == dict(m=1, n=N, k=K, batch=1, alpha=1.0)


@pytest.mark.parametrize("kind", KINDS)
def test_batched_a_with_shared_b_folds_into_m(kind, rt, fake, catalog, selects, launches):
    iid = BY_CLASS[_class(_spec("fp16", "k", "n", "n"))]  # b (K, N) row-major: N is contiguous
    _sizes(fake, catalog, iid)
    a = make(kind, (2, 3, M, K), DType.fp16)
    d = make(kind, (2, 3, M, N), DType.fp16)
    for b in (
        make(kind, (K, N), DType.fp16),  # 2-D
        make(kind, (1, K, N), DType.fp16),  # a size-1 batch dim
        make(kind, (2, 3, K, N), DType.fp16, (0, 0, N, 1)),  # expanded: stride-0 batch dims
    ):
        runtime.gemm(a, b, d)
        assert launches[-1] == (iid, (a.ptr, b.ptr, d.ptr), 0, dict(m=6 * M, n=N, k=K, batch=1, alpha=1.0))
    # An m-major a folds too when its batches sit end to end along M (one evenly spaced M' = 6M).
    a_m = make(kind, (2, 3, M, K), DType.fp16, (3 * M, M, 1, 6 * M))
    runtime.gemm(a_m, make(kind, (K, N), DType.fp16), d)
    assert selects[-1]["a_major"] == "m" and launches[-1][3] == dict(m=6 * M, n=N, k=K, batch=1, alpha=1.0)


def test_two_batch_dims_collapse_into_one_stride(rt, fake, selects, launches):
    a, _, bsa = operand("dlpack", (2, 3), M, K, "cols", batch_pad=BATCH_PAD)
    b, _, _ = operand("dlpack", (2, 3), K, N, "rows")
    d, _, _ = operand("dlpack", (2, 3), M, N, "cols")
    runtime.gemm(a, b, d)
    assert launches[-1][3] == dict(m=M, n=N, k=K, batch=6, batch_stride_a=bsa, alpha=1.0)


# ---- dtypes -----------------------------------------------------------------------------------------------


def test_dtypes_bf16_fp16_fp32_out_e4m3(rt, fake, torch_mod, selects, launches):
    def mats(dtype, kind="torch"):  # a row-major, b a transposed view (K contiguous): kkn
        return make(kind, (M, K), dtype), make(kind, (K, N), dtype, (1, K))

    a, b = mats(DType.bf16)
    out = runtime.gemm(a, b)  # allocated: bf16 for bf16 inputs
    assert (
        torch_mod.allocated[-1][0] == ((M, N), torch_mod.bfloat16, a.device)
        and out.dtype is torch_mod.bfloat16
    )
    assert launches[-1][0] == BY_CLASS[_class(_spec("bf16"))]
    runtime.gemm(a, b, make("torch", (M, N), DType.fp32))  # fp32 out
    assert launches[-1][0] == BY_CLASS[_class(_spec("bf16", d="fp32"))]
    a, b = mats(DType.fp16, "dlpack")
    runtime.gemm(a, b, make("dlpack", (M, N), DType.fp16))
    assert launches[-1][0] == BY_CLASS[_class(_spec("fp16"))]
    a, b = mats(DType.e4m3)
    out = runtime.gemm(a, b)  # allocated: bf16 for fp8 inputs
    assert out.dtype is torch_mod.bfloat16 and selects[-1]["fp8_fast_accum"] is False
    assert launches[-1][0] == BY_CLASS[_class(_spec("e4m3", d="bf16"))]
    runtime.gemm(a, b, fp8_fast_accum=True)
    assert launches[-1][0] == BY_CLASS[_class(_spec("e4m3", d="bf16", fast=True))]
    a, b = mats(DType.e4m3, "dlpack")
    runtime.gemm(a, b, make("dlpack", (M, N), DType.bf16), fp8_fast_accum=True)
    assert launches[-1][0] == BY_CLASS[_class(_spec("e4m3", d="bf16", fast=True))]
    a, b = mats(DType.fp16)  # fp16 accumulation only when asked for, and a plan of its own
    runtime.gemm(a, b, make("torch", (M, N), DType.fp16))
    assert launches[-1][0] == BY_CLASS[_class(_spec("fp16"))] and selects[-1]["fp16_accum"] is False
    runtime.gemm(a, b, make("torch", (M, N), DType.fp16), fp16_accum=True)
    assert launches[-1][0] == BY_CLASS[_class(_spec("fp16", acc="fp16"))] and selects[-1]["fp16_accum"]


# ---- the real select, on the test manifest ----------------------------------------------------------------


@pytest.mark.parametrize(("am", "bm", "dm"), [("k", "k", "n"), ("m", "n", "m"), ("k", "n", "n")])
def test_real_select_picks_the_instance_of_the_class(am, bm, dm, rt, fake, launches):
    a, _, _ = operand("torch", (4,), M, K, "cols" if am == "k" else "rows")
    b, _, _ = operand("torch", (4,), K, N, "rows" if bm == "k" else "cols")
    d, _, _ = operand("torch", (4,), M, N, "cols" if dm == "n" else "rows")
    runtime.gemm(a, b, d)
    runtime.gemm(a, b, d)  # the fast path, on the cached plan
    assert [x[0] for x in launches] == [BY_CLASS[_class(_spec("fp16", am, bm, dm))]] * 2
    assert fake.count("cuLaunchKernelEx") == 2


@pytest.mark.parametrize(
    ("a_dtype", "b_dtype"),
    [(DType.bf16, DType.fp16), (DType.e4m3, DType.e5m2)],
    ids=["bf16xfp16", "e4m3xe5m2"],
)
def test_real_select_refuses_unshipped_dtype_combinations(a_dtype, b_dtype, rt, fake):
    a = make("torch", (M, K), a_dtype)
    b = make("torch", (K, N), b_dtype, (1, K))
    with pytest.raises(NoInstanceError, match="no shipped kernel instance computes"):
        runtime.gemm(a, b, make("torch", (M, N), DType.bf16))
    assert fake.count("cuLaunchKernelEx") == 0


# ---- streams ----------------------------------------------------------------------------------------------


def _kkn(kind, **kw):
    return (
        make(kind, (M, K), DType.fp16, **kw),
        make(kind, (K, N), DType.fp16, (1, K)),
        make(kind, (M, N), DType.fp16),
    )


def test_stream_defaults_and_pass_through(rt, fake, torch_mod, selects, launches):
    s = fake.new_stream(fake.ctx(0))
    torch_mod.streams[0] = s
    a, b, d = _kkn("torch")
    runtime.gemm(a, b, d)  # torch's current raw stream of a's device
    assert launches[-1][2] == s and fake.launches[-1].stream == s

    class Proto:
        def __cuda_stream__(self):
            return (0, s)

    a, b, d = _kkn("dlpack")
    runtime.gemm(a, b, d)  # no framework: the legacy default stream, announced to DLPack as 1
    assert launches[-1][2] == 0 and a.streams == b.streams == d.streams == [1]
    runtime.gemm(a, b, d, stream=Proto())
    assert launches[-1][2] == s and a.streams[-1] == s


def test_cupy_arrays_default_to_cupys_current_stream(rt, fake, monkeypatch, selects, launches):
    s = fake.new_stream(fake.ctx(0))
    cupy = types.ModuleType("cupy")
    cupy.cuda = types.SimpleNamespace(get_current_stream=lambda: types.SimpleNamespace(ptr=s))
    monkeypatch.setitem(sys.modules, "cupy", cupy)

    class CupyArray(CaiArray):
        pass

    CupyArray.__module__ = "cupy._core.core"
    runtime.gemm(
        CupyArray((M, K), DType.fp16), CupyArray((K, N), DType.fp16, (1, K)), CupyArray((M, N), DType.fp16)
    )
    assert launches[-1][2] == s


def test_cai_producer_streams_are_waited_for_with_an_event(rt, fake, selects, launches):
    ours, theirs = fake.new_stream(fake.ctx(0)), fake.new_stream(fake.ctx(0))
    a, b, d = _kkn("cai", stream=theirs)
    runtime.gemm(a, b, d, stream=ours)
    event = fake.args("cuEventRecord")[0][0]
    assert fake.count("cuEventCreate") == 1
    assert fake.args("cuEventRecord") == [(event, theirs)]
    assert fake.args("cuStreamWaitEvent") == [(ours, event, 0)]
    # The wait precedes the launch; a second call reuses the event.
    names = [name for name, _ in fake.calls]
    assert names.index("cuStreamWaitEvent") < names.index("cuLaunchKernelEx")
    runtime.gemm(a, b, d, stream=ours)
    assert fake.count("cuEventCreate") == 1 and fake.count("cuStreamWaitEvent") == 2
    # The producer's stream is ours (1 and 0 both name the legacy default stream): nothing to wait for.
    a, b, d = _kkn("cai", stream=1)
    runtime.gemm(a, b, d)
    assert fake.count("cuStreamWaitEvent") == 2


# ---- the plan cache ---------------------------------------------------------------------------------------


def test_plans_are_cached_and_pointers_are_not(rt, fake, selects, launches, monkeypatch):
    monkeypatch.setattr(gemm_module, "_TORCH_TYPES", set())  # the first call takes the general path
    tensors = [_kkn("torch") for _ in range(3)]
    for (a, b, d), alpha in zip(tensors, (2.0, 3.0, 4.0)):
        runtime.gemm(a, b, d, alpha=alpha)
    # General path, then the torch fast path (its own key: the tensors' own attributes): one plan each.
    assert len(selects) == 2 and selects[0] == selects[1]
    for (a, b, d), alpha, seen in zip(tensors, (2.0, 3.0, 4.0), launches):
        assert seen[1:] == ((a.ptr, b.ptr, d.ptr), 0, dict(m=M, n=N, k=K, batch=1, alpha=alpha))


@pytest.mark.parametrize("kind", ["torch", "cai"])
def test_pdl_calls_plan_with_the_pdl_choice(kind, rt, fake, selects, launches):
    """gemm(pdl=True) asks select() for a PDL launch's choice (the table's PDL rows) and caches that plan
    apart from the plain one; b_ready alone does not change the choice."""
    a, b, d = _kkn(kind)
    for pdl, b_ready in ((False, False), (True, True), (True, False), (False, False), (True, True)):
        runtime.gemm(a, b, d, pdl=pdl, b_ready=b_ready)
    assert [s["pdl"] for s in selects] == [False, True]  # one plan per mode, then cache hits
    assert [seen[3].get("pdl", False) for seen in launches] == [False, True, True, False, True]


# ---- empty problems ---------------------------------------------------------------------------------------


def test_empty_problems_launch_nothing(rt, fake, torch_mod, selects):
    a, b = make("torch", (0, K), DType.bf16), make("torch", (K, N), DType.bf16)
    out = runtime.gemm(a, b)
    assert torch_mod.allocated[-1][0][0] == (0, N) and out.shape == (0, N)
    d = make("dlpack", (2, 0, M, N), DType.fp16)
    assert runtime.gemm(make("dlpack", (2, 0, M, K), DType.fp16), make("dlpack", (K, N), DType.fp16), d) is d
    assert fake.count("cuLaunchKernelEx") == 0 and not selects


# ---- refusals: typed, and nothing launched ----------------------------------------------------------------


def _bad_cases():
    fp16 = DType.fp16

    def t(shape, strides=None, dtype=fp16, **kw):
        return TorchTensor(shape, dtype, strides, **kw)

    def packed():
        return t((M, K)), t((K, N)), t((M, N))

    a, b, d = packed()
    return [
        ("cpu tensor", (t((M, K), device="cpu"), b, d), {}, InvalidArgumentError, "not on a CUDA device"),
        (
            "numpy-like",
            (a, CpuArray((K, N)), d),
            {},
            InvalidArgumentError,
            "CPU memory, not on a CUDA device",
        ),
        ("no protocol", (a, [[1.0]], d), {}, InvalidArgumentError, "offers neither"),
        ("float64", (a, t((K, N), dtype=FLOAT64), d), {}, InvalidArgumentError, "dtype torch.float64"),
        ("vector", (t((K,)), b, d), {}, InvalidArgumentError, r"gemm multiplies matrices"),
        ("K mismatch", (a, t((K + 16, N)), d), {}, InvalidArgumentError, r"K = 96\) differs"),
        ("out shape", (a, b, t((M, N + 16))), {}, InvalidArgumentError, r"out is \(48, 96\), but"),
        ("c shape", (a, b, d), dict(c=t((1, N)), beta=1.0), InvalidArgumentError, r"c is \(1, 80\), but"),
        ("beta no c", (a, b, d), dict(beta=0.5), InvalidArgumentError, "beta=0.5 but c is None"),
        ("no unit stride", (t((M, K), (2 * K, 2)), b, d), {}, InvalidArgumentError, "has no unit stride"),
        (
            "expanded rows",
            (t((M, K), (0, 1)), b, d),
            {},
            InvalidArgumentError,
            "stride of 0 between its rows",
        ),
        ("overlapping out", (a, b, t((M, N), ptr=a.ptr)), {}, InvalidArgumentError, "overlaps input a"),
        (
            "readonly out",
            (a, b, CaiArray((M, N), fp16, readonly=True)),
            {},
            InvalidArgumentError,
            "read-only",
        ),
        ("K = 0", (t((M, 0)), t((0, N)), d), {}, InvalidArgumentError, r"K = 0.*Fix: skip the call"),
        ("batches", (t((2, M, K)), t((3, K, N)), t((2, M, N))), {}, InvalidArgumentError, "do not broadcast"),
        ("shared a", (a, t((2, K, N)), t((2, M, N))), {}, InvalidArgumentError, "shared by every batch of b"),
        (
            "permuted batch",
            (t((2, 3, M, K), (M * K, 2 * M * K, K, 1)), t((2, 3, K, N)), t((2, 3, M, N))),
            {},
            InvalidArgumentError,
            "do not collapse into one positive batch stride",
        ),
        (
            "partly broadcast",
            (t((2, 3, M, K)), t((2, 3, K, N), (K * N, 0, N, 1)), t((2, 3, M, N))),
            {},
            InvalidArgumentError,
            "broadcast along part of the batch",
        ),
        (
            "unfoldable a",
            (t((2, M, K), (M * K + 64, K, 1)), b, t((2, M, N))),
            {},
            InvalidArgumentError,
            "folded into M",
        ),
        (
            "unfoldable out",
            (t((2, M, K)), b, t((2, M, N), (M * N + 64, N, 1))),
            {},
            InvalidArgumentError,
            "batch dims of out are folded into M",
        ),
        ("devices", (a, t((K, N), device=1), d), {}, DeviceMismatchError, "lives on CUDA device 1"),
        ("fast accum", (a, b, d), dict(fp8_fast_accum=1), InvalidArgumentError, "fp8_fast_accum=1"),
        ("fp16 accum", (a, b, d), dict(fp16_accum="yes"), InvalidArgumentError, "fp16_accum='yes'"),
        ("no class", (a, t((K, N), dtype=DType.bf16), d), {}, NoInstanceError, "no shipped kernel instance"),
        (
            "alloc cai",
            (CaiArray((M, K), fp16), CaiArray((K, N), fp16)),
            {},
            InvalidArgumentError,
            "only for torch",
        ),
        ("misaligned", (a, b, t((M, N), ptr=d.ptr + 8)), {}, InvalidArgumentError, "16-byte aligned"),
    ]


BAD = _bad_cases()


@pytest.mark.parametrize(("args", "kw", "error", "message"), [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_bad_input_is_refused_before_anything_is_launched(args, kw, error, message, rt, fake, selects):
    with pytest.raises(error, match=message) as err:
        runtime.gemm(*args, **kw)
    assert isinstance(err.value, HgemmError) and "Fix:" in str(err.value)
    assert fake.count("cuLaunchKernelEx") == 0


def test_host_cost_over_launch(rt, fake, torch_mod, capsys):
    """gemm()'s Python cost over launch() alone, both on the fake driver's no-op cuLaunchKernelEx: on the
    torch fast path (real select, cached plan), through __cuda_array_interface__ and through DLPack (whose
    fake producer's export, ctypes-built, is timed on its own)."""
    s = fake.new_stream(fake.ctx(0))
    torch_mod.streams[0] = s
    fake.cuLaunchKernelEx = lambda cfg, fn, kp, extra: (0,)
    iid = BY_CLASS[_class(_spec("fp16"))]

    def best(fn, n=2000, repeat=7):
        return min(timeit.repeat(fn, number=n, repeat=repeat)) / n * 1e6

    a, b, d = _kkn("torch")
    runtime.gemm(a, b, d)
    bare = best(lambda: runtime.launch(iid, (a.ptr, b.ptr, d.ptr), s, m=M, n=N, k=K, batch=1, alpha=1.0))
    fast = best(lambda: runtime.gemm(a, b, d))
    reads = best(lambda: (a.shape, a.stride(), a.dtype, a.is_cuda, a.get_device(), a.data_ptr())) * 3
    ca, cb, cd = _kkn("cai")
    runtime.gemm(ca, cb, cd, stream=s)
    cai = best(lambda: runtime.gemm(ca, cb, cd, stream=s), n=500)
    da, db, dd = _kkn("dlpack")
    runtime.gemm(da, db, dd, stream=s)
    dl = best(lambda: runtime.gemm(da, db, dd, stream=s), n=500)
    export = best(lambda: (da.__dlpack__(s), db.__dlpack__(s), dd.__dlpack__(s)), n=500)
    with capsys.disabled():
        print(
            f"\nlaunch {bare:.2f} us; gemm: torch fast path +{fast - bare:.2f} us (of which {reads:.2f} the "
            f"stand-in tensors' attribute reads), CAI +{cai - bare:.2f} us, "
            f"DLPack +{dl - bare - export:.2f} us + the fake producers' exports {export:.2f} us (fake driver)"
        )
    assert fast - bare < 20  # µs; a loose guard for slow shared CI machines
