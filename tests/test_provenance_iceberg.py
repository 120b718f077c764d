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
from test_provenance import MODELS, V2, V3, WHOLE, History

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

