"""Iceberg write path ``sql`` (DuckDB through the REST adapter): atomicity, conflicts, unknown
outcomes, concurrent processes, bad inputs, full rebuilds' columns, partitioned tables.

Everything runs for real: DuckDB 1.5.5 attached to the test REST adapter (``rest_adapter.py``) over
a pyiceberg SqlCatalog on SQLite. Races are made deterministic with the executor's
``before_commit`` hook (a second writer commits in full while the first holds its transaction
open); lost commit responses are injected by the adapter (``faults``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from click.testing import CliRunner

from icehouse_sql import rest_toml
from lakewrap.cli import main
from lakewrap.compile import load_project
from lakewrap.execute.iceberg import IcebergLake
from lakewrap.runner import materialize_spec, run_project
from lakewrap.substrates.iceberg.sql_connect import connect
from lakewrap.substrates.iceberg.sql_write import IcebergSqlExecutor
from lakewrap.substrates.iceberg.state import state_rows

UTC = timezone.utc
NOW = datetime(2024, 6, 1, tzinfo=UTC)
DI = ("-- materialized incremental\n-- partitioned daily key=ts\n"
      "SELECT id, v, ts FROM raw.src WHERE ts >= $partition_start AND ts < $partition_end\n")
AP = "-- materialized incremental\n-- append\nSELECT id, v, ts FROM raw.src\n"
MG = "-- materialized incremental\n-- unique_key id\nSELECT id, v, ts FROM raw.src\n"
SCHEMA = pa.schema([("id", pa.int32()), ("v", pa.int32()), ("ts", pa.timestamp("us", tz="UTC"))])


@pytest.fixture
def faults() -> dict[str, int]:
    return {}


@pytest.fixture
def journal() -> list[tuple[str, ...]]:
    return []


@pytest.fixture
def served(tmp_path: Path, faults: dict[str, int], journal: list[tuple[str, ...]]) -> Iterator[str]:
    """A REST adapter over a SqlCatalog under ``tmp_path/rest-server``; yields its URI."""
    from pyiceberg.catalog.sql import SqlCatalog

    from rest_adapter import serve

    server = tmp_path / "rest-server"
    server.mkdir()
    backing = SqlCatalog("rest", uri=f"sqlite:///{server / 'rest.db'}", warehouse=(server / "wh").as_uri())
    with ExitStack() as stack:
        yield stack.enter_context(serve(backing, faults, journal))


def project(root: Path, uri: str, models: dict[str, str]) -> IcebergLake:
    root.mkdir(parents=True, exist_ok=True)
    (root / "lakewrap.toml").write_text(rest_toml(uri))
    for rel, text in models.items():
        (root / "models" / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / "models" / rel).write_text(text)
    return IcebergLake.open(root)


def source(lake: IcebergLake, days: int, per_day: int, v: int = 0) -> None:
    """``raw.src``: ``per_day`` rows on each of ``days`` days from 2024-01-01, value ``v``."""
    rows = [{"id": d * 1000 + i, "v": v, "ts": datetime(2024, 1, 1, 6, tzinfo=UTC) + timedelta(days=d)}
            for d in range(days) for i in range(per_day)]
    data = pa.Table.from_pylist(rows, schema=SCHEMA)
    table = lake.load("raw.src")
    if table is None:
        lake.ensure_namespace("raw")
        lake.catalog().create_table(("raw", "src"), schema=SCHEMA).append(data)
    else:
        table.overwrite(data)


def rows_of(lake: IcebergLake, name: str) -> list[dict[str, Any]]:
    table = lake.load(name)
    return [] if table is None else table.scan().to_arrow().to_pylist()  # type: ignore[no-any-return]


def catalog_state(root: Path) -> tuple[tuple[str, str], ...]:
    """Every table's metadata location: any commit changes it."""
    lake = IcebergLake.open(root)
    return tuple((n, lake.load(n).metadata_location) for n in lake.tables())


def run_one(root: Path, lake: IcebergLake, target: str, partition: str | None, run_id: str,
            hook: Any = None) -> Any:
    spec = load_project(root, None).select([target])[0]
    executor = IcebergSqlExecutor(lake, run_id, root / "target" / run_id, before_commit=hook)
    con = connect(lake)
    try:
        return materialize_spec(lake, con, executor, spec, partition, NOW, None)
    finally:
        con.close()


# --- atomicity ----------------------------------------------------------------------------------------


def test_state_is_committed_with_the_data_in_one_catalog_transaction(tmp_path: Path, served: str,
                                                                    journal: list[tuple[str, ...]]) -> None:
    lake = project(tmp_path, served, {"out/di.sql": DI})
    source(lake, 2, 5)
    report = run_project(tmp_path, partition="2024-01-01", now=NOW, run_id="run-1")
    (res,) = report.results
    assert res.status == "success" and res.rows_inserted == 5, res.error
    (row,) = state_rows(lake, "out.di")
    assert (row["run_id"], row["partition_value"], row["strategy"], row["rows_inserted"]) == (
        "run-1", "2024-01-01", "delete+insert", 5)
    assert row["sql_sha256"] == res.sql_sha256 and row["snapshot_id"] == res.snapshot_id
    assert json.loads(row["pins"]) == {"raw.src": lake.load("raw.src").current_snapshot().snapshot_id}
    # the catalog received data and state in one atomic /v1/transactions/commit
    assert journal == [("lakewrap.out__di", "out.di")]
    log = next((tmp_path / "target" / "run" / "run-1").glob("out.di*.sql")).read_text()
    assert "first run: the target is created empty" in log
    assert log.rindex("BEGIN TRANSACTION") < log.index('INSERT INTO "ice"."lakewrap"."out__di"') < log.rindex("COMMIT")
    assert run_project(tmp_path, partition="2024-01-02", now=NOW, run_id="run-2").ok
    assert journal == [("lakewrap.out__di", "out.di")] * 2
    history = lakewrap_history(tmp_path, "out.di")
    assert [(h["run_id"], h["partition"], h["rows_inserted"]) for h in history] == [
        ("run-2", "2024-01-02", 5), ("run-1", "2024-01-01", 5)]
    assert history[1]["snapshot_id"] == res.snapshot_id
    assert history[0]["snapshot_id"] == lake.load("out.di").current_snapshot().snapshot_id


def lakewrap_history(root: Path, model: str) -> list[dict[str, Any]]:
    import lakewrap

    return lakewrap.Project(root).history(model)


@pytest.mark.parametrize("when", ["a statement after the DELETE", "just before COMMIT"])
def test_a_failure_mid_transaction_leaves_no_snapshot_and_no_state(when: str, tmp_path: Path, served: str) -> None:
    lake = project(tmp_path, served, {"out/di.sql": DI})
    source(lake, 2, 5)
    assert run_project(tmp_path, partition="2024-01-01", now=NOW).ok
    before, rows_before = catalog_state(tmp_path), rows_of(lake, "out.di")
    hook = None
    if when == "a statement after the DELETE":  # a test query that fails at run time, after the writes
        (tmp_path / "checks").mkdir()
        (tmp_path / "checks" / "boom.sql").write_text("SELECT CAST('x' || id AS INTEGER) AS y FROM out.di\n")
        (tmp_path / "models" / "out" / "di.sql").write_text(DI.replace("SELECT id", "-- test sql checks/boom.sql\n"
                                                                                   "SELECT id"))
    else:
        def hook(con: Any) -> None:
            raise RuntimeError("injected failure before COMMIT")
    res = run_one(tmp_path, lake, "out.di", "2024-01-01", "run-2", hook)
    assert res.status == "failed" and res.snapshot_id is None
    assert ("Conversion Error" in (res.error or "")) if hook is None else "injected failure" in (res.error or "")
    assert catalog_state(tmp_path) == before  # no table (data or state) moved
    assert rows_of(lake, "out.di") == rows_before and len(state_rows(lake, "out.di")) == 1
    log = next((tmp_path / "target" / "run-2").glob("*.sql")).read_text()
    assert "ROLLBACK" in log and "\nCOMMIT;" not in log
    if hook is None:
        # the DELETE and the INSERT ran, then the test failed and everything was rolled back
        assert log.rindex("DELETE FROM") < log.rindex("INSERT INTO") < log.index("-- failed")


# --- conflicts and unknown outcomes -----------------------------------------------------------------------


@pytest.mark.parametrize("moved", ["state table", "target"])
def test_the_catalog_commit_is_atomic_across_the_data_and_the_state_table(moved: str, tmp_path: Path,
                                                                         served: str) -> None:
    """One of the two tables moves under the open transaction (a foreign append): the transaction's
    requirement on it fails, and the other table -- whose own requirement still holds -- must not
    move either (whichever order the table changes come in)."""
    from lakewrap.execute.retry import RetryPolicy

    lake = project(tmp_path, served, {"out/di.sql": DI})
    source(lake, 2, 5)
    assert run_project(tmp_path, partition="2024-01-01", now=NOW).ok
    name, other = ("lakewrap.out__di", "out.di") if moved == "state table" else ("out.di", "lakewrap.out__di")
    table = lake.load(name)
    other_before = lake.load(other).metadata_location

    def foreign(_con: Any) -> None:
        table.append(table.scan().to_arrow().slice(0, 1))

    spec = load_project(tmp_path, None).select(["out.di"])[0]
    executor = IcebergSqlExecutor(lake, "run-x", tmp_path / "target" / "x", before_commit=foreign,
                                  policy=RetryPolicy(attempts=1))
    con = connect(lake)
    try:
        res = materialize_spec(lake, con, executor, spec, "2024-01-02", NOW, None)
    finally:
        con.close()
    assert res.status == "failed" and "Conflict_409" in (res.error or ""), res.error
    assert lake.load(other).metadata_location == other_before  # neither half committed without the other
    assert [r["run_id"] for r in state_rows(lake, "out.di")].count("run-x") == 0
    assert not [r for r in rows_of(lake, "out.di") if r["ts"].date().isoformat() == "2024-01-02"]


@pytest.mark.parametrize("same", [True, False], ids=["same-partition", "other-partition"])
def test_a_conflict_is_retried_as_a_whole_after_the_state_table_says_it_did_not_land(
        same: bool, tmp_path: Path, served: str) -> None:
    lake = project(tmp_path, served, {"out/di.sql": DI})
    source(lake, 3, 10)
    assert run_project(tmp_path, partition="2024-01-03", now=NOW).ok
    inner: list[Any] = []

    def intrude(_con: Any) -> None:
        if not inner:  # a second writer commits in full while the first holds its transaction open
            inner.append(run_one(tmp_path, IcebergLake.open(tmp_path), "out.di",
                                 "2024-01-01" if same else "2024-01-02", "run-b"))

    outer = run_one(tmp_path, lake, "out.di", "2024-01-01", "run-a", intrude)
    assert inner[0].status == "success" and inner[0].attempts == 1, inner[0].error
    assert outer.status == "success" and outer.attempts == 2, outer.error
    assert "Conflict_409" in outer.attempt_errors[0]["error"]
    days = Counter(r["ts"].date().isoformat() for r in rows_of(lake, "out.di"))
    assert days == {"2024-01-01": 10, "2024-01-03": 10} | ({} if same else {"2024-01-02": 10})
    assert Counter(r["id"] for r in rows_of(lake, "out.di")).most_common(1)[0][1] == 1
    runs = Counter(r["run_id"] for r in state_rows(lake, "out.di"))
    assert runs["run-a"] == runs["run-b"] == 1 and sum(runs.values()) == 3  # the failed attempt left no row


def test_an_unavailable_catalog_is_retried_once_the_state_table_shows_nothing_landed(
        tmp_path: Path, served: str, faults: dict[str, int]) -> None:
    """The adapter answers 503 to six commits without committing: DuckDB's HTTP client retries the
    POST itself (four requests), then COMMIT fails; the attempt's commit id is not in the state
    table, so lakewrap retries the whole transaction, whose second request goes through."""
    lake = project(tmp_path, served, {"out/ap.sql": AP})
    source(lake, 1, 7)
    assert run_project(tmp_path, now=NOW).ok
    faults["refuse"] = 6
    res = run_one(tmp_path, lake, "out.ap", None, "run-1")
    assert res.status == "success" and res.attempts == 2, res.error
    assert faults["refuse"] == 0 and "HTTP 503" in res.attempt_errors[0]["error"]
    assert len(rows_of(lake, "out.ap")) == 14 and len(state_rows(lake, "out.ap")) == 2


def test_a_lost_commit_response_is_an_unknown_outcome_never_retried(
        tmp_path: Path, served: str, faults: dict[str, int]) -> None:
    """The adapter commits, then answers 503. An append is not idempotent: re-applying it would
    duplicate its rows. Measured on DuckDB 1.5.5: its HTTP client re-sends the POST (answered 409,
    the requirements having moved), so COMMIT fails, and DuckDB then deletes the transaction's data
    files -- which the catalog now references. lakewrap cannot read its state row back, reports the
    outcome as unknown and does not retry: the commit was applied exactly once (and the table
    needs a rollback to its previous snapshot, see docs/iceberg.md)."""
    lake = project(tmp_path, served, {"out/ap.sql": AP})
    source(lake, 1, 7)
    assert run_project(tmp_path, now=NOW).ok
    faults["lose"] = 1
    res = run_one(tmp_path, lake, "out.ap", None, "run-1")
    assert faults["lose"] == 0
    assert res.status == "failed" and res.attempts == 1 and "outcome is unknown" in (res.error or ""), res.error
    table = lake.load("out.ap")
    assert table.current_snapshot().summary.additional_properties["total-records"] == "14"  # applied once
    assert len(table.snapshots()) == 2


# --- two processes ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_two_processes_on_one_table_lose_and_duplicate_nothing(tmp_path: Path, served: str) -> None:
    """Two ``lakewrap run`` processes replace the same four partitions of one table (in opposite
    orders) and merge into a second table, at once."""
    lake = project(tmp_path, served, {"out/di.sql": DI, "out/mg.sql": MG})
    source(lake, 4, 30)
    orders = [["2024-01-01", "2024-01-02", "2024-01-03", "2024-01-04"],
              ["2024-01-04", "2024-01-03", "2024-01-02", "2024-01-01"]]
    script = ("import sys\nfrom pathlib import Path\nfrom lakewrap.runner import run_project\n"
              "for day in sys.argv[2:]:\n"
              "    for r in run_project(Path(sys.argv[1]), partition=day).results:\n"
              "        print(r.target, day, r.status, r.attempts, r.error, flush=True)\n")
    procs = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path), *days], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for days in orders]
    outs = [p.communicate(timeout=600) for p in procs]
    for (out, err), p in zip(outs, procs, strict=True):
        assert p.returncode == 0, err
        assert len(out.splitlines()) == 8 and all(line.split()[2] == "success" for line in out.splitlines()), out
    retries = sum(int(line.split()[3]) - 1 for out, _ in outs for line in out.splitlines())
    print(f"retried attempts after conflicts: {retries}")  # conflicts are likely, not certain
    rows = rows_of(lake, "out.di")
    assert Counter(r["ts"].date().isoformat() for r in rows) == {f"2024-01-0{d}": 30 for d in range(1, 5)}
    assert len({r["id"] for r in rows}) == len(rows) == 120
    merged = rows_of(lake, "out.mg")
    assert len({r["id"] for r in merged}) == len(merged) == 120
    assert len(state_rows(lake, "out.di")) == 8 and len(state_rows(lake, "out.mg")) == 8


# --- bad inputs: a clear error and nothing written ---------------------------------------------------------


def test_write_path_sql_without_a_rest_catalog_is_a_located_error(tmp_path: Path) -> None:
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "m.sql").write_text(MG)
    (tmp_path / "lakewrap.toml").write_text('[lake]\nsubstrate = "iceberg"\nwrite_path = "sql"\n')
    for command in (["run"], ["compile"]):
        result = CliRunner().invoke(main, [*command, "--project", str(tmp_path)])
        assert result.exit_code == 1, result.stdout
        text = result.stdout + result.stderr
        assert "lakewrap.toml" in text and 'needs catalog = "rest"' in text, text
    assert not (tmp_path / ".lakewrap").exists()


BAD = {
    "a view": ("-- materialized view\nSELECT id FROM raw.src\n", "cannot hold a view"),
    "a literal model": ("DELETE FROM raw.src\n", "literal model cannot write an Iceberg table"),
    "duplicate keys": ("-- materialized incremental\n-- unique_key v\nSELECT id, v, ts FROM raw.src\n",
                       "more than once"),
    "rows outside the window": ("-- materialized incremental\n-- partitioned daily key=ts\n"
                                "SELECT id, v, ts FROM raw.src\n", "outside the partition window"),
    "a runtime error": ("-- materialized incremental\n-- partitioned daily key=ts\n"
                        "SELECT id, CAST('x' || v AS INTEGER) AS v, ts FROM raw.src "
                        "WHERE ts >= $partition_start AND ts < $partition_end\n", "Conversion Error"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_input_fails_clearly_and_writes_nothing(case: str, tmp_path: Path, served: str) -> None:
    lake = project(tmp_path, served, {"out/t.sql": DI})
    source(lake, 2, 5)
    assert run_project(tmp_path, partition="2024-01-01", now=NOW).ok
    text, message = BAD[case]
    (tmp_path / "models" / "out" / "t.sql").write_text(text)
    before = catalog_state(tmp_path)
    part = ["--partition", "2024-01-01"] if "partitioned" in text else []
    result = CliRunner().invoke(main, ["run", *part, "--project", str(tmp_path), "--format", "json"])
    assert result.exit_code == 1, result.stdout
    (res,) = json.loads(result.stdout)["results"]
    assert res["status"] == "failed" and message in res["error"], res["error"]
    assert "models/out/t.sql" in res["error"]
    assert catalog_state(tmp_path) == before  # no table changed: no snapshot, no state row


# --- full rebuilds, --full-refresh, lakewrap.materialize() ------------------------------------------------


TB = "-- materialized table\nSELECT id, v, ts FROM raw.src\n"


def fields(lake: IcebergLake, name: str) -> list[tuple[str, str]]:
    """The table's columns and Iceberg types, read with pyiceberg."""
    return [(f.name, str(f.field_type)) for f in lake.load(name).schema().fields]  # type: ignore[union-attr]


def test_a_full_rebuild_takes_the_selects_columns_in_one_catalog_commit(tmp_path: Path, served: str,
                                                                       journal: list[tuple[str, ...]]) -> None:
    lake = project(tmp_path, served, {"out/tb.sql": TB})
    source(lake, 2, 5)
    assert run_project(tmp_path, now=NOW).ok
    source(lake, 1, 3, v=1)
    (res,) = run_project(tmp_path, now=NOW).results
    assert (res.status, res.rows_inserted, res.rows_deleted) == ("success", 3, 0), res.error
    assert sorted((r["id"], r["v"]) for r in rows_of(lake, "out.tb")) == [(0, 1), (1, 1), (2, 1)]
    assert res.schema_changes == []
    # the SELECT drops ts, widens id, retypes v to text and adds w: the table takes exactly its columns
    model = tmp_path / "models" / "out" / "tb.sql"
    model.write_text(TB.replace("SELECT id, v, ts", "SELECT CAST(id AS BIGINT) AS id, 'v' || v AS v, id * 2 AS w"))
    del journal[:]
    (res,) = run_project(tmp_path, now=NOW).results
    assert res.status == "success", res.error
    # (by name: new and retyped columns come last, unlike CREATE OR REPLACE; every write is by name)
    assert sorted(fields(lake, "out.tb")) == [("id", "long"), ("v", "string"), ("w", "int")]
    source_rows = lake.load("raw.src").scan().to_arrow().to_pylist()  # type: ignore[union-attr]
    want = sorted((r["id"], f"v{r['v']}", r["id"] * 2) for r in source_rows)
    assert sorted((r["id"], r["v"], r["w"]) for r in rows_of(lake, "out.tb")) == want
    assert journal == [("lakewrap.out__tb", "out.tb")]  # columns, rows and state: one catalog commit
    assert len(res.schema_changes) == 6 and all(st.startswith("ALTER TABLE") for st in res.schema_changes)
    # and back: v an integer again, ts back, w gone, id narrowed to INTEGER
    model.write_text(TB)
    (res,) = run_project(tmp_path, now=NOW).results
    assert res.status == "success", res.error
    assert sorted(fields(lake, "out.tb")) == [("id", "int"), ("ts", "timestamptz"), ("v", "int")]
    assert sorted((r["id"], r["v"], r["ts"]) for r in rows_of(lake, "out.tb")) == sorted(
        (r["id"], r["v"], r["ts"]) for r in source_rows)


def test_full_refresh_recomputes_from_scratch_in_one_transaction(tmp_path: Path, served: str,
                                                                 journal: list[tuple[str, ...]]) -> None:
    lake = project(tmp_path, served, {"out/ap.sql": AP})
    source(lake, 1, 4)
    assert run_project(tmp_path, now=NOW).ok
    assert run_project(tmp_path, now=NOW).ok
    assert len(rows_of(lake, "out.ap")) == 8  # append, twice
    del journal[:]
    (res,) = run_project(tmp_path, now=NOW, full_refresh=True).results
    assert res.status == "success" and res.rows_inserted == 4, res.error
    assert len(rows_of(lake, "out.ap")) == 4
    assert journal == [("lakewrap.out__ap", "out.ap")]  # delete, insert and state: one catalog commit
    assert state_rows(lake, "out.ap")[-1]["full_refresh"] is True
    # --full-refresh takes the SELECT's columns, whatever on_schema_change says (default: fail)
    (tmp_path / "models" / "out" / "ap.sql").write_text(AP.replace("SELECT id, v, ts", "SELECT id, ts, 'x' AS w"))
    (res,) = run_project(tmp_path, now=NOW).results
    assert res.status == "failed" and "differ" in (res.error or "")
    (res,) = run_project(tmp_path, now=NOW, full_refresh=True).results
    assert res.status == "success" and res.rows_inserted == 4, res.error
    assert sorted(fields(lake, "out.ap")) == [("id", "int"), ("ts", "timestamptz"), ("w", "string")]
    assert sorted((r["id"], r["w"]) for r in rows_of(lake, "out.ap")) == [(i, "x") for i in range(4)]


def test_materialize_an_arrow_table_through_the_rest_catalog(tmp_path: Path, served: str) -> None:
    import lakewrap

    project(tmp_path, served, {})
    data = pa.Table.from_pylist([{"id": i, "v": i * 10, "ts": datetime(2024, 1, 2, 3, tzinfo=UTC)} for i in range(5)],
                                schema=SCHEMA)
    res = lakewrap.materialize(data, lake=tmp_path, target="out.m", strategy="merge", unique_key="id",
                               run_id="api-1")
    assert res.status == "success" and res.rows_inserted == 5, res.error
    res = lakewrap.materialize(data.slice(0, 2), lake=tmp_path, target="out.m", strategy="merge", unique_key="id",
                               run_id="api-2")
    assert (res.status, res.rows_inserted, res.rows_updated) == ("success", 0, 2), res.error
    lake = IcebergLake.open(tmp_path)
    assert sorted(r["id"] for r in rows_of(lake, "out.m")) == [0, 1, 2, 3, 4]
    assert [r["run_id"] for r in state_rows(lake, "out.m")] == ["api-1", "api-2"]


def test_a_dynamic_partition_reads_its_watermark_from_the_state_table(tmp_path: Path, served: str) -> None:
    """``partitioned dynamic``: each run takes the rows after the last recorded watermark."""
    model = ("-- materialized incremental\n-- partitioned dynamic key=ts\n-- append\n"
             "SELECT id, v, ts FROM raw.src WHERE ts > $partition_start AND ts <= $partition_end\n")
    lake = project(tmp_path, served, {"out/dyn.sql": model})
    source(lake, 2, 3)  # 2024-01-01 06:00 and 2024-01-02 06:00
    first = datetime(2024, 1, 1, 12, tzinfo=UTC)
    (res,) = run_project(tmp_path, now=first).results
    assert res.status == "success" and res.rows_inserted == 3, res.error
    (res,) = run_project(tmp_path, now=NOW).results
    assert res.status == "success" and res.rows_inserted == 3, res.error  # only day 2: no duplicates
    assert len(rows_of(lake, "out.dyn")) == 6
    assert [r["watermark"] for r in state_rows(lake, "out.dyn")] == [first, NOW]


# --- data tests: write-audit-publish inside the transaction ----------------------------------------------


def test_data_tests_audit_the_written_rows_before_commit(tmp_path: Path, served: str) -> None:
    """An ``error`` test that fails rolls the whole materialization back; a ``warn`` test reports and
    commits; the outcomes are in the state row. The tests read the target as the transaction left
    it (DuckDB reads its own uncommitted Iceberg writes): kept rows plus new rows."""
    model = ("-- materialized incremental\n-- partitioned daily key=ts\n"
             "-- test accepted_values v=0,1\n-- test relationships id -> raw.src.id\n"
             "-- test expression \"v < 5\" severity=warn\n"
             "SELECT id, v, ts FROM raw.src WHERE ts >= $partition_start AND ts < $partition_end\n")
    lake = project(tmp_path, served, {"out/di.sql": model})
    source(lake, 2, 4)
    (res,) = run_project(tmp_path, partition="2024-01-01", now=NOW).results
    assert res.status == "success" and [t["status"] for t in res.tests] == ["pass", "pass", "pass"], res.error
    (row,) = state_rows(lake, "out.di")
    assert [t["status"] for t in json.loads(row["tests"])] == ["pass", "pass", "pass"]
    source(lake, 2, 4, v=7)  # v=7: accepted_values fails (error), the expression warns
    before = catalog_state(tmp_path)
    (res,) = run_project(tmp_path, partition="2024-01-02", now=NOW).results
    assert res.status == "failed" and "accepted_values" in (res.error or "") and "rolled back" in (res.error or "")
    assert catalog_state(tmp_path) == before and len(state_rows(lake, "out.di")) == 1
    (tmp_path / "models" / "out" / "di.sql").write_text(model.replace("v=0,1", "v=0,1,7"))
    (res,) = run_project(tmp_path, partition="2024-01-02", now=NOW).results
    assert res.status == "success" and [t["status"] for t in res.tests] == ["pass", "pass", "warn"], res.error
    assert res.warnings and "v < 5" in res.warnings[0]
    assert [t["failures"] for t in json.loads(state_rows(lake, "out.di")[-1]["tests"])] == [0, 0, 4]


def test_on_schema_change_on_the_sql_path(tmp_path: Path, served: str, journal: list[tuple[str, ...]]) -> None:
    """The shared decision (compilers.schema) inside the transaction: ``fail`` refuses and writes
    nothing; ``append_new_columns`` adds the column and ``sync_all_columns`` drops one and widens an
    int to a bigint (Iceberg's promotions), each in the one catalog commit that writes the data;
    ``ignore`` leaves a new column out."""
    lake = project(tmp_path, served, {"out/di.sql": DI})
    source(lake, 3, 2, v=4)
    assert run_project(tmp_path, partition="2024-01-01", now=NOW).ok
    model = tmp_path / "models" / "out" / "di.sql"

    def run(mode: str | None, select: str, day: str) -> Any:
        header = f"-- on_schema_change {mode}\n" if mode else ""
        model.write_text(header + DI.replace("SELECT id, v, ts", select))
        del journal[:]
        (res,) = run_project(tmp_path, partition=day, now=NOW).results
        return res

    before = catalog_state(tmp_path)
    res = run(None, "SELECT id, v, ts, 1 AS w", "2024-01-02")
    assert res.status == "failed" and "differ from table out.di" in (res.error or ""), res.error
    assert catalog_state(tmp_path) == before
    res = run("append_new_columns", "SELECT id, v, ts, 1 AS w", "2024-01-02")
    assert res.status == "success", res.error
    assert [" ".join(c.split()) for c in res.schema_changes] == ['ALTER TABLE "ice"."out"."di" ADD COLUMN "w" INT']
    assert journal == [("lakewrap.out__di", "out.di")]  # the ALTER commits with the data
    assert sorted((r["ts"].day, r["w"]) for r in rows_of(lake, "out.di")) == [(1, None)] * 2 + [(2, 1)] * 2
    res = run("ignore", "SELECT id, v, ts, 1 AS w, 2 AS z", "2024-01-02")
    assert res.status == "success" and "z" not in [f.name for f in lake.load("out.di").schema().fields], res.error
    res = run("sync_all_columns", "SELECT id, CAST(v AS BIGINT) AS v, ts", "2024-01-03")
    assert res.status == "success", res.error
    fields = {f.name: str(f.field_type) for f in lake.load("out.di").schema().fields}
    assert fields == {"id": "int", "v": "long", "ts": "timestamptz"}
    assert sorted((r["ts"].day, r["v"]) for r in rows_of(lake, "out.di")) == [(d, 4) for d in (1, 1, 2, 2, 3, 3)]


# --- partitioned tables -----------------------------------------------------------------------------

MGP = ("-- materialized incremental\n-- unique_key id\n-- partitioned daily key=ts\n"
       "SELECT id, v, ts FROM raw.src WHERE ts >= $partition_start AND ts < $partition_end\n")


def files_by_path(lake: IcebergLake, name: str) -> dict[str, Any]:
    """The table's live data and delete files, by path, with their partition values (pyiceberg)."""
    return {f["file_path"]: f["partition"] for f in lake.load(name).inspect.files().to_pylist()}  # type: ignore[union-attr]


@pytest.mark.parametrize("model", [DI, MGP], ids=["delete+insert", "merge"])
def test_a_partitioned_model_creates_its_partition_spec_and_replaces_one_partition(
        model: str, tmp_path: Path, served: str) -> None:
    from datetime import date

    lake = project(tmp_path, served, {"out/p.sql": model})
    source(lake, 3, 4)
    for day in ("2024-01-01", "2024-01-02", "2024-01-03"):
        (res,) = run_project(tmp_path, partition=day, now=NOW).results
        assert res.status == "success", res.error
    table = lake.load("out.p")
    assert table is not None
    (field,) = table.spec().fields
    assert (str(field.transform), table.schema().find_field(field.source_id).name) == ("day", "ts")
    assert {tuple(p.values()) for p in files_by_path(lake, "out.p").values()} == {
        (date(2024, 1, d),) for d in (1, 2, 3)}
    # the middle day again, with new values: only that partition gets files
    before = files_by_path(lake, "out.p")
    source(lake, 3, 4, v=7)
    (res,) = run_project(tmp_path, partition="2024-01-02", now=NOW).results
    assert res.status == "success", res.error
    added = {p: v for p, v in files_by_path(lake, "out.p").items() if p not in before}
    assert added and {tuple(v.values()) for v in added.values()} == {(date(2024, 1, 2),)}
    source_rows = lake.load("raw.src").scan().to_arrow().to_pylist()  # type: ignore[union-attr]
    want = sorted((r["id"], 7 if r["ts"].day == 2 else 0) for r in source_rows)
    assert sorted((r["id"], r["v"]) for r in rows_of(lake, "out.p")) == want


def test_a_rebuild_that_drops_the_last_added_column_leaves_the_table_alterable(tmp_path: Path, served: str) -> None:
    """DuckDB 1.5.5 gives a new schema the id current + 1. A drop that brings the table back to an
    earlier schema makes that schema current again (its id reused), and every later ALTER by DuckDB
    would then fail ("Attempted to add schema with id n, but this already exists"): the rebuild
    renews a column instead, so the table never returns to an earlier schema."""
    lake = project(tmp_path, served, {"out/tb.sql": TB})
    source(lake, 1, 3)
    model = tmp_path / "models" / "out" / "tb.sql"
    for select in ("SELECT id, v, ts", "SELECT id, v, ts, 1 AS w", "SELECT id, v, ts", "SELECT id, v, ts, 'x' AS z",
                   "SELECT id, ts"):
        model.write_text(TB.replace("SELECT id, v, ts", select))
        (res,) = run_project(tmp_path, now=NOW).results
        assert res.status == "success", res.error
        table = lake.load("out.tb")
        assert table is not None
        assert table.metadata.current_schema_id == max(s.schema_id for s in table.metadata.schemas)
        names = [c.strip().split(" AS ")[-1] for c in select.removeprefix("SELECT ").split(",")]
        assert sorted(f.name for f in table.schema().fields) == sorted(names)
        assert sorted(r["id"] for r in rows_of(lake, "out.tb")) == [0, 1, 2]


def test_a_table_whose_current_schema_is_an_earlier_one_fails_with_an_explanation(tmp_path: Path,
                                                                                  served: str) -> None:
    from pyiceberg.types import StringType

    lake = project(tmp_path, served, {"out/tb.sql": TB})
    source(lake, 1, 3)
    assert run_project(tmp_path, now=NOW).ok
    table = lake.load("out.tb")
    assert table is not None
    with table.update_schema() as update:  # another client adds a column, then drops it again:
        update.add_column("tmp", StringType())
    with lake.load("out.tb").update_schema() as update:  # type: ignore[union-attr]
        update.delete_column("tmp")
    metadata = lake.load("out.tb").metadata  # type: ignore[union-attr]
    assert metadata.current_schema_id < max(s.schema_id for s in metadata.schemas)  # the earlier schema, reused
    (tmp_path / "models" / "out" / "tb.sql").write_text(TB.replace("SELECT id, v, ts", "SELECT id, v, ts, 1 AS w"))
    before = catalog_state(tmp_path)
    (res,) = run_project(tmp_path, now=NOW).results
    assert res.status == "failed" and "DuckDB 1.5.5 cannot change the columns of out.tb" in (res.error or "")
    assert "pyiceberg" in (res.error or "") and catalog_state(tmp_path) == before


def test_a_rebuild_cannot_retype_a_partition_source_and_writes_nothing(tmp_path: Path, served: str) -> None:
    lake = project(tmp_path, served, {"out/p.sql": DI})
    source(lake, 1, 3)
    assert run_project(tmp_path, partition="2024-01-01", now=NOW).ok
    retyped = DI.replace("SELECT id, v, ts", "SELECT id, v, CAST(ts AS DATE) AS ts")
    (tmp_path / "models" / "out" / "p.sql").write_text(retyped)
    before = catalog_state(tmp_path)
    (res,) = run_project(tmp_path, partition="2024-01-01", now=NOW, full_refresh=True).results
    assert res.status == "failed" and "referenced by the current partition spec" in (res.error or ""), res.error
    assert catalog_state(tmp_path) == before and len(rows_of(lake, "out.p")) == 3


# --- the table's write modes ---------------------------------------------------------------------------


def delete_files(table: Any) -> int:
    """The delete files the table's current snapshot references, read from its manifests."""
    from pyiceberg.manifest import ManifestContent

    snap = table.current_snapshot()
    return sum(len(m.fetch_manifest_entry(table.io)) for m in snap.manifests(table.io)
               if m.content == ManifestContent.DELETES) if snap is not None else 0


@pytest.mark.parametrize(("model", "key", "partition"), [
    (MG, "write.merge.mode", None),
    (DI, "write.delete.mode", "2024-01-01"),
], ids=["merge", "delete+insert"])
def test_a_copy_on_write_table_is_refused_instead_of_getting_delete_files(
        model: str, key: str, partition: str | None, tmp_path: Path, served: str) -> None:
    lake = project(tmp_path, served, {"out/m.sql": model})
    source(lake, 2, 5)
    assert run_project(tmp_path, partition=partition, now=NOW).ok
    source(lake, 2, 5, v=1)
    # without the property, DuckDB writes the change merge-on-read: delete files appear
    assert run_project(tmp_path, partition=partition, now=NOW).ok
    assert delete_files(lake.load("out.m")) > 0
    with lake.load("out.m").transaction() as tx:
        tx.set_properties({key: "copy-on-write"})
    before = catalog_state(tmp_path)
    table_before = lake.load("out.m")
    rows_before, deletes_before = rows_of(lake, "out.m"), delete_files(table_before)
    source(lake, 2, 5, v=2)
    report = run_project(tmp_path, partition=partition, now=NOW, run_id="run-cow")
    (res,) = report.results
    assert res.status == "failed" and res.attempts == 1
    assert f"the Iceberg table out.m has {key} = copy-on-write" in (res.error or ""), res.error
    assert f"set the table's {key} to merge-on-read" in (res.error or "")
    # nothing was written: no snapshot, no delete file, no state row
    assert lake.load("out.m").current_snapshot().snapshot_id == table_before.current_snapshot().snapshot_id
    assert delete_files(lake.load("out.m")) == deletes_before
    assert rows_of(lake, "out.m") == rows_before
    assert "run-cow" not in {r["run_id"] for r in state_rows(lake, "out.m")}
    assert [s for s in catalog_state(tmp_path) if s[0] != "raw.src"] == [s for s in before if s[0] != "raw.src"]
    # the hint works: merge-on-read again, the run writes
    with lake.load("out.m").transaction() as tx:
        tx.set_properties({key: "merge-on-read"})
    assert run_project(tmp_path, partition=partition, now=NOW).ok
    assert {r["v"] for r in rows_of(lake, "out.m") if partition is None or r["ts"].date().isoformat() == partition} \
        == {2}
