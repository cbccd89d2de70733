"""manifest.json validation: every required field, versions, cubin integrity, immutability."""

import dataclasses
import json
from pathlib import Path

import pytest
from fake_kernels import IDS, make_doc, make_record, write_kernels
from hgemm_sm90 import knobs, manifest
from hgemm_sm90.errors import CorruptArtifactError, UnknownInstanceError

TOP_FIELDS = ["format", "contract_version", "arch", "min_driver_version", "profile", "toolchain",
              "instances"]
RECORD_FIELDS = ["spec", "cubin", "sha256", "cubin_bytes", "symbol", "block", "cluster", "smem_bytes",
                 "grid", "params", "param_bytes", "alignment_bytes"]


def load_doc(tmp_path, doc, cubins=True):
    return manifest.load(str(write_kernels(tmp_path / "k", doc, cubins)))


def test_valid_manifest_loads(kernels):
    assert list(kernels.instances) == sorted(IDS)
    rec = kernels.record(IDS[0])
    assert rec.block == (384, 1, 1) and rec.cluster == (2, 1, 1) and rec.cluster_size == 2
    assert rec.param_offsets == (0, 128, 256, 384, 396, 408, 420, 424, 428)
    assert [p.kind for p in rec.params[:4]] == ["tensormap"] * 3 + ["shape"]
    assert rec.params[0].operand == "a" and rec.params[0].tensormap["dims"] == ("k", "m", "l")
    assert rec.params[3].dims == ("m", "k", "l") and rec.params[6].name == "raster_along_m"
    assert kernels.min_driver_version == 12080 and kernels.arch == "sm_90a"
    assert manifest.read_cubin(rec).startswith(b"\x7fELF")


def test_records_are_immutable(kernels):
    rec = kernels.record(IDS[0])
    with pytest.raises(dataclasses.FrozenInstanceError):
        rec.smem_bytes = 0
    with pytest.raises(TypeError):
        rec.spec["a_dtype"] = "fp8"
    with pytest.raises(TypeError):
        kernels.instances["x"] = rec
    assert isinstance(rec.spec["tile"], tuple)


@pytest.mark.parametrize("field", TOP_FIELDS)
def test_missing_top_level_field(tmp_path, doc, field):
    del doc[field]
    with pytest.raises(CorruptArtifactError, match=rf"\b{field}\b.*is missing"):
        load_doc(tmp_path, doc, cubins=False)


@pytest.mark.parametrize("field", RECORD_FIELDS)
def test_missing_record_field(tmp_path, doc, field):
    del doc["instances"][IDS[0]][field]
    with pytest.raises(CorruptArtifactError, match=rf"instances\.{IDS[0]}\.{field} is missing"):
        load_doc(tmp_path, doc)


@pytest.mark.parametrize("field", ["kind", "offset", "size"])
def test_missing_param_field(tmp_path, doc, field):
    del doc["instances"][IDS[0]]["params"][4][field]
    with pytest.raises(CorruptArtifactError, match=rf"params\[4\]\.{field} is missing"):
        load_doc(tmp_path, doc)


@pytest.mark.parametrize("index,field", [(0, "tensormap"), (3, "operand"), (3, "dims"), (6, "name")])
def test_missing_kind_specific_param_field(tmp_path, doc, index, field):
    del doc["instances"][IDS[0]]["params"][index][field]
    with pytest.raises(CorruptArtifactError, match=rf"params\[{index}\]\.{field} is missing"):
        load_doc(tmp_path, doc)


@pytest.mark.parametrize("field", ["dtype", "rank", "dims", "box", "element_strides", "swizzle",
                                   "interleave", "l2_promotion", "oob_fill", "strides"])
def test_missing_tensormap_recipe_field(tmp_path, doc, field):
    del doc["instances"][IDS[0]]["params"][1]["tensormap"][field]
    with pytest.raises(CorruptArtifactError, match=rf"params\[1\]\.tensormap\.{field} is missing"):
        load_doc(tmp_path, doc)


@pytest.mark.parametrize("field", ["kind", "tile_m", "tile_n", "cluster"])
def test_missing_grid_field(tmp_path, doc, field):
    del doc["instances"][IDS[0]]["grid"][field]
    with pytest.raises(CorruptArtifactError, match=rf"grid\.{field} is missing"):
        load_doc(tmp_path, doc)


@pytest.mark.parametrize("path,value,message", [
    (("block",), [384, 1], r"block must be a list of 3 integers"),
    (("block",), [384, True, 1], r"block must be a list of 3 integers"),
    (("smem_bytes",), "232448", r"smem_bytes must be an integer"),
    (("sha256",), "ABC", r"sha256 must be 64 lowercase hex"),
    (("cubin",), "../evil.cubin", r"cubin must be a plain file name"),
    (("param_bytes",), 100, r"param_bytes 100 is smaller"),
    (("alignment_bytes",), {"a": 12}, r"alignment_bytes\.a must be a power of two"),
    (("grid", "kind"), "tiles", r"grid\.kind must be 'persistent_clusters'"),
    (("grid", "cluster"), [1, 1], r"grid\.cluster must equal"),
    (("params", 4, "offset"), 380, r"params\[4\]\.offset 380 overlaps"),
    (("params", 4, "size"), 16, r"params\[4\] a shape of 3 int32 is 12 bytes"),
    (("params", 1, "size"), 64, r"params\[1\] a CUtensorMap parameter is 128 bytes"),
    (("params", 1, "operand"), "a", r"params\[1\]\.operand 'a' disagrees"),
    (("params", 8, "kind"), "f64", r"params\[8\]\.kind must be one of"),
])
def test_malformed_field_is_named(tmp_path, doc, path, value, message):
    target = doc["instances"][IDS[0]]
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(CorruptArtifactError, match=message):
        load_doc(tmp_path, doc)


def test_top_level_type_errors_name_the_field(tmp_path, doc):
    with pytest.raises(CorruptArtifactError, match="field min_driver_version must be an integer"):
        load_doc(tmp_path, dict(doc, min_driver_version="12.8"), cubins=False)
    with pytest.raises(CorruptArtifactError, match="field instances must be a JSON object"):
        load_doc(tmp_path, dict(doc, instances=[]), cubins=False)


def test_wrong_contract_version(tmp_path, doc):
    doc["contract_version"] = 2
    with pytest.raises(CorruptArtifactError, match="contract version 2.*reads version 1") as e:
        load_doc(tmp_path, doc)
    assert "one hgemm-sm90 release" in e.value.fix


def test_wrong_format_and_arch(tmp_path, doc):
    with pytest.raises(CorruptArtifactError, match="not an hgemm-sm90 manifest"):
        load_doc(tmp_path, dict(doc, format="something-else"))
    with pytest.raises(CorruptArtifactError, match="arch must be 'sm_90a'"):
        load_doc(tmp_path, dict(doc, arch="sm_100a"))


def test_missing_and_unreadable_manifest(tmp_path):
    with pytest.raises(CorruptArtifactError, match="manifest.json is missing") as e:
        manifest.load(str(tmp_path / "manifest.json"))
    assert "reinstall" in str(e.value)
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(CorruptArtifactError, match="not valid JSON"):
        manifest.load(str(tmp_path / "manifest.json"))
    (tmp_path / "manifest.json").write_text(json.dumps([1, 2]))
    with pytest.raises(CorruptArtifactError, match="must be a JSON object"):
        manifest.load(str(tmp_path / "manifest.json"))


def test_unknown_instance_suggests(kernels):
    with pytest.raises(UnknownInstanceError) as e:
        kernels.record("gemm_bf16_t128x256_c2x2")
    assert IDS[0] in e.value.suggestions


def test_sha_mismatch(tmp_path, doc):
    m = load_doc(tmp_path, doc)
    rec = m.record(IDS[0])
    with open(rec.cubin_path, "r+b") as f:  # same size, one byte flipped
        f.seek(10)
        f.write(b"\x00" if f.read(1) != b"\x00" else b"\x01")
    with pytest.raises(CorruptArtifactError, match="sha256 is [0-9a-f]{64} but the manifest says") as e:
        manifest.read_cubin(rec)
    assert e.value.instance == IDS[0] and e.value.path == rec.cubin_path
    assert manifest.read_cubin(rec, verify=False).startswith(b"\x7fELF")  # the knob's off switch


def test_sha_check_follows_knob(tmp_path, doc, monkeypatch):
    m = load_doc(tmp_path, doc)
    rec = m.record(IDS[0])
    path = Path(rec.cubin_path)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    monkeypatch.setattr(knobs, "_knobs", knobs.Knobs(verify_sha256=False))
    assert manifest.read_cubin(rec) == bytes(data)
    monkeypatch.setattr(knobs, "_knobs", knobs.Knobs(verify_sha256=True))
    with pytest.raises(CorruptArtifactError, match="sha256"):
        manifest.read_cubin(rec)


def test_missing_cubin_wrong_size_not_elf(tmp_path, doc):
    m = load_doc(tmp_path, doc)
    rec = m.record(IDS[0])
    Path(rec.cubin_path).write_bytes(b"\x7fELF")
    with pytest.raises(CorruptArtifactError, match="cubin is 4 bytes but the manifest says"):
        manifest.read_cubin(rec)
    Path(rec.cubin_path).write_bytes(b"x" * rec.cubin_bytes)
    with pytest.raises(CorruptArtifactError, match="not an ELF file"):
        manifest.read_cubin(rec, verify=False)
    (tmp_path / "k" / rec.cubin).unlink()
    with pytest.raises(CorruptArtifactError, match=f"cubin {rec.cubin} is missing") as e:
        manifest.read_cubin(rec)
    assert e.value.instance == IDS[0]


def test_default_location_and_kernel_dir_knob(tmp_path, doc, monkeypatch):
    assert manifest.kernel_dir().endswith("kernels")
    write_kernels(tmp_path / "elsewhere", doc)
    monkeypatch.setattr(knobs, "_knobs", knobs.Knobs(kernel_dir=str(tmp_path / "elsewhere")))
    monkeypatch.setattr(manifest, "_default", None)
    m = manifest.default()
    assert m.directory == str(tmp_path / "elsewhere") and manifest.default() is m


def test_extra_fields_are_ignored(tmp_path):
    rec = make_record("x")
    rec["future_field"] = {"anything": 1}
    doc = make_doc({"x": rec})
    doc["also_new"] = True
    assert load_doc(tmp_path, doc).record("x").symbol == "kernel_x"


def test_record_with_c_epilogue_loads(tmp_path):
    rec = load_doc(tmp_path, make_doc({"c": make_record("c", with_c=True)})).record("c")
    assert [p.operand for p in rec.params if p.kind == "tensormap"] == ["a", "b", "d", "c"]
    assert [p.operand for p in rec.params if p.kind == "shape"] == ["a", "b", "d", "c"]
    assert [(p.name, p.offset, p.size) for p in rec.params if p.kind == "f32"] == [("alpha", 764, 4),
                                                                                 ("beta", 768, 4)]
    assert rec.alignment_bytes["c"] == 16 and rec.spec["c_dtype"] == "bf16"


@pytest.mark.parametrize("path,value,message", [
    (("params", 8, "size"), 8, r"params\[8\] an f32 is 4 bytes at a 4-byte aligned offset, got size 8"),
    (("params", 8, "offset"), 762, r"params\[8\] an f32 is 4 bytes .* at offset 762"),
    (("params", 8, "name"), "gamma", r"params\[8\]\.name must be one of \['alpha', 'beta'\]"),
    (("params", 8, "name"), None, r"params\[8\]\.name must be a non-empty string"),
    (("params", 10, "name"), "alpha", r"params\[10\]\.name must be one of \['raster_along_m', 'group_size'\]"),
    (("params", 6, "tensormap", "operand"), "e", r"params\[6\]\.tensormap\.operand must be one of"),
    (("params", 7, "operand"), "e", r"params\[7\]\.operand must be one of \['a', 'b', 'c', 'd', 'problem'\]"),
    (("params", 7, "dims"), ["m", "x", "l"], r"params\[7\]\.dims names \['x'\]"),
    (("params", 6, "tensormap", "dims"), ["n", "x", "l"], r"params\[6\]\.tensormap\.dims names \['x'\]"),
    (("params", 6, "tensormap", "strides"), ["ldc", "batch_stride_e"],
     r"params\[6\]\.tensormap\.strides names \['batch_stride_e'\]"),
])
def test_malformed_c_and_f32_fields_are_named(tmp_path, path, value, message):
    doc = make_doc({"c": make_record("c", with_c=True)})
    target = doc["instances"]["c"]
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(CorruptArtifactError, match=message):
        load_doc(tmp_path, doc)
