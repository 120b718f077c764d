"""``-- trigger upstream [debounce=5m]``: the scheduler loop (:mod:`lakewrap.ticks`) enqueues a model's
partitions whose upstream rows changed since they were built.

At each look, for each model with a trigger:

1. the stale machinery (:func:`lakewrap.stale.find_stale` over the substrate's change feed: DuckLake's
   ``ducklake_table_changes``, Iceberg's snapshot diffs) names the materialized partitions a change
   of an upstream table after their pin touched, mapped through the model's own window filter;
2. the time of the newest commit to any of the model's upstream tables
   (:meth:`lakewrap.substrates.protocol.Substrate.changed_at`) is the end of the burst: while it is
   younger than ``debounce`` at ``now``, commits are still arriving and nothing is enqueued, so a
   burst of commits closer together than ``debounce`` becomes one job per partition;
3. once the burst is older than ``debounce``, each stale partition becomes one job,
   ``requested_by="trigger:<target>"``, ``dedupe_key="trigger:<target>:<partition>:<burst end ISO>"``
   (model + partition + window): a second look, or a second scheduler, before the job has run
   finds that key and enqueues nothing; a later burst has a later key.

Partitions never materialized are not stale (they are gaps: ``lakewrap status``); an ``append``
model is never triggered (a re-run would append its rows again).
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from lakewrap.errors import LakewrapError
from lakewrap.schedules import iso

if TYPE_CHECKING:
    from lakewrap.jobs import JobQueue
    from lakewrap.project import Project
    from lakewrap.spec import ModelSpec
    from lakewrap.ticks import Look


def upstream_tables(project: Project, spec: ModelSpec) -> list[str]:
    """The lake tables ``spec`` reads (through the project's views), as ``schema.name``."""
    from lakewrap.stale import _sources

    return [table for table, _ in _sources(project, spec)]


def burst_end(root: Path, sub: object, tables: list[str]) -> datetime | None:
    """The newest commit time among ``tables`` (None: none of them has rows)."""
    times = [t for t in (sub.changed_at(root, table) for table in tables) if t is not None]  # type: ignore[attr-defined]
    return max(times) if times else None


def trigger_key(spec: ModelSpec, partition: str | None, end: datetime) -> str:
    return f"trigger:{spec.target}:{partition or 'whole'}:{iso(end)}"


def look_triggers(root: Path, queue: JobQueue, project: Project, now: datetime, out: Look) -> None:
    """Enqueue the triggered models' changed partitions (see the module docs)."""
    from lakewrap.stale import detect_at, rebuildable
    from lakewrap.substrates import of_project

    specs = [s for s in project.select(()) if s.trigger is not None and rebuildable(s)]
    if not specs:
        return
    sub = of_project(root)
    try:
        found = detect_at(root, project, specs)
    except LakewrapError as exc:  # no change feed, or the catalog held by a worker: the next look retries
        out.errors.append(f"triggers: {exc.render()}")
        return
    for spec in specs:
        assert spec.trigger is not None
        partitions = found[spec.target.key].values()
        if not partitions:
            continue
        try:
            end = burst_end(root, sub, upstream_tables(project, spec))
        except LakewrapError as exc:
            out.errors.append(f"trigger {spec.target}: {exc.render()}")
            continue
        if end is None:
            continue
        if (now - end).total_seconds() < spec.trigger.debounce:
            out.skipped += [f"trigger:{spec.target}:{p or 'whole'} (debouncing until "
                            f"{iso(end)} + {spec.trigger.debounce}s)" for p in partitions]
            continue
        for partition in partitions:
            key = trigger_key(spec, partition, end)
            if queue.by_key(key) is not None:
                out.existing.append(key)
                continue
            try:
                job = queue.enqueue([str(spec.target)], partition=partition, requested_by=f"trigger:{spec.target}",
                                    dedupe_key=key)
            except LakewrapError as exc:
                out.errors.append(f"trigger {spec.target}: {exc.render()}")
                continue
            out.enqueued.append({"trigger": str(spec.target), "partition": partition, "job_id": job.id,
                                 "window_end": iso(end)})
