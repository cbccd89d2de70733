"""Every repository path cited in comments, docstrings and docs exists, and nothing cites a document that
is not in the repository.

Why: a citation such as "see docs/KERNEL.md" or "codegen/oracle.py drives it" is how a reader finds the
reason behind a rule; after a file moves or is renamed, a dangling citation sends them nowhere, and a
citation of notes kept outside the repository can never be followed by anyone who only has the clone.

What counts as a repository path (the rules, in the order they are applied):

* Files scanned: those of the repository (tracked, plus new files git does not ignore, so that a file not
  yet committed is checked too) named *.py, *.md, *.yaml, *.toml, *.txt, *.c, *.j2, CMakeLists.txt, and
  .ci/run. Non-Python files are read whole. In Python files, comments, docstrings and (outside tests/)
  every other string literal are read: an error message that says "see docs/<doc>.md" is a citation too,
  whereas string literals in tests are test data (temporary trees with made-up files), not citations.
* A citation is a token that starts with one of the repository's top-level names, derived from that same
  file list: a top-level directory followed by `/` (`codegen/...`, `tests/...`, `.ci/run`), or a top-level
  file name on its own (`README.md`, `kernel_specs.yaml`, `pyproject.toml`). It must not be glued to a
  longer path or word on its left (`/tmp/x/runtime/y`, `<repo>/runtime` and `foo_docs/` are not
  citations). A token ends at a character that cannot be in a path, so a trailing `:line`, `#anchor`,
  comma, parenthesis or quote is not part of it; trailing dots (end of a sentence) are dropped.
* Skipped: tokens with glob or template characters (`*`, `?`, `[`, `{`, `<`, `$`, e.g. `runtime/*.py`,
  `wheels/hgemm_sm90-*.whl`), since they name a pattern or a placeholder rather than one file. Build
  outputs and local environments (`build/`, `.venv`, `.cache/`, unpacked wheels) are never top-level
  names of the repository's files, so they are not citations to begin with (`wheels/` is, through
  wheels/.gitkeep; its contents are always globs).
* A citation holds if it names a file of the repository or a directory containing one (a trailing `/`
  asks for a directory), or a Python module without its `.py`, possibly followed by an attribute
  (`runtime/driver`, `runtime/tensormap.make_template`).

Separately, any mention of a document outside the repository fails: the design notes and the style guide
the project was started from (by file name, or by shorthand: the document's upper-case name followed by a
fact or principle number), and paths into a sibling `shared` folder (with or without leading `../`). The
rule instead: state the reason where it is needed, or cite a document under docs/.
"""

from __future__ import annotations

import ast
import io
import re
import subprocess
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCANNED_SUFFIXES = (".py", ".md", ".yaml", ".toml", ".txt", ".c", ".j2")
SCANNED_NAMES = ("CMakeLists.txt", ".ci/run")
# Characters a cited path may contain; anything else ends the token. Glob/template characters are
# included so that such a token is seen whole, and then skipped.
_PATH_CHARS = r"[\w.\-/*?\[\]{}<>$]"
_SKIP = re.compile(r"[*?\[\]{}<>$]")
# The outside documents, spelled in pieces so that this file does not cite them itself.
_DESIGN, _STYLE, _SHARED = "DES" + "IGN", "STY" + "LE", "sha" + "red"
_OUTSIDE = re.compile(
    rf"\b(?:{_DESIGN}|{_STYLE})\b(?:\.md\b)?"  # the design notes, the style guide (or their shorthand)
    rf"|(?<![\w.\-/])(?:\.\./)+{_SHARED}\b"  # a sibling folder: ../<it>, ../../<it>/x
    rf"|(?<![\w.\-/]){_SHARED}/"  # <it>/x
)


def repository_files(root: Path) -> list[str]:
    """Repository-relative paths of the files a fresh clone would hold once the work tree is committed:
    tracked files still present, plus untracked files that git does not ignore."""
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root, capture_output=True, check=True,
    )  # fmt: skip
    names = {n for n in out.stdout.decode().split("\0") if n}
    return sorted(n for n in names if (root / n).is_file())


def scanned(files: list[str]) -> list[str]:
    return [f for f in files if f.endswith(SCANNED_SUFFIXES) or f in SCANNED_NAMES]


def citation_pattern(files: list[str]) -> re.Pattern[str]:
    """Tokens starting with a top-level directory + '/' or equal to a top-level file name."""
    dirs = sorted({f.split("/", 1)[0] for f in files if "/" in f})
    tops = sorted({f for f in files if "/" not in f})
    heads = [re.escape(d) + "/" for d in dirs] + [re.escape(t) + r"(?![\w.\-/])" for t in tops]
    return re.compile(r"(?<![\w.\-/])(?:" + "|".join(heads) + r")" + _PATH_CHARS + "*")


def _python_prose(text: str, literals: bool) -> Iterator[tuple[int, str]]:
    """(line number, text) of the comments and docstrings of Python source `text`, and of every other
    string literal if `literals`."""
    docstrings = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                start, end = (first.lineno, first.col_offset), (first.end_lineno, first.end_col_offset)
                docstrings.append((start, end))
    string_kinds = {tokenize.STRING, getattr(tokenize, "FSTRING_MIDDLE", tokenize.STRING)}
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            yield tok.start[0], tok.string
        elif tok.type in string_kinds and (literals or any(a <= tok.start < b for a, b in docstrings)):
            for i, line in enumerate(tok.string.splitlines()):
                yield tok.start[0] + i, line


def prose(root: Path, rel: str) -> Iterator[tuple[int, str]]:
    """(line number, text) of what may cite a path in file `rel` (see the module docstring)."""
    text = (root / rel).read_text(encoding="utf-8", errors="replace")
    if rel.endswith(".py"):
        yield from _python_prose(text, literals=not rel.startswith("tests/"))
    else:
        yield from enumerate(text.splitlines(), 1)


def _resolves(token: str, files: set[str], dirs: set[str]) -> bool:
    if token.endswith("/"):
        return token.rstrip("/") in dirs
    if token in files or token in dirs:
        return True
    head, _, name = token.rpartition("/")
    module = name.split(".", 1)[0]  # a module cited without .py, maybe with an attribute after it
    return f"{head}/{module}.py" in files


def dangling_citations(root: Path) -> list[str]:
    """'file:line: token' for every cited repository path that does not exist."""
    files = repository_files(root)
    dirs = {str(p) for f in files for p in Path(f).parents if str(p) != "."}
    pattern = citation_pattern(files)
    out = []
    for rel in scanned(files):
        for lineno, line in prose(root, rel):
            for m in pattern.finditer(line):
                token = m.group(0).rstrip(".")
                if not _SKIP.search(token) and not _resolves(token, set(files), dirs):
                    out.append(f"{rel}:{lineno}: {token}")
    return out


def outside_citations(root: Path) -> list[str]:
    """'file:line: match' for every mention of a document outside the repository."""
    out = []
    for rel in scanned(repository_files(root)):
        for lineno, line in prose(root, rel):
            out += [f"{rel}:{lineno}: {m.group(0)}" for m in _OUTSIDE.finditer(line)]
    return out


def _have_git() -> bool:
    try:
        subprocess.run(["git", "rev-parse", "--git-dir"], cwd=REPO, capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return False
    return True


pytestmark = pytest.mark.skipif(not _have_git(), reason="needs git and a git checkout to list the files")


# --- the real tree -------------------------------------------------------------------------------------


def test_every_cited_repository_path_exists():
    bad = dangling_citations(REPO)
    assert not bad, "cited paths that do not exist:\n" + "\n".join(bad)


def test_no_document_outside_the_repository_is_cited():
    bad = outside_citations(REPO)
    assert not bad, "citations of documents outside the repository:\n" + "\n".join(bad)


def test_the_scan_sees_the_usual_citations():
    """Guards against a scan that passes because it matches nothing."""
    files = repository_files(REPO)
    assert {"README.md", "kernel_specs.yaml", ".ci/run", "runtime/errors.py"} <= set(files)
    pattern = citation_pattern(files)
    readme = (REPO / "README.md").read_text()
    found = {m.group(0).rstrip(".") for m in pattern.finditer(readme)}
    assert {"kernel_specs.yaml", "docs/INSTANCES.md", "codegen/"} <= found, found


# --- the checks catch what they must (a small throwaway repository) ------------------------------------


@pytest.fixture
def toy(tmp_path: Path) -> Path:
    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=tmp_path, capture_output=True, check=True)

    git("init", "-q")
    (tmp_path / ".gitignore").write_text("/build/\n")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "real.py").write_text("X = 1\n")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "A.md").write_text("# A\n")
    (tmp_path / "README.md").write_text("# toy\n")
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "out.txt").write_text("ignored\n")
    git("add", "-A")
    (tmp_path / "pkg" / "new.py").write_text("Y = 2\n")  # untracked but not ignored: counts
    lines = [
        "see {p}/real.py:12, {p}/new.py and {d}/A.md#section.",  # fine: line, anchor, new file, full stop
        "the {p}/ directory and ({r}), `{d}/A.md`",  # fine
        "globs {p}/*.py, templates {p}/{{name}}.py and {p}/<id>.cubin are skipped",  # fine
        "/abs/{p}/nope.py and my_{d}/x.md are not citations",  # fine: glued on the left
        "but {p}/gone.py is dangling, so is {d}/B.md: and {p}/real.py/",  # three dangling
        "build/out.txt is not a top-level name of the repository's files",  # fine
    ]
    text = "\n".join(lines).format(p="pkg", d="docs", r="README.md")
    (tmp_path / "pkg" / "cites.py").write_text(f'"""{text}\n"""\n')
    (tmp_path / "docs" / "B.txt").write_text(
        f"Mentions of outside notes: {_DESIGN}.md, {_STYLE} P7, ../{_SHARED}/x and {_SHARED}/y; but designs,"
        f" style and the {_SHARED} memory are fine.\n"
    )
    return tmp_path


def test_dangling_citations_are_reported_with_file_and_line(toy):
    assert dangling_citations(toy) == [
        "pkg/cites.py:5: pkg/gone.py",
        "pkg/cites.py:5: docs/B.md",
        "pkg/cites.py:5: pkg/real.py/",
    ]


def test_outside_citations_are_reported(toy):
    found = outside_citations(toy)
    assert [f.split(": ", 1)[1] for f in found] == [f"{_DESIGN}.md", _STYLE, f"../{_SHARED}", f"{_SHARED}/"]
    assert all(f.startswith("docs/B.txt:1: ") for f in found)
