"""A step's outcome as the lake records it, asked before the step goes into the run log.

A worker reports what it saw: a COMMIT interrupted by Ctrl-C, a worker process that died, an
answer that never came. None of these says whether the commit landed. The lake does: every
materialization writes its ``lakewrap.materializations`` row (run id, target, partition) and its
commit message in the same transaction as its data, so the row exists exactly when the data does.
The executor already asks by the attempt's commit id right after a failed COMMIT
(:meth:`~lakewrap.execute.executor.Executor.commit_outcome`); this is the coordinator's second look,
on its own connection, for every step that ran and did not report success.
"""

from __future__ import annotations

from typing import Any

from lakewrap.execute import statements as stmts
from lakewrap.execute.executor import Result
from lakewrap.execute.lake import Lake


def resolve(lake: Lake, con: Any, run_id: str, result: Result) -> Result:
    """``result`` as the lake has it: a failed or cancelled step whose commit landed is a ``success``
    (with its snapshot and row counts); anything else is returned unchanged.

    ``con`` is the coordinator's connection (None: one is opened for the look-up and closed again,
    as a SQLite catalog needs). A step that never started a transaction (``attempts == 0``) is not
    looked up. A look-up that fails leaves the result as reported, with a warning saying so.
    """
    if result.status not in ("failed", "cancelled") or not result.attempts:
        return result
    params = {"run_id": run_id, "target": result.target, "partition": result.partition}
    own = con is None
    try:
        cursor = lake.connect() if own else con
        try:
            with lake.statement_lock:  # the coordinator's connection is shared with the run log
                row = cursor.execute(stmts.step_materialization(), params).fetchone()
                snapshot = (cursor.execute(stmts.step_snapshot(lake.alias), params).fetchone()
                            if row is not None else None)
        finally:
            if own:
                lake.close(cursor)
    except Exception as exc:
        result.warnings.append(lake.redact(f"the lake could not be asked whether this step's commit landed: "
                                           f"{str(exc).strip().splitlines()[0] if str(exc).strip() else exc}"))
        return result
    if row is None:
        return result
    return _landed(result, row[:3], snapshot[0] if snapshot is not None else None, row[3])


def resolve_iceberg(lake: Any, run_id: str, result: Result) -> Result:
    """:func:`resolve` on an Iceberg lake (``IcebergLake``): the target's commits carrying run
    ``run_id`` and the step's partition (snapshot summaries, or the state table of write path ``sql``)."""
    if result.status not in ("failed", "cancelled") or not result.attempts:
        return result
    from lakewrap.substrates.iceberg.state import materializations_of

    try:
        found = [m for m in materializations_of(lake, result.target)
                 if m["run_id"] == run_id and (m["partition"] or None) == result.partition]
    except Exception as exc:
        result.warnings.append(lake.redact(f"the lake could not be asked whether this step's commit landed: "
                                           f"{str(exc).strip().splitlines()[0] if str(exc).strip() else exc}"))
        return result
    if not found:
        return result
    m = found[-1]
    return _landed(result, (m["rows_inserted"], m["rows_updated"], m["rows_deleted"]), m["snapshot_id"])


def _landed(result: Result, counts: Any, snapshot: Any, attempt: Any = None) -> Result:
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
