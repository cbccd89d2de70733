"""Where the compiles run: a local process pool (the default) or a Dask cluster.

Both take the same jobs (codegen/worker.py `compile_job`) and yield their results in completion order to
the one loop in codegen/build.py that drives the progress bar, `--keep-going` and the cache, so the two
behave alike by construction. Choices (`--executor`):

- `pool`: a `ProcessPoolExecutor` of `--jobs` spawned processes on this machine.
- `dask-local:N`: a `dask.distributed.LocalCluster` of N single-threaded worker processes.
- `dask` with `--scheduler ADDRESS`: an existing cluster, whose workers run in a checkout of the same
  commit with the build requirements installed (codegen/worker.py checks their toolchain stamp).

Dask is imported only here and only when a Dask executor is chosen: the default build does not need it.
A job that a dying worker takes down is resubmitted by Dask's scheduler itself (up to its
`distributed.scheduler.allowed-failures`); nothing here pins a job to a worker, so that is never defeated.
A job the executor could not run at all comes back as a `Lost` result for that instance.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import pickle
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import CancelledError, ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from multiprocessing import get_context

POOL = "pool"
DASK = "dask"
DASK_LOCAL = "dask-local"


class ExecutorError(ValueError):
    """An executor that cannot be used as asked; the message is one line naming the fix."""


@dataclass(frozen=True)
class Lost:
    """A job the executor could not run to completion (its worker died too often, or could not load it)."""

    error: str


@dataclass(frozen=True)
class ExecutorChoice:
    kind: str  # POOL, DASK or DASK_LOCAL
    workers: int | None = None  # DASK_LOCAL: the LocalCluster's size
    scheduler: str | None = None  # DASK: the scheduler's address

    def describe(self, jobs: int) -> str:
        if self.kind == POOL:
            return f"pool:{max(1, jobs)}"
        if self.kind == DASK_LOCAL:
            return f"{DASK_LOCAL}:{self.workers}"
        return f"{DASK} ({self.scheduler})"


def parse_executor(text: str, scheduler: str | None = None) -> ExecutorChoice:
    """`pool`, `dask` (needs `scheduler`) or `dask-local:N`; ExecutorError (one line) otherwise, and if a
    Dask executor is chosen where dask.distributed is not installed. Checked before any compile."""
    name, _, count = text.partition(":")
    if name == POOL and not count:
        choice = ExecutorChoice(POOL)
    elif name == DASK and not count:
        if not scheduler:
            raise ExecutorError(
                "--executor dask needs --scheduler ADDRESS (e.g. tcp://host:8786); "
                "or use --executor dask-local:N for a cluster on this machine"
            )
        choice = ExecutorChoice(DASK, scheduler=scheduler)
    elif name == DASK_LOCAL:
        if not count.isdecimal() or int(count) < 1:
            raise ExecutorError(f"--executor {text}: write dask-local:N with N >= 1 worker processes")
        choice = ExecutorChoice(DASK_LOCAL, workers=int(count))
    else:
        raise ExecutorError(f"unknown --executor {text!r}; use pool, dask (with --scheduler) or dask-local:N")
    if choice.kind != DASK and scheduler:
        raise ExecutorError(f"--scheduler (or $HGEMM_DASK_SCHEDULER) is for --executor dask, not {text}")
    if choice.kind != POOL and not all(importlib.util.find_spec(m) for m in ("dask", "distributed")):
        raise ExecutorError(
            f"--executor {text} needs dask and distributed: pip install 'dask[distributed]' "
            "(requirements-test.txt pins a range), or use --executor pool"
        )
    return choice


class PoolRunner:
    """Jobs on a local pool of spawned processes (the DSL holds MLIR contexts and threads: never fork)."""

    def __init__(self, jobs: int):
        self._pool = ProcessPoolExecutor(max_workers=max(1, jobs), mp_context=get_context("spawn"))
        self._futures: list = []

    def results(self, fn: Callable, arglists: Sequence[tuple]) -> Iterator[tuple[int, object]]:
        """(index into arglists, fn's result or Lost), in completion order."""
        index = {self._pool.submit(fn, *args): i for i, args in enumerate(arglists)}
        self._futures = list(index)
        for fut in as_completed(index):
            try:
                result = fut.result()
            except CancelledError:
                continue
            except BrokenProcessPool as exc:  # a worker was killed (e.g. out of memory)
                result = Lost(f"a pool worker process died while compiling it ({exc})")
            yield index[fut], result

    def cancel(self) -> None:
        """Drop every job not yet started (running ones finish; their results are ignored)."""
        for fut in self._futures:
            fut.cancel()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


class _Call:
    """`fn(*args)`, run by unpickling: the Dask task is `pickle.loads(bytes)`, which the scheduler (it
    deserializes task specs) can handle without importing codegen; the worker's `pickle.loads` imports
    `fn`'s module and returns `fn(*args)`. Results go from the worker to this process, never through the
    scheduler."""

    def __init__(self, fn: Callable, args: tuple):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return self.fn, self.args


class DaskRunner:
    """Jobs on a dask.distributed cluster: a LocalCluster of N processes, or the one at `scheduler`."""

    def __init__(self, choice: ExecutorChoice):
        import dask
        from distributed import Client, LocalCluster

        self._client = None
        self._cluster = None
        self._scratch: str | None = None
        self._pending: set = set()
        if choice.kind == DASK_LOCAL:
            # Scheduler and worker scratch space in a directory of ours, removed on close (Dask's default
            # is a shared $TMPDIR/dask-scratch-space that outlives the build).
            self._scratch = tempfile.mkdtemp(prefix="hgemm-dask-")
            with dask.config.set({"temporary-directory": self._scratch}):
                self._cluster = LocalCluster(
                    n_workers=choice.workers,
                    threads_per_worker=1,  # one compile per process (codegen/worker.py)
                    processes=True,
                    dashboard_address=None,
                    local_directory=self._scratch,
                    silence_logs=logging.ERROR,
                )
            self._client = Client(self._cluster, set_as_default=False)
            return
        try:
            self._client = Client(choice.scheduler, set_as_default=False, timeout="30s")
        except (OSError, TimeoutError, asyncio.TimeoutError) as exc:  # nothing answers at that address
            raise ExecutorError(
                f"cannot reach the Dask scheduler at {choice.scheduler} ({type(exc).__name__}: "
                f"{' '.join(str(exc).split())}); check --scheduler and that the scheduler is running"
            ) from None

    def results(self, fn: Callable, arglists: Sequence[tuple]) -> Iterator[tuple[int, object]]:
        """(index into arglists, fn's result or Lost), in completion order."""
        from distributed import as_completed as dask_as_completed

        # pure=False: every job is a fresh task (never deduplicated against another client's); no worker
        # restrictions, so the scheduler may move a job off a worker that died. The call travels as opaque
        # bytes (`_Call`) so that only workers need this checkout, not the scheduler.
        index = {
            self._client.submit(pickle.loads, pickle.dumps(_Call(fn, args)), pure=False): i
            for i, args in enumerate(arglists)
        }
        self._pending = set(index)
        for fut in dask_as_completed(list(index), loop=self._client.loop):
            self._pending.discard(fut)
            if fut.cancelled():
                continue
            try:
                result = fut.result()
            except CancelledError:
                continue
            except Exception as exc:  # noqa: BLE001  (KilledWorker, a worker that cannot import the job, ...)
                result = Lost(
                    f"the Dask cluster could not run it: {type(exc).__name__}: {exc} (are the workers "
                    "started in the repository root with the build requirements installed?)"
                )
            fut.release()  # the worker may drop the result now that the driver holds it
            yield index[fut], result

    def cancel(self) -> None:
        """Cancel every job not yet finished."""
        if self._pending:
            self._client.cancel(list(self._pending))
            self._pending = set()

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
        if self._cluster is not None:
            self._cluster.close()
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)


def open_runner(choice: ExecutorChoice, jobs: int) -> PoolRunner | DaskRunner:
    """A runner for `choice`; the caller closes it."""
    return PoolRunner(jobs) if choice.kind == POOL else DaskRunner(choice)
