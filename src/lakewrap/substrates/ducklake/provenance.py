"""Provenance and the state store on a DuckLake: the substrate half of :mod:`lakewrap.provenance`.

The records are lakewrap's tables in the catalog: ``lakewrap.materializations`` (run, model,
partition, strategy, pins), ``lakewrap.compiled_sql`` (the statements, by ``sql_sha256``) and each
snapshot's commit message and ``extra_info`` (which also holds the values bound to the statements'
parameters). One number pins a DuckLake read: ``AT (VERSION => n)``, the snapshot the
materialization's transaction read. A reproduction copies the target as of the pin into an
in-memory scratch database and re-runs the recorded statements there; a restore is a plan the
shared :class:`~lakewrap.execute.executor.Executor` commits. See ``docs/provenance.md``.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from lakewrap.compilers import lake as lake_sql
from lakewrap.compilers import provenance as sqlp
from lakewrap.compilers.artifacts import CompiledPlan, Window
from lakewrap.errors import StateError
from lakewrap.execute.binding import inline
from lakewrap.plan import Param
from lakewrap.provenance import (
    Materialization,
    Reproduction,
    RunOrSnapshot,
    bound,
    compare,
    guarded,
    replay_alters,
    reproduction,
    unknown_run,
)

if TYPE_CHECKING:
    from lakewrap.execute.executor import Result
    from lakewrap.execute.lake import Lake
    from lakewrap.spec import ModelSpec


def _iso(value: Any) -> str | None:
    return None if value is None else value.isoformat() if isinstance(value, datetime) else str(value)


def read_materializations(con: Any, alias: str, by: Literal["run_id", "target", "snapshot_id"],
                          value: str | int, *, statements: bool = True) -> list[Materialization]:
    """The materializations of a run, of a target, or the one a snapshot committed, oldest first
    (with their statements unless ``statements=False``)."""
    rows = con.execute(*inline(sqlp.materializations(alias, by), {"value": value})).fetchall()
    out = []
    for r in rows:
        d = dict(zip(sqlp.MATERIALIZATION_COLUMNS, r, strict=True))
        out.append(Materialization(
            run_id=d["run_id"], model=d["model"], target=d["target"], partition=d["partition_value"],
            window_start=_iso(d["window_start"]), window_end=_iso(d["window_end"]), strategy=d["strategy"],
            rows_inserted=d["rows_inserted"], rows_updated=d["rows_updated"], rows_deleted=d["rows_deleted"],
            sql_sha256=d["sql_sha256"], pins=json.loads(d["pins"]) if d["pins"] else {},
            committed_at=str(d["committed_at"]), snapshot_id=d["snapshot_id"], author=d["author"],
            commit_message=d["commit_message"],
            extra_info=json.loads(d["commit_extra_info"]) if d["commit_extra_info"] else {},
        ))
    for m in out if statements else ():
        found = con.execute(*inline(sqlp.compiled_statements(), {"sql_sha256": m.sql_sha256})).fetchone()
        m.statements = json.loads(found[0]) if found else []
    return out


def materializations(con: Any, alias: str, target: str) -> list[Materialization]:
    """State store: the materializations of ``target``, oldest first (none before the first run)."""
    try:
        return read_materializations(con, alias, "target", target, statements=False)
    except Exception as exc:
        if "does not exist" in str(exc):
            return []  # nothing has run yet: lakewrap's tables are created by the first run
        raise


# --- compile --as-of --------------------------------------------------------------------------------


def pinned_plan(plan: CompiledPlan, version: int, params: dict[str, Param] | None = None) -> CompiledPlan:
    """``plan`` with every upstream read at ``AT (VERSION => version)`` and, when given, the parameter
    values a run bound (its window, its run timestamp)."""
    target = tuple(plan.target.split(".", 1))
    assert len(target) == 2
    statements = []
    for st in plan.statements:
        text = st.sql if st.role == "literal" else sqlp.pin_reads(st.sql, version, (target[0], target[1]))
        bound_params = {k: (params or {}).get(k, v) for k, v in st.params.items()}
        statements.append(st.replace(sql=text, params=bound_params))
    stmts = tuple(statements)
    return plan.replace(statements=stmts, sql_sha256=CompiledPlan.digest(stmts))


# --- reproduce --------------------------------------------------------------------------------------


class _Versions(dict[str, int]):
    """The version each lake table is read at in a reproduction: the pin, except the upstreams an
    earlier member of an ``--atomic`` transaction wrote (``pins.group_reads``), read as that
    transaction left them, at the materialization's own snapshot."""

    def __init__(self, pin: int, own: dict[str, int]) -> None:
        super().__init__(own)
        self.pin = pin

    def get(self, key: str, default: Any = None) -> int:  # type: ignore[override]
        return super().get(key, self.pin)


def _versions(m: Materialization) -> int | _Versions:
    reads = m.pins.get("group_reads") or []
    if not reads or m.snapshot_id is None:
        return m.pin
    return _Versions(m.pin, {str(t).lower(): m.snapshot_id for t in reads})


def reproduce_one(con: Any, m: Materialization, redact: Any, root: Path | None = None,
                  replay: list[Materialization] | None = None) -> Reproduction:
    """Copy the target as of the pin into scratch space, re-run the recorded statements there with
    every other table read at the pin, and compare with the table at the materialization's snapshot.

    ``replay``: the materializations of the same table that one group commit wrote (consecutive
    partitions, in order; docs/running.md, "Group commit and --atomic"): the table at their shared
    snapshot holds all of them, so all are re-run, each with its own statements and parameters."""
    out = reproduction(m, m.pins.get("snapshot"))
    if out.status == "SKIPPED":
        return out
    replay = replay or [m]
    if m.snapshot_id is None or any(not r.statements for r in replay):
        out.detail = "its snapshot or its statements are no longer in the lake (expired or deleted)"
        return out
    schema, name = m.schema_name
    snapshot_id = m.snapshot_id
    con.execute(sqlp.attach_scratch())

    def run() -> None:
        pin = m.pin
        con.execute(sqlp.scratch_schema(schema))
        try:
            con.execute(sqlp.probe_at(schema, name, pin))
            existed = True
        except Exception:  # the table did not exist before this materialization (its first run)
            existed = False
        if existed and not replay[0].extra_info.get("full_refresh"):  # --full-refresh dropped it first
            con.execute(sqlp.copy_to_scratch(schema, name, pin))
        if m.model.endswith(".py") and root is not None:  # a Python model: its function again, at the pin
            from lakewrap.substrates.ducklake.pyreads import reproduce_inputs

            for relation, data in reproduce_inputs(root, con, m).items():
                con.register(relation, data)
        for r in replay:
            alters = [str(a) for a in r.extra_info.get("schema_changes", [])]
            version = _versions(r)
            for st in r.statements:
                if st.get("role") == "test":
                    continue
                if alters and st.get("role") == "write":  # where on_schema_change ran them: see Executor
                    replay_alters(con, alters, (schema, name))
                    alters = []
                text = sqlp.scratch_statement(st["sql"], version, (schema, name))
                if text is not None:
                    con.execute(*bound(text, r.params))
                if alters and st.get("role") == "bootstrap":  # ... or right after CREATE TABLE IF NOT EXISTS
                    replay_alters(con, alters, (schema, name))
                    alters = []
        compare(con, sqlp.scratch_table(schema, name), sqlp.at(schema, name, snapshot_id), out)

    try:
        guarded(out, redact, run)
    finally:
        con.execute(sqlp.detach_scratch())  # each statement ran on its own (autocommit): nothing is open
    return out


class DuckLakeProvenance:
    """The provenance backend of a DuckLake (:class:`~lakewrap.substrates.protocol.ProvenanceBackend`):
    one read-only connection, opened when a record is first read."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._lake: Lake | None = None
        self._con: Any = None

    def _open(self) -> tuple[Lake, Any]:
        if self._lake is None:
            from lakewrap.execute.lake import Lake

            lake = Lake.open(self.root, read_only=True)
            self._con = lake.connect()  # a lake never created: NoLake, and nothing to close
            self._lake = lake
        return self._lake, self._con

    def close(self) -> None:
        if self._lake is not None:
            self._lake.close(self._con)
            self._lake = self._con = None

    def by_run(self, run_id: str) -> list[Materialization]:
        lake, con = self._open()
        return read_materializations(con, lake.alias, "run_id", run_id)

    def _check_snapshot(self, snapshot_id: int) -> tuple[Any, ...]:
        lake, con = self._open()
        snap = con.execute(*inline(sqlp.snapshot(lake.alias), {"value": snapshot_id})).fetchone()
        if snap is None:
            raise StateError(f"the lake has no snapshot {snapshot_id}",
                             hint="`lakewrap history MODEL` lists the snapshots of a model's materializations")
        return tuple(snap)

    def by_snapshot(self, snapshot_id: int) -> list[Materialization]:
        lake, con = self._open()
        found = read_materializations(con, lake.alias, "snapshot_id", snapshot_id)
        if found:
            return found
        snap = self._check_snapshot(snapshot_id)
        said = f"author {snap[1]!r}, message {snap[2]!r}" if snap[1] or snap[2] else "it has no commit message"
        raise StateError(f"snapshot {snapshot_id} was not committed by a lakewrap materialization ({said})",
                         hint="seeds and plain SQL commit snapshots too; `lakewrap history MODEL` lists the "
                         "snapshots lakewrap committed")

    def explain_ddl(self, m: Materialization) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        schema, _, name = m.target.partition(".")
        refresh = None
        if m.extra_info.get("full_refresh") in (True, "true"):
            refresh = {"role": "refresh", "note": "--full-refresh: the table was rebuilt from empty",
                       "sql": lake_sql.drop_table(schema, name)}
        changes = m.extra_info.get("schema_changes") or []
        return refresh, [{"role": "schema", "note": "on_schema_change", "sql": text} for text in changes]

    def reproduce(self, found: list[Materialization]) -> list[Reproduction]:
        lake, con = self._open()
        out = []
        for m in found:
            replay = None
            if m.extra_info.get("group") and m.snapshot_id is not None:  # its table's members of the group
                replay = [o for o in read_materializations(con, lake.alias, "snapshot_id", m.snapshot_id)
                          if o.target == m.target and o.run_id == m.run_id]
            out.append(reproduce_one(con, m, lake.redact, self.root, replay))
        return out

    def pinned_at_snapshot(self, plans: list[CompiledPlan], ref: RunOrSnapshot) -> list[CompiledPlan]:
        assert ref.snapshot is not None
        self._check_snapshot(ref.snapshot)
        return [pinned_plan(p, ref.snapshot) for p in plans]

    def pinned_to(self, plan: CompiledPlan, m: Materialization) -> CompiledPlan:
        return pinned_plan(plan, m.pin, m.params)

    def restore_version(self, target: str, window: Window | None, to_run: str | None,
                        to_snapshot: int | None) -> int:
        """The snapshot a restore copies from; checks the table existed then."""
        from lakewrap.provenance import select_materializations

        lake, con = self._open()
        schema, name = target.split(".", 1)
        if to_run is not None:
            found = read_materializations(con, lake.alias, "run_id", to_run)
            if not found:
                raise unknown_run(to_run)
            found = select_materializations(found, to_run, target, window.value if window else None)
            version = found[-1].snapshot_id
            if version is None:
                raise StateError(f"the snapshot run {to_run} committed for `{target}` is no longer in the lake",
                                 hint="it was expired; restore --to-snapshot an existing snapshot")
        else:
            assert to_snapshot is not None
            version = to_snapshot
            self._check_snapshot(version)
        try:
            con.execute(sqlp.probe_at(schema, name, version))
        except Exception:
            raise StateError(f"`{target}` did not exist at snapshot {version}",
                             hint="pick a later run or snapshot (`lakewrap history MODEL`)") from None
        return version

    def restore_plan(self, spec: ModelSpec, key: str | None, version: int, window: Window | None) -> CompiledPlan:
        target = str(spec.target)
        statements = sqlp.restore_statements(spec.target.schema_name, spec.target.name, version, key)
        if window is not None:
            bounds = {"partition_start": Param(type="TIMESTAMPTZ", value=window.start),
                      "partition_end": Param(type="TIMESTAMPTZ", value=window.end)}
            statements = tuple(st.replace(params=bounds) if "$partition_" in st.sql else st
                               for st in statements)
        return CompiledPlan(
            model=spec.name, path=spec.path, target=target, strategy="restore", substrate="ducklake",
            write_path="sql", window=window, idempotent=True,
            idempotent_note=f"a re-run copies the rows of snapshot {version} again",
            statements=statements, sql_sha256=CompiledPlan.digest(statements),
        )

    def run_restore(self, plan: CompiledPlan, version: int, provenance: dict[str, Any], run_id: str,
                    folder: Path) -> Result:
        """Commit the restore: one transaction of the shared executor, with its own state record."""
        from lakewrap.execute.lake import Lake
        from lakewrap.substrates.ducklake.materialize import Executor

        self.close()
        lake = Lake.open(self.root)
        con = lake.connect()
        try:
            return Executor(lake, run_id, folder).materialize(con, plan, provenance=provenance)
        finally:
            lake.close(con)
