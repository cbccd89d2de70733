"""What this build's kernel can compile: one list of small predicates, and the shared-memory plan.

Why one source of truth: the matrix expander drops unsupported combinations with these reasons,
`regen --explain` prints them rule by rule, tests skip with them, and the runtime can raise with them. A
rule returns `None` when the spec passes and otherwise a human reason that names the fix.

The scope is the seed kernel's dense feature set: bf16/fp16 inputs in every A/B/D layout, fp8 (e4m3/e5m2,
mixed) K-major inputs with fast or promoted accumulation, fp32 accumulation, an optional 16/32-bit C
operand, cooperative and ping-pong schedules. Closed sets the enums already enforce (A major k/m, B major
k/n, D and C major n/m, the two schedules) need no rule here. To widen the scope, edit the rule in the same
change as the kernel. Rules are evaluated in file order; `why_unsupported` reports the first failure,
`check_rules` all of them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from runtime.spec import AMajor, BMajor, DMajor, DType, GemmSpec, KSplit, Schedule, Varlen, mma_k

Rule = Callable[[GemmSpec], "str | None"]
RULES: list[tuple[str, Rule]] = []


def _rule(fn: Rule) -> Rule:
    """Register a rule about the kernel: it judges the spec the kernel is compiled from
    (`GemmSpec.kernel_spec()`, the transposed problem of a swap-AB instance)."""
    RULES.append((fn.__name__, lambda spec: fn(spec.kernel_spec())))
    return fn


def _instance_rule(fn: Rule) -> Rule:
    """Register a rule about the instance as the caller sees it (e.g. what swap-AB allows)."""
    RULES.append((fn.__name__, fn))
    return fn


def why_unsupported(spec: GemmSpec) -> str | None:
    """The first reason this build's kernel cannot compile `spec`, or None if it can."""
    for _, rule in RULES:
        reason = rule(spec)
        if reason is not None:
            return reason
    return None


def check_rules(spec: GemmSpec) -> list[tuple[str, str | None]]:
    """Every rule's verdict, in order: (rule name, None if passed else reason). For `--explain` and tests."""
    return [(name, rule(spec)) for name, rule in RULES]


# --- shared memory plan (codegen/dsl.py feeds smem_plan + epilogue_tile to the kernel: the only place) ---

# sm_90 opt-in maximum of dynamic shared memory per block: 227 KiB (cudaDevAttrMaxSharedMemoryPerBlockOptin).
SMEM_CAPACITY_BYTES = 232448
# Pipeline mbarriers, scheduler and bookkeeping storage, rounded up to the 1024-byte alignment that
# 128-byte-swizzled TMA buffers need.
BARRIER_RESERVE_BYTES = 1024
# Split-K and stream-K kernels keep one more word in shared memory, the arrival count a CTA broadcasts to
# its consumer warpgroups, after the 1024-byte aligned buffers (codegen/kernels/gemm_sm90.py's
# SharedStorage): the storage then ends on the next 1024-byte boundary. Without it in the plan a 128 x 112
# split tile planned exactly 227 KiB and asked the driver for 1 KiB more (found on the H200, 2026-12-02).
SPLIT_ARRIVAL_RESERVE_BYTES = 1024
# Epilogue staging buffers: four 16-bit (or 8-bit) D sub-tiles (8 KiB each for 128x32 bf16) let the TMA
# stores of a tile overlap the next sub-tile's conversion; an fp32 D sub-tile is twice as large, so two keep
# the A/B ring at the same depth (128x256x64: 4 A/B stages either way).
EPI_STAGES_16BIT = 4
EPI_STAGES_32BIT = 2
# C sub-tiles are loaded by TMA one epilogue sub-tile ahead of their use: double buffering is enough to
# hide the load behind the previous sub-tile's math and store.
C_STAGES = 2
MIN_AB_STAGES = 2  # fewer than two A/B stages cannot overlap TMA loads with WGMMA at all


class SmemPlan(NamedTuple):
    """Pipeline depths sized from the shared-memory budget (codegen/dsl.py passes them to the kernel)."""

    ab_stages: int  # A/B mainloop stages
    epi_stages: int  # D epilogue staging buffers
    c_stages: int  # C epilogue load buffers (0: the spec reads no C)


def epilogue_tile(spec: GemmSpec) -> tuple[int, int]:
    """The epilogue sub-tile (rows, cols) staged through shared memory between registers and C/D (TMA).

    Every warpgroup that shares the tile stores 64 rows of each sub-tile: 64 rows when one warpgroup owns
    the tile (M = 64, or ping-pong, where each warpgroup runs its own tile's epilogue), 128 for the two
    cooperative warpgroups of M = 128/256, 192 for the three of M = 192; under the N split of 192 x 256
    each warpgroup stores its own column half in 64-row sub-tiles. 32 columns keep the staging buffers
    small enough for deep pipelines; narrow tiles (N = 8 .. 24, or N not a multiple of 32) store in
    16- or 8-column sub-tiles, the widest that divides N.
    """
    n = spec.tile[1] // mma_atom_layout(spec)[1]
    return (64 * mma_atom_layout(spec)[0], next(w for w in (32, 16, 8) if n % w == 0))


def ab_stage_bytes(spec: GemmSpec) -> int:
    """Shared memory of one A/B pipeline stage: an M x K tile of A plus an N x K tile of B (own widths)."""
    m, n, k = spec.tile
    return (m * k * spec.a_dtype.bits + n * k * spec.b_dtype.bits) // 8


def epi_stages(spec: GemmSpec) -> int:
    return EPI_STAGES_16BIT if spec.d_dtype.bits <= 16 else EPI_STAGES_32BIT


def c_stages(spec: GemmSpec) -> int:
    return C_STAGES if spec.has_c else 0


def epi_buffer_sets(spec: GemmSpec) -> int:
    """Sets of epilogue staging buffers: one per warpgroup that stores a column part on its own."""
    return mma_atom_layout(spec)[1]


def epi_smem_bytes(spec: GemmSpec) -> int:
    """Shared memory of the D epilogue: epi_stages() buffers of one epilogue tile of D (per buffer set)."""
    em, en = epilogue_tile(spec)
    return em * en * spec.d_dtype.bits // 8 * epi_stages(spec) * epi_buffer_sets(spec)


def c_smem_bytes(spec: GemmSpec) -> int:
    """Shared memory of the C epilogue loads: c_stages() buffers of one epilogue tile of C (0 without C)."""
    if spec.c_dtype is None:
        return 0
    em, en = epilogue_tile(spec)
    return em * en * spec.c_dtype.bits // 8 * c_stages(spec) * epi_buffer_sets(spec)


def bookkeeping_bytes(spec: GemmSpec) -> int:
    """Shared memory outside the A/B, D and C buffers: the barriers, and split-K's arrival word."""
    return BARRIER_RESERVE_BYTES + (SPLIT_ARRIVAL_RESERVE_BYTES if spec.k_split != KSplit.none else 0)


def ab_budget_bytes(spec: GemmSpec) -> int:
    """What is left for the A/B ring after the bookkeeping and the epilogue's D and C buffers."""
    return SMEM_CAPACITY_BYTES - bookkeeping_bytes(spec) - epi_smem_bytes(spec) - c_smem_bytes(spec)


def smem_plan(spec: GemmSpec) -> SmemPlan:
    """The pipeline depths that fit in shared memory.

    The kernel build uses this to size the kernel's pipelines (codegen/dsl.py passes it, with
    `epilogue_tile`, into codegen/kernels/gemm_sm90.py's KernelConfig), and the `smem` rule below rejects
    specs with fewer than MIN_AB_STAGES, so the two can never disagree. The A/B stage count may be 0 or 1
    for an unsupported spec; only the rule decides support.
    """
    ab = max(ab_budget_bytes(spec), 0) // ab_stage_bytes(spec)
    return SmemPlan(ab_stages=ab, epi_stages=epi_stages(spec), c_stages=c_stages(spec))


def planned_smem_bytes(spec: GemmSpec) -> int:
    """The dynamic shared memory the kernel of this (kernel) spec asks for under `smem_plan`: the build's
    contract check (codegen/contract.py) holds every compiled kernel to it, so a kernel whose shared
    storage outgrows the plan fails its build instead of its first launch."""
    plan = smem_plan(spec)
    return (
        plan.ab_stages * ab_stage_bytes(spec)
        + epi_smem_bytes(spec)
        + c_smem_bytes(spec)
        + bookkeeping_bytes(spec)
    )


# --- registers -------------------------------------------------------------------------------------------

# The register file holds 65536 32-bit registers per SM, and one CTA runs per SM. `setmaxnreg` moves them
# from the producer warpgroup (TMA issue needs few) to the consumer warpgroups, which hold the accumulators:
# one or two consumer warpgroups get 232 each (40 * 128 + 2 * 232 * 128 <= 65536), three get 160 each
# (32 * 128 + 3 * 160 * 128 = 65536). The seed kernel uses the same splits. gemm_sm90.py takes them from
# here (through codegen/dsl.py: that module needs cutlass, this one must not).
PRODUCER_REGS = {1: 40, 2: 40, 3: 32}  # by consumer warpgroups per CTA
CONSUMER_REGS = {1: 232, 2: 232, 3: 160}
# Gathered A: every producer thread keeps its tile rows' source indices for the current and the next tile
# and issues the cp.async copies; 40 registers spilled 24-32 bytes per thread (128 x 256 tiles,
# 2026-12-01). 56 + 2 x 224 fills the register file as 40 + 2 x 232 does.
GATHER_PRODUCER_REGS = {1: 56, 2: 56}
GATHER_CONSUMER_REGS = {1: 232, 2: 224}
# What a consumer thread needs besides accumulators: fragment descriptors, pipeline and scheduler state,
# the epilogue's converted values. The fp32 accumulators may take the rest. (The build records each
# cubin's spill bytes; the shipped matrix has none.)
NON_ACC_REGS = 32
# fp8 promoted accumulation's k-tile accumulators are live in the mainloop only, where a consumer thread
# needs little besides them (WGMMA descriptors, pipeline and loop state); the epilogue runs after they are
# dead. So a second k-tile buffer (which lets the WGMMAs of one k-tile run while the other is promoted) is
# planned against this smaller margin: 128 x 144 with 72 + 2 x 72 = 216 accumulator registers compiles at
# 232 without spills (ptxas, 2026-12-01; the build's spill check guards it).
PROMOTED_MAINLOOP_REGS = 16


class RegisterPlan(NamedTuple):
    """How one spec uses the register file (codegen/dsl.py passes it into the kernel's KernelConfig)."""

    consumer_wgs: int  # consumer warpgroups per CTA (the producer warpgroup comes on top)
    producer_regs: int  # per producer thread after setmaxnreg
    consumer_regs: int  # per consumer thread after setmaxnreg
    acc_regs: int  # registers of the tile accumulator per consumer thread (acc_regs())
    k_acc_buffers: int  # fp8 promoted accumulation: per-k-tile accumulators (0 without promotion)

    @property
    def acc_budget(self) -> int:
        """Registers per consumer thread that the accumulators may take."""
        return self.consumer_regs - NON_ACC_REGS

    @property
    def acc_total(self) -> int:
        """Registers per consumer thread that all accumulators take (the tile's plus the k-tile buffers)."""
        return self.acc_regs * (1 + self.k_acc_buffers)

    @property
    def acc_limit(self) -> int:
        """What `acc_total` may reach: `acc_budget`, or with two k-tile buffers (live in the mainloop
        only) the consumer's registers less PROMOTED_MAINLOOP_REGS."""
        if self.k_acc_buffers == 2:
            return self.consumer_regs - PROMOTED_MAINLOOP_REGS
        return self.acc_budget


def consumer_wgs_per_tile(spec: GemmSpec) -> int:
    """How many 128-thread consumer warpgroups share one CTA tile's accumulator.

    Cooperative tiles split their rows between the consumer warpgroups, one 64-row WGMMA atom row each
    where M allows: M = 64 has one warpgroup, M = 192 three, M = 128 and 256 two. In ping-pong each
    warpgroup owns a whole tile.
    """
    if spec.schedule != Schedule.cooperative:
        return 1
    if n_split(spec):
        return 2
    return {64: 1, 192: 3}.get(spec.tile[0], 2)


def n_split(spec: GemmSpec) -> bool:
    """Cooperative 192 x 256 and 320 x N: two consumer warpgroups split the tile's columns (each owns
    192 x 128, or 320 x N/2, and stores it with its own epilogue), as the seed does: three 64-row
    warpgroups cannot hold 192 x 256 (the tile_n rule), and 320 rows are five 64-row atoms, which two
    warpgroups cannot share along M."""
    if spec.schedule != Schedule.cooperative:
        return False
    return (spec.tile[0], spec.tile[1]) == (192, 256) or spec.tile[0] == 320


def mma_atom_layout(spec: GemmSpec) -> tuple[int, int]:
    """How the consumer warpgroups sharing a tile are laid out over it, in WGMMA atoms along (M, N)."""
    return (1, 2) if n_split(spec) else (consumer_wgs_per_tile(spec), 1)


def consumer_wgs_per_cta(spec: GemmSpec) -> int:
    """Consumer warpgroups per CTA: ping-pong always runs two (on alternate tiles)."""
    return 2 if spec.schedule == Schedule.pingpong else consumer_wgs_per_tile(spec)


def acc_regs(spec: GemmSpec) -> int:
    """Accumulator registers per consumer thread for one tile: one per fp32 value, one per two fp16
    values (WGMMA packs an fp16 accumulator two to a register)."""
    m, n, _ = spec.tile
    return m * n // (128 * consumer_wgs_per_tile(spec)) * spec.acc_dtype.bits // 32


def fp8_promoted(spec: GemmSpec) -> bool:
    """fp8 inputs with the slow, periodically promoted accumulation (extra per-k-tile accumulators)."""
    return spec.a_dtype.is_float8 and not spec.fp8_fast_accum


def register_plan(spec: GemmSpec) -> RegisterPlan:
    """The register split and the accumulator buffering of a spec.

    fp8 promoted accumulation runs each k-tile's WGMMAs into a fresh accumulator and adds it into the tile's
    fp32 accumulator once complete. Two such buffers let the WGMMAs of one k-tile run while the other's
    result is promoted; with one, the tensor cores idle during every promotion. Two are used where they fit
    (`RegisterPlan.acc_limit`), else one; the `acc_registers` rule rejects specs whose accumulators do not
    fit at all.
    """
    wgs = consumer_wgs_per_cta(spec)
    producer, consumer = PRODUCER_REGS, CONSUMER_REGS
    if spec.gather_a and wgs in GATHER_PRODUCER_REGS:
        producer, consumer = GATHER_PRODUCER_REGS, GATHER_CONSUMER_REGS
    plan = RegisterPlan(wgs, producer[wgs], consumer[wgs], acc_regs(spec), 0)
    if fp8_promoted(spec):
        double = plan._replace(k_acc_buffers=2)
        plan = double if double.acc_total <= double.acc_limit else plan._replace(k_acc_buffers=1)
    return plan


# --- the rules, in order -------------------------------------------------------------------------------

_HALF = frozenset({DType.bf16, DType.fp16})
_FP8 = frozenset({DType.e4m3, DType.e5m2})
_OUT16 = (DType.bf16, DType.fp16, DType.fp32)
_OUT8 = (*_OUT16, DType.e4m3, DType.e5m2)


def _names(dtypes) -> str:
    *rest, last = [str(d) for d in dtypes]
    return f"{', '.join(rest)} or {last}" if rest else last


@_rule
def input_dtypes(s: GemmSpec) -> str | None:
    for op, dt in (("a_dtype", s.a_dtype), ("b_dtype", s.b_dtype)):
        if dt not in _HALF | _FP8:
            return f"{op} {dt}: not supported as a GEMM input (no tf32 path); use bf16, fp16, e4m3 or e5m2"
    return None


@_rule
def input_widths(s: GemmSpec) -> str | None:
    # WGMMA takes A and B of one width: 16-bit x 16-bit or 8-bit x 8-bit.
    if s.a_dtype.bits != s.b_dtype.bits:
        return (
            f"a_dtype {s.a_dtype} x b_dtype {s.b_dtype}: WGMMA cannot mix a 16-bit with an 8-bit input; "
            "use two 16-bit or two fp8 inputs (cast the other operand)"
        )
    return None


@_rule
def same_16bit_inputs(s: GemmSpec) -> str | None:
    # fp8 pairs may differ (e4m3 x e5m2 is a WGMMA type); 16-bit pairs may not (no bf16 x fp16 WGMMA).
    if s.a_dtype in _HALF and s.a_dtype != s.b_dtype:
        return (
            f"a_dtype {s.a_dtype} != b_dtype {s.b_dtype}: 16-bit inputs must have one dtype (WGMMA has no "
            "bf16 x fp16 form); use the same dtype for A and B"
        )
    return None


@_rule
def fp8_k_major(s: GemmSpec) -> str | None:
    if s.a_dtype.is_float8 and (s.a_major != AMajor.k or s.b_major != BMajor.k):
        return (
            f"a_major {s.a_major}, b_major {s.b_major} with {s.a_dtype} x {s.b_dtype}: fp8 WGMMA reads "
            "K-major A and B only; use a_major k and b_major k (transpose the operand beforehand)"
        )
    return None


@_rule
def acc_dtype(s: GemmSpec) -> str | None:
    # fp16 accumulation (WGMMA's .f16 accumulator, two values per register): for fp16 inputs, where the
    # instruction has it (bf16 has none); fp8 keeps fp32 here (its promoted path adds fp32 k-tile sums).
    # The split-K partials, the grouped walks and swap-AB are built and tested with fp32 only.
    if s.acc_dtype == DType.fp32:
        return None
    if s.acc_dtype != DType.fp16:
        return f"acc_dtype {s.acc_dtype}: accumulation is fp32 (or fp16 for fp16 inputs); use acc_dtype fp32"
    if (s.a_dtype, s.b_dtype) != (DType.fp16, DType.fp16):
        return (
            f"acc_dtype fp16 with {s.a_dtype} x {s.b_dtype}: fp16 accumulation takes fp16 inputs (WGMMA "
            "has no fp16 accumulator for bf16, and fp8 accumulates in fp32 here); use acc_dtype fp32"
        )
    if s.k_split != KSplit.none or s.varlen != Varlen.none or s.swap_ab:
        return (
            "acc_dtype fp16 with split-K, a grouped walk or swap-AB: those paths are built for fp32 "
            "accumulators only; use acc_dtype fp32"
        )
    return None


@_rule
def d_dtype(s: GemmSpec) -> str | None:
    # fp8 D is offered only for fp8 inputs: a 16-bit GEMM that wants fp8 out is a quantization step
    # (scales, amax) this kernel's epilogue does not do.
    allowed = _OUT8 if s.a_dtype.is_float8 else _OUT16
    if s.d_dtype not in allowed:
        return f"d_dtype {s.d_dtype}: not an output for {s.a_dtype} inputs; use {_names(allowed)}"
    return None


@_rule
def c_dtype(s: GemmSpec) -> str | None:
    # C is read into fp32 registers next to the accumulator; an 8-bit C would need scaling to be useful.
    if s.c_dtype is not None and s.c_dtype not in _OUT16:
        return f"c_dtype {s.c_dtype}: 8-bit C operands are not supported; use c_dtype {_names(_OUT16)}"
    return None


@_rule
def fast_accum(s: GemmSpec) -> str | None:
    if s.fp8_fast_accum and not s.a_dtype.is_float8:
        return (
            f"fp8_fast_accum with {s.a_dtype} inputs: fast accumulation is an fp8 option (16-bit inputs "
            "always accumulate exactly in fp32); use fp8_fast_accum false"
        )
    return None


@_rule
def tile_m(s: GemmSpec) -> str | None:
    # Whole 64-row WGMMA atoms per consumer warpgroup (see consumer_wgs_per_tile; 320 rows: each of two
    # warpgroups runs all five atom rows over half the columns, n_split). Ping-pong: each warpgroup owns
    # a whole tile, so at most 192 rows (the acc_registers rule bounds M x N further).
    allowed = (64, 128, 192, 256, 320) if s.schedule == Schedule.cooperative else (64, 128, 192)
    if s.tile[0] not in allowed:
        return (
            f"tile M {s.tile[0]}: must be {', '.join(map(str, allowed))} for the {s.schedule} schedule "
            "(whole 64-row WGMMA atoms per consumer warpgroup); use one of those"
        )
    return None


@_rule
def tile_n(s: GemmSpec) -> str | None:
    n = s.tile[1]
    # WGMMA takes N in steps of 8 up to 256; the epilogue stores whole 8-, 16- or 32-column sub-tiles
    # (epilogue_tile). Until 2026-12-03 odd multiples of 8 past 8 (24, 72, 88, ...) aborted the DSL's trace:
    # its slice of a staged swizzled layout whose rows span an odd number of 8-row swizzle atoms aborts
    # (nvidia-cutlass-dsl 4.8.1); the kernel slices under the swizzle instead (gemm_sm90.py `_one_stage`).
    if not (n % 8 == 0 and 8 <= n <= 256):
        return f"tile N {n}: must be a multiple of 8 in [8, 256]; use such an N"
    # Cooperative M = 192 splits its rows over three consumer warpgroups: a 512-thread CTA, which ptxas
    # compiles under a 128-register launch bound. One WGMMA of N >= 224 needs more than that in a single
    # instruction (measured: ptxas C7602 "Insufficient registers (128)" for N = 224 and 256; N = 160 and
    # 192 build without spills). N = 256 splits its columns over two warpgroups instead (n_split, as the
    # seed does); the kernel splits no other N.
    if s.schedule == Schedule.cooperative and s.tile[0] == 192 and n > 192 and not n_split(s):
        return (
            f"tile N {n} with cooperative M = 192: three consumer warpgroups (a 512-thread CTA, compiled "
            "under a 128-register bound) cannot hold one WGMMA of N > 192, and only N = 256 splits into "
            "two warpgroups' halves; use N <= 192 or N = 256"
        )
    # Cooperative M = 320: each warpgroup holds 320 x N/2 accumulators, 1.25 N per thread, so N <= 160
    # (200 registers, the cooperative budget); the halves are 16-column multiples for the epilogue's
    # sub-tiles, as the seed asks (N a multiple of 32).
    if s.schedule == Schedule.cooperative and s.tile[0] == 320 and not (n % 32 == 0 and n <= 160):
        return (
            f"tile N {n} with cooperative M = 320: two warpgroups split the columns and each holds "
            "320 x N/2 accumulators, so N must be a multiple of 32 and at most 160; use such an N"
        )
    return None


@_rule
def tile_k(s: GemmSpec) -> str | None:
    # 2, 4 or 8 WGMMA k-steps: 64, 128 or 256 bytes of K per A/B row. The default (4) is one 128-byte
    # swizzle row; 2 suits tiles too big for several stages, 8 halves the barrier traffic per FLOP.
    step = mma_k(s.a_dtype)
    allowed = (2 * step, 4 * step, 8 * step)
    if s.tile[2] not in allowed:
        return (
            f"tile K {s.tile[2]}: must be 2, 4 or 8 MMA k-steps of {step} for {s.a_dtype} inputs, i.e. "
            f"{', '.join(map(str, allowed))}; use one of those (or give the tile as [M, N] for "
            f"{allowed[1]})"
        )
    return None


@_rule
def acc_registers(s: GemmSpec) -> str | None:
    plan = register_plan(s)
    m, n, _ = s.tile
    share = f"{m}x{n} / (128 threads x {consumer_wgs_per_tile(s)} consumer warpgroup(s))"
    why = (
        f"the register file is 65536 per SM; {plan.consumer_wgs} consumer warpgroup(s) get "
        f"{plan.consumer_regs} registers per thread after setmaxnreg, of which the accumulators may take "
        f"{plan.acc_budget}"
    )
    if plan.acc_total <= plan.acc_limit:
        return None
    if fp8_promoted(s):
        return (
            f"accumulator registers: fp8 promoted (slow) accumulation keeps the tile accumulator and at "
            f"least one k-tile accumulator, 2 x {plan.acc_regs} fp32 values per consumer thread ({share}) "
            f"> {plan.acc_budget}: {why}; use fp8_fast_accum true or a smaller tile"
        )
    return (
        f"accumulator registers: a {s.schedule} {m}x{n} tile holds {plan.acc_regs} registers of "
        f"{s.acc_dtype} values per consumer thread ({share}) > {plan.acc_budget}: {why}; use a smaller "
        "tile (or cooperative for M >= 128)"
    )


@_rule
def cluster_dims(s: GemmSpec) -> str | None:
    if any(c not in (1, 2, 4) for c in s.cluster):
        return f"cluster {s.cluster[0]}x{s.cluster[1]}: each dimension must be 1, 2 or 4; use those sizes"
    return None


@_rule
def cluster_size(s: GemmSpec) -> str | None:
    size = s.cluster[0] * s.cluster[1]
    # 8 is the portable cluster size (larger ones need an opt-in and may not be schedulable). 2x4 and 4x2
    # passed the numerics tier on the H200 (session 23); 2x4 ships (kernel_specs.yaml `narrow64`).
    if size > 8:
        return (
            f"cluster {s.cluster[0]}x{s.cluster[1]}: {size} CTAs exceeds the portable cluster size of 8; "
            "use a cluster of at most 8 CTAs"
        )
    return None


@_rule
def smem(s: GemmSpec) -> str | None:
    plan = smem_plan(s)
    if plan.ab_stages < MIN_AB_STAGES:
        c = f" and a {c_smem_bytes(s)} B C buffer" if s.has_c else ""
        return (
            f"shared memory: {ab_stage_bytes(s)} B per A/B stage leaves room for {plan.ab_stages} stage(s) "
            f"(need {MIN_AB_STAGES}) next to a {epi_smem_bytes(s)} B epilogue{c}; use a smaller tile "
            "(M, N or K)"
        )
    return None


@_instance_rule
def swap_ab(s: GemmSpec) -> str | None:
    # Swap-AB serves small M (decode sizes, and M = 256-512 with 128-row kernel tiles): the problem's M
    # spans one or a few kernel tile columns (the kernel's N), so CTAs paired along it (cluster N) would
    # mostly pair a CTA with an idle one. Pairs along the weight (cluster M, 2x1) share the activation
    # tile by multicast: they win some M = 256-512 problems (128 x 96 tiles), not decode sizes
    # (docs/PERF.md, session 15).
    if s.swap_ab and (s.cluster[1] != 1 or s.cluster[0] > 2):
        return (
            f"swap_ab with cluster {s.cluster[0]}x{s.cluster[1]}: swap-AB instances run 1x1 or 2x1 clusters "
            "(a pair along the weight shares the small activation tile); use cluster [1, 1] or [2, 1]"
        )
    return None


@_instance_rule
def k_split(s: GemmSpec) -> str | None:
    # Split-K serves problems with too few output tiles. The kernel's reduction (the last unit of a tile
    # to arrive adds the partials, codegen/kernels/epilogue.py's _reduce_parts) is written for one tile
    # per CTA with all consumer warpgroups on it and the plain D = alpha * acc epilogue. In a cluster
    # every CTA runs the same k-range of its own tile and reduces that tile (multicast keeps the operand
    # traffic of a cluster tile: a 1x1 tile split over many SMs is limited by L2, docs/PERF.md session 17).
    # Stream-K serves problems whose tiles do not fill whole waves, with the same reduction.
    if s.k_split == KSplit.none:
        return None
    if s.schedule != Schedule.cooperative:
        return (
            f"k_split {s.k_split} with the ping-pong schedule: split-K and stream-K run cooperative tiles "
            "(the reduction takes all consumer warpgroups); use cooperative"
        )
    if s.has_c:
        return (
            f"k_split {s.k_split} with a C operand: split-K and stream-K instances compute "
            "D = alpha * A @ B^T; drop c_dtype"
        )
    if s.k_split == KSplit.stream:
        return None
    if s.swap_ab and s.cluster != (1, 1):
        return (
            f"k_split split with swap_ab and cluster {s.cluster[0]}x{s.cluster[1]}: swap-AB split-K "
            "instances (decode sizes) run 1x1 clusters; use cluster [1, 1]"
        )
    return None


@_instance_rule
def varlen(s: GemmSpec) -> str | None:
    # Grouped GEMM (varlen M): each tile belongs to one group; A's rows are read with the whole-tensor TMA
    # descriptor at the group's row offset (rows past the group's end are loaded but never stored), and D
    # is copied from the staging buffers to global memory with a row bound per group; C, when read, by
    # its whole-tensor descriptor at the group's row offset like A. Built for row-major A, D and C (the
    # layout of concatenated tokens) and one tile's K loop per CTA visit.
    if s.varlen == Varlen.k:
        return _varlen_k(s)
    if s.varlen != Varlen.m:
        return None
    if s.a_major != AMajor.k or s.d_major != DMajor.n:
        return (
            f"varlen m with majors {s.a_major}{s.b_major}{s.d_major}: grouped instances take row-major "
            "A and D (tokens concatenated by rows); use a_major k and d_major n"
        )
    if s.swap_ab:
        return "varlen m with swap_ab: a grouped instance walks each group's row tiles itself; drop swap_ab"
    if s.k_split != KSplit.none:
        return f"varlen m with k_split {s.k_split}: grouped instances do not split K; use k_split none"
    if s.has_c and s.c_major != DMajor.n:
        return (
            f"varlen m with c_major {s.c_major}: C is read like D, by the group's rows (row-major); use "
            "c_major n"
        )
    return None


def _varlen_k(s: GemmSpec) -> str | None:
    # Grouped GEMM with a per-group K (the weight gradient): every group has the whole M x N tile grid
    # (D holds one result per group, stored by TMA as a batch), and each tile's K loop covers its group's
    # K range; the last k-tile of a group is cut short by zeroing A's columns past the range in shared
    # memory, which the cooperative mainloop does (one tile per CTA, plain or fast accumulation).
    if s.schedule != Schedule.cooperative:
        return (
            "varlen k with the ping-pong schedule: grouped-K instances run cooperative tiles; use cooperative"
        )
    if s.cluster != (1, 1):
        return (
            f"varlen k with cluster {s.cluster[0]}x{s.cluster[1]}: grouped-K instances run 1x1 clusters "
            "(each CTA trims its own A stage); use cluster [1, 1]"
        )
    if fp8_promoted(s):
        return (
            "varlen k with fp8 promoted accumulation: the group's last k-tile is trimmed in the plain "
            "mainloop only; use fp8_fast_accum true"
        )
    if s.swap_ab or s.k_split != KSplit.none:
        return (
            "varlen k with swap_ab or split-K: grouped-K instances compute D[g] = alpha * A @ B^T "
            "(+ beta * C[g]); drop them"
        )
    return None


@_instance_rule
def gather_a(s: GemmSpec) -> str | None:
    # Gathered A rows are loaded by cp.async from the producer threads in a 1x1 cluster (TMA cannot gather
    # rows on sm_90), or (varlen M) in a 1x2 pair on the same rows, where each CTA loads half of them as
    # one-row TMA boxes multicast to both (a box lands where a whole-tile load would put its row only when
    # a row of the k-tile is one 128-byte swizzle row); only the grouped walks pass the indices.
    # Under varlen K the gathered index is a K position: each copies a column of A in 16-byte pieces of M,
    # so M must be contiguous.
    if not s.gather_a:
        return None
    if s.varlen == Varlen.none:
        return "gather_a without varlen: gathered A belongs to grouped instances; set varlen m (or k)"
    if s.varlen == Varlen.k and s.a_major != AMajor.m:
        return (
            f"gather_a with varlen k and a_major {s.a_major}: gathered K positions are copied as columns "
            "of A in 16-byte pieces of M; use a_major m"
        )
    if s.varlen == Varlen.k and s.has_c:
        return "gather_a with varlen k and a C operand: not built; drop c_dtype"
    if s.cluster == (1, 2) and s.varlen == Varlen.m:
        row_bytes = s.tile[2] * s.a_dtype.bits // 8
        if row_bytes != 128:
            return (
                f"gather_a with cluster 1x2 and a {row_bytes}-byte k-tile row: the pair loads its rows as "
                "one-row boxes of one 128-byte swizzle row each; use tile K = 128 bytes of A"
            )
        return None
    if s.cluster != (1, 1):
        return (
            f"gather_a with cluster {s.cluster[0]}x{s.cluster[1]}: gathered rows are loaded by each CTA "
            "(cp.async, no multicast); use cluster [1, 1], or [1, 2] under varlen m"
        )
    return None
