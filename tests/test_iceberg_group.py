"""Group commit on Iceberg's write path ``sql``: several materializations in one DuckDB transaction,
sent to the REST catalog as one atomic ``POST /v1/transactions/commit``.

Everything runs for real: DuckDB 1.5.5 attached to the test REST adapter (``rest_adapter.py``, whose
journal records the tables of each committed ``/v1/transactions/commit``), over a pyiceberg
SqlCatalog on SQLite. Lost and refused commit responses are injected by the adapter (``faults``).
Table contents are compared with rows computed in Python from the source.
"""

# ruff: noqa: F811  (the fixtures served, faults and journal, imported from test_iceberg_sql, are parameters)
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from lakewrap.cli import main
from lakewrap.runner import run_project
from lakewrap.substrates.iceberg.state import sql_materializations, state_rows
from test_iceberg_sql import DI, MG, NOW, faults, journal, project, rows_of, served, source  # noqa: F401 (fixtures)

DOWN = "-- materialized table\nSELECT id, v + 1 AS v FROM out.a\n"
BAD = ("-- materialized incremental\n-- partitioned daily key=ts\n"
       "SELECT id, CASE WHEN id >= 1000 THEN error('bad row ' || id) ELSE v END AS v, ts FROM raw.src "
       "WHERE ts >= $partition_start AND ts < $partition_end\n")
AP_A = "-- materialized incremental\n-- append\nSELECT id, v, ts FROM raw.src\n"
AP_B = AP_A.replace("SELECT id", "SELECT id + 0 AS id")
DAYS = ["2024-01-01", "2024-01-02", "2024-01-03"]


def expected(lake: Any, days: range) -> list[tuple[int, int]]:
    """(id, v) of raw.src on ``days`` (indexes from 2024-01-01), computed in Python."""
    return sorted((r["id"], r["v"]) for r in rows_of(lake, "raw.src") if (r["ts"].day - 1) in days)


def ids(lake: Any, name: str) -> list[tuple[int, int]]:
    return sorted((r["id"], r["v"]) for r in rows_of(lake, name))


def state_of(lake: Any, target: str) -> list[tuple[Any, ...]]:
    return sorted((r["run_id"], r["partition_value"]) for r in state_rows(lake, target))


def state_tables(*targets: str) -> tuple[str, ...]:
    return tuple(sorted([*targets, *(f"lakewrap.{t.replace('.', '__')}" for t in targets)]))


def test_a_dag_level_and_its_partitions_commit_as_one_catalog_transaction(tmp_path: Path, served: str,
                                                                          journal: list[tuple[str, ...]]) -> None:
    lake = project(tmp_path, served, {"out/a.sql": DI, "out/b.sql": DI, "out/m.sql": MG, "out/d.sql": DOWN})
    source(lake, 3, 4)
    first = run_project(tmp_path, partition=DAYS[0], now=NOW, run_id="run-1")
    assert first.ok, [r.error for r in first.results]
    journal.clear()
    compiled = CliRunner().invoke(main, ["compile", "--project", str(tmp_path), "--start", DAYS[1], "--end", DAYS[2],
                                         "--format", "json"])
    assert compiled.exit_code == 0, compiled.output
    out = json.loads(compiled.output)
    plans = [(p["target"], (p.get("window") or {}).get("value")) for p in out["plans"]]
    predicted = [sorted({plans[i][0] for i in c["plans"]}) for c in out["commits"]]
    report = run_project(tmp_path, start=DAYS[1], end=DAYS[2], now=NOW, run_id="run-2")
    assert report.ok, [r.error for r in report.results]
    # a, b and m (2 partitions each where partitioned) in one /v1/transactions/commit; d, which
    # reads a, in the next: a state row cannot name the snapshot of a commit still open
    assert journal == [state_tables("out.a", "out.b", "out.m"), state_tables("out.d")]
    assert predicted == [["out.a", "out.b", "out.m"], ["out.d"]]
    groups = {r.target: r.group for r in report.results}
    assert groups["out.a"] == groups["out.b"] == groups["out.m"] is not None and groups["out.d"] is None
    for name in ("out.a", "out.b"):
        assert ids(lake, name) == expected(lake, range(3))
        assert state_of(lake, name) == [("run-1", DAYS[0]), ("run-2", DAYS[1]), ("run-2", DAYS[2])]
        records = sql_materializations(lake, name)
        # both partitions of run-2 name the snapshot their one commit left, which is the table's
        assert [m["snapshot_id"] for m in records[1:]] == [lake.load(name).current_snapshot().snapshot_id] * 2
        assert records[1]["commit_id"] == records[2]["commit_id"] != records[0]["commit_id"]
    assert ids(lake, "out.m") == expected(lake, range(3))
    assert ids(lake, "out.d") == [(i, v + 1) for i, v in expected(lake, range(3))]
    pins = json.loads(state_rows(lake, "out.d")[-1]["pins"])
    assert pins == {"out.a": lake.load("out.a").current_snapshot().snapshot_id}
    history = CliRunner().invoke(main, ["history", "--project", str(tmp_path), "out.a", "--format", "json"])
    assert history.exit_code == 0, history.output


def test_a_failing_member_is_rolled_back_and_the_others_land_once(tmp_path: Path, served: str,
                                                                 journal: list[tuple[str, ...]]) -> None:
    lake = project(tmp_path, served, {"out/a.sql": DI, "out/b.sql": DI, "out/bad.sql": BAD})
    source(lake, 3, 4)
    assert run_project(tmp_path, partition=DAYS[0], now=NOW, run_id="run-1").ok  # ids < 1000 only
    journal.clear()
    report = run_project(tmp_path, start=DAYS[1], end=DAYS[2], now=NOW, run_id="run-2")
    status = Counter((r.target, r.status) for r in report.results)
    assert status == {("out.a", "success"): 2, ("out.b", "success"): 2, ("out.bad", "failed"): 2}, [
        (r.target, r.partition, r.status, r.error) for r in report.results]
    errors = {r.partition: r.error or "" for r in report.results if r.status == "failed"}
    assert "bad row 1000" in errors[DAYS[1]] and "bad row 2000" in errors[DAYS[2]], errors
    assert all(r.attempts == 1 for r in report.results if r.status == "failed")  # an error, not a conflict
    # the group rolled back, committed again without out.bad; out.bad's partitions then ran alone
    # and failed
    assert journal == [state_tables("out.a", "out.b")]
    for name in ("out.a", "out.b"):
        assert ids(lake, name) == expected(lake, range(3))  # nothing duplicated, nothing lost
        assert state_of(lake, name) == [("run-1", DAYS[0]), ("run-2", DAYS[1]), ("run-2", DAYS[2])]
    assert ids(lake, "out.bad") == expected(lake, range(1)) and state_of(lake, "out.bad") == [("run-1", DAYS[0])]


@pytest.mark.parametrize("fault", ["lose", "refuse"])
def test_a_group_commit_whose_answer_is_lost_or_refused_is_applied_at_most_once(
        tmp_path: Path, served: str, fault: str, faults: dict[str, int], journal: list[tuple[str, ...]]) -> None:
    """refuse: the adapter answers 503 and commits nothing; the commit id is in neither state table,
    so each member is committed again alone. lose: the adapter commits, then answers 503; DuckDB
    1.5.5 re-sends (409), reports a failed COMMIT and deletes the data files the catalog now
    references (docs/iceberg.md), so the state tables cannot be read back: every member fails with
    an unknown outcome and none is retried -- the group was applied once, never twice."""
    lake = project(tmp_path, served, {"out/a.sql": AP_A, "out/b.sql": AP_B})
    source(lake, 1, 3)
    assert run_project(tmp_path, now=NOW, run_id="run-1").ok
    # lose: the next /v1/transactions/commit; refuse: the next six requests (DuckDB's HTTP client
    # sends a COMMIT up to four times: the group's COMMIT fails, the first member's alone goes
    # through on its third request)
    faults[fault] = 1 if fault == "lose" else 6
    journal.clear()
    report = run_project(tmp_path, now=NOW, run_id="run-2")
    assert faults[fault] == 0
    if fault == "refuse":
        assert report.ok, [r.error for r in report.results]
        # the group's commit id was in neither state table: its members were committed again alone
        assert journal == [state_tables("out.a"), state_tables("out.b")], journal
        for name in ("out.a", "out.b"):
            assert len(rows_of(lake, name)) == 6  # appended twice: once per run
            assert [r["run_id"] for r in state_rows(lake, name)] == ["run-1", "run-2"]
        return
    assert journal == [state_tables("out.a", "out.b")]  # applied once
    assert [(r.status, r.attempts) for r in report.results] == [("failed", 1)] * 2
    assert all("outcome is unknown" in (r.error or "") for r in report.results), [r.error for r in report.results]
    for name in ("out.a", "out.b"):
        summary = lake.load(name).current_snapshot().summary.additional_properties
        assert summary["total-records"] == "6"  # applied once, not retried


def test_atomic_is_refused_on_the_sql_write_path(tmp_path: Path, served: str) -> None:
    lake = project(tmp_path, served, {"out/a.sql": DI, "out/d.sql": DOWN})
    source(lake, 1, 2)
    result = CliRunner().invoke(main, ["run", "--project", str(tmp_path), "--partition", DAYS[0], "--atomic"])
    assert result.exit_code != 0
    assert "cannot record the pins of a model whose upstream is written in the same commit" in result.output
    assert lake.load("out.a") is None  # nothing was written
