"""Golden files for Iceberg write path ``sql``, and execution of the very same plans through a real
REST catalog (the test adapter over a pyiceberg SqlCatalog).

Every golden case of ``test_golden.py`` is compiled for substrate ``iceberg-sql``; the annotated
plan must equal ``fixtures/golden/<case>/iceberg_sql.sql`` byte for byte, or, for a model this path
refuses (a view, a literal model), the compile error must equal
``iceberg_sql.error`` (``pytest --update-golden`` rewrites both). Then each plan runs through
lakewrap's SQL executor with DuckDB attached to the REST adapter, twice, and its state row is read
back from the Iceberg state table.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
import sqlglot

from lakewrap.compile import compile_project
from lakewrap.compilers.artifacts import CompiledPlan
from lakewrap.config import IcebergLakeConfig, RestConfig
from lakewrap.errors import UnsupportedError
from lakewrap.output import plan_sql
from test_golden import CASES, GOLDEN, NOW, PARTITIONS, PROJECT
from test_golden_iceberg import source_lake

NAME = "iceberg_sql"
RUNNABLE = [c for c in CASES if not (GOLDEN / c / f"{NAME}.error").exists()]


def compile_case(case: str) -> CompiledPlan:
    (plan,) = compile_project(PROJECT, [f"path:models/golden/{case}.sql"], partition=PARTITIONS.get(case, "2024-01-02"),
                              now=NOW, use_cache=False, substrate="iceberg-sql")
    return plan


def outcome(case: str) -> tuple[str, str]:
    try:
        return f"{NAME}.sql", plan_sql(compile_case(case))
    except UnsupportedError as exc:
        return f"{NAME}.error", exc.render() + "\n"


@pytest.mark.parametrize("case", CASES)
def test_golden_iceberg_sql(case: str, update_golden: bool) -> None:
    name, text = outcome(case)
    path = GOLDEN / case / name
    if update_golden:
        for stale in (f"{NAME}.sql", f"{NAME}.error"):
            (GOLDEN / case / stale).unlink(missing_ok=True)
        path.write_text(text)
    assert path.exists(), f"missing golden file {path.relative_to(GOLDEN.parent.parent)}; run pytest --update-golden"
    assert text == path.read_text(), f"compiled plan differs from {case}/{name}; review, then pytest --update-golden"


@pytest.mark.parametrize("case", RUNNABLE)
def test_iceberg_sql_plan_parses_back(case: str) -> None:
    plan = compile_case(case)
    assert plan == compile_case(case) and plan.commits == ()
    assert (plan.substrate, plan.write_path) == ("iceberg", "sql")
    for st in plan.statements:
        assert len([t for t in sqlglot.parse(st.sql, read="duckdb") if t is not None]) == 1, st.sql
        # every lake table is named in three parts (DuckDB cannot USE the Iceberg catalog)
        for tbl in sqlglot.parse_one(st.sql, read="duckdb").find_all(sqlglot.exp.Table):
            if tbl.args.get("db") is not None:
                assert tbl.catalog == "ice", st.sql


@pytest.fixture(scope="module")
def rest_lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """An Iceberg REST lake (write path sql) holding the golden sources."""
    from lakewrap.execute.iceberg import IcebergLake
    from rest_adapter import serve

    root = tmp_path_factory.mktemp("iceberg-sql-golden")
    backing = source_lake(root)  # the golden sources, in the SqlCatalog the adapter serves
    with ExitStack() as stack:
        uri = stack.enter_context(serve(backing.catalog()))
        config = IcebergLakeConfig(catalog="rest", write_path="sql", rest=RestConfig(uri=uri))
        yield IcebergLake(root, config)


@pytest.mark.slow
@pytest.mark.parametrize("case", RUNNABLE)
def test_golden_plans_run_through_the_rest_catalog(case: str, rest_lake: Any, tmp_path: Path) -> None:
    from lakewrap.substrates.iceberg.sql_connect import connect
    from lakewrap.substrates.iceberg.sql_write import IcebergSqlExecutor
    from lakewrap.substrates.iceberg.state import state_rows

    plan = compile_case(case)
    reads = ("raw.orders", "raw.customers", "raw.events")
    con = connect(rest_lake)
    try:
        executor = IcebergSqlExecutor(rest_lake, "golden-run", tmp_path / "log")
        first = executor.materialize(con, plan, reads=reads)
        assert first.status == "success", first.error
        again = executor.materialize(con, plan, reads=reads)
    finally:
        con.close()
    assert first.snapshot_id is not None
    rows = [r for r in state_rows(rest_lake, plan.target) if r["run_id"] == "golden-run"]
    assert rows and rows[0]["sql_sha256"] == plan.sql_sha256 and rows[0]["strategy"] == plan.strategy
    assert rows[0]["rows_inserted"] == first.rows_inserted
    assert json.loads(rows[0]["pins"]) == {r: rest_lake.load(r).current_snapshot().snapshot_id for r in reads}
    if plan.idempotent:
        assert again.status in ("success", "unchanged"), again.error
