"""The fallback cost model: an estimate of each instance's time on a GPU with a given SM count.

Used when the tuning table (runtime/tuning.py) has no entry for the GPU, nor for one with its SM count,
or for the problem class (an H100 PCIe with 114 SMs; a layout the tuner does not sweep). It ranks
instances of one class, so only differences between instances matter; absolute numbers are rough. The
persistent kernel (docs/KERNEL.md) keeps one CTA per SM and walks output tiles in waves. Per instance:

- tiles: ceil(M / tile_m) x ceil(N / tile_n) x batch, padded up to whole clusters (the idle CTAs of a
  partial cluster still occupy SMs);
- waves: tiles over the resident CTAs (the SM count rounded down to whole clusters, and for 4- and
  8-CTA clusters fewer: a cluster must fit in one GPC, `CLUSTER_RESIDENT_FRACTION`): wave quantization,
  the biggest single effect (a problem of 133 tiles on 132 SMs takes two waves);
- per tile, the k-loop: ceil(K / tile_k) steps, each limited by the tensor cores (the tile family's
  sustained fraction of peak, `TILE_EFFICIENCY`, interpolated between its tiles by `tile_efficiency`) or
  by loading the A and B tiles into shared memory (multicast divides a tile's loads by the cluster
  extent that shares them), plus a fixed pipeline fill and an epilogue that writes the tile (ping-pong
  overlaps it with the other warpgroup's mainloop);
- split-K instances: the tiles times the launch's default split count (runtime/scheduling.py) are the
  units, each running its share of the k-loop and writing an fp32 partial tile that the tile's last unit
  reads back with the others' (all S of them, `SPLIT_READ_BYTES_PER_S`), plus a fixed cost per unit for
  that hand-over (`SPLIT_UNIT_S`);
- a floor: every byte of A, B and D crosses HBM once (an operand re-read in part when the other's short
  side spans a few tiles, `REREAD_SHARE`), at the rate the active SMs can pull together
  (`hbm_reach`: a problem on 32 tiles streams its weights at about half of what 132 SMs reach);
- a second floor: the bytes all tiles load from L2 together, at `L2_BYTES_PER_S` (operands re-read by
  many tiles);
- the waves' time and the two floors add up as a p-norm (`ROOFLINE_P`), not as their max: a problem near
  the roofline's knee is slower than either bound alone.
The edges are in the tile count: a 192-row tile at M = 200 computes 384 rows.

Constants are H200 facts (docs/PERF.md): ~700 TFLOP/s sustained 16-bit dense, ~1250 fp8, 4.8 TB/s HBM,
and a single SM streaming at most ~90 GB/s when few SMs load; they set the crossover points, not the result
of a single problem.
"""

from __future__ import annotations

import math

from . import scheduling
from .spec import GemmSpec, KSplit, Schedule

TFLOPS_16BIT = 700e12  # sustained at the 700 W power cap (H200, docs/PERF.md)
TFLOPS_FP8 = 1250e12
PROMOTED_FACTOR = 0.85  # fp8 promoted accumulation: the promotion FMAs steal issue slots from the WGMMAs
HBM_BYTES_PER_S = 4.8e12
SM_STREAM_BYTES_PER_S = 90e9  # one SM's share when few SMs stream (TMA from L2/HBM)
TILE_FILL_S = 1.0e-6  # pipeline fill + tile hand-over per tile
LAUNCH_S = 3.0e-6  # same for every instance; kept so estimates read as times
# A short side split into a few tiles re-streams the other operand once per tile, mostly from L2: each
# extra tile (up to REREAD_TILES) costs this share of another pass over it (fitted on the H200 table's
# swap-AB decode rows, docs/DISPATCH.md).
REREAD_SHARE = 0.3
REREAD_TILES = 4
# A second floor: every tile loads its A and B k-slices from L2 (multicast counted once per cluster), and
# all of those bytes together cross L2 no faster than this. It binds where operands are re-read by many
# tiles (M >= 256, long K, small tiles), not at decode, where each weight byte is loaded about once. Fitted,
# not measured: the H200 table's leave-one-row-out geomean over the seven tuned classes peaks at 6-7 TB/s
# (0.967 -> 0.977; leave-one-column-out 0.960 -> 0.961; `python -m build_tools.dispatch_loo`, docs/PERF.md
# session 16), below the ~9 TB/s that bf16 64 x 64 tiles moved at 219 x 1792 x 11392, so read it as the
# scale at which re-reads start to cost, not as a bandwidth. There they took 1.8x their time at 192 x 2048 x
# 8192 where the k-loop alone predicts 1.4x, and select() took them over split-K 128 x 128, 1.37x faster.
L2_BYTES_PER_S = 7e12
# A split-K unit's fixed cost beyond a plain tile's: the tile's last unit waits on its arrival counter for
# the others and then reduces their partials, a tail that a shorter k-range does not shorten. Fitted, not
# measured: leave-one-column-out over the seven tuned classes peaks at 2-3 µs (0.963 -> 0.972; rows 0.984
# -> 0.987; docs/DISPATCH.md, session 20); 3.5 µs since the read-back term below (session 28).
# Without it the model carried split-K times across K as if a unit's time fell with its k-range alone:
# e4m3 fast 202 x 1152 x 4608 picked swap-AB 64 x 128 split-K, measured at 0.78x of the fastest shipped
# instance, because its grid neighbours (M = 192, K = 7168) ran 14 k-steps per unit and the problem 6
# (9.05 µs where 12.5 at the neighbour: 0.72x, the model said 0.54x).
SPLIT_UNIT_S = 3.5e-6
# The tile's last unit reads all S partials back (docs/KERNEL.md "Split-K"), one CTA on its own, so the tail
# grows with the split count: at 290 x 1152 x 7040 (held-out seed 3939) swap-AB 128 x 176 split-K runs 18
# tiles in 7 splits where its grid neighbours (M = 256, N = 2048) ran 4, and the model that charged two
# partial tiles per unit whatever S carried it there at 0.59x its neighbour's time (measured 0.78x): the
# pick ran at 0.73 of the fastest. Fitted with SPLIT_UNIT_S (from 2.5 µs), not measured: over a 30-45 GB/s
# and 3-3.5 µs plateau, five GPU draws (seeds 3535-3939, 3939 the one that showed it) 0.9877 -> 0.9894,
# leave-one-column-out 0.9809 -> 0.9821, rows 0.9884 -> 0.9900; a fresh draw measured with it (seed 4040)
# scores the same either way, 0.9937 against 0.9939 (docs/DISPATCH.md, session 28).
SPLIT_READ_BYTES_PER_S = 45e9
# The k-loop's time and the two floors are combined as a p-norm, (busy^p + hbm^p + l2^p)^(1/p), not
# their max (p = 0 here means the max): near the roofline's knee a tile's loads and its MMAs stall each
# other, so a problem where they take about as long runs slower than either alone. Found where the max
# carried a grid time across the knee: e4m3 10 x 11776 x 5760 (held-out seed 3636) took a non-swapped
# 64 x 128 1x2 tile, compute-bound in the model at its (8, 8192, 8192) neighbour, so its time there was
# scaled to the problem by the k-loop alone (0.75x; it took 0.90x) and the pick ran at 0.85 of the fastest
# swap-AB tile. Fitted, not measured: p = 1.5-2 scores best in leave-one-column-out (0.9717 -> 0.9809 over
# the seven tuned classes, every class up), leave-one-row-out (0.9864 -> 0.9884) and on session 27's three
# GPU draws (0.9861 -> 0.9924). Of two fresh draws measured with it, seed 3737 scores 0.9838 -> 0.9914 on
# its own times and seed 3838 0.9907 -> 0.9889; all five draws 0.9864 -> 0.9916 (`python -m
# build_tools.dispatch_loo --set ROOFLINE_P=...`, docs/DISPATCH.md).
ROOFLINE_P = 2.0

# Sustained fraction of the tensor-core peak inside the k-loop, by (tile_m, tile_n): wide tiles reuse each
# loaded byte more and keep the WGMMA pipeline fuller; 64-row tiles run one consumer warpgroup. Tiles
# between these (a third of the shipped instances: N = 96-224, swap-AB kernel tiles such as 128 x 144)
# take `tile_efficiency`'s interpolation.
TILE_EFFICIENCY = {
    (192, 256): 0.95,
    (128, 256): 0.95,
    (256, 128): 0.93,
    (192, 128): 0.92,
    (64, 256): 0.88,
    (128, 128): 0.85,
    (64, 128): 0.70,
    (64, 64): 0.55,
    (64, 32): 0.40,
}
DEFAULT_EFFICIENCY = 0.6  # a tile M with no TILE_EFFICIENCY entry (320 rows)
# Share of the SMs that clusters of this many CTAs can occupy at once (one CTA per SM). Measured on the
# H200 tuning table (2026-12-01): 2x2-cluster instances ran 96 output tiles in one wave (time 1.00-1.08x
# their 2x1 twin's) but 128 tiles in two (1.3-2.0x, 90 points), so fewer than 128 of the 132 SMs hold
# 4-CTA clusters at once; 120 (30 clusters) is assumed. 8-CTA clusters likewise (session 23): 64 x 96 2x4
# ran 120 tiles (15 clusters) in one wave at 352 x 1920 x 5120 but 128 (16) in two at 468 x 1408 x 2432
# (14.3 µs against 9.3 for its 2x1 twin), so 15 clusters are resident. Clusters of 1 and 2 CTAs fill
# every SM.
CLUSTER_RESIDENT_FRACTION = {4: 120 / 132, 8: 120 / 132}
# TILE_EFFICIENCY's tiles by M, sorted by N, for `tile_efficiency`: sorting them per call cost a select()
# miss (hundreds of estimates) about 1.3 ms more.
_EFFICIENCY_BY_M = {
    tm: [(tn, e) for (m, tn), e in sorted(TILE_EFFICIENCY.items()) if m == tm] for tm, _ in TILE_EFFICIENCY
}


def tile_efficiency(tm: int, tn: int) -> float:
    """The k-loop's sustained fraction of peak for a tm x tn kernel tile: TILE_EFFICIENCY's entry, else
    linear in N between the listed tiles of the same M (the nearest one's beyond them); DEFAULT_EFFICIENCY
    for an M with none listed.

    Until 2026-12-03 (session 32) every unlisted tile took DEFAULT_EFFICIENCY, 0.6, so a 128 x 192
    ping-pong tile counted as slower per k-step than 128 x 128. Where the tuning table decides (the H200)
    that barely mattered, since the model only carries an instance's measured time between two problems:
    `python -m build_tools.dispatch_loo` 0.9819 -> 0.9818 leaving columns out, 0.9880 -> 0.9883 rows, held
    out on the ten stored draws (seeds 3535-4444) 0.9899 -> 0.9901. Where the model decides alone (a GPU
    the table lacks), its picks scored on the H200's measurements (`--model-only`) went from 0.957 to 0.965
    of the fastest on the table's points and from 0.936 to 0.959 on those draws (docs/DISPATCH.md)."""
    listed = TILE_EFFICIENCY.get((tm, tn))
    if listed is not None:
        return listed
    same_m = _EFFICIENCY_BY_M.get(tm)
    if same_m is None:
        return DEFAULT_EFFICIENCY
    if tn <= same_m[0][0]:
        return same_m[0][1]
    for (n0, e0), (n1, e1) in zip(same_m, same_m[1:]):
        if tn <= n1:
            return e0 + (e1 - e0) * (tn - n0) / (n1 - n0)
    return same_m[-1][1]


def estimate_s(spec: GemmSpec, m: int, n: int, k: int, batch: int, sm_count: int) -> float:
    """Estimated seconds for ``spec`` to run the problem on a GPU with ``sm_count`` SMs."""
    if spec.swap_ab:  # its kernel runs the transposed problem (runtime/spec.py, GemmSpec.kernel_spec)
        return estimate_s(spec.kernel_spec(), n, m, k, batch, sm_count)
    tm, tn, tk = spec.tile
    cm, cn = spec.cluster
    cluster = cm * cn
    tiles_m = math.ceil(math.ceil(m / tm) / cm) * cm
    tiles_n = math.ceil(math.ceil(n / tn) / cn) * cn
    tiles = tiles_m * tiles_n * batch
    steps = math.ceil(k / tk)
    splits = 1
    if spec.k_split == KSplit.split:
        splits = scheduling.default_k_splits(tiles, steps)
    tiles *= splits  # work units
    usable = int(sm_count * CLUSTER_RESIDENT_FRACTION.get(cluster, 1.0))
    resident = max(cluster, usable // cluster * cluster)
    waves = math.ceil(tiles / resident)
    active = min(tiles, resident)

    a_bytes, b_bytes, d_bytes = spec.a_dtype.bytes, spec.b_dtype.bytes, spec.d_dtype.bytes
    steps = math.ceil(steps / splits)
    peak = (TFLOPS_FP8 if spec.a_dtype.is_float8 else TFLOPS_16BIT) / sm_count
    if spec.a_dtype.is_float8 and not spec.fp8_fast_accum:
        peak *= PROMOTED_FACTOR
    eff = tile_efficiency(tm, tn)
    compute = 2 * tm * tn * tk / (peak * eff)
    # Multicast: the cluster's CTAs along N share each A tile, those along M each B tile.
    load_bytes = (tm * a_bytes / cn + tn * b_bytes / cm) * tk
    stream = min(SM_STREAM_BYTES_PER_S, HBM_BYTES_PER_S / active * 2.5)  # L2 reuse lets a busy chip exceed 1x
    load_step = load_bytes / stream
    step = max(compute, load_step)
    epilogue = tm * tn * d_bytes / SM_STREAM_BYTES_PER_S
    if spec.c_dtype is not None:
        epilogue += tm * tn * spec.c_dtype.bytes / SM_STREAM_BYTES_PER_S
    if spec.schedule == Schedule.pingpong and waves > 1:
        epilogue *= 0.25  # the other warpgroup's mainloop hides most of it
    if splits > 1:  # every unit writes its fp32 partial; the last one waits for and reads all of them
        partial = tm * tn * 4
        epilogue += partial / SM_STREAM_BYTES_PER_S + splits * partial / SPLIT_READ_BYTES_PER_S + SPLIT_UNIT_S
    per_tile = TILE_FILL_S + steps * step + epilogue
    busy = waves * per_tile
    if spec.k_split == KSplit.stream:
        busy = _stream_busy_s(tiles, steps, resident, cluster, step, epilogue, tm * tn)
    # Each extra tile along a short side (up to REREAD_TILES) streams the other operand again, partly from
    # L2: a swap-AB 64 x 8 tile at M = 16 (two tiles) took 1.15-1.26x its M = 8 time (the table's rows).
    tiles_m_raw, tiles_n_raw = math.ceil(m / tm), math.ceil(n / tn)
    a_passes = 1 + REREAD_SHARE * (tiles_n_raw - 1) if tiles_n_raw <= REREAD_TILES else 1
    b_passes = 1 + REREAD_SHARE * (tiles_m_raw - 1) if tiles_m_raw <= REREAD_TILES else 1
    streamed = m * k * a_bytes * a_passes + n * k * b_bytes * b_passes + m * n * d_bytes
    # The CTAs that stream data: a cluster's padding tiles (past the problem's last row or column) add no
    # bytes of their own. Counting them, a 64 x 192 2x4 tile at M = 8 (one row of 64-row tiles, padded to
    # two) looked like twice the streamers, with up to 1.5x the HBM reach, and was carried almost flat in N
    # from the table's decode rows: picked on held-out decode shapes, it ran 0.956-0.972 of the fastest
    # swap-AB tile (H200, 2026-12-04; leave-one-column-out 0.9789 -> 0.9791, rows 0.9861 -> 0.9866, the
    # four current draws 0.9925 -> 0.9928: 9 picks better, 2 worse; docs/DISPATCH.md session 46).
    loaders = min(tiles_m_raw * tiles_n_raw * batch * splits, resident)
    floor = streamed * batch / hbm_reach(loaders)
    l2_floor = tiles * steps * load_bytes / L2_BYTES_PER_S  # tiles counts work units, steps their share
    if load_step > compute:
        # The k-loop waits on its loads (the decode tiles): its per-step load time and the HBM floor are
        # one stream seen twice, so the larger stands for both. Added in the p-norm, they priced an
        # unsplit 64 x 8 swap-AB tile at 1 x 1024 x 8192 at 22.7 µs (measured 10.8; its split-K twin
        # 11.1, measured 8.2), so the model overrated split-K and carried it across columns into picks
        # that ran 0.92-0.96 of the fastest. Offline (docs/DISPATCH.md session 46): leave-one-column-out
        # 0.9791 -> 0.9800, rows 0.9866 -> 0.9869, the four current draws 0.9928 -> 0.9935, the model
        # alone 0.9627 -> 0.9646.
        busy, floor = max(busy, floor), 0.0
    if not ROOFLINE_P:
        return LAUNCH_S + max(busy, floor, l2_floor)
    return LAUNCH_S + (busy**ROOFLINE_P + floor**ROOFLINE_P + l2_floor**ROOFLINE_P) ** (1 / ROOFLINE_P)


def _stream_busy_s(tiles, steps, resident, cluster, step, epilogue, tile_elems) -> float:
    """Stream-K: one cluster's time on the walk of runtime/scheduling.py: its whole tiles, then its even
    share of the partial wave's k-steps, plus for each of its (at most two) pieces the fill, its fp32
    partial written and read back (`SPLIT_UNIT_S` for the hand-over, as split-K's units) and the store."""
    workers = min(scheduling.stream_work_units(tiles // cluster, steps), resident // cluster)
    data_parallel, stream, sharers = scheduling.stream_split(tiles // cluster, steps, workers)
    busy = math.ceil(data_parallel / workers) * (TILE_FILL_S + steps * step + epilogue)
    if stream:
        share = stream * steps / sharers
        # One partial written and one read per piece, not split-K's read-back of all S: charging a tile's
        # last piece for all its pieces' partials as split-K's units are (`SPLIT_READ_BYTES_PER_S`) scored
        # lower (seven draws 0.9899 -> 0.9894, seed 4141 0.9854 -> 0.9797; session 28).
        partial = 2 * tile_elems * 4 / SM_STREAM_BYTES_PER_S + SPLIT_UNIT_S
        busy += share * step + 2 * (TILE_FILL_S + partial) + epilogue
    return busy


def hbm_reach(active_sms: int) -> float:
    """Bytes per second that ``active_sms`` SMs pull from HBM together: each adds up to
    SM_STREAM_BYTES_PER_S, saturating towards HBM_BYTES_PER_S. Fitted to the H200 tuning table's decode
    points (2026-12-01): 32, 48, 64 and 96 streaming CTAs reached 2.4, 2.9, 3.8 and 4.1 TB/s net of the
    launch (this curve: 2.2, 2.9, 3.4, 4.0), so a weight-streaming problem on few tiles is not held to the
    full 4.8 TB/s floor."""
    return HBM_BYTES_PER_S * -math.expm1(-active_sms * SM_STREAM_BYTES_PER_S / HBM_BYTES_PER_S)


def best(
    specs: list[GemmSpec], m: int, n: int, k: int, batch: int, sm_count: int
) -> tuple[float, GemmSpec, str]:
    """(estimated µs, spec, reason) of the fastest of ``specs`` by the model; ties go to the smaller id."""
    ranked = sorted((estimate_s(s, m, n, k, batch, sm_count), s.id, s) for s in specs)
    seconds, _, spec = ranked[0]
    runner_up = f"; next {ranked[1][1]} at {ranked[1][0] * 1e6:.1f} µs" if len(ranked) > 1 else ""
    reason = (
        f"cost model (runtime/model.py) on {sm_count} SMs: {spec.id} estimated {seconds * 1e6:.1f} µs "
        f"among {len(specs)} instances{runner_up}"
    )
    return seconds * 1e6, spec, reason
