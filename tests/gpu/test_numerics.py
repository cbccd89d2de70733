"""GPU tier: every shipped instance, launched through ``hgemm_sm90.launch``, against an fp64 reference.

Why each ingredient (DESIGN.md "Testing tiers", STYLE P13):
- fresh seeded ``randn`` inputs, never zeros: zeros hide unwritten outputs and wrong indexing;
- D is NaN-filled before the launch, so an element the kernel never wrote fails the "no NaN" check;
- every operand is a view into a larger buffer with guard regions (and, in the ``padded`` case, padded
  leading dims and batch strides): A/B padding holds NaN, so a read outside A/B that reaches D shows up
  as NaN, and D's padding holds a sentinel that must be bitwise unchanged, which catches stores outside D;
- the error budget is relative to torch's own same-dtype GEMM (cuBLAS) on the same inputs, so the
  tolerance tracks what the dtype can deliver instead of a hand-picked epsilon;
- operand views are built from each instance's majors, so other layouts are covered as soon as they ship.

Sized for the 56-instance default matrix to take about a minute on an H200 (an estimate from op counts,
2026-11-29: ~860 tests of a few ms each, the 4096^3 case only on a subset).
Set HGEMM_GPU_REPORT=PATH to collect one JSON line per numerics check (conftest.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

torch = pytest.importorskip("torch", reason="the GPU tier needs torch")
if not torch.cuda.is_available():
    pytest.skip("torch sees no CUDA device", allow_module_level=True)
if torch.cuda.get_device_capability() != (9, 0):
    pytest.skip(f"the sm_90a cubins need compute capability 9.0; {torch.cuda.get_device_name()} is "
                f"{torch.cuda.get_device_capability()}", allow_module_level=True)
hgemm_sm90 = pytest.importorskip(
    "hgemm_sm90", reason="hgemm_sm90 is not importable: pip install --no-deps --target DIR wheels/*.whl "
    "and put DIR on PYTHONPATH")

pytestmark = pytest.mark.gpu
DEVICE = "cuda"

TORCH_DTYPE = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32,
               "e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
# The major whose storage is the logical (rows, cols) matrix itself; the other major stores its transpose.
NATURAL_MAJOR = {"a": "k", "b": "k", "d": "n"}
OTHER_MAJOR = {"a": "m", "b": "n", "d": "m"}

K_FACTOR = 2.0  # kernel error <= K_FACTOR * torch's error + atol (STYLE P13)
# atol = a few fp32 ulps of the largest |ref|: with small K both errors are a handful of fp32 ulps (fp32 D)
# and a factor of 2 between two such small integers is noise, not a bug. Negligible for 16-bit D.
ATOL_REL = 2.0**-22
# ||out - ref|| / ||ref|| bounds. Rounding D to its dtype dominates: unit roundoff u is 2^-8 for bf16 and
# 2^-11 for fp16, and uniformly distributed rounding gives a norm-relative error of ~0.4u (bf16 measured
# 1.7e-3, DESIGN fact 5). The bounds leave 4-8x margin over that yet sit 10x below what one dropped k-tile
# does (sqrt(64/4096) ~ 0.12 even at K=4096). fp32 D has only accumulation error, ~sqrt(K) * 2^-24 < 1e-5.
# fp8 D: u = 2^-4 (e4m3), 2^-3 (e5m2).
REL_BOUND = {"bf16": 1e-2, "fp16": 2e-3, "fp32": 1e-4, "e4m3": 1.5e-1, "e5m2": 3e-1}
D_SENTINEL = -42.0  # finite in every D dtype; compared bitwise, so its exact rounded value does not matter
GUARD_UNITS = 16  # 16-byte units of guard after the last element of every operand


@dataclass(frozen=True)
class Case:
    """One problem: sizes plus how its operands sit in memory. Pads and head are in 16-byte units, so
    every leading dim, batch stride and pointer stays legal (TMA needs 16-byte alignment) in any dtype."""

    name: str
    m: int
    n: int
    k: int
    batch: int = 1
    pad_ld: int = 0  # extra units per storage row
    pad_batch: int = 0  # extra units after each batch
    head: int = 16  # units before the first element; 1 = the minimum alignment the runtime must accept
    raster_along_m: bool | None = None
    group_size: int | None = None


# Contiguous extents are multiples of 8 elements (16 bytes of a 16-bit dtype): packed layouts stay legal.
CASES = [
    Case("square512", 512, 512, 512),
    Case("ragged", 1000, 2040, 520),  # no dim a multiple of any tile; K leaves an 8-wide k-tile residue
    Case("k40", 200, 264, 40),  # K below one k-tile
    Case("m1", 1, 256, 64),
    Case("batch3", 300, 136, 200, batch=3),
    Case("padded", 264, 200, 136, batch=2, pad_ld=3, pad_batch=5, head=1),
    Case("raster_m_g4", 1000, 2040, 520, raster_along_m=True, group_size=4),
    Case("raster_n_g1", 1000, 2040, 520, raster_along_m=False, group_size=1),
]
LARGE = Case("large4096", 4096, 4096, 4096)
# More output tiles than the H200's 132 SMs for every shipped tile shape: persistent CTAs take several.
DETERMINISM = Case("determinism", 1800, 3000, 520)
# Room to read with a leading dim one element too long without leaving the buffer, should a bug launch.
MISALIGNED = Case("misaligned", 256, 256, 128, pad_ld=1, pad_batch=64)


def _id(inst) -> str:
    return inst.id


INSTANCES = sorted(hgemm_sm90.instances(), key=_id)


def large_subset(instances):
    """One instance per kernel configuration (tile, cluster, schedule, majors), rotating through the dtype
    variants from one configuration to the next: every pipeline shape sees a long K loop and several
    persistent waves, at a quarter of the cost of running 4096^3 on all."""
    groups: dict[tuple, list] = {}
    for inst in sorted(instances, key=_id):
        cfg = (tuple(inst.tile), tuple(inst.cluster), inst.schedule, inst.a_major, inst.b_major, inst.d_major)
        groups.setdefault(cfg, []).append(inst)
    return [groups[cfg][i % len(groups[cfg])] for i, cfg in enumerate(sorted(groups))]


def family_subset(instances):
    """One instance per dtype and majors combination, the one with the largest cluster (then by id): a
    captured launch must carry the cluster-dimension attribute into its graph node."""
    first: dict[tuple, object] = {}
    for inst in sorted(instances, key=lambda i: (-i.cluster[0] * i.cluster[1], i.id)):
        fam = (inst.a_dtype, inst.b_dtype, inst.d_dtype, inst.a_major, inst.b_major, inst.d_major)
        first.setdefault(fam, inst)
    return list(first.values())


def _params(instances, cases):
    return [pytest.param(i, c, id=f"{i.id}-{c.name}") for i in instances for c in cases]


# --- operands ------------------------------------------------------------------------------------------


@dataclass
class Operand:
    buf: torch.Tensor  # the whole 1-D allocation: guards and padding included
    t: torch.Tensor  # the logical (L, rows, cols) view: A (L, M, K), B (L, N, K), D (L, M, N)
    rows: int  # storage rows and contiguous columns (cols is the contiguous extent)
    cols: int
    ld: int
    batch_stride: int

    @property
    def packed(self) -> bool:
        """ld and batch stride equal the runtime's defaults, so the launch leaves them to it."""
        return self.ld == self.cols and self.batch_stride == self.rows * self.cols

    def ptr(self) -> int:
        return self.t.data_ptr()


def round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def make_operand(op: str, major: str, dtype: torch.dtype, case: Case, fill: float) -> Operand:
    """A buffer filled with ``fill`` and a view of ``op`` inside it, laid out as ``major`` says."""
    if major not in (NATURAL_MAJOR[op], OTHER_MAJOR[op]):
        raise ValueError(f"unknown {op}_major {major!r}")
    unit = 16 // torch.empty((), dtype=dtype).element_size()
    logical = {"a": (case.m, case.k), "b": (case.n, case.k), "d": (case.m, case.n)}[op]
    rows, cols = logical if major == NATURAL_MAJOR[op] else logical[::-1]
    ld = round_up(cols, unit) + case.pad_ld * unit
    batch_stride = rows * ld + case.pad_batch * unit
    head = case.head * unit
    buf = torch.full((head + case.batch * batch_stride + GUARD_UNITS * unit,), fill, dtype=dtype,
                     device=DEVICE)
    store = buf.as_strided((case.batch, rows, cols), (batch_stride, ld, 1), head)
    t = store if major == NATURAL_MAJOR[op] else store.transpose(1, 2)
    return Operand(buf, t, rows, cols, ld, batch_stride)


def fill_random(x: Operand, gen: torch.Generator) -> None:
    x.t.copy_(torch.randn(x.t.shape, generator=gen, device=DEVICE))  # O(1) values; cast by copy_


def output(inst, case: Case) -> Operand:
    d = make_operand("d", inst.d_major, TORCH_DTYPE[inst.d_dtype], case, D_SENTINEL)
    d.t.fill_(float("nan"))
    return d


def operands(inst, case: Case, gen: torch.Generator) -> tuple[Operand, Operand, Operand]:
    # A/B padding is NaN: if the kernel reads it and uses it, D turns NaN.
    a = make_operand("a", inst.a_major, TORCH_DTYPE[inst.a_dtype], case, float("nan"))
    b = make_operand("b", inst.b_major, TORCH_DTYPE[inst.b_dtype], case, float("nan"))
    fill_random(a, gen)
    fill_random(b, gen)
    return a, b, output(inst, case)


def launch(inst, case: Case, a: Operand, b: Operand, d: Operand, stream=None, ptrs=None, **overrides):
    kw = {"m": case.m, "n": case.n, "k": case.k, "batch": case.batch}
    for name, x in (("a", a), ("b", b), ("d", d)):
        if not x.packed:  # packed operands take the runtime's defaults: both paths get exercised
            kw[f"ld{name}"], kw[f"batch_stride_{name}"] = x.ld, x.batch_stride
    if case.raster_along_m is not None:
        kw["raster_along_m"] = case.raster_along_m
    if case.group_size is not None:
        kw["group_size"] = case.group_size
    kw.update(overrides)
    hgemm_sm90.launch(inst.id, ptrs or (a.ptr(), b.ptr(), d.ptr()),
                      torch.cuda.current_stream() if stream is None else stream, **kw)


# --- checks --------------------------------------------------------------------------------------------


def bits(t: torch.Tensor) -> torch.Tensor:
    """Same-size integer view: bitwise comparison that also works for NaN."""
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def first_index(mask: torch.Tensor) -> tuple[int, ...]:
    return tuple(int(i) for i in mask.nonzero()[0])


def describe_offset(x: Operand, idx: int) -> str:
    off = idx - x.t.storage_offset()
    if off < 0:
        return f"{-off} elements before the first element"
    batch, rem = divmod(off, x.batch_stride)
    if batch >= x.t.shape[0]:
        return f"the guard after the last batch ({off - x.t.shape[0] * x.batch_stride} elements past its end)"
    row, col = divmod(rem, x.ld)
    if row >= x.rows:
        return f"the batch padding after batch {batch}"
    return f"the row padding of batch {batch}, storage row {row}, column {col} (row length {x.cols})"


def assert_outside_unchanged(x: Operand, before: torch.Tensor, what: str) -> None:
    """Every element of x.buf outside the view x.t still has the bits ``before`` recorded."""
    inside = torch.zeros(x.buf.shape, dtype=torch.bool, device=x.buf.device)
    inside.as_strided(x.t.shape, x.t.stride(), x.t.storage_offset()).fill_(True)
    changed = (bits(x.buf) != before) & ~inside
    if changed.any():
        idx = first_index(changed)[0]
        pytest.fail(f"{int(changed.sum())} elements outside {what} changed: the first at buffer offset "
                    f"{idx}, in {describe_offset(x, idx)}, now holds {x.buf[idx].item()}")


def assert_bitwise_equal(x: torch.Tensor, y: torch.Tensor, what: str, where: str = "(l, m, n)") -> None:
    diff = bits(x) != bits(y)
    if diff.any():
        idx = first_index(diff)
        pytest.fail(f"{what}: {int(diff.sum())} elements differ; first at {where} = {idx}: "
                    f"{x[idx].item()} vs {y[idx].item()}")


def torch_baseline(a: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype) -> tuple[torch.Tensor, str]:
    """torch's own GEMM of the same inputs into the same D dtype, and what was called."""
    bt = b.mT
    if out_dtype == a.dtype == b.dtype and a.dtype in (torch.bfloat16, torch.float16):
        return torch.matmul(a, bt), "torch.matmul"
    if out_dtype == torch.float32 and a.dtype == b.dtype and a.dtype in (torch.bfloat16, torch.float16):
        try:  # cuBLAS's 16-bit GEMM with an fp32 D: the same tensor-core accumulation as ours
            return torch.bmm(a, bt, out_dtype=torch.float32), "torch.bmm(out_dtype=float32)"
        except (TypeError, RuntimeError, NotImplementedError):
            pass  # torch without mm.dtype: an fp32 GEMM of the (exact) upcast inputs, TF32 off
        tf32 = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False
        try:
            return torch.matmul(a.float(), bt.float()), "torch.matmul(fp32 upcast, no tf32)"
        finally:
            torch.backends.cuda.matmul.allow_tf32 = tf32
    try:  # fp8: cuBLASLt through _scaled_mm, 2-D only, with unit scales
        one = torch.ones((), device=a.device)
        return torch.stack([torch._scaled_mm(a[i].contiguous(), b[i].contiguous().t(), scale_a=one,
                                             scale_b=one, out_dtype=out_dtype)
                            for i in range(a.shape[0])]), "torch._scaled_mm"
    except (RuntimeError, TypeError) as e:
        pytest.skip(f"torch has no same-dtype GEMM for {a.dtype} x {b.dtype} -> {out_dtype} to compare "
                    f"against at this shape: {e}")


def check_gemm(inst, case: Case, a: Operand, b: Operand, d: Operand, report) -> None:
    """D against an fp64 reference: no NaN, max error within K_FACTOR x torch's, relative error bound."""
    out = d.t
    ref = torch.einsum("lmk,lnk->lmn", a.t.double(), b.t.double())  # fp64 GEMMs are cheap on an H200
    base, base_name = torch_baseline(a.t, b.t, out.dtype)
    diff = (out.double() - ref).abs()
    torch_err = (base.double() - ref).abs().max().item()
    budget = K_FACTOR * torch_err + ATOL_REL * ref.abs().max().item()
    max_err = diff.max().item()  # NaN if any element is NaN
    rel = (torch.linalg.vector_norm(out.double() - ref) / torch.linalg.vector_norm(ref)).item()
    rel_bound = REL_BOUND[inst.d_dtype]
    nan = torch.isnan(out)
    n_nan = int(nan.sum())
    passed = n_nan == 0 and max_err <= budget and rel < rel_bound
    report(kind="numerics", instance=inst.id, case=case.name, m=case.m, n=case.n, k=case.k,
           batch=case.batch, max_abs_err=max_err, rel_err=rel, torch_max_abs_err=torch_err,
           budget=budget, rel_bound=rel_bound, nan_count=n_nan, baseline=base_name, passed=passed)
    if n_nan:
        pytest.fail(f"{n_nan} of {out.numel()} D elements are NaN (D starts NaN and A/B padding is NaN: "
                    f"unwritten, or computed from outside A/B); first at (l, m, n) = {first_index(nan)}")
    bad = diff > budget
    if bad.any():
        idx = first_index(bad)
        pytest.fail(f"max abs err {max_err:.3e} > budget {budget:.3e} = {K_FACTOR:g} x {base_name}'s "
                    f"{torch_err:.3e} + atol; {int(bad.sum())} elements over; first at (l, m, n) = {idx}: "
                    f"got {out[idx].item()!r}, ref {ref[idx].item()!r}, torch {base[idx].item()!r}")
    assert rel < rel_bound, f"||out - ref|| / ||ref|| = {rel:.3e} >= {rel_bound:g} for {inst.d_dtype} D"


# --- tests ---------------------------------------------------------------------------------------------


def test_instances_are_understood():
    """The manifest lists instances, with unique ids and dtypes/majors this tier knows how to build."""
    assert INSTANCES, "hgemm_sm90.instances() is empty: the wheel ships no kernels"
    ids = [i.id for i in INSTANCES]
    assert len(set(ids)) == len(ids), "duplicate instance ids"
    for i in INSTANCES:
        assert {i.a_dtype, i.b_dtype, i.d_dtype} <= TORCH_DTYPE.keys(), i.id
        for op, major in (("a", i.a_major), ("b", i.b_major), ("d", i.d_major)):
            assert major in (NATURAL_MAJOR[op], OTHER_MAJOR[op]), f"{i.id}: {op}_major {major!r}"


GEMM_PARAMS = _params(INSTANCES, CASES) + _params(large_subset(INSTANCES), [LARGE])


@pytest.mark.parametrize(("inst", "case"), GEMM_PARAMS)
def test_gemm(inst, case, gen, report):
    """D matches the reference, every D element is written, and nothing outside D is."""
    a, b, d = operands(inst, case, gen)
    before = [bits(x.buf).clone() for x in (a, b, d)]
    launch(inst, case, a, b, d)
    torch.cuda.synchronize()  # surfaces a kernel fault here, attributed to this instance
    check_gemm(inst, case, a, b, d, report)
    assert_outside_unchanged(d, before[2], "D")
    for x, snap, what in zip((a, b), before[:2], ("A", "B"), strict=True):  # inputs are read-only
        assert_bitwise_equal(bits(x.buf), snap, f"{what}'s buffer after the launch", "buffer offset")


@pytest.mark.parametrize("inst", INSTANCES, ids=_id)
def test_deterministic(inst, gen):
    """Two launches on the same inputs give bitwise-equal D (no split-K races, no order dependence)."""
    a, b, d1 = operands(inst, DETERMINISM, gen)
    d2 = output(inst, DETERMINISM)
    launch(inst, DETERMINISM, a, b, d1)
    launch(inst, DETERMINISM, a, b, d2)
    torch.cuda.synchronize()
    assert not torch.isnan(d1.t).any(), "unwritten (NaN) D elements"  # else NaN == NaN would pass
    assert_bitwise_equal(d1.t, d2.t, "two launches of the same GEMM")


@pytest.mark.parametrize("inst", family_subset(INSTANCES), ids=_id)
def test_cuda_graph_replay(inst, gen, report):
    """A launch captured into a CUDA graph replays correctly on new data copied into its input buffers."""
    case = Case("graph", 520, 1000, 264, batch=2)
    a, b, d = operands(inst, case, gen)
    launch(inst, case, a, b, d)  # outside capture: loads the cubin, which is not a stream operation
    torch.cuda.synchronize()
    d.t.fill_(float("nan"))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):  # makes its capture stream current
        launch(inst, case, a, b, d, stream=torch.cuda.current_stream())
    torch.cuda.synchronize()
    assert torch.isnan(d.t).all(), "D changed during capture: the launch ran instead of being recorded"
    for _ in range(2):
        fill_random(a, gen)  # same addresses, new values
        fill_random(b, gen)
        d.t.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        check_gemm(inst, case, a, b, d, report)


@pytest.mark.parametrize("operand", ["a", "b", "d"])
@pytest.mark.parametrize("inst", INSTANCES, ids=_id)
def test_misaligned_pointer_rejected(inst, operand, gen):
    """A pointer 2 bytes off the 16-byte TMA alignment raises InvalidArgumentError and launches nothing."""
    a, b, d = operands(inst, MISALIGNED, gen)
    before = bits(d.buf).clone()
    ptrs = {"a": a.ptr(), "b": b.ptr(), "d": d.ptr()}
    ptrs[operand] += 2
    with pytest.raises(hgemm_sm90.InvalidArgumentError):
        launch(inst, MISALIGNED, a, b, d, ptrs=(ptrs["a"], ptrs["b"], ptrs["d"]))
    torch.cuda.synchronize()
    assert_bitwise_equal(bits(d.buf), before, "D buffer after a rejected launch", "buffer offset")


@pytest.mark.parametrize("operand", ["a", "b", "d"])
@pytest.mark.parametrize("inst", INSTANCES, ids=_id)
def test_misaligned_leading_dim_rejected(inst, operand, gen):
    """A leading dim one element longer than a 16-byte multiple raises InvalidArgumentError."""
    a, b, d = operands(inst, MISALIGNED, gen)
    before = bits(d.buf).clone()
    x = {"a": a, "b": b, "d": d}[operand]
    with pytest.raises(hgemm_sm90.InvalidArgumentError):
        launch(inst, MISALIGNED, a, b, d,
               **{f"ld{operand}": x.ld + 1, f"batch_stride_{operand}": x.batch_stride})
    torch.cuda.synchronize()
    assert_bitwise_equal(bits(d.buf), before, "D buffer after a rejected launch", "buffer offset")
