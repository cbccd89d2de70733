"""Launch-contract capture: learn what every kernel parameter means from the DSL's own host code.

Nothing about the parameter list is assumed. The cubin declares each parameter's ordinal, offset and size
(KPARAM_INFO, codegen/cubin_info.py); the DSL's exported host code is then run twice on the CPU against a
stub CUDA runtime (codegen/oracle.py) with two *probe* problems whose every quantity — pointers, extents,
leading dimensions, batch strides, int32 and float32 scalars — is distinct, and each parameter's bytes are
explained:

- 128 bytes: a TMA descriptor, decoded by codegen/tensormap_decode.py. Its address names the operand (a, b,
  d or c when the epilogue reads C); each descriptor dim and stride is matched by value to a named extent
  (m, n, k, l) or stride (lda, ..., batch_stride_c). Re-encoding the recipe must reproduce the DSL's
  meaningful bytes exactly.
- 4 bytes: an int32 scalar or extent (matched as an int32), or a float32 scalar, alpha or beta (matched
  as a float32; the probes' alpha and beta are exactly representable and far from any int32 bit pattern
  the probes use, so the two readings cannot both match).
- 4 * r bytes of int32s (r > 1): the extents of an operand (matched by value).
- 8 bytes: a raw device pointer (split-K's workspace), matched by value.
- 1 byte: an empty struct the DSL passes for compile-time data (tiled MMA, layouts): opaque.
Anything a probe cannot explain fails the build with the instance id: a DSL upgrade that changes the
host code's behaviour is caught here, not on a user's GPU. The grid, block, cluster and shared memory of
both probes must also match the documented grid rule. The result is the instance's typed manifest record
(runtime/contract.py, documented in docs/CONTRACT.md).
"""

from __future__ import annotations

import ctypes
import hashlib
import struct
from dataclasses import dataclass
from pathlib import Path

from runtime import scheduling, tensormap
from runtime.contract import (
    DESCRIPTOR_BYTES,
    POINTER_BYTES,
    TMA_ALIGN_BYTES,
    InstanceRecord,
    Param,
    TensorMapRecipe,
)
from runtime.spec import EXTENTS, STRIDES, GemmSpec, KSplit, Varlen, batch_stride_name, ld_name

from .cubin_info import CubinInfo
from .dsl import CompiledInstance, host_pointers, host_scalars
from .oracle import build_oracle, fatbin_cubins, tensor_struct
from .tensormap_decode import decode
from .validity import planned_smem_bytes


class ContractError(RuntimeError):
    pass


@dataclass(frozen=True)
class Probe:
    """One problem the host code is run on. `values` maps every name a parameter may carry to its value."""

    values: dict[str, int | float]

    def __getitem__(self, name: str) -> int:
        return self.values[name]


# Float32 scalars per probe: exactly representable, different between the probes and from each other, and
# (as int32 bit patterns, ~1e9) far from every integer a probe uses.
_FLOAT_SCALARS = ({"alpha": 1.5, "beta": -0.75}, {"alpha": 2.25, "beta": 0.5})


def make_probes(spec: GemmSpec) -> tuple[Probe, Probe]:
    """Two problems whose named integers are pairwise distinct within each probe and differ between the
    probes (checked: a coincidence would make a parameter ambiguous), and whose floats differ likewise."""
    shapes = (
        {
            "m": 1048,
            "n": 2056,
            "k": 776,
            "l": 3,
            "g": 9,
            "ma": 1544,
            "raster_along_m": 1,
            "group_size": 5,
            "max_active_clusters": 7,
        },
        {
            "m": 520,
            "n": 1032,
            "k": 264,
            "l": 2,
            "g": 10,
            "ma": 776,
            "raster_along_m": 0,
            "group_size": 3,
            "max_active_clusters": 11,
        },
    )
    split_counts = (4, 6)  # split-K: fewer than either probe's k-tiles, so the clamp keeps them
    prefetch_operands = (2, 1)  # the plain walk: B, then A (each probe's only 2; 1 only where raster is 0)
    probes = []
    for p, v in enumerate(shapes):
        v = dict(v)
        scalars = {name for name, _ in host_scalars(spec)}
        if "k_splits" in scalars:
            v["k_splits"] = split_counts[p]
        if "prefetch_operand" in scalars:
            v["prefetch_operand"] = prefetch_operands[p]
        for i, name in enumerate(host_pointers(spec)):
            v[name] = 0x7E00_0000_0000 + (i + 1) * 0x10_0000_0000 + p * 0x1_0000_0000 + 0x2000
        for i, op in enumerate(spec.operands):
            rows, cols = spec.extents(op)
            contiguous = spec.contiguous_extent(op)
            other = rows if contiguous == cols else cols
            align = TMA_ALIGN_BYTES // spec.dtype_of(op).bytes  # elements per 16 bytes (TMA's rule)
            ld = -(-v[contiguous] // align) * align + align * (3 + 2 * i + 7 * p)  # padded, aligned
            v[ld_name(op)] = ld
            v[batch_stride_name(op)] = v[other] * ld + 64 * (1 + i + 3 * p)
            # Addresses 16-byte aligned and, as int64 values, distinct from every stride.
            v[op] = 0x7F00_0000_0000 + (i + 1) * 0x10_0000_0000 + p * 0x1_0000_0000 + 0x1000 * (i + 2)
        v["stream"] = 0x5117 + p
        # raster_along_m is a 0/1 flag in both probes, prefetch_operand 1 where raster_along_m is 0.
        ints = [x for x in v.values() if x not in (0, 1)]
        if len(set(ints)) != len(ints):
            raise ContractError(f"{spec.name()}: probe {p} has coinciding values {sorted(ints)}")
        v.update(_FLOAT_SCALARS[p])
        probes.append(Probe(v))
    return probes[0], probes[1]


def host_args(spec: GemmSpec, probe) -> list:
    """The DSL host entry's arguments for a problem given as named values (a Probe or a dict with the
    pointers, extents, strides, scalars and `stream`): the tensor structs, the scalars (`host_scalars`
    order), the stream. The oracle tests build their calls with it too."""
    args = []
    # In the kernel's slot order, each with the extents its slot sees (a swap-AB kernel takes B as its
    # A, A as its B, and D and C transposed: spec.launch_operands, spec.kernel_extents).
    for op in spec.launch_operands:
        rows, cols = spec.kernel_extents(op)
        # Only dynamic modes appear: all three extents, and the two non-unit strides in mode order.
        args.append(
            tensor_struct(
                probe[op],
                (probe[rows], probe[cols], probe[spec.batch_extent(op)]),
                (probe[ld_name(op)], probe[batch_stride_name(op)]),
            )
        )
    ctype = {"f32": ctypes.c_float, "i32": ctypes.c_int32}
    args += [ctype[kind](probe[name]) for name, kind in host_scalars(spec)]
    args += [ctypes.c_void_p(probe[name]) for name in host_pointers(spec)]
    args.append(ctypes.c_void_p(probe["stream"]))
    return args


def _match(value, names, probe: Probe, scale: int = 1) -> list[str]:
    return [n for n in names if n in probe.values and probe[n] * scale == value]


def _unique(candidates_per_probe: list[list[str]], what: str) -> str:
    common = set(candidates_per_probe[0]).intersection(*candidates_per_probe[1:])
    if len(common) != 1:
        raise ContractError(f"{what}: matches {sorted(common) or 'nothing'} across the probes")
    return common.pop()


def _tensormap_param(spec: GemmSpec, raw: list[bytes], probes, where: str, offset: int) -> Param:
    decoded = [decode(r) for r in raw]
    for d in decoded:
        if d["unknown_bits"]:
            raise ContractError(f"{where}: descriptor bits this runtime cannot encode: {d['unknown_bits']}")
    operand = _unique([_match(d["global_address"], spec.operands, p) for d, p in zip(decoded, probes)], where)
    dtype = spec.dtype_of(operand)
    # The descriptor holds a data format, not the dtype: fp8 operands travel as u8 (runtime/spec.py).
    if decoded[0]["format_code"] != dtype.tma_format:
        raise ContractError(
            f"{where}: descriptor format {decoded[0]['format_code']} for a {dtype} operand "
            f"{operand} (want {dtype.tma_format})"
        )
    rank = decoded[0]["rank"]
    dims = [
        _unique([_match(d["dims"][i], EXTENTS, p) for d, p in zip(decoded, probes)], f"{where} dim {i}")
        for i in range(rank)
    ]
    strides = [
        _unique(
            [_match(d["strides_bytes"][i], STRIDES, p, dtype.bytes) for d, p in zip(decoded, probes)],
            f"{where} stride {i + 1}",
        )
        for i in range(rank - 1)
    ]
    constant = {}
    for key in ("box", "element_strides", "swizzle", "interleave", "l2_promotion", "oob_fill"):
        values = {repr(d[key]) for d in decoded}
        if len(values) != 1:
            raise ContractError(f"{where}: {key} differs between probes ({values})")
        constant[key] = decoded[0][key]
    recipe = TensorMapRecipe(
        operand=operand, dtype=dtype, dims=tuple(dims), strides=tuple(strides), **constant
    )
    for r, p in zip(raw, probes):
        again = encode_recipe(recipe, p.values)
        if again[: tensormap.MEANINGFUL_BYTES] != r[: tensormap.MEANINGFUL_BYTES]:
            raise ContractError(
                f"{where}: re-encoding the captured recipe does not reproduce the DSL's bytes"
            )
    return Param("tensormap", offset, DESCRIPTOR_BYTES, operand=operand, tensormap=recipe)


def encode_recipe(recipe: TensorMapRecipe, values: dict[str, int]) -> bytes:
    """A descriptor from a manifest recipe and named problem values (the runtime does the same)."""
    elem = recipe.dtype.bytes
    dims = tuple(values[n] for n in recipe.dims)
    strides_bytes = tuple(values[n] * elem for n in recipe.strides)
    return tensormap.template_from_recipe(recipe, dims, strides_bytes).with_address(values[recipe.operand])


def _word_param(
    spec: GemmSpec, raw: list[bytes], probes, where: str, offset: int, last_operand: str | None
) -> Param:
    """A parameter of 4-byte words: a scalar (one word, read both as int32 and as float32) or extents."""
    count = len(raw[0]) // 4
    ints = [struct.unpack(f"<{count}i", r) for r in raw]
    size = 4 * count
    if count == 1:
        i32_names = tuple(n for n, kind in host_scalars(spec) if kind == "i32") + EXTENTS
        f32_names = tuple(n for n, kind in host_scalars(spec) if kind == "f32")
        floats = [struct.unpack("<f", r)[0] for r in raw]
        name = _unique(
            [_match(i[0], i32_names, p) + _match(f, f32_names, p) for i, f, p in zip(ints, floats, probes)],
            where,
        )
        if name in EXTENTS:
            return Param("shape", offset, size, operand="problem", dims=(name,))
        return Param("f32" if name in f32_names else "i32", offset, size, name=name)
    dims = tuple(
        _unique([_match(v[i], EXTENTS, p) for v, p in zip(ints, probes)], f"{where} slot {i}")
        for i in range(count)
    )
    # `operand` is informational (the runtime fills extents by `dims`). D and C share their extents (M, N,
    # L); the DSL passes each descriptor followed by its coordinate tensor, so the preceding descriptor's
    # operand breaks the tie.
    owners = [op for op in spec.operands if set(dims) == {*spec.extents(op), spec.batch_extent(op)}]
    operand = last_operand if last_operand in owners else (owners[0] if owners else "problem")
    return Param("shape", offset, size, operand=operand, dims=dims)


def _tensor_param(spec: GemmSpec, raw: list[bytes], probes, where: str, offset: int) -> Param:
    """A global tensor passed whole (a grouped instance's D): `{void *data; int32 extents[r]; int64
    strides[s]}` (8-byte aligned strides). The address names the operand; r and s are the split of the
    bytes under which every extent and stride matches a name; the re-packed bytes must equal the DSL's."""
    size = len(raw[0])
    addresses = [int.from_bytes(r[:8], "little") for r in raw]
    operand = _unique([_match(a, spec.operands, p) for a, p in zip(addresses, probes)], where)
    for extents in range(1, 6):
        strides_at = -(-(8 + 4 * extents) // 8) * 8
        if (size - strides_at) % 8 or size < strides_at:
            continue
        count = (size - strides_at) // 8
        try:
            dims = tuple(
                _unique(
                    [
                        _match(struct.unpack_from("<i", r, 8 + 4 * i)[0], EXTENTS, p)
                        for r, p in zip(raw, probes)
                    ],
                    f"{where} extent {i}",
                )
                for i in range(extents)
            )
            strides = tuple(
                _unique(
                    [
                        _match(struct.unpack_from("<q", r, strides_at + 8 * i)[0], STRIDES, p)
                        for r, p in zip(raw, probes)
                    ],
                    f"{where} stride {i}",
                )
                for i in range(count)
            )
        except ContractError:
            continue
        param = Param("tensor", offset, size, operand=operand, dims=dims, strides=strides)
        # The padding between the int32 extents and the 8-byte aligned strides is left as the host code's
        # stack had it (the kernel never reads it): compare the meaningful bytes.
        pad = slice(8 + 4 * extents, strides_at)
        for r, p in zip(raw, probes):
            mine, theirs = bytearray(pack_tensor(param, p.values)), bytearray(r)
            mine[pad] = theirs[pad] = b"\0" * (strides_at - 8 - 4 * extents)
            if mine != theirs:
                raise ContractError(
                    f"{where}: re-packing the captured tensor does not reproduce the DSL's bytes"
                )
        return param
    raise ContractError(f"{where}: no split into int32 extents and int64 strides explains these bytes")


def pack_tensor(param: Param, values: dict) -> bytes:
    """A "tensor" parameter's bytes for named problem values (runtime/args.py writes the same)."""
    extents_at, strides_at, size = param.tensor_layout()
    out = bytearray(size)
    struct.pack_into("<Q", out, 0, values[param.operand])
    struct.pack_into(f"<{len(param.dims)}i", out, extents_at, *(values[n] for n in param.dims))
    struct.pack_into(f"<{len(param.strides)}q", out, strides_at, *(values[n] for n in param.strides))
    return bytes(out)


def capture_contract(
    spec: GemmSpec, compiled: CompiledInstance, info: CubinInfo, workdir: Path
) -> InstanceRecord:
    """The typed manifest record of one compiled instance."""
    name = spec.name()
    kernel = info.kernel
    oracle = build_oracle(compiled.host_object, workdir, header_path=compiled.host_header, kernel=kernel)
    if compiled.cubin not in fatbin_cubins(oracle.load_record.code_image):
        raise ContractError(f"{name}: the host object embeds a different cubin than the DSL returned")
    params = sorted(kernel.params, key=lambda p: p.ordinal)
    oracle.set_arg_sizes([p.size for p in params])
    probes = make_probes(spec)
    launches = [oracle.call(host_args(spec, p)) for p in probes]

    records = []
    last_operand = None
    for i, p in enumerate(params):
        where = f"{name}: kernel parameter {p.ordinal} ({p.size} B at offset {p.offset})"
        raw = [launch.args[i] for launch in launches]
        if p.size == DESCRIPTOR_BYTES:
            rec = _tensormap_param(spec, raw, probes, where, p.offset)
            last_operand = rec.operand
        elif p.size == POINTER_BYTES and host_pointers(spec):
            values = [int.from_bytes(r, "little") for r in raw]
            pointer = _unique([_match(v, host_pointers(spec), pr) for v, pr in zip(values, probes)], where)
            rec = Param("pointer", p.offset, p.size, name=pointer)
        elif p.size % 4 == 0 and p.size <= 16:
            rec = _word_param(spec, raw, probes, where, p.offset, last_operand)
        elif p.size % 8 == 0 and p.size > 16:
            rec = _tensor_param(spec, raw, probes, where, p.offset)
        elif p.size == 1:
            rec = Param("opaque", p.offset, p.size)  # an empty struct: compile-time data only
        else:
            raise ContractError(f"{where}: no known meaning for a parameter of this size")
        records.append(rec)

    cm, cn = spec.cluster
    grid_rule = {Varlen.m: "grouped_clusters", Varlen.k: "group_batches"}.get(
        spec.varlen, "persistent_clusters"
    )
    tiles = (*spec.problem_tile, *spec.problem_cluster)  # the caller's view, as the probes' extents
    for launch, p in zip(launches, probes):
        _, _, total = scheduling.cluster_tiles(p["m"], p["n"], p["l"], *tiles)
        if spec.varlen == Varlen.m:
            total = scheduling.grouped_cluster_tiles(p["m"], p["n"], p["g"], *tiles)
        elif spec.varlen == Varlen.k:
            _, _, total = scheduling.cluster_tiles(p["m"], p["n"], p["g"], *tiles)
        if "k_splits" in p.values:
            total *= scheduling.effective_splits(p["k_splits"], scheduling.k_tiles(p["k"], spec.tile[2]))
        if spec.k_split == KSplit.stream:
            total = scheduling.stream_work_units(total, scheduling.k_tiles(p["k"], spec.tile[2]))
        want = scheduling.persistent_grid(total, p["max_active_clusters"], cm, cn)
        if launch.grid != want:
            raise ContractError(f"{name}: the DSL launched grid {launch.grid}, the grid rule gives {want}")
        if launch.attributes.get("cluster_dimension") != (cm, cn, 1):
            raise ContractError(f"{name}: launch cluster {launch.attributes.get('cluster_dimension')}")
        if launch.attributes.get("programmatic_stream_serialization", 0):
            raise ContractError(f"{name}: the DSL launch asks for programmatic stream serialization")
    if launches[0].smem_bytes != launches[1].smem_bytes or launches[0].block != launches[1].block:
        raise ContractError(f"{name}: shared memory or block size depends on the problem")
    planned = planned_smem_bytes(spec.kernel_spec())
    if launches[0].smem_bytes != planned:
        # The plan sized the pipelines to fit the device; a kernel that asks for more fails every launch
        # (cuFuncSetAttribute: CUDA_ERROR_INVALID_VALUE), so it must not ship.
        raise ContractError(
            f"{name}: the kernel asks for {launches[0].smem_bytes} B of dynamic shared memory, its plan "
            f"{planned} B (codegen/validity.py planned_smem_bytes); make the plan count the kernel's shared "
            "storage exactly"
        )

    return InstanceRecord(
        spec=spec,
        sha256=hashlib.sha256(compiled.cubin).hexdigest(),
        cubin_bytes=len(compiled.cubin),
        symbol=kernel.name,
        block=tuple(launches[0].block),
        cluster=(cm, cn, 1),
        smem_bytes=launches[0].smem_bytes,
        grid_rule=grid_rule,
        params=tuple(records),
        param_bytes=max(p.offset + p.size for p in params),
        min_driver_version=info.min_driver_version,
        # The kernel source issues griddepcontrol.wait before its first global read, so the runtime may
        # launch it with programmatic stream serialization (launch(..., pdl=True)).
        pdl=_kernel_waits_for_predecessor(),
        stats={
            "registers": kernel.registers,
            "local_bytes": kernel_local_bytes(kernel),
            "static_smem_bytes": kernel.static_smem_bytes,
        },
    )


def _kernel_waits_for_predecessor() -> bool:
    # Imported here, not at module level: the kernel module imports cutlass, which must only be imported
    # after codegen.dsl.configure_environment (the DSL reads its target arch at import time).
    from .kernels.gemm_sm90 import KERNEL_WAITS_FOR_PREDECESSOR

    return KERNEL_WAITS_FOR_PREDECESSOR


def kernel_local_bytes(kernel) -> int:
    """Per-thread local memory (stack frame): spills and dynamically indexed arrays end up here."""
    return max(kernel.frame_size or 0, kernel.local_bytes or 0)
