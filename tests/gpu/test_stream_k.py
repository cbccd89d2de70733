"""GPU tier: stream-K instances (`k_split` "stream"), beyond what test_numerics.py runs for every instance.

The stream-K walk depends on how the tile count falls against the grid's clusters (the workers;
runtime/scheduling.py `stream_split`), so each case here is drawn from this GPU's SM count:
- fewer tiles than workers (every tile is cut into pieces, several workers per tile);
- a last wave of at least half the workers (the partial wave shared out);
- a last wave of under half the workers (at most 4 workers share each of its tiles);
- several whole waves before the shared ones;
- a K of one k-tile (a worker's share is one k-tile: every tile runs whole);
each on a K whose last k-tile is partial, with ragged M and N edges and a NaN-poisoned D, against the fp64
reference; then the same launches without a workspace (every tile whole), determinism (the same bits on
an idle GPU and while another stream holds SMs, so pieces arrive in another order) and the arrival
counters back at zero.
"""

from __future__ import annotations

import pytest

from tests.gpu import gemm_util as g

torch = g.torch
hgemm_sm90 = g.hgemm_sm90
pytestmark = pytest.mark.gpu

STREAM = [i for i in g.INSTANCES if getattr(i, "k_split", "none") == "stream"]


def _workers(inst) -> int:
    """The clusters a full grid of this instance holds on this GPU (at most: 4-CTA clusters hold fewer)."""
    cm, cn = inst.cluster
    return torch.cuda.get_device_properties(0).multi_processor_count // (cm * cn)


# Tile counts as (whole waves, extra tiles as a fraction of the workers).
_WAVES = {
    "fewer_tiles_than_workers": (0, 0.4),
    "last_wave_over_half": (1, 0.75),
    "last_wave_under_half": (1, 0.2),
    "several_waves": (3, 0.3),
}


def _case(inst, name: str, k_tiles: int = 14) -> g.Case:
    """One cluster row of tiles (M ragged inside it) by enough cluster columns for the wave count, N
    ragged; K of `k_tiles` k-tiles, the last one partial (8 elements) unless there is one."""
    waves, extra = _WAVES[name]
    tiles = waves * _workers(inst) + max(1, int(extra * _workers(inst)))
    rows, cols = inst.problem_tile
    pm, pn = inst.problem_cluster
    m = rows * pm - 7
    n = cols * pn * tiles - 5
    k = (k_tiles - 1) * inst.tile[2] + 8 if k_tiles > 1 else inst.tile[2] - 8
    return g.Case(f"stream_{name}_k{k_tiles}", m, n, k)


@pytest.mark.parametrize("inst", STREAM, ids=g._id)
@pytest.mark.parametrize("name", sorted(_WAVES))
def test_stream_k_walks(inst, name, gen, report):
    p = g.make_problem(inst, _case(inst, name), gen)
    before = g.snapshot(p)
    g.launch(p)
    torch.cuda.synchronize()
    g.check_gemm(p, report, reason=name)
    g.assert_guards(p, before)


@pytest.mark.parametrize("inst", STREAM, ids=g._id)
def test_a_k_of_one_k_tile_runs_every_tile_whole(inst, gen, report):
    p = g.make_problem(inst, _case(inst, "last_wave_over_half", k_tiles=1), gen)
    g.launch(p)
    torch.cuda.synchronize()
    g.check_gemm(p, report, reason="one k-tile")


@pytest.mark.parametrize("inst", STREAM, ids=g._id)
def test_without_a_workspace_every_tile_runs_whole(inst, gen, report):
    p = g.make_problem(inst, _case(inst, "last_wave_over_half"), gen)
    g.launch(p, workspace=None)
    torch.cuda.synchronize()
    g.check_gemm(p, report, reason="no workspace")


@pytest.mark.parametrize("inst", STREAM, ids=g._id)
def test_stream_k_is_deterministic_and_leaves_its_counters_at_zero(inst, gen):
    case = g.fit(_case(inst, "last_wave_under_half"), inst)
    p = g.make_problem(inst, case, gen)
    nbytes = hgemm_sm90.workspace_bytes(inst.id, case.m, case.n, case.k)
    assert nbytes > 0
    ws = torch.zeros(nbytes, dtype=torch.uint8, device="cuda")
    g.launches_idle_busy_idle(p, "stream-K launches of the same GEMM", workspace=ws.data_ptr())
    counters = ws[: 4 * 4096].view(torch.int32)  # runtime/scheduling.py SPLIT_COUNTERS
    assert int(counters.abs().sum()) == 0, f"arrival counters left non-zero: {counters.nonzero().tolist()}"
