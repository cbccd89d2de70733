"""Split-K's work split, host and kernel side: the kernel's `split_unit` (traced into the kernel, plain
integer arithmetic) and the runtime's `split_k_ranges` give the same k-tile ranges, which cover a tile's
K loop exactly, in order, none empty, sizes within one of each other."""

from __future__ import annotations

import pytest

from runtime import scheduling

pytestmark = pytest.mark.compiler  # the kernel package imports the DSL


def test_units_cover_every_k_tile_once_and_match_the_host():
    from codegen.kernels.tile_scheduler import split_unit  # the DSL is configured by tests/conftest.py

    for k_tiles in range(1, 41):
        for splits in range(1, k_tiles + 1):
            ranges = scheduling.split_k_ranges(k_tiles, splits)
            assert ranges[0][0] == 0 and ranges[-1][1] == k_tiles
            assert all(prev[1] == nxt[0] for prev, nxt in zip(ranges, ranges[1:]))
            sizes = [end - begin for begin, end in ranges]
            assert min(sizes) >= 1 and max(sizes) - min(sizes) <= 1
            for tile in (0, 1, 7):
                for split, (begin, end) in enumerate(ranges):
                    unit = tile * splits + split  # tile-major: a tile's units are consecutive
                    assert split_unit(unit, splits, k_tiles) == (tile, split, begin, end)


# ---- stream-K ------------------------------------------------------------------------------------------
_TILE_COUNTS = (1, 2, 5, 31, 95, 131, 132, 133, 152, 209, 263, 264, 265, 400, 1000)
_K_TILE_COUNTS = (1, 2, 3, 4, 7, 18, 54, 200)


def _walks(tiles: int, k_tiles: int, workers: int) -> dict[int, list[tuple[int, int, int]]]:
    """tile -> [(first k-tile, end k-tile, worker)] over every worker's walk (the host mirror)."""
    parts: dict[int, list] = {}
    for w in range(workers):
        for t, b, e in scheduling.stream_walk(w, tiles, k_tiles, workers):
            parts.setdefault(t, []).append((b, e, w))
    return parts


@pytest.mark.parametrize("workers", [132, 114, 7, 1])
def test_stream_k_walk_covers_each_tile_once_in_consecutive_parts(workers):
    for tiles in _TILE_COUNTS:
        for k_tiles in _K_TILE_COUNTS:
            w = min(workers, scheduling.stream_units(tiles, k_tiles))
            dp_tiles, sk_workers, sk_k_tiles = scheduling.stream_partition(tiles, k_tiles, w)
            assert dp_tiles % w == 0 and 0 <= tiles - dp_tiles < 2 * w
            if tiles % w == 0:
                assert dp_tiles == tiles  # whole waves: nothing is dealt out
            parts = _walks(tiles, k_tiles, w)
            assert sorted(parts) == list(range(tiles))
            for t, ps in parts.items():
                ps.sort()
                assert ps[0][0] == 0 and ps[-1][1] == k_tiles, (tiles, k_tiles, w, t, ps)
                assert all(a[1] == b[0] and a[0] < a[1] for a, b in zip(ps, ps[1:])), ps
                if t < dp_tiles:
                    assert len(ps) == 1
                    continue
                first, count, first_slot = scheduling.stream_parts(
                    t - dp_tiles, k_tiles, sk_workers, sk_k_tiles
                )
                assert [p[2] for p in ps] == list(range(first, first + count))
                # The first worker's part is its slot 0 exactly when the tile is its first stream-K unit.
                first_unit = scheduling.stream_walk(first, tiles, k_tiles, w)[dp_tiles // w][0]
                assert first_slot == (0 if first_unit == t else 1)
            # Every stream-K range holds at least STREAM_MIN_K_TILES k-tiles (or all there are).
            for worker in range(sk_workers):
                size = sum(
                    e - b for t, b, e in scheduling.stream_walk(worker, tiles, k_tiles, w) if t >= dp_tiles
                )
                assert size >= min(scheduling.STREAM_MIN_K_TILES, sk_k_tiles), (tiles, k_tiles, w, worker)


def test_the_kernels_stream_k_arithmetic_matches_the_host():
    """tile_scheduler's plain-arithmetic helpers (traced into the kernel) against the host mirror; the
    unit walk itself (`stream_unit`, a DSL function with a branch) is checked on the GPU."""
    from codegen.kernels import tile_scheduler as ts

    assert (ts.STREAM_MAX_WORKERS, ts.STREAM_MIN_K_TILES) == (
        scheduling.STREAM_MAX_WORKERS,
        scheduling.STREAM_MIN_K_TILES,
    )
    for tiles in _TILE_COUNTS:
        for k_tiles in _K_TILE_COUNTS:
            w = min(132, scheduling.stream_units(tiles, k_tiles))
            host = scheduling.stream_partition(tiles, k_tiles, w)
            assert tuple(ts.stream_partition(tiles, k_tiles, w)) == host
            dp_tiles, sk_workers, sk_k_tiles = host
            for worker in range(w):
                walk = scheduling.stream_walk(worker, tiles, k_tiles, w)
                assert ts.stream_units(worker, w, *host, k_tiles) == len(walk)
                assert ts.stream_dp_units(worker, w, dp_tiles) == dp_tiles // w
            for t in range(tiles - dp_tiles):
                assert tuple(ts.stream_parts(t, k_tiles, sk_workers, sk_k_tiles)) == scheduling.stream_parts(
                    t, k_tiles, sk_workers, sk_k_tiles
                )


def test_stream_k_int32_arithmetic_stays_in_range_up_to_the_launch_limit():
    """The kernel multiplies k-tile positions by the worker count in int32: at the largest K a launch
    accepts (runtime/plan.py refuses more), with the most tiles dealt out, nothing passes 2**31 - 1."""
    k_tiles = scheduling.STREAM_MAX_K_TILES
    w = scheduling.STREAM_MAX_WORKERS
    tiles = 2 * w - 1  # the most tiles the stream-K part can hold
    dp_tiles, sk_workers, sk_k_tiles = scheduling.stream_partition(tiles, k_tiles, w)
    assert (sk_k_tiles + k_tiles) * sk_workers < 2**31
    assert w * sk_k_tiles < 2**31
