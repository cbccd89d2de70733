"""build_tools.ptx_trial: the PTX patches, the kernel directory it writes, and the timeline's decoding."""

import hashlib
import json
import zipfile

import pytest

from build_tools import ptx_trial as pt

# The shape of what the DSL emits (nvidia-cutlass-dsl 4.8.1): tensor-map parameters moved into %rd
# registers, cvta.param'd at each use, TMA loads (one multicast, one predicated), a TMA store, ret.
_LOAD_A = (
    "\tcp.async.bulk.tensor.3d.shared::cta.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint"
    " [%r5+1024], [%rd8, {%r6, %r7, %r8}], [%r4], %rd9;"
)
_LOAD_B = (
    "\t@%p1 cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
    ".multicast::cluster.L2::cache_hint [%r9+99328], [%rd10, {%r12, %r13, %r8}], [%r4], %rs1, %rd9;"
)
_STORE_D = (
    "\tcp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group.L2::cache_hint"
    " [%rd11, {%r14, %r15, %r8}], [%r16], %rd12;"
)
KERNEL = """//
.version 8.8
.target sm_90a
.address_size 64

.visible .entry kernel_x(
\t.param .align 64 .b8 kernel_x_param_0[128],
\t.param .align 64 .b8 kernel_x_param_2[128]
)
{
\t.reg .pred \t%p<4>;
\t.reg .b32 \t%r<30>;
\t.reg .b64 \t%rd<20>;

\tmov.b64 \t%rd3, kernel_x_param_0;
\tmov.b64 \t%rd2, kernel_x_param_2;
\tmov.u32 \t%r11, %clusterid.x;
\tcvta.param.u64 \t%rd8, %rd3;
\tmov.b64 \t%rd9, 0;
{load_a}
\tcvta.param.u64 \t%rd10, %rd2;
\tmov.b16 \t%rs1, 3;
{load_b}
{store_d}
\tret;
}
"""
KERNEL = KERNEL.replace("{load_a}", _LOAD_A).replace("{load_b}", _LOAD_B).replace("{store_d}", _STORE_D)


def test_strip_cache_hints_drops_the_hint_and_its_operand_from_loads_and_stores():
    out, n = pt.strip_cache_hints(KERNEL)
    assert n == 3
    assert "cache_hint" not in out
    assert "[%r4], %rs1;" in out  # the multicast mask stays, the policy goes
    assert "[%r5+1024], [%rd8, {%r6, %r7, %r8}], [%r4];" in out
    assert "[%r16];" in out


def test_renumber_clusters_adds_the_table_and_looks_up_every_cluster_id_read():
    out, n = pt.renumber_clusters(KERNEL, [2, 0, 1])
    assert n == 1
    assert ".global .align 4 .u32 hg_perm[3] = {2, 0, 1};" in out
    lines = out.split("\n")
    at = next(i for i, ln in enumerate(lines) if "%clusterid.x" in ln)
    assert "ld.global.nc.u32 %r11, [%hpa];" in "\n".join(lines[at : at + 6])
    assert out.index(".address_size 64") < out.index("hg_perm[3]") < out.index(".visible .entry")


def test_renumber_clusters_refuses_a_table_that_is_not_a_permutation():
    with pytest.raises(pt.TrialError, match="not a permutation"):
        pt.renumber_clusters(KERNEL, [0, 0, 1])


def test_timeline_stamps_each_load_with_its_tensor_map_parameter_and_each_warp_at_entry_and_exit():
    out, loads = pt.instrument_tma_issue(KERNEL)
    assert loads == 2  # the store is not a load
    assert f".global .align 16 .u64 hg_ev[{pt.CTAS * pt.SLOTS * 2}];" in out
    assert ".shared .align 4 .u32 hg_n;" in out
    # entry: before the body's first instruction (after the .reg lines), resetting the shared counter
    entry = out.index(f"add.u32 %hgi, %hgw, {pt.ENTRY_SLOT};")
    assert out.index(".reg .b64 \t%rd<20>;") < entry < out.index("mov.b64 \t%rd3, kernel_x_param_0;")
    assert "st.shared.u32 [hg_n], %hgs;" in out[entry : out.index("mov.b64 \t%rd3")]
    # loads: parameter 0 (A's map) and 2 (B's), each stamp right before its copy
    assert f"or.b64 %hgx, %hgx, {0 << 48};" in out and f"or.b64 %hgx, %hgx, {2 << 48};" in out
    assert out.index(f"{2 << 48};") < out.index("@%p1 cp.async.bulk.tensor")
    # the predicated load's stamp is predicated the same way
    assert "@%p1 atom.shared.add.u32 %hgi, [hg_n], 1;" in out
    assert "@%p1 st.global.v2.u64 [%hga], {%hgt, %hgx};" in out
    assert out.index(f"add.u32 %hgi, %hgw, {pt.EXIT_SLOT};") < out.index("\tret;")


def test_apply_patch_says_when_a_patch_finds_nothing():
    plain = KERNEL.replace(".L2::cache_hint", "").replace(", %rd9;", ";").replace(", %rd12;", ";")
    with pytest.raises(pt.TrialError, match="found nothing"):
        pt.apply_patch(plain, "strip-cache-hints")
    with pytest.raises(pt.TrialError, match="--table"):
        pt.apply_patch(KERNEL, "renumber-clusters")
    assert pt.apply_patch(KERNEL, "none") == KERNEL


def _manifest():
    rec = {"cubin_bytes": 1, "sha256": "0" * 64, "symbol": "kernel_x", "block": [384, 1, 1]}
    return {
        "format": "hgemm-sm90-manifest",
        "contract_version": 3,
        "instances": {"a": dict(rec), "b": dict(rec)},
    }


def test_kernel_dir_holds_only_the_trial_instances_with_their_new_sizes_and_digests(tmp_path):
    pt.write_kernel_dir(_manifest(), {"b": b"\x7fELFcubin"}, tmp_path)
    doc = json.loads((tmp_path / "manifest.json").read_text())
    assert list(doc["instances"]) == ["b"]
    assert doc["format"] == "hgemm-sm90-manifest" and doc["contract_version"] == 3
    assert doc["instances"]["b"]["cubin_bytes"] == 9
    assert doc["instances"]["b"]["sha256"] == hashlib.sha256(b"\x7fELFcubin").hexdigest()
    assert doc["instances"]["b"]["symbol"] == "kernel_x"
    assert (tmp_path / "b.cubin").read_bytes() == b"\x7fELFcubin"
    with pytest.raises(pt.TrialError, match="no instance c"):
        pt.write_kernel_dir(_manifest(), {"c": b""}, tmp_path)


def test_the_manifest_is_read_from_a_wheel_or_a_file(tmp_path):
    whl = tmp_path / "w.whl"
    with zipfile.ZipFile(whl, "w") as z:
        z.writestr("hgemm_sm90/kernels/manifest.json", json.dumps(_manifest()))
    assert pt.read_manifest(whl) == _manifest()
    (tmp_path / "m.json").write_text(json.dumps(_manifest()))
    assert pt.read_manifest(tmp_path / "m.json") == _manifest()
    empty = tmp_path / "e.whl"
    with zipfile.ZipFile(empty, "w") as z:
        z.writestr("x.txt", "")
    with pytest.raises(pt.TrialError, match="no kernels/manifest.json"):
        pt.read_manifest(empty)


def _words(events):
    """hg_ev as the kernel leaves it: (cta, slot, time, tag) -> flat u64 words."""
    words = [0] * (2 * pt.SLOTS * 4)
    for cta, slot, t, tag in events:
        words[2 * (cta * pt.SLOTS + slot)] = t
        words[2 * (cta * pt.SLOTS + slot) + 1] = tag
    return words


def _load(param, c0, c1, smid=0):
    return c0 | c1 << 20 | smid << 40 | param << 48


def test_the_timeline_reports_phases_and_how_closely_a_box_s_loaders_issue_it():
    entry, exit_ = 1 << 63, (1 << 63) | 1
    events = []
    for cta, start in ((0, 1000), (1, 1100)):
        events += [(cta, pt.ENTRY_SLOT, start, entry), (cta, pt.EXIT_SLOT + 4, start + 5000, exit_)]
        # both CTAs load the same two A boxes (param 0): 50 ns apart for k 0, 250 ns apart for k 64
        events += [
            (cta, 0, start + 400, _load(0, 0, 128, smid=131)),  # SMs 128-131 too are loads
            (cta, 1, start + 650 + 150 * cta, _load(0, 64, 128)),
        ]
        events += [(cta, 2, start + 420, _load(2, 0, 128 * cta))]  # B boxes differ: one loader each
    ev = pt.decode(_words(events))
    assert len(ev) == 10 and {e.cta for e in ev} == {0, 1}
    assert ev[0].box == (0, 0, 128) or not ev[0].is_load
    first_loads = [e for e in ev if e.is_load and e.box == (0, 0, 128)]
    assert len(first_loads) == 2 and {e.smid for e in first_loads} == {131}
    lines = pt.summarize(ev)
    assert lines[0].startswith("2 CTAs, kernel span 5100 ns")
    assert "first load after its start 400 / 400 ns" in lines[0]
    a = next(ln for ln in lines if ln.startswith("operand param 0"))
    assert "2 boxes, 4 loads, 2 loaders per box" in a
    assert "<= 100 ns 50%" in a and "<= 300 ns 100%" in a
    assert "a CTA's consecutive loads 325 / 400 ns apart" in a  # CTA 0's k-tiles 250 ns apart, CTA 1's 400
    b = next(ln for ln in lines if ln.startswith("operand param 2"))
    assert "1 loaders per box" in b and "gaps between a box's loads: -" in b
    assert "consecutive loads - ns apart" in b  # one load per CTA: no cadence


def test_no_events_says_what_to_check():
    assert "--patch timeline" in pt.summarize([])[0]


def test_build_errors_are_one_line(tmp_path, capsys):
    (tmp_path / "m.json").write_text(json.dumps(_manifest()))
    fake_ptxas = tmp_path / "ptxas"
    fake_ptxas.write_text("")
    code = pt.main(
        [
            "build",
            "--wheel",
            str(tmp_path / "m.json"),
            "--instance",
            "sm90_nope",
            "--out",
            str(tmp_path / "o"),
        ]
        + ["--ptxas", str(fake_ptxas)]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("ptx_trial: the manifest has no instance sm90_nope") and err.count("\n") == 1
    assert not (tmp_path / "o").exists()  # refused before any compile or write


def test_the_interleaved_permutation_gives_each_gpcs_clusters_neighbouring_positions():
    """Clusters dealt round-robin over 8 GPCs: cluster c runs on GPC c % 8, and each GPC's clusters
    (c, c + 8, ...) take consecutive walk positions, GPC 0's first; any cluster count."""
    for clusters in (8, 66, 132, 13):
        perm = pt.interleaved_perm(8, clusters)
        assert sorted(perm) == list(range(clusters))  # renumber_clusters accepts it
        for gpc in range(8):
            positions = [perm[c] for c in range(gpc, clusters, 8)]
            assert positions == list(range(positions[0], positions[0] + len(positions)))
    assert pt.interleaved_perm(8, 66)[:3] == [0, 9, 18] and pt.interleaved_perm(8, 66)[8] == 1
    assert pt.interleaved_perm(1, 5) == [0, 1, 2, 3, 4]  # one GPC: the walk as it is
    with pytest.raises(pt.TrialError, match=">= 1"):
        pt.interleaved_perm(0, 66)


def test_interleave_is_parsed_and_excludes_a_table(capsys):
    assert pt.parse_interleave("8:66") == (8, 66)
    with pytest.raises(SystemExit):
        pt.main(["build", "--wheel", "w.whl", "--instance", "x", "--out", "o", "--patch", "renumber-clusters",
                 "--table", "t.json", "--interleave", "8:66"])  # fmt: skip
    assert "not allowed with" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        pt.main(["build", "--wheel", "w.whl", "--instance", "x", "--out", "o", "--interleave", "8"])
    assert "GPCS:CLUSTERS" in capsys.readouterr().err


def test_the_renumbering_table_is_checked(tmp_path):
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps({"perm": [1, 0]}))
    bad.write_text(json.dumps({"order": [1, 0]}))
    assert pt.read_table(good) == [1, 0]
    with pytest.raises(pt.TrialError, match="expected"):
        pt.read_table(bad)
