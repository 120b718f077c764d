"""Provenance on an Iceberg lake: the substrate half of :mod:`lakewrap.provenance`.

Everything is read from the snapshot summaries lakewrap's commits carry (``lakewrap.*`` keys: run,
model, partition, strategy, ``sql_sha256``, ``pins`` = {upstream: snapshot id}, ``base_snapshot``,
window, ``params`` and the compressed ``statements``; :mod:`lakewrap.provenance_record`). The shared
logic (which materializations a command means, the comparison, the restore's scope) stays in
:mod:`lakewrap.provenance`; this module reads records, replays a commit in a scratch DuckDB session
and commits a restore through :class:`~lakewrap.substrates.iceberg.commit.IcebergExecutor`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lakewrap.compilers import iceberg as ice
from lakewrap.compilers import provenance as sqlp
from lakewrap.compilers.artifacts import CommitOp, CompiledPlan, CompiledStatement
from lakewrap.execute.iceberg import IcebergLake
from lakewrap.plan import Param
from lakewrap.provenance_record import decode

if TYPE_CHECKING:
    from lakewrap.provenance import Materialization, Reproduction

_JSON_KEYS = ("params", "tests", "restored_from", "schema_changes")


@dataclass
class IcebergRecords:
    """The lakewrap commits of every table in an Iceberg catalog, read once."""

    lake: IcebergLake
    _all: list[Materialization] | None = field(default=None, repr=False)

    @classmethod
    def open(cls, root: Path) -> IcebergRecords:
        """The records of ``root``'s lake; a StateError (creating nothing) when its embedded catalog does not exist."""
        lake = IcebergLake.open(root, read_only=True)
        lake.check_exists()
        return cls(lake)

    def all(self) -> list[Materialization]:
        if self._all is None:
            from lakewrap.iceberg_state import materializations

            out = []
            if self.lake.config.write_path == "sql":  # records in the state tables
                from lakewrap.provenance_iceberg_sql import materializations as recorded

                out = recorded(self.lake)
            else:
                for name in self.lake.tables():
                    out += [to_materialization(name, d) for d in materializations(self.lake.load(name))]
            out.sort(key=lambda m: (m.committed_at, m.target, m.partition or ""))
            self._all = out
        return self._all

    def by_run(self, run_id: str) -> list[Materialization]:
        return [m for m in self.all() if m.run_id == run_id]

    def by_snapshot(self, snapshot_id: int) -> list[Materialization]:
        return [m for m in self.all() if snapshot_id in snapshot_ids(m)]

    def owner(self, snapshot_id: int) -> tuple[str, Any] | None:
        """The table holding snapshot ``snapshot_id`` and that snapshot, or None."""
        for name in self.lake.tables():
            table = self.lake.load(name)
            snap = table.metadata.snapshot_by_id(snapshot_id) if table is not None else None
            if snap is not None:
                return name, snap
        return None

    def has_snapshot(self, snapshot_id: int) -> bool:
        return self.owner(snapshot_id) is not None

    def close(self) -> None:
        pass


def snapshot_ids(m: Materialization) -> list[int]:
    return [int(sid) for sid, _ in m.extra_info.get("snapshots", [])]


def to_materialization(target: str, d: dict[str, Any]) -> Materialization:
    """One commit's summary (``iceberg_state.materializations``) as a :class:`Materialization`."""
    from lakewrap.provenance import Materialization

    props: dict[str, str] = d["props"]
    extra: dict[str, Any] = {k: v for k, v in props.items() if k != "statements"}
    for key in _JSON_KEYS:
        if props.get(key):
            extra[key] = json.loads(props[key])
    extra["snapshots"] = [list(s) for s in d["snapshots"]]
    operation = ", ".join(op for _, op in d["snapshots"])
    extra["operation"] = operation
    statements: list[dict[str, Any]] = []
    if props.get("statements"):
        payload = decode(props["statements"])
        statements = list(payload.get("statements", []))
        extra["commits"] = list(payload.get("commits", []))
    return Materialization(
        run_id=d["run_id"] or "", model=props.get("model", ""), target=target, partition=d["partition"],
        window_start=props.get("window_start") or None, window_end=props.get("window_end") or None,
        strategy=d["strategy"], rows_inserted=d["rows_inserted"], rows_updated=d["rows_updated"],
        rows_deleted=d["rows_deleted"], sql_sha256=d["sql_sha256"], pins=d["pins"], committed_at=d["committed_at"],
        snapshot_id=int(d["snapshot_id"]), author=None,
        commit_message=f"pyiceberg {operation} of {target} (snapshots " + ", ".join(
            f"{sid} {op}" for sid, op in d["snapshots"]) + ")",
        extra_info=extra, statements=statements,
    )


def base_snapshot(m: Materialization) -> int | None:
    """The target's snapshot the commit's transaction started from (None: the table was new)."""
    value = m.extra_info.get("base_snapshot")
    return int(value) if value else None


# --- compile --as-of --------------------------------------------------------------------------------


def pinned_plan(lake: IcebergLake, plan: CompiledPlan, pins: dict[str, int | None],
                params: dict[str, Param] | None = None) -> CompiledPlan:
    """``plan`` with the scratch session's view of each pinned upstream first (``setup`` statements:
    ``CREATE OR REPLACE VIEW s.t AS SELECT * FROM iceberg_scan(<metadata>, snapshot_from_id => n)``),
    and, when given, the parameter values a run bound. The model's own statements are unchanged: on
    Iceberg every read goes through those views. On write path ``sql`` the reads are pinned in the
    statements instead (:func:`lakewrap.provenance_iceberg_sql.pinned_plan`)."""
    if plan.write_path == "sql":
        from lakewrap.provenance_iceberg_sql import pinned_plan as pinned_sql

        return pinned_sql(plan, pins, params)
    setup = []
    for name, sid in sorted(pins.items()):
        if name == plan.target:
            continue
        table = lake.load(name)
        if sid is None or table is None:
            continue
        schema, _, short = name.partition(".")
        setup.append(CompiledStatement(
            role="setup", sql=lake.redact(ice.scan_view(schema, short, table.metadata_location, sid)),
            note=f"pinned upstream {name}: snapshot {sid} (the view the executor creates in its scratch session)"))
    statements = [st.replace(params={k: (params or {}).get(k, v) for k, v in st.params.items()})
                  for st in plan.statements]
    commits = tuple(op.replace(params={k: (params or {}).get(k, v) for k, v in op.params.items()})
                    for op in plan.commits)
    stmts = (*setup, *statements)
    return plan.replace(statements=stmts, commits=commits, sql_sha256=CompiledPlan.digest(stmts, commits))


def as_of_pins(lake: IcebergLake, names: list[str], snapshot_id: int) -> dict[str, int | None]:
    """Each table as the lake stood when snapshot ``snapshot_id`` (of any table) was committed."""
    from lakewrap.iceberg_state import as_of_snapshots

    every = as_of_snapshots(lake, lake.tables(), str(snapshot_id))  # the snapshot may be of any table
    return {name: every.get(name) for name in names}


# --- reproduce --------------------------------------------------------------------------------------


def reproduce_one(lake: IcebergLake, con: Any, m: Materialization, out: Reproduction) -> None:
    """Replay one commit in a scratch session and compare with the table at its own snapshot.

    Upstreams are views at their recorded pins, the target a view at ``base_snapshot`` (none when
    the table was new or the run was a full refresh); the recorded statements run with the recorded
    parameter values; the commit operation is applied to a temporary copy: the base rows its delete
    filter keeps, then its rows. Only the scratch session is written.
    """
    from lakewrap.provenance import bound, compare

    commits = [CommitOp.validate(c) for c in m.extra_info.get("commits", [])]
    if not m.statements or len(commits) != 1:
        out.detail = ("its statements are not in the snapshot summary (committed before lakewrap recorded them, "
                      "or too large: see lakewrap.statements_omitted); `lakewrap compile --as-of` re-renders the model")
        return
    (op,) = commits
    table = lake.load(m.target)
    if table is None or m.snapshot_id is None or table.metadata.snapshot_by_id(m.snapshot_id) is None:
        out.detail = f"snapshot {m.snapshot_id} of {m.target} is no longer in the table (expired or dropped)"
        return
    refresh = m.extra_info.get("full_refresh") == "true"
    base = None if refresh else base_snapshot(m)
    out.pin = base
    upstream = {name: sid for name, sid in m.pins.items() if name != m.target}
    snapshots = {name: int(sid) for name, sid in upstream.items() if sid is not None}
    hidden = [name for name, sid in upstream.items() if sid is None]
    if base is None:
        hidden.append(m.target)
    else:
        snapshots[m.target] = base
    params = m.params
    with lake.scratch(con, [*upstream, m.target], snapshots, hidden=hidden) as (cursor, _):
        if m.strategy == "restore":
            source = m.extra_info.get("restored_from", {}).get("snapshot")
            cursor.register(sqlp.RESTORE_SOURCE, table.scan(snapshot_id=int(source)).to_arrow())
        changes = m.extra_info.get("schema_changes")
        for st in m.statements:
            if st.get("role") == "test":
                continue
            if changes and base is not None and st.get("role") == "bootstrap":  # where the executor decided them
                replay_changes(cursor, changes, m.target, table.metadata_location, base)
                changes = None
            cursor.execute(*bound(st["sql"], params))
        committed = ice.scan(table.metadata_location, m.snapshot_id)
        cursor.execute(sqlp.empty_like(sqlp.REPRO, committed.copy()))
        schema, _, name = m.target.partition(".")
        if base is not None and not (op.operation == "overwrite" and op.delete_where == "TRUE"):
            where = op.delete_where if op.operation == "overwrite" else None
            cursor.execute(*bound(sqlp.kept_rows(sqlp.REPRO, schema, name, where), params))
        cursor.execute(*bound(sqlp.appended_rows(sqlp.REPRO, op.rows), params))
        compare(cursor, sqlp.repro_table(), committed, out)


def replay_changes(cursor: Any, recorded: dict[str, Any], target: str, location: str, base: int) -> None:
    """``on_schema_change``'s recorded changes in the scratch session, as the executor made them: new
    columns left out of the stage, and the target's view at ``base`` evolved (columns dropped,
    widened, added as NULL) as the commit's ``update_schema`` evolved the table."""
    from lakewrap.compilers import schema as schema_sql

    changes = schema_sql.Changes(add=[(c, t) for c, t in recorded.get("add", [])],
                                 widen=[(c, t) for c, t in recorded.get("widen", [])],
                                 drop=list(recorded.get("drop", [])), leave_out=list(recorded.get("leave_out", [])))
    for col in changes.leave_out:
        cursor.execute(schema_sql.drop_column(None, recorded["relation"], col))
    schema, _, name = target.partition(".")
    columns = [(str(c), str(t)) for c, t in cursor.execute(
        schema_sql.columns_query(), {"database": None, "schema": schema, "name": name}).fetchall()]
    cursor.execute(ice.evolved_view(schema, name, location, base, columns, changes))


# --- restore ----------------------------------------------------------------------------------------


def restore_plan(spec: Any, target: str, key: str | None, version: int, window: Any) -> CompiledPlan:
    """The restore as a plan the Iceberg executor runs: stage the rows of ``version``, one overwrite."""
    statements, delete_where, rows = sqlp.iceberg_restore(key, version, target)
    params: dict[str, Param] = {}
    if window is not None:
        params = {"partition_start": Param(type="TIMESTAMPTZ", value=window.start),
                  "partition_end": Param(type="TIMESTAMPTZ", value=window.end)}
        statements = tuple(st.replace(params=params) for st in statements)
    what = f"the rows of {target}" + (f" in partition {window.value}" if window is not None else "")
    op = CommitOp(operation="overwrite", table=target, rows=rows, delete_where=delete_where, params=params,
                  note=f"replace {what} with those of snapshot {version}")
    commits = (op,)
    return CompiledPlan(
        model=spec.name, path=spec.path, target=target, strategy="restore", substrate="iceberg",
        write_path="pyiceberg", window=window, idempotent=True,
        idempotent_note=f"a re-run copies the rows of snapshot {version} again", statements=statements,
        sql_sha256=CompiledPlan.digest(statements, commits), commits=commits,
    )


def run_restore(root: Path, plan: CompiledPlan, version: int, provenance: dict[str, Any], run_id: str,
                folder: Path) -> Any:
    """Commit the restore: one pyiceberg transaction, its summary naming what it restored."""
    from lakewrap.substrates.iceberg.commit import IcebergExecutor

    lake = IcebergLake.open(root)
    table = lake.load(plan.target)
    assert table is not None
    source = table.scan(snapshot_id=version).to_arrow()
    con = lake.connect()
    try:
        return IcebergExecutor(lake, run_id, folder).materialize(
            con, plan, inputs={sqlp.RESTORE_SOURCE: source}, provenance=provenance)
    finally:
        lake.close(con)


def existed_at(lake: IcebergLake, target: str, version: int) -> bool:
    table = lake.load(target)
    return table is not None and table.metadata.snapshot_by_id(version) is not None
