"""The run log agrees with the lake, always (issue 17 item 3): signals timed across the COMMIT window.

Each trial is one real run with a real SIGINT or SIGTERM sent to this process by a timer that is
started when the run announces a COMMIT (its statement log's ``run(COMMIT)``, or pyiceberg's
``commit <id>`` note), at a stepped delay of 0-12 ms, on a randomly chosen commit of the run. The
statement log is wrapped to start that timer; everything else -- DuckDB, DuckLake, pyiceberg, the
REST catalog, the signal handlers -- is the real thing. After each trial:

* every step the run recorded ``success`` has its materialization in the lake (its
  ``lakewrap.materializations`` row and snapshot; on Iceberg its commit in the table's history or
  state table), and every step whose materialization landed is recorded ``success`` (none
  ``cancelled``);
* ``target/run_results.json`` and ``target/run/<id>/results.json`` hold the final status, never
  ``running``; ``lakewrap_runs`` and ``lakewrap_steps`` hold the same status and counts (on Iceberg, in
  the run log's own DuckDB file, read through ``lakewrap query``).

Trials run in-process (a few hundred ms each) on three substrates: DuckLake (through the CLI,
``backfill --format json``), Iceberg write path ``pyiceberg`` and Iceberg write path ``sql``
(through the test REST adapter). Also: ``seed`` in the run log, a resumed run's counts, the printed
resume command, an empty selection.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest

from lakeproject import cli, open_lake
from lakewrap.execute import statements as sql
from lakewrap.execute.executor import Result
from lakewrap.execute.iceberg import IcebergLake
from lakewrap.execute.log import StatementLog
from lakewrap.runner import run_project
from lakewrap.substrates.iceberg.state import materializations_of
from lakewrap.workers import Task, ThreadRunner
from test_iceberg_reliability import DI, source

DAYS = ("2024-01-01", "2024-01-02")
DAILY = ("-- materialized incremental\n-- partitioned daily key=d start=2024-01-01\n"
         "SELECT $partition_start::DATE AS d, i FROM range(100) AS t(i)\n")
DELAYS_MS = (0.0, 0.5, 1, 2, 3, 5, 8, 12)


def write(root: Path, models: dict[str, str], toml: str | None = None) -> Path:
    (root / "models").mkdir(parents=True, exist_ok=True)
    for rel, text in models.items():
        path = root / "models" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    if toml is not None:
        (root / "lakewrap.toml").write_text(toml)
    return root


class Trigger:
    """Sends ``sig`` to this process ``delay`` seconds after the ``nth`` COMMIT a run announces."""

    def __init__(self) -> None:
        self.nth, self.delay, self.sig, self.seen = 0, 0.0, signal.SIGINT, 0
        self.timer: threading.Timer | None = None

    def arm(self, nth: int, delay: float, sig: signal.Signals) -> None:
        self.nth, self.delay, self.sig, self.seen, self.timer = nth, delay, sig, 0, None

    def commit_announced(self) -> None:
        self.seen += 1
        if self.seen == self.nth:
            self.timer = threading.Timer(self.delay, os.kill, (os.getpid(), self.sig))
            self.timer.start()

    def settle(self) -> bool:
        """Wait for the timer; whether a signal was sent during the run."""
        if self.timer is None:
            return False
        self.timer.join()
        return True


@pytest.fixture
def trigger(monkeypatch: pytest.MonkeyPatch) -> Iterator[Trigger]:
    """The statement log announces each COMMIT to the trigger (then runs it as before); a signal
    that comes after a run has restored its handlers is swallowed instead of stopping pytest."""
    t = Trigger()
    run, note = StatementLog.run, StatementLog.note

    def run_announcing(self: StatementLog, con: Any, statement: str, *args: Any, **kwargs: Any) -> Any:
        if statement == sql.COMMIT:
            t.commit_announced()
        return run(self, con, statement, *args, **kwargs)

    def note_announcing(self: StatementLog, text: str) -> None:
        note(self, text)
        if text.startswith("commit ") and " rows" in text:  # pyiceberg: tx.commit_transaction() is next
            t.commit_announced()

    monkeypatch.setattr(StatementLog, "run", run_announcing)
    monkeypatch.setattr(StatementLog, "note", note_announcing)
    previous = {s: signal.signal(s, lambda *_: None) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield t
    finally:
        t.settle()
        for s, handler in previous.items():
            signal.signal(s, handler)


def results_files(root: Path, run_id: str) -> list[dict[str, Any]]:
    return [json.loads((root / "target" / "run_results.json").read_text()),
            json.loads((root / "target" / "run" / run_id / "results.json").read_text())]


def check_results_files(root: Path, doc: dict[str, Any]) -> None:
    for written in results_files(root, doc["run_id"]):
        assert written["status"] == doc["status"] != "running"
        assert [(r["target"], r["partition"], r["status"]) for r in written["results"]] == [
            (r["target"], r["partition"], r["status"]) for r in doc["results"]]


# --- DuckLake ------------------------------------------------------------------------------------


def check_ducklake(root: Path, doc: dict[str, Any]) -> tuple[int, int]:
    """Run log = lake for run ``doc``; returns (steps recorded success, steps recorded cancelled)."""
    run_id = doc["run_id"]
    con = open_lake(root)
    try:
        # each snapshot's commit message names its materialization, or a group commit's members
        committed: dict[tuple[str, str | None], int] = {}
        for snap, info in con.execute("SELECT snapshot_id, commit_extra_info FROM lake.snapshots() "
                                      "ORDER BY snapshot_id").fetchall():
            extra = json.loads(info) if info else {}
            for m in extra.get("members", [extra]):
                if m.get("run_id") == run_id:
                    committed[(m["target"], m.get("partition"))] = snap
        landed = {(t, p): (n, committed.get((t, p))) for t, p, n in con.execute(
            "SELECT target, partition_value, rows_inserted FROM lakewrap.materializations WHERE run_id = $r",
            {"r": run_id}).fetchall()}
        steps = {(t, p): (st, snap) for t, p, st, snap in con.execute(
            "SELECT target, partition_value, status, snapshot_id FROM lakewrap_steps WHERE run_id = $r",
            {"r": run_id}).fetchall()}
        run = con.execute("SELECT status, steps, succeeded, cancelled FROM lakewrap_runs WHERE run_id = $r",
                          {"r": run_id}).fetchone()
        outcomes: dict[tuple[str, str | None], list[str]] = {}
        for t, p, outcome in con.execute("SELECT target, partition_value, outcome FROM lakewrap_attempts "
                                         "WHERE run_id = $r ORDER BY attempt", {"r": run_id}).fetchall():
            outcomes.setdefault((t, p), []).append(outcome)
    finally:
        con.close()
    recorded = {(r["target"], r["partition"]): r for r in doc["results"]}
    assert set(steps) == set(recorded)
    for key, (status, snap) in steps.items():
        assert recorded[key]["status"] == status
        assert (status == "success") == (key in landed), (key, status, doc)
        if status == "success":
            assert snap == landed[key][1] == recorded[key]["snapshot_id"] is not None
            assert recorded[key]["rows_inserted"] == landed[key][0]
            assert outcomes[key][-1] == "committed" and set(outcomes[key][:-1]) <= {"retried"}, outcomes[key]
        else:
            assert "committed" not in outcomes.get(key, [])
    counts = doc["counts"]
    assert run == (doc["status"], len(steps), counts["success"] + counts["unchanged"], counts["cancelled"])
    check_results_files(root, doc)
    return counts["success"], counts["cancelled"]


def test_signals_across_the_commit_window_leave_the_run_log_equal_to_the_lake_on_ducklake(
        tmp_path: Path, trigger: Trigger) -> None:
    root = write(tmp_path / "p", {"main/daily.sql": DAILY})
    rng = random.Random(17)
    landed_then_signalled = cancelled = 0
    for trial in range(24):
        sig = (signal.SIGINT, signal.SIGTERM)[trial % 2]
        trigger.arm(rng.randint(1, 2), DELAYS_MS[trial % len(DELAYS_MS)] / 1000, sig)
        # --no-group: the signal window of each day's own COMMIT (group commit: tests/test_group_commit.py)
        code, out, err = cli("backfill", "--project", str(root), "--start", DAYS[0], "--end", DAYS[1],
                             "--format", "json", "--no-group")
        signalled = trigger.settle()
        doc = json.loads(out)
        assert code == (0 if doc["status"] == "success" else 1), err
        assert signalled and doc["status"] in ("cancelled", "success")
        ok, stopped = check_ducklake(root, doc)
        cancelled += stopped > 0
        landed_then_signalled += any("the lake holds its commit" in w or "landed" in w
                                     for r in doc["results"] for w in r["warnings"]) or (
            doc["status"] == "cancelled" and ok > 0)
    # the trials covered both sides of the window: runs stopped with steps left, and commits that
    # landed while (or just before) the signal came
    print(f"\nDuckLake: 24 trials, {cancelled} cancelled with steps left, {landed_then_signalled} with a commit "
          "that landed as the signal came")
    assert cancelled >= 5 and landed_then_signalled >= 5


class Forgetful(ThreadRunner):
    """Real thread steps whose report of the first day is lost after its COMMIT, as when a worker
    process dies after committing: the step comes back ``failed`` with no snapshot."""

    groups = False  # one step per submit: the report lost is one step's

    def submit(self, task: Task, done: Any) -> None:
        def lost(t: Task, r: Result) -> None:
            if t.partition == "2024-01-01" and r.status == "success":
                r = t.skipped("failed", "the worker died: BrokenProcessPool")
                r.attempts, r.error_class = 1, "BrokenProcessPool"
                r.attempt_errors = [{"attempt": 1, "error_class": "BrokenProcessPool", "error": "died",
                                     "seconds": 0.1}]
            done(t, r)

        super().submit(task, lost)


def test_a_step_reported_failed_after_its_commit_landed_is_recorded_from_the_lake(tmp_path: Path) -> None:
    root = write(tmp_path / "p", {"main/daily.sql": DAILY})
    report = run_project(root, start=DAYS[0], end=DAYS[1], executor=Forgetful(1))
    assert report.ok and report.status == "success"
    first = report.results[0]
    assert (first.partition, first.status, first.rows_inserted, first.error) == ("2024-01-01", "success", 100, None)
    assert any("BrokenProcessPool" in w and "the lake holds its commit" in w for w in first.warnings)
    check_ducklake(root, report.to_dict())


@pytest.mark.parametrize("grouped", [False, True], ids=["own_commits", "group_commit"])
def test_a_snapshot_read_interrupted_after_its_commit_is_read_by_the_coordinator(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, grouped: bool) -> None:
    """A signal right after the COMMIT returned interrupts the step's read of its snapshot id (the
    CI failure of stop 29): the coordinator reads it from the commit message, so the run log still
    names the snapshot that holds the step's data."""
    from lakewrap.substrates.ducklake.materialize import Executor

    def interrupted(*_: Any) -> int:
        raise RuntimeError("INTERRUPT Error: Interrupted!")

    monkeypatch.setattr(Executor, "committed_snapshot", interrupted)
    root = write(tmp_path / "p", {"main/daily.sql": DAILY})
    report = run_project(root, start=DAYS[0], end=DAYS[1], group=grouped)
    assert report.status == "success" and all(r.snapshot_id is not None for r in report.results)
    assert all((r.group is not None) == grouped for r in report.results)
    assert not any("snapshot id" in w for r in report.results for w in r.warnings)
    check_ducklake(root, report.to_dict())


# --- Iceberg -------------------------------------------------------------------------------------


def check_iceberg(root: Path, doc: dict[str, Any]) -> None:
    """Run results = run log = lake for run ``doc``."""
    lake = IcebergLake.open(root)
    landed = {m["partition"]: m["snapshot_id"] for m in materializations_of(lake, "out.daily")
              if m["run_id"] == doc["run_id"]}
    for r in doc["results"]:
        assert (r["status"] == "success") == (r["partition"] in landed), (r, landed)
        if r["status"] == "success":
            assert r["snapshot_id"] == landed[r["partition"]]
    assert doc["status"] in ("success", "cancelled")
    check_results_files(root, doc)
    # the run log (a DuckDB file beside the catalog) says the same
    run_id = doc["run_id"]
    steps = {p: [st, snap] for p, st, snap in query_cli(
        root, f"SELECT partition_value, status, snapshot_id FROM lakewrap_steps WHERE run_id = '{run_id}'")}
    assert steps == {r["partition"]: [r["status"], r["snapshot_id"]] for r in doc["results"]}
    counts = doc["counts"]
    assert query_cli(root, f"SELECT status, succeeded, cancelled FROM lakewrap_runs WHERE run_id = '{run_id}'") == [
        [doc["status"], counts["success"] + counts["unchanged"], counts["cancelled"]]]


def iceberg_trials(root: Path, trigger: Trigger, trials: int, seed: int,
                   group: bool = False) -> tuple[int, int]:
    """Signals at a random COMMIT of a two-day run: each day's own (``group=False``), or the one
    COMMIT both days share on the sql path (``group=True``), which lands both days or neither."""
    lake = IcebergLake.open(root)
    source(lake, days=2, per_day=5)
    rng = random.Random(seed)
    cancelled = landed = 0
    for trial in range(trials):
        trigger.arm(1 if group else rng.randint(1, 2), DELAYS_MS[trial % len(DELAYS_MS)] / 1000,
                    (signal.SIGINT, signal.SIGTERM)[trial % 2])
        report = run_project(root, start="2024-01-01", end="2024-01-02", group=group)
        assert trigger.settle()
        check_iceberg(root, report.to_dict())
        if group:
            assert len({r.status for r in report.results}) == 1, report.to_dict()  # no mixed state
            assert len({r.group for r in report.results}) == 1
        cancelled += report.status == "cancelled"
        landed += report.status == "cancelled" and any(r.status == "success" for r in report.results)
    return cancelled, landed


def test_signals_across_the_commit_window_on_iceberg_pyiceberg(tmp_path: Path, trigger: Trigger) -> None:
    root = write(tmp_path / "p", {"out/daily.sql": DI}, toml='[lake]\nsubstrate = "iceberg"\n')
    cancelled, landed = iceberg_trials(root, trigger, 14, 18)
    print(f"\nIceberg pyiceberg: 14 trials, {cancelled} cancelled, {landed} of them after a commit landed")
    # pyiceberg's commit is Python: the handler only sets a flag, so the commit announced always lands
    assert cancelled >= 4 and landed == cancelled


@contextmanager
def rest_project(root: Path) -> Iterator[Path]:
    from icehouse_sql import rest_toml, start_rest

    with ExitStack() as stack:
        uri, _ = start_rest(root, stack)
        yield write(root, {"out/daily.sql": DI}, toml=rest_toml(uri))


def test_signals_across_the_commit_window_on_iceberg_sql(tmp_path: Path, trigger: Trigger) -> None:
    with rest_project(tmp_path / "p") as root:
        cancelled, landed = iceberg_trials(root, trigger, 12, 19)
    print(f"\nIceberg sql: 12 trials, {cancelled} cancelled, {landed} of them after a commit landed")
    assert cancelled >= 4


def test_signals_across_a_group_commit_on_iceberg_sql(tmp_path: Path, trigger: Trigger) -> None:
    with rest_project(tmp_path / "p") as root:
        cancelled, landed = iceberg_trials(root, trigger, 8, 23, group=True)
    print(f"\nIceberg sql group commit: 8 trials, {cancelled} cancelled, {landed} of them after it landed")


# --- real subprocesses ------------------------------------------------------------------------------


def lakewrap_cmd(*args: str) -> list[str]:
    return [sys.executable, "-c", "from lakewrap.cli import main; main(prog_name='lakewrap')", *args]


def signal_at_commit(root: Path, args: list[str], sig: signal.Signals, delay: float) -> dict[str, Any]:
    """``lakewrap ARGS`` in a process of its own, sent ``sig`` ``delay`` s after its statement log
    shows the first COMMIT about to run (``COMMIT;`` or pyiceberg's ``commit <id>`` note)."""
    runs = root / "target" / "run"
    earlier = set(runs.glob("*/*.sql"))
    proc = subprocess.Popen(lakewrap_cmd(*args, "--project", str(root), "--format", "json"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline, sent = time.monotonic() + 60, False
    while not sent and proc.poll() is None and time.monotonic() < deadline:
        for log in set(runs.glob("*/*.sql")) - earlier:
            text = log.read_text()
            if "\nCOMMIT;\n" in text or "-- note: commit " in text:
                time.sleep(delay)
                proc.send_signal(sig)
                sent = True
                break
        time.sleep(0.002)
    out, err = proc.communicate(timeout=60)
    assert sent, (out, err)
    doc: dict[str, Any] = json.loads(out)
    assert proc.returncode == (0 if doc["status"] == "success" else 1), err
    return doc


def test_signals_to_real_lakewrap_processes(tmp_path: Path) -> None:
    """Two trials through the `lakewrap` command in a process of its own: a backfill (SIGTERM) and a
    seed (SIGINT), on a DuckLake (a process each costs its imports: 1-2 s on a quiet machine)."""
    root = write(tmp_path / "p", {"main/daily.sql": DAILY})
    check_ducklake(root, signal_at_commit(root, ["backfill", "--start", DAYS[0], "--end", DAYS[1], "--no-group"],
                                          signal.SIGTERM, 0.001))
    (root / "seeds" / "raw").mkdir(parents=True)
    for name in ("a", "b", "c"):
        (root / "seeds" / "raw" / f"{name}.csv").write_text("x\n1\n2\n")
    doc = signal_at_commit(root, ["seed"], signal.SIGINT, 0.0)
    check_ducklake(root, doc)
    assert query(root, f"SELECT command, steps FROM lakewrap_runs WHERE run_id = '{doc['run_id']}'") == [("seed", 3)]


# --- seed, resume, the summary, an empty selection ------------------------------------------------


def test_seed_is_recorded_in_the_run_log_with_its_final_status(tmp_path: Path) -> None:
    root = write(tmp_path / "p", {})  # a project: models/ (empty) and seeds
    (root / "seeds" / "raw").mkdir(parents=True)
    (root / "seeds" / "raw" / "a.csv").write_text("x\n1\n2\n")
    (root / "seeds" / "raw" / "b.csv").write_text("y\n3\n")
    code, out, err = cli("seed", "--project", str(root), "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    check_results_files(root, doc)
    assert doc["status"] == "success"
    con = open_lake(root)
    try:
        runs = con.execute("SELECT run_id, command, status, steps, succeeded, resumable FROM lakewrap_runs").fetchall()
        steps = con.execute("SELECT step, target, status, rows_inserted, snapshot_id FROM lakewrap_steps "
                            "ORDER BY step").fetchall()
        snaps = dict(con.execute("SELECT json_extract_string(commit_extra_info, 'target'), snapshot_id "
                                 "FROM lake.snapshots() "
                                 "WHERE commit_extra_info IS NOT NULL").fetchall())
    finally:
        con.close()
    assert runs == [(doc["run_id"], "seed", "success", 2, 2, False)]
    assert steps == [(1, "raw.a", "success", 2, snaps["raw.a"]), (2, "raw.b", "success", 1, snaps["raw.b"])]
    code, _, err = cli("resume", doc["run_id"], "--project", str(root))  # a successful run: nothing to resume
    assert code == 1 and "nothing to resume" in err


def test_a_failed_seed_is_recorded_failed_and_is_not_resumed(tmp_path: Path) -> None:
    root = write(tmp_path / "p", {})  # a project: models/ (empty) and seeds
    (root / "seeds" / "raw").mkdir(parents=True)
    (root / "seeds" / "raw" / "a.csv").write_text("x\n1\n")
    (root / "seeds" / "raw" / "b.csv").write_bytes(b"y\n\xff\xfe\x00bad\n")  # not UTF-8: the load fails
    code, out, _ = cli("seed", "--project", str(root), "--format", "json")
    doc = json.loads(out)
    assert code == 1 and doc["status"] == "failed"
    check_results_files(root, doc)
    assert query(root, "SELECT command, status, succeeded, failed FROM lakewrap_runs") == [("seed", "failed", 1, 1)]
    code, _, err = cli("resume", doc["run_id"], "--project", str(root))
    assert code == 1 and "is a `lakewrap seed`; seeds are not resumed" in err


def test_seed_on_iceberg_writes_its_final_status(tmp_path: Path) -> None:
    root = write(tmp_path / "p", {})  # a project: models/ (empty) and seeds
    (root / "seeds" / "raw").mkdir(parents=True)
    (root / "seeds" / "raw" / "a.csv").write_text("x\n1\n")
    (root / "lakewrap.toml").write_text('[lake]\nsubstrate = "iceberg"\n')
    code, out, err = cli("seed", "--project", str(root), "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["status"] == "success"
    check_results_files(root, doc)
    assert query_cli(root, "SELECT command, status, steps, succeeded FROM lakewrap_runs") == [
        ["seed", "success", 1, 1]]
    code, _, err = cli("resume", doc["run_id"], "--project", str(root))  # the run log knows the run
    assert code == 1 and f"run `{doc['run_id']}` succeeded; there is nothing to resume" in err


def query_cli(root: Path, text: str) -> list[list[Any]]:
    """``lakewrap query TEXT`` (any substrate: on Iceberg the run log is a DuckDB file of its own)."""
    code, out, err = cli("query", text, "--project", str(root), "--format", "json")
    assert code == 0, err
    return [list(r.values()) for r in json.loads(out)]


def query(root: Path, text: str) -> list[tuple[Any, ...]]:
    con = open_lake(root)
    try:
        return [tuple(r) for r in con.execute(text).fetchall()]
    finally:
        con.close()


def test_a_cancelled_run_prints_its_resume_command_and_the_resume_counts_every_step(
        tmp_path: Path, trigger: Trigger) -> None:
    root = write(tmp_path / "my project", {"main/daily.sql": DAILY})
    # just as the second of five days commits (three more days: room for the timer thread to be
    # scheduled on a loaded machine before the run ends)
    trigger.arm(2, 0.0, signal.SIGINT)
    code, out, _ = cli("backfill", "--project", str(root), "--start", "2024-01-01", "--end", "2024-01-05",
                       "--no-group")  # a signal at one day's own COMMIT
    assert trigger.settle() and code == 1
    (run_id,) = [row[0] for row in query(root, "SELECT run_id FROM lakewrap_runs")]
    assert f"finish it with: lakewrap resume {run_id} --project '{root}'\n" in out
    ((before,),) = query(root, "SELECT count(*) FROM lakewrap.materializations")
    assert 1 <= before < 5

    code, out, err = cli("resume", run_id, "--project", str(root))
    assert code == 0, err
    assert f"run {run_id} success: 5 steps, 5 succeeded (0 unchanged)" in out
    assert "finish it with" not in out
    assert query(root, "SELECT status, steps, succeeded, cancelled FROM lakewrap_runs") == [("success", 5, 5, 0)]
    # each recording of the run numbers its steps after the ones before: no step number twice
    steps = query(root, "SELECT step FROM lakewrap_steps ORDER BY step")
    assert len(steps) == len(set(steps))
    doc = json.loads((root / "target" / "run_results.json").read_text())
    assert (doc["status"], doc["steps"], doc["counts"]["success"]) == ("success", 5, 5)

    # without --project the command has none either (`run`, from the project folder)
    trigger.arm(1, 0.0, signal.SIGTERM)  # as the first of four days commits: the others are cancelled
    cwd = os.getcwd()
    os.chdir(root)
    try:
        code, out, _ = cli("run", "--start", "2024-01-06", "--end", "2024-01-09", "--no-group")
    finally:
        os.chdir(cwd)
    assert trigger.settle() and code == 1
    (new,) = [r[0] for r in query(root, f"SELECT run_id FROM lakewrap_runs WHERE run_id <> '{run_id}'")]
    assert f"resume: run cancelled; finish it with: lakewrap resume {new}\n" in out


@pytest.mark.parametrize(("args", "named"), [
    (["main.daily", "--exclude", "main.daily"], "nothing selected: main.daily --exclude main.daily leaves no model"),
    ([], "nothing selected: the project has no models"),
])
@pytest.mark.parametrize("substrate", ["ducklake", "iceberg"])
def test_an_empty_selection_exits_2(tmp_path: Path, args: list[str], named: str, substrate: str) -> None:
    root = write(tmp_path / "p", {"main/daily.sql": DAILY} if args else {},
                 toml='[lake]\nsubstrate = "iceberg"\n' if substrate == "iceberg" else None)
    code, _, err = cli("run", "--project", str(root), *args)
    assert code == 2 and named in " ".join(err.split()), err
    assert not (root / "target" / "run_results.json").exists()
