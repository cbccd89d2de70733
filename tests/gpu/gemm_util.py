"""Shared machinery of the GPU tier: operands laid out per instance, problems, the fp64 reference, torch's
own GEMM as the error yardstick, and the checks. The test modules (test_*.py beside this file) import it
as ``from tests.gpu import gemm_util``; importing it skips the importing module, with a reason, where
torch, CUDA, an sm_90 device or hgemm_sm90 is missing.

What one numerics check does:
- fresh seeded random inputs, never zeros: zeros hide unwritten outputs and wrong indexing;
- every operand is a view into a larger buffer with guard regions (and padded leading dims and batch
  strides where the case says so): A/B/C padding holds NaN, so a read outside them that reaches D shows
  up as NaN, and D's padding holds a sentinel that must stay bitwise unchanged (stores outside D);
- D starts NaN (except in-place, where it starts as C), so an unwritten element fails;
- the error budget is relative to torch's own GEMM of the same inputs with the same accumulation
  (cuBLAS: ``torch.bmm(out_dtype=float32)`` for 16-bit inputs, ``torch._scaled_mm`` with unit scales
  and the instance's fast/promoted accumulation for fp8), followed by the same epilogue in fp32 and
  the same rounding to D's dtype; the reference itself is fp64 from the (exact) input values;
- fp8 D is compared after rounding the reference to D's format: at most 1 ulp apart, or within the
  accumulation budget plus 1 ulp (where accumulation error crosses several of fp8's tiny ulps near 0).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import pytest

torch = pytest.importorskip("torch", reason="the GPU tier needs torch")
if not torch.cuda.is_available():
    pytest.skip("torch sees no CUDA device", allow_module_level=True)
if torch.cuda.get_device_capability() != (9, 0):
    pytest.skip(
        f"the sm_90a cubins need compute capability 9.0; {torch.cuda.get_device_name()} is "
        f"{torch.cuda.get_device_capability()}",
        allow_module_level=True,
    )
hgemm_sm90 = pytest.importorskip(
    "hgemm_sm90",
    reason="hgemm_sm90 is not importable: pip install --no-deps --target DIR wheels/*.whl "
    "and put DIR on PYTHONPATH",
)

DEVICE = "cuda"

from hgemm_sm90.spec import DType

TORCH_DTYPE = {d: getattr(torch, d.array_name) for d in DType}  # StrEnum keys: "bf16" finds DType.bf16
FP8 = tuple(d for d in DType if d.is_float8)
# The major whose storage is the logical (rows, cols) matrix itself; the other major stores its transpose.
NATURAL_MAJOR = {"a": "k", "b": "k", "c": "n", "d": "n"}
OTHER_MAJOR = {"a": "m", "b": "n", "c": "m", "d": "m"}

K_FACTOR = 2.0  # kernel error <= K_FACTOR * torch's error + atol: judged relative to torch's own error
# fp8 fast accumulation: the tensor core keeps ~14 bits of the running sum (DeepSeek-V3 report, H800), so
# the error depends on how the K loop is split into accumulators. cuBLAS may split it differently from our
# one-accumulator-per-tile loop (e.g. two interleaved accumulators halve the running magnitude), so its
# error can be ~2x smaller on the same data for the same hardware behaviour: allow 3x.
K_FACTOR_FP8_FAST = 3.0
# atol = a few fp32 ulps of the largest |ref|: with small K both errors are a handful of fp32 ulps (fp32 D)
# and a factor of 2 between two such small integers is noise, not a bug. Negligible for 16-bit D.
ATOL_REL = 2.0**-22
# ||out - ref|| / ||ref|| bounds. Rounding D to its dtype dominates: unit roundoff u is 2^-8 for bf16 and
# 2^-11 for fp16, and uniformly distributed rounding gives a norm-relative error of ~0.4u (bf16 measured
# 1.7e-3 on an H200, 2026-11-29). The bounds leave 4-8x margin over that yet sit 10x below what one dropped
# k-tile does (sqrt(64/4096) ~ 0.12 even at K=4096). fp32 D has only accumulation error,
# ~sqrt(K) * 2^-24 < 1e-5.
# fp8 D: u = 2^-4 (e4m3), 2^-3 (e5m2).
REL_BOUND = {"bf16": 1e-2, "fp16": 2e-3, "fp32": 1e-4, "e4m3": 1.5e-1, "e5m2": 3e-1}
# fp8 inputs: the accumulation itself is coarser than fp32 (see K_FACTOR_FP8_FAST); fast accumulation's
# max relative error reaches ~1-2% at K=4096 (DeepSeek-V3), promoted accumulation keeps that within one
# 128-deep k-block. Still 4x below one dropped 128-deep k-tile at K=8192 (sqrt(128/8192) = 0.125).
FP8_ACC_REL_BOUND = {True: 3e-2, False: 3e-3}
D_SENTINEL = -42.0  # finite in every D dtype; compared bitwise, so its exact rounded value does not matter
GUARD_UNITS = 16  # 16-byte units of guard after the last element of every operand
# fp8 D: keep |D| well inside e4m3's range (max 448) whatever K, alpha and beta are: inputs are scaled so
# that A @ B^T has a standard deviation of about this (alpha, beta <= 1.5 and C of the same size keep
# 6-sigma values under ~200).
FP8_D_STD = 8.0
# e5m2 inputs are drawn on e5m2's grid but zeroed below 2^-7 (0.6% of N(0, 1) samples): every remaining
# value is then exactly representable in e4m3 too, so torch's fp8 GEMM (cuBLASLt has no e5m2 x e5m2) can
# give the error yardstick on an exact e4m3 re-encoding of the same values.
E5M2_FLUSH = 2.0**-7


@dataclass(frozen=True)
class Case:
    """One problem: sizes, how its operands sit in memory, and the epilogue. Pads and head are in 16-byte
    units, so every leading dim, batch stride and pointer stays legal (TMA needs 16-byte alignment) in any
    dtype.

    epilogue: "default": instances without C compute D = A @ B^T with alpha left at its default; instances
    with C compute D = alpha * acc + beta * C with random alpha, beta != 0 and C in its own buffer.
    "alpha": random alpha (instances without C). "beta0": C given (finite, random), beta = 0: C must not
    matter. "inplace": D is C (same pointer, leading dim and batch stride), starting with C's values.
    """

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
    epilogue: str = "default"


# Contiguous extents are multiples of 8 elements (16 bytes of a 16-bit dtype) where the case is meant to be
# packed; make_operand pads where a dtype or major needs it (then the leading dims are passed explicitly).
EDGE_CASES = [
    Case("square512", 512, 512, 512),
    Case("ragged", 1000, 2040, 520),  # no dim a multiple of any tile; K leaves an 8-wide k-tile residue
    Case("k40", 200, 264, 40),  # K below one k-tile
    Case("m1", 1, 256, 64),
    Case("batch3", 300, 136, 200, batch=3),
    Case("padded", 264, 200, 136, batch=2, pad_ld=3, pad_batch=5, head=1),  # ragged too
    Case("raster_m_g4", 1000, 2040, 520, raster_along_m=True, group_size=4),
    Case("raster_n_g1", 1000, 2040, 520, raster_along_m=False, group_size=1),
]
# Decode-sized M for swap-AB instances (M is the kernel's narrow tile N there): below, at and just past
# each tile width, odd sizes, and a K that leaves a partial k-tile for every shipped tile K.
DECODE_CASES = [Case(f"decode_m{m}", m, 1000, 1048) for m in (1, 2, 3, 7, 8, 9, 16, 33, 64, 127, 128)]
ALPHA_CASE = Case("alpha", 264, 200, 136, batch=2, pad_ld=3, pad_batch=5, head=1, epilogue="alpha")
BETA0_CASE = Case("beta0", 264, 200, 136, batch=2, pad_ld=3, pad_batch=5, head=1, epilogue="beta0")
# Several tiles per batch in both directions: the in-place read-before-write must hold per tile.
INPLACE_CASE = Case("inplace", 1000, 520, 264, batch=2, pad_ld=3, pad_batch=5, head=1, epilogue="inplace")
LARGE = Case("large4096", 4096, 4096, 4096)
# More output tiles than the H200's 132 SMs for every shipped tile shape: persistent CTAs take several.
DETERMINISM = Case("determinism", 1800, 3000, 520)
# Room to read with a leading dim one element too long without leaving the buffer, should a bug launch.
MISALIGNED = Case("misaligned", 256, 256, 128, pad_ld=1, pad_batch=64)


# --- instances -----------------------------------------------------------------------------------------


def _id(inst) -> str:
    return inst.id


# Grouped instances (varlen M or K) take a different problem (G groups, launched with cu_seqlens_m or
# cu_seqlens_k): tests/gpu/test_grouped.py covers them; every other test runs the plain and batched GEMMs.
INSTANCES = sorted((i for i in hgemm_sm90.instances() if i.varlen == "none"), key=_id)
GROUPED = sorted((i for i in hgemm_sm90.instances() if i.varlen_m), key=_id)


def is_fp8(inst) -> bool:
    return inst.a_dtype in FP8 or inst.b_dtype in FP8


def inplace_ok(inst) -> bool:
    """C can be D itself: the runtime accepts c=d only with C's dtype and major equal to D's."""
    return inst.has_c and inst.c_dtype == inst.d_dtype and inst.c_major == inst.d_major


# What an instance computes, ignoring how it is tiled: these fields of its spec.
FAMILY_FIELDS = (
    "a_dtype",
    "b_dtype",
    "d_dtype",
    "a_major",
    "b_major",
    "d_major",
    "has_c",
    "c_dtype",
    "c_major",
    "acc_dtype",
    "fp8_fast_accum",
)


def family(inst, without: tuple[str, ...] = ()) -> tuple:
    """What an instance computes, ignoring how it is tiled (FAMILY_FIELDS, less those named in
    `without`)."""
    return tuple(getattr(inst, f) for f in FAMILY_FIELDS if f not in without)


def fp16_accumulating(inst) -> bool:
    return str(inst.acc_dtype) == "fp16"


def layout_name(inst) -> str:
    """ "kkn" (A, B, D majors), plus "+c<major>" when the instance reads C."""
    return f"{inst.a_major}{inst.b_major}{inst.d_major}" + (f"+c{inst.c_major}" if inst.has_c else "")


def family_subset(instances):
    """One instance per family (dtypes, majors, C, fp8 accumulation) and schedule, the one with the largest
    cluster (then by id): e.g. a captured launch must carry the cluster-dimension attribute into its
    graph node."""
    first: dict[tuple, object] = {}
    for inst in sorted(instances, key=lambda i: (-i.cluster[0] * i.cluster[1], i.id)):
        first.setdefault((*family(inst), inst.schedule), inst)
    return sorted(first.values(), key=_id)


ELEM_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4, "e4m3": 1, "e5m2": 1}


def contiguous_extents(inst) -> dict[str, int]:
    """{extent name: element bytes} of every extent some operand of ``inst`` stores contiguously."""
    out: dict[str, int] = {}
    ops = [
        ("a", inst.a_major, inst.a_dtype, ("m", "k")),
        ("b", inst.b_major, inst.b_dtype, ("n", "k")),
        ("d", inst.d_major, inst.d_dtype, ("m", "n")),
    ]
    if inst.has_c:
        ops.append(("c", inst.c_major, inst.c_dtype, ("m", "n")))
    for _, major, dtype, (rows, cols) in ops:
        name = rows if major == rows else cols
        out[name] = min(out.get(name, 16), ELEM_BYTES[dtype])
    return out


def fit(case: Case, inst) -> Case:
    """``case`` with every extent that ``inst`` stores contiguously rounded up to a 16-byte multiple: TMA
    moves whole 16-byte chunks, so the runtime refuses ragged contiguous extents (tested in
    test_launch_rules). Extents stored only as strided dimensions stay as ragged as the case made them."""
    changes = {}
    for name, elem in contiguous_extents(inst).items():
        step = 16 // elem
        changes[name] = round_up(getattr(case, name), step)
    return replace(case, **changes)


def cases_for(inst) -> list[Case]:
    """The per-instance numerics cases: every edge shape, plus the epilogue variants the instance has."""
    if getattr(inst, "swap_ab", False) or getattr(inst, "k_split", "none") == "split":
        return [*EDGE_CASES, *DECODE_CASES] + ([ALPHA_CASE] if not inst.has_c else [BETA0_CASE])
    if not inst.has_c:
        return [*EDGE_CASES, ALPHA_CASE]
    return [*EDGE_CASES, BETA0_CASE] + ([INPLACE_CASE] if inplace_ok(inst) else [])


def params(pairs):
    return [pytest.param(i, c, id=f"{i.id}-{c.name}") for i, c in pairs]


# --- operands ------------------------------------------------------------------------------------------


@dataclass
class Operand:
    buf: torch.Tensor  # the whole 1-D allocation: guards and padding included
    t: torch.Tensor  # the logical (L, rows, cols) view: A (L, M, K), B (L, N, K), C and D (L, M, N)
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
    """A buffer filled with ``fill`` and a view of ``op`` inside it, laid out as ``major`` says.

    For A with major "m" the storage is (L, K, M) with M contiguous and the view is its transpose: the
    launch gets lda = the storage row pitch and A[l] = storage[l].T, as a caller with a column-major A has.
    """
    if major not in (NATURAL_MAJOR[op], OTHER_MAJOR[op]):
        raise ValueError(f"unknown {op}_major {major!r}")
    unit = 16 // torch.empty((), dtype=dtype).element_size()
    logical = {"a": (case.m, case.k), "b": (case.n, case.k), "c": (case.m, case.n), "d": (case.m, case.n)}[op]
    rows, cols = logical if major == NATURAL_MAJOR[op] else logical[::-1]
    ld = round_up(cols, unit) + case.pad_ld * unit
    batch_stride = rows * ld + case.pad_batch * unit
    head = case.head * unit
    buf = torch.full(
        (head + case.batch * batch_stride + GUARD_UNITS * unit,), fill, dtype=dtype, device=DEVICE
    )
    store = buf.as_strided((case.batch, rows, cols), (batch_stride, ld, 1), head)
    t = store if major == NATURAL_MAJOR[op] else store.transpose(1, 2)
    return Operand(buf, t, rows, cols, ld, batch_stride)


def random_values(
    shape, dtype: torch.dtype, gen: torch.Generator, std: float = 1.0, positive: bool = False
) -> torch.Tensor:
    """fp32 N(0, std^2) samples (|.| if positive) already on ``dtype``'s grid (exact in fp32)."""
    x = torch.randn(shape, generator=gen, device=DEVICE) * std
    if positive:
        x = x.abs()
    if dtype == torch.float8_e5m2:
        x = x.to(dtype).float()
        x = torch.where(x.abs() < E5M2_FLUSH, torch.zeros_like(x), x)
    return x.to(dtype).float()


def fill_random(x: Operand, gen: torch.Generator, std: float = 1.0, positive: bool = False) -> None:
    x.t.copy_(random_values(x.t.shape, x.t.dtype, gen, std, positive))


def output(inst, case: Case) -> Operand:
    case = fit(case, inst)
    d = make_operand("d", inst.d_major, TORCH_DTYPE[inst.d_dtype], case, D_SENTINEL)
    d.t.fill_(float("nan"))
    return d


# --- problems ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scales:
    alpha: float | None  # None: not passed (the default, 1.0)
    beta: float | None  # None: not passed (the default, 0.0)
    c: str | None  # None, "separate" or "inplace"
    in_std: float  # standard deviation of A and B
    c_std: float


def random_scale(gen: torch.Generator) -> float:
    """+-[0.5, 1.5] in steps of 2^-8: exact in float32 (the kernel's scale type), so the fp64 reference uses
    the very value the kernel multiplies by."""
    u = torch.rand(2, generator=gen, device=DEVICE).tolist()
    return (1 if u[0] < 0.5 else -1) * (128 + int(u[1] * 256)) / 256


def input_std(inst, k: int) -> float:
    """Standard deviation of A and B: 1 (randn), except that fp8 outputs get |A @ B^T| ~ FP8_D_STD."""
    fp8_out = inst.d_dtype in FP8 or (inst.has_c and inst.c_dtype in FP8)
    return min(1.0, math.sqrt(FP8_D_STD / math.sqrt(k))) if fp8_out else 1.0


def scales_for(inst, case: Case, gen: torch.Generator) -> Scales:
    std = input_std(inst, case.k)
    acc_std = std * std * math.sqrt(case.k)  # of A @ B^T; C gets the same size, so beta * C is not noise
    if not inst.has_c:
        if case.epilogue not in ("default", "alpha"):
            raise ValueError(f"case {case.name}: epilogue {case.epilogue!r} needs an instance with C")
        return Scales(random_scale(gen) if case.epilogue == "alpha" else None, None, None, std, acc_std)
    if case.epilogue == "alpha":
        raise ValueError(f"case {case.name}: epilogue 'alpha' is for instances without C")
    c = "inplace" if case.epilogue == "inplace" else "separate"
    beta = 0.0 if case.epilogue == "beta0" else random_scale(gen)
    return Scales(random_scale(gen), beta, c, std, acc_std)


@dataclass
class Problem:
    inst: object
    case: Case
    a: Operand
    b: Operand
    d: Operand
    c: Operand | None  # is d for an in-place update
    scales: Scales
    c_values: torch.Tensor | None  # C's values at launch time (fp32 copy): the reference's beta * C

    @property
    def alpha(self) -> float:
        return 1.0 if self.scales.alpha is None else self.scales.alpha

    @property
    def beta(self) -> float:
        return 0.0 if self.scales.beta is None else self.scales.beta


def make_problem(
    inst, case: Case, gen: torch.Generator, scales: Scales | None = None, positive: bool = False
) -> Problem:
    """Operands of ``inst`` for ``case`` (fitted to its 16-byte contiguous extents) with random A, B (and
    C), D poisoned (or holding C, in place)."""
    case = fit(case, inst)
    sc = scales or scales_for(inst, case, gen)
    # A/B/C padding is NaN: if the kernel reads it and uses it, D turns NaN.
    a = make_operand("a", inst.a_major, TORCH_DTYPE[inst.a_dtype], case, float("nan"))
    b = make_operand("b", inst.b_major, TORCH_DTYPE[inst.b_dtype], case, float("nan"))
    fill_random(a, gen, sc.in_std, positive)
    fill_random(b, gen, sc.in_std, positive)
    c = c_values = None
    if sc.c == "inplace":
        # One buffer is both: NaN padding (a read-guard for C), values = C, and it must end holding D.
        d = c = make_operand("d", inst.d_major, TORCH_DTYPE[inst.d_dtype], case, float("nan"))
        fill_random(c, gen, sc.c_std)
    else:
        d = output(inst, case)
        if sc.c == "separate":
            c = make_operand("c", inst.c_major, TORCH_DTYPE[inst.c_dtype], case, float("nan"))
            fill_random(c, gen, sc.c_std)
    if c is not None:
        c_values = c.t.float().clone()
    return Problem(inst, case, a, b, d, c, sc, c_values)


def launch(p: Problem, stream=None, ptrs=None, instance=None, **overrides) -> None:
    """hgemm_sm90.launch of problem ``p`` (with ``p.inst``, or ``instance``: one of the same family):
    leading dims and batch strides only where they are not packed (packed operands take the runtime's
    defaults, so both paths get exercised), alpha/beta/c only where the problem sets them."""
    case = p.case
    kw = {"m": case.m, "n": case.n, "k": case.k, "batch": case.batch}
    ops = [("a", p.a), ("b", p.b), ("d", p.d)]
    if p.c is not None:
        ops.append(("c", p.c))
        kw["c"] = p.c.ptr()
    for name, x in ops:
        if not x.packed or (p.scales.c == "inplace" and name in ("c", "d")):
            kw[f"ld{name}"], kw[f"batch_stride_{name}"] = x.ld, x.batch_stride
    if p.scales.alpha is not None:
        kw["alpha"] = p.scales.alpha
    if p.scales.beta is not None:
        kw["beta"] = p.scales.beta
    if case.raster_along_m is not None:
        kw["raster_along_m"] = case.raster_along_m
    if case.group_size is not None:
        kw["group_size"] = case.group_size
    kw.update(overrides)
    inst = instance or p.inst
    if getattr(inst, "k_split", "none") != "none" and "workspace" not in kw:
        kw["workspace"] = workspace(inst, case, kw.get("k_splits"))
    hgemm_sm90.launch(
        inst.id,
        ptrs or (p.a.ptr(), p.b.ptr(), p.d.ptr()),
        torch.cuda.current_stream() if stream is None else stream,
        **kw,
    )


_WORKSPACES: dict = {}  # by (device, stream): split-K and stream-K launches on one stream share one


def workspace(inst, case: Case, k_splits=None) -> int | None:
    """A zeroed split-K or stream-K workspace big enough for ``case`` on the current stream (the kernel
    leaves it zeroed, so one serves every launch of the stream), or None where the launch needs none."""
    nbytes = hgemm_sm90.workspace_bytes(inst.id, case.m, case.n, case.k, case.batch, k_splits=k_splits)
    if not nbytes:
        return None
    key = (torch.cuda.current_device(), torch.cuda.current_stream().cuda_stream)
    ws = _WORKSPACES.get(key)
    if ws is None or ws.numel() < nbytes:
        ws = _WORKSPACES[key] = torch.zeros(max(nbytes, 1 << 20), dtype=torch.uint8, device=DEVICE)
    return ws.data_ptr()


def launches_idle_busy_idle(p: Problem, what: str, **overrides) -> list[Operand]:
    """Three launches of problem ``p``, each into a fresh D, the middle one while another stream's GEMMs
    hold SMs (so split-K units or stream-K pieces run, and arrive, in another order); asserts every D
    written (no NaN left) and all three bitwise equal (`what` names the launches), and returns the Ds."""
    outs = []
    busy = torch.cuda.Stream()
    x = torch.randn(8192, 8192, device=DEVICE, dtype=torch.bfloat16)
    for load in (False, True, False):
        d = output(p.inst, p.case)
        if load:
            busy.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(busy):
                for _ in range(4):
                    x @ x
        launch(p, ptrs=(p.a.ptr(), p.b.ptr(), d.ptr()), **overrides)
        outs.append(d)
    torch.cuda.synchronize()
    for d in outs:
        assert not torch.isnan(d.t.float()).any(), "unwritten (NaN) D elements"
        assert_bitwise_equal(outs[0].t, d.t, what)
    return outs


def snapshot(p: Problem) -> dict[str, torch.Tensor]:
    """The bits of every buffer before a launch (for the guard checks)."""
    out = {"a": bits(p.a.buf).clone(), "b": bits(p.b.buf).clone(), "d": bits(p.d.buf).clone()}
    if p.c is not None and p.c is not p.d:
        out["c"] = bits(p.c.buf).clone()
    return out


def assert_guards(p: Problem, before: dict[str, torch.Tensor]) -> None:
    """Nothing outside D changed: D's padding and guards, and all of A, B and a separate C (read-only)."""
    assert_outside_unchanged(p.d, before["d"], "D")
    inputs = [("a", p.a, "A"), ("b", p.b, "B")]
    if "c" in before:
        inputs.append(("c", p.c, "C"))
    for key, x, what in inputs:
        assert_bitwise_equal(bits(x.buf), before[key], f"{what}'s buffer after the launch", "buffer offset")


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
        pytest.fail(
            f"{int(changed.sum())} elements outside {what} changed: the first at buffer offset "
            f"{idx}, in {describe_offset(x, idx)}, now holds {x.buf[idx].float().item()}"
        )


def assert_bitwise_equal(x: torch.Tensor, y: torch.Tensor, what: str, where: str = "(l, m, n)") -> None:
    diff = bits(x) != bits(y)
    if diff.any():
        idx = first_index(diff)
        pytest.fail(
            f"{what}: {int(diff.sum())} elements differ; first at {where} = {idx}: "
            f"{x[idx].float().item()} vs {y[idx].float().item()}"
        )


def _pad16(x: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """x (r, c) zero-padded to (rows, cols), contiguous: cuBLASLt's fp8 GEMM wants dims that are multiples
    of 16, and zero rows/columns add exact zeros to every dot product."""
    if x.shape == (rows, cols):
        return x.contiguous()
    out = torch.zeros((rows, cols), dtype=x.dtype, device=x.device)
    out[: x.shape[0], : x.shape[1]] = x
    return out


def _exact_e4m3(x: torch.Tensor) -> torch.Tensor | None:
    """x re-encoded as e4m3 if every value is exactly representable there, else None."""
    y = x.float().to(torch.float8_e4m3fn)
    return y if torch.equal(y.float(), x.float()) else None


def _scaled_mm_fp32(a: torch.Tensor, b: torch.Tensor, fast: bool) -> torch.Tensor:
    """(L, M, N) fp32 = a @ b^T through torch._scaled_mm (cuBLASLt) with unit scales, one batch at a time."""
    one = torch.ones((), device=a.device, dtype=torch.float32)
    L, M, K = a.shape
    N = b.shape[1]
    Mp, Np, Kp = round_up(M, 16), round_up(N, 16), round_up(K, 16)
    out = []
    for i in range(L):
        ai, bi = _pad16(a[i], Mp, Kp), _pad16(b[i], Np, Kp)  # row-major M x K, row-major N x K
        r = torch._scaled_mm(
            ai, bi.t(), scale_a=one, scale_b=one, out_dtype=torch.float32, use_fast_accum=fast
        )  # bi.t() is K x N column-major, as cuBLASLt wants
        out.append(r[:M, :N])
    return torch.stack(out)


def torch_accumulator(a: torch.Tensor, b: torch.Tensor, fast: bool = False) -> tuple[torch.Tensor, str]:
    """torch's own A @ B^T accumulated in fp32 (not yet rounded to D), with the accumulation the instance
    has, and what was called. a: (L, M, K), b: (L, N, K), any strides."""
    bt = b.mT
    if a.dtype not in (torch.float8_e4m3fn, torch.float8_e5m2):
        try:  # cuBLAS's 16-bit GEMM with an fp32 result: the same tensor-core accumulation as ours
            return torch.bmm(a, bt, out_dtype=torch.float32), "torch.bmm(out_dtype=float32)"
        except (TypeError, RuntimeError, ValueError, NotImplementedError):
            pass  # torch without mm.dtype: an fp32 GEMM of the (exact) upcast inputs, TF32 off
        return _fp32_gemm(a, b), "torch.matmul(fp32 upcast, no tf32)"
    mode = "fast" if fast else "promoted"
    try:
        return _scaled_mm_fp32(a, b, fast), f"torch._scaled_mm({mode} accumulation, fp32 out)"
    except (RuntimeError, TypeError, ValueError, NotImplementedError):
        pass  # e5m2 x e5m2: cuBLASLt has none (torch 2.11 raises ValueError, H200, 2026-11-29)
    a4, b4 = _exact_e4m3(a), _exact_e4m3(b)
    if a4 is not None and b4 is not None:  # see E5M2_FLUSH: the same values, exactly, as e4m3
        try:
            return (
                _scaled_mm_fp32(a4, b4, fast),
                f"torch._scaled_mm on the exact e4m3 re-encoding ({mode} accumulation, fp32 out)",
            )
        except (RuntimeError, TypeError, ValueError, NotImplementedError):
            pass
    return _fp32_gemm(a, b), "torch.matmul(fp32 upcast, no tf32: finer than any fp8 accumulation)"


def fp16_accumulator(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, str]:
    """A @ B^T with an fp16 running sum, as an fp16-accumulating instance's WGMMAs keep it: each 16-deep
    k-step's products summed exactly (fp32 here, exact for fp16 products of 16 terms up to rounding far
    below fp16's) and added to the fp16 accumulator, rounded to fp16 once per step. Returned in fp32.
    Torch has no fp16-accumulating GEMM; cuBLAS's CUBLAS_COMPUTE_16F is not exposed. a: (L, M, K) and
    b: (L, N, K) fp16."""
    acc = torch.zeros(a.shape[0], a.shape[1], b.shape[1], device=a.device, dtype=torch.float16)
    af, bf = a.float(), b.float()
    for k0 in range(0, a.shape[2], 16):
        step = torch.bmm(af[:, :, k0 : k0 + 16], bf[:, :, k0 : k0 + 16].mT)
        acc = (acc.float() + step).half()
    return acc.float(), "fp16 running sum per 16-deep k-step (emulated)"


def _fp32_gemm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        return torch.matmul(a.float(), b.float().mT)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32


def fp8_table(dtype: torch.dtype) -> torch.Tensor:
    """Every finite value of an fp8 dtype, sorted, -0 merged into 0 (float64, on the device)."""
    v = torch.arange(256, dtype=torch.uint8, device=DEVICE).view(dtype).double()
    return torch.unique(v[torch.isfinite(v)])  # sorted; -0.0 == 0.0


def ulp_distance(x: torch.Tensor, y: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """How many representable values apart x and y (both on the table's grid) are; inf/NaN are far."""
    x, y = x.double().contiguous(), y.double().contiguous()  # fp8 tensors lack most ops (isfinite)
    ix, iy = torch.searchsorted(table, x), torch.searchsorted(table, y)
    far = ~(torch.isfinite(x) & torch.isfinite(y))
    return torch.where(far, torch.full_like(ix, 1 << 20), (ix - iy).abs())


def ulp_at(y: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """The larger gap between y (on the table's grid) and its two neighbours."""
    i = torch.searchsorted(table, y.double().contiguous()).clamp(0, table.numel() - 1)
    n = table.numel()
    up = table[(i + 1).clamp(max=n - 1)] - table[i]
    down = table[i] - table[(i - 1).clamp(min=0)]
    return torch.maximum(up, down)


def reference(p: Problem) -> tuple[torch.Tensor, torch.Tensor]:
    """(fp64 D, fp64 A @ B^T) from the exact input values."""
    acc = torch.einsum("lmk,lnk->lmn", p.a.t.double(), p.b.t.double())  # fp64 GEMMs are cheap on an H200
    ref = p.alpha * acc
    if p.c_values is not None:
        ref = ref + p.beta * p.c_values.double()
    return ref, acc


def check_gemm(p: Problem, report, reason: str = "") -> dict:
    """D against the fp64 reference: no NaN, max error within the budget, relative error bound. Returns
    the figures it reported."""
    inst, case = p.inst, p.case
    out = p.d.t
    ref, acc = reference(p)
    fast = bool(inst.fp8_fast_accum)
    if fp16_accumulating(inst):
        acc_t, base_name = fp16_accumulator(p.a.t, p.b.t)
    else:
        acc_t, base_name = torch_accumulator(p.a.t, p.b.t, fast)
    epi = p.alpha * acc_t
    if p.c_values is not None:
        epi = epi + p.beta * p.c_values
    base = epi.to(out.dtype)  # the same fp32 epilogue and rounding as the kernel's
    torch_err = (base.double() - ref).abs().max().item()
    kf = K_FACTOR_FP8_FAST if is_fp8(inst) and fast else K_FACTOR
    atol = ATOL_REL * ref.abs().max().item()
    err = (out.double() - ref).abs()
    max_err = err.max().item()  # NaN if any element is NaN
    rel = (torch.linalg.vector_norm(out.double() - ref) / torch.linalg.vector_norm(ref)).item()
    rel_bound = REL_BOUND[inst.d_dtype]
    if is_fp8(inst):
        rel_bound = max(rel_bound, FP8_ACC_REL_BOUND[fast])
    if fp16_accumulating(inst):
        # The fp16 running sum's own error grows with K (2.4e-3 at K = 4096, H200, 2026-12-01): the bound
        # is K_FACTOR times the emulated accumulation's, as the max error's budget is.
        emulated = (torch.linalg.vector_norm(base.double() - ref) / torch.linalg.vector_norm(ref)).item()
        rel_bound = max(rel_bound, K_FACTOR * emulated)
    nan = torch.isnan(out.float())
    n_nan = int(nan.sum())
    fields = {}
    if inst.d_dtype in FP8:
        # Rounding to fp8 dominates: compare with the reference rounded to D's format (1 ulp allowed),
        # or, near 0 where fp8's ulps are finer than the accumulation error, within torch's accumulation
        # error (before rounding) times kf plus 1 ulp.
        table = fp8_table(out.dtype)
        ref_q = ref.float().to(out.dtype)
        dist = ulp_distance(out, ref_q, table)
        acc_err = abs(p.alpha) * (acc_t.double() - acc).abs().max().item()
        budget = kf * acc_err + atol
        bad = (dist > 1) & ~(err <= budget + ulp_at(ref_q, table))
        fields = {
            "max_ulp": int(dist.max().item()),
            "over_1ulp": int((dist > 1).sum()),
            "torch_acc_err": acc_err,
        }
        budget_ratio = None
    else:
        budget = kf * torch_err + atol
        bad = ~(err <= budget)
        budget_ratio = max_err / budget if budget > 0 else None
    passed = n_nan == 0 and not bool(bad.any()) and rel < rel_bound
    figures = dict(
        kind="numerics",
        instance=inst.id,
        case=case.name,
        reason=reason or None,
        m=case.m,
        n=case.n,
        k=case.k,
        batch=case.batch,
        a_dtype=inst.a_dtype,
        b_dtype=inst.b_dtype,
        c_dtype=inst.c_dtype,
        d_dtype=inst.d_dtype,
        layout=layout_name(inst),
        schedule=inst.schedule,
        tile=list(inst.tile),
        cluster=list(inst.cluster),
        has_c=inst.has_c,
        fp8_fast_accum=inst.fp8_fast_accum if is_fp8(inst) else None,
        acc_dtype=str(inst.acc_dtype),
        epilogue=p.scales.c or ("alpha" if p.scales.alpha is not None else "plain"),
        alpha=p.alpha,
        beta=p.beta,
        max_abs_err=max_err,
        rel_err=rel,
        torch_max_abs_err=torch_err,
        budget=budget,
        err_over_budget=budget_ratio,
        rel_bound=rel_bound,
        k_factor=kf,
        nan_count=n_nan,
        baseline=base_name,
        passed=passed,
        **fields,
    )
    report(**figures)
    if n_nan:
        pytest.fail(
            f"{n_nan} of {out.numel()} D elements are NaN (D starts NaN and A/B/C padding is NaN: "
            f"unwritten, or computed from outside A/B/C); first at (l, m, n) = {first_index(nan)}"
        )
    if bad.any():
        idx = first_index(bad)
        what = (
            f"max ulp distance {fields['max_ulp']} from the rounded reference; torch's accumulation "
            f"error {fields['torch_acc_err']:.3e}"
            if fields
            else f"max abs err {max_err:.3e} > budget {budget:.3e} = {kf:g} x {base_name}'s {torch_err:.3e} "
            "+ atol"
        )
        pytest.fail(
            f"{what}; {int(bad.sum())} elements over; first at (l, m, n) = {idx}: got "
            f"{out[idx].float().item()!r}, ref {ref[idx].item()!r}, "
            f"torch {base[idx].float().item()!r}"
        )
    assert rel < rel_bound, f"||out - ref|| / ||ref|| = {rel:.3e} >= {rel_bound:g} for {inst.d_dtype} D"
    return figures
