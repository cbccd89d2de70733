"""GPU tier: split-K instances (`k_split` "split"), beyond what test_numerics.py runs for every instance.

test_numerics.py launches each split-K instance on every edge shape and every decode-sized M with the
launch's default split count. Here:
- explicit split counts, including counts that do not divide the k-tiles, a split per k-tile, and one
  split, on a K whose last k-tile is partial, against the fp64 reference with a NaN-poisoned D;
- determinism: launches with the same split count give the same bits, on an idle GPU and while another
  stream keeps most SMs busy (the order in which a tile's units arrive changes, the sum's order must
  not), and the arrival counters are back at zero afterwards (the workspace serves the next launch);
- gemm(): dispatch's split-K choices through the workspace gemm() owns, eagerly and captured in a CUDA
  graph.
"""

from __future__ import annotations

import pytest

from tests.gpu import gemm_util as g

torch = g.torch
hgemm_sm90 = g.hgemm_sm90
pytestmark = pytest.mark.gpu

SPLIT = [i for i in g.INSTANCES if getattr(i, "k_split", "none") == "split"]


CLUSTERED = [i for i in SPLIT if tuple(i.cluster) != (1, 1)]


def _case(inst, m: int = 33, n: int = 1000) -> g.Case:
    """14 k-tiles, the last one partial (8 elements of K)."""
    return g.Case(f"split_m{m}_n{n}", m, n, 13 * inst.tile[2] + 8)


@pytest.mark.parametrize("inst", SPLIT, ids=g._id)
@pytest.mark.parametrize("k_splits", [1, 2, 3, 5, 14])
def test_split_counts(inst, k_splits, gen, report):
    p = g.make_problem(inst, _case(inst), gen)
    before = g.snapshot(p)
    g.launch(p, k_splits=k_splits)
    torch.cuda.synchronize()
    g.check_gemm(p, report, reason=f"k_splits={k_splits}")
    g.assert_guards(p, before)


@pytest.mark.parametrize("inst", CLUSTERED, ids=g._id)
@pytest.mark.parametrize("k_splits", [1, 2, 3, 14])
def test_clustered_split_counts_over_several_cluster_tiles(inst, k_splits, gen, report):
    """Several cluster tiles along M and N, the last ones partly (a CTA of a 2-CTA cluster wholly)
    outside D: each CTA of a cluster reduces its own tile's partials."""
    p = g.make_problem(inst, _case(inst, m=300, n=1100), gen)
    before = g.snapshot(p)
    g.launch(p, k_splits=k_splits)
    torch.cuda.synchronize()
    g.check_gemm(p, report, reason=f"k_splits={k_splits}")
    g.assert_guards(p, before)


@pytest.mark.parametrize("inst", SPLIT, ids=g._id)
def test_split_k_is_deterministic_and_leaves_its_counters_at_zero(inst, gen):
    case = g.fit(_case(inst, m=64, n=4096), inst)  # 16-byte contiguous extents, as make_problem has them
    p = g.make_problem(inst, case, gen)
    nbytes = hgemm_sm90.workspace_bytes(inst.id, case.m, case.n, case.k, k_splits=3)
    ws = torch.zeros(nbytes, dtype=torch.uint8, device="cuda")
    g.launches_idle_busy_idle(p, "split-K launches of the same GEMM", k_splits=3, workspace=ws.data_ptr())
    rows, cols = inst.problem_tile  # of D, per tile
    cm, cn = inst.cluster  # a cluster's CTAs each count on their own tile's counter, inside D or not
    clusters_m, clusters_n = -(-case.m // (rows * cm)), -(-case.n // (cols * cn))
    tiles = clusters_m * cm * clusters_n * cn
    counters = ws[: 4 * tiles].view(torch.int32)
    assert int(counters.abs().sum()) == 0, f"arrival counters left non-zero: {counters.tolist()}"


def _split_choices():
    """(m, n, k, class instance) for decode-suite shapes where dispatch picks a split-K instance."""
    out = []
    for m in (1, 8, 16, 64):
        for n, k in ((4096, 4096), (2112, 7168), (4096, 14336)):
            for inst in SPLIT:
                c = hgemm_sm90.select(
                    m, n, k, a_dtype=inst.a_dtype, d_dtype=inst.d_dtype, fp8_fast_accum=inst.fp8_fast_accum
                )
                if c.instance_id.endswith("_splitk"):
                    out.append((m, n, k, c.instance_id))
    return sorted(set(out))


@pytest.mark.skipif(not SPLIT, reason="this installation ships no split-K instance")
def test_gemm_runs_the_split_k_choices_eagerly_and_in_a_graph(gen, report):
    choices = _split_choices()
    if not choices and "H200" not in torch.cuda.get_device_name():
        pytest.skip(
            "no split-K choice on this GPU: the shipped tuning table (which picks them) is the H200's"
        )
    assert choices, "dispatch never picks a split-K instance on the decode shapes: check runtime/tuning.json"
    for m, n, k, iid in choices:
        inst = next(i for i in SPLIT if i.id == iid)
        p = g.make_problem(inst, g.Case(f"gemm_m{m}_n{n}_k{k}", m, n, k), gen)
        a, b, d = p.a.t[0], p.b.t[0], p.d.t[0]
        hgemm_sm90.gemm(a, b.T, out=d, fp8_fast_accum=inst.fp8_fast_accum)
        torch.cuda.synchronize()
        g.check_gemm(p, report, reason=f"gemm() -> {iid}")
        # Captured: the stream was warmed up above, so its workspace exists and the graph records it.
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            hgemm_sm90.gemm(a, b.T, out=d, fp8_fast_accum=inst.fp8_fast_accum)
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=s):
            hgemm_sm90.gemm(a, b.T, out=d, fp8_fast_accum=inst.fp8_fast_accum)
        for _ in range(2):
            g.fill_random(p.a, gen, p.scales.in_std)
            p.d.t.fill_(float("nan"))
            graph.replay()
            torch.cuda.synchronize()
            g.check_gemm(p, report, reason=f"gemm() -> {iid}, graph replay")
