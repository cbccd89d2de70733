"""GPU tier: HGEMM_NUM_SMS (runtime/knobs.py) caps every persistent grid, and the results do not change.

A runtime built with ``Knobs(num_sms=N)`` launches at most N CTAs (whole clusters, one at least), so each
CTA walks more tiles (or work units, for split-K and stream-K) than on the whole GPU: the walk's stride
is the grid, which the CPU tier checks against a fake driver (tests/runtime/test_api.py). Here one
instance per family and schedule, plus a split-K and a stream-K one, runs the multi-wave 4096^3 case under
a cap of 40 SMs, and the ragged edge case under a cap of one cluster, against the fp64 reference.
"""

from __future__ import annotations

import pytest

from tests.gpu import gemm_util as g

torch = g.torch
hgemm_sm90 = g.hgemm_sm90
pytestmark = pytest.mark.gpu

from hgemm_sm90 import knobs, state

_SPLIT = [next(i for i in g.INSTANCES if getattr(i, "k_split", "none") == k) for k in ("split", "stream")]
PICKS = list({i.id: i for i in [*g.family_subset(g.INSTANCES), *_SPLIT]}.values())  # no instance twice
CASES = [(40, g.LARGE), (1, next(c for c in g.EDGE_CASES if c.name == "ragged"))]


@pytest.mark.parametrize(("cap", "case"), CASES, ids=[f"sms{cap}-{case.name}" for cap, case in CASES])
@pytest.mark.parametrize("inst", PICKS, ids=g._id)
def test_a_capped_grid_computes_the_same_gemm(inst, cap, case, gen, report):
    capped = state.Runtime(knobs.Knobs(num_sms=cap))
    p = g.make_problem(inst, case, gen)
    before = g.snapshot(p)
    with state.install(capped):
        g.launch(p)
        torch.cuda.synchronize()
    g.check_gemm(p, report)
    g.assert_guards(p, before)
    loaded = capped.kernels.get(capped.devices.current_context(), inst.id)  # as the launch loaded it
    assert loaded.max_active_clusters <= max(1, cap // (inst.cluster[0] * inst.cluster[1]))
