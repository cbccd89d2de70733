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
from cutlass import Int32


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
