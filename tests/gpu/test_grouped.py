"""GPU tier: grouped GEMM with a per-group M (`varlen` "m", id suffix `_varlenm`), every shipped instance.

A grouped launch computes, for each group g of rows [s_g, s_g+1) of A and D, D[s_g:s_g+1] = alpha *
A[s_g:s_g+1] @ B[g]^T, with the offsets s read by the kernel from a device int32 array. Checked here:
- group sizes that stress the walk: empty groups (first, last, runs of them), one-row groups, sizes that
  are not a multiple of 8 or of the tile, a group spanning many tiles, G = 1 and G = 256, against a
  per-group fp64 reference (error judged against torch's own per-group GEMM, as tests/gpu/gemm_util.py
  does for plain GEMMs), with D poisoned with NaN (an unwritten row fails) and rows past s_G, D's row
  padding and the guards after it holding a sentinel that must stay bitwise unchanged (a row written past
  its group's end or past D fails);
- offsets outside [0, m] (a malformed cu_seqlens_m): the kernel clamps them and writes nothing outside D;
- a CUDA graph captured once and replayed after the offsets changed on the device: the replay follows the
  new sizes (nothing about them is read on the host);
- the grouped form of gemm() (hgemm_sm90.grouped_gemm) with torch tensors.
"""

from __future__ import annotations

import pytest

from tests.gpu import gemm_util as g

torch = g.torch
hgemm_sm90 = g.hgemm_sm90
pytestmark = pytest.mark.gpu

GROUPED = g.GROUPED
SENTINEL = g.D_SENTINEL


def _id(inst) -> str:
    return inst.id


def offsets(sizes) -> list[int]:
    out = [0]
    for s in sizes:
        out.append(out[-1] + s)
    return out


class Grouped:
    """One grouped problem: A (m, k) and D (m, n) row-major with padded rows (lda = k + pad, ldd = n + pad),
    B (G, n, k) K-major with a padded batch stride, the offsets on the device, guards after every buffer."""

    def __init__(
        self, inst, sizes, n: int, k: int, gen, extra_rows: int = 3, seqlens=None, m=None, a_idx=None
    ):
        self.inst, self.n, self.k = inst, n, k
        self.seqlens = offsets(sizes) if seqlens is None else list(seqlens)
        # Rows past s_G (must stay untouched), or the caller's m.
        self.m = max(self.seqlens[-1], 0) + extra_rows if m is None else m
        self.groups = len(self.seqlens) - 1
        in_dtype = g.TORCH_DTYPE[inst.a_dtype]
        self.d_dtype = g.TORCH_DTYPE[inst.d_dtype]
        align = 16 // g.ELEM_BYTES[str(inst.a_dtype)]
        self.lda = g.round_up(k, align) + align
        self.ldd = n + 16 // g.ELEM_BYTES[str(inst.d_dtype)]
        self.bsb = n * self.lda + align * 4
        std = g.input_std(inst, k)
        # A gathered instance reads row a_idx[i] of a source A of its own size (default: a reversed
        # permutation of m rows, with every other index repeated).
        self.a_rows = self.m
        self.idx = None
        if inst.gather_a:
            if a_idx is None:
                a_idx = [(self.m - 1 - i) // 2 * 2 for i in range(self.m)]
            self.a_rows = max(a_idx) + 1 if a_idx else 1
            self.idx = torch.tensor(a_idx, dtype=torch.int32, device=g.DEVICE)
        self.a_buf = g.random_values((self.a_rows * self.lda + 64,), in_dtype, gen, std).to(in_dtype)
        self.b_buf = g.random_values((self.groups * self.bsb + 64,), in_dtype, gen, std).to(in_dtype)
        self.a = self.a_buf[: self.a_rows * self.lda].view(self.a_rows, self.lda)[:, :k]
        self.b = torch.as_strided(self.b_buf, (self.groups, n, k), (self.bsb, self.lda, 1))
        self.d_buf = torch.full((self.m * self.ldd + 64,), SENTINEL, dtype=self.d_dtype, device=g.DEVICE)
        self.d = self.d_buf[: self.m * self.ldd].view(self.m, self.ldd)[:, :n]
        self.alpha = g.random_scale(gen)
        # Instances that read C: C (m, n) like D, its own padded rows, added as beta * C by output row.
        self.c, self.ldc, self.beta = None, None, 0.0
        if inst.has_c:
            c_dtype = g.TORCH_DTYPE[inst.c_dtype]
            self.ldc = n + 2 * 16 // g.ELEM_BYTES[str(inst.c_dtype)]
            c_buf = g.random_values((self.m * self.ldc,), c_dtype, gen).to(c_dtype)
            self.c = c_buf.view(self.m, self.ldc)[:, :n]
            self.beta = g.random_scale(gen)
        self.cu = torch.tensor(self.seqlens, dtype=torch.int32, device=g.DEVICE)
        self.poison()

    def poison(self):
        """NaN in every row a group owns (clamped to [0, m], as the kernel clamps); the sentinel elsewhere."""
        self.d_buf.fill_(SENTINEL)
        lo = min(max(self.seqlens[0], 0), self.m)
        hi = self.owned_end()
        self.d[lo:hi] = float("nan")

    def owned_end(self) -> int:
        """The end of the rows some group owns after the kernel's clamping."""
        end, prev = 0, 0
        for s in self.seqlens:
            prev = min(max(s, prev), self.m)
            end = max(end, prev)
        return end

    def launch(self, stream=None, **kw):
        hgemm_sm90.launch(
            self.inst.id,
            (self.a.data_ptr(), self.b.data_ptr(), self.d.data_ptr()),
            torch.cuda.current_stream() if stream is None else stream,
            m=self.m,
            n=self.n,
            k=self.k,
            lda=self.lda,
            ldb=self.lda,
            ldd=self.ldd,
            batch_stride_b=self.bsb,
            alpha=self.alpha,
            cu_seqlens_m=self.cu.data_ptr(),
            num_groups=self.groups,
            **({"a_idx": self.idx.data_ptr(), "a_rows": self.a_rows} if self.idx is not None else {}),
            **({"c": self.c.data_ptr(), "ldc": self.ldc, "beta": self.beta} if self.c is not None else {}),
            **kw,
        )

    def rows_of_a(self, first: int, end: int):
        """The groups' A rows [first, end): gathered through a_idx for a gathering instance."""
        if self.idx is None:
            return self.a[first:end]
        return self.a[self.idx[first:end].long()]

    def group_rows(self):
        """(g, first, end) of each group, clamped like the kernel (tile_scheduler.group_rows)."""
        for gi in range(self.groups):
            first = min(max(self.seqlens[gi], 0), self.m)
            end = min(max(self.seqlens[gi + 1], first), self.m)
            yield gi, first, end

    def check(self, what: str = "", values: bool = True):
        """Every owned row against the reference (unless `values` is False: then only written, not NaN);
        everything else of D's buffer still the sentinel."""
        torch.cuda.synchronize()
        fast = bool(self.inst.fp8_fast_accum)
        written = torch.zeros(self.m, dtype=torch.bool, device=g.DEVICE)
        for gi, first, end in self.group_rows():
            if end == first:
                continue
            written[first:end] = True
            a = self.rows_of_a(first, end).unsqueeze(0)
            b = self.b[gi].unsqueeze(0)
            ref = (a.double() @ b.double().mT)[0] * self.alpha
            acc, via = g.torch_accumulator(a, b, fast)
            acc = acc[0] * self.alpha
            if self.c is not None:
                ref = ref + self.beta * self.c[first:end].double()
                acc = acc + self.beta * self.c[first:end].float()
            theirs = acc.to(self.d_dtype).double()
            ours = self.d[first:end].double()
            where = f"{self.inst.id} {what} group {gi} rows [{first}, {end})"
            assert not torch.isnan(ours).any(), f"{where}: unwritten (NaN) rows of D"
            if not values:
                continue
            scale = ref.abs().max().item() or 1.0
            err_ours = (ours - ref).abs().max().item()
            err_torch = (theirs - ref).abs().max().item()
            bound = g.K_FACTOR_FP8_FAST if fast else g.K_FACTOR
            assert err_ours <= bound * err_torch + g.ATOL_REL * scale + 1e-30, (
                f"{where}: max error {err_ours:.3g} vs {via} {err_torch:.3g} (|ref| max {scale:.3g})"
            )
        # Rows no group owns, the row padding and the guards: the sentinel, bitwise.
        unowned = self.d[~written]
        assert bool((unowned == SENTINEL).all()), (
            f"{self.inst.id} {what}: a row outside every group was written"
        )
        pad = self.d_buf[: self.m * self.ldd].view(self.m, self.ldd)[:, self.n :]
        assert bool((pad == SENTINEL).all()), f"{self.inst.id} {what}: D's row padding was written"
        tail = self.d_buf[self.m * self.ldd :]
        assert bool((tail == SENTINEL).all()), f"{self.inst.id} {what}: the guard after D was written"


# Group sizes: (name, sizes). Every list has empty groups except "one", and sizes not a multiple of 8.
SIZES = [
    ("one", [333]),
    ("ragged", [0, 1, 7, 0, 130, 64, 0, 0, 257, 3, 0]),
    ("ones", [1] * 9 + [0, 2]),
    ("big_last", [5, 0, 1000]),
    ("empty_ends", [0, 0, 17, 128, 129, 0, 0]),
]


def _n_k(inst):
    """A partial last column tile and k-tile (16-byte rows for fp8 too); gathering instances take whole
    k-tiles (the runtime's rule)."""
    return 520, 8 * inst.tile[2] + (0 if inst.gather_a else 48)


@pytest.mark.parametrize("inst", GROUPED, ids=_id)
@pytest.mark.parametrize(("name", "sizes"), SIZES, ids=[s[0] for s in SIZES])
def test_grouped_sizes(inst, name, sizes, gen):
    n, k = _n_k(inst)
    p = Grouped(inst, sizes, n, k, gen)
    p.launch()
    p.check(name)


@pytest.mark.parametrize("inst", GROUPED, ids=_id)
def test_256_groups(inst, gen):
    """G = 256 (a DeepSeek-V3-like layer's experts), skewed sizes with many empty experts."""
    sizes_gen = torch.Generator().manual_seed(256)
    raw = torch.randint(0, 40, (256,), generator=sizes_gen)
    raw[torch.randperm(256, generator=sizes_gen)[:60]] = 0
    p = Grouped(inst, raw.tolist(), 264, 2 * inst.tile[2], gen)
    p.launch()
    p.check("G=256")


@pytest.mark.parametrize("inst", GROUPED[:2], ids=_id)
def test_malformed_offsets_write_nothing_outside_d(inst, gen):
    """Offsets that decrease, start negative or run past m: clamped into [0, m], no write outside D. (The
    clamped groups overlap, so a row's value may come from either group: only "written, nowhere else"
    is checked.)"""
    n, k = _n_k(inst)
    p = Grouped(inst, [], n, k, gen, seqlens=[-5, 40, 30, 90, 400], m=200)  # cu_seqlens_m[G] = 400 > m
    p.launch()
    p.check("malformed offsets", values=False)


@pytest.mark.parametrize("inst", GROUPED[:1], ids=_id)
def test_graph_replay_follows_new_offsets(inst, gen):
    """Capture once, change the offsets on the device, replay: the new group sizes are computed."""
    n, k = _n_k(inst)
    first, second = [40, 0, 200, 9], [0, 129, 1, 119]
    p = Grouped(inst, first, n, k, gen)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        p.launch(stream)  # warm-up (first call prepares the launch) outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        p.launch(stream)
    for sizes in (first, second):
        p.seqlens = offsets(sizes)
        p.cu.copy_(torch.tensor(p.seqlens, dtype=torch.int32))  # on the device, no host read by us
        p.poison()
        graph.replay()
        p.check(f"graph replay {sizes}")


# --- grouped_gemm(): torch tensors, dispatched ----------------------------------------------------------

GROUPED_CLASSES = sorted({(str(i.a_dtype), bool(i.fp8_fast_accum)) for i in GROUPED})


@pytest.mark.parametrize(("dtype", "fast"), GROUPED_CLASSES)
def test_grouped_gemm_torch_tensors(dtype, fast, gen):
    """grouped_gemm(x, w.transpose(1, 2), offsets) against a per-group fp64 reference: what the instance
    select_grouped picks computes, with the layouts a MoE layer has (w is (G, N, K) row-major)."""
    tdt = g.TORCH_DTYPE[dtype]
    sizes = [0, 37, 1, 300, 0, 129, 64]
    cu = torch.tensor(offsets(sizes), dtype=torch.int32, device=g.DEVICE)
    m, n, k = sum(sizes), 1040, 768
    std = 1.0 if dtype == "bf16" else 0.5
    x = g.random_values((m, k), tdt, gen, std).to(tdt)
    w = g.random_values((len(sizes), n, k), tdt, gen, std).to(tdt)
    y = hgemm_sm90.grouped_gemm(x, w.transpose(1, 2), cu, alpha=0.5, fp8_fast_accum=fast)
    assert y.shape == (m, n) and y.dtype == torch.bfloat16
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device=g.DEVICE)
    assert hgemm_sm90.grouped_gemm(x, w.transpose(1, 2), cu, out, alpha=0.5, fp8_fast_accum=fast) is out
    torch.cuda.synchronize()
    for gi, (first, end) in enumerate(zip(cu.tolist()[:-1], cu.tolist()[1:])):
        if end == first:
            continue
        ref = 0.5 * (x[first:end].double() @ w[gi].double().T)
        for got in (y, out):
            rel = ((got[first:end].double() - ref).norm() / ref.norm()).item()
            bound = g.REL_BOUND["bf16"]
            if dtype != "bf16":
                bound = max(bound, g.FP8_ACC_REL_BOUND[fast])
            assert rel < bound, f"group {gi}: relative error {rel:.3g}"


def test_grouped_gemm_refuses_bad_arguments():
    x = torch.zeros(64, 128, device=g.DEVICE, dtype=torch.bfloat16)
    w = torch.zeros(4, 256, 128, device=g.DEVICE, dtype=torch.bfloat16)
    cu = torch.tensor([0, 16, 32, 48, 64], dtype=torch.int32, device=g.DEVICE)
    column_major_x = torch.zeros(128, 64, device=g.DEVICE, dtype=torch.bfloat16).t()
    square_w = torch.zeros(4, 128, 128, device=g.DEVICE, dtype=torch.bfloat16)
    bad = [
        ((x, w, cu), "make K agree"),  # w not transposed: (G, N, K) taken as (G, K, N)
        ((x, square_w, cu), "K is not contiguous in each group"),  # the same mistake, square weights
        ((x, w.transpose(1, 2), cu[:-1]), r"pass 5 int32 values"),
        ((x, w.transpose(1, 2), cu.long()), r"torch.int64 tensor"),
        ((column_major_x, w.transpose(1, 2), cu), "K is not contiguous"),
        ((x[None], w.transpose(1, 2), cu), "takes a 2-D a"),
    ]
    for args, message in bad:
        with pytest.raises(hgemm_sm90.InvalidArgumentError, match=message):
            hgemm_sm90.grouped_gemm(*args)


# --- gathered A ------------------------------------------------------------------------------------------

GATHER = [i for i in GROUPED if i.gather_a]


@pytest.mark.parametrize("inst", GATHER, ids=_id)
@pytest.mark.parametrize("pattern", ["repeats", "reversed", "topk"])
def test_gathered_rows(inst, pattern, gen):
    """Indices with repeats (every token twice, as top-2 routing makes), a reversed permutation, and a
    top-k-like pattern over fewer source rows than m; the reference gathers with torch."""
    sizes = [0, 37, 1, 300, 0, 129, 64, 7]
    m = sum(sizes) + 3
    if pattern == "repeats":
        idx = [i // 2 for i in range(m)]
    elif pattern == "reversed":
        idx = list(reversed(range(m)))
    else:
        perm = torch.randperm(m // 4 + 1, generator=torch.Generator().manual_seed(5)).tolist()
        idx = [perm[(7 * i) % len(perm)] for i in range(m)]
    n, k = _n_k(inst)
    p = Grouped(inst, sizes, n, k, gen, a_idx=idx)
    p.launch()
    p.check(f"gathered {pattern}")


def test_gathering_instances_refuse_a_partial_k_tile():
    inst = GATHER[0]
    with pytest.raises(hgemm_sm90.InvalidArgumentError, match="copied in whole k-tiles"):
        hgemm_sm90.launch(
            inst.id, (16, 16, 16), 0, m=64, n=64, k=inst.tile[2] + 16, num_groups=1, cu_seqlens_m=4, a_idx=4
        )


@pytest.mark.parametrize(
    ("dtype", "fast"), sorted({(str(i.a_dtype), bool(i.fp8_fast_accum)) for i in GATHER})
)
def test_grouped_gemm_gathers_a(dtype, fast, gen):
    """grouped_gemm(x, w^T, offsets, a_idx=...) equals grouped_gemm on x[a_idx] (the same instance class
    without gathering: the same bits are not required, the same tolerance is)."""
    tdt = g.TORCH_DTYPE[dtype]
    tokens, topk, experts = 200, 2, 6
    route = torch.randint(0, experts, (tokens * topk,), generator=torch.Generator().manual_seed(3))
    order = torch.argsort(route, stable=True)
    idx = (order // topk).to(torch.int32).to(g.DEVICE)  # token of each expert-sorted row
    counts = torch.bincount(route, minlength=experts).tolist()
    cu = torch.tensor(offsets(counts), dtype=torch.int32, device=g.DEVICE)
    n, k = 264, 512
    std = 1.0 if dtype == "bf16" else 0.5
    x = g.random_values((tokens, k), tdt, gen, std).to(tdt)
    w = g.random_values((experts, n, k), tdt, gen, std).to(tdt)
    y = hgemm_sm90.grouped_gemm(x, w.transpose(1, 2), cu, a_idx=idx, fp8_fast_accum=fast)
    torch.cuda.synchronize()
    xg = x[idx.long()]
    for e in range(experts):
        first, end = cu[e].item(), cu[e + 1].item()
        if end == first:
            continue
        ref = xg[first:end].double() @ w[e].double().T
        rel = ((y[first:end].double() - ref).norm() / ref.norm()).item()
        bound = (
            g.REL_BOUND["bf16"] if dtype == "bf16" else max(g.REL_BOUND["bf16"], g.FP8_ACC_REL_BOUND[fast])
        )
        assert rel < bound, f"expert {e}: relative error {rel:.3g}"


# --- grouped K (the weight gradient) --------------------------------------------------------------------

GROUPED_K = sorted((i for i in hgemm_sm90.instances() if i.varlen_k), key=_id)


class GroupedK:
    """A grouped-K problem: A (m, total K) and B (n, total K) with the instance's majors (padded leading
    dimensions), D (G, m, n) row-major with padded rows and a padded group stride, NaN-poisoned, a sentinel
    in the padding and the guard after it."""

    def __init__(self, inst, ks, m: int, n: int, gen, seqlens=None, a_idx=None):
        self.inst, self.m, self.n = inst, m, n
        self.seqlens = offsets(ks) if seqlens is None else list(seqlens)
        self.groups = len(self.seqlens) - 1
        in_dtype = g.TORCH_DTYPE[inst.a_dtype]
        self.d_dtype = g.TORCH_DTYPE[inst.d_dtype]
        align = 16 // g.ELEM_BYTES[str(inst.a_dtype)]
        # The total K: the groups' end, padded to whole 16-byte rows for K-major operands (TMA's rule);
        # the columns past the last group belong to no group.
        self.k = g.round_up(max(max(self.seqlens), 1), align)
        std = g.input_std(inst, self.k)

        def operand(rows, major_rows: bool, cols):
            # rows x cols; stored with cols contiguous ("k" major) or rows contiguous (m/n major), padded.
            if major_rows:
                ld = g.round_up(rows, align) + align
                buf = g.random_values((cols * ld + 64,), in_dtype, gen, std).to(in_dtype)
                return buf, buf[: cols * ld].view(cols, ld)[:, :rows].t(), ld
            ld = g.round_up(cols, align) + align
            buf = g.random_values((rows * ld + 64,), in_dtype, gen, std).to(in_dtype)
            return buf, buf[: rows * ld].view(rows, ld)[:, :cols], ld

        # A gathering instance reads column a_idx[p] of an A of its own width (default: every other column
        # of a reversed order, each twice: repeats and a permutation at once).
        self.idx, self.a_cols = None, self.k
        if inst.gather_a:
            if a_idx is None:
                a_idx = [(self.k - 1 - p) // 2 for p in range(self.k)]
            self.a_cols = max(a_idx) + 1 if a_idx else 1
            self.idx = torch.tensor(a_idx, dtype=torch.int32, device=g.DEVICE)
        self.a_buf, self.a_given, self.lda = operand(m, inst.a_major == "m", self.a_cols)
        # The groups' A as the kernel sees it (gathered: a copy, for the reference).
        self.a = self.a_given if self.idx is None else self.a_given[:, self.idx.long()]
        self.b_buf, self.b, self.ldb = operand(n, inst.b_major == "n", self.k)
        self.ldd = n + 16 // g.ELEM_BYTES[str(inst.d_dtype)]
        self.bsd = m * self.ldd + 64
        self.d_buf = torch.full((self.groups * self.bsd + 64,), SENTINEL, dtype=self.d_dtype, device=g.DEVICE)
        self.d = torch.as_strided(self.d_buf, (self.groups, m, n), (self.bsd, self.ldd, 1))
        self.d[:] = float("nan")
        self.alpha = g.random_scale(gen)
        # Instances that read C: one C (m, n) per group like D (padded rows and group stride).
        self.c, self.ldc, self.bsc, self.beta = None, None, None, 0.0
        if inst.has_c:
            c_dtype = g.TORCH_DTYPE[inst.c_dtype]
            self.ldc = n + 16 // g.ELEM_BYTES[str(inst.c_dtype)]
            self.bsc = m * self.ldc + 32
            c_buf = g.random_values((self.groups * self.bsc,), c_dtype, gen).to(c_dtype)
            self.c = torch.as_strided(c_buf, (self.groups, m, n), (self.bsc, self.ldc, 1))
            self.beta = g.random_scale(gen)
        self.cu = torch.tensor(self.seqlens, dtype=torch.int32, device=g.DEVICE)

    def with_c(self) -> dict:
        """launch()'s C arguments (none for an instance without C)."""
        if self.c is None:
            return {}
        return {"c": self.c.data_ptr(), "ldc": self.ldc, "batch_stride_c": self.bsc, "beta": self.beta}

    def launch(self, stream=None):
        gather = {} if self.idx is None else {"a_idx": self.idx.data_ptr(), "a_cols": self.a_cols}
        hgemm_sm90.launch(
            self.inst.id,
            (self.a_given.data_ptr(), self.b.data_ptr(), self.d.data_ptr()),
            torch.cuda.current_stream() if stream is None else stream,
            m=self.m,
            n=self.n,
            k=self.k,
            lda=self.lda,
            ldb=self.ldb,
            ldd=self.ldd,
            batch_stride_d=self.bsd,
            alpha=self.alpha,
            cu_seqlens_k=self.cu.data_ptr(),
            num_groups=self.groups,
            **self.with_c(),
            **gather,
        )

    def sibling_result(self, base_id: str):
        """D (G, m, n) of the shipped grouped-K instance `base_id` (this one without C, or without
        gathering) on the same groups' A (a packed copy when A is gathered), B and offsets. Instances with
        C are checked against it plus beta * C; gathering ones against its bits (the same k-tiles of the
        same columns): the accumulation is the same kernel's, its accuracy checked by that instance's own
        tests."""
        a, lda = self.a, self.lda
        if self.idx is not None:  # the gathered columns, packed in A's (M-major) layout
            a = self.a.t().contiguous().t() if self.inst.a_major == "m" else self.a.contiguous()
            lda = a.stride(1) if self.inst.a_major == "m" else a.stride(0)
        d = torch.full((self.groups, self.m, self.n), float("nan"), dtype=self.d_dtype, device=g.DEVICE)
        hgemm_sm90.launch(
            base_id,
            (a.data_ptr(), self.b.data_ptr(), d.data_ptr()),
            torch.cuda.current_stream(),
            m=self.m,
            n=self.n,
            k=self.k,
            lda=lda,
            ldb=self.ldb,
            alpha=self.alpha,
            cu_seqlens_k=self.cu.data_ptr(),
            num_groups=self.groups,
        )
        torch.cuda.synchronize()
        return d

    def plain_sibling(self):
        """The shipped instance that is this one without groups (same dtypes, layout, tile), or None (also
        for an instance with C: those are checked against the fp64 reference)."""
        plain = self.inst.id.replace("_varlenk", "")
        if self.c is not None or self.idx is not None:
            return None
        return plain if any(i.id == plain for i in hgemm_sm90.instances()) else None

    def plain_result(self, plain: str, first: int, end: int):
        """D of the plain instance on A[:, first:end] @ B[:, first:end]^T, each operand copied into a
        zeroed buffer in the instance's layout, with the grouped kernel's k-tile boundaries: the range
        starts `first % (elements per 16 bytes)` columns in (the kernel's loads start 16-byte aligned) and
        K is padded to whole 16-byte rows."""
        align = 16 // g.ELEM_BYTES[str(self.inst.a_dtype)]
        lead = first % align
        kp = g.round_up(lead + end - first, align)

        def copy(x, major_rows: bool):
            rows = x.shape[0]
            if major_rows:  # (K, rows) storage, rows contiguous
                buf = torch.zeros(kp, rows, dtype=x.dtype, device=g.DEVICE)
                buf[lead : lead + end - first] = x[:, first:end].t()
                return buf, buf.t(), rows
            buf = torch.zeros(rows, kp, dtype=x.dtype, device=g.DEVICE)
            buf[:, lead : lead + end - first] = x[:, first:end]
            return buf, buf, kp

        _, a, lda = copy(self.a, self.inst.a_major == "m")
        _, b, ldb = copy(self.b, self.inst.b_major == "n")
        d = torch.full((self.m, self.n), float("nan"), dtype=self.d_dtype, device=g.DEVICE)
        hgemm_sm90.launch(
            plain,
            (a.data_ptr(), b.data_ptr(), d.data_ptr()),
            torch.cuda.current_stream(),
            m=self.m,
            n=self.n,
            k=kp,
            lda=lda,
            ldb=ldb,
            alpha=self.alpha,
        )
        torch.cuda.synchronize()
        return d

    def check(self, what: str = ""):
        torch.cuda.synchronize()
        fast = bool(self.inst.fp8_fast_accum)
        base = None
        if self.c is not None:
            base = self.sibling_result(self.inst.id.replace(f"_c{self.inst.c_dtype}{self.inst.c_major}", ""))
            base = base.double()
        ungathered = None if self.idx is None else self.sibling_result(self.inst.id.replace("_gathera", ""))
        for gi in range(self.groups):
            first = min(max(self.seqlens[gi], 0), self.k)
            end = min(max(self.seqlens[gi + 1], first), self.k)
            ours = self.d[gi].double()
            where = f"{self.inst.id} {what} group {gi} K [{first}, {end})"
            assert not torch.isnan(ours).any(), f"{where}: unwritten (NaN) elements of D"
            if end == first:  # alpha * 0 + beta * C, in fp32, then D's dtype
                empty = 0 if self.c is None else (self.beta * self.c[gi].float()).to(self.d_dtype).double()
                assert bool((ours == empty).all()), f"{where}: an empty group's D is not beta * C (or 0)"
                continue
            if base is not None:
                # alpha * acc + beta * C rounded once (or twice: alpha * acc, then the sum) to D's dtype.
                beta_c = self.beta * self.c[gi].double()
                tol = 2 * torch.finfo(self.d_dtype).eps * (base[gi].abs() + beta_c.abs()) + 1e-30
                worst = ((ours - (base[gi] + beta_c)).abs() - tol).max().item()
                assert worst <= 0, f"{where}: differs from the instance without C plus beta * C"
                continue
            if ungathered is not None:
                assert torch.equal(g.bits(self.d[gi]), g.bits(ungathered[gi])), (
                    f"{where}: differs from the instance without gathering on the gathered columns"
                )
                continue
            sibling = self.plain_sibling()
            if sibling is not None:
                # The same kernel without groups, on this group's K range alone (zero-padded to whole
                # 16-byte rows): the same k-tiles in the same order, so the same bits. The plain kernel's
                # accuracy against cuBLAS is test_numerics.py's.
                theirs = self.plain_result(sibling, first, end)
                assert torch.equal(g.bits(self.d[gi]), g.bits(theirs)), (
                    f"{where}: differs from {sibling} on the group's K range alone"
                )
                continue
            a = self.a[:, first:end].unsqueeze(0)
            b = self.b[:, first:end].unsqueeze(0)
            ref = (a.double() @ b.double().mT)[0] * self.alpha
            acc, via = g.torch_accumulator(a, b, fast)
            acc = acc[0] * self.alpha
            if self.c is not None:
                ref = ref + self.beta * self.c[gi].double()
                acc = acc + self.beta * self.c[gi].float()
            theirs = acc.to(self.d_dtype).double()
            scale = ref.abs().max().item() or 1.0
            err_ours = (ours - ref).abs().max().item()
            err_torch = (theirs - ref).abs().max().item()
            bound = g.K_FACTOR_FP8_FAST if fast else g.K_FACTOR
            assert err_ours <= bound * err_torch + g.ATOL_REL * scale + 1e-30, (
                f"{where}: max error {err_ours:.3g} vs {via} {err_torch:.3g} (|ref| max {scale:.3g})"
            )
        pad = torch.as_strided(
            self.d_buf, (self.groups, self.m, self.ldd - self.n), (self.bsd, self.ldd, 1), self.n
        )
        assert bool((pad == SENTINEL).all()), f"{self.inst.id} {what}: D's row padding was written"
        gaps = [
            self.d_buf[gi * self.bsd + self.m * self.ldd : (gi + 1) * self.bsd] for gi in range(self.groups)
        ]
        assert all(bool((x == SENTINEL).all()) for x in gaps), (
            f"{self.inst.id} {what}: a group's gap was written"
        )


# K sizes per group: empty groups, one column, sizes that are not a multiple of 8 or of the tile's K
# (the last k-tile of a group is trimmed), a group over many k-tiles.
K_SIZES = [
    ("one", [517]),
    ("ragged", [0, 1, 7, 0, 130, 64, 0, 257, 3]),
    ("big_last", [5, 0, 1000]),
]


@pytest.mark.parametrize("inst", GROUPED_K, ids=_id)
@pytest.mark.parametrize(("name", "ks"), K_SIZES, ids=[s[0] for s in K_SIZES])
def test_grouped_k(inst, name, ks, gen):
    p = GroupedK(inst, ks, 264, 520, gen)
    p.launch()
    p.check(name)


@pytest.mark.parametrize("inst", GROUPED_K, ids=_id)
def test_grouped_k_256_groups(inst, gen):
    """G = 256 weight gradients (a DeepSeek-V3-like layer's experts): skewed K sizes, many empty groups."""
    sizes_gen = torch.Generator().manual_seed(257)
    raw = torch.randint(0, 40, (256,), generator=sizes_gen)
    raw[torch.randperm(256, generator=sizes_gen)[:60]] = 0
    p = GroupedK(inst, raw.tolist(), 136, 264, gen)
    p.launch()
    p.check("G=256")


@pytest.mark.parametrize("inst", GROUPED_K[:2], ids=_id)
def test_grouped_k_graph_replay_follows_new_offsets(inst, gen):
    first, second = [40, 0, 200, 9], [0, 129, 1, 119]
    p = GroupedK(inst, first, 136, 264, gen)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        p.launch(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        p.launch(stream)
    for ks in (first, second):
        p.seqlens = offsets(ks)
        p.cu.copy_(torch.tensor(p.seqlens, dtype=torch.int32))
        p.d[:] = float("nan")
        graph.replay()
        p.check(f"graph replay {ks}")


# --- grouped_gemm() with C, and its per-group K form ------------------------------------------------------


def test_grouped_gemm_adds_c_per_row(gen):
    """grouped_gemm(..., c=, beta=) over groups of rows: out[s_g:s_g+1] = alpha * x @ w[g]^T + beta * c,
    dispatched to an instance that reads C; rows past s_G stay untouched."""
    sizes = [0, 37, 1, 300, 0, 129, 64]
    cu = torch.tensor(offsets(sizes), dtype=torch.int32, device=g.DEVICE)
    m, n, k = sum(sizes) + 5, 1040, 768
    x = g.random_values((m, k), torch.bfloat16, gen).to(torch.bfloat16)
    w = g.random_values((len(sizes), n, k), torch.bfloat16, gen).to(torch.bfloat16)
    c = g.random_values((m, n), torch.bfloat16, gen).to(torch.bfloat16)
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device=g.DEVICE)
    assert hgemm_sm90.grouped_gemm(x, w.transpose(1, 2), cu, out, c=c, alpha=0.5, beta=-1.5) is out
    torch.cuda.synchronize()
    for gi, (first, end) in enumerate(zip(cu.tolist()[:-1], cu.tolist()[1:])):
        if end == first:
            continue
        ref = 0.5 * (x[first:end].double() @ w[gi].double().T) - 1.5 * c[first:end].double()
        rel = ((out[first:end].double() - ref).norm() / ref.norm()).item()
        assert rel < g.REL_BOUND["bf16"], f"group {gi}: relative error {rel:.3g}"
    assert bool(torch.isnan(out[sum(sizes) :]).all()), "rows past the last group were written"


# The 16-bit layout classes (fp8 grouped K is covered per instance by test_grouped_k).
GROUPED_K_CLASSES = sorted(
    {(str(i.a_dtype), str(i.d_dtype), i.a_major, i.b_major, i.has_c) for i in GROUPED_K if not g.is_fp8(i)}
)


@pytest.mark.parametrize(("dtype", "d_dtype", "a_major", "b_major", "with_c"), GROUPED_K_CLASSES)
def test_grouped_gemm_over_k(dtype, d_dtype, a_major, b_major, with_c, gen):
    """grouped_gemm(a, b, cu_seqlens_k=..., out=(G, M, N)): the weight gradient dW[g] = dY_g^T X_g with the
    operands as a training step has them (a = dy.t() is M-contiguous, b = x is N-contiguous; or both
    K-contiguous), each layout class dispatched; with C, c=out and beta=1 accumulates into out."""
    tdt, odt = g.TORCH_DTYPE[dtype], g.TORCH_DTYPE[d_dtype]
    ks = [0, 33, 1, 300, 0, 129, 65]  # 528 in all: K-contiguous operands need whole 16-byte rows
    cu = torch.tensor(offsets(ks), dtype=torch.int32, device=g.DEVICE)
    tokens, m, n = sum(ks), 264, 520
    dy = g.random_values((tokens, m), tdt, gen).to(tdt)  # (K, M)
    x = g.random_values((tokens, n), tdt, gen).to(tdt)  # (K, N)
    a = dy.t() if a_major == "m" else dy.t().contiguous()
    b = x if b_major == "n" else x.t().contiguous().t()
    start = g.random_values((len(ks), m, n), odt, gen).to(odt)
    out = start.clone() if with_c else torch.full((len(ks), m, n), float("nan"), dtype=odt, device=g.DEVICE)
    kw = dict(c=out, beta=1.0) if with_c else {}
    assert hgemm_sm90.grouped_gemm(a, b, out=out, cu_seqlens_k=cu, alpha=0.5, **kw) is out
    torch.cuda.synchronize()
    for gi, (first, end) in enumerate(zip(cu.tolist()[:-1], cu.tolist()[1:])):
        ref = 0.5 * (dy[first:end].double().T @ x[first:end].double())
        if with_c:
            ref = ref + start[gi].double()
        got = out[gi].double()
        if end == first and not with_c:
            assert bool((got == 0).all()), f"group {gi}: an empty group's out is not zero"
            continue
        rel = ((got - ref).norm() / ref.norm()).item()
        assert rel < g.REL_BOUND[d_dtype], f"group {gi}: relative error {rel:.3g}"


def test_grouped_gemm_over_k_refuses_bad_arguments():
    a = torch.zeros(128, 64, device=g.DEVICE, dtype=torch.bfloat16)
    b = torch.zeros(64, 256, device=g.DEVICE, dtype=torch.bfloat16)
    out = torch.zeros(4, 128, 256, device=g.DEVICE, dtype=torch.float32)
    cu = torch.tensor([0, 16, 32, 48, 64], dtype=torch.int32, device=g.DEVICE)
    bad = [
        ((a, b), dict(cu_seqlens_k=cu), "out=None with cu_seqlens_k"),
        ((a, b), dict(out=out, cu_seqlens_k=cu[:-1]), r"pass 5 int32 values"),
        ((a, b, cu), dict(out=out, cu_seqlens_k=cu), "both cu_seqlens_m and cu_seqlens_k"),
        ((a, b.t()), dict(out=out, cu_seqlens_k=cu), "make K agree"),
        ((a, b), dict(out=out[:, :, :128], cu_seqlens_k=cu), r"pass a row-major \(4, 128, 256\) out"),
        ((a, b), dict(out=out, cu_seqlens_k=cu, beta=1.0), "without c"),
        ((a, b), dict(out=out, cu_seqlens_k=cu, a_idx=cu), "needs M contiguous"),
    ]
    for args, kw, message in bad:
        with pytest.raises(hgemm_sm90.InvalidArgumentError, match=message):
            hgemm_sm90.grouped_gemm(*args, **kw)
    assert bool((out == 0).all())


def test_grouped_gemm_over_k_gathers_a(gen):
    """The weight gradient with the token permutation fused: grouped_gemm(x.t(), dy, out=, cu_seqlens_k=,
    a_idx=) computes out[e] = x[idx_e]^T @ dy_e for expert-sorted rows of dy and top-2 routed tokens of x,
    against fp64 (x read in place, never gathered into a copy)."""
    if not any(i.gather_a for i in GROUPED_K):
        pytest.skip("no grouped-K instance that gathers A is shipped")
    tokens, topk, experts, m, n = 300, 2, 6, 264, 520
    route = torch.randint(0, experts, (tokens * topk,), generator=torch.Generator().manual_seed(11))
    order = torch.argsort(route, stable=True)
    idx = (order // topk).to(torch.int32).to(g.DEVICE)  # token of each expert-sorted position
    counts = torch.bincount(route, minlength=experts).tolist()
    cu = torch.tensor(offsets(counts), dtype=torch.int32, device=g.DEVICE)
    x = g.random_values((tokens, m), torch.bfloat16, gen).to(torch.bfloat16)
    dy = g.random_values((tokens * topk, n), torch.bfloat16, gen).to(torch.bfloat16)
    for out_dtype in (torch.float32, torch.bfloat16):
        out = torch.full((experts, m, n), float("nan"), dtype=out_dtype, device=g.DEVICE)
        assert hgemm_sm90.grouped_gemm(x.t(), dy, out=out, cu_seqlens_k=cu, a_idx=idx) is out
        torch.cuda.synchronize()
        xg = x[idx.long()]
        for e in range(experts):
            first, end = cu[e].item(), cu[e + 1].item()
            ref = xg[first:end].double().T @ dy[first:end].double()
            rel = ((out[e].double() - ref).norm() / ref.norm()).item()
            bound = g.REL_BOUND["fp32" if out_dtype == torch.float32 else "bf16"]
            assert rel < bound, f"expert {e} ({out_dtype}): relative error {rel:.3g}"
