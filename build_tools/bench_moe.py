"""`python -m build_tools.bench_moe`: grouped GEMM (mixture-of-experts layers) against torch and cuBLAS.

The suite (issue 11; docs/PERF.md "Grouped GEMM"): the expert projections of three MoE models, each for
T tokens routed top-k over E experts, T in {256, 1024, 4096, 16384}:
- mixtral: Mixtral-8x7B-like, E = 8, top-2; up 14336 x 4096 (N x K), down 4096 x 14336;
- moe128: a 128-expert top-8 model (Qwen3-30B-A3B-like: hidden 2048, expert FFN 768, gate and up fused),
  up 1536 x 2048, down 2048 x 768;
- deepseek: DeepSeek-V3-like, E = 256, top-8; up 2048 x 7168, down 7168 x 2048.
`--models` also takes three models held out from the tuning table's grouped points (`MODELS`: mixtral22,
qwen2moe, dbrx), to judge `select_grouped` on layers it was not tuned on.
Routing is skewed and deterministic: expert e is picked with probability proportional to 1 / rank(e) (Zipf,
exponent 1, ranks a seeded permutation), max(1, E / 16) experts are never picked (empty groups), each token
picks k distinct experts (torch.multinomial without replacement). The rows are sorted by expert, so group g
is rows [s_g, s_g+1) of A (T * k rows in all), as a grouped GEMM takes them.

Runners, per problem, each timed the same way (a CUDA graph holding --graph-iters calls, one replay between
two CUDA events per round, rounds interleaved across the runners, median of --reps rounds):
- ours: every shipped grouped instance of the dtype class (`hgemm_sm90.launch` with cu_seqlens_m), and the
  one `hgemm_sm90.select_grouped` picks (reported as "ours");
- torch._grouped_mm(A, B^T, offs) (bf16), or torch._scaled_grouped_mm with unit scales (e4m3), the grouped
  GEMM torch ships (CUTLASS-based on sm_90);
- a loop of one cuBLAS GEMM per non-empty expert (torch.mm, or torch._scaled_mm with unit scales), the
  group sizes known on the host (captured into the same kind of graph: no host cost is timed).
e4m3 runs twice: promoted accumulation (ours) vs torch's default, fast vs use_fast_accum=True.

A benchmark, not a test: it checks the values only loosely (ours against torch's output, a relative
Frobenius difference printed per problem) so a broken kernel cannot look fast. Needs torch and an sm_90 GPU.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from dataclasses import dataclass

MODELS = {
    # name: (experts, top-k, ((projection, N, K), ...))
    "mixtral": (8, 2, (("up", 14336, 4096), ("down", 4096, 14336))),
    "moe128": (128, 8, (("up", 1536, 2048), ("down", 2048, 768))),
    "deepseek": (256, 8, (("up", 2048, 7168), ("down", 7168, 2048))),
}
SUITE_MODELS = tuple(MODELS)  # the suite (and what the tuning table's grouped points are measured on)
# Held out from the table: layers of other MoE models, to judge `select_grouped` on layers it was not
# tuned on (`--models mixtral22,qwen2moe,dbrx --tokens 512,2048,8192`; docs/PERF.md session 11).
MODELS |= {
    "mixtral22": (8, 2, (("up", 16384, 6144), ("down", 6144, 16384))),  # Mixtral-8x22B-like
    "qwen2moe": (64, 8, (("up", 5120, 3584), ("down", 3584, 2560))),  # Qwen2-57B-A14B-like, gate+up fused
    "dbrx": (16, 4, (("up", 10752, 6144), ("down", 6144, 10752))),  # DBRX-like
}
TOKENS = (256, 1024, 4096, 16384)
SERIES = (("bf16", False), ("e4m3", False), ("e4m3", True))  # (input dtype, fp8 fast accumulation)


@dataclass(frozen=True)
class Problem:
    model: str
    proj: str
    tokens: int
    experts: int
    topk: int
    n: int
    k: int

    @property
    def name(self) -> str:
        return f"{self.model}.{self.proj} T={self.tokens}"


def route(torch, tokens: int, experts: int, topk: int, seed: int = 11):
    """(rows per expert, token of each expert-sorted row) for `tokens` tokens routed top-k with the
    suite's skew (see the module doc)."""
    gen = torch.Generator().manual_seed(seed * 1000003 + tokens * 31 + experts)
    rank = torch.randperm(experts, generator=gen) + 1
    probs = 1.0 / rank.double()
    empty = torch.randperm(experts, generator=gen)[: max(1, experts // 16)]
    probs[empty] = 0.0
    picks = torch.multinomial(probs.expand(tokens, experts), topk, replacement=False, generator=gen)
    sizes = torch.bincount(picks.flatten(), minlength=experts).tolist()
    token_of_row = torch.argsort(picks.flatten(), stable=True) // topk
    return sizes, token_of_row


def routing(torch, tokens: int, experts: int, topk: int, seed: int = 11) -> list[int]:
    """Rows per expert (see `route`)."""
    return route(torch, tokens, experts, topk, seed)[0]


def make_operands(torch, p: Problem, sizes: list[int], dtype: str):
    rows = sum(sizes)
    tdt = torch.bfloat16 if dtype == "bf16" else torch.float8_e4m3fn
    a = (torch.randn(rows, p.k, device="cuda") * 0.5).to(tdt)
    b = (torch.randn(p.experts, p.n, p.k, device="cuda") * 0.5).to(tdt)
    d = torch.empty(rows, p.n, device="cuda", dtype=torch.bfloat16)
    ends = torch.tensor(sizes, device="cuda", dtype=torch.int32).cumsum(0, dtype=torch.int32)
    cu = torch.cat([torch.zeros(1, device="cuda", dtype=torch.int32), ends])
    return a, b, d, cu, ends


def runners(torch, hg, p: Problem, sizes, ops, dtype: str, fast: bool):
    """(label, call) pairs: our instances of the class, then torch's grouped GEMM and the cuBLAS loop."""
    a, b, d, cu, ends = ops
    rows = a.shape[0]
    out = []
    insts = [
        i
        for i in hg.instances()
        if i.varlen_m
        and not i.gather_a
        and not i.has_c  # the suite computes D = A @ B^T
        and i.a_dtype == dtype
        and i.d_dtype == "bf16"
        and bool(i.fp8_fast_accum) == fast
    ]
    for inst in insts:

        def ours(iid=inst.id):
            hg.launch(
                iid,
                (a.data_ptr(), b.data_ptr(), d.data_ptr()),
                torch.cuda.current_stream(),
                m=rows,
                n=p.n,
                k=p.k,
                cu_seqlens_m=cu.data_ptr(),
                num_groups=p.experts,
            )

        out.append((inst.id, ours))
    bt = b.transpose(1, 2)
    if dtype == "bf16":
        out.append(
            ("torch._grouped_mm", lambda: torch._grouped_mm(a, bt, offs=ends, out_dtype=torch.bfloat16))
        )
    else:
        sa = torch.ones(rows, device="cuda", dtype=torch.float32)
        sb = torch.ones(p.experts, p.n, device="cuda", dtype=torch.float32)
        out.append(
            (
                "torch._scaled_grouped_mm",
                lambda: torch._scaled_grouped_mm(
                    a, bt, sa, sb, offs=ends, out_dtype=torch.bfloat16, use_fast_accum=fast
                ),
            )
        )
    starts = [0]
    for s in sizes:
        starts.append(starts[-1] + s)
    one = torch.ones((), device="cuda", dtype=torch.float32)

    def loop():
        for e, s in enumerate(sizes):
            if s == 0:
                continue
            x, y = a[starts[e] : starts[e + 1]], b[e]
            if dtype == "bf16":
                torch.mm(x, y.t(), out=d[starts[e] : starts[e + 1]])
            else:
                torch._scaled_mm(
                    x, y.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16, use_fast_accum=fast
                )

    out.append(("cublas loop", loop))
    return out


def graph_of(torch, call, iters: int, stream):
    """A CUDA graph of `iters` calls (warm-up call first, outside the capture), or None if capture fails."""
    with torch.cuda.stream(stream):
        call()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for _ in range(iters):
            call()
    return graph


def time_graphs(torch, graphs: dict, iters: int, reps: int, stream) -> dict:
    """Median µs per call of each graph, rounds interleaved (rotating start) across the runners."""
    times = {name: [] for name in graphs}
    names = list(graphs)
    for r in range(reps):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            with torch.cuda.stream(stream):
                torch.cuda._sleep(1_000_000)  # the replay is fully enqueued when `start` fires
                start.record(stream)
                graphs[name].replay()
                end.record(stream)
            end.synchronize()
            times[name].append(start.elapsed_time(end) * 1000.0 / iters)
    return {name: statistics.median(t) for name, t in times.items()}


def record_provenance(results: list[dict], hg) -> None:
    """Stamp each result with what its instances' times were measured with: the installed package's
    launch rules and the cubin sha256 of every instance it timed (keys of ``us`` that the manifest knows).
    build_tools/grouped_table.py turns them into each table point's `kernels` stamp, so `doctor` can tell a
    grouped point timed with other cubins or launch rules, as it does the grid's (runtime/tuning.py
    `kernels_digest`)."""
    from build_tools import bench as dense_bench
    from build_tools import tune

    rules, hashes = dense_bench.installed_launch_rules(hg), tune.cubin_hashes(hg)
    for r in results:
        r["launch_rules"] = rules
        r["cubins"] = {iid: hashes[iid] for iid in r.get("us", {}) if iid in hashes}


def bench(torch, hg, p: Problem, dtype: str, fast: bool, iters: int, reps: int, stream) -> dict:
    sizes = routing(torch, p.tokens, p.experts, p.topk)
    ops = make_operands(torch, p, sizes, dtype)
    calls = runners(torch, hg, p, sizes, ops, dtype, fast)
    graphs, skipped = {}, {}
    for name, call in calls:
        try:
            graphs[name] = graph_of(torch, call, iters, stream)
        except Exception as e:  # noqa: BLE001 - a baseline torch lacks is reported, not fatal
            skipped[name] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
            torch.cuda.synchronize()
    us = time_graphs(torch, graphs, iters, reps, stream)
    a, b, d, cu, ends = ops
    rows = a.shape[0]
    choice = hg.select_grouped(rows, p.n, p.k, p.experts, a_dtype=dtype, d_dtype="bf16", fp8_fast_accum=fast)
    # Loose value check: our chosen instance against torch's grouped GEMM (or the loop's output).
    d.zero_()
    hg.launch(
        choice.instance_id,
        (a.data_ptr(), b.data_ptr(), d.data_ptr()),
        torch.cuda.current_stream(),
        m=rows,
        n=p.n,
        k=p.k,
        cu_seqlens_m=cu.data_ptr(),
        num_groups=p.experts,
    )
    mine = d.float().clone()
    bt = b.transpose(1, 2)
    ref = torch.empty_like(mine)
    start = 0
    for e, s in enumerate(sizes):
        if s:
            ref[start : start + s] = a[start : start + s].float() @ bt[e].float()
        start += s
    rel = ((mine - ref).norm() / ref.norm().clamp_min(1e-30)).item()
    ours = {n: t for n, t in us.items() if n.startswith("sm90_")}
    best = min(ours, key=ours.get)
    flop = 2.0 * rows * p.n * p.k
    res = {
        "problem": p.name,
        "model": p.model,
        "proj": p.proj,
        "tokens": p.tokens,
        "experts": p.experts,
        "topk": p.topk,
        "n": p.n,
        "k": p.k,
        "rows": rows,
        "empty_groups": sum(1 for s in sizes if s == 0),
        "max_group": max(sizes),
        "dtype": dtype,
        "fast_accum": fast,
        "us": us,
        "skipped": skipped,
        "chosen": choice.instance_id,
        "chosen_us": us.get(choice.instance_id),
        "best": best,
        "best_us": ours[best],
        "rel_diff": rel,
        "tflops_chosen": flop / us[choice.instance_id] / 1e6 if choice.instance_id in us else None,
    }
    for base in ("torch._grouped_mm", "torch._scaled_grouped_mm", "cublas loop"):
        if base in us:
            res[f"vs {base}"] = us[base] / us[choice.instance_id]
    return res


def _geomean(xs) -> float:
    xs = [x for x in xs if x == x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def render_markdown(results: list[dict], env: dict, command: str) -> str:
    """The suite's tables for docs/PERF.md: one per series, then the goals' summary."""
    lines = [
        f"`{command}` ({env['date']}, {env['gpu']}, torch {env['torch']})",
        "",
    ]
    series = []
    for r in results:
        key = (r["dtype"], r["fast_accum"])
        if key not in series:
            series.append(key)
    summary = []
    for dtype, fast in series:
        rows = [r for r in results if (r["dtype"], r["fast_accum"]) == (dtype, fast)]
        base = "torch._grouped_mm" if dtype == "bf16" else "torch._scaled_grouped_mm"
        name = dtype + (
            " fast accumulation" if fast else (" promoted accumulation" if dtype != "bf16" else "")
        )
        lines += [
            f"**{name}** (ours: the instance `select_grouped` picks; vs: time of the baseline / ours)",
            "",
            f"| problem | rows | largest group | empty | ours µs | TFLOP/s | vs {base} | vs cuBLAS loop "
            "| picked |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
        ]
        for r in rows:
            pick = r["chosen"].split("_kkn_")[1]
            vs_torch = r.get("vs " + base, float("nan"))
            lines.append(
                f"| {r['problem']} | {r['rows']} | {r['max_group']} | {r['empty_groups']} | "
                f"{r['chosen_us']:.1f} | {r['tflops_chosen']:.0f} | {vs_torch:.2f} | "
                f"{r.get('vs cublas loop', float('nan')):.2f} | {pick} |"
            )
        lines.append("")
        vs_torch = [r.get("vs " + base, float("nan")) for r in rows]
        vs_loop = [r.get("vs cublas loop", float("nan")) for r in rows if r["experts"] >= 64]
        summary.append(
            f"| {name} | {_geomean(vs_torch):.3f} | {min(vs_torch):.2f} | {_geomean(vs_loop):.2f} | "
            f"{min(vs_loop) if vs_loop else float('nan'):.2f} |"
        )
    lines += [
        "| series | geomean vs torch | min vs torch | geomean vs loop (E >= 64) | min vs loop (E >= 64) |",
        "| --- | ---: | ---: | ---: | ---: |",
        *summary,
        "",
    ]
    return "\n".join(lines)


def bench_gather(torch, hg, p: Problem, dtype: str, fast: bool, iters: int, reps: int, stream) -> dict:
    """Gathered A (the token permutation fused into the load) against a separate gather (torch's
    ``index_select``, one kernel) followed by the ungathered grouped GEMM, through the instances
    `select_grouped` picks for each, both in CUDA graphs; every shipped gathering instance of the class
    is timed alone as well (under its id: build_tools/grouped_table.py files them as the gathered class's
    points)."""
    sizes, token_of_row = route(torch, p.tokens, p.experts, p.topk)
    tdt = torch.bfloat16 if dtype == "bf16" else torch.float8_e4m3fn
    x = (torch.randn(p.tokens, p.k, device="cuda") * 0.5).to(tdt)
    idx = token_of_row.to(torch.int32).cuda()
    _, b, d, cu, _ = make_operands(torch, p, sizes, dtype)
    rows = len(idx)
    xg = torch.empty(rows, p.k, device="cuda", dtype=tdt)
    kw = dict(a_dtype=dtype, d_dtype="bf16", fp8_fast_accum=fast)
    gathered = hg.select_grouped(rows, p.n, p.k, p.experts, gather_a=True, **kw).instance_id
    plain = hg.select_grouped(rows, p.n, p.k, p.experts, **kw).instance_id
    grouping = dict(m=rows, n=p.n, k=p.k, cu_seqlens_m=cu.data_ptr(), num_groups=p.experts)

    def fused():
        ptrs = (x.data_ptr(), b.data_ptr(), d.data_ptr())
        stream_now = torch.cuda.current_stream()
        hg.launch(gathered, ptrs, stream_now, a_idx=idx.data_ptr(), a_rows=p.tokens, **grouping)

    def separate():
        torch.index_select(x.view(torch.uint8), 0, idx, out=xg.view(torch.uint8))  # fp8 has no index kernel
        hg.launch(plain, (xg.data_ptr(), b.data_ptr(), d.data_ptr()), torch.cuda.current_stream(), **grouping)

    graphs = {
        "gathered": graph_of(torch, fused, iters, stream),
        "gather + grouped": graph_of(torch, separate, iters, stream),
    }
    from hgemm_sm90.dispatch import ProblemClass  # the installed package's, like its specs

    specs = hg.instances()
    cls = ProblemClass.of(next(s for s in specs if s.id == gathered))
    for iid in [s.id for s in specs if ProblemClass.of(s) == cls]:

        def alone(iid=iid):
            ptrs = (x.data_ptr(), b.data_ptr(), d.data_ptr())
            stream_now = torch.cuda.current_stream()
            hg.launch(iid, ptrs, stream_now, a_idx=idx.data_ptr(), a_rows=p.tokens, **grouping)

        graphs[iid] = graph_of(torch, alone, iters, stream)
    us = time_graphs(torch, graphs, iters, reps, stream)
    return {
        "problem": p.name,
        "model": p.model,
        "tokens": p.tokens,
        "experts": p.experts,
        "n": p.n,
        "k": p.k,
        "dtype": dtype,
        "fast_accum": fast,
        "rows": rows,
        "us": us,
        "gathered": gathered,
        "plain": plain,
        "ratio": us["gather + grouped"] / us["gathered"],
    }


def bench_wgrad(torch, hg, p: Problem, iters: int, reps: int, stream) -> dict:
    """The projection's weight gradient, dW[g] = dY_g^T @ X_g over each expert's tokens (bf16 -> bf16),
    as one grouped-K launch (`launch` with a `_varlenk` instance in the gradient's layout: A = dY^T
    m-major, B = X^T n-major) against torch._grouped_mm(dY^T, X, offs) and a loop of one cuBLAS GEMM per
    non-empty expert, all in CUDA graphs."""
    sizes = routing(torch, p.tokens, p.experts, p.topk)
    rows = sum(sizes)
    dy = (torch.randn(rows, p.n, device="cuda") * 0.5).to(torch.bfloat16)  # (T, N): dY, row-major
    x = (torch.randn(rows, p.k, device="cuda") * 0.5).to(torch.bfloat16)  # (T, K): X, row-major
    dw = torch.empty(p.experts, p.n, p.k, device="cuda", dtype=torch.bfloat16)
    ends = torch.tensor(sizes, device="cuda", dtype=torch.int32).cumsum(0, dtype=torch.int32)
    cu = torch.cat([torch.zeros(1, device="cuda", dtype=torch.int32), ends])
    insts = [
        i.id
        for i in hg.instances()
        if i.varlen_k
        and not (i.gather_a or i.has_c)  # dW = dY^T X from tokens in expert order, nothing added
        and i.a_dtype == "bf16"
        and i.d_dtype == "bf16"
        and (i.a_major, i.b_major) == ("m", "n")
    ]
    calls = []
    for iid in insts:

        def ours(iid=iid):
            hg.launch(
                iid,
                (dy.data_ptr(), x.data_ptr(), dw.data_ptr()),
                torch.cuda.current_stream(),
                m=p.n,
                n=p.k,
                k=rows,
                lda=p.n,
                ldb=p.k,
                cu_seqlens_k=cu.data_ptr(),
                num_groups=p.experts,
            )

        calls.append((iid, ours))
    calls.append(
        ("torch._grouped_mm", lambda: torch._grouped_mm(dy.t(), x, offs=ends, out_dtype=torch.bfloat16))
    )
    starts = [0]
    for n_rows in sizes:
        starts.append(starts[-1] + n_rows)

    def loop():
        for e, n_rows in enumerate(sizes):
            if n_rows:
                torch.mm(dy[starts[e] : starts[e + 1]].t(), x[starts[e] : starts[e + 1]], out=dw[e])

    calls.append(("cublas loop", loop))
    graphs, skipped = {}, {}
    for name, call in calls:
        try:
            graphs[name] = graph_of(torch, call, iters, stream)
        except Exception as e:  # noqa: BLE001 - a baseline torch lacks is reported, not fatal
            skipped[name] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
            torch.cuda.synchronize()
    us = time_graphs(torch, graphs, iters, reps, stream)
    ours_us = {k: v for k, v in us.items() if k.startswith("sm90_")}
    best = min(ours_us, key=ours_us.get)
    return {
        "problem": p.name + " wgrad",
        "rows": rows,
        "us": us,
        "skipped": skipped,
        "best": best,
        "tflops": 2.0 * rows * p.n * p.k / ours_us[best] / 1e6,
        "vs torch._grouped_mm": us.get("torch._grouped_mm", float("nan")) / ours_us[best],
        "vs cublas loop": us["cublas loop"] / ours_us[best],
    }


def bench_wgrad_gather(torch, hg, p: Problem, iters: int, reps: int, stream) -> dict:
    """The weight gradient with the token permutation fused (bf16): dW[g]^T = X[idx_g]^T @ dY_g as
    ``grouped_gemm(x.t(), dy, out=, cu_seqlens_k=, a_idx=)`` (a gathering grouped-K instance reads the
    tokens x in place) against ``index_select`` into a buffer followed by the same call without a_idx,
    both dispatched by `select_grouped`, in CUDA graphs."""
    sizes, token_of_row = route(torch, p.tokens, p.experts, p.topk)
    rows = sum(sizes)
    idx = token_of_row.to(torch.int32).cuda()
    x = (torch.randn(p.tokens, p.k, device="cuda") * 0.5).to(torch.bfloat16)  # the tokens, once each
    dy = (torch.randn(rows, p.n, device="cuda") * 0.5).to(torch.bfloat16)  # expert-sorted rows
    xg = torch.empty(rows, p.k, device="cuda", dtype=torch.bfloat16)
    dwt = torch.empty(p.experts, p.k, p.n, device="cuda", dtype=torch.bfloat16)
    ends = torch.tensor(sizes, device="cuda", dtype=torch.int32).cumsum(0, dtype=torch.int32)
    cu = torch.cat([torch.zeros(1, device="cuda", dtype=torch.int32), ends])
    kw = dict(a_dtype="bf16", d_dtype="bf16", a_major="m", b_major="n", varlen="k")
    gathered = hg.select_grouped(p.k, p.n, rows, p.experts, gather_a=True, **kw).instance_id
    plain = hg.select_grouped(p.k, p.n, rows, p.experts, **kw).instance_id

    def fused():
        hg.grouped_gemm(x.t(), dy, out=dwt, cu_seqlens_k=cu, a_idx=idx)

    def separate():
        torch.index_select(x, 0, idx, out=xg)
        hg.grouped_gemm(xg.t(), dy, out=dwt, cu_seqlens_k=cu)

    graphs = {
        "gathered": graph_of(torch, fused, iters, stream),
        "gather + grouped": graph_of(torch, separate, iters, stream),
    }
    us = time_graphs(torch, graphs, iters, reps, stream)
    return {
        "problem": p.name + " wgrad",
        "dtype": "bf16",
        "fast_accum": False,
        "rows": rows,
        "us": us,
        "gathered": gathered,
        "plain": plain,
        "ratio": us["gather + grouped"] / us["gathered"],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m build_tools.bench_moe", description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(SUITE_MODELS), help="comma-separated: " + ", ".join(MODELS))
    ap.add_argument("--tokens", default=",".join(map(str, TOKENS)))
    ap.add_argument("--series", default="bf16,e4m3,e4m3-fast", help="bf16, e4m3 (promoted), e4m3-fast")
    ap.add_argument("--graph-iters", type=int, default=10)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--json", help="write every result here")
    ap.add_argument("--markdown", help="write the tables for docs/PERF.md here")
    ap.add_argument(
        "--gather",
        action="store_true",
        help="time gathered A against a separate gather + grouped GEMM (with --wgrad: gathered K positions)",
    )
    ap.add_argument(
        "--wgrad", action="store_true", help="time the weight gradient (grouped K, bf16) against torch"
    )
    args = ap.parse_args(argv)
    import torch

    import hgemm_sm90 as hg

    series = {"bf16": ("bf16", False), "e4m3": ("e4m3", False), "e4m3-fast": ("e4m3", True)}
    chosen_series = [series[s] for s in args.series.split(",")]
    stream = torch.cuda.Stream()
    results = []
    t0 = time.time()
    for model in args.models.split(","):
        experts, topk, projs = MODELS[model]
        for proj, n, k in projs:
            for tokens in map(int, args.tokens.split(",")):
                p = Problem(model, proj, tokens, experts, topk, n, k)
                if args.wgrad and args.gather:
                    r = bench_wgrad_gather(torch, hg, p, args.graph_iters, args.reps, stream)
                    results.append(r)
                    print(
                        f"{r['problem']:<32} rows {r['rows']:>6} gathered {r['us']['gathered']:9.1f} us, "
                        f"gather + grouped {r['us']['gather + grouped']:9.1f} us: {r['ratio']:.3f}x  "
                        f"{r['gathered'][-36:]} / {r['plain'][-28:]}",
                        flush=True,
                    )
                    continue
                if args.wgrad:
                    r = bench_wgrad(torch, hg, p, args.graph_iters, args.reps, stream)
                    results.append(r)
                    print(
                        f"{r['problem']:<32} rows {r['rows']:>6} ours {r['us'][r['best']]:9.1f} us "
                        f"({r['tflops']:6.1f} TF) vs _grouped_mm {r['vs torch._grouped_mm']:5.2f}x vs loop "
                        f"{r['vs cublas loop']:5.2f}x best {r['best'][32:]}",
                        flush=True,
                    )
                    for name, why in r["skipped"].items():
                        print(f"    {name}: not timed ({why})")
                    continue
                for dtype, fast in chosen_series:
                    if args.gather:
                        r = bench_gather(torch, hg, p, dtype, fast, args.graph_iters, args.reps, stream)
                        results.append(r)
                        print(
                            f"{p.name:<26} {dtype}{'-fast' if fast else '':<5} rows {r['rows']:>6} "
                            f"gathered {r['us']['gathered']:9.1f} us, gather + grouped "
                            f"{r['us']['gather + grouped']:9.1f} us: {r['ratio']:.3f}x  "
                            f"[{time.time() - t0:5.0f} s]",
                            flush=True,
                        )
                        continue
                    r = bench(torch, hg, p, dtype, fast, args.graph_iters, args.reps, stream)
                    results.append(r)
                    base = "torch._grouped_mm" if dtype == "bf16" else "torch._scaled_grouped_mm"
                    label = dtype + ("-fast" if fast else "")
                    vs_torch = r.get("vs " + base, float("nan"))
                    print(
                        f"{p.name:<26} {label:<9} rows {r['rows']:>6} ours {r['chosen_us']:9.1f} us "
                        f"({r['tflops_chosen']:6.1f} TF) vs {base[6:]} {vs_torch:5.2f}x "
                        f"vs loop {r.get('vs cublas loop', float('nan')):5.2f}x  best {r['best'][-40:]} "
                        f"{r['best_us']:9.1f}  diff {r['rel_diff']:.1e}  [{time.time() - t0:5.0f} s]",
                        flush=True,
                    )
                    for name, why in r["skipped"].items():
                        print(f"    {name}: not timed ({why})")
    record_provenance(results, hg)
    props = torch.cuda.get_device_properties(0)
    env = {
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "gpu": torch.cuda.get_device_name(),
        # The tuning table's GPU key (build_tools/grouped_table.py writes these runs into it).
        "gpu_key": f"{props.name}/{props.multi_processor_count}",
        "torch": torch.__version__,
    }
    if args.json:
        with open(args.json, "w") as f:
            json.dump({**env, "results": results}, f, indent=1)
    if args.markdown:
        command = "python -m build_tools.bench_moe " + " ".join(argv if argv is not None else sys.argv[1:])
        with open(args.markdown, "w") as f:
            if args.gather:
                ratios = [r["ratio"] for r in results]
                f.write(
                    f"`{command.strip()}` ({env['date']}, {env['gpu']}, torch {env['torch']}): "
                    f"(gather + grouped) / gathered over {len(ratios)} problems: geomean "
                    f"{_geomean(ratios):.3f}x, min {min(ratios):.3f}x\n"
                )
            elif args.wgrad:
                f.write(f"`{command.strip()}` ({env['date']}, {env['gpu']}, torch {env['torch']})\n\n")
                f.write(
                    "| weight gradient | tokens x top-k | ours µs | TFLOP/s | vs torch._grouped_mm "
                    "| vs cuBLAS loop | fastest |\n| --- | ---: | ---: | ---: | ---: | ---: | --- |\n"
                )
                for r in results:
                    fastest = r["best"].removeprefix("sm90_")
                    f.write(
                        f"| {r['problem']} | {r['rows']} | {r['us'][r['best']]:.1f} | {r['tflops']:.0f} | "
                        f"{r['vs torch._grouped_mm']:.2f} | {r['vs cublas loop']:.2f} | {fastest} |\n"
                    )
            else:
                f.write(render_markdown(results, env, command.strip()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
