"""Provenance on an Iceberg lake written by DuckDB SQL (``write_path = "sql"``, a REST catalog).

DuckDB cannot write snapshot-summary properties, so each materialization's record is a row of the
target's Iceberg state table, committed in the same catalog transaction as the data
(:mod:`lakewrap.compilers.iceberg_sql`): run, partition, strategy, ``pins`` = {upstream: snapshot
id}, ``base_snapshot``, ``full_refresh``, and the ``params``, ``statements``, ``schema_changes``
and ``provenance`` that ``explain`` prints and ``reproduce`` re-executes. Reads are pinned with
DuckDB-Iceberg's own time travel, ``"ice"."s"."t" AT (VERSION => <snapshot id>)`` (measured on
DuckDB 1.5.5 through the REST catalog: accepted after an alias, in joins and in ``CREATE TABLE ...
AS``), so the replay is DuckLake's (:func:`lakewrap.provenance._reproduce_one`) with one pin per
table. A restore is a plan the :class:`~lakewrap.substrates.iceberg.sql_write.IcebergSqlExecutor` runs: its
state row names what it restored. See ``docs/provenance.md``.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lakewrap.compilers import iceberg_sql as isql
from lakewrap.compilers import provenance as sqlp
from lakewrap.compilers.artifacts import CompiledPlan, CompiledStatement, Window
from lakewrap.execute.iceberg import IcebergLake
from lakewrap.plan import Param

if TYPE_CHECKING:
    from lakewrap.provenance import Materialization, Reproduction


def _json(value: Any, default: Any) -> Any:
    return json.loads(value) if value else default


def commit_snapshots(table: Any, snapshot_id: int | None, base: int | None) -> list[list[Any]]:
    """The snapshots one DuckDB commit added (a DELETE and an INSERT add one each): from
    ``snapshot_id`` back along the parents to ``base``, oldest first, as ``[id, operation]``."""
    out: list[list[Any]] = []
    sid = snapshot_id
    while table is not None and sid is not None and sid != base:
        snap = table.metadata.snapshot_by_id(sid)
        if snap is None:
            break
        out.append([snap.snapshot_id, snap.summary.operation.value if snap.summary else "?"])
        sid = snap.parent_snapshot_id
    return out[::-1]


def materializations(lake: IcebergLake) -> list[Materialization]:
    """Every materialization recorded in the lake's state tables."""
    from lakewrap.iceberg_state import state_rows

    out = []
    for name in lake.tables():
        if name.startswith(isql.STATE_SCHEMA + "."):
            continue
        table = lake.load(name)
        out += [to_materialization(name, row, table) for row in state_rows(lake, name)]
    return out


def to_materialization(target: str, row: dict[str, Any], table: Any) -> Materialization:
    """One state row as a :class:`Materialization`."""
    from lakewrap.provenance import Materialization

    base = row.get("base_snapshot")
    snapshots = commit_snapshots(table, row.get("snapshot_id"), base)
    extra: dict[str, Any] = {
        "write_path": "sql", "commit_id": row["commit_id"], "base_snapshot": str(base) if base is not None else "",
        "full_refresh": bool(row.get("full_refresh")), "attempt": row.get("attempt"),
        "lakewrap_version": row.get("lakewrap_version"), "tests": _json(row.get("tests"), []),
        "schema_changes": _json(row.get("schema_changes"), []), "snapshots": snapshots,
        "operation": ", ".join(op for _, op in snapshots),
    }
    if row.get("params") is not None:
        extra["params"] = _json(row["params"], {})
    extra.update(_json(row.get("provenance"), {}))
    committed = (datetime.fromtimestamp(row["committed_ms"] / 1000, tz=timezone.utc)
                 if row.get("committed_ms") is not None else row["started_at"])
    window = (f" partition {row['partition_value']}" if row["partition_value"] else "")
    return Materialization(
        run_id=row["run_id"], model=row["model"], target=target, partition=row["partition_value"],
        window_start=row["window_start"].isoformat() if row["window_start"] else None,
        window_end=row["window_end"].isoformat() if row["window_end"] else None, strategy=row["strategy"],
        rows_inserted=row["rows_inserted"], rows_updated=row["rows_updated"], rows_deleted=row["rows_deleted"],
        sql_sha256=row["sql_sha256"], pins=_json(row["pins"], {}),
        committed_at=committed.isoformat() if committed is not None else "", snapshot_id=row.get("snapshot_id"),
        author=None, commit_message=f"lakewrap {row['strategy']} {target}{window} (DuckDB commit "
        f"{row['commit_id']}: " + (", ".join(f"{sid} {op}" for sid, op in snapshots) or "no snapshot") + ")",
        extra_info=extra, statements=_json(row.get("statements"), []),
    )


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
    from lakewrap.provenance import bound, compare, replay_alters

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


def base_snapshot(m: Materialization) -> int | None:
    value = m.extra_info.get("base_snapshot")
    return int(value) if value else None


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


def run_restore(root: Path, plan: CompiledPlan, provenance: dict[str, Any], run_id: str, folder: Path) -> Any:
    """Commit the restore: one DuckDB transaction through the REST catalog, with its state row."""
    from lakewrap.substrates.iceberg.sql_connect import connect
    from lakewrap.substrates.iceberg.sql_write import IcebergSqlExecutor

    lake = IcebergLake.open(root)
    con = connect(lake)
    try:
        return IcebergSqlExecutor(lake, run_id, folder).materialize(con, plan, provenance=provenance)
    finally:
        con.close()
