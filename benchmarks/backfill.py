"""A 64-partition × 3-model backfill on one DuckLake, and what 2 workers buy on a PostgreSQL catalog.

A. **Same lake** (``samelake.py``: a DuckDB-file catalog, and with ``--catalog postgres`` a
   throw-away PostgreSQL server as ``tests/servers.py`` starts it). Three daily models over
   ``raw.src`` (ts, id, v; ``--rows-per-day`` rows a day): ``events`` (delete+insert of the day
   from ``raw.src``), ``events_daily`` (a per-day aggregate of ``events``, delete+insert on
   ``day``) and ``events_merge`` (the day's raw rows merged on ``id``). Backfilled over
   ``--partitions`` days by

   - ``lakewrap``: ``lakewrap run --start D1 --end D64 --batch-size 1``, per partition (each
     model and day its own window; group commit on); ``lakewrap per txn``, the same with
     ``--no-group`` (one transaction per model and day, as lakewrap ran a backfill before group
     commit and range batches); and ``lakewrap batch=N`` (``--batch-size N``) for each
     ``--batch-sizes`` value, when the ``lakewrap run`` of this checkout has that option;
   - ``dbt``: ``dbt run --event-time-start D1 --event-time-end D65`` with the three models as
     dbt-duckdb ``microbatch`` models (``batch_size='day'``, threads 1). dbt has no merging
     microbatch: ``events_merge`` is a microbatch too (each day's rows replaced), the same rows
     here because an ``id`` lives in one day;
   - ``floor``: one process, one transaction: ``DELETE`` of the 64 days + ``INSERT`` for each of
     the two delete+insert models and one ``MERGE`` of the 64 days' rows (what a range backfill
     writes); and ``floor-days``, the same process and transaction running the per-day statement
     pairs (192 of them) as lakewrap's per-partition steps do.

   All write partitioned targets (year/month/day, as lakewrap lays them out). Each first builds its
   tables once (untimed); then ``--reps`` interleaved reps re-backfill the same days (the same
   work every rep). After rep 1 every target's row count and ``sum(v)`` are compared across tools.

B. **Parallelism** (``--parallel``, PostgreSQL catalog): three *independent* daily models
   (``events_daily`` reads ``raw.src`` instead of ``events``) backfilled by lakewrap serially
   (``--workers 1``) and with 2 workers: ``--executor thread``, ``--executor process`` and
   ``--executor dask`` (a LocalCluster). Interleaved reps, each on the lake left by the last (the
   same work every time); the retries (attempts beyond one per step) and the first retried
   errors come from ``target/run_results.json``, which is the run log's record of the run.

Usage:
    python benchmarks/backfill.py --catalog duckdb,postgres --reps 3 [--parallel] [--out results.json]
    python benchmarks/backfill.py --parts same --catalog duckdb --partitions 8 --reps 1   # smoke check
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
from datetime import date, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from samelake import SameLake, breakdown_line, catalog_servers, fmt, interleave, load, summary, tool_versions

FIRST = date(2024, 1, 1)
PART = {"ts": "year(ts), month(ts), day(ts)", "day": "year(day), month(day), day(day)"}
WINDOW = "WHERE ts >= $partition_start AND ts < $partition_end"


def lakewrap_models(independent: bool) -> dict[str, str]:
    daily_from = "raw.src" if independent else "lw.events"
    return {
        "events": "-- materialized incremental\n-- partitioned daily key=ts start=2024-01-01\n"
                  f"SELECT ts, id, v FROM raw.src {WINDOW}\n",
        "events_daily": "-- materialized incremental\n-- partitioned daily key=day start=2024-01-01\n"
                        "SELECT CAST(date_trunc('day', ts) AS TIMESTAMP) AS day, count(*) AS n, "
                        f"CAST(sum(v) AS BIGINT) AS v FROM {daily_from} {WINDOW} GROUP BY ALL\n",
        "events_merge": "-- materialized incremental\n-- partitioned daily key=ts start=2024-01-01\n"
                        f"-- unique_key id\nSELECT ts, id, v * 2 AS v FROM raw.src {WINDOW}\n",
    }


def dbt_files() -> dict[str, str]:
    def cfg(event_time: str) -> str:
        part = ", ".join(repr(p.strip()) for p in PART[event_time].split(","))
        return ("{{ config(materialized='incremental', incremental_strategy='microbatch', "
                f"event_time='{event_time}', batch_size='day', begin='2024-01-01', partitioned_by=[{part}]) }}}}\n")

    return {
        "models/sources.yml": "version: 2\nsources:\n  - name: raw\n    database: lake\n    schema: raw\n"
                              "    tables:\n      - name: src\n        config:\n          event_time: ts\n",
        "models/events.sql": cfg("ts") + "select ts, id, v from {{ source('raw', 'src') }}\n",
        "models/events_daily.sql": cfg("day") + "select cast(date_trunc('day', ts) as timestamp) as day, "
                                                "count(*) as n, cast(sum(v) as bigint) as v "
                                                "from {{ ref('events') }} group by all\n",
        "models/events_merge.sql": cfg("ts") + "select ts, id, v * 2 as v from {{ source('raw', 'src') }}\n",
    }


def raw_sql(rows_per_day: int, days: int) -> list[str]:
    return ["CREATE SCHEMA IF NOT EXISTS raw",
            "CREATE OR REPLACE TABLE raw.src AS SELECT TIMESTAMP '2024-01-01' + to_microseconds("
            f"CAST(i * (86400000000 // {rows_per_day}) AS BIGINT)) AS ts, CAST(i AS BIGINT) AS id, "
            f"CAST(i % 97 AS BIGINT) AS v FROM range({rows_per_day * days}) AS r(i)"]


def _ts(d: date) -> str:
    return f"TIMESTAMP '{d.isoformat()}'"


def floor_sql(days: int, first: bool, per_day: bool) -> list[str]:
    """The hand-written backfill: the whole range in one statement pair per model, or day by day."""
    out = []
    if first:
        out += ["CREATE SCHEMA IF NOT EXISTS hand",
                "CREATE TABLE hand.events (ts TIMESTAMP, id BIGINT, v BIGINT)",
                "CREATE TABLE hand.events_daily (day TIMESTAMP, n BIGINT, v BIGINT)",
                "CREATE TABLE hand.events_merge (ts TIMESTAMP, id BIGINT, v BIGINT)"]
        out += [f"ALTER TABLE hand.{t} SET PARTITIONED BY ({PART[k]})"
                for t, k in (("events", "ts"), ("events_daily", "day"), ("events_merge", "ts"))]
    spans = ([(FIRST + timedelta(days=i), FIRST + timedelta(days=i + 1)) for i in range(days)] if per_day
             else [(FIRST, FIRST + timedelta(days=days))])
    steps: dict[str, list[str]] = {"events": [], "events_daily": [], "events_merge": []}
    for lo, hi in spans:
        w = f"ts >= {_ts(lo)} AND ts < {_ts(hi)}"
        steps["events"] += [f"DELETE FROM hand.events WHERE {w}",
                            f"INSERT INTO hand.events SELECT ts, id, v FROM raw.src WHERE {w}"]
        steps["events_daily"] += [f"DELETE FROM hand.events_daily WHERE day >= {_ts(lo)} AND day < {_ts(hi)}",
                                  "INSERT INTO hand.events_daily SELECT CAST(date_trunc('day', ts) AS TIMESTAMP) "
                                  "AS day, count(*) AS n, CAST(sum(v) AS BIGINT) AS v FROM hand.events "
                                  f"WHERE {w} GROUP BY ALL"]
        steps["events_merge"] += [f"MERGE INTO hand.events_merge AS t USING (SELECT ts, id, v * 2 AS v FROM raw.src "
                                  f"WHERE {w}) AS s ON t.id = s.id WHEN MATCHED THEN UPDATE SET ts = s.ts, v = s.v "
                                  "WHEN NOT MATCHED THEN INSERT (ts, id, v) VALUES (s.ts, s.id, s.v)"]
    return out + steps["events"] + steps["events_daily"] + steps["events_merge"]


def check(s: SameLake, schemas: dict[str, str]) -> dict[str, Any]:
    """Rows and sum(v) of every target per tool: all equal?"""
    tables = ("events", "events_daily", "events_merge")
    got = iter(s.sql([f"SELECT count(*), sum(v) FROM {schema}.{t}" for t in tables for schema in schemas.values()]))
    per = {t: {tool: list(next(got)[0]) for tool in schemas} for t in tables}
    differ = {t: v for t, v in per.items() if len({json.dumps(x, default=str) for x in v.values()}) > 1}
    return {"agree": not differ, "differ": differ, "counts": per}


def has_batch_size(lakewrap: str) -> bool:
    out = subprocess.run([lakewrap, "run", "--help"], capture_output=True, text=True).stdout
    return "--batch-size" in out


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def write_lakewrap(s: SameLake, independent: bool) -> None:
    for name, text in lakewrap_models(independent).items():
        path = s.lw / "models" / "lw" / f"{name}.sql"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def same_lake(work: Path, make: Any, catalog: str, days: int, rows: int, reps: int, tools: list[str],
              batch_sizes: list[int], verbose: bool) -> dict[str, Any]:
    root = work / f"backfill-{catalog}"
    subprocess.run(["rm", "-rf", str(root)], check=True)
    s = SameLake(root, make(catalog, "backfill"), verbose)
    s.create(work, raw_sql(rows, days), "dbt" in tools)
    write_lakewrap(s, independent=False)
    if "dbt" in tools:
        for rel, text in dbt_files().items():
            (s.dbt_dir / rel).parent.mkdir(parents=True, exist_ok=True)
            (s.dbt_dir / rel).write_text(text)
    start, end = FIRST.isoformat(), (FIRST + timedelta(days=days - 1)).isoformat()
    dbt_end = (FIRST + timedelta(days=days)).isoformat()
    runs = {}
    if "lakewrap" in tools:
        # "lakewrap": per partition (--batch-size 1 where range batches exist), then each batch size
        batch = batch_sizes if has_batch_size(s.bench.lakewrap) else []
        per = ("--batch-size", "1") if batch else ()
        runs["lakewrap"] = lambda: s.lakewrap("--start", start, "--end", end, *per)
        if batch:  # per partition, one transaction each: how lakewrap ran a backfill before group commit
            runs["lakewrap per txn"] = lambda: s.lakewrap("--start", start, "--end", end, *per, "--no-group")
        for n in batch:
            runs[f"lakewrap batch={n}"] = lambda n=n: s.lakewrap("--start", start, "--end", end, "--batch-size", str(n))
    if "dbt" in tools:
        runs["dbt"] = lambda: s.dbt_cmd("run", "--event-time-start", start, "--event-time-end", dbt_end)
    if "floor" in tools:
        runs["floor"] = lambda: s.floor(floor_sql(days, first=False, per_day=False))
        runs["floor-days"] = lambda: s.floor(floor_sql(days, first=False, per_day=True), "floor-days")
    log(f"{catalog} backfill {days} days × 3 models: first builds (untimed), load {load()}")
    if "floor" in tools:
        s.floor(floor_sql(days, first=True, per_day=False), "floor-first")
    if "lakewrap" in tools:
        runs["lakewrap"]()
    if "dbt" in tools:
        runs["dbt"]()
    started = load()
    samples = interleave(reps, runs, None, log)
    schemas = {k: v for k, v in (("lakewrap", "lw"), ("dbt", "dbt"), ("floor", "hand")) if k in tools}
    verdict = check(s, schemas)
    where = s.breakdown() if "lakewrap" in tools else None
    log(f"  check: {'all targets agree' if verdict['agree'] else verdict['differ']}")
    return {"part": "same lake", "catalog": catalog, "partitions": days, "rows_per_day": rows,
            "load_start": started, "load_end": load(), "summary": summary(samples), "check": verdict,
            "lakewrap_breakdown": where,
            "batch_size_option": any(k.startswith("lakewrap batch") for k in runs),
            "samples": samples}


def parallel(work: Path, make: Any, days: int, rows: int, reps: int, verbose: bool,
             batch_size: int | None = None) -> dict[str, Any]:
    root = work / "parallel-postgres"
    subprocess.run(["rm", "-rf", str(root)], check=True)
    s = SameLake(root, make("postgres", "parallel"), verbose)
    s.create(work, raw_sql(rows, days), dbt=False)
    write_lakewrap(s, independent=True)
    start, end = FIRST.isoformat(), (FIRST + timedelta(days=days - 1)).isoformat()
    rng: tuple[str, ...] = ("--start", start, "--end", end)
    if batch_size is not None:
        rng += ("--batch-size", str(batch_size))
    runs = {"serial": lambda: s.lakewrap(*rng, "--workers", "1", "--executor", "thread"),
            "2 threads": lambda: s.lakewrap(*rng, "--workers", "2", "--executor", "thread"),
            "2 processes": lambda: s.lakewrap(*rng, "--workers", "2", "--executor", "process"),
            "2 dask workers": lambda: s.lakewrap(*rng, "--workers", "2", "--executor", "dask")}
    log(f"postgres parallel backfill {days} days × 3 independent models: first build, load {load()}")
    runs["serial"]()
    before = s.sql(["SELECT count(*), sum(v) FROM lw.events", "SELECT count(*), sum(v) FROM lw.events_daily",
                    "SELECT count(*), sum(v) FROM lw.events_merge"])
    started = load()
    samples = interleave(reps, runs, None, log)
    after = s.sql(["SELECT count(*), sum(v) FROM lw.events", "SELECT count(*), sum(v) FROM lw.events_daily",
                   "SELECT count(*), sum(v) FROM lw.events_merge"])
    sm = summary(samples)
    errors = {k: [e for x in v for e in x.get("attempt_errors", [])][:3] for k, v in samples.items()}
    return {"part": "parallel", "catalog": "postgres", "partitions": days, "rows_per_day": rows,
            "batch_size": batch_size,
            "load_start": started, "load_end": load(), "summary": sm, "retry_errors": errors,
            "same_tables_after": before == after, "samples": samples}


def markdown(results: list[dict[str, Any]]) -> str:
    lines = []
    for r in results:
        sm = r["summary"]
        tools = [k for k in sm if k not in ("ratios", "load")]
        ref = "serial" if r["part"] == "parallel" else "lakewrap"
        lines += [f"\n{r['part']}, {r['catalog']} catalog, {r['partitions']} partitions × 3 models"
                  f"{'' if r.get('batch_size') is None else ' (--batch-size ' + str(r['batch_size']) + ')'}, "
                  f"{r['rows_per_day']} rows a day; load {r['load_start']} → {r['load_end']} (1/5/15 min)\n",
                  f"| run | reps | process s, median (min–max) | CPU s | SQL s (floor) | retries | {ref} / this |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for t in tools:
            x = sm[t]
            ratio = fmt(sm["ratios"][f"{ref}/{t}"], 2) if f"{ref}/{t}" in sm["ratios"] else "1"
            lines.append(f"| {t} | {x['reps']} | {fmt(x['process'], 2)} | {fmt(x['cpu'], 2)} | "
                         f"{fmt(x['sql'], 3) if 'sql' in x else '–'} | {x.get('retries', '–')} | {ratio} |")
        if "check" in r:
            lines.append(f"\ntargets agree across tools: {r['check']['agree']}")
        if r.get("lakewrap_breakdown"):
            lines.append("\n" + breakdown_line(r["lakewrap_breakdown"]))
        if "same_tables_after" in r:
            lines.append(f"\ntables unchanged by the parallel reps: {r['same_tables_after']}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--parts", default="same", help="same, parallel, or both comma-separated")
    ap.add_argument("--parallel", action="store_true", help="also part B (same as --parts same,parallel)")
    ap.add_argument("--catalog", default="duckdb,postgres", help="part A's catalogs: duckdb, postgres")
    ap.add_argument("--partitions", type=int, default=64)
    ap.add_argument("--rows-per-day", type=int, default=2000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--tools", default="lakewrap,dbt,floor")
    ap.add_argument("--batch-sizes", default="64", help="lakewrap --batch-size values, when the option exists")
    ap.add_argument("--parallel-batch-size", type=int, help="part B's --batch-size (default: lakewrap's own)")
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "lakewrap-samelake")
    ap.add_argument("--out", type=Path)
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    parts = args.parts.split(",") + (["parallel"] if args.parallel else [])
    catalogs = args.catalog.split(",") if "same" in parts else []
    work = args.workdir.resolve()
    work.mkdir(parents=True, exist_ok=True)
    tools = args.tools.split(",")
    sizes = [int(x) for x in args.batch_sizes.split(",") if x]
    results: list[dict[str, Any]] = []
    with catalog_servers([*catalogs, *(["postgres"] if "parallel" in parts else [])]) as make:
        for catalog in catalogs:
            results.append(same_lake(work, make, catalog, args.partitions, args.rows_per_day, args.reps, tools,
                                     sizes, args.verbose))
            if args.out:
                args.out.write_text(json.dumps({"results": results}, indent=1, default=str))
        if "parallel" in parts:
            results.append(parallel(work, make, args.partitions, args.rows_per_day, args.reps, args.verbose,
                                    args.parallel_batch_size))
    dbt = str(work / "dbt-venv" / "bin" / "dbt") if "dbt" in tools else None
    report = {"versions": tool_versions(dbt), "python": platform.python_version(), "results": results}
    if args.out:
        args.out.write_text(json.dumps(report, indent=1, default=str))
    print(json.dumps(report["versions"]))
    print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
