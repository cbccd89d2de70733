"""GPU tier: `hgemm_sm90.gemm()`, the array-level entry point, against gemm_util's fp64 reference.

gemm() derives each operand's majorness, leading dimension and batch stride from its strides and lets
dispatch pick the instance, so this file exercises what test_numerics.py cannot (it names instances and
passes strides to `launch()` itself):
- every dtype/layout class the installation ships (one per gemm_util.family, derived from
  `hgemm_sm90.instances()`, so a wheel built with another profile is covered the same way), 2-D and
  batched with padded leading dimensions, padded batch strides and a head one 16-byte unit off, through
  torch tensors laid out by the class's majors; classes with C also with beta = 0 and in place
  (``c=out``);
- the same through plain objects exposing only DLPack, and only ``__cuda_array_interface__`` (whose
  type strings name fp16 and fp32 only: other dtypes must be refused, writing nothing);
- ``out=None`` (allocated through torch: the input dtype for 16-bit inputs, bf16 for fp8) and a few
  odd shapes (M = 1, M = 8, N and K not tile multiples but 16-byte aligned, K below one k-tile).
Each check is gemm_util.check_gemm (NaN-poisoned D and padding, budget relative to torch's own GEMM) and,
where operands come from gemm_util's buffers, its guard check: nothing outside D is written. The
instance a row reports is the one `select()` names for the class and size (gemm()'s dispatch for packed
operands).

Named test_gemm_api.py, not test_gemm.py: tests/runtime/test_gemm.py exists and pytest (rootdir import
mode, no __init__.py in these folders) cannot collect two modules with one basename in one session.

Cost: about 400 small problems (a few hundred cubed), a few seconds on an H200.
"""

from __future__ import annotations

import pytest

from tests.gpu import gemm_api_util as u
from tests.gpu import gemm_util as g

torch = g.torch
hgemm_sm90 = g.hgemm_sm90
pytestmark = pytest.mark.gpu

CLASSES = u.classes()

# 2-D (no batch) and batched with padded strides and a head one 16-byte unit off; fit() rounds each
# class's contiguous extents up to 16 bytes.
PLAIN = g.Case("plain2d", 264, 200, 136)
BATCHED = g.Case("batched_padded", 300, 136, 200, batch=3, pad_ld=3, pad_batch=5, head=1, epilogue="alpha")
C_PLAIN = g.Case("c2d", 264, 200, 136)
C_BATCHED = g.Case("c_batched_padded", 300, 136, 200, batch=2, pad_ld=3, pad_batch=5, head=1)


def cases_for(inst) -> list[g.Case]:
    if not inst.has_c:
        return [PLAIN, BATCHED]
    return [C_PLAIN, C_BATCHED, g.BETA0_CASE] + ([g.INPLACE_CASE] if g.inplace_ok(inst) else [])


def protocol_cases_for(inst) -> list[g.Case]:
    return [C_BATCHED if inst.has_c else BATCHED] + ([g.INPLACE_CASE] if g.inplace_ok(inst) else [])


def params(case_fn, classes=CLASSES):
    return [pytest.param(i, c, id=f"{u.class_name(i)}-{c.name}") for i in classes for c in case_fn(i)]


def call(p: g.Problem, wrap=None, **extra):
    """hgemm_sm90.gemm on problem ``p``'s operands (2-D when the case has one batch), each passed through
    ``wrap`` (None: the torch tensors themselves); alpha, beta and fp8_fast_accum only where they are not
    at their defaults, so the defaults get exercised too. c=out is the same object for an in-place case."""
    squeeze = p.case.batch == 1

    def arg(t):
        t = t[0] if squeeze else t
        return t if wrap is None else wrap(t)

    a, b, out = arg(p.a.t), arg(p.b.t.mT), arg(p.d.t)
    kw = dict(extra)
    if p.c is not None:
        kw["c"] = out if p.c is p.d else arg(p.c.t)
    if p.scales.alpha is not None:
        kw["alpha"] = p.scales.alpha
    if p.scales.beta is not None:
        kw["beta"] = p.scales.beta
    if g.is_fp8(p.inst) and p.inst.fp8_fast_accum:
        kw["fp8_fast_accum"] = True
    if g.fp16_accumulating(p.inst):
        kw["fp16_accum"] = True
    return hgemm_sm90.gemm(a, b, out, **kw)


def run_and_check(inst, case, gen, report, wrap=None, reason="gemm()"):
    p = g.make_problem(inst, case, gen)
    cls = u.class_args(inst)
    if p.scales.beta == 0.0:  # gemm() does not read c then (torch.addmm's rule): the class without C runs
        cls.update(c_dtype=None, c_major=None)
    spec = u.selected(p.case.m, p.case.n, p.case.k, p.case.batch, **cls)
    p = g.Problem(spec, p.case, p.a, p.b, p.d, p.c, p.scales, p.c_values)
    before = g.snapshot(p)
    if wrap is not None:
        torch.cuda.synchronize()  # the inputs were written on torch's stream; a plain object names none
    call(p, wrap)
    torch.cuda.synchronize()
    g.check_gemm(p, report, reason=reason)
    g.assert_guards(p, before)


def test_classes_are_derived_from_the_installation():
    assert CLASSES, "hgemm_sm90.instances() is empty"
    assert len({g.family(i) for i in CLASSES}) == len(CLASSES) == len({g.family(i) for i in g.INSTANCES})


@pytest.mark.parametrize(("inst", "case"), params(cases_for))
def test_gemm_torch_tensors(inst, case, gen, report):
    """Every class, its operands as torch tensors with the class's majorness (from their strides)."""
    run_and_check(inst, case, gen, report)


@pytest.mark.parametrize(("inst", "case"), params(protocol_cases_for))
def test_gemm_dlpack_only(inst, case, gen, report):
    """Every class through objects that offer only DLPack (no torch type, no __cuda_array_interface__)."""
    u.skip_unless_dlpack(inst)
    run_and_check(inst, case, gen, report, wrap=u.DLPackOnly, reason="gemm() on DLPack-only objects")


@pytest.mark.parametrize(
    ("inst", "case"), params(protocol_cases_for, [i for i in CLASSES if u.cai_readable(i)])
)
def test_gemm_cuda_array_interface_only(inst, case, gen, report):
    """Every fp16/fp32 class through objects that offer only __cuda_array_interface__ (torch's own dict)."""
    run_and_check(inst, case, gen, report, wrap=u.CudaArrayInterfaceOnly, reason="gemm() on CAI-only objects")


@pytest.mark.parametrize("dtype", ["bf16", "e4m3", "e5m2"])
def test_cuda_array_interface_cannot_name_the_dtype(dtype, gen):
    """bf16 and fp8 have no __cuda_array_interface__ type string (torch sends "<V2" for bf16, producers
    "|V1" for fp8): an object offering only that protocol is refused, not guessed, and nothing is written."""
    t = g.TORCH_DTYPE[dtype]
    a = u.rand((64, 64), t, gen)
    b = u.rand((64, 64), t, gen, transposed=True)
    out = torch.full((64, 64), float("nan"), dtype=torch.bfloat16, device=g.DEVICE)
    torch.cuda.synchronize()
    with pytest.raises(hgemm_sm90.InvalidArgumentError):
        hgemm_sm90.gemm(
            u.CudaArrayInterfaceOnly(a), u.CudaArrayInterfaceOnly(b), u.CudaArrayInterfaceOnly(out)
        )
    torch.cuda.synchronize()
    assert torch.isnan(out.float()).all(), "a refused gemm() wrote to out"


# --- out=None and odd shapes, with ordinary torch layouts ---------------------------------------------

INPUT_DTYPES = ["bf16", "fp16", "e4m3", "e5m2"]


def linear_operands(dtype: str, m: int, n: int, k: int, gen, batch=(), b_row_major=False):
    """a (*batch, M, K) row-major and b (*batch, K, N) = w.mT for a row-major weight w (N, K) (K-major
    B, the linear-layer layout, the only one fp8 has), or with ``b_row_major`` a row-major (K, N) b."""
    t = g.TORCH_DTYPE[dtype]
    a = u.rand((*batch, m, k), t, gen)
    b = u.rand((*batch, k, n), t, gen, transposed=not b_row_major)
    return a, b


def out_class(dtype: str, b_row_major: bool = False, d_dtype: str | None = None) -> dict:
    d = d_dtype or ("bf16" if dtype in ("e4m3", "e5m2") else dtype)
    return dict(a_dtype=dtype, b_dtype=dtype, d_dtype=d, a_major="k", b_major="n" if b_row_major else "k",
                d_major="n", c_dtype=None, c_major=None, fp8_fast_accum=False, fp16_accum=False)  # fmt: skip


def skip_unless_shipped(cls: dict) -> None:
    """Skip where the installation ships no instance of the class (a reduced profile)."""
    if not any(u.class_args(i) == cls for i in CLASSES):
        pytest.skip(f"no shipped instance of class {cls}")


@pytest.mark.parametrize("batch", [(), (3,)], ids=["2d", "batched"])
@pytest.mark.parametrize("dtype", INPUT_DTYPES)
def test_out_none_allocates_through_torch(dtype, batch, gen, report):
    """out=None: a new contiguous torch tensor on the inputs' device, of the input dtype (16-bit inputs)
    or bf16 (fp8 inputs), holding the product."""
    cls = out_class(dtype)
    skip_unless_shipped(cls)
    m, n, k = 200, 264, 144  # K = 144: A and B rows are 16-byte multiples in fp8 too (TMA)
    a, b = linear_operands(dtype, m, n, k, gen, batch)
    out = hgemm_sm90.gemm(a, b)
    torch.cuda.synchronize()
    assert isinstance(out, torch.Tensor)
    assert out.shape == (*batch, m, n) and out.dtype == g.TORCH_DTYPE[cls["d_dtype"]], (out.shape, out.dtype)
    assert out.device == a.device and out.is_contiguous()
    inst = u.selected(m, n, k, batch[0] if batch else 1, **cls)
    g.check_gemm(
        u.problem_of(inst, f"out_none_{len(batch) + 2}d", a, b, out), report, reason="gemm(out=None)"
    )


def test_out_none_needs_torch_inputs(gen):
    """out=None with arrays that are not torch tensors: gemm() cannot allocate through their framework,
    and says so."""
    a, b = linear_operands("bf16", 64, 64, 64, gen)
    torch.cuda.synchronize()
    with pytest.raises(hgemm_sm90.HgemmError):
        hgemm_sm90.gemm(u.DLPackOnly(a), u.DLPackOnly(b))


ODD_SHAPES = [
    (1, 264, 528),  # one row: a decode step
    (8, 1000, 528),  # M = 8; N = 1000 and K = 528 are 16-byte multiples in every dtype here, no tile's
    (200, 1000, 48),  # K below one k-tile
    (1, 8, 16),  # the smallest 16-byte-aligned problem
    (33, 72, 80),
]


@pytest.mark.parametrize("b_row_major", [False, True], ids=["b_kmajor", "b_nmajor"])
@pytest.mark.parametrize("shape", ODD_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", ["bf16", "fp16", "e4m3"])
def test_odd_shapes(dtype, shape, b_row_major, gen, report):
    """Odd sizes with plain torch layouts, alpha given, out preallocated NaN: every element written."""
    if b_row_major and dtype == "e4m3":
        pytest.skip("fp8 operands are K-major only (a WGMMA rule)")
    m, n, k = shape
    cls = out_class(dtype, b_row_major)
    skip_unless_shipped(cls)
    a, b = linear_operands(dtype, m, n, k, gen, b_row_major=b_row_major)
    out = torch.full((m, n), float("nan"), dtype=g.TORCH_DTYPE[cls["d_dtype"]], device=g.DEVICE)
    alpha = g.random_scale(gen)
    hgemm_sm90.gemm(a, b, out, alpha=alpha)
    torch.cuda.synchronize()
    inst = u.selected(m, n, k, **cls)
    g.check_gemm(u.problem_of(inst, "odd_" + "x".join(map(str, shape)), a, b, out, alpha=alpha), report)


WALK_CLASSES = {
    "bf16_bf16_bf16_kkn": out_class("bf16"),
    "fp16_fp16_fp16_kkn": out_class("fp16"),
    "e4m3_e4m3_bf16_kkn": out_class("e4m3"),
    "e4m3_e4m3_bf16_kkn_fastacc": {**out_class("e4m3"), "fp8_fast_accum": True},
}


@pytest.mark.parametrize("key", sorted(WALK_CLASSES))
def test_a_pick_with_a_walk_override_computes_the_product(key, gen, report):
    """Where the shipped table's fastest entry at a grid point is an instance with another walk
    (build_tools/tune_walks.py), select() returns that walk and gemm() launches with it: the smallest such
    point of the class on this GPU, every element of D checked."""
    from hgemm_sm90 import gpus, state, tuning

    cls = WALK_CLASSES[key]
    skip_unless_shipped(cls)
    gpu = gpus.of_device(state.runtime(), 0)
    table = tuning.shipped_table()
    points = (table.gpus.get(gpu.key, {}) if table else {}).get(key, [])
    walked = [p for p in points if p.times[0][0].overrides_walk]
    if not walked:
        pytest.skip(f"the shipped table has no walk override for {key} on {gpu.key}")
    p = min(walked, key=lambda p: (p.m * p.n * p.k, p.m))
    choice = hgemm_sm90.select(p.m, p.n, p.k, **cls)
    want = p.times[0][0]
    assert (choice.instance_id, choice.raster_along_m, choice.group_size) == (
        want.instance_id, want.raster_along_m, want.group_size,
    )  # fmt: skip
    a, b = linear_operands(cls["a_dtype"], p.m, p.n, p.k, gen)
    out = torch.full((p.m, p.n), float("nan"), dtype=g.TORCH_DTYPE[cls["d_dtype"]], device=g.DEVICE)
    hgemm_sm90.gemm(a, b, out, fp8_fast_accum=cls["fp8_fast_accum"])
    torch.cuda.synchronize()
    inst = u.selected(p.m, p.n, p.k, **cls)
    g.check_gemm(u.problem_of(inst, f"walk_{p.m}x{p.n}x{p.k}", a, b, out), report)
