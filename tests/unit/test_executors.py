"""Where compiles run (codegen/executors.py): the process pool and a Dask cluster behave alike.

The Dask executor must give the very output of the pool, and its cluster's failures must look like the
pool's: a job whose worker dies is run again elsewhere, `--keep-going` collects every failure, and a job
that cannot be run at all fails its instance instead of the build's process. Dask is optional for the
default build, so nothing here may make `import codegen.build` import it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from codegen.executors import (
    DASK_LOCAL,
    POOL,
    ExecutorChoice,
    ExecutorError,
    Lost,
    PoolRunner,
    parse_executor,
)
from codegen.output import BUILD_REPORT, MANIFEST
from tests.unit.test_build_errors import _build as one_line_build_failure

REPO = Path(__file__).resolve().parents[2]


def test_parse_executor():
    assert parse_executor("pool") == ExecutorChoice(POOL)
    assert parse_executor("dask-local:3") == ExecutorChoice(DASK_LOCAL, workers=3)
    with pytest.raises(ExecutorError, match="needs --scheduler"):
        parse_executor("dask")
    for bad in ("dask-local", "dask-local:0", "dask-local:two", "dask-local:\u00b2"):
        with pytest.raises(ExecutorError, match="dask-local:N"):
            parse_executor(bad)
    with pytest.raises(ExecutorError, match="unknown --executor 'threads'"):
        parse_executor("threads")
    with pytest.raises(
        ExecutorError, match=r"--scheduler \(or \$HGEMM_DASK_SCHEDULER\) is for --executor dask"
    ):
        parse_executor("pool", scheduler="tcp://127.0.0.1:8786")


@pytest.mark.parametrize(
    "args, message",
    [
        (["--executor", "dask"], "--executor dask needs --scheduler ADDRESS"),
        (["--executor", "dask-local:0"], "write dask-local:N with N >= 1"),
        (
            ["--scheduler", "tcp://127.0.0.1:8786"],
            "--scheduler (or $HGEMM_DASK_SCHEDULER) is for --executor dask, not pool",
        ),
    ],
)
def test_bad_executor_arguments_fail_in_one_line_before_compiling(tmp_path, args, message):
    err, _ = one_line_build_failure(tmp_path, "--profile", "ci", *args)
    assert message in err


def test_a_dask_executor_without_dask_installed_names_the_install(monkeypatch):
    import codegen.executors as executors

    real = importlib.util.find_spec
    monkeypatch.setattr(
        executors.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "distributed" else real(name, *a),
    )
    with pytest.raises(ExecutorError, match=r"needs dask and distributed: pip install 'dask\[distributed\]'"):
        parse_executor("dask-local:2")
    assert parse_executor("pool") == ExecutorChoice(POOL)


def test_the_default_build_does_not_import_dask():
    code = (
        "import sys, codegen.build, codegen.executors as e; e.parse_executor('pool'); "
        "assert not {'dask', 'distributed'} & set(sys.modules), 'dask imported'"
    )
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, timeout=120)


# Jobs for the runners: module-level, so a pool or Dask worker can import them by name.
def _pid(_: int) -> int:
    return os.getpid()


def _die_once(marker: str) -> int:
    """Kill this worker process the first time; succeed wherever it runs again."""
    if not os.path.exists(marker):
        Path(marker).write_text(str(os.getpid()))
        os._exit(3)
    return os.getpid()


def _die(_: str) -> int:
    os._exit(3)


def test_a_pool_worker_that_dies_fails_its_instance_not_the_build():
    runner = PoolRunner(jobs=1)
    try:
        results = list(runner.results(_die, [("x",)]))
    finally:
        runner.close()
    assert len(results) == 1 and isinstance(results[0][1], Lost)
    assert "pool worker process died" in results[0][1].error


dask_only = pytest.mark.skipif(
    not all(importlib.util.find_spec(m) for m in ("dask", "distributed")),
    reason="dask.distributed is not installed (requirements-test.txt)",
)


@dask_only
def test_a_dask_job_whose_worker_dies_runs_again_on_another(tmp_path):
    from codegen.executors import DaskRunner

    marker = tmp_path / "died"
    runner = DaskRunner(ExecutorChoice(DASK_LOCAL, workers=2))
    try:
        results = dict(runner.results(_die_once, [(str(marker),)]))
        pids = dict(runner.results(_pid, [(i,) for i in range(4)]))
    finally:
        runner.close()
    assert marker.exists(), "the job never ran"
    assert isinstance(results[0], int) and results[0] != int(marker.read_text())
    assert len(pids) == 4 and all(isinstance(p, int) for p in pids.values())


@dask_only
def test_a_dask_job_that_kills_every_worker_is_lost_not_raised():
    import dask

    from codegen.executors import DaskRunner

    # The scheduler runs in this process: it gives up on a task after this many worker deaths.
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        runner = DaskRunner(ExecutorChoice(DASK_LOCAL, workers=1))
    try:
        results = list(runner.results(_die, [("x",)]))
    finally:
        runner.close()
    assert len(results) == 1 and isinstance(results[0][1], Lost)
    assert "KilledWorker" in results[0][1].error


@dask_only
@pytest.mark.compiler
def test_keep_going_collects_every_failure_under_dask_too(tmp_path):
    from codegen.build import BuildError, build_entries
    from codegen.cache import BuildCache
    from tests.unit.test_build import _spec

    bad = [_spec(tile=[96, 128]), _spec(cluster=[3, 1])]
    dask2 = parse_executor("dask-local:2")
    with pytest.raises(BuildError) as err:
        build_entries(
            bad, cache=BuildCache(tmp_path), jobs=1, keep_going=True, progress=False, executor=dask2
        )
    text = str(err.value)
    assert text.startswith("2 instance(s) failed") and all(s.name() in text for s in bad)
    with pytest.raises(BuildError) as err:
        build_entries(bad, cache=BuildCache(tmp_path), jobs=1, progress=False, executor=dask2)
    assert str(err.value).startswith("1 instance(s) failed to build (use --keep-going")


@dask_only
@pytest.mark.compiler
def test_a_two_worker_dask_cluster_builds_the_ci_profile_like_the_pool(ci_build, tmp_path):
    """Every instance compiled on Dask workers (an empty cache), returned to this process, stored, and
    written: the same cubins and manifest as the pool's build (`ci_build`)."""
    from codegen.build import main
    from codegen.cache import BuildCache

    _, entries, pool_out = ci_build
    out, cache = tmp_path / "kernels", tmp_path / "cache"
    args = ["--profile", "ci", "--out", str(out), "--cache-dir", str(cache), "--quiet"]
    assert main([*args, "--executor", "dask-local:2"]) == 0
    report = json.loads((out / BUILD_REPORT).read_text())
    assert report["compiled"] == len(entries) == 27 and report["executor"] == "dask-local:2"
    files = sorted(p.name for p in pool_out.iterdir() if p.suffix == ".cubin") + [MANIFEST]
    assert sorted(p.name for p in out.iterdir() if p.name != BUILD_REPORT) == sorted(files)
    for name in files:
        assert (out / name).read_bytes() == (pool_out / name).read_bytes(), name
    # The driver filed each result under the key the pool uses, as a complete, verified entry.
    for name, pool_entry in entries.items():
        entry = BuildCache(cache).lookup(pool_entry.path.name, name=name)
        assert entry is not None and entry.problem() is None
        for artifact in ("kernel.cubin", "host.o", "host.h", "host.json", "record.json"):
            assert (entry.path / artifact).read_bytes() == (pool_entry.path / artifact).read_bytes()
