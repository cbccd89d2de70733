"""GPU tier: edge tiles moved inside the tensors (docs/KERNEL.md "Edge tiles").

An instance without C, outside the grouped walks, loads and stores a tile that reaches past M or N at
the tensor's edge instead (codegen/kernels/tile_scheduler.py `edge_origin`), so that its TMA boxes lie
inside A and B; it then overlaps its neighbour. test_numerics.py runs every instance on ragged shapes.
Here, one instance per family and schedule (and per family among the swap-AB and the split-K instances),
on batched shapes one row and 16 bytes of columns past two whole tiles, so each edge tile overlaps its
neighbour almost wholly (and in 2-CTA clusters a CTA whose tile lies wholly outside D moves too):
- the result against the fp64 reference, with D poisoned and nothing outside D written;
- the rows and columns two tiles cover hold the same bits as a launch of that aligned problem, where no
  tile moves: a moved tile and its neighbour store the same values where they overlap, whichever lands
  last;
- repeated launches give the same bits.
"""

from __future__ import annotations

import pytest

from tests.gpu import gemm_util as g

torch = g.torch
pytestmark = pytest.mark.gpu

MOVING = [i for i in g.INSTANCES if not i.has_c]
EDGE = sorted(
    {
        *g.family_subset(MOVING),
        *g.family_subset([i for i in MOVING if getattr(i, "swap_ab", False)]),
        *g.family_subset([i for i in MOVING if getattr(i, "k_split", "none") == "split"]),
    },
    key=g._id,
)


def _overrides(inst) -> dict:
    # Split-K: the same split count for the ragged and the aligned problem (the default depends on the
    # tile count, and a different split sums in a different order).
    return {"k_splits": 2} if getattr(inst, "k_split", "none") == "split" else {}


@pytest.mark.parametrize("inst", EDGE, ids=g._id)
def test_edge_tiles_overlap_their_neighbours_with_the_same_bits(inst, gen, report):
    rows, cols = inst.problem_tile
    case = g.Case("edge", 2 * rows + 1, 2 * cols + 8, 264, batch=2, pad_ld=1, pad_batch=3)
    p = g.make_problem(inst, case, gen)
    before = g.snapshot(p)
    g.launch(p, **_overrides(inst))
    torch.cuda.synchronize()
    g.check_gemm(p, report, reason="edge tiles")
    g.assert_guards(p, before)

    # The aligned problem on the same A and B: the first two tiles' rows and columns, no tile moved.
    aligned = g.output(inst, g.Case("aligned", 2 * rows, 2 * cols, 264, batch=2))
    g.launch(
        p,
        ptrs=(p.a.ptr(), p.b.ptr(), aligned.ptr()),
        m=2 * rows,
        n=2 * cols,
        lda=p.a.ld,
        batch_stride_a=p.a.batch_stride,
        ldb=p.b.ld,
        batch_stride_b=p.b.batch_stride,
        ldd=aligned.ld,
        batch_stride_d=aligned.batch_stride,
        **_overrides(inst),
    )
    again = g.output(inst, p.case)
    g.launch(p, ptrs=(p.a.ptr(), p.b.ptr(), again.ptr()), ldd=again.ld, batch_stride_d=again.batch_stride,
             **_overrides(inst))  # fmt: skip
    torch.cuda.synchronize()
    assert not torch.isnan(aligned.t.float()).any(), "unwritten (NaN) D elements in the aligned launch"
    g.assert_bitwise_equal(
        p.d.t[:, : 2 * rows, : 2 * cols],
        aligned.t,
        "the two whole tiles' rows and columns vs the aligned launch",
    )
    g.assert_bitwise_equal(p.d.t, again.t, "two launches of the same GEMM")
