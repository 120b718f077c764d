"""The SQL of docs/deployment.md against a real PostgreSQL catalog: the INSERT a pg_cron job runs
(taken from the page, run twice: one job thanks to its dedupe key), which `lakewrap worker --once`
then runs (the partition's rows against rows computed in Python), and the monitoring queries
before and after (their counts and ages)."""

from __future__ import annotations

import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from helpers import run
from lakewrap.config import load_config
from lakewrap.jobs import open_queue
from queueproject import START, expected_rows, pg_toml, table_rows, worker, write_project
from servers import Postgres, postgres  # noqa: F401  (fixture)

pytestmark = pytest.mark.postgres
PAGE = Path(__file__).resolve().parents[1] / "docs" / "deployment.md"


def sql_blocks() -> list[str]:
    return re.findall(r"```sql\n(.*?)```", PAGE.read_text(), flags=re.S)


def cron_insert() -> str:
    """The statement inside the page's `cron.schedule_in_database(..., $$ ... $$, ...)`."""
    (block,) = [b for b in sql_blocks() if "cron.schedule_in_database" in b]
    return block.split("$$")[1].strip()


def monitoring() -> list[str]:
    (block,) = [b for b in sql_blocks() if b.startswith("-- queue")]
    return [s.strip() for s in block.split(";") if s.strip()]


def pg(root: Path, sql: str) -> list[tuple[Any, ...]]:
    import psycopg

    dsn = load_config(root).lake.dsn  # type: ignore[union-attr]
    with psycopg.connect(dsn) as con:
        cur = con.execute(sql)
        return [tuple(r) for r in cur.fetchall()] if cur.description else []


def test_the_pg_cron_insert_queues_once_and_a_worker_runs_it(tmp_path: Path, postgres: Postgres,  # noqa: F811
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGPASSWORD", postgres.password)
    root = write_project(tmp_path / "project", pg_toml(postgres))
    code, out, err = run("jobs", "--project", str(root))  # the page's way to create the table
    assert code == 0, out + err
    insert = cron_insert()
    assert "ON CONFLICT (dedupe_key) DO NOTHING" in insert
    pg(root, insert)
    pg(root, insert)  # pg_cron running it again for the same day: no second job
    today = datetime.now(timezone.utc).date()
    yesterday = today.fromordinal(today.toordinal() - 1).isoformat()
    with open_queue(root) as queue:
        jobs = queue.list()
    assert [(j.kind, j.selection, j.partition, j.status, j.dedupe_key, j.requested_by) for j in jobs] == [
        ("run", ("core.ev",), yesterday, "queued", f"pg_cron:nightly:{yesterday}", "schedule:pg_cron-nightly")]
    queued, waits, failed = monitoring()
    ((count, oldest),) = pg(root, queued)
    assert count == 1 and 0 <= float(oldest) < 600
    assert pg(root, waits) == [] and pg(root, failed) == []
    proc = worker(root, "--once", log=tmp_path / "worker.log")
    assert proc.wait(timeout=300) == 0, (tmp_path / "worker.log").read_text()
    with open_queue(root) as queue:
        job = queue.get(jobs[0].id)
    assert job is not None and job.status == "succeeded" and job.attempts == 1 and job.run_id, job
    i = (datetime.fromisoformat(yesterday) - START).days
    assert table_rows(root) == expected_rows(range(i, i + 1))
    assert pg(root, queued) == [(0, 0)] and pg(root, waits) == [] and pg(root, failed) == []
    # a running job whose heartbeat stopped two minutes ago shows in the second query
    pg(root, "UPDATE lakewrap_jobs SET status = 'running', worker = 'h:1', heartbeat_at = now() - interval '2 minutes'")
    ((jid, who, rid, age),) = pg(root, waits)
    assert (jid, who, rid) == (job.id, "h:1", job.run_id) and 115 < float(age) < 600
    # a failed job shows in the last query
    pg(root, "UPDATE lakewrap_jobs SET status = 'failed', error = 'boom', finished_at = now()")
    assert pg(root, failed) == [(job.id, job.run_id, "boom")]
