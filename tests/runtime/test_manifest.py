"""manifest.json: strict validation of every field (runtime/contract.py), versions, cubin integrity,
immutability, and where a Runtime reads it from."""

import dataclasses
import json
from pathlib import Path

import pytest
from fake_kernels import IDS, RECORDS, make_doc, record, spec, write_kernels

from runtime import manifest, state
from runtime.contract import CONTRACT_VERSION, InstanceRecord, Manifest
from runtime.errors import CorruptArtifactError, InvalidArgumentError, UnknownInstanceError
from runtime.knobs import Knobs

TOP_FIELDS = ["arch", "profile", "toolchain", "instances"]
RECORD_FIELDS = [
    "spec",
    "sha256",
    "cubin_bytes",
    "symbol",
    "block",
    "cluster",
    "smem_bytes",
    "grid",
    "params",
    "param_bytes",
    "min_driver_version",
    "pdl",
    "stats",
]


def load_doc(tmp_path, doc, cubins=True):
    """Load and validate every record (a loaded manifest checks each record's launch contract on its
    first lookup; `check_all` is what doctor runs)."""
    loaded = manifest.load(str(write_kernels(tmp_path / "k", doc, cubins)))
    loaded.check_all()
    return loaded


def test_a_malformed_record_is_refused_at_its_first_lookup(tmp_path, doc):
    """Only the specs are parsed at load: a record's launch contract is validated on the first lookup of
    its id, so a damaged record fails there (before any launch) and leaves the others usable."""
    doc["instances"][IDS[0]]["params"][9]["kind"] = "f64"
    loaded = manifest.load(str(write_kernels(tmp_path / "k", doc, True)))
    assert sorted(loaded.specs) == sorted(IDS) and loaded.specs[IDS[0]].name() == IDS[0]
    assert loaded.record(IDS[1]).id == IDS[1]
    for _ in range(2):  # refused again on the next lookup: nothing half-built is cached
        with pytest.raises(CorruptArtifactError, match=r"params\[9\]\.kind must be one of"):
            loaded.record(IDS[0])
    with pytest.raises(CorruptArtifactError, match=r"params\[9\]\.kind must be one of"):
        loaded.check_all()
    # A spec that does not parse, or names another instance, is refused at load.
    doc["instances"][IDS[1]]["spec"]["schedule"] = "fast"
    with pytest.raises(CorruptArtifactError, match="spec is not a valid spec"):
        manifest.load(str(write_kernels(tmp_path / "k2", doc, True)))


def test_valid_manifest_loads_and_round_trips(kernels, doc):
    assert list(kernels.instances) == sorted(IDS)
    rec = kernels.record(IDS[0])
    assert rec == RECORDS[0] and rec.id == IDS[0] == rec.spec.name()
    assert rec.block == (384, 1, 1) and rec.cluster == (2, 1, 1) and rec.cluster_size == 2
    assert rec.param_offsets == (48, 176, 240, 368, 432, 560, 572, 576, 580, 584, 588)
    assert [p.kind for p in rec.params[:4]] == ["tensormap", "shape"] * 2
    assert rec.params[0].operand == "a" and rec.params[0].tensormap.dims == ("k", "m", "l")
    assert rec.params[1].dims == ("m", "k", "l") and rec.params[7].name == "raster_along_m"
    assert kernels.arch == "sm_90a" and rec.min_driver_version == 12080
    assert manifest.read_cubin(rec, verify=True).startswith(b"\x7fELF")
    assert kernels.to_json() == doc
    assert InstanceRecord.from_json(rec.to_json()) == rec


def test_records_are_immutable(kernels):
    rec = kernels.record(IDS[0])
    with pytest.raises(dataclasses.FrozenInstanceError):
        rec.smem_bytes = 0
    with pytest.raises(TypeError):
        kernels.instances["x"] = rec
    assert isinstance(rec.params, tuple) and isinstance(rec.spec.tile, tuple)


@pytest.mark.parametrize("field", TOP_FIELDS)
def test_missing_top_level_field(tmp_path, doc, field):
    del doc[field]
    with pytest.raises(CorruptArtifactError, match=rf"\b{field}\b is missing"):
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


@pytest.mark.parametrize("index,field", [(0, "tensormap"), (1, "operand"), (1, "dims"), (6, "name")])
def test_missing_kind_specific_param_field(tmp_path, doc, index, field):
    del doc["instances"][IDS[0]]["params"][index][field]
    with pytest.raises(CorruptArtifactError, match=rf"params\[{index}\]\.{field} is missing"):
        load_doc(tmp_path, doc)


@pytest.mark.parametrize(
    "field",
    [
        "operand",
        "dtype",
        "dims",
        "box",
        "element_strides",
        "swizzle",
        "interleave",
        "l2_promotion",
        "oob_fill",
        "strides",
    ],
)
def test_missing_tensormap_recipe_field(tmp_path, doc, field):
    del doc["instances"][IDS[0]]["params"][2]["tensormap"][field]
    with pytest.raises(CorruptArtifactError, match=rf"params\[2\]\.tensormap\.{field} is missing"):
        load_doc(tmp_path, doc)


@pytest.mark.parametrize(
    "path,value,message",
    [
        (("block",), [384, 1], r"block must be a list of 3 integers"),
        (("block",), [384, True, 1], r"block must be a list of 3 integers"),
        (("smem_bytes",), "232448", r"smem_bytes must be an integer"),
        (("sha256",), "ABC", r"sha256 must be 64 lowercase hex"),
        (("param_bytes",), 100, r"param_bytes 100 is smaller"),
        (("grid",), "tiles", r"grid must be one of \[.persistent_clusters., .grouped_clusters., .group_b"),
        (("cluster",), [1, 1, 1], r"cluster \[1, 1, 1\] disagrees with the spec's cluster"),
        (("pdl",), 1, r"pdl must be true or false"),
        (("spec", "schedule"), "fast", r"spec is not a valid spec"),
        (("params", 4, "offset"), 360, r"params\[4\]\.offset 360 overlaps"),
        (("params", 1, "size"), 16, r"params\[1\] a shape of 3 int32 is 12 bytes"),
        (("params", 2, "size"), 64, r"params\[2\] a CUtensorMap parameter is 128 bytes"),
        (("params", 2, "operand"), "a", r"params\[2\]\.operand 'a' disagrees"),
        (("params", 9, "kind"), "f64", r"params\[9\]\.kind must be one of"),
        (("params", 6, "name"), "beta", r"carry the scales \['beta'\]"),
        (("params", 2, "tensormap", "dtype"), "fp16", r"tensormap\.dtype fp16 disagrees"),
        (("future_field",), 1, r"future_field is not a field of contract version 7"),
    ],
)
def test_malformed_field_is_named(tmp_path, doc, path, value, message):
    target = doc["instances"][IDS[0]]
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(CorruptArtifactError, match=message):
        load_doc(tmp_path, doc)


def test_record_key_must_be_its_spec_id(tmp_path, doc):
    doc["instances"]["gemm_bf16_t128x256_c2x1"] = doc["instances"].pop(IDS[0])  # a pre-v2 style id
    with pytest.raises(CorruptArtifactError, match=f"names instance '{IDS[0]}', not its key"):
        load_doc(tmp_path, doc)


def test_top_level_type_errors_name_the_field(tmp_path, doc):
    with pytest.raises(CorruptArtifactError, match="field instances must be a JSON object"):
        load_doc(tmp_path, dict(doc, instances=[]), cubins=False)
    with pytest.raises(CorruptArtifactError, match="field min_driver_version is not a field"):
        load_doc(tmp_path, dict(doc, min_driver_version=12080), cubins=False)  # per record since v2


def test_wrong_contract_version(tmp_path, doc):
    doc["contract_version"] = CONTRACT_VERSION - 1
    with pytest.raises(
        CorruptArtifactError,
        match=f"contract version {CONTRACT_VERSION - 1}.*reads version {CONTRACT_VERSION}",
    ) as e:
        load_doc(tmp_path, doc)
    assert "one hgemm-sm90 build" in e.value.fix


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


def test_unknown_instance_suggests_and_a_non_string_id_is_refused(kernels):
    with pytest.raises(UnknownInstanceError) as e:
        kernels.record(IDS[0].replace("c2x1", "c2x2"))
    assert IDS[0] in e.value.suggestions
    for bad in (12345, None, b"x"):
        with pytest.raises(InvalidArgumentError, match="not a string"):
            kernels.record(bad)


def test_sha_mismatch(tmp_path, doc):
    rec = load_doc(tmp_path, doc).record(IDS[0])
    with open(rec.cubin_path, "r+b") as f:  # same size, one byte flipped
        f.seek(10)
        f.write(b"\x00" if f.read(1) != b"\x00" else b"\x01")
    with pytest.raises(CorruptArtifactError, match="sha256 is [0-9a-f]{64} but the manifest says") as e:
        manifest.read_cubin(rec, verify=True)
    assert e.value.instance == IDS[0] and e.value.path == rec.cubin_path
    assert manifest.read_cubin(rec, verify=False).startswith(b"\x7fELF")  # the knob's off switch


def test_sha_check_follows_the_knob(tmp_path, doc, fake, make_runtime):
    kernels = load_doc(tmp_path, doc)
    path = Path(kernels.record(IDS[0]).cubin_path)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    make_runtime(kernels, verify_sha256=False).kernels.get(fake.ctx(0), IDS[0])
    with pytest.raises(CorruptArtifactError, match="sha256"):
        make_runtime(kernels, verify_sha256=True).kernels.get(fake.ctx(0), IDS[0])


def test_missing_cubin_wrong_size_not_elf(tmp_path, doc):
    rec = load_doc(tmp_path, doc).record(IDS[0])
    Path(rec.cubin_path).write_bytes(b"\x7fELF")
    with pytest.raises(CorruptArtifactError, match="cubin is 4 bytes but the manifest says"):
        manifest.read_cubin(rec, verify=True)
    Path(rec.cubin_path).write_bytes(b"x" * rec.cubin_bytes)
    with pytest.raises(CorruptArtifactError, match="not an ELF file"):
        manifest.read_cubin(rec, verify=False)
    (tmp_path / "k" / rec.cubin).unlink()
    with pytest.raises(CorruptArtifactError, match=f"cubin {rec.cubin} is missing") as e:
        manifest.read_cubin(rec, verify=True)
    assert e.value.instance == IDS[0]


def test_a_runtime_reads_its_manifest_once_from_the_kernel_dir_knob(tmp_path, doc):
    assert manifest.kernel_dir(Knobs()).endswith("kernels")
    write_kernels(tmp_path / "elsewhere", doc)
    rt = state.Runtime(Knobs(kernel_dir=str(tmp_path / "elsewhere")))
    m = rt.manifest
    assert m.directory == str(tmp_path / "elsewhere") and rt.manifest is m


def test_record_with_c_epilogue_loads(tmp_path):
    s = spec(with_c=True)
    rec = load_doc(tmp_path, make_doc([record(s)])).record(s.name())
    assert [p.operand for p in rec.params if p.kind == "tensormap"] == ["a", "b", "d", "c"]
    assert [p.operand for p in rec.params if p.kind == "shape"] == ["a", "b", "d", "c"]
    assert [(p.name, p.offset, p.size) for p in rec.params if p.kind == "f32"] == [
        ("alpha", 764, 4),
        ("beta", 768, 4),
    ]
    assert rec.spec.has_c and rec.spec.c_dtype == "bf16"


@pytest.mark.parametrize(
    "path,value,message",
    [
        (("params", 8, "size"), 8, r"params\[8\] an f32 is 4 bytes at a 4-byte aligned offset, got size 8"),
        (("params", 8, "offset"), 762, r"params\[8\] an f32 is 4 bytes .* at offset 762"),
        (("params", 8, "name"), "gamma", r"params\[8\]\.name must be one of \['alpha', 'beta'\]"),
        (("params", 8, "name"), None, r"params\[8\]\.name must be a non-empty string"),
        (
            ("params", 10, "name"),
            "alpha",
            r"params\[10\]\.name must be one of "
            r"\['raster_along_m', 'group_size', 'prefetch_operand', 'k_splits'\]",
        ),
        (("params", 6, "tensormap", "operand"), "e", r"params\[6\]\.tensormap\.operand must be one of"),
        (
            ("params", 7, "operand"),
            "e",
            r"params\[7\]\.operand must be one of \['a', 'b', 'd', 'c', 'problem'\]",
        ),
        (("params", 7, "dims"), ["m", "x", "l"], r"params\[7\]\.dims must be a list of some names"),
        (
            ("params", 6, "tensormap", "strides"),
            ["ldc", "batch_stride_e"],
            r"params\[6\]\.tensormap\.strides must be",
        ),
    ],
)
def test_malformed_c_and_f32_fields_are_named(tmp_path, path, value, message):
    s = spec(with_c=True)
    doc = make_doc([record(s)])
    target = doc["instances"][s.name()]
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(CorruptArtifactError, match=message):
        load_doc(tmp_path, doc)


def test_manifest_built_in_memory_serves_a_runtime(kernels, fake, make_runtime):
    rt = make_runtime(Manifest.from_json(kernels.to_json(), kernels.path))
    assert rt.kernels.get(fake.ctx(0), IDS[1]).record.id == IDS[1]
