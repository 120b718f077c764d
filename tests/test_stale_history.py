"""``--stale`` on DuckLake over seeded random histories of *seeds*: re-created tables compared by content.

A seed reload and a ``materialized table`` rebuild re-create their table (``CREATE OR REPLACE``), so
DuckLake's change feed cannot tell which rows changed; lakewrap compares the table at each pin with
the table now. The project mixes seeds, a table model, a view, partitioned models (one downstream of
the other), a join (whole table), an SCD2 snapshot and an ``append`` model. Each round edits the CSV
files at random (rows inserted, deleted, moved to another day, re-valued; the dimension seed's label
changed or not), re-seeds, and sometimes (always before round 2) rebuilds every model but the append
one in full. Round 1 re-seeds unchanged files (their rows in another order), round 3 changes only
a column of the dimension seed that the SCD2 does not read (its re-run versions nothing).

The reference is independent of lakewrap's detection: the set of truly stale partitions is computed
here from the rows each round changed in the CSV files (their day before and after), and the models'
contents are compared with the same rules computed in Python. ``lakewrap status`` and the partitions a
``run --stale`` rebuilds (read from ``lakewrap.materializations``) must equal it exactly (precision =
recall = 100%).
"""

from __future__ import annotations

import csv
import random
from collections import Counter
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

import lakewrap
from lakewrap.execute.lake import Lake

DAYS = 3
FIRST = date(2024, 1, 1)
LAST = FIRST + timedelta(days=DAYS - 1)
WHOLE = "whole table"
REBUILT = ["s.ev", "s.ev_daily", "s.dims_t", "s.dims_v", "s.joined", "s.hist"]  # all but the append model

MODELS = {
    "s/ev.sql": """\
-- materialized incremental
-- partitioned daily key=ts start=2024-01-01
SELECT id, ts, v FROM raw.events WHERE ts >= $partition_start AND ts < $partition_end
""",
    "s/ev_daily.sql": """\
-- materialized incremental
-- partitioned daily key=day start=2024-01-01
SELECT CAST(date_trunc('day', ts) AS TIMESTAMP) AS day, count(*) AS n, sum(v) AS v FROM s.ev
WHERE ts >= $partition_start AND ts < $partition_end GROUP BY ALL
""",
    "s/log.sql": """\
-- materialized incremental
-- partitioned daily key=ts start=2024-01-01
-- append
SELECT id, ts, v FROM raw.events WHERE ts >= $partition_start AND ts < $partition_end
""",
    "s/dims_t.sql": "-- materialized table\nSELECT k, label FROM raw.dims\n",
    "s/dims_v.sql": "-- materialized view\nSELECT k, upper(label) AS label FROM s.dims_t\n",
    "s/joined.sql": """\
-- materialized table
SELECT e.id, d.label FROM s.ev AS e JOIN s.dims_v AS d ON e.v % 3 = d.k
""",
    "s/hist.sql": "-- snapshot strategy=check unique_key=k check_cols=label hard_deletes=ignore\n"
                  "SELECT k, label FROM raw.dims\n",
}

Row = tuple[int, datetime, int]


def write_csv(path: Path, header: list[str], rows: list[tuple[Any, ...]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)


def fetch(root: Path, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
    lake = Lake.open(root)
    con = lake.connect()
    try:
        return list(con.execute(sql, params).fetchall())
    finally:
        lake.close(con)


def ts_at(rng: random.Random, first: date, days: int) -> datetime:
    day = first + timedelta(days=rng.randrange(days))
    return datetime(day.year, day.month, day.day, rng.randrange(24), rng.randrange(60))


def day(ts: datetime) -> str:
    return ts.date().isoformat()


class History:
    """The project's seeds as Python rows, edited at random; every edit notes the days it touched."""

    def __init__(self, root: Path, rng: random.Random) -> None:
        self.root, self.rng = root, rng
        self.events: dict[int, tuple[datetime, int]] = {i: (ts_at(rng, FIRST, DAYS), rng.randrange(9))
                                                        for i in range(24)}
        self.dims = {k: f"l{k}" for k in range(3)}
        self.notes = {k: "" for k in range(3)}  # a column only the table model reads, not the SCD2
        self.next_id = 100

    def write(self) -> None:
        write_csv(self.root / "seeds/raw/events.csv", ["id", "ts", "v"],
                  [(k, ts.isoformat(sep=" "), v) for k, (ts, v) in self.rng.sample(sorted(self.events.items()),
                                                                                   len(self.events))])
        write_csv(self.root / "seeds/raw/dims.csv", ["k", "label", "note"],
                  [(k, label, self.notes[k]) for k, label in sorted(self.dims.items())])

    def edit(self, events: bool, dims: bool, note: bool = False) -> tuple[set[str], bool]:
        """One round of random edits (of the events, of a dims label, of a dims note): (days whose
        event rows changed, whether a dims row changed). None: the same rows, in another order."""
        rng, touched = self.rng, set()
        if dims:
            k = rng.randrange(3)
            self.dims[k] = self.dims[k] + "x"
        if note:
            k = rng.randrange(3)
            self.notes[k] = self.notes[k] + "n"
        if not events:
            return touched, dims or note
        for _ in range(rng.randrange(3)):  # inserted, some on days never materialized
            ts = ts_at(rng, FIRST - timedelta(days=1), DAYS + 2)
            self.events[self.next_id] = (ts, rng.randrange(9))
            self.next_id += 1
            touched.add(day(ts))
        for key in rng.sample(sorted(self.events), rng.randrange(2)):  # deleted
            touched.add(day(self.events.pop(key)[0]))
        for key in rng.sample(sorted(self.events), rng.randrange(3)):  # moved to another day, or re-valued
            ts, v = self.events[key]
            new = ts_at(rng, FIRST, DAYS) if rng.random() < 0.5 else ts
            self.events[key] = (new, v + 1)
            touched |= {day(ts), day(new)}
        return touched, dims or note


def rebuilt(root: Path, run_id: str) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for target, partition in fetch(root, "SELECT target, partition_value FROM lakewrap.materializations "
                                         "WHERE run_id = ?", [run_id]):
        out.setdefault(target, set()).add(partition or WHOLE)
    return out


def stale(project: lakewrap.Project) -> dict[str, set[str]]:
    return {s.target: set(s.stale) for s in project.status() if s.stale}


def check_contents(root: Path, h: History, materialized: set[str]) -> None:
    live = sorted((k, ts, v) for k, (ts, v) in h.events.items() if day(ts) in materialized)
    assert sorted(fetch(root, "SELECT id, ts, v FROM s.ev")) == live
    counts, sums = Counter(day(ts) for _, ts, _ in live), Counter[str]()
    for _, ts, v in live:
        sums[day(ts)] += v
    assert sorted((d.date().isoformat(), n, int(v)) for d, n, v in fetch(root, "SELECT day, n, v FROM s.ev_daily")) \
        == sorted((d, n, sums[d]) for d, n in counts.items())
    assert sorted(fetch(root, "SELECT id, label FROM s.joined")) == sorted(
        (k, h.dims[v % 3].upper()) for k, _, v in live)
    assert sorted(fetch(root, "SELECT k, label FROM s.hist WHERE is_current")) == sorted(h.dims.items())


def history(root: Path, seed: int, rounds: int) -> list[int]:
    rng = random.Random(seed)
    for rel, text in MODELS.items():
        (root / "models" / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / "models" / rel).write_text(text)
    h = History(root, rng)
    h.write()
    project = lakewrap.Project(root)
    assert project.seed().ok
    report = project.run(start=FIRST.isoformat(), end=LAST.isoformat())
    assert report.ok, [r.error for r in report.results if r.error]
    materialized = {(FIRST + timedelta(days=d)).isoformat() for d in range(DAYS)}
    assert stale(project) == {}
    appended: set[str] = set()  # append partitions stale since their build: never re-run by --stale
    sizes = []
    for n in range(rounds):
        if n == 1 or rng.random() < 0.3:  # every model rebuilt in full, from unchanged seeds: nothing becomes stale
            assert project.run(REBUILT, start=FIRST.isoformat(), end=LAST.isoformat()).ok
            assert stale(project) == ({"s.log": appended} if appended else {})
        # round 1: nothing changed; round 3: only a dims note (the table model and the SCD2 re-run; the
        # SCD2 finds nothing to version, yet leaves `status`; the join is rebuilt through the view)
        days, dims = h.edit(events=n not in (0, 2), dims=n > 2 and rng.random() < 0.5,
                            note=n == 2 or (n > 2 and rng.random() < 0.3))
        h.write()
        assert project.seed().ok
        days &= materialized
        appended |= days
        sizes.append(len(days) + dims)
        # what `run --stale` rebuilds: the changed days, downstream of them, the join behind the view
        want = {"s.ev": days, "s.ev_daily": days, "s.dims_t": {WHOLE} if dims else set(),
                "s.joined": {WHOLE} if days or dims else set(), "s.hist": {WHOLE} if dims else set()}
        assert stale(project) == {k: v for k, v in (want | {"s.log": appended}).items() if v}
        report = project.run(stale=True)
        assert report.ok, [r.error for r in report.results if r.error]
        assert rebuilt(root, report.run_id) == {k: v for k, v in want.items() if v}
        assert stale(project) == ({"s.log": appended} if appended else {})
        check_contents(root, h, materialized)
    # an append model leaves `status` once it is rebuilt (here: in full)
    assert project.run(["s.log"], start=FIRST.isoformat(), end=LAST.isoformat(), full_refresh=True).ok
    assert stale(project) == {}
    return sizes


def test_seed_histories_are_exact(tmp_path: Path) -> None:
    sizes = history(tmp_path, 11, rounds=4)
    assert sizes[0] == 0 and all(sizes[1:])  # an unchanged re-seed, then changes



def test_table_rebuild_with_same_rows_is_not_a_change(tmp_path: Path) -> None:
    """A table model rebuilt with the same rows leaves its readers fresh; other rows make exactly the
    partitions they fall in stale (the reader's window filter maps them, as for the change feed)."""
    models = {"models/s/src_t.sql": "-- materialized table\nSELECT id, ts FROM raw.src\n",
              "models/s/reader.sql": "-- materialized incremental\n-- partitioned daily key=ts start=2024-01-01\n"
                                     "SELECT id, ts FROM s.src_t\n"
                                     "WHERE ts >= $partition_start AND ts < $partition_end\n"}
    for rel, text in models.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    write_csv(tmp_path / "seeds/raw/src.csv", ["id", "ts"], [(i, f"2024-01-0{1 + i % 3} 10:00") for i in range(6)])
    project = lakewrap.Project(tmp_path)
    assert project.seed().ok and project.run(start="2024-01-01", end="2024-01-03").ok
    assert project.run(["s.src_t"]).ok  # rebuilt (a new table id), same rows
    assert fetch(tmp_path, "SELECT count(*) FROM s.src_t") == [(6,)]
    assert stale(project) == {}
    write_csv(tmp_path / "seeds/raw/src.csv", ["id", "ts"],
              [(i, f"2024-01-0{1 + i % 3} 10:00") for i in range(6) if i != 4])  # a row of 2024-01-02 gone
    assert project.seed().ok and project.run(["s.src_t"]).ok
    assert stale(project) == {"s.reader": {"2024-01-02"}}
