"""Where a run's (model, partition) steps execute: threads, processes, Dask, or a callable of yours.

Every step is a picklable :class:`Task`; :func:`run_task` turns it into a
:class:`~lakewrap.execute.executor.Result` (one transaction, retried per the model's policy).
A *step runner* submits tasks and reports each result through a callback; the scheduler
(:mod:`lakewrap.scheduler`) decides what is ready. Implementations:

* :class:`ThreadRunner` (``thread``): threads of this process sharing one DuckDB instance (one
  cursor each). The default. On a SQLite catalog it runs one step at a time (cursors of one
  instance wedge a SQLite catalog on DuckLake 1.5.5).
* ``ProcessRunner`` (``process``, :mod:`lakewrap.pools`): a pool of spawned worker processes,
  each with its own DuckDB instance (SQLite or PostgreSQL catalogs: a DuckDB-file catalog admits
  one process); a task runs there through :func:`worker_task`, a group commit through
  :func:`worker_group`.
* ``DaskRunner`` (``dask``, :mod:`lakewrap.pools`): one Dask task per step or group on a
  ``distributed`` cluster (an address, or a LocalCluster), for a catalog every worker can reach
  (PostgreSQL, data on S3).
* :class:`CallableRunner`: any ``fn(task) -> Result`` (your own fan-out), run on threads.

Cancelling interrupts in-flight statements (DuckDB ``interrupt()``): their transactions roll back
and their results are ``cancelled``; a statement not yet started is refused by :class:`Guarded`.
"""

from __future__ import annotations

import contextlib
import queue
import signal
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from lakewrap.errors import ExecutionError
from lakewrap.execute import statements as sql
from lakewrap.execute.binding import inline
from lakewrap.execute.executor import GroupStep, Result, RetryPolicy
from lakewrap.signals import settle
from lakewrap.substrates.registry import resolve


class RunCancelled(ExecutionError):
    """The run was cancelled (SIGINT/SIGTERM) before this statement started."""


@dataclass(frozen=True)
class Task:
    """One (model, partition) of a run; plain data, so it pickles to processes and Dask workers."""

    root: str
    target: str  # the model's target key, ``schema.name``
    model: str  # the model file, relative to the project
    strategy: str
    partition: str | None
    run_id: str
    now: str  # the run's logical time, ISO 8601
    attempts: int  # 1 + the model's retries
    drop_first: bool = False
    strict: bool = False
    # a batch of a range backfill (lakewrap.batches): every partition it writes, ``partition`` first
    batch: tuple[str, ...] = ()
    # in a group commit (lakewrap.grouping): the positions of the group's members this step reads
    after: tuple[int, ...] = ()

    def skipped(self, status: str, why: str) -> Result:
        return Result(model=self.model, target=self.target, partition=self.partition, strategy=self.strategy,
                      status=status, error=why)  # type: ignore[arg-type]


class Guarded:
    """A real DuckDB connection that refuses every statement but ROLLBACK once the run is cancelled.

    :meth:`interrupt` interrupts the statement running on the connection or on any cursor it
    handed out (an Iceberg materialization computes in a scratch session on a cursor). The cursors
    themselves do not refuse statements: a step looks its COMMIT's outcome up on one after the
    run was cancelled (:meth:`lakewrap.execute.executor.Executor.commit_outcome`).
    """

    def __init__(self, con: Any, cancelled: threading.Event, lock: Any = None) -> None:
        self._con = con
        self._cancelled = cancelled
        self._lock = lock if lock is not None else contextlib.nullcontext()
        self._cursors: list[Any] = []

    def execute(self, statement: str, *args: Any) -> Any:
        if self._cancelled.is_set() and statement != sql.ROLLBACK:
            raise RunCancelled("the run was cancelled", hint="resume it with `lakewrap resume RUN_ID`")
        if len(args) == 1 and isinstance(args[0], dict):  # no pandas import (lakewrap.execute.binding)
            statement, params = inline(statement, args[0])
            args = () if params is None else (params,)
        with self._lock:  # one statement at a time on a shared instance (see Lake.statement_lock)
            return self._con.execute(statement, *args)

    def cursor(self) -> Any:
        child = self._con.cursor()
        self._cursors.append(child)
        return child

    def interrupt(self) -> None:
        for c in list(self._cursors):
            with contextlib.suppress(Exception):  # closed in between
                c.interrupt()
        self._con.interrupt()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._con, name)


def run_task(task: Task, con: Any, lake: Any, project: Any, cancelled: threading.Event, cache: Any = None) -> Result:
    """Plan, compile and execute one step on ``con``; never raises for model or data errors.

    ``con`` is a :class:`Guarded` connection or a plain one (guarded here). ``cache`` is the
    coordinator's compile cache, for steps run in its process (threads): the statements come from
    it, and what they compile is saved with it.
    """
    from lakewrap.steps import materialize_spec

    spec = project.models[task.target]
    executor = resolve(lake.config).materializer(lake, task.run_id, Path(task.root) / "target" / "run" / task.run_id,
                                                 policy=RetryPolicy(attempts=task.attempts), strict=task.strict)
    if not isinstance(con, Guarded):
        con = Guarded(con, cancelled, lake.statement_lock if lake.is_shared else None)
    result = materialize_spec(lake, con, executor, spec, task.partition, datetime.fromisoformat(task.now), cache,
                              drop_first=task.drop_first, batch=task.batch)
    return settle(result, cancelled)


def run_group_task(tasks: list[Task], con: Any, lake: Any, project: Any, cancelled: threading.Event,
                   cache: Any = None, *, group_id: str, atomic: bool = False, seconds: float = 30.0) -> list[Result]:
    """Several steps in one lake transaction (the substrate's ``run_group``): a result per task, in
    order. Members planned before the transaction unless ``atomic`` (an upstream may exist only
    inside it); a member whose plan fails is reported as a step's would be."""
    from functools import partial

    from lakewrap.steps import compile_step

    first = tasks[0]
    substrate = resolve(lake.config)
    executor = substrate.materializer(lake, first.run_id, Path(first.root) / "target" / "run" / first.run_id,
                                      policy=RetryPolicy(attempts=first.attempts), strict=first.strict)
    if not isinstance(con, Guarded):
        con = Guarded(con, cancelled, lake.statement_lock if lake.is_shared else None)
    steps = []
    for task in tasks:
        spec = project.models[task.target]
        template = Result(model=spec.path, target=task.target, partition=task.partition, strategy=task.strategy,
                          status="failed", group=group_id)
        steps.append(GroupStep(template, spec, partial(compile_step, lake, con, spec, task.partition,
                                                       datetime.fromisoformat(task.now), cache),
                               task.drop_first, task.attempts, task.after))
    results = substrate.run_group(executor, con, steps, group_id=group_id, atomic=atomic, seconds=seconds,
                                  cancelled=cancelled)
    for result in results:
        result.group = group_id
        settle(result, cancelled)
    return results


Done = Callable[[Task, Result], None]


def all_failed(tasks: list[Task], group_id: str, exc: BaseException, why: str = "") -> list[Result]:
    """A result per member of a group that failed as a whole (``why``: what failed, before the error)."""
    results = []
    for task in tasks:
        r = task.skipped("failed", f"{task.model}: {why}{type(exc).__name__}: {exc}")
        r.error_class, r.group = type(exc).__name__, group_id
        results.append(r)
    return results
_T = TypeVar("_T")


class StepRunner:
    """Runs tasks somewhere and calls ``done(task, result)`` for each (from any thread)."""

    kind = "base"
    workers = 1
    cache: Any = None  # the compile cache, set by the scheduler for runners in its own process

    def start(self, lake: Any, project: Any, con: Any) -> None:
        """Called once before the first task, with the coordinator's lake, project and connection
        (None for runners in other processes on a SQLite catalog: an idle connection would block
        their commits)."""

    def submit(self, task: Task, done: Done) -> None:
        raise NotImplementedError

    groups = False  # whether submit_group commits its tasks in one transaction (the thread runner)

    def submit_group(self, tasks: list[Task], group_id: str, done: Done, *, atomic: bool = False,
                     seconds: float = 30.0) -> None:
        """Several tasks in one lake transaction (only when :attr:`groups`)."""
        raise NotImplementedError

    def cancel(self) -> None:
        """Interrupt in-flight tasks (their transactions roll back)."""

    def close(self) -> None:
        pass


class ThreadRunner(StepRunner):
    """Threads of this process; each step runs on its own cursor of the lake's shared DuckDB instance."""

    kind = "thread"

    def __init__(self, workers: int) -> None:
        self.workers = max(1, workers)
        self.cancelled = threading.Event()
        self.active: dict[int, Any] = {}
        self.lock = threading.Lock()
        self.pool: ThreadPoolExecutor | None = None
        self.single: Any = None

    def start(self, lake: Any, project: Any, con: Any) -> None:
        self.lake, self.project = lake, project
        if lake.one_connection:
            self.workers, self.single = 1, con  # one instance, one connection, one step at a time
        self.pool = ThreadPoolExecutor(self.workers, thread_name_prefix="lakewrap-step")

    def _con(self) -> Any:
        """The connection of one step: a new cursor (the coordinator's own connection on SQLite).

        A cursor per step, opened and closed in the step's thread: closing worker-thread cursors
        from the coordinator afterwards aborted the process once with DuckDB 1.5.5 (not reproduced).
        """
        if self.single is not None:
            return self.single
        with self.lake.statement_lock:
            return self.lake.connect()

    def _run(self, task: Task, done: Done) -> None:
        try:
            con = self._con()
            guarded = Guarded(con, self.cancelled, self.lake.statement_lock if self.lake.is_shared else None)
            with self.lock:
                self.active[threading.get_ident()] = guarded  # cancel() interrupts it and its cursors
            try:
                result = run_task(task, guarded, self.lake, self.project, self.cancelled, self.cache)
            finally:
                with self.lock:
                    self.active.pop(threading.get_ident(), None)
                if self.single is None:
                    with self.lake.statement_lock:
                        with contextlib.suppress(Exception):  # a failure may have left its transaction open
                            con.execute(sql.ROLLBACK)
                        with contextlib.suppress(Exception):
                            self.lake.close(con)
        except BaseException as exc:  # a bug or a lost connection: report it as the step's failure
            result = task.skipped("failed", f"{task.model}: {type(exc).__name__}: {exc}")
            result.error_class = type(exc).__name__
        done(task, result)

    def submit(self, task: Task, done: Done) -> None:
        assert self.pool is not None
        self.pool.submit(self._run, task, done)

    groups = True

    def submit_group(self, tasks: list[Task], group_id: str, done: Done, *, atomic: bool = False,
                     seconds: float = 30.0) -> None:
        assert self.pool is not None
        self.pool.submit(self._run_group, tasks, group_id, done, atomic, seconds)

    def _run_group(self, tasks: list[Task], group_id: str, done: Done, atomic: bool, seconds: float) -> None:
        try:
            con = self._con()
            guarded = Guarded(con, self.cancelled, self.lake.statement_lock if self.lake.is_shared else None)
            with self.lock:
                self.active[threading.get_ident()] = guarded
            try:
                results = run_group_task(tasks, guarded, self.lake, self.project, self.cancelled, self.cache,
                                         group_id=group_id, atomic=atomic, seconds=seconds)
            finally:
                with self.lock:
                    self.active.pop(threading.get_ident(), None)
                if self.single is None:
                    with self.lake.statement_lock:
                        with contextlib.suppress(Exception):
                            con.execute(sql.ROLLBACK)
                        with contextlib.suppress(Exception):
                            self.lake.close(con)
        except BaseException as exc:  # a bug or a lost connection: every member failed, none committed
            results = all_failed(tasks, group_id, exc)
        for task, result in zip(tasks, results, strict=True):
            done(task, result)

    def cancel(self) -> None:
        self.cancelled.set()
        with self.lock:
            for con in self.active.values():
                with contextlib.suppress(Exception):  # finished in between
                    con.interrupt()

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True)


class CallableRunner(ThreadRunner):
    """``fn(task) -> Result`` on threads: the pluggable executor of the Python API."""

    kind = "callable"
    groups = False  # the callable runs one task: each is its own commit

    def __init__(self, fn: Callable[[Task], Result], workers: int) -> None:
        super().__init__(workers)
        self.fn = fn

    def start(self, lake: Any, project: Any, con: Any) -> None:
        self.lake, self.project = lake, project
        self.pool = ThreadPoolExecutor(self.workers, thread_name_prefix="lakewrap-step")

    def _run(self, task: Task, done: Done) -> None:
        try:
            result = self.fn(task)
        except BaseException as exc:
            result = task.skipped("failed", f"{task.model}: {type(exc).__name__}: {exc}")
            result.error_class = type(exc).__name__
        done(task, result)


# --- worker processes (process pool and Dask) ------------------------------------------------------

_WORKER: dict[str, Any] = {}  # per process: root -> (lake, project); the cancel event; the active con
_WORKER_LOCK = threading.Lock()
_CANCEL = threading.Event()


def _worker_state(root: str) -> tuple[Any, Any]:
    with _WORKER_LOCK:
        state = _WORKER.get(root)
        if state is None:
            from lakewrap.compile import load_project
            from lakewrap.config import load_config

            config = load_config(Path(root))
            lake = resolve(config.lake).open(Path(root), config=config)
            state = _WORKER[root] = (lake, load_project(Path(root), None))
        return state  # type: ignore[no-any-return]


def worker_task(task: Task) -> Result:
    """Run one task in a worker process (process pool or Dask): one connection per worker thread."""
    return _in_worker(task.root, lambda con, lake, project: run_task(task, con, lake, project, _CANCEL))


def worker_group(tasks: list[Task], group_id: str, atomic: bool, seconds: float) -> list[Result]:
    """Run a group commit in a worker process (process pool or Dask): a result per task, in order."""
    return _in_worker(tasks[0].root, lambda con, lake, project: run_group_task(
        tasks, con, lake, project, _CANCEL, group_id=group_id, atomic=atomic, seconds=seconds))


def _in_worker(root: str, work: Callable[[Guarded, Any, Any], _T]) -> _T:
    lake, project = _worker_state(root)
    # An idle DuckLake connection keeps a SQLite catalog share-locked, which blocks every other
    # process's commit: on SQLite each task connects and closes again.
    fresh = lake.one_connection
    local = _WORKER.setdefault(f"local:{root}", threading.local())
    con = None if fresh else getattr(local, "con", None)
    if con is None:
        con = lake.connect()
        if not fresh:
            local.con = con
    guarded = Guarded(con, _CANCEL)
    _WORKER["active"] = guarded
    try:
        return work(guarded, lake, project)
    finally:
        _WORKER.pop("active", None)
        if fresh:
            lake.close(con)
        else:  # a group that failed half-way leaves no transaction open on the kept connection
            with contextlib.suppress(Exception):
                con.execute(sql.ROLLBACK)


def _interrupt_on_signal() -> None:
    """In a pool process: SIGINT/SIGTERM cancel the in-flight task (a thread waits for them, since a
    Python signal handler cannot run while the main thread is inside DuckDB)."""
    signals = {signal.SIGINT, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, signals)

    def wait() -> None:
        while True:
            signal.sigwait(signals)
            _CANCEL.set()
            con = _WORKER.get("active")
            if con is not None:
                with contextlib.suppress(Exception):
                    con.interrupt()

    threading.Thread(target=wait, daemon=True, name="lakewrap-signals").start()


def completions() -> queue.Queue[tuple[Task, Result]]:
    return queue.Queue()
