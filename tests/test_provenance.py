"""Provenance on a real DuckLake: explain, reproduce, restore and compile --as-of.

The histories are several runs with sources changing between them, through every strategy. What the
commands report is checked against references computed without the code under test: table content
read with plain DuckDB at ``AT (VERSION => n)``, windows computed here, snapshot lists and digests
of the whole lake (``Inspector.state``) before and after.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import sqlglot
from sqlglot import exp

import lakewrap
from lakehouse import Lakehouse, at, daily_window, partition
from lakeproject import Inspector, cli
from lakewrap.errors import PlanError, SelectionError, StateError, UnsupportedError
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


@pytest.fixture
def inspector() -> Iterator[Inspector]:
    ins = Inspector()
    ins.con.execute("SET TimeZone = 'UTC'")  # before any state(): it renders TIMESTAMPTZ values in it
    try:
        yield ins
    finally:
        ins.close()


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


def test_reproduce_matches_every_strategy_after_a_history(history: History, inspector: Inspector) -> None:
    root = history.house.root
    # a later change of the source must not matter: the reproduction reads what each run read
    history.source([ev(9, "z", 999, 0, 3, 3), ev(10, "z", 1, 1, 3, 3)])
    before = inspector.state(root)
    seen_strategies = set()
    for run_id, committed in history.runs:
        report = lakewrap.Project(root).reproduce(run_id)
        got = {(r.target, r.partition): r for r in report.results}
        want = {(r.target, r.partition): r.snapshot_id for r in committed}
        assert {k: r.snapshot_id for k, r in got.items()} == want, run_id
        for r in report.results:
            seen_strategies.add(r.strategy)
            if r.strategy == "view":  # a view holds no rows
                assert r.status == "SKIPPED" and "view" in (r.detail or ""), r
                continue
            assert r.status == "MATCH", r
            assert r.only_in_reproduction == r.only_in_table == 0
            # the table's row count, read here at the committed snapshot without lakewrap
            schema, name = r.target.split(".")
            (n,), = plain(inspector, root, f'SELECT count(*) FROM "{schema}"."{name}" AT (VERSION => {r.snapshot_id})')
            assert r.rows_in_table == r.rows_reproduced == n
        assert report.ok
    assert seen_strategies == {"table", "delete+insert", "merge", "append", "snapshot", "view"}
    assert inspector.state(root) == before, "reproduce wrote to the lake"


def test_reproduce_mismatch_when_a_pin_is_rewritten(history: History, inspector: Inspector) -> None:
    root = history.house.root
    first_run = history.runs[1][0]  # the V1 run of partition 1
    run_id = history.runs[3][0]  # the V2 run of partition 1: id 5 appeared in it
    (old_pin,), = plain(inspector, root, "SELECT json_extract(pins, '$.snapshot')::BIGINT FROM "
                        "lakewrap.materializations WHERE run_id = $r AND target = 'm.di'", {"r": first_run})
    code, out, _ = cli("reproduce", run_id, "--model", "m.di", "--project", str(root), "--format", "json")
    assert code == 0 and json.loads(out)["results"][0]["status"] == "MATCH"
    history.house.sql(f"UPDATE lakewrap.materializations SET pins = '{{\"snapshot\": {old_pin}}}' "
                      f"WHERE run_id = '{run_id}' AND target = 'm.di'")
    code, out, _ = cli("reproduce", run_id, "--model", "m.di", "--project", str(root), "--format", "json")
    (r,) = json.loads(out)["results"]
    assert code == 1 and r["status"] == "MISMATCH"
    # at the old pin the source's partition 1 held ids 3, 4 (V1); the table holds 3, 4, 5 (V2), with 4 changed;
    # partition 0 (ids 1, 2) is the same in both
    assert (r["only_in_reproduction"], r["only_in_table"]) == (1, 2)


def test_reproduce_mismatch_when_the_recorded_sql_is_tampered(history: History) -> None:
    root = history.house.root
    run_id = history.runs[2][0]
    # the recorded SQL holds the model's SELECT as written (`sum(amount)`)
    history.house.sql("UPDATE lakewrap.compiled_sql SET statements = replace(statements, 'sum(amount)', "
                      "'sum(amount) + 1') WHERE sql_sha256 IN "
                      "(SELECT sql_sha256 FROM lakewrap.materializations WHERE target = 'm.full')")
    report = lakewrap.Project(root).reproduce(run_id, model="m.full")
    (r,) = report.results
    assert r.status == "MISMATCH" and r.only_in_reproduction == r.only_in_table == 3  # keys a, b, c
    assert not report.ok


def _rows_in_window(ins: Inspector, root: Path, table: str, version: int | None, day: int) -> list[tuple[Any, ...]]:
    w = daily_window(partition(day), "ts")
    source = f"m.{table}" + (f" AT (VERSION => {version})" if version is not None else "")
    return sorted(plain(ins, root, f"SELECT * FROM {source} WHERE ts >= $s AND ts < $e", {"s": w.start, "e": w.end}))


def test_restore_partition_returns_exact_rows_and_leaves_others(history: History, inspector: Inspector) -> None:
    root = history.house.root
    run_b = history.runs[1][0]  # partition 1 with V1
    snap_b = next(r.snapshot_id for r in history.runs[1][1] if r.target == "m.di")
    expected = _rows_in_window(inspector, root, "di", snap_b, 1)
    assert expected != _rows_in_window(inspector, root, "di", None, 1), "the history must have changed partition 1"
    day0 = _rows_in_window(inspector, root, "di", None, 0)
    snapshots_before, _ = inspector.state(root)

    out = lakewrap.Project(root).restore("m.di", partition=partition(1), to_run=run_b)

    snapshots_after, _ = inspector.state(root)
    assert len(snapshots_after) == len(snapshots_before) + 1 and out.result.snapshot_id == snapshots_after[-1]
    assert _rows_in_window(inspector, root, "di", None, 1) == expected
    assert _rows_in_window(inspector, root, "di", None, 0) == day0
    (row,) = plain(inspector, root, "SELECT run_id, strategy, partition_value, pins FROM lakewrap.materializations "
                   "WHERE strategy = 'restore'")
    assert row[:3] == (out.run_id, "restore", partition(1))
    assert json.loads(row[3])["restored_from"] == {"snapshot": snap_b, "run_id": run_b}
    (extra,), = plain(inspector, root, f"SELECT commit_extra_info FROM lake.snapshots() "
                      f"WHERE snapshot_id = {out.result.snapshot_id}")
    info = json.loads(extra)
    assert (info["strategy"], info["target"], info["pins"]["restored_from"]["run_id"]) == ("restore", "m.di", run_b)
    (fence_run,), = plain(inspector, root, 'SELECT run_id FROM lakewrap."fence:m.di"')
    assert fence_run == out.run_id
    # the restore is itself a materialization: explain names it, reproduce rebuilds it
    (m,) = lakewrap.Project(root).explain(out.result.snapshot_id)
    assert (m.run_id, m.strategy, m.partition) == (out.run_id, "restore", partition(1))
    (r,) = lakewrap.Project(root).reproduce(out.run_id).results
    assert r.status == "MATCH"


def test_restore_whole_table_to_snapshot_and_dry_run(history: History, inspector: Inspector) -> None:
    root = history.house.root
    snap = next(r.snapshot_id for r in history.runs[2][1] if r.target == "m.scd")
    expected = sorted(plain(inspector, root, f"SELECT * FROM m.scd AT (VERSION => {snap})"))
    assert expected != sorted(plain(inspector, root, "SELECT * FROM m.scd"))
    before = inspector.state(root)
    code, out, _ = cli("restore", "m.scd", "--to-snapshot", str(snap), "--dry-run", "--project", str(root))
    assert code == 0 and f'FROM "m"."scd" AT (VERSION => {snap})' in out and 'DELETE FROM "m"."scd";' in out
    assert inspector.state(root) == before, "--dry-run wrote to the lake"
    code, out, err = cli("restore", "m.scd", "--to-snapshot", str(snap), "--project", str(root))
    assert code == 0, err
    assert sorted(plain(inspector, root, "SELECT * FROM m.scd")) == expected
    assert len(inspector.state(root)[0]) == len(before[0]) + 1


def test_explain_snapshot_and_run(history: History, inspector: Inspector) -> None:
    root = history.house.root
    run_id, committed = history.runs[3]
    res = next(r for r in committed if r.target == "m.di")
    code, out, _ = cli("explain", str(res.snapshot_id), "--project", str(root), "--format", "json")
    (m,) = json.loads(out)
    assert code == 0 and (m["run_id"], m["target"], m["partition"], m["strategy"]) == (
        run_id, "m.di", partition(1), "delete+insert")
    (pins, sha), = plain(inspector, root, "SELECT pins, sql_sha256 FROM lakewrap.materializations "
                         "WHERE run_id = $r AND target = 'm.di'", {"r": run_id})
    assert m["pins"] == json.loads(pins) and m["sql_sha256"] == sha
    (statements,), = plain(inspector, root, "SELECT statements FROM lakewrap.compiled_sql WHERE sql_sha256 = $s",
                           {"s": sha})
    assert [s["sql"] for s in m["statements"]] == [s["sql"] for s in json.loads(statements)]
    w = daily_window(partition(1), "ts")
    assert m["params"]["partition_start"] == w.start.isoformat()
    code, text, _ = cli("explain", run_id, "--project", str(root))
    assert code == 0 and text.count("-- run:        " + run_id) == len(committed)
    assert 'DELETE FROM "m"."di"' in text


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


def test_bad_inputs_are_clear_and_write_nothing(history: History, inspector: Inspector, tmp_path: Path) -> None:
    root = history.house.root
    project = lakewrap.Project(root)
    run_b = history.runs[1][0]
    before = inspector.state(root)
    with pytest.raises(StateError, match="no materialization of run `nope`") as e1:
        project.restore("m.di", partition=partition(1), to_run="nope")
    assert "lakewrap history" in (e1.value.hint or "")
    with pytest.raises(StateError, match="no materialization of run `nope`"):
        project.reproduce("nope")
    with pytest.raises(StateError, match="no materialization of run"):
        project.explain("nope")
    with pytest.raises(StateError, match="the lake has no snapshot 99999"):
        project.explain(99999)
    with pytest.raises(SelectionError, match=r"no model matches `m\.nope`"):
        project.restore("m.nope", partition=partition(1), to_run=run_b)
    with pytest.raises(StateError, match=f"did not materialize partition {partition(0)}") as e2:
        project.restore("m.di", partition=partition(0), to_run=run_b)
    assert partition(1) in (e2.value.hint or "")
    with pytest.raises(StateError, match=f"run {run_b} did not materialize `m.full`"):
        project.reproduce(run_b, model="m.full")
    with pytest.raises(PlanError, match="name the partition"):
        project.restore("m.di", to_run=run_b)
    with pytest.raises(PlanError, match="exactly one of"):
        project.restore("m.di", partition=partition(1))
    with pytest.raises(PlanError, match="whole table"):
        project.restore("m.full", partition=partition(1), to_run=run_b)
    with pytest.raises(UnsupportedError, match="view model"):
        project.restore("m.v", to_snapshot=before[0][-1])
    code, _, err = cli("restore", "m.di", "--partition", partition(1), "--to", "nope", "--project", str(root))
    assert code == 1 and "no materialization of run `nope`" in err
    assert inspector.state(root) == before

    ice = tmp_path / "ice"
    (ice / "models" / "m").mkdir(parents=True)
    (ice / "models" / "m" / "full.sql").write_text(MODELS["m/full.sql"])
    (ice / "lakewrap.toml").write_text('[lake]\nsubstrate = "iceberg"\n')
    # an Iceberg project that never ran: a clear error, and no catalog created
    for call in (lambda p: p.explain("1"), lambda p: p.reproduce("r"),
                 lambda p: p.restore("m.full", to_snapshot=1), lambda p: p.compile(["m.full"], as_of="r")):
        with pytest.raises(StateError, match="the lake does not exist yet: no catalog at") as e3:
            call(lakewrap.Project(ice))
        assert "lakewrap run" in (e3.value.hint or "")
    assert not (ice / ".lakewrap").exists() and not (ice / "warehouse").exists()


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
