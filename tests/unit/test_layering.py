"""The shipped runtime never imports the build side, a framework or (at import time) the driver bindings.

Why: the wheel promises that `import hgemm_sm90` needs no compiler, no DSL, no torch/numpy and no GPU;
the codegen/, build_tools/ and DSL packages are not even installed on a user's machine. The CUDA driver
bindings are the runtime's one dependency but must be imported lazily, on the first GPU call, so that
importing (and reporting errors without a GPU) stays cheap. Two independent checks, both over every
module found in runtime/ (no hand-kept list, so a new module is covered the day it is added):

* statically, the AST of each module holds no module-level import of a forbidden top-level package.
  "Module-level" means anything executed at import: the module body, including `if`/`try`/`with` blocks
  and class bodies, but not function bodies (a lazy import there is the sanctioned pattern). An
  `if TYPE_CHECKING:` body never runs and is exempt.
* dynamically, each `hgemm_sm90.<module>` is imported in a fresh interpreter under its installed name
  (a temporary folder holding a symlink ``hgemm_sm90 -> runtime/``, no PYTHONPATH, cwd outside the
  repository), once with `-S` (no site-packages, as on a machine with nothing else installed) and once
  with site-packages (where the forbidden packages are importable, so a guarded `try: import` would show
  up), and none of the forbidden modules may be loaded afterwards. This catches dynamic imports
  (`importlib.import_module`) that the static check cannot see.

Both checks take the runtime directory as an argument; the last tests run them on a deliberately broken
copy to show that they report violations rather than pass vacuously.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

RUNTIME = Path(__file__).resolve().parents[2] / "runtime"
FORBIDDEN = frozenset({"codegen", "build_tools", "cutlass", "yaml", "jinja2", "torch", "numpy", "cuda"})

PROBE = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
name = sys.argv[2]
before = set(sys.modules)
t0 = time.perf_counter()
error = None
try:
    module = __import__(name)
except BaseException as e:
    error = f"{type(e).__name__}: {e}"
elapsed = time.perf_counter() - t0
print(json.dumps({"file": getattr(sys.modules.get("hgemm_sm90"), "__file__", None), "seconds": elapsed,
                  "error": error, "before": sorted(before),
                  "all": sorted({m.split('.')[0] for m in sys.modules}),
                  "new": sorted(set(sys.modules) - before)}))
"""


# --- the checks ----------------------------------------------------------------------------------------


def runtime_modules(runtime_dir: Path) -> list[str]:
    """Dotted names, under the installed package name, of every module in `runtime_dir`."""
    names = []
    for path in sorted(runtime_dir.rglob("*.py")):
        rel = path.relative_to(runtime_dir).with_suffix("")
        if "__pycache__" in rel.parts:
            continue
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        names.append(".".join(("hgemm_sm90", *parts)))
    return names


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_time_imports(body: list[ast.stmt]):
    """Yield (lineno, top-level module) for every absolute import that runs when the module is imported."""
    for node in body:
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module:
                yield node.lineno, node.module.split(".")[0]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue  # runs when called, not at import: lazy imports belong here
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            yield from _import_time_imports(node.orelse)
        else:
            # if/else, try/except/else/finally, with, for/while, match, class bodies: all run at import.
            for field in ("body", "orelse", "finalbody", "handlers", "cases"):
                for child in getattr(node, field, ()) or ():
                    yield from _import_time_imports(child.body if hasattr(child, "pattern") else [child])


def static_violations(runtime_dir: Path) -> list[str]:
    """'file:line imports X' for every import-time import of a FORBIDDEN package in `runtime_dir`."""
    out = []
    for path in sorted(runtime_dir.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        tree = ast.parse(path.read_bytes(), filename=str(path))
        for lineno, top in _import_time_imports(tree.body):
            if top in FORBIDDEN:
                out.append(f"{path.relative_to(runtime_dir.parent).as_posix()}:{lineno} imports {top}")
    return out


def make_link_dir(where: Path, runtime_dir: Path) -> Path:
    """`where` with a symlink hgemm_sm90 -> runtime_dir: the package reached under its installed name."""
    try:
        os.symlink(runtime_dir, where / "hgemm_sm90", target_is_directory=True)
    except OSError as e:  # e.g. Windows without symlink rights
        pytest.skip(f"cannot create a symlink: {e}")
    return where


def probe(link_dir: Path, module: str, *flags: str) -> dict:
    """Import `module` in a fresh interpreter that sees only `link_dir` (and site-packages unless -S)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSTARTUP", "PYTHONHOME")}
    argv = [sys.executable, *flags, "-c", PROBE, str(link_dir), module]
    out = subprocess.run(argv, env=env, cwd=link_dir, capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def dynamic_violations(link_dir: Path, modules: list[str], *flags: str) -> list[str]:
    """'module: ...' for each module that fails to import or leaves a FORBIDDEN module loaded."""
    out = []
    for module in modules:
        result = probe(link_dir, module, *flags)
        if result["error"]:
            out.append(f"{module}: import failed: {result['error']}")
        bad = FORBIDDEN & set(result["all"])
        if bad:
            out.append(f"{module}: loaded {sorted(bad)}")
    return out


# --- the real tree -------------------------------------------------------------------------------------


@pytest.fixture
def link_dir(tmp_path):
    return make_link_dir(tmp_path, RUNTIME)


def test_modules_are_discovered_from_the_directory():
    modules = runtime_modules(RUNTIME)
    assert "hgemm_sm90" in modules and "hgemm_sm90.errors" in modules
    assert len(modules) == len(list(RUNTIME.rglob("*.py")))


def test_no_module_imports_a_forbidden_package_at_import_time():
    assert static_violations(RUNTIME) == []


@pytest.mark.parametrize("flags", [("-S",), ()], ids=["no-site", "site"])
def test_every_module_imports_without_pulling_in_a_forbidden_package(link_dir, flags):
    assert dynamic_violations(link_dir, runtime_modules(RUNTIME), *flags) == []


def test_import_pulls_in_only_the_package_and_its_errors(link_dir):
    result = probe(link_dir, "hgemm_sm90")
    assert result["error"] is None, result["error"]
    assert Path(result["file"]).parent.name == "hgemm_sm90"
    bad = FORBIDDEN & set(result["all"])
    assert not bad, f"import hgemm_sm90 imported {sorted(bad)}; new modules: {result['new']}"
    # Only the package itself and its error module (plus stdlib bits) load at import time.
    ours = [m for m in result["new"] if m.startswith("hgemm_sm90")]
    assert ours == ["hgemm_sm90", "hgemm_sm90.errors"], ours


def test_import_is_fast_without_site_packages(link_dir):
    # -S: no site-packages at all, as on a machine without cuda-bindings installed.
    result = probe(link_dir, "hgemm_sm90", "-S")
    assert result["error"] is None, result["error"]
    assert not FORBIDDEN & set(result["all"])
    assert result["seconds"] < 0.5, f"import hgemm_sm90 took {result['seconds'] * 1e3:.1f} ms"


# --- the checks catch what they must (a deliberately broken copy) --------------------------------------


@pytest.fixture
def broken(tmp_path) -> Path:
    """A copy of runtime/ with forbidden imports planted where each check must see them, and allowed ones
    where it must not."""
    copy = tmp_path / "runtime"
    shutil.copytree(RUNTIME, copy, ignore=shutil.ignore_patterns("__pycache__"))
    with open(copy / "tensormap.py", "a") as f:
        f.write("\nif True:\n    import codegen.spec  # planted\n")
    with open(copy / "knobs.py", "a") as f:
        f.write("\ntry:\n    import numpy as _np  # planted\nexcept ImportError:\n    _np = None\n")
    with open(copy / "stream.py", "a") as f:
        f.write("\n\nclass _Planted:\n    from cuda.bindings import driver as _cu  # planted\n")
    with open(copy / "scheduling.py", "a") as f:  # none of these may be reported
        f.write(
            "\n\ndef _lazy():\n    import torch  # planted, allowed: runs only when called\n\n\n"
            "TYPE_CHECKING = False\nif TYPE_CHECKING:\n    import yaml  # planted, allowed: never runs\n"
        )
    with open(copy / "problem.py", "a") as f:  # invisible to the AST check; the import probe sees it
        f.write("\nimport importlib as _il\n\n_il.import_module('jinja2')  # planted\n")
    return copy


def test_static_check_reports_each_planted_import(broken):
    found = static_violations(broken)
    assert [v.split(":")[0] for v in found] == [
        "runtime/knobs.py", "runtime/stream.py", "runtime/tensormap.py"
    ], found  # fmt: skip
    assert [v.rsplit(" ", 1)[1] for v in found] == ["numpy", "cuda", "codegen"]


def test_import_probe_reports_the_planted_imports(broken, tmp_path):
    link = tmp_path / "link"
    link.mkdir()
    make_link_dir(link, broken)
    # Stand-ins for packages -S hides, so the planted imports succeed and must be caught as loaded.
    for fake in ("numpy", "jinja2"):
        (link / fake).mkdir()
        (link / fake / "__init__.py").write_text("")
    modules = ["hgemm_sm90.knobs", "hgemm_sm90.problem", "hgemm_sm90.tensormap", "hgemm_sm90.errors"]
    found = dynamic_violations(link, modules, "-S")
    assert found[0] == "hgemm_sm90.knobs: loaded ['numpy']", found
    assert found[1] == "hgemm_sm90.problem: loaded ['jinja2']", found
    # codegen is not on the path: the import fails, and that failure is reported too.
    assert found[2].startswith("hgemm_sm90.tensormap: import failed: ModuleNotFoundError"), found
    assert len(found) == 3, found  # errors.py was left alone and stays clean
