"""Incremental maintenance as a service: how fast workers drain the job queue.

Part one (this script today): jobs per minute drained by 1, 2 and 4 ``lakewrap worker --once``
processes on a PostgreSQL catalog (a throw-away server from Debian's binaries, as the tests start
it). Each configuration gets a fresh database with N one-partition jobs of a tiny daily model
queued before the workers start; the wall time runs from starting the workers to the last one's
exit. Each configuration checks that every job succeeded once and that the table holds the rows
computed in Python. CPU is user + system seconds of the worker processes (they fork nothing).

Usage:
    python benchmarks/service.py [--jobs 120] [--workers 1,2,4] [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))


def drain(work: Path, pg: Any, jobs: int, workers: int) -> dict[str, Any]:
    from lakewrap.jobs import open_queue
    from queueproject import day, expected_rows, pg_toml, table_rows, write_project

    root = write_project(work / f"w{workers}", pg_toml(pg))
    with open_queue(root) as queue:
        ids = [queue.enqueue(["ev"], partition=day(i), requested_by="api").id for i in range(jobs)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load = os.getloadavg()[0]
    started = time.monotonic()
    procs = [subprocess.Popen([sys.executable, "-m", "lakewrap", "worker", "--once", "--project", str(root)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(workers)]
    codes = [p.wait() for p in procs]
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open_queue(root) as queue:
        done = [queue.get(i) for i in ids]
    ok = (codes == [0] * workers and all(j is not None and j.status == "succeeded" and j.attempts == 1 for j in done)
          and table_rows(root) == expected_rows(range(jobs)))
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"workers": workers, "jobs": jobs, "seconds": round(wall, 2), "jobs_per_minute": round(jobs / wall * 60, 1),
            "cpu_seconds_per_job": round(cpu / jobs, 3), "load_average_at_start": round(load, 2),
            "load_average_at_end": round(os.getloadavg()[0], 2), "all_succeeded_once_and_rows_right": ok}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=120)
    ap.add_argument("--workers", default="1,2,4", help="comma-separated worker counts")
    ap.add_argument("--work", type=Path, help="work folder (default: a temporary one)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    from servers import start_postgres, stop_postgres

    work = args.work or Path(tempfile.mkdtemp(prefix="lakewrap-service-"))
    work.mkdir(parents=True, exist_ok=True)
    pg = start_postgres()
    os.environ["PGPASSWORD"] = pg.password
    rows = []
    try:
        for n in (int(w) for w in args.workers.split(",")):
            row = drain(work, pg, args.jobs, n)
            print(json.dumps(row), flush=True)
            rows.append(row)
    finally:
        stop_postgres(pg)
    report = {"cores": len(os.sched_getaffinity(0)), "drain": rows}
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    return 0 if all(r["all_succeeded_once_and_rows_right"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
