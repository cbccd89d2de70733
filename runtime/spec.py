"""What a kernel instance computes, in one vocabulary for the build and the runtime: dtypes, operands,
and the instance spec with its canonical id.

Why this module exists: every piece (matrix expansion, compile driver, manifest, the runtime's launch
checks and `instances()`, test ids, cubin file names) must agree on what an instance *is* and what it is
*called*. `GemmSpec` is that agreement, and `GemmSpec.name()` is the identity everywhere: cubin file name,
manifest key, `--kernels` filter key, pytest id. `GemmSpec.parse()` is its exact inverse. The facts
about each dtype (bits, TMA data-format code, DLPack code, the array libraries' name) live in one table
here, `DType`'s; every other dtype table in the project derives from it. The launch contract built on top
of this (parameters, records, the manifest) is runtime/contract.py; docs/ARCHITECTURE.md shows how the
two are used by the build and the runtime.

Closed sets are `StrEnum`s so that YAML values, id tokens and JSON all use the same strings.

This module lives in the runtime (the lowest layer) and is stdlib-only: codegen imports it, and the
runtime reads the manifest's specs with it.

Instance id format (base, fixed forever once shipped), then optional suffix tokens:

    sm90_{a}_{b}_{d}_{acc}acc_{am}{bm}{dm}_{M}x{N}x{K}_c{cm}x{cn}_{sched}[_c{c_dtype}{c_major}][_fastacc][_swapab][_splitk|_streamk][_varlenm|_varlenk][_gathera]
    e.g. sm90_bf16_bf16_bf16_fp32acc_kkn_128x256x64_c2x1_coop
         sm90_e4m3_e5m2_bf16_fp32acc_kkn_128x128x128_c1x1_pp_cbf16n_fastacc

Extension rule for optional features: add a dataclass field *with a default* that means "feature off", and
append one `_`-separated suffix token to the base only when the field is not at its default, in a fixed
order (`_SUFFIXES` below). Existing ids then never change, and `parse()` consumes the known suffix tokens
in that order. Defined today, in order:
  `_c{c_dtype}{c_major}`  the epilogue reads a C operand (D = alpha*acc + beta*C), e.g. `_cbf16n`
  `_fastacc`              fp8 inputs accumulate straight into the fp32 accumulator (no periodic promotion)
  `_swapab`               the kernel computes D^T = B @ A^T (`GemmSpec.swap_ab`; tile and cluster are the
                          kernel's, so a 64x8 tile covers 64 columns of N and 8 rows of M)
  `_splitk`               split-K: each output tile's K loop is cut into a launch-time number of ranges,
                          reduced through a workspace (`GemmSpec.k_split`, docs/CONTRACT.md "Split-K")
  `_streamk`              stream-K: the last tiles of the walk are shared out among all SMs by k-tiles,
                          reduced through a workspace (`GemmSpec.k_split`, docs/CONTRACT.md "Stream-K")
  `_varlenm`, `_varlenk`  grouped GEMM with a per-group M, or K (`GemmSpec.varlen`, docs/CONTRACT.md
                          "Grouped GEMM")
  `_gathera`              grouped GEMM whose A rows (varlen M) or K columns (varlen K) are gathered through
                          an index array (`GemmSpec.gather_a`)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from enum import Enum

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from typing import Any

try:
    from enum import StrEnum
except ImportError:  # Python 3.10 (the wheel allows it; StrEnum arrived in 3.11)

    class StrEnum(str, Enum):  # type: ignore[no-redef]
        def __str__(self) -> str:
            return str(self.value)


class SpecError(ValueError):
    """A spec row, JSON record or instance id is malformed. The message names the field and the fix."""


class DType(StrEnum):
    """An element type of an operand or the accumulator. Its facts are in `_DTYPE_FACTS`."""

    bf16 = "bf16"
    fp16 = "fp16"
    fp32 = "fp32"
    e4m3 = "e4m3"
    e5m2 = "e5m2"

    @property
    def bits(self) -> int:
        return _DTYPE_FACTS[self].bits

    @property
    def bytes(self) -> int:
        return _DTYPE_FACTS[self].bits // 8

    @property
    def is_float8(self) -> bool:
        return self.bits == 8

    @property
    def tma_format(self) -> int:
        """The 4-bit data-format code a TMA descriptor holds for this type (runtime/tensormap.py)."""
        return _DTYPE_FACTS[self].tma_format

    @property
    def dlpack(self) -> tuple[int, int]:
        """(DLPack type code, bits): how DLPack (`__dlpack__`) describes this type."""
        return _DTYPE_FACTS[self].dlpack_code, _DTYPE_FACTS[self].bits

    @property
    def array_name(self) -> str:
        """The name torch, JAX and ml_dtypes give this type (``torch.<name>``)."""
        return _DTYPE_FACTS[self].array_name


@dataclass(frozen=True, slots=True)
class _DTypeFacts:
    bits: int
    # The DSL's TMA data-format numbering (U8 = 0, F16 = 6, F32 = 7, BF16 = 10), *not* the driver's
    # CUtensorMapDataType: fp8 travels as U8 (read off the DSL's host code, docs/TENSORMAP.md).
    tma_format: int
    # DLPack's DLDataTypeCode: kDLFloat = 2, kDLBfloat = 4, kDLFloat8_e4m3fn = 10, kDLFloat8_e5m2 = 12.
    dlpack_code: int
    array_name: str


_DTYPE_FACTS = {
    DType.bf16: _DTypeFacts(16, tma_format=10, dlpack_code=4, array_name="bfloat16"),
    DType.fp16: _DTypeFacts(16, tma_format=6, dlpack_code=2, array_name="float16"),
    DType.fp32: _DTypeFacts(32, tma_format=7, dlpack_code=2, array_name="float32"),
    DType.e4m3: _DTypeFacts(8, tma_format=0, dlpack_code=10, array_name="float8_e4m3fn"),
    DType.e5m2: _DTypeFacts(8, tma_format=0, dlpack_code=12, array_name="float8_e5m2"),
}


# The problem's extents: per batch A is M x K, B is N x K, D and C are M x N; L counts the batches. A
# grouped (varlen M) problem has one batch (L = 1) of M rows in all, and G groups: B holds G matrices; a
# gathered A has MA rows of its own (the rows its index array picks from).
EXTENTS = ("m", "n", "k", "l", "g", "ma")
OPERAND_EXTENTS: dict[str, tuple[str, str]] = {
    "a": ("m", "k"),
    "b": ("n", "k"),
    "d": ("m", "n"),
    "c": ("m", "n"),
}
"""Each operand's (row, column) extents; its majorness names the one that is contiguous."""


def ld_name(operand: str) -> str:
    """The leading-dimension argument of an operand: the stride (elements) of its non-contiguous extent."""
    return f"ld{operand}"


def batch_stride_name(operand: str) -> str:
    return f"batch_stride_{operand}"


STRIDES = tuple(ld_name(op) for op in OPERAND_EXTENTS) + tuple(
    batch_stride_name(op) for op in OPERAND_EXTENTS
)


class AMajor(StrEnum):
    k = "k"
    m = "m"


class BMajor(StrEnum):
    k = "k"
    n = "n"


class DMajor(StrEnum):
    n = "n"
    m = "m"


class Schedule(StrEnum):
    cooperative = "cooperative"
    pingpong = "pingpong"


class KSplit(StrEnum):
    """How an instance divides the K loop of one output tile: not at all, into `k_splits` ranges given
    at launch (split-K), or as stream-K does (the tiles of the last waves shared out among all SMs by
    k-tiles); both reduce the pieces of a tile through a workspace."""

    none = "none"
    split = "split"
    stream = "stream"


class Varlen(StrEnum):
    """Which extent varies per group in a grouped (mixture-of-experts) instance: none (a plain or batched
    GEMM); M ("m": A and D are G groups of rows concatenated, B holds one N x K matrix per group, and
    the device array `cu_seqlens_m` gives the groups' row offsets); or K ("k", the weight gradient: A is
    M x (total K) and B is N x (total K) with the groups' K ranges concatenated, D holds one M x N result
    per group, `cu_seqlens_k` gives the K offsets). docs/CONTRACT.md "Grouped GEMM"."""

    none = "none"
    m = "m"
    k = "k"


# Short id tokens for schedules; the YAML/JSON spelling stays the full word.
_SCHEDULE_TOKEN = {Schedule.cooperative: "coop", Schedule.pingpong: "pp"}
_TOKEN_SCHEDULE = {tok: s for s, tok in _SCHEDULE_TOKEN.items()}

_ENUM_FIELDS: dict[str, type[StrEnum]] = {
    "a_dtype": DType,
    "b_dtype": DType,
    "d_dtype": DType,
    "acc_dtype": DType,
    "a_major": AMajor,
    "b_major": BMajor,
    "d_major": DMajor,
    "schedule": Schedule,
    "k_split": KSplit,
    "varlen": Varlen,
}
# Fields whose value may be null (YAML `null`, JSON `null`): "feature off".
_OPTIONAL_ENUM_FIELDS: dict[str, type[StrEnum]] = {"c_dtype": DType, "c_major": DMajor}
_BOOL_FIELDS = ("fp8_fast_accum", "swap_ab", "gather_a")
TUPLE_FIELDS = ("tile", "cluster")
"""Fields whose single value is itself a list in YAML/JSON (so `[1, 2]` is one value, `[[1, 2]]` a list)."""


def mma_k(a_dtype: DType) -> int:
    """K of one WGMMA instruction: 32 bytes of K, i.e. 16 elements for 16-bit inputs, 32 for 8-bit."""
    return 256 // a_dtype.bits


def default_tile_k(a_dtype: DType) -> int:
    """The canonical CTA tile K: 4 WGMMA k-steps = 128 bytes = one 128-byte swizzle row of A/B.

    64 elements for bf16/fp16 and 128 for e4m3/e5m2.
    """
    return 4 * mma_k(a_dtype)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def parse_field(name: str, value: Any) -> Any:
    """Validate and normalize one field value (str -> enum, list -> tuple). Raises SpecError.

    `tile` comes back as (M, N, K) where K may still be 0 ("default"); `GemmSpec` resolves it, because the
    default depends on the input dtype.
    """
    if name in _ENUM_FIELDS:
        enum = _ENUM_FIELDS[name]
        if isinstance(value, str) and value in enum._value2member_map_:
            return enum(value)
        allowed = ", ".join(m.value for m in enum)
        raise SpecError(f"{name}: bad value {value!r}; allowed: {allowed}")
    if name in _OPTIONAL_ENUM_FIELDS:
        enum = _OPTIONAL_ENUM_FIELDS[name]
        if value is None:
            return None
        if isinstance(value, str) and value in enum._value2member_map_:
            return enum(value)
        allowed = ", ".join(m.value for m in enum)
        raise SpecError(f"{name}: bad value {value!r}; allowed: null (none), {allowed}")
    if name in _BOOL_FIELDS:
        if isinstance(value, bool):
            return value
        raise SpecError(f"{name}: bad value {value!r}; allowed: true, false")
    if name == "tile":
        ok = (
            isinstance(value, (list, tuple))
            and len(value) in (2, 3)
            and all(_is_int(v) for v in value)
            and value[0] > 0
            and value[1] > 0
            and (len(value) == 2 or value[2] >= 0)
        )
        if not ok:
            raise SpecError(
                f"tile: bad value {value!r}; allowed: [M, N] or [M, N, K] of positive integers "
                "(K may be 0 or left out: the default, 4 MMA k-steps)"
            )
        return (value[0], value[1], value[2] if len(value) == 3 else 0)
    if name == "cluster":
        if isinstance(value, (list, tuple)) and len(value) == 2 and all(_is_int(v) and v > 0 for v in value):
            return (value[0], value[1])
        raise SpecError(f"cluster: bad value {value!r}; allowed: [cluster_m, cluster_n] of positive integers")
    raise SpecError(f"unknown field {name!r}; valid fields: {', '.join(FIELD_NAMES)}")


@dataclass(frozen=True, slots=True, kw_only=True)
class GemmSpec:
    """One Hopper GEMM kernel variant: D = alpha * (A @ B) [+ beta * C] with the given dtypes, layouts, CTA
    tile, cluster, schedule and epilogue.

    `c_dtype` set means the epilogue reads a C operand of that dtype and `c_major` layout (both or
    neither). `fp8_fast_accum` means fp8 WGMMAs accumulate straight into the fp32 accumulator; off, the
    kernel periodically promotes a second accumulator (more accurate, twice the registers).

    `swap_ab` (swap-AB, for decode-sized M): the instance computes the same D, but its kernel computes
    D^T = B @ A^T, so that B's N rows run along the 64-row WGMMA side and a small M becomes the WGMMA's N
    (as narrow as 8). Dtypes and majors stay the caller's view of A, B, D and C; `tile` and `cluster`
    are the kernel's, i.e. its tile M runs along the problem's N. `kernel_spec()` is the spec the kernel
    is compiled from; `problem_tile` is the (M, N) extent of D that one tile covers.

    `k_split` "split" (split-K, for problems with too few output tiles to fill the GPU): the kernel cuts
    each tile's K loop into `k_splits` ranges (a launch argument), one work unit each, and the last unit
    of a tile to finish adds the fp32 partial sums in a fixed order (deterministic) through a caller-given
    workspace (`hgemm_sm90.workspace_bytes`). `k_split` "stream" (stream-K, for problems whose tiles do
    not fill whole waves): the walk's last tiles are cut into pieces by k-tiles, shared out evenly among
    all clusters of the grid, and reduced the same way (docs/CONTRACT.md "Stream-K").

    `varlen` "m" (grouped GEMM, e.g. a mixture-of-experts layer in one launch): A is (total M) x K with
    the rows of G groups concatenated, B is G x N x K, D is (total M) x N; group g computes its rows
    D[s_g:s_g+1] = alpha * A[s_g:s_g+1] @ B[g]^T, with the offsets s read from a device array at run time.
    `varlen` "k" (the weight gradient of such a layer): A is M x (total K) and B is N x (total K) with
    the groups' K ranges concatenated, D is G x M x N; D[g] = alpha * A[:, s_g:s_g+1] @ B[:, s_g:s_g+1]^T.
    `gather_a`: the concatenated A is gathered (a device int32 array a_idx, the token permutation of a
    mixture-of-experts layer fused into the load): with varlen "m" its row i is row a_idx[i] of the A
    given, with varlen "k" its column p is column a_idx[p] of the A given. Grouped instances may read a
    C (`c_dtype`): like D under varlen "m", one per group under varlen "k" (not with gather_a there).

    Keyword-only (no positional construction). Construction normalizes and validates every field: strings
    become enums, lists become tuples, and a tile K of 0 becomes `default_tile_k(a_dtype)`, so every
    `GemmSpec` is canonical and equal specs have equal names. Whether the kernel *supports* a spec is a
    separate question: see `codegen.validity.why_unsupported`.
    """

    a_dtype: DType
    b_dtype: DType
    d_dtype: DType
    acc_dtype: DType = DType.fp32
    a_major: AMajor
    b_major: BMajor
    d_major: DMajor
    tile: tuple[int, int, int]
    cluster: tuple[int, int]
    schedule: Schedule
    c_dtype: DType | None = None
    c_major: DMajor | None = None
    fp8_fast_accum: bool = False
    swap_ab: bool = False
    k_split: KSplit = KSplit.none
    varlen: Varlen = Varlen.none
    gather_a: bool = False

    def __post_init__(self) -> None:
        for f in fields(self):
            object.__setattr__(self, f.name, parse_field(f.name, getattr(self, f.name)))
        m, n, k = self.tile
        if k == 0:
            object.__setattr__(self, "tile", (m, n, default_tile_k(self.a_dtype)))
        # A C operand is one thing with two attributes: a half-given C is a typo, not a default.
        if self.c_dtype is None and self.c_major is not None:
            raise SpecError(
                f"c_major {self.c_major} given without c_dtype: c_major lays out the C operand, which is "
                "only read when c_dtype is set; set c_dtype (e.g. bf16) or drop c_major"
            )
        if self.c_dtype is not None and self.c_major is None:
            raise SpecError(
                f"c_dtype {self.c_dtype} given without c_major: the C operand needs a layout; "
                "set c_major to n or m (usually d_major)"
            )

    @property
    def has_c(self) -> bool:
        """Whether the epilogue reads a C operand (D = alpha*acc + beta*C)."""
        return self.c_dtype is not None

    @property
    def varlen_m(self) -> bool:
        """Whether this is a grouped GEMM with a per-group M (`varlen` "m")."""
        return self.varlen == Varlen.m

    @property
    def varlen_k(self) -> bool:
        """Whether this is a grouped GEMM with a per-group K (`varlen` "k", the weight gradient)."""
        return self.varlen == Varlen.k

    @property
    def id(self) -> str:
        """The instance id: `name()`."""
        return self.name()

    # --- swap-AB: the caller's problem and the kernel's ----------------------------------------------

    def kernel_spec(self) -> GemmSpec:
        """The spec the kernel is compiled from: `self` unless `swap_ab`, else the transposed problem
        D^T = B @ A^T (A and B trade dtypes and roles; a majorness keeps naming the same contiguous
        extent, so k stays k, a user B's n becomes the kernel A's m, and D's and C's n and m swap)."""
        if not self.swap_ab:
            return self
        flip = {"n": "m", "m": "n"}
        return replace(
            self,
            a_dtype=self.b_dtype,
            b_dtype=self.a_dtype,
            a_major="k" if self.b_major == "k" else "m",
            b_major="k" if self.a_major == "k" else "n",
            d_major=flip[self.d_major],
            c_major=None if self.c_major is None else flip[self.c_major],
            swap_ab=False,
        )

    @property
    def problem_tile(self) -> tuple[int, int]:
        """(rows of D, columns of D) that one CTA tile covers: the tile's M and N, swapped under swap_ab."""
        m, n, _ = self.tile
        return (n, m) if self.swap_ab else (m, n)

    @property
    def problem_cluster(self) -> tuple[int, int]:
        """(CTAs along D's rows, CTAs along D's columns) in one cluster: the cluster, swapped under swap_ab
        as `problem_tile` is (a swap-AB instance's cluster 2x1 pairs CTAs along the caller's N)."""
        cm, cn = self.cluster
        return (cn, cm) if self.swap_ab else (cm, cn)

    @property
    def launch_operands(self) -> tuple[str, ...]:
        """The operands in the order the kernel takes them (its A, B, D[, C] slots): `operands`, with A
        and B traded under swap_ab."""
        ops = self.operands
        return (ops[1], ops[0], *ops[2:]) if self.swap_ab else ops

    def extents(self, operand: str) -> tuple[str, str]:
        """The (row, column) extents of `operand` in the caller's view: OPERAND_EXTENTS, except that a
        gathered A has its own extent "ma" where a_idx indexes it: its rows under varlen M (D has m
        rows), its K columns under varlen K (B has k)."""
        rows, cols = OPERAND_EXTENTS[operand]
        if self.gather_a and operand == "a":
            return (rows, "ma") if self.varlen == Varlen.k else ("ma", cols)
        return rows, cols

    def kernel_extents(self, operand: str) -> tuple[str, str]:
        """The (row, column) extents of `operand` as the kernel's slot sees it: `extents`, with D's and
        C's transposed under swap_ab (the kernel writes D^T, N x M)."""
        rows, cols = self.extents(operand)
        return (cols, rows) if self.swap_ab and operand in ("d", "c") else (rows, cols)

    def batch_extent(self, operand: str) -> str:
        """The extent that counts `operand`'s batches: "l", except the operands that hold one matrix per
        group ("g") in a grouped instance: B under varlen M, D and C under varlen K."""
        per_group = {Varlen.m: ("b",), Varlen.k: ("d", "c")}.get(self.varlen, ())
        return "g" if operand in per_group else "l"

    # --- operands -------------------------------------------------------------------------------------

    @property
    def operands(self) -> tuple[str, ...]:
        """The operands in launch order (the DSL host entry's tensor order too): A, B, D, then C when the
        epilogue reads it."""
        return ("a", "b", "d", "c") if self.c_dtype is not None else ("a", "b", "d")

    def dtype_of(self, operand: str) -> DType:
        return getattr(self, f"{operand}_dtype")

    def major_of(self, operand: str) -> str:
        return getattr(self, f"{operand}_major")

    def contiguous_extent(self, operand: str) -> str:
        """The name of the operand's unit-stride extent (its majorness): e.g. "k" for a k-major A."""
        rows, cols = OPERAND_EXTENTS[operand]
        return rows if self.major_of(operand) == rows else cols

    # --- construction from data ---------------------------------------------------------------------

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> GemmSpec:
        """Strictly build a spec from a mapping field name -> value (a YAML row).

        `acc_dtype`, `c_dtype`, `c_major` and `fp8_fast_accum` are optional (fp32, no C, slow accumulation).
        """
        if not isinstance(row, Mapping):
            raise SpecError(f"a spec row must be a mapping of field -> value, got {type(row).__name__}")
        unknown = sorted(str(k) for k in row.keys() - set(FIELD_NAMES))
        if unknown:
            raise SpecError(f"unknown key(s) {', '.join(unknown)}; valid keys: {', '.join(FIELD_NAMES)}")
        missing = [f for f in REQUIRED_FIELDS if f not in row]
        if missing:
            raise SpecError(
                f"missing key(s) {', '.join(missing)}; required keys: {', '.join(REQUIRED_FIELDS)}"
            )
        return cls(**row)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> GemmSpec:
        """Inverse of `to_json()`: every field must be present (the manifest always writes them all)."""
        if isinstance(data, Mapping):
            missing = [f for f in FIELD_NAMES if f not in data]
            if missing:
                raise SpecError(f"spec JSON lacks key(s) {', '.join(missing)}")
        return cls.from_row(data)

    def to_json(self) -> dict[str, Any]:
        """Plain JSON-able dict: the manifest's `spec` field. Enums as strings, tile/cluster as lists, an
        absent C as null (`c_dtype`, `c_major`), `fp8_fast_accum` as a bool. Every field is always written."""
        out: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if v is None or isinstance(v, bool):
                out[f.name] = v
            else:
                out[f.name] = list(v) if isinstance(v, tuple) else str(v)
        return out

    # --- identity -----------------------------------------------------------------------------------

    def name(self) -> str:
        """The canonical instance id (see the module docstring for the format and its extension rule)."""
        m, n, k = self.tile
        cm, cn = self.cluster
        sched = _SCHEDULE_TOKEN[self.schedule]
        base = (
            f"sm90_{self.a_dtype}_{self.b_dtype}_{self.d_dtype}_{self.acc_dtype}acc"
            f"_{self.a_major}{self.b_major}{self.d_major}_{m}x{n}x{k}_c{cm}x{cn}_{sched}"
        )
        suffix = [tok for _, fmt, _ in _SUFFIXES if (tok := fmt(self)) is not None]
        return "_".join([base, *suffix])

    @classmethod
    def parse(cls, name: str) -> GemmSpec:
        """Exact inverse of `name()`. Raises SpecError naming the bad token: malformed or non-canonical id."""
        if not isinstance(name, str):
            raise SpecError(f"instance id must be a string, got {type(name).__name__}")

        def bad(detail: str) -> SpecError:
            return SpecError(f"malformed instance id {name!r}: {detail}; expected {_ID_FORMAT}")

        tokens = name.split("_")
        if len(tokens) < _BASE_TOKENS:
            raise bad(f"{len(tokens)} '_'-separated tokens, need {_BASE_TOKENS}")
        arch, a, b, d, acc, majors, tile, cluster, sched, *suffix = tokens
        if arch != "sm90":
            raise bad(f"prefix {arch!r} is not 'sm90'")
        if not acc.endswith("acc"):
            raise bad(f"accumulator token {acc!r} does not end in 'acc'")
        if len(majors) != 3:
            raise bad(f"majors token {majors!r} is not 3 letters (A, B, D)")
        dims = tile.split("x")
        if len(dims) != 3 or not all(_is_decimal(x) for x in dims):
            raise bad(f"tile token {tile!r} is not MxNxK")
        cdims = cluster[1:].split("x")
        if not cluster.startswith("c") or len(cdims) != 2 or not all(_is_decimal(x) for x in cdims):
            raise bad(f"cluster token {cluster!r} is not c<M>x<N>")
        if sched not in _TOKEN_SCHEDULE:
            raise bad(f"schedule token {sched!r} is not one of {', '.join(_TOKEN_SCHEDULE)}")
        optional: dict[str, Any] = {}
        next_kind = 0  # suffix tokens must come in _SUFFIXES order, each at most once
        for tok in suffix:
            for i, (_, _, read) in enumerate(_SUFFIXES):
                fields_ = read(tok)
                if fields_ is None:
                    continue
                if i < next_kind:
                    raise bad(f"optional token {tok!r} is out of order or repeated; order: {_SUFFIX_ORDER}")
                optional.update(fields_)
                next_kind = i + 1
                break
            else:
                raise bad(f"unknown optional token {tok!r}; known: {_SUFFIX_ORDER}")
        try:
            spec = cls(
                a_dtype=a,
                b_dtype=b,
                d_dtype=d,
                acc_dtype=acc.removesuffix("acc"),
                a_major=majors[0],
                b_major=majors[1],
                d_major=majors[2],
                tile=tuple(int(x) for x in dims),
                cluster=tuple(int(x) for x in cdims),
                schedule=_TOKEN_SCHEDULE[sched],
                **optional,
            )
        except SpecError as e:
            raise bad(str(e)) from None
        if spec.name() != name:  # e.g. K written as 0, or leading zeros
            raise bad(f"not canonical; the canonical id of this spec is {spec.name()!r}")
        return spec


def _is_decimal(s: str) -> bool:
    return s.isascii() and s.isdecimal()


# --- optional id suffix tokens, in their fixed order: (what, spec -> token or None, token -> fields or None)


def _c_token(s: GemmSpec) -> str | None:
    return None if s.c_dtype is None else f"c{s.c_dtype}{s.c_major}"


def _read_c_token(tok: str) -> dict[str, str] | None:
    # "c" + dtype + one major letter, e.g. cbf16n. Values are validated by the constructor afterwards.
    if len(tok) >= 3 and tok[0] == "c" and tok[1:-1] in DType._value2member_map_:
        return {"c_dtype": tok[1:-1], "c_major": tok[-1]}
    return None


_SUFFIXES = (
    ("C operand", _c_token, _read_c_token),
    (
        "fp8 fast accumulation",
        lambda s: "fastacc" if s.fp8_fast_accum else None,
        lambda tok: {"fp8_fast_accum": True} if tok == "fastacc" else None,
    ),
    (
        "swap-AB",
        lambda s: "swapab" if s.swap_ab else None,
        lambda tok: {"swap_ab": True} if tok == "swapab" else None,
    ),
    (
        "split-K or stream-K",
        lambda s: {KSplit.split: "splitk", KSplit.stream: "streamk"}.get(s.k_split),
        lambda tok: {"splitk": {"k_split": KSplit.split}, "streamk": {"k_split": KSplit.stream}}.get(tok),
    ),
    (
        "grouped (variable M per group)",
        lambda s: {Varlen.m: "varlenm", Varlen.k: "varlenk"}.get(s.varlen),
        lambda tok: {"varlenm": {"varlen": Varlen.m}, "varlenk": {"varlen": Varlen.k}}.get(tok),
    ),
    (
        "gathered A",
        lambda s: "gathera" if s.gather_a else None,
        lambda tok: {"gather_a": True} if tok == "gathera" else None,
    ),
)
_SUFFIX_ORDER = (
    "_c{c_dtype}{c_major}, then _fastacc, then _swapab, then _splitk, then _varlenm or _varlenk, "
    "then _gathera"
)

FIELD_NAMES: tuple[str, ...] = tuple(f.name for f in fields(GemmSpec))
# Keys a YAML row may leave out: no C operand, fp32 accumulation, promoted fp8 accumulation.
_ROW_DEFAULTED = (
    "acc_dtype",
    "c_dtype",
    "c_major",
    "fp8_fast_accum",
    "swap_ab",
    "k_split",
    "varlen",
    "gather_a",
)
REQUIRED_FIELDS: tuple[str, ...] = tuple(f for f in FIELD_NAMES if f not in _ROW_DEFAULTED)
_BASE_TOKENS = 9
_ID_FORMAT = (
    "sm90_{a}_{b}_{d}_{acc}acc_{am}{bm}{dm}_{M}x{N}x{K}_c{cm}x{cn}_{coop|pp}"
    "[_c{c_dtype}{c_major}][_fastacc][_swapab][_splitk|_streamk][_varlenm|_varlenk][_gathera]"
)
