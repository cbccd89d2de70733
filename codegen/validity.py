"""What this build's kernel can compile: one list of small predicates, and the shared-memory plan.

Why one source of truth (STYLE P4): the matrix expander drops unsupported combinations with these reasons,
`regen --explain` prints them rule by rule, tests skip with them, and the runtime can raise with them. A
rule returns `None` when the spec passes and otherwise a human reason that names the fix.

To widen the kernel's scope (fp8, other majors, pingpong, ...), edit or delete the rule that says "not yet
supported", in the same change as the kernel. Rules are evaluated in file order; `why_unsupported` reports
the first failure, `check_rules` all of them.
"""

from __future__ import annotations

from collections.abc import Callable

from codegen.spec import AMajor, BMajor, DMajor, DType, GemmSpec, Schedule, default_tile_k

Rule = Callable[[GemmSpec], "str | None"]
RULES: list[tuple[str, Rule]] = []


def _rule(fn: Rule) -> Rule:
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
# Epilogue staging buffers: four 16-bit D sub-tiles (8 KiB each for 128x32) let the TMA stores of a tile
# overlap the next sub-tile's conversion; an fp32 D sub-tile is twice as large, so two keep the A/B ring at
# the same depth (128x256x64: 4 A/B stages either way).
EPI_STAGES_16BIT = 4
EPI_STAGES_32BIT = 2
MIN_AB_STAGES = 2  # fewer than two A/B stages cannot overlap TMA loads with WGMMA at all


def epilogue_tile(spec: GemmSpec) -> tuple[int, int]:
    """The epilogue sub-tile (rows, cols) staged through shared memory on its way to D via TMA store."""
    m = spec.tile[0]
    return (min(m, 128) if m >= 128 else 64, 32)


def ab_stage_bytes(spec: GemmSpec) -> int:
    """Shared memory of one A/B pipeline stage: an M x K tile of A plus an N x K tile of B."""
    m, n, k = spec.tile
    return (m * k * spec.a_dtype.bits + n * k * spec.b_dtype.bits) // 8


def epi_stages(spec: GemmSpec) -> int:
    return EPI_STAGES_16BIT if spec.d_dtype.bits <= 16 else EPI_STAGES_32BIT


def epi_smem_bytes(spec: GemmSpec) -> int:
    """Shared memory of the epilogue: epi_stages() buffers of one epilogue tile of D."""
    em, en = epilogue_tile(spec)
    return em * en * spec.d_dtype.bits // 8 * epi_stages(spec)


def smem_plan(spec: GemmSpec) -> tuple[int, int]:
    """(A/B pipeline stages, epilogue stages) that fit in shared memory.

    The kernel build uses this to size the kernel's pipelines (codegen/dsl.py passes it, with
    `epilogue_tile`, into codegen/kernels/gemm_sm90.py's KernelConfig), and the `smem` rule below rejects
    specs with fewer than MIN_AB_STAGES, so the two can never disagree. The A/B stage count may be 0 or 1
    for an unsupported spec; only the rule decides support.
    """
    budget = SMEM_CAPACITY_BYTES - BARRIER_RESERVE_BYTES - epi_smem_bytes(spec)
    return (max(budget, 0) // ab_stage_bytes(spec), epi_stages(spec))


# --- the rules, in order -------------------------------------------------------------------------------

_HALF = {DType.bf16, DType.fp16}


@_rule
def input_dtypes(s: GemmSpec) -> str | None:
    for op, dt in (("a_dtype", s.a_dtype), ("b_dtype", s.b_dtype)):
        if dt.is_float8:
            return f"{op} {dt}: fp8 inputs: not yet supported by this build's kernel; use bf16 or fp16"
        if dt not in _HALF:
            return f"{op} {dt}: not supported by this build's kernel as an input; use bf16 or fp16"
    return None


@_rule
def same_input_dtype(s: GemmSpec) -> str | None:
    if s.a_dtype != s.b_dtype:
        return (
            f"a_dtype {s.a_dtype} != b_dtype {s.b_dtype}: mixed-input GEMMs are not supported; use one dtype"
        )
    return None


@_rule
def d_dtype(s: GemmSpec) -> str | None:
    if s.d_dtype not in (DType.bf16, DType.fp16, DType.fp32):
        return (
            f"d_dtype {s.d_dtype}: not supported as an output by this build's kernel; use bf16, fp16 or fp32"
        )
    return None


@_rule
def acc_dtype(s: GemmSpec) -> str | None:
    if s.acc_dtype != DType.fp32:
        return f"acc_dtype {s.acc_dtype}: only fp32 accumulation is supported; use acc_dtype fp32"
    return None


@_rule
def a_major(s: GemmSpec) -> str | None:
    if s.a_major != AMajor.k:
        return f"a_major {s.a_major}: not yet supported (this build's kernel reads K-major A); use a_major k"
    return None


@_rule
def b_major(s: GemmSpec) -> str | None:
    if s.b_major != BMajor.k:
        return f"b_major {s.b_major}: not yet supported (this build's kernel reads K-major B); use b_major k"
    return None


@_rule
def d_major(s: GemmSpec) -> str | None:
    if s.d_major != DMajor.n:
        return f"d_major {s.d_major}: not yet supported (this build's kernel writes N-major D); use d_major n"
    return None


@_rule
def tile_m(s: GemmSpec) -> str | None:
    # M = 64 runs one consumer warpgroup, M = 128 two (64 rows each), M = 256 two (128 rows each).
    if s.tile[0] not in (64, 128, 256):
        return (
            f"tile M {s.tile[0]}: must be 64, 128 or 256 (whole 64-row WGMMA atoms per consumer warpgroup); "
            "use one of those"
        )
    return None


@_rule
def tile_n(s: GemmSpec) -> str | None:
    n = s.tile[1]
    # WGMMA allows N in steps of 8 up to 256, but the epilogue stores D in 32-column sub-tiles.
    if n % 32 or not 32 <= n <= 256:
        return (
            f"tile N {n}: must be a multiple of 32 in [32, 256] (WGMMA's N range, in whole 32-column "
            "epilogue sub-tiles); use such an N"
        )
    return None


@_rule
def tile_k(s: GemmSpec) -> str | None:
    want = default_tile_k(s.a_dtype)
    if s.tile[2] != want:
        return (
            f"tile K {s.tile[2]}: must be {want} for {s.a_dtype} inputs (one 128-byte swizzle row); "
            "give the tile as [M, N] to get it"
        )
    return None


@_rule
def schedule(s: GemmSpec) -> str | None:
    if s.schedule != Schedule.cooperative:
        return f"schedule {s.schedule}: not yet supported by this build's kernel; use cooperative"
    return None


@_rule
def cluster_dims(s: GemmSpec) -> str | None:
    if any(c not in (1, 2, 4) for c in s.cluster):
        return f"cluster {s.cluster[0]}x{s.cluster[1]}: each dimension must be 1, 2 or 4; use those sizes"
    return None


@_rule
def cluster_size(s: GemmSpec) -> str | None:
    size = s.cluster[0] * s.cluster[1]
    if size > 4:
        return (
            f"cluster {s.cluster[0]}x{s.cluster[1]}: {size} CTAs exceeds this kernel's TMA multicast "
            "limit of 4; use a cluster of at most 4 CTAs"
        )
    return None


@_rule
def smem(s: GemmSpec) -> str | None:
    ab_stages, _ = smem_plan(s)
    if ab_stages < MIN_AB_STAGES:
        return (
            f"shared memory: {ab_stage_bytes(s)} B per A/B stage leaves room for {ab_stages} stage(s) "
            f"(need {MIN_AB_STAGES}) next to a {epi_smem_bytes(s)} B epilogue; use a smaller tile"
        )
    return None
