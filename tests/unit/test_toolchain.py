"""The toolchain stamp (codegen/toolchain.py): the pinned DSL and the derived set of hashed sources.

Why these matter: the build cache keys every compiled instance on the stamp, so a source that shapes a
record but is missing from the hash serves stale cubins and contracts after an edit, with nothing failing.
The set is derived by following codegen's imports; these tests hold that derivation to what it promises,
on a temporary copy of codegen/ and runtime/ so that nothing in the real tree is touched.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from codegen.toolchain import PINNED_DSL_VERSION, source_files, source_sha256

REPO = Path(__file__).resolve().parents[2]


def _pinned(requirements: list[str]) -> list[str]:
    """The versions that requirement strings pin nvidia-cutlass-dsl to (`==` only)."""
    out = []
    for req in requirements:
        m = re.fullmatch(r"\s*nvidia-cutlass-dsl\s*==\s*([\w.]+)\s*(#.*)?", req)
        if m:
            out.append(m.group(1))
    return out


def test_pinned_dsl_version_agrees_with_pyproject_and_requirements():
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert _pinned(pyproject["build-system"]["requires"]) == [PINNED_DSL_VERSION]
    lines = (REPO / "requirements-test.txt").read_text().splitlines()
    assert _pinned(lines) == [PINNED_DSL_VERSION]


def test_derived_sources_cover_codegen_and_the_runtime_modules_it_imports():
    files = source_files()
    expected = ["codegen/cubin_info.py", "codegen/oracle_stub.c"]
    expected += ["runtime/tensormap.py", "runtime/scheduling.py"]
    # The spec moved from codegen/ to runtime/; whichever exists is imported by codegen and must be hashed.
    expected += [p for p in ("codegen/spec.py", "runtime/spec.py") if (REPO / p).is_file()]
    assert set(expected) <= set(files), sorted(set(expected) - set(files))
    assert files == sorted(files) and len(set(files)) == len(files)
    assert all((REPO / f).is_file() for f in files)
    assert not [f for f in files if "__pycache__" in f or f.endswith(".pyc")]
    # Every source file under codegen/ counts, not a hand-picked few.
    for path in (REPO / "codegen").rglob("*.py"):
        if "__pycache__" not in path.parts:
            assert path.relative_to(REPO).as_posix() in files
    # The launch path is not imported by codegen: editing it must not throw away every compiled cubin.
    assert "runtime/api.py" not in files and "runtime/launcher.py" not in files


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the two source directories the stamp reads."""
    for top in ("codegen", "runtime"):
        shutil.copytree(REPO / top, tmp_path / top, ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def test_copy_hashes_like_the_real_tree(tree):
    assert source_files(tree) == source_files()
    assert source_sha256(tree) == source_sha256()


def test_changing_any_listed_file_changes_the_hash(tree):
    base = source_sha256(tree)
    for rel in source_files(tree):
        path = tree / rel
        original = path.read_bytes()
        path.write_bytes(original + b"\n")
        assert source_sha256(tree) != base, f"editing {rel} left the source hash unchanged"
        path.write_bytes(original)
    assert source_sha256(tree) == base


def test_files_outside_the_list_do_not_change_the_hash(tree):
    base = source_sha256(tree)
    for rel in ("runtime/api.py", "runtime/launcher.py"):
        path = tree / rel
        path.write_bytes(path.read_bytes() + b"\n# edited\n")
    (tree / "codegen" / "__pycache__").mkdir(exist_ok=True)
    (tree / "codegen" / "__pycache__" / "dsl.cpython-311.pyc").write_bytes(b"junk")
    assert source_sha256(tree) == base


def test_a_runtime_module_newly_imported_by_codegen_is_picked_up(tree):
    """A new runtime module reached from codegen (even lazily, in a function) and what it imports in turn
    (relative imports) join the hash without any list being edited."""
    (tree / "runtime" / "newmod.py").write_text("from . import newdep\nfrom .errors import HgemmError\n")
    (tree / "runtime" / "newdep.py").write_text("X = 1\n")
    (tree / "runtime" / "unused.py").write_text("Y = 2\n")
    before = source_files(tree)
    assert "runtime/newmod.py" not in before and "runtime/unused.py" not in before
    with open(tree / "codegen" / "cubin_info.py", "a") as f:
        f.write("\n\ndef _probe():\n    from runtime import newmod\n\n    return newmod\n")
    after = source_files(tree)
    assert {"runtime/newmod.py", "runtime/newdep.py", "runtime/errors.py"} <= set(after)
    assert "runtime/unused.py" not in after
    base = source_sha256(tree)
    (tree / "runtime" / "newdep.py").write_text("X = 2\n")
    assert source_sha256(tree) != base


@pytest.mark.parametrize(
    "statement, expected",
    [
        ("import runtime.newmod", "runtime/newmod.py"),
        ("import runtime.newmod as nm", "runtime/newmod.py"),
        ("from runtime.newmod import X", "runtime/newmod.py"),
        ("from runtime import newmod", "runtime/newmod.py"),
        ("from runtime import HgemmError", "runtime/__init__.py"),  # a name from the package itself
    ],
)
def test_every_import_form_is_followed(tree, statement, expected):
    (tree / "runtime" / "newmod.py").write_text("X = 1\n")
    (tree / "codegen" / "extra.py").write_text(statement + "\n")
    assert expected in source_files(tree)
