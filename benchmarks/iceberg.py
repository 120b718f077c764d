"""lakewrap on Iceberg (both write paths) against pyiceberg's ``upsert()`` and the DuckLake run.

Workload: ``raw.orders`` (order_id, customer_id, amount DECIMAL(18,2), status, created_at,
updated_at) over 90 days, N rows, in an Iceberg lake (pyiceberg SqlCatalog on SQLite, local
warehouse) and in a DuckLake (DuckDB-file catalog), both built by the same DuckDB SQL. Then:

- merge: ``raw.delta`` holds 1% of the orders (``--delta-percent``) with a new status and amount,
  plus N/90 new orders;
  the model ``-- unique_key order_id`` over ``raw.delta`` merges it into a target that holds all
  N orders (built by the same model's first run over the full source). Measured: lakewrap on
  Iceberg (DuckDB computes the matched and new rows, one pyiceberg overwrite by key), lakewrap on
  Iceberg through write path ``sql`` (DuckDB's ``MERGE INTO`` through a REST catalog: the test
  adapter of ``tests/rest_adapter.py`` over a SqlCatalog, in this process), the same model on
  DuckLake (MERGE INTO), and pyiceberg's ``table.upsert(delta, join_cols=["order_id"])`` on an
  identical copy of the Iceberg target.
- partition replace: ``partitioned daily key=created_at``, re-running day 90 (one pyiceberg
  overwrite of the day vs DuckLake DELETE + INSERT).
- full rebuild: ``materialized table`` over the whole source.

Times are the materialization's own seconds (``Result.seconds``: read, compute, commit and state;
not the process start), the median of ``--reps`` runs; each rep re-runs the same materialization
(merge and replace are idempotent, so every rep does the same work on the same data).

Usage:
    python benchmarks/iceberg.py --rows 1000000 --reps 3
    python benchmarks/iceberg.py --quick           # 100k rows, 2 reps
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

NOW = datetime(2024, 6, 1, tzinfo=timezone.utc)
TESTS = Path(__file__).resolve().parent.parent / "tests"

SOURCE = """
SELECT
    i::BIGINT AS order_id,
    (i % 997)::INTEGER AS customer_id,
    CAST((i % 10000) / 100.0 AS DECIMAL(18, 2)) AS amount,
    ['placed', 'shipped', 'returned'][1 + i % 3] AS status,
    TIMESTAMP '2024-01-01' + INTERVAL (i % 90) DAY + INTERVAL (i % 86400) SECOND AS created_at,
    TIMESTAMP '2024-01-01' + INTERVAL (i % 90) DAY + INTERVAL (i % 86400) SECOND AS updated_at
FROM range({n}) t(i)
"""
DELTA = """
SELECT order_id, customer_id, amount + 1 AS amount, 'shipped' AS status, created_at,
       TIMESTAMP '2024-04-01' AS updated_at
FROM ({source}) WHERE order_id % 100 < {percent}
UNION ALL
SELECT ({n} + i)::BIGINT, (i % 997)::INTEGER, CAST(1.5 AS DECIMAL(18, 2)), 'placed',
       TIMESTAMP '2024-03-31' + INTERVAL (i % 86400) SECOND, TIMESTAMP '2024-03-31' + INTERVAL (i % 86400) SECOND
FROM range({n} // 90) t(i)
"""
MODELS = {
    "sales/merged.sql": "-- materialized incremental\n-- unique_key order_id\n"
                        "SELECT order_id, customer_id, amount, status, created_at, updated_at FROM raw.delta\n",
    "sales/daily.sql": "-- materialized incremental\n-- partitioned daily key=created_at\n"
                       "SELECT order_id, customer_id, amount, status, created_at, updated_at FROM raw.orders\n"
                       "WHERE created_at >= $partition_start AND created_at < $partition_end\n",
    "sales/full.sql": "-- materialized table\nSELECT order_id, customer_id, amount, status, created_at, updated_at "
                      "FROM raw.orders\n",
}


def arrow(sql: str) -> Any:
    import duckdb

    con = duckdb.connect()
    try:
        return con.execute(sql).to_arrow_table()
    finally:
        con.close()


def make_project(root: Path, substrate: str, toml: str | None = None) -> None:
    root.mkdir(parents=True)
    (root / "lakewrap.toml").write_text(toml or f'[lake]\nsubstrate = "{substrate}"\n')
    for rel, text in MODELS.items():
        (root / "models" / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / "models" / rel).write_text(text)


def load_iceberg(root: Path, tables: dict[str, Any]) -> None:
    from lakewrap.execute.iceberg import IcebergLake

    lake = IcebergLake.open(root)
    lake.ensure_namespace("raw")
    for name, data in tables.items():
        table = lake.load(f"raw.{name}")
        if table is None:
            lake.catalog().create_table(("raw", name), schema=data.schema).append(data)
        else:
            table.overwrite(data)


def load_ducklake(root: Path, tables: dict[str, Any]) -> None:
    from lakewrap.execute.lake import Lake

    lake = Lake.open(root)
    con = lake.connect()
    try:
        con.execute("CREATE SCHEMA IF NOT EXISTS raw")
        for name, data in tables.items():
            con.register("__data", data)
            con.execute(f"CREATE OR REPLACE TABLE raw.{name} AS SELECT * FROM __data")
            con.unregister("__data")
    finally:
        lake.close(con)


def run(root: Path, selector: str, partition: str | None = None) -> float:
    from lakewrap.runner import run_project

    report = run_project(root, [selector], partition=partition, now=NOW)
    (result,) = report.results
    assert result.status == "success", result.error
    return float(result.seconds)


def median(fn: Callable[[], float], reps: int) -> float:
    return statistics.median(fn() for _ in range(reps))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-upsert", action="store_true", help="skip pyiceberg upsert() (slow at 1M rows)")
    parser.add_argument("--delta-percent", type=int, default=1, help="orders updated by the merge's delta, in %%")
    parser.add_argument("--merge-only", action="store_true", help="measure the merge only")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    n, reps = (100_000, 2) if args.quick else (args.rows, args.reps)
    source = SOURCE.format(n=n)
    orders = arrow(source)
    delta = arrow(DELTA.format(source=source, n=n, percent=args.delta_percent))
    out: dict[str, Any] = {"rows": n, "delta_rows": delta.num_rows, "delta_percent": args.delta_percent, "reps": reps}
    with tempfile.TemporaryDirectory(prefix="lakewrap-bench-ice-") as tmp, ExitStack() as stack:
        work = Path(tmp)
        ice, icesql, duck = work / "iceberg", work / "iceberg_sql", work / "ducklake"
        sys.path.insert(0, str(TESTS))
        from icehouse_sql import rest_toml, start_rest

        uri, _ = start_rest(work, stack)
        make_project(ice, "iceberg")
        make_project(icesql, "iceberg", rest_toml(uri))
        make_project(duck, "ducklake")
        paths = {"lakewrap_iceberg": ice, "lakewrap_iceberg_sql": icesql, "lakewrap_ducklake": duck}
        for root, load in ((ice, load_iceberg), (icesql, load_iceberg), (duck, load_ducklake)):
            load(root, {"orders": orders, "delta": orders})  # the merge target starts as every order
            run(root, "sales.merged")
            load(root, {"delta": delta})

        def each(selector: str, partition: str | None = None) -> dict[str, float]:
            return {name: median(lambda r=root: run(r, selector, partition), reps)  # type: ignore[misc]
                    for name, root in paths.items()}

        out["merge"] = each("sales.merged")
        if not args.no_upsert:
            from lakewrap.execute.iceberg import IcebergLake

            lake = IcebergLake.open(ice)
            lake.ensure_namespace("bench")

            def upsert() -> float:
                if lake.load("bench.upsert") is not None:
                    lake.catalog().drop_table(("bench", "upsert"))
                target = lake.catalog().create_table(("bench", "upsert"), schema=orders.schema)
                target.append(orders)
                start = time.perf_counter()
                target.upsert(delta, join_cols=["order_id"])
                return time.perf_counter() - start

            out["merge"]["pyiceberg_upsert"] = median(upsert, reps)
        if not args.merge_only:
            out["partition_replace"] = each("sales.daily", "2024-03-30")
            out["full_rebuild"] = each("sales.full")
    merge = out["merge"]
    if "pyiceberg_upsert" in merge:
        out["goal_merge_20x_faster_than_upsert"] = merge["pyiceberg_upsert"] / merge["lakewrap_iceberg"] >= 20
        out["goal_sql_merge_20x_faster_than_upsert"] = merge["pyiceberg_upsert"] / merge["lakewrap_iceberg_sql"] >= 20
    out["goal_merge_within_3x_of_ducklake"] = merge["lakewrap_iceberg"] / merge["lakewrap_ducklake"] <= 3
    out["goal_sql_merge_within_3x_of_ducklake"] = merge["lakewrap_iceberg_sql"] / merge["lakewrap_ducklake"] <= 3
    text = json.dumps(out, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
