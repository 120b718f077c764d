"""Two ``lakewrap scheduler`` processes on one PostgreSQL-catalog queue: every due time becomes exactly
one job. The jobs are read straight from PostgreSQL (psycopg, not lakewrap); the expected due times
are counted by hand."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lakewrap.config import load_config
from queueproject import pg_toml, write_project
from servers import Postgres, postgres  # noqa: F401  (fixture)

pytestmark = pytest.mark.postgres

TOML = """
[schedules.often]
cron = "*/5 * * * *"
select = ["core.ev"]
catch_up = "all"

[schedules.daily]
cron = "0 3 * * *"
select = ["core.ev"]
"""


def pg_rows(root: Path, sql: str) -> list[tuple[Any, ...]]:
    import psycopg

    dsn = load_config(root).lake.dsn  # type: ignore[union-attr]
    with psycopg.connect(dsn) as con:
        return [tuple(r) for r in con.execute(sql).fetchall()]


def scheduler(root: Path, now: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "lakewrap", "scheduler", "--once", "--now", now,
                             "--format", "json", "--project", str(root)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ))


def test_two_schedulers_fire_once_per_due_time(tmp_path: Path, postgres: Postgres,  # noqa: F811
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGPASSWORD", postgres.password)
    root = write_project(tmp_path / "p", pg_toml(postgres) + TOML)
    reported: set[int] = set()
    for now in ("2024-01-10T00:02:00Z", "2024-01-10T06:01:00Z", "2024-01-11T03:30:00Z"):
        procs = [scheduler(root, now) for _ in range(2)]
        outs = [p.communicate(timeout=120) for p in procs]
        for p, (_, err) in zip(procs, outs, strict=True):
            assert p.returncode == 0, err.decode()
        looks = [json.loads(out) for out, _ in outs]
        assert all(look["errors"] == [] for look in looks)
        reported |= {j["job_id"] for look in looks for j in look["enqueued"]}
    rows = pg_rows(root, "SELECT dedupe_key, requested_by, partition_value, status, id FROM lakewrap_jobs ORDER BY id")
    assert reported == {r[4] for r in rows}  # every job was enqueued by one of the two processes
    keys = [r[0] for r in rows]
    assert len(keys) == len(set(keys))  # one job per due time, whatever the race
    often = sorted(k for k in keys if k.startswith("schedule:often:"))
    # look 1 (00:02): the latest due time only (00:00); look 2 (06:01): 00:05 .. 06:00 (72);
    # look 3 (next day 03:30): 06:05 .. 03:30 (258)
    assert len(often) == 1 + 72 + 258
    assert often[0] == "schedule:often:2024-01-10T00:00:00Z" and often[-1] == "schedule:often:2024-01-11T03:30:00Z"
    daily = sorted(k for k in keys if k.startswith("schedule:daily:"))
    # latest: the 9th's 03:00 at look 1, the 10th's at look 2, the 11th's at look 3
    assert daily == [f"schedule:daily:2024-01-{d}T03:00:00Z" for d in ("09", "10", "11")]
    assert {r[1] for r in rows} == {"schedule:often", "schedule:daily"}
    assert all(r[3] == "queued" for r in rows)
    by_key = {r[0]: r[2] for r in rows}
    assert by_key["schedule:often:2024-01-10T00:00:00Z"] == "2024-01-09"
    assert by_key["schedule:often:2024-01-11T00:05:00Z"] == "2024-01-10"
