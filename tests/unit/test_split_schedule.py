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
