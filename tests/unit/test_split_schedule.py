"""Split-K's and stream-K's work split, host and kernel side (the kernel's helpers are traced into it as
plain integer arithmetic, so they run here on ints). Split-K: `split_unit` and the runtime's
`split_k_ranges` give the same k-tile ranges, which cover a tile's K loop exactly, in order, none empty,
sizes within one of each other. Stream-K: `stream_split`, `stream_range`, `stream_unit_count` and
`stream_unit` against the runtime's mirrors, every k-tile of every tile once, and every piece of a shared
tile in its own workspace slot where the reducer reads it."""

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


# Stream-K: tile counts around one and several waves of `workers`, k-tile counts from 1 (nothing to share)
# up, worker counts of 1- and 2-CTA clusters on 132 and 114 SMs and a few odd ones.
_STREAM_CASES = [
    (tiles, k_tiles, workers)
    for workers in (1, 2, 3, 30, 57, 66, 114, 132)
    for tiles in sorted(
        {
            1,
            2,
            workers // 2,
            workers - 1,
            workers,
            workers + 1,
            workers + workers // 3,
            2 * workers - 1,
            3 * workers + 5,
            4 * workers,
        }
        - {0}
    )
    for k_tiles in (1, 2, 3, 5, 14, 131)
]


def _stream_walk(tiles: int, k_tiles: int, workers: int):
    """Every worker's units from the host mirror, each checked against the kernel's own arithmetic."""
    from codegen.kernels.tile_scheduler import stream_range, stream_split, stream_unit, stream_unit_count

    data_parallel, stream, sharers = scheduling.stream_split(tiles, k_tiles, workers)
    assert stream_split(tiles, k_tiles, workers) == (data_parallel, stream, sharers)
    for worker in range(workers):
        lo, hi = scheduling.stream_range(worker, sharers, stream, k_tiles)
        assert stream_range(worker, sharers, stream, k_tiles) == (lo, hi)
        units = scheduling.stream_units(tiles, k_tiles, workers, worker)
        assert stream_unit_count(data_parallel, worker, workers, lo, hi, k_tiles) == len(units)
        for u, unit in enumerate(units):
            kernel = stream_unit(u, worker, workers, data_parallel, stream, sharers, lo, hi, k_tiles)
            assert kernel[:4] == unit[:4]
            if unit[3] > 1:  # the slots matter only for a tile cut into pieces
                assert kernel[4:] == unit[4:]
            yield worker, unit


@pytest.mark.parametrize("tiles, k_tiles, workers", _STREAM_CASES)
def test_stream_k_covers_every_k_tile_once_and_gives_each_piece_its_own_slot(tiles, k_tiles, workers):
    pieces: dict[int, list] = {}
    for _, (tile, begin, end, count, mine, slot0, slot1) in _stream_walk(tiles, k_tiles, workers):
        assert 0 <= begin < end <= k_tiles
        pieces.setdefault(tile, []).append((begin, end, count, mine, slot0, slot1))
    assert sorted(pieces) == list(range(tiles))
    used = set()
    for tile, parts in pieces.items():
        parts.sort()
        assert parts[0][0] == 0 and parts[-1][1] == k_tiles, (tile, parts)
        assert all(a[1] == b[0] for a, b in zip(parts, parts[1:])), (tile, parts)
        assert all(p[2] == len(parts) for p in parts), (tile, parts)
        if len(parts) == 1:
            continue
        assert len(parts) <= scheduling.STREAM_UNITS_PER_TILE + 1  # a few pieces only
        for j, (_, _, _, mine, slot0, slot1) in enumerate(parts):
            # The reducer reads piece j from where its worker wrote it, every slot of the workspace once.
            assert mine == (slot0 if j == 0 else slot1 + 2 * (j - 1)), (tile, parts)
            assert 0 <= mine < 2 * workers and mine not in used
            used.add(mine)


def test_stream_k_shares_out_the_partial_wave_only():
    # 232 tiles on 132 workers: one wave whole, the last 100 tiles shared out among all workers.
    assert scheduling.stream_split(232, 14, 132) == (132, 100, 132)
    # 140 tiles: 8 shared tiles, at most 4 workers each.
    assert scheduling.stream_split(140, 14, 132) == (132, 8, 32)
    # Fewer tiles than workers: all are shared; whole waves share nothing.
    assert scheduling.stream_split(120, 14, 132) == (0, 120, 132)
    assert scheduling.stream_split(264, 14, 132)[:2] == (264, 0)
    # No more sharers than k-tiles: K of 2 k-tiles over 10 tiles.
    assert scheduling.stream_split(10, 2, 132) == (0, 10, 20)
    # The grid holds at most STREAM_UNITS_PER_TILE clusters per tile.
    assert scheduling.stream_work_units(10, 14) == 10 * scheduling.STREAM_UNITS_PER_TILE
    assert scheduling.stream_work_units(10, 2) == 20


def test_stream_k_workers_run_the_same_k_tiles_at_the_same_time():
    # Every worker's range is at most a tile long and it runs the piece that starts at k-tile 0 first:
    # after d k-steps into its stream pieces, every worker is at k-tile d of its first piece or at the
    # same k-tile (d + tile - range length) of its second, as the data-parallel walk keeps tiles aligned.
    tiles, k_tiles, workers = 120, 120, 132
    _, _, sharers = scheduling.stream_split(tiles, k_tiles, workers)
    length = tiles * k_tiles // sharers
    for worker in range(sharers):
        units = scheduling.stream_units(tiles, k_tiles, workers, worker)
        assert len(units) <= 2
        first_begin = units[0][1]
        assert first_begin == 0 or len(units) == 1
        if len(units) == 2:
            assert units[1][2] == k_tiles and units[1][1] - units[0][2] in (
                k_tiles - length - 1,
                k_tiles - length,
            )
