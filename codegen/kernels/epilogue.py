"""The epilogue of hgemm-sm90's kernel (codegen/kernels/gemm_sm90.py, docs/KERNEL.md): each output tile's
accumulators -> alpha * acc (+ beta * C, C staged by TMA ahead of use) -> D's dtype -> shared memory
(stmatrix for 16-bit D) -> a TMA store (grouped M tiles: a row-bounded copy in 16-byte vectors), one
epilogue sub-tile at a time; and split-K's and stream-K's reduction of a tile's fp32 parts through the
workspace (`Epilogues._reduce_parts`). A mixin of `HopperGemm`, as grouped.py's `GroupedWalks` is: its
methods read the kernel's configuration from `self` like the kernel's own.
"""

from dataclasses import dataclass

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass import Float32, Int32
from cutlass.cute.nvgpu import cpasync

from runtime.scheduling import SPLIT_COUNTERS

from .barriers import EPILOGUE_BARRIER
from .tile_scheduler import edge_origin


@dataclass(frozen=True)
class EpilogueContext:
    """One consumer thread's epilogue state that is the same for every tile: built once before the tile
    loop by `HopperGemm._make_epilogue`, read by `HopperGemm._epilogue`. Trace-time values (DSL tensors,
    atoms, pipelines, Python ints); the C fields are None for instances that do not read C."""

    # Kernel inputs: the TMA atoms, C's "sub-tile landed" mbarriers, the scalars, the staging buffers and
    # the tiled global tensors of D and C.
    tma_atom_d: object
    tma_atom_c: object
    c_full: object
    alpha: object
    beta: object
    sD: object
    sC: object
    gD_mnl: object
    gC_mnl: object
    # Registers -> shared memory: the accumulator as the epilogue copies see it, one sub-tile's fp32 and
    # D-typed values, and this thread's part of the D staging buffers.
    tiled_copy_r2s: object
    tRS_rAcc: object
    tRS_rD: object
    tRS_rD_out: object
    tRS_sD: object
    regs_per_epi_tile: int
    # C: shared memory -> registers.
    tiled_copy_s2r: object
    tSR_sC: object
    tSR_rC: object
    tRS_rC: object
    # The threads that store together: their named barrier, whether this warp issues the TMA traffic,
    # their TMA store pipeline, and (N split) the column half and staging buffers they own.
    barrier: object
    is_epi_warp: object
    store_pipeline: object
    own_part: object
    d_buffer_base: object
    c_buffer_base: object
    c_subtile_bytes: int
    tiles_per_tile: int  # epilogue sub-tiles per output tile (of this warpgroup's column half under N split)
    # Grouped (varlen M): the copy of one staged sub-tile to global memory in 16-byte vectors, this
    # thread's part of it (the staging buffers, the sub-tile's coordinates); None otherwise.
    thr_copy_s2g: object = None
    tSG_sD: object = None
    tSG_cD: object = None


class Epilogues:
    """Epilogue methods of `HopperGemm` (see the module docstring)."""

    @cute.jit
    def _make_epilogue(
        self,
        tiled_mma: cute.TiledMma,
        accumulators: cute.Tensor,
        tma_atom_d: cute.CopyAtom,
        tma_atom_c,
        c_full,
        alpha: Float32,
        beta,
        sD: cute.Tensor,
        sC,
        gD_mnl: cute.Tensor,
        gC_mnl,
        tidx: Int32,
        warp_idx: Int32,
        warp_group_idx: Int32,
    ):
        """This thread's epilogue set-up, the same for every tile: its partitions of the accumulator, the
        staging buffers and C, its barrier and store pipeline (built once, before the tile loop)."""
        has_c = cutlass.const_expr(gC_mnl is not None)
        # Epilogue partitions: registers -> shared memory (stmatrix for 16-bit D) -> TMA store. The
        # stmatrix atom (16-bit) only defines the thread/value layout every epilogue copy follows. With
        # the N split each warpgroup stores its own column half: its accumulator fragment is exactly a
        # one-warpgroup MMA's over 192 x N/2, so that MMA defines the epilogue's partition.
        epi_tidx = tidx % self.epi_threads
        epi_mma = tiled_mma
        if cutlass.const_expr(self.n_split):
            epi_mma = sm90_utils.make_trivial_tiled_mma(
                self.a_dtype,
                self.b_dtype,
                self.a_layout.sm90_mma_major_mode(),
                self.b_layout.sm90_mma_major_mode(),
                self.acc_dtype,
                (1, 1, 1),
                tiler_mn=(64, self.tile_mnk[1] // self.atom_layout_mnk[1]),
            )
        # stmatrix stores four 8x8 matrices per warp (16 columns of the warp's 16 rows); an 8-column
        # sub-tile (narrow swap-AB tiles) holds only two per warp.
        stmatrix = cute.nvgpu.warp.StMatrix8x8x16bOp(
            self.d_layout.is_m_major_c(), 4 if self.epi_tile[1] % 16 == 0 else 2
        )
        tiled_copy_c_atom = cute.make_tiled_copy_C_atom(
            cute.make_copy_atom(stmatrix, cutlass.Float16), epi_mma
        )
        copy_atom_r2s = (
            cute.make_copy_atom(stmatrix, self.d_dtype)
            if cutlass.const_expr(self.d_dtype.width == 16)
            else cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), self.d_dtype)
        )
        tiled_copy_r2s = cute.make_tiled_copy_S(copy_atom_r2s, tiled_copy_c_atom)
        thr_copy_r2s = tiled_copy_r2s.get_slice(epi_tidx)
        tRS_sD = thr_copy_r2s.partition_D(sD)
        tRS_rAcc = tiled_copy_r2s.retile(accumulators)
        rD_shape = cute.shape(thr_copy_r2s.partition_S(sD))
        tRS_rD = cute.make_rmem_tensor(rD_shape[:3], self.acc_dtype)
        tRS_rD_out = cute.make_rmem_tensor(rD_shape[:3], self.d_dtype)

        tSR_sC, tRS_rC, tSR_rC, tiled_copy_s2r = None, None, None, None
        if cutlass.const_expr(has_c):
            tiled_copy_s2r = cute.make_tiled_copy_S(
                cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), self.c_dtype), tiled_copy_c_atom
            )
            thr_copy_s2r = tiled_copy_s2r.get_slice(epi_tidx)
            tSR_sC = thr_copy_s2r.partition_S(sC)
            tRS_rC = cute.make_rmem_tensor(rD_shape[:3], self.c_dtype)
            tSR_rC = thr_copy_s2r.retile(tRS_rC)

        epi_wg = warp_group_idx if self.wg_epilogue else 0
        epilogue_barrier = pipeline.NamedBarrier(
            barrier_id=EPILOGUE_BARRIER + epi_wg, num_threads=self.epi_threads
        )
        # The first warp of the epilogue's threads issues its TMA loads (C) and stores (D).
        is_epi_warp = warp_idx == epi_wg * 4
        # N split: this warpgroup's staging buffers and C barriers, and its column half of each tile.
        own_part = warp_group_idx if self.n_split else 0
        d_buffer_base = own_part * self.epi_stages
        c_buffer_base = own_part * self.c_stages
        tma_store_pipeline = pipeline.PipelineTmaStore.create(
            num_stages=self.epi_stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, self.epi_threads),
        )
        c_subtile_bytes = 0
        if cutlass.const_expr(has_c):
            c_subtile_bytes = cute.size_in_bytes(self.c_dtype, cute.slice_(sC, (None, None, 0)))
        tiles_per_tile = (
            cute.size(cute.zipped_divide(gD_mnl[(None, None, 0, 0, 0)], self.epi_tile), mode=[1])
            // self.epi_buffer_sets
        )
        thr_copy_s2g, tSG_sD, tSG_cD = None, None, None
        if cutlass.const_expr(self.varlen_m):
            # Row-major D: each thread moves 16-byte vectors of a row; a warp covers whole rows of the
            # sub-tile (N is a multiple of 16 bytes, so a vector is either inside D's columns or not).
            vector = 128 // self.d_dtype.width
            per_row = self.epi_tile[1] // vector
            copy_s2g = cute.make_tiled_copy_tv(
                cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), self.d_dtype, num_bits_per_copy=128),
                cute.make_ordered_layout((self.epi_threads // per_row, per_row), order=(1, 0)),
                cute.make_layout((1, vector)),
            )
            thr_copy_s2g = copy_s2g.get_slice(epi_tidx)
            tSG_sD = thr_copy_s2g.partition_S(sD)
            tSG_cD = thr_copy_s2g.partition_D(cute.make_identity_tensor(self.epi_tile))
        return EpilogueContext(
            tma_atom_d=tma_atom_d,
            tma_atom_c=tma_atom_c,
            c_full=c_full,
            alpha=alpha,
            beta=beta,
            sD=sD,
            sC=sC,
            gD_mnl=gD_mnl,
            gC_mnl=gC_mnl,
            tiled_copy_r2s=tiled_copy_r2s,
            tRS_rAcc=tRS_rAcc,
            tRS_rD=tRS_rD,
            tRS_rD_out=tRS_rD_out,
            tRS_sD=tRS_sD,
            regs_per_epi_tile=cute.size(tRS_rD),
            tiled_copy_s2r=tiled_copy_s2r,
            tSR_sC=tSR_sC,
            tSR_rC=tSR_rC,
            tRS_rC=tRS_rC,
            barrier=epilogue_barrier,
            is_epi_warp=is_epi_warp,
            store_pipeline=tma_store_pipeline,
            own_part=own_part,
            d_buffer_base=d_buffer_base,
            c_buffer_base=c_buffer_base,
            c_subtile_bytes=c_subtile_bytes,
            tiles_per_tile=tiles_per_tile,
            thr_copy_s2g=thr_copy_s2g,
            tSG_sD=tSG_sD,
            tSG_cD=tSG_cD,
        )

    @cute.jit
    def _epilogue(
        self,
        epi: EpilogueContext,
        tile_m,
        tile_n,
        batch,
        epi_buffer: Int32,
        c_count: Int32,
        mD_mnl=None,
        mC_mnl=None,
        row_first=None,
        row_end=None,
    ):
        """Store one tile's accumulators as D: for each of this epilogue's sub-tiles, registers -> alpha *
        acc (+ beta * C, C loaded by TMA into its shared buffers `c_stages` sub-tiles ahead) -> D's dtype
        -> shared memory (stmatrix for 16-bit D) -> TMA store.

        `epi_buffer` is the next D staging buffer, `c_count` the number of C sub-tiles loaded before this
        tile (it gives the C buffers' mbarrier phases). Returns both, advanced past this tile.

        With edge clamping (`clamp_edges`), `mD_mnl` is D's TMA tensor and the tile is stored at its
        `edge_origin` (where its operands were loaded from). Grouped (varlen M): the tile is tile_m of the
        group of rows [row_first, row_end) of D (`mD_mnl`, the tensor itself), and every epilogue thread
        copies its 16-byte vectors of each staged sub-tile to global memory, skipping rows at or past the
        group's end (a TMA store would write them). C
        (`mC_mnl`, its TMA tensor) is loaded through its whole-tensor descriptor at the group's first row:
        rows past the group's end are read (the next group's, or zero-filled past C) but only feed rows
        that are never stored, as in the grouped A load.
        """
        has_c = cutlass.const_expr(epi.gC_mnl is not None)
        # Plain names for what the run-time branch `if is_epi_warp:` below uses: the DSL's tracer decides
        # what such a branch carries from the names in it.
        is_epi_warp = epi.is_epi_warp
        tma_store_pipeline = epi.store_pipeline
        bSG_sD, bSG_gD, gD_tile, gD_sub, rows_left, cols_left = None, None, None, None, None, None
        if cutlass.const_expr(self.varlen_m):
            gD_group = cute.local_tile(
                cute.domain_offset((row_first, 0, 0), mD_mnl),
                cute.slice_(self.tile_mnk, (None, None, 0)),
                (None, None, None),
            )
            gD_sub = cute.zipped_divide(gD_group[(None, None, tile_m, tile_n, 0)], self.epi_tile)
            rows_left = row_end - row_first - tile_m * self.tile_mnk[0]
            cols_left = cute.size(mD_mnl, mode=[1]) - tile_n * self.tile_mnk[1]
        else:
            gD_tiles, tile_at = epi.gD_mnl, (tile_m, tile_n)
            if cutlass.const_expr(self.clamp_edges):
                # The tile's origin as its operands were loaded (`_unit_operands`).
                origin = (
                    edge_origin(tile_m, self.tile_mnk[0], cute.size(mD_mnl, mode=[0])),
                    edge_origin(tile_n, self.tile_mnk[1], cute.size(mD_mnl, mode=[1])),
                    0,
                )
                gD_tiles = cute.local_tile(
                    cute.domain_offset(origin, mD_mnl),
                    cute.slice_(self.tile_mnk, (None, None, 0)),
                    (None, None, None),
                )
                tile_at = (0, 0)
            gD_tile = cute.zipped_divide(gD_tiles[(None, None, *tile_at, batch)], self.epi_tile)
            bSG_sD, bSG_gD = cpasync.tma_partition(
                epi.tma_atom_d,
                0,
                cute.make_layout(1),
                cute.group_modes(epi.sD, 0, 2),
                gD_tile,
            )
        # This epilogue's sub-tiles, row by row (the accumulator's register order): all of them, or
        # under the N split this warpgroup's column half.
        epi_grid = (gD_sub if cutlass.const_expr(self.varlen_m) else gD_tile).shape[1]
        own_cols = epi_grid[1] // self.epi_buffer_sets
        epi_order = cute.make_layout((epi_grid[0], own_cols), stride=(own_cols, 1))
        col_offset = epi.own_part * own_cols  # of this epilogue's first sub-tile column
        bGS_sC, bGS_gC = None, None
        if cutlass.const_expr(has_c):
            if cutlass.const_expr(self.varlen_m):
                gC_group = cute.local_tile(
                    cute.domain_offset((row_first, 0, 0), mC_mnl),
                    cute.slice_(self.tile_mnk, (None, None, 0)),
                    (None, None, None),
                )
                gC_tile = cute.zipped_divide(gC_group[(None, None, tile_m, tile_n, 0)], self.epi_tile)
            else:
                gC_tile = cute.zipped_divide(epi.gC_mnl[(None, None, tile_m, tile_n, batch)], self.epi_tile)
            bGS_sC, bGS_gC = cpasync.tma_partition(
                epi.tma_atom_c,
                0,
                cute.make_layout(1),
                cute.group_modes(epi.sC, 0, 2),
                gC_tile,
            )
            # Prefetch the first sub-tile(s) of C; the buffers are free (see the barrier below).
            for i in cutlass.range_constexpr(min(self.c_stages, epi.tiles_per_tile)):
                self._load_c_subtile(
                    epi, bGS_sC, bGS_gC, self._sub_tile(epi_order, i, col_offset), c_count + i
                )
        for epi_idx in cutlass.range_constexpr(epi.tiles_per_tile):
            for v in cutlass.range_constexpr(epi.regs_per_epi_tile):
                epi.tRS_rD[v] = epi.tRS_rAcc[epi_idx * epi.regs_per_epi_tile + v]
            acc_vec = epi.tRS_rD.load() * epi.alpha
            if cutlass.const_expr(has_c):
                c_buffer = epi.c_buffer_base + (c_count + epi_idx) % self.c_stages
                c_phase = ((c_count + epi_idx) // self.c_stages) % 2
                cute.arch.mbarrier_wait(epi.c_full + c_buffer, c_phase)
                cute.copy(epi.tiled_copy_s2r, epi.tSR_sC[(None, None, None, c_buffer)], epi.tSR_rC)
                acc_vec = acc_vec + epi.tRS_rC.load().to(Float32) * epi.beta
            epi.tRS_rD_out.store(acc_vec.to(self.d_dtype))
            cute.copy(
                epi.tiled_copy_r2s,
                epi.tRS_rD_out,
                epi.tRS_sD[(None, None, None, epi.d_buffer_base + epi_buffer)],
            )
            # stmatrix writes are generic-proxy; the TMA store (and the next TMA load of C into the
            # buffer just read) go through the async proxy.
            cute.arch.fence_proxy("async.shared", space="cta")
            epi.barrier.arrive_and_wait()
            if cutlass.const_expr(self.varlen_m):
                self._copy_subtile_rows(
                    epi,
                    epi.d_buffer_base + epi_buffer,
                    gD_sub,
                    self._sub_tile(epi_order, epi_idx, col_offset),
                    rows_left,
                    cols_left,
                )
            elif is_epi_warp:
                cute.copy(
                    epi.tma_atom_d,
                    bSG_sD[(None, epi.d_buffer_base + epi_buffer)],
                    bSG_gD[(None, self._sub_tile(epi_order, epi_idx, col_offset))],
                )
                tma_store_pipeline.producer_commit()
                tma_store_pipeline.producer_acquire()
            if cutlass.const_expr(has_c):
                # The C buffer of this sub-tile has been read by every thread (barrier above): refill
                # it with the sub-tile c_stages ahead.
                if cutlass.const_expr(epi_idx + self.c_stages < epi.tiles_per_tile):
                    self._load_c_subtile(
                        epi,
                        bGS_sC,
                        bGS_gC,
                        self._sub_tile(epi_order, epi_idx + self.c_stages, col_offset),
                        c_count + epi_idx + self.c_stages,
                    )
            epi.barrier.arrive_and_wait()
            epi_buffer = (epi_buffer + 1) % self.epi_stages
        c_count += epi.tiles_per_tile
        return epi_buffer, c_count

    @cute.jit
    def _copy_subtile_rows(self, epi: EpilogueContext, buffer, gD_sub, sub_tile, rows_left, cols_left):
        """Grouped (varlen M): copy staged sub-tile `sub_tile` of the tile from D staging buffer `buffer`
        to global memory, 16 bytes per vector, skipping vectors whose row is at or past `rows_left` or
        whose columns start at or past `cols_left` (both relative to the tile's first row and column)."""
        g_sub = epi.thr_copy_s2g.partition_D(gD_sub[((None, None), sub_tile)])
        s_sub = epi.tSG_sD[(None, None, None, buffer)]
        staged = cute.make_rmem_tensor(s_sub.shape, self.d_dtype)
        cute.autovec_copy(s_sub, staged)
        row0, col0 = sub_tile[0] * self.epi_tile[0], sub_tile[1] * self.epi_tile[1]
        for i in cutlass.range_constexpr(cute.size(staged, mode=[1])):
            for j in cutlass.range_constexpr(cute.size(staged, mode=[2])):
                row, col = epi.tSG_cD[(0, i, j)]
                if row0 + row < rows_left and col0 + col < cols_left:
                    cute.autovec_copy(staged[(None, i, j)], g_sub[(None, i, j)])

    @cute.jit
    def _reduce_parts(
        self,
        epi: EpilogueContext,
        accumulators: cute.Tensor,
        workspace,
        split_arrivals,
        counter: Int32,
        parts: Int32,
        slots,
        tile_tidx: Int32,
    ):
        """Split-K and stream-K: publish this unit's fp32 partial sum of a tile that `parts` units share
        and count its arrival; the tile's last unit to arrive sums all partials into `accumulators` and
        returns True (it stores the tile), the others return False. With one part there is nothing to
        reduce (True, the workspace is not touched). Indices are per CTA tile (in a cluster every CTA
        reduces its own tile): `counter` is the tile's arrival counter (also its number under split-K).
        `slots`: under split-K this unit's split (part j of tile t is in slot t * parts + j); under
        stream-K (this unit's slot, part 0's slot, part 1's slot, the step between later parts' slots).

        Deterministic: every partial goes through the workspace and the last arriver adds them in part
        order 0, 1, ..., parts - 1, so the bits do not depend on which unit finishes last. Workspace
        layout (runtime/scheduling.py sizes it for `workspace_bytes`): SPLIT_COUNTERS int32 arrival
        counters (a fixed block, so that no problem's partials land on another problem's counters), then
        the partial slots, each as `[accumulator register][tile thread]` fp32 so that a warp's stores
        and loads are coalesced. The last arriver resets its tile's counter to 0, so a workspace stays
        ready for the next launch of any shape (it must be zero before its first use).
        """
        is_last = cutlass.Boolean(True)
        if parts > 1:
            values = cute.size(accumulators)
            unit_words = values * self.tile_threads
            counters = cute.recast_ptr(workspace, dtype=Int32)
            if cutlass.const_expr(self.stream_k):
                mine, slot0, slot1, stride = slots
                base = workspace + SPLIT_COUNTERS + tile_tidx
                own = base + mine * unit_words
                first = base + slot0 * unit_words
                later = base + slot1 * unit_words  # part 1; part j > 1 lies (j - 1) * stride slots on
                step = stride * unit_words
            else:
                partials = workspace + SPLIT_COUNTERS + counter * parts * unit_words
                own = partials + slots * unit_words + tile_tidx
                first = partials + tile_tidx
            for v in cutlass.range_constexpr(values):
                cute.arch.store(own + v * self.tile_threads, accumulators[v], cop="cg")
            # Release: every thread's partial is visible GPU-wide before the tile's arrival is counted.
            cute.arch.fence_acq_rel_gpu()
            epi.barrier.arrive_and_wait()
            if tile_tidx == 0:
                arrived = cute.arch.atomic_add(counters + counter, Int32(1), sem="acq_rel", scope="gpu")
                split_arrivals[0] = arrived
                if arrived == parts - 1:
                    counters[counter] = Int32(0)  # every unit of this tile has arrived
            epi.barrier.arrive_and_wait()
            is_last = split_arrivals[0] == parts - 1
            if is_last:
                cute.arch.fence_acq_rel_gpu()  # acquire: the other units' partials
                for v in cutlass.range_constexpr(values):
                    accumulators[v] = cute.arch.load(first + v * self.tile_threads, Float32, cop="cg")
                for j in range(1, parts):
                    part = first + j * unit_words  # split-K: the tile's parts are consecutive slots
                    if cutlass.const_expr(self.stream_k):
                        part = later + (j - 1) * step
                    for v in cutlass.range_constexpr(values):
                        accumulators[v] = accumulators[v] + cute.arch.load(
                            part + v * self.tile_threads, Float32, cop="cg"
                        )
        return is_last

    @staticmethod
    def _sub_tile(epi_order, epi_idx: int, col_offset):
        """The (row, column) of this epilogue's `epi_idx`-th sub-tile in the tile's grid of sub-tiles."""
        row, col = epi_order.get_hier_coord(epi_idx)
        return (row, col + col_offset)

    @cute.jit
    def _load_c_subtile(self, epi: EpilogueContext, bGS_sC, bGS_gC, sub_tile, c_index):
        """One warp loads C's epilogue sub-tile `sub_tile` into C buffer `c_buffer_base + c_index % c_stages`
        and arms that buffer's mbarrier with the sub-tile's bytes."""
        is_epi_warp = epi.is_epi_warp
        tma_atom_c = epi.tma_atom_c
        c_full = epi.c_full
        buffer_base = epi.c_buffer_base
        c_subtile_bytes = epi.c_subtile_bytes
        if is_epi_warp:
            buffer = buffer_base + c_index % self.c_stages
            with cute.arch.elect_one():
                cute.arch.mbarrier_arrive_and_expect_tx(c_full + buffer, c_subtile_bytes)
            cute.copy(
                tma_atom_c,
                bGS_gC[(None, sub_tile)],
                bGS_sC[(None, buffer)],
                tma_bar_ptr=c_full + buffer,
            )

    @cute.jit
    def _drain_stores(self, epi: EpilogueContext):
        """Wait until this epilogue's TMA stores have read their D staging buffers."""
        is_epi_warp = epi.is_epi_warp
        tma_store_pipeline = epi.store_pipeline
        if cutlass.const_expr(not self.varlen_m):  # grouped: plain stores, nothing in flight
            if is_epi_warp:
                tma_store_pipeline.producer_tail()
