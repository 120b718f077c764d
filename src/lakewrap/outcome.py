"""A step's outcome as the lake records it, asked before the step goes into the run log.

A worker reports what it saw: a COMMIT interrupted by Ctrl-C, a worker process that died, an
answer that never came. None of these says whether the commit landed. The lake does: every
materialization writes its record (DuckLake: its ``lakewrap.materializations`` row and commit
message; Iceberg: its snapshot summary or state-table row) in the same commit as its data, so the
record exists exactly when the data does. The executor already asks by the attempt's commit id
right after a failed commit; this is the coordinator's second look, for every step that ran and did
not report success: each substrate's ``resolve_outcome`` finds the record, and the rules below turn
it into the step's result.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lakewrap.execute.executor import Result


def needs_lookup(result: Result) -> bool:
    """Whether the lake is asked: a failed or cancelled step that started a transaction
    (``attempts > 0``); any other result is recorded as reported."""
    return result.status in ("failed", "cancelled") and bool(result.attempts)


SNAPSHOT_UNREAD = "committed, but its snapshot id could not be read"


def snapshot_unread(result: Result) -> bool:
    """Whether a step committed and its snapshot id went unread (a signal interrupted the read
    right after the COMMIT): the coordinator reads it from the commit message instead."""
    return result.status in ("success", "unchanged") and result.snapshot_id is None and any(
        w.startswith(SNAPSHOT_UNREAD) for w in result.warnings)


def snapshot_read(result: Result, snapshot: Any) -> Result:
    """``result`` with the snapshot the coordinator found; the warning about it is dropped."""
    if snapshot is not None:
        result.snapshot_id = int(snapshot)
        result.warnings = [w for w in result.warnings if not w.startswith(SNAPSHOT_UNREAD)]
    return result


def unanswered(result: Result, exc: Exception, redact: Callable[[str], str]) -> Result:
    """A look-up that failed leaves the result as reported, with a warning saying so."""
    text = str(exc).strip()
    result.warnings.append(redact("the lake could not be asked whether this step's commit landed: "
                                  f"{text.splitlines()[0] if text else exc}"))
    return result


def landed(result: Result, counts: Any, snapshot: Any, attempt: Any = None) -> Result:
    """``result`` turned into the success the lake records (its error kept as a warning); the
    attempt that landed is ``committed`` in the run log, not also a failure."""
    first = (result.error or "").strip().splitlines()
    reported = (result.error_class or result.status) + (f" ({first[0]})" if first else "")
    result.warnings.append(f"the step reported {reported}, but the lake holds its commit: recorded as success")
    result.attempts = int(attempt) if attempt else result.attempts
    result.attempt_errors = [a for a in result.attempt_errors if a["attempt"] < result.attempts]
    result.status = "success"
    result.error = result.error_class = None
    result.rows_inserted, result.rows_updated, result.rows_deleted = (int(v or 0) for v in counts)
    if snapshot is not None:
        result.snapshot_id = int(snapshot)
    return result
