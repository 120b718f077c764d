"""Golden files for the Iceberg compiler, and execution of the very same plans on a real Iceberg lake.

Every golden case of ``test_golden.py`` is compiled for substrate ``iceberg``; the annotated plan
(DuckDB SQL plus each pyiceberg commit operation) must equal ``fixtures/golden/<case>/iceberg.sql``
byte for byte, or, for a model Iceberg cannot hold (a view, a literal model), the compile error must
equal ``iceberg.error`` (``pytest --update-golden`` rewrites both). Then each plan runs through
lakewrap's Iceberg executor against a pyiceberg SqlCatalog holding the golden sources.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sqlglot

from lakewrap.compile import compile_project
from lakewrap.compilers.artifacts import CompiledPlan
from lakewrap.config import IcebergLakeConfig
from lakewrap.errors import UnsupportedError
from lakewrap.output import plan_sql
from test_golden import CASES, GOLDEN, NOW, PARTITIONS, PROJECT

# models Iceberg refuses at compile time: a view, a literal model, a merge with predicate=
REFUSED = ("view_basic", "literal_statements", "merge_predicate")
# a case whose golden is an error (e.g. a view with a contract) does not run either
RUNNABLE = [c for c in CASES if c not in REFUSED and not (GOLDEN / c / "iceberg.error").exists()]


def compile_case(case: str, substrate: str = "iceberg") -> CompiledPlan:
    (plan,) = compile_project(PROJECT, [f"path:models/golden/{case}.sql"], partition=PARTITIONS.get(case, "2024-01-02"),
                              now=NOW, use_cache=False, substrate=substrate)
    return plan


def outcome(case: str) -> tuple[str, str]:
    """(file name, text): the annotated plan, or the compile error for models Iceberg refuses."""
    try:
        return "iceberg.sql", plan_sql(compile_case(case))
    except UnsupportedError as exc:
        return "iceberg.error", exc.render() + "\n"


@pytest.mark.parametrize("case", CASES)
def test_golden_iceberg(case: str, update_golden: bool) -> None:
    name, text = outcome(case)
    path = GOLDEN / case / name
    if update_golden:
        for stale in ("iceberg.sql", "iceberg.error"):
            (GOLDEN / case / stale).unlink(missing_ok=True)
        path.write_text(text)
    assert path.exists(), f"missing golden file {path.relative_to(GOLDEN.parent.parent)}; run pytest --update-golden"
    assert text == path.read_text(), f"compiled plan differs from {case}/{name}; review, then pytest --update-golden"


@pytest.mark.parametrize(("substrate", "refused"), [
    ("iceberg", list(REFUSED)),
    # the SQL write path refuses the cases whose golden is an error (test_golden_iceberg_sql)
    ("iceberg-sql", [c for c in CASES if (GOLDEN / c / "iceberg_sql.error").exists()]),
])
def test_views_and_literal_models_are_refused_with_a_hint(substrate: str, refused: list[str]) -> None:
    """Both Iceberg write paths refuse a view and a literal model at compile time, with a hint."""
    assert {"view_basic", "literal_statements"} <= set(refused)
    for case in refused:
        with pytest.raises(UnsupportedError) as info:
            compile_case(case, substrate)
        assert info.value.hint and info.value.location is not None


@pytest.mark.parametrize("case", RUNNABLE)
def test_iceberg_plan_parses_back(case: str) -> None:
    plan = compile_case(case)
    assert plan == compile_case(case)
    for st in plan.statements:
        assert len([t for t in sqlglot.parse(st.sql, read="duckdb") if t is not None]) == 1, st.sql
    (op,) = plan.commits
    for text in (op.rows, op.delete_where or "TRUE"):
        assert sqlglot.parse_one(text, read="duckdb") is not None
    assert plan.substrate == "iceberg" and plan.write_path == "pyiceberg"


def source_lake(root: Path) -> Any:
    """An Iceberg lake whose catalog holds the golden sources (built in DuckDB, written by pyiceberg)."""
    import duckdb

    from lakewrap.execute.iceberg import IcebergLake

    lake = IcebergLake(root, IcebergLakeConfig(catalog="sql"))
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    for statement in sqlglot.parse((PROJECT / "sources.sql").read_text(), read="duckdb"):
        if statement is not None:
            con.execute(statement.sql(dialect="duckdb"))
    cat = lake.catalog()
    cat.create_namespace_if_not_exists("raw")
    names = con.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = 'raw'").fetchall()
    for (name,) in names:
        rows = con.execute(f'SELECT * FROM raw."{name}"').to_arrow_table()
        cat.create_table(("raw", name), schema=rows.schema).append(rows)
    con.close()
    return lake


@pytest.fixture(scope="module")
def golden_lake(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return source_lake(tmp_path_factory.mktemp("iceberg-golden"))


@pytest.mark.parametrize("case", RUNNABLE)
def test_golden_plans_run_on_iceberg(case: str, golden_lake: Any, tmp_path: Path) -> None:
    from lakewrap.substrates.iceberg.commit import IcebergExecutor

    plan = compile_case(case)
    reads = ("raw.orders", "raw.customers", "raw.events")
    con = golden_lake.connect()
    try:
        executor = IcebergExecutor(golden_lake, "golden-run", tmp_path / "log")
        first = executor.materialize(con, plan, reads=reads)
        assert first.status == "success", first.error
        again = executor.materialize(con, plan, reads=reads)
    finally:
        golden_lake.close(con)
    table = golden_lake.load(plan.target)
    assert table is not None and first.snapshot_id is not None
    summary = table.metadata.snapshot_by_id(first.snapshot_id).summary.additional_properties
    assert summary["lakewrap.run_id"] == "golden-run" and summary["lakewrap.sql_sha256"] == plan.sql_sha256
    if plan.idempotent:
        assert again.status in ("success", "unchanged"), again.error
