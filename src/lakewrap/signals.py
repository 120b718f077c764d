"""SIGINT/SIGTERM during a run: cancel it instead of killing the process mid-way.

A handler that raises (Python's default ``KeyboardInterrupt``) can fire between any two bytecodes:
between a COMMIT and the line that records it, inside pyiceberg's commit, inside the write of
``run_results.json``. lakewrap's handlers only set a flag and interrupt the DuckDB statement in
flight (DuckDB's Python client runs the handler while a statement runs in the main thread); the
run then stops at a step boundary, records what the lake holds, and writes its final status.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any, TypeVar

R = TypeVar("R")

SIGNALS = (signal.SIGINT, signal.SIGTERM)
# what an interrupted or refused statement raises (DuckDB's interrupt, the run's own guard, pyiceberg's
# wait loop): a step that failed with one of these after the run was cancelled is ``cancelled``
CANCELLED_CLASSES = ("RunCancelled", "InterruptException", "CancelledError")


def on_signals(handler: Callable[[], None]) -> Callable[[], None]:
    """SIGINT/SIGTERM call ``handler`` while the run lasts (main thread only); returns the undo."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = {sig: signal.getsignal(sig) for sig in SIGNALS}
    for sig in previous:
        signal.signal(sig, lambda signum, frame: handler())

    def restore() -> None:
        for sig, old in previous.items():
            signal.signal(sig, old)

    return restore


@contextmanager
def cancellable(con: Any = None) -> Iterator[threading.Event]:
    """For a serial run (``seed``, an Iceberg run): a signal sets the yielded event and interrupts
    the statement running on ``con`` (a DuckDB connection, or None)."""
    cancelled = threading.Event()

    def cancel() -> None:
        cancelled.set()
        if con is not None:
            with suppress(Exception):  # closed in between
                con.interrupt()

    restore = on_signals(cancel)
    try:
        yield cancelled
    finally:
        restore()


def settle(result: R, cancelled: threading.Event) -> R:
    """A step (a ``Result``) that failed because the run was cancelled is ``cancelled``."""
    r: Any = result
    if cancelled.is_set() and r.status == "failed" and r.error_class in CANCELLED_CLASSES:
        r.status = "cancelled"
    return result
