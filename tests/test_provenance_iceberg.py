"""Provenance on a real Iceberg lake (pyiceberg SqlCatalog on SQLite): explain, reproduce, restore
and compile --as-of.

The same models and source histories as ``test_provenance.py``. References are computed without
the code under test: table content read with pyiceberg ``scan(snapshot_id=...)``, snapshot
summaries read straight from the table metadata, and every file of the lake listed before and after.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import lakewrap
from icehouse import IcebergLakehouse
from lakehouse import daily_window, partition
from lakeproject import cli
from lakewrap.errors import PlanError, StateError
from test_provenance import MODELS, V2, V3, WHOLE, History, ev

# Iceberg has no views; sum(BIGINT) is a HUGEINT that Iceberg stores as DECIMAL(38, 0), which the next
# run's HUGEINT then drifts from: the sums are cast back to BIGINT
ICE_MODELS = {k: v.replace("sum(amount)", "CAST(sum(amount) AS BIGINT)") for k, v in MODELS.items() if k != "m/v.sql"}
ICE_WHOLE = [m for m in WHOLE if m != "m.v"]


class IceHistory(History):
    whole = ICE_WHOLE

    def __init__(self, root: Path) -> None:
        self.house = IcebergLakehouse(root, ICE_MODELS)  # type: ignore[assignment]
        self.runs = []


@pytest.fixture
def history(tmp_path: Path) -> IceHistory:
    h = IceHistory(tmp_path / "proj")
    h.build()
    return h


def table(root: Path, name: str) -> Any:
    """The pyiceberg table, through a catalog of its own (not lakewrap's)."""
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog("lakewrap", uri=f"sqlite:///{root / '.lakewrap' / 'iceberg.db'}",
                         warehouse=(root / ".lakewrap" / "warehouse").as_uri())
    return catalog.load_table(tuple(name.split(".")))


def rows(root: Path, name: str, snapshot_id: int | None = None, day: int | None = None) -> list[tuple[Any, ...]]:
    t = table(root, name)
    data = (t.scan(snapshot_id=snapshot_id) if snapshot_id is not None else t.scan()).to_arrow().to_pylist()
    if day is not None:
        w = daily_window(partition(day), "ts")
        data = [r for r in data if w.start <= r["ts"] < w.end]
    return sorted(tuple(sorted(r.items())) for r in data)


def summary(root: Path, name: str, snapshot_id: int) -> dict[str, str]:
    snap = table(root, name).metadata.snapshot_by_id(snapshot_id)
    return dict(snap.summary.additional_properties)


def lake_files(root: Path) -> dict[str, int]:
    """Every file of the lake (catalog and warehouse) with its size: a write of any kind changes it."""
    base = root / ".lakewrap"
    return {str(p.relative_to(base)): p.stat().st_size for p in sorted(base.rglob("*")) if p.is_file()}


def state(root: Path) -> tuple[dict[str, Any], dict[str, int]]:
    con = sqlite3.connect(root / ".lakewrap" / "iceberg.db")
    try:
        pointers = dict(con.execute("SELECT table_namespace || '.' || table_name, metadata_location "
                                    "FROM iceberg_tables").fetchall())
    finally:
        con.close()
    return pointers, lake_files(root)


def test_catalog_paths(history: IceHistory) -> None:
    """The helpers above read the catalog lakewrap writes (a guard for the paths they assume)."""
    assert "m.di" in state(history.house.root)[0]


def test_reproduce_matches_every_strategy_after_a_history(history: IceHistory) -> None:
    root = history.house.root
    history.source([ev(9, "z", 999, 0, 3, 3), ev(10, "z", 1, 1, 3, 3)])  # later source changes must not matter
    before = state(root)
    seen = set()
    for run_id, committed in history.runs:
        report = lakewrap.Project(root).reproduce(run_id)
        got = {(r.target, r.partition): r for r in report.results}
        assert {k: r.snapshot_id for k, r in got.items()} == {(r.target, r.partition): r.snapshot_id
                                                               for r in committed}, run_id
        for r in report.results:
            seen.add(r.strategy)
            assert r.status == "MATCH", r
            assert r.only_in_reproduction == r.only_in_table == 0 and r.digest_reproduced == r.digest_table
            assert r.rows_in_table == r.rows_reproduced == len(rows(root, r.target, r.snapshot_id))
            base = summary(root, r.target, r.snapshot_id)["lakewrap.base_snapshot"]
            assert r.pin == (int(base) if base else None)
        assert report.ok
    assert seen == {"table", "delete+insert", "merge", "append", "snapshot"}
    assert state(root) == before, "reproduce wrote to the lake"


def _tamper_pins(root: Path, name: str, snapshot_id: int, pins: dict[str, int]) -> None:
    """Rewrite the recorded pins of one commit."""
    _rewrite_summary(root, name, snapshot_id, lambda props: props.update({"lakewrap.pins": json.dumps(pins)}))


def _rewrite_summary(root: Path, name: str, snapshot_id: int, edit: Callable[[dict[str, str]], Any]) -> None:
    """Edit the summaries of one commit's snapshots: a new metadata file with the edited summaries, and
    the catalog pointed at it (pyiceberg's API cannot change an existing snapshot's summary)."""
    t = table(root, name)
    cid = summary(root, name, snapshot_id)["lakewrap.commit_id"]
    path = Path(t.metadata_location.removeprefix("file://"))
    meta = json.loads(path.read_text())
    for snap in meta["snapshots"]:
        if snap["summary"].get("lakewrap.commit_id") == cid:
            edit(snap["summary"])
    new = path.with_name("99999-tampered.metadata.json")
    new.write_text(json.dumps(meta))
    con = sqlite3.connect(root / ".lakewrap" / "iceberg.db")
    with con:
        con.execute("UPDATE iceberg_tables SET previous_metadata_location = metadata_location, metadata_location = ?"
                    " WHERE table_namespace = ? AND table_name = ?", (new.as_uri(), *name.split(".")))
    con.close()


def test_reproduce_mismatch_when_a_pin_is_altered(history: IceHistory) -> None:
    root = history.house.root
    first = next(r for r in history.runs[1][1] if r.target == "m.di")  # V1, partition 1
    run_id = history.runs[3][0]  # V2, partition 1: id 5 appeared in it, id 4 changed
    res = next(r for r in history.runs[3][1] if r.target == "m.di")
    code, out, _ = cli("reproduce", run_id, "--model", "m.di", "--project", str(root), "--format", "json")
    assert code == 0 and json.loads(out)["results"][0]["status"] == "MATCH"
    old_pins = json.loads(summary(root, "m.di", first.snapshot_id)["lakewrap.pins"])
    assert old_pins != json.loads(summary(root, "m.di", res.snapshot_id)["lakewrap.pins"])
    _tamper_pins(root, "m.di", res.snapshot_id, old_pins)
    code, out, _ = cli("reproduce", run_id, "--model", "m.di", "--project", str(root), "--format", "json")
    (r,) = json.loads(out)["results"]
    assert code == 1 and r["status"] == "MISMATCH"
    # at the old pin partition 1 of the source held ids 3, 4 (V1); the table holds 3, 4, 5 (V2), 4 changed;
    # partition 0 (ids 1, 2) is the same in both
    assert (r["only_in_reproduction"], r["only_in_table"]) == (1, 2)


def test_reproduce_mismatch_when_the_recorded_sql_is_tampered(history: IceHistory) -> None:
    from lakewrap.provenance_record import decode, encode

    root = history.house.root
    run_id, committed = history.runs[2]
    res = next(r for r in committed if r.target == "m.full")

    def tamper(props: dict[str, str]) -> None:
        payload = decode(props["lakewrap.statements"])
        before = json.dumps(payload)
        for st in payload["statements"]:  # the recorded SQL holds the model's SELECT as written
            st["sql"] = st["sql"].replace("sum(amount)", "sum(amount) + 1")
        assert json.dumps(payload) != before, "the tamper changed nothing"
        props["lakewrap.statements"] = encode(payload)

    _rewrite_summary(root, "m.full", res.snapshot_id, tamper)
    report = lakewrap.Project(root).reproduce(run_id, model="m.full")
    (r,) = report.results
    assert r.status == "MISMATCH" and r.only_in_reproduction == r.only_in_table == 3  # keys a, b, c
    assert not report.ok


def test_unrecorded_statements_are_said_not_invented(history: IceHistory) -> None:
    """A commit whose summary has no statements (made before lakewrap recorded them): explain says
    so, reproduce reports ERROR, compile --as-of re-renders the current model with the run's pins."""
    root = history.house.root
    run_id, committed = history.runs[3]
    res = next(r for r in committed if r.target == "m.di")
    _rewrite_summary(root, "m.di", res.snapshot_id, lambda props: props.pop("lakewrap.statements"))
    (m,) = lakewrap.Project(root).explain(res.snapshot_id)
    assert m.statements == [] and m.sql_sha256 == res.sql_sha256
    code, text, _ = cli("explain", str(res.snapshot_id), "--project", str(root))
    assert code == 0 and "are not in the lake's records" in text and "CREATE" not in text
    (r,) = lakewrap.Project(root).reproduce(run_id, model="m.di").results
    assert r.status == "ERROR" and "not in the snapshot summary" in (r.detail or "")
    (plan,) = lakewrap.Project(root).compile(["m.di"], partition=partition(1), as_of=run_id)
    assert plan.statements[0].role == "setup" and "snapshot_from_id" in plan.statements[0].sql


def test_restore_partition_returns_exact_rows_and_leaves_others(history: IceHistory) -> None:
    root = history.house.root
    run_b = history.runs[1][0]  # partition 1 with V1
    snap_b = next(r.snapshot_id for r in history.runs[1][1] if r.target == "m.di")
    expected = rows(root, "m.di", snap_b, day=1)
    assert expected != rows(root, "m.di", day=1), "the history must have changed partition 1"
    day0 = rows(root, "m.di", day=0)
    pointers, _ = state(root)
    snaps_before = {s.snapshot_id for s in table(root, "m.di").snapshots()}

    out = lakewrap.Project(root).restore("m.di", partition=partition(1), to_run=run_b)

    assert rows(root, "m.di", day=1) == expected
    assert rows(root, "m.di", day=0) == day0
    after, _ = state(root)
    assert {k: v for k, v in after.items() if k != "m.di"} == {k: v for k, v in pointers.items() if k != "m.di"}
    new = [s for s in table(root, "m.di").snapshots() if s.snapshot_id not in snaps_before]
    # one atomic commit: pyiceberg's overwrite adds its delete and its append snapshot together
    commits = {s.summary.additional_properties["lakewrap.commit_id"] for s in new}
    assert len(commits) == 1 and out.result.snapshot_id == new[-1].snapshot_id
    props = summary(root, "m.di", out.result.snapshot_id)
    assert (props["lakewrap.run_id"], props["lakewrap.strategy"], props["lakewrap.partition"]) == (
        out.run_id, "restore", partition(1))
    assert json.loads(props["lakewrap.restored_from"]) == {"snapshot": snap_b, "run_id": run_b}
    # the restore is itself a materialization: explain names it, reproduce rebuilds it
    (m,) = lakewrap.Project(root).explain(out.result.snapshot_id)
    assert (m.run_id, m.strategy, m.partition) == (out.run_id, "restore", partition(1))
    (r,) = lakewrap.Project(root).reproduce(out.run_id).results
    assert r.status == "MATCH", r


def test_restore_whole_table_to_snapshot_and_dry_run(history: IceHistory) -> None:
    root = history.house.root
    snap = next(r.snapshot_id for r in history.runs[2][1] if r.target == "m.scd")
    expected = rows(root, "m.scd", snap)
    assert expected != rows(root, "m.scd")
    before = state(root)
    code, out, err = cli("restore", "m.scd", "--to-snapshot", str(snap), "--dry-run", "--project", str(root))
    assert code == 0, err
    assert "__lakewrap_restore_source" in out and "pyiceberg overwrite m.scd: delete where TRUE" in out
    assert state(root) == before, "--dry-run wrote to the lake"
    code, out, err = cli("restore", "m.scd", "--to-snapshot", str(snap), "--project", str(root))
    assert code == 0, err
    assert rows(root, "m.scd") == expected


def test_explain_snapshot_and_run(history: IceHistory) -> None:
    root = history.house.root
    run_id, committed = history.runs[3]
    res = next(r for r in committed if r.target == "m.di")
    props = summary(root, "m.di", res.snapshot_id)
    code, out, _ = cli("explain", str(res.snapshot_id), "--project", str(root), "--format", "json")
    (m,) = json.loads(out)
    assert code == 0 and (m["run_id"], m["target"], m["partition"], m["strategy"], m["snapshot_id"]) == (
        run_id, "m.di", partition(1), "delete+insert", res.snapshot_id)
    assert m["pins"] == json.loads(props["lakewrap.pins"]) and set(m["pins"]) == {"raw.events"}
    assert m["sql_sha256"] == props["lakewrap.sql_sha256"] == res.sql_sha256
    assert m["extra_info"]["base_snapshot"] == props["lakewrap.base_snapshot"]
    assert m["extra_info"]["operation"] == "delete, append"
    w = daily_window(partition(1), "ts")
    assert m["params"]["partition_start"] == w.start.isoformat()
    # the statements are those the plan holds: the model compiled now has the same sql_sha256
    (plan,) = lakewrap.Project(root).compile(["m.di"], partition=partition(1))
    assert plan.sql_sha256 == m["sql_sha256"]
    assert [s["sql"] for s in m["statements"]] == [s.sql for s in plan.statements]
    # any snapshot of the commit names it (an overwrite adds a delete and an append snapshot)
    first = table(root, "m.di").metadata.snapshot_by_id(res.snapshot_id).parent_snapshot_id
    assert json.loads(cli("explain", str(first), "--project", str(root), "--format", "json")[1])[0]["run_id"] == run_id
    code, text, _ = cli("explain", run_id, "--project", str(root))
    assert code == 0 and text.count("-- run:        " + run_id) == len(committed)
    assert "pyiceberg overwrite m.di: delete where" in text
    assert f"-- base:       {props['lakewrap.base_snapshot']}" in text


def test_compile_as_of_pins_every_upstream(history: IceHistory, monkeypatch: pytest.MonkeyPatch) -> None:
    root = history.house.root
    run_id, committed = history.runs[3]
    res = next(r for r in committed if r.target == "m.joined")
    pin = json.loads(summary(root, "m.joined", res.snapshot_id)["lakewrap.pins"])["raw.events"]
    code, out, err = cli("compile", "m.joined", "--partition", partition(1), "--as-of", run_id,
                         "--project", str(root), "--no-cache")
    assert code == 0, err
    assert f"-- pin: pinned upstream raw.events: snapshot {pin}" in out
    assert f"snapshot_from_id => {pin}\n" in out and str(root) not in out
    # --as-of a snapshot id (of any table): each upstream as the lake stood at that commit, here the same pin
    (by_snapshot,) = lakewrap.Project(root).compile(["m.joined"], partition=partition(1), as_of=str(res.snapshot_id))
    assert by_snapshot.statements[0].role == "setup" and f"snapshot_from_id => {pin}\n" in by_snapshot.statements[0].sql
    # the pinned plan runs in DuckDB and reads the source as the run did (V2), not as it is now (V3)
    (plan,) = lakewrap.Project(root).compile(["m.joined"], partition=partition(1), as_of=run_id)
    monkeypatch.chdir(root)  # the printed metadata locations are relative to the project
    from lakewrap.execute import extensions

    con = extensions.connect(("avro", "iceberg"))  # the bundled wheels
    con.execute("CREATE SCHEMA raw")
    con.execute("CREATE SCHEMA m")
    stage = None
    for st in plan.statements:
        if st.role in ("setup", "stage") and stage is None:
            con.execute(st.sql, {k: v.python() for k, v in st.params.items()} or None)
            if st.role == "stage":
                stage = st
    got = sorted(con.execute("SELECT * FROM __lakewrap_stage").fetchall())
    w = daily_window(partition(1), "ts")
    v2 = [r for r in V2 if w.start <= r["ts"] < w.end]
    totals = {k: sum(r["amount"] for r in V2 if r["k"] == k) for k in {r["k"] for r in V2}}
    assert got == sorted((r["id"], r["amount"], totals[r["k"]], r["ts"]) for r in v2)
    assert V3 != V2


def test_bad_inputs_are_clear_and_write_nothing(history: IceHistory) -> None:
    root = history.house.root
    project = lakewrap.Project(root)
    run_b = history.runs[1][0]
    before = state(root)
    source_snap = table(root, "raw.events").current_snapshot().snapshot_id
    with pytest.raises(StateError, match="no materialization of run `nope`"):
        project.restore("m.di", partition=partition(1), to_run="nope")
    with pytest.raises(StateError, match="no materialization of run `nope`"):
        project.reproduce("nope")
    with pytest.raises(StateError, match="no materialization of run"):
        project.explain("nope")
    with pytest.raises(StateError, match="the lake has no snapshot 99999"):
        project.explain(99999)
    with pytest.raises(StateError, match=f"snapshot {source_snap} of raw.events was not committed by a lakewrap"):
        project.explain(source_snap)
    with pytest.raises(StateError, match=f"`m.scd` has no snapshot {source_snap} .it is a snapshot of raw.events"):
        project.restore("m.scd", to_snapshot=source_snap)
    with pytest.raises(StateError, match=f"did not materialize partition {partition(0)}") as e2:
        project.restore("m.di", partition=partition(0), to_run=run_b)
    assert partition(1) in (e2.value.hint or "")
    with pytest.raises(StateError, match=f"run {run_b} did not materialize `m.full`"):
        project.reproduce(run_b, model="m.full")
    with pytest.raises(PlanError, match="name the partition"):
        project.restore("m.di", to_run=run_b)
    with pytest.raises(StateError, match=r"did not materialize `m\.full`"):
        project.compile(["m.full"], as_of=run_b)
    code, _, err = cli("restore", "m.di", "--partition", partition(1), "--to", "nope", "--project", str(root))
    assert code == 1 and "no materialization of run `nope`" in err
    assert state(root) == before
