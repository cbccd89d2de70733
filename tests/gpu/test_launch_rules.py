"""GPU tier: launches that break a rule raise ``InvalidArgumentError`` and launch nothing.

The CPU tier checks these rules against a fake driver; here they run against the real wheel and a real
device, with real allocations, so a rule the runtime forgot would show up as a kernel writing memory:
after every refused launch, every buffer involved must be bitwise unchanged (synchronized first).
Rules (docs/CONTRACT.md, hgemm_sm90.launch): 16-byte aligned pointers and leading dims (TMA); instances
with C need ``c``, the others refuse ``c``/``ldc``/``beta != 0``; D may alias C only exactly (same
pointer, dtype, major, leading dim and batch stride) and shares no byte with A or B.
"""

from __future__ import annotations

import pytest

from tests.gpu import gemm_util as g

torch = g.torch
hgemm_sm90 = g.hgemm_sm90
pytestmark = pytest.mark.gpu

INSTANCES = g.INSTANCES
WITH_C = [i for i in INSTANCES if i.has_c]
WITHOUT_C = [i for i in INSTANCES if not i.has_c]


def _operands(inst):
    return ["a", "b", "d"] + (["c"] if inst.has_c else [])


def _refused(p: g.Problem, before: dict, **launch_kw) -> None:
    with pytest.raises(hgemm_sm90.InvalidArgumentError):
        g.launch(p, **launch_kw)
    torch.cuda.synchronize()
    for key, snap in before.items():
        x = {"a": p.a, "b": p.b, "c": p.c, "d": p.d}[key]
        g.assert_bitwise_equal(
            g.bits(x.buf), snap, f"{key.upper()} buffer after a rejected launch", "buffer offset"
        )


@pytest.mark.parametrize(
    ("inst", "operand"), [pytest.param(i, op, id=f"{i.id}-{op}") for i in INSTANCES for op in _operands(i)]
)
def test_misaligned_pointer_rejected(inst, operand, gen):
    """A pointer 2 bytes off the 16-byte TMA alignment raises InvalidArgumentError and launches nothing."""
    p = g.make_problem(inst, g.MISALIGNED, gen)
    before = g.snapshot(p)
    if operand == "c":
        _refused(p, before, c=p.c.ptr() + 2)
        return
    ptrs = {"a": p.a.ptr(), "b": p.b.ptr(), "d": p.d.ptr()}
    ptrs[operand] += 2
    _refused(p, before, ptrs=(ptrs["a"], ptrs["b"], ptrs["d"]))


@pytest.mark.parametrize(
    ("inst", "operand"), [pytest.param(i, op, id=f"{i.id}-{op}") for i in INSTANCES for op in _operands(i)]
)
def test_misaligned_leading_dim_rejected(inst, operand, gen):
    """A leading dim one element longer than a 16-byte multiple raises InvalidArgumentError."""
    p = g.make_problem(inst, g.MISALIGNED, gen)
    before = g.snapshot(p)
    x = {"a": p.a, "b": p.b, "c": p.c, "d": p.d}[operand]
    _refused(p, before, **{f"ld{operand}": x.ld + 1, f"batch_stride_{operand}": x.batch_stride})


@pytest.mark.parametrize("inst", INSTANCES, ids=g._id)
def test_ragged_contiguous_extent_rejected(inst, gen):
    """A's contiguous extent one element short of a 16-byte multiple raises InvalidArgumentError: TMA would
    move its rows' last 16-byte chunk whole (for D: overwriting the row padding, seen on an H200)."""
    p = g.make_problem(inst, g.MISALIGNED, gen)
    before = g.snapshot(p)
    extent = "k" if inst.a_major == "k" else "m"
    _refused(p, before, **{extent: getattr(p.case, extent) - 1})


# --- the C operand -------------------------------------------------------------------------------------


@pytest.mark.parametrize("beta", [0.0, 0.5])
@pytest.mark.parametrize("inst", WITH_C, ids=g._id)
def test_c_required(inst, beta, gen):
    """An instance that reads C refuses c=None (also with beta = 0: the kernel reads C regardless)."""
    p = g.make_problem(inst, g.MISALIGNED, gen)
    _refused(p, g.snapshot(p), c=None, ldc=None, batch_stride_c=None, beta=beta)


@pytest.mark.parametrize("what", ["c", "ldc", "beta"])
@pytest.mark.parametrize("inst", g.family_subset(WITHOUT_C), ids=g._id)
def test_c_refused_without_c_operand(inst, what, gen):
    """An instance without C refuses c, ldc and beta != 0 (it would silently compute D = alpha * acc)."""
    p = g.make_problem(inst, g.MISALIGNED, gen)
    before = g.snapshot(p)
    spare = g.make_operand("d", inst.d_major, g.TORCH_DTYPE[inst.d_dtype], g.MISALIGNED, 1.0)
    kw = {"c": {"c": spare.ptr()}, "ldc": {"ldc": spare.ld}, "beta": {"beta": 0.5}}[what]
    _refused(p, before, **kw)


# Square, so C and D have the same rows and columns whatever their majors; D's leading dim is padded, and
# the padding after its one batch (50000 16-byte units, 800 KB) holds a C of up to 4x D's element size
# starting anywhere in D: a launch that wrongly went ahead would still read only D's own buffer.
OVERLAP = g.Case("overlap", 256, 256, 128, pad_ld=1, pad_batch=50000)


def _ld_in_c_elements(p: g.Problem) -> int:
    return p.d.ld * p.d.t.element_size() // p.c.t.element_size()


@pytest.mark.parametrize("inst", g.family_subset(WITH_C), ids=g._id)
def test_partial_c_d_overlap_rejected(inst, gen):
    """C starting 16 bytes into D (same leading dim) overlaps D without being it: refused."""
    p = g.make_problem(inst, OVERLAP, gen)
    before = g.snapshot(p)
    _refused(p, before, c=p.d.ptr() + 16, ldc=_ld_in_c_elements(p), batch_stride_c=None)


@pytest.mark.parametrize("inst", g.family_subset(WITH_C), ids=g._id)
def test_c_aliasing_d_with_other_leading_dim_rejected(inst, gen):
    """c == d but with C's packed leading dim while D's is padded: the same first byte, a different matrix
    (each CTA would read C elements another CTA writes as D): refused."""
    p = g.make_problem(inst, OVERLAP, gen)
    before = g.snapshot(p)
    _refused(p, before, c=p.d.ptr(), ldc=p.c.cols, batch_stride_c=None)


@pytest.mark.parametrize("inst", [i for i in g.family_subset(WITH_C) if not g.inplace_ok(i)], ids=g._id)
def test_c_aliasing_d_with_other_dtype_or_major_rejected(inst, gen):
    """c == d for an instance whose C dtype or major differs from D's is no in-place update: refused."""
    p = g.make_problem(inst, OVERLAP, gen)
    before = g.snapshot(p)
    _refused(p, before, c=p.d.ptr(), ldc=_ld_in_c_elements(p), batch_stride_c=None)


@pytest.mark.parametrize("operand", ["a", "b"])
@pytest.mark.parametrize("inst", g.family_subset(INSTANCES), ids=g._id)
def test_d_overlapping_input_rejected(inst, operand, gen):
    """D starting inside A (or B) is refused: CTAs would overwrite inputs other CTAs still read. The
    inputs are made larger than D (K = 2048 > 4 N: even an fp8 input holds an fp32 D), so a launch that
    wrongly went ahead stays inside them."""
    case = g.Case("d_over_input", 256, 128, 2048)
    p = g.make_problem(inst, case, gen)
    before = g.snapshot(p)
    x = {"a": p.a, "b": p.b}[operand]
    ptrs = {"a": p.a.ptr(), "b": p.b.ptr(), "d": x.ptr() + 256}
    _refused(p, before, ptrs=(ptrs["a"], ptrs["b"], ptrs["d"]))
