"""grouped_gemm() on the CPU: what it derives from the arrays' strides (majors, leading dimensions, group
strides, the gathered extent) and hands to select_grouped() and launch_general(), for both forms (groups of
rows, groups of K), through fake arrays that offer only ``__cuda_array_interface__``; and the bad inputs
it refuses before anything is launched. The instances themselves are exercised on the GPU
(tests/gpu/test_grouped.py)."""

from __future__ import annotations

import importlib

import pytest
from fake_arrays import CaiArray

from runtime.dispatch import Choice
from runtime.errors import InvalidArgumentError
from runtime.spec import DType

grouped_module = importlib.import_module("runtime.grouped_array_gemm")
OFFSETS = 0x7E00_0000_0000  # device addresses given as ints (grouped_gemm passes them on unchecked)
INDICES = 0x7E00_0001_0000
F16 = DType.fp16


@pytest.fixture
def calls(monkeypatch):
    """Record select_grouped's and launch_general's arguments instead of running them."""
    seen = {"select": [], "launch": []}

    def fake_select(m, n, k, num_groups, **kw):
        seen["select"].append(dict(m=m, n=n, k=k, num_groups=num_groups, **kw))
        return Choice("the_instance", None, None, "test", "", 1.0)

    def fake_launch(instance, ptrs, stream, **kw):
        seen["launch"].append((instance, ptrs, stream, kw))

    monkeypatch.setattr(grouped_module, "select_grouped", fake_select)
    monkeypatch.setattr(grouped_module, "launch_general", fake_launch)
    return seen


def matrix(rows, cols, contiguous_cols: bool, pad: int = 8, dtype=F16):
    """rows x cols with the columns (or the rows) contiguous and the other stride padded by `pad`."""
    strides = (cols + pad, 1) if contiguous_cols else (1, rows + pad)
    return CaiArray((rows, cols), dtype, strides)


@pytest.mark.parametrize("a_m_major", [False, True], ids=["a_kmajor", "a_mmajor"])
@pytest.mark.parametrize("b_n_major", [False, True], ids=["b_kmajor", "b_nmajor"])
@pytest.mark.parametrize("with_c", [False, True], ids=["no_c", "c"])
def test_over_k_derives_majors_and_strides(a_m_major, b_n_major, with_c, calls):
    m, n, k, groups = 264, 520, 1000, 4
    a = matrix(m, k, contiguous_cols=not a_m_major)
    b = matrix(k, n, contiguous_cols=b_n_major)
    out = CaiArray((groups, m, n), F16, ((m + 2) * (n + 8), n + 8, 1))
    c = CaiArray((groups, m, n), F16, ((m + 1) * (n + 16), n + 16, 1)) if with_c else None
    kw = dict(c=c, beta=0.5) if with_c else {}
    assert grouped_module.grouped_gemm(a, b, out=out, cu_seqlens_k=OFFSETS, alpha=2.0, **kw) is out
    (sel,), ((_, ptrs, _, launch),) = calls["select"], calls["launch"]
    assert sel["varlen"] == "k" and (sel["m"], sel["n"], sel["k"], sel["num_groups"]) == (m, n, k, groups)
    assert (sel["a_major"], sel["b_major"]) == ("m" if a_m_major else "k", "n" if b_n_major else "k")
    assert sel["c_dtype"] == (F16 if with_c else None) and sel["gather_a"] is False
    assert ptrs == (a.ptr, b.ptr, out.ptr)
    assert launch["lda"] == (m + 8 if a_m_major else k + 8)  # the stride of the other extent
    assert launch["ldb"] == (k + 8 if not b_n_major else n + 8)
    assert (launch["ldd"], launch["batch_stride_d"]) == (n + 8, (m + 2) * (n + 8))
    assert (launch["cu_seqlens_k"], launch["num_groups"], launch["alpha"]) == (OFFSETS, groups, 2.0)
    if with_c:
        assert (launch["c"], launch["ldc"], launch["batch_stride_c"]) == (c.ptr, n + 16, (m + 1) * (n + 16))
        assert launch["beta"] == 0.5
    else:
        assert launch["c"] is None and launch["beta"] == 0.0
    assert launch["a_idx"] is None and launch["a_cols"] is None


def test_over_k_gathers_columns_of_an_m_contiguous_a(calls):
    tokens, m, n, rows, groups = 300, 264, 520, 600, 6
    a = matrix(m, tokens, contiguous_cols=False)  # x.t() of a row-major (tokens, m) x
    b = matrix(rows, n, contiguous_cols=True)  # dy, expert-sorted rows
    out = CaiArray((groups, m, n), F16)
    grouped_module.grouped_gemm(a, b, out=out, cu_seqlens_k=OFFSETS, a_idx=INDICES)
    (sel,), ((_, _, _, launch),) = calls["select"], calls["launch"]
    assert sel["gather_a"] is True and sel["k"] == rows  # K is b's: the gathered positions
    assert (launch["k"], launch["a_idx"], launch["a_cols"]) == (rows, INDICES, tokens)


def test_rows_form_passes_c_like_out(calls):
    m, k, n, groups = 700, 512, 264, 8
    a = matrix(m, k, contiguous_cols=True)
    b = CaiArray((groups, k, n), F16, (n * (k + 8), 1, k + 8))  # w.transpose(1, 2) of a (G, N, K) w
    out, c = matrix(m, n, True, pad=16), matrix(m, n, True, pad=24)
    grouped_module.grouped_gemm(a, b, OFFSETS, out, c=c, beta=-1.0)
    (sel,), ((_, _, _, launch),) = calls["select"], calls["launch"]
    assert sel["c_dtype"] == F16 and sel.get("varlen", "m") == "m"
    assert (launch["lda"], launch["ldb"], launch["ldd"], launch["ldc"]) == (k + 8, k + 8, n + 16, n + 24)
    assert (launch["batch_stride_b"], launch["c"], launch["beta"]) == (n * (k + 8), c.ptr, -1.0)


@pytest.mark.parametrize(
    ("args", "kw", "message"),
    [
        (
            (),
            dict(out="OUT", cu_seqlens_k=OFFSETS, cu_seqlens_m=OFFSETS),
            "both cu_seqlens_m and cu_seqlens_k",
        ),
        ((), dict(out="OUT"), "no offsets given"),
        ((), dict(cu_seqlens_k=OFFSETS), "out=None with cu_seqlens_k"),
        ((), dict(out="OUT", cu_seqlens_k=OFFSETS, beta=1.0), "beta=1.0 without c"),
        ((), dict(out="OUT", cu_seqlens_k=OFFSETS, a_idx="KMAJOR_A"), "needs M contiguous"),
        ((), dict(out="BAD_OUT", cu_seqlens_k=OFFSETS), r"pass a row-major \(4, 64, 128\) out"),
        (
            (),
            dict(out="OUT", cu_seqlens_k=OFFSETS, c="BAD_OUT", beta=1.0),
            r"pass a row-major \(4, 64, 128\) c",
        ),
        ((), dict(out="OUT", cu_seqlens_k=OFFSETS, b="TRANSPOSED_B"), "make K agree"),
        ((), dict(out="OUT", cu_seqlens_k=OFFSETS, a="ZERO_K_A", b="ZERO_K_B"), "K = 0 with cu_seqlens_k"),
    ],
)
def test_bad_input_is_refused_before_anything_runs(args, kw, message, calls):
    m, k, n, groups = 64, 96, 128, 4
    named = {
        "OUT": CaiArray((groups, m, n), F16),
        "BAD_OUT": CaiArray((groups, m, n), F16, (m * n, 1, m)),  # column-major in each group
        "KMAJOR_A": INDICES,
        "TRANSPOSED_B": matrix(n, k, contiguous_cols=True),
        "ZERO_K_A": CaiArray((m, 0), F16),
        "ZERO_K_B": CaiArray((0, n), F16),
    }
    a = named.get(kw.pop("a", None), matrix(m, k, contiguous_cols=True))
    b = named.get(kw.pop("b", None), matrix(k, n, contiguous_cols=True))
    kw = {key: named.get(v, v) if isinstance(v, str) else v for key, v in kw.items()}
    with pytest.raises(InvalidArgumentError, match=message):
        grouped_module.grouped_gemm(a, b, *args, **kw)
    assert calls["launch"] == []
