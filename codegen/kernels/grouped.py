"""The grouped GEMM's parts of the kernel (codegen/kernels/gemm_sm90.py, docs/KERNEL.md "Grouped GEMM"): the
walk over groups, the producers of grouped M (TMA and gathered A) and grouped K, and the stores and trims
those need. A mixin of `HopperGemm`: its methods read the kernel's configuration from `self` like the
kernel's own, and `HopperGemm` inherits them, so a grouped instance is the same kernel with these parts
switched on at trace time (plain instances' cubins do not change).
"""

import cutlass
import cutlass.cute as cute
from cutlass import Int32
from cutlass.cute.nvgpu import cpasync

from .barriers import THREADS_PER_WARPGROUP, TRIM_BARRIER
from .tile_scheduler import cluster_tile_coord, group_rows, varlen_locate


class GroupedWalks:
    """Grouped-GEMM methods of `HopperGemm` (see the module docstring)."""

    @cute.jit
    def _grouped_tile(
        self,
        linear,
        group,
        first_tile,
        seqlens,
        total_rows,
        clusters_n,
        cluster_coord_mnk,
        raster_along_m,
        group_size,
    ):
        """Grouped (varlen M): this CTA's tile of cluster tile `linear` of group `group` (whose first
        cluster tile is `first_tile`): (tile_m within the group, tile_n, the group's first row, its end
        row). Inside a group the cluster tiles are walked like one problem's (tile_scheduler.py)."""
        cm, cn = self.cluster_mn
        row_first, row_end = group_rows(seqlens, group, total_rows)
        rows = self.tile_mnk[0] * cm
        ctile_m, ctile_n, _ = cluster_tile_coord(
            linear - first_tile,
            (row_end - row_first + rows - 1) // rows,
            clusters_n,
            raster_along_m,
            group_size,
        )
        return ctile_m * cm + cluster_coord_mnk[0], ctile_n * cn + cluster_coord_mnk[1], row_first, row_end

    @cute.jit
    def _produce_grouped(
        self,
        ab_pipeline,
        producer_state,
        tma_atom_a,
        mA_mkl: cute.Tensor,
        sA: cute.Tensor,
        tAsA,
        tma_atom_b,
        tBgB,
        tBsB,
        a_mcast_mask,
        b_mcast_mask,
        seqlens,
        k_tile_cnt: Int32,
        clusters_n: Int32,
        cluster_id: Int32,
        num_clusters: Int32,
        cluster_coord_mnk,
        cta_layout_mnk,
        raster_along_m: Int32,
        group_size: Int32,
    ):
        """Producer of a grouped (varlen M) instance: walk this CTA's tiles group by group and load each
        one's k-tiles. A is read through its whole-tensor descriptor shifted to the group's first row:
        rows past the group's end belong to the next group (or are past A and zero-filled); they only
        feed accumulator rows that the epilogue never stores. B is the group's matrix (batch index)."""
        num_groups = cute.size(seqlens) - 1
        total_rows = cute.size(mA_mkl, mode=[0])
        rows_per_cluster_tile = self.tile_mnk[0] * self.cluster_mn[0]
        linear = cluster_id
        group, first_tile = varlen_locate(
            linear, Int32(0), Int32(0), seqlens, num_groups, total_rows, rows_per_cluster_tile, clusters_n
        )
        while group < num_groups:
            tile_m, tile_n, row_first, _ = self._grouped_tile(
                linear,
                group,
                first_tile,
                seqlens,
                total_rows,
                clusters_n,
                cluster_coord_mnk,
                raster_along_m,
                group_size,
            )
            gA_group = self._tiles_from(mA_mkl, "a", row_first)
            _, tAgA_group = self._operand_tiles(
                tma_atom_a, gA_group, sA, "a", cta_layout_mnk, cluster_coord_mnk
            )
            producer_state = self._load_k_tiles(
                ab_pipeline,
                producer_state,
                tma_atom_a,
                tAgA_group[(None, tile_m, None, 0)],
                tAsA,
                tma_atom_b,
                tBgB[(None, tile_n, None, group)],
                tBsB,
                a_mcast_mask,
                b_mcast_mask,
                0,
                k_tile_cnt,
            )
            linear += num_clusters
            group, first_tile = varlen_locate(
                linear, group, first_tile, seqlens, num_groups, total_rows, rows_per_cluster_tile, clusters_n
            )
        return producer_state

    @cute.jit
    def _k_range(self, seqlens, group, total_k):
        """Grouped K: `group`'s K range [first, end) (clamped into [0, total_k] like `group_rows`) as
        k-tiles: (first column loaded, k-tile count, columns of the first k-tile before the range, valid
        columns of the last k-tile). The loads start at `first` rounded down to 16 bytes (a TMA box may not
        start mid-16-bytes along a contiguous K: an illegal instruction on the H200), so the first k-tile
        may begin with up to 15 columns of the previous group. An empty group still runs one k-tile with no
        valid column, so every tile runs the same mainloop and stores D[g] = 0."""
        first, end = group_rows(seqlens, group, total_k)
        tile_k = self.tile_mnk[2]
        lead = first % (128 // self.a_dtype.width)
        k_tiles = cutlass.max((end - first + lead + tile_k - 1) // tile_k, 1)
        return first - lead, k_tiles, lead, end - first + lead - (k_tiles - 1) * tile_k

    def _group_k_tiles(self, tma_atom, tensor, smem, k_first, tile_slice):
        """Grouped K: an operand's TMA partition (smem stages, global tiles) with its K mode starting at the
        group's first column `k_first`; `tile_slice` picks the operand's extents of the tile ((None, 0,
        None): A's M x K, (0, None, None): B's N x K). Traced inline (no control flow)."""
        tiles = cute.local_tile(
            cute.domain_offset((0, k_first, 0), tensor),
            cute.slice_(self.tile_mnk, tile_slice),
            (None, None, None),
        )
        return cpasync.tma_partition(
            tma_atom, 0, cute.make_layout(1), cute.group_modes(smem, 0, 2), cute.group_modes(tiles, 0, 2)
        )

    @cute.jit
    def _produce_grouped_k(
        self,
        ab_pipeline,
        producer_state,
        tma_atom_a,
        mA_mkl: cute.Tensor,
        sA: cute.Tensor,
        tma_atom_b,
        mB_nkl: cute.Tensor,
        sB: cute.Tensor,
        seqlens,
        work_units: Int32,
        clusters_m: Int32,
        clusters_n: Int32,
        cluster_id: Int32,
        num_clusters: Int32,
        cluster_coord_mnk,
        cta_layout_mnk,
        raster_along_m: Int32,
        group_size: Int32,
    ):
        """Producer of a grouped-K instance: the tiles are walked like a batched GEMM's (one batch of D per
        group); a tile of group g loads the k-tiles of g's K range through A's and B's whole-tensor
        descriptors shifted to its first column (the last k-tile reads into the next group's columns, which
        the consumers zero in A's stage: `_trim_stage`)."""
        total_k = cute.size(mA_mkl, mode=[1])
        linear = cluster_id
        while linear < work_units:
            ctile_m, ctile_n, group = cluster_tile_coord(
                linear, clusters_m, clusters_n, raster_along_m, group_size
            )
            tile_m = ctile_m * self.cluster_mn[0] + cluster_coord_mnk[0]
            tile_n = ctile_n * self.cluster_mn[1] + cluster_coord_mnk[1]
            k_first, k_tiles, _, _ = self._k_range(seqlens, group, total_k)
            tAsA, tAgA = self._group_k_tiles(tma_atom_a, mA_mkl, sA, k_first, (None, 0, None))
            tBsB, tBgB = self._group_k_tiles(tma_atom_b, mB_nkl, sB, k_first, (0, None, None))
            producer_state = self._load_k_tiles(
                ab_pipeline,
                producer_state,
                tma_atom_a,
                tAgA[(None, tile_m, None, 0)],
                tAsA,
                tma_atom_b,
                tBgB[(None, tile_n, None, 0)],
                tBsB,
                0,
                0,
                0,
                k_tiles,
            )
            linear += num_clusters
        return producer_state

    @cute.jit
    def _trim_stage(self, sA: cute.Tensor, sB: cute.Tensor, stage, lo: Int32, hi: Int32, tile_tidx: Int32):
        """Grouped K: zero the K columns outside [lo, hi) of A's and B's ring stage `stage` (they hold the
        neighbouring groups' columns), by every thread that shares the tile, before anyone's WGMMAs read
        it. Both operands: a zero times a neighbour's value is 0 only if that value is finite. A gathered
        A's stage holds the group's own columns there (`_produce_gathered_k`): only B is zeroed, so that
        A's stages keep one writer, the producer."""
        tile_k = self.tile_mnk[2]
        operands = ((sB, self.tile_mnk[1], self.b_dtype(0)),)
        if cutlass.const_expr(not self.gather_a):
            operands = ((sA, self.tile_mnk[0], self.a_dtype(0)), *operands)
        for operand, rows, zero in operands:
            staged = operand[(None, None, stage)]
            for j in cutlass.range_constexpr(rows * tile_k // self.tile_threads):
                flat = j * self.tile_threads + tile_tidx
                col = flat % tile_k
                if col < lo or col >= hi:
                    staged[(flat // tile_k, col)] = zero
        # The zeros are generic-proxy writes; WGMMA reads shared memory through the async proxy.
        cute.arch.fence_proxy("async.shared", space="cta")
        cute.arch.barrier(barrier_id=TRIM_BARRIER, number_of_threads=self.tile_threads)

    @cute.jit
    def _produce_gathered(
        self,
        ab_pipeline,
        producer_state,
        mA_mkl: cute.Tensor,
        sA: cute.Tensor,
        tma_atom_b,
        tBgB,
        tBsB,
        seqlens,
        a_idx,
        k_tile_cnt: Int32,
        clusters_n: Int32,
        cluster_id: Int32,
        num_clusters: Int32,
        cluster_coord_mnk,
        raster_along_m: Int32,
        group_size: Int32,
        tidx: Int32,
        warp_idx: Int32,
    ):
        """Producer of a grouped instance with gathered A in a 1x1 cluster (every thread of the producer
        warpgroup): walk this CTA's tiles group by group like `_produce_grouped`; for each tile, look up the
        source row of each of this thread's tile rows once (a_idx, clamped into A), then per k-tile: wait
        until the stage is free, let the first warp TMA-load B (arming the stage with B's bytes), copy this
        thread's 16-byte pieces of A's rows with cp.async and count one arrival when they land
        (cp.async.mbarrier.arrive.noinc). Rows past the group's end load a row of A all the same (only
        accumulator rows that are never stored use them); rows past m load row a_idx[m - 1]. K is a
        multiple of the tile's K (the runtime's rule for gathered A), so no k-tile is partial. (A pair's
        producer is `_produce_gathered_pair`.)"""
        ptid = tidx % THREADS_PER_WARPGROUP
        loader_warps = THREADS_PER_WARPGROUP // 32
        warp_rank = ptid // 32  # this warp's rank in the producer warpgroup
        tile_rows = self.tile_mnk[0]
        vector = 128 // self.a_dtype.width
        per_row = self.tile_mnk[2] // vector
        # One warp copies a block of 32 / per_row whole rows per pass; the warps take the tile's blocks in
        # turn (warp w: blocks w, w + 4, ...), so each lane copies the same 16-byte piece of one row per pass.
        copy_g2s = cute.make_tiled_copy_tv(
            # .cg: straight to L2 (the few KB of L1 that shared memory leaves would only thrash).
            cute.make_copy_atom(
                cpasync.CopyG2SOp(cache_mode=cpasync.LoadCacheMode.GLOBAL),
                self.a_dtype,
                num_bits_per_copy=128,
            ),
            cute.make_ordered_layout((32 // per_row, per_row), order=(1, 0)),
            cute.make_layout((1, vector)),
        )
        thr_g2s = copy_g2s.get_slice(tidx % 32)
        tAsA = thr_g2s.partition_D(sA)  # (vector, row blocks, 1, stage)
        tAcA = thr_g2s.partition_S(cute.make_identity_tensor((tile_rows, self.tile_mnk[2])))
        blocks = cute.size(tAcA, mode=[1])
        if cutlass.const_expr(blocks % loader_warps):
            raise ValueError(f"gathered A: {blocks} row blocks do not divide among {loader_warps} warps")
        passes = blocks // loader_warps
        chunk = tAcA[(0, 0, 0)][1] // vector  # this lane's 16-byte piece of each row of a k-tile
        num_groups = cute.size(seqlens) - 1
        total_rows = cute.size(a_idx)
        source_rows = cute.size(mA_mkl, mode=[0])
        rows_per_cluster_tile = self.tile_mnk[0] * self.cluster_mn[0]
        linear = cluster_id
        group, first_tile = varlen_locate(
            linear, Int32(0), Int32(0), seqlens, num_groups, total_rows, rows_per_cluster_tile, clusters_n
        )
        # The source rows of this thread's tile rows: loaded for the next tile before the current tile's
        # k-tiles are issued, so the index loads' latency hides behind them.
        src = self._gathered_rows(
            a_idx,
            seqlens,
            linear,
            group,
            first_tile,
            tAcA,
            warp_rank,
            loader_warps,
            passes,
            source_rows,
            clusters_n,
            cluster_coord_mnk,
            raster_along_m,
            group_size,
        )
        while group < num_groups:
            _, tile_n, _, _ = self._grouped_tile(
                linear,
                group,
                first_tile,
                seqlens,
                total_rows,
                clusters_n,
                cluster_coord_mnk,
                raster_along_m,
                group_size,
            )
            next_linear = linear + num_clusters
            next_group, next_first = varlen_locate(
                next_linear,
                group,
                first_tile,
                seqlens,
                num_groups,
                total_rows,
                rows_per_cluster_tile,
                clusters_n,
            )
            src_next = self._gathered_rows(
                a_idx,
                seqlens,
                next_linear,
                cutlass.min(next_group, num_groups - 1),
                next_first,
                tAcA,
                warp_rank,
                loader_warps,
                passes,
                source_rows,
                clusters_n,
                cluster_coord_mnk,
                raster_along_m,
                group_size,
            )
            tBgB_k = tBgB[(None, tile_n, None, group)]
            for k_tile in range(k_tile_cnt):
                self._start_gathered_stage(
                    ab_pipeline, producer_state, tma_atom_b, tBgB_k, tBsB, k_tile, warp_idx
                )
                for j in cutlass.range_constexpr(passes):
                    row_pieces = cute.zipped_divide(mA_mkl[(src[j], None, 0)], (vector,))
                    cute.copy(
                        copy_g2s,
                        row_pieces[(None, k_tile * per_row + chunk)],
                        tAsA[(None, warp_rank + loader_warps * j, 0, producer_state.index)],
                    )
                cute.arch.cp_async_mbarrier_arrive_noinc(ab_pipeline.producer_get_barrier(producer_state))
                producer_state.advance()
            src.store(src_next.load())
            linear, group, first_tile = next_linear, next_group, next_first
        return producer_state

    @cute.jit
    def _produce_gathered_pair(
        self,
        ab_pipeline,
        producer_state,
        tma_atom_a,
        mA_mkl: cute.Tensor,
        a_base,
        a_swizzle,
        tma_atom_b,
        tBgB,
        tBsB,
        seqlens,
        a_idx,
        k_tile_cnt: Int32,
        clusters_n: Int32,
        cluster_id: Int32,
        num_clusters: Int32,
        cluster_coord_mnk,
        raster_along_m: Int32,
        group_size: Int32,
        tidx: Int32,
        warp_idx: Int32,
    ):
        """Producer of a gathering pair (`gather_pair`: a 1x2 cluster whose CTAs take the same rows): each
        CTA loads half of the tile's rows (CTA n: rows [n * M/2, (n + 1) * M/2)) as one-row TMA boxes
        multicast to both CTAs, so each row is read once per pair and lands in both stages. Per k-tile every
        producer warp waits until the stage is free (released by both CTAs' consumers, as under multicast),
        the first also arms the full barrier with B's and the whole A tile's bytes and TMA-loads B; then
        each warp issues its M/8 rows, one after another (`cute.copy` elects the issuing lane), row j's
        source index shuffled from lane j, which loaded it once per tile (a_idx, clamped into A; rows past
        m read a_idx[m - 1]). A box lands at its row's unswizzled 128-byte offset of the stage and the TMA
        unit applies the 128-byte swizzle from the address, so it lands where a whole-tile load would have
        put that row (a k-tile row is one 128-byte swizzle row: codegen/validity.py `gather_a`)."""
        ptid = tidx % THREADS_PER_WARPGROUP
        lane = tidx % 32
        warp_rank = ptid // 32
        warps = THREADS_PER_WARPGROUP // 32
        tile_k = self.tile_mnk[2]
        half_rows = self.tile_mnk[0] // 2
        rows_per_warp = half_rows // warps
        if cutlass.const_expr(rows_per_warp > 32):
            raise ValueError(f"gathering pair: {rows_per_warp} rows per warp, more than its lanes")
        both = cutlass.Int16(0b11)  # multicast to the pair's two CTAs (cluster ranks 0 and 1)
        half = cluster_coord_mnk[1]
        first_row = half * half_rows + warp_rank * rows_per_warp  # this warp's first tile row
        stage_elems = self.tile_mnk[0] * tile_k
        row_layout = cute.make_composed_layout(
            a_swizzle, 0, cute.make_layout((1, tile_k), stride=(tile_k, 1))
        )
        gA_rows = cute.local_tile(mA_mkl[(None, None, 0)], (1, tile_k), (None, None))  # (1, K, rows, k-tiles)
        num_groups = cute.size(seqlens) - 1
        total_rows = cute.size(a_idx)
        source_rows = cute.size(mA_mkl, mode=[0])
        rows_per_cluster_tile = self.tile_mnk[0] * self.cluster_mn[0]
        linear = cluster_id
        group, first_tile = varlen_locate(
            linear, Int32(0), Int32(0), seqlens, num_groups, total_rows, rows_per_cluster_tile, clusters_n
        )
        my_row = first_row + cutlass.min(lane, rows_per_warp - 1)
        src = self._tile_row_source(
            a_idx,
            seqlens,
            linear,
            group,
            first_tile,
            my_row,
            source_rows,
            clusters_n,
            cluster_coord_mnk,
            raster_along_m,
            group_size,
        )
        while group < num_groups:
            _, tile_n, _, _ = self._grouped_tile(
                linear,
                group,
                first_tile,
                seqlens,
                total_rows,
                clusters_n,
                cluster_coord_mnk,
                raster_along_m,
                group_size,
            )
            next_linear = linear + num_clusters
            next_group, next_first = varlen_locate(
                next_linear,
                group,
                first_tile,
                seqlens,
                num_groups,
                total_rows,
                rows_per_cluster_tile,
                clusters_n,
            )
            src_next = self._tile_row_source(
                a_idx,
                seqlens,
                next_linear,
                cutlass.min(next_group, num_groups - 1),
                next_first,
                my_row,
                source_rows,
                clusters_n,
                cluster_coord_mnk,
                raster_along_m,
                group_size,
            )
            tBgB_k = tBgB[(None, tile_n, None, group)]
            for k_tile in range(k_tile_cnt):
                self._start_gathered_stage(
                    ab_pipeline, producer_state, tma_atom_b, tBgB_k, tBsB, k_tile, warp_idx
                )
                full = ab_pipeline.producer_get_barrier(producer_state)
                for j in cutlass.range_constexpr(rows_per_warp):
                    source = cute.arch.shuffle_sync(src, j)
                    offset = producer_state.index * stage_elems + (first_row + j) * tile_k
                    dst = cute.make_tensor(a_base + offset, row_layout)
                    tAs, tAg = cpasync.tma_partition(
                        tma_atom_a,
                        0,
                        cute.make_layout(1),
                        cute.group_modes(dst, 0, 2),
                        cute.group_modes(gA_rows, 0, 2),
                    )
                    cute.copy(
                        tma_atom_a,
                        tAg[(None, source, k_tile)],
                        tAs,
                        tma_bar_ptr=full,
                        mcast_mask=both,
                    )
                producer_state.advance()
            src = src_next
            linear, group, first_tile = next_linear, next_group, next_first
        return producer_state

    @cute.jit
    def _tile_row_source(
        self,
        a_idx,
        seqlens,
        linear,
        group,
        first_tile,
        tile_row,
        source_rows,
        clusters_n,
        cluster_coord_mnk,
        raster_along_m,
        group_size,
    ):
        """Gathered A: the source row (a_idx, clamped into [0, source_rows)) of tile row `tile_row` of cluster
        tile `linear` of `group`; rows past m read a_idx[m - 1]."""
        total_rows = cute.size(a_idx)
        tile_m, _, row_first, _ = self._grouped_tile(
            linear,
            group,
            first_tile,
            seqlens,
            total_rows,
            clusters_n,
            cluster_coord_mnk,
            raster_along_m,
            group_size,
        )
        row = cutlass.min(row_first + tile_m * self.tile_mnk[0] + tile_row, total_rows - 1)
        return cutlass.min(cutlass.max(a_idx[row], 0), source_rows - 1)

    @cute.jit
    def _produce_gathered_k(
        self,
        ab_pipeline,
        producer_state,
        mA_mkl: cute.Tensor,
        sA: cute.Tensor,
        tma_atom_b,
        mB_nkl: cute.Tensor,
        sB: cute.Tensor,
        seqlens,
        a_idx,
        work_units: Int32,
        clusters_m: Int32,
        clusters_n: Int32,
        cluster_id: Int32,
        num_clusters: Int32,
        raster_along_m: Int32,
        group_size: Int32,
        tidx: Int32,
        warp_idx: Int32,
    ):
        """Producer of a grouped-K instance with gathered A (every thread of the producer warpgroup; A is
        M-major, 1x1 clusters): the tiles are walked like `_produce_grouped_k`'s, and column j of a k-tile
        (K position p of the groups' concatenated K) is column a_idx[p] of the A given, whose M elements
        are contiguous: each thread copies its 16-byte piece of M of its columns with cp.async and counts
        one arrival when they land; B is TMA-loaded by the first warp (arming the stage with B's bytes).
        K positions outside the group (the first and last k-tile's) load the group's nearest column
        again, and the consumers zero B's columns there (`_trim_stage` trims B alone here), so those
        products are 0 for finite A. A's stages are written by producer threads only (no consumer
        stores race with the next fill), and each thread arrives once per stage
        (cp.async.mbarrier.arrive.noinc), as for gathered rows. An empty group has no column to borrow
        (it loads any column; its consumers zero the accumulators instead). Indices are clamped into the
        A given; an M piece past A's rows reads the last piece (M is a multiple of 16 bytes: pieces are
        whole), feeding only accumulator rows that are never stored. The next k-tile's indices are loaded
        before this k-tile's copies are issued, so their latency hides behind them."""
        ptid = tidx % THREADS_PER_WARPGROUP
        vector = 128 // self.a_dtype.width
        per_col = self.tile_mnk[0] // vector  # threads along one column's M
        copy_g2s = cute.make_tiled_copy_tv(
            cute.make_copy_atom(
                cpasync.CopyG2SOp(cache_mode=cpasync.LoadCacheMode.GLOBAL),
                self.a_dtype,
                num_bits_per_copy=128,
            ),
            cute.make_ordered_layout((per_col, THREADS_PER_WARPGROUP // per_col), order=(0, 1)),
            cute.make_layout((vector, 1)),
        )
        thr_g2s = copy_g2s.get_slice(ptid)
        tAsA = thr_g2s.partition_D(sA)  # (vector, 1, columns of this thread, stage)
        tAcA = thr_g2s.partition_S(cute.make_identity_tensor((self.tile_mnk[0], self.tile_mnk[2])))
        cols_per_thread = cute.size(tAcA, mode=[2])
        piece0 = tAcA[(0, 0, 0)][0] // vector  # this thread's 16-byte piece of a tile column
        total_k = cute.size(mB_nkl, mode=[1])  # the groups' K positions (a_idx's length)
        source_cols = cute.size(mA_mkl, mode=[1])
        last_piece = cute.size(mA_mkl, mode=[0]) // vector - 1
        src = cute.make_rmem_tensor(cols_per_thread, Int32)
        src_next = cute.make_rmem_tensor(cols_per_thread, Int32)
        linear = cluster_id
        while linear < work_units:
            tile_m, tile_n, group = cluster_tile_coord(
                linear, clusters_m, clusters_n, raster_along_m, group_size
            )
            k_first, k_tiles, _, _ = self._k_range(seqlens, group, total_k)
            # The K positions whose indices are read: the group's, or any for an empty group.
            first, end = group_rows(seqlens, group, total_k)
            lo, hi = (first, end) if end > first else (Int32(0), total_k)
            tBsB, tBgB = self._group_k_tiles(tma_atom_b, mB_nkl, sB, k_first, (0, None, None))
            tBgB_k = tBgB[(None, tile_n, None, 0)]
            piece = cutlass.min(tile_m * per_col + piece0, last_piece)
            self._gathered_cols(src, a_idx, k_first, tAcA, lo, hi, source_cols)
            for k_tile in range(k_tiles):
                # Indices of the next k-tile (past the group's last: harmless loads of its own entries).
                self._gathered_cols(
                    src_next, a_idx, k_first + (k_tile + 1) * self.tile_mnk[2], tAcA, lo, hi, source_cols
                )
                self._start_gathered_stage(
                    ab_pipeline, producer_state, tma_atom_b, tBgB_k, tBsB, k_tile, warp_idx
                )
                for j in cutlass.range_constexpr(cols_per_thread):
                    col_pieces = cute.zipped_divide(mA_mkl[(None, src[j], 0)], (vector,))
                    cute.copy(copy_g2s, col_pieces[(None, piece)], tAsA[(None, 0, j, producer_state.index)])
                cute.arch.cp_async_mbarrier_arrive_noinc(ab_pipeline.producer_get_barrier(producer_state))
                producer_state.advance()
                src.store(src_next.load())
            linear += num_clusters
        return producer_state

    @cute.jit
    def _start_gathered_stage(self, ab_pipeline, producer_state, tma_atom_b, tBgB_k, tBsB, k_tile, warp_idx):
        """Gathered A (every form): claim ring stage `producer_state` for k-tile `k_tile`. The first producer
        warp waits until the stage is free, arms it (B's bytes; in a pair, A's too) and TMA-loads B's
        k-tile; the other producer threads only wait until it is free (their cp.async copies of A, or a
        pair's row boxes, then arrive on its barrier)."""
        if warp_idx == self.producer_warp:
            ab_pipeline.producer_acquire(producer_state)  # also arms the stage with B's bytes
            cute.copy(
                tma_atom_b,
                tBgB_k[(None, k_tile)],
                tBsB[(None, producer_state.index)],
                tma_bar_ptr=ab_pipeline.producer_get_barrier(producer_state),
                mcast_mask=0,
            )
        else:
            ab_pipeline.sync_object_empty.wait(producer_state.index, producer_state.phase)

    @cute.jit
    def _gathered_cols(self, cols, a_idx, k0, tAcA, lo, hi, source_cols):
        """Gathered A over K: fill `cols` with the source column (a_idx, clamped into [0, source_cols)) of
        each of this producer thread's columns of the k-tile that starts at K position `k0`, the position
        clamped into [lo, hi) first (a non-empty range)."""
        for j in cutlass.range_constexpr(cute.size(cols)):
            p = cutlass.min(cutlass.max(k0 + tAcA[(0, 0, j)][1], lo), hi - 1)
            cols[j] = cutlass.min(cutlass.max(a_idx[p], 0), source_cols - 1)

    @cute.jit
    def _gathered_rows(
        self,
        a_idx,
        seqlens,
        linear,
        group,
        first_tile,
        tAcA,
        warp_rank,
        loader_warps,
        passes,
        source_rows,
        clusters_n,
        cluster_coord_mnk,
        raster_along_m,
        group_size,
    ):
        """Gathered A: the source row (a_idx, clamped into [0, source_rows)) of each of this producer
        thread's rows of cluster tile `linear` of `group`, one per pass (`_produce_gathered`: pass j copies
        row block `warp_rank + loader_warps * j` of `tAcA`'s); rows past m read a_idx[m - 1]."""
        total_rows = cute.size(a_idx)
        tile_m, _, row_first, _ = self._grouped_tile(
            linear,
            group,
            first_tile,
            seqlens,
            total_rows,
            clusters_n,
            cluster_coord_mnk,
            raster_along_m,
            group_size,
        )
        row0 = row_first + tile_m * self.tile_mnk[0]
        rows = cute.make_rmem_tensor(passes, Int32)
        for j in cutlass.range_constexpr(passes):
            row = cutlass.min(row0 + tAcA[(0, warp_rank + loader_warps * j, 0)][0], total_rows - 1)
            rows[j] = cutlass.min(cutlass.max(a_idx[row], 0), source_rows - 1)
        return rows
