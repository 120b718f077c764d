"""Provenance on Iceberg's DuckDB-SQL write path (a REST catalog, the test adapter over a pyiceberg
SqlCatalog): explain, reproduce, restore and compile --as-of read the state tables.

The models and source history of ``test_provenance_iceberg.py``. References are computed without the
code under test: table content read with pyiceberg ``scan(snapshot_id=...)`` through a catalog of
the test's own, state rows read with a plain pyiceberg scan of the state table, and every table's
metadata location before and after.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import lakewrap
from icehouse_sql import RestSqlLakehouse
from lakehouse import at, daily_window, partition
from lakeproject import cli
from test_provenance import V1, V2
from test_provenance_iceberg import ICE_MODELS, IceHistory

STATE = "lakewrap.m__di"


class SqlHistory(IceHistory):
    def __init__(self, root: Path) -> None:
        self.house = RestSqlLakehouse(root, ICE_MODELS)  # type: ignore[assignment]
        self.runs = []


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Any:
    h = SqlHistory(tmp_path_factory.mktemp("prov-sql") / "proj")
    h.build()
    yield h
    h.house.close()  # type: ignore[attr-defined]


def load(h: SqlHistory, name: str) -> Any:
    return h.house.ice.load(name)


def rows(h: SqlHistory, name: str, snapshot_id: int | None = None, day: int | None = None) -> list[Any]:
    t = load(h, name)
    data = (t.scan(snapshot_id=snapshot_id) if snapshot_id is not None else t.scan()).to_arrow().to_pylist()
    if day is not None:
        w = daily_window(partition(day), "ts")
        data = [r for r in data if w.start <= r["ts"] < w.end]
    return sorted(tuple(sorted(r.items())) for r in data)


def pointers(h: SqlHistory) -> dict[str, str]:
    """Every table's metadata location: any commit changes it."""
    return {n: load(h, n).metadata_location for n in h.house.ice.tables()}


def state_of(h: SqlHistory, target: str) -> list[dict[str, Any]]:
    schema, _, name = target.partition(".")
    return load(h, f"lakewrap.{schema}__{name}").scan().to_arrow().to_pylist()  # type: ignore[no-any-return]




def test_explain_and_compile_as_of(built: SqlHistory) -> None:
    root = built.house.root
    run_id, committed = built.runs[3]  # V2, partition 1
    res = next(r for r in committed if r.target == "m.joined")
    (row,) = [s for s in state_of(built, "m.joined") if s["run_id"] == run_id]
    code, out, _ = cli("explain", str(res.snapshot_id), "--project", str(root), "--format", "json")
    (m,) = json.loads(out)
    assert code == 0 and (m["run_id"], m["target"], m["partition"], m["strategy"], m["snapshot_id"]) == (
        run_id, "m.joined", partition(1), "delete+insert", res.snapshot_id)
    assert m["pins"] == json.loads(row["pins"]) and set(m["pins"]) == {"raw.events"}
    assert m["sql_sha256"] == row["sql_sha256"] == res.sql_sha256
    assert m["extra_info"]["base_snapshot"] == str(row["base_snapshot"])
    assert m["extra_info"]["commit_id"] == row["commit_id"]
    assert m["params"]["partition_start"] == daily_window(partition(1), "ts").start.isoformat()
    # the statements are those the plan holds: the model compiled now has the same sql_sha256
    (plan,) = lakewrap.Project(root).compile(["m.joined"], partition=partition(1))
    assert plan.write_path == "sql" and plan.sql_sha256 == m["sql_sha256"]
    assert [s["sql"] for s in m["statements"]] == [s.sql for s in plan.statements]
    # the commit's first snapshot (DuckDB's DELETE) names it too
    first = load(built, "m.joined").metadata.snapshot_by_id(res.snapshot_id).parent_snapshot_id
    assert json.loads(cli("explain", str(first), "--project", str(root), "--format", "json")[1])[0]["run_id"] == run_id
    code, text, _ = cli("explain", run_id, "--project", str(root))
    assert code == 0 and text.count("-- run:        " + run_id) == len(committed) and "COMMIT;" in text
    # the setup statements ran before BEGIN, each committed on its own
    assert text.index('CREATE TABLE IF NOT EXISTS "ice"."lakewrap"."m__') < text.index("BEGIN TRANSACTION;")

    # compile --as-of: every upstream read at its pin, the target live
    pin = json.loads(row["pins"])["raw.events"]
    code, out, err = cli("compile", "m.joined", "--partition", partition(1), "--as-of", run_id,
                         "--project", str(root), "--no-cache")
    assert code == 0, err
    assert out.count(f"\"ice\".raw.events AS e AT (VERSION => {pin})") == 1
    assert out.count(f"AT (VERSION => {pin})") == 3  # the CTE's read, the join's subquery, the IN (SELECT ...)
    assert 'DELETE FROM "ice"."m"."joined"' in out and '"ice"."m"."joined" AT' not in out
    # the pinned stage runs through the REST catalog and reads the source as the run did (V2), not now
    (pinned,) = lakewrap.Project(root).compile(["m.joined"], partition=partition(1), as_of=run_id)
    (by_snap,) = lakewrap.Project(root).compile(["m.joined"], partition=partition(1), as_of=str(res.snapshot_id))
    stage = next(st for st in pinned.statements if st.role == "stage")
    assert stage.sql == next(st for st in by_snap.statements if st.role == "stage").sql
    from lakewrap.substrates.iceberg.sql_connect import connect

    con = connect(built.house.ice)
    try:
        con.execute(stage.sql, {k: v.python() for k, v in stage.params.items()})
        got = sorted(con.execute("SELECT * FROM __lakewrap_stage").fetchall())
    finally:
        con.close()
    w = daily_window(partition(1), "ts")
    totals = {k: sum(r["amount"] for r in V2 if r["k"] == k) for k in {r["k"] for r in V2}}
    assert got == sorted((r["id"], r["amount"], totals[r["k"]], r["ts"]) for r in V2
                         if w.start <= r["ts"] < w.end and r["amount"] > 0)








def test_state_table_of_an_earlier_lakewrap_is_upgraded(tmp_path: Path) -> None:
    """A state table created before the provenance columns existed: the next run adds them (the plan's
    `ADD COLUMN IF NOT EXISTS` setup) and commits; the old rows are said to have no statements."""
    house = RestSqlLakehouse(tmp_path / "proj", {"m/di.sql": ICE_MODELS["m/di.sql"]})
    try:
        h = SqlHistory.__new__(SqlHistory)
        h.house, h.runs = house, []
        h.source(V1)
        old = h.run(["m.di"], at(3), partition(0))
        state = house.ice.load(STATE)
        with state.update_schema(allow_incompatible_changes=True) as update:
            for column in ("params", "statements", "schema_changes", "provenance"):
                update.delete_column(column)
        assert "statements" not in house.ice.load(STATE).schema().column_names
        new = h.run(["m.di"], at(3), partition(1))
        assert "statements" in house.ice.load(STATE).schema().column_names
        project = lakewrap.Project(house.root)
        (r_old,) = project.reproduce(old).results
        assert r_old.status == "ERROR" and "not in the state table" in (r_old.detail or "")
        (r_new,) = project.reproduce(new).results
        assert r_new.status == "MATCH", r_new
        (m_old,) = project.explain(old)
        assert m_old.statements == [] and m_old.extra_info.get("params") is None
    finally:
        house.close()
