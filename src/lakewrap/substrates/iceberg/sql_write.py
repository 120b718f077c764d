"""Iceberg's materializer on the ``sql`` write path: DuckDB writes through the REST catalog; the
attempts, retries and the result are the shared loop's (:class:`lakewrap.execute.executor.Materializer`),
the connection is :func:`lakewrap.substrates.iceberg.sql_connect.connect`'s.

The protocol (docs/design.md, "Transaction protocol"; docs/iceberg.md):

* the plan's leading ``setup`` statements (the target's namespace, lakewrap's namespace, the
  target's state table) run first, each committed on its own: a table cannot be created in a
  namespace created in the same transaction;
* then ``BEGIN``, each statement as its own ``execute()`` call, and ``COMMIT``; on any exception
  ``ROLLBACK``, never ``COMMIT``. The last statement inserts lakewrap's state row (run id, commit
  id, model, partition, strategy, ``sql_sha256``, pins, row counts) into the target's Iceberg state
  table, so DuckDB's one ``POST /v1/transactions/commit`` carries data and state together;
* a ``COMMIT`` that fails is never retried blindly: the state table is searched for the attempt's
  commit id first. Found: it landed. Not found after a conflict (409 ``CommitFailedException``) or
  an unavailable catalog (5xx, unreachable): nothing landed, and the whole transaction is retried
  with capped, jittered backoff. Not found after any other error: a failure, not retried. The
  state table cannot be read: the outcome is unknown, reported, never retried.
* a model's first run creates its target, empty (with its partition spec), in a transaction of its
  own before the real one (see :meth:`IcebergSqlExecutor._create`);
* a full rebuild (``table``, ``--full-refresh``) first gives the table the result's columns with
  ``ALTER TABLE`` statements in its transaction (:meth:`IcebergSqlExecutor._replace`): DuckDB has
  no ``CREATE OR REPLACE`` for Iceberg and cannot drop and create a table in one transaction.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from lakewrap import __version__
from lakewrap.compilers import iceberg as ice
from lakewrap.compilers import iceberg_sql as isql
from lakewrap.compilers import lake as sql
from lakewrap.compilers import schema as schema_sql
from lakewrap.compilers.artifacts import STAGE, CompiledPlan, CompiledStatement, SchemaCheck
from lakewrap.errors import ExecutionError, TransientExecutionError
from lakewrap.execute import checks, sandbox
from lakewrap.execute.executor import Job, Materializer, Result, Tally, emptied
from lakewrap.execute.iceberg import IcebergLake
from lakewrap.execute.log import StatementLog
from lakewrap.provenance_record import params_of

# What DuckDB 1.5.5 reports when the REST catalog refused the transaction's requirements (a
# concurrent commit changed a table it writes): nothing of the transaction landed.
CONFLICT = ("Conflict_409", "CommitFailedException", "TableAlreadyExistsError", "already exists")
# ... or could not be reached / answered 5xx (DuckDB's HTTP client has retried already)
UNAVAILABLE = re.compile(r"_5\d\d\b|HTTP 5\d\d\b|Could not connect|Connection")
# Iceberg's row-level write modes by the effect of a statement; DuckDB 1.5.5 writes all of them
# merge-on-read (see refuse_copy_on_write)
WRITE_MODES = {"delete": "write.delete.mode", "update": "write.update.mode", "merge": "write.merge.mode"}
COPY_ON_WRITE = "copy-on-write"
# DuckDB 1.5.5's error when an ALTER numbers its new schema with an id the table has (see renewal)
SCHEMA_ID_TAKEN = "but this already exists in the table"


class Unknown(ExecutionError):
    """The commit failed and whether it landed cannot be told: reported, never retried."""


class Conflict(TransientExecutionError):
    """The commit failed (a 409 conflict, a 5xx or lost connection) and the attempt's commit id is not
    in the state table: it certainly did not land, so the whole transaction may be retried."""


def renewal(table: Any, dropped: list[str]) -> str | None:
    """A column to renew (see ``compilers.schema.replace_columns``) when dropping ``dropped`` in turn
    would bring ``table`` (pyiceberg) back to the columns of one of its earlier schemas; None when no
    step would, or when every kept column is a partition source (a source column cannot be dropped).

    Measured on DuckDB 1.5.5: such a drop makes the earlier schema current again (its id reused, as
    Iceberg's clients do), and DuckDB then numbers every new schema current + 1, an id that exists:
    each later ``ALTER`` on the table fails, in this transaction and in every later one.
    """
    if table is None:
        return None
    current = table.schema()
    earlier = {frozenset(f.field_id for f in s.fields) for i, s in table.schemas().items() if i != current.schema_id}
    ids = {f.name.lower(): f.field_id for f in current.fields}
    left = set(ids.values())
    for col in dropped:
        left.discard(ids.get(col.lower(), -1))
        if frozenset(left) in earlier:
            break
    else:
        return None
    sources = {f.source_id for spec in table.specs().values() for f in spec.fields}
    gone = {c.lower() for c in dropped}
    kept = [f.name for f in current.fields if f.name.lower() not in gone and f.field_id not in sources]
    return kept[0] if kept else None


def refuse_copy_on_write(table: Any, compiled: CompiledPlan, refresh: bool) -> None:
    """Refuse a plan that deletes, updates or merges rows of a table whose Iceberg write mode for
    that operation is ``copy-on-write``: DuckDB 1.5.5 writes every ``DELETE``, ``UPDATE`` and
    ``MERGE`` merge-on-read (positional delete files beside the untouched data files), which such a
    table's owner asked not to get. A table without the property is written as DuckDB writes."""
    effects = {st.effect for st in compiled.statements if st.effect in WRITE_MODES}
    if refresh:  # --full-refresh deletes every row first
        effects.add("delete")
    for effect in ("delete", "update", "merge"):
        key = WRITE_MODES[effect]
        if effect in effects and table.properties.get(key) == COPY_ON_WRITE:
            raise ExecutionError(
                f"{compiled.path}: the Iceberg table {compiled.target} has {key} = {COPY_ON_WRITE}, and "
                f"write_path = \"sql\" writes a {effect.upper()} merge-on-read (DuckDB adds delete files); "
                "nothing was written",
                hint=f"set the table's {key} to merge-on-read (pyiceberg: `with table.transaction() as tx: "
                     f"tx.set_properties({{'{key}': 'merge-on-read'}})`), or write it with "
                     "write_path = \"pyiceberg\", which rewrites the data files")


def conflicted(exc: BaseException) -> bool:
    """A refusal by the catalog (409), or a server or connection failure (5xx, unreachable): once the
    state table shows the attempt did not land, retrying the whole transaction is safe."""
    text = str(exc)
    return any(marker in text for marker in CONFLICT) or UNAVAILABLE.search(text) is not None


@dataclass
class IcebergSqlExecutor(Materializer):
    """Runs compiled ``iceberg-sql`` plans for one run id on a connection from
    :func:`~lakewrap.substrates.iceberg.sql_connect.connect`."""

    lake: IcebergLake

    # --- the loop's hooks -----------------------------------------------------------------------

    def check(self, compiled: CompiledPlan) -> None:
        # the user's SQL, on DuckDB's parse; no file reads: the REST catalog decides where files are
        sandbox.check_plan(compiled, files=False)

    def retryable(self, exc: BaseException) -> bool:
        return isinstance(exc, Conflict)

    # --- one attempt ----------------------------------------------------------------------------

    def attempt(self, con: Any, job: Job, result: Result, log: StatementLog, attempt: int) -> None:
        compiled = job.compiled
        statements = self.before_begin(con, job, log)
        commit_id = uuid.uuid4().hex
        pins = self.pins(job)
        log.run(con, sql.BEGIN)
        if not self.write(con, job, statements, result, log, attempt, commit_id, pins):
            log.run(con, sql.ROLLBACK)
            result.status = "unchanged"
            log.note("no version changed: nothing to commit")
            return
        self.publish(con, [compiled.target], commit_id, log, compiled.path)
        result.status = "success"
        result.snapshot_id = self._snapshot(compiled.target)

    def before_begin(self, con: Any, job: Job, log: StatementLog) -> list[CompiledStatement]:
        """What runs before ``BEGIN``: the copy-on-write refusal, the leading setup statements (each
        committed on its own) and a first run's empty table; the statements left for the
        transaction. A conflict with a concurrent writer of those raises :class:`Conflict`."""
        compiled = job.compiled
        statements = list(compiled.statements)
        table = self.lake.load(compiled.target)
        if table is not None:  # before anything runs: a refusal writes nothing
            refuse_copy_on_write(table, compiled, job.drop_first)
        try:
            while statements and statements[0].role == "setup":  # before BEGIN, each committed on its own
                self.execute(con, statements.pop(0), log)
            if table is None and self.lake.load(compiled.target) is None:
                self._create(con, statements, log)
        except Exception as exc:
            # Idempotent steps (IF NOT EXISTS) that a concurrent writer got to first: nothing of this
            # materialization was written, so trying again is safe.
            if conflicted(exc):
                raise Conflict(f"{compiled.path}: {str(exc).splitlines()[0]}") from exc
            raise
        return statements

    def pins(self, job: Job) -> dict[str, int | None]:
        """The snapshot of each table the plan reads (but its target), from the catalog."""
        return {name: self._snapshot(name) for name in job.reads if name != job.compiled.target}

    def write(self, con: Any, job: Job, statements: list[CompiledStatement], result: Result, log: StatementLog,
              attempt: int, commit_id: str, pins: dict[str, int | None], *, group: str | None = None) -> bool:
        """One materialization's statements, tests and state row inside the open transaction; False
        when a snapshot model has no version to change (nothing to commit). ``group``: the group
        commit it shares (recorded with its provenance). Raises on failure."""
        compiled, refresh = job.compiled, job.drop_first
        started_at = datetime.now(timezone.utc)
        tally = Tally()
        base = self._current(con, compiled.target, log, restart=group is None)
        if refresh:  # --full-refresh: computed as a first run, in the same transaction
            log.note("--full-refresh: every row is deleted first, in the same transaction")
            log.run(con, isql.delete_all(compiled.target))
        result.tests.clear()
        result.schema_changes.clear()
        outcomes: list[checks.TestOutcome] = []
        # A full rebuild takes the result's columns, as CREATE OR REPLACE would; other runs follow
        # the model's on_schema_change. Either way inside the transaction, before the first write.
        replacing = refresh or compiled.strategy == "table"
        check = compiled.schema_check
        compare = replacing or check is not None
        for st in statements:
            if compare and st.role in ("bootstrap", "write"):
                result.schema_changes = (self._replace(con, compiled, log) if replacing or check is None else
                                         self._schema(con, check, compiled, log))
                compare = False
            if st.role == "test":  # write-audit-publish: the written rows, before COMMIT
                self.run_test(con, st, result, log, outcomes)
                continue
            if st.note == isql.STATE_NOTE:
                if (failed := checks.failure(outcomes)) is not None:
                    raise failed
                if compiled.strategy == "snapshot" and tally.unchanged:
                    return False
                if warning := emptied(compiled.path, tally.stage_rows, tally.inserted, tally.deleted, self.strict):
                    result.warnings.append(warning)
                window = compiled.window
                provenance = {**job.provenance, "group": group} if group else job.provenance
                state = {
                    "run_id": self.run_id, "commit_id": commit_id, "model": compiled.path,
                    "target": compiled.target, "partition_value": result.partition,
                    "window_start": datetime.fromisoformat(window.start) if window else None,
                    "window_end": datetime.fromisoformat(window.end) if window else None,
                    "watermark": datetime.fromisoformat(window.end) if window and window.kind == "dynamic" else None,
                    "strategy": compiled.strategy, "sql_sha256": compiled.sql_sha256,
                    "pins": json.dumps(pins, sort_keys=True), "base_snapshot": base,
                    "rows_inserted": tally.inserted, "rows_updated": tally.updated, "rows_deleted": tally.deleted,
                    "full_refresh": refresh, "started_at": started_at, "attempt": attempt,
                    "lakewrap_version": __version__,
                    "tests": json.dumps([{k: t.to_dict()[k] for k in ("name", "severity", "line", "status", "failures")}
                                         for t in outcomes]),
                    # what `lakewrap reproduce` re-executes: lakewrap.substrates.iceberg.provenance_sql
                    "params": json.dumps(params_of(compiled), sort_keys=True),
                    "statements": json.dumps([s.dump(exclude={"params"})
                                              for s in compiled.statements]),
                    "schema_changes": json.dumps(result.schema_changes),
                    "provenance": json.dumps(provenance, sort_keys=True),
                }
                log.run(con, st.sql, {isql.STATE_PREFIX + k: v for k, v in state.items()}, role=st.role)
                continue
            # a rebuild counts what it wrote, not the rows its DELETE removed
            self.counted(con, st, log, tally, lambda: self._count(con, compiled.target, log),
                         count_deletes=compiled.strategy != "table")
        tally.fill(result)
        return True

    def publish(self, con: Any, targets: list[str], commit_id: str, log: StatementLog, what: str) -> None:
        """``COMMIT`` the open transaction, whose state rows (in each of ``targets``' state tables)
        carry ``commit_id``. A failed ``COMMIT`` is never retried blindly: each state table is
        searched for the commit id first. Found in all: it landed. Found in none after a conflict
        or an unavailable catalog: :class:`Conflict` (retry the whole transaction); after any other
        error, that error. Found in some, or a state table unreadable: ``Unknown``."""
        if self.before_commit is not None:
            self.before_commit(con)
        log.note(f"commit {commit_id}")
        try:
            log.run(con, sql.COMMIT)
        except Exception as exc:
            self.rollback(con, log)
            # Whatever the error, look for this attempt's state rows before anything is retried.
            found = [self._landed(con, t, commit_id, log) for t in dict.fromkeys(targets)]
            first = str(exc).splitlines()[0]
            if None in found:
                raise Unknown(f"{what}: the commit's outcome is unknown and the state table could not be read: "
                              f"{first}", hint="check `lakewrap history` before running the model again") from exc
            if any(found) and not all(found):  # one catalog transaction: all or none, so never expected
                raise Unknown(f"{what}: commit {commit_id} is in the state tables of only some of its tables "
                              f"({first})", hint="check `lakewrap history` of each table") from exc
            if not any(found):
                if conflicted(exc):
                    raise Conflict(f"{what}: {first}") from exc
                raise
            log.note(f"commit {commit_id} found in the state table: it landed")

    def _create(self, con: Any, statements: list[CompiledStatement], log: StatementLog) -> None:
        """First run: create the target, empty, in a transaction of its own before the real one.

        DuckDB 1.5.5 sends a transaction that creates a table as one commit per table (stage-create,
        then each table's own ``POST .../tables/<t>``), and only a transaction whose tables all
        exist as one atomic ``POST /v1/transactions/commit``. So the statements up to the first
        write (stage, guards, the ``CREATE TABLE IF NOT EXISTS ... LIMIT 0`` bootstrap) run and
        commit here: the table appears with no snapshot and no rows. The materialization then runs
        in full, its bootstrap a no-op, and commits data and state together.
        """
        log.note("first run: the target is created empty in a transaction of its own")
        log.run(con, sql.BEGIN)
        for st in statements:
            if st.role == "write":
                break
            self.execute(con, st, log)
        log.run(con, sql.COMMIT)

    def _schema(self, con: Any, check: SchemaCheck, compiled: CompiledPlan, log: StatementLog) -> list[str]:
        """``on_schema_change``: compare the staged result with the table, inside the transaction,
        and run the ``ALTER TABLE`` statements the mode calls for (Iceberg's type promotions only);
        they commit with the data. Raises ``SchemaChangeError`` when the mode refuses the change."""
        schema, name = compiled.target.split(".", 1)
        table, result = self._columns(con, check.relation, compiled, log)
        statements = schema_sql.resolve(check, compiled.path, (schema, name), result, table, ice.widens, "Iceberg",
                                        catalog=isql.CATALOG)
        self._alter(con, statements, compiled, log)
        return statements

    def _replace(self, con: Any, compiled: CompiledPlan, log: StatementLog) -> list[str]:
        """A full rebuild (``table``, ``--full-refresh``): the table takes the result's columns --
        lost ones dropped, new ones added, retyped ones replaced -- with ``ALTER TABLE`` statements
        in the rebuild's transaction (DuckDB-Iceberg has no ``CREATE OR REPLACE``; a ``DROP TABLE``
        and ``CREATE TABLE`` cannot share one transaction), so they commit with the new rows."""
        check = compiled.schema_check
        managed = check.managed if check else ()
        schema, name = compiled.target.split(".", 1)
        table, result = self._columns(con, check.relation if check else STAGE, compiled, log)
        d = schema_sql.drift(result, table, managed)
        renew = None
        if d.removed and not d.added and all(ice.widens(was, now) for _, was, now in d.changed):
            renew = renewal(self.lake.load(compiled.target), [col for col, _ in d.removed])
        statements = schema_sql.replace_columns((schema, name), result, table, managed, ice.widens, isql.CATALOG,
                                                renew)
        self._alter(con, statements, compiled, log)
        return statements

    def _alter(self, con: Any, statements: list[str], compiled: CompiledPlan, log: StatementLog) -> None:
        """Run ``ALTER TABLE`` statements in the open transaction; explain DuckDB 1.5.5's schema-id trap."""
        for stmt in statements:
            try:
                log.run(con, stmt, role="schema")
            except Exception as exc:
                if SCHEMA_ID_TAKEN not in str(exc):
                    raise
                raise ExecutionError(
                    f"{compiled.path}: DuckDB 1.5.5 cannot change the columns of {compiled.target}: the table's "
                    "current schema is an earlier one (a schema change that led back to it reused its id), and "
                    f"DuckDB numbers a new schema after the current one: {str(exc).splitlines()[0]} (nothing was "
                    "written)", hint="change the table's columns once with another Iceberg client (pyiceberg "
                    "`table.update_schema()`), or run the model with write_path = \"pyiceberg\"") from exc

    def _columns(self, con: Any, relation: str | None, compiled: CompiledPlan,
                 log: StatementLog) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        """The target's columns and the result's (staged in ``relation``), each (name, DuckDB type)."""
        table = [(str(r[0]), str(r[1])) for r in log.run(con, isql.describe(compiled.target), role="schema")
                 .fetchall()]
        staged = relation
        if relation is None:  # nothing staged: the result's columns from its `LIMIT 0` bootstrap query
            bootstrap = next(st for st in compiled.statements if st.role == "bootstrap")
            params = {k: v.python() for k, v in bootstrap.params.items()}
            log.run(con, schema_sql.stage_result(bootstrap.sql), params or None, role="schema")
            relation = schema_sql.RESULT
        result = [(str(r[0]), str(r[1])) for r in log.run(
            con, schema_sql.columns_query(), {"database": "temp", "schema": "main", "name": relation},
            role="schema").fetchall()]
        if staged is None:
            log.run(con, schema_sql.drop_result(), role="schema")
        return table, result

    # --- helpers --------------------------------------------------------------------------------

    def _count(self, con: Any, target: str, log: StatementLog) -> int:
        return int(log.run(con, isql.count_rows(target)).fetchone()[0])

    def _current(self, con: Any, target: str, log: StatementLog, *, restart: bool = True) -> int | None:
        """The target's latest snapshot as this transaction sees it (None: no table or no snapshot).
        ``restart``: the transaction may be begun again when there is no table (nothing written yet)."""
        try:
            row = log.run(con, isql.latest_snapshot(target)).fetchone()
        except Exception:  # no such table yet (iceberg_snapshots then reads its argument as a path)
            if not restart:  # a group's earlier members wrote in this transaction
                raise
            self.rollback(con, log)  # the failed statement aborted the transaction: start it again
            log.run(con, sql.BEGIN)
            return None
        return int(row[0]) if row is not None else None

    def _snapshot(self, name: str) -> int | None:
        """A table's current snapshot id, from the catalog (None: no table or no snapshot)."""
        try:
            table = self.lake.load(name)
        except Exception:
            return None
        snap = table.current_snapshot() if table is not None else None
        return int(snap.snapshot_id) if snap is not None else None

    def _landed(self, con: Any, target: str, commit_id: str, log: StatementLog) -> bool | None:
        """Whether the state table holds ``commit_id`` (None: it could not be read)."""
        for _ in range(2):
            try:
                row = log.run(con, isql.find_commit(target), {"commit_id": commit_id}).fetchone()
                return bool(row and row[0])
            except Exception as exc:
                log.note(f"looking up commit {commit_id} failed: {str(exc).splitlines()[0]}")
                self.rollback(con, log)
        return None

    def rollback(self, con: Any, log: StatementLog) -> None:
        try:
            log.run(con, sql.ROLLBACK)
        except Exception as exc:  # no transaction open
            log.note(f"rollback: {str(exc).splitlines()[0]}")
