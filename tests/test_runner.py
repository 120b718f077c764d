"""The project runner (issue 5) on real DuckLakes: the run log, parallel DAG runs, per-model retries,
downstream skips, --fail-fast, grain checks, backfill, resume after kill -9, cancellation by a real
signal, and the process and Dask executors.

Expected table contents come from ``lakeproject.Expected`` (plain Python, independent of lakewrap)
or from a serial run of the same command in a fresh lake. The one test double is the
:class:`FaultInjector` of ``test_reliability`` (a real DuckDB connection that raises instead of
running one chosen statement), used where a conflict must happen on cue.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lakeproject import QUERIES, Expected, actual_tables, cli, open_lake, write_project
from lakewrap.errors import ProjectError
from lakewrap.execute.executor import Result
from lakewrap.runner import run_project
from lakewrap.scheduler import resume
from lakewrap.workers import Task, ThreadRunner
from servers import S3, Postgres, moto_s3, postgres  # noqa: F401  (fixtures)
from test_reliability import FaultInjector, conflicts_at_commit

NOW = "2024-01-05T00:00:00+00:00"
DAYS = ["2024-01-01", "2024-01-02", "2024-01-03"]


def lakewrap_cmd(*args: str) -> list[str]:
    return [sys.executable, "-c", "from lakewrap.cli import main; main(prog_name='lakewrap')", *args]


def query(root: Path, sql: str, params: dict[str, Any] | None = None) -> list[tuple[Any, ...]]:
    con = open_lake(root)
    try:
        cursor = con.execute(sql, params) if params else con.execute(sql)
        return [tuple(r) for r in cursor.fetchall()]
    finally:
        con.close()


def write_models(root: Path, models: dict[str, str], toml: str | None = None) -> Path:
    for rel, text in models.items():
        path = root / "models" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    if toml is not None:
        (root / "lakewrap.toml").write_text(toml)
    return root


def seeded(root: Path, toml: str | None = None) -> Path:
    write_project(root, 1, toml=toml)
    code, _, err = cli("seed", "--project", str(root))
    assert code == 0, err
    return root


def lake_digest(root: Path, schemas: tuple[str, ...] = ("sales", "marts")) -> dict[str, str]:
    """sha256 of every table's sorted rows, by table (lakewrap's own schema left out)."""
    con = open_lake(root)
    try:
        tables = con.execute("SELECT table_schema, table_name FROM information_schema.tables "
                             "WHERE table_catalog = 'lake' AND table_type = 'BASE TABLE' ORDER BY ALL").fetchall()
        out = {}
        for schema, name in tables:
            if schema in schemas:
                rows = con.execute(f'SELECT * FROM "{schema}"."{name}" ORDER BY ALL').fetchall()
                out[f"{schema}.{name}"] = hashlib.sha256(repr(rows).encode()).hexdigest()
        return out
    finally:
        con.close()


# --- 1. the run log -------------------------------------------------------------------------------

FAILING = {
    "main/good.sql": "-- materialized table\nSELECT 1 AS x\n",
    "main/bad.sql": "-- materialized table\nSELECT x FROM raw.missing_table\n",
    "main/after_bad.sql": "-- materialized table\nSELECT count(*) AS n FROM main.bad\n",
}


def test_the_run_log_records_runs_steps_attempts_and_lines_without_a_snapshot(tmp_path: Path) -> None:
    root = write_models(tmp_path / "project", FAILING)
    report = run_project(root, workers=2)
    by = {r.target: r for r in report.results}
    assert (by["main.good"].status, by["main.bad"].status, by["main.after_bad"].status) == (
        "success", "failed", "skipped")
    assert by["main.after_bad"].error == "an upstream model failed in this run: main.bad"
    assert report.status == "failed"

    runs = query(root, "SELECT run_id, command, status, steps, succeeded, failed, skipped, cancelled, resumable, "
                       "executor, workers FROM lakewrap_runs")
    assert runs == [(report.run_id, "run", "failed", 3, 1, 1, 1, 0, True, "thread", 2)]
    steps = query(root, "SELECT target, status, attempts, error_class, snapshot_id FROM lakewrap_steps "
                        "ORDER BY target")
    assert steps == [("main.after_bad", "skipped", 0, None, None),
                     ("main.bad", "failed", 1, "CatalogException", None),
                     ("main.good", "success", 1, None, by["main.good"].snapshot_id)]
    attempts = query(root, "SELECT target, attempt, outcome, error_class FROM lakewrap_attempts ORDER BY target")
    assert attempts == [("main.bad", 1, "failed", "CatalogException"), ("main.good", 1, "committed", None)]
    (error,) = query(root, "SELECT error FROM lakewrap_attempts WHERE outcome = 'failed'")
    assert "raw.missing_table" in error[0] and "does not exist" in error[0]
    levels = [r[0] for r in query(root, "SELECT level FROM lakewrap_log ORDER BY logged_at")]
    assert levels[0] == "info" and "error" in levels

    # the run log wrote no DuckLake snapshot: every new snapshot is the good model's (or a fence creation)
    snaps = query(root, "SELECT snapshot_id, author FROM lake.snapshots() WHERE snapshot_id > 1")
    authored = [s for s, author in snaps if author is not None]
    assert authored == [by["main.good"].snapshot_id]

    # run_results.json holds the same run, and `lakewrap query` reads the log by its short names
    results = json.loads((root / "target" / "run_results.json").read_text())
    assert (results["run_id"], results["status"], results["counts"]["failed"]) == (report.run_id, "failed", 1)
    code, out, err = cli("query", "SELECT status, failed FROM lakewrap_runs", "--project", str(root),
                         "--format", "json")
    assert code == 0 and json.loads(out) == [{"status": "failed", "failed": 1}], err


def test_a_run_log_row_can_never_join_a_materialization_transaction(tmp_path: Path) -> None:
    """The structural guarantee behind the run log's place: DuckDB refuses one transaction that
    writes both the lake and its catalog database (where the run log lives)."""
    root = write_models(tmp_path / "project", {"main/good.sql": FAILING["main/good.sql"]})
    assert run_project(root).ok
    from lakewrap.execute.lake import Lake

    lake = Lake.open(root)
    con = lake.connect()
    try:
        con.execute("BEGIN TRANSACTION")
        con.execute("INSERT INTO main.good VALUES (2)")
        with pytest.raises(Exception, match="single transaction can only write to a single attached database"):
            con.execute("INSERT INTO __ducklake_metadata_lake.lakewrap_log (run_id) VALUES ('x')")
        con.execute("ROLLBACK")
    finally:
        lake.close(con)


# --- 2. parallel runs ----------------------------------------------------------------------------------


def test_a_parallel_run_equals_the_expected_tables(tmp_path: Path) -> None:
    """Three models over three days with four threads: the tables equal the plain-Python
    reference, each success is one snapshot, and every step of daily_revenue committed after the
    same day's step of orders (its upstream), or in the same group commit."""
    root = seeded(tmp_path / "project")
    report = run_project(root, start=DAYS[0], end=DAYS[-1], now=_now(), workers=4)
    assert report.ok, [r.error for r in report.results]
    expected = Expected.empty()
    expected.run(1, DAYS, _now())
    assert actual_tables(root) == expected.tables()
    snap = {(r.target, r.partition): r.snapshot_id for r in report.results}
    group = {(r.target, r.partition): r.group for r in report.results}
    for day in DAYS:
        up, down = ("sales.orders", day), ("sales.daily_revenue", day)
        assert snap[up] < snap[down] or (  # type: ignore[operator]
            snap[up] == snap[down] and group[up] is not None and group[up] == group[down])
    # one snapshot per commit: a step alone, a group commit or a range batch (their members share one)
    assert len(set(snap.values())) == len({r.group or (r.target, tuple(r.batch) or r.partition)
                                           for r in report.results})


def _now() -> Any:
    from datetime import datetime

    return datetime.fromisoformat(NOW)


class Recorder:
    """A callable executor (the Python API's pluggable executor) that records when each step ran."""

    def __init__(self, seconds: float = 0.15) -> None:
        self.seconds = seconds
        self.spans: list[tuple[str, str | None, float, float]] = []
        self.lock = threading.Lock()
        self.fail: set[str] = set()

    def __call__(self, task: Task) -> Result:
        started = time.monotonic()
        time.sleep(self.seconds)
        with self.lock:
            self.spans.append((task.target, task.partition, started, time.monotonic()))
        status = "failed" if task.target in self.fail else "success"
        return Result(model=task.model, target=task.target, partition=task.partition, strategy=task.strategy,
                      status=status, attempts=1, error="boom" if status == "failed" else None)


DIAMOND = {
    "main/a.sql": "-- materialized table\nSELECT 1 AS x\n",
    "main/b.sql": "-- materialized table\nSELECT x FROM main.a\n",
    "main/c.sql": "-- materialized table\nSELECT x FROM main.a\n",
    "main/d.sql": "-- materialized table\nSELECT * FROM main.b, main.c\n",
    "main/e.sql": "-- materialized table\nSELECT 2 AS y\n",
}


def overlaps(spans: list[tuple[str, str | None, float, float]], a: str, b: str) -> bool:
    (sa, ea), (sb, eb) = (next((s, e) for t, _, s, e in spans if t == name) for name in (a, b))
    return sa < eb and sb < ea


def test_independent_models_run_in_parallel_and_dependents_wait(tmp_path: Path) -> None:
    root = write_models(tmp_path / "project", DIAMOND)
    rec = Recorder()
    report = run_project(root, workers=3, executor=rec)
    assert report.ok and len(report.results) == 5
    span = {t: (s, e) for t, _, s, e in rec.spans}
    assert span["main.a"][1] <= span["main.b"][0] and span["main.a"][1] <= span["main.c"][0]
    assert max(span["main.b"][1], span["main.c"][1]) <= span["main.d"][0]
    assert overlaps(rec.spans, "main.b", "main.c")  # independent: at the same time
    assert overlaps(rec.spans, "main.a", "main.e")


def test_writers_to_one_table_are_serialized_and_downstream_of_a_failure_is_skipped(tmp_path: Path) -> None:
    """Partitions of one model never overlap (one writer per table) while other models' do; a failed
    partition skips only the same partition downstream."""
    write_project(tmp_path / "project")
    root = tmp_path / "project"
    rec = Recorder(0.05)
    rec.fail = set()
    report = run_project(root, start=DAYS[0], end=DAYS[-1], now=_now(), workers=3, executor=rec, batch_size=1)
    assert report.ok
    for target in ("sales.orders", "sales.daily_revenue"):
        mine = sorted((s, e, p) for t, p, s, e in rec.spans if t == target)
        assert [p for _, _, p in mine] == DAYS  # in partition order
        assert all(mine[i][1] <= mine[i + 1][0] for i in range(len(mine) - 1))  # never two at once

    class FailOneDay(Recorder):
        def __call__(self, task: Task) -> Result:
            result = super().__call__(task)
            if (task.target, task.partition) == ("sales.orders", DAYS[1]):
                result.status, result.error = "failed", "boom"
            return result

    report = run_project(root, start=DAYS[0], end=DAYS[-1], now=_now(), workers=3, executor=FailOneDay(0.01),
                         batch_size=1)
    status = {(r.target, r.partition): r.status for r in report.results}
    assert status[("sales.orders", DAYS[1])] == "failed"
    assert status[("sales.daily_revenue", DAYS[1])] == "skipped"
    assert status[("sales.daily_revenue", DAYS[0])] == status[("sales.daily_revenue", DAYS[2])] == "success"
    assert status[("marts.customer_history", None)] == "success"


def test_fail_fast_starts_nothing_after_the_first_failure(tmp_path: Path) -> None:
    models = {"main/a_fails.sql": "-- materialized table\nSELECT 1 AS x\n",
              "main/b_later.sql": "-- materialized table\nSELECT 2 AS x\n",
              "main/c_later.sql": "-- materialized table\nSELECT 3 AS x\n"}
    root = write_models(tmp_path / "project", models)
    rec = Recorder(0.01)
    rec.fail = {"main.a_fails"}
    report = run_project(root, workers=1, executor=rec, fail_fast=True)
    assert [(r.target, r.status) for r in report.results] == [
        ("main.a_fails", "failed"), ("main.b_later", "skipped"), ("main.c_later", "skipped")]
    assert report.results[1].error == "not run: --fail-fast stopped the run"
    assert [t for t, *_ in rec.spans] == ["main.a_fails"]
    rec.spans.clear()
    report = run_project(root, workers=1, executor=rec)  # without it, the others run
    assert sorted(t for t, *_ in rec.spans) == ["main.a_fails", "main.b_later", "main.c_later"]


def test_a_partition_grain_mismatch_is_refused_before_anything_runs(tmp_path: Path) -> None:
    models = {
        "main/days.sql": "-- materialized incremental\n-- partitioned daily key=d start=2024-01-01\n"
                         "SELECT CAST($partition_start AS TIMESTAMP) AS d\n",
        "main/months.sql": "-- materialized incremental\n-- partitioned monthly key=d start=2024-01\n"
                           "SELECT d FROM main.days WHERE d >= $partition_start AND d < $partition_end\n",
    }
    root = write_models(tmp_path / "project", models)
    code, _, err = cli("run", "--project", str(root))
    assert code == 1
    assert "models/main/months.sql: model `main.months` is partitioned monthly (UTC) but reads `main.days`" in err
    assert "hint: give both models the same grain" in err
    assert not (root / ".lakewrap").exists()  # nothing was written, not even a catalog
    with pytest.raises(ProjectError):
        run_project(root, ["days", "months"])
    assert run_project(root, ["months"], partition="2024-01", workers=1, executor=Recorder(0)).ok  # alone: fine


# --- 3. retries per model ----------------------------------------------------------------------------

EVENTS = ("-- materialized incremental\n-- partitioned daily key=day start=2024-01-01\n{retry}"
          "SELECT day, id FROM raw.src WHERE day >= $partition_start AND day < $partition_end\n")


class InjectingRunner(ThreadRunner):
    """The real thread runner whose connections conflict at COMMIT ``times`` times (FaultInjector)."""

    def __init__(self, times: int, text: str = "Transaction conflict - injected") -> None:
        super().__init__(1)
        self.times, self.text = times, text

    def _con(self) -> Any:
        con = super()._con()
        return FaultInjector(con, conflicts_at_commit(self.times, self.text))


@pytest.fixture
def events_project(tmp_path: Path) -> Iterator[Path]:
    root = write_models(tmp_path / "project", {
        "main/retry_two.sql": EVENTS.format(retry="-- retry 2\n"),
        "main/project_default.sql": EVENTS.format(retry=""),
        "main/unbound.sql": EVENTS.format(retry="-- retry 5\n").replace("SELECT day, id", "SELECT day, nope"),
    }, toml="[run]\nretries = 4\n")
    con = open_lake_rw(root)
    con.execute("CREATE SCHEMA raw")
    con.execute("CREATE TABLE raw.src AS SELECT TIMESTAMP '2024-01-02' + to_minutes(i) AS day, i AS id "
                "FROM range(20) AS r(i)")
    con.close()
    yield root


def open_lake_rw(root: Path) -> Any:
    from lakewrap.execute.lake import Lake

    return Lake.open(root).connect()


def test_retries_follow_the_model_annotation_and_the_project_default(events_project: Path) -> None:
    root = events_project
    # `-- retry 2`: 3 attempts, then the conflict is the step's failure
    report = run_project(root, ["retry_two"], partition="2024-01-02", executor=InjectingRunner(5))
    (r,) = report.results
    assert (r.status, r.attempts, r.error_class) == ("failed", 3, "RetryableError")
    rows = query(root, "SELECT attempt, outcome, error_class FROM lakewrap_attempts WHERE run_id = $r "
                       "ORDER BY attempt", {"r": report.run_id})
    assert rows == [(1, "retried", "RetryableError"), (2, "retried", "RetryableError"),
                    (3, "failed", "RetryableError")]
    assert query(root, "SELECT count(*) FROM lakewrap.materializations WHERE target = 'main.retry_two'") == [(0,)]
    # no annotation: [run] retries = 4 in lakewrap.toml, so 2 conflicts are absorbed
    report = run_project(root, ["project_default"], partition="2024-01-02", executor=InjectingRunner(2))
    (r,) = report.results
    assert (r.status, r.attempts) == ("success", 3)
    rows = query(root, "SELECT attempt, outcome FROM lakewrap_attempts WHERE run_id = $r ORDER BY attempt",
                 {"r": report.run_id})
    assert rows == [(1, "retried"), (2, "retried"), (3, "committed")]
    # 5 conflicts exceed the project default of 4 retries
    report = run_project(root, ["project_default"], partition="2024-01-02", executor=InjectingRunner(5))
    assert (report.results[0].status, report.results[0].attempts) == ("failed", 5)


def test_a_non_retryable_error_is_never_retried(events_project: Path) -> None:
    report = run_project(events_project, ["unbound"], partition="2024-01-02", workers=1)
    (r,) = report.results
    assert (r.status, r.attempts, r.error_class) == ("failed", 1, "BinderException")
    assert query(events_project, "SELECT count(*) FROM lakewrap_attempts WHERE run_id = $r",
                 {"r": report.run_id}) == [(1,)]


# --- 4. backfill -------------------------------------------------------------------------------------


def test_backfill_then_missing_only_then_a_changed_model(tmp_path: Path) -> None:
    root = seeded(tmp_path / "project")
    args = ("backfill", "--project", str(root), "--start", DAYS[0], "--end", DAYS[-1], "--now", NOW)
    code, out, err = cli(*args, "sales.orders+", "--workers", "2")
    assert code == 0, err
    assert "6 steps to run" in err and "[6/6]" in err and "eta" in err  # plain progress: not a terminal
    assert "succeeded" in out and " 0 failed" in out
    expected = Expected.empty()
    expected.run(1, DAYS, _now())
    for table in ("sales.orders", "sales.daily_revenue"):
        assert query(root, QUERIES[table]) == expected.tables()[table]

    code, out, err = cli(*args, "sales.orders+", "--missing-only", "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["results"] == [] and len(doc["not_rerun"]) == 6
    states = query(root, "SELECT count(*) FROM lakewrap.materializations WHERE target LIKE 'sales.%'")
    assert states == [(6,)]

    # a changed model has a new sql_sha256: --missing-only runs its partitions again, not the others
    path = root / "models" / "sales" / "daily_revenue.sql"
    path.write_text(path.read_text().replace("GROUP BY ALL", "AND 1 = 1 GROUP BY ALL"))
    code, out, err = cli(*args, "sales.orders+", "--missing-only", "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert sorted((r["target"], r["partition"]) for r in doc["results"]) == [
        ("sales.daily_revenue", d) for d in DAYS]


def test_backfill_needs_a_range_and_refuses_a_bad_one(tmp_path: Path) -> None:
    root = seeded(tmp_path / "project")
    code, _, err = cli("backfill", "--project", str(root), "--start", DAYS[0])
    assert code == 2 and "--end" in err
    code, _, err = cli("backfill", "--project", str(root), "--start", "2024-01-05", "--end", "2024-01-01")
    assert code == 2
    assert query(root, "SELECT count(*) FROM lakewrap.materializations WHERE target LIKE 'sales.%'") == [(0,)]


# --- 5. resume after kill -9, and cancellation by a signal --------------------------------------------

SLOWISH = ("-- materialized incremental\n-- partitioned daily key=day start=2024-01-01\n"
           "SELECT day, id, (SELECT sum(hash(i)) FROM range(3000000) AS t(i)) AS h FROM raw.src "
           "WHERE day >= $partition_start AND day < $partition_end\n")


def src_project(root: Path) -> Path:
    write_models(root, {"main/events.sql": SLOWISH,
                        "main/events_count.sql": "-- materialized incremental\n"
                        "-- partitioned daily key=day start=2024-01-01\n"
                        "SELECT day, count(*) AS n FROM main.events WHERE day >= $partition_start "
                        "AND day < $partition_end GROUP BY ALL\n"})
    con = open_lake_rw(root)
    con.execute("CREATE SCHEMA raw")
    con.execute("CREATE TABLE raw.src AS SELECT TIMESTAMP '2024-01-01' + to_hours(i) AS day, i AS id "
                "FROM range(24 * 20) AS r(i)")
    con.close()
    return root


def committed_outcomes(root: Path) -> int:
    return sum(p.read_text().count("-- outcome: success") for p in (root / "target" / "run").glob("*/*.sql"))


@pytest.mark.slow
def test_a_backfill_killed_mid_way_then_resumed_equals_an_uninterrupted_one(tmp_path: Path) -> None:
    root = src_project(tmp_path / "killed")
    proc = subprocess.Popen(lakewrap_cmd("backfill", "--project", str(root), "--start", "2024-01-01",
                                         "--end", "2024-01-20", "--now", NOW, "--workers", "2",
                                         "--batch-size", "1"),  # 40 steps, each its own commit
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while committed_outcomes(root) < 8 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    (run_dir,) = (root / "target" / "run").iterdir()
    run_id = run_dir.name
    before = query(root, "SELECT count(*) FROM lakewrap.materializations WHERE run_id = $r", {"r": run_id})[0][0]
    assert 8 <= before < 40
    assert query(root, "SELECT status FROM lakewrap_runs WHERE run_id = $r", {"r": run_id}) == [("running",)]

    code, out, err = cli("resume", run_id, "--project", str(root), "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert len(doc["not_rerun"]) == before and len(doc["results"]) == 40 - before
    assert query(root, "SELECT status FROM lakewrap_runs WHERE run_id = $r", {"r": run_id}) == [("success",)]
    # exactly one materialization per (target, partition): nothing committed was redone
    assert query(root, "SELECT count(*), count(DISTINCT (target, partition_value)) FROM lakewrap.materializations "
                       "WHERE run_id = $r", {"r": run_id}) == [(40, 40)]

    reference = src_project(tmp_path / "reference")
    serial = run_project(reference, start="2024-01-01", end="2024-01-20", now=_now(), workers=1)
    assert serial.ok
    assert lake_digest(root, ("main",)) == lake_digest(reference, ("main",))


SLOW_TABLE = "-- materialized table\nSELECT sum(hash(i)) AS h FROM range(2000000000000) AS t(i)\n"


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_interrupts_rolls_back_and_the_run_resumes(tmp_path: Path, sig: signal.Signals) -> None:
    root = write_models(tmp_path / "project", {"main/fast.sql": "-- materialized table\nSELECT 1 AS x\n",
                                                "main/slow.sql": SLOW_TABLE,
                                                "main/after_slow.sql": "-- materialized table\n"
                                                "SELECT h FROM main.slow\n"})
    proc = subprocess.Popen(lakewrap_cmd("run", "--project", str(root), "--workers", "2", "--format", "json"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    log = None
    while time.monotonic() < deadline and proc.poll() is None:
        logs = list((root / "target" / "run").glob("*/main.slow.sql"))
        if logs and "sum(hash" in logs[0].read_text().lower():
            log = logs[0]
            break
        time.sleep(0.05)
    assert log is not None, proc.communicate()
    time.sleep(0.5)  # well inside the slow statement
    started = time.monotonic()
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    elapsed = time.monotonic() - started
    assert proc.returncode == 1, err
    assert elapsed < 15
    doc = json.loads(out)
    status = {r["target"]: r["status"] for r in doc["results"]}
    assert doc["status"] == "cancelled"
    assert status["main.slow"] == "cancelled" and status["main.after_slow"] in ("cancelled", "skipped")
    assert "-- outcome: cancelled" in log.read_text() or "ROLLBACK" in log.read_text()
    run_id = doc["run_id"]
    assert query(root, "SELECT status, resumable FROM lakewrap_runs WHERE run_id = $r",
                 {"r": run_id}) == [("cancelled", True)]
    assert query(root, "SELECT target FROM lakewrap.materializations WHERE target = 'main.slow'") == []
    assert query(root, "SELECT outcome, error_class FROM lakewrap_attempts WHERE target = 'main.slow'") == [
        ("cancelled", "InterruptException")]

    (root / "models" / "main" / "slow.sql").write_text(SLOW_TABLE.replace("2000000000000", "1000"))
    report = resume(root, run_id, workers=2)
    assert report.ok and report.status == "success"
    # resume re-runs exactly what the lake does not hold: main.fast too when the signal came before
    # it committed (threads of one instance run one statement at a time: it may wait behind slow's)
    assert {r.target for r in report.results} == {"main.fast", "main.slow", "main.after_slow"} - {
        n["target"] for n in report.not_rerun}
    assert query(root, "SELECT count(*) FROM main.after_slow") == [(1,)]
    assert query(root, "SELECT count(*) FROM lakewrap.materializations WHERE run_id = $r AND target = 'main.fast'",
                 {"r": run_id}) == [(1,)]


def test_resume_refuses_an_unknown_or_successful_run(tmp_path: Path) -> None:
    root = write_models(tmp_path / "project", {"main/good.sql": FAILING["main/good.sql"]})
    code, _, err = cli("resume", "nope", "--project", str(root))  # no lake yet: none is created
    assert code == 2 and "the lake does not exist yet" in err and not (root / ".lakewrap").exists()
    report = run_project(root)
    code, _, err = cli("resume", "nope", "--project", str(root))
    assert code == 1 and "the lake records no run `nope`" in err
    code, _, err = cli("resume", report.run_id, "--project", str(root))
    assert code == 1 and "succeeded; there is nothing to resume" in err


# --- 6. process and Dask executors on shared catalogs --------------------------------------------------


@pytest.mark.slow
def test_the_process_executor_on_a_sqlite_catalog(tmp_path: Path) -> None:
    root = seeded(tmp_path / "project", toml='[lake]\ncatalog = "sqlite"\n')
    # per partition (batch_size=1): consecutive partitions share a group commit in one worker process
    report = run_project(root, start=DAYS[0], end=DAYS[-1], now=_now(), workers=2, executor="process", batch_size=1)
    assert report.ok, [r.error for r in report.results]
    assert {r.group for r in report.results} - {None}
    expected = Expected.empty()
    expected.run(1, DAYS, _now())
    assert actual_tables(root) == expected.tables()
    assert query(root, "SELECT executor, workers, status FROM lakewrap_runs WHERE command <> 'seed'") == [
        ("process", 2, "success")]


def test_a_duckdb_file_catalog_refuses_the_process_and_dask_executors(tmp_path: Path) -> None:
    root = seeded(tmp_path / "project")
    for kind in ("process", "dask"):
        code, _, err = cli("run", "--project", str(root), "--executor", kind)
        assert code == 1 and f"the {kind} executor needs a catalog" in err


@pytest.mark.slow
@pytest.mark.postgres
def test_dask_fan_out_on_postgres_and_s3_equals_a_serial_run(tmp_path: Path, postgres: Postgres,  # noqa: F811
                                                              moto_s3: S3, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    monkeypatch.setenv("PGPASSWORD", postgres.password)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "runner-key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "runner-secret")
    roots = {}
    for name in ("dask", "serial"):
        bucket = f"runner-{name}-{os.getpid()}"
        moto_s3.create_bucket(bucket)
        toml = (f'[lake]\ncatalog = "postgres"\ndsn = "{postgres.create_database(f"runner_{name}_{os.getpid()}")}"\n'
                f'data_path = "s3://{bucket}/warehouse/"\n\n[lake.s3]\nendpoint = "{moto_s3.endpoint}"\n'
                'url_style = "path"\nuse_ssl = false\n')
        roots[name] = seeded(tmp_path / name, toml=toml)
    started = time.perf_counter()
    report = run_project(roots["dask"], start=DAYS[0], end=DAYS[-1], now=_now(), workers=2, executor="dask",
                         batch_size=1)
    wall = time.perf_counter() - started
    assert report.ok, [r.error for r in report.results]
    assert {r.group for r in report.results} - {None}  # consecutive partitions: a group as one Dask task
    serial = run_project(roots["serial"], start=DAYS[0], end=DAYS[-1], now=_now(), workers=1)
    assert serial.ok
    print(f"\ndask LocalCluster (2 workers): {len(report.results)} steps in {wall:.1f}s")
    assert lake_digest(roots["dask"]) == lake_digest(roots["serial"])
    expected = Expected.empty()
    expected.run(1, DAYS, _now())
    assert actual_tables(roots["dask"]) == expected.tables()
    assert query(roots["dask"], "SELECT executor, status FROM lakewrap_runs WHERE command <> 'seed'") == [
        ("dask", "success")]


@pytest.mark.slow
def test_scheduling_thousands_of_steps_stays_fast(tmp_path: Path) -> None:
    """4 chained daily models over 500 days (2,000 steps) through the real scheduler and run log,
    with a no-op callable executor: the dispatch is not quadratic, every step runs once, and each
    day's steps run in model order."""
    models = {}
    for i in range(4):
        src = "raw.src" if i == 0 else f"main.m{i - 1}"
        models[f"main/m{i}.sql"] = ("-- materialized incremental\n-- partitioned daily key=d start=2020-01-01\n"
                                    f"SELECT d FROM {src} WHERE d >= $partition_start AND d < $partition_end\n")
    root = write_models(tmp_path / "project", models)
    rec = Recorder(0)
    started = time.perf_counter()
    report = run_project(root, start="2020-01-01", end="2021-05-14", workers=4, executor=rec,
                         batch_size=1)  # 2000 steps, not 68 batches
    wall = time.perf_counter() - started
    print(f"\n{len(report.results)} steps scheduled in {wall:.1f}s")
    assert report.ok and len(report.results) == 4 * 500
    assert len(rec.spans) == 2000 and len({(t, p) for t, p, *_ in rec.spans}) == 2000
    when = {(t, p): s for t, p, s, _ in rec.spans}
    for t, p, s, _ in rec.spans:
        if t != "main.m0":
            up = f"main.m{int(t[-1]) - 1}"
            assert when[(up, p)] <= s
    assert wall < 30  # measured: 1.1 s on a loaded 2-core machine


@pytest.mark.parametrize(("toml", "message"), [
    ("[run]\nretries = -1\n",
     "lakewrap.toml:2: run.retries: Input should be greater than or equal to 0"),
    ("[run]\nworkerz = 2\n", "lakewrap.toml:2: unknown key `run.workerz`"),
])
def test_a_bad_run_section_is_a_located_error_and_writes_nothing(tmp_path: Path, toml: str, message: str) -> None:
    root = write_models(tmp_path / "project", {"main/good.sql": FAILING["main/good.sql"]}, toml=toml)
    code, _, err = cli("run", "--project", str(root))
    assert code == 1 and message in " ".join(err.split())
    assert sorted(p.name for p in root.iterdir()) == ["lakewrap.toml", "models"]


@pytest.mark.slow
def test_sigterm_reaches_the_worker_processes_of_the_process_executor(tmp_path: Path) -> None:
    """SIGTERM to `lakewrap run --executor process`: the coordinator forwards it to its worker
    processes, which interrupt their statement (a thread waits for the signal, since a handler
    cannot run while DuckDB holds the main thread), roll back and report the step cancelled."""
    root = write_models(tmp_path / "project", {"main/slow.sql": SLOW_TABLE},
                        toml='[lake]\ncatalog = "sqlite"\n')
    proc = subprocess.Popen(lakewrap_cmd("run", "--project", str(root), "--executor", "process", "--workers", "2",
                                         "--format", "json"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        logs = list((root / "target" / "run").glob("*/main.slow.sql"))
        if logs and "sum(hash" in logs[0].read_text().lower():
            break
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()
    time.sleep(0.5)
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    print(f"\nprocess executor: exited {time.monotonic() - started:.1f}s after SIGTERM")
    assert proc.returncode == 1, err
    doc = json.loads(out)
    assert doc["status"] == "cancelled"
    assert [(r["target"], r["status"], r["error_class"]) for r in doc["results"]] == [
        ("main.slow", "cancelled", "InterruptException")]
    assert query(root, "SELECT status, resumable, executor FROM lakewrap_runs") == [("cancelled", True, "process")]
