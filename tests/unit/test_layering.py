"""`import hgemm_sm90` pulls in no compiler, framework or driver module (STYLE P1, DESIGN hard rules).

The runtime is imported in a fresh interpreter, under its installed name, through a temporary folder
holding a symlink ``hgemm_sm90 -> <repo>/runtime``. The CUDA driver bindings must be imported lazily (on
the first GPU call), so even ``cuda`` must be absent after the import.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

RUNTIME = Path(__file__).resolve().parents[2] / "runtime"
FORBIDDEN = {"cutlass", "codegen", "build_tools", "jinja2", "yaml", "torch", "numpy", "cuda"}

PROBE = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
before = set(sys.modules)
t0 = time.perf_counter()
import hgemm_sm90
elapsed = time.perf_counter() - t0
print(json.dumps({"file": hgemm_sm90.__file__, "seconds": elapsed,
                  "all": sorted({m.split('.')[0] for m in sys.modules}),
                  "new": sorted(set(sys.modules) - before)}))
"""


@pytest.fixture
def link_dir(tmp_path):
    try:
        os.symlink(RUNTIME, tmp_path / "hgemm_sm90", target_is_directory=True)
    except OSError as e:  # e.g. Windows without symlink rights
        pytest.skip(f"cannot create a symlink: {e}")
    return tmp_path


def probe(link_dir: Path, *flags: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSTARTUP")}
    out = subprocess.run([sys.executable, *flags, "-c", PROBE, str(link_dir)], env=env, cwd=link_dir,
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_import_pulls_in_nothing_heavy(link_dir):
    result = probe(link_dir)
    assert Path(result["file"]).parent.name == "hgemm_sm90"
    bad = FORBIDDEN & set(result["all"])
    assert not bad, f"import hgemm_sm90 imported {sorted(bad)}; new modules: {result['new']}"
    # Only the package itself and its error module (plus stdlib bits) load at import time.
    ours = [m for m in result["new"] if m.startswith("hgemm_sm90")]
    assert ours == ["hgemm_sm90", "hgemm_sm90.errors"], ours


def test_import_works_without_site_packages(link_dir):
    # -S: no site-packages at all, as on a machine without cuda-bindings installed.
    result = probe(link_dir, "-S")
    assert not FORBIDDEN & set(result["all"])
    assert result["seconds"] < 0.5, f"import hgemm_sm90 took {result['seconds'] * 1e3:.1f} ms"
