"""One materialization on Iceberg = DuckDB computes, one pyiceberg ``table.transaction()`` commits.

The protocol (docs/design.md, "Transaction protocol"; docs/iceberg.md):

* the target and every upstream are read at one pinned snapshot each; the transaction starts from
  the target's pinned metadata, so pyiceberg's ``serializable`` validation rejects any concurrent
  commit that added rows matching the delete filter since then (an overwrite of a new partition
  included);
* lakewrap's state -- run id, model, partition, strategy, ``sql_sha256``, upstream pins, a commit id
  unique to the attempt -- is in the snapshot summary of the very commit that writes the data;
* a commit that certainly did not land (``CommitFailedException`` after pyiceberg's own retries,
  ``ValidationException``, a table created concurrently) is retried as a whole: re-read, recompute,
  re-commit, with capped, jittered backoff;
* a commit whose outcome is unknown (``CommitStateUnknownException``, a lost connection) is never
  retried blindly: the table's history is searched for the attempt's commit id first.
"""

from __future__ import annotations

import json
import random
import time
import uuid
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any

from lakewrap import __version__
from lakewrap.compilers import iceberg as ice
from lakewrap.compilers import schema as schema_sql
from lakewrap.compilers.artifacts import CommitOp, CompiledPlan, SchemaCheck
from lakewrap.compilers.schema import Changes, SchemaChangeError
from lakewrap.errors import ExecutionError, Location, TransientExecutionError
from lakewrap.execute import checks, locate, sandbox
from lakewrap.execute.executor import Result, StrictRefusal
from lakewrap.execute.iceberg import SERIALIZABLE, IcebergLake, Pinned
from lakewrap.execute.log import StatementLog
from lakewrap.execute.retry import RetryPolicy
from lakewrap.provenance_record import record

PREFIX = "lakewrap."
# the summary key of a commit ``lakewrap maintain`` made (value "compact"): it changed no row and is
# not a materialization (it carries no ``lakewrap.commit_id``)
MAINTAIN_KEY = PREFIX + "maintain"
COMPACT = "compact"  # MAINTAIN_KEY of a compaction commit: no row changed (lakewrap.maintain_iceberg)


class CommitUnknown(ExecutionError):
    """The commit's outcome is unknown and its commit id is not in the table's history (yet)."""


@dataclass
class IcebergExecutor:
    """Runs compiled Iceberg plans for one run id."""

    lake: IcebergLake
    run_id: str
    log_dir: Path
    policy: RetryPolicy = field(default_factory=RetryPolicy)
    strict: bool = False
    rng: random.Random = field(default_factory=random.Random)
    sleep: Callable[[float], None] = time.sleep
    # test hook: called with the open transaction just before it commits
    before_commit: Callable[[Any], None] | None = None

    def materialize(self, con: Any, compiled: CompiledPlan, *, reads: tuple[str, ...] = (),
                    drop_first: bool = False, inputs: dict[str, Any] | None = None,
                    provenance: dict[str, Any] | None = None) -> Result:
        """Execute ``compiled``; a failure is returned as a ``failed`` :class:`Result`, nothing written.

        ``reads`` are the tables the model reads (``schema.name``); ``inputs`` are Arrow tables (or
        anything DuckDB scans) registered under their names for the plan's SQL; ``provenance`` is
        added to the snapshot summary as JSON (a restore names the run and snapshot it restored).
        """
        started = time.perf_counter()
        window = compiled.window
        result = Result(model=compiled.path, target=compiled.target, partition=window.value if window else None,
                        strategy=compiled.strategy, status="failed", sql_sha256=compiled.sql_sha256)
        log = StatementLog(self.log_dir, compiled, self.lake.redact)
        try:
            # the user's SQL, on DuckDB's parse (docs/security.md)
            sandbox.check_plan(compiled, files=self.lake.sandbox() is not None)
            if drop_first:
                log.note("--full-refresh: computed as a first run; the commit replaces every row (and the "
                         "columns) in the same transaction")
            for attempt in range(1, self.policy.attempts + 1):
                result.attempts = attempt
                result.rows_inserted = result.rows_updated = result.rows_deleted = 0
                result.warnings.clear()
                try:
                    self._attempt(con, compiled, reads, result, log, attempt, inputs or {}, drop_first,
                                  provenance or {})
                    break
                except Exception as exc:
                    if not retryable(exc) or attempt == self.policy.attempts:
                        raise
                    delay = self.policy.delay(attempt, self.rng)
                    log.note(f"attempt {attempt} did not commit ({type(exc).__name__}); retrying in {delay:.3f}s: "
                             f"{str(exc).splitlines()[0] if str(exc) else ''}")
                    self.sleep(delay)
        except Exception as exc:  # a LakewrapError or a DuckDB/pyiceberg error: located on the model file
            result.fail(locate.located(exc, compiled.path, self.lake.root, compiled=compiled), self.lake.redact)
            result.error_class = type(exc).__name__
        finally:
            result.seconds = time.perf_counter() - started
            result.warnings = [self.lake.redact(w) for w in result.warnings]
            log.close(result.status, result.error)
        return result

    # --- one attempt ----------------------------------------------------------------------------

    def _attempt(self, con: Any, compiled: CompiledPlan, reads: tuple[str, ...], result: Result,
                 log: StatementLog, attempt: int, inputs: dict[str, Any], refresh: bool,
                 provenance: dict[str, Any]) -> None:
        (op,) = compiled.commits
        result.tests.clear()
        started_at = datetime.now(timezone.utc)
        hidden = (compiled.target,) if refresh else ()
        with self.lake.scratch(con, (*reads, compiled.target), hidden=hidden) as (cursor, pinned):
            for name, data in inputs.items():
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
                    outcome = checks.run_test(cursor, st, log, compiled.path)
                    outcomes.append(outcome)
                    result.tests.append(outcome.to_dict())
                    if outcome.status == "warn":
                        result.warnings.append(outcome.summary())
                    continue
                params = {k: v.python() for k, v in st.params.items()}
                ran = log.run(cursor, st.sql, params or None, role=st.role)
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
        pins = {name: p.snapshot_id for name, p in pinned.items() if name != compiled.target}
        commit_id = uuid.uuid4().hex
        props = {
            "run_id": self.run_id, "commit_id": commit_id, "model": compiled.path, "target": compiled.target,
            "partition": result.partition or "", "strategy": compiled.strategy, "sql_sha256": compiled.sql_sha256,
            "pins": json.dumps(pins, sort_keys=True), "base_snapshot": str(target.snapshot_id or ""),
            "window_start": window.start if window else "", "window_end": window.end if window else "",
            "watermark": window.end if window and window.kind == "dynamic" else "",
            "started_at": started_at.isoformat(), "attempt": str(attempt), "lakewrap_version": __version__,
            "full_refresh": "true" if refresh else "",
            "matched": "replace" if op.replaces_matched else "",  # how lakewrap.iceberg_state counts the rows
            "counts": json.dumps(dict(zip(("updated", "inserted", "deleted"), rewritten, strict=True)))
            if rewritten else "",  # a whole rewrite's own counts (lakewrap.iceberg_state reads them)
            # on_schema_change's changes (the commit's update_schema): `reproduce` applies them again
            "schema_changes": json.dumps({"add": changes.add, "widen": changes.widen, "drop": changes.drop,
                                          "leave_out": changes.leave_out,
                                          "relation": compiled.schema_check.relation if compiled.schema_check
                                          else None}, sort_keys=True) if changes else "",
            "tests": json.dumps([{k: t[k] for k in ("name", "line", "severity", "status", "failures")}
                                 for t in result.tests]) if result.tests else "",
        }
        props.update(record(compiled, provenance))  # params, statements (lakewrap.provenance_iceberg)
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


# --- helpers ------------------------------------------------------------------------------------


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


def committed_snapshots(table: Any, commit_id: str) -> list[Any]:
    """The table's snapshots carrying ``commit_id``, oldest first."""
    if table is None:
        return []
    out = [s for s in table.snapshots() if s.summary is not None
           and s.summary.additional_properties.get(PREFIX + "commit_id") == commit_id]
    return sorted(out, key=lambda s: (s.sequence_number or 0, s.timestamp_ms))


def row_counts(strategy: str, appended: int, deleted: int, *, rebuilt: bool, replaced: bool) -> tuple[int, int, int]:
    """A commit's (inserted, updated, deleted) from the rows it appended and the rows the table's
    total lost to its delete (the executor's result and ``lakewrap.iceberg_state`` count alike).

    A rebuild (a full table, ``--full-refresh``) counts only the rows written, as DuckLake's drop and
    re-create; a merge or an SCD2 snapshot counts the rows it replaced as updated, except a merge
    with ``matched=replace``, which counts them deleted and the rows written inserted, as on DuckLake.
    """
    if rebuilt or strategy == "table":
        return appended, 0, 0
    if strategy in ("merge", "snapshot") and not replaced:
        return appended - deleted, deleted, 0
    return appended, 0, deleted


def total_records(snapshot: Any) -> int:
    if snapshot is None or snapshot.summary is None:
        return 0
    return int(snapshot.summary.additional_properties.get("total-records", 0))


def iceberg_schema(arrow_schema: Any) -> Any:
    """The Iceberg schema of a new table from the result's Arrow schema, with field ids 1..n."""
    from pyiceberg.catalog import Catalog
    from pyiceberg.schema import assign_fresh_schema_ids

    return assign_fresh_schema_ids(Catalog._convert_schema_if_needed(arrow_schema))


def partition_spec(schema: Any, layout: tuple[str, str] | None) -> Any:
    """The partition spec of a table the commit creates: ``day(created_at)`` etc., by field name.

    A time transform needs a date or timestamp column; a key of another type leaves the table
    unpartitioned (the window filter still selects its rows).
    """
    from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionField, PartitionSpec
    from pyiceberg.transforms import DayTransform, HourTransform, MonthTransform, YearTransform

    names = {f.name: f for f in schema.fields}
    if layout is None or layout[1] not in names:
        return UNPARTITIONED_PARTITION_SPEC
    transform, column = layout
    field = names[column]
    if str(field.field_type) not in ("date", "timestamp", "timestamptz") or (
            transform == "hour" and str(field.field_type) == "date"):
        return UNPARTITIONED_PARTITION_SPEC
    source_id = field.field_id
    transforms: dict[str, Any] = {"hour": HourTransform, "day": DayTransform, "month": MonthTransform,
                                  "year": YearTransform}
    fn = transforms[transform]()
    return PartitionSpec(PartitionField(source_id=source_id, field_id=1000, transform=fn,
                                        name=f"{column}_{transform}"))


# strategies that replace the whole table: like CREATE OR REPLACE, they take the result's columns
REPLACING = ("table", "seed")


def same_columns(arrow_schema: Any, schema: Any) -> bool:
    """Whether the result's columns and types are the table's (by name)."""
    ours = {(f.name, str(f.field_type)) for f in iceberg_schema(arrow_schema).fields}
    return ours == {(f.name, str(f.field_type)) for f in schema.fields}


def evolve(tx: Any, arrow_schema: Any, name: str) -> None:
    """A full rebuild whose columns changed: drop the columns the result lost or retyped, add the new
    ones, in the same transaction as the data."""
    new = {f.name: str(f.field_type) for f in iceberg_schema(arrow_schema).fields}
    try:
        with tx.update_schema(allow_incompatible_changes=True) as update:
            for field in tx.table_metadata.schema().fields:
                if new.get(field.name) != str(field.field_type):
                    update.delete_column(field.name)
        with tx.update_schema() as update:
            update.union_by_name(iceberg_schema(arrow_schema))
    except Exception as exc:
        raise ExecutionError(f"cannot change the columns of the Iceberg table {name}: {str(exc).splitlines()[0]}",
                             hint="drop the table and run again") from None


def apply_changes(tx: Any, changes: Changes, arrow_schema: Any, compiled: CompiledPlan) -> None:
    """``on_schema_change``'s changes to the Iceberg table, in the materialization's transaction;
    the types of new and widened columns are the result's (``arrow_schema``)."""
    import pyarrow as pa  # type: ignore[import-untyped]

    def field_type(name: str) -> Any:
        return iceberg_schema(pa.schema([arrow_schema.field(name)])).fields[0].field_type

    try:
        with tx.update_schema() as update:
            for col in changes.drop:
                update.delete_column(col)
            for col, _ in changes.widen:
                update.update_column(col, field_type=field_type(col))
            for col, _ in changes.add:
                update.add_column(col, field_type(col))
    except Exception as exc:
        raise SchemaChangeError(
            f"cannot change the columns of the Iceberg table {compiled.target} ("
            + "; ".join(changes.describe()) + f"): {str(exc).splitlines()[0]} (nothing was written)",
            location=Location(compiled.path),
            hint="rebuild the table with `lakewrap run --full-refresh`, or change the SELECT back") from None


def conform(rows: Any, schema: Any) -> Any:
    """The rows with the table's column order (by name); a mismatch is left for pyiceberg to report."""
    names = [f.name for f in schema.fields]
    if sorted(names) == sorted(rows.schema.names):
        return rows.select(names)
    raise ExecutionError(
        "the result's columns differ from the Iceberg table's: "
        f"missing {sorted(set(names) - set(rows.schema.names))}, new {sorted(set(rows.schema.names) - set(names))}",
        hint="on_schema_change is `fail` on Iceberg: run with --full-refresh to rebuild the table",
    )


def count_matching(table: Any, delete: Any) -> int:
    if table is None:
        return 0
    return int(table.scan(row_filter=delete).to_arrow().num_rows)


def to_filter(condition: str, params: dict[str, Any], cursor: Any, schema: Any) -> Any:
    """A pyiceberg row filter from a compiled ``delete_where`` condition.

    The condition is SQL the compiler rendered; it is parsed, not built, here. Parameters take the
    type of the column they are compared with; a ``(k) IN (SELECT k FROM <staged table>)`` reads
    the keys from DuckDB.
    """
    import sqlglot
    from pyiceberg import expressions as ie
    from sqlglot import exp

    types = {f.name: str(f.field_type) for f in schema.fields}

    def name(node: exp.Expr) -> str:
        if not isinstance(node, exp.Column):
            raise ExecutionError(f"cannot use `{node.sql()}` in an Iceberg row filter")
        return node.name

    def value(node: exp.Expr, column: str) -> Any:
        if isinstance(node, exp.Cast):
            node = node.this
        if isinstance(node, exp.Placeholder):
            v = params[node.name]
        elif isinstance(node, exp.Boolean):
            v = node.this
        elif isinstance(node, exp.Literal):
            v = node.to_py()
        else:
            raise ExecutionError(f"cannot use `{node.sql()}` in an Iceberg row filter")
        return typed(v, types.get(column, ""))

    # pyiceberg's predicate classes are pydantic models typed for keyword construction
    comparisons: dict[type, Any] = {exp.EQ: ie.EqualTo, exp.GTE: ie.GreaterThanOrEqual, exp.GT: ie.GreaterThan,
                   exp.LT: ie.LessThan, exp.LTE: ie.LessThanOrEqual}

    def convert(node: exp.Expr) -> Any:
        if isinstance(node, exp.Paren):
            return convert(node.this)
        if isinstance(node, exp.Boolean):
            return ie.AlwaysTrue() if node.this else ie.AlwaysFalse()
        if isinstance(node, exp.And):
            return ie.And(convert(node.this), convert(node.expression))
        if isinstance(node, exp.Or):
            return ie.Or(convert(node.this), convert(node.expression))
        if isinstance(node, exp.Not):
            return ie.Not(convert(node.this))
        for kind, pred in comparisons.items():
            if isinstance(node, kind):
                column = name(node.this)
                return pred(column, value(node.expression, column))
        if isinstance(node, exp.In) and node.args.get("query") is not None:
            lhs = node.this
            columns = [name(c) for c in lhs.expressions] if isinstance(lhs, exp.Tuple) else [name(lhs)]
            keys = cursor.execute(node.args["query"].this.sql(dialect="duckdb")).fetchall()
            if not keys:
                return ie.AlwaysFalse()
            if len(columns) == 1:
                return in_(columns[0], {typed(k[0], types.get(columns[0], "")) for k in keys if k[0] is not None})
            alternatives = [ie.And(*(equal_to(c, typed(v, types.get(c, "")))
                                     for c, v in zip(columns, k, strict=True))) for k in set(keys)]
            return ie.Or(*alternatives) if len(alternatives) > 1 else alternatives[0]
        raise ExecutionError(f"cannot use `{node.sql()}` in an Iceberg row filter")

    in_: Any = ie.In
    equal_to: Any = ie.EqualTo
    return convert(sqlglot.parse_one(condition, read="duckdb"))


def typed(v: Any, field_type: str) -> Any:
    """A Python value as pyiceberg compares it with a field of ``field_type``."""
    if isinstance(v, datetime):
        if field_type == "timestamptz":
            return v if v.tzinfo else v.replace(tzinfo=timezone.utc)
        if field_type == "timestamp":  # lakewrap's session time zone is UTC
            return v.astimezone(timezone.utc).replace(tzinfo=None) if v.tzinfo else v
        if field_type == "date":
            return v.astimezone(timezone.utc).date() if v.tzinfo else v.date()
    if isinstance(v, date) and not isinstance(v, datetime) and field_type in ("timestamp", "timestamptz"):
        return datetime(v.year, v.month, v.day, tzinfo=timezone.utc if field_type == "timestamptz" else None)
    return v
