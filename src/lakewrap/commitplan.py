"""Which commits a run of compiled plans would make: ``lakewrap compile``'s ``-- commit:`` lines
and its JSON ``commits`` (docs/running.md, "Group commit and --atomic").

The runner's own steps (:func:`lakewrap.runsteps.build_steps`, each batch of the plans merged by
:func:`lakewrap.batches.merge_batch`, as the runner merges them) are grouped by the runner's own rule
(:func:`lakewrap.grouping.next_groups`), replayed as if every step runs and succeeds, one group
at a time on one worker: ``lakewrap run``'s defaults (the thread executor, group commit on where
the substrate has it). ``compile`` opens no lake, so what ``--missing-only``, ``--stale`` or
``resume`` leave out is not known here, nor when a group commits early after
:data:`lakewrap.grouping.GROUP_SECONDS` of writing, nor what a failing member takes out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from lakewrap.compilers.artifacts import CompiledPlan, PlannedCommit
from lakewrap.grouping import GROUP_SIZE, groupable_spec, next_groups

if TYPE_CHECKING:
    from lakewrap.compile import Compiled
    from lakewrap.project import Project
    from lakewrap.runsteps import Step
    from lakewrap.spec import ModelSpec


class _Replay:
    """The scheduler's state :func:`next_groups` reads, for steps that all succeed."""

    def __init__(self, steps: list[Step], groupable: Callable[[Step], bool], chains: bool) -> None:
        self.steps = steps
        self.groupable = groupable
        self.chains = chains
        self.order: dict[str, list[int]] = {}
        for s in steps:
            self.order.setdefault(s.task.target, []).append(s.index)
        self.cursor = dict.fromkeys(self.order, 0)
        self.busy = dict.fromkeys(self.order, 0)

    def _blocked_by(self, step: Step) -> Step | None:
        return None  # nothing fails in a replay

    def skip_blocked(self, step: Step, blocker: Step) -> None:  # pragma: no cover - never blocked
        raise AssertionError("a replayed step is never blocked")


def commits(project: Project, owners: Sequence[ModelSpec], plans: Sequence[CompiledPlan], *,
            group_commit: str | None, chains: bool = True, size: int = GROUP_SIZE) -> list[PlannedCommit]:
    """The commits a run of ``plans`` (``owners[i]`` the model of ``plans[i]``, each model's plans in
    its partitions' order, as ``compile`` prints them) makes, in the order they commit.
    ``group_commit``: why no step shares a commit (None: group commit is on); ``chains``: whether a
    group takes in the steps that read its members (``Substrate.group_chains``)."""
    from datetime import datetime, timezone

    from lakewrap.batches import merge_batch
    from lakewrap.runsteps import RunOptions, build_steps, groupable_steps

    specs: list[ModelSpec] = []
    values: dict[str, list[str | None]] = {}
    heads: list[tuple[str, tuple[str | None, ...]]] = []  # per plan: its target, the partitions it writes
    for spec, plan in zip(owners, plans, strict=True):
        key = spec.target.key
        if key not in values:
            specs.append(spec)
            values[key] = []
        w = plan.window
        parts: tuple[str | None, ...] = (tuple(p.value for p in w.partitions) if w is not None and w.partitions
                                         else (w.value,) if w is not None and w.kind == "time" else (None,))
        values[key] += parts
        heads.append((key, parts))
    # the runner's steps, one per (model, partition), linked as it links them; a batch's plan merged
    # into one step as the runner merges them (lakewrap.batches)
    steps = build_steps(project, specs, [values[s.target.key] for s in specs], Path("."), "",
                        datetime.now(timezone.utc), RunOptions(), 0)
    step_of = {(s.task.target, s.task.partition): s for s in steps}
    of_plan: dict[int, int] = {}  # a plan's step (its batch's leader) -> the plan's position
    for pos, (key, parts) in enumerate(heads):
        if len(parts) > 1:
            merge_batch([step_of[(key, p)] for p in parts])
        of_plan[step_of[(key, parts[0])].index] = pos
    one = groupable_steps(project)
    replay = _Replay(steps, (lambda step: False) if group_commit is not None else one, chains)
    out: list[PlannedCommit] = []
    while groups := next_groups(replay, 1, size):  # type: ignore[arg-type]  # the scheduler's fields
        group = groups[0]
        for s in group:  # a batch's members finish with it, as the scheduler records them
            for done in (s, *(steps[i] for i in s.members)):
                done.status = "success"
        alone = None
        if len(group) == 1:
            alone = group_commit if group_commit is not None and one(group[0]) else _why_alone(project, group[0])
        out.append(PlannedCommit(plans=tuple(of_plan[s.index] for s in group), alone=alone))
    if any(s.status != "success" for s in steps):  # pragma: no cover - the replay lost a step
        raise AssertionError("the commit plan leaves steps out")
    return out


def _why_alone(project: Project, step: Step) -> str | None:
    if len(step.task.batch) > 1:
        return "a range batch commits on its own"
    return groupable_spec(project.models[step.task.target])


def no_group_reason(root: Path, substrate: str) -> str | None:
    """Why a run of this project commits every step alone by default (None: it groups)."""
    from lakewrap.config import load_config
    from lakewrap.substrates.registry import get

    if not get(substrate).group_commit:
        return f"no group commit on {substrate}"
    if not load_config(root).run.group_commit:
        return "[run] group_commit = false"
    return None


def of_compiled(root: Path, compiled: Compiled) -> list[PlannedCommit]:
    """The commits a run of ``compiled`` makes with ``lakewrap run``'s defaults."""
    from lakewrap.substrates.registry import get

    return commits(compiled.project, compiled.owners, compiled.plans,
                   group_commit=no_group_reason(root, compiled.substrate), chains=get(compiled.substrate).group_chains)


def header_lines(plan_commits: Sequence[PlannedCommit], n: int) -> list[str]:
    """Per plan (``n`` of them): its ``-- commit:`` header line."""
    out = [""] * n
    total = len(plan_commits)
    for number, c in enumerate(plan_commits, 1):
        for k, pos in enumerate(c.plans, 1):
            out[pos] = (f"{number} of {total}, one snapshot with {len(c.plans) - 1} other plans "
                        f"(member {k} of {len(c.plans)})" if len(c.plans) > 1
                        else f"{number} of {total}, alone" + (f" ({c.alone})" if c.alone else ""))
    return out


def footer(plans: Sequence[CompiledPlan], plan_commits: Sequence[PlannedCommit], shown: int = 8) -> str:
    """The summary after the plans: each shared commit and its plans (when none is shared, one line)."""
    rule = "-- " + "=" * 97
    grouped = [c for c in plan_commits if len(c.plans) > 1]
    lines = [rule, f"-- commits: {len(plan_commits)} for {len(plans)} plans, "
             + (f"{len(grouped)} of them shared by several plans" if grouped else "one each")
             + (f" ({reasons})" if (reasons := _reasons(plan_commits)) else ""),
             "-- as `lakewrap run` commits them when every step runs and succeeds; a failing member, a group's",
             "-- 30 s bound, and what --missing-only, --stale or resume leave out change them (docs/running.md)"]
    if grouped:
        for number, c in enumerate(plan_commits, 1):
            names = [_label(plans[pos]) for pos in c.plans]
            more = f", ... ({len(names) - shown} more)" if len(names) > shown else ""
            why = f" ({c.alone})" if c.alone else ""
            lines.append(f"--   {number}. {', '.join(names[:shown])}{more}{why}")
    return "\n".join([*lines, rule]) + "\n"


def _reasons(plan_commits: Sequence[PlannedCommit]) -> str:
    """When no commit is shared: why, each reason once."""
    if any(len(c.plans) > 1 for c in plan_commits):
        return ""
    return "; ".join(dict.fromkeys(c.alone for c in plan_commits if c.alone))


def _label(plan: CompiledPlan) -> str:
    w = plan.window
    if w is None or w.kind != "time":
        return plan.target
    return f"{plan.target} {w.partitions[0].value}..{w.partitions[-1].value}" if w.partitions \
        else f"{plan.target} {w.value}"
