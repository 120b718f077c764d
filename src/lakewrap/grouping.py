"""Which ready steps the scheduler commits together (group commit; docs/running.md, "Group commit
and --atomic").

A group starts with the steps that are ready at the same moment (every step they depend on has
committed): independent models of one DAG level, and consecutive partitions of one model (kept
in their order, never split over two groups in flight). The first group then takes in, in DAG
order, the steps whose every upstream step has committed or is in the group before them (the
next levels of the DAG): such a member reads its upstreams' writes inside the transaction, is
planned there (after they wrote), and carries the positions of those upstreams in the group
(``Task.after``), so that a failing member takes only its own downstream members out of the group
with it. A substrate whose records cannot name a commit still open (``Substrate.group_chains``
False: Iceberg's write path ``sql``) takes in no such step. A group holds at most
:data:`GROUP_SIZE` steps; the substrate commits what it has written after :data:`GROUP_SECONDS` of
writing and goes on in a new transaction. A Python model
or a model with hooks is never grouped: its function or its ``pre_run``/``post_run`` scripts run
around its own commit. ``--atomic`` is one group of every step of the run, in DAG order, unbounded.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lakewrap.project import Project
    from lakewrap.runsteps import Step
    from lakewrap.scheduler import Scheduler
    from lakewrap.spec import ModelSpec

GROUP_SIZE = 32  # members of one group commit
GROUP_SECONDS = 30.0  # of writing in one transaction before it commits and the rest go on in the next


def new_group_id() -> str:
    """A group's id: unique within its run, and a resumed run's (random, like run ids)."""
    return "g" + os.urandom(4).hex()


def groupable_spec(spec: ModelSpec) -> str | None:
    """Why a step of ``spec`` may not share its commit (None: it may): a Python model, hooks."""
    if "python" in spec.extensions:
        return "a Python model"
    if spec.hooks:
        return "a model with hooks"
    return None


def groupable(project: Project, target: str) -> bool:
    """Whether a step of ``target`` may share its commit (:func:`groupable_spec`)."""
    return groupable_spec(project.models[target]) is None


def next_groups(sched: Scheduler, free: int, size: int = GROUP_SIZE) -> list[list[Step]]:
    """Up to ``free`` groups of ready steps (a group of one runs as an ordinary step). Steps whose
    upstream failed are recorded ``skipped`` on the way, as the scheduler does."""
    blocks: list[list[Step]] = []
    for target, idxs in sched.order.items():
        if sched.busy[target]:
            continue
        ptr = sched.cursor[target]
        while ptr < len(idxs) and sched.steps[idxs[ptr]].status != "pending":
            ptr += 1
        sched.cursor[target] = ptr
        block: list[Step] = []
        for i in idxs[ptr:]:
            step = sched.steps[i]
            if step.status != "pending":
                continue
            blocker = sched._blocked_by(step)
            if blocker is not None:
                sched.skip_blocked(step, blocker)
                continue
            if not all(sched.steps[d].status in ("success", "unchanged", "done") for d in step.deps):
                break  # one writer per table: its partitions run in order
            if not sched.groupable(step):
                if not block:
                    block = [step]
                break
            block.append(step)
            if len(block) >= size:
                break
        if block:
            blocks.append(block)
    groups: list[list[Step]] = []
    current: list[Step] = []
    for block in blocks:
        if len(groups) >= free:
            break
        if len(block) == 1 and not sched.groupable(block[0]):
            groups.append(block)
            continue
        if current and len(current) + len(block) > size:
            groups.append(current)
            current = []
            if len(groups) >= free:
                break
        current += block
    if current and len(groups) < free:
        groups.append(current)
    if groups and sched.chains and all(sched.groupable(s) for s in groups[0]):
        _take_downstream(sched, groups, size)
    return groups


def _take_downstream(sched: Scheduler, groups: list[list[Step]], size: int) -> None:
    """Extend ``groups[0]`` with pending steps (in DAG order) whose every upstream step has
    committed or is in it, up to ``size`` (in place)."""
    first = groups[0]
    mine = {s.index for s in first}
    # a table whose next pending step is not taken takes no later one (its partitions commit in
    # order), nor does a table another group in flight writes
    stopped = {s.task.target for g in groups[1:] for s in g}
    committed = ("success", "unchanged", "done")
    for step in sched.steps:  # in DAG order, each table's partitions in order: one pass
        if len(first) >= size:
            break
        if step.status != "pending" or step.index in mine:
            continue
        target = step.task.target
        if target in stopped:
            continue
        if (not sched.busy[target] and sched.groupable(step)
                and all(sched.steps[d].status in committed or d in mine for d in step.deps)):
            first.append(step)
            mine.add(step.index)
        else:
            stopped.add(target)


def after(group: list[Step]) -> list[tuple[int, ...]]:
    """Per member of ``group``: the positions of the members it depends on (its upstreams written
    in the same transaction)."""
    pos = {s.index: k for k, s in enumerate(group)}
    return [tuple(sorted(pos[d] for d in s.deps if d in pos)) for s in group]
