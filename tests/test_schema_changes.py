"""Schema drift under each ``on_schema_change`` mode, and ``-- column`` contracts, on real DuckLakes
(and, for the tests parametrized over ``substrate``, on real Iceberg lakes too; the tests only
Iceberg has are in ``test_schema_changes_iceberg``).

Each drift kind measured on DuckDB/DuckLake 1.5.5 (widening, narrowing, reorder of same-typed
columns, rename, drop, add; see the shared research notes: DuckDB coerces most of them silently)
is applied to a partitioned delete+insert model between two runs, under each mode. The expected
table (columns, types, rows) is computed here from the two SELECT lists and the rule table of
``docs/schema-changes.md``; a refused change must leave the snapshots and every table's digest as
they were. Iceberg changes a column's type in place only by its promotions (int to long, float to
double, a decimal's precision), so its ``sync_all_columns`` refuses INTEGER to DOUBLE, which DuckLake
widens; a refused change must leave every table's metadata location and every file as it was.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from icehouse import IcebergLakehouse
from icehouse_sql import RestSqlLakehouse
from lakehouse import UTC, Lakehouse, result_for
from lakeproject import Inspector
from test_checks_iceberg import state as iceberg_state

NOW = datetime(2024, 6, 1, tzinfo=UTC)
MODES = ("fail", "append_new_columns", "sync_all_columns", "ignore")

# raw.items: per day, rows (id, a, n, b, x); x is a DOUBLE with a fraction (1.7 would become 2 in an
# INTEGER column: the silent coercion the checks exist for).
ITEMS = [(1, 1, 11, "p", 1.7, 1), (2, 2, 12, "q", 2.5, 1), (3, 3, 13, "r", 3.25, 2), (4, 4, 14, "s", 4.75, 2)]
SOURCE = ("CREATE SCHEMA IF NOT EXISTS raw",
          "CREATE OR REPLACE TABLE raw.items AS SELECT CAST(id AS INTEGER) AS id, CAST(a AS INTEGER) AS a, "
          "CAST(n AS INTEGER) AS n, CAST(b AS VARCHAR) AS b, CAST(x AS DOUBLE) AS x, "
          "CAST(TIMESTAMPTZ '2023-12-31 12:00:00+00' + to_days(CAST(d AS INTEGER)) AS TIMESTAMPTZ) AS day "
          "FROM (VALUES " + ", ".join(f"({i}, {a}, {n}, '{b}', {x}, {d})" for i, a, n, b, x, d in ITEMS)
          + ") AS v(id, a, n, b, x, d)")

# The SELECT list of version 1 and of each drift's version 2: (SQL, column name, expected type, value of a row)
V1 = [("day", "day", "TIMESTAMP WITH TIME ZONE"), ("id", "id", "INTEGER"), ("a", "a", "INTEGER"),
      ("n", "n", "INTEGER"), ("b", "b", "VARCHAR"), ("x AS w", "w", "DOUBLE")]
DRIFTS: dict[str, list[tuple[str, str, str]]] = {
    # the SELECT's `a` becomes wider (INTEGER -> DOUBLE): the table's INTEGER would round 1.7 to 2
    "widening": [V1[0], V1[1], ("x AS a", "a", "DOUBLE"), V1[3], V1[4], V1[5]],
    # the SELECT's `w` becomes narrower (DOUBLE -> INTEGER): every INTEGER is exact in a DOUBLE
    "narrowing": [*V1[:5], ("a AS w", "w", "INTEGER")],
    # `a` and `n` (both INTEGER) swap places: a positional write would swap their values
    "reorder": [V1[0], V1[1], V1[3], V1[2], V1[4], V1[5]],
    "rename": [*V1[:4], ("b AS c", "c", "VARCHAR"), V1[5]],
    "drop": [*V1[:4], V1[5]],
    "add": [*V1, ("b || '!' AS c", "c", "VARCHAR")],
}


def value(name: str, item: tuple[Any, ...], select: list[tuple[str, str, str]]) -> Any:
    """What version ``select`` writes into column ``name`` for one source row."""
    i, a, n, b, x, d = item
    sql = next(s for s, col, _ in select if col == name)
    source = sql.split(" AS ")[0]
    return {"day": datetime(2023, 12, 31, 12, tzinfo=UTC) + timedelta(days=d), "id": i, "a": a, "n": n, "b": b,
            "x": x, "b || '!'": b + "!"}[source]


def expected(drift: str, mode: str) -> tuple[list[tuple[str, str]], list[dict[str, Any]]] | str:
    """(columns with types, rows) after day 1 with V1 and day 2 with the drift; or the refusal text."""
    v2 = DRIFTS[drift]
    old = {c: t for _, c, t in V1}
    new = {c: t for _, c, t in v2}
    added = [c for c in new if c not in old]
    removed = [c for c in old if c not in new]
    changed = [c for c in new if c in old and new[c] != old[c]]
    if mode == "fail" and (added or removed or changed):
        return "differ from table"
    types = dict(old)
    for c in changed:
        wider = (old[c], new[c]) == ("INTEGER", "DOUBLE")
        if wider:  # the table cannot hold the new values exactly
            if mode != "sync_all_columns":
                return f"column `{c}` is INTEGER in table"
            types[c] = new[c]
    if mode in ("append_new_columns", "sync_all_columns"):
        types.update({c: new[c] for c in added})
    if mode == "sync_all_columns":
        for c in removed:
            del types[c]
    rows = []
    for item in ITEMS:
        select = V1 if item[5] == 1 else v2
        names = {col for _, col, _ in select}
        rows.append({c: value(c, item, select) if c in names else None for c in types})
    return list(types.items()), rows


def expected_on(substrate: str, drift: str, mode: str) -> tuple[list[tuple[str, str]], list[dict[str, Any]]] | str:
    """:func:`expected` on ``substrate``: Iceberg refuses to widen INTEGER to DOUBLE in place."""
    if substrate != "ducklake" and (drift, mode) == ("widening", "sync_all_columns"):
        return "Iceberg cannot change a column from INTEGER to DOUBLE in place"
    return expected(drift, mode)


# The lake of each substrate (iceberg-sql: DuckDB's SQL through the REST test adapter).
LAKES: dict[str, type[Lakehouse]] = {"ducklake": Lakehouse, "iceberg": IcebergLakehouse,
                                     "iceberg-sql": RestSqlLakehouse}


def lake_state(substrate: str, lake: Lakehouse, inspector: Inspector) -> Any:
    """What a refused change must leave as it was: DuckLake's snapshots and table digests; every
    Iceberg table's metadata location and every file of the lake."""
    if substrate == "ducklake":
        return inspector.state(lake.root)
    assert isinstance(lake, IcebergLakehouse)
    return iceberg_state(lake)


def model(select: list[tuple[str, str, str]], mode: str) -> str:
    return ("-- materialized incremental\n-- partitioned daily key=day\n"
            f"-- on_schema_change {mode}\n"
            f"SELECT {', '.join(s for s, _, _ in select)}\nFROM raw.items\n"
            "WHERE day >= $partition_start AND day < $partition_end\n")


@pytest.fixture(scope="module")
def inspector() -> Iterator[Inspector]:
    ins = Inspector()
    try:
        yield ins
    finally:
        ins.close()


def read(lake: Lakehouse, table: str) -> tuple[list[tuple[str, str]], list[dict[str, Any]]]:
    con = lake.connect()
    try:
        schema, name = table.split(".")
        cols = [(r[0], r[1]) for r in con.execute(
            "SELECT column_name, data_type FROM duckdb_columns() WHERE database_name = current_database() "
            "AND schema_name = ? AND table_name = ? ORDER BY column_index", [schema, name]).fetchall()]
        cursor = con.execute(f"SELECT * FROM {schema}.{name} ORDER BY id")
        names = [d[0] for d in cursor.description]
        return cols, [dict(zip(names, r, strict=True)) for r in cursor.fetchall()]
    finally:
        con.close()


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("drift", list(DRIFTS))
@pytest.mark.parametrize("substrate", list(LAKES))
def test_drift_under_each_mode(tmp_path: Path, inspector: Inspector, substrate: str, drift: str, mode: str) -> None:
    """Every substrate, Iceberg on both write paths: the pyiceberg commit, and DuckDB's SQL."""
    lake = LAKES[substrate](tmp_path, {"sales/items.sql": model(V1, mode)})
    lake.sql(*SOURCE)
    first = result_for(lake.run(partition="2024-01-01", now=NOW), "sales.items")
    assert first.status == "success", first.error
    (tmp_path / "models" / "sales" / "items.sql").write_text(model(DRIFTS[drift], mode))
    before = lake_state(substrate, lake, inspector)
    result = result_for(lake.run(partition="2024-01-02", now=NOW), "sales.items")
    want = expected_on(substrate, drift, mode)
    if isinstance(want, str):
        assert result.status == "failed", (drift, mode)
        assert result.error is not None and want in result.error and "models/sales/items.sql" in result.error
        assert "nothing was written" in result.error
        assert lake_state(substrate, lake, inspector) == before, "a refused schema change wrote something"
        return
    assert result.status == "success", result.error
    columns, rows = read(lake, "sales.items")
    assert sorted(columns) == sorted(want[0])
    assert rows == want[1]
    if drift == "reorder":
        assert result.schema_changes == []


def test_sync_widens_exactly_what_append_and_ignore_refuse(tmp_path: Path) -> None:
    """The E10 coercion: 1.7 written into an INTEGER column would be stored as 2. sync_all_columns
    widens the column to DOUBLE first, and the run's result lists the statement it ran."""
    lake = Lakehouse(tmp_path, {"sales/items.sql": model(V1, "sync_all_columns")})
    lake.sql(*SOURCE)
    assert lake.run(partition="2024-01-01", now=NOW).ok
    (tmp_path / "models" / "sales" / "items.sql").write_text(model(DRIFTS["widening"], "sync_all_columns"))
    result = result_for(lake.run(partition="2024-01-02", now=NOW), "sales.items")
    assert result.status == "success", result.error
    assert result.schema_changes == ['ALTER TABLE "sales"."items"\nALTER COLUMN "a" SET DATA TYPE DOUBLE']
    _, rows = read(lake, "sales.items")
    assert [r["a"] for r in rows] == [1, 2, 3.25, 4.75]


MERGE = ("-- materialized incremental\n-- unique_key id\n-- on_schema_change {mode}\n"
         "SELECT {cols}\nFROM raw.items\nWHERE id IN ({ids})\n")


@pytest.mark.parametrize("substrate", ["ducklake", "iceberg"])
def test_merge_add_and_drop_with_append_new_columns(tmp_path: Path, substrate: str) -> None:
    lake = LAKES[substrate](tmp_path, {"sales/m.sql": MERGE.format(mode="append_new_columns", cols="id, a, b",
                                                                    ids="1, 2")})
    lake.sql(*SOURCE)
    assert lake.run(now=NOW).ok
    # version 2 drops b and adds c, and re-writes id 2 (matched: updated) and id 3 (new: inserted)
    (tmp_path / "models" / "sales" / "m.sql").write_text(
        MERGE.format(mode="append_new_columns", cols="id, a + 100 AS a, b || '!' AS c", ids="2, 3"))
    result = result_for(lake.run(now=NOW), "sales.m")
    assert result.status == "success", result.error
    assert (result.rows_inserted, result.rows_updated) == (1, 1)
    if substrate == "iceberg":  # the schema change of the pyiceberg commit, as it is reported
        assert result.schema_changes == ["add column c VARCHAR"]
    columns, rows = read(lake, "sales.m")
    assert [c for c, _ in columns] == ["id", "a", "b", "c"]
    # a matched row keeps the value of a column the result no longer returns; an inserted row has NULL
    assert rows == [{"id": 1, "a": 1, "b": "p", "c": None}, {"id": 2, "a": 102, "b": "q", "c": "q!"},
                    {"id": 3, "a": 103, "b": None, "c": "r!"}]


def test_merge_with_ignore_refuses_a_new_column_it_cannot_leave_out(tmp_path: Path, inspector: Inspector) -> None:
    lake = Lakehouse(tmp_path, {"sales/m.sql": MERGE.format(mode="ignore", cols="id, a", ids="1, 2")})
    lake.sql(*SOURCE)
    assert lake.run(now=NOW).ok
    (tmp_path / "models" / "sales" / "m.sql").write_text(MERGE.format(mode="ignore", cols="id, a, b", ids="1, 2"))
    before = inspector.state(tmp_path)
    result = result_for(lake.run(now=NOW), "sales.m")
    assert result.status == "failed" and result.error is not None
    assert "new column `b` (VARCHAR)" in result.error and "append_new_columns" in result.error
    assert inspector.state(tmp_path) == before


SCD2 = ("-- snapshot strategy=check unique_key=id check_cols=all\n-- on_schema_change {mode}\n"
        "SELECT {cols}\nFROM raw.items\n")


@pytest.mark.parametrize("mode", ["append_new_columns", "sync_all_columns"])
@pytest.mark.parametrize("substrate", ["ducklake", "iceberg"])
def test_scd2_new_column_adds_the_column_and_opens_new_versions(tmp_path: Path, substrate: str, mode: str) -> None:
    lake = LAKES[substrate](tmp_path, {"marts/h.sql": SCD2.format(mode=mode, cols="id, a")})
    lake.sql(*SOURCE)
    assert lake.run(now=NOW).ok
    (tmp_path / "models" / "marts" / "h.sql").write_text(SCD2.format(mode=mode, cols="id, a, b"))
    result = result_for(lake.run(now=NOW + timedelta(days=1)), "marts.h")
    assert result.status == "success", result.error
    columns, rows = read(lake, "marts.h")
    assert "b" in [c for c, _ in columns]
    # every key gets a new current version carrying b; its first version is closed, with b NULL
    for item in ITEMS:
        versions = sorted((r for r in rows if r["id"] == item[0]), key=lambda r: r["valid_from"])
        assert [(v["b"], v["is_current"]) for v in versions] == [(None, False), (item[3], True)]
        assert versions[0]["valid_to"] == versions[1]["valid_from"]


def test_scd2_new_column_fails_by_default(tmp_path: Path, inspector: Inspector) -> None:
    lake = Lakehouse(tmp_path, {"marts/h.sql": SCD2.format(mode="fail", cols="id, a")})
    lake.sql(*SOURCE)
    assert lake.run(now=NOW).ok
    (tmp_path / "models" / "marts" / "h.sql").write_text(SCD2.format(mode="fail", cols="id, a, b"))
    before = inspector.state(tmp_path)
    result = result_for(lake.run(now=NOW + timedelta(days=1)), "marts.h")
    assert result.status == "failed" and result.error is not None and "new column `b` (VARCHAR)" in result.error
    assert "valid_from" not in result.error  # lakewrap's own SCD2 columns are never reported as removed
    assert inspector.state(tmp_path) == before


def test_unpartitioned_append_is_checked_too(tmp_path: Path, inspector: Inspector) -> None:
    text = "-- materialized incremental\n-- append\nSELECT id, {a} AS a FROM raw.items\n"
    lake = Lakehouse(tmp_path, {"sales/log.sql": text.format(a="a")})
    lake.sql(*SOURCE)
    assert lake.run(now=NOW).ok
    (tmp_path / "models" / "sales" / "log.sql").write_text(text.format(a="x"))
    before = inspector.state(tmp_path)
    result = result_for(lake.run(now=NOW), "sales.log")
    assert result.status == "failed" and result.error is not None
    assert "column `a` is INTEGER in the table but the SELECT returns DOUBLE" in result.error
    assert inspector.state(tmp_path) == before


# --- contracts ------------------------------------------------------------------------------------

CONTRACT = ("-- materialized incremental\n-- partitioned daily key=day\n"
            "-- column day TIMESTAMPTZ not_null\n-- column id INTEGER not_null \"the item\"\n"
            "-- column amount {amount_type}\n-- column b VARCHAR not_null\n"
            "SELECT day, id, {amount} AS amount, {b} AS b\nFROM raw.items\n"
            "WHERE day >= $partition_start AND day < $partition_end\n")


def contract(amount_type: str = "DOUBLE", amount: str = "x", b: str = "b") -> str:
    return CONTRACT.format(amount_type=amount_type, amount=amount, b=b)


@pytest.mark.parametrize(("edit", "message"), [
    (contract("DECIMAL(18,2)"), "models/sales/c.sql:5: column `amount` is declared DECIMAL(18,2) but the SELECT "
                                "returns DOUBLE"),
    (contract(amount="a"), "models/sales/c.sql:5: column `amount` is declared DOUBLE but the SELECT returns INTEGER"),
    (contract("INTEGER"), "column `amount` is declared INTEGER but the SELECT returns DOUBLE"),
    (contract(b="CASE WHEN id = 3 THEN NULL ELSE b END"),
     "models/sales/c.sql:6: column `b` is declared not_null but 1 rows are NULL"),
], ids=["no-implicit-decimal-cast", "no-widening-cast", "no-narrowing-cast", "not-null"])
def test_a_contract_mismatch_writes_nothing(tmp_path: Path, inspector: Inspector, edit: str, message: str) -> None:
    lake = Lakehouse(tmp_path, {"sales/c.sql": contract()})
    lake.sql(*SOURCE)
    first = result_for(lake.run(partition="2024-01-01", now=NOW), "sales.c")
    assert first.status == "success", first.error
    (tmp_path / "models" / "sales" / "c.sql").write_text(edit)
    before = inspector.state(tmp_path)
    result = result_for(lake.run(partition="2024-01-02", now=NOW), "sales.c")
    assert result.status == "failed" and result.error is not None
    assert message in result.error, result.error
    assert "nothing was written" in result.error
    assert inspector.state(tmp_path) == before


def test_a_contract_that_holds_writes_exactly_the_declared_types(tmp_path: Path) -> None:
    lake = Lakehouse(tmp_path, {"sales/c.sql": contract()})
    lake.sql(*SOURCE)
    assert lake.run(partition="2024-01-01", now=NOW).ok
    columns, rows = read(lake, "sales.c")
    assert columns == [("day", "TIMESTAMP WITH TIME ZONE"), ("id", "INTEGER"), ("amount", "DOUBLE"),
                       ("b", "VARCHAR")]
    assert [r["amount"] for r in rows] == [1.7, 2.5]


def test_a_select_star_contract_names_a_missing_and_an_extra_column(tmp_path: Path, inspector: Inspector) -> None:
    text = ("-- materialized table\n-- column id INTEGER\n-- column a INTEGER\n-- column gone VARCHAR\n"
            "SELECT * FROM raw.narrow\n")
    lake = Lakehouse(tmp_path, {"sales/t.sql": text})
    lake.sql(*SOURCE, "CREATE TABLE raw.narrow AS SELECT id, a, b AS extra FROM raw.items")
    before = inspector.state(tmp_path)
    result = result_for(lake.run(now=NOW), "sales.t")
    assert result.status == "failed" and result.error is not None
    assert "models/sales/t.sql:4: column `gone` is declared VARCHAR but the SELECT does not return it" in result.error
    assert "the SELECT returns column `extra` (VARCHAR) that no `-- column` declares" in result.error
    assert inspector.state(tmp_path) == before
