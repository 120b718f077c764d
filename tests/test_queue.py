"""The job queue on the embedded catalogs (a DuckDB file, SQLite) and its commands: what enqueue
refuses, dedupe keys across connections, claiming, heartbeats, reclaim and hand-back, one worker
at a time, failing runs, and SIGTERM (finish a short job; cancel and hand back a long one)."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from helpers import run as cli
from lakewrap.errors import LakewrapError, PlanError, SelectionError, StateError
from lakewrap.jobs import open_queue
from lakewrap.jobworker import Worker, WorkerOptions
from queueproject import day, expected_rows, table_rows, wait_for, worker, write_project

PLAIN = """\
-- materialized table
SELECT 1 AS one
"""
BROKEN = """\
-- materialized incremental
-- partitioned daily key=d start=2024-01-01
SELECT CAST($partition_start AS TIMESTAMP) AS d, error('boom in ' || CAST($partition_start AS VARCHAR)) AS x
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = write_project(tmp_path / "project")
    (root / "models" / "core" / "plain.sql").write_text(PLAIN)
    return root


@pytest.mark.parametrize(("args", "error", "words"), [
    ((["evx"], {}), SelectionError, ["no model matches `evx`", "did you mean `ev`?"]),
    ((["tag:nope"], {}), SelectionError, ["no model has tag `nope`"]),
    ((["ev"], {"partition": "2024-13-01"}), PlanError, ["models/core/ev.sql", "not a valid daily partition",
                                                         "YYYY-MM-DD"]),
    ((["ev"], {"partition": "2024-01"}), PlanError, ["models/core/ev.sql", "2024-01"]),
    ((["ev"], {"start": "2024-01-01"}), PlanError, ["give both --start and --end"]),
    ((["ev"], {"start": "2024-01-05", "end": "2024-01-01"}), PlanError, ["models/core/ev.sql"]),
    ((["ev"], {"partition": "2024-01-01", "start": "2024-01-01", "end": "2024-01-02"}), PlanError,
     ["either --partition or --start/--end"]),
    ((["plain"], {"partition": "2024-01-01"}), PlanError, ["`core.plain` is not partitioned", "drop --partition"]),
    (([], {"kind": "resume"}), PlanError, ["needs the run id"]),
    ((["ev"], {"kind": "resume", "resume_of": "r1"}), PlanError, ["its run's own selection"]),
    ((["ev"], {"requested_by": "cron"}), PlanError, ["requested_by `cron`"]),
])
def test_enqueue_refuses_what_run_refuses_and_stores_nothing(project: Path, args: tuple[list[str], dict[str, str]],
                                                             error: type[LakewrapError], words: list[str]) -> None:
    selection, kwargs = args
    with open_queue(project) as queue:
        with pytest.raises(error) as caught:
            queue.enqueue(selection, **kwargs)  # type: ignore[arg-type]
        assert queue.list() == []
    text = caught.value.render()
    assert all(w in text for w in words), text


def test_enqueue_command_prints_the_id_and_errors_like_run(project: Path) -> None:
    code, out, err = cli("enqueue", "ev", "--partition", "2024-01-02", "--project", str(project))
    assert (code, out) == (0, "1\n"), err
    code, out, err = cli("enqueue", "evx", "--project", str(project))
    assert code == 2
    assert "no model matches `evx`" in err and "did you mean `ev`?" in err
    code, out, _ = cli("enqueue", "ev", "--partition", "2024-02-30", "--project", str(project), "--format", "json")
    assert code == 2 and json.loads(out)["ok"] is False and "models/core/ev.sql" in json.loads(out)["message"]
    code, out, _ = cli("enqueue", "ev", "--start", day(0), "--end", day(2), "--dedupe-key", "k",
                       "--project", str(project), "--format", "json")
    made = json.loads(out)
    assert (code, made["id"], made["created"], made["start"], made["end"]) == (0, 2, True, day(0), day(2))
    code, out, _ = cli("enqueue", "ev", "--dedupe-key", "k", "--project", str(project), "--format", "json")
    assert (code, json.loads(out)["id"], json.loads(out)["created"]) == (0, 2, False)
    code, out, _ = cli("jobs", "--project", str(project), "--format", "json")
    listed = json.loads(out)
    assert [(j["id"], j["status"], j["selection"], j["partition"]) for j in listed] == [
        (2, "queued", ["ev"], None), (1, "queued", ["ev"], "2024-01-02")]


def test_dedupe_key_across_connections_and_the_queue_lifecycle(project: Path) -> None:
    with open_queue(project) as a, open_queue(project) as b:
        assert "lake.ducklake-jobs" in a.where and a.exclusive
        first = a.enqueue(["ev"], partition=day(1), requested_by="schedule:hourly", dedupe_key="hourly@t1")
        again = b.enqueue(["ev"], partition=day(2), requested_by="schedule:hourly", dedupe_key="hourly@t1")
        other = b.enqueue(["ev"], partition=day(2), requested_by="schedule:hourly", dedupe_key="hourly@t2")
        assert again == first and other.id != first.id
        assert (first.status, first.attempts, first.run_id, first.partition) == ("queued", 0, None, day(1))
        # claims are oldest first, each job once
        c1, c2 = a.claim("w1"), b.claim("w2")
        assert c1 is not None and c2 is not None and b.claim("w3") is None
        assert (c1.id, c1.status, c1.attempts, c1.worker) == (first.id, "running", 1, "w1")
        assert c1.run_id and c2.run_id and c1.run_id != c2.run_id and c1.heartbeat_at and c1.started_at
        a.heartbeat(c1.id, "w1")
        with pytest.raises(StateError):
            a.heartbeat(c1.id, "w2")  # not w2's job
        assert a.reclaim(3600) == []  # fresh heartbeats
        back = a.reclaim(0.0)  # every running job is "stale" now: handed back as resumes of their runs
        assert sorted((j.id, j.status, j.kind, j.resume_of, j.attempts) for j in back) == [
            (c1.id, "queued", "resume", c1.run_id, 1), (c2.id, "queued", "resume", c2.run_id, 1)]
        with pytest.raises(StateError):
            a.heartbeat(c1.id, "w1")  # w1 lost it
        again1 = a.claim("w4")
        assert again1 is not None and (again1.id, again1.attempts, again1.run_id) == (c1.id, 2, c1.run_id)
        released = a.release(again1.id, "w4")
        assert released is not None and (released.status, released.attempts, released.worker) == ("queued", 2, None)
        with pytest.raises(PlanError):
            a.finish(c2.id, "queued", run_id=None, error=None)
        a.finish(c2.id, "failed", run_id=c2.run_id, error="x")
        got = b.get(c2.id)
        assert got is not None and (got.status, got.error) == ("failed", "x") and got.finished_at
        assert [j.id for j in b.list(status="failed")] == [c2.id]
        assert b.get(999) is None and b.by_key("hourly@t2") == b.get(other.id)


def test_worker_runs_jobs_through_the_runner_and_links_their_runs(project: Path) -> None:
    (project / "models" / "core" / "broken.sql").write_text(BROKEN)
    with open_queue(project) as queue:
        ok1 = queue.enqueue(["ev"], partition=day(0))
        ok2 = queue.enqueue(["ev"], start=day(1), end=day(3))
        bad = queue.enqueue(["broken"], partition=day(0))
    lines: list[str] = []
    Worker(project, WorkerOptions(once=True, heartbeat=0.5, reclaim_after=5), say=lines.append).serve()
    with open_queue(project) as queue:
        done = [queue.get(j.id) for j in (ok1, ok2, bad)]
    assert [(j.status, j.attempts) for j in done if j] == [("succeeded", 1), ("succeeded", 1), ("failed", 1)], lines
    assert table_rows(project) == expected_rows(range(4))
    failed = done[2]
    assert failed is not None and failed.error is not None and "boom in 2024-01-01" in failed.error
    assert str(project) not in failed.error  # redacted: no machine path
    runs = dict(table_rows(project, "SELECT run_id, status FROM lakewrap_runs"))
    assert {j.run_id: runs[j.run_id] for j in done if j and j.run_id} == {
        done[0].run_id: "success", done[1].run_id: "success", failed.run_id: "failed"}  # type: ignore[union-attr]
    steps = table_rows(project, f"SELECT partition_value FROM lakewrap_steps WHERE run_id = '{done[1].run_id}'"  # type: ignore[union-attr]
                       " ORDER BY 1")
    assert steps == [(day(1),), (day(2),), (day(3),)]


def test_one_worker_at_a_time_on_a_catalog_one_process_owns(project: Path) -> None:
    (project / "lakewrap.toml").write_text('[lake]\ncatalog = "sqlite"\n')
    with open_queue(project) as queue:
        assert "SQLite catalog" in queue.where and "lake.sqlite-runlog" in queue.where
        queue.enqueue(["ev"], partition=day(0))
        with queue.store.worker_slot():
            code, _, err = cli("worker", "--once", "--project", str(project))
            assert code != 0 and "another worker (pid" in err and "one worker at a time" in err
            code, _, err = cli("worker", "--concurrency", "2", "--project", str(project))
            assert code == 2 and "--concurrency 2" in err
    code, out, err = cli("worker", "--once", "--project", str(project))
    assert code == 0, out + err
    assert table_rows(project) == expected_rows(range(1))
    with open_queue(project) as queue:
        assert [j.status for j in queue.list()] == ["succeeded"]


def test_sigterm_lets_a_short_job_finish_and_hands_a_long_one_back(tmp_path: Path) -> None:
    root = write_project(tmp_path / "project", gated=True)
    gate_at, gate, reached = root / "target" / "gate_at", root / "target" / "gate", root / "target" / "reached"
    gate_at.write_text(day(1))
    with open_queue(root) as queue:
        short = queue.enqueue(["ev"], start=day(0), end=day(1))
        later = queue.enqueue(["ev"], partition=day(5))
    # 1. SIGTERM while the job runs, with time to finish: it finishes, nothing new is claimed, exit 0
    log = tmp_path / "w1.log"
    w = worker(root, "--grace", "60", log=log)
    wait_for("day 1's hook", reached.exists)
    w.send_signal(signal.SIGTERM)
    wait_for("the stop", lambda: "stop requested" in log.read_text())
    gate.touch()
    assert w.wait(timeout=60) == 0, log.read_text()
    with open_queue(root) as queue:
        assert [(j.id, j.status) for j in queue.list()] == [(later.id, "queued"), (short.id, "succeeded")]
        gate.unlink()
        reached.unlink()
        gate_at.write_text(day(3))
        long = queue.enqueue(["ev"], start=day(2), end=day(4))
        queue.finish(later.id, "cancelled", run_id=None, error=None)
    # 2. the job outlives the grace: its run is cancelled where it is, the job handed back
    log = tmp_path / "w2.log"
    w = worker(root, "--grace", "0", log=log)
    wait_for("day 3's hook", reached.exists)
    w.send_signal(signal.SIGTERM)
    wait_for("the cancel", lambda: "handed back" in log.read_text() or "stopping" in log.read_text())
    gate.touch()  # the hook ends; what follows day 3 is not started
    assert w.wait(timeout=60) == 0, log.read_text()
    with open_queue(root) as queue:
        back = queue.get(long.id)
    assert back is not None and (back.status, back.kind, back.attempts) == ("queued", "resume", 1), log.read_text()
    assert back.resume_of == back.run_id
    assert (day(4),) not in table_rows(root, "SELECT DISTINCT strftime(d, '%Y-%m-%d') FROM core.ev")
    runs = dict(table_rows(root, "SELECT run_id, status FROM lakewrap_runs"))
    assert runs[back.run_id] == "cancelled"
    # 3. the next worker resumes it: the table is complete
    lines: list[str] = []
    Worker(root, WorkerOptions(once=True), say=lines.append).serve()
    with open_queue(root) as queue:
        done = queue.get(long.id)
    assert done is not None and (done.status, done.attempts, done.run_id) == ("succeeded", 2, back.run_id), lines
    assert table_rows(root) == expected_rows(range(5))
