"""Host side of the persistent schedule: the grid a launch uses and the raster order it asks for.

The kernel walks output tiles itself (codegen/kernels/tile_scheduler.py); the host only chooses
- the grid: `(cluster_m * P, cluster_n, 1)` with `P = min(cluster tiles, max_active_clusters)` — the
  manifest's grid rule `persistent_clusters`, the same formula the DSL host code uses (the CPU oracle tests
  hold the two together);
- the walk: `raster_along_m` (0/1) and `group_size` (>= 1), passed to the kernel as int32 arguments.

Default walk (overridable per launch): raster along M when the problem has more cluster columns than rows,
else along N (CUTLASS's heuristic for its sm90 persistent scheduler), in bands of up to
`DEFAULT_GROUP_SIZE` cluster tiles across, so one wave of ~132 CTAs reuses a few operand tiles from L2.
"""

from __future__ import annotations

DEFAULT_GROUP_SIZE = 8

# Split-K (instances with k_split "split", docs/CONTRACT.md "Split-K"). The default split count depends on
# the problem alone (never on the device or on how many SMs are busy), so a problem's bits are the same
# everywhere: enough units to fill one wave of an H200 (132 SMs), at least MIN_K_TILES_PER_SPLIT k-tiles
# per unit, at most MAX_K_SPLITS.
SPLIT_TARGET_UNITS = 132
MIN_K_TILES_PER_SPLIT = 4
MAX_K_SPLITS = 16
# The workspace starts with a fixed block of int32 arrival counters, one per output tile, then the fp32
# partials. Fixed, not sized by the problem: each launch leaves every counter it used at 0 but its partials
# behind, so one workspace can serve problems of any shape only if no problem's partials ever overlap
# another's counters. So a split-K launch (more than one split) takes at most SPLIT_COUNTERS tiles.
SPLIT_COUNTERS = 4096


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def cluster_tiles(m: int, n: int, batch: int, tile_m: int, tile_n: int, cluster_m: int, cluster_n: int):
    """(clusters along M, clusters along N, total cluster tiles over all batches)."""
    cm = ceil_div(ceil_div(m, tile_m), cluster_m)
    cn = ceil_div(ceil_div(n, tile_n), cluster_n)
    return cm, cn, cm * cn * batch


def grouped_cluster_tiles(
    m: int, n: int, groups: int, tile_m: int, tile_n: int, cluster_m: int, cluster_n: int
) -> int:
    """A bound on the cluster tiles of a grouped (varlen M) problem of `m` rows in all and `groups` groups,
    whatever the group sizes (they stay on the device): sum_g ceil(rows_g / R) <= (m + groups * (R - 1))
    // R cluster rows of R = tile_m * cluster_m rows, times the cluster columns. The grid rule
    "grouped_clusters" sizes the grid from it, as the DSL's host code does."""
    rows = tile_m * cluster_m
    return (m + groups * (rows - 1)) // rows * ceil_div(ceil_div(n, tile_n), cluster_n)


def grouped_tiles(cu_seqlens_m, m: int, n: int, tile_m: int, tile_n: int, cluster_m: int, cluster_n: int):
    """The exact cluster tiles of each group of a grouped problem, from host copies of the row offsets,
    with the kernel's clamping (rows outside [0, m) count for nothing): the walk of
    codegen/kernels/tile_scheduler.varlen_locate, for tests and the cost model."""
    rows = tile_m * cluster_m
    columns = ceil_div(ceil_div(n, tile_n), cluster_n)
    counts = []
    for g in range(len(cu_seqlens_m) - 1):
        first = min(max(cu_seqlens_m[g], 0), m)
        end = min(max(cu_seqlens_m[g + 1], first), m)
        counts.append(ceil_div(end - first, rows) * columns)
    return counts


def persistent_grid(total_units: int, max_active_clusters: int, cluster_m: int, cluster_n: int):
    """The grid for `total_units` work units: cluster tiles, times the split count under split-K."""
    clusters = min(total_units, max_active_clusters)
    return (cluster_m * clusters, cluster_n, 1)


def k_tiles(k: int, tile_k: int) -> int:
    """Iterations of the K loop of one output tile."""
    return ceil_div(k, tile_k)


def effective_splits(k_splits: int, k_tile_count: int) -> int:
    """The split count the kernel runs: `k_splits` clamped to 1 .. k-tiles (as the kernel and the DSL's
    host code clamp it), so every split holds at least one k-tile."""
    return max(1, min(k_splits, k_tile_count))


def default_k_splits(tiles: int, k_tile_count: int) -> int:
    """The split count a launch uses unless told otherwise, from the problem alone (see the constants).
    `tiles` counts CTA tiles (cluster tiles x CTAs per cluster): each CTA runs and reduces its own."""
    if tiles >= SPLIT_TARGET_UNITS:
        return 1
    return max(1, min(SPLIT_TARGET_UNITS // tiles, k_tile_count // MIN_K_TILES_PER_SPLIT, MAX_K_SPLITS))


def split_k_ranges(k_tile_count: int, splits: int) -> list[tuple[int, int]]:
    """The k-tile range [begin, end) of each split of a tile (codegen/kernels/tile_scheduler.split_unit)."""
    return [(s * k_tile_count // splits, (s + 1) * k_tile_count // splits) for s in range(splits)]


def split_workspace_bytes(tiles: int, splits: int, tile_m: int, tile_n: int) -> int:
    """Bytes of workspace a split-K launch needs: the arrival counters (SPLIT_COUNTERS int32), then one
    fp32 partial tile per CTA tile (`tiles`, as in `default_k_splits`) and split. Nothing for a single
    split."""
    if splits <= 1:
        return 0
    return 4 * (SPLIT_COUNTERS + tiles * splits * tile_m * tile_n)


# Stream-K grids hold at most this many clusters per cluster tile (`persistent_grid` over tiles x
# min(k-tiles, this) units), so that a problem of few tiles cuts each into a few pieces only (the tile's
# last piece reads all the others' partials back); fewer tiles than that are split-K's problems.
STREAM_UNITS_PER_TILE = 4


def stream_work_units(cluster_tiles: int, k_tile_count: int) -> int:
    """The work units a stream-K grid is sized by (`persistent_grid`), as the DSL's host code sizes it."""
    return cluster_tiles * min(k_tile_count, STREAM_UNITS_PER_TILE)


def stream_split(cluster_tiles: int, k_tile_count: int, workers: int) -> tuple[int, int, int]:
    """Stream-K (instances with k_split "stream"): (data-parallel tiles, stream tiles, stream workers) of a
    launch of `cluster_tiles` cluster tiles on `workers` clusters (codegen/kernels/tile_scheduler.
    stream_split): the whole waves run tile by tile, the partial last wave's tiles are shared out by
    k-tiles among all workers, but at most STREAM_UNITS_PER_TILE per tile (nor more than their k-tiles)."""
    stream = cluster_tiles % workers
    sharers = min(workers, stream * min(k_tile_count, STREAM_UNITS_PER_TILE))
    return cluster_tiles - stream, stream, max(sharers, 1)


def stream_range(worker: int, sharers: int, stream_tiles: int, k_tile_count: int) -> tuple[int, int]:
    """Worker `worker`'s k-tiles [lo, hi) of the stream tiles, numbered tile-major (empty past sharers)."""
    iters = stream_tiles * k_tile_count
    return min(worker, sharers) * iters // sharers, min(worker + 1, sharers) * iters // sharers


def stream_units(cluster_tiles: int, k_tile_count: int, workers: int, worker: int) -> list[tuple]:
    """Worker `worker`'s work units in the order the kernel runs them (tile_scheduler.stream_unit):
    (linear cluster tile, first k-tile, end k-tile, pieces, my slot, piece 0's slot, piece 1's slot): its
    whole tiles, then its pieces of stream tiles, the last tile it touches first (so that every worker
    runs the same k-tiles at the same time). The slots matter only when pieces > 1
    (`stream_workspace_bytes`). For tests and the cost model."""
    data_parallel, stream, sharers = stream_split(cluster_tiles, k_tile_count, workers)
    lo, hi = stream_range(worker, sharers, stream, k_tile_count)
    units = [(tile, 0, k_tile_count, 1, None, None, None) for tile in range(worker, data_parallel, workers)]
    iters = stream * k_tile_count
    pieces = []
    for t in range(lo // k_tile_count, -(-hi // k_tile_count)) if lo < hi else ():
        base = t * k_tile_count
        first = ((base + 1) * sharers + iters - 1) // iters - 1
        last = ((base + k_tile_count) * sharers + iters - 1) // iters - 1
        pieces.append(
            (
                data_parallel + t,
                max(lo - base, 0),
                min(hi - base, k_tile_count),
                last - first + 1,
                2 * worker + (1 if lo < base else 0),
                2 * first + (1 if first * iters // sharers < base else 0),
                2 * first + 2,
            )
        )
    return units + pieces[::-1]


# Stream-K's workspace: two fp32 partial tiles per SM of the largest sm_90 GPU (a worker holds at most
# two pieces of shared tiles: the start and the end of its range), after the split-K arrival counters.
# Sized for 132 SMs (H100 SXM, H200) so that `workspace_bytes` needs no GPU and serves every Hopper board.
STREAM_MAX_SMS = 132


def stream_workspace_bytes(tile_m: int, tile_n: int) -> int:
    """Bytes of workspace a stream-K launch needs: the arrival counters (SPLIT_COUNTERS int32, one per
    CTA tile of the stream tiles), then two fp32 partial tiles per CTA of a full grid."""
    return 4 * (SPLIT_COUNTERS + 2 * STREAM_MAX_SMS * tile_m * tile_n)


def default_raster(clusters_m: int, clusters_n: int) -> tuple[int, int]:
    """(raster_along_m, group_size) for a problem of clusters_m x clusters_n cluster tiles."""
    along_m = 1 if clusters_n > clusters_m else 0
    across = clusters_n if along_m else clusters_m
    return along_m, max(1, min(DEFAULT_GROUP_SIZE, across))
