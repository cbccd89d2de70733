"""GPU tier: the torch operators of hgemm_sm90.torch_ops (``torch.ops.hgemm_sm90.*``).

- numerics of gemm / mm / addmm / bmm / gemm_out against gemm_util's fp64 reference with its budget
  relative to torch's own GEMM (bf16, fp16, e4m3 inputs; batch folding and broadcasting, broadcast C,
  beta = 0 ignoring C, out_dtype, column-major and in-place outputs);
- ``torch.compile(fullgraph=True)`` of functions calling the ops (static and dynamic shapes, the mutating
  gemm_out) gives bitwise the eager results: the same kernels run on the same data;
- CUDA graphs: ``hgemm_sm90.gemm()`` and the ops captured with ``torch.cuda.graph``, replayed on new
  values written into the captured tensors; and ``torch.compile(mode="reduce-overhead")``;
- the fake implementations under FakeTensorMode and on meta tensors: shape, dtype, contiguous strides,
  and the same typed errors as the real ones.
"""

from __future__ import annotations

import math

import pytest

from tests.gpu import gemm_api_util as u
from tests.gpu import gemm_util as g

torch = g.torch
hgemm_sm90 = g.hgemm_sm90
pytestmark = pytest.mark.gpu

from hgemm_sm90 import torch_ops as hops  # after gemm_util, which skips this module without it

M, N, K = 264, 200, 144  # 16-byte multiples in every dtype here, no multiples of any tile
BATCH = 3
ALPHA, BETA = -1.25, 0.75  # exact in fp32, the kernels' scale type
DTYPES = ["bf16", "fp16", "e4m3"]


@pytest.fixture(scope="module")
def ops():
    return hops.register()


def tdt(name: str) -> torch.dtype:
    return g.TORCH_DTYPE[name]


def out_dtype_of(dtype: str) -> str:
    return "bf16" if dtype in ("e4m3", "e5m2") else dtype


def cls(dtype, *, b_major="k", d_dtype=None, d_major="n", c_dtype=None, c_major=None, fast=False) -> dict:
    return dict(a_dtype=dtype, b_dtype=dtype, d_dtype=d_dtype or out_dtype_of(dtype), a_major="k",
                b_major=b_major, d_major=d_major, c_dtype=c_dtype, c_major=c_major,
                fp8_fast_accum=fast, fp16_accum=False)  # fmt: skip


def require(c: dict) -> None:
    """Skip where the installation ships no instance of class ``c`` (a reduced profile)."""
    if not any(u.class_args(i) == c for i in u.classes()):
        pytest.skip(f"no shipped instance of class {c}")


def operands(dtype: str, gen, batch=(), b_batch=None, b_row_major=False):
    """a (*batch, M, K) row-major; b (*b_batch, K, N) K-major (w.mT for row-major w) or row-major."""
    b_batch = batch if b_batch is None else b_batch
    a = u.rand((*batch, M, K), tdt(dtype), gen)
    b = u.rand((*b_batch, K, N), tdt(dtype), gen, transposed=not b_row_major)
    return a, b


def check(report, c: dict, name: str, a, b, out, c_values=None, alpha=None, beta=None):
    """gemm_util.check_gemm of out; the row names the instance select() picks for the class (the budget
    depends only on the class)."""
    inst = u.selected(M, N, K, out.numel() // (M * N), **c)
    return g.check_gemm(u.problem_of(inst, name, a, b, out, c_values, alpha, beta), report, reason="torch op")


# --- registration -------------------------------------------------------------------------------------


def test_register_is_idempotent(ops):
    assert hops.register() is ops is torch.ops.hgemm_sm90
    for name, schema in hops.SCHEMAS.items():
        op = getattr(torch.ops.hgemm_sm90, name).default
        args = [(a.name, a.kwarg_only) for a in op._schema.arguments]
        want = [(a, kw) for a, _, kw in _schema_args(schema)]
        assert args == want, name
        assert op._schema.is_mutable == (name == "gemm_out"), name


def _schema_args(schema: str):
    out, kw = [], False
    for item in schema[1:].split(") -> ")[0].split(", "):
        if item == "*":
            kw = True
        else:
            out.append((item.split(" ")[1].split("=")[0], None, kw))
    return out


def test_cpu_tensors_are_refused(ops):
    a = torch.zeros(16, 16, dtype=torch.bfloat16)
    with pytest.raises(NotImplementedError):  # the dispatcher: no kernel for the CPU backend
        ops.mm(a, a)


# --- numerics ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("b_row_major", [False, True], ids=["b_kmajor", "b_nmajor"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_mm(ops, dtype, b_row_major, gen, report):
    if b_row_major and dtype == "e4m3":
        pytest.skip("fp8 operands are K-major only (a WGMMA rule)")
    c = cls(dtype, b_major="n" if b_row_major else "k")
    require(c)
    a, b = operands(dtype, gen, b_row_major=b_row_major)
    out = ops.mm(a, b)
    torch.cuda.synchronize()
    assert out.dtype == tdt(c["d_dtype"]) and out.shape == (M, N) and out.is_contiguous()
    check(report, c, "op_mm", a, b, out)


def test_mm_fp8_fast_accumulation(ops, gen, report):
    c = cls("e4m3", fast=True)
    require(c)
    a, b = operands("e4m3", gen)
    out = ops.mm(a, b, fp8_fast_accum=True)
    torch.cuda.synchronize()
    check(report, c, "op_mm_fastacc", a, b, out)


def test_fp16_accumulation_is_passed_through(ops, gen):
    """fp16_accum=True on the ops runs what hgemm_sm90.gemm(..., fp16_accum=True) runs: the same bits (the
    same fp16-accumulating instance on the same data), and not what the default runs at this K; bf16
    inputs are refused with the typed error."""
    if not any(i.acc_dtype == "fp16" for i in hgemm_sm90.instances()):
        pytest.skip("no fp16-accumulating instance shipped")
    a = u.rand((512, 4096), torch.float16, gen)
    b = u.rand((4096, 512), torch.float16, gen, transposed=True)
    want = hgemm_sm90.gemm(a, b, fp16_accum=True)
    ours = {
        "mm": ops.mm(a, b, fp16_accum=True),
        "gemm": ops.gemm(a, b, fp16_accum=True),
        "addmm": ops.addmm(torch.zeros(512, 512, dtype=torch.float16, device=a.device), a, b, beta=0.0,
                           fp16_accum=True),
        "bmm": ops.bmm(a[None], b[None], fp16_accum=True)[0],
    }  # fmt: skip
    out = torch.empty(512, 512, dtype=torch.float16, device=a.device)
    ops.gemm_out(a, b, out, fp16_accum=True)
    ours["gemm_out"] = out
    torch.cuda.synchronize()
    for name, got in ours.items():
        assert torch.equal(g.bits(got), g.bits(want)), name
    assert not torch.equal(g.bits(ops.mm(a, b)), g.bits(want)), "fp32 accumulation gave fp16's bits"
    bf = a.to(torch.bfloat16)
    with pytest.raises(hgemm_sm90.InvalidArgumentError, match="fp16 accumulation takes fp16 inputs"):
        ops.mm(bf, b.to(torch.bfloat16), fp16_accum=True)


@pytest.mark.parametrize("bias", [False, True], ids=["c_full", "c_bias_row"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_addmm(ops, dtype, bias, gen, report):
    """torch.addmm's convention: out = beta * c + alpha * a @ b; a bias row broadcasts."""
    d = out_dtype_of(dtype)
    c = cls(dtype, c_dtype=d, c_major="n")
    require(c)
    a, b = operands(dtype, gen)
    cin = u.rand((N,) if bias else (M, N), tdt(d), gen)
    out = ops.addmm(cin, a, b, beta=BETA, alpha=ALPHA)
    torch.cuda.synchronize()
    assert out.dtype == tdt(d) and out.shape == (M, N)
    check(report, c, "op_addmm_bias" if bias else "op_addmm", a, b, out, cin, ALPHA, BETA)


@pytest.mark.parametrize("dtype", DTYPES)
def test_addmm_beta_zero_ignores_c(ops, dtype, gen):
    """beta = 0: c is not read (torch.addmm's rule), so NaN in it does not reach out; the result is mm's."""
    require(cls(dtype))
    a, b = operands(dtype, gen)
    nan = torch.full((M, N), float("nan"), dtype=tdt(out_dtype_of(dtype)), device=g.DEVICE)
    out = ops.addmm(nan, a, b, beta=0.0)
    ref = ops.mm(a, b)
    torch.cuda.synchronize()
    g.assert_bitwise_equal(out, ref, "addmm(beta=0) vs mm")


@pytest.mark.parametrize("dtype", DTYPES)
def test_bmm(ops, dtype, gen, report):
    c = cls(dtype)
    require(c)
    a, b = operands(dtype, gen, (BATCH,))
    out = ops.bmm(a, b)
    torch.cuda.synchronize()
    assert out.shape == (BATCH, M, N) and out.is_contiguous()
    check(report, c, "op_bmm", a, b, out)


@pytest.mark.parametrize("dtype", DTYPES)
def test_gemm_out_dtype_fp32(ops, dtype, gen, report):
    c = cls(dtype, d_dtype="fp32")
    require(c)
    a, b = operands(dtype, gen)
    out = ops.gemm(a, b, None, ALPHA, 0.0, False, torch.float32)
    torch.cuda.synchronize()
    assert out.dtype == torch.float32
    check(report, c, "op_gemm_fp32_out", a, b, out, alpha=ALPHA)


@pytest.mark.parametrize(
    ("a_batch", "b_batch"),
    [((BATCH,), ()), ((2, BATCH), ()), ((2, 1), (BATCH,)), ((), (BATCH,))],
    ids=["fold_3d", "fold_4d", "broadcast", "a_2d"],
)
@pytest.mark.parametrize("dtype", DTYPES)
def test_gemm_batch_rules(ops, dtype, a_batch, b_batch, gen, report):
    """matmul's batch rule: a 2-D b folds the batch into M; other broadcasts are materialized, keeping b
    K-major (fp8 has no other layout)."""
    c = cls(dtype)
    require(c)
    a, b = operands(dtype, gen, a_batch, b_batch)
    out = ops.gemm(a, b)
    torch.cuda.synchronize()
    assert out.shape == torch.broadcast_shapes(a_batch, b_batch) + (M, N) and out.is_contiguous()
    check(report, c, "op_gemm_batch", a, b, out)


@pytest.mark.parametrize("dtype", DTYPES)
def test_gemm_with_c(ops, dtype, gen, report):
    d = out_dtype_of(dtype)
    c = cls(dtype, c_dtype=d, c_major="n")
    require(c)
    a, b = operands(dtype, gen, (BATCH,))
    cin = u.rand((M, N), tdt(d), gen)  # broadcast over the batch
    out = ops.gemm(a, b, cin, ALPHA, BETA)
    torch.cuda.synchronize()
    check(report, c, "op_gemm_c", a, b, out, cin, ALPHA, BETA)


@pytest.mark.parametrize("dtype", DTYPES)
def test_gemm_out_column_major(ops, dtype, gen, report):
    """gemm_out writes into the given out; its strides pick D's layout (here m-major)."""
    c = cls(dtype, d_major="m")
    require(c)
    a, b = operands(dtype, gen)
    out = torch.full((N, M), float("nan"), dtype=tdt(c["d_dtype"]), device=g.DEVICE).T
    assert ops.gemm_out(a, b, out) is None
    torch.cuda.synchronize()
    check(report, c, "op_gemm_out_mmajor", a, b, out)


@pytest.mark.parametrize("dtype", DTYPES)
def test_gemm_out_in_place(ops, dtype, gen, report):
    """c=out: out = alpha * a @ b + beta * out, the residual update."""
    d = out_dtype_of(dtype)
    c = cls(dtype, c_dtype=d, c_major="n")
    require(c)
    a, b = operands(dtype, gen)
    out = u.rand((M, N), tdt(d), gen)
    before = out.float().clone()
    ops.gemm_out(a, b, out, out, ALPHA, BETA)
    torch.cuda.synchronize()
    check(report, c, "op_gemm_out_inplace", a, b, out, before, ALPHA, BETA)


def test_grouped_mm(ops, gen):
    """grouped_mm is grouped_gemm: the same bits for groups of rows (plain and gathered) and groups of K
    (fp32 out), eagerly and under torch.compile(fullgraph=True)."""
    sizes = [0, 37, 1, 300, 0, 129, 65]
    offs = torch.tensor([0, *torch.tensor(sizes).cumsum(0).tolist()], dtype=torch.int32, device=g.DEVICE)
    m, k, n = sum(sizes), 512, 264
    x = u.rand((m, k), torch.bfloat16, gen)
    w = u.rand((len(sizes), n, k), torch.bfloat16, gen)
    idx = torch.arange(m - 1, -1, -1, dtype=torch.int32, device=g.DEVICE)
    dy = u.rand((m, n), torch.bfloat16, gen)
    cases = [
        ((x, w.transpose(1, 2), offs), {}, lambda: hgemm_sm90.grouped_gemm(x, w.transpose(1, 2), offs)),
        ((x, w.transpose(1, 2), offs), {"a_idx": idx},
         lambda: hgemm_sm90.grouped_gemm(x, w.transpose(1, 2), offs, a_idx=idx)),
        ((x.t(), dy, offs), {"out_dtype": torch.float32},
         lambda: hgemm_sm90.grouped_gemm(
             x.t(), dy, out=torch.empty(len(sizes), k, n, device=g.DEVICE), cu_seqlens_k=offs)),
    ]  # fmt: skip
    for args, kw, reference in cases:
        want = reference()
        eager = ops.grouped_mm(*args, **kw)
        compiled = torch.compile(lambda *a, kw=kw: ops.grouped_mm(*a, **kw), fullgraph=True)(*args)
        torch.cuda.synchronize()
        assert eager.shape == want.shape and eager.dtype == want.dtype
        assert torch.equal(g.bits(eager), g.bits(want)) and torch.equal(g.bits(compiled), g.bits(want))


# --- torch.compile -----------------------------------------------------------------------------------


def _uses_all_ops(a, b, bias, a3, b3):
    hg = torch.ops.hgemm_sm90
    y = hg.mm(a, b)
    z = hg.addmm(bias, a, b, beta=BETA, alpha=ALPHA)
    w = hg.bmm(a3, b3)
    v = hg.gemm(a, b, None, 0.5, 0.0, False, torch.float32)
    return y, z, w, torch.relu(v) + 1.0  # a torch op on an output: the graph mixes ours and inductor's


@pytest.mark.parametrize("dtype", ["bf16", "e4m3"])
def test_torch_compile_fullgraph(ops, dtype, gen):
    for c in (cls(dtype), cls(dtype, c_dtype=out_dtype_of(dtype), c_major="n"), cls(dtype, d_dtype="fp32")):
        require(c)
    torch._dynamo.reset()
    a, b = operands(dtype, gen)
    a3, b3 = operands(dtype, gen, (BATCH,))
    bias = u.rand((N,), tdt(out_dtype_of(dtype)), gen)
    eager = _uses_all_ops(a, b, bias, a3, b3)
    compiled = torch.compile(_uses_all_ops, fullgraph=True)(a, b, bias, a3, b3)
    torch.cuda.synchronize()
    for i, (e, c) in enumerate(zip(eager, compiled)):
        assert c.dtype == e.dtype and c.shape == e.shape and c.stride() == e.stride(), i
        g.assert_bitwise_equal(c, e, f"compiled vs eager output {i}")


def test_torch_compile_dynamic_shapes(ops, gen):
    """One dynamic-shape graph serves several M: the fake implementations work on symbolic sizes."""
    require(cls("bf16"))
    torch._dynamo.reset()

    def f(x, w):
        hg = torch.ops.hgemm_sm90
        return hg.mm(x, w), hg.gemm(x.unsqueeze(0).expand(2, -1, -1), w)

    compiled = torch.compile(f, fullgraph=True, dynamic=True)
    w = u.rand((K, N), torch.bfloat16, gen, transposed=True)
    for m in (264, 520, 8):
        x = u.rand((m, K), torch.bfloat16, gen)
        for e, c in zip(f(x, w), compiled(x, w)):
            g.assert_bitwise_equal(c, e, f"compiled vs eager, M={m}")


def test_torch_compile_mutating_op(ops, gen):
    """gemm_out under torch.compile (functionalized): out is written, as in eager."""
    require(cls("bf16", c_dtype="bf16", c_major="n"))
    torch._dynamo.reset()

    def f(x, w, out, c):
        torch.ops.hgemm_sm90.gemm_out(x, w, out, c, 1.0, 1.0)  # out = x @ w + c
        return out * 2

    a, b = operands("bf16", gen)
    cin = u.rand((M, N), torch.bfloat16, gen)
    out_e = torch.full((M, N), float("nan"), dtype=torch.bfloat16, device=g.DEVICE)
    out_c = out_e.clone()
    ret_e = f(a, b, out_e, cin)
    ret_c = torch.compile(f, fullgraph=True)(a, b, out_c, cin)
    torch.cuda.synchronize()
    g.assert_bitwise_equal(out_c, out_e, "out after compiled vs eager gemm_out")
    g.assert_bitwise_equal(ret_c, ret_e, "compiled vs eager return")


# --- CUDA graphs --------------------------------------------------------------------------------------


def _refill(gen, *tensors):
    """New random values in place (same addresses, same strides), as a graph's static inputs get them."""
    for t in tensors:
        t.copy_(g.random_values(t.shape, t.dtype, gen).to(t.dtype))


@pytest.mark.parametrize("dtype", ["bf16", "e4m3"])
def test_cuda_graph_capture_of_gemm(dtype, gen, report):
    """hgemm_sm90.gemm() captured into a CUDA graph, into a given out and with out=None (allocated from
    the graph's pool), then replayed on new values written into the captured inputs."""
    c = cls(dtype)
    require(c)
    a, b = operands(dtype, gen)
    out = torch.empty(M, N, dtype=tdt(out_dtype_of(dtype)), device=g.DEVICE)
    hgemm_sm90.gemm(a, b, out)  # outside capture: loads the cubin, which is not a stream operation
    hgemm_sm90.gemm(a, b)
    torch.cuda.synchronize()
    out.fill_(float("nan"))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):  # makes its capture stream current: gemm()'s default stream
        hgemm_sm90.gemm(a, b, out)
        allocated = hgemm_sm90.gemm(a, b)
    torch.cuda.synchronize()
    assert torch.isnan(out.float()).all(), "out changed during capture: gemm() ran instead of being recorded"
    for i in range(2):
        _refill(gen, a, b)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        check(report, c, f"graph_gemm_replay{i}", a, b, out)
        g.assert_bitwise_equal(allocated, out, "out=None result vs out= result in the same graph")


@pytest.mark.parametrize("dtype", ["bf16", "e4m3"])
def test_cuda_graph_capture_of_ops(ops, dtype, gen, report):
    """The ops captured into a CUDA graph (outputs from the graph's pool, gemm_out into a static out),
    replayed on new values."""
    d = out_dtype_of(dtype)
    with_c, plain = cls(dtype, c_dtype=d, c_major="n"), cls(dtype)
    require(with_c)
    require(plain)
    a, b = operands(dtype, gen)
    a3, _ = operands(dtype, gen, (BATCH,))
    cin = u.rand((M, N), tdt(d), gen)
    static_out = torch.empty(M, N, dtype=tdt(d), device=g.DEVICE)

    def body():
        y = ops.addmm(cin, a, b, beta=BETA, alpha=ALPHA)
        z = ops.gemm(a3, b)  # batch folded into M
        ops.gemm_out(a, b, static_out)
        return y, z

    body()  # warm-up outside capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y, z = body()
    for i in range(2):
        _refill(gen, a, b, a3, cin)
        static_out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        check(report, with_c, f"graph_addmm_replay{i}", a, b, y, cin, ALPHA, BETA)
        check(report, plain, f"graph_gemm_fold_replay{i}", a3, b, z)
        check(report, plain, f"graph_gemm_out_replay{i}", a, b, static_out)


def test_torch_compile_reduce_overhead(ops, gen, report):
    """torch.compile's CUDA-graph mode (cudagraph trees) around the ops: each call on new inputs matches
    eager."""
    c = cls("bf16", c_dtype="bf16", c_major="n")
    require(c)
    torch._dynamo.reset()

    def f(x, w, bias):
        return torch.ops.hgemm_sm90.addmm(bias, x, w, beta=BETA, alpha=ALPHA)

    compiled = torch.compile(f, mode="reduce-overhead", fullgraph=True)
    for i in range(4):  # warm-up, record, replays
        a, b = operands("bf16", gen)
        bias = u.rand((N,), torch.bfloat16, gen)
        got = compiled(a, b, bias).clone()  # the graph's output buffer is reused by the next replay
        torch.cuda.synchronize()
        g.assert_bitwise_equal(got, f(a, b, bias), f"reduce-overhead call {i} vs eager")
    check(report, c, "reduce_overhead", a, b, got, bias, ALPHA, BETA)


def test_pdl_chain_of_ops(ops, gen):
    """A decode-sized chain of mm ops with pdl=True, b_ready=True (constant weights; each op reads the
    previous one's output) equals the same ops run one at a time (a synchronize after each: nothing
    overlaps), bit for bit: eagerly, under torch.compile(fullgraph=True), and under mode="reduce-overhead"
    (CUDA graphs: PDL becomes programmatic graph edges). 4096 x 4096 weights at M = 8: swap-AB instances
    without split-K, whose bits do not depend on which stream has a workspace. (Not the chain with
    pdl=False: select(pdl=True) may pick other instances, from the tuning table's PDL rows.)"""
    torch._dynamo.reset()
    m, n = 8, 4096
    w1 = (g.random_values((n, n), torch.bfloat16, gen) / math.sqrt(n)).to(torch.bfloat16)
    w2 = (g.random_values((n, n), torch.bfloat16, gen) / math.sqrt(n)).to(torch.bfloat16)
    x0 = g.random_values((m, n), torch.bfloat16, gen).to(torch.bfloat16)

    def chain(x, w1, w2, one_at_a_time: bool = False):
        for _ in range(4):
            for w in (w1, w2):
                x = ops.mm(x, w.T, pdl=True, b_ready=True)
                if one_at_a_time:
                    torch.cuda.synchronize()
        return x

    ref = chain(x0, w1, w2, one_at_a_time=True)
    assert torch.isfinite(ref.float()).all()
    g.assert_bitwise_equal(chain(x0, w1, w2), ref, "eager chain with pdl=True, b_ready=True vs one at a time")
    compiled = torch.compile(lambda x, a, b: chain(x, a, b), fullgraph=True)
    g.assert_bitwise_equal(compiled(x0, w1, w2), ref, "torch.compile(fullgraph=True) chain with PDL vs eager")
    graphed = torch.compile(lambda x, a, b: chain(x, a, b), mode="reduce-overhead", fullgraph=True)
    for i in range(4):  # warm-up, record, replays
        got = graphed(x0, w1, w2).clone()
        torch.cuda.synchronize()
        g.assert_bitwise_equal(got, ref, f"reduce-overhead chain with PDL, call {i}, vs one at a time")


# --- fake implementations -------------------------------------------------------------------------------


def _expect(t, shape, dtype, device_type):
    assert tuple(t.shape) == shape and t.dtype == dtype and t.device.type == device_type, (t.shape, t.dtype)
    assert t.is_contiguous(), t.stride()


@pytest.mark.parametrize("device", ["fake", "meta"])
def test_fake_implementations(ops, device):
    """Shapes, dtypes and strides without running anything: under FakeTensorMode (what torch.compile
    traces with) and on meta tensors."""
    from contextlib import nullcontext

    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode() if device == "fake" else nullcontext()
    dev = "cuda" if device == "fake" else "meta"
    bf, e4 = torch.bfloat16, torch.float8_e4m3fn
    with mode:

        def t(*shape, dtype=bf):
            return torch.empty(*shape, dtype=dtype, device=dev)

        _expect(ops.mm(t(64, 32), t(16, 32).T), (64, 16), bf, dev)
        _expect(ops.mm(t(64, 32, dtype=e4), t(16, 32, dtype=e4).T), (64, 16), bf, dev)
        _expect(ops.mm(t(64, 32, dtype=e4), t(16, 32, dtype=e4).T, out_dtype=e4), (64, 16), e4, dev)
        _expect(ops.gemm(t(64, 32), t(32, 16), out_dtype=torch.float32), (64, 16), torch.float32, dev)
        _expect(ops.gemm(t(2, 1, 64, 32), t(5, 32, 16)), (2, 5, 64, 16), bf, dev)
        _expect(ops.gemm(t(3, 64, 32), t(32, 16), t(16), 1.0, 0.5), (3, 64, 16), bf, dev)
        _expect(ops.addmm(t(16), t(64, 32), t(32, 16)), (64, 16), bf, dev)
        _expect(ops.bmm(t(3, 64, 32), t(3, 32, 16)), (3, 64, 16), bf, dev)
        assert ops.gemm_out(t(64, 32), t(32, 16), t(16, 64).T) is None
        offs = t(9, dtype=torch.int32)
        _expect(ops.grouped_mm(t(700, 64), t(8, 64, 32), offs), (700, 32), bf, dev)
        _expect(
            ops.grouped_mm(t(96, 64), t(64, 32), offs, out_dtype=torch.float32),
            (8, 96, 32),
            torch.float32,
            dev,
        )
        bad = [
            lambda: ops.mm(t(64, 32), t(16, 16)),  # K mismatch
            lambda: ops.bmm(t(3, 64, 32), t(4, 32, 16)),  # batch mismatch
            lambda: ops.mm(t(64, 32, dtype=torch.float32), t(32, 16, dtype=torch.float32)),  # no fp32 input
            lambda: ops.gemm(t(64, 32), t(32, 16), None, 1.0, 0.5),  # beta without c
            lambda: ops.addmm(t(32, 16), t(64, 32), t(32, 16)),  # c does not broadcast
            lambda: ops.gemm_out(t(64, 32), t(32, 16), t(64, 8)),  # out of the wrong shape
        ]
        for i, call in enumerate(bad):
            with pytest.raises(hgemm_sm90.InvalidArgumentError):
                call()
                pytest.fail(f"bad call {i} was accepted")
