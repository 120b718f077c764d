"""Hostile identifiers never escape their quotes: rendered, re-parsed, and run against a real DuckLake."""

from __future__ import annotations

import itertools
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import duckdb
import pytest
import sqlglot
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from sqlglot import exp

from lakewrap.compile import compile_project
from lakewrap.compilers import sql as q

UTC = timezone.utc
RESERVED = ("select", "order", "group", "at", "from", "table", "SELECT", "Order", "where", "union", "main", "lake")
PIECES = (
    '"',
    '""',
    "'",
    ";",
    "--",
    "/*",
    "*/",
    "\n",
    "\r\n",
    "\\",
    '\\"',
    " ",
    "\t",
    "$1",
    "?",
    ":x",
    "é",
    "ß",
    "🎉",
    "\u202e",
    "字",
    ".",
    ",",
    "=",
    "(",
    ")",
    "DROP TABLE main.sentinel",
    *RESERVED,
)
# str.splitlines() separators: model files are read line by line, so header names cannot hold them.
LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
_chars = st.characters(codec="utf-8", exclude_characters="\x00")
names = st.one_of(
    st.sampled_from(RESERVED),
    st.lists(st.one_of(st.sampled_from(PIECES), st.text(_chars, min_size=1, max_size=4)), min_size=1, max_size=6).map(
        "".join
    ),
)
# Names a model header can carry (no line breaks) and names DuckDB sees as a catalog when used as a
# schema (`"lake"."t"` is ambiguous; DuckDB refuses it).
header_names = names.map(lambda n: "".join(c for c in n if c not in LINE_BREAKS)).filter(bool)
CATALOGS = {"lake", "memory", "system", "temp", "main", "information_schema", "pg_catalog"}


def sql_of(node: exp.Expr) -> str:
    return q.render(node)


# --- (a) render and re-parse ----------------------------------------------------------------------

_MEMORY = duckdb.connect()


@settings(max_examples=400, deadline=None)
@given(name=names)
def test_ident_reparses_to_the_same_single_identifier(name: str) -> None:
    rendered = sql_of(q.ident(name))
    tree = sqlglot.parse_one(rendered, read="duckdb")
    idents = list(tree.find_all(exp.Identifier))
    assert len(idents) == 1
    assert idents[0].name == name and idents[0].quoted
    # DuckDB itself reads the same single name (one output column, nothing else executed).
    rel = _MEMORY.execute(f"SELECT 1 AS {rendered}")
    assert [d[0] for d in rel.description] == [name]
    assert rel.fetchall() == [(1,)]


@settings(max_examples=400, deadline=None)
@given(schema=names, name=names, column=names, alias=names)
def test_table_and_column_reparse_to_their_parts(schema: str, name: str, column: str, alias: str) -> None:
    select = exp.select(q.col(column, alias)).from_(q.aliased(q.table(schema, name), alias))
    tree = sqlglot.parse_one(sql_of(select), read="duckdb")
    assert isinstance(tree, exp.Select)
    tables = list(tree.find_all(exp.Table))
    assert len(tables) == 1
    assert (tables[0].db, tables[0].name, tables[0].alias) == (schema, name, alias)
    (projection,) = tree.expressions
    assert isinstance(projection, exp.Column)
    assert (projection.table, projection.name) == (alias, column)
    assert len(list(tree.find_all(exp.Identifier))) == 5
    # DuckDB agrees: the qualified column binds to the aliased subquery's column.
    inner = exp.select(exp.alias_(exp.Literal.number(7), column, quoted=True)).subquery(q.ident(alias))
    rows = _MEMORY.execute(sql_of(exp.select(q.col(column, alias)).from_(inner))).fetchall()
    assert rows == [(7,)]


@settings(max_examples=200, deadline=None)
@given(value=names)
def test_string_literals_stay_literals(value: str) -> None:
    """Guard messages embed names in string literals: DuckDB reads back exactly the text."""
    rendered = sql_of(exp.select(q.string(value)))
    assert _MEMORY.execute(rendered).fetchall() == [(value,)]


# --- (b) DDL against a real DuckLake --------------------------------------------------------------


def lake_columns(con: Any, schema: str = "main") -> set[tuple[str, str]]:
    rows = con.execute(
        "SELECT table_name, column_name FROM duckdb_columns() WHERE database_name = 'lake' AND schema_name = ?",
        [schema],
    ).fetchall()
    return {(t, c) for t, c in rows}


def lake_tables(con: Any) -> set[tuple[str, str]]:
    rows = con.execute(
        "SELECT table_schema, table_name FROM information_schema.tables WHERE table_catalog = 'lake'"
    ).fetchall()
    return {(s, t) for s, t in rows}


def create_table(schema: str, name: str, columns: dict[str, str]) -> str:
    return sql_of(
        exp.Create(
            this=exp.Schema(
                this=q.table(schema, name),
                expressions=[exp.ColumnDef(this=q.ident(c), kind=exp.DataType.build(t)) for c, t in columns.items()],
            ),
            kind="TABLE",
        )
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=names, column=names)
def test_hostile_table_and_column_in_ducklake(ducklake: Any, name: str, column: str) -> None:
    assume(name.lower() != "sentinel")
    con = ducklake
    con.execute("CREATE TABLE IF NOT EXISTS main.sentinel AS SELECT 1 AS x")
    before = lake_tables(con)
    tbl = q.table("main", name)
    try:
        con.execute(create_table("main", name, {column: "INTEGER"}))
        con.execute(sql_of(exp.Insert(this=tbl, expression=exp.select(exp.Literal.number(42)))))
        assert lake_columns(con) == {("sentinel", "x"), (name, column)}
        assert lake_tables(con) == before | {("main", name)}
        assert con.execute(sql_of(exp.select(q.col(column)).from_(tbl))).fetchall() == [(42,)]
        con.execute(sql_of(exp.Drop(tables=[tbl], kind="TABLE")))
        assert lake_columns(con) == {("sentinel", "x")}
        assert con.execute("SELECT x FROM main.sentinel").fetchall() == [(1,)]
    finally:  # a failing example must not leave state behind for the next one (or the shrinker)
        con.execute(sql_of(exp.Drop(tables=[tbl], kind="TABLE", exists=True)))


# --- (c) a whole model with hostile names, compiled and run ---------------------------------------


def dq(name: str) -> str:
    """A SQL-style double-quoted name, as written in a model header."""
    return '"' + name.replace('"', '""') + '"'


def sq(text: str) -> str:
    """A single-quoted header value (a doubled quote stands for itself)."""
    return "'" + text.replace("'", "''") + "'"


ROWS = [
    (1, datetime(2024, 1, 1, 23, 59, 59, tzinfo=UTC)),  # the day before
    (2, datetime(2024, 1, 2, tzinfo=UTC)),
    (3, datetime(2024, 1, 2, 12, tzinfo=UTC)),
    (4, datetime(2024, 1, 2, 23, 59, 59, tzinfo=UTC)),
    (5, datetime(2024, 1, 3, tzinfo=UTC)),  # the day after
]
_counter = itertools.count()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    schema=header_names.filter(lambda s: s.lower() not in CATALOGS),
    table=header_names,
    key=header_names,
    value_col=names.map(lambda n: "".join(c for c in n if c not in LINE_BREAKS.replace("\n", ""))).filter(bool),
)
def test_model_with_hostile_names_compiles_and_runs(
    ducklake: Any, tmp_path: Path, schema: str, table: str, key: str, value_col: str
) -> None:
    assume(key.lower() != value_col.lower())
    # A body line that reads like an annotation (`-- append` inside a quoted name) is refused on
    # purpose; that is not what this test is about.
    assume(not any(line.lstrip().startswith("--") for line in value_col.split("\n")[1:]))
    con = ducklake
    con.execute("CREATE TABLE IF NOT EXISTS main.sentinel AS SELECT 1 AS x")
    con.execute("DROP TABLE IF EXISTS main.src")
    con.execute(create_table("main", "src", {value_col: "INTEGER", key: "TIMESTAMPTZ"}))
    insert = exp.Insert(
        this=q.table("main", "src"),
        expression=exp.Values(expressions=[exp.Tuple(expressions=[exp.Placeholder(), exp.Placeholder()])]),
    )
    con.executemany(sql_of(insert), ROWS)

    root = tmp_path / f"project{next(_counter)}"
    (root / "models").mkdir(parents=True)
    v, k = sql_of(q.ident(value_col)), sql_of(q.ident(key))
    model = (
        "-- materialized incremental\n"
        f"-- target {dq(schema)}.{dq(table)}\n"
        f"-- partitioned daily key={sq(dq(key))}\n"
        f"SELECT {v}, {k}\nFROM main.src\nWHERE {k} >= $partition_start AND {k} < $partition_end\n"
    )
    (root / "models" / "m.sql").write_text(model, encoding="utf-8")
    (plan,) = compile_project(root, partition="2024-01-02", use_cache=False)
    assert plan.target == f"{schema}.{table}"

    def run() -> None:
        con.execute("BEGIN")
        try:
            for st in plan.statements:
                con.execute(st.sql, {name: p.python() for name, p in st.params.items()})
        except BaseException:
            con.execute("ROLLBACK")
            raise
        con.execute("COMMIT")

    target = q.table(schema, table)
    try:
        run()
        run()  # re-run safe: the window's rows are replaced, not duplicated
        got = con.execute(sql_of(exp.select(q.col(value_col), q.col(key)).from_(target).order_by(q.col(value_col))))
        assert got.fetchall() == ROWS[1:4]
        assert lake_columns(con, schema) == {(table, value_col), (table, key)}
        assert lake_tables(con) == {("main", "sentinel"), ("main", "src"), (schema, table)}
        assert con.execute("SELECT x FROM main.sentinel").fetchall() == [(1,)]
    finally:
        con.execute(sql_of(exp.Drop(tables=[target], kind="TABLE", exists=True)))
        con.execute(sql_of(exp.Drop(tables=[exp.Table(this=q.ident(schema))], kind="SCHEMA", exists=True)))
    assert lake_tables(con) == {("main", "sentinel"), ("main", "src")}


@pytest.mark.parametrize(
    ("schema", "table"),
    [("weird schema", 'we"ird;name'), ("x'); DROP TABLE main.sentinel; --", 'a"; DROP TABLE main.sentinel; --')],
)
def test_header_target_keeps_quoted_names(tmp_path: Path, schema: str, table: str) -> None:
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "m.sql").write_text(
        f"-- materialized table\n-- target {dq(schema)}.{dq(table)}\nSELECT 1 AS x\n", encoding="utf-8"
    )
    (plan,) = compile_project(tmp_path, use_cache=False)
    create = plan.statements[-1].sql
    assert create.startswith(f"CREATE OR REPLACE TABLE {sql_of(q.table(schema, table))} AS")
