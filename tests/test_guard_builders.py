"""The guard statements, built and run (fast: the mutation target ``guards``).

The builders of ``compilers/sql.py`` are rendered and executed on an in-memory DuckDB; the guards
the compiler puts in a plan (``compilers/blocks.py``: rows outside the partition window or with a
NULL key, duplicate ``unique_key`` values; ``compilers/strategies.py``: SCD2 versions without a
timestamp) are compiled from real models and run against a stage table holding rows each guard
must refuse, or let pass: a guard raises ``lakewrap guard: ...`` exactly when a refused row is
there, and its message counts them.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import duckdb
import pytest
import sqlglot
from sqlglot import exp

from lakewrap.compile import compile_plan, load_project
from lakewrap.compilers import sql as q
from lakewrap.compilers.artifacts import STAGE
from lakewrap.plan import make_plan

NOW = datetime(2024, 6, 1, tzinfo=timezone.utc)


@pytest.fixture
def con() -> Iterator[duckdb.DuckDBPyConnection]:
    c = duckdb.connect()
    try:
        yield c
    finally:
        c.close()


def one(con: duckdb.DuckDBPyConnection, node: exp.Expr, params: dict[str, Any] | None = None) -> Any:
    rows = con.execute(q.render(node), params).fetchall() if params else con.execute(q.render(node)).fetchall()
    return rows


# --- the builders ---------------------------------------------------------------------------------


def test_fail_if_raises_exactly_when_a_row_is_counted(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("CREATE TABLE t AS SELECT * FROM range(5) r(x)")

    def guard(where: str) -> exp.Select:
        sel = exp.Select().from_(q.table(None, "t"), copy=False).where(sqlglot.parse_one(where), copy=False)
        return q.fail_if(sel, [q.as_text(q.count_star()), q.string(" rows match")])

    assert one(con, guard("x > 4")) == [(None,)]
    with pytest.raises(duckdb.Error, match="lakewrap guard: 1 rows match"):
        one(con, guard("x = 4"))
    with pytest.raises(duckdb.Error, match="lakewrap guard: 3 rows match"):
        one(con, guard("x < 3"))


def test_concat_joins_the_parts_in_order(con: duckdb.DuckDBPyConnection) -> None:
    assert one(con, exp.select(q.concat([q.string("a"), q.string("b"), q.string("c")]))) == [("abc",)]
    assert one(con, exp.select(q.concat([q.string("only")]))) == [("only",)]
    assert one(con, exp.select(q.as_text(exp.Literal.number(42)))) == [("42",)]
    assert con.execute(f"SELECT typeof({q.render(q.as_text(exp.Literal.number(1)))})").fetchone() == ("VARCHAR",)


def test_conditions_combine_with_and_and_or(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("CREATE TABLE a AS SELECT 1 AS k1, 2 AS k2 UNION ALL SELECT 1, 3")
    con.execute("CREATE TABLE b AS SELECT 1 AS k1, 2 AS k2")
    for keys, n in ((["k1"], 2), (["k1", "k2"], 1)):
        sel = (exp.select(q.count_star()).from_(q.aliased(q.table(None, "a"), "x"), copy=False)
               .join(q.aliased(q.table(None, "b"), "y"), on=q.keys_equal(keys, "x", "y"), copy=False))
        assert one(con, sel) == [(n,)], keys
    conds = [sqlglot.parse_one("k2 = 2"), sqlglot.parse_one("k2 = 3"), sqlglot.parse_one("k1 = 1")]
    count = exp.select(q.count_star()).from_(q.table(None, "a"), copy=False)
    assert one(con, count.copy().where(q.and_all([c.copy() for c in conds]), copy=False)) == [(0,)]
    assert one(con, count.copy().where(q.and_all([conds[2].copy()]), copy=False)) == [(2,)]
    assert one(con, count.copy().where(q.or_all([c.copy() for c in conds[:2]]), copy=False)) == [(2,)]
    assert one(con, count.copy().where(q.or_all([conds[0].copy()]), copy=False)) == [(1,)]


def test_names_are_quoted_and_values_bound(con: duckdb.DuckDBPyConnection) -> None:
    con.execute('CREATE SCHEMA "my schema"')
    con.execute('CREATE TABLE "my schema"."odd ""name""" AS SELECT 7 AS "Mixed Case"')
    sel = exp.select(q.col("Mixed Case", "t")).from_(q.aliased(q.table("my schema", "odd \"name\""), "t"),
                                                     copy=False).where(
        exp.EQ(this=q.col("Mixed Case"), expression=q.param("v")), copy=False)
    assert one(con, sel, {"v": 7}) == [(7,)]
    assert one(con, sel, {"v": 8}) == []
    assert q.render(q.table(None, "x")) == '"x"'
    assert q.render(q.col("c")) == '"c"'
    assert q.render(q.string("it's")) == "'it''s'"
    assert one(con, q.limit_zero(exp.select(exp.Star()).from_(q.table("my schema", 'odd "name"'), copy=False))) == []


def test_in_catalog_names_only_schema_qualified_tables() -> None:
    tree = sqlglot.parse_one("SELECT * FROM s.t JOIN c.s.u ON TRUE JOIN cte ON TRUE", read="duckdb")
    q.in_catalog(tree, "lake")
    tables = sorted((t.catalog, t.db, t.name) for t in tree.find_all(exp.Table))
    assert tables == [("", "", "cte"), ("c", "s", "u"), ("lake", "s", "t")]


def test_a_left_join_keeps_unmatched_rows(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("CREATE TABLE l AS SELECT * FROM range(3) r(k)")
    con.execute("CREATE TABLE r AS SELECT 1::BIGINT AS k")
    sel = exp.select(q.count_star()).from_(q.aliased(q.table(None, "l"), "a"), copy=False)
    sel.append("joins", q.left_join(q.aliased(q.table(None, "r"), "b"), q.keys_equal(["k"], "a", "b")))
    assert one(con, sel) == [(3,)]


def test_render_puts_a_models_text_back_and_leaves_the_tree_as_it_was() -> None:
    """The statement around a model's SELECT is rendered pretty, the SELECT as written."""
    inner = sqlglot.parse_one("select   1 as x")
    q.keep_text(inner, "select   1 as x -- as written")
    assert q.render(inner) == "select   1 as x -- as written"
    outer = exp.select(exp.Star()).from_(exp.Subquery(this=inner, alias=exp.TableAlias(this=q.ident("s"))),
                                         copy=False)
    text = q.render(outer)
    # pretty: the model's text stands on lines of its own, so a comment ending it ends there
    assert text == 'SELECT\n  *\nFROM (\n  select   1 as x -- as written\n) AS "s"'
    assert duckdb.connect().execute(text).fetchall() == [(1,)]
    assert outer.find(exp.Subquery).this is inner  # the stand-in was put back
    two = exp.union(inner.copy(), inner.copy(), distinct=False)
    for part in (two.this, two.expression):
        q.keep_text(part, "SELECT 2")
    assert q.render(two).count("SELECT 2") == 2
    assert q.render(exp.select(exp.Literal.number(3))) == "SELECT\n  3"


def test_a_command_is_built_from_rendered_parts(ducklake: Any) -> None:
    cmd = q.set_partitioned_by(q.table("s", "t"), [exp.Anonymous(this="year", expressions=[q.col("ts")])])
    assert q.render(cmd) == 'ALTER TABLE "s"."t" SET PARTITIONED BY (YEAR("ts"))'
    create = sqlglot.parse_one('CREATE TABLE IF NOT EXISTS "s"."t" PARTITIONED BY (a) AS SELECT 1 AS a',
                               read="duckdb")
    assert q.create_partitioned(create) == 'CREATE TABLE IF NOT EXISTS "s"."t" PARTITIONED BY (a) AS\nSELECT\n  1 AS a'
    ducklake.execute("CREATE SCHEMA s")  # both run on a real DuckLake (the conftest fixture)
    ducklake.execute(q.create_partitioned(create))
    ducklake.execute(q.render(q.set_partitioned_by(q.table("s", "t"), [q.col("a")])))
    assert ducklake.execute('SELECT * FROM "s"."t"').fetchall() == [(1,)]


# --- the guards of compiled plans -----------------------------------------------------------------

MODELS = {
    # a computed key: the window cannot be proven, so the guard stays
    "m/daily.sql": "-- materialized incremental\n-- partitioned daily key=ts\n"
                   "SELECT id, ts + INTERVAL 0 DAY AS ts FROM raw.src\n",
    "m/dyn.sql": "-- materialized incremental\n-- partitioned dynamic key=ts\n-- unique_key id\n"
                 "SELECT id, ts FROM raw.src\n",
    "m/keys.sql": "-- materialized incremental\n-- unique_key id,k\nSELECT id, k, ts FROM raw.src\n",
    "m/latest.sql": "-- materialized incremental\n-- unique_key id dedupe=latest_by(ts)\nSELECT id, ts FROM raw.src\n",
    "m/scd.sql": "-- snapshot strategy=timestamp unique_key=id updated_at=ts\nSELECT id, ts FROM raw.src\n",
    "m/scd_check.sql": "-- snapshot strategy=check unique_key=id check_cols=ts\nSELECT id, ts FROM raw.src\n",
}


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("guards")
    for rel, text in MODELS.items():
        (root / "models" / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / "models" / rel).write_text(text)
    return load_project(root, None)


def guards(project: Any, target: str, partition: str | None = None) -> list[Any]:
    (spec,) = project.select([target])
    plan = compile_plan(make_plan(spec, partition=partition, now=NOW, watermark=None))
    return [st for st in plan.statements if st.role == "guard"]


def refused(con: duckdb.DuckDBPyConnection, statements: list[Any], relation: str, rows: str) -> list[str]:
    """The messages of the guards that refuse ``rows`` (a SELECT) staged as ``relation``."""
    con.execute(f'CREATE OR REPLACE TABLE "{relation}" AS {rows}')
    out = []
    for st in statements:
        params = {k: v.python() for k, v in st.params.items()}
        try:
            con.execute(st.sql, params or None).fetchall()
        except duckdb.Error as exc:
            assert "lakewrap guard: " in str(exc), exc
            out.append(str(exc).split("lakewrap guard: ", 1)[1].split("\n")[0])
    return out


def ts(*values: str | None) -> str:
    return " UNION ALL ".join(f"SELECT {i} AS id, {f'TIMESTAMP {v!r}' if v else 'NULL::TIMESTAMP'} AS ts"
                              for i, v in enumerate(values))


def test_the_window_guard_refuses_rows_outside_a_time_window_and_null_keys(project: Any,
                                                                          con: duckdb.DuckDBPyConnection) -> None:
    st = guards(project, "m.daily", "2024-01-02")
    assert len(st) == 1
    inside = ["2024-01-02 00:00:00", "2024-01-02 23:59:59.999999"]
    assert refused(con, st, STAGE, ts(*inside)) == []
    for outside in ("2024-01-01 23:59:59.999999", "2024-01-03 00:00:00", None):
        assert refused(con, st, STAGE, ts(*inside, outside)) == [
            "1 rows have ts outside the partition window (or NULL); they would be lost or duplicated on re-run"
        ], outside
    assert refused(con, st, STAGE, ts("2023-12-31 00:00:00", None, *inside))[0].startswith("2 rows have ts outside")


def test_the_window_guard_of_a_dynamic_window_excludes_its_start_and_includes_its_end(
        project: Any, con: duckdb.DuckDBPyConnection) -> None:
    (spec,) = project.select(["m.dyn"])
    # a dynamic window (watermark, now]: the SELECT has no bounds, so the guard checks every row
    plan = compile_plan(make_plan(spec, now=NOW, watermark=datetime(2024, 5, 1, tzinfo=timezone.utc)))
    (window,) = [st for st in plan.statements if st.role == "guard" and "window" in st.sql]
    assert refused(con, [window], STAGE, ts("2024-05-01 00:00:00.000001", "2024-06-01 00:00:00")) == []
    assert len(refused(con, [window], STAGE, ts("2024-05-01 00:00:00"))) == 1
    assert len(refused(con, [window], STAGE, ts("2024-06-01 00:00:00.000001"))) == 1


def test_the_key_guards_refuse_null_and_repeated_keys(project: Any, con: duckdb.DuckDBPyConnection) -> None:
    st = guards(project, "m.keys")
    assert len(st) == 2

    def rows(*keys: tuple[int | None, str | None]) -> str:
        return " UNION ALL ".join(f"SELECT {'NULL' if i is None else i}::INT AS id, "
                                  f"{'NULL' if k is None else repr(k)}::VARCHAR AS k, 0 AS ts" for i, k in keys)

    assert refused(con, st, STAGE, rows((1, "a"), (1, "b"), (2, "a"))) == []
    assert refused(con, st, STAGE, rows((1, "a"), (None, "b"), (2, None))) == [
        "2 rows have a NULL unique_key (id, k)"]
    assert refused(con, st, STAGE, rows((1, "a"), (1, "a"), (2, "b"), (2, "b"), (2, "b"), (3, "c"))) == [
        "2 unique_key (id, k) values occur more than once, e.g. (1, a)"]


def test_a_deduplicating_model_guards_null_keys_only(project: Any, con: duckdb.DuckDBPyConnection) -> None:
    st = guards(project, "m.latest")
    assert refused(con, st, STAGE, ts("2024-01-01 00:00:00", "2024-01-01 00:00:00").replace("AS id", "% 1 AS id")
                   ) == []
    assert refused(con, st, STAGE, "SELECT NULL::INT AS id, NULL::TIMESTAMP AS ts") == [
        "1 rows have a NULL unique_key (id)"]


def test_the_snapshot_guards_refuse_null_and_repeated_keys_and_null_timestamps(
        project: Any, con: duckdb.DuckDBPyConnection) -> None:
    st = guards(project, "m.scd")
    relation = "__lakewrap_changes"
    assert len(st) == 3 and all(relation in s.sql for s in st)
    assert refused(con, st, relation, ts("2024-01-01 00:00:00", "2024-01-02 00:00:00")) == []
    assert refused(con, st, relation, ts("2024-01-01 00:00:00", None)) == ["1 rows have a NULL ts"]
    assert refused(con, st, relation, "SELECT 1 AS id, TIMESTAMP '2024-01-01' AS ts UNION ALL "
                                      "SELECT 1, TIMESTAMP '2024-01-02'") == [
        "1 unique_key (id) values occur more than once, e.g. (1)"]
    assert refused(con, st, relation, "SELECT NULL::INT AS id, TIMESTAMP '2024-01-01' AS ts") == [
        "1 rows have a NULL unique_key (id)"]


def test_a_check_snapshot_guards_its_keys_but_not_a_timestamp(project: Any, con: duckdb.DuckDBPyConnection) -> None:
    """strategy=check compares columns, not a timestamp: a NULL in them is a value like any other."""
    st = guards(project, "m.scd_check")
    relation = "__lakewrap_changes"
    assert len(st) == 2
    assert refused(con, st, relation, ts("2024-01-01 00:00:00", None)) == []
    assert refused(con, st, relation, "SELECT NULL::INT AS id, NULL::TIMESTAMP AS ts") == [
        "1 rows have a NULL unique_key (id)"]
