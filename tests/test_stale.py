"""``lakewrap run --stale`` on real DuckLakes: exactly the partitions a late upstream change touched.

The expected partitions are computed here in plain Python from the rows each history inserted,
deleted and updated (their timestamps before and after), independently of the change feed; the
rebuilt partitions are read from the new rows of ``lakewrap.materializations``.
"""

from __future__ import annotations

import random
from collections import Counter
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import lakewrap
from lakewrap.cli import main
from lakewrap.errors import PlanError
from lakewrap.execute.lake import Lake

DAYS = 12
FIRST = date(2024, 1, 1)
LAST = FIRST + timedelta(days=DAYS - 1)

MODELS = {
    # delete+insert over the upstream's own window column
    "models/sales/ev.sql": """\
-- materialized incremental
-- partitioned daily key=ts start=2024-01-01
SELECT id, ts, v FROM raw.events
WHERE ts >= $partition_start AND ts < $partition_end
""",
    # downstream of ev, aggregated under another key name; its filter is on ev's ts
    "models/sales/ev_daily.sql": """\
-- materialized incremental
-- partitioned daily key=day start=2024-01-01
SELECT CAST(date_trunc('day', ts) AS TIMESTAMP) AS day, count(*) AS n, sum(v) AS v FROM sales.ev
WHERE ts >= $partition_start AND ts < $partition_end
GROUP BY ALL
""",
    # lookback=1: each partition re-reads the day before, so a change on day d touches d and d+1
    "models/sales/ev_lb.sql": """\
-- materialized incremental
-- partitioned daily key=ts start=2024-01-01 lookback=1
SELECT e.id, e.ts, e.v FROM raw.events AS e
WHERE e.ts >= $partition_start AND e.ts < $partition_end
""",
}


def write_project(root: Path, models: dict[str, str]) -> None:
    for rel, text in models.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def execute(root: Path, *statements: tuple[str, Any]) -> None:
    lake = Lake.open(root)
    con = lake.connect()
    try:
        for sql, params in statements:
            con.execute(sql, params) if params is not None else con.execute(sql)
    finally:
        lake.close(con)


def fetch(root: Path, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
    lake = Lake.open(root)
    con = lake.connect()
    try:
        return list(con.execute(sql, params).fetchall() if params is not None else con.execute(sql).fetchall())
    finally:
        lake.close(con)


def rebuilt(root: Path, run_id: str) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for target, partition in fetch(root, "SELECT target, partition_value FROM lakewrap.materializations "
                                         "WHERE run_id = ?", [run_id]):
        out.setdefault(target, set()).add(partition)
    return out


def random_ts(rng: random.Random, first: date, days: int) -> datetime:
    day = first + timedelta(days=rng.randrange(days))
    return datetime(day.year, day.month, day.day) + timedelta(seconds=rng.randrange(86400))


def day_of(ts: datetime) -> str:
    return ts.date().isoformat()


def history(root: Path, seed: int, rounds: int) -> None:
    rng = random.Random(seed)
    write_project(root, MODELS)
    rows: dict[int, tuple[datetime, int]] = {}
    for i in range(60):
        rows[i] = (random_ts(rng, FIRST, DAYS), rng.randrange(100))
    execute(root, ("CREATE SCHEMA IF NOT EXISTS raw", None),
            ("CREATE TABLE raw.events (id INTEGER, ts TIMESTAMP, v INTEGER)", None),
            *(("INSERT INTO raw.events VALUES (?, ?, ?)", [k, ts, v]) for k, (ts, v) in rows.items()))
    project = lakewrap.Project(root)
    report = project.run(start=FIRST.isoformat(), end=LAST.isoformat())
    assert report.ok and len(report.results) == 3 * DAYS
    materialized = {(FIRST + timedelta(days=d)).isoformat() for d in range(DAYS)}
    next_id = 1000
    sizes = []
    for _ in range(rounds):
        touched: set[str] = set()
        statements: list[tuple[str, Any]] = []
        for _ in range(rng.randrange(0, 4)):  # late rows, some of them in days never materialized
            ts = random_ts(rng, FIRST - timedelta(days=2), DAYS + 4)
            rows[next_id] = (ts, rng.randrange(100))
            statements.append(("INSERT INTO raw.events VALUES (?, ?, ?)", [next_id, ts, rows[next_id][1]]))
            touched.add(day_of(ts))
            next_id += 1
        for key in rng.sample(sorted(rows), rng.randrange(0, 3)):  # deletions
            touched.add(day_of(rows.pop(key)[0]))
            statements.append(("DELETE FROM raw.events WHERE id = ?", [key]))
        for key in rng.sample(sorted(rows), rng.randrange(0, 3)):  # updates: moved, or a value changed
            old_ts, v = rows[key]
            new_ts = random_ts(rng, FIRST, DAYS) if rng.random() < 0.5 else old_ts
            rows[key] = (new_ts, v + 1)
            touched |= {day_of(old_ts), day_of(new_ts)}
            statements.append(("UPDATE raw.events SET ts = ?, v = ? WHERE id = ?", [new_ts, v + 1, key]))
        execute(root, *statements)
        expected = touched & materialized
        sizes.append(len(expected))
        shifted = {(date.fromisoformat(d) + timedelta(days=1)).isoformat() for d in touched}
        expected_lb = (touched | shifted) & materialized
        found = {s.target: set(map(str, s.stale)) for s in project.status()}
        report = project.run(stale=True)
        assert report.ok, [r.error for r in report.results]
        got = rebuilt(root, report.run_id)
        assert got.get("sales.ev", set()) == expected
        assert got.get("sales.ev_daily", set()) == expected
        assert got.get("sales.ev_lb", set()) == expected_lb
        assert found == {"sales.ev": expected, "sales.ev_daily": expected, "sales.ev_lb": expected_lb}
        assert len(report.results) == 2 * len(expected) + len(expected_lb)  # nothing else ran
        # contents: the lake's tables against the reference rows of the materialized days
        live = sorted((k, ts, v) for k, (ts, v) in rows.items() if day_of(ts) in materialized)
        assert sorted(fetch(root, "SELECT id, ts, v FROM sales.ev")) == live
        daily = Counter(day_of(ts) for _, ts, _ in live)
        sums = Counter({d: 0 for d in daily})
        for _, ts, v in live:
            sums[day_of(ts)] += v
        assert sorted((d.date().isoformat(), n, int(v)) for d, n, v in fetch(
            root, "SELECT day, n, v FROM sales.ev_daily")) == sorted((d, n, sums[d]) for d, n in daily.items())
        # and a second stale run finds nothing
        again = project.run(stale=True)
        assert again.ok and again.results == []
    assert 0 < sum(sizes) < rounds * DAYS  # the histories touched some partitions, not all


def test_replaced_upstream_makes_every_partition_stale(tmp_path: Path) -> None:
    write_project(tmp_path, {"models/sales/ev.sql": MODELS["models/sales/ev.sql"]})
    execute(tmp_path, ("CREATE SCHEMA raw", None),
            ("CREATE TABLE raw.events AS SELECT range::INTEGER AS id, TIMESTAMP '2024-01-01' + to_hours(range * 10) "
             "AS ts, 1 AS v FROM range(12)", None))
    project = lakewrap.Project(tmp_path)
    assert project.run(start="2024-01-01", end="2024-01-04").ok
    # a replaced table's change feed shows its new rows only, not the old rows that vanished
    execute(tmp_path, ("CREATE OR REPLACE TABLE raw.events AS SELECT 1 AS id, TIMESTAMP '2024-01-02 01:00' AS ts, "
                       "1 AS v", None))
    report = project.run(stale=True)
    assert rebuilt(tmp_path, report.run_id) == {"sales.ev": {"2024-01-01", "2024-01-02", "2024-01-03", "2024-01-04"}}
    assert fetch(tmp_path, "SELECT count(*) FROM sales.ev") == [(1,)]


def test_stale_usage_errors_and_status_cli(tmp_path: Path) -> None:
    write_project(tmp_path, {"models/sales/ev.sql": MODELS["models/sales/ev.sql"]})
    execute(tmp_path, ("CREATE SCHEMA raw", None),
            ("CREATE TABLE raw.events AS SELECT 1 AS id, TIMESTAMP '2024-01-01 01:00' AS ts, 1 AS v", None))
    project = lakewrap.Project(tmp_path)
    with pytest.raises(PlanError, match="no --partition"):
        project.run(stale=True, partition="2024-01-01")
    assert project.run(partition="2024-01-01").ok
    execute(tmp_path, ("INSERT INTO raw.events VALUES (2, TIMESTAMP '2024-01-01 02:00', 1)", None))
    out = CliRunner().invoke(main, ["status", "--project", str(tmp_path)])
    assert out.exit_code == 0, out.output
    header, _, row = out.output.splitlines()[:3]
    assert "stale" in header and "1: 2024-01-01" in row
    out = CliRunner().invoke(main, ["run", "--stale", "--project", str(tmp_path), "--format", "json"])
    assert out.exit_code == 0, out.output
    assert '"partition": "2024-01-01"' in out.output


def test_same_table_name_in_two_schemas_and_altered_upstream(tmp_path: Path) -> None:
    # sales.events reads raw.events: a fresh build is not stale although its own table (same name,
    # other schema) was created and altered after its pins; an ALTER of raw.events makes it stale
    write_project(tmp_path, {"models/sales/events.sql": MODELS["models/sales/ev.sql"]})
    execute(tmp_path, ("CREATE SCHEMA raw", None),
            ("CREATE TABLE raw.events AS SELECT range::INTEGER AS id, TIMESTAMP '2024-01-01' + to_hours(range * 10) "
             "AS ts, 1 AS v FROM range(7)", None))
    project = lakewrap.Project(tmp_path)
    assert project.run(start="2024-01-01", end="2024-01-03").ok
    assert [s.stale for s in project.status()] == [[]]
    execute(tmp_path, ("ALTER TABLE raw.events ADD COLUMN w INTEGER", None))
    assert [s.stale for s in project.status()] == [["2024-01-01", "2024-01-02", "2024-01-03"]]


def test_append_models_are_listed_stale_but_not_rerun(tmp_path: Path) -> None:
    write_project(tmp_path, {"models/sales/log.sql": """\
-- materialized incremental
-- partitioned daily key=ts start=2024-01-01
-- append
SELECT id, ts, v FROM raw.events
WHERE ts >= $partition_start AND ts < $partition_end
""", "models/sales/ev.sql": MODELS["models/sales/ev.sql"]})
    execute(tmp_path, ("CREATE SCHEMA raw", None),
            ("CREATE TABLE raw.events AS SELECT range::INTEGER AS id, TIMESTAMP '2024-01-01' + to_hours(range * 10) "
             "AS ts, 1 AS v FROM range(7)", None))
    project = lakewrap.Project(tmp_path)
    assert project.run(start="2024-01-01", end="2024-01-03").ok
    execute(tmp_path, ("INSERT INTO raw.events VALUES (50, TIMESTAMP '2024-01-02 05:00', 1)", None))
    assert {s.target: s.stale for s in project.status()} == {"sales.log": ["2024-01-02"], "sales.ev": ["2024-01-02"]}
    report = project.run(stale=True)
    assert rebuilt(tmp_path, report.run_id) == {"sales.ev": {"2024-01-02"}}  # a re-run would append twice
    assert fetch(tmp_path, "SELECT count(*) FROM sales.log") == [(7,)]
