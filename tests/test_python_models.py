"""Python models (docs/python-models.md): declaration errors located on the decorator, the DAG
from ``ctx.ref`` / ``deps=``, runtime failures that write nothing, a mixed SQL → Python → SQL DAG,
the source hash (``--missing-only``, ``state:modified``), ``reproduce``, ``Project.register`` and
``Project()``. Real DuckLakes throughout; the expected rows come from plain DuckDB queries."""

from __future__ import annotations

import textwrap
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import duckdb
import pytest

import lakewrap
from lakehouse import Lakehouse
from lakewrap.compile import compile_project
from lakewrap.errors import LakewrapError, ModelError
from lakewrap.execute.lake import Lake
from lakewrap.runner import run_project

NOW = datetime(2024, 6, 1, tzinfo=timezone.utc)
ORDERS = ("CREATE SCHEMA raw",
          "CREATE TABLE raw.orders (order_id INTEGER, customer_id INTEGER, amount INTEGER, created_at TIMESTAMPTZ)",
          "INSERT INTO raw.orders VALUES (1, 1, 10, '2024-01-01 03:00:00+00'), (2, 1, 5, '2024-01-01 09:00:00+00'), "
          "(3, 2, 7, '2024-01-02 01:00:00+00'), (4, 3, 1, '2024-01-02 23:00:00+00')")


TRUSTED = '[security]\nscripts = ["models"]\n'  # the project's Python model files may run (docs/security.md)


def write(root: Path, rel: str, text: str) -> Path:
    """Write a project file; the first Python model file also lists `models` in [security] scripts."""
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip())
    if rel.startswith("models/") and rel.endswith(".py") and not (root / "lakewrap.toml").exists():
        (root / "lakewrap.toml").write_text(TRUSTED)
    return path


def trust_models(root: Path) -> None:
    """List `models` in [security] scripts: the project's Python model files may run."""
    if not (root / "lakewrap.toml").exists():
        (root / "lakewrap.toml").write_text(TRUSTED)


def test_a_python_model_file_runs_only_from_a_folder_security_scripts_lists(tmp_path: Path) -> None:
    """A Python model file is code that runs as the operator: outside `[security] scripts` it is
    refused at its first line before any of its code runs (its top-level code would write a file)."""
    (tmp_path / "lakewrap.toml").write_text('[security]\nscripts = ["hooks"]\n')
    write(tmp_path, "models/app/m.py", """
        import pathlib
        pathlib.Path(__file__).with_name("ran").write_text("imported")
        import lakewrap

        @lakewrap.model(materialized="table")
        def m(ctx):
            return ctx.con.sql("SELECT 1 AS x")
    """)
    err = compile_error(tmp_path)
    assert err.location is not None and (err.location.path, err.location.line) == ("models/app/m.py", 1)
    assert "is a Python model, whose code runs as you" in err.message and '["hooks"]' in err.message
    assert err.hint is not None and 'scripts = ["models/app"]' in err.hint
    assert not (tmp_path / "models" / "app" / "ran").exists()  # refused before it was imported
    (tmp_path / "lakewrap.toml").write_text('[security]\nscripts = ["hooks", "models/app"]\n')
    compile_project(tmp_path, use_cache=False, now=NOW)
    assert (tmp_path / "models" / "app" / "ran").read_text() == "imported"


def compile_error(root: Path) -> LakewrapError:
    with pytest.raises(LakewrapError) as info:
        compile_project(root, partition="2024-01-01", use_cache=False, now=NOW)
    return info.value


def snapshots(root: Path) -> list[int]:
    con = Lake.open(root, read_only=True).connect()
    try:
        return [r[0] for r in con.execute("SELECT snapshot_id FROM lake.snapshots() ORDER BY 1").fetchall()]
    finally:
        con.close()


def lake_rows(root: Path, sql: str) -> list[tuple[Any, ...]]:
    con = Lake.open(root, read_only=True).connect()
    try:
        return [tuple(r) for r in con.execute(sql).fetchall()]
    finally:
        con.close()


# --- declaration ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("decorator", "at", "message", "hint"), [
    ('materialized="table", partitoned="daily key=ts"', "partitoned", "unknown model keyword `partitoned`",
     "did you mean `partitioned`?"),
    ('materialized="incremental", partitioned="daly key=ts"', "daly", "`partitioned=`: unknown partition grain `daly`",
     "did you mean `daily`?"),
    ('materialized="incremental", partitioned="daily"', '")', "`partitioned=`: missing option `key=`",
     "write `partitioned hourly|daily"),
    ('materialized="tabel"', "tabel", "`materialized=`: unknown", "did you mean `table`?"),
    ('materialized="incremental", partitioned="dynamic key=ts"', "dynamic", "dynamic (watermark) windows",
     "partitioned="),
    ('materialized="view"', "view", "cannot be a view", 'materialized="table"'),
    ('materialized="table", timeout=-1', "-1", "`timeout=` must be a number", "timeout=600"),
    ('materialized="table", test=["unique id", "not_nul id"]', "not_nul", "`test=`: unknown test kind `not_nul`",
     "did you mean `not_null`?"),
    ('materialized="incremental", unique_key="id", column=["id INTEGER", "n INTEGR"]', "INTEGR", "not a DuckDB type",
     "BIGINT, VARCHAR"),
])
def test_a_bad_keyword_is_located_on_the_decorator(tmp_path: Path, decorator: str, at: str, message: str,
                                                  hint: str) -> None:
    write(tmp_path, "models/sales/m.py", f"""
        import lakewrap


        @lakewrap.model({decorator})
        def m(ctx):
            return ctx.ref("raw.orders")
        """)
    err = compile_error(tmp_path)
    assert isinstance(err, ModelError)
    loc = err.location
    assert loc is not None and (loc.path, loc.line) == ("models/sales/m.py", 4), err.render()
    assert loc.snippet is not None and loc.snippet.startswith("@lakewrap.model(")
    assert loc.column == loc.snippet.index(at) + 1, err.render()
    assert message in err.message, err.render()
    assert hint in (err.hint or ""), err.render()


def test_the_dag_comes_from_literal_refs_or_deps(tmp_path: Path) -> None:
    write(tmp_path, "models/a/up.sql", "-- materialized table\nSELECT 1 AS x\n")
    write(tmp_path, "models/b/down.py", """
        import lakewrap


        @lakewrap.model(materialized="table")
        def down(ctx):
            return ctx.ref("a.up")
        """)
    plans = compile_project(tmp_path, use_cache=False, now=NOW)
    assert [p.target for p in plans] == ["a.up", "b.down"]
    text = plans[1].statements[-1].sql
    assert "models/b/down.py:4 down()" in text  # compile names the function's file and line
    write(tmp_path, "models/b/down.py", """
        import lakewrap


        @lakewrap.model(materialized="table")
        def down(ctx):
            name = "a." + "up"
            return ctx.ref(name)
        """)
    err = compile_error(tmp_path)
    assert err.location is not None and (err.location.line, err.location.column) == (7, 12), err.render()
    assert "not a literal table name" in err.message and "deps=" in (err.hint or "")
    write(tmp_path, "models/b/down.py", """
        import lakewrap


        @lakewrap.model(materialized="table", deps=["a.up"])
        def down(ctx):
            name = "a." + "up"
            return ctx.ref(name)
        """)
    assert [p.target for p in compile_project(tmp_path, use_cache=False, now=NOW)] == ["a.up", "b.down"]
    write(tmp_path, "models/b/down.py", """
        import lakewrap


        @lakewrap.model(materialized="table", deps=["a"])
        def down(ctx):
            return None
        """)
    err = compile_error(tmp_path)
    assert "`a` is not a table name" in err.message and err.location is not None and err.location.line == 4


def test_an_exception_at_import_is_located(tmp_path: Path) -> None:
    write(tmp_path, "models/b/down.py", """
        import lakewrap

        LIMIT = 1 / 0
        """)
    err = compile_error(tmp_path)
    assert err.location is not None and (err.location.path, err.location.line) == ("models/b/down.py", 3)
    assert "ZeroDivisionError" in err.message


# --- running ----------------------------------------------------------------------------------------


def test_a_mixed_dag_runs_in_order_and_matches_plain_duckdb(tmp_path: Path) -> None:
    lh = Lakehouse(tmp_path, {
        "stg/orders.sql": "-- materialized table\nSELECT order_id, customer_id, amount, created_at FROM raw.orders\n",
        "mid/daily.py": textwrap.dedent("""
            import lakewrap


            @lakewrap.model(materialized="incremental", partitioned="daily key=day", unique_key="customer_id,day")
            def daily(ctx):
                ctx.log("building", ctx.partition.value, "from", ctx.params["partition_start"].isoformat())
                rel = ctx.ref("stg.orders")
                return rel.query("orders",
                    "SELECT customer_id, date_trunc('day', created_at AT TIME ZONE 'UTC') AS day, "
                    f"sum(amount) AS total FROM orders WHERE created_at >= '{ctx.partition.start}' "
                    f"AND created_at < '{ctx.partition.end}' GROUP BY ALL").to_df()
            """).lstrip(),
        "out/top.sql": "-- materialized table\nSELECT customer_id, sum(total) AS total FROM mid.daily GROUP BY ALL\n",
    })
    trust_models(lh.root)
    lh.sql(*ORDERS)
    for day in ("2024-01-01", "2024-01-02"):
        report = run_project(tmp_path, partition=day, now=NOW)
        assert report.ok, [r.error for r in report.results]
        assert [r.target for r in report.results] == ["stg.orders", "mid.daily", "out.top"]
    expected = duckdb.sql(
        "SELECT * FROM (VALUES (1, 15), (2, 7), (3, 1)) AS t(customer_id, total) ORDER BY 1").fetchall()
    assert lake_rows(tmp_path, "SELECT customer_id, total FROM out.top ORDER BY 1") == expected
    assert lake_rows(tmp_path, "SELECT customer_id, day::DATE::VARCHAR, total FROM mid.daily ORDER BY 2, 1") == [
        (1, "2024-01-01", 15), (2, "2024-01-02", 7), (3, "2024-01-02", 1)]
    logs = lake_rows(tmp_path, "SELECT message FROM lakewrap_log WHERE target = 'mid.daily' ORDER BY logged_at")
    assert logs == [("building 2024-01-01 from 2024-01-01T00:00:00+00:00",),
                    ("building 2024-01-02 from 2024-01-02T00:00:00+00:00",)]
    # the commit records the function's reads at the pin it read them at, and its model file
    (pins, model) = lake_rows(tmp_path, "SELECT pins, model FROM lakewrap.materializations "
                                        "WHERE target = 'mid.daily' ORDER BY started_at DESC LIMIT 1")[0]
    assert model == "models/mid/daily.py" and '"snapshot"' in pins


@pytest.mark.parametrize(("body", "message", "line"), [
    ("    raise ValueError('the API said no')", "the function raised ValueError: the API said no", 7),
    ("    return None", "the function returned nothing (None)", 6),
    ("    return pa.table({'amount': [1]})", "the function's result has no column `created_at`", 6),
    ("    return 42", "the function returned an int, which is no table", 6),
    ("    time.sleep(30)\n    return pa.table({'created_at': []})", "did not return within its timeout of 0.5 s", 6),
])
def test_a_failing_function_writes_nothing(tmp_path: Path, body: str, message: str, line: int) -> None:
    lh = Lakehouse(tmp_path, {"out/m.py": "import time\nimport pyarrow as pa\nimport lakewrap\n\n"
                                          "@lakewrap.model(materialized='incremental', partitioned='daily "
                                          "key=created_at', timeout=0.5)\ndef m(ctx):\n" + body + "\n"})
    trust_models(lh.root)
    lh.sql(*ORDERS)
    before = snapshots(tmp_path)
    report = run_project(tmp_path, partition="2024-01-01", now=NOW)
    (result,) = report.results
    assert result.status == "failed" and result.snapshot_id is None
    assert message in (result.error or ""), result.error
    assert result.error_location == {"path": "models/out/m.py", "line": line, "column": None}, result.error
    assert snapshots(tmp_path) == before  # nothing written: no snapshot, no table
    assert lake_rows(tmp_path, "SELECT count(*) FROM duckdb_tables() WHERE schema_name = 'out'") == [(0,)]


def test_editing_the_function_or_a_module_it_imports_changes_its_hash(tmp_path: Path) -> None:
    model = """
        import lakewrap
        from scale_config import FACTOR


        @lakewrap.model(materialized="incremental", partitioned="daily key=created_at")
        def scaled(ctx):
            rel = ctx.ref("raw.orders")
            return rel.select(f"order_id, amount * {FACTOR} AS amount, created_at").filter(
                f"created_at >= '{ctx.partition.start.isoformat()}' AND created_at < '{ctx.partition.end.isoformat()}'")
        """
    write(tmp_path, "scale_config.py", "FACTOR = 2\n")
    write(tmp_path, "models/out/scaled.py", model)
    lh = Lakehouse(tmp_path, {})
    trust_models(lh.root)
    lh.sql(*ORDERS)

    def sha() -> str:
        (plan,) = compile_project(tmp_path, partition="2024-01-01", use_cache=False, now=NOW)
        return plan.sql_sha256

    first = sha()
    report = run_project(tmp_path, start="2024-01-01", end="2024-01-02", now=NOW, missing_only=True)
    assert report.ok and len(report.results) == 2
    assert {r.sql_sha256 for r in report.results} == {first}
    again = run_project(tmp_path, start="2024-01-01", end="2024-01-02", now=NOW, missing_only=True)
    assert again.results == [] and len(again.not_rerun) == 2  # same function, same inputs: skipped
    assert lakewrap.Project(tmp_path).compile(["state:modified"], partition="2024-01-01") == []

    write(tmp_path, "scale_config.py", "FACTOR = 3\n")  # an imported project module changed
    second = sha()
    assert second != first
    assert [p.target for p in lakewrap.Project(tmp_path).compile(["state:modified"])] == ["out.scaled"]
    rebuilt = run_project(tmp_path, start="2024-01-01", end="2024-01-02", now=NOW, missing_only=True)
    assert rebuilt.ok and len(rebuilt.results) == 2 and {r.sql_sha256 for r in rebuilt.results} == {second}
    assert lake_rows(tmp_path, "SELECT order_id, amount FROM out.scaled ORDER BY 1") == [
        (1, 30), (2, 15), (3, 21), (4, 3)]

    write(tmp_path, "models/out/scaled.py", model.replace("amount * {FACTOR}", "amount * {FACTOR} + 1"))
    assert sha() not in (first, second)
    edited = run_project(tmp_path, start="2024-01-01", end="2024-01-02", now=NOW, missing_only=True)
    assert edited.ok and len(edited.results) == 2
    assert lakewrap.Project(tmp_path).status()[0].stale == []  # nothing upstream changed since
    assert lake_rows(tmp_path, "SELECT order_id, amount FROM out.scaled ORDER BY 1") == [
        (1, 31), (2, 16), (3, 22), (4, 4)]

    # reproduce re-runs the function against the pins: MATCH; after an edit, it refuses to guess
    repro = lakewrap.Project(tmp_path).reproduce(edited.run_id)
    assert repro.ok and [r.status for r in repro.results] == ["MATCH", "MATCH"], repro
    old = lakewrap.Project(tmp_path).reproduce(rebuilt.run_id)
    assert [r.status for r in old.results] == ["ERROR", "ERROR"] and "changed since" in old.results[0].detail

    # late data upstream: `run --stale` rebuilds the partition it changed (conservatively: every
    # partition the function read, as it cannot map rows to windows through Python code)
    lh.sql("UPDATE raw.orders SET amount = 100 WHERE order_id = 3")
    stale = run_project(tmp_path, now=NOW, stale=True)
    assert stale.ok and "2024-01-02" in {r.partition for r in stale.results}
    assert lake_rows(tmp_path, "SELECT order_id, amount FROM out.scaled ORDER BY 1") == [
        (1, 31), (2, 16), (3, 301), (4, 4)]


# --- the DAG in code --------------------------------------------------------------------------------


def totals(ctx: Any) -> Any:
    return ctx.ref("raw.orders").aggregate("customer_id, sum(amount) AS total")


def test_register_validates_at_once_and_runs(tmp_path: Path) -> None:
    lh = Lakehouse(tmp_path, {})
    trust_models(lh.root)
    lh.sql(*ORDERS)
    project = lakewrap.Project(tmp_path)
    with pytest.raises(ModelError) as info:
        project.register(totals, materialized="table", unique_kye="customer_id")
    assert "unknown model keyword `unique_kye`" in info.value.message
    assert "did you mean `unique_key`?" in (info.value.hint or "")
    with pytest.raises(ModelError) as bad:
        project.register(totals, materialized="incremental", partitioned="daily key=day start=2024-13-01")
    assert "`partitioned=`" in bad.value.message
    assert bad.value.location is not None and bad.value.location.path == "test_python_models.py"
    assert bad.value.location.line == totals.__code__.co_firstlineno

    spec = project.register(totals, materialized="table", target="mart.totals", tag="code")
    assert str(spec.target) == "mart.totals" and spec.tags == ("code",)
    report = project.run(["tag:code"])
    assert report.ok, [r.error for r in report.results]
    assert project.query("SELECT customer_id, total FROM mart.totals ORDER BY 1").to_pylist() == [
        {"customer_id": 1, "total": 15}, {"customer_id": 2, "total": 7}, {"customer_id": 3, "total": 1}]


def test_a_project_without_a_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # its new folder, inside this test's
    project = lakewrap.Project()

    @lakewrap.model(materialized="table")
    def numbers(ctx: Any) -> Any:
        import pyarrow as pa

        return pa.table({"n": [1, 2, 3]})

    def doubled(ctx: Any) -> Any:
        return ctx.ref("main.numbers").project("n * 2 AS n")

    project.register(numbers)
    project.register(doubled, materialized="table")
    assert [p.target for p in project.compile()] == ["main.numbers", "main.doubled"]
    report = project.run()
    assert report.ok, [r.error for r in report.results]
    assert project.query("SELECT sum(n) AS s FROM main.doubled").to_pylist() == [{"s": 12}]
    assert (project.root / ".lakewrap").is_dir() and project.root.parent == tmp_path.resolve()


# --- unit tests (docs/unit-tests.md) ----------------------------------------------------------------


def test_unit_tests_run_the_function_on_fixture_rows(tmp_path: Path) -> None:
    from lakewrap.unittests import run_unit_tests

    write(tmp_path, "models/out/big.py", """
        import lakewrap


        @lakewrap.model(materialized="incremental", partitioned="daily key=created_at")
        def big(ctx):
            if ctx.partition.value == "2024-01-09":
                raise RuntimeError("no data that day")
            window = f"created_at >= '{ctx.partition.start}' AND created_at < '{ctx.partition.end}'"
            return ctx.ref("raw.orders").filter(window).filter("amount > 5").select("order_id, amount, created_at")
        """)
    fixture = """
        model = "out.big"
        partition = "{day}"

        [given."raw.orders"]
        rows = [
          {{ order_id = 1, amount = 10, created_at = 2024-01-02T03:00:00Z }},
          {{ order_id = 2, amount = 5, created_at = 2024-01-02T04:00:00Z }},
          {{ order_id = 3, amount = 50, created_at = 2024-01-03T00:00:00Z }},
        ]

        [expect]
        rows = [{{ order_id = 1, amount = {amount} }}]
        """
    write(tmp_path, "tests/unit/big.toml", fixture.format(day="2024-01-02", amount=10))
    (result,) = run_unit_tests(tmp_path).results
    assert result.status == "pass", result
    write(tmp_path, "tests/unit/big.toml", fixture.format(day="2024-01-02", amount=11))
    (result,) = run_unit_tests(tmp_path).results
    assert result.status == "fail" and result.missing == [(1, 11)] and result.extra == [(1, 10)]
    assert "  - (1, 11)" in result.diff() and "  + (1, 10)" in result.diff()
    write(tmp_path, "tests/unit/big.toml", fixture.format(day="2024-01-09", amount=10))
    (result,) = run_unit_tests(tmp_path).results
    assert result.status == "error" and "models/out/big.py:7: the function raised RuntimeError" in (result.error or "")
    assert not (tmp_path / ".lakewrap").exists()  # no lake; of target/ at most the compile cache
    assert not (tmp_path / "target").exists() or {p.name for p in (tmp_path / "target").iterdir()} == {"cache"}


def test_compiling_a_star_merge_asks_for_its_columns(tmp_path: Path) -> None:
    write(tmp_path, "models/out/m.py", """
        import lakewrap


        @lakewrap.model(materialized="incremental", unique_key="id")
        def m(ctx):
            return ctx.ref("raw.orders")
        """)
    err = compile_error(tmp_path)
    assert err.location is not None and (err.location.path, err.location.line) == ("models/out/m.py", 4)
    assert "a merge Python model needs its columns to compile" in err.message and "column=" in (err.hint or "")
    write(tmp_path, "models/out/m.py", """
        import lakewrap


        @lakewrap.model(materialized="incremental", unique_key="id", column=["id INTEGER", "v VARCHAR"])
        def m(ctx):
            return ctx.ref("raw.orders")
        """)
    (plan,) = compile_project(tmp_path, use_cache=False, now=NOW)
    merge = next(st.sql for st in plan.statements if st.sql.startswith("MERGE"))
    assert '"v" = "source"."v"' in merge  # the contracts' columns are the update list
