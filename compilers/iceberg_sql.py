"""The Iceberg compiler for write path ``sql``: DuckDB writes the tables through a REST catalog.

The catalog is attached as ``ice`` (``ATTACH '<warehouse>' AS ice (TYPE iceberg, ENDPOINT ...)``).
DuckDB 1.5.5 cannot ``USE`` it (it has no ``main`` schema), so every lake table is named in three
parts, ``"ice"."schema"."name"``: the shared shapes of :class:`~lakewrap.compilers.base.Compiler`
read :attr:`Capabilities.catalog` for the target, and the model's own ``schema.table`` references
are qualified the same way. Temporary tables (the stage, the SCD2 change sets) stay in DuckDB's
``temp`` catalog. Data tests read the target inside the transaction, before ``COMMIT`` (DuckDB
reads its own uncommitted Iceberg writes), as on a DuckLake.

Capabilities: no views, no ``CREATE OR REPLACE`` (a full rebuild is created on its first run, then
``DELETE`` + ``INSERT BY NAME`` in one transaction; the executor first gives the table the result's
columns with ``ALTER TABLE`` in that transaction), MERGE with ``predicate=`` (DuckDB executes the
MERGE itself).

Partitioning: DuckDB 1.5.5 creates an Iceberg table with a partition spec (``CREATE TABLE ...
PARTITIONED BY (day(col)) AS ...``, measured through the REST catalog), so the first-run bootstrap
carries the model's spec, the same transform as the pyiceberg path's (``compilers.iceberg.TRANSFORMS``).
The spec is set only when the table is created, as on the pyiceberg path: a later change of the
model's partitioning does not evolve an existing table's spec. ``ALTER TABLE ... SET PARTITIONED
BY`` is not used: in the transaction that creates the table it fails (409).

State: DuckDB cannot write Iceberg snapshot-summary properties, so lakewrap's facts about a
materialization (run id, partition, strategy, ``sql_sha256``, pins, row counts, a commit id) are a
row of an Iceberg state table, ``"ice"."lakewrap"."<schema>__<name>"`` (one per target, so writers
of different targets never conflict on it), inserted in the same DuckDB transaction as the data.
DuckDB sends the whole transaction as one ``POST /v1/transactions/commit``. The schema and the
state table are created by the plan's ``setup`` statements, which the executor runs before
``BEGIN``: a table cannot be created in a namespace created in the same transaction.
"""

from __future__ import annotations

from typing import Any

from sqlglot import exp

from lakewrap.compilers import sql as q
from lakewrap.compilers.base import Compiler
from lakewrap.compilers.iceberg import TRANSFORMS
from lakewrap.compilers.shape import Capabilities, Shape
from lakewrap.errors import Location, UnsupportedError
from lakewrap.plan import Plan
from lakewrap.spec import TimePartitioning

CATALOG = "ice"
STATE_SCHEMA = "lakewrap"
STATE_PREFIX = "state_"  # the parameters of the state row: $state_<column>
STATE_NOTE = "lakewrap's state: one row in the target's state table, committed with the data"

# The state table's columns, in order. Row counts are what the transaction's statements reported.
STATE_COLUMNS: tuple[tuple[str, Any], ...] = (
    ("run_id", exp.DataType.Type.VARCHAR),
    ("commit_id", exp.DataType.Type.VARCHAR),
    ("model", exp.DataType.Type.VARCHAR),
    ("target", exp.DataType.Type.VARCHAR),
    ("partition_value", exp.DataType.Type.VARCHAR),
    ("window_start", exp.DataType.Type.TIMESTAMPTZ),
    ("window_end", exp.DataType.Type.TIMESTAMPTZ),
    ("watermark", exp.DataType.Type.TIMESTAMPTZ),
    ("strategy", exp.DataType.Type.VARCHAR),
    ("sql_sha256", exp.DataType.Type.VARCHAR),
    ("pins", exp.DataType.Type.VARCHAR),
    ("base_snapshot", exp.DataType.Type.BIGINT),
    ("rows_inserted", exp.DataType.Type.BIGINT),
    ("rows_updated", exp.DataType.Type.BIGINT),
    ("rows_deleted", exp.DataType.Type.BIGINT),
    ("full_refresh", exp.DataType.Type.BOOLEAN),
    ("started_at", exp.DataType.Type.TIMESTAMPTZ),
    ("attempt", exp.DataType.Type.INT),
    ("lakewrap_version", exp.DataType.Type.VARCHAR),
    ("tests", exp.DataType.Type.VARCHAR),  # JSON: each data test's name, severity, status, failing rows
    # provenance (docs/provenance.md): what `lakewrap reproduce` re-executes and `explain` prints
    ("params", exp.DataType.Type.VARCHAR),  # JSON: the values bound to the statements' parameters
    ("statements", exp.DataType.Type.VARCHAR),  # JSON: the plan's statements (role, sql, note)
    ("schema_changes", exp.DataType.Type.VARCHAR),  # JSON: the ALTER TABLE statements on_schema_change ran
    ("provenance", exp.DataType.Type.VARCHAR),  # JSON: e.g. a restore's {"restored_from": {...}}
)
# Columns added after the first state tables were created: each plan adds them where missing.
ADDED_COLUMNS = ("params", "statements", "schema_changes", "provenance")


def state_table_name(target: str) -> str:
    """The state table of ``schema.name``: ``<schema>__<name>`` in the ``lakewrap`` namespace."""
    schema, _, name = target.partition(".")
    return f"{schema}__{name}"


def state_table(target: str) -> exp.Table:
    tbl = q.table(STATE_SCHEMA, state_table_name(target))
    tbl.set("catalog", q.ident(CATALOG))
    return tbl


def lake_table(schema: str, name: str) -> exp.Table:
    """``"ice"."schema"."name"``."""
    tbl = q.table(schema, name)
    tbl.set("catalog", q.ident(CATALOG))
    return tbl


class IcebergSqlCompiler(Compiler):
    """Apache Iceberg written by DuckDB SQL through a REST catalog, in one transaction."""

    caps = Capabilities(
        name="iceberg",
        write_path="sql",
        supports_views=False,
        supports_create_or_replace=False,
        supports_merge=True,
        max_merge_update_actions=1,
        supports_merge_predicate=True,
        partition_ddl=False,
        catalog=CATALOG,
    )

    def shapes(self, plan: Plan) -> list[Shape]:
        """The shared shapes, the state table's setup first and the state row last."""
        shapes = super().shapes(plan)
        target = str(plan.model.target)
        setup = [s for s in shapes if s.role == "setup"] + state_setup(target)
        body = [s for s in shapes if s.role != "setup"]
        return [*setup, *body, Shape("write", record_state(target), STATE_NOTE)]

    def bootstrap(self, plan: Plan, source: exp.Expr) -> list[Shape]:
        """``CREATE TABLE IF NOT EXISTS ... AS <source>``; partitioned by the model's key's transform."""
        part = plan.model.partition
        if not isinstance(part, TimePartitioning):
            return super().bootstrap(plan, source)
        transform = TRANSFORMS[part.grain.value]
        keys = exp.Schema(expressions=[exp.Anonymous(this=transform, expressions=[q.col(part.key)])])
        create = exp.Create(this=self.target(plan), kind="TABLE", exists=True, expression=source,
                            properties=exp.Properties(expressions=[exp.PartitionedByProperty(this=keys)]))
        return [Shape("bootstrap", create, f"first run: create the table from the result's schema, partitioned by "
                      f"{transform}({part.key})", text=q.create_partitioned(create))]

    def literal(self, plan: Plan) -> list[Shape]:
        raise UnsupportedError(
            f"a literal model cannot write an Iceberg table (model {plan.model.path})",
            location=Location(plan.model.path),
            hint="wrap it (`-- materialized table|incremental|snapshot`), or keep it on a DuckLake",
        )


def state_setup(target: str) -> list[Shape]:
    """The setup statements of every plan writing ``target`` (a restore's too): lakewrap's namespace,
    the target's state table, and the columns a state table created by an earlier lakewrap lacks."""
    return [Shape("setup", exp.Create(this=exp.Table(db=q.ident(STATE_SCHEMA), catalog=q.ident(CATALOG)),
                                      kind="SCHEMA", exists=True),
                  "lakewrap's namespace (before BEGIN: a table cannot be created in a namespace "
                  "created in the same transaction)"),
            Shape("setup", state_ddl(target), "the target's state table"),
            *(Shape("setup", upgrade_state(target, c), "a state table created before this column had none")
              for c in ADDED_COLUMNS)]


def state_ddl(target: str) -> exp.Create:
    """``CREATE TABLE IF NOT EXISTS "ice"."lakewrap"."<schema>__<name>" (...)``."""
    columns = [exp.ColumnDef(this=q.ident(c), kind=exp.DataType.build(t)) for c, t in STATE_COLUMNS]
    return exp.Create(this=exp.Schema(this=state_table(target), expressions=columns), kind="TABLE", exists=True)


def upgrade_state(target: str, column: str) -> exp.Alter:
    """``ALTER TABLE <state table> ADD COLUMN IF NOT EXISTS "<column>" <type>`` (a no-op when it has it)."""
    dtype = dict(STATE_COLUMNS)[column]
    col = exp.ColumnDef(this=q.ident(column), kind=exp.DataType.build(dtype), exists=True)
    return exp.Alter(this=state_table(target), kind="TABLE", actions=[col])


def record_state(target: str) -> exp.Insert:
    """``INSERT INTO <state table> BY NAME SELECT CAST($state_run_id AS VARCHAR) AS "run_id", ...``."""
    values = [exp.alias_(exp.cast(q.param(STATE_PREFIX + c), exp.DataType.build(t), copy=False), c, quoted=True,
                         copy=False) for c, t in STATE_COLUMNS]
    return exp.Insert(this=state_table(target), expression=exp.select(*values, copy=False), by_name=True)


# --- statements of the executor ------------------------------------------------------------------
# Built here because executors never build SQL. Endpoints and warehouse names are configuration
# (URLs without credentials, checked by lakewrap.config), escaped as string literals by sqlglot.


def attach(warehouse: str, endpoint: str, secret: str | None) -> str:
    """``ATTACH '<warehouse>' AS "ice" (TYPE iceberg, ENDPOINT '<uri>', AUTHORIZATION_TYPE 'none')``,
    or with ``SECRET <name>`` (a bearer token kept in a DuckDB secret) instead of no authorization."""
    auth = f"SECRET {q.render(q.ident(secret))}" if secret else "AUTHORIZATION_TYPE 'none'"
    return q.render(q.command("ATTACH", exp.Literal.string(warehouse), "AS", q.ident(CATALOG),
                              f"(TYPE iceberg, ENDPOINT {q.render(exp.Literal.string(endpoint))}, {auth})"))


def token_secret(name: str, token: str) -> str:
    """``CREATE OR REPLACE SECRET <name> (TYPE iceberg, TOKEN '...')``: holds a credential, never logged."""
    return q.render(q.command("CREATE", "OR REPLACE SECRET", q.ident(name),
                              f"(TYPE iceberg, TOKEN {q.render(exp.Literal.string(token))})"))


def detach() -> str:
    return q.render(q.command("DETACH", q.ident(CATALOG)))


def count_rows(target: str) -> str:
    schema, _, name = target.partition(".")
    return q.render(exp.select(q.count_star()).from_(lake_table(schema, name)))


def find_commit(target: str) -> str:
    """``SELECT count(*) FROM <state table> WHERE commit_id = $commit_id``: did an attempt land?"""
    return q.render(exp.select(q.count_star()).from_(state_table(target)).where(
        exp.EQ(this=q.col("commit_id"), expression=q.param("commit_id"))))


def latest_snapshot(target: str) -> str:
    """The id of the target's latest snapshot (``iceberg_snapshots``)."""
    schema, _, name = target.partition(".")
    snaps = exp.Table(this=exp.Anonymous(this="iceberg_snapshots", expressions=[lake_table(schema, name)]))
    return q.render(exp.select(q.col("snapshot_id")).from_(snaps).order_by(
        exp.Ordered(this=q.col("sequence_number"), desc=True)).limit(exp.Literal.number(1)))


def delete_all(target: str) -> str:
    """``DELETE FROM "ice"."schema"."name"`` (``--full-refresh``: computed as a first run)."""
    schema, _, name = target.partition(".")
    return q.render(exp.Delete(this=lake_table(schema, name)))


def describe(target: str) -> str:
    """``DESCRIBE "ice"."schema"."name"``: the target's columns and DuckDB types, in order.

    ``duckdb_columns()`` lists an attached Iceberg table as one placeholder column on DuckDB 1.5.5.
    """
    schema, _, name = target.partition(".")
    return q.render(exp.Describe(this=lake_table(schema, name)))
