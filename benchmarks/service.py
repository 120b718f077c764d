"""Incremental maintenance as a service: how fast workers drain the job queue.

Part one (this script today): jobs per minute drained by 1, 2 and 4 ``lakewrap worker --once``
processes on a PostgreSQL catalog (a throw-away server from Debian's binaries, as the tests start
it). Each configuration gets a fresh database with N one-partition jobs of a tiny daily model
queued before the workers start; the wall time runs from starting the workers to the last one's
exit. Each configuration checks that every job succeeded once and that the table holds the rows
computed in Python. CPU is user + system seconds of the worker processes (they fork nothing).

API latency (``--api``): ``lakewrap serve`` on 127.0.0.1 over a PostgreSQL catalog (so it starts no
worker: nothing drains the jobs it queues), one run in the run log; ``--clients`` concurrent
clients (asyncio tasks sharing one httpx connection pool of that size, in this process) send
``GET /runs/{id}`` back to back for ``--seconds``, then ``POST /runs`` (one partition each) for
``--seconds``. Latency is from sending a request to reading its answer; p50/p99 over the answers.
Checked: every answer 200/202, and the queue holds one job per 202.

The queue alone (``--claims``): 1, 2 and 4 processes claiming and finishing ``--claims`` jobs
without running them (``JobQueue.claim`` then ``finish``), to show what the table costs a job.

Usage:
    python benchmarks/service.py [--jobs 120] [--workers 1,2,4] [--claims 2000] [--out results.json]
    python benchmarks/service.py --jobs 0 --api [--seconds 30] [--clients 50]
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


def _claimer(root: str, name: str) -> None:
    from lakewrap.jobs import open_queue

    with open_queue(Path(root)) as queue:
        while (job := queue.claim(name)) is not None:
            queue.finish(job.id, "succeeded", run_id=job.run_id, error=None)


def claims(work: Path, pg: Any, jobs: int, workers: int) -> dict[str, Any]:
    """``workers`` processes claim and finish ``jobs`` queued jobs; every job claimed exactly once."""
    from lakewrap.jobs import open_queue
    from queueproject import day, pg_toml, write_project

    root = write_project(work / f"c{workers}", pg_toml(pg))
    with open_queue(root) as queue:
        queue.enqueue(["ev"], partition=day(0), requested_by="api")  # checked once; the rest stored as is
        for i in range(1, jobs):
            queue.store.insert({"kind": "run", "selection": '["ev"]', "partition_value": day(i % 300),
                                "start_value": None, "end_value": None, "resume_of": None, "requested_by": "api",
                                "dedupe_key": None})
    load = os.getloadavg()[0]
    code = f"import sys; sys.path[:0] = {[str(ROOT / 'benchmarks'), str(ROOT / 'tests')]!r}; " \
           f"from service import _claimer; _claimer({str(root)!r}, sys.argv[1])"
    started = time.monotonic()
    procs = [subprocess.Popen([sys.executable, "-c", code, f"c{k}"]) for k in range(workers)]
    codes = [p.wait() for p in procs]
    wall = time.monotonic() - started
    with open_queue(root) as queue:
        done = queue.list(limit=jobs + 1)
    ok = codes == [0] * workers and len(done) == jobs and all(j.status == "succeeded" and j.attempts == 1
                                                              for j in done)
    return {"workers": workers, "jobs": jobs, "seconds": round(wall, 2), "claims_per_second": round(jobs / wall, 1),
            "load_average_at_start": round(load, 2), "each_claimed_once": ok}


def _quantile(sorted_ms: list[float], q: float) -> float:
    return sorted_ms[min(len(sorted_ms) - 1, int(q * len(sorted_ms)))] if sorted_ms else float("nan")


async def _hammer(url: str, label: str, path: str, body: Any, seconds: float, clients: int) -> dict[str, Any]:
    """``clients`` tasks sending ``label``'s method to ``path`` back to back for ``seconds``; latency figures."""
    import asyncio

    import httpx

    latencies: list[float] = []
    statuses: dict[int, int] = {}
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=300, limits=limits) as client:
        deadline = time.monotonic() + seconds

        async def one(k: int) -> None:
            n = 0
            while time.monotonic() < deadline:
                began = time.perf_counter()
                response = await client.request(label.split()[0], path, json=body(k, n) if body else None)
                latencies.append((time.perf_counter() - began) * 1000)
                statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
                n += 1

        started = time.monotonic()
        await asyncio.gather(*(one(k) for k in range(clients)))
        wall = time.monotonic() - started
    ms = sorted(latencies)
    return {"endpoint": label,
            "clients": clients, "seconds": round(wall, 1), "requests": len(ms),
            "requests_per_second": round(len(ms) / wall, 1), "p50_ms": round(_quantile(ms, 0.50), 1),
            "p99_ms": round(_quantile(ms, 0.99), 1), "max_ms": round(ms[-1], 1) if ms else None,
            "statuses": {str(k): v for k, v in sorted(statuses.items())}}


def api_latency(work: Path, pg: Any, seconds: float, clients: int) -> list[dict[str, Any]]:
    """p50/p99 of ``GET /runs/{id}`` and ``POST /runs`` against a real ``lakewrap serve``."""
    import asyncio
    import signal

    from lakewrap.jobs import open_queue
    from queueproject import day, pg_toml, write_project
    from servers import free_port, wait_for_port

    root = write_project(work / "api", pg_toml(pg))
    with open_queue(root) as queue:
        first = queue.enqueue(["ev"], partition=day(0), requested_by="api").id
    subprocess.run([sys.executable, "-m", "lakewrap", "worker", "--once", "--project", str(root)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open_queue(root) as queue:
        run_id = queue.get(first).run_id  # type: ignore[union-attr]
    port = free_port()
    log = (work / "serve.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "lakewrap", "serve", "--port", str(port), "--project", str(root)],
                            stdout=log, stderr=subprocess.STDOUT)
    rows = []
    try:
        if not wait_for_port(port, proc, 60):
            raise SystemExit((work / "serve.log").read_text())
        url = f"http://127.0.0.1:{port}"
        def post(k: int, n: int) -> dict[str, Any]:
            return {"select": ["ev"], "partition": day((k * 7 + n) % 300)}

        for label, path, body in (("GET /runs/{run_id}", f"/runs/{run_id}", None), ("POST /runs", "/runs", post)):
            load = os.getloadavg()
            row = asyncio.run(_hammer(url, label, path, body, seconds, clients))
            row["load_average_1_5_15_at_start"] = [round(x, 2) for x in load]
            row["load_average_1_5_15_at_end"] = [round(x, 2) for x in os.getloadavg()]
            print(json.dumps(row), flush=True)
            rows.append(row)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        log.close()
    with open_queue(root) as queue:
        queued = len(queue.list(status="queued", limit=1_000_000))
    get, post = rows
    ok = (get["statuses"] == {"200": get["requests"]} and post["statuses"] == {"202": post["requests"]}
          and queued == post["requests"])
    for row in rows:
        row["all_answers_right"] = ok
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=120, help="jobs each drain runs (0: no drain)")
    ap.add_argument("--workers", default="1,2,4", help="comma-separated worker counts")
    ap.add_argument("--claims", type=int, default=0, help="also time the queue alone on this many jobs")
    ap.add_argument("--api", action="store_true", help="also time the API: GET /runs/{id} and POST /runs")
    ap.add_argument("--seconds", type=float, default=30.0, help="with --api: seconds of load per endpoint")
    ap.add_argument("--clients", type=int, default=50, help="with --api: concurrent clients")
    ap.add_argument("--work", type=Path, help="work folder (default: a temporary one)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    from servers import start_postgres, stop_postgres

    work = args.work or Path(tempfile.mkdtemp(prefix="lakewrap-service-"))
    work.mkdir(parents=True, exist_ok=True)
    pg = start_postgres()
    os.environ["PGPASSWORD"] = pg.password
    rows: list[dict[str, Any]] = []
    queue_rows: list[dict[str, Any]] = []
    api_rows: list[dict[str, Any]] = []
    try:
        for n in (int(w) for w in args.workers.split(",")) if args.jobs else ():
            row = drain(work, pg, args.jobs, n)
            print(json.dumps(row), flush=True)
            rows.append(row)
        for n in (int(w) for w in args.workers.split(",")) if args.claims else ():
            row = claims(work, pg, args.claims, n)
            print(json.dumps(row), flush=True)
            queue_rows.append(row)
        if args.api:
            api_rows = api_latency(work, pg, args.seconds, args.clients)
    finally:
        stop_postgres(pg)
    report = {"cores": len(os.sched_getaffinity(0)), "drain": rows, "queue_alone": queue_rows, "api": api_rows}
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    ok = all(r["all_succeeded_once_and_rows_right"] for r in rows) and all(r["each_claimed_once"] for r in queue_rows)
    ok = ok and all(r["all_answers_right"] for r in api_rows)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
