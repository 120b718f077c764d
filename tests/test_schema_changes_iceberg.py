"""Schema changes only Iceberg has: a promotion widened in the commit, and the default refusal.

The drift under each mode, the merge and the SCD2 snapshot gaining a column run on every substrate
in ``test_schema_changes`` (parametrized over ``substrate``). A refused change must leave every
table's metadata location and every file of the lake as it was.
"""

from __future__ import annotations

from pathlib import Path

from icehouse import IcebergLakehouse
from lakehouse import result_for
from test_checks_iceberg import state
from test_schema_changes import MERGE, NOW, SOURCE, V1, model, read


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
