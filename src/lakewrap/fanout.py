"""Work spread over the cores by forked children, for a cold compile (:mod:`lakewrap.compile`).

Forked, not spawned: a child inherits the parent's imports (sqlglot, duckdb, the compilers, loaded
once before the fork) and its data, and sends back only its results. Linux only; elsewhere, and in
a process that runs other threads, the work runs in this process.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

# Fan out only when each process gets at least this many models: below it, fork costs more than it saves.
MIN_PER_JOB = 24
# Models a worker parses before compiling them, whose SELECTs DuckDB checks in one batch (grammar.BATCH).
CHUNK = 100

T = TypeVar("T")
R = TypeVar("R")


def jobs(requested: int | None) -> int:
    """How many processes a fan-out may use: ``requested``, else ``LAKEWRAP_JOBS``, else the cores."""
    if requested is None:
        env = os.environ.get("LAKEWRAP_JOBS", "").strip()
        if env.isdigit() and int(env) > 0:
            requested = int(env)
    if not sys.platform.startswith("linux") or not hasattr(os, "fork"):
        return 1  # fork without exec is unsafe on macOS and missing on Windows
    threading = sys.modules.get("threading")
    if threading is not None and threading.active_count() > 1:
        return 1  # forking a process with other threads running can deadlock the child
    if requested is None:
        try:
            requested = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):  # pragma: no cover
            requested = os.cpu_count() or 1
    return max(1, requested)


def fan_out(items: Sequence[T], work: Callable[[Sequence[T]], list[R]], jobs: int,
             wire: Callable[[R], Any] = lambda r: r) -> list[R | Any | None]:
    """``work(items)``, spread over ``jobs`` forked children (``work`` maps a list to a list).

    Child ``k`` takes every ``jobs``-th item from the ``k``-th and sends back ``wire(result)``
    through a pipe; results come back in item order. Where a child fails, its items are ``None``
    for the caller to redo. ``work`` must not raise (return a failure marker instead).

    This process only waits: the ASTs a parse builds stay in the children, which end with
    ``os._exit``, so neither the collector of this process nor its exit (tearing down a 2000-model
    heap took ~0.5 s) ever walks them.
    """
    jobs = min(jobs, len(items) // MIN_PER_JOB)
    if jobs <= 1:
        return list(work(items))
    import pickle  # here, not at the top: a warm run never fans out

    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    children: list[tuple[int, int, int]] = []  # (share, pid, read end)
    try:
        for share in range(jobs):
            read, write = os.pipe()
            pid = os.fork()
            if pid == 0:  # pragma: no cover - runs in the child
                status = 1
                try:
                    for fd in (read, *(r for _, _, r in children)):
                        os.close(fd)
                    payload = pickle.dumps([wire(r) for r in work(items[share::jobs])], pickle.HIGHEST_PROTOCOL)
                    with os.fdopen(write, "wb") as out:
                        out.write(payload)
                    status = 0
                finally:
                    os._exit(status)
            os.close(write)
            children.append((share, pid, read))
        results: list[R | Any | None] = [None] * len(items)
        while children:
            share, pid, read = children.pop(0)
            with os.fdopen(read, "rb") as src:
                payload = src.read()
            _, status = os.waitpid(pid, 0)
            if status == 0:
                with contextlib.suppress(Exception):  # a truncated pipe: the caller redoes those items
                    results[share::jobs] = pickle.loads(payload)
        return results
    finally:
        for _, pid, read in children:  # only on an exception in this process
            try:
                os.close(read)
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except OSError:  # pragma: no cover
                pass


def chunks(items: Sequence[T]) -> Iterator[Sequence[T]]:
    """``items`` in runs of :data:`CHUNK` (a worker holds one run's parse trees at a time)."""
    for i in range(0, len(items), CHUNK):
        yield items[i:i + CHUNK]


@contextlib.contextmanager
def fewer_collections() -> Iterator[None]:
    """Run the cyclic garbage collector less often while compiling (restored afterwards).

    Parsing and building sqlglot ASTs allocates millions of small objects; with the default
    threshold (700) the collector took ~25% of a cold compile's CPU at 2000 models, with
    (10000, 20, 10) ~12%, at the same peak memory.
    """
    before = gc.get_threshold()
    gc.set_threshold(max(before[0], 10_000), max(before[1], 20), before[2])
    try:
        yield
    finally:
        gc.set_threshold(*before)
