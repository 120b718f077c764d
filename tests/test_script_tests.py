"""Script tests (``-- test script checks/<file>.py``) and a package's script test kind, on real DuckLakes.

The function gets the relation being published inside the transaction, before COMMIT. A failing
``error`` test must roll back exactly like a SQL test: the lake's snapshot ids and the digest of
every table unchanged (an :class:`~lakeproject.Inspector` reads them without lakewrap), and the
table's contents equal to what plain DuckDB computes from the source rows of the last good run.
The expected failing-row counts are computed here in Python from the rows written.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pytest

from helpers import install_dist, run, site_env
from lakehouse import UTC, Lakehouse
from lakeproject import Inspector
from lakewrap.runner import run_project

NOW = datetime(2024, 6, 1, tzinfo=UTC)
ORDERS = {"order_id": "INTEGER", "amount": "INTEGER", "created_at": "TIMESTAMPTZ"}
PATH = "models/sales/orders.sql"
TOML = '[security]\nscripts = ["checks"]\n'

CHECKS = '''\
import pyarrow as pa


def check(relation, max="100"):
    """Amounts above max fail (a relation back)."""
    return relation.filter(f"amount > {int(max)}")


def as_arrow(relation, max="100"):
    table = relation.to_arrow_table()
    return table.filter(pa.compute.greater(table["amount"], int(max)))


def as_pandas(relation, max="100"):
    df = relation.df()
    return df[df["amount"] > int(max)]


def as_list(relation, max="100"):
    return [dict(zip(relation.columns, row)) for row in relation.fetchall() if row[1] > int(max)]


def as_count(relation, max="100"):
    return sum(1 for row in relation.fetchall() if row[1] > int(max))


def window(relation, ctx):
    """Sees the partition's bounds and the transaction's own rows."""
    lo, hi = ctx.params["partition_start"], ctx.params["partition_end"]
    outside = ctx.con.sql(
        "SELECT count(*) FROM sales.orders WHERE created_at < $lo OR created_at >= $hi", params={"lo": lo, "hi": hi})
    inside = relation.aggregate("count(*)").fetchone()[0]
    return 0 if inside > 0 and outside.fetchone()[0] == 0 else 1


def raises(relation):
    rows = relation.fetchall()
    return 1 / (len(rows) - len(rows))


def nothing(relation):
    pass
'''


def model(test: str) -> str:
    return "\n".join(["-- materialized incremental", "-- partitioned daily key=created_at", test,
                      "SELECT order_id, amount, created_at FROM raw.orders",
                      "WHERE created_at >= $partition_start AND created_at < $partition_end", ""])


def orders(amounts: list[int], day: int = 2) -> list[dict[str, Any]]:
    return [{"order_id": day * 100 + i, "amount": a, "created_at": datetime(2024, 1, day, tzinfo=UTC)
             + timedelta(hours=i)} for i, a in enumerate(amounts)]


def project(root: Path, test: str, source: list[dict[str, Any]], toml: str = TOML) -> Lakehouse:
    (root / "checks").mkdir(parents=True)
    (root / "checks" / "amounts.py").write_text(CHECKS)
    (root / "lakewrap.toml").write_text(toml)
    lake = Lakehouse(root, {"sales/orders.sql": model(test)})
    lake.sql(tables={"raw.orders": source}, types={"raw.orders": ORDERS})
    return lake


def reference(source: list[dict[str, Any]], day: int) -> list[tuple[Any, ...]]:
    """The rows a partition of the model holds, computed by plain DuckDB from the source rows."""
    con = duckdb.connect()
    try:
        con.execute("CREATE TABLE o (order_id INTEGER, amount INTEGER, created_at TIMESTAMPTZ)")
        con.executemany("INSERT INTO o VALUES (?, ?, ?)", [(r["order_id"], r["amount"], r["created_at"])
                                                           for r in source])
        return [tuple(r) for r in con.execute(
            "SELECT order_id, amount FROM o WHERE created_at >= ? AND created_at < ? ORDER BY 1",
            [datetime(2024, 1, day, tzinfo=UTC), datetime(2024, 1, day + 1, tzinfo=UTC)]).fetchall()]
    finally:
        con.close()


def table_rows(lake: Lakehouse) -> list[tuple[Any, ...]]:
    return lake.rows("SELECT order_id, amount FROM sales.orders ORDER BY 1")


@pytest.mark.parametrize("function", ["check", "as_arrow", "as_pandas", "as_list", "as_count"])
def test_a_script_test_fails_and_rolls_back_like_a_sql_test(tmp_path: Path, inspector: Inspector,
                                                            function: str) -> None:
    name = "" if function == "check" else f":{function}"
    good = orders([10, 50, 90])
    lake = project(tmp_path, f"-- test script checks/amounts.py{name} max=100", good)
    first = run_project(tmp_path, partition="2024-01-02", now=NOW)
    assert first.ok, first.results[0].error
    (outcome,) = first.results[0].tests
    assert (outcome["status"], outcome["failures"], outcome["kind"]) == ("pass", 0, "script")
    assert table_rows(lake) == reference(good, 2)

    bad = orders([10, 150, 90, 300, 101])
    lake.sql(tables={"raw.orders": bad}, types={"raw.orders": ORDERS})
    before = inspector.state(tmp_path)
    failed = run_project(tmp_path, partition="2024-01-02", now=NOW)
    (result,) = failed.results
    assert result.status == "failed" and result.error_class == "DataTestFailure"
    expected = sorted(r["order_id"] for r in bad if r["amount"] > 100)
    (outcome,) = result.tests
    assert (outcome["status"], outcome["failures"]) == ("fail", len(expected)), outcome
    if function != "as_count":
        assert sorted(r["order_id"] for r in outcome["sample"]) == expected
    assert result.error_location == {"path": PATH, "line": 3, "column": 4}
    assert inspector.state(tmp_path) == before, "a failing script test must leave the lake as it was"
    assert table_rows(lake) == reference(good, 2)


def test_a_warn_script_test_commits_and_warns(tmp_path: Path) -> None:
    source = orders([10, 150])
    lake = project(tmp_path, "-- test script checks/amounts.py max=100 severity=warn", source)
    report = run_project(tmp_path, partition="2024-01-02", now=NOW)
    (result,) = report.results
    assert result.status == "success"
    assert result.tests[0]["status"] == "warn" and result.tests[0]["failures"] == 1
    assert any("script checks/amounts.py:check max=100" in w for w in result.warnings), result.warnings
    assert table_rows(lake) == reference(source, 2)


def test_the_function_sees_the_window_and_the_open_transaction(tmp_path: Path) -> None:
    other = orders([1, 2], day=3)
    lake = project(tmp_path, "-- test script checks/amounts.py:window", orders([5, 6, 7]) + other)
    report = run_project(tmp_path, partition="2024-01-02", now=NOW)
    assert report.ok, report.results[0].error
    assert report.results[0].tests[0]["status"] == "pass"
    assert table_rows(lake) == reference(orders([5, 6, 7]), 2)


RAISING_LINE = CHECKS.splitlines().index("    return 1 / (len(rows) - len(rows))") + 1


@pytest.mark.parametrize(("function", "message"), [
    ("raises", "checks/amounts.py:raises() raised ZeroDivisionError: division by zero "
               f"(checks/amounts.py line {RAISING_LINE})"),
    ("nothing", "checks/amounts.py:nothing() returned nothing"),
])
def test_a_function_that_raises_or_returns_nothing_fails_the_step(tmp_path: Path, inspector: Inspector,
                                                                  function: str, message: str) -> None:
    project(tmp_path, f"-- test script checks/amounts.py:{function}", orders([1]))
    before = inspector.state(tmp_path)
    report = run_project(tmp_path, partition="2024-01-02", now=NOW)
    (result,) = report.results
    assert result.status == "failed" and result.error_class == "ScriptTestError"
    assert message in (result.error or ""), result.error
    assert result.error_location == {"path": PATH, "line": 3, "column": 4}
    assert inspector.state(tmp_path) == before


def test_lakewrap_test_runs_script_tests_on_published_data(tmp_path: Path) -> None:
    project(tmp_path, "-- test script checks/amounts.py max=100", orders([10, 20]))
    assert run_project(tmp_path, partition="2024-01-02", now=NOW).ok
    code, out, err = run("test", "--project", str(tmp_path), "--partition", "2024-01-02", "--format", "json")
    assert code == 0, out + err
    (model,) = json.loads(out)["results"]
    assert [(t["name"], t["status"]) for t in model["tests"]] == [("script checks/amounts.py:check max=100", "pass")]
    # a tighter bound fails on the same published rows (20 > 15)
    (tmp_path / "models" / "sales" / "orders.sql").write_text(model_text := model_for(15))
    assert "max=15" in model_text
    code, out, _ = run("test", "--project", str(tmp_path), "--partition", "2024-01-02", "--format", "json")
    (model,) = json.loads(out)["results"]
    assert code == 1 and model["tests"][0]["failures"] == 1 and model["tests"][0]["sample"][0]["amount"] == 20


def model_for(bound: int) -> str:
    return model(f"-- test script checks/amounts.py max={bound}")


def test_editing_the_script_changes_the_plans_hash(tmp_path: Path) -> None:
    project(tmp_path, "-- test script checks/amounts.py max=100", orders([1]))

    def sha() -> str:
        code, out, err = run("compile", "--project", str(tmp_path), "--partition", "2024-01-02", "--format", "json")
        assert code == 0, err
        (plan,) = json.loads(out)["plans"]
        (test,) = [s for s in plan["statements"] if s["role"] == "test"]
        assert test["test"]["script"]["path"] == "checks/amounts.py" and test["test"]["script"]["function"] == "check"
        assert test["sql"].startswith("SELECT") and "__lakewrap_failures" not in test["sql"]
        return str(plan["sql_sha256"])

    first = sha()
    assert sha() == first  # warm cache, same file
    with (tmp_path / "checks" / "amounts.py").open("a") as f:
        f.write("\n# edited\n")
    assert sha() != first
    (tmp_path / "models" / "sales" / "orders.sql").write_text(model_for(99))
    assert sha() != first


def test_bad_script_tests_are_located_errors(tmp_path: Path, inspector: Inspector) -> None:
    lake = project(tmp_path, "-- test script checks/amount.py", orders([1]))

    def error(test: str) -> str:
        (tmp_path / "models" / "sales" / "orders.sql").write_text(model(test))
        code, _, err = run("compile", "--project", str(tmp_path), "--no-cache")
        assert code == 1, err
        return err

    err = error("-- test script checks/amount.py")
    assert f"{PATH}:3:16: `-- test`: no such file `checks/amount.py`" in err and \
        "did you mean `checks/amounts.py`?" in err, err
    err = error("-- test script checks/amounts.py:chekc")
    assert f"{PATH}:3:34:" in err and "defines no function `chekc`" in err and "did you mean `check`?" in err, err
    err = error("-- test script checks/amounts.py 100")
    assert f"{PATH}:3:34:" in err and "unexpected argument `100`" in err and "key=value" in err, err
    err = error("-- test script checks/amounts.txt")
    assert "is not a Python file" in err, err
    err = error("-- test script ../outside.py")
    assert "must be a path inside the project" in err, err

    # outside the folders [security] scripts lists: refused before anything runs
    (tmp_path / "lakewrap.toml").write_text("")
    (tmp_path / "models" / "sales" / "orders.sql").write_text(model("-- test script checks/amounts.py"))
    before = inspector.state(tmp_path)
    report = run_project(tmp_path, partition="2024-01-02", now=NOW)
    (result,) = report.results
    assert result.status == "failed" and "not in a folder whose scripts models may run" in (result.error or "")
    assert result.error_location is not None and result.error_location["line"] == 3
    assert inspector.state(tmp_path) == before
    with pytest.raises(duckdb.CatalogException):
        table_rows(lake)


PLUGIN = '''
def register(registry):
    @registry.script_test("no_big_amounts", usage="no_big_amounts [max=N]")
    def no_big_amounts(relation, max="100"):
        """Amounts above max fail."""
        return relation.filter(f"amount > {int(max)}")
'''
CLI = "from lakewrap.cli import main; main()"


def test_a_package_ships_a_script_test_through_the_plugin_entry_point(tmp_path: Path, inspector: Inspector) -> None:
    site = install_dist(tmp_path / "site", "lakewrap_amounts", "lakewrap.plugins",
                        "amounts = lakewrap_amounts:register", PLUGIN)
    root = tmp_path / "proj"
    root.mkdir()
    good = orders([10, 20])
    lake = Lakehouse(root, {"sales/orders.sql": model("-- test no_big_amounts max=15")})
    lake.sql(tables={"raw.orders": good}, types={"raw.orders": ORDERS})

    def lakewrap(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", CLI, *args, "--project", str(root)], capture_output=True,
                              text=True, env=site_env(site, NO_COLOR="1"), timeout=300)

    before = inspector.state(root)
    failed = lakewrap("run", "--partition", "2024-01-02", "--now", NOW.isoformat(), "--format", "json")
    assert failed.returncode == 1, failed.stdout + failed.stderr
    (result,) = json.loads(failed.stdout)["results"]
    (outcome,) = result["tests"]
    assert (outcome["name"], outcome["status"], outcome["failures"]) == ("no_big_amounts max=15", "fail", 1)
    assert outcome["sample"] == [{"order_id": 201, "amount": 20, "created_at": outcome["sample"][0]["created_at"]}]
    assert inspector.state(root) == before

    (root / "models" / "sales" / "orders.sql").write_text(model("-- test no_big_amounts max=25"))
    passed = lakewrap("run", "--partition", "2024-01-02", "--now", NOW.isoformat(), "--format", "json")
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert table_rows(lake) == reference(good, 2)
    # a package's kind needs no [security] scripts: the installed package is trusted like lakewrap itself

    bare = subprocess.run([sys.executable, "-c", CLI, "compile", "--project", str(root), "--no-cache"],
                          capture_output=True, text=True, timeout=300)
    assert bare.returncode == 1 and "models/sales/orders.sql:3" in bare.stderr and "no_big_amounts" in bare.stderr


def test_a_script_test_on_iceberg_reads_the_rows_the_commit_would_leave(tmp_path: Path) -> None:
    """The pyiceberg write path: the relation is the table as the commit will leave it; a failure
    means no commit."""
    from icehouse import ICEBERG_TOML, IcebergLakehouse

    (tmp_path / "checks").mkdir()
    (tmp_path / "checks" / "amounts.py").write_text(CHECKS)
    good = orders([10, 50])
    lake = IcebergLakehouse(tmp_path, {"sales/orders.sql": model("-- test script checks/amounts.py max=100")},
                            toml=ICEBERG_TOML + TOML)
    lake.sql(tables={"raw.orders": good}, types={"raw.orders": ORDERS})
    first = lake.run(partition="2024-01-02", now=NOW)
    assert first.ok, first.results[0].error
    published = lake.read("sales.orders", lake.head)
    assert published is not None
    assert sorted((r["order_id"], r["amount"]) for r in published) == reference(good, 2)

    lake.sql(tables={"raw.orders": orders([10, 500, 700])}, types={"raw.orders": ORDERS})
    failed = lake.run(partition="2024-01-02", now=NOW)
    (result,) = failed.results
    assert result.status == "failed" and result.tests[0]["failures"] == 2, result.error
    assert result.snapshot_id is None
    again = lake.read("sales.orders", lake.head)
    assert again is not None and sorted((r["order_id"], r["amount"]) for r in again) == reference(good, 2)
