"""A lakewrap project on a real embedded DuckLake, driven step by step and checked against the
plain-Python reference in ``strategy_reference.py``.

:class:`Lakehouse` owns one project folder: it writes the model files, mutates sources with plain
SQL through a short-lived helper connection (closed before lakewrap runs: a DuckDB-file catalog
admits one instance), runs ``run_project`` with a fixed logical time, and remembers the lake's
snapshot id after every step (``head``).

:class:`Checker` keeps the reference state of each model. After every run it checks each model's
result (status, guard error, row counts, warnings) against the reference at once, and records the
expected table content at ``head``. :meth:`Checker.verify` then reads every recorded version back
through DuckLake time travel (``AT (VERSION => n)``) in one connection, and checks that
``lakewrap.materializations`` and the snapshots' ``commit_extra_info`` agree with what committed.
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any, ClassVar
from zoneinfo import ZoneInfo

import pyarrow as pa

import lakewrap
from lakewrap.compile import compile_project
from lakewrap.execute.executor import Result
from lakewrap.execute.lake import Lake
from lakewrap.runner import RunReport, run_project
from strategy_reference import GUARD_TEXT, Ambiguous, Outcome, RefModel, Refused, Row, Table, Window

UTC = timezone.utc
BASE = datetime(2024, 1, 1, tzinfo=UTC)

ARROW = {
    "INTEGER": pa.int32(),
    "BIGINT": pa.int64(),
    "VARCHAR": pa.string(),
    "BOOLEAN": pa.bool_(),
    "TIMESTAMPTZ": pa.timestamp("us", tz="UTC"),
}


def at(day: int, hour: int = 0, minute: int = 0) -> datetime:
    """A UTC instant ``day`` days after 2024-01-01."""
    return BASE + timedelta(days=day, hours=hour, minutes=minute)


def partition(day: int) -> str:
    return (date(2024, 1, 1) + timedelta(days=day)).isoformat()


def daily_window(value: str, key: str, tz: str = "UTC") -> Window:
    """A daily partition's window: local midnight to the next local midnight (computed here, not by lakewrap)."""
    zone = ZoneInfo(tz)
    day = date.fromisoformat(value)
    start = datetime(day.year, day.month, day.day, tzinfo=zone)
    following = day + timedelta(days=1)
    return Window(key, start, datetime(following.year, following.month, following.day, tzinfo=zone))


def quote(name: str) -> str:
    return ".".join('"' + part.replace('"', '""') + '"' for part in name.split("."))


def fetch(con: Any, table: str, version: int | None = None) -> Table | None:
    """The rows of ``table`` (at a snapshot version), as dicts; None when it does not exist."""
    source = quote(table) + (f" AT (VERSION => {int(version)})" if version is not None else "")
    try:
        cursor = con.execute(f"SELECT * FROM {source}")
    except Exception as exc:
        if "does not exist" in str(exc):
            return None
        raise
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def show(rows: Counter[tuple[Any, ...]]) -> str:
    return "\n".join(f"    {n} x {row}" for row, n in sorted(rows.items(), key=repr)) or "    (none)"


def assert_same_rows(actual: Table | None, expected: Table | None, columns: Sequence[str], what: str) -> None:
    if expected is None:
        assert actual is None, f"{what}: the table should not exist, it has {len(actual or [])} rows"
        return
    assert actual is not None, f"{what}: the table does not exist; expected {len(expected)} rows"
    if actual:
        assert set(actual[0]) == set(columns), f"{what}: columns {sorted(actual[0])} != {sorted(columns)}"
    got = Counter(tuple(r[c] for c in columns) for r in actual)
    want = Counter(tuple(r[c] for c in columns) for r in expected)
    assert got == want, (f"{what}: table content differs from the reference\n  columns {list(columns)}\n"
                         f"  missing:\n{show(want - got)}\n  unexpected:\n{show(got - want)}")


def csv_cell(value: Any) -> str:
    return "" if value is None else value.isoformat() if isinstance(value, datetime) else str(value)


class Lakehouse:
    """One project folder with its embedded DuckLake under ``<root>/.lakewrap/``."""

    substrate = "ducklake"  # as the compiler names it: ducklake, iceberg, iceberg-sql

    def __init__(self, root: Path, models: Mapping[str, str]):
        self.root = root.resolve()
        for rel, text in models.items():
            path = self.root / "models" / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        (self.root / "models").mkdir(parents=True, exist_ok=True)
        self.lake = Lake.open(self.root)
        self.head = 0  # the lake's snapshot id after the last step

    def sql(self, *statements: str, read: Sequence[str] = (), tables: Mapping[str, Sequence[Row]] | None = None,
            types: Mapping[str, Mapping[str, str]] | None = None) -> dict[str, Table]:
        """Run plain SQL in one transaction on a helper connection that is closed before returning.

        ``tables`` replaces the content of each named table with the given rows (created with the
        column ``types`` when missing); ``read`` names tables whose rows to return afterwards.
        """
        con = self.lake.connect()
        try:
            con.execute("BEGIN TRANSACTION")
            for name, rows in (tables or {}).items():
                cols = (types or {})[name]
                if "." in name:
                    con.execute(f"CREATE SCHEMA IF NOT EXISTS {quote(name.rsplit('.', 1)[0])}")
                con.execute(f"CREATE TABLE IF NOT EXISTS {quote(name)} ("
                            + ", ".join(f"{quote(c)} {t}" for c, t in cols.items()) + ")")
                con.execute(f"DELETE FROM {quote(name)}")
                data = pa.Table.from_pylist([dict(r) for r in rows],
                                            schema=pa.schema([(c, ARROW[t]) for c, t in cols.items()]))
                con.register("__rows", data)
                con.execute(f"INSERT INTO {quote(name)} BY NAME SELECT * FROM __rows")
                con.unregister("__rows")
            for statement in statements:
                con.execute(statement)
            con.execute("COMMIT")
            out = {name: fetch(con, name) or [] for name in read}
            self.head = int(con.execute("SELECT id FROM lake.current_snapshot()").fetchone()[0])
            return out
        finally:
            con.close()

    def seed(self, files: Mapping[str, Sequence[Row]], columns: Mapping[str, Sequence[str]]) -> None:
        """Write ``seeds/<schema>/<table>.csv`` files and load them with ``Project.seed()``."""
        for name, rows in files.items():
            path = self.root / "seeds" / (name.replace(".", "/") + ".csv")
            path.parent.mkdir(parents=True, exist_ok=True)
            cols = columns[name]
            path.write_text("\n".join([",".join(cols), *(",".join(csv_cell(r[c]) for c in cols) for r in rows)]) + "\n")
        report = lakewrap.Project(self.root).seed()
        assert report.ok, [r.error for r in report.results]
        self.head = max([self.head, *(r.snapshot_id or 0 for r in report.results)])

    def materialize(self, rows: Sequence[Row], types: Mapping[str, str], **options: Any) -> Result:
        """Write ``rows`` (as an Arrow table) with ``lakewrap.materialize``."""
        schema = pa.schema([(c, ARROW[t]) for c, t in types.items()])
        data = pa.Table.from_pylist([dict(r) for r in rows], schema=schema)
        result = lakewrap.materialize(data, lake=self.root, **options)
        assert result.status == "success", result.error
        self.head = max(self.head, result.snapshot_id or 0)
        return result

    def run(self, *selectors: str, partition: str | None = None, now: datetime, strict: bool = False) -> RunReport:
        """``run_project`` with ``reappend``: the references model ``append`` as inserting on every run
        (a recorded partition is otherwise not appended again: ``tests/test_skip_rules.py``)."""
        report = run_project(self.root, list(selectors), partition=partition, now=now, strict=strict, reappend=True)
        ids = [r.snapshot_id for r in report.results if r.snapshot_id is not None]
        self.head = max([self.head, *ids])
        return report

    def connect(self, read_only: bool = True) -> Any:
        return Lake.open(self.root, read_only=read_only).connect()

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        """The rows of one query on a read-only connection, closed before returning."""
        con = self.connect()
        try:
            return [tuple(r) for r in con.execute(sql).fetchall()]
        finally:
            con.close()


_SHAS: dict[tuple[str, str], str] = {}  # (target, model file text) -> compiled sql_sha256


@dataclass
class Commit:
    """A materialization that must be recorded in the lake."""

    run_id: str
    target: str
    partition: str | None
    strategy: str
    inserted: int
    updated: int
    deleted: int
    sql_sha256: str
    snapshot_id: int


@dataclass
class Tracked:
    model: RefModel
    table: Table | None = None
    lost: str | None = None  # why the reference stopped following this model (an ambiguous step)


def result_for(report: RunReport, target: str) -> Result:
    found = [r for r in report.results if r.target == target]
    assert len(found) == 1, f"{target}: expected one result, got {[r.to_dict() for r in report.results]}"
    return found[0]


@dataclass
class Checker:
    lakehouse: Lakehouse
    models: Sequence[RefModel]
    tracked: dict[str, Tracked] = field(init=False)
    checkpoints: list[tuple[int, str, Table | None, str]] = field(default_factory=list)
    commits: list[Commit] = field(default_factory=list)
    shas: dict[str, str] = field(default_factory=dict)
    steps: int = 0

    def __post_init__(self) -> None:
        self.tracked = {m.target: Tracked(m) for m in self.models}

    # DuckLake: an SCD2 re-run that changes nothing still commits its materialization record (no data)
    unchanged_commits: ClassVar[bool] = True

    def no_snapshot_ok(self, target: str, counts: tuple[int, int, int]) -> bool:
        """Whether a successful materialization may report no snapshot (here: never)."""
        return False

    def sha(self, target: str, partition: str | None) -> str:
        """The compiled plan's sql_sha256, from a fresh compile (no cache; memoized per model text)."""
        if target not in self.shas:
            text = (self.lakehouse.root / "models" / (target.replace(".", "/") + ".sql")).read_text()
            if (target, text) not in _SHAS:
                (plan,) = compile_project(self.lakehouse.root, [target], partition=partition, use_cache=False,
                                          now=datetime(2024, 6, 1, tzinfo=UTC))
                _SHAS[target, text] = plan.sql_sha256
            self.shas[target] = _SHAS[target, text]
        return self.shas[target]

    def step(self, report: RunReport, sources: Mapping[str, Table], *, partition: str | None, now: datetime,
             strict: bool = False) -> dict[str, Outcome | Refused | None]:
        """Check every model's result of one run against the reference; returns the reference outcomes."""
        self.steps += 1
        outcomes: dict[str, Outcome | Refused | None] = {}
        for target, tr in self.tracked.items():
            if tr.lost:
                continue
            res = result_for(report, target)
            what = f"step {self.steps} {target} partition {partition}"
            ref = tr.model
            window = daily_window(partition, ref.window_key, ref.tz) if ref.window_key and partition else None
            try:
                rows = ref.select(sources, window)
                outcome: Outcome | Refused = ref.apply(copy.deepcopy(tr.table), rows, window, now)
                if strict and isinstance(outcome, Outcome) and outcome.warnings:
                    outcome = Refused({"the result is empty"})
            except Ambiguous as exc:
                tr.lost = f"{what}: {exc}"
                outcomes[target] = None
                continue
            except Refused as exc:
                outcome = exc
            outcomes[target] = outcome
            if isinstance(outcome, Refused):
                assert res.status == "failed", f"{what}: the reference refuses ({outcome}), lakewrap says {res}"
                texts = [GUARD_TEXT.get(r, r) for r in outcome.reasons]
                assert any(t in (res.error or "") for t in texts), f"{what}: expected {texts} in {res.error!r}"
                assert res.snapshot_id is None and res.rows_inserted == res.rows_updated == res.rows_deleted == 0
            else:
                assert res.status == outcome.status, f"{what}: expected {outcome.status}, got {res}"
                counts = (res.rows_inserted, res.rows_updated, res.rows_deleted)
                assert counts == (outcome.inserted, outcome.updated, outcome.deleted), (
                    f"{what}: row counts (inserted, updated, deleted) {counts} != reference "
                    f"{(outcome.inserted, outcome.updated, outcome.deleted)}")
                assert bool(res.warnings) == bool(outcome.warnings), f"{what}: warnings {res.warnings}"
                if outcome.status == "success" or (outcome.status == "unchanged" and self.unchanged_commits
                                                    and tr.table is not None):  # not a first run
                    assert res.snapshot_id is not None or self.no_snapshot_ok(target, counts), what
                    sha = self.sha(target, partition)
                    assert res.sql_sha256 == sha, f"{what}: the run's sql_sha256 is not the compiled plan's"
                    self.commits.append(Commit(report.run_id, target, res.partition, res.strategy, *counts, sha,
                                               res.snapshot_id))
                else:
                    assert res.snapshot_id is None, what
                tr.table = outcome.table
            self.checkpoints.append((self.lakehouse.head, target, copy.deepcopy(tr.table), what))
        return outcomes

    def verify(self) -> None:
        """Read every recorded version back and compare; check state rows and commit messages."""
        con = self.lakehouse.connect()
        try:
            for version, target, expected, what in self.checkpoints:
                if self.tracked[target].lost:
                    continue
                actual = fetch(con, target, version)
                assert_same_rows(actual, expected, self.tracked[target].model.columns, f"{what} (snapshot {version})")
            self.verify_state(con)
        finally:
            con.close()

    def verify_state(self, con: Any) -> None:
        live = {t for t, tr in self.tracked.items() if not tr.lost}
        rows = con.execute(
            "SELECT run_id, target, partition_value, strategy, rows_inserted, rows_updated, rows_deleted, "
            "sql_sha256 FROM lakewrap.materializations").fetchall() if self.commits else []
        got = Counter(r for r in rows if r[1] in live)
        want = Counter((c.run_id, c.target, c.partition, c.strategy, c.inserted, c.updated, c.deleted, c.sql_sha256)
                       for c in self.commits if c.target in live)
        assert got == want, f"lakewrap.materializations disagrees with the commits:\n  missing:\n{show(want - got)}" \
                            f"\n  unexpected:\n{show(got - want)}"
        infos = {}
        for sid, author, message, extra in con.execute(
                "SELECT snapshot_id, author, commit_message, commit_extra_info FROM lake.snapshots() "
                "WHERE commit_extra_info IS NOT NULL").fetchall():
            info = json.loads(extra)
            for entry in info.get("members", [info]):  # a group commit: one entry per materialization
                if entry.get("target") in live:
                    infos[(sid, entry["target"], entry.get("partition"))] = (author, message, entry)
        assert sorted(infos, key=repr) == sorted(((c.snapshot_id, c.target, c.partition) for c in self.commits
                                                  if c.target in live), key=repr), \
            "the snapshots carrying lakewrap commit info are not exactly the committed materializations"
        for c in self.commits:
            if c.target not in live:
                continue
            author, message, info = infos[(c.snapshot_id, c.target, c.partition)]
            assert author == "lakewrap" and (c.target in message or info.get("group"))
            assert (info["run_id"], info["target"], info["partition"], info["strategy"], info["sql_sha256"]) == (
                c.run_id, c.target, c.partition, c.strategy, c.sql_sha256), f"snapshot {c.snapshot_id}: {info}"
