"""A full rebuild of a table model whose columns did not change: ``CREATE OR REPLACE TABLE AS`` vs
``DELETE`` + ``INSERT`` (issue 20, item 4).

Both variants run in one transaction on one DuckLake (a DuckDB-file catalog), from the same source
SELECT, and leave the same rows: ``CREATE OR REPLACE`` gives the table a new table id (a schema
change in DuckLake's catalog), ``DELETE`` + ``INSERT BY NAME`` keeps it. The reps are interleaved
(ctas, di, ctas, di, ...) so a change of load hits both alike; the figures are medians. The load
average is printed before and after.

Usage:
    python benchmarks/rebuild_floor.py [--rows 10,1000000,10000000] [--reps 5] [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any


def measure(rows: int, reps: int) -> dict[str, Any]:
    from lakewrap.execute.lake import Lake

    src = (f"SELECT range::BIGINT AS id, 'name' || (range % 1000) AS name, (range % 97)::DOUBLE AS v, "
           f"TIMESTAMP '2024-01-01' + to_seconds(range) AS ts FROM range({rows})")
    times: dict[str, list[float]] = {"create_or_replace": [], "delete_insert": []}
    with tempfile.TemporaryDirectory(prefix="lakewrap-rebuild-floor-") as tmp:
        lake = Lake.open(Path(tmp))
        con = lake.connect()
        con.execute("CREATE SCHEMA m")
        con.execute(f"CREATE TABLE m.t AS {src}")
        variants = {
            "create_or_replace": [f"CREATE OR REPLACE TABLE m.t AS {src}"],
            "delete_insert": ["DELETE FROM m.t", f"INSERT INTO m.t BY NAME {src}"],
        }
        for _ in range(reps):
            for label, statements in variants.items():
                t0 = time.perf_counter()
                con.execute("BEGIN")
                for st in statements:
                    con.execute(st)
                con.execute("COMMIT")
                times[label].append(time.perf_counter() - t0)
                assert con.execute("SELECT count(*) FROM m.t").fetchone()[0] == rows
        lake.close(con)
    med = {k: round(statistics.median(v), 4) for k, v in times.items()}
    return {"rows": rows, "reps": reps, "median_s": med,
            "ratio_di_over_ctas": round(med["delete_insert"] / med["create_or_replace"], 2),
            "all_s": {k: [round(x, 4) for x in v] for k, v in times.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="10,1000000,10000000")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out")
    args = ap.parse_args()
    out: dict[str, Any] = {"load_before": os.getloadavg(), "results": []}
    print(f"load average before: {out['load_before']}", flush=True)
    for n in (int(x) for x in args.rows.split(",")):
        res = measure(n, args.reps)
        out["results"].append(res)
        print(f"{n:>10} rows: CREATE OR REPLACE {res['median_s']['create_or_replace']} s, "
              f"DELETE+INSERT {res['median_s']['delete_insert']} s (x{res['ratio_di_over_ctas']})", flush=True)
    out["load_after"] = os.getloadavg()
    print(f"load average after: {out['load_after']}", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
