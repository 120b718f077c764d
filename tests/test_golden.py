"""Golden files for compiled SQL, and execution of the very same SQL on a real DuckLake.

Each model under fixtures/models/models/golden/ is compiled for a fixed partition and a fixed
logical time; the annotated SQL must equal fixtures/golden/<case>/ducklake.sql byte for byte
(`pytest --update-golden` rewrites them). Every statement must parse back with sqlglot, compiling
twice must give identical text, and the statements must run inside a transaction on a real
DuckLake (then rolled back) to prove they bind.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest
import sqlglot

from conftest import FIXTURES
from lakewrap.compile import compile_project
from lakewrap.compilers.artifacts import CompiledPlan
from lakewrap.output import plan_sql

PROJECT = FIXTURES / "models"
GOLDEN = FIXTURES / "golden"
CASES = sorted(p.stem for p in (PROJECT / "models" / "golden").glob("*.sql"))
NOW = datetime(2024, 6, 1, tzinfo=timezone.utc)
PARTITIONS = {
    "delete_insert_hourly_tz": "2024-03-10T01",
    "delete_insert_daily_dst": "2024-03-10",
    "delete_insert_weekly": "2024-W01",
    "delete_insert_monthly_lookback": "2024-03",
    "delete_insert_yearly": "2024",
}


def compile_case(case: str) -> CompiledPlan:
    (plan,) = compile_project(
        PROJECT,
        [f"path:models/golden/{case}.sql"],
        partition=PARTITIONS.get(case, "2024-01-02"),
        now=NOW,
        use_cache=False,
    )
    return plan


def test_cases_exist() -> None:
    assert len(CASES) >= 20


@pytest.mark.parametrize("case", CASES)
def test_golden(case: str, update_golden: bool) -> None:
    text = plan_sql(compile_case(case))
    path = GOLDEN / case / "ducklake.sql"
    if update_golden:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"missing golden file {path.relative_to(FIXTURES.parent)}; run pytest --update-golden"
    assert text == path.read_text(), f"compiled SQL differs from {path.name}; review, then pytest --update-golden"


@pytest.mark.parametrize("case", CASES)
def test_compile_is_deterministic_and_parses_back(case: str) -> None:
    first, second = compile_case(case), compile_case(case)
    assert first == second
    for st in first.statements:
        trees = [t for t in sqlglot.parse(st.sql, read="duckdb") if t is not None]
        assert len(trees) == 1, st.sql


def test_no_orphan_golden_files() -> None:
    assert sorted(p.name for p in GOLDEN.iterdir() if p.is_dir()) == CASES


@pytest.mark.parametrize("case", CASES)
def test_golden_statements_run_on_ducklake(case: str, ducklake) -> None:  # type: ignore[no-untyped-def]
    con = ducklake
    for statement in sqlglot.parse((PROJECT / "sources.sql").read_text(), read="duckdb"):
        if statement is not None:
            con.execute(statement.sql(dialect="duckdb"))
    plan = compile_case(case)
    con.execute("BEGIN TRANSACTION")
    try:
        for st in plan.statements:
            params = {k: v.python() for k, v in st.params.items()}
            con.execute(st.sql, params) if params else con.execute(st.sql)
        if plan.strategy != "literal":  # the target exists and reads back
            schema, name = plan.target.split(".")
            count = sqlglot.exp.select("count(*)").from_(sqlglot.exp.table_(name, db=schema, quoted=True))
            assert con.execute(count.sql(dialect="duckdb")).fetchone() is not None
    finally:
        con.execute("ROLLBACK")


def test_select_star_merge_without_columns_is_a_clear_error(tmp_path: Path) -> None:
    from lakewrap.errors import ModelError

    models = tmp_path / "models"
    models.mkdir()
    (models / "m.sql").write_text("-- materialized incremental\n-- unique_key id\nSELECT * FROM raw.t\n")
    with pytest.raises(ModelError, match=r"needs the model's column list"):
        compile_project(tmp_path, use_cache=False)
