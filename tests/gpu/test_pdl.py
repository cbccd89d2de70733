"""GPU tier: programmatic dependent launch (``launch(..., pdl=True)``).

With pdl=True a launch may start while the previous kernel in the stream still runs; it must wait
(griddepcontrol.wait) before it reads anything that kernel writes, and before it overwrites anything
that kernel still reads. Each test chains GEMMs whose inputs are the previous GEMM's output and compares
the result bitwise with the same chain launched without PDL (the kernels are deterministic, so any
difference is a read of stale or half-written data):
- a pair: X1 = X0 @ W1^T (long K, so the second launch has time to start early), X2 = X1 @ W2^T; the
  intermediate and final buffers start NaN each round;
- a chain of 50 launches ping-ponging between two buffers (each launch reads the buffer the previous one
  wrote and overwrites the one it read: read-after-write and write-after-read), eagerly and captured in a
  CUDA graph (PDL becomes programmatic graph edges). Instances with C use the input as C too
  (X' = alpha * X @ W^T + beta * X, a residual update), so C loads must wait as well. The chain runs
  also with b_ready=True (W is never written, so each launch may load W before the wait): only W may
  be read early, and X, the previous launch's output, still after it.
Chainable instances: D's dtype is A's and D's storage is A's (n-major D = k-major A, m-major D = m-major A).
"""

from __future__ import annotations

import math

import pytest

from tests.gpu import gemm_util as g

torch = g.torch
pytestmark = pytest.mark.gpu

CHAIN = 50
PAIR_ROUNDS = 10
# (M, K of the first GEMM, N of the first = K of the second, N of the second): the first GEMM is long
# (~70 GFLOP, ~0.1 ms) so the second is launched, and may start, well before the first finishes.
PAIR_SHAPE = (2048, 8192, 2048, 1024)
CHAIN_SHAPE = (2048, 2048)  # M, N = K: 50 x 17 GFLOP


def chainable(inst) -> bool:
    ok = inst.a_dtype == inst.d_dtype and (inst.a_major, inst.d_major) in (("k", "n"), ("m", "m"))
    if inst.has_c:  # C is the input X itself
        ok = ok and inst.c_dtype == inst.d_dtype and inst.c_major == inst.d_major
    return ok


PDL_INSTANCES = g.family_subset([i for i in g.INSTANCES if chainable(i)])


class Mat:
    """One (rows x cols) matrix in an instance's storage for operand ``op`` (packed, batch 1). A chainable
    instance's D storage is also its A storage, so a D ``Mat`` serves as the next launch's A (and C)."""

    def __init__(self, inst, op: str, rows: int, cols: int, fill: float = float("nan")):
        major = {"a": inst.a_major, "b": inst.b_major, "d": inst.d_major}[op]
        dtype = g.TORCH_DTYPE[{"a": inst.a_dtype, "b": inst.b_dtype, "d": inst.d_dtype}[op]]
        natural = major == g.NATURAL_MAJOR[op]
        self.store = torch.full((rows, cols) if natural else (cols, rows), fill, dtype=dtype, device=g.DEVICE)
        self.t = self.store if natural else self.store.T  # the logical rows x cols view

    def ptr(self) -> int:
        return self.store.data_ptr()


def random_mat(inst, op: str, rows: int, cols: int, gen) -> Mat:
    x = Mat(inst, op, rows, cols)
    x.t.copy_(g.random_values(x.t.shape, x.t.dtype, gen))
    return x


def gemm(
    inst,
    x: Mat,
    w: Mat,
    out: Mat,
    alpha: float,
    beta: float,
    pdl: bool,
    stream,
    c: Mat | None = None,
    b_ready: bool = False,
):
    """out = alpha * x @ w^T, + beta * C for instances with C (C = x, the residual, unless given)."""
    m, k = x.t.shape
    n = w.t.shape[0]
    kw = {"c": (x if c is None else c).ptr(), "beta": beta} if inst.has_c else {}
    g.hgemm_sm90.launch(
        inst.id,
        (x.ptr(), w.ptr(), out.ptr()),
        stream,
        m=m,
        n=n,
        k=k,
        alpha=alpha,
        pdl=pdl,
        b_ready=b_ready,
        **kw,
    )


def scales(inst, k: int) -> tuple[float, float]:
    """alpha, beta keeping the chain's values O(1) for 50 steps. The chain applies one fixed matrix
    alpha * W + beta * I (W: K x K of N(0, 1) entries) 50 times, so what matters is its spectral radius:
    W's eigenvalues fill a disk of radius ~sqrt(K), so alpha * sqrt(K) + |beta| <= 1 keeps it at most 1.
    (alpha = sqrt(0.75 / K), beta = 0.5 preserve one step's variance but give a radius of 1.37: 1.37^50
    overflowed fp16 on the H200, 2026-11-29.)"""
    if inst.has_c:
        return 0.5 / math.sqrt(k), 0.5
    return 1.0 / math.sqrt(k), 0.0


@pytest.mark.parametrize("inst", PDL_INSTANCES, ids=g._id)
def test_pdl_pair(inst, gen):
    """Two dependent GEMMs launched back to back with pdl=True equal the same two launched without."""
    m, k0, n1, n2 = PAIR_SHAPE
    n2 = n1 if inst.has_c else n2  # with C, X2 = alpha * X1 @ W2^T + beta * X1: W2 square
    stream = torch.cuda.current_stream()
    x0 = random_mat(inst, "a", m, k0, gen)
    w1, w2 = random_mat(inst, "b", n1, k0, gen), random_mat(inst, "b", n2, n1, gen)
    r0 = random_mat(inst, "d", m, n1, gen) if inst.has_c else None  # the first launch's C: never written
    a1, b1 = scales(inst, k0)
    a2, b2 = scales(inst, n1)
    results = []
    for pdl in [False] + [True] * PAIR_ROUNDS:
        x1, x2 = Mat(inst, "d", m, n1), Mat(inst, "d", m, n2)  # NaN until written
        gemm(inst, x0, w1, x1, a1, b1, pdl, stream, c=r0)
        gemm(inst, x1, w2, x2, a2, b2, pdl, stream)
        torch.cuda.synchronize()
        results.append((x1, x2))
    (r1, r2), rounds = results[0], results[1:]
    assert not torch.isnan(r1.t.float()).any() and not torch.isnan(r2.t.float()).any(), (
        "NaN in the pair without PDL: unwritten outputs (see test_numerics)"
    )
    for i, (x1, x2) in enumerate(rounds):
        g.assert_bitwise_equal(x1.t, r1.t, f"round {i}: first GEMM with pdl=True vs without", "(m, n)")
        g.assert_bitwise_equal(
            x2.t, r2.t, f"round {i}: second GEMM (reads the first's D) with pdl=True vs without", "(m, n)"
        )


def run_chain(
    inst, xs: list[Mat], w: Mat, alpha: float, beta: float, pdl: bool, stream, b_ready: bool = False
) -> None:
    for i in range(CHAIN):
        gemm(inst, xs[i % 2], w, xs[(i + 1) % 2], alpha, beta, pdl, stream, b_ready=b_ready)


@pytest.mark.parametrize("b_ready", [False, True], ids=["b_waits", "b_ready"])
@pytest.mark.parametrize("mode", ["eager", "graph"])
@pytest.mark.parametrize("inst", PDL_INSTANCES, ids=g._id)
def test_pdl_chain(inst, mode, b_ready, gen):
    """50 dependent launches ping-ponging between two buffers, with pdl=True (eagerly, or captured in a CUDA
    graph and replayed; with and without b_ready, W being constant), equal the same chain without PDL."""
    m, n = CHAIN_SHAPE
    stream = torch.cuda.current_stream()
    x0 = random_mat(inst, "d", m, n, gen)
    w = random_mat(inst, "b", n, n, gen)
    alpha, beta = scales(inst, n)
    xs = [Mat(inst, "d", m, n), Mat(inst, "d", m, n)]

    def reset() -> None:
        xs[0].store.copy_(x0.store)
        xs[1].store.fill_(float("nan"))

    reset()
    run_chain(inst, xs, w, alpha, beta, False, stream)
    torch.cuda.synchronize()
    ref = [x.t.clone() for x in xs]
    assert torch.isfinite(ref[CHAIN % 2].float()).all(), "the chain without PDL overflowed or left NaN"
    graph = None
    if mode == "graph":
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            run_chain(inst, xs, w, alpha, beta, True, torch.cuda.current_stream(), b_ready)
    for r in range(3):
        reset()
        if graph is None:
            run_chain(inst, xs, w, alpha, beta, True, stream, b_ready)
        else:
            graph.replay()
        torch.cuda.synchronize()
        for j in range(2):
            g.assert_bitwise_equal(
                xs[j].t,
                ref[j],
                f"{mode} run {r}: buffer {j} after {CHAIN} launches with pdl=True vs without",
                "(m, n)",
            )


# A decode chain through gemm(): M tokens through two weights in turn (x -> y = x @ W1 -> x' = y @ W2),
# the shapes where dispatch picks swap-AB instances (whose kernel A is the caller's B, so b_ready loads
# the kernel's A early) and split-K ones (the per-stream workspace between overlapping launches).
DECODE_CHAIN = 20
DECODE_NK = (2112, 7168)


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
@pytest.mark.parametrize("m", [1, 8, 64])
def test_decode_chain_through_gemm_with_b_ready(m, graph, gen):
    """gemm(pdl=True, b_ready=True) over a chain of dependent decode GEMMs (eagerly, or captured in a CUDA
    graph) equals the same calls run one at a time (a synchronize after each, so no launch overlaps the
    previous one), bit for bit. Not the chain with pdl=False: select(pdl=True) may pick other instances
    (the tuning table's PDL rows), whose bits may differ."""
    n, k = DECODE_NK
    bf16 = torch.bfloat16
    w1 = (g.random_values((n, k), bf16, gen) / math.sqrt(k)).to(bf16)  # N x K, K-major: b = w1.T
    w2 = (g.random_values((k, n), bf16, gen) / math.sqrt(n)).to(bf16)
    x0 = g.random_values((m, k), bf16, gen).to(bf16)
    x, y = torch.empty_like(x0), torch.empty((m, n), dtype=bf16, device=g.DEVICE)
    picks = {
        g.hgemm_sm90.select(m, n, k, a_dtype="bf16", pdl=True).instance_id,
        g.hgemm_sm90.select(m, k, n, a_dtype="bf16", pdl=True).instance_id,
    }

    def chain(pdl: bool, one_at_a_time: bool = False) -> None:
        for _ in range(DECODE_CHAIN):
            for a, b, out in ((x, w1, y), (y, w2, x)):
                g.hgemm_sm90.gemm(a, b.T, out=out, pdl=pdl, b_ready=pdl)
                if one_at_a_time:
                    torch.cuda.synchronize()

    def reset() -> None:
        x.copy_(x0)
        y.fill_(float("nan"))

    reset()
    chain(True, one_at_a_time=True)
    ref = x.clone()
    assert torch.isfinite(ref.float()).all(), f"the chain one at a time left NaN or overflowed ({picks})"
    cuda_graph = None
    if graph:
        # Warm on the capture stream: its split-K workspace exists before capture (a stream without one
        # runs split-K instances as one split, which sums in another order).
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            chain(True)
        torch.cuda.synchronize()
        cuda_graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(cuda_graph, stream=side):
            chain(True)
    for r in range(3):
        reset()
        if cuda_graph is None:
            chain(True)
        else:
            cuda_graph.replay()
        torch.cuda.synchronize()
        g.assert_bitwise_equal(
            x, ref, f"run {r}: {picks} chained with pdl=True, b_ready=True vs one at a time", "(m, k)"
        )
