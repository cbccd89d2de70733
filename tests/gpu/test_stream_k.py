"""GPU tier: stream-K instances (`k_split` "stream"), beyond what test_numerics.py runs for every instance.

test_numerics.py launches each stream-K instance on every edge shape (few tiles: all of them dealt out
as k-tiles). Here, on problems whose tile counts exercise each part of the partition
(runtime/scheduling.py `stream_partition`, with the GPU's own worker count):
- numerics against the fp64 reference with a NaN-poisoned D: one tile of a few k-tiles (fewer workers
  than SMs), under one wave, just over one wave, whole waves (no stream-K part at all), more than two
  waves with a partial last one (data-parallel waves, then stream-K), a batch, a K whose last k-tile is
  partial, and `k_splits=1` (every tile whole, no workspace);
- the walk covers every k-tile of every tile exactly once (the host mirror, for the device's workers);
- determinism: the same bits on an idle GPU and while another stream keeps most SMs busy, and the
  arrival counters back at zero afterwards;
- gemm(): a dispatched stream-K choice, eagerly and replayed from a CUDA graph.
"""

from __future__ import annotations

import pytest

from tests.gpu import gemm_util as g

torch = g.torch
hgemm_sm90 = g.hgemm_sm90
pytestmark = pytest.mark.gpu

STREAM = [i for i in g.INSTANCES if getattr(i, "k_split", "none") == "stream"]


def _workers() -> int:
    return torch.cuda.get_device_properties(g.DEVICE).multi_processor_count


def _case(inst, name: str, tiles_m: int, tiles_n: int, k_tiles: int, batch: int = 1) -> g.Case:
    """A problem of about tiles_m x tiles_n tiles (the last row and column of tiles ragged) and k_tiles
    k-tiles, the last one partial."""
    rows, cols = inst.problem_tile
    return g.Case(
        name, tiles_m * rows - 24, tiles_n * cols - 8, (k_tiles - 1) * inst.tile[2] + 8, batch=batch, pad_ld=1
    )


def _cases(inst):
    w = _workers()
    return [
        _case(inst, "one_tile_3k", 1, 1, 3),
        _case(inst, "under_one_wave", 5, 19, 9),
        _case(inst, "just_over_one_wave", 1, w + 7, 6),
        _case(inst, "whole_waves", 2, w, 5),
        _case(inst, "data_parallel_then_stream", 3, w + 11, 7),
        _case(inst, "batched", 3, 23, 11, batch=2),
    ]


@pytest.mark.parametrize("inst", STREAM, ids=g._id)
@pytest.mark.parametrize("which", range(6))
def test_stream_k_numerics(inst, which, gen, report):
    case = _cases(inst)[which]
    p = g.make_problem(inst, case, gen)
    before = g.snapshot(p)
    g.launch(p)
    torch.cuda.synchronize()
    g.check_gemm(p, report, reason=case.name)
    g.assert_guards(p, before)


@pytest.mark.parametrize("inst", STREAM, ids=g._id)
def test_stream_k_without_workspace_runs_every_tile_whole(inst, gen, report):
    p = g.make_problem(inst, _cases(inst)[1], gen)
    assert hgemm_sm90.workspace_bytes(inst.id, p.case.m, p.case.n, p.case.k, k_splits=1) == 0
    before = g.snapshot(p)
    g.launch(p, k_splits=1, workspace=None)
    torch.cuda.synchronize()
    g.check_gemm(p, report, reason="k_splits=1")
    g.assert_guards(p, before)


def test_the_walk_covers_every_k_tile_once_on_this_gpu():
    from runtime import scheduling as s  # the host mirror of the kernel's partition

    w = _workers()
    for tiles in (1, 5, w - 1, w, w + 1, 2 * w - 1, 2 * w + 3, 7 * w + 5):
        for k in (1, 3, 4, 9, 54):
            workers = min(s.stream_units(tiles, k), w)
            seen = {}
            for worker in range(workers):
                for t, b, e in s.stream_walk(worker, tiles, k, workers):
                    assert 0 <= b < e <= k
                    seen.setdefault(t, []).append((b, e))
            assert sorted(seen) == list(range(tiles))
            for t, parts in seen.items():
                covered = sorted(x for b, e in parts for x in range(b, e))
                assert covered == list(range(k)), (tiles, k, t, parts)


@pytest.mark.parametrize("inst", STREAM, ids=g._id)
def test_stream_k_is_deterministic_and_leaves_its_counters_at_zero(inst, gen):
    case = g.fit(_case(inst, "determinism", 2, _workers() // 2 + 5, 17), inst)
    p = g.make_problem(inst, case, gen)
    nbytes = hgemm_sm90.workspace_bytes(inst.id, case.m, case.n, case.k)
    assert nbytes > 0
    ws = torch.zeros(nbytes, dtype=torch.uint8, device="cuda")
    outs = []
    busy = torch.cuda.Stream()
    x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    for load in (False, True, False, True):
        d = g.output(inst, case)
        if (
            load
        ):  # another stream's GEMMs hold SMs: the workers run, and a tile's parts arrive, in another order
            busy.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(busy):
                for _ in range(4):
                    x @ x
        g.launch(p, ptrs=(p.a.ptr(), p.b.ptr(), d.ptr()), workspace=ws.data_ptr())
        outs.append(d)
    torch.cuda.synchronize()
    for d in outs:
        assert not torch.isnan(d.t.float()).any(), "unwritten (NaN) D elements"
        g.assert_bitwise_equal(outs[0].t, d.t, "stream-K launches of the same GEMM")
    counters = ws[: 4 * 4096].view(torch.int32)
    assert int(counters.abs().sum()) == 0, f"arrival counters left non-zero: {counters.nonzero().tolist()}"


def _stream_choices():
    """(m, n, k, instance id) for held-out-like shapes (few, ragged waves) where dispatch picks stream-K."""
    out = []
    for m, n, k in ((936, 2432, 3456), (392, 2816, 1152), (2352, 2688, 4352), (1200, 1920, 4096)):
        for inst in STREAM:
            c = hgemm_sm90.select(
                m, n, k, a_dtype=inst.a_dtype, d_dtype=inst.d_dtype, fp8_fast_accum=inst.fp8_fast_accum
            )
            if c.instance_id.endswith("_streamk"):
                out.append((m, n, k, c.instance_id))
    return sorted(set(out))


@pytest.mark.skipif(not STREAM, reason="this installation ships no stream-K instance")
def test_gemm_runs_the_stream_k_choices_eagerly_and_in_a_graph(gen, report):
    choices = _stream_choices()
    if not choices:
        pytest.skip("dispatch picks no stream-K instance on these shapes (runtime/tuning.json)")
    for m, n, k, iid in choices:
        inst = next(i for i in STREAM if i.id == iid)
        p = g.make_problem(inst, g.Case(f"gemm_m{m}_n{n}_k{k}", m, n, k), gen)
        a, b, d = p.a.t[0], p.b.t[0], p.d.t[0]
        hgemm_sm90.gemm(a, b.T, out=d, fp8_fast_accum=inst.fp8_fast_accum)
        torch.cuda.synchronize()
        g.check_gemm(p, report, reason=f"gemm() -> {iid}")
        # Captured: the stream is warmed up first, so its workspace exists and the graph records it.
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
