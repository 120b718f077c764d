"""Iceberg reliability: unknown commit outcomes, races between writers, kill -9, bad inputs.

All on real pyiceberg SqlCatalogs. Races are made deterministic with the executor's
``before_commit`` hook: a second writer commits in full while the first holds an open transaction.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from click.testing import CliRunner

from lakewrap.cli import main
from lakewrap.compile import load_project
from lakewrap.execute.iceberg import IcebergLake
from lakewrap.runner import materialize_spec, run_project
from lakewrap.substrates.iceberg.commit import IcebergExecutor
from lakewrap.substrates.iceberg.state import materializations
from test_commit_lookup import unknown_after

UTC = timezone.utc
NOW = datetime(2024, 6, 1, tzinfo=UTC)
DI = ("-- materialized incremental\n-- partitioned daily key=ts\n"
      "SELECT id, v, ts FROM raw.src WHERE ts >= $partition_start AND ts < $partition_end\n")
AP = ("-- materialized incremental\n-- append\n"
      "SELECT id, v, ts FROM raw.src\n")
MG = ("-- materialized incremental\n-- unique_key id\n"
      "SELECT id, v, ts FROM raw.src\n")
SCHEMA = pa.schema([("id", pa.int32()), ("v", pa.int32()), ("ts", pa.timestamp("us", tz="UTC"))])


def project(root: Path, models: dict[str, str]) -> IcebergLake:
    root.mkdir(parents=True, exist_ok=True)
    (root / "lakewrap.toml").write_text('[lake]\nsubstrate = "iceberg"\n')
    for rel, text in models.items():
        (root / "models" / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / "models" / rel).write_text(text)
    return IcebergLake.open(root)


def source(lake: IcebergLake, days: int, per_day: int, v: int = 0) -> None:
    """``raw.src``: ``per_day`` rows on each of ``days`` days from 2024-01-01, value ``v``."""
    rows = [{"id": d * 1000 + i, "v": v, "ts": datetime(2024, 1, 1, 6, tzinfo=UTC) + timedelta(days=d)}
            for d in range(days) for i in range(per_day)]
    data = pa.Table.from_pylist(rows, schema=SCHEMA)
    table = lake.load("raw.src")
    if table is None:
        lake.ensure_namespace("raw")
        lake.catalog().create_table(("raw", "src"), schema=SCHEMA).append(data)
    else:
        table.overwrite(data)


def rows_of(lake: IcebergLake, name: str) -> list[dict[str, Any]]:
    table = lake.load(name)
    return [] if table is None else table.scan().to_arrow().to_pylist()  # type: ignore[no-any-return]


def spec_of(root: Path, target: str) -> Any:
    return load_project(root, None).select([target])[0]


# --- unknown commit outcomes ------------------------------------------------------------------------


@pytest.mark.parametrize("landed", [True, False])
def test_an_unknown_commit_outcome_is_looked_up_never_blindly_retried(landed: bool, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The commit raises CommitStateUnknownException after it landed (or without landing): the
    executor looks its commit id up in the table's history; an append is never applied twice."""
    from pyiceberg.exceptions import CommitStateUnknownException

    lake = project(tmp_path, {"out/ap.sql": AP})
    source(lake, 1, 5)
    assert run_project(tmp_path, now=NOW).ok  # the table exists: later commits are plain transactions
    unknown_after(monkeypatch, CommitStateUnknownException("lost the response"), landed=landed)
    report = run_project(tmp_path, now=NOW)
    (result,) = report.results
    assert result.status == "success", result.error
    assert result.attempts == (1 if landed else 2)
    assert len(rows_of(lake, "out.ap")) == 10  # two appends of 5 rows: never a third
    runs = Counter(m["run_id"] for m in materializations(lake.load("out.ap")))
    assert runs[report.run_id] == 1
    logs = "".join(p.read_text() for p in (tmp_path / "target" / "run" / report.run_id).glob("*.sql"))
    assert "looking up commit" in logs
    assert ("found in the table's history" in logs) == landed


# --- races --------------------------------------------------------------------------------------------


def race(root: Path, lake: IcebergLake, first: str, second: str, target: str = "out.di") -> tuple[Any, Any]:
    """Materialize ``target`` for partition ``first``; while its transaction is open, a second writer
    materializes partition ``second`` in full."""
    spec = spec_of(root, target)
    inner: list[Any] = []

    def intrude(_tx: Any) -> None:
        if inner:
            return
        other = IcebergExecutor(IcebergLake.open(root), "run-b", root / "target" / "b")
        con = other.lake.connect()
        try:
            inner.append(materialize_spec(other.lake, con, other, spec, second, NOW, None))
        finally:
            con.close()

    executor = IcebergExecutor(lake, "run-a", root / "target" / "a", before_commit=intrude)
    con = lake.connect()
    try:
        outer = materialize_spec(lake, con, executor, spec, first, NOW, None)
    finally:
        con.close()
    return outer, inner[0]


@pytest.mark.parametrize("same", [True, False], ids=["same-partition", "disjoint-partitions"])
@pytest.mark.parametrize("existing", [True, False], ids=["existing-table", "new-table"])
def test_two_writers_race_without_lost_or_duplicated_rows(same: bool, existing: bool, tmp_path: Path) -> None:
    lake = project(tmp_path, {"out/di.sql": DI})
    source(lake, 3, 20)
    if existing:  # the table exists with day 3 only: days 1 and 2 are new partitions of it
        assert run_project(tmp_path, partition="2024-01-03", now=NOW).ok
    outer, inner = race(tmp_path, lake, "2024-01-01", "2024-01-01" if same else "2024-01-02")
    assert inner.status == "success" and inner.attempts == 1, inner.error
    assert outer.status == "success", outer.error
    if same or not existing:  # the first writer's validation saw the second's commit: it re-read and redid
        assert outer.attempts == 2
    days = Counter(r["ts"].date().isoformat() for r in rows_of(lake, "out.di"))
    want = {"2024-01-01": 20} | ({} if same else {"2024-01-02": 20}) | ({"2024-01-03": 20} if existing else {})
    assert days == want
    assert Counter(r["id"] for r in rows_of(lake, "out.di")).most_common(1)[0][1] == 1  # no duplicate key


def test_a_merge_race_on_the_same_keys_is_validated(tmp_path: Path) -> None:
    lake = project(tmp_path, {"out/mg.sql": MG})
    source(lake, 1, 10)
    assert run_project(tmp_path, now=NOW).ok
    source(lake, 1, 10, v=1)
    outer, inner = race(tmp_path, lake, None, None, target="out.mg")  # type: ignore[arg-type]
    assert inner.status == outer.status == "success" and outer.attempts == 2
    rows = rows_of(lake, "out.mg")
    assert len(rows) == 10 and {r["v"] for r in rows} == {1}


def test_snapshot_isolation_is_refused(tmp_path: Path) -> None:
    lake = project(tmp_path, {"out/di.sql": DI})
    source(lake, 1, 5)
    assert run_project(tmp_path, partition="2024-01-01", now=NOW).ok
    table = lake.load("out.di")
    with table.transaction() as tx:
        tx.set_properties({"write.delete.isolation-level": "snapshot"})
    before = len(lake.load("out.di").snapshots())
    (result,) = run_project(tmp_path, partition="2024-01-01", now=NOW).results
    assert result.status == "failed" and "serializable" in (result.error or "")
    assert len(lake.load("out.di").snapshots()) == before


# --- processes ----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_three_processes_on_the_same_and_disjoint_partitions(tmp_path: Path) -> None:
    """Three `lakewrap run` processes over days 1-4 of one table, in different orders, at once."""
    lake = project(tmp_path, {"out/di.sql": DI})
    source(lake, 4, 50)
    orders = [["2024-01-01", "2024-01-02", "2024-01-03", "2024-01-04"],
              ["2024-01-04", "2024-01-03", "2024-01-02", "2024-01-01"],
              ["2024-01-02", "2024-01-04", "2024-01-01", "2024-01-03"]]
    script = ("import sys\nfrom pathlib import Path\nfrom lakewrap.runner import run_project\n"
              "for day in sys.argv[2:]:\n"
              "    r = run_project(Path(sys.argv[1]), partition=day).results[0]\n"
              "    print(day, r.status, r.attempts, r.error, flush=True)\n")
    procs = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path), *days], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for days in orders]
    outs = [p.communicate(timeout=600) for p in procs]
    for (out, err), p in zip(outs, procs, strict=True):
        assert p.returncode == 0, err
        assert all(line.split()[1] == "success" for line in out.splitlines()), out
    rows = rows_of(lake, "out.di")
    assert Counter(r["ts"].date().isoformat() for r in rows) == {f"2024-01-0{d}": 50 for d in range(1, 5)}
    assert len({r["id"] for r in rows}) == 200
    assert len(materializations(lake.load("out.di"))) == 12


def test_a_namespace_another_process_created_meanwhile_is_no_error(tmp_path: Path) -> None:
    """Two first runs create a model's namespace at once. pyiceberg's SQL catalog checks, then
    inserts, so the loser's insert hits the winner's committed row and SQLite answers with a
    unique-constraint error (seen in the three-process test above). The interleaving is forced here
    on the real SQLite catalog: the loser's existence check answers as it did before the winner's
    commit, once; then ``ensure_namespace`` must see the namespace and go on."""
    lake = project(tmp_path, {"out/di.sql": DI})
    IcebergLake.open(tmp_path).ensure_namespace("late")  # the winner
    loser = lake.catalog()
    exists = loser.namespace_exists
    calls: list[str] = []

    def as_seen(ns: str) -> bool:  # the first check answers as the loser's did, before the commit
        calls.append(ns)
        return False if len(calls) == 1 else bool(exists(ns))

    loser.namespace_exists = as_seen
    lake.ensure_namespace("late")
    assert len(calls) == 2  # pyiceberg's stale check, then ensure_namespace's own after the error
    assert exists("late")


KILL_CHILD = """
import sys
from pathlib import Path
import pyarrow as pa
from datetime import datetime, timezone, timedelta
from lakewrap.execute.iceberg import IcebergLake
from lakewrap.runner import run_project
root = Path(sys.argv[1]); g = int(sys.argv[2])
lake = IcebergLake.open(root)
schema = pa.schema([("id", pa.int32()), ("v", pa.int32()), ("ts", pa.timestamp("us", tz="UTC"))])
while True:
    g += 1
    rows = [{"id": i, "v": g, "ts": datetime(2024, 1, 1, 6, tzinfo=timezone.utc) + timedelta(minutes=i)}
            for i in range(300)]
    lake.load("raw.src").overwrite(pa.Table.from_pylist(rows, schema=schema))
    r = run_project(root, partition="2024-01-01").results[0]
    assert r.status == "success", r.error
    print(g, flush=True)
"""


def _metadata_location(catalog_db: Path, namespace: str, name: str) -> str | None:
    """The table's current metadata file, read straight from the SQL catalog's SQLite database."""
    import sqlite3

    con = sqlite3.connect(f"file:{catalog_db}?mode=ro", uri=True, timeout=10)
    try:
        row = con.execute("SELECT metadata_location FROM iceberg_tables WHERE table_namespace = ? AND "
                          "table_name = ?", (namespace, name)).fetchone()
    finally:
        con.close()
    return None if row is None else str(row[0])


def _await_change(catalog_db: Path, namespace: str, name: str, seen: str | None, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while _metadata_location(catalog_db, namespace, name) == seen:
        assert time.monotonic() < deadline, f"{namespace}.{name} was not committed within {timeout} s"
        time.sleep(0.002)


BEFORE_SOURCE, BEFORE_COMMIT, AFTER_COMMIT = "before the source write", "before the commit", "after the commit"


@pytest.mark.slow
def test_kill_9_leaves_every_partition_before_or_after_and_state_agrees(tmp_path: Path) -> None:
    """kill -9 of a process looping (overwrite the source, run the model): at a random moment of the
    run that follows a source write, or (every other trial) the moment the model's commit is in the
    catalog, both watched from the parent in the catalog's database. Each kill is placed by what the
    lake shows: before a generation's source write, between it and the model's commit, or after the
    commit; each place implies the number of materializations recorded and whether the partition's
    pin is the source's current snapshot. Both sides of the commit must be hit."""
    lake = project(tmp_path, {"out/di.sql": DI})
    source(lake, 1, 300)
    assert run_project(tmp_path, partition="2024-01-01", now=NOW).ok
    catalog_db = lake.config.iceberg_catalog_path(tmp_path)
    rng = random.Random(7)
    trials = int(os.environ.get("LAKEWRAP_KILLS", "8"))
    generation = 0
    landed: Counter[str] = Counter()
    for trial in range(trials):
        recorded = len(materializations(IcebergLake.open(tmp_path).load("out.di")))
        child = subprocess.Popen([sys.executable, "-c", KILL_CHILD, str(tmp_path), str(generation)],
                                 stdout=subprocess.PIPE, text=True)
        # the child is at work once it has written its first source (its start-up takes seconds)
        _await_change(catalog_db, "raw", "src", _metadata_location(catalog_db, "raw", "src"))
        if trial % 2 == 0:  # inside the run that follows the source write, at a random moment
            time.sleep(rng.uniform(0.0, 1.5))
        else:  # the moment the model's commit is in the catalog
            _await_change(catalog_db, "out", "di", _metadata_location(catalog_db, "out", "di"))
        os.kill(child.pid, signal.SIGKILL)
        out, _ = child.communicate()
        reported = [int(x) for x in out.split()]
        table = IcebergLake.open(tmp_path).load("out.di")
        values = Counter(r["v"] for r in table.scan().to_arrow().to_pylist())
        assert len(values) == 1 and sum(values.values()) == 300, values  # never a mixed partition
        (v,) = values
        last = reported[-1] if reported else generation
        src = IcebergLake.open(tmp_path).load("raw.src")
        (src_v,) = {r["v"] for r in src.scan().to_arrow().to_pylist()}
        if v == last + 1:
            where = AFTER_COMMIT  # the in-flight generation committed; the child died before saying so
        elif v == last:
            where = BEFORE_COMMIT if src_v == last + 1 else BEFORE_SOURCE
        else:
            raise AssertionError(f"partition holds generation {v}, the child reported {reported} from {generation}")
        assert src_v in (last, last + 1), (src_v, last)
        landed[where] += 1
        # what that place implies: one materialization per committed generation, no more, no fewer
        history = materializations(table)
        assert len(history) == recorded + len(reported) + (where == AFTER_COMMIT), (where, reported)
        # the newest materialization is the commit that wrote the current data, pinned to its source
        newest = history[-1]
        assert newest["snapshot_id"] == table.current_snapshot().snapshot_id
        pinned = src.metadata.snapshot_by_id(newest["pins"]["raw.src"])
        assert {r["v"] for r in src.scan(snapshot_id=pinned.snapshot_id).to_arrow().to_pylist()} == {v}
        # killed between the source write and the commit: the source moved past the partition's pin
        # (the partition is stale, for the next run to repair); otherwise the pin is the current source
        assert (pinned.snapshot_id != src.current_snapshot().snapshot_id) == (where == BEFORE_COMMIT), where
        generation = max(v, src_v)
    print(f"kill -9 placed: {dict(landed)}")  # shown with -s
    assert sum(landed.values()) == trials
    assert landed[AFTER_COMMIT] >= 1 and landed[BEFORE_COMMIT] >= 1, landed


# --- bad inputs: a clear error and no new snapshot ----------------------------------------------------


BAD = {
    "a view": ("-- materialized view\nSELECT id FROM raw.src\n", "cannot hold a view"),
    "a merge predicate": ("-- materialized incremental\n-- unique_key id predicate=\"target.v > 0\"\n"
                          "SELECT id, v, ts FROM raw.src\n", "predicate="),
    "a literal model": ("DELETE FROM raw.src\n", "literal model cannot write an Iceberg table"),
    "duplicate keys": ("-- materialized incremental\n-- unique_key v\nSELECT id, v, ts FROM raw.src\n",
                       "more than once"),
    "rows outside the window": ("-- materialized incremental\n-- partitioned daily key=ts\n"
                                "SELECT id, v, ts FROM raw.src\n", "outside the partition window"),
    "a new column": ("-- materialized incremental\n-- partitioned daily key=ts\n"
                     "SELECT id, v, ts, 1 AS extra FROM raw.src WHERE ts >= $partition_start AND ts < $partition_end\n",
                     "extra"),
    "a runtime error": ("-- materialized incremental\n-- partitioned daily key=ts\n"
                        "SELECT id, CAST('x' || v AS INTEGER) AS v, ts FROM raw.src "
                        "WHERE ts >= $partition_start AND ts < $partition_end\n", "Conversion Error"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_input_fails_clearly_and_writes_no_snapshot(case: str, tmp_path: Path) -> None:
    lake = project(tmp_path, {"out/t.sql": DI})
    source(lake, 2, 5)
    assert run_project(tmp_path, partition="2024-01-01", now=NOW).ok
    text, message = BAD[case]
    (tmp_path / "models" / "out" / "t.sql").write_text(text)

    def state() -> tuple[Any, ...]:
        cat = IcebergLake.open(tmp_path)
        return tuple((n, cat.load(n).metadata_location) for n in cat.tables())

    before = state()
    part = ["--partition", "2024-01-01"] if "partitioned" in text else []
    result = CliRunner().invoke(main, ["run", *part, "--project", str(tmp_path), "--format", "json"])
    assert result.exit_code == 1, result.stdout
    (res,) = json.loads(result.stdout)["results"]
    assert res["status"] == "failed" and message in res["error"], res["error"]
    assert res["error"].startswith("models/out/t.sql") or "models/out/t.sql" in res["error"]
    assert state() == before  # no table changed its metadata: no new snapshot anywhere


def test_a_full_rebuild_takes_the_new_columns_in_one_commit(tmp_path: Path) -> None:
    lake = project(tmp_path, {"out/t.sql": "-- materialized table\nSELECT id, v, ts FROM raw.src\n"})
    source(lake, 1, 5)
    assert run_project(tmp_path, now=NOW).ok
    (tmp_path / "models" / "out" / "t.sql").write_text(
        "-- materialized table\nSELECT id, CAST(v AS VARCHAR) AS v, 'x' AS note FROM raw.src\n")
    before = len(lake.load("out.t").snapshots())
    (result,) = run_project(tmp_path, now=NOW).results
    assert result.status == "success", result.error
    table = lake.load("out.t")
    assert [f.name for f in table.schema().fields] == ["id", "v", "note"]
    assert str(table.schema().find_field("v").field_type) == "string"
    assert table.scan().to_arrow().to_pylist()[0] | {"id": 0} == {"id": 0, "v": "0", "note": "x"}
    assert len(materializations(table)) == 2 and len(table.snapshots()) > before


def test_full_refresh_rebuilds_in_one_commit(tmp_path: Path) -> None:
    """--full-refresh of a merge model whose columns changed: computed as a first run, committed as
    one overwrite of every row with the new columns (the table is never dropped)."""
    lake = project(tmp_path, {"out/mg.sql": MG})
    source(lake, 2, 5)
    assert run_project(tmp_path, now=NOW).ok
    uuid_before = lake.load("out.mg").metadata.table_uuid
    (tmp_path / "models" / "out" / "mg.sql").write_text(
        "-- materialized incremental\n-- unique_key id\nSELECT id, v * 10 AS w FROM raw.src WHERE id < 1000\n")
    (result,) = run_project(tmp_path, now=NOW, full_refresh=True).results
    assert result.status == "success", result.error
    table = lake.load("out.mg")
    assert table.metadata.table_uuid == uuid_before  # the same table, not a dropped and recreated one
    assert [f.name for f in table.schema().fields] == ["id", "w"]
    assert sorted(r["id"] for r in table.scan().to_arrow().to_pylist()) == list(range(5))
    assert (result.rows_inserted, result.rows_updated, result.rows_deleted) == (5, 0, 0)
    last = materializations(table)[-1]
    assert (last["rows_inserted"], last["rows_updated"], last["rows_deleted"]) == (5, 0, 0)
