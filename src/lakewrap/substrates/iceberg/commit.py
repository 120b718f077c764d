"""Iceberg's materializer on the pyiceberg write path: DuckDB computes, one pyiceberg
``table.transaction()`` commits; the attempts, retries and the result are the shared loop's
(:class:`lakewrap.execute.executor.Materializer`).

The protocol (docs/design.md, "Transaction protocol"; docs/iceberg.md):

* the target and every upstream are read at one pinned snapshot each; the transaction starts from
  the target's pinned metadata, so pyiceberg's ``serializable`` validation rejects any concurrent
  commit that added rows matching the delete filter since then (an overwrite of a new partition
  included);
* lakewrap's state -- run id, model, partition, strategy, ``sql_sha256``, upstream pins, a commit id
  unique to the attempt -- is in the snapshot summary of the very commit that writes the data
  (:mod:`lakewrap.substrates.iceberg.summary`);
* a commit that certainly did not land (``CommitFailedException`` after pyiceberg's own retries,
  ``ValidationException``, a table created concurrently) is retried as a whole: re-read, recompute,
  re-commit, with capped, jittered backoff;
* a commit whose outcome is unknown (``CommitStateUnknownException``, a lost connection) is never
  retried blindly: the table's history is searched for the attempt's commit id first.
"""

from __future__ import annotations

import json
import uuid
import warnings
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from lakewrap import __version__
from lakewrap.compilers import iceberg as ice
from lakewrap.compilers import schema as schema_sql
from lakewrap.compilers.artifacts import CommitOp, CompiledPlan, SchemaCheck
from lakewrap.compilers.schema import Changes
from lakewrap.errors import ExecutionError, TransientExecutionError
from lakewrap.execute import checks, sandbox
from lakewrap.execute.executor import Job, Materializer, Result, StrictRefusal
from lakewrap.execute.iceberg import SERIALIZABLE, IcebergLake, Pinned
from lakewrap.execute.log import StatementLog
from lakewrap.provenance_record import record
from lakewrap.substrates.iceberg.filters import count_matching, to_filter
from lakewrap.substrates.iceberg.summary import PREFIX, committed_snapshots, row_counts, total_records
from lakewrap.substrates.iceberg.tables import (
    REPLACING,
    apply_changes,
    conform,
    evolve,
    iceberg_schema,
    partition_spec,
    same_columns,
)


class CommitUnknown(ExecutionError):
    """The commit's outcome is unknown and its commit id is not in the table's history (yet)."""


@dataclass
class IcebergExecutor(Materializer):
    """Runs compiled Iceberg plans for one run id (``before_commit`` gets the open transaction)."""

    lake: IcebergLake

    # --- the loop's hooks -----------------------------------------------------------------------

    def check(self, compiled: CompiledPlan) -> None:
        sandbox.check_plan(compiled, files=self.lake.sandbox() is not None)  # docs/security.md

    def prepare(self, con: Any, job: Job, log: StatementLog) -> None:
        # the inputs are registered on each attempt's scratch session
        if job.drop_first:
            log.note("--full-refresh: computed as a first run; the commit replaces every row (and the "
                     "columns) in the same transaction")

    def release(self, con: Any, job: Job) -> None:
        pass  # the scratch session is closed at the end of each attempt

    def retryable(self, exc: BaseException) -> bool:
        return retryable(exc)

    def retry_reason(self, exc: BaseException) -> str:
        if isinstance(exc, CommitUnknown):
            return "had an unknown commit outcome and did not land"
        return super().retry_reason(exc)

    # --- one attempt ----------------------------------------------------------------------------

    def attempt(self, con: Any, job: Job, result: Result, log: StatementLog, attempt: int) -> None:
        compiled, refresh = job.compiled, job.drop_first
        (op,) = compiled.commits
        result.tests.clear()
        started_at = datetime.now(timezone.utc)
        hidden = (compiled.target,) if refresh else ()
        deferrable = [r for r in job.reads if r.lower() != compiled.target.lower()]  # defer: never the target
        with self.lake.scratch(con, (*job.reads, compiled.target), hidden=hidden,
                               deferrable=deferrable) as (cursor, pinned):
            for name, data in job.inputs.items():
                cursor.register(name, data)
            target = pinned[compiled.target]
            if target.table is not None:
                refuse_snapshot_isolation(target.table, compiled.target)
            stage_rows: int | None = None
            outcomes: list[checks.TestOutcome] = []
            check = compiled.schema_check if target.table is not None and not refresh else None
            changes = Changes()
            for st in compiled.statements:
                if check is not None and st.role == "bootstrap":  # the first statement that reads the target
                    changes = self._schema(cursor, check, compiled, target, log)
                    result.schema_changes = changes.describe()
                    check = None
                if st.role == "test":  # write-audit-publish: the table as the commit will leave it
                    self.run_test(cursor, st, result, log, outcomes)
                    continue
                ran = self.execute(cursor, st, log)
                if st.effect == "stage":  # the stage of the SELECT's rows: its CREATE TABLE AS counts them
                    stage_rows = int(ran.fetchone()[0])
            if (failed := checks.failure(outcomes)) is not None:
                raise failed  # before the commit: nothing was written
            log.note(op.line())
            rows = cursor.execute(op.rows).to_arrow_table()
            delete = None
            # a whole rewrite's (updated, inserted, deleted): snapshot totals would count every row as replaced
            rewritten: tuple[int, int, int] | None = None
            if (op.operation == "overwrite" or refresh) and target.table is not None:
                where = "TRUE" if refresh else op.delete_where or "TRUE"
                if op.rewrite is not None and op.rewrite_keys is not None and not refresh:
                    matched = int(log.run(cursor, op.rewrite_keys).fetchone()[0])
                    if matched > (op.rewrite_above or 0):
                        log.note(f"{matched} keys match: the commit rewrites the table (no key filter)")
                        merged = rows.num_rows
                        rewritten = (0, merged, matched) if op.replaces_matched else (matched, merged - matched, 0)
                        where = "TRUE"
                        rows = cursor.execute(op.rewrite).to_arrow_table()
                params = {k: v.python() for k, v in op.params.items()}
                delete = to_filter(where, params, cursor, target.table.schema())
        if compiled.strategy == "snapshot" and rows.num_rows == 0:
            result.status = "unchanged"  # SCD2 without changes writes nothing
            log.note("no version changed: nothing to commit")
            return
        window = compiled.window
        pins = {name: p.snapshot_id for name, p in pinned.items() if name != compiled.target and not p.deferred}
        deferred = {name: p.snapshot_id for name, p in pinned.items() if p.deferred}
        commit_id = uuid.uuid4().hex
        props = {
            "run_id": self.run_id, "commit_id": commit_id, "model": compiled.path, "target": compiled.target,
            "partition": result.partition or "", "strategy": compiled.strategy, "sql_sha256": compiled.sql_sha256,
            "pins": json.dumps(pins, sort_keys=True), "base_snapshot": str(target.snapshot_id or ""),
            "window_start": window.start if window else "", "window_end": window.end if window else "",
            "watermark": window.end if window and window.kind == "dynamic" else "",
            "started_at": started_at.isoformat(), "attempt": str(attempt), "lakewrap_version": __version__,
            "full_refresh": "true" if refresh else "",
            # defer: the tables read from another environment's catalog, at its pins (not in `pins`)
            "deferred": json.dumps(self.lake.defer.record(deferred), sort_keys=True) if deferred else "",
            "matched": "replace" if op.replaces_matched else "",  # how substrates/iceberg/state.py counts them
            "counts": json.dumps(dict(zip(("updated", "inserted", "deleted"), rewritten, strict=True)))
            if rewritten else "",  # a whole rewrite's own counts (lakewrap.substrates.iceberg.state reads them)
            # on_schema_change's changes (the commit's update_schema): `reproduce` applies them again
            "schema_changes": json.dumps({"add": changes.add, "widen": changes.widen, "drop": changes.drop,
                                          "leave_out": changes.leave_out,
                                          "relation": compiled.schema_check.relation if compiled.schema_check
                                          else None}, sort_keys=True) if changes else "",
            "tests": json.dumps([{k: t[k] for k in ("name", "line", "severity", "status", "failures")}
                                 for t in result.tests]) if result.tests else "",
        }
        props.update(record(compiled, job.provenance))  # params, statements (lakewrap.substrates.iceberg.provenance)
        summary = {PREFIX + k: v for k, v in props.items()}
        self._commit(compiled, op, target, rows, delete, summary, commit_id, result, log, refresh, changes)
        if rewritten is not None:  # the read-back counted every row of the table as replaced
            result.rows_updated, result.rows_inserted, result.rows_deleted = rewritten
        if stage_rows == 0 and result.rows_deleted > 0:
            warning = f"the result is empty but the partition had {result.rows_deleted} rows; they were removed"
            result.warnings.append(warning)  # (--strict refuses before the commit, below)

    def _schema(self, cursor: Any, check: SchemaCheck, compiled: CompiledPlan, target: Pinned,
                log: StatementLog) -> Changes:
        """``on_schema_change`` against the pinned table: decided here, before anything reads the
        target; the scratch session's view of the target (and the stage) take the changes now, the
        Iceberg table in the commit's transaction."""
        changes, columns = checks.schema_changes(cursor, check, compiled, log, ice.widens, "Iceberg")
        if changes:
            for col in changes.leave_out:
                assert check.relation is not None
                log.run(cursor, schema_sql.drop_column(None, check.relation, col), role="schema")
            schema, _, name = compiled.target.partition(".")
            log.run(cursor, ice.evolved_view(schema, name, target.table.metadata_location, target.snapshot_id,
                                             columns, changes), role="schema")
            log.note("on_schema_change: " + "; ".join(changes.describe()) + " (in the commit's transaction)")
        return changes

    def _commit(self, compiled: CompiledPlan, op: CommitOp, target: Pinned, rows: Any, delete: Any,
                summary: dict[str, str], commit_id: str, result: Result, log: StatementLog,
                refresh: bool = False, changes: Changes | None = None) -> None:
        from pyiceberg.exceptions import CommitStateUnknownException

        table = target.table
        if table is not None:
            tx = table.transaction()
            if (refresh or compiled.strategy in REPLACING) and not same_columns(rows.schema, table.schema()):
                evolve(tx, rows.schema, compiled.target)
            elif changes:
                apply_changes(tx, changes, rows.schema, compiled)
            rows = conform(rows, tx.table_metadata.schema())
        else:
            schema, _, name = compiled.target.partition(".")
            self.lake.ensure_namespace(schema)
            ice_schema = iceberg_schema(rows.schema)
            tx = self.lake.catalog().create_table_transaction(
                (schema, name), schema=ice_schema, partition_spec=partition_spec(ice_schema, op.partition),
                properties=dict(SERIALIZABLE))
        if self.strict and delete is not None and rows.num_rows == 0:
            n = count_matching(table, delete)
            if n > 0:
                raise StrictRefusal(f"{compiled.path}: the result is empty but the partition had {n} rows",
                                    hint="check the model's source; run without --strict to accept")
        with warnings.catch_warnings():  # "Delete operation did not match any records": a new partition
            warnings.simplefilter("ignore", UserWarning)
            if (op.operation == "overwrite" or refresh) and table is not None:
                tx.overwrite(rows, overwrite_filter=delete, snapshot_properties=summary)
            else:
                tx.append(rows, snapshot_properties=summary)
        if self.before_commit is not None:
            self.before_commit(tx)
        log.note(f"commit {commit_id}: {rows.num_rows} rows")
        try:
            tx.commit_transaction()
        except Exception as exc:
            if definitely_not_committed(exc):
                raise
            # Unknown outcome: look for this attempt's commit id before anything is retried.
            log.note(f"commit outcome unknown ({type(exc).__name__}); looking up commit {commit_id}")
            if not self._landed(compiled.target, commit_id):
                if isinstance(exc, (CommitStateUnknownException, OSError)):
                    raise CommitUnknown(f"{compiled.path}: the commit's outcome was unknown and it is not in "
                                        f"the table's history: {str(exc).splitlines()[0]}") from exc
                raise
            log.note(f"commit {commit_id} found in the table's history: it landed")
        self._read_back(compiled, commit_id, rows.num_rows, result, refresh, op.replaces_matched)
        result.status = "success"

    def _landed(self, target: str, commit_id: str) -> bool:
        try:
            return bool(committed_snapshots(self.lake.load(target), commit_id))
        except Exception:
            return False

    def _read_back(self, compiled: CompiledPlan, commit_id: str, appended: int, result: Result,
                   refresh: bool, replaced: bool) -> None:
        """Row counts and the snapshot id from the committed snapshots' summaries (never fails the result)."""
        try:
            table = self.lake.load(compiled.target)
            snaps = committed_snapshots(table, commit_id)
            last, first = snaps[-1], snaps[0]
            parent = table.metadata.snapshot_by_id(first.parent_snapshot_id) if first.parent_snapshot_id else None
            before = total_records(parent)
            deleted = max(0, before + appended - total_records(last))
            result.snapshot_id = int(last.snapshot_id)
        except Exception as exc:
            result.warnings.append(f"committed, but its snapshot could not be read back: {str(exc).strip()}")
            return
        result.rows_inserted, result.rows_updated, result.rows_deleted = row_counts(
            compiled.strategy, appended, deleted, rebuilt=refresh, replaced=replaced)


def retryable(exc: BaseException) -> bool:
    """Whether re-reading and recomputing the whole materialization may succeed."""
    from pyiceberg.exceptions import CommitFailedException, TableAlreadyExistsError, ValidationException

    return isinstance(exc, (CommitFailedException, ValidationException, TableAlreadyExistsError,
                            TransientExecutionError, CommitUnknown))


def definitely_not_committed(exc: BaseException) -> bool:
    """Errors after which pyiceberg guarantees the commit did not land."""
    from pyiceberg.exceptions import CommitFailedException, TableAlreadyExistsError, ValidationException

    return isinstance(exc, (CommitFailedException, ValidationException, TableAlreadyExistsError, ValueError))


def refuse_snapshot_isolation(table: Any, name: str) -> None:
    """Overwrites need ``serializable`` isolation (``snapshot`` duplicates rows in a race)."""
    for key in SERIALIZABLE:
        level = table.properties.get(key, "serializable")
        if level != "serializable":
            raise ExecutionError(f"the Iceberg table {name} has {key} = {level}",
                                 hint="lakewrap's overwrites need serializable isolation: set it back "
                                      "(a race under snapshot isolation duplicates rows)")
