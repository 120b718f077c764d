"""Late data: ``run --stale`` vs re-running a 7-day lookback vs a full backfill.

A project of two daily models over 365 partitions (``events``: delete+insert from a raw table;
``events_daily``: a per-day aggregate of ``events``) is backfilled once. Then, for each rep, late
rows land in 3 random past partitions of the raw table and one strategy repairs the lake:

* ``stale``: ``lakewrap run --stale`` (change-feed detection, then the stale partitions only);
* ``lookback7``: ``lakewrap run --start D-6 --end D`` for the last 7 days, as a scheduler with a
  7-day lookback would;
* ``full``: ``lakewrap run --start <first> --end <last>`` (every partition of both models).

For each strategy: wall time of the whole ``run_project`` call (median, min-max over reps), the
materializations it ran, and how many of the 3 late partitions it repaired (read afterwards with
the same stale detection, and checked against the raw table's per-day counts). Between reps the
lake is brought back to a clean state with an unmeasured ``--stale`` run.

``--substrate iceberg`` runs the same on an embedded Iceberg lake (pyiceberg SqlCatalog): the raw
table is written with pyiceberg (one append per late partition), and detection alone is timed two
ways, the snapshot diff ``run --stale`` uses (the files added and removed since each pin) and a
full diff of the raw table's rows at the pin against its rows now (what delete files fall back to).

Usage:
    python benchmarks/stale.py [--days 365] [--rows-per-day 200] [--reps 3] [--full-reps 1] [--out results.json]
    python benchmarks/stale.py --substrate iceberg --days 90
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from datetime import date, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FIRST = date(2024, 1, 1)

MODELS = {
    "main/events.sql": "-- materialized incremental\n-- partitioned daily key=ts start=2024-01-01\n"
                       "SELECT ts, id, v FROM raw.src WHERE ts >= $partition_start AND ts < $partition_end\n",
    "main/events_daily.sql": "-- materialized incremental\n-- partitioned daily key=day start=2024-01-01\n"
                             "SELECT CAST(date_trunc('day', ts) AS TIMESTAMP) AS day, count(*) AS n, "
                             "CAST(sum(v) AS BIGINT) AS v FROM main.events "
                             "WHERE ts >= $partition_start AND ts < $partition_end GROUP BY ALL\n",
}


SOURCE = ("SELECT TIMESTAMP '2024-01-01' + to_microseconds((range * (86400000000 // ?))::BIGINT) AS ts, "
          "range::BIGINT AS id, (range % 7)::INTEGER AS v FROM range(? * ?)")
LATE = "SELECT CAST(? AS TIMESTAMP) + to_minutes(range) AS ts, ? + range AS id, 1 AS v FROM range(5)"
ICEBERG = False  # --substrate iceberg


def sql(root: Path, statement: str, params: Any = None) -> list[tuple[Any, ...]]:
    """One statement on the lake; on Iceberg, over views of its tables (read only)."""
    if ICEBERG:
        from lakewrap.execute.iceberg import IcebergLake

        ice = IcebergLake.open(root)
        con = ice.connect()
        try:
            with ice.scratch(con, ice.tables()) as (cursor, _):
                cur = cursor.execute(statement, params) if params is not None else cursor.execute(statement)
                return list(cur.fetchall())
        finally:
            con.close()
    from lakewrap.execute.lake import Lake

    lake = Lake.open(root)
    con = lake.connect()
    try:
        cur = con.execute(statement, params) if params is not None else con.execute(statement)
        return list(cur.fetchall()) if cur.description else []
    finally:
        lake.close(con)


def append_iceberg(root: Path, select: str, params: list[Any], create: bool = False) -> None:
    """Rows computed by DuckDB, appended to ``raw.src`` with pyiceberg (created first if ``create``)."""
    import duckdb

    from lakewrap.execute.iceberg import IcebergLake

    rows = duckdb.connect().execute(select, params).to_arrow_table()
    lake = IcebergLake.open(root)
    if create:
        lake.ensure_namespace("raw")
        lake.catalog().create_table(("raw", "src"), schema=rows.schema)
    lake.load("raw.src").append(rows)


def make_project(root: Path, days: int, rows_per_day: int) -> None:
    for rel, text in MODELS.items():
        path = root / "models" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    if ICEBERG:
        (root / "lakewrap.toml").write_text('[lake]\nsubstrate = "iceberg"\n')
        append_iceberg(root, SOURCE, [rows_per_day, days, rows_per_day], create=True)
        return
    sql(root, "CREATE SCHEMA IF NOT EXISTS raw")
    sql(root, "CREATE TABLE raw.src AS " + SOURCE, [rows_per_day, days, rows_per_day])


def land_late_rows(root: Path, rng: random.Random, days: int, next_id: int) -> tuple[list[str], int]:
    """Late rows in 3 random past partitions (not among the last 7 days)."""
    picked = sorted(rng.sample(range(days - 7), 3))
    values = [(FIRST + timedelta(days=d)) for d in picked]
    for i, day in enumerate(values):
        if ICEBERG:
            append_iceberg(root, LATE, [day.isoformat(), next_id + 10 * i])
        else:
            sql(root, "INSERT INTO raw.src " + LATE, [day.isoformat(), next_id + 10 * i])
    return [d.isoformat() for d in values], next_id + 100


def stale_now(root: Path) -> set[str]:
    import lakewrap

    return {p for s in lakewrap.Project(root).status() for p in s.stale}


def consistent(root: Path, end: date) -> bool:
    """events_daily's counts equal the raw table's per day before ``end`` (the lake is fully repaired)."""
    got = sql(root, "SELECT CAST(day AS DATE), n FROM main.events_daily ORDER BY 1")
    want = sql(root, "SELECT CAST(ts AS DATE), count(*) FROM raw.src WHERE ts < CAST(? AS TIMESTAMP) "
                     "GROUP BY 1 ORDER BY 1", [end.isoformat()])
    return got == want


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--days", type=int, default=365)
    parser.add_argument("--rows-per-day", type=int, default=200)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--full-reps", type=int, default=1)
    parser.add_argument("--substrate", choices=("ducklake", "iceberg"), default="ducklake")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    import lakewrap

    global ICEBERG
    ICEBERG = args.substrate == "iceberg"

    last_day = FIRST + timedelta(days=args.days - 1)
    end = last_day + timedelta(days=1)
    load = os.getloadavg()
    rng = random.Random(7)
    out: dict[str, Any] = {"substrate": args.substrate, "days": args.days, "rows_per_day": args.rows_per_day,
                           "load_before": load, "strategies": {}}
    with tempfile.TemporaryDirectory(prefix="lakewrap-stale-") as tmp:
        root = Path(tmp)
        make_project(root, args.days, args.rows_per_day)
        project = lakewrap.Project(root)
        started = time.perf_counter()
        report = project.run(start=FIRST.isoformat(), end=last_day.isoformat())
        assert report.ok, [r.error for r in report.results if r.error][:3]
        out["initial_backfill_seconds"] = round(time.perf_counter() - started, 2)
        out["initial_materializations"] = len(report.results)
        print(f"backfill of {len(report.results)} materializations: {out['initial_backfill_seconds']} s", flush=True)
        next_id = 10_000_000
        week = ((last_day - timedelta(days=6)).isoformat(), last_day.isoformat())
        plans = {
            "stale": lambda: project.run(stale=True),
            "lookback7": lambda: project.run(start=week[0], end=week[1]),
            "full": lambda: project.run(start=FIRST.isoformat(), end=last_day.isoformat()),
        }
        for name, run in plans.items():
            times: list[float] = []
            steps: list[int] = []
            repaired: list[int] = []
            for _ in range(args.full_reps if name == "full" else args.reps):
                late, next_id = land_late_rows(root, rng, args.days, next_id)
                t0 = time.perf_counter()
                report = run()
                times.append(time.perf_counter() - t0)
                assert report.ok, [r.error for r in report.results if r.error][:3]
                steps.append(len(report.results))
                left = stale_now(root)
                repaired.append(sum(1 for d in late if d not in left))
                if name != "lookback7":
                    assert consistent(root, end), f"{name} left the lake inconsistent"
                else:
                    project.run(stale=True)  # unmeasured repair before the next rep
                    assert consistent(root, end)
                print(f"{name}: {times[-1]:.2f} s, {steps[-1]} materializations, {repaired[-1]}/3 late partitions "
                      f"repaired (load {os.getloadavg()[0]:.1f})", flush=True)
            out["strategies"][name] = {
                "median_seconds": round(statistics.median(times), 3), "min": round(min(times), 3),
                "max": round(max(times), 3), "reps": len(times), "materializations": steps,
                "late_partitions_repaired_of_3": repaired}
        # detection alone, after late rows in 3 partitions
        late, next_id = land_late_rows(root, rng, args.days, next_id)
        proj = _load(root)
        if ICEBERG:
            out.update(detect_iceberg_both_ways(root, proj))
        else:
            out.update(detect_ducklake(root, proj))
    out["load_after"] = os.getloadavg()
    print(json.dumps(out, indent=2, default=str))
    if args.out:
        args.out.write_text(json.dumps(out, indent=2, default=str))


def detect_ducklake(root: Path, proj: Any) -> dict[str, Any]:
    from lakewrap.execute.lake import Lake
    from lakewrap.substrates.ducklake.feed import detect

    lake = Lake.open(root, read_only=True)
    con = lake.connect()
    try:
        t0 = time.perf_counter()
        found = detect(con, lake.alias, proj, proj.select(()))
        return {"detect_seconds": round(time.perf_counter() - t0, 3),
                "detected": {k: v.values() for k, v in found.items()}}
    finally:
        lake.close(con)


def detect_iceberg_both_ways(root: Path, proj: Any) -> dict[str, Any]:
    """Detection with the snapshot (file) diff, then with every pin forced to a full row diff."""
    from contextlib import nullcontext
    from unittest import mock

    from lakewrap.stale import detect_at
    from lakewrap.substrates.iceberg import feed

    out: dict[str, Any] = {}
    for how in ("files", "full"):
        force = mock.patch.object(feed, "file_diff", lambda *a, **k: feed.Diff(deletes=True))
        with force if how == "full" else nullcontext():
            t0 = time.perf_counter()
            found = detect_at(root, proj, proj.select(()))
            out[f"detect_seconds_{how}"] = round(time.perf_counter() - t0, 3)
        out[f"detected_{how}"] = {k: v.values() for k, v in found.items()}
    assert out["detected_files"] == out["detected_full"]
    return out


def _load(root: Path) -> Any:
    from lakewrap.compile import load_project

    return load_project(root, None)


if __name__ == "__main__":
    main()
