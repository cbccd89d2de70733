"""The tuning table: which instance ran fastest, measured per GPU, problem class and grid point.

`python -m build_tools.tune` writes it on a GPU (docs/DISPATCH.md: the grid, the method, the command);
it is committed as runtime/tuning.json and ships in the wheel beside this module. The tools edit it as
the *expanded document* (version 1; `read_document`)::

    {"format": "hgemm-sm90-tuning", "version": 1, "grid": {...how the points were drawn...},
     "gpus": {"NVIDIA H200/132": {"measured": {...date, command, versions...},
                                  "classes": {"bf16_bf16_bf16_kkn": [POINT, ...], ...}}}}
    POINT = {"m": 512, "n": 4096, "k": 4096, "cublas_us": 41.2, "finalists": 4, "kernels": "<16 hex>",
             "times": [["<instance id>", raster_along_m or null, group_size or null, us], ...]}

and store it *compact* (version 2; `write_document`, `encode_document`): each class names its candidates
once and each point's times are a list aligned with them (null where the point did not time one)::

    "bf16_bf16_bf16_kkn": {"candidates": [["<instance id>", raster_along_m or null, group_size or null], ...],
                           "points": [{"m": 512, ..., "kernels": "<16 hex>", "us": [41.9, null, ...]}, ...]}

one point per line. The expanded form repeats every instance id at every point: 17 MB against 1.3 MB for
the H200 table of 2026-12-03, and a first `select()` (which reads the file and parses the class it asks
about) spent ~165 ms on it against ~50 ms, on the 2-core CPU box (docs/PERF.md session 33); a re-tune's
diff was one line per time, now one per point. `load` and `TuningTable.from_json` take either version.

``kernels`` (optional) names the cubins and launch rules the times were measured with (`kernels_digest`);
the lookup ignores it, `python -m build_tools.tune --stale` re-times the points whose cubins or launch
rules changed, and `python -m hgemm_sm90 doctor` reports them (`TuningTable.freshness`).

A class key may end in ``@pdl`` (`PDL_SUFFIX`): that class's rows timed in chains of launches with
programmatic dependent launch (``pdl=True, b_ready=True``), for decode sizes only (M up to
`build_tools.tune.PDL_M_MAX`). PDL changes the ranking there: it slows the non-swapped 64-row tiles and
speeds up the swap-AB ones (docs/PERF.md, session 10), so `select(pdl=True)` reads these rows where they
cover the problem's M (`TuningTable.covers`) and the plain rows otherwise.

A point's ``times`` hold every instance of the class, fastest first, each with the launch overrides it was
timed with: the ``finalists`` fastest of the tuner's screening re-timed in full rounds (medians), the
others at their screening time scaled to the full rounds (build_tools/tune.py, `table_point`).

Lookup (`TuningTable.lookup`): the grid is a set of (N, K) *columns*, each timed at log-spaced M. A
query takes the column nearest in (log N, log K) and brackets its M (times batch: a batched problem has
that many more tiles) between two grid points (outside the column's M range: the nearest end point).
Each candidate's time at a bracketing point is carried to the query by the cost model's ratio between
the two problems (runtime/model.py: so a query whose N or M gives a tile a ragged last wave sees that),
and the two are interpolated linearly in log time over log M. The fastest estimate wins, among the
candidates that the bracket's heaviest point (the nearest row of the nearest column) timed: one that
only a farther point timed (added to the matrix after the nearer row was measured) is carried too far by
the model to compete (`nearest_timed`). A candidate with a walk override (build_tools/tune_walks.py
records one at a point only where it beat its instance's default walk there) competes only where that
heaviest point holds it: which walk wins changes with the tile grid, so it is not carried from a farther
point. Instances that this installation does not ship are skipped, so
a table from a larger build works with a smaller one. Measured by leave-one-out on the H200 table
(docs/DISPATCH.md), the model's scaling picks better than plain interpolation.

Which GPU's rows (`TuningTable.stand_in`): the GPU's own where the table has them, else those of a
measured GPU with the same SM count (an H100 SXM, H100 NVL, GH200 or H800 reads the H200's rows: the same
Hopper SMs, 132 of them, so the same tiles, clusters and wave counts; what differs, HBM bandwidth, L2 size
and for the NVL cards power and clocks, the cost model, the fallback otherwise, does not know per board
either). A board with another SM count (an H100 PCIe's 114, an H20's 78) has its waves elsewhere and
falls back to the model.

Grouped classes (keys with ``_varlenm``, gathered A or not: `is_grouped_key`): a point is a whole
mixture-of-experts layer timed by `python -m build_tools.bench_moe` (one launch over all its groups, every
grouped instance of the class) and written here by `python -m build_tools.grouped_table`, with ``m`` its
*average rows per group* and ``n``, ``k`` one group's. The cost
model ranks grouped tiles poorly (on the MoE suite its picks ran 0.92-0.96 of the fastest instance's
speed, docs/DISPATCH.md), and which tile wins depends above all on the group size, so
`TuningTable.lookup_grouped` weighs every point of the class by how near its group size is to the query's
(`GROUP_SIZE_OCTAVES`), over all their (N, K), and picks the candidate with the least weighted mean log
time over each point's fastest. A layer whose (N, K) the table measured uses that column's points alone
(as a plain lookup on a grid column does): the tiles that win a long 4096 x 14336 layer need not win the
other layers of its group size.
"""

from __future__ import annotations

import hashlib
import math
import os
from dataclasses import dataclass

from . import model
from .errors import CorruptArtifactError
from .gpus import GpuId
from .launcher import LAUNCH_RULES
from .spec import GemmSpec

TABLE_NAME = "tuning.json"
NEIGHBOUR_COLUMNS = (
    2  # (N, K) columns a lookup blends (leave-one-column-out on the H200 table: docs/DISPATCH.md)
)
# The class-key suffix of rows timed in PDL chains (see the module docstring).
PDL_SUFFIX = "@pdl"
# What marks a grouped (varlen M) class key, whose points are MoE layers (see the docstring).
GROUPED_TAG = "_varlenm"
# How far a grouped lookup reaches in group size: a point counts with weight exp(-d^2 / 2s^2) at d octaves
# (log2) from the query's average rows. s = 1.5 scored best leaving each MoE model of the suite out in
# turn (0.989 / 0.986 / 0.952 of the fastest, bf16 / e4m3 promoted / fast, against 0.985 / 0.979 / 0.941
# for the two nearest sizes alone; docs/DISPATCH.md).
GROUP_SIZE_OCTAVES = 1.5
FORMAT = "hgemm-sm90-tuning"
VERSION = 1  # the expanded document (what the tools edit)
COMPACT_VERSION = 2  # the file (see the module docstring)


@dataclass(frozen=True, slots=True, order=True)
class Candidate:
    """An instance with the launch overrides it was timed with (None: the launch's default)."""

    instance_id: str
    raster_along_m: bool | None = None
    group_size: int | None = None

    def to_json(self, us: float) -> list:
        return [self.instance_id, self.raster_along_m, self.group_size, round(us, 3)]

    @property
    def overrides_walk(self) -> bool:
        return self.raster_along_m is not None or self.group_size is not None


@dataclass(frozen=True, slots=True)
class Point:
    """One grid point of one class: the finalists' times in µs (fastest first) and cuBLAS's."""

    m: int
    n: int
    k: int
    times: tuple[tuple[Candidate, float], ...]
    cublas_us: float | None = None
    finalists: int | None = None  # how many of the fastest entries were re-timed in full rounds
    # Which cubins (and launch rules) the times were measured with: a digest of the timed instances' cubin
    # sha256s (`kernels_digest`), so `tune --stale` finds the points a kernel change made stale.
    # None: not recorded (points timed before session 19, grouped points from bench_moe runs before
    # session 45: build_tools/grouped_table.py), or carried over from stale times.
    kernels: str | None = None
    # How many instances per class build_tools/tune_walks.py tried other walks of here (None: not worked);
    # the lookup ignores it, the tool resumes by it.
    walks: int | None = None

    def to_json(self) -> dict:
        doc = {
            "m": self.m,
            "n": self.n,
            "k": self.k,
            "cublas_us": None if self.cublas_us is None else round(self.cublas_us, 3),
            "finalists": self.finalists,
        }
        if self.kernels is not None:
            doc["kernels"] = self.kernels
        if self.walks is not None:
            doc["walks"] = self.walks
        doc["times"] = [c.to_json(us) for c, us in self.times]
        return doc

    @classmethod
    def from_json(cls, doc, where: str, candidates: dict | None = None) -> Point:
        """A point of the expanded document. `candidates`: (id, raster, group) -> Candidate, shared by the
        points of one table (a table names the same few hundred candidates tens of thousands of times; one
        object each makes the first `select()` of a process ~3x faster)."""
        candidates = {} if candidates is None else candidates
        try:
            times = []
            for iid, raster, group, us in doc["times"]:
                cand = _interned(candidates, iid, raster, group)
                if not (us > 0):
                    raise ValueError("bad time entry")
                times.append((cand, float(us)))
            return cls._checked(doc, times)
        except (KeyError, TypeError, ValueError) as e:
            raise CorruptArtifactError(f"tuning table point {where} is malformed ({e})") from None

    @classmethod
    def from_compact(cls, doc, where: str, candidates: list[Candidate]) -> Point:
        """A point of the compact form: its ``us`` aligned with its class's ``candidates``."""
        try:
            us_list = doc["us"]
            if type(us_list) is not list or len(us_list) != len(candidates):
                raise ValueError(f"a times list not aligned with the class's {len(candidates)} candidates")
            times = [(c, float(us)) for c, us in zip(candidates, us_list) if us is not None]
            if not all(us > 0 for _, us in times):
                raise ValueError("bad time entry")
            return cls._checked(doc, times)
        except (KeyError, TypeError, ValueError) as e:
            raise CorruptArtifactError(f"tuning table point {where} is malformed ({e})") from None

    @classmethod
    def _checked(cls, doc: dict, times: list) -> Point:
        """The point of ``doc``'s fields (either form) with ``times``, validated; ValueError if malformed."""
        dims = [doc[d] for d in "mnk"]
        if any(type(v) is not int or v < 1 for v in dims) or not times:
            raise ValueError("bad extents or no times")
        finalists = doc.get("finalists")
        if finalists is not None and (type(finalists) is not int or not 0 <= finalists <= len(times)):
            raise ValueError("bad finalists count")
        kernels = doc.get("kernels")
        if kernels is not None and type(kernels) is not str:
            raise ValueError("bad kernels digest")
        walks = doc.get("walks")
        if walks is not None and (type(walks) is not int or walks < 0):
            raise ValueError("bad walks count")
        return cls(*dims, tuple(sorted(times, key=_us)), doc.get("cublas_us"), finalists, kernels, walks)


def _interned(candidates: dict, iid, raster, group) -> Candidate:
    """The one `Candidate` of the table (``candidates``: (id, raster, group) -> it) for these fields,
    validated when first seen; ValueError (or TypeError) if malformed."""
    cand = candidates.get((iid, raster, group))
    if cand is None:
        if not isinstance(iid, str) or raster not in (None, True, False):
            raise ValueError("bad time entry")
        if group is not None and (type(group) is not int or group < 1):
            raise ValueError("bad group size")
        cand = candidates[iid, raster, group] = Candidate(iid, raster, group)
    return cand


def _us(entry: tuple) -> float:
    return entry[1]


@dataclass(frozen=True, slots=True)
class Freshness:
    """`TuningTable.freshness` for one GPU: point counts by what their ``kernels`` record says."""

    fresh: int  # timed with the installed cubins
    stale: int  # timed with other cubins of the same instances, or under other launch rules
    unknown: int  # no record, or names an instance this installation lacks


def kernels_digest(ids, hashes: dict[str, str], rules: str | None = None) -> str:
    """What a point's times were measured with: 16 hex digits of the sha256 over the launch rules
    (``rules``, by default this runtime's: runtime/launcher.py `LAUNCH_RULES`) and the cubin sha256s of the
    instances ``ids`` that ``hashes`` (instance id -> cubin sha256) knows. A kernel change that alters any
    of their cubins changes it, and so does a change of the launch rules; adding an instance to the matrix
    does not (build_tools/tune.py times the new instance at the points that lack it)."""
    lines = f"launch rules: {LAUNCH_RULES if rules is None else rules}\n" + "".join(
        f"{iid} {hashes[iid]}\n" for iid in sorted(set(ids)) if iid in hashes
    )
    return hashlib.sha256(lines.encode()).hexdigest()[:16]


def timed_with(kernels: str | None, ids, hashes: dict[str, str]) -> bool | None:
    """Whether a point that records ``kernels`` (its `kernels_digest`, or None) over the instances ``ids``
    was timed with the cubins ``hashes`` names: None when it cannot say (no record, or an instance that
    ``hashes`` lacks)."""
    ids = set(ids)
    if kernels is None or not ids <= hashes.keys():
        return None
    return kernels == kernels_digest(ids, hashes)


@dataclass(frozen=True, slots=True)
class Pick:
    """What `lookup` found: a candidate, its estimated µs and a sentence saying where it came from."""

    instance_id: str
    raster_along_m: bool | None
    group_size: int | None
    us: float
    reason: str


class TuningTable:
    """A validated tuning table: per GPU key and class key, the grid points grouped into (N, K) columns.

    A table read by `load` (what `select()` uses) parses a class's points on its first lookup: a process
    pays for the classes it asks about, not for the whole table (9 MB of JSON, 1,659 points: the points
    were ~75% of the first `select()`'s time on the 2-core CPU box, 2026-12-02). A malformed point then
    raises `CorruptArtifactError` at the first lookup of its class; `gpus`, `summary()` and
    `instance_ids()` parse everything."""

    def __init__(self, gpus: dict[str, dict[str, list[Point]]], meta: dict | None = None, path: str = ""):
        self.meta = meta or {}
        self.path = path
        # (gpu key, class key) -> its points, parsed, or (unparsed) their JSON: the expanded form's list or
        # the compact form's {"candidates", "points"}; parsed on first use
        self._points: dict[tuple[str, str], list[Point]] = {}
        self._raw: dict[tuple[str, str], list | dict] = {}
        self._order: dict[str, list[str]] = {}  # gpu key -> its class keys, in the document's order
        self._candidates: dict = {}  # shared by all points (`Point.from_json`)
        # (gpu key, class key) -> {(n, k): points sorted by m}, built on first use
        self._columns: dict[tuple[str, str], dict[tuple[int, int], list[Point]]] = {}
        for gkey, classes in gpus.items():
            self._order[gkey] = list(classes)
            for ckey, points in classes.items():
                self._points[gkey, ckey] = list(points)

    # --- (de)serialization -----------------------------------------------------------------------------

    @classmethod
    def from_json(cls, doc, path: str = "", lazy: bool = False) -> TuningTable:
        """The table of a parsed JSON document. With ``lazy``, each class's points are validated when first
        used (see the class docstring); otherwise all of them now."""
        version = doc.get("version") if isinstance(doc, dict) and doc.get("format") == FORMAT else None
        if version not in (VERSION, COMPACT_VERSION):
            raise CorruptArtifactError(
                f"not a version-{VERSION} or -{COMPACT_VERSION} {FORMAT} document", path
            )
        table = cls({}, {"grid": doc.get("grid", {}), "measured": {}}, path)
        for gkey, entry in (doc.get("gpus") or {}).items():
            classes = entry.get("classes") if isinstance(entry, dict) else None
            if not isinstance(classes, dict):
                raise CorruptArtifactError(f"tuning table GPU {gkey!r} has no classes", path)
            table.meta["measured"][gkey] = entry.get("measured", {})
            table._order[gkey] = list(classes)
            for ckey, points in classes.items():
                if version == COMPACT_VERSION:
                    if not (isinstance(points, dict) and isinstance(points.get("points"), list)):
                        raise CorruptArtifactError(
                            f"tuning table class {gkey} {ckey} has no points list", path
                        )
                elif not isinstance(points, list):
                    raise CorruptArtifactError(f"tuning table class {gkey} {ckey} is not a list", path)
                table._raw[gkey, ckey] = points
                if not lazy:
                    table._class_points(gkey, ckey)
        return table

    def _class_points(self, gkey: str, ckey: str) -> list[Point] | None:
        """The points of one GPU and class (parsed now if they were not), or None if the table has none."""
        points = self._points.get((gkey, ckey))
        if points is None and (gkey, ckey) in self._raw:
            raw = self._raw[gkey, ckey]  # kept until it parses: a malformed class refuses every lookup
            if isinstance(raw, dict):  # the compact form
                cands = self._compact_candidates(gkey, ckey, raw)
                points = [
                    Point.from_compact(p, f"{gkey} {ckey}[{i}]", cands) for i, p in enumerate(raw["points"])
                ]
            else:
                points = [
                    Point.from_json(p, f"{gkey} {ckey}[{i}]", self._candidates) for i, p in enumerate(raw)
                ]
            self._points[gkey, ckey] = points
            del self._raw[gkey, ckey]
        return points

    def _compact_candidates(self, gkey: str, ckey: str, raw: dict) -> list[Candidate]:
        """A compact class's candidates, validated (one object per candidate across the table)."""
        out = []
        try:
            for iid, raster, group in raw["candidates"]:
                out.append(_interned(self._candidates, iid, raster, group))
        except (KeyError, TypeError, ValueError) as e:
            raise CorruptArtifactError(
                f"tuning table class {gkey} {ckey}'s candidates are malformed ({e})"
            ) from None
        return out

    def _columns_of(self, gkey: str, ckey: str) -> dict[tuple[int, int], list[Point]] | None:
        """{(n, k): points sorted by m} of one GPU and class, or None if the table has no such points."""
        cols = self._columns.get((gkey, ckey))
        if cols is None:
            points = self._class_points(gkey, ckey)
            if points is None:
                return None
            cols = {}
            for p in points:
                cols.setdefault((p.n, p.k), []).append(p)
            for col in cols.values():
                col.sort(key=lambda p: p.m)
            self._columns[gkey, ckey] = cols
        return cols

    @property
    def gpus(self) -> dict[str, dict[str, list[Point]]]:
        """GPU key -> class key -> points: every point, parsed (and so validated) now if it was not."""
        return {g: {c: self._class_points(g, c) for c in classes} for g, classes in self._order.items()}

    def to_json(self) -> dict:
        return {
            "format": FORMAT,
            "version": VERSION,
            "grid": self.meta.get("grid", {}),
            "gpus": {
                gkey: {
                    "measured": self.meta.get("measured", {}).get(gkey, {}),
                    "classes": {
                        ckey: [p.to_json() for p in sorted(points, key=lambda p: (p.n, p.k, p.m))]
                        for ckey, points in sorted(classes.items())
                    },
                }
                for gkey, classes in sorted(self.gpus.items())
            },
        }

    # --- queries -------------------------------------------------------------------------------------

    def summary(self) -> dict[str, dict[str, int]]:
        """GPU key -> class key -> number of grid points."""
        return {g: {c: len(pts) for c, pts in classes.items()} for g, classes in self.gpus.items()}

    def freshness(self, hashes: dict[str, str]) -> dict[str, Freshness]:
        """GPU key -> how many of its points were timed with the cubins ``hashes`` names (instance id ->
        cubin sha256: the installed manifest's), with other cubins (a kernel changed since: the lookup
        still uses those times, but they may misjudge the instances that changed), or cannot say: no
        record, or an instance this installation lacks (a table from a larger build)."""
        out = {}
        for gkey, classes in self.gpus.items():
            fresh = stale = unknown = 0
            for points in classes.values():
                for p in points:
                    timed = timed_with(p.kernels, (c.instance_id for c, _ in p.times), hashes)
                    if timed is None:
                        unknown += 1
                    elif timed:
                        fresh += 1
                    else:
                        stale += 1
            out[gkey] = Freshness(fresh, stale, unknown)
        return out

    def instance_ids(self) -> set[str]:
        """Every instance id the table names (build_tools/regen.py checks them against the matrix)."""
        return {
            c.instance_id for cl in self.gpus.values() for pts in cl.values() for p in pts for c, _ in p.times
        }

    def stand_in(self, gpu: GpuId) -> str | None:
        """The key of the measured GPU whose rows serve ``gpu`` (see the module docstring): its own, else
        the first by key with the same SM count, else None (the cost model decides)."""
        if gpu.key in self._order:
            return gpu.key
        same = sorted(key for key in self._order if GpuId.from_key(key).sm_count == gpu.sm_count)
        return same[0] if same else None

    def _rows(self, gpu: GpuId, class_key: str) -> tuple[str, dict[tuple[int, int], list[Point]] | None]:
        """(the words that name whose rows these are, the columns of the class) for ``gpu``."""
        gkey = self.stand_in(gpu)
        if gkey is None:
            return gpu.key, None
        source = gkey if gkey == gpu.key else f"{gkey} (for {gpu.key}: the same SM count)"
        return source, self._columns_of(gkey, class_key)

    def covers(self, gpu: GpuId, class_key: str, mq: int) -> bool:
        """Whether the table has rows for this GPU and class up to M = ``mq`` (M times batch) in some
        column: what decides whether `select(pdl=True)` reads a class's PDL rows, which stop at decode
        sizes, instead of carrying their last M to a larger problem."""
        cols = self._rows(gpu, class_key)[1]
        return bool(cols) and any(col[-1].m >= mq for col in cols.values())

    def lookup_grouped(self, gpu: GpuId, class_key: str, rows: int, n: int, k: int, allowed) -> Pick | None:
        """Grouped classes: the table's pick among ``allowed`` for groups of ``rows`` rows on average of a
        layer whose groups are ``n`` x ``k`` (see the module docstring), or None without points for this GPU
        (or its `stand_in`) and class. ``Pick.us`` is the pick's weighted mean time over the fastest at the
        points (a ratio >= 1, not a time)."""
        source, cols = self._rows(gpu, class_key)
        if not cols:
            return None
        own = cols.get((n, k), [])
        column = any(c.instance_id in allowed for p in own for c, _ in p.times)
        # A layer the table measured (its N and K): its own points alone, as a plain lookup on a column.
        points = own if column else [p for col in cols.values() for p in col]
        timed = {c.instance_id for p in points for c, _ in p.times} & set(allowed)
        if not timed:
            return None
        at = math.log2(rows)
        weights = [math.exp(-0.5 * ((math.log2(p.m) - at) / GROUP_SIZE_OCTAVES) ** 2) for p in points]
        regret = dict.fromkeys(timed, 0.0)
        for p, weight in zip(points, weights, strict=True):
            times = {c.instance_id: us for c, us in p.times}
            fastest, slowest = p.times[0][1], p.times[-1][1]
            for iid in timed:  # not timed at a point: counts as its slowest (as `estimate` does)
                regret[iid] += weight * math.log(times.get(iid, slowest) / fastest)
        total = sum(weights)
        iid, r = min(regret.items(), key=lambda item: (item[1], item[0]))
        nearest = min({p.m for p in points}, key=lambda m: (abs(math.log2(m) - at), m))
        ratio = math.exp(r / total)
        layers = f"{len(points)} MoE layers of N={n} K={k}" if column else f"{len(points)} MoE layers"
        return Pick(
            iid,
            None,
            None,
            ratio,
            f"table {source} {class_key}: {layers} weighted by group size around {rows} "
            f"rows (nearest measured {nearest}); {ratio:.3f}x the fastest in the weighted mean",
        )

    def lookup(self, gpu: GpuId, class_key: str, m: int, n: int, k: int, batch: int, allowed) -> Pick | None:
        """The table's pick for the problem among instance ids in ``allowed``, or None if the table has no
        entry for this GPU (nor one with its SM count: `stand_in`) and class, or none of its candidates is
        allowed."""
        source, cols = self._rows(gpu, class_key)
        if not cols:
            return None
        ln, lk, mq = math.log(n), math.log(k), m * batch
        dist = {c: math.hypot(math.log(c[0]) - ln, math.log(c[1]) - lk) for c in cols}
        nearest = sorted(cols, key=lambda c: (dist[c], c))[:NEIGHBOUR_COLUMNS]
        if dist[nearest[0]] < 1e-9:
            nearest = nearest[:1]  # on a column: it alone
        bracket, wheres = [], []
        for nk in nearest:
            points, where = _m_bracket(cols[nk], mq)
            weight = 1.0 / (dist[nk] + 1e-3)
            bracket += [(p, weight * w) for p, w in points]
            wheres.append(f"column N={nk[0]} K={nk[1]} {where}")
        est = estimate(bracket, (m, n, k, batch), gpu.sm_count, nearest_timed(bracket, allowed))
        if not est:
            return None
        cand, us = min(est.items(), key=lambda item: (item[1], item[0]))
        return Pick(
            cand.instance_id,
            cand.raster_along_m,
            cand.group_size,
            us,
            f"table {source} {class_key}: {'; '.join(wheres)}; scaled to the problem by the cost model",
        )


def _m_bracket(col: list[Point], mq: int) -> tuple[list[tuple[Point, float]], str]:
    """The grid points of one column around M = ``mq`` with their log-M interpolation weights."""
    if mq <= col[0].m or mq >= col[-1].m:
        end = col[0] if mq <= col[0].m else col[-1]
        return [(end, 1.0)], f"at M={end.m}"
    hi = next(i for i, p in enumerate(col) if p.m >= mq)
    p0, p1 = col[hi - 1], col[hi]
    w = (math.log(mq) - math.log(p0.m)) / (math.log(p1.m) - math.log(p0.m))
    return [(p0, 1.0 - w), (p1, w)], f"M={p0.m}..{p1.m}"


def nearest_timed(bracket: list[tuple[Point, float]], allowed) -> set:
    """The ids of ``allowed`` that the bracket's heaviest point timed, or all of ``allowed`` if it timed
    none of them. An instance added to the matrix after a row was measured has no time at that row; at a
    query nearer to it than to the next row its estimate would come from the farther row alone, carried
    over a wave count or cluster residency that changes in between, and such estimates picked the 64-row
    multicast tiles (never timed below M = 32) at M = 17-22, where they ran at 0.88-0.96 of the swap-AB
    tiles that the M = 16 row timed (docs/DISPATCH.md, session 35)."""
    heaviest = max(bracket, key=lambda entry: entry[1])[0]
    return {c.instance_id for c, _ in heaviest.times if c.instance_id in allowed} or allowed


def estimate(bracket: list[tuple[Point, float]], problem: tuple, sm_count: int, allowed) -> dict:
    """Each allowed candidate's estimated µs for ``problem`` (m, n, k, batch) from the grid points of
    ``bracket`` [(point, weight)]: at each point its measured time scaled by the cost model's ratio between
    the problem and the point (runtime/model.py: wave quantization, edge tiles, k-loop length), then the
    weighted geometric mean over the points that timed it. A point lists every instance its run timed
    (screened-out ones at their scaled screening time), so a candidate missing from a point was added to
    the matrix after that point was timed: missing data, not a slow result, and its estimate comes from
    the bracket's other points (an instance that no point of the bracket timed is not a candidate). A
    candidate with a walk override counts only if the bracket's heaviest point timed it (see the module
    docstring)."""
    times = [(point, dict(point.times), weight) for point, weight in bracket]
    heaviest = dict(max(bracket, key=lambda entry: entry[1])[0].times)
    cands = {
        c
        for _, t, _ in times
        for c in t
        if c.instance_id in allowed and (c in heaviest or not c.overrides_walk)
    }
    out = {}
    for cand in cands:
        spec = _spec(cand.instance_id)
        target = model.estimate_s(spec, *problem, sm_count)
        timed = [(point, t[cand], weight) for point, t, weight in times if cand in t]  # never empty
        log_sum = total = 0.0
        for point, us, weight in timed:
            log_sum += weight * math.log(
                us * target / model.estimate_s(spec, point.m, point.n, point.k, 1, sm_count)
            )
            total += weight
        out[cand] = math.exp(log_sum / total)
    return out


_specs: dict[str, GemmSpec] = {}


def _spec(instance_id: str) -> GemmSpec:
    spec = _specs.get(instance_id)
    if spec is None:
        spec = _specs[instance_id] = GemmSpec.parse(instance_id)
    return spec


def load(path: str) -> TuningTable:
    """Read the table at ``path``; ``CorruptArtifactError`` if it is unreadable or malformed (a class's
    points are validated on the first lookup of the class, `TuningTable`)."""
    import json

    try:
        with open(path, "rb") as f:
            doc = json.loads(f.read())
    except (OSError, ValueError) as e:
        raise CorruptArtifactError(f"tuning table cannot be read: {e}", path) from None
    return TuningTable.from_json(doc, path, lazy=True)


def read_document(path) -> dict:
    """The expanded document (version 1, see the module docstring) of the table file at ``path``, either
    form: what the tools edit. ValueError (or OSError) if it is not a table."""
    import json

    with open(path, "rb") as f:
        doc = json.loads(f.read())
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValueError(f"{path}: not a {FORMAT} document")
    if doc.get("version") != COMPACT_VERSION:
        return doc
    try:
        return expand_document(doc)
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"{path}: a malformed compact table ({e!r})") from None


def write_document(path, doc: dict) -> None:
    """Write the expanded document ``doc`` to ``path`` in the compact form, atomically (an interrupted
    run never leaves half a table)."""
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(encode_document(doc))
    os.replace(tmp, path)


def _candidate_order(c: tuple) -> tuple:
    iid, raster, group = c
    return (iid, -1 if raster is None else int(raster), group or 0)


def compact_class(points: list[dict]) -> dict:
    """One class's expanded points in the compact form: its candidates (sorted) once, each point's times
    aligned with them."""
    cands = sorted({(t[0], t[1], t[2]) for p in points for t in p["times"]}, key=_candidate_order)
    index = {c: i for i, c in enumerate(cands)}
    out = []
    for p in points:
        us: list = [None] * len(cands)
        for iid, raster, group, t in p["times"]:
            us[index[iid, raster, group]] = t
        out.append({**{f: v for f, v in p.items() if f != "times"}, "us": us})
    return {"candidates": [list(c) for c in cands], "points": out}


def expand_class(cls_doc: dict) -> list[dict]:
    """The inverse of `compact_class`: each point with its ``times``, fastest first."""
    cands = cls_doc["candidates"]
    out = []
    for p in cls_doc["points"]:
        timed = [[*c, t] for c, t in zip(cands, p["us"]) if t is not None]
        out.append({**{f: v for f, v in p.items() if f != "us"}, "times": sorted(timed, key=lambda e: e[3])})
    return out


def expand_document(doc: dict) -> dict:
    """A compact document (version 2) expanded (version 1)."""
    gpus = {
        g: {**e, "classes": {c: expand_class(cd) for c, cd in e["classes"].items()}}
        for g, e in doc.get("gpus", {}).items()
    }
    return {**doc, "version": VERSION, "gpus": gpus}


def encode_document(doc: dict) -> str:
    """The text of the compact form of the expanded document ``doc``: valid JSON, one candidate and one
    point per line (a re-tune's diff names the points it changed)."""
    import json

    def one(x) -> str:
        return json.dumps(x, ensure_ascii=False)

    def block(indent: str, items: list[str]) -> str:
        return ",\n".join(indent + i for i in items)

    gpus = []
    for gkey, entry in doc.get("gpus", {}).items():
        classes = []
        for ckey, points in entry.get("classes", {}).items():
            cd = compact_class(points)
            classes.append(
                f"{one(ckey)}: {{\n"
                f'     "candidates": [\n{block("      ", [one(c) for c in cd["candidates"]])}\n     ],\n'
                f'     "points": [\n{block("      ", [one(p) for p in cd["points"]])}\n     ]}}'
            )
        gpus.append(
            f"{one(gkey)}: {{\n"
            f'   "measured": {one(entry.get("measured", {}))},\n'
            f'   "classes": {{\n{block("    ", classes)}\n   }}}}'
        )
    head = {"format": FORMAT, "version": COMPACT_VERSION, "grid": doc.get("grid", {})}
    return f'{one(head)[:-1]},\n "gpus": {{\n{block("  ", gpus)}\n }}}}\n'


def shipped_path() -> str:
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), TABLE_NAME)


_shipped: list = []  # [table or None] once read: the file ships with the package and never changes


def shipped_table() -> TuningTable | None:
    """The table shipped with this package (read once), or None if the package has none."""
    if not _shipped:
        path = shipped_path()
        _shipped.append(load(path) if os.path.exists(path) else None)
    return _shipped[0]


def is_grouped_key(class_key: str) -> bool:
    """Whether a class key names grouped (varlen M) points, MoE layers, rather than a grid of GEMMs: the
    grouped classes' keys, with or without gathered A (``..._varlenm_gathera``)."""
    return GROUPED_TAG in class_key
