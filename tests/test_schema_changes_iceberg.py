"""Schema drift under each ``on_schema_change`` mode on real Iceberg lakes (both write paths).

The drift kinds, modes and expected tables of ``test_schema_changes`` (computed there from the two
SELECT lists and the rule table of ``docs/schema-changes.md``), with one substrate difference:
Iceberg changes a column's type in place only by its promotions (int to long, float to double, a
decimal's precision), so ``sync_all_columns`` refuses INTEGER to DOUBLE, which DuckLake widens. A
refused change must leave every table's metadata location and every file of the lake as it was.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from icehouse import IcebergLakehouse
from icehouse_sql import RestSqlLakehouse
from lakehouse import result_for
from test_checks_iceberg import state
from test_schema_changes import DRIFTS, ITEMS, MERGE, MODES, NOW, SCD2, SOURCE, V1, expected, model, read


def expected_on_iceberg(drift: str, mode: str) -> tuple[list[tuple[str, str]], list[dict[str, Any]]] | str:
    if (drift, mode) == ("widening", "sync_all_columns"):
        return "Iceberg cannot change a column from INTEGER to DOUBLE in place"
    return expected(drift, mode)


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("drift", list(DRIFTS))
@pytest.mark.parametrize("path", ["pyiceberg", "sql"])
def test_drift_under_each_mode(tmp_path: Path, path: str, drift: str, mode: str) -> None:
    """Both write paths: the pyiceberg commit, and DuckDB's SQL through the REST test adapter."""
    kind = IcebergLakehouse if path == "pyiceberg" else RestSqlLakehouse
    lake = kind(tmp_path, {"sales/items.sql": model(V1, mode)})
    lake.sql(*SOURCE)
    first = result_for(lake.run(partition="2024-01-01", now=NOW), "sales.items")
    assert first.status == "success", first.error
    (tmp_path / "models" / "sales" / "items.sql").write_text(model(DRIFTS[drift], mode))
    before = state(lake)
    result = result_for(lake.run(partition="2024-01-02", now=NOW), "sales.items")
    want = expected_on_iceberg(drift, mode)
    if isinstance(want, str):
        assert result.status == "failed", (drift, mode)
        assert result.error is not None and want in result.error and "models/sales/items.sql" in result.error
        assert "nothing was written" in result.error
        assert state(lake) == before, "a refused schema change wrote something"
        return
    assert result.status == "success", result.error
    columns, rows = read(lake, "sales.items")
    assert sorted(columns) == sorted(want[0])
    assert rows == want[1]
    if drift == "reorder":
        assert result.schema_changes == []


def test_sync_widens_an_int_to_a_long_in_the_commit(tmp_path: Path) -> None:
    """An Iceberg promotion (int to long): the column is widened in the same commit as the rows,
    and a value beyond INTEGER's range is stored exactly."""
    lake = IcebergLakehouse(tmp_path, {"sales/items.sql": model(V1, "sync_all_columns")})
    lake.sql(*SOURCE)
    assert lake.run(partition="2024-01-01", now=NOW).ok
    wide = [V1[0], V1[1], ("CAST(a AS BIGINT) * 10000000000 AS a", "a", "BIGINT"), *V1[3:]]
    (tmp_path / "models" / "sales" / "items.sql").write_text(model(wide, "sync_all_columns"))
    snapshots = len(lake.ice.load("sales.items").snapshots())
    result = result_for(lake.run(partition="2024-01-02", now=NOW), "sales.items")
    assert result.status == "success", result.error
    assert result.schema_changes == ["widen column a to BIGINT"]
    table = lake.ice.load("sales.items")
    assert len(table.snapshots()) == snapshots + 1  # schema change and rows: one commit
    assert str(table.schema().find_field("a").field_type) == "long"
    columns, rows = read(lake, "sales.items")
    assert dict(columns)["a"] == "BIGINT"
    assert [r["a"] for r in rows] == [1, 2, 30000000000, 40000000000]


def test_merge_add_and_drop_with_append_new_columns(tmp_path: Path) -> None:
    lake = IcebergLakehouse(tmp_path, {"sales/m.sql": MERGE.format(mode="append_new_columns", cols="id, a, b",
                                                                    ids="1, 2")})
    lake.sql(*SOURCE)
    assert lake.run(now=NOW).ok
    (tmp_path / "models" / "sales" / "m.sql").write_text(
        MERGE.format(mode="append_new_columns", cols="id, a + 100 AS a, b || '!' AS c", ids="2, 3"))
    result = result_for(lake.run(now=NOW), "sales.m")
    assert result.status == "success", result.error
    assert (result.rows_inserted, result.rows_updated) == (1, 1)
    assert result.schema_changes == ["add column c VARCHAR"]
    columns, rows = read(lake, "sales.m")
    assert [c for c, _ in columns] == ["id", "a", "b", "c"]
    assert rows == [{"id": 1, "a": 1, "b": "p", "c": None}, {"id": 2, "a": 102, "b": "q", "c": "q!"},
                    {"id": 3, "a": 103, "b": None, "c": "r!"}]


def test_merge_fails_by_default_and_writes_nothing(tmp_path: Path) -> None:
    lake = IcebergLakehouse(tmp_path, {"sales/m.sql": MERGE.format(mode="fail", cols="id, a", ids="1, 2")})
    lake.sql(*SOURCE)
    assert lake.run(now=NOW).ok
    (tmp_path / "models" / "sales" / "m.sql").write_text(MERGE.format(mode="fail", cols="id, x AS a", ids="1, 2"))
    before = state(lake)
    result = result_for(lake.run(now=NOW), "sales.m")
    assert result.status == "failed" and result.error is not None
    assert "column `a` is INTEGER in the table but the SELECT returns DOUBLE" in result.error
    assert state(lake) == before


@pytest.mark.parametrize("mode", ["append_new_columns", "sync_all_columns"])
def test_scd2_new_column_adds_the_column_and_opens_new_versions(tmp_path: Path, mode: str) -> None:
    lake = IcebergLakehouse(tmp_path, {"marts/h.sql": SCD2.format(mode=mode, cols="id, a")})
    lake.sql(*SOURCE)
    assert lake.run(now=NOW).ok
    (tmp_path / "models" / "marts" / "h.sql").write_text(SCD2.format(mode=mode, cols="id, a, b"))
    result = result_for(lake.run(now=NOW + timedelta(days=1)), "marts.h")
    assert result.status == "success", result.error
    columns, rows = read(lake, "marts.h")
    assert "b" in [c for c, _ in columns]
    for item in ITEMS:
        versions = sorted((r for r in rows if r["id"] == item[0]), key=lambda r: r["valid_from"])
        assert [(v["b"], v["is_current"]) for v in versions] == [(None, False), (item[3], True)]
        assert versions[0]["valid_to"] == versions[1]["valid_from"]
