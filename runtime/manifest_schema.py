"""The manifest document's types and its validation (the launch contract, docs/CONTRACT.md).

The manifest is the only thing the runtime reads to launch a cubin, so it is validated strictly at load:
a field that is missing or of the wrong type raises ``CorruptArtifactError`` naming that field, here,
rather than surfacing later as a wrong launch. Records are frozen dataclasses whose nested mappings are
read-only (``MappingProxyType``) and whose lists are tuples: a record can be shared between threads and
cached freely. Unknown extra fields are ignored (additive, backward-compatible changes need no new
contract version); anything else that changes meaning must bump ``CONTRACT_VERSION`` together with
docs/CONTRACT.md and the codegen.
"""

from __future__ import annotations

import os
from collections.abc import Mapping  # not typing: importing it costs ~10 ms
from dataclasses import dataclass
from functools import cached_property
from types import MappingProxyType

from .errors import CorruptArtifactError, UnknownInstanceError

CONTRACT_VERSION = 1
FORMAT = "hgemm-sm90-manifest"
ARCH = "sm_90a"
PARAM_KINDS = ("tensormap", "shape", "i32", "f32", "opaque")
# The names a parameter may carry: the runtime can fill exactly these (runtime/problem.py, runtime/api.py),
# so a record naming anything else is rejected here, at load, rather than failing a launch later.
OPERANDS = ("a", "b", "c", "d")  # c: the epilogue's C operand, only in instances that read it
EXTENTS = ("m", "n", "k", "l")
STRIDES = tuple(f"ld{op}" for op in OPERANDS) + tuple(f"batch_stride_{op}" for op in OPERANDS)
SCALARS = {"i32": ("raster_along_m", "group_size"), "f32": ("alpha", "beta")}
_RECIPE_STR_FIELDS = ("operand", "dtype", "swizzle", "interleave", "l2_promotion", "oob_fill")


@dataclass(frozen=True)
class Param:
    """One kernel parameter: where it sits in the packed buffer and what fills it (CONTRACT.md)."""

    index: int
    kind: str  # one of PARAM_KINDS
    offset: int
    size: int
    operand: str | None = None  # tensormap: a, b, c or d; shape: the same or "problem" (informational)
    dims: tuple[str, ...] = ()  # shape: which extent fills each int32 slot
    name: str | None = None  # i32, f32: the scalar's name
    tensormap: Mapping[str, object] | None = None  # tensormap: the encoding recipe


@dataclass(frozen=True)
class InstanceRecord:
    """The launch contract of one kernel instance."""

    id: str
    spec: Mapping[str, object]
    cubin: str  # file name beside manifest.json
    cubin_path: str  # absolute path of that file
    sha256: str
    cubin_bytes: int
    symbol: str
    block: tuple[int, int, int]
    cluster: tuple[int, int, int]
    smem_bytes: int
    grid: Mapping[str, object]
    params: tuple[Param, ...]
    param_bytes: int
    alignment_bytes: Mapping[str, int]
    stats: Mapping[str, object]
    pdl: bool = False  # the kernel waits on its predecessor (griddepcontrol.wait): pdl=True is safe

    @property
    def cluster_size(self) -> int:
        return self.cluster[0] * self.cluster[1] * self.cluster[2]

    @cached_property  # read on every launch: computed once (frozen dataclasses allow this)
    def param_offsets(self) -> tuple[int, ...]:
        return tuple(p.offset for p in self.params)


@dataclass(frozen=True)
class Manifest:
    """A validated manifest: top-level facts plus one ``InstanceRecord`` per instance id."""

    path: str
    directory: str
    arch: str
    min_driver_version: int
    profile: str
    toolchain: Mapping[str, object]
    instances: Mapping[str, InstanceRecord]

    def record(self, instance_id: str) -> InstanceRecord:
        """The record of ``instance_id``; ``UnknownInstanceError`` with close matches if absent."""
        rec = self.instances.get(instance_id)
        if rec is None:
            raise UnknownInstanceError(instance_id, self.instances.keys())
        return rec


def _freeze(v):
    if isinstance(v, dict):
        return MappingProxyType({k: _freeze(x) for k, x in v.items()})
    if isinstance(v, list):
        return tuple(_freeze(x) for x in v)
    return v


def _at(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


class _Reader:
    """Field accessors that raise CorruptArtifactError naming the field path (e.g. instances.x.block)."""

    def __init__(self, path: str):
        self.path = path

    def fail(self, where: str, what: str):
        raise CorruptArtifactError(f"malformed manifest: field {where} {what}", self.path)

    def get(self, obj: Mapping, key: str, where: str):
        if key not in obj:
            self.fail(_at(where, key), "is missing")
        return obj[key]

    def int_(self, obj, key, where, lo=0) -> int:
        v = self.get(obj, key, where)
        if type(v) is not int or v < lo:  # type() check: bool is an int subclass and is rejected
            self.fail(_at(where, key), f"must be an integer >= {lo}, got {v!r}")
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

    def strs(self, obj, key, where, n=None, allowed=None) -> tuple[str, ...]:
        v = self.get(obj, key, where)
        if not isinstance(v, list) or not v or (n is not None and len(v) != n) or any(
                not isinstance(x, str) for x in v):
            self.fail(_at(where, key), f"must be a list of {n or 'some'} strings, got {v!r}")
        if allowed is not None and not set(v) <= set(allowed):
            self.fail(_at(where, key), f"names {sorted(set(v) - set(allowed))}; known: {list(allowed)}")
        return tuple(v)

    def choice(self, obj, key, where, allowed) -> str:
        v = self.str_(obj, key, where)
        if v not in allowed:
            self.fail(_at(where, key), f"must be one of {list(allowed)}, got {v!r}")
        return v


def _param(r: _Reader, p, i: int, where: str) -> Param:
    w = f"{where}[{i}]"
    if not isinstance(p, dict):
        r.fail(w, "must be a JSON object")
    kind = r.str_(p, "kind", w)
    offset, size = r.int_(p, "offset", w), r.int_(p, "size", w)
    if kind == "tensormap":
        recipe = r.map_(p, "tensormap", w)
        rw = f"{w}.tensormap"
        for k in _RECIPE_STR_FIELDS:
            r.str_(recipe, k, rw)
        r.choice(recipe, "operand", rw, OPERANDS)
        rank = r.int_(recipe, "rank", rw, lo=1)
        r.strs(recipe, "dims", rw, rank, allowed=EXTENTS)
        if rank > 1:
            r.strs(recipe, "strides", rw, rank - 1, allowed=STRIDES)
        r.ints(recipe, "box", rw, rank)
        r.ints(recipe, "element_strides", rw, rank)
        operand = p.get("operand", recipe["operand"])
        if operand != recipe["operand"]:
            r.fail(f"{w}.operand", f"{operand!r} disagrees with its recipe's {recipe['operand']!r}")
        # Offsets are the cubin's (KPARAM_INFO, relative to the parameter block, which the driver places
        # at constant-bank offset 0x210): a descriptor at block offset 48 is 64-byte aligned in the bank.
        # The packed host buffer only has to hold each value at its offset; its alignment is irrelevant.
        if size != 128:
            r.fail(w, f"a CUtensorMap parameter is 128 bytes, got size {size} at offset {offset}")
        return Param(i, kind, offset, size, operand=operand, tensormap=_freeze(recipe))
    if kind == "shape":
        operand = r.choice(p, "operand", w, (*OPERANDS, "problem"))
        dims = r.strs(p, "dims", w, allowed=EXTENTS)
        if size != 4 * len(dims) or offset % 4:
            r.fail(w, f"a shape of {len(dims)} int32 is {4 * len(dims)} bytes at a 4-byte aligned "
                      f"offset, got size {size} at offset {offset}")
        return Param(i, kind, offset, size, operand=operand, dims=dims)
    if kind in SCALARS:  # i32, f32: one named 4-byte scalar
        name = r.choice(p, "name", w, SCALARS[kind])
        if size != 4 or offset % 4:
            r.fail(w, f"an {kind} is 4 bytes at a 4-byte aligned offset, got size {size} at offset {offset}")
        return Param(i, kind, offset, size, name=name)
    if kind == "opaque":
        return Param(i, kind, offset, size)
    return r.fail(f"{w}.kind", f"must be one of {PARAM_KINDS}, got {kind!r}")


def _grid(r: _Reader, rec: dict, where: str, cluster: tuple[int, int, int]) -> Mapping[str, object]:
    grid = r.map_(rec, "grid", where)
    w = f"{where}.grid"
    kind = r.str_(grid, "kind", w)
    if kind != "persistent_clusters":
        r.fail(f"{w}.kind", f"must be 'persistent_clusters' (the only grid rule of contract version "
                            f"{CONTRACT_VERSION}), got {kind!r}")
    r.int_(grid, "tile_m", w, lo=1)
    r.int_(grid, "tile_n", w, lo=1)
    if r.ints(grid, "cluster", w, 2) != cluster[:2]:
        r.fail(f"{w}.cluster", f"must equal the first two cluster dims {list(cluster[:2])}")
    return _freeze(grid)


def _record(r: _Reader, iid: str, rec, directory: str) -> InstanceRecord:
    where = f"instances.{iid}"
    if not isinstance(rec, dict):
        r.fail(where, "must be a JSON object")
    cubin = r.str_(rec, "cubin", where)
    if os.path.basename(cubin) != cubin or cubin in (".", ".."):
        r.fail(f"{where}.cubin", f"must be a plain file name beside manifest.json, got {cubin!r}")
    sha = r.str_(rec, "sha256", where)
    if len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha):
        r.fail(f"{where}.sha256", f"must be 64 lowercase hex digits, got {sha!r}")
    block = r.ints(rec, "block", where, 3)
    cluster = r.ints(rec, "cluster", where, 3)
    param_bytes = r.int_(rec, "param_bytes", where)
    raw_params = r.get(rec, "params", where)
    if not isinstance(raw_params, list):
        r.fail(f"{where}.params", "must be a list")
    params = tuple(_param(r, p, i, f"{where}.params") for i, p in enumerate(raw_params))
    end = 0
    for p in params:  # ordered by offset, no overlap, inside the packed buffer
        if p.offset < end:
            r.fail(f"{where}.params[{p.index}].offset", f"{p.offset} overlaps the previous parameter")
        end = p.offset + p.size
    if end > param_bytes:
        r.fail(f"{where}.param_bytes", f"{param_bytes} is smaller than the parameters' extent {end}")
    align = r.map_(rec, "alignment_bytes", where)
    for k, v in align.items():
        if type(v) is not int or v < 1 or v & (v - 1):
            r.fail(f"{where}.alignment_bytes.{k}", f"must be a power of two, got {v!r}")
    stats = rec.get("stats", {})
    if not isinstance(stats, dict):
        r.fail(f"{where}.stats", "must be a JSON object")
    pdl = rec.get("pdl", False)
    if type(pdl) is not bool:
        r.fail(f"{where}.pdl", f"must be true or false, got {pdl!r}")
    return InstanceRecord(
        id=iid, spec=_freeze(r.map_(rec, "spec", where)), cubin=cubin,
        cubin_path=os.path.join(directory, cubin), sha256=sha,
        cubin_bytes=r.int_(rec, "cubin_bytes", where, lo=1), symbol=r.str_(rec, "symbol", where),
        block=block, cluster=cluster, smem_bytes=r.int_(rec, "smem_bytes", where),
        grid=_grid(r, rec, where, cluster), params=params, param_bytes=param_bytes,
        alignment_bytes=_freeze(align), stats=_freeze(stats), pdl=pdl)


def parse(doc, path: str) -> Manifest:
    """Validate a decoded manifest document; ``path`` locates it and its cubins."""
    r = _Reader(path)
    if not isinstance(doc, dict):
        r.fail("<top level>", "must be a JSON object")
    fmt = r.get(doc, "format", "")
    if fmt != FORMAT:
        raise CorruptArtifactError(f"not an hgemm-sm90 manifest (format {fmt!r}, expected {FORMAT!r})",
                                   path)
    version = r.get(doc, "contract_version", "")
    if version != CONTRACT_VERSION or type(version) is not int:
        raise CorruptArtifactError(
            f"manifest contract version {version!r}, but this runtime reads version {CONTRACT_VERSION}",
            path, fix="use the runtime and kernels of one hgemm-sm90 release: reinstall the package "
                      "(pip install --force-reinstall --no-deps hgemm-sm90), or rebuild the kernels "
                      "with this source tree if HGEMM_KERNEL_DIR points at your own build")
    arch = r.str_(doc, "arch", "")
    if arch != ARCH:
        r.fail("arch", f"must be {ARCH!r}, got {arch!r}")
    directory = os.path.dirname(os.path.abspath(path))
    raw = r.map_(doc, "instances", "")
    instances = {iid: _record(r, iid, rec, directory) for iid, rec in raw.items()}
    return Manifest(
        path=path, directory=directory, arch=arch,
        min_driver_version=r.int_(doc, "min_driver_version", "", lo=1000),
        profile=r.str_(doc, "profile", ""), toolchain=_freeze(r.map_(doc, "toolchain", "")),
        instances=MappingProxyType(instances))
