"""SQL for provenance on a DuckLake: pinned reads, reproduction in scratch space, restores, and the
read-back queries of ``explain``.

Pure like every compiler module: statements are sqlglot ASTs rendered by :func:`q.render`; snapshot
ids are integer literals (DuckDB takes ``AT (VERSION => n)`` only as a constant), every other value
is a bound parameter.

Facts measured on DuckDB/DuckLake 1.5.5 that shape these statements:

* ``AT (VERSION => n)`` is accepted on a table reference in a CTE, a join, a subquery, an
  ``IN (SELECT ...)``, a ``CREATE TABLE ... AS`` and an ``INSERT ... SELECT``, and on a view
  (the view's tables are read at that version). It must follow the alias: ``t AS x AT (...)``
  (``t AT (...) AS x`` is a parser error), which is how sqlglot renders it.
* Inside a transaction that has written a table, a time-travel read of that table sees the
  transaction's own changes (after ``DELETE FROM t``, ``t AT (VERSION => n)`` is empty; after an
  INSERT it shows the new rows). A restore therefore stages the old rows *before* its first write.
"""

from __future__ import annotations

from collections.abc import Mapping

from sqlglot import exp

from lakewrap.compilers import sql as q
from lakewrap.compilers.artifacts import STAGE, CompiledStatement
from lakewrap.compilers.shape import window_bound

# The in-memory database ``lakewrap reproduce`` attaches and writes its copy of the target into.
SCRATCH = "lakewrap_scratch"
# Tables lakewrap's plans create for themselves (temporary): never pinned, never redirected.
INTERNAL_PREFIX = "__lakewrap_"

_WRITES = (exp.Create, exp.Insert, exp.Delete, exp.Update, exp.Merge)
# One snapshot for every read (DuckLake numbers snapshots globally), or one per table
# (``schema.name``, lower case: Iceberg snapshot ids are per table; a table not named is read live).
Versions = int | Mapping[str, int]


def parse(text: str) -> exp.Expr:
    import sqlglot

    tree = sqlglot.parse_one(text, read="duckdb")
    assert tree is not None
    return tree


def at_version(version: int) -> exp.HistoricalData:
    """``AT (VERSION => n)``."""
    return exp.HistoricalData(this="AT", kind="VERSION", expression=exp.Literal.number(version))


def _cte_names(tree: exp.Expr) -> set[str]:
    return {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}


def _written(tree: exp.Expr) -> exp.Table | None:
    """The table a write statement writes (its ``this``), if any."""
    if not isinstance(tree, _WRITES):
        return None
    node = tree.this
    if isinstance(node, exp.Schema):
        node = node.this
    return node if isinstance(node, exp.Table) else None


def _is_lake_table(tbl: exp.Table, ctes: set[str]) -> bool:
    """A plain reference to a table or view of the lake (not a CTE, a function, or lakewrap's temp tables)."""
    if not isinstance(tbl.this, exp.Identifier) or not tbl.name:
        return False
    if tbl.args.get("when") is not None:  # already read at a version: keep it
        return False
    if tbl.name.startswith(INTERNAL_PREFIX):
        return False
    return not (not tbl.db and tbl.name.lower() in ctes)


def is_target(tbl: exp.Table, target: tuple[str, str], catalog: str | None = None) -> bool:
    """Whether ``tbl`` names ``target`` (in ``catalog``: Iceberg through DuckDB names tables in three parts)."""
    schema, name = target
    return (tbl.name.lower() == name.lower() and (tbl.db or "main").lower() == schema.lower()
            and (tbl.catalog or "").lower() == (catalog or "").lower())


def _version(tbl: exp.Table, version: Versions) -> int | None:
    if isinstance(version, int):
        return version
    return version.get(f"{tbl.db or 'main'}.{tbl.name}".lower())


def pin_reads(text: str, version: Versions, target: tuple[str, str] | None = None,
              catalog: str | None = None) -> str:
    """Statement ``text`` with every read of a lake table at ``AT (VERSION => version)`` (or at
    ``version[schema.name]``: a table it does not name is left live).

    Left as they are: the table the statement writes, reads of ``target`` (the model's own table,
    which a run writes and reads live), CTE names, table functions, lakewrap's temporary tables and
    references that already name a version. Statements that are not reads or writes (``DROP``,
    ``ALTER``, commands) come back unchanged.
    """
    tree = parse(text)
    if isinstance(tree, exp.Command | exp.Drop | exp.Alter):
        return text
    written = _written(tree)
    ctes = _cte_names(tree)
    changed = False
    for tbl in list(tree.find_all(exp.Table)):
        if tbl is written or not _is_lake_table(tbl, ctes):
            continue
        if target is not None and is_target(tbl, target, catalog):
            continue
        if (pin := _version(tbl, version)) is None:
            continue
        tbl.set("when", at_version(pin))
        changed = True
    return q.render(tree) if changed else text


def scratch_statement(text: str, version: Versions, target: tuple[str, str],
                      catalog: str | None = None) -> str | None:
    """A recorded statement rewritten to run in scratch space: ``target`` (in ``catalog``) becomes
    the scratch copy ``lakewrap_scratch.<schema>.<name>``, every other lake table is read at
    ``version`` (see :func:`pin_reads`).

    None for statements a reproduction skips: commands (``ALTER TABLE ... SET PARTITIONED BY``, a
    physical layout), ``ALTER`` (the recorded schema changes are replayed by :func:`scratch_alter`)
    and ``CREATE SCHEMA``.
    """
    tree = parse(text)
    if isinstance(tree, exp.Command | exp.Alter):
        return None
    if isinstance(tree, exp.Create) and str(tree.args.get("kind") or "").upper() == "SCHEMA":
        return None
    ctes = _cte_names(tree)
    for tbl in list(tree.find_all(exp.Table)):
        if not isinstance(tbl.this, exp.Identifier) or not tbl.name:
            continue
        if tbl.args.get("when") is None and is_target(tbl, target, catalog):
            tbl.set("db", q.ident(target[0]))
            tbl.set("catalog", q.ident(SCRATCH))
        elif (_is_lake_table(tbl, ctes) and not isinstance(tree, exp.Drop)
              and (pin := _version(tbl, version)) is not None):
            tbl.set("when", at_version(pin))
    return q.render(tree)


def scratch_alter(text: str, target: tuple[str, str], catalog: str | None = None) -> str | None:
    """A recorded ``ALTER TABLE`` of ``target`` (an ``on_schema_change`` column change) applied to
    the scratch copy instead; None for anything else."""
    tree = parse(text)
    if not isinstance(tree, exp.Alter) or not isinstance(tree.this, exp.Table):
        return None
    if not is_target(tree.this, target, catalog):
        return None
    tree.this.set("db", q.ident(target[0]))
    tree.this.set("catalog", q.ident(SCRATCH))
    return q.render(tree)


# --- reproduction: scratch space and comparison ----------------------------------------------------


def attach_scratch() -> str:
    """``ATTACH ':memory:' AS lakewrap_scratch``."""
    return q.render(q.command("ATTACH", exp.Literal.string(":memory:"), "AS", q.ident(SCRATCH)))


def detach_scratch() -> str:
    return q.render(q.command("DETACH", q.ident(SCRATCH)))


def scratch_table(schema: str, name: str) -> exp.Table:
    return exp.Table(this=q.ident(name), db=q.ident(schema), catalog=q.ident(SCRATCH))


def probe_scratch(schema: str, name: str) -> str:
    """``SELECT * FROM lakewrap_scratch.s.t LIMIT 0``: the reproduction's columns."""
    return q.render(q.limit_zero(exp.select(exp.Star(), copy=False).from_(scratch_table(schema, name), copy=False)))


def scratch_schema(schema: str) -> str:
    return q.render(exp.Create(this=exp.Table(db=q.ident(schema), catalog=q.ident(SCRATCH)), kind="SCHEMA",
                               exists=True))


def lake_table(schema: str, name: str, catalog: str | None = None) -> exp.Table:
    """``"schema"."name"``, or ``"catalog"."schema"."name"``."""
    tbl = q.table(schema, name)
    if catalog is not None:
        tbl.set("catalog", q.ident(catalog))
    return tbl


def at(schema: str, name: str, version: int, catalog: str | None = None) -> exp.Table:
    """``"schema"."name" AT (VERSION => n)`` (in three parts with ``catalog``)."""
    tbl = lake_table(schema, name, catalog)
    tbl.set("when", at_version(version))
    return tbl


def probe(source: exp.Table) -> str:
    """``SELECT * FROM source LIMIT 0``: its columns."""
    return q.render(q.limit_zero(exp.select(exp.Star(), copy=False).from_(source, copy=False)))


def probe_at(schema: str, name: str, version: int, catalog: str | None = None) -> str:
    """``SELECT * FROM t AT (VERSION => n) LIMIT 0``: fails when the table did not exist then; gives its columns."""
    return q.render(q.limit_zero(exp.select(exp.Star(), copy=False).from_(at(schema, name, version, catalog),
                                                                          copy=False)))


def copy_to_scratch(schema: str, name: str, version: int, catalog: str | None = None) -> str:
    """``CREATE TABLE lakewrap_scratch.s.t AS SELECT * FROM s.t AT (VERSION => n)``."""
    select = exp.select(exp.Star(), copy=False).from_(at(schema, name, version, catalog), copy=False)
    return q.render(exp.Create(this=scratch_table(schema, name), kind="TABLE", expression=select))


def empty_scratch(schema: str, name: str) -> str:
    """``DELETE FROM lakewrap_scratch.s.t``: a ``--full-refresh`` on Iceberg through DuckDB deletes
    every row of the table in its transaction before the statements run."""
    return q.render(exp.Delete(this=scratch_table(schema, name)))


def _rows(source: exp.Table, columns: tuple[str, ...]) -> exp.Select:
    return exp.select(*(q.col(c) for c in columns), copy=False).from_(source, copy=False)


def only_in(left: exp.Table, right: exp.Table, columns: tuple[str, ...]) -> str:
    """How many rows of ``left`` are not in ``right``, as multisets (``EXCEPT ALL``)."""
    diff = exp.Except(this=_rows(left, columns), expression=_rows(right, columns), distinct=False)
    return q.render(exp.select(q.count_star(), copy=False).from_(diff.subquery(q.ident("diff"), copy=False),
                                                                 copy=False))


def content_digest(source: exp.Table, columns: tuple[str, ...]) -> str:
    """An order-independent digest: ``count(*)`` and the sum (as HUGEINT) of each row's ``hash(...)``."""
    row_hash = exp.Anonymous(this="hash", expressions=[q.col(c) for c in columns])
    total = exp.func("coalesce", exp.Sum(this=exp.cast(row_hash, exp.DataType.build("HUGEINT"), copy=False)),
                     exp.Literal.number(0))
    return q.render(exp.select(q.count_star(), total, copy=False).from_(source, copy=False))


# --- restore ---------------------------------------------------------------------------------------


def restore_statements(schema: str, name: str, version: int, key: str | None,
                       catalog: str | None = None) -> tuple[CompiledStatement, ...]:
    """Put the rows ``schema.name`` (in ``catalog``) held at snapshot ``version`` back, as new writes.

    With ``key`` only the rows whose ``key`` falls in ``[$partition_start, $partition_end)`` are
    replaced (one partition); without it, every row. The old rows are staged before the DELETE (see
    the module docs: after a write, time travel of the same table in the transaction sees it).
    """
    def window() -> exp.Expr | None:
        if key is None:
            return None
        return exp.and_(exp.GTE(this=q.col(key), expression=window_bound("partition_start")),
                        exp.LT(this=q.col(key), expression=window_bound("partition_end")), copy=False)

    old = exp.select(exp.Star(), copy=False).from_(at(schema, name, version, catalog), copy=False)
    if (cond := window()) is not None:
        old = old.where(cond, copy=False)
    stage = exp.Create(this=q.table(None, STAGE), kind="TABLE", replace=True,
                       properties=exp.Properties(expressions=[exp.TemporaryProperty()]), expression=old)
    delete = exp.Delete(this=lake_table(schema, name, catalog))
    if (cond := window()) is not None:
        delete.set("where", exp.Where(this=cond))
    insert = exp.Insert(this=lake_table(schema, name, catalog), by_name=True,
                        expression=exp.select(exp.Star(), copy=False).from_(q.table(None, STAGE), copy=False))
    what = "the partition's rows" if key else "every row"
    return (
        CompiledStatement(role="stage", sql=q.render(stage), note=f"{what} as of snapshot {version}"),
        CompiledStatement(role="write", sql=q.render(delete), note=f"remove {what} as they are now",
                          effect="delete"),
        CompiledStatement(role="write", sql=q.render(insert), note=f"put back {what} of snapshot {version}",
                          effect="insert"),
        CompiledStatement(role="cleanup", sql=q.render(exp.Drop(tables=[q.table(None, STAGE)], kind="TABLE",
                                                                exists=True))),
    )


# --- read-back queries -----------------------------------------------------------------------------

MATERIALIZATION_COLUMNS = ("run_id", "model", "target", "partition_value", "window_start", "window_end",
                           "strategy", "rows_inserted", "rows_updated", "rows_deleted", "sql_sha256", "pins",
                           "committed_at", "snapshot_id", "author", "commit_message", "commit_extra_info")


def materializations(alias: str, by: str) -> str:
    """lakewrap's materializations joined to the snapshot that committed each, where ``by`` (``run_id``,
    ``target`` or ``snapshot_id``) equals ``$value``, oldest first."""
    cols = [q.col(c, "m") for c in MATERIALIZATION_COLUMNS[:13]]
    cols += [q.col(c, "s") for c in MATERIALIZATION_COLUMNS[13:]]

    def info(field: str) -> exp.Expr:
        return exp.func("json_extract_string", q.col("commit_extra_info", "s"), exp.Literal.string(f"$.{field}"))

    on = exp.and_(
        exp.EQ(this=info("run_id"), expression=q.col("run_id", "m")),
        exp.EQ(this=info("target"), expression=q.col("target", "m")),
        exp.or_(exp.EQ(this=exp.func("coalesce", info("partition"), q.string("")),
                       expression=exp.func("coalesce", q.col("partition_value", "m"), q.string(""))),
                # a batch of a range backfill: one commit for all of its partitions
                exp.func("list_contains", info("batch[*]"), q.col("partition_value", "m")), copy=False),
        copy=False,
    )
    from lakewrap.compilers.lake import member_snapshots

    snapshots = member_snapshots(alias)  # a group commit: each member's own entry (docs/running.md)
    snapshots.set("alias", exp.TableAlias(this=q.ident("s")))
    source = q.aliased(q.table("lakewrap", "materializations"), "m")
    where = exp.EQ(this=q.col(by, "s" if by == "snapshot_id" else "m"), expression=q.param("value"))
    select = (exp.select(*cols, copy=False).from_(source, copy=False)
              .join(q.left_join(snapshots, on), copy=False).where(where, copy=False)
              .order_by(q.col("committed_at", "m"), q.col("target", "m"), q.col("partition_value", "m"), copy=False))
    return q.render(select)


def snapshot(alias: str) -> str:
    """One DuckLake snapshot's id, author, message and extra info (``$value``)."""
    snapshots = exp.Table(this=exp.Anonymous(this="snapshots"), db=q.ident(alias))
    return q.render(exp.select(q.col("snapshot_id"), q.col("author"), q.col("commit_message"),
                               q.col("commit_extra_info"), copy=False).from_(snapshots, copy=False)
                    .where(exp.EQ(this=q.col("snapshot_id"), expression=q.param("value")), copy=False))


def compiled_statements() -> str:
    """The statements stored for ``$sql_sha256``."""
    return q.render(exp.select(q.col("statements"), copy=False).from_(q.table("lakewrap", "compiled_sql"), copy=False)
                    .where(exp.EQ(this=q.col("sql_sha256"), expression=q.param("sql_sha256")), copy=False)
                    .limit(exp.Literal.number(1), copy=False))


# --- Iceberg: a commit replayed in the scratch session, and a restore ------------------------------
# A reproduction applies the commit operation the executor handed to pyiceberg to a temporary copy:
# the base rows the delete filter keeps, then the appended rows (``docs/provenance.md``, Iceberg).

REPRO = "__lakewrap_reproduced"
# The rows of the snapshot a restore puts back, registered as an Arrow table in the scratch session.
RESTORE_SOURCE = "__lakewrap_restore_source"


def repro_table() -> exp.Table:
    return q.table(None, REPRO)


def empty_like(name: str, source: exp.Table) -> str:
    """``CREATE OR REPLACE TEMPORARY TABLE name AS SELECT * FROM source LIMIT 0`` (its columns and types)."""
    select = q.limit_zero(exp.select(exp.Star(), copy=False).from_(source, copy=False))
    return q.render(exp.Create(this=q.table(None, name), kind="TABLE", replace=True,
                               properties=exp.Properties(expressions=[exp.TemporaryProperty()]), expression=select))


def kept_rows(into: str, schema: str, name: str, delete_where: str | None) -> str:
    """``INSERT INTO into BY NAME SELECT * FROM source [WHERE NOT COALESCE((delete_where), FALSE)]``:
    the rows an Iceberg overwrite with that filter keeps (a row the filter is NULL for is kept)."""
    select = exp.select(exp.Star(), copy=False).from_(q.table(schema, name), copy=False)
    if delete_where is not None:
        import sqlglot

        condition = sqlglot.condition(delete_where, dialect="duckdb")
        cond = exp.func("coalesce", exp.paren(condition, copy=False), exp.false())
        select = select.where(exp.Not(this=cond), copy=False)
    return q.render(exp.Insert(this=q.table(None, into), by_name=True, expression=select))


def appended_rows(into: str, rows: str) -> str:
    """``INSERT INTO into BY NAME <rows>``: the rows the commit appended (``rows`` is the commit's SELECT)."""
    return q.render(exp.Insert(this=q.table(None, into), by_name=True, expression=parse(rows)))


def iceberg_restore(key: str | None, version: int, target: str) -> tuple[tuple[CompiledStatement, ...], str, str]:
    """An Iceberg restore: the stage statement, the commit's delete filter and its rows' SELECT.

    The rows of snapshot ``version`` are registered as :data:`RESTORE_SOURCE`; with ``key`` only
    those in ``[$partition_start, $partition_end)`` are staged, and the overwrite's filter is the
    same window (else every row: ``TRUE``).
    """
    source = exp.select(exp.Star(), copy=False).from_(q.table(None, RESTORE_SOURCE), copy=False)
    cond: exp.Expr = exp.true()
    if key is not None:
        cond = exp.and_(exp.GTE(this=q.col(key), expression=window_bound("partition_start")),
                        exp.LT(this=q.col(key), expression=window_bound("partition_end")), copy=False)
        source = source.where(cond.copy(), copy=False)
    stage = exp.Create(this=q.table(None, STAGE), kind="TABLE", replace=True,
                       properties=exp.Properties(expressions=[exp.TemporaryProperty()]), expression=source)
    what = "the partition's rows" if key else "every row"
    note = f"{what} of {target} as of snapshot {version} ({RESTORE_SOURCE}: pyiceberg scan(snapshot_id={version}))"
    statements = (CompiledStatement(role="stage", sql=q.render(stage), note=note),)
    rows = q.render(exp.select(exp.Star(), copy=False).from_(q.table(None, STAGE), copy=False))
    return statements, q.render(cond), rows
