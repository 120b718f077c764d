"""`lakewrap run` of a 50-model DAG of table models: one transaction per model (`--no-group`) vs
group commit (the default) vs `--atomic`, each a whole process on the same fresh kind of lake
(DuckLake on a DuckDB-file catalog), reps interleaved, medians reported with the load average.

    python benchmarks/group_commit.py --models 50 --reps 3

The DAG: 40 independent table models reading a 1,000-row seed, then 10 that each read two of
them (two DAG levels). Every rep runs in a lake that already holds the tables (a warm rebuild),
after one untimed run of each mode. Before timing, it checks that the three modes leave the same
tables (each table's rows hashed).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODES = {"no-group": ["--no-group"], "group": [], "atomic": ["--atomic"]}


def lakewrap(*args: str) -> list[str]:
    return [sys.executable, "-c", "from lakewrap.cli import main; main(prog_name='lakewrap')", *args]


def make(root: Path, n: int) -> None:
    (root / "seeds" / "raw").mkdir(parents=True)
    (root / "seeds" / "raw" / "src.csv").write_text(
        "id,v\n" + "".join(f"{i},{i % 97}\n" for i in range(1000)))
    first = n - n // 5
    for i in range(n):
        path = root / "models" / "m" / f"t{i:03d}.sql"
        path.parent.mkdir(parents=True, exist_ok=True)
        if i < first:
            body = f"SELECT id, v * {i} AS w FROM raw.src"
        else:
            a, b = (i * 7) % first, (i * 13 + 1) % first
            body = f"SELECT x.id, x.w + y.w AS w FROM m.t{a:03d} AS x JOIN m.t{b:03d} AS y USING (id)"
        path.write_text(f"-- materialized table\n{body}\n")
    subprocess.run(lakewrap("seed", "--project", str(root)), check=True, capture_output=True)


def digest(root: Path, n: int) -> str:
    out = subprocess.run(lakewrap("query", "--format", "json", "--project", str(root),
                                  " UNION ALL ".join(f"SELECT '{i:03d}' AS t, sum(hash(id, w)) AS h FROM m.t{i:03d}"
                                                     for i in range(n))),
                         check=True, capture_output=True, text=True).stdout
    return hashlib.sha256(json.dumps(sorted(map(str, json.loads(out))), sort_keys=True).encode()).hexdigest()


def timed(root: Path, mode: str) -> float:
    start = time.perf_counter()
    proc = subprocess.run(lakewrap("run", "--project", str(root), *MODES[mode]), capture_output=True, text=True)
    took = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{mode}: {proc.stdout}\n{proc.stderr}")
    return took


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", type=int, default=50)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        roots = {m: Path(tmp) / m for m in MODES}
        digests = {}
        for mode, root in roots.items():
            make(root, args.models)
            timed(root, mode)  # the first run creates the tables; timed reps rebuild them
            digests[mode] = digest(root, args.models)
        assert len(set(digests.values())) == 1, f"the modes left different tables: {digests}"
        times: dict[str, list[float]] = {m: [] for m in MODES}
        loads = []
        for _ in range(args.reps):
            for mode, root in roots.items():
                loads.append(os.getloadavg()[0])
                times[mode].append(timed(root, mode))
    print(f"{args.models} table models, {args.reps} reps, load average {min(loads):.1f}-{max(loads):.1f}")
    print("| mode | median s | reps |")
    print("|---|---:|---|")
    for mode, ts in times.items():
        print(f"| {mode} | {statistics.median(ts):.2f} | {', '.join(f'{t:.2f}' for t in ts)} |")


if __name__ == "__main__":
    main()
