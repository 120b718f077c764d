"""DuckLake's materializer: one materialization = one transaction = one DuckLake snapshot, with its
state in the same commit; the attempts, retries and the result are the shared loop's
(:class:`lakewrap.execute.executor.Materializer`).

The protocol follows what was measured on DuckDB/DuckLake 1.5.5 (docs/design.md, "Transaction protocol"):

* ``BEGIN``, each statement, ``COMMIT`` are separate ``execute()`` calls (a multi-statement string
  is not atomic);
* on any exception: ``ROLLBACK``, never ``COMMIT`` (DuckDB commits the statements before a
  binder error if asked to);
* data, lakewrap's state rows, the per-model fence row and the commit message with ``extra_info``
  are written in the same transaction, so state can never disagree with data;
* conflicts are retried as a whole transaction with capped, jittered exponential backoff, and
  only errors classified retryable are retried.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from lakewrap import __version__
from lakewrap.errors import ExecutionError, LakewrapError
from lakewrap.execute import checks
from lakewrap.execute import statements as sql
from lakewrap.execute.executor import Job, Materializer, Result, Tally, emptied
from lakewrap.execute.lake import Lake
from lakewrap.execute.log import StatementLog
from lakewrap.execute.retry import is_retryable
from lakewrap.outcome import SNAPSHOT_UNREAD


@dataclass
class Written:
    """One materialization written in an open transaction, not committed yet: what its commit
    message records (``extra``, ``message``)."""

    target: str
    sql_sha256: str
    unchanged: bool
    extra: dict[str, Any]
    message: str

    def landed(self, executor: Executor, result: Result, snapshot: int | None, warning: str | None) -> None:
        """The transaction that holds it committed as ``snapshot``."""
        result.status = "unchanged" if self.unchanged else "success"
        executor.fences[self.target] = self.sql_sha256
        result.snapshot_id = snapshot
        if warning is not None:
            result.warnings.append(warning)


@dataclass
class Executor(Materializer):
    """Runs compiled plans on one DuckLake lake, for one run id."""

    lake: Lake
    # target -> the sql_sha256 its fence row holds, once read or written by this executor
    fences: dict[str, str] = field(default_factory=dict)

    # --- the loop's hooks -----------------------------------------------------------------------

    def rollback(self, con: Any, log: StatementLog) -> None:
        try:
            log.run(con, sql.ROLLBACK)
        except Exception as exc:  # no transaction open (it failed before BEGIN took): nothing to undo
            log.note(f"rollback: {exc}")

    def attempt_class(self, exc: BaseException, retryable: bool) -> str:
        return "RetryableError" if retryable else type(exc).__name__

    def error_class(self, exc: BaseException) -> str:
        if isinstance(exc, LakewrapError):
            return type(exc).__name__
        return "RetryableError" if is_retryable(exc) else type(exc).__name__

    # --- one attempt ----------------------------------------------------------------------------

    def attempt(self, con: Any, job: Job, result: Result, log: StatementLog, attempt: int) -> None:
        fenced_sha = self._fence(con, job.compiled.target, log)
        log.run(con, sql.BEGIN)
        pin = log.run(con, sql.current_snapshot(self.lake.alias)).fetchone()[0]
        written = self.write(con, job, result, log, attempt, pin, fenced_sha)
        if written is None:  # a first run with nothing to version writes nothing, no table either
            log.run(con, sql.ROLLBACK)
            result.status = "unchanged"
            return
        commit_id = uuid.uuid4().hex  # finds this commit's snapshot afterwards (committed_snapshot)
        written.extra["commit_id"] = commit_id
        log.run(con, sql.set_commit_message(self.lake.alias),
                {"author": "lakewrap", "message": written.message, "extra_info": json.dumps(written.extra)})
        snapshot, warning = self.commit(con, log, pin, commit_id)
        # Committed: nothing after this point may turn the result into a failure or a retry (a
        # retry would apply the write twice, e.g. an append).
        written.landed(self, result, snapshot, warning)

    def commit(self, con: Any, log: StatementLog, pin: int, commit_id: str) -> tuple[int | None, str | None]:
        """COMMIT the open transaction (raises when it did not land): its snapshot id, or None and
        a warning when the id could not be read."""
        if self.before_commit is not None:
            self.before_commit(con)
        try:
            log.run(con, sql.COMMIT)
        except Exception as exc:
            return self.commit_outcome(con, log, pin, commit_id, exc), None  # raises when it did not land
        try:
            return self.committed_snapshot(con, log, pin, commit_id), None
        except Exception as exc:
            return None, f"{SNAPSHOT_UNREAD}: {str(exc).strip()}"  # the coordinator reads it

    def write(self, con: Any, job: Job, result: Result, log: StatementLog, attempt: int, pin: int,
              fenced_sha: str | None, group_reads: tuple[str, ...] = (),
              bootstrapped: set[str] | None = None) -> Written | None:
        """One materialization's statements, tests and state rows inside the open transaction that
        read snapshot ``pin`` (its own, or a group's: :mod:`lakewrap.substrates.ducklake.group`);
        what its commit message records, or None when a first run has nothing to write (a
        snapshot model with nothing to version). ``group_reads``: upstream tables an earlier
        member of the same transaction wrote (``--atomic``), recorded with the pins;
        ``bootstrapped``: the bootstrap statements an earlier member of the same table ran in this
        transaction, not run again (DuckLake 1.5.5 refuses ``SET PARTITIONED BY`` on a table with
        transaction-local inlined rows; the layout is set already). Raises on failure."""
        compiled, drop_first = job.compiled, job.drop_first
        tally = Tally()
        result.tests.clear()
        result.schema_changes.clear()
        outcomes: list[checks.TestOutcome] = []
        schema_check = compiled.schema_check
        started_at = datetime.now(timezone.utc)
        create_fence = fenced_sha is None
        deferred = self.lake.defer
        views: tuple[list[str], list[str], list[str]] = ([], [], [])
        if deferred is not None and job.reads:  # reads the own lake lacks: from the other env's lake
            views = deferred.open_views(con, self.lake.alias, compiled.target, job.reads, log)
            if views[0] and compiled.strategy == "view":  # a lasting view would name a view dropped at COMMIT
                from lakewrap.errors import UnsupportedError

                raise UnsupportedError(f"{compiled.path}: a view model cannot read a deferred table "
                                       f"({', '.join(views[0])}): the view would outlive the read",
                                       hint="build the upstream in this environment, or make the model a table")
        if create_fence:  # a model's first run creates its fence in the same transaction as its data
            for stmt in sql.fence_ddl(compiled.target):
                log.run(con, stmt)
        if drop_first:
            schema, name = compiled.target.split(".", 1)
            log.run(con, sql.drop_table(schema, name))
        for st in compiled.statements:
            if schema_check is not None and st.role == "write":  # a plan without a bootstrap
                result.schema_changes = checks.check_schema(con, schema_check, compiled, log)
                schema_check = None
            if st.role == "test":  # write-audit-publish: the written rows, before COMMIT
                self.run_test(con, st, result, log, outcomes)
                continue
            if bootstrapped is not None and st.role == "bootstrap" and st.effect is None:
                if st.sql in bootstrapped:
                    log.note("bootstrap statement run by an earlier member of this transaction: not again")
                    continue
                bootstrapped.add(st.sql)
            self.counted(con, st, log, tally, lambda: self._count(con, compiled.target, log))
            if schema_check is not None and st.role == "bootstrap":
                # right after CREATE TABLE IF NOT EXISTS, before any other bootstrap (SET PARTITIONED
                # BY names the key) or write: the table exists, so DESCRIBE reads it cheaply
                result.schema_changes = checks.check_schema(con, schema_check, compiled, log, bootstrapped=True)
                schema_check = None
        tally.fill(result)
        inserted, updated, deleted = tally.inserted, tally.updated, tally.deleted
        if (failed := checks.failure(outcomes)) is not None:
            raise failed
        # A snapshot (SCD2) model with nothing to change writes no data but commits its record: it
        # read the upstreams at ``pin`` and found the history current, so ``--stale`` clears it.
        unchanged = compiled.strategy == "snapshot" and tally.unchanged
        if unchanged and create_fence:
            return None
        if warning := emptied(compiled.path, tally.stage_rows, inserted, deleted, self.strict):
            result.warnings.append(warning)
        watermark = None
        if (window := compiled.window) and window.kind == "dynamic":
            watermark = datetime.fromisoformat(window.end)
        pins: dict[str, Any] = {"snapshot": pin, **job.provenance}
        if group_reads:  # read as this transaction had written them: as of its own snapshot
            pins["group_reads"] = list(group_reads)
        if views[0]:
            deferred.close_views(con, compiled.target, views[1], views[2], log)
            pins["deferred"] = deferred.record(views[0])
        checks.record(con, log, self.run_id, compiled, result.partition, outcomes)
        log.run(con, sql.fence_update(compiled.target), {"run_id": self.run_id, "sql_sha256": compiled.sql_sha256})
        # one state row per partition; a batch of a range backfill (window.partitions) records each
        # of its partitions with its own window, the batch's row counts on its first (docs/strategies.md)
        parts = [(p.value, p.start, p.end) for p in window.partitions] if window and window.partitions else \
            [(result.partition, window.start if window else None, window.end if window else None)]
        for i, (value, start, end) in enumerate(parts):
            log.run(con, sql.insert_materialization(), {
                "run_id": self.run_id, "model": compiled.path, "target": compiled.target,
                "partition_value": value,
                "window_start": datetime.fromisoformat(start) if start else None,
                "window_end": datetime.fromisoformat(end) if end else None,
                "strategy": compiled.strategy, "rows_inserted": inserted if i == 0 else 0,
                "rows_updated": updated if i == 0 else 0, "rows_deleted": deleted if i == 0 else 0,
                "sql_sha256": compiled.sql_sha256, "pins": json.dumps(pins),
                "watermark": watermark, "started_at": started_at, "attempt": attempt,
                "lakewrap_version": __version__,
            })
        if fenced_sha != compiled.sql_sha256:  # else the fence's last commit stored these statements
            log.run(con, sql.insert_compiled_sql(), {
                "sql_sha256": compiled.sql_sha256,
                "statements": json.dumps([s.dump(exclude={"params"}) for s in compiled.statements]),
            })
        extra: dict[str, Any] = {
            "run_id": self.run_id, "model": compiled.path, "target": compiled.target, "partition": result.partition,
            "strategy": compiled.strategy, "sql_sha256": compiled.sql_sha256, "pins": pins,
            "lakewrap_version": __version__,
            # the values bound to the statements' parameters: `lakewrap reproduce` binds them again
            "params": {k: v.value for st in compiled.statements for k, v in st.params.items()}}
        # statements outside the plan that changed the table's DDL: `reproduce` replays them
        if drop_first:
            extra["full_refresh"] = True
        if window and window.partitions:  # every partition this commit wrote (the state rows' join)
            extra["batch"] = [p.value for p in window.partitions]
        if result.schema_changes:
            extra["schema_changes"] = result.schema_changes
        message = f"lakewrap {compiled.strategy} {compiled.target}" + (
            f" partitions {parts[0][0]}..{parts[-1][0]}" if len(parts) > 1 else
            f" partition {result.partition}" if result.partition else "")
        return Written(compiled.target, compiled.sql_sha256, unchanged, extra, message)

    def commit_outcome(self, con: Any, log: StatementLog, pin: int, commit_id: str, exc: Exception) -> int:
        """The snapshot of a COMMIT that raised ``exc`` but landed; re-raises ``exc`` when it did not.

        An interrupted COMMIT (Ctrl-C, SIGTERM) or a lost answer can land all the same: DuckLake has
        written the catalog when DuckDB notices the interrupt (measured: 12 of 12 interrupts 0-10 ms
        into a COMMIT raised ``Interrupted!`` after it landed). The lake decides, by this attempt's
        ``commit_id`` in the commit message, read on a fresh cursor (the step's own connection may be
        interrupted or refuse statements once the run is cancelled). When the lake cannot be asked,
        the outcome is unknown: an :class:`ExecutionError`, which the scheduler resolves with the
        coordinator's connection before the step is recorded (:mod:`lakewrap.outcome`).
        """
        log.note(f"COMMIT raised {type(exc).__name__}; looking up commit {commit_id} in the lake")
        try:
            cursor = con.cursor() if self.lake.config.catalog != "sqlite" else con
            try:
                with self.lake.statement_lock:
                    row = log.run(cursor, sql.last_committed_snapshot(self.lake.alias),
                                  {"commit_id": commit_id, "pin": pin}).fetchone()
            finally:
                if cursor is not con:
                    cursor.close()
        except Exception as lookup:
            raise ExecutionError(f"the COMMIT's outcome is unknown ({str(exc).strip().splitlines()[0]}) and the "
                                 f"lake could not be asked: {str(lookup).strip().splitlines()[0]}",
                                 hint="`lakewrap history` shows whether it landed") from exc
        if row is None or row[0] is None:
            log.note(f"commit {commit_id} is not in the lake: it did not land")
            raise exc
        log.note(f"commit {commit_id} is in the lake (snapshot {row[0]}): it landed")
        return int(row[0])

    def committed_snapshot(self, con: Any, log: StatementLog, pin: int, commit_id: str) -> int:
        """The snapshot the COMMIT of ``commit_id`` created, in a transaction that read snapshot ``pin``.

        When the lake's newest snapshot is ``pin + 1``, it is that commit's: the commit came after
        ``pin`` and snapshot ids count up by one, so no other commit fits in between (2 ms). Otherwise
        another writer committed in the meantime, and the commit is found by its ``commit_id`` among
        the snapshots after ``pin`` (``snapshots()`` lists the whole history: 6-30 ms, growing with it).
        """
        newest = self._newest_snapshot(con, log)
        if newest == pin + 1:
            return newest
        return int(log.run(con, sql.last_committed_snapshot(self.lake.alias),
                           {"commit_id": commit_id, "pin": pin}).fetchone()[0])

    def _newest_snapshot(self, con: Any, log: StatementLog) -> int:
        """The lake's newest snapshot id, right after this connection's COMMIT.

        When the commit changed a schema (``CREATE OR REPLACE``, a first run's bootstrap, an
        ``on_schema_change`` ALTER), the committing connection reloads the lake's catalog on its
        next query (14-20 ms); a fresh cursor reading the catalog database's ``ducklake_snapshot``
        does not (1 ms). SQLite catalogs are asked through ``current_snapshot()``: lakewrap does not
        read a SQLite catalog through DuckDB's attachment of it anywhere else.
        """
        if self.lake.config.catalog == "sqlite":
            return int(log.run(con, sql.current_snapshot(self.lake.alias)).fetchone()[0])
        cursor = con.cursor()
        try:
            with self.lake.statement_lock:  # one statement at a time on a shared instance
                row = log.run(cursor, sql.newest_snapshot(sql.metadata_catalog(self.lake.alias))).fetchone()
            return int(row[0])
        finally:
            cursor.close()

    def _count(self, con: Any, target: str, log: StatementLog) -> int:
        schema, name = target.split(".", 1)
        return int(log.run(con, sql.count_rows(schema, name)).fetchone()[0])

    def read_fences(self, con: Any, targets: list[str], log: StatementLog) -> None:
        """Read the fence rows of ``targets`` in one statement (a group's members), so that
        :meth:`_fence` finds them known; when one of them has no fence yet, each is probed alone."""
        unknown = sorted({t for t in targets if t not in self.fences})
        if len(unknown) < 2:
            return
        try:
            rows = log.run(con, sql.fence_probes(unknown)).fetchall()
        except Exception:  # a model's first run: its fence does not exist yet
            return
        for k, sha in rows:
            self.fences[unknown[k]] = sha or ""

    def _fence(self, con: Any, target: str, log: StatementLog) -> str | None:
        """The ``sql_sha256`` in the model's fence row, or None before the model's first commit.

        Reading the one-row fence is cheap (a few ms; see benchmarks/strategies.py). Before a model's
        first run the table does not exist: its first materialization creates it inside its own
        transaction, so a failed first run leaves nothing behind, and two concurrent first runs
        conflict on the fence table like any later pair. The hash read here was committed together
        with that plan's ``compiled_sql`` row, so a plan whose hash the fence holds is not stored again.
        """
        known = self.fences.get(target)
        if known is not None:
            return known
        try:
            row = log.run(con, sql.fence_probe(target)).fetchone()
        except Exception:  # the fence table does not exist yet
            return None
        if row is None:
            return None
        self.fences[target] = sha = row[0] or ""
        return sha
