"""Device-side persistent tile scheduling: which output tile a cluster works on next.

Why our own scheduler instead of `cutlass.utils.StaticPersistentTileScheduler`: that one bakes the problem
shape and swizzle into host-computed parameter structs (deprecated in DSL 4.8), which would put more opaque
bytes into the launch contract. Ours derives everything inside the kernel from values the kernel already
receives — the output extents (M, N, L) that travel with D's TMA tensor, two int32 scalars
(`raster_along_m`, `group_size`) and `gridDim` — so the runtime's only job is to choose the grid size.

The mapping (documented in docs/CONTRACT.md, mirrored by `hgemm_sm90.scheduling` on the host):
clusters of `cluster_m x cluster_n` CTAs own a `cluster_m x cluster_n` block of output tiles. Cluster tiles
are numbered 0 .. clusters_m * clusters_n * L - 1, batch-major. Inside one batch, tiles are walked in bands:
with `raster_along_m`, a band is `group_size` cluster columns (N) wide; inside a band the column index
changes fastest and the walk proceeds down M, then moves to the next band along N. `raster_along_m = 0` is
the transpose. A band keeps `group_size` B (or A) tiles hot in L2 while the other operand streams.
Persistent clusters start at their cluster index and stride by the number of clusters in the grid.
"""

import cutlass
import cutlass.cute as cute
from cutlass import Int32

from runtime.scheduling import STREAM_UNITS_PER_TILE


def cluster_tile_coord(
    linear: Int32,
    clusters_m: Int32,
    clusters_n: Int32,
    raster_along_m: Int32,
    group_size: Int32,
):
    """Map a linear cluster-tile index to (cluster_tile_m, cluster_tile_n, batch).

    Traced inline into the kernel. `raster_along_m` is 0 or 1 and `group_size` >= 1 (the host validates
    both); a group wider than the grid degenerates to a plain column- or row-major walk. The raster choice
    is blended arithmetically (r * x + (1 - r) * y) rather than branched: it is uniform across the grid, and
    a handful of integer multiply-adds per tile is noise next to a tile's mainloop.
    """
    r = raster_along_m
    per_batch = clusters_m * clusters_n
    batch = linear // per_batch
    rest = linear - batch * per_batch
    # The walk proceeds along `along` (M when rastering along M) inside bands that are `group_size`
    # wide across the other axis; inside a band the across-index changes fastest.
    along_extent = r * clusters_m + (1 - r) * clusters_n
    across_extent = r * clusters_n + (1 - r) * clusters_m
    band_tiles = group_size * along_extent
    band = rest // band_tiles
    within = rest - band * band_tiles
    band_start = band * group_size
    band_width = cutlass.min(group_size, across_extent - band_start)
    along = within // band_width
    across = band_start + (within - along * band_width)
    tile_m = r * along + (1 - r) * across
    tile_n = r * across + (1 - r) * along
    return tile_m, tile_n, batch


def split_unit(linear: Int32, splits: Int32, k_tiles: Int32):
    """Split-K: map a linear work-unit index to (linear tile, split, first k-tile, end k-tile).

    Units are tile-major (the S units of a tile are consecutive, so they run in the same wave and the
    tile's last arriver waits for nobody). Split s of a tile takes k-tiles [s * K // S, (s + 1) * K // S):
    contiguous, covering all K k-tiles, sizes differing by at most one, each non-empty for S <= K.
    Mirrored by `hgemm_sm90.scheduling.split_k_ranges`.
    """
    tile = linear // splits
    split = linear - tile * splits
    return tile, split, split * k_tiles // splits, (split + 1) * k_tiles // splits


def stream_split(cluster_tiles: Int32, k_tiles: Int32, workers: Int32):
    """Stream-K: (data-parallel tiles, stream tiles, stream workers). The whole waves of the walk run as
    usual, a tile per worker (cluster of the grid) at a time; the tiles of the partial last wave (the
    stream tiles) are shared out by k-tiles among `stream workers` of the workers: all of them, but at
    most STREAM_UNITS_PER_TILE per stream tile (and never more than the stream tiles' k-tiles), so that
    no tile is cut into many pieces. Mirrored by `hgemm_sm90.scheduling.stream_split`."""
    stream = cluster_tiles - cluster_tiles // workers * workers
    sharers = cutlass.min(workers, stream * cutlass.min(k_tiles, STREAM_UNITS_PER_TILE))
    return cluster_tiles - stream, stream, cutlass.max(sharers, 1)


def stream_range(worker: Int32, sharers: Int32, stream_tiles: Int32, k_tiles: Int32):
    """Stream-K: worker `worker`'s share [lo, hi) of the stream tiles' k-tiles, numbered tile-major over
    the stream tiles (k-tile x of stream tile t is t * k_tiles + x): contiguous, sizes differing by at most
    one, none shorter than one k-tile nor longer than a tile; empty for the workers past `sharers`.
    Mirrored by `hgemm_sm90.scheduling.stream_range`."""
    iters = stream_tiles * k_tiles
    return (
        cutlass.min(worker, sharers) * iters // sharers,
        cutlass.min(worker + 1, sharers) * iters // sharers,
    )


def stream_pieces(lo: Int32, hi: Int32, k_tiles: Int32):
    """Stream-K: how many stream tiles a worker's range [lo, hi) touches (0, 1 or 2)."""
    return cutlass.min(hi - lo, 1) * ((cutlass.max(hi, 1) - 1) // k_tiles - lo // k_tiles + 1)


def stream_unit_count(
    data_parallel: Int32, worker: Int32, workers: Int32, lo: Int32, hi: Int32, k_tiles: Int32
):
    """Stream-K: how many work units a worker runs: its data-parallel tiles (worker, worker + workers,
    ... below data_parallel), then one piece per stream tile that its range [lo, hi) touches."""
    return (data_parallel - worker + workers - 1) // workers + stream_pieces(lo, hi, k_tiles)


def stream_unit(
    unit: Int32,
    worker: Int32,
    workers: Int32,
    data_parallel: Int32,
    stream_tiles: Int32,
    sharers: Int32,
    lo: Int32,
    hi: Int32,
    k_tiles: Int32,
):
    """Stream-K: a worker's work unit `unit` (0, 1, ...) as (linear cluster tile, first k-tile, end
    k-tile, pieces, my slot, first piece's slot, second piece's slot). The worker's first units are whole
    data-parallel tiles (worker + unit * workers, below data_parallel); then come its pieces of stream
    tiles, the last tile its range touches first: that piece starts at k-tile 0, the other (the end of
    the tile before) ends at the last k-tile, so every worker runs k-tile x of its tiles at about the same
    time, as the data-parallel walk does, and tiles that share operand panels find them in L2.

    A stream tile's pieces belong to consecutive workers (`first` .. `last`, the owners of its first and
    last k-tile); with more than one piece each is reduced through a workspace slot as split-K's units
    are (`HopperGemm._reduce_parts`): slot 2w for the piece worker w's range starts with, 2w + 1 for the
    one it ends with (at most two: a range is at most a tile long), so piece 0 of a tile is in slot
    2 * first (+1 when first's range began in an earlier tile) and piece j > 0 in slot 2 * (first + j).
    With one piece, the slots are unused. Blended arithmetically between the two kinds of unit.
    Mirrored by `hgemm_sm90.scheduling.stream_units`."""
    whole = (data_parallel - worker + workers - 1) // workers  # this worker's data-parallel tiles
    shared = cutlass.min(cutlass.max(unit - whole + 1, 0), 1)  # 1 for a piece of a stream tile
    iters = cutlass.max(stream_tiles * k_tiles, 1)
    later = stream_pieces(lo, hi, k_tiles) - 1 - cutlass.max(unit - whole, 0)  # pieces in reverse order
    t = lo // k_tiles + cutlass.max(later, 0)
    base = t * k_tiles
    first = ((base + 1) * sharers + iters - 1) // iters - 1
    last = ((base + k_tiles) * sharers + iters - 1) // iters - 1
    began_before = cutlass.min(cutlass.max(base - first * iters // sharers, 0), 1)
    tile = shared * (data_parallel + t) + (1 - shared) * (worker + unit * workers)
    k_begin = shared * cutlass.max(lo - base, 0)
    k_end = shared * cutlass.min(hi - base, k_tiles) + (1 - shared) * k_tiles
    pieces = shared * (last - first) + 1
    mine = 2 * worker + cutlass.min(cutlass.max(base - lo, 0), 1)
    return tile, k_begin, k_end, pieces, mine, 2 * first + began_before, 2 * first + 2


def edge_origin(tile: Int32, size: int, extent: Int32):
    """The first row (or column) that output tile `tile` of `size` rows covers along an extent of `extent`:
    ``tile * size``, except that a tile reaching past the extent is moved back to end at it (``extent -
    size``, or 0 when the extent is shorter than a tile), so that its operand boxes lie inside the tensor.

    Why: TMA fills the out-of-bounds part of a box with zeros far slower than it loads in-bounds data
    (H200, 2026-12-02: a swap-AB 64 x 128 tile at M = 257, whose last box along M holds one row, ran
    41.8 µs against 21.5 at M = 256 and 21.6 at M = 384; docs/PERF.md session 19), and the CTA holding
    that box sets the time of a one-wave problem. A moved tile overlaps its neighbour: both compute the
    overlapping rows from the same operands in the same k order, so they store the same bits there
    (tests/gpu/test_edge_tiles.py). The host needs no mirror: the grid and the walk do not change."""
    return cutlass.max(cutlass.min(tile * size, extent - size), 0)


def group_rows(seqlens, group: Int32, total_rows: Int32):
    """Grouped GEMM (varlen M): the first row and the end row of `group`, clamped to [0, total_rows] and
    to a non-negative size, so that a malformed `cu_seqlens_m` can never make the kernel touch a row
    outside D (such a group computes nothing or part of its rows instead)."""
    first = cutlass.min(cutlass.max(seqlens[group], 0), total_rows)
    end = cutlass.min(cutlass.max(seqlens[group + 1], first), total_rows)
    return first, end


@cute.jit
def varlen_locate(
    linear: Int32,
    group: Int32,
    group_first_tile: Int32,
    seqlens,
    num_groups: Int32,
    total_rows: Int32,
    rows_per_cluster_tile: int,
    clusters_n: Int32,
):
    """Grouped GEMM (varlen M): find the group that owns cluster tile `linear`.

    The cluster tiles of all groups are numbered group by group: group g owns
    ceil(rows_g / rows_per_cluster_tile) * clusters_n consecutive tiles (0 for an empty group). Given a
    group at or before the answer and the number of its first tile, returns (the owning group, the
    number of its first tile), or (num_groups, total tiles) when `linear` is past the last tile.
    A persistent CTA's tiles only move forward, so each caller carries the answer to its next call and
    the walk over the groups is done once per CTA, 32 groups per step: each lane counts one group's tiles,
    a warp-wide prefix sum gives each group's end, and a ballot finds the first group ending after
    `linear`. Called by every lane of a warp (the shuffles and the ballot need all 32); every lane gets
    the same answer. Mirrored by `hgemm_sm90.scheduling.varlen_tile_count` on the host.
    """
    lane = cute.arch.lane_idx()
    searching = cutlass.Boolean(True)
    while searching:
        g = group + lane
        lo = cutlass.min(g, num_groups)
        hi = cutlass.min(g + 1, num_groups)
        first = cutlass.min(cutlass.max(seqlens[lo], 0), total_rows)
        end = cutlass.min(cutlass.max(seqlens[hi], first), total_rows)
        count = (end - first + rows_per_cluster_tile - 1) // rows_per_cluster_tile * clusters_n
        # Inclusive prefix sum of the lanes' counts (lanes below `offset` keep their value).
        inclusive = count
        for step in cutlass.range_constexpr(5):
            offset = 1 << step
            below = cute.arch.shuffle_sync_up(inclusive, offset)
            if lane >= offset:
                inclusive = inclusive + below
        ends = group_first_tile + inclusive
        passed = cute.arch.popc(cute.arch.vote_ballot_sync((g < num_groups) & (ends <= linear)))
        in_step = cutlass.min(num_groups - group, 32)
        if passed < in_step:
            group_first_tile = cute.arch.shuffle_sync(ends - count, passed)
            group = group + passed
            searching = cutlass.Boolean(False)
        else:
            group_first_tile = cute.arch.shuffle_sync(ends, 31)
            group = group + 32
            if group >= num_groups:
                group = num_groups
                searching = cutlass.Boolean(False)
    return group, group_first_tile
