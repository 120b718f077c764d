"""`lakewrap unit` and the unit half of `lakewrap test` (docs/unit-tests.md), on a copy of examples/shop.

The models' SELECTs run on fixture rows in an in-memory DuckDB: these tests check the rows it
returns, the row diff of a failure, the partition binding, the located errors of bad fixtures, and
that no lake is opened or changed.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from conftest import EXAMPLES
from helpers import run


@pytest.fixture
def shop(tmp_path: Path) -> Path:
    dest = tmp_path / "shop"
    shutil.copytree(EXAMPLES / "shop", dest)
    return dest


def write(shop: Path, name: str, text: str) -> Path:
    path = shop / "tests" / "unit" / name
    path.write_text(text, encoding="utf-8")
    return path


DAYS = """model = "orders_daily"
partition = "2024-01-03"

[given."sales.orders"]
rows = [
  { order_id = 1, status = "placed", amount = 1.25, created_at = 2024-01-02T23:59:59Z },
  { order_id = 2, status = "placed", amount = 2.25, created_at = 2024-01-03T00:00:00Z },
  { order_id = 3, status = "placed", amount = 3.5, created_at = 2024-01-03T13:00:00Z },
  { order_id = 4, status = "returned", amount = 4, created_at = 2024-01-03T23:00:00Z },
  { order_id = 5, status = "placed", amount = 5, created_at = 2024-01-04T00:00:00Z },
]

[expect]
rows = [
  { order_day = 2024-01-03T00:00:00, status = "placed", orders = 2, revenue = %s },
  { order_day = 2024-01-03T00:00:00, status = "returned", orders = 1, revenue = 4 },
]
"""


def test_the_example_passes(shop: Path) -> None:
    code, out, _ = run("unit", "--project", str(shop))
    assert code == 0, out
    assert out == ("pass: tests/unit/customer_segments.toml: marts.customer_segments\n"  # a Python model's
                   "pass: tests/unit/orders_daily.toml: sales.orders_daily [2024-01-02]\n"
                   "unit tests: 2 passed, 0 failed\n")


def test_partition_binding_reads_only_the_partitions_rows(shop: Path) -> None:
    """Rows of three days are given; only 2024-01-03's (half-open window) make the expected rows."""
    write(shop, "days.toml", DAYS % "5.75")
    code, out, _ = run("unit", "--project", str(shop), "--format", "json")
    assert code == 0, out
    results = {r["path"]: r for r in json.loads(out)["unit"]}
    assert results["tests/unit/days.toml"]["status"] == "pass"
    assert results["tests/unit/days.toml"]["partition"] == "2024-01-03"


def test_a_failing_test_prints_the_row_diff_and_exits_1(shop: Path) -> None:
    write(shop, "days.toml", DAYS % "5.76")
    code, out, _ = run("unit", "orders_daily", "--project", str(shop))
    assert code == 1
    assert ("fail: tests/unit/days.toml: model sales.orders_daily, partition 2024-01-03: 1 missing, 1 extra row(s)\n"
            "  columns: order_day, status, orders, revenue\n"
            "  - (2024-01-03 00:00:00, placed, 2, 5.76)\n"
            "  + (2024-01-03 00:00:00, placed, 2, 5.75)\n") in out
    assert out.endswith("unit tests: 1 passed, 1 failed\n")
    # the same failure fails `lakewrap test --unit-only`
    code, out, _ = run("test", "--unit-only", "--project", str(shop))
    assert code == 1 and "  - (2024-01-03 00:00:00, placed, 2, 5.76)" in out


def test_float_tolerance_and_multiset_comparison(shop: Path) -> None:
    # 9 significant digits: 5.750000001 equals 5.75; a duplicated expected row is a missing row
    write(shop, "days.toml", DAYS % "5.750000001")
    assert run("unit", "--project", str(shop))[0] == 0
    text = DAYS % "5.75"
    text = text.replace('revenue = 4 },\n]', 'revenue = 4 },\n  { order_day = 2024-01-03T00:00:00, '
                        'status = "returned", orders = 1, revenue = 4 },\n]')
    write(shop, "days.toml", text)
    code, out, _ = run("unit", "--project", str(shop))
    assert code == 1 and "1 missing, 0 extra row(s)" in out and "  - (2024-01-03 00:00:00, returned, 1, 4)" in out


def test_merge_and_snapshot_models_check_the_selects_rows(shop: Path) -> None:
    """Decision (docs/unit-tests.md): the SELECT's rows, before the strategy. The merge model's
    dedupe=latest_by is not applied (both versions of order 1 come back) and the SCD2 model returns
    its SELECT's columns, without validity columns."""
    (shop / "tests" / "unit" / "orders_daily.toml").unlink()
    write(shop, "orders.toml", """model = "sales.orders"
partition = "2024-01-02"
[given."raw.orders"]
types = { customer_id = "INTEGER" }  # declared, given in no row: NULL
rows = [
  { order_id = 1, amount = 1.5, status = "placed", created_at = 2024-01-02T01:00:00Z, updated_at = 1 },
  { order_id = 1, amount = 1.5, status = "shipped", created_at = 2024-01-02T01:00:00Z, updated_at = 2 },
]
[expect]
rows = [{ order_id = 1, status = "placed" }, { order_id = 1, status = "shipped" }]
""")
    write(shop, "history.toml", """model = "marts.customer_history"
[given."staging.customers"]
rows = [{ customer_id = 1, name = "Ada", country = "NL", tier = "gold" }]
[expect]
rows = [{ customer_id = 1, name = "Ada", country = "NL", tier = "gold" }]
""")
    code, out, _ = run("unit", "--project", str(shop), "--format", "json")
    assert code == 0, out
    by = {r["model"]: r for r in json.loads(out)["unit"]}
    assert by["sales.orders"]["status"] == "pass" and by["marts.customer_history"]["status"] == "pass"
    write(shop, "history.toml", """model = "marts.customer_history"
[given."staging.customers"]
rows = [{ customer_id = 1, name = "Ada", country = "NL", tier = "gold" }]
[expect]
rows = [{ customer_id = 1, valid_from = 2024-01-01T00:00:00Z }]
""")
    code, out, err = run("unit", "marts.customer_history", "--project", str(shop))
    assert code == 1 and "expected column `valid_from` is not in the output of `marts.customer_history`" in err


def tree(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_no_lake_is_opened_or_written(shop: Path) -> None:
    # no lake at all: unit and `test --unit-only` create none, nor target/
    assert run("unit", "--project", str(shop))[0] == 0
    assert run("test", "--unit-only", "--project", str(shop))[0] == 0
    assert not (shop / ".lakewrap").exists() and not (shop / "target").exists()
    # a lake with data: every byte of its folder (catalog and data files) is unchanged
    assert run("seed", "--project", str(shop))[0] == 0
    before = tree(shop / ".lakewrap")
    assert before
    assert run("unit", "--project", str(shop))[0] == 0
    assert run("test", "--unit-only", "--project", str(shop))[0] == 0
    assert tree(shop / ".lakewrap") == before


def test_lakewrap_test_runs_unit_then_data_tests(shop: Path) -> None:
    assert run("seed", "--project", str(shop))[0] == 0
    assert run("run", "--project", str(shop), "--partition", "2024-01-02")[0] == 0
    code, out, _ = run("test", "sales.orders", "sales.orders_daily", "--project", str(shop),
                       "--partition", "2024-01-02")
    assert code == 0, out
    assert out.index("pass: tests/unit/orders_daily.toml") < out.index("accepted_values")
    code, out, _ = run("test", "--data-only", "--project", str(shop), "--partition", "2024-01-02")
    assert code == 0 and "unit tests" not in out and "accepted_values" in out
    write(shop, "days.toml", DAYS % "1")
    code, out, _ = run("test", "--project", str(shop), "--partition", "2024-01-02", "--format", "json")
    doc = json.loads(out)
    assert code == 1 and doc["ok"] is False and {r["status"] for r in doc["unit"]} == {"pass", "fail"}
    assert all(r["ok"] for r in doc["results"])  # the data tests themselves pass


@pytest.mark.parametrize(("text", "where", "message", "hint"), [
    ('model = "sales.orders_daily"\npartition = 2024-01-02\n[given."sales.orders"\n', ":3:",
     "malformed TOML", "a unit test is TOML"),
    ('model = "sales.order_daily"\n', ":1:10:", "unknown model `sales.order_daily`",
     "did you mean `sales.orders_daily`?"),
    ('model = "orders_daily"\n[given."sales.orders"]\nrows = []\n[given."raw.orders"]\nrows = []\n', ":4:9:",
     "`raw.orders` is not an input of model `sales.orders_daily`", "inputs: sales.orders"),
    ('model = "orders"\npartition = "2024-01-02"\n[expect]\nrows = []\n', ":1:1:",
     "no rows given for input(s) raw.orders of model `sales.orders`", '[given."raw.orders"]'),
    ('model = "orders"\nexpected = 1\n', ":2:1:", "unknown key `expected`", "keys: description, expect"),
    ('model = "orders"\n[given."raw.orders"]\nrows = [{ order_id = "x" }]\ntypes = { order_id = "INTEGER" }\n',
     ":2:9:", "rows of `raw.orders` cannot be loaded", "declare the column types"),
    ('model = "orders"\n[given."raw.orders"]\nrows = [{ order_id = 1 }]\ntypes = { order_id = "INT); DROP" }\n',
     ":2:9:", "`INT); DROP` (column `order_id`) is not one DuckDB type", "declare the column types"),
])
def test_bad_fixtures_are_located(shop: Path, text: str, where: str, message: str, hint: str) -> None:
    write(shop, "bad.toml", text)
    code, _, err = run("unit", "--project", str(shop))
    assert code == 1
    assert f"tests/unit/bad.toml{where}" in err and message in err and hint in err, err
