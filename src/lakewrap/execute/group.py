"""Group commit: several materializations in one lake transaction, whatever the lake.

The runner hands independent steps to a substrate's ``run_group`` together (docs/running.md,
"Group commit and --atomic"); the substrate calls :func:`commit_group` with its own
``transaction`` (one transaction over some members: DuckLake's one snapshot,
:mod:`lakewrap.substrates.ducklake.group`; Iceberg's one ``POST /v1/transactions/commit``,
:mod:`lakewrap.substrates.iceberg.sql_group`). This module holds what every substrate shares:
which members go into which transaction, and what happens when one fails.

When a member fails, the transaction is rolled back and the group is committed again without it;
the failed member then runs alone through the shared loop (its retries, its error reported as a
step's), and the members of its table after it run after it, so one table's partitions still
commit in order. A failure that is not one member's (the COMMIT) hands every member to the loop
alone; one whose outcome is unknown (:class:`Unsettled`) fails every member, retried by none. With
``atomic`` nothing is retried: a failure anywhere rolls everything back.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from lakewrap.execute import locate
from lakewrap.execute.binding import inline
from lakewrap.execute.executor import GroupStep, Job, Materializer, Result, RetryPolicy


@dataclass(frozen=True)
class Member:
    """One step of a group: its result so far (model, target, partition, strategy), how to plan
    its job (before the group's transaction, or inside it for ``--atomic``, where an upstream may
    exist only in the transaction), and the upstream tables its model reads."""

    result: Result
    plan: Callable[[], Job]
    upstreams: tuple[str, ...] = ()
    attempts: int = 1
    after: tuple[int, ...] = ()  # the members it reads: it is planned inside the transaction, after them

    @classmethod
    def of(cls, step: GroupStep, defer: bool) -> Member:
        ups = tuple(str(u) for u in step.spec.all_upstreams)

        def plan() -> Job:
            return Job(step.plan(), ups if defer else (), step.drop_first)

        return cls(step.result, plan, ups, step.attempts, step.after)

    @property
    def target(self) -> str:
        return self.result.target


@dataclass
class Unsettled(Exception):
    """The group's commit failed and whether it landed cannot be told: every member fails with
    ``error``, none is retried (a retry could write it twice)."""

    error: BaseException


@dataclass
class Failed(Exception):
    """Member ``index`` of the group failed with ``error`` (the transaction is to be rolled back)."""

    index: int
    error: BaseException
    nothing: bool = False  # not an error: a first run with nothing to write (it runs alone)


@dataclass
class GroupOutcome:
    """What :func:`commit_group` did: a result per member, in order, and the commits it made."""

    results: list[Result]
    commits: int = 0
    retried: list[str] = field(default_factory=list)  # members rolled back out of a group


def _fail(executor: Materializer, result: Result, job: Job | None, exc: BaseException) -> None:
    compiled = job.compiled if job is not None else None
    result.fail(locate.located(exc, result.model, executor.lake.root, compiled=compiled), executor.lake.redact)
    result.error_class = executor.error_class(exc)
    text = str(exc).strip()
    result.attempts = max(result.attempts, 1)
    result.attempt_errors.append({  # the run log's attempts, as the shared loop records a failed attempt
        "attempt": result.attempts, "seconds": round(result.seconds, 6),
        "error_class": executor.attempt_class(exc, executor.retryable(exc)),
        "error": executor.lake.redact(text.splitlines()[0] if text else "")})


def first_line(exc: BaseException) -> str:
    """The first line of ``exc``'s message (its class name when it has none)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def rolled_back(out: GroupOutcome, idxs: list[int], exc: BaseException) -> str:
    """After a transaction over ``idxs`` rolled back with ``exc``: nothing was written, so their
    results count no rows, warnings or tests; the error line their statement logs close with."""
    for r in (out.results[i] for i in idxs):
        r.rows_inserted = r.rows_updated = r.rows_deleted = 0
        r.warnings.clear()
        r.tests.clear()
    return first_line(exc.error if isinstance(exc, (Failed, Unsettled)) else exc)


class Transaction(Protocol):
    """One transaction over members ``idxs`` (a substrate's): plans each member not in ``jobs`` yet
    (into ``jobs``), writes them until ``seconds`` of writing have passed, commits, and fills their
    results in ``out``; returns the members left for the next transaction. Raises :class:`Failed`
    for one member's failure (rolled back), :class:`Unsettled` when the commit's outcome is unknown,
    anything else for a failure of the transaction as a whole (rolled back)."""

    def __call__(self, executor: Any, con: Any, members: list[Member], jobs: dict[int, Job], idxs: list[int],
                 out: GroupOutcome, group_id: str, atomic: bool, seconds: float) -> list[int]: ...


def commit_group(executor: Any, con: Any, members: list[Member], transaction: Transaction, *, group_id: str,
                 atomic: bool = False, seconds: float = 30.0,
                 cancelled: threading.Event | None = None) -> GroupOutcome:
    """Commit ``members`` in as few transactions (each ``transaction``) as the time bound allows
    (``seconds`` of writing per transaction; ``atomic``: one, unbounded). Never raises for model or
    data errors."""
    out = GroupOutcome([replace(m.result, status="failed") for m in members])
    jobs: dict[int, Job] = {}
    moved: dict[int, str] = {}  # member -> the error that took it out of its group
    settled: set[int] = set()  # members whose outcome is final (committed, failed or skipped)
    work: deque[list[int]] = deque([list(range(len(members)))])
    while work:
        idxs = _unblocked(members, out, work.popleft(), settled)
        if not idxs:
            continue
        settled.update(idxs)  # every path below settles them (a retry moves them back out)
        if len(idxs) == 1 and not atomic:  # alone: the shared loop, with the step's retries
            i = idxs[0]
            try:
                job = jobs.get(i) or members[i].plan()
            except Exception as exc:  # its plan failed: reported as a step's would be
                _fail(executor, out.results[i], None, exc)
                continue
            policy, executor.policy = executor.policy, RetryPolicy(attempts=members[i].attempts)
            try:
                out.results[i] = executor.materialize(con, job.compiled, reads=job.reads, drop_first=job.drop_first)
            finally:
                executor.policy = policy
            if i in moved:
                out.results[i].warnings.append(f"rolled back out of group {group_id} ({moved[i]}); run alone")
            continue
        try:
            rest = transaction(executor, con, members, jobs, idxs, out, group_id, atomic, seconds)
            out.commits += 1
            if rest:
                settled.difference_update(rest)
                work.appendleft(rest)
        except Failed as failed:
            i = idxs[failed.index]
            if atomic or (cancelled is not None and cancelled.is_set()):
                if not failed.nothing:
                    _fail(executor, out.results[i], jobs.get(i), failed.error)
                why = (f"not published: the --atomic run failed at {members[i].target}"
                       + (f" {out.results[i].partition}" if out.results[i].partition else "")
                       if atomic else "the run was cancelled")
                for j in idxs:
                    if j != i or failed.nothing:
                        r = out.results[j]
                        r.status, r.error = ("skipped" if atomic else "cancelled"), why  # type: ignore[assignment]
                        r.rows_inserted = r.rows_updated = r.rows_deleted = 0
                        r.snapshot_id = None
                if cancelled is not None and cancelled.is_set() and not atomic:
                    out.results[i].status = "cancelled"
                return out
            target = members[i].target
            pos = idxs.index(i)
            later = [j for j in idxs[pos + 1:] if members[j].target == target]
            below = _downstream(members, idxs, {i, *later})
            others = [j for j in idxs if j != i and j not in later and j not in below]
            settled.difference_update(idxs)
            if not failed.nothing:
                moved[i] = executor.lake.redact(first_line(failed.error))
                out.retried.append(target + (f" {out.results[i].partition}" if out.results[i].partition else ""))
            # the others first (committed again without it), then it alone, then its table's later
            # partitions, then the members that read it (skipped if it failed)
            for part in (below, later, [i], others):
                work.appendleft(part)
        except Unsettled as unsettled:  # the commit's outcome is unknown: retried by none
            for j in idxs:
                _fail(executor, out.results[j], jobs.get(j), unsettled.error)
        except Exception:  # not one member's failure (the COMMIT): every member alone, retried as a step
            if atomic:
                raise
            settled.difference_update(idxs)
            for j in reversed(idxs):
                work.appendleft([j])
    return out


def _downstream(members: list[Member], idxs: list[int], roots: set[int]) -> list[int]:
    """The members of ``idxs`` that read one of ``roots``, directly or through another, in order."""
    below: set[int] = set()
    for j in idxs:  # members come in DAG order: an upstream before the members that read it
        if j not in roots and any(a in roots or a in below for a in members[j].after):
            below.add(j)
    return [j for j in idxs if j in below]


def _unblocked(members: list[Member], out: GroupOutcome, idxs: list[int], settled: set[int]) -> list[int]:
    """``idxs`` without the members an upstream member of which ended without committing: those are
    recorded ``skipped``, as the scheduler records a step whose upstream failed."""
    ok = ("success", "unchanged")
    keep: list[int] = []
    for j in idxs:
        bad = next((a for a in members[j].after if a in settled and out.results[a].status not in ok), None)
        if bad is None:
            keep.append(j)
            continue
        up = out.results[bad]
        r = out.results[j]
        r.status = "skipped"  # type: ignore[assignment]
        r.error = (f"an upstream model failed in this run: {up.target}" + (f" {up.partition}" if up.partition else "")
                   if up.status == "failed" else up.error or "not run")
        r.rows_inserted = r.rows_updated = r.rows_deleted = 0
        r.snapshot_id = None
        settled.add(j)
    return keep


class Quiet:
    """A statement log that logs nothing (an atomic group before its first member's log exists)."""

    def run(self, con: Any, statement: str, params: dict[str, Any] | None = None, role: str | None = None) -> Any:
        text, bind = inline(statement, params)  # no pandas import (execute/binding.py)
        return con.execute(text, bind) if bind else con.execute(text)

    def note(self, text: str) -> None:
        pass
