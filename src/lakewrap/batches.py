"""Range backfills: consecutive partitions of a separable model written as one step (a *batch*).

After the steps the lake already holds are marked ``done`` (:mod:`lakewrap.skips`), each target's
pending steps are cut into runs of consecutive partitions, at most ``batch`` long (the model's
``-- partitioned ... batch=N``, default 31, or ``--batch-size N``; 1: per partition). A run of two
or more becomes one step: its first step (the *leader*) carries every partition in ``Task.batch``
and waits for what any of them waits for; the others (the *members*) are ``batched`` and finish
with the leader's result. The leader's plan is bound to the window of the whole range
(:func:`lakewrap.plan.widen`), compiled to the same statements (the same ``sql_sha256``) and
committed in one transaction with one state row per partition (the materializer reads
``Window.partitions``).

A model is batched only when its compiled plan says it is separable (``CompiledPlan.separable``,
:mod:`lakewrap.compilers.separable`): what is not proven runs per partition.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from lakewrap.partitions import Grain, parse_partition
from lakewrap.spec import ModelSpec, TimePartitioning

if TYPE_CHECKING:
    from lakewrap.compile import Compiled
    from lakewrap.execute.executor import Result

BATCHED = "batched"  # a member step's status until its leader finishes


def check_batch_size(size: int | None) -> None:
    """Refuse a ``--batch-size`` below 1 (before anything opens the lake)."""
    if size is not None and size < 1:
        from lakewrap.errors import PlanError

        raise PlanError(f"--batch-size must be at least 1, not {size}",
                        hint="give --batch-size 1 to write per partition, or leave it out for each model's batch= "
                        "(default 31)")


def batch_steps(steps: Sequence[Any], models: dict[str, ModelSpec], *, size: int | None,
                separable: Callable[[ModelSpec, str], bool]) -> None:
    """Merge runs of consecutive pending steps of one target into batches (in place).

    ``steps`` are the scheduler's steps (``index``, ``task``, ``deps``, ``status``, ``members``) in
    each target's partition order; ``size`` overrides every model's ``batch=``; ``separable(spec,
    first partition)`` is the compiled plan's verdict.
    """
    check_batch_size(size)
    by_target: dict[str, list[Any]] = {}
    for s in steps:
        by_target.setdefault(s.task.target, []).append(s)
    for target, own in by_target.items():
        spec = models[target]
        part = spec.partition
        if not isinstance(part, TimePartitioning):
            continue
        limit = size if size is not None else part.batch
        if limit < 2:
            continue
        grain = Grain(part.grain)
        runs: list[list[Any]] = [[]]
        for s in own:
            if s.status != "pending" or s.task.partition is None:
                runs.append([])  # a step the lake holds breaks the range
                continue
            last = runs[-1][-1].task.partition if runs[-1] else None
            if len(runs[-1]) >= limit or (
                    last is not None and parse_partition(grain, last, part.tz).next().value != s.task.partition):
                runs.append([])  # a batch is a range: a gap (--stale, --missing-only) starts the next
            runs[-1].append(s)
        runs = [r for r in runs if len(r) > 1]
        if not runs or not separable(spec, runs[0][0].task.partition):
            continue
        for run in runs:
            merge_batch(run)


def merge_batch(run: list[Any]) -> None:
    """Make ``run`` (consecutive pending steps of one target) one batch: its first step leads."""
    leader, members = run[0], run[1:]
    inside = {s.index for s in run}
    leader.task = dataclasses.replace(leader.task, batch=tuple(s.task.partition for s in run))
    leader.deps = {d for s in run for d in s.deps} - inside
    leader.members = [s.index for s in members]
    for s in members:
        s.status = BATCHED
        s.deps = {leader.index}


def member_result(result: Result, partition: str, batch: Sequence[str]) -> Result:
    """The result a member of a batch records: the leader's outcome, no rows and no seconds of its
    own (the batch's row counts and time are the leader's)."""
    return dataclasses.replace(result, partition=partition, rows_inserted=0, rows_updated=0, rows_deleted=0,
                               seconds=0.0,
                               warnings=[], tests=[], attempt_errors=[], log_lines=[], hooks=[],
                               schema_changes=[], batch=list(batch))


def chunks(values: Sequence[str], limit: int) -> list[tuple[str, ...]]:
    """``values`` cut into consecutive runs of at most ``limit``."""
    return [tuple(values[i:i + limit]) for i in range(0, len(values), max(1, limit))]


def compile_range(root: Any, selectors: Sequence[str] = (), *, exclude: Sequence[str] = (), start: str, end: str,
                  batch_size: int | None = None, now: Any = None, use_cache: bool = True) -> list[Any]:
    """What ``lakewrap compile --start/--end`` prints: per selected model in dependency order, one
    compiled plan per batch of a separable model (its ``window.partitions`` the batch's partitions)
    and one per partition of any other; an unpartitioned model's one plan."""
    return compile_range_selection(root, selectors, exclude=exclude, start=start, end=end, batch_size=batch_size,
                                   now=now, use_cache=use_cache).plans


def compile_range_selection(root: Any, selectors: Sequence[str] = (), *, exclude: Sequence[str] = (), start: str,
                            end: str, batch_size: int | None = None, now: Any = None,
                            use_cache: bool = True) -> Compiled:
    """:func:`compile_range`, with the project and the model of each plan (a ``lakewrap.compile.Compiled``)."""
    from datetime import datetime, timezone

    from lakewrap.compile import Compiled, compile_plan, load_project, plan_for
    from lakewrap.compilecache import _Cache
    from lakewrap.config import load_config
    from lakewrap.plan import widen
    from lakewrap.project import require_project
    from lakewrap.steps import plan_partitions, refuse_empty
    from lakewrap.substrates.registry import key

    check_batch_size(batch_size)
    root = require_project(root)
    now = now or datetime.now(timezone.utc)
    substrate = key(load_config(root).lake)
    cache = _Cache.open(root.resolve(), use_cache) or _Cache.memory()
    project = load_project(root, cache)
    selected = project.select(selectors, exclude)
    refuse_empty(selected, selectors, exclude)
    out, owners = [], []
    for spec, values in zip(selected, plan_partitions(selected, None, start, end), strict=True):
        first = compile_plan(plan_for(spec, substrate, values[0], now, root), cache)
        part = spec.partition
        limit = (batch_size or part.batch) if isinstance(part, TimePartitioning) else 1
        if first.separable is None or not first.separable.proven or limit < 2:
            plans = [first] + [compile_plan(plan_for(spec, substrate, v, now, root), cache) for v in values[1:]]
        else:
            plans = []
            for chunk in chunks([v for v in values if v is not None], limit):
                plan = plan_for(spec, substrate, chunk[0], now, root)
                plans.append(compile_plan(widen(plan, chunk) if len(chunk) > 1 else plan, cache))
        out += plans
        owners += [spec] * len(plans)
    cache.save()
    return Compiled(project, substrate, tuple(owners), out)
