"""Provenance on an Iceberg lake written by pyiceberg: the substrate half of :mod:`lakewrap.provenance`.

Everything is read from the snapshot summaries lakewrap's commits carry (``lakewrap.*`` keys: run,
model, partition, strategy, ``sql_sha256``, ``pins`` = {upstream: snapshot id}, ``base_snapshot``,
window, ``params`` and the compressed ``statements``; :mod:`lakewrap.provenance_record`), as typed
records (:mod:`lakewrap.substrates.iceberg.state`). The shared logic (which materializations a
command means, the printout, the comparison, the restore's scope) stays in :mod:`lakewrap.provenance`;
this module replays a commit in a scratch DuckDB session and commits a restore through
:class:`~lakewrap.substrates.iceberg.commit.IcebergExecutor`. The DuckDB-SQL write path's backend
(:mod:`lakewrap.substrates.iceberg.provenance_sql`) extends :class:`IcebergProvenance`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lakewrap.compilers import iceberg as ice
from lakewrap.compilers import provenance as sqlp
from lakewrap.compilers.artifacts import CommitOp, CompiledPlan, CompiledStatement, Window
from lakewrap.errors import StateError
from lakewrap.execute.iceberg import IcebergLake
from lakewrap.plan import Param
from lakewrap.provenance import (
    Materialization,
    Reproduction,
    RunOrSnapshot,
    bound,
    compare,
    guarded,
    project_specs,
    reproduction,
    select_materializations,
    unknown_run,
)
from lakewrap.substrates.iceberg.state import as_of_snapshots, typed_materializations

if TYPE_CHECKING:
    from lakewrap.execute.executor import Result
    from lakewrap.spec import ModelSpec


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
            out = []
            for name in self.lake.tables():
                out += typed_materializations(self.lake, name)
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
    statements instead (:func:`lakewrap.substrates.iceberg.provenance_sql.pinned_plan`)."""
    setup = []
    for name, sid in sorted(pins.items()):
        if name == plan.target or not isinstance(sid, int):  # `deferred`: another catalog's tables
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
    every = as_of_snapshots(lake, lake.tables(), RunOrSnapshot(snapshot=snapshot_id))  # of any table
    return {name: every.get(name) for name in names}


# --- reproduce --------------------------------------------------------------------------------------


def reproduce_one(lake: IcebergLake, con: Any, m: Materialization, out: Reproduction) -> None:
    """Replay one commit in a scratch session and compare with the table at its own snapshot.

    Upstreams are views at their recorded pins, the target a view at ``base_snapshot`` (none when
    the table was new or the run was a full refresh); the recorded statements run with the recorded
    parameter values; the commit operation is applied to a temporary copy: the base rows its delete
    filter keeps, then its rows. Only the scratch session is written.
    """
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
    upstream = {name: sid for name, sid in m.pins.items() if name != m.target and name != "deferred"}
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


def restore_plan(spec: Any, target: str, key: str | None, version: int, window: Window | None) -> CompiledPlan:
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
                folder: Path) -> Result:
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


# --- the backend ------------------------------------------------------------------------------------


class IcebergProvenance:
    """The provenance backend of an Iceberg lake written by pyiceberg
    (:class:`~lakewrap.substrates.protocol.ProvenanceBackend`); opening it checks the catalog
    exists (creating nothing) and reads no record yet."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.records = IcebergRecords.open(root)

    @property
    def lake(self) -> IcebergLake:
        return self.records.lake

    def close(self) -> None:
        self.records.close()

    def by_run(self, run_id: str) -> list[Materialization]:
        return self.records.by_run(run_id)

    def by_snapshot(self, snapshot_id: int) -> list[Materialization]:
        found = self.records.by_snapshot(snapshot_id)
        if found:
            return found
        owner = self.records.owner(snapshot_id)
        if owner is None:
            raise StateError(f"the lake has no snapshot {snapshot_id}",
                             hint="`lakewrap history MODEL` lists the snapshots of a model's materializations")
        name, snap = owner
        raise StateError(f"snapshot {snapshot_id} of {name} was not committed by a lakewrap materialization "
                         f"(operation {snap.summary.operation.value if snap.summary else '?'}, no lakewrap.run_id "
                         "in its summary)", hint="seeds and plain pyiceberg writes commit snapshots too; "
                         "`lakewrap history MODEL` lists the snapshots lakewrap committed")

    def explain_ddl(self, m: Materialization) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        refresh = None
        if m.extra_info.get("full_refresh") in (True, "true"):  # the commit overwrote every row
            refresh = {"role": "refresh",
                       "note": "--full-refresh: the table was rebuilt from empty (the commit overwrote every row)"}
        changes = m.extra_info.get("schema_changes") or []
        if isinstance(changes, dict):  # applied by the commit's update_schema
            from lakewrap.compilers.schema import Changes

            said = Changes(add=changes.get("add", []), widen=changes.get("widen", []), drop=changes.get("drop", []),
                           leave_out=changes.get("leave_out", [])).describe()
            return refresh, [{"role": "schema", "note": "on_schema_change, applied by the commit (pyiceberg "
                              "update_schema): " + "; ".join(said)}]
        return refresh, [{"role": "schema", "note": "on_schema_change", "sql": text} for text in changes]

    def _connect(self) -> Any:
        return self.lake.connect()

    def _replay(self, con: Any, m: Materialization, out: Reproduction) -> None:
        reproduce_one(self.lake, con, m, out)

    def reproduce(self, found: list[Materialization]) -> list[Reproduction]:
        con = self._connect()
        try:
            results = []
            for m in found:
                out = reproduction(m, None)
                if out.status == "ERROR":
                    guarded(out, self.lake.redact, partial(self._replay, con, m, out))
                results.append(out)
            return results
        finally:
            self.lake.close(con)

    def _pinned(self, plan: CompiledPlan, pins: dict[str, int | None],
                params: dict[str, Param] | None = None) -> CompiledPlan:
        return pinned_plan(self.lake, plan, pins, params)

    def pinned_at_snapshot(self, plans: list[CompiledPlan], ref: RunOrSnapshot) -> list[CompiledPlan]:
        from lakewrap.substrates.iceberg.reads import reads_of

        assert ref.snapshot is not None
        if not self.records.has_snapshot(ref.snapshot):
            raise StateError(f"the lake has no snapshot {ref.snapshot}",
                             hint="`lakewrap history MODEL` lists the snapshots of a model's materializations")
        specs = {str(s.target): s for s in project_specs(self.root)}
        return [self._pinned(plan, as_of_pins(self.lake, list(reads_of(specs[plan.target])), ref.snapshot))
                for plan in plans]

    def pinned_to(self, plan: CompiledPlan, m: Materialization) -> CompiledPlan:
        return self._pinned(plan, m.pins, m.params)

    def restore_version(self, target: str, window: Window | None, to_run: str | None,
                        to_snapshot: int | None) -> int:
        """The snapshot of the table ``target`` a restore copies from (Iceberg snapshot ids are per table)."""
        if to_run is not None:
            found = self.records.by_run(to_run)
            if not found:
                raise unknown_run(to_run)
            found = select_materializations(found, to_run, target, window.value if window else None)
            version = found[-1].snapshot_id
            assert version is not None
        else:
            assert to_snapshot is not None
            version = to_snapshot
        if not existed_at(self.lake, target, version):
            owner = self.records.owner(version)
            raise StateError(f"`{target}` has no snapshot {version}"
                             + (f" (it is a snapshot of {owner[0]})" if owner else " (the lake has no such snapshot)"),
                             hint=f"`lakewrap history {target}` lists the table's snapshots; it may have been expired")
        return version

    def restore_plan(self, spec: ModelSpec, key: str | None, version: int, window: Window | None) -> CompiledPlan:
        return restore_plan(spec, str(spec.target), key, version, window)

    def run_restore(self, plan: CompiledPlan, version: int, provenance: dict[str, Any], run_id: str,
                    folder: Path) -> Result:
        return run_restore(self.root, plan, version, provenance, run_id, folder)  # type: ignore[no-any-return]
