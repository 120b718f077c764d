"""Re-created tables and ``--stale`` on DuckLake: the one-CSV-row edit, and what a diff-write would cost.

Two measurements:

* ``edit``: the bundled project (``examples/shop``) is seeded and backfilled over ``--days`` daily
  partitions; the seeds are re-loaded unchanged, then one row of ``seeds/raw/orders.csv`` is edited
  (its amount) and re-seeded. For each step: the partitions ``lakewrap status`` lists stale per
  model, and the time and step count of the ``run --stale`` that repairs them.
* ``write``: a ``--rows`` table rebuilt three ways on one DuckLake: ``CREATE OR REPLACE TABLE AS``
  (what a table model and a seed write today), and a *diff-write* that keeps the table id (DELETE by
  ``rowid`` the rows that left + INSERT the rows that came, multisets matched by ``row_number()``
  over every column), with the same rows, one row changed and every row changed. Then what
  detection pays instead, once per table state: the row-count-and-hash digest of two versions, and
  the ``EXCEPT ALL`` comparison of the table at a snapshot with the table now.

Usage:
    python benchmarks/stale_rebuild.py [--days 31] [--rows 1000000] [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from datetime import date, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def edit_scenario(days: int) -> dict[str, Any]:
    import lakewrap

    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="lakewrap-stale-edit-") as tmp:
        root = Path(tmp) / "shop"
        shutil.copytree(ROOT / "examples" / "shop", root)
        project = lakewrap.Project(root)
        assert project.seed().ok
        last = (date(2024, 1, 1) + timedelta(days=days - 1)).isoformat()
        t0 = time.perf_counter()
        report = project.run(start="2024-01-01", end=last)
        assert report.ok
        out["backfill"] = {"steps": len(report.results), "seconds": round(time.perf_counter() - t0, 2)}

        def stale() -> dict[str, int]:
            return {s.target: len(s.stale) for s in project.status() if s.stale}

        def repair() -> dict[str, Any]:
            t0 = time.perf_counter()
            report = project.run(stale=True)
            assert report.ok
            return {"steps": len(report.results), "seconds": round(time.perf_counter() - t0, 2),
                    "stale_after": stale()}

        assert project.seed().ok
        out["reseed_unchanged"] = {"stale": stale(), "repair": repair()}
        csv = root / "seeds" / "raw" / "orders.csv"
        lines = csv.read_text().splitlines()
        cells = lines[5].split(",")
        cells[2] = f"{float(cells[2]) + 1:.2f}"
        lines[5] = ",".join(cells)
        csv.write_text("\n".join(lines) + "\n")
        assert project.seed().ok
        out["one_row_edited"] = {"row": lines[5], "stale": stale(), "repair": repair()}
    return out


def write_scenario(rows: int) -> dict[str, Any]:
    from lakewrap.compilers import stale as q
    from lakewrap.execute.lake import Lake

    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="lakewrap-stale-write-") as tmp:
        root = Path(tmp)
        lake = Lake.open(root)
        con = lake.connect()
        con.execute("SET enable_progress_bar = false")
        cols = ["id", "name", "v", "ts"]
        src = (f"SELECT range::BIGINT AS id, 'name' || (range % 1000) AS name, {{v}} AS v, "
               f"TIMESTAMP '2024-01-01' + to_seconds(range) AS ts FROM range({rows})")
        same, one, every = "(range % 97)::DOUBLE", "CASE WHEN range = 5 THEN 1e9 ELSE (range % 97)::DOUBLE END", \
            "(range % 89)::DOUBLE"
        on = " AND ".join(f"o.{c} IS NOT DISTINCT FROM n.{c}" for c in cols) + " AND o.__n = n.__n"
        numbered = f"row_number() OVER (PARTITION BY {', '.join(cols)}) AS __n"

        def timed(label: str, *statements: str) -> None:
            t0 = time.perf_counter()
            con.execute("BEGIN")
            for st in statements:
                con.execute(st)
            con.execute("COMMIT")
            out[label] = round(time.perf_counter() - t0, 3)
            print(f"{label}: {out[label]} s", flush=True)

        def diff_write(v: str) -> list[str]:
            new_cols = ", ".join("n." + c for c in cols)
            return [f"CREATE OR REPLACE TEMP TABLE __new AS SELECT *, {numbered} FROM ({src.format(v=v)})",
                    f"CREATE OR REPLACE TEMP TABLE __old AS SELECT rowid AS __rid, *, {numbered} FROM m.t",
                    f"DELETE FROM m.t WHERE rowid IN (SELECT __rid FROM __old o ANTI JOIN __new n ON {on})",
                    f"INSERT INTO m.t SELECT {new_cols} FROM __new n ANTI JOIN __old o ON {on}"]

        try:
            con.execute("CREATE SCHEMA m")
            timed("ctas_first", f"CREATE TABLE m.t AS {src.format(v=same)}")
            for label, v in (("same_rows", same), ("one_row_changed", one), ("every_row_changed", every)):
                timed(f"ctas_{label}", f"CREATE OR REPLACE TABLE m.t AS {src.format(v=v)}")
                timed(f"diff_write_{label}", *diff_write(v))
            con.execute(f"CREATE OR REPLACE TABLE m.t AS {src.format(v=one)}")  # the state a reader pinned
            pin = int(con.execute("SELECT max(snapshot_id) FROM lake.snapshots()").fetchone()[0])
            con.execute(f"CREATE OR REPLACE TABLE m.t AS {src.format(v=one.replace('1e9', '2e9'))}")  # one row
            t0 = time.perf_counter()
            digests = {con.execute(q.content_digest("lake", "m", "t", v)).fetchone() for v in (pin, None)}
            out["detect_digest_two_versions"] = round(time.perf_counter() - t0, 3)
            t0 = time.perf_counter()
            changed = con.execute(q.content_changes("lake", "m", "t", pin)).fetchall()
            out["detect_except_all"] = round(time.perf_counter() - t0, 3)
            assert len(digests) == 2 and len(changed) == 2, (digests, len(changed))
        finally:
            lake.close(con)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--days", type=int, default=31)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--only", choices=("edit", "write"))
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    out: dict[str, Any] = {"load_before": os.getloadavg(), "days": args.days, "rows": args.rows}
    if args.only in (None, "edit"):
        out["edit"] = edit_scenario(args.days)
    if args.only in (None, "write"):
        out["write"] = write_scenario(args.rows)
    out["load_after"] = os.getloadavg()
    print(json.dumps(out, indent=2))
    if args.out:
        args.out.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
