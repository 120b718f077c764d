"""Group commit on Iceberg's write path ``sql``: several materializations in one DuckDB transaction,
which DuckDB 1.5.5 sends to the REST catalog as one atomic ``POST /v1/transactions/commit``
carrying every table it wrote (each member's target and its state table).

Which members share a transaction, and what a member's failure does, is the shared loop's
(:mod:`lakewrap.execute.group`); this module is the one transaction. Each member is written as
:meth:`~lakewrap.substrates.iceberg.sql_write.IcebergSqlExecutor.attempt` writes a materialization
alone: before ``BEGIN`` its setup statements and, on a first run, its empty table (each committed
on its own, as DuckDB requires); inside, its statements, tests and state row, which carries the
group's commit id (and the group in its provenance). A failed ``COMMIT`` is looked up in every
member's state table before anything is retried (:meth:`IcebergSqlExecutor.publish`).

A member never reads another member's writes here: the runner groups only independent steps on
this substrate (``Substrate.group_chains``), since a state row records its upstreams' snapshots,
which a commit still open has not got. ``--atomic`` is therefore refused on it.
"""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING, Any

from lakewrap.compilers.artifacts import CompiledStatement
from lakewrap.execute import statements as sql
from lakewrap.execute.executor import Job
from lakewrap.execute.group import Failed, GroupOutcome, Member, Quiet, Unsettled, first_line, rolled_back
from lakewrap.execute.log import StatementLog

if TYPE_CHECKING:
    from lakewrap.substrates.iceberg.sql_write import IcebergSqlExecutor


def transaction(executor: IcebergSqlExecutor, con: Any, members: list[Member], jobs: dict[int, Job],
                idxs: list[int], out: GroupOutcome, group_id: str, atomic: bool, seconds: float) -> list[int]:
    """One transaction over ``idxs`` (until the time bound); the members left for the next."""
    from lakewrap.substrates.iceberg.sql_write import Unknown

    lake = executor.lake
    logs: dict[int, StatementLog] = {}
    statements: dict[int, list[CompiledStatement]] = {}
    pins: dict[int, dict[str, int | None]] = {}
    for pos, i in enumerate(idxs):  # before BEGIN: setup statements and first runs' tables commit alone
        try:
            job = jobs.setdefault(i, members[i].plan())
            executor.check(job.compiled)
            logs[i] = StatementLog(executor.log_dir, job.compiled, lake.redact)
            statements[i] = executor.before_begin(con, job, logs[i])
            pins[i] = executor.pins(job)
        except Exception as exc:  # a first run's CREATE (its own transaction) may have failed inside it
            executor.rollback(con, logs[i] if i in logs else Quiet())  # type: ignore[arg-type]
            _close(logs, f"rolled back with group {group_id}: {first_line(exc)}")
            raise Failed(pos, exc) from exc
    head = logs[idxs[0]]
    for i in idxs[1:]:
        logs[i].note(f"in group {group_id}: BEGIN and COMMIT are in the statement log {head.path.name}")
    commit_id = uuid.uuid4().hex
    committed = False
    error = ""
    written: list[int] = []
    try:
        head.run(con, sql.BEGIN)
        started = time.perf_counter()
        for pos, i in enumerate(idxs):
            if written and time.perf_counter() - started > seconds:
                break  # the time bound: commit what is written, the rest in the next transaction
            result, began = out.results[i], time.perf_counter()
            result.attempts = 1
            result.sql_sha256 = jobs[i].compiled.sql_sha256
            try:
                wrote = executor.write(con, jobs[i], statements[i], result, logs[i], 1, commit_id, pins[i],
                                       group=group_id)
            except Exception as exc:
                raise Failed(pos, exc) from exc
            if not wrote:  # a snapshot model with no version to change: it runs alone
                raise Failed(pos, RuntimeError("nothing to write"), nothing=True)
            written.append(i)
            result.seconds = time.perf_counter() - began
        targets = [members[i].target for i in written]
        try:
            executor.publish(con, targets, commit_id, head, f"group {group_id}")
        except Unknown as exc:
            raise Unsettled(exc) from exc
        committed = True
        snapshots = {t: executor._snapshot(t) for t in dict.fromkeys(targets)}
        for i in written:
            r = out.results[i]
            r.status, r.snapshot_id = "success", snapshots[members[i].target]
        return [i for i in idxs if i not in written]
    except BaseException as exc:
        if not committed:
            executor.rollback(con, head)
            error = rolled_back(out, idxs, exc)
        raise
    finally:
        if committed:
            for i, log in logs.items():
                r = out.results[i]
                log.close(r.status if i in written else "not written: in the next transaction",
                          r.error if i in written else None)
        else:
            _close(logs, f"rolled back with group {group_id}: {error}")


def _close(logs: dict[int, StatementLog], note: str) -> None:
    for log in logs.values():
        log.close("rolled back", note)
    logs.clear()
