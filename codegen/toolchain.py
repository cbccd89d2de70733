"""The toolchain fingerprint: what, besides the spec, determines a cubin and its launch contract.

Every compiled instance is cached under a key made of its canonical spec and this stamp
(codegen/cache.py), and the stamp is written into the manifest. The DSL version is pinned exactly
(pyproject.toml's build-system.requires and requirements-test.txt say the same;
tests/unit/test_toolchain.py holds the three together) because the launch contract — parameter order,
TMA descriptor encoding, grid rule — is captured from that DSL's host code and may change with it.

The source part of the stamp is a hash over every file that can shape a record. That set is derived, not
listed, because a hand-kept list silently goes stale (it once omitted codegen/cubin_info.py and the
runtime modules the contract capture runs): it is every source file under codegen/ plus every runtime/
module that codegen imports, directly or through other runtime modules, found by reading their import
statements. A runtime module that codegen starts to import is therefore covered without touching this
file; one it does not import (the launch path, say) never invalidates the cache.
"""

from __future__ import annotations

import ast
import hashlib
import os
import shlex
import shutil
import sys
from importlib import metadata
from pathlib import Path

PINNED_DSL_VERSION = "4.8.1"

REPO = Path(__file__).resolve().parent.parent
# Files under codegen/ that count as sources: code, the C stub the oracle links, templates.
_CODEGEN_SUFFIXES = (".py", ".c", ".h", ".j2")


class ToolchainError(RuntimeError):
    pass


def _dist_versions() -> dict[str, str]:
    wanted = ("nvidia-cutlass-dsl", "cuda-python", "cuda-bindings")
    out = {}
    for dist in metadata.distributions():
        name = (dist.metadata["Name"] or "").lower()
        if name.startswith(wanted):
            out[name] = dist.version
    return dict(sorted(out.items()))


def _module_file(runtime_dir: Path, parts: list[str]) -> Path | None:
    """The file of module `runtime.<parts>` (a module or a package's __init__), or None if no such file."""
    base = runtime_dir.joinpath(*parts)
    if parts and base.with_suffix(".py").is_file():
        return base.with_suffix(".py")
    if (base / "__init__.py").is_file():
        return base / "__init__.py"
    return None


def _runtime_imports(path: Path, runtime_dir: Path) -> set[Path]:
    """The runtime/ files that `path` imports anywhere in its body (function-level imports run too).

    Followed: `import runtime.x`, `from runtime import x`, `from runtime.x import y`, and, inside runtime/,
    relative imports. `from runtime import x` names a module where runtime/<x>.py (or a package) exists;
    otherwise it imports a name from the package's __init__.py, which is then the dependency. A package
    __init__.py is not counted merely because one of its submodules is imported: it holds no code that
    shapes a record, and counting it would drag in everything it re-exports.
    """
    tree = ast.parse(path.read_bytes(), filename=str(path))
    in_runtime = runtime_dir in path.parents
    package = list(path.parent.relative_to(runtime_dir).parts) if in_runtime else []
    found: set[Path] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "runtime" and (hit := _module_file(runtime_dir, parts[1:])):
                    found.add(hit)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                parts = (node.module or "").split(".")
                if parts[0] != "runtime":
                    continue
                base = parts[1:]
            elif in_runtime:
                if node.level - 1 > len(package):
                    continue  # climbs out of runtime/: not a runtime module
                up = len(package) - (node.level - 1)
                base = package[:up] + (node.module.split(".") if node.module else [])
            else:
                continue  # a relative import inside codegen/: already hashed as a codegen file
            for alias in node.names:
                hit = _module_file(runtime_dir, [*base, alias.name]) or _module_file(runtime_dir, base)
                if hit:
                    found.add(hit)
    return found


def source_files(root: Path = REPO) -> list[str]:
    """Every file (repository-relative, sorted) whose change must invalidate every cached cubin/contract.

    All sources under codegen/ (`_CODEGEN_SUFFIXES`, no __pycache__) and, transitively, every runtime/
    module that codegen imports.
    """
    codegen_dir, runtime_dir = root / "codegen", root / "runtime"
    files = {
        p
        for p in codegen_dir.rglob("*")
        if p.is_file() and p.suffix in _CODEGEN_SUFFIXES and "__pycache__" not in p.relative_to(root).parts
    }
    todo = [p for p in files if p.suffix == ".py"]
    seen: set[Path] = set()
    while todo:
        path = todo.pop()
        for dep in _runtime_imports(path, runtime_dir):
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return sorted(p.relative_to(root).as_posix() for p in files | seen)


def source_sha256(root: Path = REPO) -> str:
    h = hashlib.sha256()
    for rel in source_files(root):
        data = (root / rel).read_bytes()
        h.update(f"{rel}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


def toolchain_stamp() -> dict[str, str]:
    dists = _dist_versions()
    return {
        "python": f"{sys.version_info[0]}.{sys.version_info[1]}",
        "dists": ";".join(f"{k}=={v}" for k, v in dists.items()),
        "src_sha256": source_sha256(),
    }


def check_pinned_dsl() -> str:
    """Refuse to build with another DSL than the one the contract was captured with."""
    try:
        found = metadata.version("nvidia-cutlass-dsl")
    except metadata.PackageNotFoundError:
        raise ToolchainError(
            f"nvidia-cutlass-dsl is not installed; install nvidia-cutlass-dsl=={PINNED_DSL_VERSION}"
        ) from None
    if found != PINNED_DSL_VERSION:
        raise ToolchainError(
            f"nvidia-cutlass-dsl {found} is installed but this tree's launch contract is pinned to "
            f"{PINNED_DSL_VERSION}; install nvidia-cutlass-dsl=={PINNED_DSL_VERSION}, or bump "
            "PINNED_DSL_VERSION (and pyproject.toml) after re-running the CPU oracle tests"
        )
    return found


def c_compiler() -> list[str]:
    """The C compiler command the oracle links with (codegen/oracle.py): $CC if set (it may carry
    options, e.g. `ccache gcc`), else `cc`."""
    words = shlex.split(os.environ.get("CC", "").strip())
    return words or ["cc"]


def check_c_compiler() -> list[str]:
    """The C compiler command, or ToolchainError naming the fix if its program does not exist: checked
    before any compile, because the oracle needs it after every compile."""
    try:
        cmd = c_compiler()
    except ValueError as exc:  # shlex: an unbalanced quote
        raise ToolchainError(
            f"CC={os.environ.get('CC')!r} is not a valid command ({exc}); fix or unset CC"
        ) from None
    if shutil.which(cmd[0]) is None:
        origin = f"CC={os.environ['CC']!r}" if os.environ.get("CC", "").strip() else "the default `cc`"
        raise ToolchainError(
            f"no C compiler: {cmd[0]!r} ({origin}) is not an executable on PATH; the DSL host-code oracle "
            "links with it. Install one (e.g. `apt-get install gcc`) or set CC to a C compiler"
        )
    return cmd
