"""Which errors a retry of the whole transaction may cure, and how long to wait between tries.

Shared by the executor (materializations) and the lake connection (attaching a catalog another
process is initializing, creating lakewrap's state tables concurrently).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from lakewrap.errors import TransientExecutionError

T = TypeVar("T")

# Error texts DuckLake 1.5.5 gives for a concurrent commit; retrying the whole transaction succeeds.
CONFLICTS = (
    "Transaction conflict",
    "Failed to commit DuckLake transaction",
    "Conflict_409",
    "CommitFailedException",
    "ducklake_snapshot_pkey",
    "could not serialize access",
)
# ... and for a catalog a concurrent commit holds locked (SQLite)
BUSY = (
    "database is locked",
    "Failed to query most recent snapshot",
)
RETRYABLE = CONFLICTS + BUSY


def is_retryable(exc: BaseException) -> bool:
    """Whether re-running the whole transaction may succeed (a conflict or a busy catalog)."""
    if isinstance(exc, TransientExecutionError):
        return True
    text = str(exc)
    return any(marker in text for marker in RETRYABLE)


def retry_reason(exc: BaseException) -> str:
    """What a retryable error says happened, for the note of the attempt it ends."""
    text = str(exc)
    return "found the catalog busy" if any(marker in text for marker in BUSY) else "conflicted"


@dataclass(frozen=True)
class RetryPolicy:
    """Capped, jittered exponential backoff for retryable errors."""

    attempts: int = 20
    base: float = 0.05
    cap: float = 3.0

    def delay(self, attempt: int, rng: random.Random) -> float:
        return float(rng.uniform(0, min(self.cap, self.base * 2 ** (attempt - 1))))


def retrying(fn: Callable[[], T], policy: RetryPolicy = RetryPolicy(), *, rng: random.Random | None = None,
             sleep: Callable[[float], None] = time.sleep) -> T:
    """``fn()``, re-run after a retryable error with the policy's backoff; other errors propagate."""
    rng = rng or random.Random()
    for attempt in range(1, policy.attempts):
        try:
            return fn()
        except Exception as exc:
            if not is_retryable(exc):
                raise
            sleep(policy.delay(attempt, rng))
    return fn()
