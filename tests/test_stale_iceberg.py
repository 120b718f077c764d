"""``lakewrap run --stale`` on real Iceberg lakes (pyiceberg SqlCatalog): exactly the partitions a late
upstream change touched, found from snapshot diffs.

The upstream table is changed with plain pyiceberg (appends, copy-on-write deletes, overwrites
that move or re-value rows, a compaction tagged ``lakewrap.maintain = compact``). The expected
stale partitions are computed here in plain Python from the rows before and after each round (a
day is touched when its multiset of rows differs), independently of the snapshot diff; the rebuilt
partitions are read from the snapshot summaries of the run's commits; the tables are compared with
a plain-Python reference and, at the end, with a from-scratch rebuild.
"""

from __future__ import annotations

import random
from collections import Counter
from contextlib import ExitStack
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from click.testing import CliRunner

import lakewrap
from lakewrap.cli import main
from lakewrap.errors import PlanError
from lakewrap.execute.iceberg import IcebergLake
from lakewrap.substrates.iceberg.feed import IcebergFeed, file_diff
from lakewrap.substrates.iceberg.state import materializations, materializations_of

DAYS = 10
FIRST = date(2024, 1, 1)
LAST = FIRST + timedelta(days=DAYS - 1)
TOML = '[lake]\nsubstrate = "iceberg"\n'
SCHEMA = pa.schema([("id", pa.int32()), ("ts", pa.timestamp("us")), ("v", pa.int32())])

MODELS = {
    "models/sales/ev.sql": """\
-- materialized incremental
-- partitioned daily key=ts start=2024-01-01
SELECT id, ts, v FROM raw.events
WHERE ts >= $partition_start AND ts < $partition_end
""",
    # downstream of ev: its partitions follow ev's rebuilds
    "models/sales/ev_daily.sql": """\
-- materialized incremental
-- partitioned daily key=day start=2024-01-01
SELECT CAST(date_trunc('day', ts) AS TIMESTAMP) AS day, count(*) AS n, CAST(sum(v) AS BIGINT) AS v FROM sales.ev
WHERE ts >= $partition_start AND ts < $partition_end
GROUP BY ALL
""",
    # lookback=1: a change on day d touches d and d+1
    "models/sales/ev_lb.sql": """\
-- materialized incremental
-- partitioned daily key=ts start=2024-01-01 lookback=1
SELECT e.id, e.ts, e.v FROM raw.events AS e
WHERE e.ts >= $partition_start AND e.ts < $partition_end
""",
    # unpartitioned: stale after any change of raw.events, whatever its day
    "models/sales/ev_total.sql": """\
-- materialized table
SELECT count(*) AS n, CAST(sum(v) AS BIGINT) AS v FROM raw.events
""",
}

Rows = dict[int, tuple[datetime, int]]


def write_project(root: Path, models: dict[str, str], toml: str = TOML) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / "lakewrap.toml").write_text(toml)
    for rel, text in models.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def arrow(rows: Rows) -> pa.Table:
    keys = sorted(rows)
    return pa.table({"id": [k for k in keys], "ts": [rows[k][0] for k in keys], "v": [rows[k][1] for k in keys]},
                    schema=SCHEMA)


def events(root: Path) -> Any:
    return IcebergLake.open(root).load("raw.events")


def create_events(root: Path, rows: Rows) -> None:
    lake = IcebergLake.open(root)
    lake.ensure_namespace("raw")
    lake.catalog().create_table(("raw", "events"), schema=SCHEMA).append(arrow(rows))


def scan(root: Path, name: str) -> list[dict[str, Any]]:
    return IcebergLake.open(root).load(name).scan().to_arrow().to_pylist()  # type: ignore[no-any-return]


def rebuilt(root: Path, run_id: str) -> dict[str, set[str | None]]:
    lake = IcebergLake.open(root)
    out: dict[str, set[str | None]] = {}
    for name in ("sales.ev", "sales.ev_daily", "sales.ev_lb", "sales.ev_total"):
        for m in materializations_of(lake, name):
            if m["run_id"] == run_id:
                out.setdefault(name, set()).add(m["partition"])
    return out


def random_ts(rng: random.Random, first: date, days: int) -> datetime:
    day = first + timedelta(days=rng.randrange(days))
    return datetime(day.year, day.month, day.day) + timedelta(seconds=rng.randrange(86400))


def by_day(rows: Rows) -> dict[str, Counter[tuple[int, datetime, int]]]:
    out: dict[str, Counter[tuple[int, datetime, int]]] = {}
    for k, (ts, v) in rows.items():
        out.setdefault(ts.date().isoformat(), Counter())[(k, ts, v)] += 1
    return out


def changed_days(before: Rows, after: Rows) -> set[str]:
    old, new = by_day(before), by_day(after)
    return {d for d in old.keys() | new.keys() if old.get(d) != new.get(d)}


def change_round(root: Path, rng: random.Random, rows: Rows, next_id: int) -> int:
    """One round of late changes through plain pyiceberg; ``rows`` follows them."""
    from pyiceberg.expressions import EqualTo, In

    table = events(root)
    for _ in range(rng.randrange(0, 3)):  # late rows, some in days never materialized
        new = {}
        for _ in range(rng.randrange(1, 3)):
            new[next_id] = (random_ts(rng, FIRST - timedelta(days=2), DAYS + 4), rng.randrange(100))
            next_id += 1
        table.append(arrow(new))
        rows.update(new)
    gone = rng.sample(sorted(rows), rng.randrange(0, 3))  # copy-on-write deletes, maybe of a new row
    if gone:
        table.delete(In("id", gone))
        for k in gone:
            rows.pop(k)
    if rng.random() < 0.4:  # a compaction: every row rewritten, content unchanged
        table.overwrite(table.scan().to_arrow(), snapshot_properties={"lakewrap.maintain": "compact"})
    for key in rng.sample(sorted(rows), rng.randrange(0, 3)):  # updates: moved, or a value changed
        old_ts, v = rows[key]
        rows[key] = (random_ts(rng, FIRST, DAYS) if rng.random() < 0.5 else old_ts, v + 1)
        table.overwrite(arrow({key: rows[key]}), overwrite_filter=EqualTo("id", key))
    return next_id


def sql_change_round(root: Path, rng: random.Random, rows: Rows, next_id: int) -> int:
    """One round of late changes written by DuckDB SQL through the REST catalog (merge-on-read
    deletes: DuckDB writes delete files); ``rows`` follows them."""
    from lakewrap.substrates.iceberg.sql_connect import connect

    con = connect(IcebergLake.open(root))
    try:
        for _ in range(rng.randrange(0, 3)):
            ts, v = random_ts(rng, FIRST - timedelta(days=2), DAYS + 4), rng.randrange(100)
            con.execute("INSERT INTO ice.raw.events VALUES (?, ?, ?)", [next_id, ts, v])
            rows[next_id] = (ts, v)
            next_id += 1
        for key in rng.sample(sorted(rows), rng.randrange(0, 3)):
            con.execute("DELETE FROM ice.raw.events WHERE id = ?", [key])
            rows.pop(key)
        for key in rng.sample(sorted(rows), rng.randrange(0, 3)):
            old_ts, v = rows[key]
            rows[key] = (random_ts(rng, FIRST, DAYS) if rng.random() < 0.5 else old_ts, v + 1)
            con.execute("UPDATE ice.raw.events SET ts = ?, v = ? WHERE id = ?", [*rows[key], key])
    finally:
        con.close()
    return next_id


def check_contents(root: Path, rows: Rows, materialized: set[str]) -> None:
    live = sorted((k, ts, v) for k, (ts, v) in rows.items() if ts.date().isoformat() in materialized)
    assert sorted((r["id"], r["ts"], r["v"]) for r in scan(root, "sales.ev")) == live
    days: dict[str, list[int]] = {}
    for _, ts, v in live:
        days.setdefault(ts.date().isoformat(), []).append(v)
    assert sorted((r["day"].date().isoformat(), r["n"], r["v"]) for r in scan(root, "sales.ev_daily")) == sorted(
        (d, len(vs), sum(vs)) for d, vs in days.items())
    assert [(r["n"], r["v"]) for r in scan(root, "sales.ev_total")] == [(len(rows), sum(v for _, v in rows.values()))]


def history(root: Path, seed: int, rounds: int, change: Any = change_round, toml: str = TOML) -> None:
    rng = random.Random(seed)
    write_project(root, MODELS, toml)
    rows: Rows = {i: (random_ts(rng, FIRST, DAYS), rng.randrange(100)) for i in range(40)}
    create_events(root, rows)
    project = lakewrap.Project(root)
    report = project.run(start=FIRST.isoformat(), end=LAST.isoformat())
    assert report.ok and len(report.results) == 3 * DAYS + 1, [r.error for r in report.results if r.error]
    materialized = {(FIRST + timedelta(days=d)).isoformat() for d in range(DAYS)}
    assert {s.target: s.stale for s in project.status()} == {t: [] for t in (
        "sales.ev", "sales.ev_daily", "sales.ev_lb", "sales.ev_total")}
    next_id, sizes = 1000, []
    for _ in range(rounds):
        before = dict(rows)
        next_id = change(root, rng, rows, next_id)
        touched = changed_days(before, rows)
        expected = touched & materialized
        shifted = {(date.fromisoformat(d) + timedelta(days=1)).isoformat() for d in touched}
        expected_lb = (touched | shifted) & materialized
        sizes.append(len(expected))
        want = {"sales.ev": expected, "sales.ev_daily": expected, "sales.ev_lb": expected_lb,
                "sales.ev_total": {None} if touched else set()}
        status = {s.target: set(s.stale) for s in project.status()}
        assert status == {t: {p or "whole table" for p in v} for t, v in want.items()}
        report = project.run(stale=True)
        assert report.ok, [r.error for r in report.results]
        assert rebuilt(root, report.run_id) == {t: v for t, v in want.items() if v}  # precision and recall
        assert len(report.results) == sum(len(v) for v in want.values())  # nothing else ran
        check_contents(root, rows, materialized)
        again = project.run(stale=True)  # nothing is stale after the rebuild
        assert again.ok and again.results == []
    assert 0 < sum(sizes) < rounds * DAYS  # the histories touched some partitions, not all
    # the incrementally repaired tables equal a from-scratch rebuild of the same project
    kept = {name: sorted(map(repr, scan(root, name))) for name in ("sales.ev", "sales.ev_daily", "sales.ev_lb")}
    assert project.run(start=FIRST.isoformat(), end=LAST.isoformat(), full_refresh=True).ok
    assert {name: sorted(map(repr, scan(root, name))) for name in kept} == kept


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_stale_randomized_histories(tmp_path: Path, seed: int) -> None:
    history(tmp_path, seed, rounds=4)


def test_stale_on_the_sql_write_path(tmp_path: Path) -> None:
    """Pins from the state tables; DuckDB's deletes are delete files, diffed snapshot against snapshot."""
    from icehouse_sql import rest_toml, start_rest

    with ExitStack() as stack:
        uri, _ = start_rest(tmp_path, stack)
        history(tmp_path / "project", 11, rounds=2, change=sql_change_round, toml=rest_toml(uri))


def small_lake(root: Path, models: dict[str, str]) -> tuple[lakewrap.Project, Rows]:
    write_project(root, models)
    rows: Rows = {i: (datetime(2024, 1, 1) + timedelta(hours=10 * i), 1) for i in range(10)}
    create_events(root, rows)
    project = lakewrap.Project(root)
    assert project.run(start="2024-01-01", end="2024-01-04").ok
    return project, rows


def test_compaction_is_not_a_change_and_is_never_read(tmp_path: Path) -> None:
    project, _ = small_lake(tmp_path, {"models/sales/ev.sql": MODELS["models/sales/ev.sql"]})
    table = events(tmp_path)
    pin = table.current_snapshot().snapshot_id
    table.overwrite(table.scan().to_arrow(), snapshot_properties={"lakewrap.maintain": "compact"})
    diff = file_diff(events(tmp_path), pin)
    assert not diff.added and not diff.removed  # skipped without reading a file
    assert [s.stale for s in project.status()] == [[]]
    # an untagged rewrite of the same rows is read, and its rows cancel out
    table = events(tmp_path)
    table.overwrite(table.scan().to_arrow())
    assert file_diff(events(tmp_path), pin).added
    assert [s.stale for s in project.status()] == [[]]
    assert project.run(stale=True).results == []


def test_recreated_upstream_is_conservative_and_missing_pin_reads_everything(tmp_path: Path) -> None:
    project, _ = small_lake(tmp_path, {"models/sales/ev.sql": MODELS["models/sales/ev.sql"]})
    lake = IcebergLake.open(tmp_path)
    lake.catalog().drop_table(("raw", "events"))
    create_events(tmp_path, {1: (datetime(2024, 1, 2, 1), 5)})
    (status,) = project.status()
    assert status.stale == ["2024-01-01", "2024-01-02", "2024-01-03", "2024-01-04"]
    assert "no longer in its history" in status.stale_reasons["2024-01-02"][0]
    report = project.run(stale=True)
    assert report.ok and rebuilt(tmp_path, report.run_id) == {"sales.ev": {"2024-01-01", "2024-01-02",
                                                                           "2024-01-03", "2024-01-04"}}
    assert [(r["id"], r["v"]) for r in scan(tmp_path, "sales.ev")] == [(1, 5)]
    # a table read empty (no snapshot): every row it holds now is a change
    lake = IcebergLake.open(tmp_path)
    feed = IcebergFeed(lake, lake.connect())
    try:
        assert feed.changed_rows("raw.events", -1).num_rows == 1
    finally:
        feed.con.close()


def rebuilt_of(root: Path, run_id: str, name: str) -> set[str | None]:
    return {m["partition"] for m in materializations(IcebergLake.open(root).load(name)) if m["run_id"] == run_id}


def test_stale_cli_and_usage_errors(tmp_path: Path) -> None:
    project, _ = small_lake(tmp_path, {"models/sales/ev.sql": MODELS["models/sales/ev.sql"]})
    with pytest.raises(PlanError, match="no --partition"):
        project.run(stale=True, partition="2024-01-01")
    events(tmp_path).append(arrow({50: (datetime(2024, 1, 2, 2), 1)}))
    out = CliRunner().invoke(main, ["status", "--project", str(tmp_path)])
    assert out.exit_code == 0, out.output
    header, _, row = out.output.splitlines()[:3]
    assert "stale" in header and "1: 2024-01-02" in row
    out = CliRunner().invoke(main, ["run", "--stale", "--project", str(tmp_path), "--format", "json"])
    assert out.exit_code == 0, out.output
    assert '"partition": "2024-01-02"' in out.output and '"2024-01-01"' not in out.output


def test_upstream_model_rebuilt_earlier_is_read_through_its_own_snapshots(tmp_path: Path) -> None:
    project, _ = small_lake(tmp_path, {k: MODELS[k] for k in ("models/sales/ev.sql", "models/sales/ev_daily.sql")})
    events(tmp_path).append(arrow({77: (datetime(2024, 1, 2, 3), 4)}))
    assert project.run(["sales.ev"], partition="2024-01-02").ok  # the downstream is not run
    (ev, daily) = project.status()
    assert ev.stale == [] and daily.stale == ["2024-01-02"]
    assert daily.stale_reasons["2024-01-02"][0].startswith("sales.ev changed after snapshot")
    report = project.run(stale=True)
    assert rebuilt(tmp_path, report.run_id) == {"sales.ev_daily": {"2024-01-02"}}
    day2 = [r for r in scan(tmp_path, "sales.ev_daily") if r["day"] == datetime(2024, 1, 2)]
    assert [(r["n"], r["v"]) for r in day2] == [(3, 6)]  # its two rows (v=1) and the late one (v=4)
