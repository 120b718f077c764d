"""``-- on_schema_change``: compare the result's columns with the live table, and what to do about it.

Which columns differ is only known when the transaction runs (the table may have been changed by
another model, a person or a previous version of this one), so the comparison is made by the
executor inside the materialization's transaction, before the first write:

1. :func:`columns_query` lists the columns (name, DuckDB type) of the staged result and of the
   target, in that same transaction;
2. :func:`resolve` (pure Python) compares them under the model's mode and returns the statements to
   run (``ALTER TABLE``) or raises :class:`SchemaChangeError` naming every difference.

Everything here is pure (ASTs in, text out), so an Iceberg compiler can reuse :func:`drift` and
:func:`fits` with its own type names and emit its own schema updates.

DuckDB would coerce silently what lakewrap refuses (measured on 1.5.5: DOUBLE 1.7 stored as INTEGER
2, TIMESTAMP stored as DATE, and a renamed column written positionally). Writes are always by
name, so a reorder of columns is never a change.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lakewrap.compilers.artifacts import SchemaCheck
from lakewrap.errors import ExecutionError, Location
from lakewrap.plan import Plan
from lakewrap.spec import MergeStrategy, SnapshotStrategy

if TYPE_CHECKING:
    from sqlglot import exp

    from lakewrap.compilers.base import Compiler
    from lakewrap.compilers.shape import Shape

RESULT = "__lakewrap_result"
CHECKED = ("delete+insert", "merge", "append", "snapshot")

Column = tuple[str, str]  # (name, DuckDB type as duckdb_columns() spells it)


class SchemaChangeError(ExecutionError):
    """The result's columns differ from the table's in a way ``on_schema_change`` does not allow."""


def check_for(plan: Plan, compiler: Compiler, shapes: Sequence[Shape]) -> SchemaCheck | None:
    """The comparison ``run`` makes for this plan; None for rebuilds, views and literal models."""
    from lakewrap.compilers.artifacts import STAGE

    spec = plan.model
    if spec.strategy.kind not in CHECKED:
        return None
    from lakewrap.compilers.shape import stages_result

    staged = any(stages_result(s) for s in shapes)
    managed: tuple[str, ...] = ()
    named: tuple[str, ...] = ()
    if isinstance(spec.strategy, SnapshotStrategy):
        managed = ("valid_from", "valid_to", "is_current") + (
            ("is_deleted",) if spec.strategy.hard_deletes == "new_record" else ())
    if isinstance(spec.strategy, MergeStrategy | SnapshotStrategy):
        named = plan.columns or ()
    return SchemaCheck(mode=spec.on_schema_change, relation=STAGE if staged else None, managed=managed, named=named)


# --- SQL the executor runs ------------------------------------------------------------------------
# Each builder imports sqlglot itself: the executor reaches these through lakewrap.execute.statements,
# so a run whose schema did not drift takes them from the compile cache and never imports sqlglot.


def columns_query() -> str:
    """Columns of ``$schema.$name`` in database ``$database`` (the lake's when NULL), in order."""
    from sqlglot import exp

    from lakewrap.compilers import sql as q

    db = exp.func("coalesce", q.param("database"), exp.func("current_database"))
    return q.render(
        exp.select(exp.column("column_name"), exp.column("data_type"))
        .from_(exp.Table(this=exp.Anonymous(this="duckdb_columns")))
        .where(q.and_all([
            exp.EQ(this=exp.column("database_name"), expression=db),
            exp.EQ(this=exp.column("schema_name"), expression=q.param("schema")),
            exp.EQ(this=exp.column("table_name"), expression=q.param("name")),
        ]))
        .order_by(exp.column("column_index"))
    )


def stage_result(bootstrap_sql: str) -> str:
    """``CREATE OR REPLACE TEMPORARY TABLE __lakewrap_result AS SELECT * FROM (<SELECT>) LIMIT 0``:
    the result's schema, without rows, for a plan that stages nothing.

    The query is the plan's own first-run bootstrap (``CREATE TABLE IF NOT EXISTS <target> AS
    SELECT * FROM (<SELECT>) LIMIT 0``), re-targeted at a temporary table: parsed here, when a run
    needs it, so compiling costs nothing extra.
    """
    import sqlglot
    from sqlglot import exp

    from lakewrap.compilers import sql as q

    create = sqlglot.parse_one(bootstrap_sql, read="duckdb")
    query = create.args.get("expression") if isinstance(create, exp.Create) else None
    if not isinstance(query, exp.Query):
        raise ValueError(f"not a CREATE TABLE ... AS SELECT: {bootstrap_sql[:80]}")
    return q.render(exp.Create(this=q.table(None, RESULT), kind="TABLE", replace=True,
                               properties=exp.Properties(expressions=[exp.TemporaryProperty()]),
                               expression=query))


def describe(database: str | None, schema: str, name: str) -> str:
    """``DESCRIBE <database>.<schema>.<name>``: a table's columns and types, as ``duckdb_columns()``
    spells them. Unlike ``duckdb_columns()``, which loads every table of every attached catalog
    (13-22 ms on a DuckLake of 26 tables, more on larger lakes), it loads only this table -- and
    fails, aborting the transaction, when the table does not exist."""
    from sqlglot import exp

    from lakewrap.compilers import sql as q

    tbl = q.table(schema, name)
    if database is not None:
        tbl.set("catalog", q.ident(database))
    return q.render(exp.Describe(this=tbl))


def drop_result() -> str:
    from sqlglot import exp

    from lakewrap.compilers import sql as q

    return q.render(exp.Drop(tables=[q.table(None, RESULT)], kind="TABLE", exists=True))


def _dtype(text: str) -> exp.DataType:
    from sqlglot import exp

    return exp.DataType.build(text, dialect="duckdb")


def _target(schema: str | None, table: str, catalog: str | None) -> exp.Table:
    """``"schema"."table"``, in three parts with ``catalog`` (Iceberg through DuckDB SQL)."""
    from lakewrap.compilers import sql as q

    tbl = q.table(schema, table)
    if catalog is not None:
        tbl.set("catalog", q.ident(catalog))
    return tbl


def add_column(schema: str | None, table: str, name: str, dtype: str, catalog: str | None = None) -> str:
    """``ALTER TABLE t ADD COLUMN c <type>``."""
    from sqlglot import exp

    from lakewrap.compilers import sql as q

    col = exp.ColumnDef(this=q.ident(name), kind=_dtype(dtype))
    return q.render(exp.Alter(this=_target(schema, table, catalog), kind="TABLE", actions=[col]))


def drop_column(schema: str | None, table: str, name: str, catalog: str | None = None) -> str:
    """``ALTER TABLE t DROP COLUMN c``."""
    from sqlglot import exp

    from lakewrap.compilers import sql as q

    return q.render(exp.Alter(this=_target(schema, table, catalog), kind="TABLE",
                              actions=[exp.Drop(tables=[q.col(name)], kind="COLUMN")]))


def widen_column(schema: str | None, table: str, name: str, dtype: str, catalog: str | None = None) -> str:
    """``ALTER TABLE t ALTER COLUMN c SET DATA TYPE <type>`` (DuckLake accepts widening promotions only)."""
    from sqlglot import exp

    from lakewrap.compilers import sql as q

    return q.render(exp.Alter(this=_target(schema, table, catalog), kind="TABLE",
                              actions=[exp.AlterColumn(this=q.ident(name), dtype=_dtype(dtype))]))


def rename_column(schema: str | None, table: str, name: str, to: str, catalog: str | None = None) -> str:
    """``ALTER TABLE t RENAME COLUMN c TO d``."""
    from sqlglot import exp

    from lakewrap.compilers import sql as q

    return q.render(exp.Alter(this=_target(schema, table, catalog), kind="TABLE",
                              actions=[exp.RenameColumn(this=q.col(name), to=q.col(to))]))


# --- comparing ------------------------------------------------------------------------------------


@dataclass
class Drift:
    """How the result's columns differ from the table's (names compared case-insensitively)."""

    added: list[Column] = field(default_factory=list)  # in the result, not in the table
    removed: list[Column] = field(default_factory=list)  # in the table, not in the result
    changed: list[tuple[str, str, str]] = field(default_factory=list)  # (name, table type, result type)

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.changed)

    def describe(self) -> list[str]:
        out = [f"new column `{n}` ({t})" for n, t in self.added]
        out += [f"column `{n}` ({t}) is no longer returned" for n, t in self.removed]
        out += [f"column `{n}` is {was} in the table but the SELECT returns {now}" for n, was, now in self.changed]
        return out


def drift(result: Sequence[Column], table: Sequence[Column], managed: Sequence[str] = ()) -> Drift:
    """Compare by name; order does not matter (every write is by name). ``managed`` columns (SCD2's)
    are lakewrap's on both sides (a result read from the bootstrap query carries them too)."""
    skip = {m.lower() for m in managed}
    have = {n.lower(): (n, t) for n, t in table if n.lower() not in skip}
    got = {n.lower(): (n, t) for n, t in result if n.lower() not in skip}
    out = Drift()
    for key, (name, dtype) in got.items():
        if key not in have:
            out.added.append((name, dtype))
        elif have[key][1] != dtype:
            out.changed.append((name, have[key][1], dtype))
    out.removed = [col for key, col in have.items() if key not in got]
    return out


_SIGNED = {"TINYINT": 1, "SMALLINT": 2, "INTEGER": 4, "BIGINT": 8, "HUGEINT": 16}
_UNSIGNED = {"UTINYINT": 1, "USMALLINT": 2, "UINTEGER": 4, "UBIGINT": 8, "UHUGEINT": 16}
_DIGITS = {1: 3, 2: 5, 4: 10, 8: 20, 16: 39}  # decimal digits an integer of n bytes may need
DECIMAL = re.compile(r"^DECIMAL\((\d+),\s*(\d+)\)$")


def _int_bytes(t: str) -> tuple[int, bool] | None:
    if t in _SIGNED:
        return _SIGNED[t], True
    if t in _UNSIGNED:
        return _UNSIGNED[t], False
    return None


def fits(src: str, dst: str) -> bool:
    """Whether every value of DuckDB type ``src`` is stored exactly in a column of type ``dst``."""
    if src == dst:
        return True
    s, d = _int_bytes(src), _int_bytes(dst)
    if s is not None and d is not None:
        (sb, ss), (db, ds) = s, d
        return sb <= db if ss == ds else (not ss and ds and sb < db)
    if s is not None and dst in ("FLOAT", "DOUBLE"):
        return s[0] <= (2 if dst == "FLOAT" else 4)
    if src == "FLOAT" and dst == "DOUBLE":
        return True
    dm = DECIMAL.match(dst)
    if dm is not None:
        p2, s2 = int(dm.group(1)), int(dm.group(2))
        sm = DECIMAL.match(src)
        if sm is not None:
            p1, s1 = int(sm.group(1)), int(sm.group(2))
            return s2 >= s1 and p2 - s2 >= p1 - s1
        if s is not None:
            return p2 - s2 >= _DIGITS[s[0]]
    return src == "DATE" and dst == "TIMESTAMP"


@dataclass
class Changes:
    """What ``on_schema_change`` makes of a drift, before it is rendered for a substrate."""

    add: list[Column] = field(default_factory=list)  # columns added to the table
    widen: list[Column] = field(default_factory=list)  # (name, new type) of columns the table widens
    drop: list[str] = field(default_factory=list)  # columns dropped from the table
    leave_out: list[str] = field(default_factory=list)  # new columns left out of the staged result

    def __bool__(self) -> bool:
        return bool(self.add or self.widen or self.drop or self.leave_out)

    def describe(self) -> list[str]:
        return ([f"add column {n} {t}" for n, t in self.add] + [f"widen column {n} to {t}" for n, t in self.widen]
                + [f"drop column {n}" for n in self.drop] + [f"leave new column {n} out" for n in self.leave_out])


def changes(check: SchemaCheck, path: str, target: tuple[str, str], result: Sequence[Column],
            table: Sequence[Column], widens: Callable[[str, str], bool] | None = None,
            substrate: str = "DuckLake") -> Changes:
    """What makes the write valid under ``check.mode``, or a :class:`SchemaChangeError`.

    ``target`` is (schema, name); ``result`` and ``table`` are the two column lists. An empty
    ``table`` means the target does not exist yet (the first run creates it from the result).
    ``widens(was, now)`` says whether the substrate can change a column's type from ``was`` to
    ``now`` in place (default: every exact widening, as DuckLake does).

    | change | fail | append_new_columns | sync_all_columns | ignore |
    |---|---|---|---|---|
    | new column | error | added to the table | added | left out of the write |
    | column no longer returned | error | kept, NULL in written rows | dropped from the table | kept, NULL |
    | type the table holds exactly | error | written | written | written |
    | type the table cannot hold exactly | error | error | column widened (if the substrate can) | error |
    """
    out = Changes()
    if not table:
        return out
    d = drift(result, table, check.managed)
    if not d:
        return out
    where = Location(path)
    label = f"{target[0]}.{target[1]}"
    problems = d.describe()
    if check.mode == "fail":
        raise SchemaChangeError(
            f"the SELECT's columns differ from table {label}: " + "; ".join(problems) + " (nothing was written)",
            location=where,
            hint="add `-- on_schema_change append_new_columns|sync_all_columns|ignore` to the model to accept "
            "such changes, or rebuild the table with `lakewrap run --full-refresh`",
        )
    widens = widens or fits
    for col, was, now in d.changed:
        if fits(now, was):
            continue  # the table's column holds every value of the result's type exactly
        if check.mode == "sync_all_columns" and fits(was, now):
            if widens(was, now):
                out.widen.append((col, now))
                continue
            raise SchemaChangeError(
                f"column `{col}` is {was} in table {label} but the SELECT returns {now}, and {substrate} cannot "
                f"change a column from {was} to {now} in place (nothing was written)",
                location=where,
                hint=f"cast `{col}` to {was} in the SELECT, or rebuild the table with `lakewrap run --full-refresh`",
            )
        raise SchemaChangeError(
            f"column `{col}` is {was} in table {label} but the SELECT returns {now}: writing it would convert "
            f"values (on_schema_change {check.mode}; nothing was written)",
            location=where,
            hint=f"cast `{col}` to {was} in the SELECT, use `-- on_schema_change sync_all_columns` to widen the "
            "column, or rebuild the table with `lakewrap run --full-refresh`",
        )
    named = {c.lower() for c in check.named}
    for col, dtype in d.added:
        if check.mode in ("append_new_columns", "sync_all_columns"):
            out.add.append((col, dtype))
        elif check.relation is None or col.lower() in named:
            raise SchemaChangeError(
                f"new column `{col}` ({dtype}) is not in table {label}, and on_schema_change ignore cannot leave it "
                "out of this model's write (nothing was written)",
                location=where,
                hint=f"remove `{col}` from the SELECT, or use `-- on_schema_change append_new_columns`",
            )
        else:
            out.leave_out.append(col)  # the staged copy only: the table is untouched
    if check.mode == "sync_all_columns":
        out.drop = [col for col, _ in d.removed]
    return out


def resolve(check: SchemaCheck, path: str, target: tuple[str, str], result: Sequence[Column],
            table: Sequence[Column], widens: Callable[[str, str], bool] | None = None,
            substrate: str = "DuckLake", catalog: str | None = None) -> list[str]:
    """The DuckDB statements that make the write valid (see :func:`changes`), in the order DuckLake
    needs them: widen, add, leave out of the stage, drop. ``catalog`` names the target in three
    parts (Iceberg through DuckDB SQL)."""
    c = changes(check, path, target, result, table, widens, substrate)
    schema, name = target
    out = [widen_column(schema, name, col, dtype, catalog) for col, dtype in c.widen]
    out += [add_column(schema, name, col, dtype, catalog) for col, dtype in c.add]
    assert not c.leave_out or check.relation is not None
    out += [drop_column(None, check.relation, col) for col in c.leave_out]  # type: ignore[arg-type]
    out += [drop_column(schema, name, col, catalog) for col in c.drop]
    return out


RETYPED = "__lakewrap_retyped_"  # the temporary name of a retyped column's replacement


def replace_columns(target: tuple[str, str], result: Sequence[Column], table: Sequence[Column],
                    managed: Sequence[str] = (), widens: Callable[[str, str], bool] | None = None,
                    catalog: str | None = None, renew: str | None = None) -> list[str]:
    """The ``ALTER TABLE`` statements that give ``table`` the result's columns, as ``CREATE OR
    REPLACE`` would: a full rebuild on a substrate without it (Iceberg through DuckDB SQL), run in
    the rebuild's transaction before its writes. ``managed`` columns (SCD2's) are kept.

    New columns are added first, a retyped column is replaced (widened in place when ``widens(was,
    now)``, else added under a temporary name, dropped, and the new one renamed), and lost columns
    are dropped last. The order matters on DuckDB-Iceberg 1.5.5: an ``ALTER`` that brings the table
    back to a schema it had before reuses that schema's id, and the next ``ALTER`` then fails
    ("Attempted to add schema with id n, but this already exists"); once a column with a new field
    id is in the table, no later step can match an earlier schema. When only drops remain and they
    would lead back to an earlier schema, the executor names a kept column to ``renew``: it is
    replaced like a retyped one, with its own type (a rebuild deletes every row anyway).
    """
    schema, name = target
    d = drift(result, table, managed)
    widens = widens or fits
    out = [add_column(schema, name, col, dtype, catalog) for col, dtype in d.added]
    for col, was, now in d.changed:
        if widens(was, now):
            out.append(widen_column(schema, name, col, now, catalog))
            continue
        out += [add_column(schema, name, RETYPED + col, now, catalog), drop_column(schema, name, col, catalog),
                rename_column(schema, name, RETYPED + col, col, catalog)]
    types = {n.lower(): t for n, t in table}
    if renew is not None:
        out += [add_column(schema, name, RETYPED + renew, types[renew.lower()], catalog),
                drop_column(schema, name, renew, catalog), rename_column(schema, name, RETYPED + renew, renew, catalog)]
    out += [drop_column(schema, name, col, catalog) for col, _ in d.removed]
    return out
