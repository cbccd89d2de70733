"""Bitwise-reproducible wheels, and `python -m build_tools.verify_wheel`, which rebuilds and compares.

The `compiler` test builds the `ci` wheel exactly twice, from two copies of the source tree in different
directories, each with an EMPTY build cache (every instance compiled again), and requires the same bytes.
The other tests hold the comparison and the CLI to their word on small hand-made zips, with no build.
"""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import pytest

from build_tools import verify_wheel as vw
from tests.conftest import REPO, have_compiler_tier

# scikit-build-core's fixed zip timestamp when SOURCE_DATE_EPOCH is unset (wheel.reproducible).
_EPOCH = (2022, 11, 9, 12, 37, 20)


def _write_zip(path: Path, members: dict[str, bytes], *, date_time=_EPOCH, mode=0o644) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for name, data in members.items():
            info = zipfile.ZipInfo(name, date_time=date_time)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = (0o100000 | mode) << 16
            z.writestr(info, data)
    return path


def _members(profile: str = "ci", seconds: float = 1.0) -> dict[str, bytes]:
    manifest = {"profile": profile, "instances": {"x": {"stats": {"registers": 168, "t": seconds}}}}
    return {
        "hgemm_sm90/__init__.py": b"",
        "hgemm_sm90/kernels/manifest.json": json.dumps(manifest).encode(),
        "hgemm_sm90/kernels/x.cubin": b"\x7fELF" + bytes(64),
    }


def test_identical_wheels_compare_equal(tmp_path):
    a = _write_zip(tmp_path / "a.whl", _members())
    b = _write_zip(tmp_path / "b.whl", _members())
    assert vw.diff_wheels(a, b) is None


def test_the_first_differing_member_is_named(tmp_path):
    a = _write_zip(tmp_path / "a.whl", _members())
    touched = {**_members(), "hgemm_sm90/kernels/x.cubin": b"\x7fELF" + bytes(10) + b"\x01" + bytes(53)}
    b = _write_zip(tmp_path / "b.whl", touched)
    assert vw.diff_wheels(a, b) == (
        "hgemm_sm90/kernels/x.cubin: content differs (same size, first differing byte at offset 14)"
    )
    # JSON members: the first differing field, by its path
    c = _write_zip(tmp_path / "c.whl", _members(seconds=2.0))
    assert (
        vw.diff_wheels(a, c)
        == "hgemm_sm90/kernels/manifest.json: content differs (/instances/x/stats/t: 1.0 != 2.0)"
    )


def test_zip_metadata_and_order_differences_are_named(tmp_path):
    a = _write_zip(tmp_path / "a.whl", _members())
    later = _write_zip(tmp_path / "t.whl", _members(), date_time=(2026, 11, 30, 21, 0, 0))
    assert "hgemm_sm90/__init__.py: zip entry date_time differs" in vw.diff_wheels(a, later)
    writable = _write_zip(tmp_path / "m.whl", _members(), mode=0o664)
    assert "hgemm_sm90/__init__.py: zip entry mode differs" in vw.diff_wheels(a, writable)
    reordered = _write_zip(tmp_path / "o.whl", dict(reversed(list(_members().items()))))
    assert vw.diff_wheels(a, reordered).startswith("member order differs at #0")
    fewer = _write_zip(tmp_path / "f.whl", {k: v for k, v in _members().items() if "cubin" not in k})
    assert "only in the first ['hgemm_sm90/kernels/x.cubin']" in vw.diff_wheels(a, fewer)
    broken = tmp_path / "b.whl"
    broken.write_bytes(a.read_bytes()[:-30])
    assert vw.diff_wheels(a, broken).startswith("not both readable zip archives")


def test_cli_reads_the_profile_from_the_manifest_and_reports_a_mismatch(tmp_path, monkeypatch, capsys):
    wheel = _write_zip(tmp_path / "given.whl", _members(profile="ci"))
    source = tmp_path / "src"
    (source / "codegen").mkdir(parents=True)
    (source / "codegen" / "x.py").write_text("")
    seen = {}

    def fake_build(src, out, *, profile, cache=None, extra_env=None):
        seen.update(src=src, profile=profile, cache=cache, copied=(src / "codegen" / "x.py").is_file())
        out.mkdir(parents=True)
        return _write_zip(out / "rebuilt.whl", _members(profile="ci", seconds=3.0))

    monkeypatch.setattr(vw, "build_wheel", fake_build)
    assert vw.main([str(wheel), "--source", str(source), "--cold"]) == 1
    out = capsys.readouterr().out
    assert "DIFFERENT: hgemm_sm90/kernels/manifest.json: content differs (/instances/x/stats/t" in out
    assert seen["profile"] == "ci" and seen["cache"] is not None  # --cold: a fresh, empty cache
    assert seen["copied"] and seen["src"] != source  # a copy of the source, elsewhere
    assert not seen["src"].exists()  # the temporary directory is gone

    def same_build(src, out, **kw):
        out.mkdir(parents=True)
        return _write_zip(out / "rebuilt.whl", _members())

    monkeypatch.setattr(vw, "build_wheel", same_build)
    assert vw.main([str(wheel), "--source", str(source)]) == 0
    assert "identical" in capsys.readouterr().out
    # --profile must agree with the manifest; a non-wheel is a usage error, not a mismatch
    assert vw.main([str(wheel), "--source", str(source), "--profile", "default"]) == 2
    assert "built with profile 'ci', not 'default'" in capsys.readouterr().err
    assert vw.main([str(source / "codegen" / "x.py")]) == 2


@pytest.mark.compiler
def test_two_cold_builds_from_two_directories_give_the_same_wheel_bytes(tmp_path):
    why = have_compiler_tier()
    if why:
        pytest.skip(why)
    # One snapshot of the working tree (others may be editing it), built from two different directories
    # (the second copy is made by verify_wheel), each with a fresh, empty build cache.
    source = vw.copy_source(REPO, tmp_path / "a" / "src")
    first = vw.build_wheel(source, tmp_path / "a" / "wheel", profile="ci", cache=tmp_path / "a" / "cache")
    second_sha, difference, second = vw.verify(first, source=source, cold=True, keep=True)
    try:
        assert difference is None, f"two cold builds of one source differ: {difference}"
        assert vw.sha256_file(first) == second_sha
    finally:
        shutil.rmtree(second.parent.parent, ignore_errors=True)
