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


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def cluster_tiles(m: int, n: int, batch: int, tile_m: int, tile_n: int, cluster_m: int, cluster_n: int):
    """(clusters along M, clusters along N, total cluster tiles over all batches)."""
    cm = ceil_div(ceil_div(m, tile_m), cluster_m)
    cn = ceil_div(ceil_div(n, tile_n), cluster_n)
    return cm, cn, cm * cn * batch


def persistent_grid(total_cluster_tiles: int, max_active_clusters: int, cluster_m: int, cluster_n: int):
    clusters = min(total_cluster_tiles, max_active_clusters)
    return (cluster_m * clusters, cluster_n, 1)


def default_raster(clusters_m: int, clusters_n: int) -> tuple[int, int]:
    """(raster_along_m, group_size) for a problem of clusters_m x clusters_n cluster tiles."""
    along_m = 1 if clusters_n > clusters_m else 0
    across = clusters_n if along_m else clusters_m
    return along_m, max(1, min(DEFAULT_GROUP_SIZE, across))
