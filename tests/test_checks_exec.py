"""Data tests, contracts and write-audit-publish on real DuckLakes.

Each test kind passes on good data and fails on data broken on purpose; the expected failing-row
count and sample are computed here in Python from the rows the test wrote into the source, not
from lakewrap's SQL. A failing ``error`` test must leave the lake exactly as it was: the same
snapshot ids and the same digest of every table (lakewrap's state and fence tables included),
read by an :class:`~lakeproject.Inspector` that does not go through lakewrap.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from lakehouse import UTC, Lakehouse, result_for
from lakeproject import Inspector, cli

NOW = datetime(2024, 6, 1, tzinfo=UTC)
DAY = "2024-01-02"
ORDERS = {"order_id": "INTEGER", "customer_id": "INTEGER", "amount": "INTEGER", "status": "VARCHAR",
          "created_at": "TIMESTAMPTZ"}
CUSTOMERS = {"customer_id": "INTEGER"}
MODEL = "sales/orders.sql"
PATH = "models/sales/orders.sql"


def order(order_id: int, *, customer: int = 1, amount: int | None = 10, status: str | None = "placed",
          hour: int = 9, day: int = 2) -> dict[str, Any]:
    return {"order_id": order_id, "customer_id": customer, "amount": amount, "status": status,
            "created_at": datetime(2024, 1, day, tzinfo=UTC) + timedelta(hours=hour)}


GOOD = [order(1), order(2, customer=2, amount=20, status="shipped"), order(3, amount=0)]
OTHER_DAY = [order(10, day=3, status=None, amount=-1)]  # breaks every test, but outside the window


def model(*header: str) -> str:
    return "\n".join([
        "-- materialized incremental",
        "-- partitioned daily key=created_at",
        *header,
        "SELECT order_id, customer_id, amount, status, created_at",
        "FROM raw.orders",
        "WHERE created_at >= $partition_start AND created_at < $partition_end",
        "",
    ])


@pytest.fixture(scope="module")
def inspector() -> Iterator[Inspector]:
    ins = Inspector()
    try:
        yield ins
    finally:
        ins.close()


def make_lake(root: Path, text: str, rows: list[dict[str, Any]], kind: type[Lakehouse] = Lakehouse) -> Lakehouse:
    lake = kind(root, {MODEL: text})
    (root / "tests").mkdir(exist_ok=True)
    (root / "tests" / "big_amounts.sql").write_text(
        "SELECT order_id, amount FROM sales.orders\n"
        "WHERE amount > 100 AND created_at >= $partition_start AND created_at < $partition_end\n")
    lake.sql(tables={"raw.orders": rows + OTHER_DAY, "raw.customers": [{"customer_id": 1}, {"customer_id": 2}]},
             types={"raw.orders": ORDERS, "raw.customers": CUSTOMERS})
    return lake


def table_rows(lake: Lakehouse, sql: str) -> list[tuple[Any, ...]]:
    con = lake.connect()
    try:
        return [tuple(r) for r in con.execute(sql).fetchall()]
    finally:
        con.close()


def digest_rows(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return sorted((r["order_id"], r["customer_id"], r["amount"], r["status"]) for r in rows)


# Each kind: the `-- test` line, the rows that break it, the failing-row count and the sample a
# plain reading of the kind's definition gives for those rows.
def _kind_cases() -> list[Any]:
    dup = order(2, customer=2, amount=20, status="shipped", hour=15)
    nulls = [order(100 + i, status=None, hour=10) for i in range(25)]
    return [
        pytest.param("-- test unique order_id", [dup], 1, [{"order_id": 2, "occurrences": 2}], id="unique"),
        pytest.param("-- test not_null order_id,status", nulls, 25, None, id="not_null"),
        pytest.param("-- test accepted_values status=placed,shipped", [order(4, status="lost")], 1,
                     [{"status": "lost", "order_id": 4}], id="accepted_values"),
        pytest.param("-- test relationships customer_id -> raw.customers.customer_id",
                     [order(5, customer=99)], 1, [{"order_id": 5, "customer_id": 99}], id="relationships"),
        pytest.param("-- test row_count min=1 max=3", [order(6)], 1, [{"row_count": 4}], id="row_count"),
        pytest.param('-- test expression "amount >= 0"', [order(7, amount=-5), order(8, amount=None)], 2,
                     [{"order_id": 7, "amount": -5}, {"order_id": 8, "amount": None}], id="expression"),
        pytest.param("-- test sql tests/big_amounts.sql", [order(9, amount=500)], 1,
                     [{"order_id": 9, "amount": 500}], id="sql"),
    ]


def _matches(sample: list[dict[str, Any]], expected: list[dict[str, Any]]) -> bool:
    """Each expected row is in the sample (compared on the expected row's columns), one to one."""
    left = list(sample)
    for want in expected:
        hit = next((s for s in left if all(s.get(k) == v for k, v in want.items())), None)
        if hit is None:
            return False
        left.remove(hit)
    return not left


@pytest.mark.parametrize(("line", "bad", "count", "sample"), _kind_cases())
def test_each_kind_passes_then_fails_and_a_failure_writes_nothing(
        tmp_path: Path, inspector: Inspector, line: str, bad: list[dict[str, Any]], count: int,
        sample: list[dict[str, Any]] | None) -> None:
    lake = make_lake(tmp_path, model(line), GOOD)
    first = result_for(lake.run(partition=DAY, now=NOW), "sales.orders")
    assert first.status == "success", first.error
    assert [(t["status"], t["failures"]) for t in first.tests] == [("pass", 0)]
    assert digest_rows(GOOD) == sorted(r[:4] for r in table_rows(lake, "SELECT * FROM sales.orders"))

    lake.sql(tables={"raw.orders": GOOD + bad + OTHER_DAY}, types={"raw.orders": ORDERS})
    before = inspector.state(tmp_path)
    result = result_for(lake.run(partition=DAY, now=NOW), "sales.orders")
    assert result.status == "failed"
    assert result.error_class == "DataTestFailure"
    (test,) = result.tests
    assert test["status"] == "fail" and test["failures"] == count
    assert len(test["sample"]) == min(count, 20)
    if sample is not None:
        assert _matches(test["sample"], sample), test["sample"]
    else:  # not_null: every sampled row has a NULL status, and they are rows the test broke
        assert all(s["status"] is None and s["order_id"] >= 100 for s in test["sample"])
    assert result.error is not None
    assert f"{PATH}:3:" in result.error and f"test `{test['name']}`" in result.error
    assert "nothing was written" in result.error
    assert inspector.state(tmp_path) == before, "a failing error test changed the lake"

    # the same failure with severity=warn is reported and published
    (tmp_path / "models" / MODEL).write_text(model(line + " severity=warn"))
    warned = result_for(lake.run(partition=DAY, now=NOW), "sales.orders")
    assert warned.status == "success", warned.error
    assert warned.tests[0]["status"] == "warn" and warned.tests[0]["failures"] == count
    assert any(f"test `{test['name']}` (warn): {count} failing" in w for w in warned.warnings)
    after = inspector.state(tmp_path)
    assert len(after[0]) == len(before[0]) + 1
    stored = sorted(r[:4] for r in table_rows(lake, "SELECT * FROM sales.orders WHERE created_at < '2024-01-03'"))
    assert stored == digest_rows(GOOD + bad)
    # committed materializations keep their test outcomes in the lake; the rolled-back one left none
    recorded = table_rows(lake, "SELECT run_id, test, status, failures, line FROM lakewrap.test_results "
                                "ORDER BY committed_at")
    name = test["name"]
    assert [r[1:] for r in recorded] == [(name, "pass", 0, 3), (name, "warn", count, 3)]
    assert recorded[1][0] == table_rows(lake, "SELECT run_id FROM lakewrap.materializations "
                                              "ORDER BY committed_at DESC LIMIT 1")[0][0]


def test_the_run_results_file_holds_the_failures(tmp_path: Path) -> None:
    lake = make_lake(tmp_path, model("-- test accepted_values status=placed,shipped"), [*GOOD, order(4, status="x")])
    report = lake.run(partition=DAY, now=NOW)
    assert not report.ok
    doc = json.loads((tmp_path / "target" / "run_results.json").read_text())
    (res,) = doc["results"]
    assert res["status"] == "failed" and res["error_class"] == "DataTestFailure"
    assert res["tests"][0]["failures"] == 1 and res["tests"][0]["sample"][0]["status"] == "x"
    assert res["tests"][0]["line"] == 3 and res["tests"][0]["path"] == PATH
    # the statement log shows the test query that ran, and the rollback
    log = next((tmp_path / "target" / "run" / report.run_id).glob("sales.orders__*.sql")).read_text()
    assert "__lakewrap_failures" in log and "ROLLBACK" in log and "COMMIT" not in log.split("__lakewrap_failures")[1]


def test_tests_cover_only_the_partition_being_written(tmp_path: Path, inspector: Inspector) -> None:
    """Day 3 holds rows that break every test; writing day 2 is still fine, because the tests read the
    window being written. ``lakewrap test`` reads the whole table unless given --partition."""
    header = ["-- test not_null status", '-- test expression "amount >= 0"']
    lake = make_lake(tmp_path, model(), GOOD)
    assert lake.run(partition="2024-01-03", now=NOW).ok  # no tests yet: day 3's bad row is published
    (tmp_path / "models" / MODEL).write_text(model(*header))
    report = lake.run(partition=DAY, now=NOW)
    assert report.ok, [r.error for r in report.results]
    assert [t["status"] for t in report.results[0].tests] == ["pass", "pass"]

    code, out, err = cli("test", "--project", str(tmp_path), "--partition", DAY, "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["ok"] and [t["status"] for t in doc["results"][0]["tests"]] == ["pass", "pass"]

    before = inspector.state(tmp_path)
    code, out, err = cli("test", "--project", str(tmp_path), "--format", "json")
    assert code == 1
    tests = json.loads(out)["results"][0]["tests"]
    assert [(t["status"], t["failures"]) for t in tests] == [("fail", 1), ("fail", 1)]
    assert tests[0]["sample"][0]["order_id"] == 10
    assert inspector.state(tmp_path) == before, "lakewrap test wrote to the lake"

    code, out, _ = cli("test", "--project", str(tmp_path))
    assert code == 1 and "not_null status" in out and "failing row" in out


def test_lakewrap_test_usage_errors_and_nothing_to_test(tmp_path: Path) -> None:
    lake = make_lake(tmp_path, model("-- test not_null status"), GOOD)
    assert lake.run(partition=DAY, now=NOW).ok
    code, _, err = cli("test", "--project", str(tmp_path), "--partition", "2024-13-01")
    assert code == 2 and "not a valid daily partition" in err
    code, _, err = cli("test", "--project", str(tmp_path), "nosuch")
    assert code == 2
    (tmp_path / "models" / MODEL).write_text(model())
    code, out, _ = cli("test", "--project", str(tmp_path))
    assert code == 0 and "no selected model has tests" in out


def test_a_missing_test_file_is_a_located_error(tmp_path: Path, inspector: Inspector) -> None:
    lake = make_lake(tmp_path, model("-- test sql tests/nope.sql"), GOOD)
    before = inspector.state(tmp_path)
    code, _, err = cli("run", "--project", str(tmp_path), "--partition", DAY)
    assert code == 1 and f"{PATH}:3" in err and "tests/nope.sql" in err and "no such file" in err
    code, _, err = cli("compile", "--project", str(tmp_path), "--partition", DAY)
    assert code == 1 and "tests/nope.sql" in err
    assert inspector.state(tmp_path) == before
    del lake


def test_compile_shows_the_tests_in_the_plan(tmp_path: Path) -> None:
    make_lake(tmp_path, model("-- test unique order_id", "-- test row_count min=1 severity=warn"), GOOD)
    code, out, err = cli("compile", "--project", str(tmp_path), "--partition", DAY, "--format", "json")
    assert code == 0, err
    statements = json.loads(out)["plans"][0]["statements"]
    tests = [s for s in statements if s["role"] == "test"]
    assert [(s["test"]["name"], s["test"]["severity"], s["test"]["line"]) for s in tests] == [
        ("unique order_id", "error", 3), ("row_count min=1", "warn", 4)]
    roles = [s["role"] for s in statements]
    assert roles.index("test") > max(i for i, r in enumerate(roles) if r == "write")  # after the write


def test_snapshot_tests_read_the_current_versions(tmp_path: Path, inspector: Inspector) -> None:
    """A key's history has several versions; `unique` on the key holds for the current ones."""
    text = ("-- snapshot strategy=check unique_key=customer_id check_cols=all\n"
            "-- test unique customer_id\n-- test not_null tier\n"
            "SELECT customer_id, tier FROM raw.tiers\n")
    lake = Lakehouse(tmp_path, {"marts/tiers.sql": text})
    types = {"raw.tiers": {"customer_id": "INTEGER", "tier": "VARCHAR"}}
    lake.sql(tables={"raw.tiers": [{"customer_id": 1, "tier": "gold"}]}, types=types)
    assert lake.run(now=NOW).ok
    lake.sql(tables={"raw.tiers": [{"customer_id": 1, "tier": "platinum"}]}, types=types)
    report = lake.run(now=NOW + timedelta(days=1))
    assert report.ok, [r.error for r in report.results]
    assert table_rows(lake, "SELECT count(*) FROM marts.tiers")[0][0] == 2
    lake.sql(tables={"raw.tiers": [{"customer_id": 1, "tier": None}]}, types=types)
    before = inspector.state(tmp_path)
    failed = result_for(lake.run(now=NOW + timedelta(days=2)), "marts.tiers")
    assert failed.status == "failed" and failed.tests[1]["failures"] == 1
    assert inspector.state(tmp_path) == before


def test_lakewrap_test_binds_the_widest_window_for_a_sql_test(tmp_path: Path) -> None:
    lake = make_lake(tmp_path, model("-- test sql tests/big_amounts.sql severity=warn"), [*GOOD, order(9, amount=500)])
    run = result_for(lake.run(partition=DAY, now=NOW), "sales.orders")
    assert run.status == "success" and run.tests[0]["status"] == "warn"
    code, out, err = cli("test", "--project", str(tmp_path), "--format", "json")
    assert code == 0, err  # a warn test only reports
    (test,) = json.loads(out)["results"][0]["tests"]
    assert (test["status"], test["failures"], test["sample"]) == ("warn", 1, [{"order_id": 9, "amount": 500}])
    (tmp_path / "models" / MODEL).write_text(model("-- test sql tests/big_amounts.sql"))
    code, out, _ = cli("test", "--project", str(tmp_path), "--format", "json")
    assert code == 1 and json.loads(out)["results"][0]["tests"][0]["status"] == "fail"
