"""The run roles of DuckLake: planning a step, a seed's record, a step's outcome looked up, the
records a run skips by, and where the run log lives (seeds: :class:`lakewrap.seedfiles.SqlSeeder`).

The state of record is ``lakewrap.materializations`` in the catalog, committed in the same
transaction as the data; the run log lives in the catalog database too (:mod:`lakewrap.runlog`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from contextlib import suppress
from datetime import datetime
from typing import TYPE_CHECKING, Any

from lakewrap.compilers.artifacts import CompiledPlan
from lakewrap.execute import statements as stmts
from lakewrap.execute.binding import inline
from lakewrap.outcome import landed, needs_lookup, snapshot_read, snapshot_unread, unanswered
from lakewrap.seedfiles import SqlSeeder
from lakewrap.skips import appended
from lakewrap.spec import DynamicPartitioning
from lakewrap.steps import plan_model, probe_columns

if TYPE_CHECKING:
    from lakewrap.execute.executor import Result
    from lakewrap.execute.lake import Lake
    from lakewrap.plan import Plan
    from lakewrap.project import Project
    from lakewrap.runlog import Store
    from lakewrap.spec import ModelSpec
    from lakewrap.stale import StaleModel


def watermark_of(con: Any, target: str) -> datetime | None:
    row = con.execute(*inline(stmts.last_watermark(), {"target": target})).fetchone()
    return row[0] if row and row[0] is not None else None


def plan_step(con: Any, spec: ModelSpec, value: str | None, now: datetime) -> Plan:
    """The plan of one step with what the lake knows: the recorded watermark, probed columns."""
    mark = watermark_of(con, str(spec.target)) if isinstance(spec.partition, DynamicPartitioning) else None
    return plan_model(spec, value, now, substrate="ducklake", watermark=mark,
                      probe=lambda plan: probe_columns(con, plan))


class Seeder(SqlSeeder):
    """``lakewrap seed`` on DuckLake: the shared SQL seed, and what the table's last seed commit recorded."""

    lake: Lake

    def loaded(self, con: Any, target: str) -> tuple[str, str] | None:
        """(``sql_sha256``, ``seed_sha256``) of the seed commit that created the current table
        ``target``, when no later snapshot changed that table (None: not so, or not known).

        The table's identity (its table id and creating snapshot) is read from DuckLake's metadata
        tables, as the change feed reads it; the creating snapshot's commit message is lakewrap's
        (``strategy`` seed); every later snapshot's ``changes`` is checked for the table id.
        """
        from lakewrap.substrates.ducklake.feed import CHANGE_KINDS, current_identity

        alias = self.lake.alias
        identity = current_identity(con, alias, target)
        if identity is None:
            return None
        table_id, created = identity
        rows = con.execute(*inline(stmts.snapshots_since(alias), {"since": created})).fetchall()
        if not rows or int(rows[0][0]) != created:
            return None
        extra = json.loads(rows[0][2]) if rows[0][2] else {}
        if extra.get("strategy") != "seed" or extra.get("target") != target:
            return None
        for _, kinds, _ in rows[1:]:
            if any(table_id in (kinds.get(k) or ()) for k in CHANGE_KINDS):
                return None
        sha = (extra.get("pins") or {}).get("seed_sha256")
        return (str(extra.get("sql_sha256")), str(sha)) if sha else None

    def materialize(self, con: Any, compiled: CompiledPlan, *, provenance: dict[str, Any] | None = None) -> Result:
        return self.materializer.materialize(con, compiled, provenance=provenance)  # type: ignore[call-arg]


def resolve_outcome(lake: Lake, con: Any, run_id: str, result: Result) -> Result:
    """``result`` as the lake has it (:mod:`lakewrap.outcome`): its ``lakewrap.materializations`` row
    and the snapshot whose commit message names the step.

    ``con`` is the coordinator's connection (None: one is opened for the look-up and closed again,
    as a SQLite catalog needs).
    """
    unread = snapshot_unread(result)
    if not needs_lookup(result) and not unread:
        return result
    params = {"run_id": run_id, "target": result.target, "partition": result.partition}
    own = con is None
    try:
        cursor = lake.connect() if own else con
        try:
            with lake.statement_lock:  # the coordinator's connection is shared with the run log
                if not own:  # a cursor of the seed's connection does not inherit its USE
                    with suppress(Exception):  # a connection without the lake: the look-up says so
                        cursor.execute(stmts.use(lake.alias))
                row = cursor.execute(*inline(stmts.step_materialization(), params)).fetchone()
                snapshot = (cursor.execute(*inline(stmts.step_snapshot(lake.alias), params)).fetchone()
                            if row is not None or unread else None)
        finally:
            if own:
                lake.close(cursor)
    except Exception as exc:
        return unanswered(result, exc, lake.redact)
    if unread:
        return snapshot_read(result, snapshot[0] if snapshot is not None else None)
    if row is None:
        return result
    return landed(result, row[:3], snapshot[0] if snapshot is not None else None, row[3])


class Records:
    """What a run skips by (:mod:`lakewrap.skips`), read on the coordinator's connection."""

    def __init__(self, con: Any, alias: str) -> None:
        self.con, self.alias = con, alias

    def latest(self, target: str) -> dict[str | None, tuple[str, str]]:
        """partition → (``sql_sha256``, run id) of its latest materialization."""
        return {r[0]: (r[1], r[2]) for r in
                self.con.execute(*inline(stmts.latest_records(), {"target": target})).fetchall()}

    def appended(self, target: str) -> dict[str, set[str]]:
        """:func:`lakewrap.skips.appended`: the records joined to the snapshots that committed them."""
        rows = self.con.execute(*inline(stmts.append_records(self.alias), {"target": target})).fetchall()
        return appended((r[0], r[1] == "true", r[2]) for r in rows)  # json_extract_string: text or NULL

    def stale(self, project: Project, chosen: Sequence[ModelSpec]) -> dict[str, StaleModel]:
        from lakewrap.substrates.ducklake.feed import detect

        return detect(self.con, self.alias, project, chosen)


def runlog(lake: Lake, con: Any) -> Store:
    """The run log in the catalog database (attached as ``__ducklake_metadata_<alias>``), or, for a
    SQLite catalog, in a SQLite file beside it."""
    from lakewrap import runlog as rl

    if lake.config.catalog == "sqlite":
        return rl.SQLiteStore(lake.runlog_path())
    return rl.AttachedStore(con, stmts.metadata_catalog(lake.alias), lake.statement_lock)
