"""hgemm-sm90's Hopper GEMM kernel, written in the CuTe DSL: D[m, n, l] = sum_k A[m, k, l] * B[n, k, l].

Structure (one CTA, `threads = 128 * (consumer warpgroups + 1)`):
- Consumer warpgroups 0..W-1 (W = 1 for 64-row tiles, 2 otherwise; "cooperative": they split one tile
  along M) issue WGMMA from shared memory into fp32 register accumulators, then run the epilogue:
  registers -> (converted to D's dtype) -> shared memory (stmatrix for 16-bit D) -> TMA store.
- The last warpgroup is the producer; its first warp issues TMA loads of A and B k-tiles into a
  multi-stage shared-memory ring guarded by mbarriers (full: TMA transaction bytes landed; empty: every
  consumer warp of every CTA that shares the stage released it). In a cluster, CTAs in the same cluster row
  share A tiles and CTAs in the same column share B tiles: each loads a slice and multicasts it.
- `setmaxnreg` moves registers from the producer warpgroup to the consumers.
- Persistent: a grid of at most `max_active_clusters` clusters walks all output tiles (tile_scheduler.py).

Partial tiles are handled by TMA itself: loads outside the tensor are zero-filled (so a partial last k-tile
adds zeros) and stores outside D are dropped. Hence M, N, K need no tile multiple; only the 16-byte TMA
alignment of base pointers, leading dimensions and batch strides remains (checked by the runtime).

The host entry (`__call__`) takes only tensors, int32 scalars and a stream, so its launch is easy to
reproduce from the manifest (DESIGN.md fact 2, docs/CONTRACT.md). Tile shape, cluster shape, dtypes,
majorness and stage counts are compile-time (one cubin per instance).
"""

from dataclasses import dataclass

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils as utils
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass import Int32
from cutlass.cute.nvgpu import cpasync, warpgroup
from cutlass.pipeline import pipeline_init_arrive, pipeline_init_wait

from .tile_scheduler import cluster_tile_coord

THREADS_PER_WARPGROUP = 128
# Registers per thread after `setmaxnreg`: the producer keeps few, the consumers hold the accumulators.
# 40 * 128 + 232 * 256 = 64512 <= 65536 registers per SM for two consumer warpgroups.
PRODUCER_REGISTERS = 40
CONSUMER_REGISTERS = 232
# Named barrier 0 is __syncthreads; 1 orders the consumer warpgroups' epilogue.
EPILOGUE_BARRIER_ID = 1


@dataclass(frozen=True)
class KernelConfig:
    """Everything compile-time about one instance, in DSL terms (built by codegen/dsl.py from a GemmSpec)."""

    a_dtype: type
    b_dtype: type
    d_dtype: type
    acc_dtype: type
    tile_mnk: tuple[int, int, int]
    cluster_mn: tuple[int, int]
    ab_stages: int
    epi_stages: int
    epi_tile: tuple[int, int]

    @property
    def consumer_warpgroups(self) -> int:
        # 64-row tiles: one warpgroup owns the whole tile; larger tiles are split along M between two.
        return 1 if self.tile_mnk[0] == 64 else 2

    @property
    def threads(self) -> int:
        return THREADS_PER_WARPGROUP * (self.consumer_warpgroups + 1)


class HopperGemm:
    """A warp-specialized, persistent TMA + WGMMA GEMM for one compile-time configuration."""

    def __init__(self, config: KernelConfig):
        self.cfg = config
        self.tile_mnk = config.tile_mnk
        self.cluster_mn = config.cluster_mn
        self.acc_dtype = config.acc_dtype
        self.num_consumer_wgs = config.consumer_warpgroups
        self.atom_layout_mnk = (self.num_consumer_wgs, 1, 1)
        self.num_consumer_threads = self.num_consumer_wgs * THREADS_PER_WARPGROUP
        self.threads_per_cta = config.threads
        self.producer_warp = self.num_consumer_wgs * 4  # first warp of the producer warpgroup
        self.epi_store_warp = 0  # issues the epilogue's TMA stores
        self.ab_stages = config.ab_stages
        self.epi_stages = config.epi_stages
        self.epi_tile = config.epi_tile
        self.num_mcast_a = self.cluster_mn[1]  # A tiles are shared along a cluster row (same M)
        self.num_mcast_b = self.cluster_mn[0]  # B tiles are shared along a cluster column (same N)
        self.buffer_align_bytes = 1024

    # ------------------------------------------------------------------ host side
    @cute.jit
    def __call__(
        self,
        mA: cute.Tensor,
        mB: cute.Tensor,
        mD: cute.Tensor,
        raster_along_m: Int32,
        group_size: Int32,
        max_active_clusters: Int32,
        stream: cuda.CUstream,
    ):
        """Build TMA descriptors, size the persistent grid and launch.

        mA: (M, K, L), mB: (N, K, L), mD: (M, N, L), each with one unit-stride mode. The grid is
        `(cluster_m * P, cluster_n, 1)` with `P = min(cluster tiles, max_active_clusters)`.
        """
        self.a_dtype = mA.element_type
        self.b_dtype = mB.element_type
        self.d_dtype = mD.element_type
        self.a_layout = utils.LayoutEnum.from_tensor(mA)
        self.b_layout = utils.LayoutEnum.from_tensor(mB)
        self.d_layout = utils.LayoutEnum.from_tensor(mD)

        self.tiled_mma = sm90_utils.make_trivial_tiled_mma(
            self.a_dtype,
            self.b_dtype,
            self.a_layout.sm90_mma_major_mode(),
            self.b_layout.sm90_mma_major_mode(),
            self.acc_dtype,
            self.atom_layout_mnk,
            tiler_mn=(64, self.tile_mnk[1]),
        )
        self.cta_layout_mnk = cute.make_layout((*self.cluster_mn, 1))
        a_smem_staged, b_smem_staged, epi_smem_staged = self._smem_layouts()

        tma_atom_a, tma_tensor_a = self._make_load_tma(
            mA, a_smem_staged, (self.tile_mnk[0], self.tile_mnk[2]), self.num_mcast_a
        )
        tma_atom_b, tma_tensor_b = self._make_load_tma(
            mB, b_smem_staged, (self.tile_mnk[1], self.tile_mnk[2]), self.num_mcast_b
        )
        tma_atom_d, tma_tensor_d = cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileS2GOp(),
            mD,
            cute.slice_(epi_smem_staged, (None, None, 0)),
            self.epi_tile,
        )

        # Persistent grid: one cluster per (cluster_m x cluster_n) block of output tiles, capped by how
        # many clusters fit on the device at once.
        cm, cn = self.cluster_mn
        tiles_m = (cute.size(mD, mode=[0]) + self.tile_mnk[0] - 1) // self.tile_mnk[0]
        tiles_n = (cute.size(mD, mode=[1]) + self.tile_mnk[1] - 1) // self.tile_mnk[1]
        cluster_tiles = (
            ((tiles_m + cm - 1) // cm) * ((tiles_n + cn - 1) // cn) * cute.size(mD, mode=[2])
        )
        num_clusters = cutlass.min(cluster_tiles, max_active_clusters)

        @cute.struct
        class SharedStorage:
            ab_full_empty: cute.struct.MemRange[cutlass.Int64, self.ab_stages * 2]
            sA: cute.struct.Align[
                cute.struct.MemRange[self.a_dtype, cute.cosize(a_smem_staged)],
                self.buffer_align_bytes,
            ]
            sB: cute.struct.Align[
                cute.struct.MemRange[self.b_dtype, cute.cosize(b_smem_staged)],
                self.buffer_align_bytes,
            ]
            sD: cute.struct.Align[
                cute.struct.MemRange[self.d_dtype, cute.cosize(epi_smem_staged)],
                self.buffer_align_bytes,
            ]

        self.shared_storage = SharedStorage

        self.kernel(
            tma_atom_a,
            tma_tensor_a,
            tma_atom_b,
            tma_tensor_b,
            tma_atom_d,
            tma_tensor_d,
            raster_along_m,
            group_size,
            self.tiled_mma,
            self.cta_layout_mnk,
            a_smem_staged,
            b_smem_staged,
            epi_smem_staged,
        ).launch(
            grid=(cm * num_clusters, cn, 1),
            block=[self.threads_per_cta, 1, 1],
            cluster=(cm, cn, 1),
            min_blocks_per_mp=1,
            stream=stream,
        )

    def _smem_layouts(self):
        """Swizzled shared-memory layouts: A/B stages for WGMMA, D stages for the epilogue."""
        tile_m, tile_n, tile_k = self.tile_mnk

        def operand_layout(layout, dtype, mn_extent):
            is_k_major = layout.sm90_mma_major_mode() == warpgroup.OperandMajorMode.K
            atom = warpgroup.make_smem_layout_atom(
                sm90_utils.get_smem_layout_atom(layout, dtype, tile_k if is_k_major else mn_extent),
                dtype,
            )
            return cute.tile_to_shape(
                atom,
                (mn_extent, tile_k, self.ab_stages),
                order=(0, 1, 2) if is_k_major else (1, 0, 2),
            )

        a_staged = operand_layout(self.a_layout, self.a_dtype, tile_m)
        b_staged = operand_layout(self.b_layout, self.b_dtype, tile_n)
        epi_staged = sm90_utils.make_smem_layout_epi(
            self.d_dtype, self.d_layout, self.epi_tile, self.epi_stages
        )
        return a_staged, b_staged, epi_staged

    @staticmethod
    def _make_load_tma(tensor, smem_staged, smem_tile, num_mcast):
        op = (
            cpasync.CopyBulkTensorTileG2SOp()
            if num_mcast == 1
            else cpasync.CopyBulkTensorTileG2SMulticastOp()
        )
        return cpasync.make_tiled_tma_atom(
            op,
            tensor,
            cute.slice_(smem_staged, (None, None, 0)),
            smem_tile,
            num_multicast=num_mcast,
        )

    # ------------------------------------------------------------------ device side
    @cute.kernel
    def kernel(
        self,
        tma_atom_a: cute.CopyAtom,
        mA_mkl: cute.Tensor,
        tma_atom_b: cute.CopyAtom,
        mB_nkl: cute.Tensor,
        tma_atom_d: cute.CopyAtom,
        mD_mnl: cute.Tensor,
        raster_along_m: Int32,
        group_size: Int32,
        tiled_mma: cute.TiledMma,
        cta_layout_mnk: cute.Layout,
        a_smem_staged: cute.ComposedLayout,
        b_smem_staged: cute.ComposedLayout,
        epi_smem_staged: cute.ComposedLayout,
    ):
        tidx, _, _ = cute.arch.thread_idx()
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        warp_group_idx = cute.arch.make_warp_uniform(tidx // THREADS_PER_WARPGROUP)
        is_producer = warp_group_idx == self.num_consumer_wgs

        if warp_idx == self.producer_warp:
            cpasync.prefetch_descriptor(tma_atom_a)
            cpasync.prefetch_descriptor(tma_atom_b)
            cpasync.prefetch_descriptor(tma_atom_d)

        cta_rank_in_cluster = cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster())
        cluster_coord_mnk = cta_layout_mnk.get_flat_coord(cta_rank_in_cluster)

        a_smem = cute.slice_(a_smem_staged, (None, None, 0))
        b_smem = cute.slice_(b_smem_staged, (None, None, 0))
        tma_copy_bytes = cute.size_in_bytes(self.a_dtype, a_smem) + cute.size_in_bytes(
            self.b_dtype, b_smem
        )

        smem = utils.SmemAllocator()
        storage = smem.allocate(self.shared_storage)

        # Each consumer warp releases a stage to every CTA that multicast into it (its row and column).
        mcast_peers = self.num_mcast_a + self.num_mcast_b - 1
        ab_pipeline = pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.ab_full_empty.data_ptr(),
            num_stages=self.ab_stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(
                pipeline.Agent.Thread, mcast_peers * self.num_consumer_wgs * 4
            ),
            tx_count=tma_copy_bytes,
            cta_layout_vmnk=cute.make_layout((1, *cta_layout_mnk.shape)),
            defer_sync=True,
        )
        # Barrier init must be visible cluster-wide before any peer multicasts into this CTA.
        pipeline_init_arrive(cluster_shape_mn=self.cluster_mn, is_relaxed=True)

        sA = storage.sA.get_tensor(a_smem_staged.outer, swizzle=a_smem_staged.inner)
        sB = storage.sB.get_tensor(b_smem_staged.outer, swizzle=b_smem_staged.inner)
        sD = storage.sD.get_tensor(epi_smem_staged.outer, swizzle=epi_smem_staged.inner)

        # Global tiles: (bM, bK, tiles_m, tiles_k, L), (bN, bK, tiles_n, tiles_k, L), (bM, bN, tiles_m, tiles_n, L)
        gA_mkl = cute.local_tile(
            mA_mkl, cute.slice_(self.tile_mnk, (None, 0, None)), (None, None, None)
        )
        gB_nkl = cute.local_tile(
            mB_nkl, cute.slice_(self.tile_mnk, (0, None, None)), (None, None, None)
        )
        gD_mnl = cute.local_tile(
            mD_mnl, cute.slice_(self.tile_mnk, (None, None, 0)), (None, None, None)
        )

        # TMA partitions; with multicast each CTA of a cluster row/column loads its slice of the tile.
        tAsA, tAgA = cpasync.tma_partition(
            tma_atom_a,
            cluster_coord_mnk[1],
            cute.make_layout(cute.slice_(cta_layout_mnk, (0, None, 0)).shape),
            cute.group_modes(sA, 0, 2),
            cute.group_modes(gA_mkl, 0, 2),
        )
        tBsB, tBgB = cpasync.tma_partition(
            tma_atom_b,
            cluster_coord_mnk[0],
            cute.make_layout(cute.slice_(cta_layout_mnk, (None, 0, 0)).shape),
            cute.group_modes(sB, 0, 2),
            cute.group_modes(gB_nkl, 0, 2),
        )

        k_tile_cnt = cute.size(gA_mkl, mode=[3])

        # Persistent schedule (see tile_scheduler.py). Every CTA of a cluster walks the same sequence.
        cm, cn = self.cluster_mn
        clusters_m = (cute.size(gD_mnl, mode=[2]) + cm - 1) // cm
        clusters_n = (cute.size(gD_mnl, mode=[3]) + cn - 1) // cn
        cluster_tiles = clusters_m * clusters_n * cute.size(gD_mnl, mode=[4])
        cluster_id = cute.arch.cluster_idx()[0]
        num_clusters = cute.arch.cluster_dim()[0]

        pipeline_init_wait(cluster_shape_mn=self.cluster_mn)

        if is_producer:
            cute.arch.setmaxregister_decrease(PRODUCER_REGISTERS)

        if warp_idx == self.producer_warp:
            a_mcast_mask = cute.make_layout_image_mask(cta_layout_mnk, cluster_coord_mnk, mode=1)
            b_mcast_mask = cute.make_layout_image_mask(cta_layout_mnk, cluster_coord_mnk, mode=0)
            a_mcast_mask = a_mcast_mask if self.num_mcast_a > 1 else 0
            b_mcast_mask = b_mcast_mask if self.num_mcast_b > 1 else 0

            producer_state = pipeline.make_pipeline_state(
                pipeline.PipelineUserType.Producer, self.ab_stages
            )
            linear = cluster_id
            while linear < cluster_tiles:
                ctile_m, ctile_n, batch = cluster_tile_coord(
                    linear, clusters_m, clusters_n, raster_along_m, group_size
                )
                tile_m = ctile_m * cm + cluster_coord_mnk[0]
                tile_n = ctile_n * cn + cluster_coord_mnk[1]
                tAgA_k = tAgA[(None, tile_m, None, batch)]
                tBgB_k = tBgB[(None, tile_n, None, batch)]
                for k_tile in range(k_tile_cnt):
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
                linear += num_clusters
            # Do not exit while peers may still multicast into / release to this CTA's stages.
            ab_pipeline.producer_tail(producer_state)

        if not is_producer:
            cute.arch.setmaxregister_increase(CONSUMER_REGISTERS)
            self._consume(
                ab_pipeline,
                tiled_mma,
                tma_atom_d,
                sA,
                sB,
                sD,
                gD_mnl,
                k_tile_cnt,
                cluster_tiles,
                clusters_m,
                clusters_n,
                cluster_id,
                num_clusters,
                cluster_coord_mnk,
                raster_along_m,
                group_size,
                tidx,
                warp_idx,
                warp_group_idx,
            )

    @cute.jit
    def _consume(
        self,
        ab_pipeline,
        tiled_mma: cute.TiledMma,
        tma_atom_d: cute.CopyAtom,
        sA: cute.Tensor,
        sB: cute.Tensor,
        sD: cute.Tensor,
        gD_mnl: cute.Tensor,
        k_tile_cnt: Int32,
        cluster_tiles: Int32,
        clusters_m: Int32,
        clusters_n: Int32,
        cluster_id: Int32,
        num_clusters: Int32,
        cluster_coord_mnk,
        raster_along_m: Int32,
        group_size: Int32,
        tidx: Int32,
        warp_idx: Int32,
        warp_group_idx: Int32,
    ):
        """Consumer warpgroups: WGMMA mainloop over the k-tiles of each tile, then the TMA-store epilogue."""
        cm, cn = self.cluster_mn
        thr_mma = tiled_mma.get_slice(tidx)
        tCsA = thr_mma.partition_A(sA)
        tCsB = thr_mma.partition_B(sB)
        tCrA = tiled_mma.make_fragment_A(tCsA)
        tCrB = tiled_mma.make_fragment_B(tCsB)
        tCgD = thr_mma.partition_C(gD_mnl)
        accumulators = cute.make_rmem_tensor(tCgD.shape[:3], self.acc_dtype)
        num_k_blocks = cute.size(tCrA, mode=[2])

        # Epilogue partitions: registers -> shared memory (stmatrix for 16-bit D) -> TMA store.
        copy_atom_r2s = sm90_utils.sm90_get_smem_store_op(
            self.d_layout, elem_ty_d=self.d_dtype, elem_ty_acc=self.acc_dtype
        )
        copy_atom_c = cute.make_copy_atom(
            cute.nvgpu.warp.StMatrix8x8x16bOp(self.d_layout.is_m_major_c(), 4), self.d_dtype
        )
        tiled_copy_r2s = cute.make_tiled_copy_S(
            copy_atom_r2s, cute.make_tiled_copy_C_atom(copy_atom_c, tiled_mma)
        )
        thr_copy_r2s = tiled_copy_r2s.get_slice(tidx)
        tRS_sD = thr_copy_r2s.partition_D(sD)
        tRS_rAcc = tiled_copy_r2s.retile(accumulators)
        rD_shape = cute.shape(thr_copy_r2s.partition_S(sD))
        tRS_rD = cute.make_rmem_tensor(rD_shape[:3], self.acc_dtype)
        tRS_rD_out = cute.make_rmem_tensor(rD_shape[:3], self.d_dtype)
        regs_per_epi_tile = cute.size(tRS_rD)

        epilogue_barrier = pipeline.NamedBarrier(
            barrier_id=EPILOGUE_BARRIER_ID, num_threads=self.num_consumer_threads
        )
        tma_store_pipeline = pipeline.PipelineTmaStore.create(
            num_stages=self.epi_stages,
            producer_group=pipeline.CooperativeGroup(
                pipeline.Agent.Thread, self.num_consumer_threads
            ),
        )

        read_state = pipeline.make_pipeline_state(
            pipeline.PipelineUserType.Consumer, self.ab_stages
        )
        release_state = pipeline.make_pipeline_state(
            pipeline.PipelineUserType.Consumer, self.ab_stages
        )
        # Keep one WGMMA batch in flight: release stage k-1 only after waiting for stage k's issue.
        k_pipe_mmas = 1
        prologue_mmas = cutlass.min(k_pipe_mmas, k_tile_cnt)

        epi_tiles_per_tile = cute.size(cute.zipped_divide(gD_mnl[(None, None, 0, 0, 0)], self.epi_tile), mode=[1])
        epi_buffer = Int32(0)
        linear = cluster_id
        while linear < cluster_tiles:
            ctile_m, ctile_n, batch = cluster_tile_coord(
                linear, clusters_m, clusters_n, raster_along_m, group_size
            )
            tile_m = ctile_m * cm + cluster_coord_mnk[0]
            tile_n = ctile_n * cn + cluster_coord_mnk[1]

            # ---- mainloop
            accumulators.fill(0.0)
            tiled_mma.set(warpgroup.Field.ACCUMULATE, True)
            warpgroup.fence()
            for k_tile in range(prologue_mmas):
                ab_pipeline.consumer_wait(read_state)
                for k_block in cutlass.range_constexpr(num_k_blocks):
                    coord = (None, None, k_block, read_state.index)
                    cute.gemm(tiled_mma, accumulators, tCrA[coord], tCrB[coord], accumulators)
                warpgroup.commit_group()
                read_state.advance()
            for k_tile in range(prologue_mmas, k_tile_cnt):
                ab_pipeline.consumer_wait(read_state)
                for k_block in cutlass.range_constexpr(num_k_blocks):
                    coord = (None, None, k_block, read_state.index)
                    cute.gemm(tiled_mma, accumulators, tCrA[coord], tCrB[coord], accumulators)
                warpgroup.commit_group()
                warpgroup.wait_group(k_pipe_mmas)
                ab_pipeline.consumer_release(release_state)
                release_state.advance()
                read_state.advance()
            warpgroup.wait_group(0)
            for k_tile in range(prologue_mmas):
                ab_pipeline.consumer_release(release_state)
                release_state.advance()

            # ---- epilogue
            gD_tile = cute.zipped_divide(gD_mnl[(None, None, tile_m, tile_n, batch)], self.epi_tile)
            bSG_sD, bSG_gD = cpasync.tma_partition(
                tma_atom_d,
                0,
                cute.make_layout(1),
                cute.group_modes(sD, 0, 2),
                gD_tile,
            )
            epi_grid = gD_tile.shape[1]
            epi_order = cute.make_layout(epi_grid, stride=(epi_grid[1], 1))
            for epi_idx in cutlass.range_constexpr(epi_tiles_per_tile):
                for v in cutlass.range_constexpr(regs_per_epi_tile):
                    tRS_rD[v] = tRS_rAcc[epi_idx * regs_per_epi_tile + v]
                tRS_rD_out.store(tRS_rD.load().to(self.d_dtype))
                cute.copy(tiled_copy_r2s, tRS_rD_out, tRS_sD[(None, None, None, epi_buffer)])
                # stmatrix writes are generic-proxy; the TMA store reads through the async proxy.
                cute.arch.fence_proxy("async.shared", space="cta")
                epilogue_barrier.arrive_and_wait()
                if warp_idx == self.epi_store_warp:
                    cute.copy(
                        tma_atom_d,
                        bSG_sD[(None, epi_buffer)],
                        bSG_gD[(None, epi_order.get_hier_coord(epi_idx))],
                    )
                    tma_store_pipeline.producer_commit()
                    tma_store_pipeline.producer_acquire()
                epilogue_barrier.arrive_and_wait()
                epi_buffer = (epi_buffer + 1) % self.epi_stages
            linear += num_clusters

        # Drain outstanding TMA stores before the CTA exits.
        tma_store_pipeline.producer_tail()
