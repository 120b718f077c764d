"""``lakewrap restore``: one partition (or a whole table) put back as of a run or snapshot, as a
new forward commit with its own state record. This module decides what is restored (the model,
its window, exactly one of run and snapshot); the substrate's provenance backend finds the
snapshot, builds the plan and commits it (DuckLake: the shared executor's transaction; Iceberg: one
pyiceberg overwrite, or one DuckDB transaction on write path ``sql``). See ``docs/provenance.md``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from lakewrap.compilers.artifacts import CompiledPlan, Window
from lakewrap.errors import ExecutionError, PlanError, UnsupportedError
from lakewrap.provenance import backend, run_or_snapshot

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
    if (to_run is None) == (to_snapshot is None):
        raise PlanError("give exactly one of --to RUN and --to-snapshot N",
                        hint="`lakewrap history MODEL` lists runs and snapshots")
    if to_snapshot is not None:  # the one rule of docs/provenance.md: a snapshot id is never negative
        to_snapshot = run_or_snapshot(to_snapshot).snapshot
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
    with backend(root) as records:
        version = records.restore_version(target, window, to_run, to_snapshot)
        plan = records.restore_plan(spec, key, version, window)
    out = RestoreResult(target, window.value if window else None, version, to_run, plan, dry_run)
    if dry_run:
        return out
    from lakewrap.runner import new_run_id

    started = datetime.now(timezone.utc)
    out.run_id = run_id or new_run_id(started)
    folder = root.resolve() / "target" / "run" / out.run_id
    provenance = {"restored_from": {"snapshot": version, "run_id": to_run}}
    with backend(root) as records:
        result = records.run_restore(plan, version, provenance, out.run_id, folder)
    out.result = _reported(root, folder, out.run_id, started, result, plan.target)
    return out


def _reported(root: Path, folder: Path, run_id: str, started: datetime, result: Any, target: str) -> Any:
    """Write the restore's run results (every substrate); a failed restore is an error."""
    from lakewrap.runner import RunReport, write_results

    write_results(root.resolve(), folder, RunReport(run_id=run_id, started_at=started.isoformat(), results=[result],
                                                    finished_at=datetime.now(timezone.utc).isoformat()))
    if result.status != "success":
        raise ExecutionError(f"the restore of `{target}` failed and wrote nothing: {result.error}",
                             hint=f"the statements it ran are logged under target/run/{run_id}/")
    return result
