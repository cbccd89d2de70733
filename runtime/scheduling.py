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


def default_raster(clusters_m: int, clusters_n: int) -> tuple[int, int]:
    """(raster_along_m, group_size) for a problem of clusters_m x clusters_n cluster tiles."""
    along_m = 1 if clusters_n > clusters_m else 0
    across = clusters_n if along_m else clusters_m
    return along_m, max(1, min(DEFAULT_GROUP_SIZE, across))
