"""Stress the thread executor's shared DuckDB instance, with and without ``Lake.statement_lock``.

Why the lock exists: with DuckDB/DuckLake 1.5.5, statements of two cursors of one DuckDB instance
running at the same moment crash the process (a segfault in a DuckLake ``COMMIT`` while another
thread reads a fence table; an abort when cursors of worker threads are closed from another
thread). This script is the reproduction: re-run it when DuckDB or DuckLake is upgraded, and drop
the lock only when ``--no-lock`` survives.

Each loop is a fresh process that seeds a 12-model project (merge, delete+insert, table models,
20,000 source rows) and runs it ``--runs`` times with ``--workers 4`` threads (every third run a
``--full-refresh``, so tables are dropped and created too). A loop's exit code is reported:
0 = fine, -11 = segmentation fault, -6 = abort.

Usage:
    python benchmarks/shared_instance.py [--loops 4] [--runs 30] [--no-lock]
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import tempfile
from pathlib import Path

LOOP = """
import faulthandler, sys
faulthandler.enable()
if sys.argv[1] == "no-lock":
    import contextlib
    import lakewrap.execute.lake as lake_module
    init = lake_module.Lake.__init__
    def without_lock(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.statement_lock = contextlib.nullcontext()
    lake_module.Lake.__init__ = without_lock
from lakewrap.api import Project
project = Project(".")
project.seed()
for i in range(int(sys.argv[2])):
    report = project.run(partition=f"2024-01-{1 + i % 28:02d}", workers=4, executor="thread",
                         full_refresh=i % 3 == 0)
    failed = [r for r in report.results if r.status != "success"]
    if failed:
        print(i, [(r.model, r.status, r.error) for r in failed][:3])
"""


def make_project(root: Path) -> None:
    rng = random.Random(1)
    (root / "seeds" / "raw").mkdir(parents=True)
    (root / "models").mkdir()
    lines = ["order_id,customer_id,amount,status,created_at"]
    for i in range(20000):
        lines.append(f"{i},{rng.randrange(300)},{rng.randrange(1000) / 10},{rng.choice('abc')},"
                     f"2024-01-{1 + rng.randrange(28):02d} {rng.randrange(24):02d}:00:00")
    (root / "seeds" / "raw" / "orders.csv").write_text("\n".join(lines) + "\n")
    for k in range(12):
        where = f"order_id % 12 = {k}"
        body = [
            ("-- materialized table\nSELECT customer_id, status, count(*) AS n, sum(amount) AS s "
             f"FROM raw.orders WHERE {where} GROUP BY ALL\n"),
            ("-- materialized incremental\n-- unique_key customer_id,status\nSELECT customer_id, status, "
             f"count(*) AS n, sum(amount) AS s FROM raw.orders WHERE {where} GROUP BY ALL\n"),
            ("-- materialized incremental\n-- partitioned daily key=created_at\nSELECT order_id, customer_id, "
             "amount, status, created_at FROM raw.orders WHERE created_at >= $partition_start "
             f"AND created_at < $partition_end AND {where}\n"),
            f"-- materialized table\nSELECT status, count(*) AS n FROM raw.orders WHERE {where} GROUP BY ALL\n",
        ][k % 4]
        (root / "models" / f"m{k}.sql").write_text(body)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--loops", type=int, default=4)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--no-lock", action="store_true", help="replace Lake.statement_lock by a no-op")
    args = ap.parse_args()
    codes = []
    for loop in range(args.loops):
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            make_project(root)
            proc = subprocess.run([sys.executable, "-c", LOOP, "no-lock" if args.no_lock else "lock",
                                   str(args.runs)], cwd=root, capture_output=True, text=True)
            codes.append(proc.returncode)
            crash = next((ln for ln in proc.stderr.splitlines() if ln.startswith("Fatal Python error")), "")
            print(f"loop {loop + 1}: exit {proc.returncode} {crash}".rstrip(), flush=True)
    crashed = sum(c != 0 for c in codes)
    print(f"{'without' if args.no_lock else 'with'} the lock: {crashed} of {len(codes)} loops crashed")
    return 1 if crashed else 0


if __name__ == "__main__":
    sys.exit(main())
