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

from lakewrap.spec import ModelSpec, TimePartitioning

if TYPE_CHECKING:
    from lakewrap.execute.executor import Result

BATCHED = "batched"  # a member step's status until its leader finishes


def batch_steps(steps: Sequence[Any], models: dict[str, ModelSpec], *, size: int | None,
                separable: Callable[[ModelSpec, str], bool]) -> None:
    """Merge runs of consecutive pending steps of one target into batches (in place).

    ``steps`` are the scheduler's steps (``index``, ``task``, ``deps``, ``status``, ``members``) in
    each target's partition order; ``size`` overrides every model's ``batch=``; ``separable(spec,
    first partition)`` is the compiled plan's verdict.
    """
    if size is not None and size < 1:
        from lakewrap.errors import PlanError

        raise PlanError(f"--batch-size must be at least 1, not {size}")
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
        runs: list[list[Any]] = [[]]
        for s in own:
            if s.status != "pending" or s.task.partition is None:
                runs.append([])  # a step the lake holds breaks the range
                continue
            if len(runs[-1]) >= limit:
                runs.append([])
            runs[-1].append(s)
        runs = [r for r in runs if len(r) > 1]
        if not runs or not separable(spec, runs[0][0].task.partition):
            continue
        for run in runs:
            _merge(run)


def _merge(run: list[Any]) -> None:
    leader, members = run[0], run[1:]
    inside = {s.index for s in run}
    leader.task = dataclasses.replace(leader.task, batch=tuple(s.task.partition for s in run))
    leader.deps = {d for s in run for d in s.deps} - inside
    leader.members = [s.index for s in members]
    for s in members:
        s.status = BATCHED
        s.deps = {leader.index}


def member_result(result: Result, partition: str, batch: Sequence[str]) -> Result:
    """The result a member of a batch records: the leader's outcome, no rows of its own (the batch's
    row counts are the leader's)."""
    return dataclasses.replace(result, partition=partition, rows_inserted=0, rows_updated=0, rows_deleted=0,
                               warnings=[], tests=[], attempt_errors=[], log_lines=[], hooks=[],
                               schema_changes=[], batch=list(batch))
