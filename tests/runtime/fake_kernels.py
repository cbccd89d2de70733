"""Kernel folders for the runtime tests, written with the contract's own vocabulary (runtime/spec.py,
runtime/contract.py): real `GemmSpec` ids, `InstanceRecord(...).to_json()` and `Manifest(...).to_json()`,
beside fake cubins (ELF magic + deterministic bytes)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from runtime.contract import InstanceRecord, Manifest, Param, TensorMapRecipe
from runtime.spec import GemmSpec, Varlen

_DESC_DIMS = {"a": ("k", "m", "l"), "b": ("k", "n", "l"), "d": ("n", "m", "l"), "c": ("n", "m", "l")}
_SHAPE_DIMS = {"a": ("m", "k", "l"), "b": ("n", "k", "l"), "d": ("m", "n", "l"), "c": ("m", "n", "l")}


def spec(cluster=(2, 1), tile=(128, 256, 64), with_c: bool = False) -> GemmSpec:
    """A bf16 K-major A/B, N-major D cooperative spec (with a bf16 N-major C when `with_c`)."""
    return GemmSpec(
        a_dtype="bf16",
        b_dtype="bf16",
        d_dtype="bf16",
        a_major="k",
        b_major="k",
        d_major="n",
        tile=tile,
        cluster=cluster,
        schedule="cooperative",
        c_dtype="bf16" if with_c else None,
        c_major="n" if with_c else None,
    )


def params(s: GemmSpec) -> tuple[tuple[Param, ...], int]:
    """The parameter list as the DSL passes it (docs/CONTRACT.md): per operand a TMA descriptor (64-byte
    aligned) and its int32 extents, then alpha (and beta), the walk scalars and one empty struct."""
    out, offset = [], 48
    for op in s.operands:
        recipe = TensorMapRecipe(
            operand=op,
            dtype=s.dtype_of(op),
            dims=_DESC_DIMS[op],
            strides=(f"ld{op}", f"batch_stride_{op}"),
            box=(64, 64, 1),
            element_strides=(1, 1, 1),
            swizzle="128B",
        )
        out.append(Param("tensormap", offset, 128, operand=op, tensormap=recipe))
        out.append(Param("shape", offset + 128, 12, operand=op, dims=_SHAPE_DIMS[op]))
        offset += 192
    offset -= 192 - 140  # scalars follow the last shape vector
    for name in ("alpha", "beta") if s.has_c else ("alpha",):
        out.append(Param("f32", offset, 4, name=name))
        offset += 4
    # The plain walk's kernels also take prefetch_operand (contract 6); grouped ones do not.
    plain_walk = s.varlen == Varlen.none
    for name in (
        ("raster_along_m", "group_size", "prefetch_operand")
        if plain_walk
        else ("raster_along_m", "group_size")
    ):
        out.append(Param("i32", offset, 4, name=name))
        offset += 4
    out.append(Param("opaque", offset, 1))
    return tuple(out), (offset + 1 + 7) // 8 * 8


def cubin_bytes(iid: str) -> bytes:
    return b"\x7fELF" + hashlib.sha256(iid.encode()).digest() * 8


def record(s: GemmSpec, smem: int = 232448, pdl: bool = True, min_driver: int = 12080) -> InstanceRecord:
    blob = cubin_bytes(s.name())
    ps, param_bytes = params(s)
    return InstanceRecord(
        spec=s,
        sha256=hashlib.sha256(blob).hexdigest(),
        cubin_bytes=len(blob),
        symbol=f"kernel_{s.name()}",
        block=(384, 1, 1),
        cluster=(*s.cluster, 1),
        smem_bytes=smem,
        grid_rule="persistent_clusters",
        params=ps,
        param_bytes=param_bytes,
        min_driver_version=min_driver,
        pdl=pdl,
        stats={"registers": 168, "local_bytes": 0, "static_smem_bytes": 1024, "compile_seconds": 1.1},
    )


def make_doc(records) -> dict:
    """A manifest document holding `records` (InstanceRecords), as codegen/build.py writes it."""
    return Manifest(
        profile="test",
        instances={r.id: r for r in records},
        toolchain={"python": "3.11", "dists": "nvidia-cutlass-dsl==4.8.1", "src_sha256": "0" * 64},
    ).to_json()


def write_kernels(directory: Path, doc: dict, cubins: bool = True) -> Path:
    """Write ``doc`` as manifest.json in ``directory`` plus each instance's fake cubin; its path."""
    directory.mkdir(parents=True, exist_ok=True)
    if cubins:
        for iid in doc["instances"]:
            (directory / f"{iid}.cubin").write_bytes(cubin_bytes(iid))
    path = directory / "manifest.json"
    path.write_text(json.dumps(doc, indent=1, sort_keys=True))
    return path


SPECS = (spec((2, 1)), spec((1, 1)), spec((4, 4), tile=(128, 128, 64)))
IDS = tuple(s.name() for s in SPECS)
RECORDS = (record(SPECS[0]), record(SPECS[1]), record(SPECS[2], smem=200000))
