"""``lakewrap restore``: one partition (or a whole table) put back as of a run or snapshot, as a
new forward commit with its own state record, on DuckLake (the shared executor's transaction) and
Iceberg (one pyiceberg overwrite). The records are read by :mod:`lakewrap.provenance`; see
``docs/provenance.md``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from lakewrap.compilers import provenance as sqlp
from lakewrap.compilers.artifacts import CompiledPlan, Window
from lakewrap.errors import ExecutionError, PlanError, StateError, UnsupportedError
from lakewrap.plan import Param
from lakewrap.provenance import open_ducklake, read_materializations, select_materializations, substrate, unknown_run

# --- restore ----------------------------------------------------------------------------------------


@dataclass
class RestoreResult:
    """What ``lakewrap restore`` did (or, with ``--dry-run``, would do)."""

    target: str
    partition: str | None
    from_snapshot: int
    from_run: str | None
    plan: CompiledPlan
    dry_run: bool
    result: Any = None  # the executor's Result once run
    run_id: str | None = None

    @property
    def ok(self) -> bool:
        return self.dry_run or (self.result is not None and self.result.status == "success")

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "target": self.target, "partition": self.partition,
                "from_snapshot": self.from_snapshot, "from_run": self.from_run, "dry_run": self.dry_run, "ok": self.ok,
                "result": self.result.to_dict() if self.result is not None else None,
                "plan": self.plan.dump()}


def restore(root: Path, model: str, *, partition: str | None = None, to_run: str | None = None,
            to_snapshot: int | None = None, dry_run: bool = False, run_id: str | None = None) -> RestoreResult:
    """Put one partition (or a whole unpartitioned table) back as it was after run ``to_run`` (or at
    snapshot ``to_snapshot``), as a new forward commit with its own state record.

    Raises a :class:`~lakewrap.errors.LakewrapError` with a hint, writing nothing, for an unknown
    run, model or snapshot, a partition the run did not write, or a failed transaction.

    Example:
        >>> out = restore(Path("examples/shop"), "sales.orders", partition="2024-01-01",
        ...               to_run="20240104T000000Z-f97057")  # doctest: +SKIP
        >>> out.result.rows_deleted, out.result.rows_inserted, out.result.snapshot_id  # doctest: +SKIP
        (46, 46, 21)
    """
    from lakewrap.compile import load_project
    from lakewrap.partitions import Grain, parse_partition
    from lakewrap.spec import DynamicPartitioning, TimePartitioning

    root = root.resolve()
    kind = substrate(root, "restore")
    if (to_run is None) == (to_snapshot is None):
        raise PlanError("give exactly one of --to RUN and --to-snapshot N",
                        hint="`lakewrap history MODEL` lists runs and snapshots")
    specs = load_project(root, None).select([model])
    if len(specs) != 1:
        raise PlanError(f"`{model}` names {len(specs)} models", hint="use schema.name")
    spec = specs[0]
    target = str(spec.target)
    if spec.strategy.kind in ("view", "literal"):
        raise UnsupportedError(f"`{target}` is a {spec.strategy.kind} model: lakewrap restores tables it writes",
                               hint="restore a table model; re-run a view's model to recreate it")
    window: Window | None = None
    key: str | None = None
    part = spec.partition
    if isinstance(part, TimePartitioning):
        if partition is None:
            raise PlanError(f"`{target}` is partitioned {part.grain.value}: name the partition to restore",
                            hint="add --partition VALUE; `lakewrap history MODEL` lists the partitions")
        p = parse_partition(Grain(part.grain), partition, part.tz)
        w = p.window
        window = Window(kind="time", value=p.value, start=w.start.isoformat(), end=w.end.isoformat(),
                        closed="[start, end)")
        key = part.key
    elif partition is not None:
        why = "a dynamic (watermark) partition" if isinstance(part, DynamicPartitioning) else "no partitions"
        raise PlanError(f"`{target}` has {why}: a restore replaces the whole table",
                        hint="drop --partition")
    if kind == "iceberg":
        from lakewrap.config import load_config

        version = _iceberg_restore_version(root, target, window, to_run, to_snapshot)
        if load_config(root).lake.write_path == "sql":
            from lakewrap.provenance_iceberg_sql import restore_plan as sql_plan

            plan = sql_plan(spec, target, key, version, window)
        else:
            from lakewrap.provenance_iceberg import restore_plan

            plan = restore_plan(spec, target, key, version, window)
    else:
        version = _ducklake_restore_version(root, spec, target, window, to_run, to_snapshot)
        schema, name = spec.target.schema_name, spec.target.name
        statements = sqlp.restore_statements(schema, name, version, key)
        if window is not None:
            bounds = {"partition_start": Param(type="TIMESTAMPTZ", value=window.start),
                      "partition_end": Param(type="TIMESTAMPTZ", value=window.end)}
            statements = tuple(st.replace(params=bounds) if "$partition_" in st.sql else st
                               for st in statements)
        plan = CompiledPlan(
            model=spec.name, path=spec.path, target=target, strategy="restore", substrate="ducklake",
            write_path="sql", window=window, idempotent=True,
            idempotent_note=f"a re-run copies the rows of snapshot {version} again",
            statements=statements, sql_sha256=CompiledPlan.digest(statements),
        )
    out = RestoreResult(target, window.value if window else None, version, to_run, plan, dry_run)
    if dry_run:
        return out
    from lakewrap.runner import new_run_id

    started = datetime.now(timezone.utc)
    out.run_id = run_id or new_run_id(started)
    folder = root.resolve() / "target" / "run" / out.run_id
    provenance = {"restored_from": {"snapshot": version, "run_id": to_run}}
    if kind == "iceberg" and plan.write_path == "sql":
        from lakewrap.provenance_iceberg_sql import run_restore as run_sql

        result = run_sql(root, plan, provenance, out.run_id, folder)
    elif kind == "iceberg":
        from lakewrap.provenance_iceberg import run_restore

        result = run_restore(root, plan, version, provenance, out.run_id, folder)
    else:
        result = _run_restore(root, plan, provenance, out.run_id, folder)
    out.result = _reported(root, folder, out.run_id, started, result, plan.target)
    return out


def _ducklake_restore_version(root: Path, spec: Any, target: str, window: Window | None, to_run: str | None,
                              to_snapshot: int | None) -> int:
    """The DuckLake snapshot a restore copies from; checks the table existed then."""
    lake, con = open_ducklake(root)
    schema, name = spec.target.schema_name, spec.target.name
    try:
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
            if con.execute(sqlp.snapshot(lake.alias), {"value": version}).fetchone() is None:
                raise StateError(f"the lake has no snapshot {version}",
                                 hint="`lakewrap history MODEL` lists the snapshots of a model's materializations")
        try:
            con.execute(sqlp.probe_at(schema, name, version))
        except Exception:
            raise StateError(f"`{target}` did not exist at snapshot {version}",
                             hint="pick a later run or snapshot (`lakewrap history MODEL`)") from None
    finally:
        lake.close(con)
    return version


def _iceberg_restore_version(root: Path, target: str, window: Window | None, to_run: str | None,
                             to_snapshot: int | None) -> int:
    """The snapshot of the Iceberg table ``target`` a restore copies from (Iceberg snapshot ids are per table)."""
    from lakewrap.provenance_iceberg import IcebergRecords, existed_at

    records = IcebergRecords.open(root)
    if to_run is not None:
        found = records.by_run(to_run)
        if not found:
            raise unknown_run(to_run)
        found = select_materializations(found, to_run, target, window.value if window else None)
        version = found[-1].snapshot_id
        assert version is not None
    else:
        assert to_snapshot is not None
        version = to_snapshot
    if not existed_at(records.lake, target, version):
        owner = records.owner(version)
        raise StateError(f"`{target}` has no snapshot {version}"
                         + (f" (it is a snapshot of {owner[0]})" if owner else " (the lake has no such snapshot)"),
                         hint=f"`lakewrap history {target}` lists the table's snapshots; it may have been expired")
    return version


def _run_restore(root: Path, plan: CompiledPlan, provenance: dict[str, Any], run_id: str, folder: Path) -> Any:
    """Commit the restore on a DuckLake: one transaction with its own state record."""
    from lakewrap.execute.lake import Lake
    from lakewrap.substrates.ducklake.materialize import Executor

    lake = Lake.open(root)
    con = lake.connect()
    try:
        return Executor(lake, run_id, folder).materialize(con, plan, provenance=provenance)
    finally:
        lake.close(con)


def _reported(root: Path, folder: Path, run_id: str, started: datetime, result: Any, target: str) -> Any:
    """Write the restore's run results (every substrate); a failed restore is an error."""
    from lakewrap.runner import RunReport, write_results

    write_results(root.resolve(), folder, RunReport(run_id=run_id, started_at=started.isoformat(), results=[result],
                                                    finished_at=datetime.now(timezone.utc).isoformat()))
    if result.status != "success":
        raise ExecutionError(f"the restore of `{target}` failed and wrote nothing: {result.error}",
                             hint=f"the statements it ran are logged under target/run/{run_id}/")
    return result
