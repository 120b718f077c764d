"""Reproducing runs that changed the table's DDL: ``on_schema_change`` (a column added, a column
dropped and one widened) and ``--full-refresh``, on DuckLake, Iceberg (pyiceberg) and Iceberg
through DuckDB SQL.

Each run's reproduction must report ``MATCH`` with as many rows as the table holds at the run's
snapshot, read here without lakewrap (plain DuckDB time travel on DuckLake, pyiceberg
``scan(snapshot_id=...)`` on Iceberg), and ``explain`` must show the schema change.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import lakewrap
from icehouse import IcebergLakehouse
from icehouse_sql import RestSqlLakehouse
from lakehouse import Lakehouse, at, partition
from lakeproject import Inspector
from test_provenance import TYPES, V1, V2, plain

DI = """\
-- materialized incremental
-- partitioned daily key=ts
-- on_schema_change append_new_columns
SELECT id, k, amount, ts
FROM raw.events
WHERE ts >= $partition_start AND ts < $partition_end
"""
DI_ADDED = DI.replace("SELECT id, k, amount, ts", "SELECT id, k, amount, amount * 2 AS twice, ts")
MG = """\
-- materialized incremental
-- unique_key id
-- on_schema_change sync_all_columns
SELECT id, k, CAST(amount AS INTEGER) AS amount, updated_at
FROM raw.events
"""
MG_SYNCED = MG.replace("SELECT id, k, CAST(amount AS INTEGER) AS amount", "SELECT id, CAST(amount AS BIGINT) AS amount")
MODELS = {"m/di.sql": DI, "m/mrg.sql": MG}


@pytest.fixture
def inspector() -> Iterator[Inspector]:
    ins = Inspector()
    try:
        yield ins
    finally:
        ins.close()


class DdlHistory:
    """V1 runs; then the models change their columns and V2 runs; then a --full-refresh."""

    def __init__(self, house: Any) -> None:
        self.house = house
        self.runs: dict[str, tuple[str, list[Any]]] = {}

    def run(self, name: str, *selectors: str, part: str | None = None, full_refresh: bool = False) -> None:
        report = lakewrap.Project(self.house.root).run(list(selectors), partition=part, now=at(5),
                                                       full_refresh=full_refresh)
        assert report.ok, [r.error for r in report.results]
        if hasattr(self.house, "remember"):
            self.house.remember()
        self.runs[name] = (report.run_id, [r for r in report.results if r.status == "success"])

    def build(self) -> None:
        self.house.sql(tables={"raw.events": V1}, types={"raw.events": TYPES})
        self.run("v1-p0", "m.di", part=partition(0))
        self.run("v1-p1", "m.di", part=partition(1))
        self.run("v1-mrg", "m.mrg")
        self.house.sql(tables={"raw.events": V2}, types={"raw.events": TYPES})
        (self.house.root / "models" / "m" / "di.sql").write_text(DI_ADDED)
        (self.house.root / "models" / "m" / "mrg.sql").write_text(MG_SYNCED)
        self.run("added", "m.di", part=partition(1))
        self.run("synced", "m.mrg")
        self.run("refresh", "m.di", part=partition(0), full_refresh=True)


@pytest.fixture(params=["ducklake", "iceberg", "iceberg-sql"])
def history(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[DdlHistory]:
    root = tmp_path / "proj"
    house: Any = {"ducklake": Lakehouse, "iceberg": IcebergLakehouse, "iceberg-sql": RestSqlLakehouse}[
        request.param](root, MODELS)
    h = DdlHistory(house)
    h.build()
    yield h
    if hasattr(house, "close"):
        house.close()


def committed_rows(h: DdlHistory, inspector: Inspector, target: str, snapshot_id: int) -> tuple[int, set[str]]:
    """(rows, columns) of ``target`` at ``snapshot_id``, read without lakewrap."""
    if not isinstance(h.house, IcebergLakehouse):
        schema, name = target.split(".")
        rows = plain(inspector, h.house.root, f'SELECT * FROM "{schema}"."{name}" AT (VERSION => {snapshot_id})')
        cols = plain(inspector, h.house.root, f"SELECT column_name FROM (DESCRIBE SELECT * FROM "
                     f"\"{schema}\".\"{name}\" AT (VERSION => {snapshot_id}))")
        return len(rows), {c for (c,) in cols}
    data = h.house.ice.load(target).scan(snapshot_id=snapshot_id).to_arrow()
    return data.num_rows, set(data.schema.names)


def test_runs_that_changed_the_ddl_reproduce(history: DdlHistory, inspector: Inspector) -> None:
    root = history.house.root
    project = lakewrap.Project(root)
    columns = {}
    for label, (run_id, committed) in history.runs.items():
        report = project.reproduce(run_id)
        ((res,), (r,)) = committed, report.results
        assert r.status == "MATCH", (label, r)
        n, columns[label] = committed_rows(history, inspector, res.target, res.snapshot_id)
        assert r.rows_in_table == r.rows_reproduced == n and r.snapshot_id == res.snapshot_id
    # the history did change the DDL: a column added, one dropped and one widened, a table rebuilt
    assert columns["added"] == columns["v1-p1"] | {"twice"}
    assert columns["synced"] == columns["v1-mrg"] - {"k"}
    refreshed = history.runs["refresh"][1][0]
    assert refreshed.rows_inserted == committed_rows(history, inspector, "m.di", refreshed.snapshot_id)[0] > 0

    # explain shows what changed the table
    (m,) = project.explain(history.runs["added"][0])
    (s,) = project.explain(history.runs["synced"][0])
    (f,) = project.explain(history.runs["refresh"][0])
    if isinstance(history.house, IcebergLakehouse) and not isinstance(history.house, RestSqlLakehouse):
        assert m.extra_info["schema_changes"]["add"] == [["twice", "BIGINT"]]
        assert s.extra_info["schema_changes"]["drop"] == ["k"]
        assert s.extra_info["schema_changes"]["widen"] == [["amount", "BIGINT"]]
        assert f.extra_info["full_refresh"] == "true"
    else:
        (add,) = m.extra_info["schema_changes"]
        assert add.startswith("ALTER TABLE") and 'ADD COLUMN "twice" BIGINT' in add
        assert sorted(s.extra_info["schema_changes"]) == sorted(
            [a for a in s.extra_info["schema_changes"] if a.startswith("ALTER TABLE")])
        text = "\n".join(s.extra_info["schema_changes"])
        assert 'DROP COLUMN "k"' in text and 'ALTER COLUMN "amount" SET DATA TYPE BIGINT' in text
        assert f.extra_info["full_refresh"] is True
    from lakewrap.provenance import explain_sql

    text = explain_sql(history.house.root, [m, s, f])
    assert "on_schema_change" in text and "twice" in text and "--full-refresh" in text
