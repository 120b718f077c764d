"""What a run does not run again (issue 17, items 5 and 6), on real lakes.

* ``backfill --missing-only`` and ``resume`` skip a materialization only while its inputs are
  unchanged: after a real SIGINT mid-backfill, an upstream partition rewritten by another run, a
  changed upstream model, a model changed back to an earlier version, or a range only half done,
  the lake's tables equal those of one uninterrupted backfill in a fresh lake, row by row.
* A recorded ``append`` partition is not appended again (DuckLake, Iceberg through pyiceberg, and
  Iceberg through DuckDB SQL on a REST catalog) unless ``--reappend``; ``--full-refresh`` rebuilds;
  the expected rows are computed from the seed file in plain Python.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from helpers import InterruptAfter
from lakeproject import cli
from lakewrap.execute.lake import Lake
from lakewrap.runner import run_project
from lakewrap.scheduler import resume

DAYS = ["2024-01-01", "2024-01-02", "2024-01-03", "2024-01-04"]
NOW = "2024-01-06T00:00:00+00:00"
SRC = [(i, f"{DAYS[i % 4]} {i % 24:02d}:00:00", i * 10) for i in range(1, 17)]  # id, day, v: 4 rows a day
MODELS = {
    "main/events.sql": "-- materialized incremental\n-- partitioned daily key=day start=2024-01-01\n"
                       "SELECT id, day, v FROM raw.src WHERE day >= $partition_start AND day < $partition_end\n",
    "main/daily.sql": "-- materialized incremental\n-- partitioned daily key=day start=2024-01-01\n"
                      "SELECT CAST(date_trunc('day', day) AS TIMESTAMP) AS day, count(*) AS n, sum(v) AS total\n"
                      "FROM main.events WHERE day >= $partition_start AND day < $partition_end GROUP BY ALL\n",
    "main/total.sql": "-- materialized table\nSELECT count(*) AS n, sum(v) AS total FROM main.events\n",
}
TABLES = ("main.events", "main.daily", "main.total")


def project(root: Path, rows: list[tuple[int, str, int]] = SRC, models: dict[str, str] = MODELS,
            toml: str | None = None) -> Path:
    for rel, text in models.items():
        (root / "models" / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / "models" / rel).write_text(text)
    (root / "seeds" / "raw").mkdir(parents=True, exist_ok=True)
    with (root / "seeds" / "raw" / "src.csv").open("w", newline="") as f:
        csv.writer(f).writerows([("id", "day", "v"), *rows])
    if toml is not None:
        (root / "lakewrap.toml").write_text(toml)
    code, _, err = cli("seed", "--project", str(root))
    assert code == 0, err
    return root


def tables(root: Path) -> dict[str, list[tuple[Any, ...]]]:
    con = Lake.open(root, read_only=True).connect()
    try:
        return {t: [tuple(r) for r in con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall()] for t in TABLES}
    finally:
        con.close()


def backfill(root: Path, *args: str) -> dict[str, Any]:
    code, out, err = cli("backfill", "main.events+", "--project", str(root), "--start", DAYS[0], "--end", DAYS[-1],
                         "--now", NOW, "--format", "json", *args)
    assert code == 0, out + err
    return json.loads(out)  # type: ignore[no-any-return]


_REFERENCES: dict[str, dict[str, list[tuple[Any, ...]]]] = {}


def reference(tmp: Path, rows: list[tuple[int, str, int]] = SRC, models: dict[str, str] = MODELS
              ) -> dict[str, list[tuple[Any, ...]]]:
    """The tables of one uninterrupted backfill in a fresh lake (built once per source and models)."""
    key = json.dumps([rows, models])
    if key not in _REFERENCES:
        root = project(tmp / f"reference-{len(_REFERENCES)}", rows, models)
        backfill(root)
        out = _REFERENCES[key] = tables(root)
        assert len(out["main.events"]) == len(rows) and len(out["main.daily"]) == 4
        assert out["main.total"] == [(len(rows), sum(r[2] for r in out["main.events"]))]
    return _REFERENCES[key]


def not_rerun(doc: dict[str, Any]) -> list[tuple[str, str | None]]:
    return sorted((s["target"], s["partition"]) for s in doc["not_rerun"])


def rewrite_day_one(root: Path) -> list[tuple[int, str, int]]:
    """Another run rewrites events 2024-01-01 after its source changed; returns the new source rows."""
    con = Lake.open(root).connect()
    try:
        con.execute("UPDATE raw.src SET v = v + 1000 WHERE day < TIMESTAMP '2024-01-02'")
    finally:
        con.close()
    code, out, err = cli("run", "main.events", "--project", str(root), "--partition", DAYS[0], "--now", NOW)
    assert code == 0, out + err
    return [(i, day, v + 1000 if day < DAYS[1] else v) for i, day, v in SRC]


def interrupted(root: Path) -> str:
    """A backfill of the 9 steps cancelled by SIGINT after 5 (events 01..04 and daily 01 committed)."""
    report = run_project(root, ["main.events+"], start=DAYS[0], end=DAYS[-1], now=datetime.fromisoformat(NOW),
                         executor=InterruptAfter(5), command="backfill", batch_size=1)  # 9 steps, not batches
    assert report.status == "cancelled"
    done = sorted((r.target, r.partition) for r in report.results if r.status == "success")
    assert {("main.daily", DAYS[0]), *(("main.events", d) for d in DAYS)} <= set(done) and len(done) < 9, done
    return report.run_id


# --- 5. skipping only what is still true ------------------------------------------------------------


def test_an_interrupted_backfill_completed_with_missing_only_after_another_run_equals_one_backfill(
        tmp_path: Path) -> None:
    root = project(tmp_path / "lake")
    interrupted(root)
    rows = rewrite_day_one(root)
    doc = backfill(root, "--missing-only")
    assert tables(root) == reference(tmp_path, rows)
    # events were all written with this SQL and their source is unchanged since; daily 01 read events 01
    # before it was rewritten, and the whole-table total reads every day: both run again
    assert ("main.daily", DAYS[0]) not in not_rerun(doc) and ("main.total", None) not in not_rerun(doc)
    assert [s for s in not_rerun(doc) if s[0] == "main.events"] == [("main.events", d) for d in DAYS]


def test_resume_after_another_run_rewrote_an_upstream_partition_equals_one_backfill(tmp_path: Path) -> None:
    root = project(tmp_path / "lake")
    run_id = interrupted(root)
    rows = rewrite_day_one(root)
    report = resume(root, run_id)
    assert report.status == "success", [r.error for r in report.results]
    assert tables(root) == reference(tmp_path, rows)
    again = {(r.target, r.partition) for r in report.results}
    assert ("main.daily", DAYS[0]) in again  # committed by the run, but its input changed since
    assert ("main.events", DAYS[1]) not in again  # committed by the run, nothing changed


def test_missing_only_reruns_what_a_changed_upstream_model_feeds_and_a_model_changed_back(tmp_path: Path) -> None:
    root = project(tmp_path / "lake")
    backfill(root)
    doc = backfill(root, "--missing-only")
    assert doc["results"] == [] and len(doc["not_rerun"]) == 9  # nothing changed: nothing runs, total neither

    path = root / "models" / "main" / "events.sql"
    original = path.read_text()
    path.write_text(original.replace("SELECT id, day, v FROM", "SELECT id, day, v * 2 AS v FROM"))
    doc = backfill(root, "--missing-only")
    assert doc["not_rerun"] == []  # events' SQL changed: every reader of a rewritten partition runs too
    assert tables(root) == reference(tmp_path, models={**MODELS, "main/events.sql": path.read_text()})

    path.write_text(original)  # back to the SQL of the first backfill: its records are no longer the latest
    doc = backfill(root, "--missing-only")
    assert doc["not_rerun"] == []
    assert tables(root) == reference(tmp_path)


def test_missing_only_runs_the_partitions_a_shorter_backfill_left_out(tmp_path: Path) -> None:
    root = project(tmp_path / "lake")
    code, out, err = cli("backfill", "main.events+", "--project", str(root), "--start", DAYS[0], "--end", DAYS[1],
                         "--now", NOW)
    assert code == 0, out + err
    doc = backfill(root, "--missing-only")
    assert not_rerun(doc) == [("main.daily", DAYS[0]), ("main.daily", DAYS[1]),
                              ("main.events", DAYS[0]), ("main.events", DAYS[1])]
    assert tables(root) == reference(tmp_path)


# --- 6. re-runs never duplicate an append partition -------------------------------------------------

LOG = ("-- materialized incremental\n-- partitioned daily key=day start=2024-01-01\n-- append\n"
       "SELECT id, day, v FROM raw.src WHERE day >= $partition_start AND day < $partition_end\n")


def expected_log(days: list[str]) -> list[tuple[int, str, int]]:
    """The append table's rows for the runs of ``days`` (a day twice: appended twice), from the seed rows."""
    return sorted((i, d, v) for day in days for i, d, v in SRC if d.startswith(day))


def append_scenario(root: Path, read: Callable[[Path], list[tuple[int, str, int]]]) -> None:
    def lw(*args: str, code: int = 0) -> tuple[str, str]:
        got, out, err = cli(*args, "--project", str(root), "--now", NOW)
        assert got == code, out + err
        return out, err

    lw("backfill", "app.log", "--start", DAYS[0], "--end", DAYS[2])
    assert read(root) == expected_log(DAYS[:3])
    # the same range and one more day: only the new day runs, and the summary says how many were not
    out, _ = lw("backfill", "app.log", "--start", DAYS[0], "--end", DAYS[3])
    assert "1 steps, 1 succeeded" in out and "3 steps: append partition already recorded" in out, out
    assert read(root) == expected_log(DAYS)
    out, _ = lw("run", "app.log", "--partition", DAYS[1], "--format", "json")
    doc = json.loads(out)
    assert doc["results"] == [] and [(s["partition"], s["reason"][:32]) for s in doc["not_rerun"]] == [
        (DAYS[1], "append partition already recorde")]
    assert read(root) == expected_log(DAYS)
    # --reappend asks for the duplicate; --full-refresh rebuilds the range from nothing
    lw("run", "app.log", "--partition", DAYS[1], "--reappend")
    assert read(root) == expected_log([*DAYS, DAYS[1]])
    lw("run", "app.log", "--start", DAYS[0], "--end", DAYS[1], "--full-refresh")
    assert read(root) == expected_log(DAYS[:2])
    out, _ = lw("backfill", "app.log", "--start", DAYS[0], "--end", DAYS[3])
    assert "2 steps, 2 succeeded" in out and "2 steps: append partition already recorded" in out, out
    assert read(root) == expected_log(DAYS)


def _rows(cursor: Any) -> list[tuple[int, str, int]]:
    return sorted((int(i), str(d), int(v)) for i, d, v in cursor.fetchall())


def test_an_append_partition_is_not_appended_twice_on_ducklake(tmp_path: Path) -> None:
    root = project(tmp_path / "lake", models={"app/log.sql": LOG})

    def read(root: Path) -> list[tuple[int, str, int]]:
        con = Lake.open(root, read_only=True).connect()
        try:
            return _rows(con.execute("SELECT id, strftime(day, '%Y-%m-%d %H:%M:%S'), v FROM app.log"))
        finally:
            con.close()

    append_scenario(root, read)


def _iceberg_read(root: Path) -> list[tuple[int, str, int]]:
    from lakewrap.execute.iceberg import IcebergLake

    table = IcebergLake.open(root, read_only=True).load("app.log")
    rows = table.scan().to_arrow().to_pylist()
    return sorted((r["id"], r["day"].strftime("%Y-%m-%d %H:%M:%S"), r["v"]) for r in rows)


def test_an_append_partition_is_not_appended_twice_on_iceberg(tmp_path: Path) -> None:
    root = project(tmp_path / "lake", models={"app/log.sql": LOG}, toml='[lake]\nsubstrate = "iceberg"\n')
    append_scenario(root, _iceberg_read)


def test_an_append_partition_is_not_appended_twice_on_iceberg_sql(tmp_path: Path) -> None:
    from contextlib import ExitStack

    from icehouse_sql import rest_toml, start_rest

    with ExitStack() as stack:
        uri, _ = start_rest(tmp_path, stack)
        root = project(tmp_path / "lake", models={"app/log.sql": LOG}, toml=rest_toml(uri))
        append_scenario(root, _iceberg_read)
