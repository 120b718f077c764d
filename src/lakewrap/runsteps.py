"""A run's options and its steps: what :mod:`lakewrap.scheduler` schedules.

:class:`RunOptions` (stored with the run, so ``resume`` replays it), the default number of workers,
the grain check between time-partitioned models, the steps (one per model and partition) with the
steps each waits for, and which steps may share a commit (:mod:`lakewrap.grouping`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from lakewrap.errors import Location, PlanError, ProjectError
from lakewrap.project import Project
from lakewrap.spec import ModelSpec, TimePartitioning
from lakewrap.workers import Task


@dataclass
class RunOptions:
    """Everything a run needs besides the project; stored with the run so ``resume`` can replay it."""

    selectors: Sequence[str] = ()
    exclude: Sequence[str] = ()
    partition: str | None = None
    start: str | None = None
    end: str | None = None
    full_refresh: bool = False
    strict: bool = False
    now: datetime | None = None
    workers: int | None = None
    executor: Any = "auto"  # auto | thread | process | dask | a callable(task) -> Result | a StepRunner
    scheduler: str | None = None
    fail_fast: bool = False
    missing_only: bool = False
    command: str = "run"
    stale: bool = False  # only the partitions whose inputs changed since they were built (lakewrap.stale)
    reappend: bool = False  # append again the partitions of append models that are already recorded
    group: bool | None = None  # group commit (None: ``[run] group_commit``); False: --no-group
    atomic: bool = False  # every step in one commit, or none (--atomic)
    batch_size: int | None = None  # partitions per batch of a range backfill (None: each model's batch=)

    def to_args(self) -> dict[str, Any]:
        return {"selectors": list(self.selectors), "exclude": list(self.exclude), "partition": self.partition,
                "start": self.start, "end": self.end, "full_refresh": self.full_refresh, "strict": self.strict,
                "now": self.now.isoformat() if self.now else None, "fail_fast": self.fail_fast,
                "missing_only": self.missing_only, "command": self.command, "stale": self.stale,
                "reappend": self.reappend, "group": self.group, "atomic": self.atomic,
                "batch_size": self.batch_size}

    @classmethod
    def from_args(cls, args: dict[str, Any]) -> RunOptions:
        now = datetime.fromisoformat(args["now"]) if args.get("now") else None
        return cls(selectors=tuple(args.get("selectors") or ()), exclude=tuple(args.get("exclude") or ()),
                   partition=args.get("partition"), start=args.get("start"), end=args.get("end"),
                   full_refresh=bool(args.get("full_refresh")), strict=bool(args.get("strict")), now=now,
                   fail_fast=bool(args.get("fail_fast")), missing_only=bool(args.get("missing_only")),
                   command=args.get("command") or "run", stale=bool(args.get("stale")),
                   reappend=bool(args.get("reappend")), group=args.get("group"),
                   atomic=bool(args.get("atomic")), batch_size=args.get("batch_size"))


def default_workers(executor: Any = "process") -> int:
    """One worker per core this process may use; one for the thread executor (``auto``).

    Threads share one DuckDB instance whose statements run one at a time (``Lake.statement_lock``),
    so more threads only overlap transactions: measured with ``benchmarks/backfill.py`` (192 steps,
    DuckDB-file catalog), two threads took 29.1 s against 20.1 s for one (medians of 3). Each
    statement already uses every core. ``--workers N`` still asks for N threads.
    """
    if executor in ("auto", "thread"):
        return 1
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def check_grains(project: Project, selected: Sequence[ModelSpec]) -> None:
    """Refuse a time-partitioned model reading a selected model of another grain or time zone."""
    chosen = {s.target.key for s in selected}
    for spec in selected:
        mine = spec.partition
        if not isinstance(mine, TimePartitioning):
            continue
        for up in project.upstream_models(spec):
            theirs = up.partition
            if up.target.key not in chosen or not isinstance(theirs, TimePartitioning):
                continue
            if (theirs.grain, theirs.tz) != (mine.grain, mine.tz):
                raise ProjectError(
                    f"model `{spec.target}` is partitioned {mine.grain.value} ({mine.tz}) but reads "
                    f"`{up.target}` ({up.path}), partitioned {theirs.grain.value} ({theirs.tz}): a partition of one "
                    "does not map onto a partition of the other",
                    location=Location(spec.path),
                    hint="give both models the same grain and time zone, or run them in separate commands "
                    f"(e.g. --exclude {up.name})",
                )


@dataclass
class Step:
    index: int
    task: Task
    deps: set[int] = field(default_factory=set)
    status: str = "pending"  # pending | running | a Result status | done (not re-run) | batched
    reason: str = ""  # why a ``done`` step is not re-run (lakewrap.skips)
    members: list[int] = field(default_factory=list)  # a batch's leader: the steps it writes too (lakewrap.batches)


def build_steps(project: Project, selected: Sequence[ModelSpec], partitions: Sequence[Sequence[str | None]],
                root: Path, run_id: str, now: datetime, opts: RunOptions, default_retries: int) -> list[Step]:
    steps: list[Step] = []
    by_target: dict[str, list[Step]] = {}
    for spec, values in zip(selected, partitions, strict=True):
        retries = spec.retry if spec.retry is not None else default_retries
        rebuilds = spec.strategy.kind in ("delete+insert", "merge", "append", "snapshot")
        for i, value in enumerate(values):
            task = Task(root=str(root), target=spec.target.key, model=spec.path, strategy=spec.strategy.kind,
                        partition=value, run_id=run_id, now=now.isoformat(), attempts=retries + 1,
                        drop_first=opts.full_refresh and i == 0 and rebuilds, strict=opts.strict)
            step = Step(len(steps), task)
            steps.append(step)
            by_target.setdefault(spec.target.key, []).append(step)
    for step in steps:
        spec = project.models[step.task.target]
        own = by_target[step.task.target]
        if own[0].task.drop_first and own[0] is not step:
            step.deps.add(own[0].index)  # the full refresh's drop must have committed first
        for up in project.upstream_models(spec):
            ups = by_target.get(up.target.key, [])
            if step.task.partition is not None and isinstance(up.partition, TimePartitioning):
                step.deps |= {u.index for u in ups if u.task.partition == step.task.partition}
            else:
                step.deps |= {u.index for u in ups}
    return steps


def groupable_steps(project: Project) -> Callable[[Step], bool]:
    from lakewrap.grouping import groupable

    # a range batch commits on its own: its one window already writes many partitions at once
    return lambda step: len(step.task.batch) <= 1 and groupable(project, step.task.target)


def check_atomic(selected: Sequence[ModelSpec]) -> None:
    """``--atomic`` runs every step inside one transaction: a Python model's function and a model's
    hooks run around a commit of their own, so they are refused before anything runs."""
    from lakewrap.grouping import groupable_spec

    for spec in selected:
        why = groupable_spec(spec)
        if why is not None:
            raise PlanError(f"{spec.path}: --atomic cannot run {why} (it runs around a commit of its own)",
                            hint="run it without --atomic, or leave it out with --exclude")
