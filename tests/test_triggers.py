"""``-- trigger upstream [debounce=...]`` on a real DuckLake: after late upstream commits the scheduler
enqueues only the partitions whose upstream rows changed, waits while commits keep arriving within
the debounce window, enqueues each partition once, and a worker's runs make them fresh again.

The expected partitions are the days of the rows this test inserted, updated and deleted; the
table after the worker ran is compared with rows computed in Python from the same inserts.
"""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from helpers import execute
from lakewrap.cli import main
from lakewrap.execute.lake import Lake
from lakewrap.jobs import open_queue
from lakewrap.ticks import look

EV = """\
-- materialized incremental
-- partitioned daily key=ts start=2024-01-01
-- trigger upstream debounce=5m
SELECT id, ts, v FROM raw.events
WHERE ts >= $partition_start AND ts < $partition_end
"""
TOTAL = """\
-- materialized table
-- trigger upstream
SELECT count(*) AS n, sum(v) AS v FROM raw.events
"""
QUIET = """\
-- materialized incremental
-- partitioned daily key=ts start=2024-01-01
SELECT id, ts, v FROM raw.events
WHERE ts >= $partition_start AND ts < $partition_end
"""


def fetch(root: Path, sql: str) -> list[tuple[Any, ...]]:
    lake = Lake.open(root, read_only=True)
    con = lake.connect()
    try:
        return [tuple(r) for r in con.execute(sql).fetchall()]
    finally:
        lake.close(con)


def queued(root: Path) -> dict[str, tuple[str, str | None]]:
    with open_queue(root) as queue:
        return {j.dedupe_key or "": (j.requested_by, j.partition) for j in queue.list(limit=100)}


def test_triggers_fire_only_for_changed_partitions(tmp_path: Path) -> None:
    root = tmp_path / "p"
    for name, text in (("ev", EV), ("total", TOTAL), ("quiet", QUIET)):
        (root / "models" / "core").mkdir(parents=True, exist_ok=True)
        (root / "models" / "core" / f"{name}.sql").write_text(text)
    rows = {(i, datetime(2024, 1, 1 + i // 3, 6 + i % 3), i * 10) for i in range(15)}  # 3 rows a day, 5 days
    values = ", ".join(f"({i}, TIMESTAMP '{ts}', {v})" for i, ts, v in sorted(rows))
    execute(root, "CREATE SCHEMA raw", "CREATE TABLE raw.events (id INTEGER, ts TIMESTAMP, v INTEGER)",
            f"INSERT INTO raw.events VALUES {values}")
    ran = CliRunner().invoke(main, ["run", "--start", "2024-01-01", "--end", "2024-01-05", "--project", str(root)])
    assert ran.exit_code == 0, ran.output
    now = datetime.now(timezone.utc)
    assert look(root, now + timedelta(hours=1)).enqueued == []  # nothing changed since the run
    assert queued(root) == {}

    # late commits: a new row on day 3, an update of a day-5 row, then (still within 5m) a delete on day 3
    execute(root, "INSERT INTO raw.events VALUES (100, TIMESTAMP '2024-01-03 12:00:00', 7)",
            "UPDATE raw.events SET v = v + 1 WHERE id = 13")
    first = look(root, datetime.now(timezone.utc) + timedelta(minutes=1))
    # ev debounces (5m); total (debounce 0) fires for its whole table; quiet has no trigger
    assert [(j.get("trigger"), j["partition"]) for j in first.enqueued] == [("core.total", None)]
    assert sorted(s.split(" ")[0] for s in first.skipped) == ["trigger:core.ev:2024-01-03",
                                                               "trigger:core.ev:2024-01-05"]
    execute(root, "DELETE FROM raw.events WHERE id = 7")  # day 3 again: the same burst goes on
    rows = {r for r in rows if r[0] != 7} | {(100, datetime(2024, 1, 3, 12), 7)}
    rows = {(i, ts, v + 1 if i == 13 else v) for i, ts, v in rows}
    after = datetime.now(timezone.utc)
    assert [j["partition"] for j in look(root, after + timedelta(minutes=4)).enqueued
            if j.get("trigger") == "core.ev"] == []  # the delete restarted the debounce window
    fired = look(root, after + timedelta(minutes=6))
    got = sorted((j["trigger"], j["partition"]) for j in fired.enqueued)
    assert ("core.ev", "2024-01-03") in got and ("core.ev", "2024-01-05") in got
    assert [g for g in got if g[0] == "core.ev"] == [("core.ev", "2024-01-03"), ("core.ev", "2024-01-05")]
    jobs = queued(root)
    ev_jobs = {k: v for k, v in jobs.items() if k.startswith("trigger:core.ev:")}
    assert sorted(v for v in ev_jobs.values()) == [("trigger:core.ev", "2024-01-03"), ("trigger:core.ev", "2024-01-05")]
    assert not any("quiet" in k for k in jobs)
    # looking again (or a second scheduler) before the jobs ran: nothing new
    assert [j for j in look(root, after + timedelta(minutes=7)).enqueued if j.get("trigger") == "core.ev"] == []

    # a worker runs the jobs: the partitions are fresh, the table holds the upstream's rows
    done = subprocess.run([sys.executable, "-m", "lakewrap", "worker", "--once", "--project", str(root)],
                          capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr.decode()
    with open_queue(root) as queue:
        assert {j.status for j in queue.list(limit=100)} == {"succeeded"}
    assert sorted(fetch(root, "SELECT id, ts, v FROM core.ev")) == sorted(rows)
    assert fetch(root, "SELECT n, v FROM core.total") == [(len(rows), sum(v for _, _, v in rows))]
    later = look(root, datetime.now(timezone.utc) + timedelta(hours=1))
    assert later.enqueued == [] and later.errors == []


def test_a_held_catalog_is_reported_and_retried(tmp_path: Path) -> None:
    """On a DuckDB-file catalog another process holds (a worker running), a look says so and enqueues
    nothing; the next look, once the catalog is free, fires."""
    root = tmp_path / "p"
    (root / "models" / "core").mkdir(parents=True)
    (root / "models" / "core" / "total.sql").write_text(TOTAL)
    execute(root, "CREATE SCHEMA raw", "CREATE TABLE raw.events (id INTEGER, ts TIMESTAMP, v INTEGER)",
            "INSERT INTO raw.events VALUES (1, TIMESTAMP '2024-01-01 06:00:00', 5)")
    assert CliRunner().invoke(main, ["run", "--project", str(root)]).exit_code == 0
    execute(root, "INSERT INTO raw.events VALUES (2, TIMESTAMP '2024-01-02 06:00:00', 6)")
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from pathlib import Path; from lakewrap.execute.lake import Lake; "
        f"con = Lake.open(Path({str(root)!r})).connect(); print('held', flush=True); sys.stdin.read()")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
        held = look(root, datetime.now(timezone.utc))
        assert held.enqueued == [] and len(held.errors) == 1 and "held by another process" in held.errors[0]
    finally:
        holder.communicate(b"", timeout=60)
    free = look(root, datetime.now(timezone.utc))
    assert [(j["trigger"], j["partition"]) for j in free.enqueued] == [("core.total", None)] and free.errors == []


def test_iceberg_triggers_fire_only_for_the_changed_partition(tmp_path: Path) -> None:
    """On an Iceberg lake (pyiceberg, the embedded catalog) the seed's re-load is an overwrite commit;
    the snapshot diff maps the one changed row to its day."""
    root = tmp_path / "ice"
    (root / "models" / "core").mkdir(parents=True)
    (root / "seeds" / "raw").mkdir(parents=True)
    (root / "lakewrap.toml").write_text('[lake]\nsubstrate = "iceberg"\n')
    (root / "models" / "core" / "ev.sql").write_text(EV.replace(" debounce=5m", ""))
    lines = [f"{i},2024-01-0{1 + i // 3} 0{6 + i % 3}:00:00,{i * 10}" for i in range(15)]
    csv = root / "seeds" / "raw" / "events.csv"
    csv.write_text("id,ts,v\n" + "\n".join(lines) + "\n")
    for args in (["seed"], ["run", "--start", "2024-01-01", "--end", "2024-01-05"]):
        out = CliRunner().invoke(main, [*args, "--project", str(root)])
        assert out.exit_code == 0, out.output
    assert look(root, datetime.now(timezone.utc)).enqueued == []
    lines[10] = lines[10].replace(",100", ",101")  # id 10: day 4
    csv.write_text("id,ts,v\n" + "\n".join(lines) + "\n")
    assert CliRunner().invoke(main, ["seed", "--project", str(root)]).exit_code == 0
    fired = look(root, datetime.now(timezone.utc))
    assert [(j["trigger"], j["partition"]) for j in fired.enqueued] == [("core.ev", "2024-01-04")]
    assert look(root, datetime.now(timezone.utc)).enqueued == []  # the same burst: already queued
    assert list(queued(root).values()) == [("trigger:core.ev", "2024-01-04")]
