"""``lakewrap.materialize()`` with a pandas DataFrame and a DuckDB relation, on a real DuckLake.

The table is read back by a plain DuckDB connection that attaches the lake itself (not lakewrap's
``Lake``), and compared with the input rows computed here.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pytest

import lakewrap
from lakewrap.execute.extensions import bundled_path

UTC = timezone.utc
DAY = datetime(2024, 1, 2, tzinfo=UTC)


def read(root: Path, sql: str) -> list[tuple[Any, ...]]:
    """``sql`` on a plain DuckDB connection attaching the project's embedded DuckLake."""
    con = duckdb.connect(config={"autoinstall_known_extensions": False})
    try:
        con.execute(f"LOAD '{bundled_path('ducklake', duckdb.__version__)}'")
        con.execute("SET TimeZone = 'UTC'")
        con.execute(f"ATTACH 'ducklake:{root}/.lakewrap/lake.ducklake' AS lake "
                    f"(DATA_PATH '{root}/.lakewrap/data/', READ_ONLY)")
        return con.execute(sql).fetchall()
    finally:
        con.close()


def frame(ids: range, amount: float) -> pd.DataFrame:
    return pd.DataFrame({
        "id": list(ids),
        "name": [f"n{i}" for i in ids],
        "amount": [amount + i for i in ids],
        "ts": [DAY + timedelta(hours=i % 24) for i in ids],
    })


def test_a_pandas_dataframe_is_merged_then_replaced_by_partition(tmp_path: Path) -> None:
    first = lakewrap.materialize(frame(range(10), 1.5), lake=tmp_path, target="out.m", strategy="merge",
                                 unique_key="id")
    assert (first.status, first.rows_inserted) == ("success", 10), first.error
    second = lakewrap.materialize(frame(range(5, 15), 100.0), lake=tmp_path, target="out.m", strategy="merge",
                                  unique_key="id")
    assert (second.status, second.rows_inserted, second.rows_updated) == ("success", 5, 5), second.error
    expected = {i: (f"n{i}", 1.5 + i, DAY + timedelta(hours=i % 24)) for i in range(5)}
    expected |= {i: (f"n{i}", 100.0 + i, DAY + timedelta(hours=i % 24)) for i in range(5, 15)}
    got = read(tmp_path, "SELECT id, name, amount, ts FROM lake.out.m ORDER BY id")
    assert got == [(i, *expected[i]) for i in sorted(expected)]
    # the DataFrame's dtypes became the table's types
    types = dict(read(tmp_path, "SELECT column_name, data_type FROM information_schema.columns "
                                "WHERE table_catalog = 'lake' AND table_schema = 'out' AND table_name = 'm'"))
    assert types == {"id": "BIGINT", "name": "VARCHAR", "amount": "DOUBLE", "ts": "TIMESTAMP WITH TIME ZONE"}
    # a duplicate key in the frame is refused and nothing is written
    bad = pd.concat([frame(range(2), 7.0), frame(range(1, 2), 8.0)])
    refused = lakewrap.materialize(bad, lake=tmp_path, target="out.m", strategy="merge", unique_key="id")
    assert refused.status == "failed" and "more than once" in (refused.error or ""), refused.error
    assert read(tmp_path, "SELECT id, name, amount, ts FROM lake.out.m ORDER BY id") == got


def test_a_duckdb_relation_is_written_into_its_partition(tmp_path: Path) -> None:
    source = duckdb.connect()
    try:
        source.execute("SET TimeZone = 'UTC'")
        relation = source.sql("SELECT i AS id, 'r' || i AS name, TIMESTAMPTZ '2024-01-02 00:00:00+00' + "
                              "to_minutes(i * 7) AS ts FROM range(100) AS r(i)")
        result = lakewrap.materialize(relation, lake=tmp_path, target="out.di", strategy="delete+insert",
                                      partition="2024-01-02", partition_key="ts")
        assert (result.status, result.rows_inserted) == ("success", 100), result.error
        # rows outside the partition's window are refused, nothing written
        outside = source.sql("SELECT 1 AS id, 'x' AS name, TIMESTAMPTZ '2024-01-03 00:00:00+00' AS ts")
        refused = lakewrap.materialize(outside, lake=tmp_path, target="out.di", strategy="delete+insert",
                                       partition="2024-01-02", partition_key="ts")
    finally:
        source.close()
    assert refused.status == "failed" and "outside the partition window" in (refused.error or ""), refused.error
    got = read(tmp_path, "SELECT id, name, ts FROM lake.out.di ORDER BY id")
    assert got == [(i, f"r{i}", DAY + timedelta(minutes=7 * i)) for i in range(100)]
    # the materialization is recorded in the same lake with its run
    (row,) = read(tmp_path, "SELECT target, partition_value, rows_inserted FROM lake.lakewrap.materializations")
    assert row == ("out.di", "2024-01-02", 100)


def test_an_object_that_is_no_table_is_refused(tmp_path: Path) -> None:
    from lakewrap.errors import PlanError

    with pytest.raises(PlanError, match="cannot materialize a list"):
        lakewrap.materialize([{"id": 1}], lake=tmp_path, target="out.x", strategy="table")
    assert not (tmp_path / ".lakewrap").exists()
