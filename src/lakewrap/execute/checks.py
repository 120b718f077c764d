"""Running the checks of a materialization inside its transaction (write-audit-publish).

* ``test`` statements (compiled by :mod:`lakewrap.compilers.checks`) return the failing rows, each
  carrying the total count; a failure of an ``error`` test rolls the transaction back, a ``warn``
  test is reported and the write commits.
* the ``on_schema_change`` comparison (:mod:`lakewrap.compilers.schema`) reads the columns of the
  staged result and of the live table in the same transaction, before the first write, and runs
  the ``ALTER TABLE`` statements the mode calls for.

Every statement run here was rendered by ``lakewrap.compilers``; nothing builds SQL.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from lakewrap.compilers import schema as schema_sql
from lakewrap.compilers.artifacts import CompiledPlan, CompiledStatement, SchemaCheck
from lakewrap.errors import ExecutionError, Location
from lakewrap.execute import statements as sql
from lakewrap.execute.log import StatementLog
from lakewrap.redact import redact_value

Outcome = Literal["pass", "fail", "warn", "error"]  # error: the test could not run (``lakewrap test``)


@dataclass
class TestOutcome:
    """One test of one materialization (or of ``lakewrap test``): plain data, JSON-ready."""

    __test__ = False  # not a pytest class

    name: str
    kind: str
    severity: str
    path: str
    line: int
    status: Outcome
    failures: int = 0
    columns: list[str] = field(default_factory=list)
    sample: list[dict[str, Any]] = field(default_factory=list)  # at most 20 failing rows (or groups)
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def summary(self, *, with_path: bool = True) -> str:
        """``models/m.sql:4: test `unique id` (error): 3 failing rows, e.g. (id=7, occurrences=2)``."""
        example = ""
        if self.sample:
            example = ", e.g. (" + ", ".join(f"{k}={v}" for k, v in self.sample[0].items()) + ")"
        noun = "failing row" if self.failures == 1 else "failing rows"
        where = f"{self.path}:{self.line}: " if with_path else f"line {self.line}: "
        return f"{where}test `{self.name}` ({self.severity}): {self.failures} {noun}{example}"


class DataTestFailure(ExecutionError):
    """An ``error``-severity test found failing rows: the materialization was rolled back."""


def run_test(con: Any, st: CompiledStatement, log: StatementLog, path: str, lake: Any = None) -> TestOutcome:
    """Run one compiled test statement; its rows are the failing rows (count in the first column).
    A script test's statement is the relation its function reads (:mod:`lakewrap.scripttests`)."""
    assert st.test is not None
    info = st.test
    if info.script is not None:
        from lakewrap.scripttests import run_script

        count, columns, sample = run_script(con, st, log, path, lake)
        return TestOutcome(info.name, info.kind, info.severity, path, info.line,
                           "pass" if count == 0 else "fail" if info.severity == "error" else "warn",
                           failures=count, columns=columns, sample=sample)
    params = {k: v.python() for k, v in st.params.items()}
    cursor = log.run(con, st.sql, params or None, role="test")
    names = [d[0] for d in cursor.description][1:]
    rows = cursor.fetchall()
    info = st.test
    if not rows:
        return TestOutcome(info.name, info.kind, info.severity, path, info.line, "pass", columns=names)
    # the failing rows are redacted here, before anything stores or prints them
    sample = redact_value([dict(zip(names, row[1:], strict=True)) for row in rows], log.redact)
    return TestOutcome(info.name, info.kind, info.severity, path, info.line,
                       "fail" if info.severity == "error" else "warn", failures=int(rows[0][0]),
                       columns=[log.redact(n) for n in names], sample=sample)


def failure(outcomes: list[TestOutcome]) -> DataTestFailure | None:
    """The error that rolls the materialization back, when an ``error`` test failed."""
    failed = [t for t in outcomes if t.status == "fail"]
    if not failed:
        return None
    first = failed[0]
    head = "a test failed" if len(failed) == 1 else f"{len(failed)} tests failed"
    return DataTestFailure(
        f"{head}, the write was rolled back (nothing was written): "
        + "; ".join(t.summary(with_path=False) for t in failed),
        location=Location(first.path, first.line),
        hint="fix the data or the model; `lakewrap test` re-runs the tests against the published data, "
        "`severity=warn` reports a test without blocking the write",
    )


def record(con: Any, log: StatementLog, run_id: str, compiled: CompiledPlan, partition: str | None,
           outcomes: list[TestOutcome]) -> None:
    """Store each test's outcome in ``lakewrap.test_results``, in the transaction about to commit."""
    import json

    for t in outcomes:
        log.run(con, sql.insert_test_result(), {
            "run_id": run_id, "target": compiled.target, "partition_value": partition, "model": t.path,
            "line": t.line, "test": t.name, "kind": t.kind, "severity": t.severity, "status": t.status,
            "failures": t.failures, "sample": json.dumps(t.sample, default=str),
        })


def check_schema(con: Any, check: SchemaCheck, compiled: CompiledPlan, log: StatementLog,
                 *, bootstrapped: bool = False) -> list[str]:
    """Compare the result with the live table and run what ``on_schema_change`` calls for.

    Returns the statements run (``ALTER TABLE ...``); raises ``SchemaChangeError`` when the mode
    refuses the change. A table that does not exist yet has no columns: nothing to compare.
    ``bootstrapped``: the plan's ``CREATE TABLE IF NOT EXISTS`` has run, so the table exists (a new
    one with the result's own columns) and is read with ``DESCRIBE``.
    """
    schema, name = compiled.target.split(".", 1)
    result, table = _columns(con, check, compiled, log, exists=bootstrapped)
    if not table:
        return []
    statements = schema_sql.resolve(check, compiled.path, (schema, name), result, table)
    for stmt in statements:
        log.run(con, stmt, role="schema")
    return statements


def schema_changes(con: Any, check: SchemaCheck, compiled: CompiledPlan, log: StatementLog,
                   widens: Callable[[str, str], bool], substrate: str,
                   ) -> tuple[schema_sql.Changes, list[schema_sql.Column]]:
    """What ``on_schema_change`` makes of the result's columns against the table's (for a substrate
    that applies the changes itself), with the table's columns; raises ``SchemaChangeError``."""
    schema, name = compiled.target.split(".", 1)
    result, table = _columns(con, check, compiled, log)
    return schema_sql.changes(check, compiled.path, (schema, name), result, table, widens, substrate), table


def _columns(con: Any, check: SchemaCheck, compiled: CompiledPlan, log: StatementLog, *, exists: bool = False,
             ) -> tuple[list[schema_sql.Column], list[schema_sql.Column]]:
    """(the result's columns, the target's columns), both as DuckDB reads them; no table: [].

    ``exists``: the target is known to exist, so ``DESCRIBE`` reads it; otherwise ``duckdb_columns()``
    (an empty answer for a missing table, where ``DESCRIBE`` would abort the transaction).
    """
    schema, name = compiled.target.split(".", 1)
    if exists:
        table = _describe(con, log, None, schema, name)
    else:
        table = [(str(r[0]), str(r[1])) for r in log.run(
            con, sql.columns_query(), {"database": None, "schema": schema, "name": name}, role="schema").fetchall()]
    if not table:
        return [], []
    relation = check.relation
    if relation is None:  # nothing staged: the result's columns from its `LIMIT 0` bootstrap query
        bootstrap = next(st for st in compiled.statements if st.role == "bootstrap")
        params = {k: v.python() for k, v in bootstrap.params.items()}
        log.run(con, sql.stage_result(bootstrap.sql), params or None, role="schema")
        relation = schema_sql.RESULT
    result = _describe(con, log, "temp", "main", relation)
    if check.relation is None:
        log.run(con, sql.drop_result(), role="schema")
    return result, table


def _describe(con: Any, log: StatementLog, database: str | None, schema: str, name: str) -> list[schema_sql.Column]:
    rows = log.run(con, sql.describe(database, schema, name), role="schema").fetchall()
    return [(str(r[0]), str(r[1])) for r in rows]
