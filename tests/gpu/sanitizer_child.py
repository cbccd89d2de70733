"""The child process of tests/gpu/test_sanitizer.py, and the pure helpers that test shares with it.

Run under compute-sanitizer, one process per tool, from the repository root:

    compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 99 \\
        python -m tests.gpu.sanitizer_child --shape 2040x3320x528x2 ID1 ID2 ...

For each instance id it builds one problem with tests/gpu/gemm_util.py (random A, B (and C) with NaN
padding and guards, D poisoned with NaN: every byte of every buffer is written before the launch, so
initcheck sees no uninitialised read of ours), launches it through the installed ``hgemm_sm90`` on torch's
current stream and synchronizes (so a sanitizer report lands next to the instance's own lines). It then
copies the buffers to the host and checks there (``check_on_host``): no NaN in D, D's norm-relative error
against the fp64 reference within gemm_util's bound for D's dtype (and fp8 accumulation), and every element
outside D (A, B, C, D's padding and guards) bitwise unchanged. No GPU kernel besides the set-up's fills and
copies and the GEMM under test runs under the sanitizer: torch's cuBLAS reference (gemm_util.check_gemm)
draws racecheck and initcheck reports from inside cuBLAS and torch (see test_sanitizer.py).
It prints one ``TAG ok|fail`` line per instance and a ``TAG summary`` line, and exits 1 if any instance
failed its checks (compute-sanitizer's own findings give the exit status 99 instead).

Nothing here imports torch or the runtime at import time: test_sanitizer.py imports the helpers
(``representatives``, ``parse_summaries``, ``Shape``) on any machine.
"""

from __future__ import annotations

import argparse
import re
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path

from build_tools.bench import Shape  # MxNxK[xBATCH], parsed and printed as the benchmark does

REPO = Path(__file__).resolve().parents[2]
TAG = "hgemm-sanitizer-child:"
NATURAL_MAJOR = {"a": "k", "b": "k", "d": "n"}  # the default layout, "kkn"


# --- which instances: one representative per kernel family ---------------------------------------------


def input_kind(inst) -> str:
    fp8 = inst.a_dtype.is_float8 or inst.b_dtype.is_float8  # the instance spec's DType facts
    if not fp8:
        return "16-bit"
    return "fp8 fast accumulation" if inst.fp8_fast_accum else "fp8 promoted accumulation"


def tile_family(inst) -> str:
    return f"{inst.tile[0]}x{inst.tile[1]} {inst.schedule}"


def odd_majors(inst) -> list[str]:
    """The operands of A, B, D not in the default k/k/n layout, e.g. ["a m-major", "d m-major"]."""
    majors = {"a": inst.a_major, "b": inst.b_major, "d": inst.d_major}
    return [f"{op} {majors[op]}-major" for op in "abd" if majors[op] != NATURAL_MAJOR[op]]


def gathered_a_kind(inst) -> str:
    """How a gathering grouped instance loads A: each CTA its own rows with cp.async, or a 1x2 pair each
    loading half of the rows as one-row TMA boxes multicast to both (a protocol of its own)."""
    if tuple(inst.cluster) == (1, 2):
        return "gathered pair (one-row TMA boxes, multicast)"
    return "gathered (cp.async)"


def required_features(inst) -> set[tuple]:
    """What must be covered: every value of every family axis shipped, at least once. Grouped (varlen M)
    instances form families of their own (their walk and their epilogue differ), so they never stand in
    for a plain instance's family, nor a plain one for theirs; grouped-K instances likewise."""
    if getattr(inst, "varlen_k", False):
        return {
            ("grouped-K tile family", tile_family(inst)),
            ("grouped-K inputs", input_kind(inst)),
            ("grouped-K layout", f"{inst.a_major}{inst.b_major}{inst.d_major}"),
            ("grouped-K C", "C" if inst.has_c else "no C"),
            ("grouped-K A", "gathered (cp.async)" if inst.gather_a else "TMA"),
        }
    if getattr(inst, "varlen_m", False):
        return {
            ("grouped tile family", tile_family(inst)),
            ("grouped cluster", f"{inst.cluster[0]}x{inst.cluster[1]}"),
            ("grouped inputs", input_kind(inst)),
            ("grouped A", gathered_a_kind(inst) if inst.gather_a else "TMA"),
            ("grouped C", "C" if inst.has_c else "no C"),
        }
    out = {
        ("tile family", tile_family(inst)),  # tile M x N and schedule: the mainloop/epilogue structure
        ("cluster", f"{inst.cluster[0]}x{inst.cluster[1]}"),  # TMA multicast and cluster barriers
        ("inputs", input_kind(inst)),  # 16-bit, fp8 promoted, fp8 fast
        ("D element bytes", inst.d_dtype.bytes),  # the epilogue's shared-memory staging width
        ("C", f"{inst.c_major}-major C" if inst.has_c else "no C"),  # the epilogue reads C (and how)
        ("swap-AB", bool(getattr(inst, "swap_ab", False))),  # the transposed problem's descriptors
        ("k split", str(getattr(inst, "k_split", "none"))),  # split-K: workspace partials and counters
    }
    if str(getattr(inst, "k_split", "none")) != "none" and tuple(inst.cluster) != (1, 1):
        out.add(("k split", "in a cluster"))  # each CTA of a cluster reduces its own tile
    if inst.has_c and (inst.c_dtype, inst.c_major) != (inst.d_dtype, inst.d_major):
        out.add(("C", "C unlike D (dtype or major)"))  # C staged apart from D
    out.update(("operand layout", odd) for odd in odd_majors(inst))
    if input_kind(inst) == "fp8 promoted accumulation":
        # The promoted mainloop differs per tile (a double-buffered per-k-tile accumulator where registers
        # allow it, a single one per warpgroup in the 192-row tiles), so each shipped tile is its own family.
        out.add(("promoted accumulation tile", tile_family(inst)))
    return out


def secondary_features(inst) -> set[tuple]:
    """Combinations worth spreading over the picks when it costs no extra instance (tie-breaks only)."""
    kind, tile = input_kind(inst), tile_family(inst)
    out = {("tile x cluster", tile, tuple(inst.cluster)), ("tile x inputs", tile, kind)}
    if inst.has_c:
        out.add(("inputs x C", kind))
    if odd_majors(inst):
        out.add(("inputs x layout", kind))
    return out


def representatives(instances) -> list:
    """A small set of shipped instances that together cover every required feature of every instance,
    chosen greedily and deterministically: repeatedly take the instance that covers the most required
    features not yet covered; ties go to the one that covers the most secondary features not yet covered
    (tile x cluster, tile x inputs, inputs x C, inputs x layout), then to the larger cluster (more
    multicast), then to the smaller id. Returned in the order picked."""
    insts = sorted(instances, key=lambda i: i.id)
    req = {i.id: required_features(i) for i in insts}
    sec = {i.id: secondary_features(i) for i in insts}
    need = set().union(*req.values()) if insts else set()
    want = set().union(*sec.values()) if insts else set()
    picked = []
    while need:
        best = min(
            insts, key=lambda i: (-len(req[i.id] & need), -len(sec[i.id] & want), -inst_cluster_size(i), i.id)
        )
        picked.append(best)
        need -= req[best.id]
        want -= sec[best.id]
    return picked


def inst_cluster_size(inst) -> int:
    return inst.cluster[0] * inst.cluster[1]


def describe(inst) -> str:
    """One line of what the instance stands for."""
    parts = [
        tile_family(inst),
        f"cluster {inst.cluster[0]}x{inst.cluster[1]}",
        input_kind(inst),
        f"{inst.a_dtype} x {inst.b_dtype} -> {inst.d_dtype}",
    ]
    parts.append(f"C {inst.c_dtype} {inst.c_major}-major" if inst.has_c else "no C")
    parts.append(", ".join(odd_majors(inst)) or "k/k/n layout")
    return "; ".join(parts)


# --- compute-sanitizer's report ------------------------------------------------------------------------

# The summary lines compute-sanitizer prints at exit (every line of its own starts with "========= "):
#   memcheck, initcheck, synccheck:  ========= ERROR SUMMARY: 0 errors
#   racecheck:                       ========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)
ERROR_SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) errors?\b")
RACECHECK_SUMMARY = re.compile(
    r"RACECHECK SUMMARY: (\d+) hazards? displayed \((\d+) errors?, (\d+) warnings?\)"
)
UNSUPPORTED = ("Device not supported", "device is not supported", "not supported on this device")


@dataclass
class Summary:
    errors: int | None  # None: no summary line found (the tool did not finish)
    warnings: int = 0  # racecheck only
    hazards: int = 0  # racecheck only
    lines: tuple[str, ...] = ()


def parse_summaries(log: str) -> Summary:
    """Totals over every summary line in ``log`` (one per sanitized process)."""
    errors = warnings = hazards = 0
    lines = []
    for line in log.splitlines():
        if (m := RACECHECK_SUMMARY.search(line)) is not None:
            hazards += int(m.group(1))
            errors += int(m.group(2))
            warnings += int(m.group(3))
            lines.append(line.strip())
        elif (m := ERROR_SUMMARY.search(line)) is not None:
            errors += int(m.group(1))
            lines.append(line.strip())
    return Summary(errors if lines else None, warnings, hazards, tuple(lines))


def child_results(log: str) -> dict[str, tuple[str, str]]:
    """{instance id: ("ok" | "fail", rest of the line)} from the child's own lines."""
    out = {}
    for line in log.splitlines():
        if line.startswith(TAG):
            words = line[len(TAG) :].split(maxsplit=2)
            if len(words) >= 2 and words[0] in ("ok", "fail"):
                out[words[1]] = (words[0], words[2] if len(words) > 2 else "")
    return out


# --- the child -----------------------------------------------------------------------------------------


def _say(*parts) -> None:
    print(TAG, *parts, flush=True)


def _host(x, t):
    """The view ``t`` (into the device buffer ``x``) over ``x`` copied to the host."""
    return x.as_strided(t.shape, t.stride(), t.storage_offset())


def check_on_host(g, p, before: dict, torch) -> float:
    """D against the fp64 reference, and every buffer outside D unchanged, computed on the host from copies
    (after the launch only cudaMemcpy reads device memory, so no torch or cuBLAS kernel runs under the
    sanitizer besides the set-up's fills and copies). Returns D's norm-relative error; raises
    AssertionError."""
    inst = p.inst
    ops = {"a": p.a, "b": p.b, "d": p.d}
    if p.c is not None and p.c is not p.d:
        ops["c"] = p.c
    host = {name: x.buf.cpu() for name, x in ops.items()}
    a = _host(host["a"], p.a.t).double()
    b = _host(host["b"], p.b.t).double()
    out = _host(host["d"], p.d.t).double()
    ref = p.alpha * torch.einsum("lmk,lnk->lmn", a, b)
    if p.c_values is not None:
        ref = ref + p.beta * p.c_values.cpu().double()
    n_nan = int(torch.isnan(out).sum())
    assert n_nan == 0, f"{n_nan} of {out.numel()} D elements are NaN (unwritten, or read outside A/B/C)"
    rel = (torch.linalg.vector_norm(out - ref) / torch.linalg.vector_norm(ref)).item()
    bound = g.REL_BOUND[inst.d_dtype]
    if g.is_fp8(inst):
        bound = max(bound, g.FP8_ACC_REL_BOUND[bool(inst.fp8_fast_accum)])
    assert rel < bound, f"||D - ref|| / ||ref|| = {rel:.3e} >= {bound:g}"
    for name, buf in host.items():
        changed = g.bits(buf) != before[name]
        if name == "d":  # D's own elements may change; its padding and guards may not
            inside = torch.zeros(buf.shape, dtype=torch.bool)
            _host(inside, p.d.t).fill_(True)
            changed &= ~inside
        assert not bool(changed.any()), (
            f"{int(changed.sum())} elements of {name.upper()}'s buffer outside "
            f"D changed; the first at buffer offset {int(changed.nonzero()[0])}"
        )
    return rel


def run(shape: Shape, ids: list[str]) -> int:
    import pytest

    try:
        from tests.gpu import gemm_util as g
    except pytest.skip.Exception as e:  # no torch / CUDA / sm_90 / hgemm_sm90 in this process
        _say("fail", "-", f"cannot run here: {e}")
        return 3
    torch, hg = g.torch, g.hgemm_sm90
    where = Path(hg.__file__).resolve()
    if (REPO / "runtime") in where.parents:
        _say("fail", "-", f"hgemm_sm90 was imported from the source tree ({where}), not an installed wheel")
        return 3
    _say(
        "info",
        "-",
        f"hgemm_sm90 from {where.parent}; torch {torch.__version__}; "
        f"{torch.cuda.get_device_name()}; shape {shape}",
    )
    by_id = {i.id: i for i in hg.instances()}
    failed = 0
    for iid in ids:
        inst = by_id.get(iid)
        if inst is None:
            _say("fail", iid, "not shipped by this wheel")
            failed += 1
            continue
        case = g.Case(
            "sanitizer", shape.m, shape.n, shape.k, batch=shape.batch, pad_ld=1, pad_batch=1, head=1
        )
        if getattr(inst, "varlen_m", False):
            failed += run_grouped(g, inst, torch)
            continue
        if getattr(inst, "varlen_k", False):
            failed += run_grouped_k(g, inst, torch)
            continue
        overrides = {}
        if getattr(inst, "k_split", "none") == "split":
            # Split-K needs few tiles: decode-sized M, a K of 14 k-tiles (the last partial) in 3 splits
            # that do not divide it, so units of one tile arrive in either order and the reduction runs.
            case = g.Case("sanitizer_split", 40, 1000, 13 * inst.tile[2] + 8, batch=2, pad_ld=1, pad_batch=1)
            overrides["k_splits"] = 3
        try:
            gen = torch.Generator(device=g.DEVICE).manual_seed(zlib.crc32(f"sanitizer-{iid}".encode()))
            p = g.make_problem(inst, case, gen)
            before = {name: g.bits(x).cpu() for name, x in g.snapshot(p).items()}
            torch.cuda.synchronize()  # everything set up and written before the launch under test
            _say("launch", iid, f"{p.case.m}x{p.case.n}x{p.case.k} batch {p.case.batch}")
            g.launch(p, **overrides)  # on torch's current stream, where the operands were written
            torch.cuda.synchronize()
            rel = check_on_host(g, p, before, torch)
            _say("ok", iid, f"rel_err={rel:.3e}")
        except (Exception, pytest.fail.Exception) as e:  # noqa: BLE001 - reported; pytest.fail's is a BaseException
            failed += 1
            _say("fail", iid, " ".join(f"{type(e).__name__}: {e}".split()))
        finally:
            p = before = None
    _say("summary", "-", f"ok={len(ids) - failed} failed={failed}")
    return 1 if failed else 0


# Group sizes for a grouped instance under the sanitizer: empty groups (first, middle, last), one row, sizes
# that are not a multiple of 8, a group over several tiles; a partial last column tile and k-tile.
GROUP_SIZES = (0, 1, 7, 0, 130, 300, 3, 0)


def run_grouped(g, inst, torch) -> int:
    """One grouped launch (tests/gpu/test_grouped.py's problem) checked on the host: every row a group owns
    against the fp64 reference (norm-relative, gemm_util's bound), every other element of D's buffer (rows
    no group owns, row padding, the guard) still the sentinel. Returns 1 on failure, else 0."""
    from tests.gpu.test_grouped import Grouped

    iid = inst.id
    try:
        gen = torch.Generator(device=g.DEVICE).manual_seed(zlib.crc32(f"sanitizer-{iid}".encode()))
        k = 8 * inst.tile[2] + (0 if inst.gather_a else 48)  # gathering instances take whole k-tiles
        p = Grouped(inst, GROUP_SIZES, 520, k, gen)
        torch.cuda.synchronize()
        _say("launch", iid, f"grouped sizes {list(GROUP_SIZES)} n {p.n} k {p.k}")
        p.launch()
        torch.cuda.synchronize()
        d = p.d_buf.cpu().double()
        a = p.a.cpu().double()
        if p.idx is not None:  # the groups' rows, gathered on the host (no torch kernel after the launch)
            a = a[p.idx.cpu().long()]
        b = p.b.cpu().double()
        out = _host(d, p.d).clone()
        owned = torch.zeros(p.m, dtype=torch.bool)
        num = den = 0.0
        for gi, first, end in p.group_rows():
            if end > first:
                owned[first:end] = True
                ref = p.alpha * a[first:end] @ b[gi].T
                if p.c is not None:
                    ref = ref + p.beta * p.c[first:end].cpu().double()
                assert not bool(torch.isnan(out[first:end]).any()), f"group {gi}: unwritten (NaN) rows"
                num += float(torch.linalg.vector_norm(out[first:end] - ref)) ** 2
                den += float(torch.linalg.vector_norm(ref)) ** 2
        rel = (num / den) ** 0.5
        bound = g.REL_BOUND[inst.d_dtype]
        if g.is_fp8(inst):
            bound = max(bound, g.FP8_ACC_REL_BOUND[bool(inst.fp8_fast_accum)])
        assert rel < bound, f"||D - ref|| / ||ref|| = {rel:.3e} >= {bound:g}"
        inside = torch.zeros(d.shape, dtype=torch.bool)
        _host(inside, p.d)[owned] = True
        untouched = d[~inside]
        assert bool((untouched == g.D_SENTINEL).all()), "an element of D's buffer outside every group changed"
        _say("ok", iid, f"rel_err={rel:.3e}")
        return 0
    except (Exception, AssertionError) as e:  # noqa: BLE001 - reported
        _say("fail", iid, " ".join(f"{type(e).__name__}: {e}".split()))
        return 1


def run_grouped_k(g, inst, torch) -> int:
    """One grouped-K launch (tests/gpu/test_grouped.py's problem: K ranges with empty groups and partial
    last k-tiles) checked on the host: each group's D against the fp64 reference (zeros for an empty
    group), everything else of D's buffer still the sentinel. Returns 1 on failure, else 0."""
    from tests.gpu.test_grouped import GroupedK

    iid = inst.id
    try:
        gen = torch.Generator(device=g.DEVICE).manual_seed(zlib.crc32(f"sanitizer-{iid}".encode()))
        p = GroupedK(inst, (0, 1, 7, 130, 257, 0, 3), 264, 520, gen)
        torch.cuda.synchronize()
        _say("launch", iid, f"grouped K offsets {p.seqlens} m {p.m} n {p.n}")
        p.launch()
        torch.cuda.synchronize()
        d_buf = p.d_buf.cpu()
        d = torch.as_strided(d_buf, p.d.shape, p.d.stride()).double()
        a, b = p.a.cpu().double(), p.b.cpu().double()
        num = den = 0.0
        for gi in range(p.groups):
            first, end = p.seqlens[gi], p.seqlens[gi + 1]
            ref = p.alpha * a[:, first:end] @ b[:, first:end].T
            if p.c is not None:
                ref = ref + p.beta * p.c[gi].cpu().double()
            assert not bool(torch.isnan(d[gi]).any()), f"group {gi}: unwritten (NaN) elements"
            num += float(torch.linalg.vector_norm(d[gi] - ref)) ** 2
            den += float(torch.linalg.vector_norm(ref)) ** 2
        rel = (num / den) ** 0.5
        bound = g.REL_BOUND[inst.d_dtype]
        if g.is_fp8(inst):
            bound = max(bound, g.FP8_ACC_REL_BOUND[bool(inst.fp8_fast_accum)])
        assert rel < bound, f"||D - ref|| / ||ref|| = {rel:.3e} >= {bound:g}"
        inside = torch.zeros(d_buf.shape, dtype=torch.bool)
        torch.as_strided(inside, p.d.shape, p.d.stride()).fill_(True)
        assert bool((d_buf[~inside] == g.D_SENTINEL).all()), "an element of D's buffer outside D changed"
        _say("ok", iid, f"rel_err={rel:.3e}")
        return 0
    except (Exception, AssertionError) as e:  # noqa: BLE001 - reported
        _say("fail", iid, " ".join(f"{type(e).__name__}: {e}".split()))
        return 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m tests.gpu.sanitizer_child", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--shape", type=Shape.parse, default=Shape(2040, 3320, 528, 2), help="MxNxK[xBATCH]")
    ap.add_argument("ids", nargs="+", help="instance ids")
    args = ap.parse_args(argv)
    return run(args.shape, args.ids)


if __name__ == "__main__":
    sys.exit(main())
