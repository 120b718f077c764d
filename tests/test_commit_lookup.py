"""The commit-outcome look-ups, on small real lakes (fast: the mutation target ``commit-lookup``).

* Each substrate's ``resolve_outcome`` (DuckLake: :mod:`lakewrap.substrates.ducklake.run`; Iceberg:
  :mod:`lakewrap.substrates.iceberg.run`, over the records of :mod:`lakewrap.substrates.iceberg.state`)
  with the shared rules of :mod:`lakewrap.outcome`: a failed or cancelled step that started a
  transaction is looked up by run id, target and partition; a commit that landed turns it into the
  success the lake records (its counts, snapshot and attempt), anything else is left as reported,
  and a look-up that fails says so in a warning. The tests call it through the registered substrate
  objects, as the coordinator does.
* The Iceberg executor after a commit whose outcome is unknown (``IcebergExecutor._commit`` of
  :mod:`lakewrap.substrates.iceberg.commit`): it looks the attempt's commit id up in the table's
  history (:func:`lakewrap.substrates.iceberg.summary.committed_snapshots`), records a commit that
  landed once, retries one that did not land (``CommitStateUnknownException``, ``OSError``), and
  fails on any other error without retrying; an error after which pyiceberg guarantees nothing
  landed is not looked up.
"""

from __future__ import annotations

import contextlib
import csv
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from lakeproject import cli
from lakewrap import outcome
from lakewrap.execute.executor import Result
from lakewrap.execute.iceberg import IcebergLake
from lakewrap.execute.lake import Lake
from lakewrap.runner import run_project
from lakewrap.substrates.iceberg.commit import definitely_not_committed
from lakewrap.substrates.iceberg.state import materializations
from lakewrap.substrates.iceberg.summary import committed_snapshots
from lakewrap.substrates.registry import get

DAYS = ["2024-01-01", "2024-01-02"]
NOW = "2024-01-06T00:00:00+00:00"
MODELS = {
    "main/events.sql": "-- materialized incremental\n-- partitioned daily key=day start=2024-01-01\n"
                       "SELECT id, day, v FROM raw.src WHERE day >= $partition_start AND day < $partition_end\n",
    "main/total.sql": "-- materialized table\nSELECT count(*) AS n FROM main.events\n",
}
SRC = [(i, f"{DAYS[i % 2]} 0{i}:00:00", i) for i in range(1, 6)]  # 2 rows on day 01, 3 on day 02


def write(root: Path, models: dict[str, str], toml: str | None = None) -> Path:
    for rel, text in models.items():
        (root / "models" / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / "models" / rel).write_text(text)
    if toml is not None:
        (root / "lakewrap.toml").write_text(toml)
    return root


def resolve(lake: Lake, con: Any, run_id: str, result: Result) -> Result:
    """The coordinator's look-up on DuckLake (``con`` None: the look-up opens its own connection)."""
    return get("ducklake").resolve_outcome(lake, con, run_id, result)


def resolve_iceberg(lake: IcebergLake, run_id: str, result: Result) -> Result:
    """The coordinator's look-up on Iceberg (write path pyiceberg: it reads no connection)."""
    return get("iceberg").resolve_outcome(lake, None, run_id, result)


def failed(target: str, partition: str | None, *, status: str = "failed", attempts: int = 2) -> Result:
    return Result(model="m.sql", target=target, partition=partition, strategy="delete+insert",
                  status=status, attempts=attempts, error="connection lost\nsecond line", error_class="OSError",
                  attempt_errors=[{"attempt": 1, "error": "a"}, {"attempt": 2, "error": "b"}])  # type: ignore[arg-type]


# --- DuckLake: the substrate's resolve_outcome ----------------------------------------------------


@pytest.fixture(scope="module")
def ducklake(tmp_path_factory: pytest.TempPathFactory) -> tuple[Lake, str, dict[Any, tuple[Any, ...]]]:
    """events backfilled for day 01 only, and total: the lake, the run id and the recorded (run id,
    counts, attempt) of each step. A test opens its own connection (the look-up may open one)."""
    root = write(tmp_path_factory.mktemp("outcome") / "lake", MODELS)
    (root / "seeds" / "raw").mkdir(parents=True)
    with (root / "seeds" / "raw" / "src.csv").open("w", newline="") as f:
        csv.writer(f).writerows([("id", "day", "v"), *SRC])
    assert cli("seed", "--project", str(root))[0] == 0
    code, out, err = cli("backfill", "main.events+", "--project", str(root), "--start", DAYS[0], "--end", DAYS[0],
                         "--now", NOW)
    assert code == 0, out + err
    lake = Lake.open(root)
    with connected(lake) as con:
        rows = con.execute("SELECT target, partition_value, run_id, rows_inserted, rows_updated, rows_deleted, "
                           "attempt FROM lakewrap.materializations WHERE target IN ('main.events', 'main.total')"
                           ).fetchall()
    recorded = {(t, p): (run_id, (ins, upd, dele), attempt) for t, p, run_id, ins, upd, dele, attempt in rows}
    assert set(recorded) == {("main.events", DAYS[0]), ("main.total", None)}
    (run_id,) = {r[0] for r in recorded.values()}
    return lake, run_id, recorded


@contextmanager
def connected(lake: Lake) -> Iterator[Any]:
    con = lake.connect()
    try:
        yield con
    finally:
        lake.close(con)


def snapshot_of(con: Any, lake: Lake, run_id: str, target: str) -> int:
    # the snapshot of the step's own commit, or of the group commit it was a member of
    (snap,) = con.execute(f"SELECT max(snapshot_id) FROM {lake.alias}.snapshots() "
                          "WHERE (json_extract_string(commit_extra_info, '$.target') = ? "
                          "OR list_contains(json_extract_string(commit_extra_info, '$.members[*].target'), ?)) "
                          "AND json_extract_string(commit_extra_info, '$.run_id') = ?",
                          [target, target, run_id]).fetchone()
    return int(snap)


@pytest.mark.parametrize("own_connection", [False, True])
@pytest.mark.parametrize("status", ["failed", "cancelled"])
def test_a_step_whose_commit_landed_is_the_success_the_lake_records(ducklake: Any, status: str,
                                                                    own_connection: bool) -> None:
    lake, run_id, recorded = ducklake
    for target, partition in (("main.events", DAYS[0]), ("main.total", None)):
        _, counts, attempt = recorded[(target, partition)]
        result = failed(target, partition, status=status, attempts=3)
        if own_connection:
            got = resolve(lake, None, run_id, result)
        else:
            with connected(lake) as con:
                got = resolve(lake, con, run_id, result)
        assert got is result and got.status == "success" and got.error is None and got.error_class is None
        assert (got.rows_inserted, got.rows_updated, got.rows_deleted) == counts and counts[0] > 0
        with connected(lake) as con:
            assert got.snapshot_id == snapshot_of(con, lake, run_id, target)
        assert got.attempts == attempt == 1  # the attempt that landed, not the count the worker reported
        assert got.attempt_errors == []  # attempt 1 committed: it is no failure
        assert got.warnings == ["the step reported OSError (connection lost), but the lake holds its commit: "
                                "recorded as success"]


def test_a_landed_later_attempt_keeps_the_earlier_failures(ducklake: Any) -> None:
    result = failed("main.events", DAYS[0], attempts=3)
    result.attempt_errors.append({"attempt": 3, "error": "c"})
    result.error = None
    got = outcome.landed(result, (4, None, "2"), "17", "2")
    assert got.attempts == 2 and got.attempt_errors == [{"attempt": 1, "error": "a"}]
    assert (got.rows_inserted, got.rows_updated, got.rows_deleted, got.snapshot_id) == (4, 0, 2, 17)
    assert got.warnings == ["the step reported OSError, but the lake holds its commit: recorded as success"]
    kept = outcome.landed(failed("t", None, attempts=5), (0, 0, 0), None)
    assert kept.attempts == 5 and kept.snapshot_id is None and kept.status == "success"


def test_a_step_the_lake_does_not_hold_is_left_as_reported(ducklake: Any) -> None:
    lake, run_id, _ = ducklake
    with connected(lake) as con:
        for target, partition, run in (("main.events", DAYS[1], run_id), ("main.events", DAYS[0], "another-run"),
                                       ("main.events", None, run_id), ("main.total", DAYS[0], run_id)):
            result = failed(target, partition)
            assert resolve(lake, con, run, result).status == "failed", (target, partition, run)
            assert result.warnings == [] and result.error == "connection lost\nsecond line" and result.attempts == 2


def test_only_a_step_that_started_a_transaction_and_did_not_succeed_is_looked_up(ducklake: Any) -> None:
    lake, run_id, _ = ducklake
    with connected(lake) as con:
        never = failed("main.events", DAYS[0], attempts=0)
        assert resolve(lake, con, run_id, never).status == "failed" and never.warnings == []
        for status in ("success", "unchanged", "skipped"):
            result = failed("main.events", DAYS[0], status=status)
            assert resolve(lake, con, run_id, result) is result and result.status == status and result.warnings == []


def test_a_look_up_that_fails_leaves_the_result_and_says_so(ducklake: Any) -> None:
    lake, run_id, _ = ducklake
    closed = lake.connect()
    lake.close(closed)
    result = failed("main.events", DAYS[0])
    assert resolve(lake, closed, run_id, result).status == "failed"
    (warning,) = result.warnings
    assert warning.startswith("the lake could not be asked whether this step's commit landed: ") and "\n" not in warning
    assert len(warning) > len("the lake could not be asked whether this step's commit landed: ") + 5


def test_a_look_up_on_a_connection_without_the_lake_warns_with_the_errors_first_line(ducklake: Any) -> None:
    """DuckDB's error for a missing table runs over several lines (a hint, the statement): the
    warning holds its first line only."""
    import duckdb

    lake, run_id, _ = ducklake
    with contextlib.closing(duckdb.connect()) as plain:
        result = failed("main.events", DAYS[0])
        assert resolve(lake, plain, run_id, result).status == "failed"
    (warning,) = result.warnings
    assert "Catalog Error" in warning and "materializations" in warning and "\n" not in warning, warning


# --- Iceberg: the substrate's resolve_outcome and the executor's look-up --------------------------

UTC = timezone.utc
SCHEMA = pa.schema([("id", pa.int32()), ("v", pa.int32()), ("ts", pa.timestamp("us", tz="UTC"))])
ICEBERG = {
    "out/ap.sql": "-- materialized incremental\n-- append\nSELECT id, v, ts FROM raw.src\n",
    "out/di.sql": "-- materialized incremental\n-- partitioned daily key=ts\n"
                  "SELECT id, v, ts FROM raw.src WHERE ts >= $partition_start AND ts < $partition_end\n",
}
INOW = datetime(2024, 1, 3, tzinfo=UTC)


@pytest.fixture
def iceberg(tmp_path: Path) -> IcebergLake:
    root = write(tmp_path / "ice", ICEBERG, '[lake]\nsubstrate = "iceberg"\n')
    lake = IcebergLake.open(root)
    lake.ensure_namespace("raw")
    rows = [{"id": i, "v": i, "ts": datetime(2024, 1, 1 + i % 2, 6, tzinfo=UTC)} for i in range(4)]
    lake.catalog().create_table(("raw", "src"), schema=SCHEMA).append(pa.Table.from_pylist(rows, schema=SCHEMA))
    return lake


def rows_of(lake: IcebergLake, name: str) -> int:
    return len(lake.load(name).scan().to_arrow())


def test_resolve_iceberg_finds_the_runs_commit_of_the_steps_partition(iceberg: IcebergLake) -> None:
    report = run_project(iceberg.root, partition="2024-01-02", now=INOW)
    assert report.ok, [r.error for r in report.results]
    by_target = {r.target: r for r in report.results}
    for target, partition in (("out.ap", None), ("out.di", "2024-01-02")):
        (m,) = materializations(iceberg.load(target))
        got = resolve_iceberg(iceberg, report.run_id, failed(target, partition, attempts=1))
        assert got.status == "success" and got.snapshot_id == m["snapshot_id"] == by_target[target].snapshot_id
        counts = (got.rows_inserted, got.rows_updated, got.rows_deleted)
        assert counts == (4 if target == "out.ap" else 2, 0, 0) == (by_target[target].rows_inserted, 0, 0)
        assert got.warnings[-1].endswith("but the lake holds its commit: recorded as success")
    for target, partition, run in (("out.di", "2024-01-01", report.run_id), ("out.di", None, report.run_id),
                                   ("out.ap", "2024-01-02", report.run_id), ("out.ap", None, "another-run"),
                                   ("out.ap", None, "20230101T000000Z-000000")):  # sorts before the run's id
        result = failed(target, partition)
        assert resolve_iceberg(iceberg, run, result).status == "failed" and result.warnings == [], (target, partition)
    assert resolve_iceberg(iceberg, report.run_id, failed("out.ap", None, attempts=0)).status == "failed"
    done = failed("out.ap", None, status="success")
    assert resolve_iceberg(iceberg, report.run_id, done) is done and done.warnings == []


def test_resolve_iceberg_says_so_when_it_cannot_look(iceberg: IcebergLake) -> None:
    """The table's metadata file is gone: loading the table fails, and the look-up says so."""
    first_run(iceberg)
    Path(iceberg.load("out.ap").metadata_location.removeprefix("file://")).unlink()
    result = failed("out.ap", None)
    assert resolve_iceberg(iceberg, "r", result).status == "failed"
    (warning,) = result.warnings
    assert warning.startswith("the lake could not be asked whether this step's commit landed: ") and "\n" not in warning


def test_resolve_iceberg_warns_with_the_first_line_of_the_error(iceberg: IcebergLake) -> None:
    """A corrupted metadata file fails the look-up with pyiceberg's many-line validation error: the
    warning holds its first line, which says what went wrong."""
    first_run(iceberg)
    Path(iceberg.load("out.ap").metadata_location.removeprefix("file://")).write_text('{"format-version": 2}')
    result = failed("out.ap", None)
    assert resolve_iceberg(iceberg, "r", result).status == "failed"
    (warning,) = result.warnings
    assert "validation error" in warning and "\n" not in warning, warning


def unknown_after(monkeypatch: pytest.MonkeyPatch, exc: Exception, *, landed: bool) -> list[int]:
    """The next commit raises ``exc`` after it landed (or without landing); later ones commit."""
    from pyiceberg.table import Transaction

    original = Transaction.commit_transaction
    calls: list[int] = []

    def flaky(self: Transaction) -> Any:
        calls.append(1)
        if len(calls) == 1:
            if landed:
                original(self)
            raise exc
        return original(self)

    monkeypatch.setattr(Transaction, "commit_transaction", flaky)
    return calls


def log_of(lake: IcebergLake, run_id: str) -> str:
    return "".join(p.read_text() for p in (lake.root / "target" / "run" / run_id).rglob("*.sql"))


def first_run(lake: IcebergLake) -> None:
    assert run_project(lake.root, ["out.ap"], now=INOW).ok  # the table exists: later commits are plain


@pytest.mark.parametrize("landed", [True, False])
@pytest.mark.parametrize("kind", ["CommitStateUnknownException", "OSError"])
def test_an_unknown_outcome_is_looked_up_and_applied_once(kind: str, landed: bool, iceberg: IcebergLake,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from pyiceberg.exceptions import CommitStateUnknownException

    first_run(iceberg)
    message = "lost the response\nthe server said: 503"
    exc = CommitStateUnknownException(message) if kind != "OSError" else ConnectionResetError(message)
    calls = unknown_after(monkeypatch, exc, landed=landed)
    report = run_project(iceberg.root, ["out.ap"], now=INOW)
    (result,) = report.results
    assert result.status == "success" and result.error is None, result.error
    assert result.attempts == (1 if landed else 2) == len(calls)
    assert rows_of(iceberg, "out.ap") == 8  # two appends of 4 rows, never a third
    assert [m["run_id"] for m in materializations(iceberg.load("out.ap"))].count(report.run_id) == 1
    assert result.rows_inserted == 4 and result.snapshot_id == iceberg.load("out.ap").current_snapshot().snapshot_id
    log = log_of(iceberg, report.run_id)
    assert f"commit outcome unknown ({type(exc).__name__}); looking up commit" in log
    assert ("found in the table's history: it landed" in log) == landed
    if not landed:  # retried as CommitUnknown, and the retry's note says so and names the error's first line
        assert [a["error_class"] for a in result.attempt_errors] == ["CommitUnknown"], result.attempt_errors
        assert ("attempt 1 had an unknown commit outcome and did not land; retrying in" in log
                and "s: CommitUnknown: models/out/ap.sql: the commit's outcome was unknown and it is not in the "
                    "table's history: lost the response\n" in log), log
        assert "conflicted" not in log, log


def test_a_look_up_that_cannot_read_the_table_counts_as_notlanded(iceberg: IcebergLake,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The commit's outcome is unknown and the catalog does not answer the look-up either: the
    attempt is taken as not landed (CommitUnknown, retried), never as committed."""
    from pyiceberg.exceptions import CommitStateUnknownException

    first_run(iceberg)
    unknown_after(monkeypatch, CommitStateUnknownException("lost the response"), landed=False)
    original = IcebergLake.load
    unreachable = [False]

    def load(self: IcebergLake, name: str) -> Any:
        if unreachable[0]:
            unreachable[0] = False
            raise ConnectionRefusedError("the catalog does not answer")
        return original(self, name)

    def note(self: Any, line: str) -> None:  # the catalog stops answering as the look-up starts
        if "looking up commit" in line:
            unreachable[0] = True
        noted(self, line)

    from lakewrap.execute.log import StatementLog

    noted = StatementLog.note
    monkeypatch.setattr(IcebergLake, "load", load)
    monkeypatch.setattr(StatementLog, "note", note)
    report = run_project(iceberg.root, ["out.ap"], now=INOW)
    (result,) = report.results
    assert result.status == "success" and result.attempts == 2, (result.status, result.error, result.warnings)
    assert rows_of(iceberg, "out.ap") == 8 and result.rows_inserted == 4
    assert "found in the table's history" not in log_of(iceberg, report.run_id)


def test_another_error_of_an_unknown_outcome_that_did_not_land_fails_without_a_retry(
        iceberg: IcebergLake, monkeypatch: pytest.MonkeyPatch) -> None:
    first_run(iceberg)
    calls = unknown_after(monkeypatch, RuntimeError("the catalog said something odd"), landed=False)
    report = run_project(iceberg.root, ["out.ap"], now=INOW)
    (result,) = report.results
    assert result.status == "failed" and "the catalog said something odd" in (result.error or "")
    assert result.error_class == "RuntimeError" and len(calls) == 1 and rows_of(iceberg, "out.ap") == 4
    assert "looking up commit" in log_of(iceberg, report.run_id)


def test_an_error_that_guarantees_nothing_landed_is_not_looked_up(iceberg: IcebergLake,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from pyiceberg.exceptions import CommitFailedException

    first_run(iceberg)
    calls = unknown_after(monkeypatch, CommitFailedException("conflict"), landed=False)
    report = run_project(iceberg.root, ["out.ap"], now=INOW)
    (result,) = report.results
    assert result.status == "success" and result.attempts == 2 == len(calls) and rows_of(iceberg, "out.ap") == 8
    log = log_of(iceberg, report.run_id)
    assert "looking up commit" not in log and "attempt 1 conflicted; retrying in" in log
    assert "s: CommitFailedException: conflict\n" in log, log  # the note names the error's class and first line
    assert [a["error_class"] for a in result.attempt_errors] == ["CommitFailedException"]


def test_which_errors_guarantee_the_commit_did_not_land() -> None:
    from pyiceberg.exceptions import (
        CommitFailedException,
        CommitStateUnknownException,
        TableAlreadyExistsError,
        ValidationException,
    )

    for exc in (CommitFailedException("x"), ValidationException("x"), TableAlreadyExistsError("x"), ValueError("x")):
        assert definitely_not_committed(exc), exc
    for exc in (CommitStateUnknownException("x"), OSError("x"), RuntimeError("x"), KeyError("x")):
        assert not definitely_not_committed(exc), exc


def test_a_commits_snapshots_are_found_oldest_first(iceberg: IcebergLake) -> None:
    """A partition overwrite commits a delete and an append snapshot under one commit id."""
    assert run_project(iceberg.root, ["out.di"], partition="2024-01-02", now=INOW).ok
    assert run_project(iceberg.root, ["out.di"], partition="2024-01-02", now=INOW).ok
    table = iceberg.load("out.di")
    ids = [s.summary.additional_properties["lakewrap.commit_id"] for s in table.snapshots()]
    last = ids[-1]
    snaps = committed_snapshots(table, last)
    assert len(snaps) == ids.count(last) >= 2
    assert [s.snapshot_id for s in snaps] == [s.snapshot_id for s in table.snapshots() if s in snaps]
    assert [s.sequence_number for s in snaps] == sorted(s.sequence_number for s in snaps)
    assert snaps[-1].snapshot_id == table.current_snapshot().snapshot_id
    assert committed_snapshots(table, "no-such-commit") == [] and committed_snapshots(None, last) == []
