"""``lakewrap scheduler``: the due times of the project's schedules (and, in the same loop, its
triggers' upstream commits, :mod:`lakewrap.triggers`) become jobs of the queue (:mod:`lakewrap.jobs`).

Each look at ``now``:

1. collects the schedules: every ``[schedules.<name>]`` of ``lakewrap.toml`` and every model's
   ``-- schedule`` line (a schedule named by the model's target, selecting that model);
2. for each, walks back from ``now`` over its due times to the last one recorded: the newest due
   time whose job (``dedupe_key = "schedule:<name>:<due ISO>"``) is in the queue, at most
   :data:`MAX_CATCH_UP` due times back. A schedule with no job among them fires its latest due time
   only (a new schedule, or one whose jobs are that old, does not flood the queue);
3. applies the catch-up policy to the due times after it (:func:`lakewrap.schedules.decide`) and
   enqueues one job per due time it keeps, ``requested_by="schedule:<name>"``, with the partition
   the schedule names (by default the last complete partition at the due time).

The dedupe key is unique in the queue's table, so two schedulers looking at the same time enqueue
each due time once: the second ``enqueue`` returns the first one's job. Nothing else is stored:
the queue is the record of which due times fired.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lakewrap.errors import ConfigError, LakewrapError, Location
from lakewrap.schedules import Schedule, decide, iso, previous_due

if TYPE_CHECKING:
    from lakewrap.config import ProjectConfig
    from lakewrap.jobs import JobQueue
    from lakewrap.project import Project

MAX_CATCH_UP = 1000  # due times a look walks back to find the last one recorded


def schedules_of(project: Project, config: ProjectConfig) -> list[Schedule]:
    """``[schedules.<name>]`` (in name order), then the models' ``-- schedule`` lines (in DAG order)."""
    out = [Schedule(name=name, cron=s.cron, tz=s.tz, select=s.select, partition=s.partition, catch_up=s.catch_up,
                    grace=timedelta(seconds=s.grace_seconds), where="lakewrap.toml")
           for name, s in sorted(config.schedules.items())]
    for spec in project.select(()):
        if spec.schedule is not None:
            name = str(spec.target)  # holds a dot, which no [schedules.<name>] may: names never clash
            out.append(Schedule(name=name, cron=spec.schedule.cron, tz=spec.schedule.tz, select=(name,),
                                partition="latest", catch_up=spec.schedule.catch_up, grace=timedelta(minutes=5),
                                where=spec.path))
    return out


def partition_at(project: Project, schedule: Schedule, due: datetime) -> str | None:
    """The partition a job of ``schedule`` due at ``due`` runs: ``latest`` is the last complete
    partition at the due time of the selection's time-partitioned models (which must share a grain
    and a time zone); None when the selection has none, or for ``none``."""
    from lakewrap.partitions import Grain, latest_complete
    from lakewrap.spec import TimePartitioning

    if schedule.partition == "none":
        return None
    if schedule.partition != "latest":
        return schedule.partition
    grains = {(s.partition.grain, s.partition.tz) for s in project.select(schedule.select)
              if isinstance(s.partition, TimePartitioning)}
    if not grains:
        return None
    if len(grains) > 1:
        raise ConfigError(f"schedule `{schedule.name}` selects time-partitioned models of several grains or "
                          "time zones: " + ", ".join(sorted(f"{g.value} ({tz})" for g, tz in grains)),
                          location=Location(schedule.where),
                          hint="split it into one schedule per grain, or give partition = \"<value>\"")
    ((grain, tz),) = grains
    return latest_complete(Grain(grain), due, tz).value


def dedupe_key(schedule: Schedule, due: datetime) -> str:
    return f"schedule:{schedule.name}:{iso(due)}"


@dataclass
class Look:
    """What one look did: jobs enqueued (new), due times already queued, skipped by policy, errors."""

    enqueued: list[dict[str, Any]] = field(default_factory=list)
    existing: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def look_schedule(queue: JobQueue, project: Project, schedule: Schedule, now: datetime, out: Look) -> None:
    """One schedule's due times up to ``now`` as jobs (see the module docs)."""
    recent = previous_due(schedule.cron, schedule.tz, now, MAX_CATCH_UP)  # newest first
    if not recent:
        return
    pending: list[datetime] = []
    for due in recent:
        if queue.by_key(dedupe_key(schedule, due)) is not None:
            break
        pending.append(due)
        if schedule.catch_up != "all":
            break  # only the latest can fire
    else:
        pending = pending[:1]  # nothing recorded: the latest due time only
    decision = decide(sorted(pending), schedule.catch_up, now, recent[-1], schedule.grace)
    out.skipped += [f"{schedule.name}@{iso(t)}" for t in decision.skipped]
    for due in decision.fire:
        key = dedupe_key(schedule, due)
        if queue.by_key(key) is not None:  # another scheduler enqueued it since the walk
            out.existing.append(key)
            continue
        job = queue.enqueue(list(schedule.select), partition=partition_at(project, schedule, due),
                            requested_by=f"schedule:{schedule.name}", dedupe_key=key)
        out.enqueued.append({"schedule": schedule.name, "due": iso(due), "job_id": job.id,
                             "partition": job.partition})


def look(root: Path, now: datetime, *, queue: JobQueue | None = None) -> Look:
    """One look at every schedule and trigger of the project at ``root`` at ``now``."""
    from lakewrap.compile import load_project
    from lakewrap.config import load_config
    from lakewrap.jobs import open_queue

    if queue is None:
        with open_queue(root) as opened:
            return look(root, now, queue=opened)
    config = load_config(root)
    project = load_project(root, None)
    out = Look()
    for schedule in schedules_of(project, config):
        try:
            look_schedule(queue, project, schedule, now, out)
        except LakewrapError as exc:  # one bad schedule does not stop the others
            out.errors.append(f"schedule {schedule.name}: {exc.render()}")
    from lakewrap.triggers import look_triggers

    look_triggers(root, queue, project, now, out)
    return out


def run_loop(root: Path, *, interval: float, stop: threading.Event,
             clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
             report: Callable[[Look], None] = lambda _: None) -> None:
    """Look every ``interval`` seconds until ``stop`` is set (SIGTERM/SIGINT in ``lakewrap scheduler``)."""
    from lakewrap.jobs import open_queue

    with open_queue(root) as queue:
        while not stop.is_set():
            try:
                found = look(root, clock(), queue=queue)
            except LakewrapError as exc:  # lakewrap.toml or a model broken meanwhile: said, retried next look
                found = Look(errors=[exc.render()])
            report(found)
            stop.wait(interval)
