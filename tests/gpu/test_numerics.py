"""GPU tier: every shipped instance, launched through ``hgemm_sm90.launch``, against an fp64 reference.

Every instance runs every edge shape (tests/gpu/gemm_util.py EDGE_CASES: square, ragged, K below one
k-tile, M = 1, batch 3, padded leading dims and batch strides with a head one 16-byte unit off, two
raster/group overrides) and 4096^3 (a long K loop, several persistent waves) with its operands laid out by
its majors, plus its epilogue variants: random alpha without C; with C, random alpha and beta on every
shape, beta = 0 with C present, and the in-place update D = C. How a check works (poisoned D, NaN padding,
guards, torch-relative budgets, fp8 rules) is in gemm_util's docstring.

Cost (budget: the whole tier under 6 minutes on an H200): with the real 299-instance wheel the whole tier
(6196 tests) ran in 35 s on the H200 (2026-11-29, docs/PERF.md). That is why every instance gets every edge
shape and 4096^3 rather than a subset.
Set HGEMM_GPU_REPORT=PATH to collect one JSON line per numerics check (conftest.py).
"""

from __future__ import annotations

import pytest

from tests.gpu import gemm_util as g

torch = g.torch
hgemm_sm90 = g.hgemm_sm90
pytestmark = pytest.mark.gpu

INSTANCES = g.INSTANCES
GEMM_PARAMS = g.params([(i, c) for i in INSTANCES for c in [*g.cases_for(i), g.LARGE]])


def test_instances_are_understood():
    """The manifest lists instances, with unique ids and dtypes/majors/epilogues this tier can build."""
    assert INSTANCES, "hgemm_sm90.instances() is empty: the wheel ships no kernels"
    ids = [i.id for i in INSTANCES]
    assert len(set(ids)) == len(ids), "duplicate instance ids"
    for i in INSTANCES:
        assert {i.a_dtype, i.b_dtype, i.d_dtype} <= g.TORCH_DTYPE.keys(), i.id
        for op, major in (("a", i.a_major), ("b", i.b_major), ("d", i.d_major)):
            assert major in (g.NATURAL_MAJOR[op], g.OTHER_MAJOR[op]), f"{i.id}: {op}_major {major!r}"
        assert i.schedule in ("cooperative", "pingpong"), f"{i.id}: schedule {i.schedule!r}"
        if i.has_c:
            assert i.c_dtype in g.TORCH_DTYPE, f"{i.id}: c_dtype {i.c_dtype!r}"
            assert i.c_major in (g.NATURAL_MAJOR["c"], g.OTHER_MAJOR["c"]), f"{i.id}: c_major {i.c_major!r}"
        else:
            assert i.c_dtype is None and i.c_major is None, f"{i.id}: C fields without has_c"
        if g.is_fp8(i):  # a WGMMA rule: fp8 operands come from shared memory K-major
            assert (i.a_major, i.b_major) == ("k", "k"), f"{i.id}: fp8 with {i.a_major}{i.b_major} A/B"
        else:
            assert not i.fp8_fast_accum, f"{i.id}: fp8_fast_accum on a 16-bit instance"


@pytest.mark.parametrize(("inst", "case"), GEMM_PARAMS)
def test_gemm(inst, case, gen, report):
    """D matches the reference, every D element is written, and nothing outside D is."""
    p = g.make_problem(inst, case, gen)
    before = g.snapshot(p)
    g.launch(p)
    torch.cuda.synchronize()  # surfaces a kernel fault here, attributed to this instance
    g.check_gemm(p, report)
    g.assert_guards(p, before)


@pytest.mark.parametrize("inst", INSTANCES, ids=g._id)
def test_deterministic(inst, gen):
    """Two launches on the same inputs give bitwise-equal D (no split-K races, no order dependence); the
    ping-pong schedule's two consumer warpgroups must not make the result depend on which got a tile."""
    p = g.make_problem(inst, g.DETERMINISM, gen)
    d2 = g.output(inst, g.DETERMINISM)
    g.launch(p)
    g.launch(p, ptrs=(p.a.ptr(), p.b.ptr(), d2.ptr()))
    torch.cuda.synchronize()
    assert not torch.isnan(p.d.t.float()).any(), "unwritten (NaN) D elements"  # else NaN == NaN would pass
    g.assert_bitwise_equal(p.d.t, d2.t, "two launches of the same GEMM")


@pytest.mark.parametrize("inst", g.family_subset(INSTANCES), ids=g._id)
def test_cuda_graph_replay(inst, gen, report):
    """A launch captured into a CUDA graph replays correctly on new data copied into its input buffers."""
    case = g.Case("graph", 520, 1000, 264, batch=2)
    p = g.make_problem(inst, case, gen)
    g.launch(p)  # outside capture: loads the cubin, which is not a stream operation
    torch.cuda.synchronize()
    p.d.t.fill_(float("nan"))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):  # makes its capture stream current
        g.launch(p, stream=torch.cuda.current_stream())
    torch.cuda.synchronize()
    assert torch.isnan(p.d.t.float()).all(), (
        "D changed during capture: the launch ran instead of being recorded"
    )
    for _ in range(2):
        g.fill_random(p.a, gen, p.scales.in_std)  # same addresses, new values
        g.fill_random(p.b, gen, p.scales.in_std)
        if p.c is not None:
            g.fill_random(p.c, gen, p.scales.c_std)
            p.c_values = p.c.t.float().clone()
        p.d.t.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        g.check_gemm(p, report, reason="graph replay")
