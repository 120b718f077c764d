"""Data tests with write-audit-publish on real Iceberg lakes (pyiceberg's SqlCatalog on SQLite).

The same kinds, rows and expected failures as ``test_checks_exec`` (computed there in Python from
the rows written into the source). On Iceberg the write is the pyiceberg commit, so the tests read
the table as the commit would leave it and run before it: a failing ``error`` test must leave the
catalog and the warehouse exactly as they were (every table's metadata location, every file).
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import test_checks_exec as checks_exec
from icehouse import IcebergLakehouse
from lakehouse import result_for
from test_checks_exec import (
    DAY,
    GOOD,
    MODEL,
    NOW,
    ORDERS,
    OTHER_DAY,
    PATH,
    _kind_cases,
    _matches,
    digest_rows,
    model,
    order,
)


def make_lake(root: Path, text: str, rows: list[dict[str, Any]]) -> IcebergLakehouse:
    lake = checks_exec.make_lake(root, text, rows, kind=IcebergLakehouse)
    assert isinstance(lake, IcebergLakehouse)
    return lake


def state(lake: IcebergLakehouse) -> tuple[Any, ...]:
    """Every table's metadata location and every file of the lake and of its REST server, if any
    (path, size). The run log's DuckDB file is left out: it records the refused run, as it must
    (docs/running.md, "The run log"), and holds no table data."""
    tables = sorted((name, lake.ice.load(name).metadata_location) for name in lake.ice.tables())
    files = sorted((str(p.relative_to(lake.root)), p.stat().st_size)
                   for folder in (".lakewrap", "rest-server") for p in (lake.root / folder).rglob("*")
                   if p.is_file() and not p.name.startswith("runlog.duckdb"))
    return tuple(tables), tuple(files)


def stored(lake: IcebergLakehouse, where: str = "") -> list[tuple[Any, ...]]:
    rows = lake.ice.load("sales.orders").scan().to_arrow().to_pylist()
    return sorted((r["order_id"], r["customer_id"], r["amount"], r["status"]) for r in rows
                  if not where or r["created_at"].date().isoformat() == where)


@pytest.mark.parametrize(("line", "bad", "count", "sample"), _kind_cases())
def test_each_kind_passes_then_fails_before_the_commit(tmp_path: Path, line: str, bad: list[dict[str, Any]],
                                                       count: int, sample: list[dict[str, Any]] | None) -> None:
    lake = make_lake(tmp_path, model(line), GOOD)
    first = result_for(lake.run(partition=DAY, now=NOW), "sales.orders")
    assert first.status == "success", first.error
    assert [(t["status"], t["failures"]) for t in first.tests] == [("pass", 0)]
    assert stored(lake) == digest_rows(GOOD)

    lake.sql(tables={"raw.orders": GOOD + bad + OTHER_DAY}, types={"raw.orders": ORDERS})
    before = state(lake)
    result = result_for(lake.run(partition=DAY, now=NOW), "sales.orders")
    assert result.status == "failed", result.error
    assert result.error_class == "DataTestFailure"
    (test,) = result.tests
    assert test["status"] == "fail" and test["failures"] == count
    assert len(test["sample"]) == min(count, 20)
    if sample is not None:
        assert _matches(test["sample"], sample), test["sample"]
    else:
        assert all(s["status"] is None and s["order_id"] >= 100 for s in test["sample"])
    assert result.error is not None and f"{PATH}:3:" in result.error and "nothing was written" in result.error
    assert state(lake) == before, "a failing error test changed the catalog or wrote files"

    # severity=warn: reported, committed, and the outcome is in the commit's snapshot summary
    (tmp_path / "models" / MODEL).write_text(model(line + " severity=warn"))
    warned = result_for(lake.run(partition=DAY, now=NOW), "sales.orders")
    assert warned.status == "success", warned.error
    assert warned.tests[0]["status"] == "warn" and warned.tests[0]["failures"] == count
    assert any(f"test `{test['name']}` (warn): {count} failing" in w for w in warned.warnings)
    assert stored(lake, DAY) == digest_rows(GOOD + bad)
    table = lake.ice.load("sales.orders")
    summary = table.current_snapshot().summary
    assert summary is not None and warned.snapshot_id == table.current_snapshot().snapshot_id
    assert json.loads(summary["lakewrap.tests"]) == [
        {"name": test["name"], "line": 3, "severity": "warn", "status": "warn", "failures": count}]


def test_tests_read_the_table_as_the_commit_leaves_it(tmp_path: Path) -> None:
    """A merge's `unique` test sees the kept rows plus the new ones: a duplicate that only the
    merged table holds (an old row the merge keeps, whose key a new row repeats) fails it; the old
    table alone or the new rows alone would pass."""
    text = "\n".join(["-- materialized incremental", "-- unique_key order_id", "-- test unique customer_id",
                      "SELECT order_id, customer_id, amount, status, created_at FROM raw.orders", ""])
    lake = make_lake(tmp_path, text, [order(1, customer=7)])  # with OTHER_DAY's order 10, customer 1
    assert result_for(lake.run(now=NOW), "sales.orders").status == "success"
    lake.sql(tables={"raw.orders": [order(2, customer=7)]}, types={"raw.orders": ORDERS})
    before = state(lake)
    result = result_for(lake.run(now=NOW), "sales.orders")
    assert result.status == "failed" and result.error_class == "DataTestFailure", result.error
    assert result.tests[0]["sample"] == [{"customer_id": 7, "occurrences": 2}]
    assert state(lake) == before
    # a merge that replaces the old row's customer passes: the old version is not in the merged table
    lake.sql(tables={"raw.orders": [order(1, customer=3), order(2, customer=7)]}, types={"raw.orders": ORDERS})
    merged = result_for(lake.run(now=NOW), "sales.orders")
    assert merged.status == "success", merged.error
    assert stored(lake) == [(1, 3, 10, "placed"), (2, 7, 10, "placed"), (10, 1, -1, None)]


def test_snapshot_tests_read_the_current_versions_after_the_commit(tmp_path: Path) -> None:
    """An SCD2 history on Iceberg: `unique` on the key holds for the current versions the commit
    leaves (the closed version is replaced by its closed copy, the new one appended)."""
    text = ("-- snapshot strategy=check unique_key=customer_id check_cols=all\n"
            "-- test unique customer_id\n-- test not_null tier\n"
            "SELECT customer_id, tier FROM raw.tiers\n")
    lake = IcebergLakehouse(tmp_path, {"marts/tiers.sql": text})
    types = {"raw.tiers": {"customer_id": "INTEGER", "tier": "VARCHAR"}}
    lake.sql(tables={"raw.tiers": [{"customer_id": 1, "tier": "gold"}]}, types=types)
    assert lake.run(now=NOW).ok
    lake.sql(tables={"raw.tiers": [{"customer_id": 1, "tier": "platinum"}]}, types=types)
    report = lake.run(now=NOW + timedelta(days=1))
    assert report.ok, [r.error for r in report.results]
    history = lake.ice.load("marts.tiers").scan().to_arrow().to_pylist()
    assert sorted((r["tier"], r["is_current"]) for r in history) == [("gold", False), ("platinum", True)]
    lake.sql(tables={"raw.tiers": [{"customer_id": 1, "tier": None}]}, types=types)
    before = state(lake)
    failed = result_for(lake.run(now=NOW + timedelta(days=2)), "marts.tiers")
    assert failed.status == "failed", failed.error
    assert [(t["status"], t["failures"]) for t in failed.tests] == [("pass", 0), ("fail", 1)]
    assert state(lake) == before


def test_lakewrap_test_reads_the_published_iceberg_table(tmp_path: Path) -> None:
    """`lakewrap test` on Iceberg: the tests of the model against its current snapshot, read-only."""
    from lakewrap.datatests import run_tests

    dup = order(2, customer=2, amount=20, status="shipped", hour=15)
    lake = make_lake(tmp_path, model("-- test unique order_id severity=warn"), [*GOOD, dup])
    assert result_for(lake.run(partition=DAY, now=NOW), "sales.orders").status == "success"
    (tmp_path / "models" / MODEL).write_text(model("-- test unique order_id"))
    before = state(lake)
    report = run_tests(tmp_path, partition=DAY, now=NOW)
    (model_tests,) = report.results
    assert model_tests.error is None, model_tests.error
    assert [(t.status, t.failures, t.sample) for t in model_tests.tests] == [
        ("fail", 1, [{"order_id": 2, "occurrences": 2}])]
    assert not report.ok
    other = run_tests(tmp_path, partition="2024-01-03", now=NOW)  # order 10's day holds no duplicate
    assert [t.status for t in other.results[0].tests] == ["pass"]
    assert state(lake) == before
