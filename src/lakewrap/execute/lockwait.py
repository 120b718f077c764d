"""``--wait SECONDS``: wait for a DuckDB-file catalog another process holds, instead of failing at once.

A DuckDB file admits one process at a time; a second process's ATTACH fails with "Conflicting lock
is held in ... (PID n)". The ``--wait`` option of the ``lakewrap`` command puts its value into the
environment variable ``LAKEWRAP_WAIT`` (so worker processes inherit it); :func:`waiting_for_lock`
re-tries the ATTACH every 0.1 s until the lock is free or that many seconds have passed.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from typing import TypeVar

from lakewrap.errors import ConfigError

T = TypeVar("T")

WAIT_ENV = "LAKEWRAP_WAIT"
HELD = re.compile(r"Conflicting lock is held in .*?\(PID (\d+)\)")
POLL = 0.1


def wait_seconds() -> float:
    """The seconds to wait for a held catalog: ``LAKEWRAP_WAIT``, 0 when unset."""
    text = os.environ.get(WAIT_ENV, "").strip()
    if not text:
        return 0.0
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0 or seconds == float("inf"):
        raise ConfigError(f"{WAIT_ENV}={text!r} is not a number of seconds",
                          hint="pass --wait SECONDS with a number >= 0, e.g. --wait 30")
    return seconds


def waiting_for_lock(fn: Callable[[], T], *, seconds: float | None = None,
                     sleep: Callable[[float], None] = time.sleep) -> T:
    """``fn()``; while it fails because another process holds the catalog file, again, up to ``seconds``."""
    limit = wait_seconds() if seconds is None else seconds
    deadline = time.monotonic() + limit
    while True:
        try:
            return fn()
        except Exception as exc:
            left = deadline - time.monotonic()
            if left <= 0 or not HELD.search(str(exc)):
                raise
            sleep(min(POLL, left))
