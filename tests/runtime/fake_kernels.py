"""Kernel folders for the runtime tests: manifest documents shaped like the real contract
(docs/CONTRACT.md) and fake cubins (ELF magic + deterministic bytes) to write beside them."""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path

# A parameter list shaped like the seed kernel's: three TMA descriptors, three shape vectors, two
# scheduler scalars and one empty struct.
PARAMS = [
    *({"kind": "tensormap", "offset": 128 * i, "size": 128, "operand": op,
       "tensormap": {"operand": op, "dtype": "bf16", "rank": 3, "dims": dims,
                     "strides": [f"ld{op}", f"batch_stride_{op}"], "box": [64, 64, 1],
                     "element_strides": [1, 1, 1], "swizzle": "128B", "interleave": "none",
                     "l2_promotion": "128B", "oob_fill": "none"}}
      for i, (op, dims) in enumerate([("a", ["k", "m", "l"]), ("b", ["k", "n", "l"]),
                                      ("d", ["n", "m", "l"])])),
    {"kind": "shape", "offset": 384, "size": 12, "operand": "a", "dims": ["m", "k", "l"]},
    {"kind": "shape", "offset": 396, "size": 12, "operand": "b", "dims": ["n", "k", "l"]},
    {"kind": "shape", "offset": 408, "size": 12, "operand": "d", "dims": ["m", "n", "l"]},
    {"kind": "i32", "offset": 420, "size": 4, "name": "raster_along_m"},
    {"kind": "i32", "offset": 424, "size": 4, "name": "group_size"},
    {"kind": "opaque", "offset": 428, "size": 1},
]
PARAM_BYTES = 432


def _descriptor(op: str, dims: list[str], offset: int) -> dict:
    return {"kind": "tensormap", "offset": offset, "size": 128, "operand": op,
            "tensormap": {"operand": op, "dtype": "bf16", "rank": 3, "dims": dims,
                          "strides": [f"ld{op}", f"batch_stride_{op}"], "box": [64, 64, 1],
                          "element_strides": [1, 1, 1], "swizzle": "128B", "interleave": "none",
                          "l2_promotion": "128B", "oob_fill": "none"}}


# The same with the C epilogue (D = alpha * acc + beta * C), laid out as the DSL passes it: descriptor and
# extents per operand (A, B, D, C), then the float32 scales, the scheduler scalars and the empty struct.
PARAMS_C = [
    *(p for i, (op, dims, ext) in enumerate([("a", ["k", "m", "l"], ["m", "k", "l"]),
                                            ("b", ["k", "n", "l"], ["n", "k", "l"]),
                                            ("d", ["n", "m", "l"], ["m", "n", "l"]),
                                            ("c", ["n", "m", "l"], ["m", "n", "l"])])
      for p in (_descriptor(op, dims, 48 + 192 * i),
                {"kind": "shape", "offset": 176 + 192 * i, "size": 12, "operand": op, "dims": ext})),
    {"kind": "f32", "offset": 764, "size": 4, "name": "alpha"},
    {"kind": "f32", "offset": 768, "size": 4, "name": "beta"},
    {"kind": "i32", "offset": 772, "size": 4, "name": "raster_along_m"},
    {"kind": "i32", "offset": 776, "size": 4, "name": "group_size"},
    {"kind": "opaque", "offset": 780, "size": 1},
]
PARAM_BYTES_C = 784


def cubin_bytes(iid: str) -> bytes:
    return b"\x7fELF" + hashlib.sha256(iid.encode()).digest() * 8


def make_record(iid: str, cluster=(2, 1, 1), smem=232448, with_c: bool = False) -> dict:
    """A record shaped like the builder's; `with_c`: one whose epilogue reads a bf16 n-major C."""
    blob = cubin_bytes(iid)
    record = {
        "spec": {"a_dtype": "bf16", "b_dtype": "bf16", "d_dtype": "bf16", "acc_dtype": "fp32",
                 "a_major": "k", "b_major": "k", "d_major": "n", "tile": [128, 256, 64],
                 "cluster": list(cluster[:2]), "schedule": "cooperative"},
        "cubin": f"{iid}.cubin", "sha256": hashlib.sha256(blob).hexdigest(), "cubin_bytes": len(blob),
        "symbol": f"kernel_{iid}", "block": [384, 1, 1], "cluster": list(cluster), "smem_bytes": smem,
        "grid": {"kind": "persistent_clusters", "tile_m": 128, "tile_n": 256, "cluster": list(cluster[:2])},
        "params": copy.deepcopy(PARAMS), "param_bytes": PARAM_BYTES,
        "alignment_bytes": {"a": 16, "b": 16, "d": 16},
        "stats": {"registers": 168, "spill_bytes": 0, "compile_seconds": 1.1},
        "pdl": True,
    }
    if with_c:
        record["spec"].update(c_dtype="bf16", c_major="n", fp8_fast_accum=False)
        record.update(params=copy.deepcopy(PARAMS_C), param_bytes=PARAM_BYTES_C,
                      alignment_bytes={"a": 16, "b": 16, "c": 16, "d": 16})
    return record


def make_doc(records: dict[str, dict]) -> dict:
    return {"format": "hgemm-sm90-manifest", "contract_version": 1, "arch": "sm_90a",
            "min_driver_version": 12080, "profile": "test",
            "toolchain": {"python": "3.11", "dists": "nvidia-cutlass-dsl==4.8.1", "src_sha256": "0" * 64},
            "instances": dict(sorted(records.items()))}


def write_kernels(directory: Path, doc: dict, cubins: bool = True) -> Path:
    """Write ``doc`` as manifest.json in ``directory`` plus each instance's fake cubin; its path."""
    directory.mkdir(parents=True, exist_ok=True)
    if cubins:
        for iid, rec in doc["instances"].items():
            (directory / rec.get("cubin", f"{iid}.cubin")).write_bytes(cubin_bytes(iid))
    path = directory / "manifest.json"
    path.write_text(json.dumps(doc, indent=1, sort_keys=True))
    return path


IDS = ("gemm_bf16_t128x256_c2x1", "gemm_bf16_t128x256_c1x1", "gemm_bf16_t128x128_c4x4")
