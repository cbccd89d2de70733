"""The instance matrix: `kernel_specs.yaml` (schema version 1) and its pure, deterministic expansion.

Why: the YAML is the single source of truth for what ships, so it is parsed strictly (unknown keys and
bad values are errors that name their path) and expanded the same way every time: a product
of named axes, minus combinations the kernel cannot build (`codegen.validity`, with the reason kept) and
minus explicit `exclude` entries, filtered by name globs, de-duplicated and sorted by instance id. Only
`load_matrix` does I/O; everything after it is pure. What a group drops is kept with the rule (a
`codegen.validity` rule name or an exclude entry's path) and its reason (`Matrix.expand_group`), so
`build_tools.regen` can report it without re-deriving anything.

Schema, version 1:

    version: 1
    groups:
      <group>:
        axes:     {<field>: <value> | [<value>, ...]}       # full product; a scalar is a fixed value
        zip:      [{<field>: [<value>, ...], ...}, ...]      # equal-length lists vary together
        exclude:  [{<field>: <value> | [<value>, ...]}, ...] # drop instances matching every key of one entry
    profiles:
      <profile>: {groups: [<group>, ...], kernels: [<id or glob>, ...]}  # kernels: optional

A profile lists each group once (a repeat is an error: it would only hide a typo).

`tile` and `cluster` values are themselves lists, so for these two a flat list of integers is one value
(`tile: [128, 128]`) and a list of lists is several (`tile: [[128, 128], [64, 128]]`). A tile may be
[M, N] or [M, N, K]; [M, N] means the default K for the input dtype (in `exclude` too).

Optional fields (may be left out): `acc_dtype` (fp32), `c_dtype` (null: no C operand), `c_major` (the C
layout; required where c_dtype is set), `fp8_fast_accum` (false), `swap_ab` (false), `k_split` (none).
`c_dtype` takes `null` as a value, so `c_dtype: [null, bf16]` gives instances without and with a bf16 C.
In a candidate row whose c_dtype is null, `c_major` is dropped (there is no C to lay out), so
`c_dtype: [null, bf16]` with `c_major: [n, m]` gives three instances, not an error; a GemmSpec built
directly stays strict.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from codegen.validity import RULES
from runtime.spec import (
    FIELD_NAMES,
    REQUIRED_FIELDS,
    TUPLE_FIELDS,
    GemmSpec,
    SpecError,
    default_tile_k,
    parse_field,
)

SCHEMA_VERSION = 1
_GLOB_CHARS = frozenset("*?[")


class MatrixError(ValueError):
    """kernel_specs.yaml is malformed or a profile cannot be expanded. Messages start with the YAML path."""


class Drop(NamedTuple):
    """A combination a group does not ship: which rule dropped it and the rule's reason."""

    spec: GemmSpec
    rule: str  # a codegen.validity rule name (acc_registers) or an exclude entry's path (groups.g.exclude[0])
    reason: str  # the rule's own message (codegen.validity) or the exclude entry rendered

    @property
    def excluded(self) -> bool:
        return self.rule.startswith("groups.")


@dataclass(frozen=True)
class GroupExpansion:
    """One group on its own: its distinct combinations, split into those it ships and those it drops."""

    name: str
    specs: list[GemmSpec]  # sorted by id, unique
    dropped: list[Drop]  # sorted by id, unique

    @property
    def n_combinations(self) -> int:
        return len(self.specs) + len(self.dropped)


@dataclass(frozen=True)
class Expansion:
    """The result of expanding one profile: shipped specs, and the combinations dropped with their reasons."""

    specs: list[GemmSpec]
    dropped: list[tuple[GemmSpec, str]]
    # instance id -> the first group (in the profile's order) that ships it: an instance two groups
    # produce is shipped once and listed under the first.
    group_of: dict[str, str]

    def names(self) -> list[str]:
        return [s.name() for s in self.specs]


@dataclass(frozen=True)
class _Exclude:
    path: str
    raw: dict[str, Any]
    allowed: dict[str, tuple[Any, ...]]  # field -> any of these normalized values

    def matches(self, spec: GemmSpec) -> bool:
        return all(any(_same(f, v, spec) for v in vals) for f, vals in self.allowed.items())

    def reason(self) -> str:
        body = ", ".join(f"{k}: {_flow(v)}" for k, v in self.raw.items())
        return f"excluded by {self.path} {{{body}}}"


@dataclass(frozen=True)
class _Group:
    name: str
    # Each factor is the list of partial rows one axis or one zip entry contributes; the group's candidate
    # rows are the product of the factors, merged.
    factors: tuple[tuple[dict[str, Any], ...], ...]
    excludes: tuple[_Exclude, ...]

    def candidates(self) -> Iterator[GemmSpec]:
        for parts in itertools.product(*self.factors):
            row: dict[str, Any] = {}
            for part in parts:
                row.update(part)
            if row.get("c_dtype") is None:
                row.pop("c_major", None)  # no C operand, nothing to lay out (module docstring)
            try:
                yield GemmSpec(**row)
            except SpecError as e:
                body = ", ".join(f"{k}: {_flow(_plain(v))}" for k, v in row.items())
                raise MatrixError(
                    f"groups.{self.name}: the combination {{{body}}} is not a spec: {e}"
                ) from None

    def drop(self, spec: GemmSpec) -> Drop | None:
        """Why this group does not ship `spec`: the first failing validity rule, else the first matching
        exclude entry; None if it ships it."""
        for rule_name, rule in RULES:  # codegen.validity's order, as why_unsupported
            reason = rule(spec)
            if reason is not None:
                return Drop(spec, rule_name, reason)
        for ex in self.excludes:
            if ex.matches(spec):
                return Drop(spec, ex.path, ex.reason())
        return None

    def expand(self) -> GroupExpansion:
        kept: dict[str, GemmSpec] = {}
        dropped: dict[str, Drop] = {}
        for spec in self.candidates():
            name = spec.name()
            if name in kept or name in dropped:
                continue  # the same spec from two rows (c_major dropped without C): same verdict
            drop = self.drop(spec)
            if drop is None:
                kept[name] = spec
            else:
                dropped[name] = drop
        return GroupExpansion(
            name=self.name,
            specs=[kept[n] for n in sorted(kept)],
            dropped=[dropped[n] for n in sorted(dropped)],
        )


@dataclass(frozen=True)
class _Profile:
    name: str
    groups: tuple[str, ...]
    kernels: tuple[str, ...]


@dataclass(frozen=True)
class Matrix:
    """A parsed, validated kernel_specs.yaml. `expand()` turns one profile into instances."""

    source: Path | None
    groups: dict[str, _Group]
    profiles: dict[str, _Profile]

    @property
    def profile_names(self) -> list[str]:
        return list(self.profiles)  # file order

    def expand_group(self, group: str) -> GroupExpansion:
        """One group's combinations, each shipped or dropped with its rule and reason (sorted by id)."""
        if group not in self.groups:
            raise MatrixError(f"groups.{group}: no such group; known: {', '.join(self.groups)}")
        return self.groups[group].expand()

    def expand(self, profile: str, only_globs: Sequence[str] = (), allow_empty: bool = False) -> Expansion:
        """Instances of `profile` (sorted by id, unique), optionally narrowed by id globs.

        Raises MatrixError for an unknown profile, a profile `kernels:` entry that names an instance the
        groups do not ship (with the reason) or a glob that matches nothing, and an empty result (unless
        `allow_empty`: regen reports an empty profile as a warning and still documents it).
        """
        if profile not in self.profiles:
            raise MatrixError(f"profiles.{profile}: no such profile; known: {', '.join(self.profiles)}")
        prof = self.profiles[profile]
        kept: dict[str, GemmSpec] = {}
        dropped: dict[str, tuple[GemmSpec, str]] = {}
        group_of: dict[str, str] = {}
        for gname in prof.groups:
            gexp = self.expand_group(gname)
            for spec in gexp.specs:
                name = spec.name()
                kept[name] = spec
                group_of.setdefault(name, gname)
                dropped.pop(name, None)  # another group ships it after all
            for drop in gexp.dropped:
                name = drop.spec.name()
                if name not in kept and name not in dropped:
                    dropped[name] = (drop.spec, drop.reason)

        if prof.kernels:
            for i, pat in enumerate(prof.kernels):
                path = f"profiles.{profile}.kernels[{i}]"
                if not _is_glob(pat):
                    if pat in kept:
                        continue
                    if pat in dropped:
                        raise MatrixError(f"{path}: {pat} is not shipped: {dropped[pat][1]}")
                    raise MatrixError(f"{path}: {pat} is not produced by groups {', '.join(prof.groups)}")
                if not any(fnmatchcase(n, pat) for n in itertools.chain(kept, dropped)):
                    raise MatrixError(
                        f"{path}: glob {pat!r} matches no instance of groups {', '.join(prof.groups)}"
                    )
            kept = _filter(kept, prof.kernels)
            dropped = _filter(dropped, prof.kernels)
        if not kept and not allow_empty:
            raise MatrixError(f"profiles.{profile}: expands to zero instances ({len(dropped)} dropped)")

        if only_globs:
            kept = _filter(kept, only_globs)
            dropped = _filter(dropped, only_globs)
            if not kept:
                raise MatrixError(f"no instance of profile {profile!r} matches {' '.join(only_globs)}")

        return Expansion(
            specs=[kept[n] for n in sorted(kept)],
            dropped=[dropped[n] for n in sorted(dropped)],
            group_of={n: group_of[n] for n in sorted(kept)},
        )


def load_matrix(path: str | Path) -> Matrix:
    """Read and validate a kernel_specs.yaml. Raises MatrixError (with the YAML path) on any problem."""
    path = Path(path)
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_StrictLoader)
    except yaml.YAMLError as e:
        raise MatrixError(f"{path}: not valid YAML: {e}") from None
    return parse_matrix(data, source=path)


def parse_matrix(data: Any, source: Path | None = None) -> Matrix:
    """Validate already-loaded YAML data (a dict) into a Matrix."""
    _check_keys(data, "(top level)", required=("version", "groups", "profiles"), optional=())
    if data["version"] != SCHEMA_VERSION:
        raise MatrixError(
            f"version: {data['version']!r} is not supported; this build reads version {SCHEMA_VERSION}"
        )
    groups_raw = _mapping(data["groups"], "groups", nonempty=True)
    groups = {str(g): _parse_group(str(g), body) for g, body in groups_raw.items()}
    profiles_raw = _mapping(data["profiles"], "profiles", nonempty=True)
    profiles = {str(p): _parse_profile(str(p), body, groups) for p, body in profiles_raw.items()}
    return Matrix(source=source, groups=groups, profiles=profiles)


# --- parsing helpers -----------------------------------------------------------------------------------


def _parse_group(name: str, body: Any) -> _Group:
    path = f"groups.{name}"
    _check_keys(body, path, required=(), optional=("axes", "zip", "exclude"))
    factors: list[tuple[dict[str, Any], ...]] = []
    seen: dict[str, str] = {}  # field -> where it was given

    axes = _mapping(body.get("axes", {}), f"{path}.axes")
    for field, raw in axes.items():
        fpath = f"{path}.axes.{field}"
        _check_field(field, fpath)
        seen[field] = fpath
        factors.append(tuple({field: v} for v in _values(field, raw, fpath)))

    zips = body.get("zip", [])
    if not isinstance(zips, list):
        raise MatrixError(f"{path}.zip: must be a list of mappings, got {type(zips).__name__}")
    for i, entry in enumerate(zips):
        zpath = f"{path}.zip[{i}]"
        entry = _mapping(entry, zpath, nonempty=True)
        columns: dict[str, list[Any]] = {}
        for field, raw in entry.items():
            fpath = f"{zpath}.{field}"
            _check_field(field, fpath)
            if field in seen:
                raise MatrixError(f"{fpath}: {field} is already given at {seen[field]}; give each field once")
            seen[field] = fpath
            if (
                not isinstance(raw, list)
                or not raw
                or (field in TUPLE_FIELDS and not isinstance(raw[0], list))
            ):
                raise MatrixError(f"{fpath}: zip values must be a non-empty list of values")
            columns[field] = [_value(field, v, f"{fpath}[{j}]") for j, v in enumerate(raw)]
        lengths = {f: len(v) for f, v in columns.items()}
        if len(set(lengths.values())) > 1:
            detail = ", ".join(f"{f}: {n}" for f, n in lengths.items())
            raise MatrixError(f"{zpath}: zipped lists must have equal lengths, got {detail}")
        n = next(iter(lengths.values()))
        factors.append(tuple({f: columns[f][j] for f in columns} for j in range(n)))

    missing = [f for f in REQUIRED_FIELDS if f not in seen]
    if missing:
        raise MatrixError(f"{path}: no value for {', '.join(missing)}; give each in axes or zip")

    excl_raw = body.get("exclude", [])
    if not isinstance(excl_raw, list):
        raise MatrixError(f"{path}.exclude: must be a list of mappings, got {type(excl_raw).__name__}")
    excludes = []
    for i, entry in enumerate(excl_raw):
        epath = f"{path}.exclude[{i}]"
        entry = _mapping(entry, epath, nonempty=True)
        allowed = {}
        for field, raw in entry.items():
            _check_field(field, f"{epath}.{field}")
            allowed[field] = _values(field, raw, f"{epath}.{field}")
        excludes.append(_Exclude(path=epath, raw=dict(entry), allowed=allowed))
    group = _Group(name=name, factors=tuple(factors), excludes=tuple(excludes))
    # A stale or mistyped exclude entry would silently do nothing; make it loud instead.
    candidates = list(group.candidates())
    for ex in excludes:
        if not any(ex.matches(s) for s in candidates):
            raise MatrixError(f"{ex.path}: matches no instance of group {name}; remove it or fix its values")
    return group


def _parse_profile(name: str, body: Any, groups: dict[str, _Group]) -> _Profile:
    path = f"profiles.{name}"
    _check_keys(body, path, required=("groups",), optional=("kernels",))
    gnames = body["groups"]
    if not isinstance(gnames, list) or not gnames or not all(isinstance(g, str) for g in gnames):
        raise MatrixError(f"{path}.groups: must be a non-empty list of group names")
    for i, g in enumerate(gnames):
        if g not in groups:
            raise MatrixError(f"{path}.groups: unknown group {g!r}; known groups: {', '.join(groups)}")
        if g in gnames[:i]:
            raise MatrixError(
                f"{path}.groups[{i}]: group {g!r} is listed twice in profile {name}; list each group once"
            )
    kernels = body.get("kernels", [])
    if not isinstance(kernels, list) or not all(isinstance(k, str) and k for k in kernels):
        raise MatrixError(f"{path}.kernels: must be a list of instance ids or globs")
    for i, k in enumerate(kernels):
        if not _is_glob(k):
            try:
                GemmSpec.parse(k)
            except SpecError as e:
                raise MatrixError(f"{path}.kernels[{i}]: {e}") from None
    return _Profile(name=name, groups=tuple(gnames), kernels=tuple(kernels))


def _values(field: str, raw: Any, path: str) -> tuple[Any, ...]:
    """One value or a list of values -> tuple of normalized values (module docstring: tile/cluster)."""
    is_list = isinstance(raw, list) and (
        field not in TUPLE_FIELDS or (bool(raw) and isinstance(raw[0], list))
    )
    if not is_list:
        return (_value(field, raw, path),)
    if not raw:
        raise MatrixError(f"{path}: empty list of values")
    vals = tuple(_value(field, v, f"{path}[{i}]") for i, v in enumerate(raw))
    return tuple(dict.fromkeys(vals))  # drop repeats, keep order


def _value(field: str, raw: Any, path: str) -> Any:
    try:
        return parse_field(field, raw)
    except SpecError as e:
        raise MatrixError(f"{path}: {e}") from None


def _same(field: str, pattern: Any, spec: GemmSpec) -> bool:
    actual = getattr(spec, field)
    if field == "tile" and pattern[2] == 0:
        pattern = (pattern[0], pattern[1], default_tile_k(spec.a_dtype))
    return actual == pattern


def _check_field(field: Any, path: str) -> None:
    if field not in FIELD_NAMES:
        raise MatrixError(f"{path}: unknown key; expected one of {', '.join(FIELD_NAMES)}")


def _check_keys(body: Any, path: str, required: Iterable[str], optional: Iterable[str]) -> None:
    required, optional = tuple(required), tuple(optional)
    body = _mapping(body, path)
    for key in body:
        if key not in required and key not in optional:
            where = key if path == "(top level)" else f"{path}.{key}"
            raise MatrixError(f"{where}: unknown key; expected one of {', '.join(required + optional)}")
    for key in required:
        if key not in body:
            raise MatrixError(f"{path}: missing required key {key!r}")


def _mapping(body: Any, path: str, nonempty: bool = False) -> dict[Any, Any]:
    if not isinstance(body, dict):
        raise MatrixError(f"{path}: must be a mapping, got {type(body).__name__}")
    if nonempty and not body:
        raise MatrixError(f"{path}: must not be empty")
    return body


def _flow(v: Any) -> str:
    """A YAML flow-style rendering of a raw value, for messages: [64, 128], bf16, null, true."""
    if isinstance(v, list):
        return f"[{', '.join(_flow(x) for x in v)}]"
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _plain(v: Any) -> Any:
    """A normalized field value back in YAML terms (tuples as lists) for messages."""
    return list(v) if isinstance(v, tuple) else v


def _is_glob(pattern: str) -> bool:
    return any(c in _GLOB_CHARS for c in pattern)


def _filter(items: dict[str, Any], globs: Sequence[str]) -> dict[str, Any]:
    return {n: v for n, v in items.items() if any(fnmatchcase(n, g) for g in globs)}


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate mapping keys (plain PyYAML silently keeps the last one)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, Hashable):
                continue  # SafeLoader itself reports unhashable keys
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)
