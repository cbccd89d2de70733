"""`select()`: which shipped instance runs a GEMM problem, with which launch overrides, and why.

A problem's *class* is everything that decides which instances can run it at all: the dtypes of A, B, D
(and C), the three (four) majornesses, and fp8 fast accumulation. Inside its class every instance computes
the same result, so the choice is purely about speed, made in this order:
1. the tuning table shipped in the wheel (runtime/tuning.py, runtime/tuning.json): timings measured on a
   GPU of the same name and SM count by `python -m build_tools.tune`, interpolated in log M between grid
   points (runtime/tuning.py says how);
2. otherwise the cost model (runtime/model.py): wave quantization on the device's SM count, tile waste at
   the edges, k-loop length, cluster multicast, memory traffic.
Only instances of the problem's class are ever considered, so a choice always runs the problem; a class
with no shipped instance is a `NoInstanceError` that lists the nearest shipped ones.

Choices are cached per runtime (runtime/state.py) under the exact arguments, so a repeated call is one
tuple and one dict lookup (docs/PERF.md has the measured cost).
"""

from __future__ import annotations

from dataclasses import dataclass

from . import gpus, model, problem, state, tuning
from .errors import InvalidArgumentError, NoInstanceError
from .spec import DType, GemmSpec, SpecError, Varlen, parse_field

_CLASS_FIELDS = ("a_dtype", "b_dtype", "d_dtype", "a_major", "b_major", "d_major", "c_dtype", "c_major")


@dataclass(frozen=True, slots=True)
class ProblemClass:
    """The fields that decide whether an instance can run a problem (everything but speed)."""

    a_dtype: DType
    b_dtype: DType
    d_dtype: DType
    a_major: str
    b_major: str
    d_major: str
    c_dtype: DType | None
    c_major: str | None
    fp8_fast_accum: bool
    grouped: bool = False  # a grouped GEMM (varlen M: one launch for G groups of rows)
    gathered: bool = False  # ... whose A rows are gathered through an index array
    grouped_k: bool = False  # a grouped GEMM with a per-group K (the weight gradient)
    fp16_accum: bool = False  # fp16 inputs accumulated in fp16 (faster, less precise: opt-in only)

    @classmethod
    def of(cls, spec: GemmSpec) -> ProblemClass:
        fields = (getattr(spec, f) for f in _CLASS_FIELDS)
        return cls(
            *fields,
            spec.fp8_fast_accum,
            spec.varlen == Varlen.m,
            spec.gather_a,
            spec.varlen == Varlen.k,
            spec.acc_dtype == DType.fp16,
        )

    @property
    def key(self) -> str:
        """The class's name in the tuning table, e.g. ``bf16_bf16_bf16_kkn`` or
        ``e4m3_e4m3_bf16_kkn_cbf16n_fastacc``: the instance id without accumulator, tile, cluster and
        schedule."""
        key = f"{self.a_dtype}_{self.b_dtype}_{self.d_dtype}_{self.a_major}{self.b_major}{self.d_major}"
        if self.c_dtype is not None:
            key += f"_c{self.c_dtype}{self.c_major}"
        key += "_fastacc" if self.fp8_fast_accum else ""
        key += "_varlenm" if self.grouped else "_varlenk" if self.grouped_k else ""
        return key + ("_gathera" if self.gathered else "") + ("_fp16acc" if self.fp16_accum else "")

    def distance(self, other: ProblemClass) -> int:
        """How many fields differ: what "nearest" means in `NoInstanceError`."""
        fields = (*_CLASS_FIELDS, "fp8_fast_accum", "grouped", "gathered", "grouped_k", "fp16_accum")
        return sum(getattr(self, f) != getattr(other, f) for f in fields)

    def dtype_of(self, operand: str) -> DType:
        return getattr(self, f"{operand}_dtype")

    def major_of(self, operand: str) -> str:
        return getattr(self, f"{operand}_major")


@dataclass(frozen=True, slots=True)
class Choice:
    """What `select` returns: the instance to launch, the launch overrides to pass with it, and why.

    ``raster_along_m`` / ``group_size`` are `launch()`'s overrides of the same names (None: the launch's
    default walk). ``source`` is ``"table"`` or ``"model"``; ``reason`` says which table entries or which
    estimate decided; ``estimate_us`` is the table's interpolated time or the model's estimate (µs, for
    ranking: not a promise)."""

    instance_id: str
    raster_along_m: bool | None
    group_size: int | None
    source: str
    reason: str
    estimate_us: float

    def launch_overrides(self) -> dict:
        """The keyword arguments to pass to `launch()` with ``instance_id``."""
        return {"raster_along_m": self.raster_along_m, "group_size": self.group_size}


def select(
    m: int,
    n: int,
    k: int,
    *,
    a_dtype,
    b_dtype=None,
    d_dtype=None,
    a_major: str = "k",
    b_major: str = "k",
    d_major: str = "n",
    c_dtype=None,
    c_major=None,
    fp8_fast_accum: bool = False,
    batch: int = 1,
    device: int | None = None,
    gpu: str | None = None,
    fp16_accum: bool = False,
    pdl: bool = False,
) -> Choice:
    """The shipped instance (and launch overrides) to run D = A @ B^T (+ C) of this problem with.

    Sizes as in `launch()`: per batch A is m x k, B n x k, D m x n. Dtypes are names ("bf16", "fp16",
    "fp32", "e4m3", "e5m2") or `DType`s; b_dtype defaults to a_dtype, d_dtype to a_dtype for 16-bit
    inputs and to bf16 for fp8 inputs; c_dtype/c_major describe a C operand (c_major defaults to
    d_major); fp8_fast_accum only applies to fp8 inputs. fp16_accum=True (fp16 inputs only) asks for
    an instance that accumulates in fp16: faster on large problems, with an error that grows with K
    (docs/PERF.md); it is never chosen otherwise. Leading dimensions are assumed packed:
    their 16-byte alignment is checked here. device: the CUDA ordinal whose GPU to plan for (None: the
    current context's device, resolved on the first call for these arguments); gpu: plan for a GPU
    by name instead (e.g. "H200"; see runtime/gpus.py), which needs no GPU at all. pdl: the choice is
    for launches with programmatic dependent launch (`launch(..., pdl=True)`, gemm()'s pdl=True): the
    table's rows timed that way decide where they cover the problem (decode sizes), as PDL changes which
    tiles are fastest there (docs/DISPATCH.md).

    Deterministic, cached per argument tuple. Raises `NoInstanceError` (listing the nearest shipped
    instances) when no instance of this dtype/layout/C class ships, `InvalidArgumentError` for bad
    arguments or a contiguous extent that breaks TMA's 16-byte rule."""
    rt = state._default or state.runtime()
    # One tuple (one build, no concatenation): the hit path is what `select()`'s cost is.
    key = (m, n, k, a_dtype, b_dtype, d_dtype, a_major, b_major, d_major, c_dtype, c_major, fp8_fast_accum,
           batch, device, gpu, fp16_accum, pdl)  # fmt: skip
    try:
        choice = rt.choices.get(key)
    except TypeError:  # an unhashable argument: the slow path names it
        choice = None
    # A hit means equal arguments were validated, but 1 == True and 256.0 == 256 hash alike: the hit
    # stands only for exact ints and bools (anything else takes the slow path, which refuses it). Inline,
    # not `problem.exact_ints`: a call is a sixth of a cached select's cost.
    if choice is not None and not (
        int is type(m) is type(n) is type(k) is type(batch)
        and (fp8_fast_accum is True or fp8_fast_accum is False)
        and (fp16_accum is True or fp16_accum is False)
        and (pdl is True or pdl is False)
    ):
        choice = None
    if choice is None:
        if pdl is not False and pdl is not True:
            raise InvalidArgumentError(f"pdl must be a bool, got {pdl!r}", "pass True or False")
        cls = problem_class(
            a_dtype, b_dtype, d_dtype, a_major, b_major, d_major, c_dtype, c_major, fp8_fast_accum, fp16_accum
        )
        # Sizes and packed rows are checked by launch's own rule (runtime/problem.py), on any instance of
        # the class: they all share its dtypes and layouts.
        ops = problem.layouts(instances_of(rt, cls)[0])
        none = (None,) * len(ops)
        v = problem.resolve(None, ops, m, n, k, batch, none, none)
        choice = choose(rt, cls, v["m"], v["n"], v["k"], v["l"], target(rt, device, gpu), pdl)
        rt.choices[key] = choice  # hashable now: every argument was validated above
    return choice


def select_grouped(
    m: int,
    n: int,
    k: int,
    num_groups: int,
    *,
    a_dtype,
    b_dtype=None,
    d_dtype=None,
    a_major: str = "k",
    b_major: str = "k",
    c_dtype=None,
    c_major=None,
    fp8_fast_accum: bool = False,
    gather_a: bool = False,
    varlen: str = "m",
    device: int | None = None,
    gpu: str | None = None,
) -> Choice:
    """The shipped grouped instance to run a grouped GEMM with, the group sizes unknown on the host.

    varlen "m" (a mixture-of-experts layer): `m` rows in all (A is m x k, D m x n, both row-major),
    `num_groups` matrices in B (each n x k, `b_major` "k": K contiguous); `gather_a`: A's rows are
    gathered through an index array (an instance with `_gathera`). varlen "k" (its weight gradient): A is
    m x k and B n x k with `k` the total of all groups' K (`a_major` "k" or "m", `b_major` "k" or "n"),
    D is num_groups m x n matrices, and `gather_a` gathers A's K columns (M-contiguous A).
    c_dtype/c_major: a C operand like D (row-major, c_major "n"); under varlen "k" one per group. Other
    arguments as `select()`.

    The choice assumes groups of the average size (m / num_groups rows, or k / num_groups columns of
    K). Under varlen "m" the tuning table's MoE layers measured on this GPU decide where the table has
    them for the class (runtime/tuning.py `TuningTable.lookup_grouped`: the tiles that ran fastest at
    that group size); otherwise the cost model (runtime/model.py) ranks the class's grouped instances on
    num_groups batches of that size. Cached like `select()`. `NoInstanceError` when no grouped instance
    of the class ships."""
    rt = state.runtime()
    key = ("grouped", m, n, k, num_groups, a_dtype, b_dtype, d_dtype, a_major, b_major, c_dtype, c_major)
    key += (fp8_fast_accum, gather_a, varlen, device, gpu)
    try:
        choice = rt.choices.get(key)
    except TypeError:
        choice = None
    if choice is None:
        if varlen not in ("m", "k"):
            raise InvalidArgumentError(f"varlen={varlen!r}", 'pass "m" (per-group rows) or "k" (per-group K)')
        if type(gather_a) is not bool:
            raise InvalidArgumentError(f"gather_a must be a bool, got {gather_a!r}", "pass True or False")
        base = problem_class(
            a_dtype, b_dtype, d_dtype, a_major, b_major, "n", c_dtype, c_major, fp8_fast_accum
        )
        fields = (getattr(base, f) for f in _CLASS_FIELDS)
        cls = ProblemClass(
            *fields, base.fp8_fast_accum, grouped=varlen == "m", gathered=gather_a, grouped_k=varlen == "k"
        )
        specs = instances_of(rt, cls)
        ops = problem.layouts(specs[0])
        none = (None,) * len(ops)
        problem.check_grouping(None, True, 1, num_groups)
        v = problem.resolve(None, ops, m, n, k, 1, none, none, num_groups)
        gpu_id = target(rt, device, gpu)
        sm_count = gpu_id.sm_count
        table = tuning.shipped_table()
        source = "model"
        if varlen == "m":
            rows = max(1, -(-v["m"] // num_groups))
            allowed = {s.id for s in specs}
            picked = table.lookup_grouped(gpu_id, cls.key, rows, v["n"], v["k"], allowed) if table else None
            if picked is not None:
                # Measured MoE layers rank the class's tiles; the estimate is the model's, for the pick.
                spec = next(s for s in specs if s.id == picked.instance_id)
                us = model.estimate_s(spec, rows, v["n"], v["k"], num_groups, sm_count) * 1e6
                source, why = "table", picked.reason
            else:
                us, spec, why = model.best(specs, rows, v["n"], v["k"], num_groups, sm_count)
            reason = f"groups of {rows} rows on average; {why}"
        else:
            cols = max(1, -(-v["k"] // num_groups))
            us, spec, why = model.best(specs, v["m"], v["n"], cols, num_groups, sm_count)
            reason = f"groups of K = {cols} on average; {why}"
        choice = Choice(spec.id, None, None, source, reason, us)
        rt.choices[key] = choice
    return choice


def problem_class(
    a_dtype, b_dtype, d_dtype, a_major, b_major, d_major, c_dtype, c_major, fp8_fast_accum, fp16_accum=False
) -> ProblemClass:
    """Normalize `select`'s class arguments (defaults, names, enums) into a `ProblemClass`;
    ``InvalidArgumentError`` naming the argument otherwise."""
    a = _field("a_dtype", a_dtype)
    b = _field("b_dtype", a if b_dtype is None else b_dtype)
    d = _field("d_dtype", (DType.bf16 if a.is_float8 else a) if d_dtype is None else d_dtype)
    dm = _field("d_major", d_major)
    c = None if c_dtype is None else _field("c_dtype", c_dtype)
    cm = None if c is None else _field("c_major", dm if c_major is None else c_major)
    if c is None and c_major is not None:
        raise InvalidArgumentError(
            f"c_major={c_major!r} given without c_dtype", "give c_dtype with c_major, or drop c_major"
        )
    if type(fp8_fast_accum) is not bool:
        raise InvalidArgumentError(
            f"fp8_fast_accum must be a bool, got {fp8_fast_accum!r}", "pass True or False"
        )
    fast = fp8_fast_accum and a.is_float8  # fast accumulation is an fp8 WGMMA option; 16-bit has one form
    if type(fp16_accum) is not bool:
        raise InvalidArgumentError(f"fp16_accum must be a bool, got {fp16_accum!r}", "pass True or False")
    if fp16_accum and (a, b) != (DType.fp16, DType.fp16):
        raise InvalidArgumentError(
            f"fp16_accum=True with {a} x {b} inputs: fp16 accumulation takes fp16 inputs",
            "pass fp16_accum=False (or fp16 operands)",
        )
    am, bm = _field("a_major", a_major), _field("b_major", b_major)
    return ProblemClass(a, b, d, am, bm, dm, c, cm, fast, fp16_accum=fp16_accum)


def target(rt, device: int | None, gpu: str | None) -> gpus.GpuId:
    """The GPU to plan for: ``gpu`` by name if given, else CUDA device ``device`` (None: current), with
    as many SMs as this process's grids may use (HGEMM_NUM_SMS)."""
    if gpu is not None:
        if device is not None:
            raise InvalidArgumentError(
                f"both device={device!r} and gpu={gpu!r} given",
                "pass one: device for a GPU here, gpu by name",
            )
        return gpus.named(gpu)
    on_device = gpus.of_device(rt, device)
    cap = rt.knobs.num_sms  # HGEMM_NUM_SMS: this process's grids use at most that many SMs
    return on_device if cap is None or cap >= on_device.sm_count else gpus.GpuId(on_device.name, cap)


def choose(
    rt, cls: ProblemClass, m: int, n: int, k: int, batch: int, gpu: gpus.GpuId, pdl: bool = False
) -> Choice:
    """The uncached choice for validated arguments: table first (its PDL rows for a PDL launch where
    they cover M), then the model, among ``cls``'s instances only."""
    specs = instances_of(rt, cls)
    table = tuning.shipped_table()
    key = cls.key
    if pdl and table and table.covers(gpu, key + tuning.PDL_SUFFIX, m * batch):
        key += tuning.PDL_SUFFIX
    picked = table.lookup(gpu, key, m, n, k, batch, {s.id for s in specs}) if table else None
    if picked is not None:
        return Choice(
            picked.instance_id, picked.raster_along_m, picked.group_size, "table", picked.reason, picked.us
        )
    us, spec, why = model.best(specs, m, n, k, batch, gpu.sm_count)
    return Choice(spec.id, None, None, "model", why, us)


def instances_of(rt, cls: ProblemClass) -> list[GemmSpec]:
    """The shipped instances of class ``cls`` (sorted by id); `NoInstanceError` if there are none."""
    index = rt.instance_classes
    if index is None:
        index = {}
        for _, spec in sorted(rt.manifest.specs.items()):
            index.setdefault(ProblemClass.of(spec), []).append(spec)
        rt.instance_classes = index
    specs = index.get(cls)
    if not specs:
        ranked = sorted(index.items(), key=lambda item: (cls.distance(item[0]), item[0].key))
        nearest = [spec.id for _, group in ranked[:3] for spec in group[:2]][:5]
        raise NoInstanceError(_describe(cls), nearest)
    return specs


def _describe(cls: ProblemClass) -> str:
    text = (
        f"D ({cls.d_dtype}, {cls.d_major}-major) = A ({cls.a_dtype}, {cls.a_major}-major) @ "
        f"B^T ({cls.b_dtype}, {cls.b_major}-major)"
    )
    if cls.c_dtype is not None:
        text += f" + C ({cls.c_dtype}, {cls.c_major}-major)"
    if cls.a_dtype.is_float8:
        text += " with fp8 fast accumulation" if cls.fp8_fast_accum else " with promoted accumulation"
    if cls.fp16_accum:
        text += " with fp16 accumulation"
    return text


def _field(name: str, value):
    try:
        return parse_field(name, value)
    except SpecError as e:
        raise InvalidArgumentError(f"{name}={value!r} is not valid: {e}", f"pass a valid {name}") from None
