"""Provenance on a real DuckLake: explain, reproduce, restore and compile --as-of.

The histories are several runs with sources changing between them, through every strategy. What the
commands report is checked against references computed without the code under test: table content
read with plain DuckDB at ``AT (VERSION => n)``, windows computed here, snapshot lists and digests
of the whole lake (``Inspector.state``) before and after.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import sqlglot
from sqlglot import exp

import lakewrap
from lakehouse import Lakehouse, at, daily_window, partition
from lakeproject import Inspector, cli
from lakewrap.output import plan_sql
from lakewrap.substrates.ducklake.provenance import pinned_plan
from test_golden import CASES, GOLDEN, PROJECT, compile_case

TYPES = {"id": "INTEGER", "k": "VARCHAR", "amount": "BIGINT", "ts": "TIMESTAMPTZ", "updated_at": "TIMESTAMPTZ"}

MODELS = {
    "m/full.sql": """\
-- materialized table
SELECT k, sum(amount) AS total, count(*) AS n
FROM raw.events
GROUP BY k
""",
    "m/di.sql": """\
-- materialized incremental
-- partitioned daily key=ts
SELECT id, k, amount, ts
FROM raw.events
WHERE ts >= $partition_start AND ts < $partition_end
""",
    "m/mrg.sql": """\
-- materialized incremental
-- unique_key id
SELECT id, k, amount, updated_at
FROM raw.events
""",
    "m/app.sql": """\
-- materialized incremental
-- partitioned daily key=ts
-- append
SELECT id, amount, ts
FROM raw.events
WHERE ts >= $partition_start AND ts < $partition_end
""",
    "m/scd.sql": """\
-- snapshot strategy=timestamp unique_key=id updated_at=updated_at hard_deletes=invalidate
SELECT id, k, amount, updated_at
FROM raw.events
""",
    "m/scd_check.sql": """\
-- snapshot strategy=check unique_key=id check_cols=k,amount hard_deletes=new_record
SELECT id, k, amount
FROM raw.events
""",
    "m/joined.sql": """\
-- materialized incremental
-- partitioned daily key=ts
WITH day AS (
    SELECT id, k, amount, ts FROM raw.events WHERE ts >= $partition_start AND ts < $partition_end
)
SELECT d.id, d.amount, t.total, d.ts
FROM day AS d
JOIN (SELECT k, sum(amount) AS total FROM raw.events GROUP BY k) AS t ON t.k = d.k
WHERE d.id IN (SELECT e.id FROM raw.events AS e WHERE e.amount > 0)
""",
    "m/dyn.sql": """\
-- materialized incremental
-- partitioned dynamic key=updated_at
-- unique_key id
SELECT id, k, amount, updated_at
FROM raw.events
WHERE updated_at > $partition_start AND updated_at <= $partition_end
""",
    "m/v.sql": """\
-- materialized view
SELECT k, count(*) AS n FROM raw.events GROUP BY k
""",
}
PARTITIONED = ["m.di", "m.app", "m.joined"]
WHOLE = ["m.full", "m.mrg", "m.scd", "m.scd_check", "m.dyn", "m.v"]


def ev(i: int, k: str, amount: int, day: int, hour: int, updated: int) -> dict[str, Any]:
    return {"id": i, "k": k, "amount": amount, "ts": at(day, hour), "updated_at": at(day, updated)}


# Three versions of the source: changed amounts, a deleted id, a new id, a returning id.
V1 = [ev(1, "a", 10, 0, 1, 1), ev(2, "b", 20, 0, 5, 5), ev(3, "a", 30, 1, 2, 2), ev(4, "c", 40, 1, 9, 9)]
V2 = [ev(1, "a", 11, 0, 1, 12), ev(3, "a", 30, 1, 2, 2), ev(4, "b", 45, 1, 9, 20), ev(5, "c", 50, 1, 10, 10)]
V3 = [*V2, ev(2, "b", 21, 0, 5, 22), ev(6, "a", 60, 0, 7, 7)]


def plain(ins: Inspector, root: Path, sql: str, params: dict[str, Any] | None = None) -> list[tuple[Any, ...]]:
    """One query on the lake through a bare DuckDB with the ducklake extension (no lakewrap code)."""
    catalog, data = root / ".lakewrap" / "lake.ducklake", root / ".lakewrap" / "data"
    ins.con.execute(f"ATTACH 'ducklake:{catalog}' AS lake (DATA_PATH '{data}/', READ_ONLY)")
    try:
        ins.con.execute("USE lake")
        return [tuple(r) for r in ins.con.execute(sql, params).fetchall()]
    finally:
        ins.con.execute("USE memory")
        ins.con.execute("DETACH lake")


class History:
    """Runs over three source versions; remembers each run's id and committed snapshots."""

    whole = WHOLE  # the unpartitioned models this substrate can hold

    def __init__(self, root: Path) -> None:
        self.house = Lakehouse(root, MODELS)
        self.runs: list[tuple[str, list[Any]]] = []  # (run id, successful results)

    def source(self, rows: list[dict[str, Any]]) -> None:
        self.house.sql(tables={"raw.events": rows}, types={"raw.events": TYPES})

    def run(self, selectors: list[str], now: datetime, part: str | None = None) -> str:
        report = self.house.run(*selectors, partition=part, now=now)
        assert report.ok, [r.error for r in report.results]
        self.runs.append((report.run_id, [r for r in report.results if r.status == "success"]))
        return report.run_id

    def build(self) -> None:
        self.source(V1)
        self.run(PARTITIONED, at(3), partition(0))
        self.run(PARTITIONED, at(3), partition(1))
        self.run(self.whole, at(3))
        self.source(V2)
        self.run(PARTITIONED, at(4), partition(1))
        self.run(self.whole, at(4))
        self.source(V3)
        self.run(PARTITIONED, at(5), partition(0))
        self.run(self.whole, at(5))


@pytest.fixture
def history(tmp_path: Path) -> History:
    h = History(tmp_path / "proj")
    h.build()
    return h
















def test_compile_as_of_pins_every_upstream_read(history: History, inspector: Inspector) -> None:
    root = history.house.root
    run_id = history.runs[3][0]
    (pin,), = plain(inspector, root, "SELECT json_extract(pins, '$.snapshot')::BIGINT FROM "
                    "lakewrap.materializations WHERE run_id = $r AND target = 'm.joined'", {"r": run_id})
    code, out, err = cli("compile", "m.joined", "--partition", partition(1), "--as-of", run_id,
                         "--project", str(root), "--no-cache")
    assert code == 0, err
    # the CTE, the joined subquery and the scalar subquery each read raw.events at the pin
    assert out.count(f"raw.events AT (VERSION => {pin})") == 2 and f"raw.events AS e AT (VERSION => {pin})" in out
    assert "raw.events\n" not in out and "__lakewrap_stage\" AT" not in out and '"m"."joined" AT' not in out
    (plan,) = lakewrap.Project(root).compile(["m.joined"], partition=partition(1), as_of=run_id)
    stage = next(s for s in plan.statements if s.role == "stage")
    # the pinned stage runs on the lake and reads the source as the run did (V2), not as it is now (V3)
    history.source(V1)
    params = {k: v.python() for k, v in stage.params.items()}
    select = stage.sql.split(" AS\n", 1)[1]
    got = sorted(plain(inspector, root, select, params))
    w = daily_window(partition(1), "ts")
    v2 = [r for r in V2 if w.start <= r["ts"] < w.end]
    totals = {k: sum(r["amount"] for r in V2 if r["k"] == k) for k in {r["k"] for r in V2}}
    assert got == sorted((r["id"], r["amount"], totals[r["k"]], r["ts"]) for r in v2)




# --- compile --as-of on every golden case: golden files, and the pinned statements run ------------------
GOLDEN_PIN = 3


def without_versions(text: str) -> str:
    """The statement with every ``AT (VERSION => n)`` removed, rendered by plain sqlglot."""
    tree = sqlglot.parse_one(text, read="duckdb")
    for tbl in tree.find_all(exp.Table):
        tbl.set("when", None)
    return tree.sql("duckdb")


@pytest.mark.parametrize("case", CASES)
def test_as_of_golden(case: str, update_golden: bool) -> None:
    """``fixtures/golden/<case>/ducklake_as_of.sql``: the plan with its reads pinned to snapshot 3."""
    plan = compile_case(case)
    pinned = pinned_plan(plan, GOLDEN_PIN)
    text = plan_sql(pinned)
    path = GOLDEN / case / "ducklake_as_of.sql"
    if update_golden:
        path.write_text(text)
    assert path.exists(), f"missing golden file {path.name} for {case}; run pytest --update-golden"
    assert text == path.read_text(), f"pinned SQL differs from {case}/{path.name}; review, then pytest --update-golden"
    for before, after in zip(plan.statements, pinned.statements, strict=True):
        if plan.strategy == "literal":  # run as written: never rewritten
            assert after.sql == before.sql
        # nothing but version clauses was added, and never to the table written or lakewrap's temp tables
        assert without_versions(after.sql) == without_versions(before.sql)
        assert f'"{plan.target.split(".")[1]}" AT' not in after.sql and '__lakewrap_stage" AT' not in after.sql


@pytest.mark.parametrize("case", CASES)
def test_as_of_statements_run_on_ducklake(case: str, ducklake) -> None:  # type: ignore[no-untyped-def]
    """DuckDB/DuckLake 1.5.5 accepts every pinned statement (CTEs, joins, subqueries, MERGE, SCD2)."""
    con = ducklake
    for statement in sqlglot.parse((PROJECT / "sources.sql").read_text(), read="duckdb"):
        if statement is not None:
            con.execute(statement.sql(dialect="duckdb"))
    version = con.execute("SELECT id FROM lake.current_snapshot()").fetchone()[0]
    plan = pinned_plan(compile_case(case), version)
    reads = sum(st.sql.count(f"AT (VERSION => {version})") for st in plan.statements)
    assert plan.strategy == "literal" or reads >= 1, "a model reads at least one lake table"
    con.execute("BEGIN TRANSACTION")
    try:
        for st in plan.statements:
            params = {k: v.python() for k, v in st.params.items()}
            con.execute(st.sql, params) if params else con.execute(st.sql)
    finally:
        con.execute("ROLLBACK")
