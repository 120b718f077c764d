"""The step runners that run tasks in other processes: a process pool (``process``) and Dask
(``dask``), each task (or group commit) in a worker process's own DuckDB instance
(:func:`lakewrap.workers.worker_task`, :func:`~lakewrap.workers.worker_group`), and
:func:`make_runner`, which picks the runner for ``--executor``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from lakewrap.errors import ConfigError, Location
from lakewrap.execute.executor import Result
from lakewrap.workers import (
    CallableRunner,
    Done,
    StepRunner,
    Task,
    ThreadRunner,
    _interrupt_on_signal,
    all_failed,
    worker_group,
    worker_task,
)


class ProcessRunner(StepRunner):
    """A pool of spawned processes, each with its own DuckDB instance and connection."""

    kind = "process"

    def __init__(self, workers: int) -> None:
        self.workers = max(1, workers)
        self.pool: Any = None

    def start(self, lake: Any, project: Any, con: Any) -> None:
        if not lake.many_processes:
            raise ConfigError(
                "the process executor needs a catalog several processes can open; this lake's is a DuckDB file",
                location=Location("lakewrap.toml"),
                hint="use --executor thread, or catalog = \"postgres\" or \"sqlite\"")
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        self.pool = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"),
                                        initializer=_interrupt_on_signal)

    def submit(self, task: Task, done: Done) -> None:
        future: Future[Result] = self.pool.submit(worker_task, task)
        future.add_done_callback(lambda f: done(task, _outcome(task, f)))

    groups = True  # a group runs in one worker process, on its connection

    def submit_group(self, tasks: list[Task], group_id: str, done: Done, *, atomic: bool = False,
                     seconds: float = 30.0) -> None:
        future: Future[list[Result]] = self.pool.submit(worker_group, tasks, group_id, atomic, seconds)
        future.add_done_callback(lambda f: _group_done(tasks, group_id, f, done))

    def cancel(self) -> None:
        for proc in list(getattr(self.pool, "_processes", {}).values()):
            with contextlib.suppress(OSError, AttributeError):
                os.kill(proc.pid, signal.SIGTERM)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)


def _group_done(tasks: list[Task], group_id: str, future: Any, done: Done) -> None:
    """Hand each member's result on; a worker that died or failed outside the group's own
    handling fails every member (the lake's word on what committed is the coordinator's)."""
    try:
        results = future.result()
        assert isinstance(results, list) and len(results) == len(tasks)
    except BaseException as exc:
        results = all_failed(tasks, group_id, exc, "the worker failed: ")
    for task, result in zip(tasks, results, strict=True):
        done(task, result)


def _outcome(task: Task, future: Any) -> Result:
    try:
        result = future.result()
        assert isinstance(result, Result)
        return result
    except BaseException as exc:  # the worker died or the task could not run
        result = task.skipped("failed", f"{task.model}: the worker failed: {type(exc).__name__}: {exc}")
        result.error_class = type(exc).__name__
        return result


class DaskRunner(StepRunner):
    """One Dask task per step on a ``distributed`` scheduler (``address``) or a LocalCluster."""

    kind = "dask"

    def __init__(self, workers: int, address: str | None = None) -> None:
        self.workers = max(1, workers)
        self.address = address
        self.client: Any = None
        self.cluster: Any = None
        self.futures: dict[str, Any] = {}
        self.lock = threading.Lock()

    def start(self, lake: Any, project: Any, con: Any) -> None:
        if not lake.many_processes:
            raise ConfigError(
                "the dask executor needs a catalog every worker can open; this lake's is a DuckDB file",
                location=Location("lakewrap.toml"), hint="use catalog = \"postgres\" (data on S3 for several machines)")
        try:
            from distributed import Client, LocalCluster
        except ImportError:
            raise ConfigError("the dask executor needs the `distributed` package",
                              hint="pip install 'lakewrap[dask]'") from None
        if self.address:
            self.client = Client(self.address)  # type: ignore[no-untyped-call]
        else:
            self.cluster = LocalCluster(n_workers=self.workers, threads_per_worker=1,  # type: ignore[no-untyped-call]
                                        processes=True, dashboard_address=None)
            self.client = Client(self.cluster)  # type: ignore[no-untyped-call]

    def submit(self, task: Task, done: Done) -> None:
        key = f"lakewrap-{task.run_id}-{task.target}-{task.partition}"
        future = self.client.submit(worker_task, task, key=key, pure=False, retries=0)
        with self.lock:
            self.futures[key] = future

        def finished(f: Any) -> None:
            with self.lock:
                self.futures.pop(key, None)
            done(task, _outcome(task, f))

        future.add_done_callback(finished)

    groups = True  # a group is one Dask task: one worker, one connection

    def submit_group(self, tasks: list[Task], group_id: str, done: Done, *, atomic: bool = False,
                     seconds: float = 30.0) -> None:
        key = f"lakewrap-{tasks[0].run_id}-{group_id}"
        future = self.client.submit(worker_group, tasks, group_id, atomic, seconds, key=key, pure=False, retries=0)
        with self.lock:
            self.futures[key] = future

        def finished(f: Any) -> None:
            with self.lock:
                self.futures.pop(key, None)
            _group_done(tasks, group_id, f, done)

        future.add_done_callback(finished)

    def cancel(self) -> None:
        with self.lock:
            pending = [f for f in self.futures.values() if f.status == "pending"]
        if pending:
            self.client.cancel(pending)

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
        if self.cluster is not None:
            self.cluster.close()


def make_runner(kind: str | Callable[[Task], Result] | StepRunner, workers: int,
                scheduler: str | None = None) -> StepRunner:
    """The step runner for ``--executor`` (``auto`` is ``thread``).

    On a SQLite catalog ``auto`` stays one process (one step at a time): parallel writer processes
    work there, but SQLite serializes every commit and answers overlapping ones with "database is
    locked", so they mostly wait and retry (see docs/running.md).
    """
    if isinstance(kind, StepRunner):
        return kind
    if callable(kind):
        return CallableRunner(kind, workers)
    if kind == "auto":
        kind = "thread"
    match kind:
        case "thread":
            return ThreadRunner(workers)
        case "process":
            return ProcessRunner(workers)
        case "dask":
            return DaskRunner(workers, scheduler)
    raise ConfigError(f"unknown executor `{kind}`", hint="use auto, thread, process or dask")
