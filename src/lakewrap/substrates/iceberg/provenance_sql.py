"""Provenance on an Iceberg lake written by DuckDB SQL (``write_path = "sql"``, a REST catalog).

DuckDB cannot write snapshot-summary properties, so each materialization's record is a row of the
target's Iceberg state table, committed in the same catalog transaction as the data
(:mod:`lakewrap.compilers.iceberg_sql`): run, partition, strategy, ``pins`` = {upstream: snapshot
id}, ``base_snapshot``, ``full_refresh``, and the ``params``, ``statements``, ``schema_changes``
and ``provenance`` that ``explain`` prints and ``reproduce`` re-executes. Reads are pinned with
DuckDB-Iceberg's own time travel, ``"ice"."s"."t" AT (VERSION => <snapshot id>)`` (measured on
DuckDB 1.5.5 through the REST catalog: accepted after an alias, in joins and in ``CREATE TABLE ...
AS``), so the replay is DuckLake's (:func:`lakewrap.substrates.ducklake.provenance.reproduce_one`)
with one pin per table. A restore is a plan the :class:`~lakewrap.substrates.iceberg.sql_write.IcebergSqlExecutor`
runs: its state row names what it restored. The backend, :class:`IcebergSqlProvenance`, is the
pyiceberg one's with these parts replaced. See ``docs/provenance.md``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from lakewrap.compilers import iceberg_sql as isql
from lakewrap.compilers import provenance as sqlp
from lakewrap.compilers.artifacts import CompiledPlan, CompiledStatement, Window
from lakewrap.execute.iceberg import IcebergLake
from lakewrap.plan import Param
from lakewrap.provenance import Materialization, Reproduction, bound, compare, replay_alters
from lakewrap.substrates.iceberg.provenance import IcebergProvenance, base_snapshot

if TYPE_CHECKING:
    from lakewrap.execute.executor import Result
    from lakewrap.spec import ModelSpec


def _pins(m: Materialization) -> dict[str, int]:
    """The snapshot of each upstream the materialization read (``schema.name`` in lower case)."""
    return {name.lower(): int(sid) for name, sid in m.pins.items() if sid is not None and name != m.target}


# --- compile --as-of --------------------------------------------------------------------------------


def pinned_plan(plan: CompiledPlan, pins: dict[str, int | None], params: dict[str, Param] | None = None,
                ) -> CompiledPlan:
    """``plan`` with every upstream read at ``AT (VERSION => <its pin>)`` (the target stays live, as
    a run reads it) and, when given, the parameter values a run bound."""
    target = plan.target.split(".", 1)
    versions = {name.lower(): int(sid) for name, sid in pins.items() if sid is not None and name != plan.target}
    statements = []
    for st in plan.statements:
        text = st.sql if st.role == "setup" else sqlp.pin_reads(st.sql, versions, (target[0], target[1]),
                                                                 isql.CATALOG)
        bound = {k: (params or {}).get(k, v) for k, v in st.params.items()}
        statements.append(st.replace(sql=text, params=bound))
    stmts = tuple(statements)
    return plan.replace(statements=stmts, sql_sha256=CompiledPlan.digest(stmts))


# --- reproduce --------------------------------------------------------------------------------------


def reproduce_one(con: Any, m: Materialization, out: Reproduction) -> None:
    """Replay one commit in scratch space, with the catalog only read.

    The target as of ``base_snapshot`` is copied into an in-memory database (nothing when the table
    had no snapshot; emptied for a ``--full-refresh``), the recorded ``on_schema_change`` statements
    and then the plan's statements run against it with every upstream read at its pin (setup, tests
    and the state row skipped), and the copy is compared with the table at its committed snapshot.
    """
    if m.snapshot_id is None:
        out.detail = f"{m.target} has no snapshot: the materialization wrote no rows into a new table"
        return
    if not m.statements:
        out.detail = "its statements are not in the state table (committed before lakewrap recorded them)"
        return
    schema, name = m.schema_name
    base = base_snapshot(m)
    out.pin = base
    pins = _pins(m)
    alters = [str(s) for s in m.extra_info.get("schema_changes", [])]
    con.execute(sqlp.attach_scratch())
    try:
        con.execute(sqlp.scratch_schema(schema))
        if base is not None:
            con.execute(sqlp.copy_to_scratch(schema, name, base, isql.CATALOG))
            if m.extra_info.get("full_refresh"):
                con.execute(sqlp.empty_scratch(schema, name))
        for st in m.statements:
            if st.get("role") in ("setup", "test") or st.get("note") == isql.STATE_NOTE:
                continue
            if alters and st.get("role") in ("bootstrap", "write"):  # where the executor ran them
                replay_alters(con, alters, (schema, name), isql.CATALOG)
                alters = []
            text = sqlp.scratch_statement(st["sql"], pins, (schema, name), isql.CATALOG)
            if text is not None:
                con.execute(*bound(text, m.params))
        compare(con, sqlp.scratch_table(schema, name), sqlp.at(schema, name, m.snapshot_id, isql.CATALOG), out)
    finally:
        con.execute(sqlp.detach_scratch())


# --- restore ----------------------------------------------------------------------------------------


def restore_plan(spec: Any, target: str, key: str | None, version: int, window: Window | None) -> CompiledPlan:
    """The restore as a plan the SQL executor runs: the state table's setup, the rows of snapshot
    ``version`` staged (``AT (VERSION => version)``) before the window is deleted and they are put
    back, and the state row."""
    from lakewrap.compilers import sql as q

    schema, _, name = target.partition(".")
    setup = tuple(CompiledStatement(role="setup", sql=q.render(s.node), note=s.note) for s in isql.state_setup(target))
    body = sqlp.restore_statements(schema, name, version, key, isql.CATALOG)
    if window is not None:
        bounds = {"partition_start": Param(type="TIMESTAMPTZ", value=window.start),
                  "partition_end": Param(type="TIMESTAMPTZ", value=window.end)}
        body = tuple(st.replace(params=bounds) if "$partition_" in st.sql else st for st in body)
    state = CompiledStatement(role="write", sql=q.render(isql.record_state(target)), note=isql.STATE_NOTE)
    statements = (*setup, *body, state)
    return CompiledPlan(
        model=spec.name, path=spec.path, target=target, strategy="restore", substrate="iceberg", write_path="sql",
        window=window, idempotent=True, idempotent_note=f"a re-run copies the rows of snapshot {version} again",
        statements=statements, sql_sha256=CompiledPlan.digest(statements),
    )


def run_restore(root: Path, plan: CompiledPlan, provenance: dict[str, Any], run_id: str, folder: Path) -> Result:
    """Commit the restore: one DuckDB transaction through the REST catalog, with its state row."""
    from lakewrap.substrates.iceberg.sql_connect import connect
    from lakewrap.substrates.iceberg.sql_write import IcebergSqlExecutor

    lake = IcebergLake.open(root)
    con = connect(lake)
    try:
        return IcebergSqlExecutor(lake, run_id, folder).materialize(con, plan, provenance=provenance)
    finally:
        con.close()


class IcebergSqlProvenance(IcebergProvenance):
    """The provenance backend of an Iceberg lake written by DuckDB SQL: records from the state
    tables (:func:`lakewrap.substrates.iceberg.state.typed_materializations`), reads pinned with
    ``AT (VERSION => n)``, the restore committed by the SQL executor."""

    def explain_ddl(self, m: Materialization) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        refresh = None
        if m.extra_info.get("full_refresh") in (True, "true"):  # every row deleted first
            refresh = {"role": "refresh", "note": "--full-refresh: the table was rebuilt from empty",
                       "sql": isql.delete_all(m.target)}
        changes = m.extra_info.get("schema_changes") or []
        return refresh, [{"role": "schema", "note": "on_schema_change", "sql": text} for text in changes]

    def _connect(self) -> Any:
        from lakewrap.substrates.iceberg.sql_connect import connect

        return connect(self.lake)

    def _replay(self, con: Any, m: Materialization, out: Reproduction) -> None:
        reproduce_one(con, m, out)

    def _pinned(self, plan: CompiledPlan, pins: dict[str, int | None],
                params: dict[str, Param] | None = None) -> CompiledPlan:
        return pinned_plan(plan, pins, params)

    def restore_plan(self, spec: ModelSpec, key: str | None, version: int, window: Window | None) -> CompiledPlan:
        return restore_plan(spec, str(spec.target), key, version, window)

    def run_restore(self, plan: CompiledPlan, version: int, provenance: dict[str, Any], run_id: str,
                    folder: Path) -> Result:
        return run_restore(self.root, plan, provenance, run_id, folder)
