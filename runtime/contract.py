"""The launch contract as typed records: what codegen writes into ``manifest.json`` and the runtime reads.

One vocabulary for both sides (docs/ARCHITECTURE.md shows the data flow, docs/CONTRACT.md the format):
codegen builds an ``InstanceRecord`` per compiled instance from what it captured off the DSL's host code
(codegen/contract.py) and writes ``Manifest.to_json()``; the runtime reads ``Manifest.from_json()`` and
launches from the records alone. What an instance computes (dtypes, operands, layouts, tile) is its
``GemmSpec`` (runtime/spec.py); this module adds how to launch it: the kernel symbol, block, cluster,
shared memory, the grid rule and the ordered parameter list with each parameter's meaning.

``from_json`` validates strictly, because the manifest is the only thing the runtime trusts to launch a
cubin: a missing, unknown or mistyped field raises ``CorruptArtifactError`` naming its path (e.g.
``instances.<id>.params[3].size``) here, at load, rather than surfacing later as a wrong launch. Records
are frozen and hold tuples and read-only mappings, so they can be shared between threads and cached.
Any change of meaning bumps ``CONTRACT_VERSION`` (with docs/CONTRACT.md); a runtime reads exactly its own
version.
"""

from __future__ import annotations

import os
from collections.abc import Mapping  # not typing: importing it costs ~10 ms
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType

from .errors import CorruptArtifactError, InvalidArgumentError, UnknownInstanceError
from .spec import EXTENTS, OPERAND_EXTENTS, STRIDES, DType, GemmSpec, KSplit, SpecError, Varlen

FORMAT = "hgemm-sm90-manifest"
# 2 (2026-11-30): typed records; the spec is complete, the grid rule a name, alignment a TMA constant,
# the cubin file named by the id, min_driver_version per record.
# 3 (2026-12-01): spec.swap_ab; a swap-AB record's descriptors come in the kernel's slot order (B, A, D, C).
# 4 (2026-12-01): spec.k_split; split-K records take the int32 scalar k_splits and a "pointer" parameter,
# the workspace.
# 5 (2026-12-01): spec.varlen; grouped (varlen M) records take D as a "tensor" parameter (address,
# extents, strides: stored from registers, not by TMA), the pointer cu_seqlens_m, the extent g (groups) and
# the grid rule "grouped_clusters".
# 6 (2026-12-01): plain-walk records (varlen "none") take the int32 scalar prefetch_operand (0: none, 1: the
# kernel's A, 2: its B), the operand the producer may load before waiting for the previous grid.
# 7 (2026-12-02): k_split "stream"; stream-K records take the workspace pointer alone (no k_splits), and
# their grid rule "persistent_clusters" counts cluster tiles x min(k-tiles, 4) units.
CONTRACT_VERSION = 7
ARCH = "sm_90a"
# Every operand moves through TMA, which needs 16-byte aligned addresses, leading dimensions and batch
# strides, and whole 16-byte chunks along the contiguous extent (runtime/problem.py checks these).
TMA_ALIGN_BYTES = 16
DESCRIPTOR_BYTES = 128  # a CUtensorMap kernel parameter
POINTER_BYTES = 8  # a raw device pointer kernel parameter

# The grid rules a record may name. "persistent_clusters": grid = (cluster_m * P, cluster_n, 1) with
# P = min(cluster tiles of the problem, max active clusters of the kernel); "grouped_clusters": the same
# with the grouped (varlen M) problem's bound on its cluster tiles; "group_batches": the same with one
# batch of the tile grid per group (grouped K) (runtime/scheduling.py, all).
GRID_RULES = ("persistent_clusters", "grouped_clusters", "group_batches")
PARAM_KINDS = ("tensormap", "tensor", "shape", "i32", "f32", "pointer", "opaque")
# The scalars the runtime can fill, by kind: the walk order and split count (runtime/scheduling.py), the
# operand a PDL launch may load early (launch(..., b_ready=True)), and the epilogue's scales (alpha
# always, beta where the epilogue reads C).
SCALARS = {"i32": ("raster_along_m", "group_size", "prefetch_operand", "k_splits"), "f32": ("alpha", "beta")}
# The raw device pointers the runtime can fill: split-K's workspace (launch(..., workspace=)) and a
# grouped instance's row offsets (launch(..., cu_seqlens_m=)).
POINTERS = ("workspace", "cu_seqlens_m", "cu_seqlens_k", "a_idx")
# TMA recipe fields whose only values with an established encoding are these (runtime/tensormap.py).
SWIZZLES = ("none", "32B", "64B", "128B")


@dataclass(frozen=True, slots=True)
class TensorMapRecipe:
    """How to encode one operand's TMA descriptor for a problem: the tensor's dims, contiguous one first,
    each named by a problem extent; the byte strides of dims 1.. named by a leading dimension or batch
    stride (in elements, scaled by the dtype); the shared-memory box and the encoding options."""

    operand: str
    dtype: DType
    dims: tuple[str, ...]
    strides: tuple[str, ...]
    box: tuple[int, ...]
    element_strides: tuple[int, ...]
    swizzle: str
    interleave: str = "none"
    l2_promotion: str = "128B"
    oob_fill: str = "none"

    @property
    def rank(self) -> int:
        return len(self.dims)

    def to_json(self) -> dict:
        return {
            "operand": self.operand,
            "dtype": str(self.dtype),
            "dims": list(self.dims),
            "strides": list(self.strides),
            "box": list(self.box),
            "element_strides": list(self.element_strides),
            "swizzle": self.swizzle,
            "interleave": self.interleave,
            "l2_promotion": self.l2_promotion,
            "oob_fill": self.oob_fill,
        }


@dataclass(frozen=True, slots=True)
class Param:
    """One kernel parameter: where it sits in the packed parameter buffer and what fills it.

    kind "tensormap": a 128-byte descriptor of ``operand`` encoded from ``tensormap``; "tensor": the
    operand as a plain global tensor (``tensor_layout``: its address, int32 extents named by ``dims``,
    then int64 element strides named by ``strides``, 8-byte aligned); "shape": int32 extents, one per
    name in ``dims`` (``operand`` says whose, informational; "problem" for loose ones); "i32"/"f32": the
    scalar ``name``; "pointer": the 8-byte device address ``name``; "opaque": compile-time data the
    kernel ignores (left zero)."""

    kind: str
    offset: int
    size: int
    operand: str | None = None
    dims: tuple[str, ...] = ()
    name: str | None = None
    tensormap: TensorMapRecipe | None = None
    strides: tuple[str, ...] = ()

    def tensor_layout(self) -> tuple[int, int, int]:
        """A "tensor" parameter's byte layout, relative to its offset: (extents at, strides at, size)."""
        strides_at = -(-(8 + 4 * len(self.dims)) // 8) * 8
        return 8, strides_at, strides_at + 8 * len(self.strides)

    def to_json(self) -> dict:
        out: dict = {"kind": self.kind, "offset": self.offset, "size": self.size}
        if self.operand is not None:
            out["operand"] = self.operand
        if self.kind in ("shape", "tensor"):
            out["dims"] = list(self.dims)
        if self.kind == "tensor":
            out["strides"] = list(self.strides)
        if self.name is not None:
            out["name"] = self.name
        if self.tensormap is not None:
            out["tensormap"] = self.tensormap.to_json()
        return out


@dataclass(frozen=True)
class InstanceRecord:
    """The launch contract of one kernel instance. Its id is its spec's name; its cubin is ``<id>.cubin``
    beside manifest.json (``directory``, set when read; not part of the JSON)."""

    spec: GemmSpec
    sha256: str
    cubin_bytes: int
    symbol: str
    block: tuple[int, int, int]
    cluster: tuple[int, int, int]
    smem_bytes: int
    grid_rule: str
    params: tuple[Param, ...]
    param_bytes: int
    min_driver_version: int  # the newest CUDA API the cubin declares, in cuDriverGetVersion units
    pdl: bool  # the kernel waits for its stream predecessor (griddepcontrol.wait): pdl=True is safe
    stats: Mapping[str, float] = field(default_factory=dict)  # informational: registers, spills, ...
    directory: str = field(default="", compare=False)

    @cached_property  # frozen dataclasses allow cached_property (it writes the instance __dict__)
    def id(self) -> str:
        return self.spec.name()

    @property
    def cubin(self) -> str:
        return f"{self.id}.cubin"

    @property
    def cubin_path(self) -> str:
        return os.path.join(self.directory, self.cubin)

    @property
    def cluster_size(self) -> int:
        return self.cluster[0] * self.cluster[1] * self.cluster[2]

    @cached_property
    def param_offsets(self) -> tuple[int, ...]:
        return tuple(p.offset for p in self.params)

    def to_json(self) -> dict:
        return {
            "spec": self.spec.to_json(),
            "sha256": self.sha256,
            "cubin_bytes": self.cubin_bytes,
            "symbol": self.symbol,
            "block": list(self.block),
            "cluster": list(self.cluster),
            "smem_bytes": self.smem_bytes,
            "grid": self.grid_rule,
            "params": [p.to_json() for p in self.params],
            "param_bytes": self.param_bytes,
            "min_driver_version": self.min_driver_version,
            "pdl": self.pdl,
            "stats": dict(self.stats),
        }

    @classmethod
    def from_json(
        cls, doc, where: str = "record", path: str | None = None, directory: str = ""
    ) -> InstanceRecord:
        """Validate a record document; ``where`` prefixes field paths in errors, ``path`` names the file."""
        return _record(_Reader(path or where), doc, where, directory)


@dataclass(frozen=True)
class Manifest:
    """A validated manifest: top-level facts plus one ``InstanceRecord`` per instance id."""

    profile: str
    toolchain: Mapping[str, str]
    instances: Mapping[str, InstanceRecord]
    arch: str = ARCH
    path: str = field(default="", compare=False)  # where it was read from ("" if built in memory)

    @property
    def directory(self) -> str:
        return os.path.dirname(self.path)

    @property
    def specs(self) -> Mapping[str, GemmSpec]:
        """Each instance's spec by id, without building the records: a manifest read from JSON parses
        the specs at load and each record's launch contract on its first use (`LazyRecords`)."""
        specs = getattr(self.instances, "specs", None)
        if specs is None:
            specs = MappingProxyType({iid: rec.spec for iid, rec in self.instances.items()})
        return specs

    def check_all(self) -> None:
        """Validate every record now (a manifest read from JSON defers each to its first use):
        `CorruptArtifactError` for the first malformed one. `doctor` runs it."""
        for iid in self.instances:
            self.instances[iid]  # a lookup builds the record, validating it

    def record(self, instance_id: str) -> InstanceRecord:
        """The record of ``instance_id``; ``UnknownInstanceError`` with close matches if absent."""
        rec = self.instances.get(instance_id) if type(instance_id) is str else None
        if rec is None:
            if not isinstance(instance_id, str):
                raise InvalidArgumentError(
                    f"instance id {instance_id!r} is not a string (type {type(instance_id).__name__})",
                    "pass an instance id string such as one from hgemm_sm90.instances()",
                )
            raise UnknownInstanceError(instance_id, self.instances.keys())
        return rec

    def to_json(self) -> dict:
        return {
            "format": FORMAT,
            "contract_version": CONTRACT_VERSION,
            "arch": self.arch,
            "profile": self.profile,
            "toolchain": dict(self.toolchain),
            "instances": {iid: rec.to_json() for iid, rec in sorted(self.instances.items())},
        }

    @classmethod
    def from_json(cls, doc, path: str) -> Manifest:
        """Validate a decoded manifest document; ``path`` locates it and, beside it, its cubins."""
        r = _Reader(path)
        if not isinstance(doc, dict):
            r.fail("<top level>", "must be a JSON object")
        fmt = doc.get("format")
        if fmt != FORMAT:
            raise CorruptArtifactError(
                f"not an hgemm-sm90 manifest (format {fmt!r}, expected {FORMAT!r})", path
            )
        version = doc.get("contract_version")
        if version != CONTRACT_VERSION or type(version) is not int:
            raise CorruptArtifactError(
                f"manifest contract version {version!r}, but this runtime reads version {CONTRACT_VERSION}",
                path,
                fix="use the runtime and kernels of one hgemm-sm90 build: reinstall the wheel they "
                "came in, or rebuild the kernels with this source tree if HGEMM_KERNEL_DIR "
                "points at your own build",
            )
        r.known(doc, ("format", "contract_version", "arch", "profile", "toolchain", "instances"), "")
        arch = r.str_(doc, "arch", "")
        if arch != ARCH:
            r.fail("arch", f"must be {ARCH!r}, got {arch!r}")
        directory = os.path.dirname(os.path.abspath(path))
        instances = LazyRecords(r, r.map_(doc, "instances", ""), directory)
        toolchain = r.map_(doc, "toolchain", "")
        return cls(
            profile=r.str_(doc, "profile", ""),
            toolchain=MappingProxyType(dict(toolchain)),
            instances=instances,
            arch=arch,
            path=os.path.abspath(path),
        )


class LazyRecords(Mapping):
    """A manifest's records by id, read from its JSON: every record's spec is parsed and checked against
    its id at load (dispatch needs them all: `Manifest.specs`), the rest of a record (its launch
    contract: parameters, grid rule, cubin facts) on the first lookup of that id, since a process
    launches a few of the hundreds shipped (on the 2-core CPU box, building all 458 records took about
    half of a process's first `select()`). A malformed record raises `CorruptArtifactError` at its
    first lookup, before anything is launched; `Manifest.check_all` (doctor) validates them all."""

    def __init__(self, reader: _Reader, docs: Mapping, directory: str):
        self._reader, self._docs, self._directory = reader, docs, directory
        self._built: dict[str, InstanceRecord] = {}
        specs = {}
        for iid, doc in docs.items():
            where = f"instances.{iid}"
            if not isinstance(doc, dict):
                reader.fail(where, "must be a JSON object")
            specs[iid] = _spec_of(reader, doc, where, iid)
        self.specs = MappingProxyType(specs)

    def __getitem__(self, iid: str) -> InstanceRecord:
        rec = self._built.get(iid)
        if rec is None:
            # Two threads may both build it: the same value, and the dict assignment is atomic.
            rec = _record(
                self._reader, self._docs[iid], f"instances.{iid}", self._directory, iid, self.specs[iid]
            )
            self._built[iid] = rec
        return rec

    def __iter__(self):
        return iter(self._docs)

    def __len__(self) -> int:
        return len(self._docs)

    def __contains__(self, iid) -> bool:
        return iid in self._docs


# ---- validation ---------------------------------------------------------------------------------------


def _at(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


class _Reader:
    """Field accessors that raise CorruptArtifactError naming the field path (e.g. instances.x.block)."""

    def __init__(self, path: str):
        self.path = path

    def fail(self, where: str, what: str):
        raise CorruptArtifactError(f"malformed manifest: field {where} {what}", self.path)

    def known(self, obj: Mapping, keys, where: str) -> None:
        extra = sorted(set(obj) - set(keys))
        if extra:
            self.fail(_at(where, extra[0]), f"is not a field of contract version {CONTRACT_VERSION}")

    def get(self, obj: Mapping, key: str, where: str):
        if key not in obj:
            self.fail(_at(where, key), "is missing")
        return obj[key]

    def int_(self, obj, key, where, lo=0) -> int:
        v = self.get(obj, key, where)
        if type(v) is not int or v < lo:  # type() check: bool is an int subclass and is rejected
            self.fail(_at(where, key), f"must be an integer >= {lo}, got {v!r}")
        return v

    def bool_(self, obj, key, where) -> bool:
        v = self.get(obj, key, where)
        if type(v) is not bool:
            self.fail(_at(where, key), f"must be true or false, got {v!r}")
        return v

    def str_(self, obj, key, where) -> str:
        v = self.get(obj, key, where)
        if not isinstance(v, str) or not v:
            self.fail(_at(where, key), f"must be a non-empty string, got {v!r}")
        return v

    def map_(self, obj, key, where) -> dict:
        v = self.get(obj, key, where)
        if not isinstance(v, dict):
            self.fail(_at(where, key), f"must be a JSON object, got {type(v).__name__}")
        return v

    def ints(self, obj, key, where, n, lo=1) -> tuple[int, ...]:
        v = self.get(obj, key, where)
        if not isinstance(v, list) or len(v) != n or any(type(x) is not int or x < lo for x in v):
            self.fail(_at(where, key), f"must be a list of {n} integers >= {lo}, got {v!r}")
        return tuple(v)

    def names(self, obj, key, where, allowed, n=None) -> tuple[str, ...]:
        v = self.get(obj, key, where)
        if not isinstance(v, list) or (n is not None and len(v) != n) or any(x not in allowed for x in v):
            self.fail(
                _at(where, key), f"must be a list of {n or 'some'} names from {list(allowed)}, got {v!r}"
            )
        return tuple(v)

    def choice(self, obj, key, where, allowed) -> str:
        v = self.str_(obj, key, where)
        if v not in allowed:
            self.fail(_at(where, key), f"must be one of {list(allowed)}, got {v!r}")
        return v


_RECIPE_KEYS = (
    "operand",
    "dtype",
    "dims",
    "strides",
    "box",
    "element_strides",
    "swizzle",
    "interleave",
    "l2_promotion",
    "oob_fill",
)


def _recipe(r: _Reader, doc, where: str, spec: GemmSpec) -> TensorMapRecipe:
    if not isinstance(doc, dict):
        r.fail(where, "must be a JSON object")
    r.known(doc, _RECIPE_KEYS, where)
    operand = r.choice(doc, "operand", where, spec.operands)
    dtype = r.choice(doc, "dtype", where, tuple(DType))
    if dtype != spec.dtype_of(operand):
        r.fail(
            _at(where, "dtype"), f"{dtype} disagrees with the spec's {operand} dtype {spec.dtype_of(operand)}"
        )
    dims = r.names(doc, "dims", where, EXTENTS)
    if not 1 <= len(dims) <= 5:
        r.fail(_at(where, "dims"), f"must name 1 to 5 dims, got {len(dims)}")
    return TensorMapRecipe(
        operand=operand,
        dtype=DType(dtype),
        dims=dims,
        strides=r.names(doc, "strides", where, STRIDES, len(dims) - 1),
        box=r.ints(doc, "box", where, len(dims)),
        element_strides=r.ints(doc, "element_strides", where, len(dims)),
        swizzle=r.choice(doc, "swizzle", where, SWIZZLES),
        interleave=r.str_(doc, "interleave", where),
        l2_promotion=r.str_(doc, "l2_promotion", where),
        oob_fill=r.str_(doc, "oob_fill", where),
    )


def _param(r: _Reader, p, where: str, spec: GemmSpec) -> Param:
    if not isinstance(p, dict):
        r.fail(where, "must be a JSON object")
    kind = r.choice(p, "kind", where, PARAM_KINDS)
    offset, size = r.int_(p, "offset", where), r.int_(p, "size", where)
    if kind == "tensormap":
        r.known(p, ("kind", "offset", "size", "operand", "tensormap"), where)
        recipe = _recipe(r, r.map_(p, "tensormap", where), _at(where, "tensormap"), spec)
        if p.get("operand", recipe.operand) != recipe.operand:
            r.fail(_at(where, "operand"), f"{p['operand']!r} disagrees with its recipe's {recipe.operand!r}")
        # Offsets are the cubin's (KPARAM_INFO, relative to the parameter block, which the driver places
        # at constant-bank offset 0x210): the packed host buffer only has to hold each value at its offset.
        if size != DESCRIPTOR_BYTES:
            r.fail(where, f"a CUtensorMap parameter is {DESCRIPTOR_BYTES} bytes, got size {size}")
        return Param(kind, offset, size, operand=recipe.operand, tensormap=recipe)
    if kind == "tensor":
        r.known(p, ("kind", "offset", "size", "operand", "dims", "strides"), where)
        operand = r.choice(p, "operand", where, spec.operands)
        dims = r.names(p, "dims", where, EXTENTS)
        strides = r.names(p, "strides", where, STRIDES)
        param = Param(kind, offset, size, operand=operand, dims=dims, strides=strides)
        if size != param.tensor_layout()[2] or offset % 8:
            r.fail(
                where,
                f"a tensor of {len(dims)} extents and {len(strides)} strides is {param.tensor_layout()[2]} "
                f"bytes at an 8-byte aligned offset, got size {size} at offset {offset}",
            )
        return param
    if kind == "shape":
        r.known(p, ("kind", "offset", "size", "operand", "dims"), where)
        operand = r.choice(p, "operand", where, (*OPERAND_EXTENTS, "problem"))
        dims = r.names(p, "dims", where, EXTENTS)
        if not dims or size != 4 * len(dims) or offset % 4:
            r.fail(
                where,
                f"a shape of {len(dims)} int32 is {4 * len(dims)} bytes at a 4-byte aligned "
                f"offset, got size {size} at offset {offset}",
            )
        return Param(kind, offset, size, operand=operand, dims=dims)
    if kind in SCALARS:  # i32, f32: one named 4-byte scalar
        r.known(p, ("kind", "offset", "size", "name"), where)
        name = r.choice(p, "name", where, SCALARS[kind])
        if size != 4 or offset % 4:
            r.fail(
                where, f"an {kind} is 4 bytes at a 4-byte aligned offset, got size {size} at offset {offset}"
            )
        return Param(kind, offset, size, name=name)
    if kind == "pointer":
        r.known(p, ("kind", "offset", "size", "name"), where)
        name = r.choice(p, "name", where, POINTERS)
        if size != POINTER_BYTES or offset % POINTER_BYTES:
            r.fail(
                where, f"a pointer is 8 bytes at an 8-byte aligned offset, got size {size} at offset {offset}"
            )
        return Param(kind, offset, size, name=name)
    r.known(p, ("kind", "offset", "size"), where)
    return Param(kind, offset, size)  # opaque


_RECORD_KEYS = (
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
)


def _spec_of(r: _Reader, rec: dict, where: str, iid: str | None) -> GemmSpec:
    """A record's spec, checked against the id it is filed under (when given)."""
    try:
        spec = GemmSpec.from_json(r.map_(rec, "spec", where))
    except SpecError as e:
        r.fail(_at(where, "spec"), f"is not a valid spec: {e}")
    if iid is not None and spec.name() != iid:
        r.fail(_at(where, "spec"), f"names instance {spec.name()!r}, not its key {iid!r}")
    return spec


def _record(
    r: _Reader, rec, where: str, directory: str, iid: str | None = None, spec: GemmSpec | None = None
) -> InstanceRecord:
    """Validate one record document (``spec``: its spec, already parsed by `_spec_of`)."""
    if not isinstance(rec, dict):
        r.fail(where, "must be a JSON object")
    r.known(rec, _RECORD_KEYS, where)
    if spec is None:
        spec = _spec_of(r, rec, where, iid)
    sha = r.str_(rec, "sha256", where)
    if len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha):
        r.fail(_at(where, "sha256"), f"must be 64 lowercase hex digits, got {sha!r}")
    cluster = r.ints(rec, "cluster", where, 3)
    if cluster != (*spec.cluster, 1):
        r.fail(
            _at(where, "cluster"), f"{list(cluster)} disagrees with the spec's cluster {list(spec.cluster)}"
        )
    param_bytes = r.int_(rec, "param_bytes", where)
    raw_params = r.get(rec, "params", where)
    if not isinstance(raw_params, list):
        r.fail(_at(where, "params"), "must be a list")
    params = tuple(_param(r, p, f"{where}.params[{i}]", spec) for i, p in enumerate(raw_params))
    end = 0
    for i, p in enumerate(params):  # ordered by offset, no overlap, inside the packed buffer
        if p.offset < end:
            r.fail(f"{where}.params[{i}].offset", f"{p.offset} overlaps the previous parameter")
        end = p.offset + p.size
    if end > param_bytes:
        r.fail(_at(where, "param_bytes"), f"{param_bytes} is smaller than the parameters' extent {end}")
    described = {p.operand for p in params if p.kind in ("tensormap", "tensor")}
    if described != set(spec.operands):
        r.fail(
            _at(where, "params"), f"describe operands {sorted(described)}, the spec has {list(spec.operands)}"
        )
    scalars = {p.name for p in params if p.kind == "f32"}
    if scalars != ({"alpha", "beta"} if spec.has_c else {"alpha"}):
        r.fail(
            _at(where, "params"),
            f"carry the scales {sorted(scalars)}; the spec's epilogue needs "
            f"{'alpha and beta' if spec.has_c else 'alpha'}",
        )
    named = {p.name for p in params if p.kind in ("i32", "pointer")}
    want = {KSplit.split: {"k_splits", "workspace"}, KSplit.stream: {"workspace"}}.get(spec.k_split, set())
    if named & {"k_splits", "workspace"} != want:
        r.fail(
            _at(where, "params"),
            "must carry k_splits and the workspace pointer exactly when the spec is split-K, the workspace "
            f"pointer alone when it is stream-K (k_split {spec.k_split}; parameters name {sorted(named)})",
        )
    grid_rule = r.choice(rec, "grid", where, GRID_RULES)
    for varlen, pointer, rule in (
        (Varlen.m, "cu_seqlens_m", "grouped_clusters"),
        (Varlen.k, "cu_seqlens_k", "group_batches"),
    ):
        if (pointer in named) != (spec.varlen == varlen) or (grid_rule == rule) != (spec.varlen == varlen):
            r.fail(
                _at(where, "params"),
                f"must carry the {pointer} pointer and name the grid rule {rule} exactly when the "
                f"spec's varlen is {varlen} (varlen {spec.varlen}; parameters name {sorted(named)}, "
                f"grid {grid_rule})",
            )
    if ("a_idx" in named) != spec.gather_a:
        r.fail(
            _at(where, "params"),
            f"must carry the a_idx pointer exactly when the spec gathers A (gather_a {spec.gather_a}; "
            f"parameters name {sorted(named)})",
        )
    stats = r.map_(rec, "stats", where)
    if any(type(v) not in (int, float) for v in stats.values()):
        r.fail(_at(where, "stats"), "must map names to numbers")
    return InstanceRecord(
        spec=spec,
        sha256=sha,
        cubin_bytes=r.int_(rec, "cubin_bytes", where, lo=1),
        symbol=r.str_(rec, "symbol", where),
        block=r.ints(rec, "block", where, 3),
        cluster=cluster,
        smem_bytes=r.int_(rec, "smem_bytes", where),
        grid_rule=grid_rule,
        params=params,
        param_bytes=param_bytes,
        min_driver_version=r.int_(rec, "min_driver_version", where, lo=1000),
        pdl=r.bool_(rec, "pdl", where),
        stats=MappingProxyType(dict(stats)),
        directory=directory,
    )
