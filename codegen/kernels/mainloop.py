"""The consumers' k-loops of hgemm-sm90's kernel (codegen/kernels/gemm_sm90.py, docs/KERNEL.md): a k-tile's
WGMMAs from a ring stage, the loop over a tile's k-tiles (releasing each stage once its WGMMAs are done),
fp8 slow accumulation's promotion of per-k-tile accumulators into the tile's, and the ping-pong
schedule's turns. A mixin of `HopperGemm`, as grouped.py's `GroupedWalks` is: its methods read the
kernel's configuration from `self` like the kernel's own.
"""

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32
from cutlass._mlir.dialects import llvm
from cutlass.cute.nvgpu import warpgroup
from cutlass.cutlass_dsl import T

from .barriers import MMA_TURN_BARRIER, THREADS_PER_WARPGROUP


def pin_registers(values: cute.Tensor) -> None:
    """Pass each register of `values` (an fp32 register tensor) through an empty volatile asm statement.

    The compiler treats WGMMA accumulators as plain values, so it may move arithmetic on them across
    `wgmma.wait_group` or past the next `wgmma.mma_async` that overwrites them: then two copies of a tile
    accumulator are live at once (register copies in the loop), ptxas finds non-WGMMA instructions touching
    registers of a WGMMA in flight and serializes every WGMMA of the kernel (build_tools/wgmma_check.py).
    Volatile asm keeps its order relative to the (volatile) WGMMA, wait and fence statements, and its
    outputs are new values: code after the pin reads values defined after the preceding wait, and code
    before it (whose results it takes) runs before the next WGMMA. The statement is empty: no instruction
    is emitted. (CUTLASS's C++ `warpgroup_fence_operand` does the same.)
    """
    for i in range(cute.size(values)):  # a trace-time loop: one statement per register
        values[i] = Float32(
            llvm.inline_asm(T.f32(), [Float32(values[i]).ir_value()], "", "=f,0", has_side_effects=True)
        )


class Mainloops:
    """Mainloop methods of `HopperGemm` (see the module docstring)."""

    @cute.jit
    def _mma_k_tile(self, tiled_mma, acc, tCrA, tCrB, stage, accumulate: bool):
        """Issue (and commit as one batch) the WGMMAs of one k-tile from ring stage `stage` into `acc`.

        With `accumulate` false the first MMA runs with ACCUMULATE off, which zeroes `acc` without a fill.
        Returns `tiled_mma` (its ACCUMULATE field is state): callers rebind it, so the DSL's tracer carries
        it through their loops and branches.
        """
        warpgroup.fence()
        for k_block in cutlass.range_constexpr(cute.size(tCrA, mode=[2])):
            tiled_mma.set(warpgroup.Field.ACCUMULATE, accumulate or k_block != 0)
            coord = (None, None, k_block, stage)
            cute.gemm(tiled_mma, acc, tCrA[coord], tCrB[coord], acc)
        warpgroup.commit_group()
        return tiled_mma

    @cute.jit
    def _issue_next_k_tile(
        self,
        ab_pipeline,
        tiled_mma,
        acc,
        tCrA,
        tCrB,
        read_state,
        accumulate: bool,
        trim=None,
        is_first=None,
        is_last=None,
    ):
        """Wait until the ring stage at `read_state` is full, issue that k-tile's WGMMAs into `acc` (one
        committed batch, `_mma_k_tile`) and step `read_state` to the next stage. The batch stays in flight
        and the stage in use: the caller waits for the batch (`warpgroup.wait_group`), then releases it.

        Returns `(tiled_mma, read_state)`; callers rebind both, so the DSL's tracer carries them through
        their loops and branches.
        """
        ab_pipeline.consumer_wait(read_state)
        if cutlass.const_expr(trim is not None):
            sA, sB, lead_cols, tail_cols, tile_tidx = trim
            # This k-tile's columns of the group: [lo, hi) (the first may start late, the last end early).
            lo = lead_cols if is_first else 0
            hi = tail_cols if is_last else self.tile_mnk[2]
            if lo > 0 or hi < self.tile_mnk[2]:
                self._trim_stage(sA, sB, read_state.index, lo, hi, tile_tidx)
        if cutlass.const_expr(self.gather_a and not self.gather_pair):
            # cp.async wrote A through the generic proxy; WGMMA reads shared memory through the async one.
            # A gathering pair's rows arrive by TMA (the async proxy, like an ungathered tile's): no fence.
            cute.arch.fence_proxy("async.shared", space="cta")
        tiled_mma = self._mma_k_tile(tiled_mma, acc, tCrA, tCrB, read_state.index, accumulate)
        read_state.advance()
        return tiled_mma, read_state

    @cute.jit
    def _mainloop(
        self,
        ab_pipeline,
        tiled_mma: cute.TiledMma,
        accumulators: cute.Tensor,
        k_accs,
        tCrA: cute.Tensor,
        tCrB: cute.Tensor,
        read_state,
        release_state,
        k_tile_cnt: Int32,
        wg,
        trim=None,
    ):
        """All k-tiles of one output tile, accumulated by the WGMMAs themselves into `accumulators` (16-bit
        inputs, fp8 fast accumulation). K >= 1, so there is at least one k-tile. Returns the advanced
        `(read_state, release_state)`. `trim` (grouped K): (sA, valid columns of the last k-tile, this
        thread's index in the tile): the last k-tile's A columns past the group's range are zeroed.

        One WGMMA batch stays in flight: the stage of k-tile i-1 is released once k-tile i's batch is
        issued and i-1's has completed. `k_accs` is unused: both mainloops take the same arguments (fp8
        slow accumulation: `_promoted_mainloop`).
        """
        tiled_mma, read_state = self._issue_next_k_tile(
            ab_pipeline, tiled_mma, accumulators, tCrA, tCrB, read_state, False, trim, True, k_tile_cnt == 1
        )
        for k_tile in range(1, k_tile_cnt):
            tiled_mma, read_state = self._issue_next_k_tile(
                ab_pipeline,
                tiled_mma,
                accumulators,
                tCrA,
                tCrB,
                read_state,
                True,
                trim,
                False,
                k_tile == k_tile_cnt - 1,
            )
            warpgroup.wait_group(1)  # k-tile - 1 is done with its stage
            ab_pipeline.consumer_release(release_state)
            release_state.advance()
        self._pass_turn(MMA_TURN_BARRIER, wg)
        warpgroup.wait_group(0)
        ab_pipeline.consumer_release(release_state)
        release_state.advance()
        return read_state, release_state

    @cute.jit
    def _promoted_mainloop(
        self,
        ab_pipeline,
        tiled_mma: cute.TiledMma,
        accumulators: cute.Tensor,
        k_accs,
        tCrA: cute.Tensor,
        tCrB: cute.Tensor,
        read_state,
        release_state,
        k_tile_cnt: Int32,
        wg,
    ):
        """fp8 slow accumulation: each k-tile's WGMMAs start a fresh accumulator, which is then added in
        fp32 into `accumulators` (the "promotion" that keeps long-K fp8 sums accurate). Same arguments and
        result as `_mainloop`.

        With two k-tile accumulators they alternate: each k-tile's batch is issued before the previous
        k-tile's is promoted, so one batch is always in flight (across the loop's back edge too) and the
        tensor cores never wait for a promotion. `_promote` pins both accumulators around its add
        (`pin_registers`): without that the compiler moved the add past the next WGMMA into the same
        buffer, which needs a copy of the in-flight accumulator, and ptxas then serialized every WGMMA of
        the kernel (0.70x of cuBLAS; build_tools/wgmma_check.py catches it). The first version therefore
        issued k-tiles in pairs with none in flight across the back edge, idling the tensor cores once per
        pair. With one accumulator, every k-tile's batch is waited for before its promotion.
        """
        accumulators.fill(0.0)
        if cutlass.const_expr(len(k_accs) == 2):
            acc_even, acc_odd = k_accs
            tiled_mma, read_state = self._issue_next_k_tile(
                ab_pipeline, tiled_mma, acc_even, tCrA, tCrB, read_state, False
            )
            for _ in range((k_tile_cnt - 1) // 2):
                tiled_mma, read_state = self._issue_next_k_tile(
                    ab_pipeline, tiled_mma, acc_odd, tCrA, tCrB, read_state, False
                )
                release_state = self._promote(ab_pipeline, accumulators, acc_even, release_state, 1)
                tiled_mma, read_state = self._issue_next_k_tile(
                    ab_pipeline, tiled_mma, acc_even, tCrA, tCrB, read_state, False
                )
                release_state = self._promote(ab_pipeline, accumulators, acc_odd, release_state, 1)
            if k_tile_cnt % 2 == 0:
                tiled_mma, read_state = self._issue_next_k_tile(
                    ab_pipeline, tiled_mma, acc_odd, tCrA, tCrB, read_state, False
                )
                release_state = self._promote(ab_pipeline, accumulators, acc_even, release_state, 1)
                release_state = self._promote(ab_pipeline, accumulators, acc_odd, release_state, 0)
            else:
                release_state = self._promote(ab_pipeline, accumulators, acc_even, release_state, 0)
        else:
            for _ in range(k_tile_cnt):
                tiled_mma, read_state = self._issue_next_k_tile(
                    ab_pipeline, tiled_mma, k_accs[0], tCrA, tCrB, read_state, False
                )
                release_state = self._promote(ab_pipeline, accumulators, k_accs[0], release_state, 0)
        self._pass_turn(MMA_TURN_BARRIER, wg)
        return read_state, release_state

    @cute.jit
    def _promote(self, ab_pipeline, accumulators, k_acc, release_state, still_in_flight: int):
        """Wait until at most `still_in_flight` WGMMA batches are pending (so `k_acc`'s is complete), add
        it into `accumulators` and release its ring stage."""
        warpgroup.wait_group(still_in_flight)
        pin_registers(k_acc)
        accumulators.store(accumulators.load() + k_acc.load())
        pin_registers(accumulators)
        ab_pipeline.consumer_release(release_state)
        release_state.advance()
        return release_state

    # ------------------------------------------------------------------ ping-pong turns
    @cute.jit
    def _wait_turn(self, turn_barrier: int, wg):
        """Ping-pong: wait until the other warpgroup hands this one the turn at `turn_barrier`
        (MMA_TURN_BARRIER: the mainloop, EPI_TURN_BARRIER: the epilogue). No-op for cooperative tiles."""
        if cutlass.const_expr(self.pingpong):
            cute.arch.barrier(barrier_id=turn_barrier + wg, number_of_threads=2 * THREADS_PER_WARPGROUP)

    @cute.jit
    def _pass_turn(self, turn_barrier: int, wg):
        """Ping-pong: hand the turn at `turn_barrier` to the other warpgroup (for MMA_TURN_BARRIER: all of
        this tile's MMAs are issued, so it may start its mainloop). No-op for cooperative tiles."""
        if cutlass.const_expr(self.pingpong):
            cute.arch.barrier_arrive(
                barrier_id=turn_barrier + 1 - wg, number_of_threads=2 * THREADS_PER_WARPGROUP
            )
