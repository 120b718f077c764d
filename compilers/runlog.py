"""SQL of the run log: lakewrap's tables of runs, steps, attempts and log lines.

The run log lives in the lake's *catalog database* (the DuckDB file, SQLite file or PostgreSQL
database that holds DuckLake's own ``ducklake_*`` tables), not in DuckLake tables: writing it never
creates a DuckLake snapshot, and DuckDB refuses a transaction that writes both the catalog database
and the lake ("a single transaction can only write to a single attached database"), so a run-log
row can never be part of a materialization's transaction. See docs/running.md, "The run log".

Two dialects: ``duckdb`` (through DuckDB's attachment of the catalog database,
``__ducklake_metadata_<alias>``, for DuckDB-file and PostgreSQL catalogs) and ``sqlite`` (Python's
``sqlite3`` on a SQLite file beside a SQLite catalog, ``<catalog>-runlog``: writing the catalog
file itself wedges it while a DuckLake connection of the same process holds it).
Values are named parameters; times are ISO 8601 text (portable to all three databases).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from sqlglot import exp

Dialect = Literal["duckdb", "sqlite"]

RUNS = "lakewrap_runs"
STEPS = "lakewrap_steps"
ATTEMPTS = "lakewrap_attempts"
LOG = "lakewrap_log"

TABLES: dict[str, list[tuple[str, str]]] = {
    RUNS: [
        ("run_id", "VARCHAR"), ("command", "VARCHAR"), ("status", "VARCHAR"), ("args", "VARCHAR"),
        ("started_at", "VARCHAR"), ("finished_at", "VARCHAR"), ("executor", "VARCHAR"), ("workers", "BIGINT"),
        ("steps", "BIGINT"), ("succeeded", "BIGINT"), ("failed", "BIGINT"), ("skipped", "BIGINT"),
        ("cancelled", "BIGINT"), ("resumable", "BOOLEAN"), ("lakewrap_version", "VARCHAR"), ("pid", "BIGINT"),
    ],
    STEPS: [
        ("run_id", "VARCHAR"), ("step", "BIGINT"), ("model", "VARCHAR"), ("target", "VARCHAR"),
        ("partition_value", "VARCHAR"), ("status", "VARCHAR"), ("attempts", "BIGINT"),
        ("rows_inserted", "BIGINT"), ("rows_updated", "BIGINT"), ("rows_deleted", "BIGINT"),
        ("snapshot_id", "BIGINT"), ("seconds", "DOUBLE"), ("finished_at", "VARCHAR"), ("sql_sha256", "VARCHAR"),
        ("error_class", "VARCHAR"), ("error", "VARCHAR"),
    ],
    ATTEMPTS: [
        ("run_id", "VARCHAR"), ("target", "VARCHAR"), ("partition_value", "VARCHAR"), ("attempt", "BIGINT"),
        ("outcome", "VARCHAR"), ("error_class", "VARCHAR"), ("error", "VARCHAR"), ("seconds", "DOUBLE"),
    ],
    LOG: [
        ("run_id", "VARCHAR"), ("logged_at", "VARCHAR"), ("level", "VARCHAR"), ("target", "VARCHAR"),
        ("partition_value", "VARCHAR"), ("message", "VARCHAR"),
    ],
}


def _table(name: str, catalog: str | None) -> exp.Table:
    from sqlglot import exp

    from lakewrap.compilers import sql as q

    return exp.Table(this=q.ident(name), catalog=q.ident(catalog) if catalog else None)


def _render(node: exp.Expr, dialect: Dialect) -> str:

    from lakewrap.compilers import sql as q

    return q.render(node) if dialect == "duckdb" else node.sql(dialect="sqlite")


RUNLOG_ALIAS = "__lakewrap_runlog"

# Each builder imports sqlglot itself: the runner reaches them through lakewrap.execute.statements,
# so a warm run takes their text from the compile cache and never imports sqlglot.


def attach_runlog(path: str, kind: Literal["duckdb", "sqlite"]) -> str:
    """``ATTACH '<path>' AS __lakewrap_runlog (READ_ONLY)`` (``TYPE sqlite`` for a SQLite file): a run
    log of its own (a DuckLake's SQLite catalog, an Iceberg lake), read by ``lakewrap query``."""
    from sqlglot import exp

    from lakewrap.compilers import sql as q

    options = "(TYPE sqlite, READ_ONLY)" if kind == "sqlite" else "(READ_ONLY)"
    return q.render(q.command("ATTACH", exp.Literal.string(path), "AS", q.ident(RUNLOG_ALIAS), options))


def metadata_catalog(alias: str) -> str:
    """The name under which DuckDB attaches a DuckLake's catalog database."""
    return f"__ducklake_metadata_{alias}"


def ddl(dialect: Dialect, catalog: str | None = None) -> list[str]:
    """``CREATE TABLE IF NOT EXISTS`` for the four run-log tables."""
    from sqlglot import exp

    from lakewrap.compilers import sql as q

    out = []
    for name, columns in TABLES.items():
        schema = exp.Schema(this=_table(name, catalog), expressions=[
            exp.ColumnDef(this=q.ident(c), kind=exp.DataType.build(t)) for c, t in columns])
        out.append(_render(exp.Create(this=schema, kind="TABLE", exists=True), dialect))
    return out


def insert(name: str, dialect: Dialect, catalog: str | None = None) -> str:
    """``INSERT INTO <name> (cols) VALUES (:col, ...)``; parameters are named like the columns."""
    from sqlglot import exp

    from lakewrap.compilers import sql as q

    cols = [c for c, _ in TABLES[name]]
    node = exp.insert(exp.Values(expressions=[exp.Tuple(expressions=[q.param(c) for c in cols])]),
                      _table(name, catalog), columns=[q.ident(c) for c in cols])
    return _render(node, dialect)


def insert_rows(name: str, dialect: Dialect, catalog: str | None = None) -> list[str]:
    """``[head, row]``: :func:`insert` on one line, cut before its one row of parameters
    (``($col, ...)``), so that ``head`` followed by rows joined with ``", "`` inserts many rows in
    one statement."""
    from sqlglot import exp

    from lakewrap.compilers import sql as q

    cols = [c for c, _ in TABLES[name]]
    values = exp.Tuple(expressions=[q.param(c) for c in cols])
    node = exp.insert(exp.Values(expressions=[values]), _table(name, catalog), columns=[q.ident(c) for c in cols])
    text, row = node.sql(dialect=dialect), values.sql(dialect=dialect)
    if not text.endswith(row):  # pragma: no cover - a rendering the run log would get wrong
        raise AssertionError(f"the INSERT into {name} does not end with its row: {text!r}")
    return [text[:-len(row)], row]


def delete_run(dialect: Dialect, catalog: str | None = None) -> str:
    """Remove a run's row (it is re-inserted with its new status): ``DELETE ... WHERE run_id = :run_id``."""
    from sqlglot import exp

    from lakewrap.compilers import sql as q

    node = exp.delete(_table(RUNS, catalog), where=exp.EQ(this=q.col("run_id"), expression=q.param("run_id")))
    return _render(node, dialect)


def select_run(dialect: Dialect, catalog: str | None = None) -> str:
    """A run's row, by ``:run_id``."""
    from sqlglot import exp

    from lakewrap.compilers import sql as q

    cols = [q.col(c) for c, _ in TABLES[RUNS]]
    node = exp.select(*cols).from_(_table(RUNS, catalog)).where(
        exp.EQ(this=q.col("run_id"), expression=q.param("run_id")))
    return _render(node, dialect)


def expose_view(name: str, catalog: str) -> str:
    """``CREATE OR REPLACE TEMP VIEW <name> AS SELECT * FROM <catalog>.<name>`` (read-only sessions)."""
    from sqlglot import exp

    from lakewrap.compilers import sql as q

    node = exp.Create(this=exp.Table(this=q.ident(name)), kind="VIEW", replace=True,
                      properties=exp.Properties(expressions=[exp.TemporaryProperty()]),
                      expression=exp.select(exp.Star()).from_(_table(name, catalog)))
    return q.render(node)


def latest_records() -> str:
    """(partition, ``sql_sha256``, run id) of the latest materialization of each partition of ``$target``."""
    from sqlglot import exp

    from lakewrap.compilers import sql as q
    from lakewrap.compilers.lake import MATERIALIZATIONS, STATE_SCHEMA

    ranked = exp.Window(this=exp.RowNumber(), partition_by=[q.col("partition_value")],
                        order=exp.Order(expressions=[exp.Ordered(this=q.col("committed_at"), desc=True)]))
    node = (exp.select(q.col("partition_value"), q.col("sql_sha256"), q.col("run_id"))
            .from_(q.table(STATE_SCHEMA, MATERIALIZATIONS))
            .where(exp.EQ(this=q.col("target"), expression=q.param("target")))
            .qualify(exp.EQ(this=ranked, expression=exp.Literal.number(1))))
    return q.render(node)


def append_records(alias: str) -> str:
    """(partition, whether it was a full refresh, run id) of every materialization of ``$target``,
    oldest first: lakewrap.materializations joined to the snapshot that committed each one (its
    commit_extra_info names the run, target and partition, and ``full_refresh`` when it dropped the
    table first). A record whose snapshot was expired sorts first."""
    import sqlglot

    from lakewrap.compilers import sql as q

    tree = sqlglot.parse_one(
        "SELECT m.partition_value, json_extract_string(s.commit_extra_info, '$.full_refresh') AS full_refresh, "
        "m.run_id FROM lakewrap.materializations AS m LEFT JOIN snapshots() AS s "
        "ON json_extract_string(s.commit_extra_info, '$.run_id') = m.run_id "
        "AND json_extract_string(s.commit_extra_info, '$.target') = m.target "
        "AND (coalesce(json_extract_string(s.commit_extra_info, '$.partition'), '') = coalesce(m.partition_value, '') "
        "OR list_contains(json_extract_string(s.commit_extra_info, '$.batch[*]'), m.partition_value)) "
        "WHERE m.target = $target ORDER BY s.snapshot_id NULLS FIRST, m.committed_at",
        read="duckdb",
    )
    from lakewrap.compilers.lake import expand_members

    return q.render(expand_members(tree, alias))


def _same_step(partition: exp.Expr) -> exp.Expr:
    """``run_id = $run_id AND target = $target AND <partition> IS NOT DISTINCT FROM $partition``."""
    from sqlglot import exp

    from lakewrap.compilers import sql as q

    return exp.and_(exp.EQ(this=q.col("run_id"), expression=q.param("run_id")),
                    exp.EQ(this=q.col("target"), expression=q.param("target")),
                    exp.NullSafeEQ(this=partition, expression=q.param("partition")))


def step_materialization() -> str:
    """The ``lakewrap.materializations`` row run ``$run_id`` committed for (``$target``, ``$partition``):
    its row counts and attempt (none: that step's commit did not land)."""
    from sqlglot import exp

    from lakewrap.compilers import sql as q
    from lakewrap.compilers.lake import MATERIALIZATIONS, STATE_SCHEMA

    cols = [q.col(c) for c in ("rows_inserted", "rows_updated", "rows_deleted", "attempt")]
    node = exp.select(*cols).from_(q.table(STATE_SCHEMA, MATERIALIZATIONS)).where(
        _same_step(q.col("partition_value"))).order_by(exp.Ordered(this=q.col("attempt"), desc=True)).limit(1)
    return q.render(node)


def step_snapshot(alias: str) -> str:
    """The snapshot whose commit message names run ``$run_id``, ``$target`` and ``$partition`` (the
    ``extra_info`` the executor writes in the materialization's own transaction; a group commit's
    entry for the step among its members)."""
    from sqlglot import exp

    from lakewrap.compilers import sql as q

    def extra(key: str) -> exp.Expr:
        return exp.func("json_extract_string", exp.column("commit_extra_info"), exp.Literal.string(f"$.{key}"))

    where = exp.and_(exp.EQ(this=extra("run_id"), expression=q.param("run_id")),
                     exp.EQ(this=extra("target"), expression=q.param("target")),
                     exp.NullSafeEQ(this=extra("partition"), expression=q.param("partition")))
    from lakewrap.compilers.lake import member_snapshots

    return q.render(exp.select(exp.Max(this=exp.column("snapshot_id"))).from_(member_snapshots(alias)).where(where))


def last_step(dialect: Dialect, catalog: str | None = None) -> str:
    """The highest step number run ``:run_id`` recorded (a resumed run numbers its steps after it)."""
    from sqlglot import exp

    from lakewrap.compilers import sql as q

    node = exp.select(exp.Max(this=q.col("step"))).from_(_table(STEPS, catalog)).where(
        exp.EQ(this=q.col("run_id"), expression=q.param("run_id")))
    return _render(node, dialect)
