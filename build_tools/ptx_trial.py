"""Timing-only trials of shipped kernels, rebuilt from their PTX with one patch applied (maintainers).

    python -m build_tools.ptx_trial build --wheel W.whl --instance ID [--instance ID ...] --out DIR
        [--patch none|strip-cache-hints|timeline|renumber-clusters] [--table PERM.json | --interleave G:C]
        [--ptxas PATH]
    python -m build_tools.ptx_trial timeline --kernel-dir DIR --instance ID --shape MxNxK [--walk R,G]
        [--cold] [--as-cluster]

`build` traces each instance with the CuTe DSL on this machine (as the wheel build does), keeps the PTX,
applies the patch, assembles it with the CUDA toolkit's `ptxas` and writes DIR/manifest.json (the wheel's
records of these instances, with the new cubins' sizes and sha256) and DIR/<id>.cubin. The runtime loads
them with HGEMM_KERNEL_DIR=DIR; the launch contract is unchanged, only the kernel's code. Compare a patch
against `--patch none` built by the same `ptxas` (the DSL's own ptxas may differ by a release). None of
this ships: it answers "what if the kernel did X" in minutes, without a wheel build.

Patches:
- `strip-cache-hints`: the DSL gives every TMA copy `.L2::cache_hint` with policy 0; drop it.
- `renumber-clusters --table T.json` (`{"perm": [...]}`): the walk position of cluster c becomes perm[c]
  (a permutation of range(#clusters): valid for launches of exactly that many clusters), e.g. to give the
  clusters that the hardware places on one GPC neighbouring positions of the walk. `--interleave G:C`
  instead of a table: the permutation for C clusters dealt round-robin over G GPCs (`interleaved_perm`),
  the static rule a kernel could compute from its cluster id (session 44: it does not match the hardware's
  dealing and ran slower, docs/KERNEL.md).
- `timeline`: every TMA load records (%globaltimer, coordinates, operand, %smid) into a module global, and
  each warp its entry and exit; `timeline` launches the instance once and prints when each CTA started,
  issued its first load and ended, how closely the CTAs that load the same box issue it (the L2 request
  coalescer merges identical reads that arrive together: docs/KERNEL.md), and how far apart a CTA's
  consecutive loads of each operand are (the k-loop's cadence). `--as-cluster` launches a 1x1 kernel
  with the cluster attribute, as before session 44, to see where that launch's cost lies.

What these patches showed on the H200 (docs/PERF.md, sessions 41 and 44): the cache hint changes nothing;
CTAs loading the same box issue it within ~100-350 ns of each other; clusters renumbered so that each
GPC's clusters hold neighbouring tiles raise the coalescer's merged share from 14-36% to 38-62% and cut
2-3% of the time of 128 x 128 1x1 ping-pong at 1255 x 1664 x 6528 and 1180 x 1600 x 3072, but nothing
(128 x 128, 192 x 128) or 1-6% more (64 x 128) on six problems of M 357-941, and the static
round-robin rule (`--interleave`) ran 3% slower: not a general lead (session 44).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import zipfile
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from build_tools.l2_probe import parse_walk

PATCHES = ("none", "strip-cache-hints", "timeline", "renumber-clusters")

# Event buffer of the timeline patch: SLOTS events per CTA, CTAS CTAs; an event is (time, tag).
SLOTS = 512
CTAS = 1024
ENTRY_SLOT, EXIT_SLOT = SLOTS - 32, SLOTS - 16  # + warp index (at most 16 warps)
LOAD_SLOTS = ENTRY_SLOT  # loads take slots [0, LOAD_SLOTS) in issue order

_TMA_LOAD = re.compile(
    r"^(?P<ind>\s*)(?P<pred>@!?%p\d+\s+)?cp\.async\.bulk\.tensor\.\dd\.shared::\w+\.global[^\[]*"
    r"\[[^\]]*\], \[(?P<tmap>%rd\d+), \{(?P<c0>%r\d+), (?P<c1>%r\d+)"
)
_CVTA_PARAM = re.compile(r"^\s*cvta\.param\.u64\s+(%rd\d+), (%rd\d+);")
_PARAM_MOV = re.compile(r"^\s*mov\.b64\s+(%rd\d+), \w+_param_(\d+);")


class TrialError(RuntimeError):
    """A trial that cannot be built or read; the message says what to do."""


# ----------------------------------------------------------------------------------------------- patches


def strip_cache_hints(ptx: str) -> tuple[str, int]:
    """Drop `.L2::cache_hint` and its policy operand from every bulk tensor copy (loads and stores)."""
    return re.subn(r"(cp\.async\.bulk\.tensor\.[^;]*?)\.L2::cache_hint( [^;]*), %rd\d+;", r"\1\2;", ptx)


def renumber_clusters(ptx: str, perm: list[int]) -> tuple[str, int]:
    """Replace every read of %clusterid.x by perm[%clusterid.x] (a .global table added to the module)."""
    if sorted(perm) != list(range(len(perm))):
        raise TrialError(
            f"the table is not a permutation of range({len(perm)}): give each cluster one position"
        )
    values = ", ".join(map(str, perm))
    table = f".global .align 4 .u32 hg_perm[{len(perm)}] = {{{values}}};\n"
    ptx = _add_globals(ptx, table)

    def lookup(m: re.Match) -> str:
        ind, reg = m.group(1), m.group(2)
        return (
            f"{ind}mov.u32 \t{reg}, %clusterid.x;{ind}{{{ind}.reg .u64 %hpa;{ind}mov.u64 %hpa, hg_perm;"
            f"{ind}mad.wide.u32 %hpa, {reg}, 4, %hpa;{ind}ld.global.nc.u32 {reg}, [%hpa];{ind}}}"
        )

    return re.subn(r"(\n\s*)mov\.u32\s+(%r\d+), %clusterid\.x;", lookup, ptx)


def instrument_tma_issue(ptx: str) -> tuple[str, int]:
    """Record each TMA load's issue (before the instruction) and each warp's entry and exit.

    hg_ev[cta][slot] = (%globaltimer, tag); tag = c0 | c1 << 20 | smid << 40 | param << 48 for a load (c0,
    c1: the box's first two coordinates; param: the kernel parameter index of its tensor map), and
    1 << 63 | kind for entry (kind 0) and exit (kind 1). Loads take slots in issue order through a shared
    counter (zeroed at entry, before the CTA barrier that precedes any load)."""
    lines = ptx.split("\n")
    param_of: dict[str, int] = {}  # %rd holding a param's address -> param index
    cvta: dict[str, int] = {}
    out: list[str] = []
    loads = 0
    body = entered = False
    for ln in lines:
        st = ln.strip()
        m = _PARAM_MOV.match(ln)
        if m:
            param_of[m.group(1)] = int(m.group(2))
        m = _CVTA_PARAM.match(ln)
        if m and m.group(2) in param_of:
            cvta[m.group(1)] = param_of[m.group(2)]
        if body and not entered and st and not st.startswith((".reg", "//", "{", ".shared", ".local")):
            out += _stamp_warp(ENTRY_SLOT, 1 << 63, reset_counter=True)
            entered = True
        if st == "{" and not body:
            body = True
        if st == "ret;":
            out += _stamp_warp(EXIT_SLOT, (1 << 63) | 1)
        m = _TMA_LOAD.match(ln)
        if m:
            out += _stamp_load(m, cvta.get(m.group("tmap"), 255))
            loads += 1
        out.append(ln)
    decl = f".global .align 16 .u64 hg_ev[{CTAS * SLOTS * 2}];\n.shared .align 4 .u32 hg_n;\n"
    return _add_globals("\n".join(out), decl), loads


def _add_globals(ptx: str, decl: str) -> str:
    new, n = re.subn(r"(\.address_size 64\n)", lambda m: m.group(1) + decl, ptx, count=1)
    if n != 1:
        raise TrialError("no `.address_size 64` line in the PTX: is it a PTX module?")
    return new


_SLOT_PREFIX = [
    ".reg .u64 %hgt, %hga, %hgb, %hgx, %hgy;",
    ".reg .u32 %hgc, %hgi, %hgn, %hgw, %hgs;",
    ".reg .pred %hgp;",
    "mov.u64 %hgt, %globaltimer;",
    "mov.u32 %hgc, %ctaid.y;",
    "mov.u32 %hgn, %nctaid.x;",
    "mov.u32 %hgw, %ctaid.x;",
    "mad.lo.u32 %hgc, %hgc, %hgn, %hgw;",
    f"min.u32 %hgc, %hgc, {CTAS - 1};",
]
_SLOT_STORE = [
    f"mad.lo.u32 %hgi, %hgc, {SLOTS}, %hgi;",
    "mov.u64 %hgb, hg_ev;",
    "mul.wide.u32 %hga, %hgi, 16;",
    "add.u64 %hga, %hgb, %hga;",
]


def _stamp_warp(base: int, tag: int, reset_counter: bool = False) -> list[str]:
    """Lane 0 of each warp stores (time, tag) at slot base + warp."""
    body = [
        *_SLOT_PREFIX,
        "mov.u32 %hgw, %tid.x;",
        "and.b32 %hgs, %hgw, 31;",
        "setp.eq.u32 %hgp, %hgs, 0;",
        "shr.u32 %hgw, %hgw, 5;",
        "min.u32 %hgw, %hgw, 15;",
        f"add.u32 %hgi, %hgw, {base};",
        *_SLOT_STORE,
        f"mov.u64 %hgx, {tag};",
        "@%hgp st.global.v2.u64 [%hga], {%hgt, %hgx};",
    ]
    if reset_counter:
        body += ["setp.eq.u32 %hgp, %hgw, 0;", "mov.u32 %hgs, 0;", "@%hgp st.shared.u32 [hg_n], %hgs;"]
    return ["\t{", *("\t" + x for x in body), "\t}"]


def _stamp_load(m: re.Match, param: int) -> list[str]:
    ind, pred = m.group("ind"), (m.group("pred") or "").strip()
    guard = f"{pred} " if pred else ""
    body = [
        *_SLOT_PREFIX,
        f"{guard}atom.shared.add.u32 %hgi, [hg_n], 1;",
        f"min.u32 %hgi, %hgi, {LOAD_SLOTS - 1};",
        *_SLOT_STORE,
        # %smid below bit 48: at bit 56 (until 2026-12-04) SMs 128-131 set bit 63, the warp events' flag.
        "mov.u32 %hgs, %smid;",
        "and.b32 %hgs, %hgs, 255;",
        "cvt.u64.u32 %hgx, %hgs;",
        "shl.b64 %hgx, %hgx, 40;",
        f"or.b64 %hgx, %hgx, {param << 48};",
        f"cvt.u64.u32 %hgy, {m.group('c1')};",
        "and.b64 %hgy, %hgy, 1048575;",
        "shl.b64 %hgy, %hgy, 20;",
        "or.b64 %hgx, %hgx, %hgy;",
        f"cvt.u64.u32 %hgy, {m.group('c0')};",
        "and.b64 %hgy, %hgy, 1048575;",
        "or.b64 %hgx, %hgx, %hgy;",
        f"{guard}st.global.v2.u64 [%hga], {{%hgt, %hgx}};",
    ]
    return [f"{ind}{{", *(f"{ind}{x}" for x in body), f"{ind}}}"]


def apply_patch(ptx: str, patch: str, perm: list[int] | None = None) -> str:
    """`ptx` with `patch` applied; a TrialError when the patch finds nothing to change."""
    if patch == "none":
        return ptx
    if patch == "strip-cache-hints":
        new, n = strip_cache_hints(ptx)
    elif patch == "renumber-clusters":
        if perm is None:
            raise TrialError(
                'renumber-clusters needs --table PERM.json ({"perm": [position of cluster 0, ...]}) '
                "or --interleave GPCS:CLUSTERS"
            )
        new, n = renumber_clusters(ptx, perm)
    elif patch == "timeline":
        new, n = instrument_tma_issue(ptx)
    else:
        raise TrialError(f"unknown patch {patch!r}; known: {', '.join(PATCHES)}")
    if n == 0:
        raise TrialError(f"patch {patch} found nothing to change in this kernel's PTX")
    return new


# ------------------------------------------------------------------------------------------------ build


def read_manifest(source: Path) -> dict:
    """The manifest document of a wheel (.whl) or a manifest.json."""
    if source.suffix == ".whl":
        with zipfile.ZipFile(source) as z:
            names = [n for n in z.namelist() if n.endswith("kernels/manifest.json")]
            if not names:
                raise TrialError(f"{source} holds no kernels/manifest.json: is it an hgemm-sm90 wheel?")
            return json.loads(z.read(names[0]))
    return json.loads(source.read_text())


def check_shipped(manifest: dict, instances) -> None:
    missing = [i for i in instances if i not in manifest["instances"]]
    if missing:
        raise TrialError(f"the manifest has no instance {', '.join(missing)} (python -m hgemm_sm90 list)")


def write_kernel_dir(manifest: dict, cubins: dict[str, bytes], out: Path) -> None:
    """DIR/manifest.json with the records of `cubins`' instances (sizes and sha256 of these cubins) and
    DIR/<id>.cubin: a kernel directory for HGEMM_KERNEL_DIR."""
    check_shipped(manifest, cubins)
    out.mkdir(parents=True, exist_ok=True)
    doc = {k: v for k, v in manifest.items() if k != "instances"}
    doc["instances"] = {}
    for iid, data in cubins.items():
        rec = dict(manifest["instances"][iid])
        rec["cubin_bytes"] = len(data)
        rec["sha256"] = hashlib.sha256(data).hexdigest()
        doc["instances"][iid] = rec
        (out / f"{iid}.cubin").write_bytes(data)
    (out / "manifest.json").write_text(json.dumps(doc, indent=1, sort_keys=True))


def interleaved_perm(gpcs: int, clusters: int) -> list[int]:
    """The walk position of each of `clusters` clusters if the hardware deals them round-robin over `gpcs`
    GPCs (cluster c on GPC c mod gpcs, as sessions 40-41 saw for 1- and 2-CTA clusters on the H200: not
    exactly, docs/PERF.md session 41): each GPC's clusters take neighbouring positions, GPC 0's first."""
    if gpcs < 1 or clusters < 1:
        raise TrialError(f"--interleave {gpcs}:{clusters}: both must be >= 1 (GPCS:CLUSTERS, e.g. 8:66)")
    order = sorted(range(clusters), key=lambda c: (c % gpcs, c // gpcs))
    perm = [0] * clusters
    for position, cluster in enumerate(order):
        perm[cluster] = position
    return perm


def parse_interleave(text: str) -> tuple[int, int]:
    """'G:C' -> (G, C) for `interleaved_perm`."""
    try:
        gpcs, clusters = (int(x) for x in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--interleave {text!r}: expected GPCS:CLUSTERS such as 8:66"
        ) from None
    return gpcs, clusters


def read_table(path: Path) -> list[int]:
    """renumber-clusters' table: {"perm": [the walk position of cluster 0, of cluster 1, ...]}."""
    perm = json.loads(path.read_text()).get("perm")
    if not isinstance(perm, list) or not all(isinstance(x, int) for x in perm):
        raise TrialError(f'{path}: expected {{"perm": [position of cluster 0, of cluster 1, ...]}}')
    return perm


def find_ptxas(explicit: str | None) -> str:
    for cand in (explicit, os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "ptxas")):
        if cand and os.path.isfile(cand):
            return cand
    found = shutil.which("ptxas")
    if not found:
        raise TrialError("no ptxas: install the CUDA toolkit, set CUDA_HOME, or pass --ptxas PATH")
    return found


def instance_ptxs(instances: list[str]) -> dict[str, str]:
    """The PTX the DSL produces for each instance (traced on this machine, as the build does; an id is its
    spec's name). One dump folder for all: the DSL reads CUTE_DSL_DUMP_DIR and CUTE_DSL_KEEP once, at
    import."""
    from codegen.dsl import compile_instance, configure_environment
    from runtime.spec import GemmSpec

    dump = Path(tempfile.mkdtemp(prefix="hgemm-ptx-trial-"))
    try:
        configure_environment(dump)
        os.environ["CUTE_DSL_KEEP"] = "cubin,ptx"  # read when cutlass is imported (first compile)
        out = {}
        for iid in instances:
            for old in dump.glob("*.ptx"):  # names are truncated: two instances can share one
                old.unlink()
            compile_instance(GemmSpec.parse(iid), dump / "export")
            new = sorted(dump.glob("*.ptx"))
            if len(new) != 1:
                raise TrialError(f"expected one new PTX file from the DSL for {iid}, found {len(new)}")
            out[iid] = new[0].read_text()
        return out
    finally:
        shutil.rmtree(dump, ignore_errors=True)


def assemble(ptx: str, ptxas: str) -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "k.ptx", Path(tmp) / "k.cubin"
        src.write_text(ptx)
        run = subprocess.run(
            [ptxas, "-arch=sm_90a", "-O3", str(src), "-o", str(dst)], capture_output=True, text=True
        )
        if run.returncode != 0:
            last = run.stderr.strip().splitlines()[-1] if run.stderr.strip() else f"exit {run.returncode}"
            raise TrialError(f"ptxas failed: {last}")
        return dst.read_bytes()


def build(args) -> None:
    manifest = read_manifest(Path(args.wheel))
    check_shipped(manifest, args.instance)  # before the compiles
    perm = read_table(Path(args.table)) if args.table else None
    if args.interleave:
        perm = interleaved_perm(*args.interleave)
    ptxas = find_ptxas(args.ptxas)
    ptxs = instance_ptxs(args.instance)
    cubins = {iid: assemble(apply_patch(ptx, args.patch, perm), ptxas) for iid, ptx in ptxs.items()}
    write_kernel_dir(manifest, cubins, Path(args.out))
    for iid, data in cubins.items():
        print(f"{iid}: {args.patch}, {len(data)} bytes -> {Path(args.out) / (iid + '.cubin')}")


# --------------------------------------------------------------------------------------------- timeline


@dataclass(frozen=True)
class Event:
    cta: int
    time: int  # ns (%globaltimer)
    tag: int

    @property
    def is_load(self) -> bool:
        return not self.tag >> 63

    @property
    def box(self) -> tuple[int, int, int]:  # (param, c0, c1)
        return (self.tag >> 48) & 0xFF, self.tag & 0xFFFFF, (self.tag >> 20) & 0xFFFFF

    @property
    def smid(self) -> int:  # the SM that issued a load
        return (self.tag >> 40) & 0xFF


def decode(words: list[int]) -> list[Event]:
    """The events of hg_ev (CTAS x SLOTS x (time, tag) u64 words); empty slots have time 0."""
    events = []
    for slot in range(len(words) // 2):
        t, tag = words[2 * slot], words[2 * slot + 1]
        if t:
            events.append(Event(slot // SLOTS, t, tag))
    return events


def summarize(events: list[Event]) -> list[str]:
    """Lines: per-CTA phases (medians over CTAs) and, per operand, how closely a box's loaders issue it."""
    if not events:
        return ["no events: was the trial built with --patch timeline, and did the launch run?"]
    t0 = min(e.time for e in events)
    per_cta: dict[int, list[Event]] = defaultdict(list)
    for e in events:
        per_cta[e.cta].append(e)
    starts, firsts, ends = [], [], []
    for evs in per_cta.values():
        entry = [e.time for e in evs if not e.is_load and not e.tag & 1]
        loads = [e.time for e in evs if e.is_load]
        exits = [e.time for e in evs if not e.is_load and e.tag & 1]
        if entry and loads and exits:
            starts.append(min(entry) - t0)
            firsts.append(min(loads) - min(entry))
            ends.append(max(exits) - min(entry))
    lines = [
        f"{len(per_cta)} CTAs, kernel span {max(e.time for e in events) - t0} ns; per CTA (median / max): "
        f"start after the first {_mm(starts)} ns, first load after its start {_mm(firsts)} ns, "
        f"end after its start {_mm(ends)} ns"
    ]
    boxes: dict[tuple, list[int]] = defaultdict(list)
    issued: dict[tuple, list[int]] = defaultdict(list)  # (cta, param) -> its load times
    for e in events:
        if e.is_load:
            boxes[e.box].append(e.time)
            issued[e.cta, e.box[0]].append(e.time)
    for param in sorted({b[0] for b in boxes}):
        mine = [sorted(v) for b, v in boxes.items() if b[0] == param]
        gaps = [v[i] - v[i - 1] for v in mine for i in range(1, len(v))]
        spread = [v[-1] - v[0] for v in mine if len(v) > 1]
        within = (
            ", ".join(f"<= {w} ns {sum(g <= w for g in gaps) / len(gaps):.0%}" for w in (100, 300, 1000))
            if gaps
            else "-"
        )
        # The k-loop's cadence: a CTA's consecutive loads of one operand are one k-tile apart (or a tile
        # change apart), so their median gap is the time per k-tile its producer sustained.
        steps = []
        for (_, p), times in issued.items():
            if p == param:
                t = sorted(times)
                steps += [later - earlier for earlier, later in zip(t, t[1:])]
        lines.append(
            f"operand param {param}: {len(mine)} boxes, {sum(map(len, mine))} loads, "
            f"{statistics.median(map(len, mine)):.0f} loaders per box, spread median "
            f"{statistics.median(spread) if spread else 0:.0f} ns; gaps between a box's loads: {within}; "
            f"a CTA's consecutive loads {_mm(steps)} ns apart"
        )
    return lines


def _mm(xs: list[int]) -> str:
    return f"{statistics.median(xs):.0f} / {max(xs)}" if xs else "-"


def timeline(args) -> None:  # pragma: no cover - GPU
    os.environ["HGEMM_KERNEL_DIR"] = str(Path(args.kernel_dir).resolve())
    import ctypes

    import torch
    from cuda.bindings import driver as cu

    import hgemm_sm90 as hg
    from build_tools import bench
    from hgemm_sm90.state import runtime

    inst = next((i for i in hg.instances() if i.id == args.instance), None)
    if inst is None:
        raise TrialError(f"no instance {args.instance} in {args.kernel_dir}: build it there first")
    shape = bench.Shape.parse(args.shape)
    combo = bench.Combo(str(inst.a_dtype), str(inst.b_dtype), str(inst.d_dtype))
    a, b, d, c = bench.make_set(torch, shape, bench.Layout.of(inst), combo)
    size = {"m": shape.m, "n": shape.n, "k": shape.k, "batch": shape.batch}
    walk = {} if args.walk is None else {"raster_along_m": args.walk[0], "group_size": args.walk[1]}
    stream = torch.cuda.current_stream().cuda_stream
    # `workspace` (split-K / stream-K) must outlive the launches.
    (launch,), workspace = bench.instance_calls(torch, hg, inst, [(a, b, d, c)], size, stream, **walk)

    launch()
    if args.as_cluster:
        from hgemm_sm90.launcher import build_config

        launch_as_cluster(runtime(), args.instance, build_config)
    for _ in range(3):
        launch()
    torch.cuda.synchronize()
    _, ctx = cu.cuCtxGetCurrent()
    loaded = runtime().kernels.get(int(ctx), args.instance)
    err, ptr, nbytes = cu.cuModuleGetGlobal(loaded.module, b"hg_ev")
    if int(err) != 0:
        raise TrialError(f"{args.instance} in {args.kernel_dir} has no hg_ev: build it with --patch timeline")
    if args.cold:
        torch.empty(256 << 20, dtype=torch.uint8, device="cuda").zero_()  # push operands and code out of L2
    # (warm: the launches above left L2 as back-to-back calls find it)
    torch.cuda.synchronize()
    cu.cuMemsetD32(ptr, 0, nbytes // 4)
    launch()
    torch.cuda.synchronize()
    words = (ctypes.c_uint64 * (nbytes // 8))()
    cu.cuMemcpyDtoH(ctypes.addressof(words), ptr, nbytes)
    how = "with the cluster attribute" if args.as_cluster else "as the runtime launches it"
    print(f"{args.instance} on {args.shape} ({'cold' if args.cold else 'warm'} L2), one launch {how}:")
    for line in summarize(decode(list(words))):
        print("  " + line)


def launch_as_cluster(rt, instance: str, build_config) -> None:
    """Give the instance's cached launches in runtime ``rt`` the cluster-dimension attribute, as every
    launch had before session 44 (runtime/launcher.py `launches_as_cluster`; ``build_config`` is that
    module's): the same kernel, grid and CTAs, for an A/B of the launch rule on one kernel's k-loop
    (docs/KERNEL.md: 1x1 kernels ran up to 2x faster without it)."""
    record = rt.manifest.record(instance)
    for entry in rt.plans[instance].entries.values():
        old = entry.config
        grid = (old.gridDimX, old.gridDimY, old.gridDimZ)
        entry.config = build_config(rt.cu, record, grid, int(old.hStream), cluster_attribute=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m build_tools.ptx_trial", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="patched cubins and their manifest, for HGEMM_KERNEL_DIR")
    b.add_argument("--wheel", required=True, help="the wheel (or a manifest.json) whose records to reuse")
    b.add_argument("--instance", action="append", required=True)
    b.add_argument("--out", required=True)
    b.add_argument("--patch", choices=PATCHES, default="none")
    perm = b.add_mutually_exclusive_group()
    perm.add_argument("--table", help='renumber-clusters: JSON {"perm": [...]}')
    perm.add_argument(
        "--interleave",
        type=parse_interleave,
        metavar="GPCS:CLUSTERS",
        help="renumber-clusters: the permutation for CLUSTERS clusters dealt round-robin over GPCS GPCs",
    )
    b.add_argument("--ptxas")
    t = sub.add_parser("timeline", help="launch a --patch timeline build once and summarize its loads")
    t.add_argument("--kernel-dir", required=True)
    t.add_argument("--instance", required=True)
    t.add_argument("--shape", required=True, help="MxNxK")
    t.add_argument("--walk", type=parse_walk, help="RASTER,GROUP (raster_along_m, group_size)")
    t.add_argument("--cold", action="store_true", help="flush L2 first (as Nsight Compute does)")
    t.add_argument(
        "--as-cluster",
        action="store_true",
        help="launch with the cluster attribute even for a 1x1 cluster (the launch rule before session 44)",
    )
    args = p.parse_args(argv)
    try:
        build(args) if args.cmd == "build" else timeline(args)
    except TrialError as e:
        print(f"ptx_trial: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
