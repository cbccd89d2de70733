"""The launch plan of one instance: what `launch` (runtime/api.py) computes once per instance, once per
problem shape, and once per (shape, stream, launch mode).

- Per instance (`LaunchPlan`): the operand layouts, the parameter packer (runtime/args.py) and one
  `struct.Struct` that writes a whole parameter buffer in one call: the shape's constant bytes
  interleaved with the per-launch values (the descriptors' 8-byte addresses, alpha, beta).
- Per problem shape (`Shape`, from `prepare`): the validated extents, leading dimensions, batch strides,
  walk order and split count, packed once with zero addresses and scales and cut into those constant
  chunks; the number of work units (cluster tiles, times the splits under split-K) and the workspace
  they need; the operands' byte footprints (runtime/problem.py).
- Per (shape, stream, launch mode) (`LaunchEntry`): the kernel loaded in the stream's context, its
  `CUlaunchConfig` with the persistent grid (runtime/scheduling.py) already in it, and the driver's
  launch function. A repeated launch finds its entry with one dict lookup. The launch mode is False,
  True (pdl) or `B_READY` (pdl, and B may be loaded before the previous grid completes: the entry's
  constant bytes carry the kernel's `prefetch_operand`).

Patching alpha and beta per launch (rather than keying the cache on them) keeps a sweep over scales from
filling the cache; pointers are patched for the same reason. Caches are bounded by being cleared when
full; entries are immutable once published (but for a launch entry's memo of the last pointers that passed
the checks, `LaunchEntry.accept`), so threads share them.
"""

from __future__ import annotations

import struct
from dataclasses import replace

from . import overlap, problem, scheduling
from .args import ParamPacker
from .errors import CorruptArtifactError, InvalidArgumentError
from .launcher import PlainBuffers, ThreadBuffers, build_config
from .spec import KSplit, Varlen

# The launch mode of launch(pdl=True, b_ready=True) (the others are pdl's own False and True).
B_READY = "b_ready"
_CACHED_PER_INSTANCE = 1024  # shapes, and launch entries, per instance (each cleared when full)
ACCEPTED_MEMO = 8  # pointer sets a launch entry remembers as checked (`LaunchEntry.accept`)
# The per-launch values lie in the order the DSL passes them (docs/CONTRACT.md: the descriptors of the
# kernel's A, B, D, C slots, i.e. GemmSpec.launch_operands, then alpha, beta, then split-K's workspace);
# the one-call writer relies on it.
_WIDTH = {
    "a": 8,
    "b": 8,
    "d": 8,
    "c": 8,
    "alpha": 4,
    "beta": 4,
    "workspace": 8,
    "cu_seqlens_m": 8,
    "cu_seqlens_k": 8,
    "a_idx": 8,
}


class Shape:
    """One validated problem shape: `chunks` (the parameter image's constant bytes between the per-launch
    values), `total` (work units over all batches: cluster tiles, times the split count under split-K),
    `workspace_bytes` (what a split-K launch needs, 0 otherwise) and `footprints` (runtime/overlap.py)."""

    __slots__ = ("chunks", "total", "workspace_bytes", "footprints")

    def __init__(self, chunks, total: int, workspace_bytes: int, footprints: overlap.Footprints):
        self.chunks, self.total, self.footprints = chunks, total, footprints
        self.workspace_bytes = workspace_bytes


class LaunchEntry:
    """Everything a launch of one shape on one stream (with or without PDL) needs from the driver side."""

    __slots__ = (
        "instance",
        "has_c",
        "grouped",
        "gathered",
        "varlen_k",
        "plain",
        "accepted",
        "plain_buffers",
        "takes_workspace",
        "workspace_bytes",
        "chunks",
        "check_overlap",
        "pack",
        "buffers",
        "stream",
        "context",
        "device",
        "config",
        "function",
        "launch",
    )

    def __init__(self, plan: LaunchPlan, shape: Shape, loaded, stream: int, mode, cu):
        rec = plan.record
        clusters = loaded.max_active_clusters
        if plan.stream:
            # Stream-K's workspace holds two partials per CTA of at most STREAM_MAX_SMS CTAs (one per SM
            # of the largest Hopper board); a kernel that fits more CTAs on the device (several per SM)
            # gets no more workers than that.
            clusters = min(clusters, scheduling.STREAM_MAX_SMS // (rec.cluster[0] * rec.cluster[1]))
        grid = scheduling.persistent_grid(shape.total, clusters, *rec.cluster[:2])
        self.instance, self.has_c, self.pack, self.buffers = rec.id, plan.has_c, plan.pack, plan.buffers
        self.grouped = plan.grouped  # the launch patches the cu_seqlens_m address
        self.gathered = plan.gathered  # and the a_idx address
        self.varlen_k = plan.varlen_k  # grouped K: the offsets are cu_seqlens_k
        # Split-K and stream-K: the launch patches a workspace address (0 when one split needs none).
        self.takes_workspace, self.workspace_bytes = plan.takes_workspace, shape.workspace_bytes
        # The plain form: its parameters are (A, B, D, alpha) alone, so launch() with no options may
        # take it (runtime/api.py).
        self.plain = not (plan.has_c or plan.takes_workspace or plan.grouped or plan.gathered)
        self.accepted = set()  # (a, b, d, c) tuples that `accept` passed, at most ACCEPTED_MEMO
        self.plain_buffers = PlainBuffers(rec.param_bytes, rec.param_offsets) if self.plain else None
        self.chunks, self.check_overlap = shape.chunks, shape.footprints.check  # check(instance, a, b, d, c)
        if mode == B_READY and plan.prefetch is not None:
            self.chunks = _with_word(shape.chunks, plan.patches, *plan.prefetch)
        self.stream, self.context, self.device = stream, loaded.context, loaded.device
        self.config = build_config(cu, rec, grid, stream, mode is not False)
        self.function = loaded.function
        self.launch = cu.cuLaunchKernelEx

    def accept(self, a, b, d, c=None) -> bool:
        """Whether the pointers pass `problem.pointers_ok` (c: None unless the instance reads C; False:
        the first-call path says why), raising the overlap error of D with A, B or C
        (runtime/overlap.py). What passed is remembered in `accepted`, so that a launch repeating
        pointers that passed skips both (pure functions of the values and this shape). It remembers
        several: an allocating caller (gemm(a, b) in a loop) gets its output from torch's caching
        allocator, which hands out two or more blocks in turn, and checking again cost 0.57 µs a launch
        (fake driver, CPU box, 2026-12-04; ~1 µs on the H200 host, docs/PERF.md session 46). Threads may
        race on it: it only ever holds whole tuples that passed, and a miss only means checking again."""
        if not (
            problem.pointers_ok(a, b, d, c) if self.has_c else c is None and problem.pointers_ok(a, b, d)
        ):
            return False
        self.check_overlap(self.instance, a, b, d, c)
        memo = self.accepted
        if len(memo) >= ACCEPTED_MEMO:
            memo.clear()  # bounded: a caller cycling through many buffers pays the check, as before
        memo.add((a, b, d, c))
        return True


def _with_word(chunks: tuple, patches: tuple, offset: int, word: bytes) -> tuple:
    """`chunks` (the constant bytes around the per-launch `patches`) with the bytes at parameter offset
    `offset` replaced by `word`, which lies inside one chunk (it is no per-launch value)."""
    start = 0
    for j, chunk in enumerate(chunks):
        if start <= offset and offset + len(word) <= start + len(chunk):
            i = offset - start
            return (*chunks[:j], chunk[:i] + word + chunk[i + len(word) :], *chunks[j + 1 :])
        start = patches[j][1] if j < len(patches) else start + len(chunk)
    raise AssertionError(f"offset {offset} lies in no constant chunk")


class LaunchPlan:
    """Everything per instance that `launch` needs and that never changes: built once, then shared."""

    __slots__ = (
        "record",
        "catalog",
        "ops",
        "has_c",
        "split",
        "stream",
        "takes_workspace",
        "grouped",
        "gathered",
        "varlen_k",
        "packer",
        "patches",
        "prefetch",
        "pack",
        "buffers",
        "shapes",
        "entries",
    )

    def __init__(self, record, catalog):
        self.record = record
        self.catalog = catalog  # the Manifest the record came from: error messages suggest its siblings
        self.ops = problem.layouts(record.spec)
        self.has_c = record.spec.has_c
        self.split = record.spec.k_split == KSplit.split
        self.stream = record.spec.k_split == KSplit.stream
        self.takes_workspace = self.split or self.stream
        self.grouped = record.spec.varlen != Varlen.none
        self.varlen_k = record.spec.varlen == Varlen.k
        self.gathered = record.spec.gather_a
        self.packer = ParamPacker(record)
        patches = {**self.packer.address_offsets(), **self.packer.scalar_offsets()}
        order = sorted((off, name) for name, off in patches.items() if name in _WIDTH)
        names = tuple(name for _, name in order)
        want = (
            *record.spec.launch_operands,
            "alpha",
            *(("beta",) if self.has_c else ()),
            *(("workspace",) if self.takes_workspace else ()),
            *((("cu_seqlens_k" if self.varlen_k else "cu_seqlens_m"),) if self.grouped else ()),
            *(("a_idx",) if self.gathered else ()),
        )
        if names != want:
            raise CorruptArtifactError(
                f"the record's descriptors and scales lie in the order {list(names)}, not "
                f"{list(want)} as its spec's operands and epilogue need",
                record.cubin_path,
                instance=record.id,
            )
        self.patches = tuple((off, off + _WIDTH[name]) for off, name in order)  # byte ranges, in order
        # A plain-walk kernel's prefetch_operand (contract 6): where it lies, and the value that names the
        # caller's B (the kernel's A under swap-AB). None for the grouped forms, which never load early.
        at = self.packer.scalar_offsets().get("prefetch_operand")
        self.prefetch = None if at is None else (at, struct.pack("<i", 1 if record.spec.swap_ab else 2))
        fmt, end = "<", 0
        for off, name in order:
            fmt += f"{off - end}s" + ("f" if _WIDTH[name] == 4 else "Q")
            end = off + _WIDTH[name]
        pack = struct.Struct(fmt + f"{record.param_bytes - end}s").pack_into
        if record.spec.swap_ab:
            # launch passes (chunk, a, chunk, b, ...); a swap-AB kernel's first descriptor is B's.
            def pack(buf, offset, c0, a, c1, b, *rest, _pack=pack):
                _pack(buf, offset, c0, b, c1, a, *rest)

        # pack(buf, 0, chunk, a, chunk, b, chunk, d, [chunk, c,] chunk, alpha, [chunk, beta,]
        # [chunk, workspace | cu_seqlens_m,] chunk)
        self.pack = pack
        self.buffers = ThreadBuffers(record.param_bytes, record.param_offsets)
        self.shapes: dict[tuple, Shape] = {}
        self.entries: dict[tuple, LaunchEntry] = {}

    def shape(self, key: tuple) -> Shape:
        """The `Shape` of a canonical key (m, n, k, batch, lda, ldb, ldd, ldc, batch_stride_a..c,
        raster_along_m, group_size, k_splits, grouping): validated and packed on first use. `grouping` is
        None or (num_groups, rows of a gathered A or None, columns of a gathered A or None)."""
        hit = self.shapes.get(key)
        return hit if hit is not None else self.prepare(key)

    def prepare(self, key: tuple) -> Shape:
        (
            m,
            n,
            k,
            batch,
            lda,
            ldb,
            ldd,
            ldc,
            bsa,
            bsb,
            bsd,
            bsc,
            raster_along_m,
            group_size,
            k_splits,
            grouping,
        ) = key
        groups, a_rows, a_cols = (None, None, None) if grouping is None else grouping
        iid = self.record.id
        lds, bss = (lda, ldb, ldd), (bsa, bsb, bsd)
        if self.has_c:
            lds, bss = (*lds, ldc), (*bss, bsc)
        elif ldc is not None or bsc is not None:
            raise self.without_c("ldc" if ldc is not None else "batch_stride_c")
        problem.check_grouping(iid, self.grouped, batch, groups)
        gathered = problem.check_gathering(
            iid, self.gathered, self.varlen_k, m, k, self.record.spec.tile[2], a_rows, a_cols
        )
        values = problem.resolve(iid, self.ops, m, n, k, batch, lds, bss, groups, gathered)
        rec = self.record
        tiles = (*rec.spec.problem_tile, *rec.spec.problem_cluster)  # in the caller's view, as m and n
        clusters_m, clusters_n, total = scheduling.cluster_tiles(
            values["m"], values["n"], values["l"], *tiles
        )
        if self.varlen_k:
            # Grouped K: every group has the whole tile grid, one batch of D each.
            clusters_m, clusters_n, total = scheduling.cluster_tiles(values["m"], values["n"], groups, *tiles)
            values["cu_seqlens_m"] = values["cu_seqlens_k"] = values["a_idx"] = 0  # patched per launch
        elif self.grouped:
            rows = rec.spec.problem_tile[0] * rec.spec.problem_cluster[0]
            if values["m"] + groups * (rows - 1) > problem.INT32_MAX:
                # The kernel bounds the walk by (m + G * (rows per cluster tile - 1)) in int32.
                raise InvalidArgumentError(
                    f"m={values['m']} rows with num_groups={groups}: m + num_groups * {rows - 1} passes "
                    "2**31 - 1, the kernel's bound on the groups' tiles",
                    "split the launch into fewer rows or groups",
                    iid,
                )
            # The walk inside each group: raster as for one group of the average size.
            clusters_m = scheduling.ceil_div(clusters_m, groups)
            total = scheduling.grouped_cluster_tiles(values["m"], values["n"], groups, *tiles)
            values["cu_seqlens_m"] = values["cu_seqlens_k"] = values["a_idx"] = 0  # patched per launch
        # The kernel walks its own tile grid: a swap-AB kernel's M runs along the problem's N (the cluster
        # tiles above are counted in the problem's view, `problem_tile` and `problem_cluster`), so its walk
        # flag is the problem's, flipped.
        swap = rec.spec.swap_ab
        along_m, group = scheduling.default_raster(
            *((clusters_n, clusters_m) if swap else (clusters_m, clusters_n))
        )
        if raster_along_m is not None:
            along_m = int(raster_along_m) ^ swap
        values["raster_along_m"] = along_m
        values["group_size"] = group if group_size is None else group_size
        values["prefetch_operand"] = 0  # B_READY launch entries set it (`LaunchEntry`)
        splits, workspace_bytes = self._splits(total, values["k"], k_splits)
        units = total * splits
        if self.split:
            values["k_splits"] = splits
        if self.stream:  # its workspace is optional (`workspace_bytes` says how much it uses)
            units = self._stream_units(total, values["k"])
        if self.takes_workspace:
            values["workspace"] = 0  # patched per launch
        for op in self.ops:
            values[op.name] = 0  # patched per launch
        values["alpha"] = values["beta"] = 0.0  # patched per launch
        image = bytes(self.packer.pack(values))
        chunks, end = [], 0
        for start, stop in self.patches:
            chunks.append(image[end:start])
            end = stop
        chunks.append(image[end:])
        shape = Shape(tuple(chunks), units, workspace_bytes, overlap.Footprints(self.ops, values))
        if len(self.shapes) >= _CACHED_PER_INSTANCE:
            self.shapes.clear()
        self.shapes[key] = shape
        return shape

    def _splits(self, cluster_tiles: int, k: int, k_splits: int | None) -> tuple[int, int]:
        """(split count, workspace bytes) of a problem with `cluster_tiles` cluster tiles: (1, 0) unless
        split-K; `k_splits` None takes the default (runtime/scheduling.py). The counters, the partials and
        the default count are per CTA tile: each CTA of a cluster reduces its own tile."""
        if not self.split:
            if k_splits is not None:
                raise self.not_split("k_splits")
            return 1, 0
        tile_m, tile_n, tile_k = self.record.spec.tile
        cluster_m, cluster_n = self.record.spec.cluster
        tiles = cluster_tiles * cluster_m * cluster_n
        k_tile_count = scheduling.k_tiles(k, tile_k)
        if k_splits is None:
            k_splits = scheduling.default_k_splits(tiles, k_tile_count)
        elif k_splits > k_tile_count:
            raise InvalidArgumentError(
                f"k_splits={k_splits} is more than the {k_tile_count} k-tiles of K={k} "
                f"(tile K {tile_k}): a split would be empty",
                f"pass k_splits between 1 and {k_tile_count}, or None for the default",
                self.record.id,
            )
        if k_splits > 1 and tiles > scheduling.SPLIT_COUNTERS:
            raise InvalidArgumentError(
                f"k_splits={k_splits} with {tiles} output tiles: split-K takes at most "
                f"{scheduling.SPLIT_COUNTERS} tiles (one arrival counter each)",
                "pass k_splits=1 (a problem this large fills the GPU without splitting K)",
                self.record.id,
            )
        workspace = scheduling.split_workspace_bytes(tiles, k_splits, tile_m, tile_n)
        if workspace >= 2**33:  # the kernel indexes the fp32 partials with int32
            raise InvalidArgumentError(
                f"k_splits={k_splits} needs {workspace} bytes of split-K workspace, more than the kernel's "
                "8 GiB index range",
                "pass a smaller k_splits, or split the problem into batches",
                self.record.id,
            )
        return k_splits, workspace

    def _stream_units(self, cluster_tiles: int, k: int) -> int:
        """Stream-K: the work units that size the grid (runtime/scheduling.py `stream_work_units`), after
        checking that the kernel's int32 walk arithmetic holds: its k-tile numbers over the stream tiles
        (fewer than two waves of stream tiles) times the clusters, plus as much again, stay below 2**31."""
        k_tile_count = scheduling.k_tiles(k, self.record.spec.tile[2])
        if 3 * scheduling.STREAM_MAX_SMS**2 * (k_tile_count + 1) > problem.INT32_MAX:
            raise InvalidArgumentError(
                f"k={k} is {k_tile_count} k-tiles, more than this stream-K instance's walk can number "
                "in int32",
                "split K into several launches accumulated through C, or use an instance without _streamk",
                self.record.id,
            )
        return scheduling.stream_work_units(cluster_tiles, k_tile_count)

    def entry(self, key: tuple, shape: Shape, loaded, stream: int, mode, cu) -> LaunchEntry:
        """The cached `LaunchEntry` under `key` (the full launch key of runtime/api.py), built if new;
        `mode`: False, True (pdl) or `B_READY`."""
        hit = self.entries.get(key)
        if hit is None:
            hit = LaunchEntry(self, shape, loaded, stream, mode, cu)
            if len(self.entries) >= _CACHED_PER_INSTANCE:
                self.entries.clear()
            self.entries[key] = hit
        return hit

    def forget(self, stale) -> None:
        """Drop the launch entries for which `stale(entry)` is true."""
        for key in [k for k, e in list(self.entries.items()) if stale(e)]:
            self.entries.pop(key, None)

    # ---- errors that name the shipped alternatives --------------------------------------------------
    def not_split(self, what: str) -> InvalidArgumentError:
        # Split-K instances of this instance's problem class (dispatch's definition: the same dtypes,
        # layouts and accumulation). Imported here: dispatch imports the runtime state, which imports this.
        from .dispatch import ProblemClass

        mine = ProblemClass.of(self.record.spec)
        others = sorted(
            iid
            for iid, spec in self.catalog.specs.items()
            if spec.k_split == KSplit.split and ProblemClass.of(spec) == mine
        )
        return InvalidArgumentError(
            f"{what} given, but this instance does not split K"
            + (
                " by a launch-time count (stream-K: its pieces are fixed)"
                if self.stream
                else " (it has no workspace)"
            ),
            "drop it" + (f", or use a split-K instance: {', '.join(others)}" if others else ""),
            self.record.id,
        )

    def workspace_missing(self, nbytes: int) -> InvalidArgumentError:
        return InvalidArgumentError(
            f"this {'stream-K' if self.stream else 'split-K'} launch needs a workspace of {nbytes} bytes but "
            "workspace is None",
            "pass workspace=<16-byte aligned device allocation of hgemm_sm90.workspace_bytes(...) bytes, "
            "zeroed before its first use> (or k_splits=1, which needs none)",
            self.record.id,
        )

    def c_missing(self) -> InvalidArgumentError:
        others = _siblings(self.catalog, self.record, want_c=False)
        return InvalidArgumentError(
            "this instance reads a C operand (D = alpha * A @ B^T + beta * C) but c is None",
            "pass c=<device pointer of C> (c=d for an in-place update)"
            + (f", or use an instance without C: {', '.join(others)}" if others else ""),
            self.record.id,
        )

    def without_c(self, what: str) -> InvalidArgumentError:
        others = _siblings(self.catalog, self.record, want_c=True)
        return InvalidArgumentError(
            f"{what} given, but this instance does not read a C operand (it computes D = alpha * A @ B^T)",
            "drop it (and leave beta=0.0)"
            + (
                f", or use an instance that reads C: {', '.join(others)}"
                if others
                else "; no shipped instance with this spec reads C"
            ),
            self.record.id,
        )


def _siblings(catalog, record, want_c: bool) -> list[str]:
    """Ids of shipped instances with `record`'s spec but with (want_c) or without a C operand."""

    def base(spec):
        return replace(spec, c_dtype=None, c_major=None)

    return sorted(
        iid for iid, spec in catalog.specs.items() if spec.has_c == want_c and base(spec) == base(record.spec)
    )
