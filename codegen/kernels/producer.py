"""The dense producer of hgemm-sm90's kernel (codegen/kernels/gemm_sm90.py, docs/KERNEL.md): one warp walks
this CTA's work units (whole tiles, split-K's ranges, stream-K's pieces: tile_scheduler.py) and TMA-loads
each unit's A and B k-tiles into the shared-memory ring, multicast within the cluster. Under programmatic
dependent launch it waits for the previous grid before its first load, except for the operand the launch
names in `prefetch_operand`, whose share of the first ring fill it loads before the wait. The grouped
producers are in grouped.py. A mixin of `HopperGemm`, as grouped.py's `GroupedWalks` is: its methods read
the kernel's configuration from `self` like the kernel's own.
"""

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
from cutlass import Int32
from cutlass.cute.nvgpu import cpasync

from .tile_scheduler import (
    cluster_tile_coord,
    edge_origin,
    split_unit,
    stream_unit,
)


class Producers:
    """Dense producer methods of `HopperGemm` (see the module docstring)."""

    @cute.jit
    def _load_k_tiles(
        self,
        ab_pipeline,
        producer_state,
        tma_atom_a,
        tAgA_k,
        tAsA,
        tma_atom_b,
        tBgB_k,
        tBsB,
        a_mcast_mask,
        b_mcast_mask,
        k_begin: Int32,
        k_end: Int32,
        early_a: Int32 = 0,
        early_b: Int32 = 0,
    ):
        """Producer: TMA-load k-tiles [k_begin, k_end) of one tile's A and B rows into the ring (waiting
        for each stage to be free). Returns the advanced producer state. The first `early_a` (or
        `early_b`) k-tiles already hold their stage, armed, with A's (or B's) part loaded
        (`_load_early`): only the other operand is loaded for them, in a loop of their own, so that the
        ordinary loop is the same code with and without early loads."""
        early = cutlass.max(early_a, early_b)
        for k_tile in range(k_begin, k_begin + early):
            full_barrier = ab_pipeline.producer_get_barrier(producer_state)
            if early_b > 0:
                cute.copy(
                    tma_atom_a,
                    tAgA_k[(None, k_tile)],
                    tAsA[(None, producer_state.index)],
                    tma_bar_ptr=full_barrier,
                    mcast_mask=a_mcast_mask,
                )
            else:
                cute.copy(
                    tma_atom_b,
                    tBgB_k[(None, k_tile)],
                    tBsB[(None, producer_state.index)],
                    tma_bar_ptr=full_barrier,
                    mcast_mask=b_mcast_mask,
                )
            ab_pipeline.producer_commit(producer_state)
            producer_state.advance()
        for k_tile in range(k_begin + early, k_end):
            ab_pipeline.producer_acquire(producer_state)
            full_barrier = ab_pipeline.producer_get_barrier(producer_state)
            cute.copy(
                tma_atom_a,
                tAgA_k[(None, k_tile)],
                tAsA[(None, producer_state.index)],
                tma_bar_ptr=full_barrier,
                mcast_mask=a_mcast_mask,
            )
            cute.copy(
                tma_atom_b,
                tBgB_k[(None, k_tile)],
                tBsB[(None, producer_state.index)],
                tma_bar_ptr=full_barrier,
                mcast_mask=b_mcast_mask,
            )
            ab_pipeline.producer_commit(producer_state)
            producer_state.advance()
        return producer_state

    @cute.jit
    def _load_early(
        self,
        ab_pipeline,
        tma_atom,
        tXgX_k,
        tXsX,
        mcast_mask,
        k_begin: Int32,
        count: Int32,
    ):
        """Producer, before griddepcontrol.wait: claim the ring's first `count` stages (all free at the
        start), arm each for the whole k-tile (A and B bytes) and TMA-load one operand's k-tiles
        [k_begin, k_begin + count) into them; `_load_k_tiles` adds the other operand after the wait. The
        stage stays incomplete until both have landed, so the consumers see nothing early."""
        state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.ab_stages)
        for i in range(count):
            ab_pipeline.producer_acquire(state)
            cute.copy(
                tma_atom,
                tXgX_k[(None, k_begin + i)],
                tXsX[(None, state.index)],
                tma_bar_ptr=ab_pipeline.producer_get_barrier(state),
                mcast_mask=mcast_mask,
            )
            state.advance()

    def _plain_unit(
        self,
        linear,
        k_tile_cnt,
        splits,
        clusters_m,
        clusters_n,
        raster_along_m,
        group_size,
        cluster_coord_mnk,
    ):
        """The plain walk's work unit `linear` for this CTA: (tile m, tile n, batch, first k-tile, end
        k-tile); a whole tile's K unless split-K or stream-K (tile_scheduler.py). `splits`: split-K's
        split count, or stream-K's walk parameters (see `kernel`)."""
        cm, cn = self.cluster_mn
        tile_linear, k_begin, k_end = linear, 0, k_tile_cnt
        if cutlass.const_expr(self.k_split):
            tile_linear, _, k_begin, k_end = split_unit(linear, splits, k_tile_cnt)
        if cutlass.const_expr(self.stream_k):
            worker, workers = splits[0], splits[1]
            tile_linear, k_begin, k_end, _, _, _, _ = stream_unit(
                (linear - worker) // workers, *splits, k_tile_cnt
            )
        ctile_m, ctile_n, batch = cluster_tile_coord(
            tile_linear, clusters_m, clusters_n, raster_along_m, group_size
        )
        return ctile_m * cm + cluster_coord_mnk[0], ctile_n * cn + cluster_coord_mnk[1], batch, k_begin, k_end

    def _unit_operands(
        self, tma_atom_a, tAgA, tma_atom_b, tBgB, tile_m, tile_n, batch, cluster_coord_mnk, operands
    ):
        """A's and B's k-tile sequences (TMA coordinates) of output tile (tile_m, tile_n) of `batch`: the
        tile's rows of each, from the partitions made once for the whole tensors; or, for an instance that
        clamps edges, from partitions of the tensors shifted to the tile's `edge_origin` along M and N (so
        an edge tile's boxes lie inside A and B). Traced inline (no control flow)."""
        if cutlass.const_expr(not self.clamp_edges):
            return tAgA[(None, tile_m, None, batch)], tBgB[(None, tile_n, None, batch)]
        mA_mkl, sA, mB_nkl, sB, cta_layout_mnk = operands
        row = edge_origin(tile_m, self.tile_mnk[0], cute.size(mA_mkl, mode=[0]))
        col = edge_origin(tile_n, self.tile_mnk[1], cute.size(mB_nkl, mode=[0]))
        gA = self._tiles_from(mA_mkl, "a", row)
        gB = self._tiles_from(mB_nkl, "b", col)
        _, tAgA_edge = self._operand_tiles(tma_atom_a, gA, sA, "a", cta_layout_mnk, cluster_coord_mnk)
        _, tBgB_edge = self._operand_tiles(tma_atom_b, gB, sB, "b", cta_layout_mnk, cluster_coord_mnk)
        return tAgA_edge[(None, 0, None, batch)], tBgB_edge[(None, 0, None, batch)]

    def _tiles_from(self, tensor, operand: str, first_row):
        """Operand "a"'s (M x K) or "b"'s (N x K) global tiles, (rows, bK, row tiles, k-tiles, L), with the
        tensor's rows counted from `first_row` (a group's first row, an edge tile's origin). Traced inline."""
        tile_slice = (None, 0, None) if operand == "a" else (0, None, None)
        return cute.local_tile(
            cute.domain_offset((first_row, 0, 0), tensor),
            cute.slice_(self.tile_mnk, tile_slice),
            (None, None, None),
        )

    def _operand_tiles(self, tma_atom, tiles, smem, operand: str, cta_layout_mnk, cluster_coord_mnk):
        """The TMA partition (smem stages, global tiles) of operand "a" or "b" for this CTA: with multicast,
        the CTAs sharing a tile (a cluster row for A, a column for B) each load their slice of it. `tiles`:
        the operand's global tiles (`cute.local_tile`, or `_tiles_from`). Traced inline."""
        a = operand == "a"
        return cpasync.tma_partition(
            tma_atom,
            cluster_coord_mnk[1] if a else cluster_coord_mnk[0],
            cute.make_layout(cute.slice_(cta_layout_mnk, (0, None, 0) if a else (None, 0, 0)).shape),
            cute.group_modes(smem, 0, 2),
            cute.group_modes(tiles, 0, 2),
        )

    @cute.jit
    def _produce_tiles(
        self,
        ab_pipeline,
        producer_state,
        tma_atom_a,
        tAgA,
        tAsA,
        tma_atom_b,
        tBgB,
        tBsB,
        a_mcast_mask,
        b_mcast_mask,
        prefetch_operand: Int32,
        k_tile_cnt: Int32,
        splits,
        work_units: Int32,
        clusters_m: Int32,
        clusters_n: Int32,
        cluster_id: Int32,
        num_clusters: Int32,
        cluster_coord_mnk,
        raster_along_m: Int32,
        group_size: Int32,
        operands,
    ):
        """Producer of the plain walk (one tile or split-K unit after another, tile_scheduler.py), with
        programmatic dependent launch: nothing the previous grid may write is read before
        griddepcontrol.wait, except the operand `prefetch_operand` names (1: A, 2: B), which the launch
        declared not written by it: that operand's k-tiles of the first unit's first ring fill are
        loaded before the wait, so a grid launched early streams its weights while the previous one
        finishes. Every CTA of a cluster loads the same k-tiles early (they walk the same units), so
        multicast stages fill as usual. Returns the advanced producer state. `operands`: (mA_mkl, sA,
        mB_nkl, sB, cta_layout_mnk), for the partitions of edge tiles moved inside the tensors
        (`_unit_operands`)."""
        walk = (k_tile_cnt, splits, clusters_m, clusters_n, raster_along_m, group_size, cluster_coord_mnk)
        early_a = Int32(0)
        early_b = Int32(0)
        # Nothing of this is on the path of a launch without the permission: the time to its first
        # load is latency that small problems feel.
        if prefetch_operand != 0:
            if cluster_id < work_units:
                tile_m, tile_n, batch, k_begin, k_end = self._plain_unit(cluster_id, *walk)
                tAgA_k, tBgB_k = self._unit_operands(
                    tma_atom_a, tAgA, tma_atom_b, tBgB, tile_m, tile_n, batch, cluster_coord_mnk, operands
                )
                count = cutlass.min(k_end - k_begin, self.ab_stages)
                if prefetch_operand == 1:
                    early_a = count
                    self._load_early(
                        ab_pipeline,
                        tma_atom_a,
                        tAgA_k,
                        tAsA,
                        a_mcast_mask,
                        k_begin,
                        count,
                    )
                else:
                    early_b = count
                    self._load_early(
                        ab_pipeline,
                        tma_atom_b,
                        tBgB_k,
                        tBsB,
                        b_mcast_mask,
                        k_begin,
                        count,
                    )
        cute.arch.griddepcontrol_wait()
        linear = cluster_id
        while linear < work_units:
            tile_m, tile_n, batch, k_begin, k_end = self._plain_unit(linear, *walk)
            tAgA_k, tBgB_k = self._unit_operands(
                tma_atom_a, tAgA, tma_atom_b, tBgB, tile_m, tile_n, batch, cluster_coord_mnk, operands
            )
            producer_state = self._load_k_tiles(
                ab_pipeline,
                producer_state,
                tma_atom_a,
                tAgA_k,
                tAsA,
                tma_atom_b,
                tBgB_k,
                tBsB,
                a_mcast_mask,
                b_mcast_mask,
                k_begin,
                k_end,
                early_a,
                early_b,
            )
            early_a = Int32(0)
            early_b = Int32(0)
            linear += num_clusters
        return producer_state
