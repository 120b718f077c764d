"""Backfill throughput and per-run overhead of lakewrap's project runner.

A. ``lakewrap backfill`` of 64 daily partitions × 3 models (``events`` delete+insert from a raw
   table, ``events_daily`` aggregating it per day, ``events_merge`` merging the raw rows on a key):
   serial (``--workers 1``) vs ``--workers 2`` (threads) on a DuckDB-file catalog, and serial vs
   ``--workers 2`` (threads, then ``--executor process``) vs ``--executor dask`` (LocalCluster, 2
   workers) on a PostgreSQL catalog (a
   throw-away server from Debian's binaries, as the tests start it). Each configuration runs in a
   fresh lake; wall time is the whole ``run_project`` call. Every configuration's tables must have
   the same digest as the serial run's.
B. The fixed per-run overhead of a 50-model DAG (tiny table models in a chain of 10 levels × 5):
   a whole ``lakewrap run`` process, and optionally ``dbt run`` of the same DAG (``--dbt``: builds
   the pinned dbt venv of ``strategies.py`` in the work folder).

Usage:
    python benchmarks/backfill.py [--partitions 64] [--reps 1] [--no-postgres] [--dbt] [--out results.json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
NOW = datetime(2024, 12, 31, tzinfo=timezone.utc)

MODELS = {
    "main/events.sql": "-- materialized incremental\n-- partitioned daily key=ts start=2024-01-01\n"
                       "SELECT ts, id, v FROM raw.src WHERE ts >= $partition_start AND ts < $partition_end\n",
    "main/events_daily.sql": "-- materialized incremental\n-- partitioned daily key=day start=2024-01-01\n"
                             "SELECT CAST(date_trunc('day', ts) AS TIMESTAMP) AS day, count(*) AS n, sum(v) AS v "
                             "FROM main.events WHERE ts >= $partition_start AND ts < $partition_end GROUP BY ALL\n",
    "main/events_merge.sql": "-- materialized incremental\n-- partitioned daily key=ts start=2024-01-01\n"
                             "-- unique_key id\n"
                             "SELECT ts, id, v * 2 AS v FROM raw.src "
                             "WHERE ts >= $partition_start AND ts < $partition_end\n",
}


def make_project(root: Path, toml: str | None, rows_per_day: int, days: int) -> Path:
    from lakewrap.execute.lake import Lake

    for rel, text in MODELS.items():
        path = root / "models" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    if toml:
        (root / "lakewrap.toml").write_text(toml)
    lake = Lake.open(root)
    con = lake.connect()
    con.execute("CREATE SCHEMA IF NOT EXISTS raw")
    con.execute("CREATE OR REPLACE TABLE raw.src AS SELECT TIMESTAMP '2024-01-01' + to_microseconds("
                "CAST(i * (86400000000 // $n) AS BIGINT)) AS ts, i AS id, i % 97 AS v FROM range($total) AS r(i)",
                {"n": rows_per_day, "total": rows_per_day * days})
    lake.close(con)
    return root


def digest(root: Path) -> str:
    from lakewrap.execute.lake import Lake

    con = Lake.open(root, read_only=True).connect()
    try:
        h = hashlib.sha256()
        for name in ("events", "events_daily", "events_merge"):
            h.update(repr(con.execute(f"SELECT * FROM main.{name} ORDER BY ALL").fetchall()).encode())
        return h.hexdigest()
    finally:
        con.close()


def backfill(root: Path, days: int, **kwargs: Any) -> tuple[float, Any]:
    from lakewrap.runner import run_project

    end = (datetime(2024, 1, 1) + timedelta(days=days - 1)).strftime("%Y-%m-%d")
    started = time.perf_counter()
    report = run_project(root, start="2024-01-01", end=end, now=NOW, command="backfill", **kwargs)
    wall = time.perf_counter() - started
    if not report.ok:
        raise SystemExit(f"backfill failed: {[r.error for r in report.results if r.error][:3]}")
    return wall, report


def part_a(work: Path, days: int, rows: int, postgres: bool) -> list[dict[str, Any]]:
    out = []
    configs: list[tuple[str, str | None, dict[str, Any]]] = [
        ("duckdb-file", None, {"workers": 1}), ("duckdb-file", None, {"workers": 2}),
    ]
    pg = None
    if postgres:
        sys.path.insert(0, str(ROOT / "tests"))
        from servers import start_postgres

        pg = start_postgres()
        os.environ["PGPASSWORD"] = pg.password
        for kw in ({"workers": 1}, {"workers": 2}, {"workers": 2, "executor": "process"},
                   {"workers": 2, "executor": "dask"}):
            configs.append(("postgres", "pg", kw))
    try:
        reference = None
        for i, (catalog, kind, kw) in enumerate(configs):
            toml = None
            if kind == "pg":
                assert pg is not None
                toml = f'[lake]\ncatalog = "postgres"\ndsn = "{pg.create_database(f"bench_{i}")}"\n'
            root = make_project(work / f"a{i}", toml, rows, days)
            wall, report = backfill(root, days, **kw)
            d = digest(root)
            reference = reference or d
            retries = sum(r.attempts - 1 for r in report.results)
            row = {"catalog": catalog, "executor": kw.get("executor", "thread"), "workers": kw["workers"],
                   "steps": len(report.results), "seconds": round(wall, 2), "retries": retries,
                   "same_digest_as_serial": d == reference}
            print(json.dumps(row), flush=True)
            out.append(row)
    finally:
        if pg is not None:
            from servers import stop_postgres

            stop_postgres(pg)
    return out


def fifty_models(root: Path) -> None:
    for level in range(10):
        for k in range(5):
            body = (f"SELECT {k} AS k, 1 AS n" if level == 0 else
                    f"SELECT k, n + 1 AS n FROM main.m{level - 1}_{k}")
            path = root / "models" / "main" / f"m{level}_{k}.sql"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"-- materialized table\n{body}\n")


def part_b(work: Path, dbt: bool) -> dict[str, Any]:
    root = work / "fifty"
    fifty_models(root)
    cmd = [sys.executable, "-c", "from lakewrap.cli import main; main(prog_name='lakewrap')", "run",
           "--project", str(root), "--format", "json"]
    subprocess.run(cmd, check=True, capture_output=True)  # first run creates the tables
    times = []
    for _ in range(3):
        started = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        times.append(time.perf_counter() - started)
    out: dict[str, Any] = {"models": 50, "lakewrap_run_seconds": round(sorted(times)[1], 2)}
    if dbt:
        sys.path.insert(0, str(ROOT / "benchmarks"))
        from strategies import dbt_venv

        exe = dbt_venv(work)
        proj = work / "dbt50"
        (proj / "models").mkdir(parents=True, exist_ok=True)
        (proj / "dbt_project.yml").write_text("name: b50\nversion: '1.0.0'\nconfig-version: 2\nprofile: b50\n"
                                             "model-paths: [models]\n")
        (proj / "profiles.yml").write_text(f"b50:\n  target: dev\n  outputs:\n    dev:\n      type: duckdb\n"
                                           f"      path: {proj / 'b50.duckdb'}\n      threads: 2\n")
        for level in range(10):
            for k in range(5):
                body = (f"SELECT {k} AS k, 1 AS n" if level == 0 else
                        f"SELECT k, n + 1 AS n FROM {{{{ ref('m{level - 1}_{k}') }}}}")
                (proj / "models" / f"m{level}_{k}.sql").write_text("{{ config(materialized='table') }}\n" + body + "\n")
        dbt_cmd = [str(exe), "run", "--project-dir", str(proj), "--profiles-dir", str(proj)]
        subprocess.run(dbt_cmd, check=True, capture_output=True)
        dtimes = []
        for _ in range(3):
            started = time.perf_counter()
            subprocess.run(dbt_cmd, check=True, capture_output=True)
            dtimes.append(time.perf_counter() - started)
        out["dbt_run_seconds"] = round(sorted(dtimes)[1], 2)
        out["dbt_over_lakewrap"] = round(out["dbt_run_seconds"] / out["lakewrap_run_seconds"], 2)
    print(json.dumps(out), flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", type=int, default=64)
    ap.add_argument("--rows-per-day", type=int, default=2000)
    ap.add_argument("--no-postgres", action="store_true")
    ap.add_argument("--dbt", action="store_true", help="also time `dbt run` of the 50-model DAG")
    ap.add_argument("--work", type=Path, help="work folder (default: a temporary one)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="lakewrap-backfill-"))
    work.mkdir(parents=True, exist_ok=True)
    report = {"partitions": args.partitions, "models": 3, "cores": len(os.sched_getaffinity(0)),
              "load_average": os.getloadavg(),
              "backfill": part_a(work, args.partitions, args.rows_per_day, not args.no_postgres),
              "overhead": part_b(work, args.dbt)}
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
