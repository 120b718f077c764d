"""Runtime errors are reported on the model file: the line and column of the user's text (issue 17.2).

One project of models that parse but fail while running (a catalog, binder or conversion error from
DuckDB, a guard, a contract, a data test) is run once per substrate: DuckLake, Iceberg through
pyiceberg, and Iceberg written by DuckDB SQL through the REST test adapter. Each failure must name
``models/t/<name>.sql:<line>:<col>`` (counted here from the model text, not from lakewrap), in the
text output, ``--format json``, ``results.json``, ``run_results.json`` and the run log, and leave no
table behind. The mapping itself (caret → token → file offset) is checked on real DuckDB messages.
"""

from __future__ import annotations

import json
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import duckdb
import pytest
from click.testing import CliRunner

from lakeproject import open_lake
from lakewrap.api import Project
from lakewrap.cli import main
from lakewrap.execute.locate import caret_offset, map_offset

ORDERS = """\
order_id,customer_id,amount,status,created_at
1,1,10.5,placed,2024-01-01 09:00:00
2,1,3.0,placed,2024-01-01 10:00:00
"""
WINDOW = "WHERE created_at >= $partition_start AND created_at < $partition_end\n"
DAILY = "-- materialized incremental\n-- partitioned daily key=created_at start=2024-01-01\n"

# name -> (model text, the text the error must point at: (line, its substring at the caret))
MODELS: dict[str, tuple[str, tuple[int, str]]] = {
    "unknown_table": ('-- materialized table\nSELECT order_id\nFROM raw."ordres"\n', (3, "raw.")),
    "unknown_column": (  # the error is on line 9 of the file
        DAILY + "-- unique_key order_id\n-- description \"nine lines\"\nSELECT\n    order_id,\n    customer_id,\n"
        "    amount,\n    statuz AS status,\n    created_at\nFROM raw.orders\n" + WINDOW, (9, "statuz")),
    "unknown_function": ("-- materialized table\nSELECT order_id, frobnicate(amount) AS a\nFROM raw.orders\n",
                         (2, "frobnicate")),
    "bad_cast": ("-- materialized table\nSELECT order_id, CAST('x' AS INT) AS a FROM raw.orders\n", (2, "CAST(")),
    "mismatch": ("-- materialized table\nSELECT order_id FROM raw.orders\nWHERE created_at > 5\n", (3, "> 5")),
    "dupes": (DAILY + "-- unique_key customer_id\nSELECT customer_id, created_at FROM raw.orders\n" + WINDOW,
              (3, "customer_id")),
    "null_key": (DAILY + "-- unique_key nk\nSELECT CAST(NULL AS INT) AS nk, created_at FROM raw.orders\n" + WINDOW,
                 (3, "nk")),
    "outside_window": (DAILY + "SELECT order_id, created_at + INTERVAL 3 DAY AS created_at FROM raw.orders\n"
                       + WINDOW, (2, "key=created_at")),
    "star_probe": (  # a `SELECT *` merge: the column probe runs the SELECT first
        DAILY + "-- unique_key order_id\nSELECT *\nFROM raw.nothere\n" + WINDOW, (5, "raw.")),
    "failing_test": ("-- materialized table\n-- test unique customer_id\nSELECT customer_id FROM raw.orders\n",
                     (2, "test unique")),
    "contract": ("-- materialized table\n-- column order_id INTEGER\nSELECT order_id FROM raw.orders\n",
                 (2, "column order_id")),
}
HINTS = {"dupes": "dedupe=latest_by(", "unknown_column": 'did you mean "status"?'}
ICEBERG_SUBSET = ("unknown_table", "unknown_column", "bad_cast", "dupes", "outside_window", "failing_test")


def expected(name: str) -> tuple[int, int]:
    """(line, column) of the model's text the error must point at, found in the text itself."""
    text, (line, needle) = MODELS[name]
    return line, text.splitlines()[line - 1].index(needle) + 1


def make_project(root: Path, toml: str, names: tuple[str, ...]) -> Path:
    (root / "seeds" / "raw").mkdir(parents=True)
    (root / "seeds" / "raw" / "orders.csv").write_text(ORDERS)
    (root / "lakewrap.toml").write_text(toml)
    for name in names:
        path = root / "models" / "t" / f"{name}.sql"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(MODELS[name][0])
    return root


def invoke(*args: str) -> Any:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def run_and_check(root: Path, names: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """Seed, run every model (JSON), check each error's location in every output; the results by name."""
    assert invoke("seed", "--project", str(root)).exit_code == 0
    out = invoke("run", "--project", str(root), "--partition", "2024-01-01", "--format", "json")
    assert out.exit_code == 1
    report = json.loads(out.stdout)
    by = {r["target"].split(".", 1)[1]: r for r in report["results"]}
    assert sorted(by) == sorted(names)
    files = [json.loads(p.read_text())["results"] for p in
             (root / "target" / "run" / report["run_id"] / "results.json", root / "target" / "run_results.json")]
    for name in names:
        r, path = by[name], f"models/t/{name}.sql"
        line, column = expected(name)
        assert (r["status"], r["snapshot_id"]) == ("failed", None), name
        assert r["error_location"] == {"path": path, "line": line, "column": column}, (name, r["error"])
        head, snippet, caret, *rest = r["error"].splitlines()
        assert head.startswith(f"{path}:{line}:{column}: "), (name, head)
        assert snippet == "    " + MODELS[name][0].splitlines()[line - 1]
        assert caret == "    " + " " * (column - 1) + "^"
        assert rest and rest[-1].startswith("hint: ") and HINTS.get(name, "") in rest[-1], (name, rest)
        for results in files:
            (saved,) = [s for s in results if s["target"] == r["target"]]
            assert (saved["error"], saved["error_location"]) == (r["error"], r["error_location"])
            assert "error_debug" not in saved
    return by


def no_table(tables: list[str]) -> None:
    assert not [t for t in tables if t.startswith("t.")], tables


def no_snapshot(root: Path) -> None:
    """No Iceberg table of schema t has data. (DuckDB's write path creates a new table empty, with no
    snapshot, before the materialization's transaction: docs/iceberg.md.)"""
    from lakewrap.execute.iceberg import IcebergLake

    lake = IcebergLake.open(root)
    assert not [t for t in lake.tables() if t.startswith("t.") and lake.load(t).current_snapshot() is not None]


def test_ducklake_runtime_errors_point_at_the_model_file(tmp_path: Path) -> None:
    names = tuple(MODELS)
    root = make_project(tmp_path / "p", "", names)
    by = run_and_check(root, names)

    con = open_lake(root)  # nothing of schema t in the lake, no state row
    try:
        no_table([f"{s}.{n}" for s, n in con.execute(
            "SELECT schema_name, table_name FROM duckdb_tables() WHERE database_name = current_database()").fetchall()])
        assert con.execute("SELECT count(*) FROM lakewrap.materializations WHERE target LIKE 't.%'").fetchone() == (0,)
        steps = dict(con.execute("SELECT target, error FROM lakewrap_steps").fetchall())
    finally:
        con.close()
    for name in names:  # the run log's step text names the same place
        line, column = expected(name)
        assert steps[f"t.{name}"].startswith(f"models/t/{name}.sql:{line}:{column}: "), steps[f"t.{name}"]
    assert by["unknown_column"]["error_class"] == "BinderException"  # the class is DuckDB's, as before

    # the text output: one `error:` line on the file, its source line, the caret, the hint; --debug adds
    # the statement that failed, DuckDB's own message and the traceback
    plain = invoke("run", "--project", str(root), "--partition", "2024-01-01", "t.unknown_column")
    assert ("error: models/t/unknown_column.sql:9:5: Binder Error: Referenced column \"statuz\" not found in "
            "FROM clause!\n        statuz AS status,\n        ^\nhint: did you mean") in plain.stderr
    assert "LINE " not in plain.stderr and "Traceback" not in plain.stderr
    # backfill's summary and the Python API report the same place
    backfill = invoke("backfill", "--project", str(root), "--start", "2024-01-01", "--end", "2024-01-01",
                      "t.unknown_column")
    assert "failed: t.unknown_column 2024-01-01: models/t/unknown_column.sql:9:5: Binder Error" in backfill.stdout
    (api,) = Project(root).run(["t.dupes"], partition="2024-01-01").results
    assert api.error_location == {"path": "models/t/dupes.sql", "line": 3, "column": 15}

    debug = invoke("--debug", "run", "--project", str(root), "--partition", "2024-01-01", "t.unknown_column")
    assert "statement (stage):" in debug.stderr and "LINE " in debug.stderr and "Traceback" in debug.stderr


def test_iceberg_pyiceberg_runtime_errors_point_at_the_model_file(tmp_path: Path) -> None:
    from lakewrap.execute.iceberg import IcebergLake

    root = make_project(tmp_path / "p", '[lake]\nsubstrate = "iceberg"\n', ICEBERG_SUBSET)
    # pyiceberg's schema conversion (a type Iceberg lacks) points at the SELECT's output column
    (root / "models" / "t" / "interval.sql").write_text(
        "-- materialized table\nSELECT order_id,\n       INTERVAL 1 DAY AS span FROM raw.orders\n")
    MODELS["interval"] = ((root / "models" / "t" / "interval.sql").read_text(), (3, "span"))
    try:
        run_and_check(root, (*ICEBERG_SUBSET, "interval"))
    finally:
        del MODELS["interval"]
    no_table(IcebergLake.open(root).tables())


def test_iceberg_sql_runtime_errors_point_at_the_model_file(tmp_path: Path) -> None:
    from icehouse_sql import rest_toml, start_rest

    with ExitStack() as stack:
        uri, warehouse = start_rest(tmp_path / "server", stack)
        root = make_project(tmp_path / "p", rest_toml(uri, warehouse), ICEBERG_SUBSET)
        run_and_check(root, ICEBERG_SUBSET)
        no_snapshot(root)


# --- the mapping, on DuckDB's own messages ----------------------------------------------------------


def duckdb_error(statement: str) -> str:
    con = duckdb.connect()
    con.execute('CREATE TABLE t (a INT, b INT); INSERT INTO t VALUES (1, 2); CREATE SCHEMA raw; '
                'CREATE TABLE raw."order" (a INT)')
    with pytest.raises(duckdb.Error) as err:
        con.execute(statement)
    return str(err.value)


def located(statement: str, source: str) -> tuple[int, int] | None:
    at = caret_offset(duckdb_error(statement), statement)
    assert at is not None
    mapped = map_offset(statement, at, source)
    if mapped is None:
        return None
    return source.count("\n", 0, mapped) + 1, mapped - (source.rfind("\n", 0, mapped) + 1) + 1


@pytest.mark.parametrize(("statement", "source", "where"), [
    # quoting differs (the statement quotes, the file does not)
    ('CREATE TEMP TABLE s AS SELECT a, "Nope" FROM raw."order"',
     "-- materialized table\nSELECT a,\n  nope\nFROM raw.order\n", (3, 3)),
    # the same word twice: DuckDB binds WHERE first, so the caret is on the second `nope`
    ("CREATE TEMP TABLE s AS SELECT nope AS x FROM t WHERE nope > 1",
     "-- materialized table\nSELECT\n  nope AS x\nFROM t\nWHERE nope > 1\n", (5, 7)),
    # a long line DuckDB shows cut (`LINE 1: ...`): the caret is still found
    ("SELECT " + ", ".join(f"a AS c{i}" for i in range(30)) + ", nope FROM t",
     "SELECT\n" + ",\n".join(f"  a AS c{i}" for i in range(30)) + ",\n  nope\nFROM t\n", (32, 3)),
    # `x::INT` rendered as CAST(...): the caret on the inserted CAST maps to the line as written
    ("SELECT CAST('x' AS INT) AS v FROM t WHERE a > 0", "SELECT 'x'::INT AS v\nFROM t\nWHERE a > 0\n", (1, 8)),
    # characters of several bytes before the error (DuckDB counts bytes, Python characters)
    ("CREATE TEMP TABLE s AS SELECT 'café' AS x, nope FROM t -- ü",
     "-- description \"Café ü\"\nSELECT 'café' AS x,\n  'é' AS y, nope\nFROM t\n", (3, 13)),
    # the caret on lakewrap's own text around the SELECT: no line rather than a wrong one
    ("SELECT * FROM (SELECT a, b FROM t) AS s WHERE s.nokey = 1", "SELECT a, b\nFROM t\n", None),
])
def test_the_caret_maps_to_the_same_token_of_the_file(statement: str, source: str,
                                                       where: tuple[int, int] | None) -> None:
    assert located(statement, source) == where
