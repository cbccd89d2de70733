"""The one thin adapter between hgemm-sm90 and the CuTe DSL (no monkeypatching of the DSL).

Everything that touches `cutlass` at build time goes through here: environment set-up for CPU
cross-compilation, dtype mapping, the fake (symbolic) tensors a compile is traced with, and the artifacts a
compile produces. The DSL is imported lazily so that spec expansion, `regen --list` and the tests that do
not compile never pay its ~2 s import.

Measured facts this relies on (nvidia-cutlass-dsl 4.8.1, 2026-11-29):
- `CUTE_DSL_ARCH=sm_90a` cross-compiles on a CPU-only machine with fake tensors and a fake stream.
- With `CUTE_DSL_KEEP=cubin` set before `import cutlass`, `compiled.__cubin__` holds the cubin bytes.
- `compiled.export_to_c(dir, name, prefix)` writes the host code as `<name>.o` + `<name>.h`; the tests run
  that object against a stub CUDA runtime as the oracle for the runtime's argument packing.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from runtime.spec import DType, GemmSpec, KSplit, Schedule, Varlen


def host_scalars(spec: GemmSpec) -> tuple[tuple[str, str], ...]:
    """The host entry's scalar arguments after the tensors, in order, as (name, kind): kind "f32" is a
    cutlass.Float32, "i32" a cutlass.Int32. Kept here (not only in the kernel) because the contract capture
    and the oracle tests build the same call. `beta` exists only when C is read (D = alpha * acc
    otherwise); `prefetch_operand` (the operand the producer may load before waiting for the previous
    grid) exists for the plain walk only, not for the grouped forms, whose first loads depend on offsets
    that the previous grid may write; `max_active_clusters` sizes the grid on the host and never reaches
    the kernel; split-K instances add `k_splits` (followed by the workspace pointer, `host_pointers`; stream-K
    instances take the pointer alone)."""
    beta = (("beta", "f32"),) if spec.has_c else ()
    prefetch = (("prefetch_operand", "i32"),) if spec.varlen == Varlen.none else ()
    split = (("k_splits", "i32"),) if spec.k_split == KSplit.split else ()
    return (
        ("alpha", "f32"),
        *beta,
        ("raster_along_m", "i32"),
        ("group_size", "i32"),
        *prefetch,
        ("max_active_clusters", "i32"),
        *split,
    )


def host_pointers(spec: GemmSpec) -> tuple[str, ...]:
    """The host entry's raw device-pointer arguments after the scalars, in order (before the stream):
    split-K and stream-K instances take their fp32 workspace, grouped (varlen M) instances their int32 row
    offsets."""
    if spec.k_split != KSplit.none:
        return ("workspace",)
    if spec.varlen == Varlen.m:
        return ("cu_seqlens_m", "a_idx") if spec.gather_a else ("cu_seqlens_m",)
    if spec.varlen == Varlen.k:
        return ("cu_seqlens_k", "a_idx") if spec.gather_a else ("cu_seqlens_k",)
    return ()


# Each raw pointer's element type (a DSL type name) and the byte alignment the runtime guarantees for it.
POINTER_TYPES = {
    "workspace": ("Float32", 16),
    "cu_seqlens_m": ("Int32", 4),
    "cu_seqlens_k": ("Int32", 4),
    "a_idx": ("Int32", 4),
}


def configure_environment(dump_dir: str | os.PathLike) -> None:
    """Set the DSL's environment for an sm_90a cross-compile. Must run before `import cutlass`."""
    os.environ["CUTE_DSL_ARCH"] = "sm_90a"
    os.environ["CUTE_DSL_KEEP"] = "cubin"
    os.environ["CUTE_DSL_DUMP_DIR"] = str(dump_dir)
    # No on-disk JIT cache: the build has its own content-addressed cache (codegen/cache.py).
    os.environ.setdefault("CUTE_DSL_DISABLE_FILE_CACHING", "1")


def cutlass_dtype(dtype: DType):
    import cutlass

    return {
        DType.bf16: cutlass.BFloat16,
        DType.fp16: cutlass.Float16,
        DType.fp32: cutlass.Float32,
        DType.e4m3: cutlass.Float8E4M3FN,
        DType.e5m2: cutlass.Float8E5M2,
    }[dtype]


def kernel_config(spec: GemmSpec):
    """The compile-time kernel configuration of one kernel spec (`GemmSpec.kernel_spec()`)."""
    from .kernels.gemm_sm90 import KernelConfig
    from .validity import epilogue_tile, mma_atom_layout, register_plan, smem_plan

    plan = smem_plan(spec)
    regs = register_plan(spec)
    return KernelConfig(
        acc_dtype=cutlass_dtype(spec.acc_dtype),
        tile_mnk=tuple(spec.tile),
        cluster_mn=tuple(spec.cluster),
        ab_stages=plan.ab_stages,
        epi_stages=plan.epi_stages,
        epi_tile=epilogue_tile(spec),
        c_dtype=cutlass_dtype(spec.c_dtype) if spec.has_c else None,
        c_stages=plan.c_stages,
        pingpong=spec.schedule == Schedule.pingpong,
        consumer_warpgroups=regs.consumer_wgs,
        atom_layout_mn=mma_atom_layout(spec),
        producer_registers=regs.producer_regs,
        consumer_registers=regs.consumer_regs,
        # fp8 WGMMAs accumulate at reduced precision; without fast accumulation the kernel promotes each
        # k-tile's result into the fp32 tile accumulator (the seed's slow path), through 1 or 2 buffers.
        k_acc_buffers=regs.k_acc_buffers,
        k_split=spec.k_split == KSplit.split,
        stream_k=spec.k_split == KSplit.stream,
        varlen_m=spec.varlen == Varlen.m,
        varlen_k=spec.varlen == Varlen.k,
        gather_a=spec.gather_a,
    )


def _fake_operands(spec: GemmSpec):
    """Symbolic tensors describing the runtime's view of A, B, D (and C), in `GemmSpec.operands` order:
    extents are int32 (the runtime rejects larger), strides int64 with the 16-byte divisibility TMA requires
    (the runtime checks it before launch: SymInt divisibility is a hard contract to the compiler). C is laid
    out like D (M x N x L) with its own dtype, major and strides. A grouped (varlen M) instance's B has one
    matrix per group: its batch extent is the group count G, not L (A and D hold all groups' rows in one
    batch; L is 1 at run time)."""
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_tensor

    m, n, k, l, g = (cute.sym_int32(symbol=s) for s in "MNKLG")
    # The extent of a gathered A that a_idx indexes: its rows (varlen M) or its K columns (varlen K).
    ma = cute.sym_int32(symbol="MA")
    symbols = {"m": m, "n": n, "k": k, "ma": ma}

    def operand(dtype: DType, rows, cols, major_is_rows: bool, name: str, batches=l):
        align = 16 * 8 // dtype.bits
        ld = cute.sym_int64(divisibility=align, symbol=f"ld{name}")
        batch = cute.sym_int64(divisibility=align, symbol=f"batch_stride_{name}")
        stride = (1, ld, batch) if major_is_rows else (ld, 1, batch)
        return make_fake_tensor(cutlass_dtype(dtype), (rows, cols, batches), stride, assumed_align=16)

    a = operand(spec.a_dtype, *(symbols[x] for x in spec.extents("a")), spec.a_major == "m", "a")
    batches = {"g": g, "l": l}
    b = operand(spec.b_dtype, n, k, spec.b_major == "n", "b", batches[spec.batch_extent("b")])
    d = operand(spec.d_dtype, m, n, spec.d_major == "m", "d", batches[spec.batch_extent("d")])
    if not spec.has_c:
        return a, b, d
    c = operand(spec.c_dtype, m, n, spec.c_major == "m", "c", batches[spec.batch_extent("c")])
    return a, b, d, c


@dataclass(frozen=True)
class CompiledInstance:
    """What one DSL compile leaves behind."""

    cubin: bytes
    host_object: Path  # exported host code (`.o`), for the oracle
    host_header: Path
    function_name: str  # the DSL's host function name (the exported C symbol derives from it)
    prefix: str  # export prefix used for every exported symbol
    compile_seconds: float


def compile_instance(spec: GemmSpec, out_dir: Path) -> CompiledInstance:
    """Trace and compile one instance for sm_90a on this (CPU-only) machine."""
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_stream, make_ptr

    from .kernels.gemm_sm90 import make_gemm

    out_dir.mkdir(parents=True, exist_ok=True)
    # A swap-AB instance is the kernel of its transposed problem; only the host's operand order differs.
    kspec = spec.kernel_spec()
    gemm = make_gemm(kernel_config(kspec))  # the host entry's signature depends on whether C is read
    tensors = _fake_operands(kspec)
    # Placeholder values: the scalars are runtime arguments, only their DSL types shape the compile.
    dsl_type = {"f32": cutlass.Float32, "i32": cutlass.Int32}
    scalars = [dsl_type[kind](1) for _, kind in host_scalars(spec)]
    # Raw device pointers (the split-K workspace, grouped row offsets): address given at launch.
    pointers = []
    for name in host_pointers(spec):
        dtype, align = POINTER_TYPES[name]
        pointers.append(make_ptr(getattr(cutlass, dtype), 16, cute.AddressSpace.gmem, assumed_align=align))
    t0 = time.perf_counter()
    compiled = cute.compile(gemm, *tensors, *scalars, *pointers, make_fake_stream())
    seconds = time.perf_counter() - t0
    cubin = compiled.__cubin__
    if not cubin:
        raise RuntimeError(f"{spec.name()}: the DSL produced no cubin (is CUTE_DSL_KEEP=cubin set?)")
    prefix = "hgemm"
    compiled.export_to_c(file_path=str(out_dir), file_name="host", function_prefix=prefix)
    return CompiledInstance(
        cubin=bytes(cubin),
        host_object=out_dir / "host.o",
        host_header=out_dir / "host.h",
        function_name=compiled.function_name,
        prefix=prefix,
        compile_seconds=seconds,
    )
