"""hgemm-sm90's Hopper GEMM kernel, written in the CuTe DSL:

    D[m, n, l] = alpha * sum_k A[m, k, l] * B[n, k, l]  (+ beta * C[m, n, l] for instances that read C)

Structure (one CTA, `threads = 128 * (consumer warpgroups + 1)`):
- The last warpgroup is the producer; its first warp issues TMA loads of A and B k-tiles into a
  multi-stage shared-memory ring guarded by mbarriers (full: TMA transaction bytes landed; empty: every
  consumer warp of every CTA that shares the stage released it). In a cluster, CTAs in the same cluster row
  share A tiles and CTAs in the same column share B tiles: each loads a slice and multicasts it.
- Consumer warpgroups issue WGMMA from shared memory into fp32 register accumulators, then run the
  epilogue: registers -> alpha * acc (+ beta * C, C staged by TMA into shared memory ahead of use) ->
  D's dtype -> shared memory (stmatrix for 16-bit D) -> TMA store. Two schedules:
  * cooperative: all consumer warpgroups split one tile along M (one for 64-row tiles, three for 192,
    else two);
  * ping-pong: two consumer warpgroups own alternate tiles; named barriers order their mainloops and
    their epilogues, so one warpgroup's epilogue overlaps the other's mainloop.
- fp8 inputs either accumulate in the WGMMA accumulator for the whole K loop ("fast accumulation") or
  run each k-tile into a fresh accumulator and add it into the fp32 tile accumulator ("slow
  accumulation": the tensor cores' fp8 accumulation keeps fewer mantissa bits, so long K loses accuracy
  without it); two such k-tile buffers, where registers allow, overlap the promotion with WGMMAs.
- `setmaxnreg` moves registers from the producer warpgroup to the consumers (the split comes from
  codegen/validity.py's register plan).
- Persistent: a grid of at most `max_active_clusters` clusters walks all output tiles (tile_scheduler.py).
- Split-K (`KernelConfig.k_split`): the walk is over work units, `k_splits` per tile, each a contiguous
  range of the tile's k-tiles; the tile's last unit to finish sums the fp32 partials from a workspace in a
  fixed order and stores the tile (`HopperGemm._reduce_parts`; docs/KERNEL.md).
- Stream-K (`KernelConfig.stream_k`): whole waves of tiles as above, then the partial last wave's tiles
  cut by k-tiles into pieces shared out among all clusters, reduced the same way (docs/KERNEL.md).
- Grouped GEMM (`KernelConfig.varlen_m`, `gather_a`, `varlen_k`): one launch for G groups whose M or K
  differs, with the sizes read on the device; the walk over groups, the grouped producers and the
  k-tile trims are in grouped.py (`GroupedWalks`, which `HopperGemm` inherits); the row-bounded store of
  a grouped M tile is `HopperGemm._copy_subtile_rows` in epilogue.py (docs/KERNEL.md "Grouped GEMM").
- Programmatic dependent launch: the producer waits for the previous grid (griddepcontrol.wait) before
  its first load of anything the previous grid may write, and signals dependents (launch_dependents) once
  it has issued its last load, so that the next grid's set-up overlaps this one's tail. Both are no-ops
  unless the launch opts in. The plain walk's `prefetch_operand` (1: A, 2: B; 0: none) names an operand
  the launch declared not written by the previous grid (a model's weights): the producer loads that
  operand's share of its first ring fill before the wait (`HopperGemm._produce_tiles`).

Partial tiles are handled by TMA itself: loads outside a tensor are zero-filled (a partial last k-tile adds
zeros) and stores outside D are dropped. So M, N, K need no tile multiple; only TMA's 16-byte alignment of
base pointers, leading dimensions and batch strides remains (checked by the runtime).

Files: this one holds the configuration, the host side, the kernel's set-up and the per-tile consumer
loop. The dense producer is in producer.py (`Producers`); the consumers' k-loops, the fp8 promotion and the
ping-pong turns in mainloop.py (`Mainloops`); the epilogue and the split-K / stream-K reduction in
epilogue.py (`Epilogues`); the grouped GEMM's walks and producers in grouped.py (`GroupedWalks`). They are
mixins that `HopperGemm` inherits, so each part reads the configuration from `self`, and a cubin is the
same whichever file a method is in (all 674 rebuilt byte-identical when they were split out, session 48).
`HopperGemm` and its host-entry subclasses below stay in this module: the DSL names each kernel after the
module and class of the object it was traced on (`kernel_cutlass_kernel_codegenkernelsgemm_sm90HopperGemm
WithC_object_at_...`), so moving them would rename every kernel, change every cubin's bytes and leave the
tuning table timed on other cubins (runtime/tuning.py `kernels_digest`).

Compiler facts that constrain this file (ptxas serializing WGMMAs, the launch bound per WGMMA, spills from
unrolling) are in docs/KERNEL.md.

The host entries take only tensors, scalars and a stream, so their launch is easy to reproduce from the
manifest (docs/CONTRACT.md). Everything else is compile-time (one cubin per instance).
"""

from dataclasses import dataclass

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils as utils
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass import Float32, Int32
from cutlass.cute.nvgpu import cpasync, warpgroup
from cutlass.pipeline import pipeline_init_arrive, pipeline_init_wait

from runtime.scheduling import STREAM_UNITS_PER_TILE

from .barriers import (
    EPI_TURN_BARRIER,
    MMA_TURN_BARRIER,
    THREADS_PER_WARPGROUP,
)
from .epilogue import Epilogues
from .grouped import GroupedWalks
from .mainloop import Mainloops
from .producer import Producers
from .tile_scheduler import (
    cluster_tile_coord,
    split_unit,
    stream_range,
    stream_split,
    stream_unit,
    stream_unit_count,
    varlen_locate,
)

# The producer issues griddepcontrol.wait before its first load of anything the previous grid may write
# (every other global access follows one of its loads), so a launch with programmatic stream
# serialization cannot read stale data. Recorded
# in each manifest record as "pdl": the runtime refuses pdl=True for kernels without it.
KERNEL_WAITS_FOR_PREDECESSOR = True


def _one_stage(staged):
    """Stage 0 of a staged swizzled shared-memory layout (an A/B ring's (rows, k, stages), an epilogue's
    (rows, cols, stages)): what a TMA atom's box and a stage's byte count are made from.

    Sliced on the layout under the swizzle and composed again: the DSL's own slice of the composed layout
    aborts the process (nvidia-cutlass-dsl 4.8.1, no message) when the rows span an odd number of 8-row
    swizzle atoms (tile N = 24, 72, 88, ...)."""
    return cute.make_composed_layout(staged.inner, staged.offset, cute.slice_(staged.outer, (None, None, 0)))


@dataclass(frozen=True)
class KernelConfig:
    """Everything compile-time about one instance, in DSL terms (built by codegen/dsl.py from a GemmSpec)."""

    acc_dtype: type  # A's, B's and D's element types come from the tensors the kernel is traced with
    tile_mnk: tuple[int, int, int]
    cluster_mn: tuple[int, int]
    ab_stages: int
    epi_stages: int  # D staging buffers
    epi_tile: tuple[int, int]
    c_dtype: type | None = None  # the epilogue reads C (D = alpha * acc + beta * C) iff set
    c_stages: int = 0  # C staging buffers (TMA loads ahead of the epilogue sub-tile that uses them)
    pingpong: bool = False  # two consumer warpgroups alternate whole tiles (else: they split one tile)
    # Register plan (codegen/validity.py register_plan): consumer warpgroups per CTA (cooperative: one per
    # 64-row atom row of the tile, at most 3; ping-pong: 2) and the setmaxnreg split.
    consumer_warpgroups: int = 2
    # How the warpgroups sharing a tile split it, in WGMMA atoms along (M, N): (warpgroups, 1) for
    # cooperative tiles, except (1, 2) for cooperative 192 x 256 (validity.mma_atom_layout); unused under
    # ping-pong, where each warpgroup owns its tile.
    atom_layout_mn: tuple[int, int] = (2, 1)
    producer_registers: int = 40
    consumer_registers: int = 232
    # fp8 slow accumulation: each k-tile's WGMMAs go into one of these per-k-tile accumulators, which is
    # then added ("promoted") into the fp32 tile accumulator. 0: no promotion (fast accumulation, 16-bit).
    k_acc_buffers: int = 0
    # Split-K (cooperative): the host entry takes `k_splits` and a workspace pointer; each cluster tile's
    # k-tiles are cut into `k_splits` contiguous ranges, one work unit each (every CTA of the cluster runs
    # the same range of its own tile), reduced per CTA tile in a fixed order by the unit that finishes
    # last (`HopperGemm._reduce_parts`).
    k_split: bool = False
    # Stream-K (cooperative): the host entry takes a workspace pointer; the last tiles of the walk are
    # shared out among all clusters of the grid by k-tiles (tile_scheduler.stream_split), so a problem
    # whose tiles do not fill whole waves still keeps every SM busy; pieces of a tile are reduced as
    # split-K's units are (`HopperGemm._reduce_parts`).
    stream_k: bool = False
    # Grouped GEMM, variable M per group: the host entry takes `cu_seqlens_m` (int32[G + 1] row offsets, a
    # device pointer); B's batch mode counts the groups; A and D hold all groups' rows, and each D
    # sub-tile goes from its staging buffer to global memory in 16-byte vectors with the group's row
    # bound (no TMA store: it is bounded by the whole tensor only).
    varlen_m: bool = False
    # Grouped GEMM, variable K per group (the weight gradient): the host entry takes `cu_seqlens_k`
    # (int32[G + 1] K offsets); D's batch mode counts the groups; A and B hold all groups' K ranges. A tile
    # of group g runs the k-tiles of [s_g, s_g+1); the last one's columns past s_g+1 are zeroed in the A
    # and B stage before its WGMMAs (they belong to the next group).
    varlen_k: bool = False
    # Grouped with gathered A (varlen M only): row i of the groups' concatenated A is row a_idx[i] of the A
    # given (a device int32 array, host entry argument `a_idx`). Cluster 1x1: A is loaded with cp.async by
    # all four producer warps (one TMA box cannot hold scattered rows; `GroupedWalks._produce_gathered`).
    # Cluster 1x2 under varlen M: a pair on the same rows, each CTA loading half of them as one-row TMA
    # boxes multicast to both (`GroupedWalks._produce_gathered_pair`). B stays on TMA.
    gather_a: bool = False

    @property
    def threads(self) -> int:
        return THREADS_PER_WARPGROUP * (self.consumer_warpgroups + 1)


def make_gemm(config: KernelConfig) -> "HopperGemm":
    """The kernel object for a configuration: its host entry's signature depends on whether C is read,
    on split-K (which takes the split count and a workspace) and on the grouped forms (their offsets and
    gather indices)."""
    with_c = config.c_dtype is not None
    if config.k_split:
        return HopperGemmSplitK(config)
    if config.stream_k:
        return HopperGemmStreamK(config)
    if config.varlen_m and config.gather_a:
        return (HopperGemmGatherAWithC if with_c else HopperGemmGatherA)(config)
    if config.varlen_m:
        return (HopperGemmVarlenMWithC if with_c else HopperGemmVarlenM)(config)
    if config.varlen_k and config.gather_a:
        if with_c:
            raise ValueError("gathered A over K with C: not built (codegen/validity.py gather_a)")
        return HopperGemmGatherK(config)
    if config.varlen_k:
        return (HopperGemmVarlenKWithC if with_c else HopperGemmVarlenK)(config)
    return (HopperGemmWithC if with_c else HopperGemm)(config)


class HopperGemm(GroupedWalks, Producers, Epilogues, Mainloops):
    """A warp-specialized, persistent TMA + WGMMA GEMM for one compile-time configuration: D = alpha*A@B^T."""

    def __init__(self, config: KernelConfig):
        self.cfg = config
        self.tile_mnk = config.tile_mnk
        self.cluster_mn = config.cluster_mn
        self.acc_dtype = config.acc_dtype
        self.pingpong = config.pingpong
        self.num_consumer_wgs = config.consumer_warpgroups
        # WGMMA atoms per tile: ping-pong gives each warpgroup a whole tile, cooperative splits the tile
        # along M, or along N (192 x 256: each warpgroup owns 192 x 128).
        self.atom_layout_mnk = (1, 1, 1) if self.pingpong else (*config.atom_layout_mn, 1)
        self.n_split = self.atom_layout_mnk[1] > 1
        # Threads that share one tile's mainloop.
        self.tile_threads = THREADS_PER_WARPGROUP * (1 if self.pingpong else self.num_consumer_wgs)
        # The epilogue belongs to one warpgroup when that warpgroup owns its accumulator's region alone
        # (ping-pong: a whole tile; N split: a column half, each with its own staging buffers). Otherwise
        # all consumer warpgroups store each sub-tile together.
        self.wg_epilogue = self.pingpong or self.n_split
        self.epi_threads = THREADS_PER_WARPGROUP if self.wg_epilogue else self.tile_threads
        self.epi_buffer_sets = self.atom_layout_mnk[1]  # staging buffer sets: one per column part
        self.threads_per_cta = config.threads
        self.producer_warp = self.num_consumer_wgs * 4  # first warp of the producer warpgroup
        self.ab_stages = config.ab_stages
        self.epi_stages = config.epi_stages
        self.c_stages = config.c_stages
        self.epi_tile = config.epi_tile
        self.k_acc_buffers = config.k_acc_buffers
        self.fp8_slow_accum = config.k_acc_buffers > 0
        self.num_mcast_a = self.cluster_mn[1]  # A tiles are shared along a cluster row (same M)
        # Gathered A in a 1x2 pair: each CTA loads half of the tile's rows by one-row TMA boxes, multicast.
        self.gather_pair = config.gather_a and config.varlen_m and self.cluster_mn == (1, 2)
        self.num_mcast_b = self.cluster_mn[0]  # B tiles are shared along a cluster column (same N)
        self.buffer_align_bytes = 1024
        self.k_split = config.k_split
        self.stream_k = config.stream_k
        self.varlen_m = config.varlen_m
        self.varlen_k = config.varlen_k
        self.gather_a = config.gather_a
        # Edge tiles moved inside the tensor (`tile_scheduler.edge_origin`): for the plain walk without C.
        # Not with C, because C may be D itself (the in-place update): a moved tile would read C rows its
        # neighbour may already have overwritten. Not for the grouped walks, whose tiles are bounded by
        # their group's rows or K range, not by the tensor's. Not for stream-K: a moved tile and its
        # neighbour store the same rows, and when one is cut into pieces and the other is not, their
        # sums are rounded differently, so the bits there would depend on which store lands last.
        self.clamp_edges = config.c_dtype is None and not (
            config.stream_k or config.varlen_m or config.varlen_k or config.gather_a
        )

    # ------------------------------------------------------------------ host side
    @cute.jit
    def __call__(
        self,
        mA: cute.Tensor,
        mB: cute.Tensor,
        mD: cute.Tensor,
        alpha: Float32,
        raster_along_m: Int32,
        group_size: Int32,
        prefetch_operand: Int32,
        max_active_clusters: Int32,
        stream: cuda.CUstream,
    ):
        """mA: (M, K, L), mB: (N, K, L), mD: (M, N, L), each with one unit-stride mode."""
        self._launch(
            mA,
            mB,
            mD,
            None,
            alpha,
            None,
            raster_along_m,
            group_size,
            max_active_clusters,
            stream,
            prefetch_operand=prefetch_operand,
        )

    def _launch(
        self,
        mA,
        mB,
        mD,
        mC,
        alpha,
        beta,
        raster_along_m,
        group_size,
        max_active_clusters,
        stream,
        k_splits=None,
        workspace=None,
        cu_seqlens_m=None,
        a_idx=None,
        prefetch_operand=None,
    ):
        """Build TMA descriptors, size the persistent grid and launch (traced inside a host entry).

        The grid is `(cluster_m * P, cluster_n, 1)` with `P = min(work units, max_active_clusters)`; a
        work unit is a cluster tile, or under split-K one of its `S = clamp(k_splits, 1, k-tiles)` k-ranges.
        Grouped (varlen M): the group sizes are on the device, so the work units are bounded from the
        total rows M and the group count G: sum_g ceil(rows_g / R) <= (M + G * (R - 1)) // R cluster rows
        of R = tile M * cluster M rows each.
        """
        self.a_dtype = mA.element_type
        self.b_dtype = mB.element_type
        self.d_dtype = mD.element_type
        self.c_dtype = mC.element_type if mC is not None else None
        self.a_layout = utils.LayoutEnum.from_tensor(mA)
        self.b_layout = utils.LayoutEnum.from_tensor(mB)
        self.d_layout = utils.LayoutEnum.from_tensor(mD)
        self.c_layout = utils.LayoutEnum.from_tensor(mC) if mC is not None else None

        self.tiled_mma = sm90_utils.make_trivial_tiled_mma(
            self.a_dtype,
            self.b_dtype,
            self.a_layout.sm90_mma_major_mode(),
            self.b_layout.sm90_mma_major_mode(),
            self.acc_dtype,
            self.atom_layout_mnk,
            tiler_mn=(64, self.tile_mnk[1] // self.atom_layout_mnk[1]),
        )
        if cutlass.const_expr(self.tile_mnk[2] % cute.size(self.tiled_mma.shape_mnk, mode=[2]) != 0):
            raise ValueError(f"tile K {self.tile_mnk[2]} is not a multiple of the MMA K")
        self.cta_layout_mnk = cute.make_layout((*self.cluster_mn, 1))
        a_smem_staged, b_smem_staged = self._operand_smem_layouts()
        epi_smem_staged = sm90_utils.make_smem_layout_epi(
            self.d_dtype, self.d_layout, self.epi_tile, self.epi_stages * self.epi_buffer_sets
        )
        c_smem_staged = None
        if cutlass.const_expr(mC is not None):
            c_smem_staged = sm90_utils.make_smem_layout_epi(
                self.c_dtype, self.c_layout, self.epi_tile, self.c_stages * self.epi_buffer_sets
            )

        # Gathered A is loaded row by row: with cp.async from the tensor itself (no descriptor) in a 1x1
        # cluster, by one-row TMA boxes in a pair (`GroupedWalks._produce_gathered_pair`).
        tma_atom_a, tma_tensor_a = None, mA
        if cutlass.const_expr(not self.gather_a):
            tma_atom_a, tma_tensor_a = self._make_load_tma(
                mA, a_smem_staged, (self.tile_mnk[0], self.tile_mnk[2]), self.num_mcast_a
            )
        elif cutlass.const_expr(self.gather_pair):
            # One row of a k-tile (128 bytes along K: codegen/validity.py `gather_a`), with the stage's
            # swizzle; multicast by mask at issue, so the atom does not split the box between the CTAs.
            row_layout = cute.make_composed_layout(
                a_smem_staged.inner, 0, cute.make_layout((1, self.tile_mnk[2]), stride=(self.tile_mnk[2], 1))
            )
            tma_atom_a, tma_tensor_a = cpasync.make_tiled_tma_atom(
                cpasync.CopyBulkTensorTileG2SMulticastOp(),
                mA,
                row_layout,
                (1, self.tile_mnk[2]),
                num_multicast=1,
            )
        tma_atom_b, tma_tensor_b = self._make_load_tma(
            mB, b_smem_staged, (self.tile_mnk[1], self.tile_mnk[2]), self.num_mcast_b
        )
        # Grouped instances store D through the tensor itself (no descriptor: `_epilogue`).
        tma_atom_d, tma_tensor_d = None, mD
        if cutlass.const_expr(not self.varlen_m):
            tma_atom_d, tma_tensor_d = cpasync.make_tiled_tma_atom(
                cpasync.CopyBulkTensorTileS2GOp(),
                mD,
                _one_stage(epi_smem_staged),
                self.epi_tile,
            )
        tma_atom_c, tma_tensor_c = None, None
        if cutlass.const_expr(mC is not None):
            tma_atom_c, tma_tensor_c = cpasync.make_tiled_tma_atom(
                cpasync.CopyBulkTensorTileG2SOp(),
                mC,
                _one_stage(c_smem_staged),
                self.epi_tile,
            )

        # Persistent grid: one cluster per (cluster_m x cluster_n) block of output tiles, capped by how
        # many clusters fit on the device at once.
        cm, cn = self.cluster_mn
        tiles_m = (cute.size(mD, mode=[0]) + self.tile_mnk[0] - 1) // self.tile_mnk[0]
        tiles_n = (cute.size(mD, mode=[1]) + self.tile_mnk[1] - 1) // self.tile_mnk[1]
        cluster_tiles = ((tiles_m + cm - 1) // cm) * ((tiles_n + cn - 1) // cn) * cute.size(mD, mode=[2])
        if cutlass.const_expr(self.varlen_m):
            rows = self.tile_mnk[0] * cm
            groups = cute.size(mB, mode=[2])
            cluster_rows = (cute.size(mD, mode=[0]) + groups * (rows - 1)) // rows
            cluster_tiles = cluster_rows * ((tiles_n + cn - 1) // cn)
        work_units = cluster_tiles
        if cutlass.const_expr(self.k_split):
            k_tiles = (cute.size(mA, mode=[1]) + self.tile_mnk[2] - 1) // self.tile_mnk[2]
            work_units = cluster_tiles * cutlass.max(cutlass.min(k_splits, k_tiles), 1)
        if cutlass.const_expr(self.stream_k):
            # Up to STREAM_UNITS_PER_TILE clusters per tile: a stream tile is cut into a few pieces only.
            k_tiles = (cute.size(mA, mode=[1]) + self.tile_mnk[2] - 1) // self.tile_mnk[2]
            work_units = cluster_tiles * cutlass.min(k_tiles, STREAM_UNITS_PER_TILE)
        num_clusters = cutlass.min(work_units, max_active_clusters)

        # Shared memory: the A/B ring's full/empty mbarriers, the C buffers' mbarriers (if C is read), then
        # the 1024-byte aligned buffers (128-byte swizzled TMA tiles must be).
        def buffer(dtype, layout):
            return cute.struct.Align[
                cute.struct.MemRange[dtype, cute.cosize(layout)], self.buffer_align_bytes
            ]

        fields = {"ab_full_empty": cute.struct.MemRange[cutlass.Int64, self.ab_stages * 2]}
        if cutlass.const_expr(mC is not None):
            fields["c_full"] = cute.struct.MemRange[cutlass.Int64, self.c_stages * self.epi_buffer_sets]
        fields["sA"] = buffer(self.a_dtype, a_smem_staged)
        fields["sB"] = buffer(self.b_dtype, b_smem_staged)
        fields["sD"] = buffer(self.d_dtype, epi_smem_staged)
        if cutlass.const_expr(mC is not None):
            fields["sC"] = buffer(self.c_dtype, c_smem_staged)
        if cutlass.const_expr(self.k_split or self.stream_k):
            fields["split_arrivals"] = cute.struct.MemRange[Int32, 1]  # broadcast of the arrival count
        SharedStorage = cute.struct(type("SharedStorage", (), {"__annotations__": fields}))
        self.shared_storage = SharedStorage

        self.kernel(
            tma_atom_a,
            tma_tensor_a,
            tma_atom_b,
            tma_tensor_b,
            tma_atom_d,
            tma_tensor_d,
            tma_atom_c,
            tma_tensor_c,
            alpha,
            beta,
            raster_along_m,
            group_size,
            k_splits,
            workspace,
            cu_seqlens_m,
            a_idx,
            prefetch_operand,
            self.tiled_mma,
            self.cta_layout_mnk,
            a_smem_staged,
            b_smem_staged,
            epi_smem_staged,
            c_smem_staged,
        ).launch(
            grid=(cm * num_clusters, cn, 1),
            block=[self.threads_per_cta, 1, 1],
            cluster=(cm, cn, 1),
            min_blocks_per_mp=1,
            stream=stream,
        )

    def _operand_smem_layouts(self):
        """Swizzled shared-memory layouts of the A and B stages, for WGMMA (K- or MN-major)."""
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

        return (
            operand_layout(self.a_layout, self.a_dtype, tile_m),
            operand_layout(self.b_layout, self.b_dtype, tile_n),
        )

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
            _one_stage(smem_staged),
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
        tma_atom_c,
        mC_mnl,
        alpha: Float32,
        beta,
        raster_along_m: Int32,
        group_size: Int32,
        k_splits,
        workspace,
        cu_seqlens_m,
        a_idx,
        prefetch_operand,
        tiled_mma: cute.TiledMma,
        cta_layout_mnk: cute.Layout,
        a_smem_staged: cute.ComposedLayout,
        b_smem_staged: cute.ComposedLayout,
        epi_smem_staged: cute.ComposedLayout,
        c_smem_staged,
    ):
        has_c = cutlass.const_expr(mC_mnl is not None)
        tidx, _, _ = cute.arch.thread_idx()
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        warp_group_idx = cute.arch.make_warp_uniform(tidx // THREADS_PER_WARPGROUP)
        is_producer = warp_group_idx == self.num_consumer_wgs

        if warp_idx == self.producer_warp:
            if cutlass.const_expr(not self.gather_a or self.gather_pair):
                cpasync.prefetch_descriptor(tma_atom_a)
            cpasync.prefetch_descriptor(tma_atom_b)
            if cutlass.const_expr(not self.varlen_m):
                cpasync.prefetch_descriptor(tma_atom_d)
            if cutlass.const_expr(has_c):
                cpasync.prefetch_descriptor(tma_atom_c)

        cta_rank_in_cluster = cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster())
        cluster_coord_mnk = cta_layout_mnk.get_flat_coord(cta_rank_in_cluster)

        a_smem = _one_stage(a_smem_staged)
        b_smem = _one_stage(b_smem_staged)
        tma_copy_bytes = cute.size_in_bytes(self.a_dtype, a_smem) + cute.size_in_bytes(self.b_dtype, b_smem)
        # A stage is full when the TMA bytes landed and every arrival was counted: one arrival of the TMA
        # thread, plus (gathered A) one per producer thread, when its cp.async copies of the stage land.
        stage_arrivals = 1
        if cutlass.const_expr(self.gather_a):
            tma_copy_bytes = cute.size_in_bytes(self.b_dtype, b_smem)
            stage_arrivals = 1 + THREADS_PER_WARPGROUP
        if cutlass.const_expr(self.gather_pair):
            # Both halves of A arrive as multicast TMA bytes (each CTA of the pair sends its half to both).
            tma_copy_bytes = cute.size_in_bytes(self.b_dtype, b_smem) + cute.size_in_bytes(
                self.a_dtype, a_smem
            )
            stage_arrivals = 1

        smem = utils.SmemAllocator()
        storage = smem.allocate(self.shared_storage)

        # Each consumer warp releases a stage to every CTA that multicast into it (its row and column);
        # under ping-pong a stage belongs to one warpgroup's tile.
        mcast_peers = self.num_mcast_a + self.num_mcast_b - 1
        ab_pipeline = pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.ab_full_empty.data_ptr(),
            num_stages=self.ab_stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, stage_arrivals),
            consumer_group=pipeline.CooperativeGroup(
                pipeline.Agent.Thread, mcast_peers * (self.tile_threads // 32)
            ),
            tx_count=tma_copy_bytes,
            cta_layout_vmnk=cute.make_layout((1, *cta_layout_mnk.shape)),
            defer_sync=True,
        )
        c_full = None
        if cutlass.const_expr(has_c):
            c_full = storage.c_full.data_ptr()
            # One "C sub-tile landed" barrier per C buffer; the TMA's transaction bytes complete it.
            if warp_idx == 0:
                with cute.arch.elect_one():
                    for s in cutlass.range_constexpr(self.c_stages * self.epi_buffer_sets):
                        cute.arch.mbarrier_init(c_full + s, 1)
            cute.arch.mbarrier_init_fence()
        # Barrier init must be visible cluster-wide before any peer multicasts into this CTA.
        pipeline_init_arrive(cluster_shape_mn=self.cluster_mn, is_relaxed=True)

        sA = storage.sA.get_tensor(a_smem_staged.outer, swizzle=a_smem_staged.inner)
        sB = storage.sB.get_tensor(b_smem_staged.outer, swizzle=b_smem_staged.inner)
        sD = storage.sD.get_tensor(epi_smem_staged.outer, swizzle=epi_smem_staged.inner)
        sC = None
        if cutlass.const_expr(has_c):
            sC = storage.sC.get_tensor(c_smem_staged.outer, swizzle=c_smem_staged.inner)

        # Global tiles: (bM, bK, tiles_m, tiles_k, L), (bN, bK, tiles_n, tiles_k, L),
        # (bM, bN, tiles_m, tiles_n, L)
        gA_mkl = cute.local_tile(mA_mkl, cute.slice_(self.tile_mnk, (None, 0, None)), (None, None, None))
        gB_nkl = cute.local_tile(mB_nkl, cute.slice_(self.tile_mnk, (0, None, None)), (None, None, None))
        gD_mnl = cute.local_tile(mD_mnl, cute.slice_(self.tile_mnk, (None, None, 0)), (None, None, None))
        gC_mnl = None
        if cutlass.const_expr(has_c):
            gC_mnl = cute.local_tile(mC_mnl, cute.slice_(self.tile_mnk, (None, None, 0)), (None, None, None))

        # TMA partitions; with multicast each CTA of a cluster row/column loads its slice of the tile.
        tAsA, tAgA = None, None
        if cutlass.const_expr(not self.gather_a):
            tAsA, tAgA = self._operand_tiles(tma_atom_a, gA_mkl, sA, "a", cta_layout_mnk, cluster_coord_mnk)
        tBsB, tBgB = self._operand_tiles(tma_atom_b, gB_nkl, sB, "b", cta_layout_mnk, cluster_coord_mnk)

        k_tile_cnt = cute.size(gA_mkl, mode=[3])

        # Persistent schedule (see tile_scheduler.py). Every CTA of a cluster walks the same sequence.
        cm, cn = self.cluster_mn
        clusters_m = (cute.size(gD_mnl, mode=[2]) + cm - 1) // cm
        clusters_n = (cute.size(gD_mnl, mode=[3]) + cn - 1) // cn
        cluster_tiles = clusters_m * clusters_n * cute.size(gD_mnl, mode=[4])
        cluster_id = cute.arch.cluster_idx()[0]
        num_clusters = cute.arch.cluster_dim()[0]
        # Split-K: S work units per tile (the host sized the grid with the same clamp).
        splits = 1
        split_arrivals = None
        if cutlass.const_expr(self.k_split):
            splits = cutlass.max(cutlass.min(k_splits, k_tile_cnt), 1)
            split_arrivals = storage.split_arrivals.data_ptr()
        work_units = cluster_tiles * splits  # the walk ends where its linear index reaches this
        if cutlass.const_expr(self.stream_k):
            # Stream-K: `splits` carries the walk's parameters instead of a split count (`_plain_unit`),
            # and the walk of this cluster ends after its own unit count (clusters hold different counts).
            split_arrivals = storage.split_arrivals.data_ptr()
            data_parallel, stream_tiles, sharers = stream_split(cluster_tiles, k_tile_cnt, num_clusters)
            if workspace.toint() == 0:
                # Launched without a workspace (allowed: gemm() on a stream captured before it has one):
                # every tile runs whole.
                data_parallel, stream_tiles = cluster_tiles, Int32(0)
            lo, hi = stream_range(cluster_id, sharers, stream_tiles, k_tile_cnt)
            splits = (cluster_id, num_clusters, data_parallel, stream_tiles, sharers, lo, hi)
            units = stream_unit_count(data_parallel, cluster_id, num_clusters, lo, hi, k_tile_cnt)
            work_units = cluster_id + units * num_clusters
        # Grouped (varlen M): the groups' row offsets, int32[G + 1] (G = B's batch extent).
        seqlens = None
        if cutlass.const_expr(self.varlen_m):
            seqlens = cute.make_tensor(cu_seqlens_m, cute.make_layout(cute.size(mB_nkl, mode=[2]) + 1))
        if cutlass.const_expr(self.varlen_k):  # the groups' K offsets, int32[G + 1] (G = D's batch extent)
            seqlens = cute.make_tensor(cu_seqlens_m, cute.make_layout(cute.size(mD_mnl, mode=[2]) + 1))

        pipeline_init_wait(cluster_shape_mn=self.cluster_mn)

        if is_producer:
            cute.arch.setmaxregister_decrease(self.cfg.producer_registers)

        if cutlass.const_expr(self.gather_a and self.varlen_k):
            if is_producer:
                cute.arch.griddepcontrol_wait()
                producer_state = pipeline.make_pipeline_state(
                    pipeline.PipelineUserType.Producer, self.ab_stages
                )
                producer_state = self._produce_gathered_k(
                    ab_pipeline,
                    producer_state,
                    mA_mkl,
                    sA,
                    tma_atom_b,
                    mB_nkl,
                    sB,
                    seqlens,
                    cute.make_tensor(a_idx, cute.make_layout(cute.size(mB_nkl, mode=[1]))),
                    work_units,
                    clusters_m,
                    clusters_n,
                    cluster_id,
                    num_clusters,
                    raster_along_m,
                    group_size,
                    tidx,
                    warp_idx,
                )
                cute.arch.griddepcontrol_launch_dependents()  # every load is issued
                if warp_idx == self.producer_warp:
                    ab_pipeline.producer_tail(producer_state)
        elif cutlass.const_expr(self.gather_a):
            if is_producer:
                cute.arch.griddepcontrol_wait()
                producer_state = pipeline.make_pipeline_state(
                    pipeline.PipelineUserType.Producer, self.ab_stages
                )
                if cutlass.const_expr(self.gather_pair):
                    producer_state = self._produce_gathered_pair(
                        ab_pipeline,
                        producer_state,
                        tma_atom_a,
                        mA_mkl,
                        storage.sA.data_ptr(),
                        a_smem_staged.inner,
                        tma_atom_b,
                        tBgB,
                        tBsB,
                        seqlens,
                        cute.make_tensor(a_idx, cute.make_layout(cute.size(mD_mnl, mode=[0]))),
                        k_tile_cnt,
                        clusters_n,
                        cluster_id,
                        num_clusters,
                        cluster_coord_mnk,
                        raster_along_m,
                        group_size,
                        tidx,
                        warp_idx,
                    )
                else:
                    producer_state = self._produce_gathered(
                        ab_pipeline,
                        producer_state,
                        mA_mkl,
                        sA,
                        tma_atom_b,
                        tBgB,
                        tBsB,
                        seqlens,
                        cute.make_tensor(a_idx, cute.make_layout(cute.size(mD_mnl, mode=[0]))),
                        k_tile_cnt,
                        clusters_n,
                        cluster_id,
                        num_clusters,
                        cluster_coord_mnk,
                        raster_along_m,
                        group_size,
                        tidx,
                        warp_idx,
                    )
                cute.arch.griddepcontrol_launch_dependents()  # every load is issued
                if warp_idx == self.producer_warp:
                    ab_pipeline.producer_tail(producer_state)
        elif warp_idx == self.producer_warp:
            a_mcast_mask = cute.make_layout_image_mask(cta_layout_mnk, cluster_coord_mnk, mode=1)
            b_mcast_mask = cute.make_layout_image_mask(cta_layout_mnk, cluster_coord_mnk, mode=0)
            a_mcast_mask = a_mcast_mask if self.num_mcast_a > 1 else 0
            b_mcast_mask = b_mcast_mask if self.num_mcast_b > 1 else 0

            producer_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.ab_stages)
            if cutlass.const_expr(self.varlen_m):
                # Programmatic dependent launch: nothing of the previous grid may be read before it is done.
                cute.arch.griddepcontrol_wait()
                producer_state = self._produce_grouped(
                    ab_pipeline,
                    producer_state,
                    tma_atom_a,
                    mA_mkl,
                    sA,
                    tAsA,
                    tma_atom_b,
                    tBgB,
                    tBsB,
                    a_mcast_mask,
                    b_mcast_mask,
                    seqlens,
                    k_tile_cnt,
                    clusters_n,
                    cluster_id,
                    num_clusters,
                    cluster_coord_mnk,
                    cta_layout_mnk,
                    raster_along_m,
                    group_size,
                )
            elif cutlass.const_expr(self.varlen_k):
                cute.arch.griddepcontrol_wait()
                producer_state = self._produce_grouped_k(
                    ab_pipeline,
                    producer_state,
                    tma_atom_a,
                    mA_mkl,
                    sA,
                    tma_atom_b,
                    mB_nkl,
                    sB,
                    seqlens,
                    work_units,
                    clusters_m,
                    clusters_n,
                    cluster_id,
                    num_clusters,
                    cluster_coord_mnk,
                    cta_layout_mnk,
                    raster_along_m,
                    group_size,
                )
            else:
                producer_state = self._produce_tiles(
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
                    prefetch_operand,
                    k_tile_cnt,
                    splits,
                    work_units,
                    clusters_m,
                    clusters_n,
                    cluster_id,
                    num_clusters,
                    cluster_coord_mnk,
                    raster_along_m,
                    group_size,
                    (mA_mkl, sA, mB_nkl, sB, cta_layout_mnk),
                )
            # Programmatic dependent launch: every load is issued, so the next grid may start its set-up.
            cute.arch.griddepcontrol_launch_dependents()
            # Do not exit while peers may still multicast into / release to this CTA's stages.
            ab_pipeline.producer_tail(producer_state)

        if not is_producer:
            cute.arch.setmaxregister_increase(self.cfg.consumer_registers)
            self._consume(
                ab_pipeline,
                tiled_mma,
                tma_atom_d,
                tma_atom_c,
                c_full,
                alpha,
                beta,
                sA,
                sB,
                sD,
                sC,
                mD_mnl,
                mC_mnl,
                gD_mnl,
                gC_mnl,
                k_tile_cnt,
                work_units,
                splits,
                workspace,
                split_arrivals,
                seqlens,
                cute.size(mB_nkl, mode=[1]),  # the groups' total K (a gathered A has its own K extent)
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
        tma_atom_c,
        c_full,
        alpha: Float32,
        beta,
        sA: cute.Tensor,
        sB: cute.Tensor,
        sD: cute.Tensor,
        sC,
        mD_mnl: cute.Tensor,
        mC_mnl,
        gD_mnl: cute.Tensor,
        gC_mnl,
        k_tile_cnt: Int32,
        work_units: Int32,
        splits,
        workspace,
        split_arrivals,
        seqlens,
        total_k,
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
        """Consumer warpgroups: walk this CTA's tiles; for each, the WGMMA mainloop, then the epilogue."""
        cm, cn = self.cluster_mn
        # The thread's index among the threads sharing a tile (one warpgroup under ping-pong).
        tile_tidx = tidx % self.tile_threads
        thr_mma = tiled_mma.get_slice(tile_tidx)
        tCsA = thr_mma.partition_A(sA)
        tCsB = thr_mma.partition_B(sB)
        tCrA = tiled_mma.make_fragment_A(tCsA)
        tCrB = tiled_mma.make_fragment_B(tCsB)
        tCgD = thr_mma.partition_C(gD_mnl)
        accumulators = cute.make_rmem_tensor(tCgD.shape[:3], self.acc_dtype)
        # Slow accumulation: per-k-tile accumulators that are promoted into `accumulators`.
        k_accs = tuple(
            cute.make_rmem_tensor(tCgD.shape[:3], self.acc_dtype) for _ in range(self.k_acc_buffers)
        )
        # Both mainloops take the same arguments; the configuration picks one at trace time.
        mainloop = self._mainloop
        if cutlass.const_expr(self.fp8_slow_accum):
            mainloop = self._promoted_mainloop

        epi = self._make_epilogue(
            tiled_mma,
            accumulators,
            tma_atom_d,
            tma_atom_c,
            c_full,
            alpha,
            beta,
            sD,
            sC,
            gD_mnl,
            gC_mnl,
            tidx,
            warp_idx,
            warp_group_idx,
        )
        wg = warp_group_idx if self.pingpong else 0

        read_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.ab_stages)
        release_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.ab_stages)
        epi_buffer = Int32(0)  # next D staging buffer
        c_count = Int32(0)  # C sub-tiles loaded so far through the shared C buffers (phase tracking)
        linear = cluster_id
        tile_stride = num_clusters
        if cutlass.const_expr(self.pingpong):
            # Warpgroup w takes every other tile of this CTA's sequence, starting with the w-th; the
            # ring's stages and the C buffers are shared, so skip what the other warpgroup consumes.
            linear = cluster_id + warp_group_idx * num_clusters
            tile_stride = 2 * num_clusters
            # Warpgroup 1 starts one tile (k-tiles, C sub-tiles) into the shared sequences. Written as
            # arithmetic (x0 for warpgroup 0) rather than a branch around the pipeline states.
            read_state.advance(k_tile_cnt * warp_group_idx)
            release_state.advance(k_tile_cnt * warp_group_idx)
            c_count += epi.tiles_per_tile * warp_group_idx
            if warp_group_idx == 0:
                # Warpgroup 0 starts: grant itself the first mainloop and epilogue turns.
                cute.arch.barrier_arrive(
                    barrier_id=MMA_TURN_BARRIER, number_of_threads=2 * THREADS_PER_WARPGROUP
                )
                cute.arch.barrier_arrive(
                    barrier_id=EPI_TURN_BARRIER, number_of_threads=2 * THREADS_PER_WARPGROUP
                )

        # Grouped (varlen M): the walk goes group by group (`varlen_locate`); `group` reaching the group
        # count ends it. Otherwise the walk ends after the last work unit.
        group, first_tile = Int32(0), Int32(0)
        num_groups, total_rows = Int32(0), Int32(0)
        rows_per_cluster_tile = self.tile_mnk[0] * cm
        more = linear < work_units
        if cutlass.const_expr(self.varlen_m):
            num_groups = cute.size(seqlens) - 1
            total_rows = cute.size(mD_mnl, mode=[0])
            group, first_tile = varlen_locate(
                linear, group, first_tile, seqlens, num_groups, total_rows, rows_per_cluster_tile, clusters_n
            )
            more = group < num_groups
        while more:
            tile_linear, split, k_begin, k_end = linear, 0, 0, k_tile_cnt
            if cutlass.const_expr(self.k_split):
                tile_linear, split, k_begin, k_end = split_unit(linear, splits, k_tile_cnt)
            if cutlass.const_expr(self.stream_k):
                worker, workers = splits[0], splits[1]
                tile_linear, k_begin, k_end, pieces, mine, slot0, slot1 = stream_unit(
                    (linear - worker) // workers, *splits, k_tile_cnt
                )
            row_first, row_end = Int32(0), Int32(0)
            if cutlass.const_expr(self.varlen_m):
                tile_m, tile_n, row_first, row_end = self._grouped_tile(
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
                batch = Int32(0)
            else:
                ctile_m, ctile_n, batch = cluster_tile_coord(
                    tile_linear, clusters_m, clusters_n, raster_along_m, group_size
                )
                tile_m = ctile_m * cm + cluster_coord_mnk[0]
                tile_n = ctile_n * cn + cluster_coord_mnk[1]

            self._wait_turn(MMA_TURN_BARRIER, wg)
            if cutlass.const_expr(self.varlen_k):
                # The tile's group is its batch (an empty group runs one k-tile trimmed to zeros).
                _, group_k_tiles, lead_cols, tail_cols = self._k_range(seqlens, batch, total_k)
                read_state, release_state = mainloop(
                    ab_pipeline,
                    tiled_mma,
                    accumulators,
                    k_accs,
                    tCrA,
                    tCrB,
                    read_state,
                    release_state,
                    group_k_tiles,
                    wg,
                    (sA, sB, lead_cols, tail_cols, tidx % self.tile_threads),
                )
                if cutlass.const_expr(self.gather_a):
                    # An empty group's trimmed k-tile multiplied a borrowed column of A by B's zeros:
                    # 0 unless that column holds inf or NaN, so its D is zeroed here (GroupedWalks.
                    # _produce_gathered_k).
                    if group_k_tiles == 1 and tail_cols == lead_cols:
                        accumulators.fill(0.0)
            else:
                read_state, release_state = mainloop(
                    ab_pipeline,
                    tiled_mma,
                    accumulators,
                    k_accs,
                    tCrA,
                    tCrB,
                    read_state,
                    release_state,
                    k_end - k_begin,
                    wg,
                )

            self._wait_turn(EPI_TURN_BARRIER, wg)
            if cutlass.const_expr(self.varlen_m):
                epi_buffer, c_count = self._epilogue(
                    epi, tile_m, tile_n, batch, epi_buffer, c_count, mD_mnl, mC_mnl, row_first, row_end
                )
            elif cutlass.const_expr(self.k_split or self.stream_k):
                # Only the tile's last unit to finish holds the whole sum; the others are done.
                # The workspace's counters and partials are per CTA tile: a cluster tile holds
                # cluster_m x cluster_n of them, each reduced by its own CTA.
                # Split-K: the units of a tile are its splits, in slots tile * S + split; stream-K: a
                # stream tile's counter is its number among the stream tiles, and `stream_unit` gave the
                # slots of its pieces.
                ctas = cm * cn
                parts = (tile_linear * ctas + cluster_coord_mnk[0] * cn + cluster_coord_mnk[1], splits, split)
                if cutlass.const_expr(self.stream_k):
                    rank = cluster_coord_mnk[0] * cn + cluster_coord_mnk[1]
                    counter = (tile_linear - splits[2]) * ctas + rank
                    slots = (mine * ctas + rank, slot0 * ctas + rank, slot1 * ctas + rank, 2 * ctas)
                    parts = (counter, pieces, slots)
                if self._reduce_parts(epi, accumulators, workspace, split_arrivals, *parts, tile_tidx):
                    epi_buffer, c_count = self._epilogue(
                        epi, tile_m, tile_n, batch, epi_buffer, c_count, mD_mnl
                    )
            else:
                epi_buffer, c_count = self._epilogue(epi, tile_m, tile_n, batch, epi_buffer, c_count, mD_mnl)
            if cutlass.const_expr(self.pingpong):
                # Both warpgroups write the same D staging buffers: drain this tile's stores before
                # handing the epilogue to the other warpgroup, then skip its share of the pipelines.
                self._drain_stores(epi)
                c_count += epi.tiles_per_tile
                self._pass_turn(EPI_TURN_BARRIER, wg)
                read_state.advance(k_tile_cnt)
                release_state.advance(k_tile_cnt)
            linear += tile_stride
            if cutlass.const_expr(self.varlen_m):
                group, first_tile = varlen_locate(
                    linear,
                    group,
                    first_tile,
                    seqlens,
                    num_groups,
                    total_rows,
                    rows_per_cluster_tile,
                    clusters_n,
                )
                more = group < num_groups
            else:
                more = linear < work_units

        # Drain outstanding TMA stores before the CTA exits.
        self._drain_stores(epi)


class HopperGemmWithC(HopperGemm):
    """The same kernel with the C epilogue: D = alpha * A @ B^T + beta * C."""

    @cute.jit
    def __call__(
        self,
        mA: cute.Tensor,
        mB: cute.Tensor,
        mD: cute.Tensor,
        mC: cute.Tensor,
        alpha: Float32,
        beta: Float32,
        raster_along_m: Int32,
        group_size: Int32,
        prefetch_operand: Int32,
        max_active_clusters: Int32,
        stream: cuda.CUstream,
    ):
        """mC: (M, N, L) like mD, with its own dtype and unit-stride mode; it may be the same memory as D."""
        self._launch(
            mA,
            mB,
            mD,
            mC,
            alpha,
            beta,
            raster_along_m,
            group_size,
            max_active_clusters,
            stream,
            prefetch_operand=prefetch_operand,
        )


class HopperGemmSplitK(HopperGemm):
    """The kernel with split-K: each output tile's k-tiles are cut into `k_splits` ranges (clamped to 1 ..
    k-tiles), each a work unit of the persistent walk, reduced through `workspace` (fp32, 16-byte aligned;
    `HopperGemm._reduce_parts` gives its layout). D = alpha * A @ B^T (no C)."""

    @cute.jit
    def __call__(
        self,
        mA: cute.Tensor,
        mB: cute.Tensor,
        mD: cute.Tensor,
        alpha: Float32,
        raster_along_m: Int32,
        group_size: Int32,
        prefetch_operand: Int32,
        max_active_clusters: Int32,
        k_splits: Int32,
        workspace: cute.Pointer,
        stream: cuda.CUstream,
    ):
        self._launch(
            mA,
            mB,
            mD,
            None,
            alpha,
            None,
            raster_along_m,
            group_size,
            max_active_clusters,
            stream,
            k_splits,
            workspace,
            prefetch_operand=prefetch_operand,
        )


class HopperGemmStreamK(HopperGemm):
    """The kernel with stream-K: the walk's last tiles are shared out among all clusters of the grid by
    k-tiles (tile_scheduler.stream_split), their pieces reduced through `workspace` (fp32, 16-byte
    aligned; `HopperGemm._reduce_parts`). D = alpha * A @ B^T (no C)."""

    @cute.jit
    def __call__(
        self,
        mA: cute.Tensor,
        mB: cute.Tensor,
        mD: cute.Tensor,
        alpha: Float32,
        raster_along_m: Int32,
        group_size: Int32,
        prefetch_operand: Int32,
        max_active_clusters: Int32,
        workspace: cute.Pointer,
        stream: cuda.CUstream,
    ):
        self._launch(
            mA,
            mB,
            mD,
            None,
            alpha,
            None,
            raster_along_m,
            group_size,
            max_active_clusters,
            stream,
            None,
            workspace,
            prefetch_operand=prefetch_operand,
        )


class HopperGemmVarlenM(HopperGemm):
    """Grouped GEMM with a variable M per group (mixture-of-experts): mA (total M, K, 1) holds the rows
    of all groups, mB (N, K, G) one matrix per group, mD (total M, N, 1); `cu_seqlens_m` points to
    int32[G + 1] non-decreasing row offsets (cu_seqlens_m[0] = 0, cu_seqlens_m[G] <= total M) on the
    device. Group g computes D[s_g:s_g+1] = alpha * A[s_g:s_g+1] @ B[:, :, g]^T; the sizes are never
    read on the host. Rows outside [0, total M) are never written, whatever the offsets hold."""

    @cute.jit
    def __call__(
        self,
        mA: cute.Tensor,
        mB: cute.Tensor,
        mD: cute.Tensor,
        alpha: Float32,
        raster_along_m: Int32,
        group_size: Int32,
        max_active_clusters: Int32,
        cu_seqlens_m: cute.Pointer,
        stream: cuda.CUstream,
    ):
        self._launch(
            mA,
            mB,
            mD,
            None,
            alpha,
            None,
            raster_along_m,
            group_size,
            max_active_clusters,
            stream,
            cu_seqlens_m=cu_seqlens_m,
        )


class HopperGemmGatherA(HopperGemm):
    """Grouped GEMM with gathered A: as `HopperGemmVarlenM`, but mA (rows of A, K, 1) is the A given and row
    i of the groups' concatenated A is its row a_idx[i]; `a_idx` points to int32[total M] (total M = D's
    rows) on the device. Indices outside [0, rows of A) are clamped into it."""

    @cute.jit
    def __call__(
        self,
        mA: cute.Tensor,
        mB: cute.Tensor,
        mD: cute.Tensor,
        alpha: Float32,
        raster_along_m: Int32,
        group_size: Int32,
        max_active_clusters: Int32,
        cu_seqlens_m: cute.Pointer,
        a_idx: cute.Pointer,
        stream: cuda.CUstream,
    ):
        self._launch(
            mA,
            mB,
            mD,
            None,
            alpha,
            None,
            raster_along_m,
            group_size,
            max_active_clusters,
            stream,
            cu_seqlens_m=cu_seqlens_m,
            a_idx=a_idx,
        )


class HopperGemmVarlenK(HopperGemm):
    """Grouped GEMM with a variable K per group (the weight gradient of a mixture-of-experts layer): mA (M,
    total K, 1) and mB (N, total K, 1) hold all groups' K ranges one after another, mD (M, N, G) one result
    per group; `cu_seqlens_k` points to int32[G + 1] non-decreasing K offsets on the device. Group g
    computes D[:, :, g] = alpha * A[:, s_g:s_g+1] @ B[:, s_g:s_g+1]^T (an empty group writes zeros)."""

    @cute.jit
    def __call__(
        self,
        mA: cute.Tensor,
        mB: cute.Tensor,
        mD: cute.Tensor,
        alpha: Float32,
        raster_along_m: Int32,
        group_size: Int32,
        max_active_clusters: Int32,
        cu_seqlens_k: cute.Pointer,
        stream: cuda.CUstream,
    ):
        self._launch(
            mA,
            mB,
            mD,
            None,
            alpha,
            None,
            raster_along_m,
            group_size,
            max_active_clusters,
            stream,
            cu_seqlens_m=cu_seqlens_k,
        )


class HopperGemmVarlenMWithC(HopperGemm):
    """`HopperGemmVarlenM` with the C epilogue: mC (total M, N, 1) like mD; group g computes
    D[s_g:s_g+1] = alpha * A[s_g:s_g+1] @ B[:, :, g]^T + beta * C[s_g:s_g+1]."""

    @cute.jit
    def __call__(
        self,
        mA: cute.Tensor,
        mB: cute.Tensor,
        mD: cute.Tensor,
        mC: cute.Tensor,
        alpha: Float32,
        beta: Float32,
        raster_along_m: Int32,
        group_size: Int32,
        max_active_clusters: Int32,
        cu_seqlens_m: cute.Pointer,
        stream: cuda.CUstream,
    ):
        self._launch(
            mA,
            mB,
            mD,
            mC,
            alpha,
            beta,
            raster_along_m,
            group_size,
            max_active_clusters,
            stream,
            cu_seqlens_m=cu_seqlens_m,
        )


class HopperGemmGatherAWithC(HopperGemm):
    """`HopperGemmGatherA` with the C epilogue: mC (total M, N, 1) like mD, read by output row (C is
    not gathered)."""

    @cute.jit
    def __call__(
        self,
        mA: cute.Tensor,
        mB: cute.Tensor,
        mD: cute.Tensor,
        mC: cute.Tensor,
        alpha: Float32,
        beta: Float32,
        raster_along_m: Int32,
        group_size: Int32,
        max_active_clusters: Int32,
        cu_seqlens_m: cute.Pointer,
        a_idx: cute.Pointer,
        stream: cuda.CUstream,
    ):
        self._launch(
            mA,
            mB,
            mD,
            mC,
            alpha,
            beta,
            raster_along_m,
            group_size,
            max_active_clusters,
            stream,
            cu_seqlens_m=cu_seqlens_m,
            a_idx=a_idx,
        )


class HopperGemmGatherK(HopperGemm):
    """`HopperGemmVarlenK` with gathered A: mA (M, columns of A, 1) is the A given (M contiguous) and
    column p of the groups' concatenated A is its column a_idx[p]; `a_idx` points to int32[total K]
    (total K = B's K extent) on the device. Indices outside [0, columns of A) are clamped into it."""

    @cute.jit
    def __call__(
        self,
        mA: cute.Tensor,
        mB: cute.Tensor,
        mD: cute.Tensor,
        alpha: Float32,
        raster_along_m: Int32,
        group_size: Int32,
        max_active_clusters: Int32,
        cu_seqlens_k: cute.Pointer,
        a_idx: cute.Pointer,
        stream: cuda.CUstream,
    ):
        self._launch(
            mA,
            mB,
            mD,
            None,
            alpha,
            None,
            raster_along_m,
            group_size,
            max_active_clusters,
            stream,
            cu_seqlens_m=cu_seqlens_k,
            a_idx=a_idx,
        )


class HopperGemmVarlenKWithC(HopperGemm):
    """`HopperGemmVarlenK` with the C epilogue: mC (M, N, G) like mD, one matrix per group; group g
    computes D[:, :, g] = alpha * A[:, s_g:s_g+1] @ B[:, s_g:s_g+1]^T + beta * C[:, :, g] (a weight
    gradient accumulated into an existing one: C = D, beta = 1)."""

    @cute.jit
    def __call__(
        self,
        mA: cute.Tensor,
        mB: cute.Tensor,
        mD: cute.Tensor,
        mC: cute.Tensor,
        alpha: Float32,
        beta: Float32,
        raster_along_m: Int32,
        group_size: Int32,
        max_active_clusters: Int32,
        cu_seqlens_k: cute.Pointer,
        stream: cuda.CUstream,
    ):
        self._launch(
            mA,
            mB,
            mD,
            mC,
            alpha,
            beta,
            raster_along_m,
            group_size,
            max_active_clusters,
            stream,
            cu_seqlens_m=cu_seqlens_k,
        )
