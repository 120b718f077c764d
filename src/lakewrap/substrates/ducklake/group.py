"""Group commit on DuckLake: several materializations in one transaction, one DuckLake snapshot.

A DuckLake commit is expensive (measured: 50 small ``CREATE OR REPLACE TABLE ... AS`` took 14-20 s
one transaction each, 0.6-1.5 s in one), so the runner hands independent steps to
:func:`commit_group` together (docs/running.md, "Group commit and --atomic"). Each member is
written exactly as :meth:`~lakewrap.substrates.ducklake.materialize.Executor.write` writes a
materialization alone: its guards, tests, state rows (``lakewrap.materializations``, the fence,
``compiled_sql``, test results) and its pins. The snapshot's commit message holds one entry per
member (``extra_info = {"group": ..., "commit_id": ..., "members": [...]}``, each member's entry what
a materialization alone records), so every read-back that finds a materialization's snapshot by
its run, target and partition finds its own entry (``compilers.lake.member_snapshots``).

When a member fails, the transaction is rolled back and the group is committed again without it;
the failed member then runs alone through the shared loop (its retries, its error reported as a
step's), and the members of its table after it run after it, so one table's partitions still
commit in order. A failure that is not one member's (the COMMIT) hands every member to the loop
alone. With ``atomic`` nothing is retried: a failure anywhere rolls everything back.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from lakewrap import __version__
from lakewrap.execute import locate
from lakewrap.execute import statements as sql
from lakewrap.execute.binding import inline
from lakewrap.execute.executor import GroupStep, Job, Result, RetryPolicy
from lakewrap.execute.log import StatementLog

if TYPE_CHECKING:
    from lakewrap.substrates.ducklake.materialize import Executor, Written


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
class _Failed(Exception):
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


def _fail(executor: Executor, result: Result, job: Job | None, exc: BaseException) -> None:
    compiled = job.compiled if job is not None else None
    result.fail(locate.located(exc, result.model, executor.lake.root, compiled=compiled), executor.lake.redact)
    result.error_class = executor.error_class(exc)
    text = str(exc).strip()
    result.attempts = max(result.attempts, 1)
    result.attempt_errors.append({  # the run log's attempts, as the shared loop records a failed attempt
        "attempt": result.attempts, "seconds": round(result.seconds, 6),
        "error_class": executor.attempt_class(exc, executor.retryable(exc)),
        "error": executor.lake.redact(text.splitlines()[0] if text else "")})


def commit_group(executor: Executor, con: Any, members: list[Member], *, group_id: str,
                 atomic: bool = False, seconds: float = 30.0,
                 cancelled: threading.Event | None = None) -> GroupOutcome:
    """Commit ``members`` in as few transactions as the time bound allows (``seconds`` of writing
    per transaction; ``atomic``: one, unbounded). Never raises for model or data errors."""
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
            rest = _transaction(executor, con, members, jobs, idxs, out, group_id, atomic, seconds)
            out.commits += 1
            if rest:
                settled.difference_update(rest)
                work.appendleft(rest)
        except _Failed as failed:
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
                text = str(failed.error).strip()
                moved[i] = executor.lake.redact(text.splitlines()[0] if text else type(failed.error).__name__)
                out.retried.append(target + (f" {out.results[i].partition}" if out.results[i].partition else ""))
            # the others first (committed again without it), then it alone, then its table's later
            # partitions, then the members that read it (skipped if it failed)
            for part in (below, later, [i], others):
                work.appendleft(part)
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


def _transaction(executor: Executor, con: Any, members: list[Member], jobs: dict[int, Job], idxs: list[int],
                 out: GroupOutcome, group_id: str, atomic: bool, seconds: float) -> list[int]:
    """One transaction over ``idxs`` (until the time bound); the members left for the next."""
    lake = executor.lake
    logs: dict[int, StatementLog] = {}
    written: list[tuple[int, Written]] = []
    committed = False
    error: str | None = None
    fences: dict[str, str | None] = {}
    executor.read_fences(con, [members[i].target for i in idxs], _Quiet())  # type: ignore[arg-type]
    for pos, i in enumerate(idxs):  # before BEGIN: a probe that fails inside would abort the transaction
        target = members[i].target
        if target not in fences:
            fences[target] = executor._fence(con, target, _Quiet())  # type: ignore[arg-type]
        if not atomic and not members[i].after:  # planned (and checked) before the transaction
            try:
                jobs.setdefault(i, members[i].plan())
                executor.check(jobs[i].compiled)
            except Exception as exc:
                raise _Failed(pos, exc) from exc
    head: StatementLog | None = None
    try:
        def log_of(i: int) -> StatementLog:
            nonlocal head
            if i not in logs:
                logs[i] = StatementLog(executor.log_dir, jobs[i].compiled, lake.redact)
                if head is None:
                    head = logs[i]
                    if pin is not None:  # the first member was planned inside the transaction
                        head.note(f"in group {group_id}: BEGIN TRANSACTION ran before this member was planned; "
                                  f"the transaction reads snapshot {pin}")
                else:
                    logs[i].note(f"in group {group_id}: BEGIN and COMMIT are in the statement log {head.path.name}")
            return logs[i]

        for i in idxs:  # planned inside the transaction, after the upstream members it reads wrote
            if atomic or members[i].after:
                jobs.pop(i, None)
        pin: int | None = None
        if idxs[0] in jobs:
            log_of(idxs[0])
        begin = head if head is not None else _Quiet()
        begin.run(con, sql.BEGIN)
        pin = begin.run(con, sql.current_snapshot(lake.alias)).fetchone()[0]
        started = time.perf_counter()
        wrote: set[str] = set()
        bootstraps: dict[str, set[str]] = {}
        for pos, i in enumerate(idxs):
            m, result = members[i], out.results[i]
            if written and not atomic and time.perf_counter() - started > seconds:
                break  # the time bound: commit what is written, the rest in the next transaction
            began = time.perf_counter()
            result.attempts = 1
            reads = tuple(u for u in m.upstreams if u in wrote)
            try:
                if i not in jobs:
                    jobs[i] = m.plan()
                    executor.check(jobs[i].compiled)
                job = jobs[i]
                result.sql_sha256 = job.compiled.sql_sha256
                w = executor.write(con, job, result, log_of(i), 1, pin, fences[m.target], group_reads=reads,
                                   bootstrapped=bootstraps.setdefault(m.target, set()))
            except Exception as exc:
                raise _Failed(pos, exc) from exc
            if w is None:
                if not atomic:
                    raise _Failed(pos, RuntimeError("nothing to write"), nothing=True)
                result.status = "unchanged"
            else:
                fences[w.target] = w.sql_sha256
                wrote.add(w.target)
                written.append((i, w))
            result.seconds = time.perf_counter() - began
        done = [i for i, _ in written]
        rest = [i for i in idxs if i not in done and out.results[i].status != "unchanged"]
        assert head is not None
        commit_id = uuid.uuid4().hex
        if len(written) == 1:
            extra: dict[str, Any] = {**written[0][1].extra, "commit_id": commit_id}
            message = written[0][1].message
        else:
            extra = {"group": group_id, "run_id": executor.run_id, "commit_id": commit_id,
                     "lakewrap_version": __version__,
                     "members": [{**w.extra, "group": group_id, "commit_id": commit_id} for _, w in written]}
            names = ", ".join(w.target + (f" {w.extra['partition']}" if w.extra.get("partition") else "")
                              for _, w in written[:8])
            message = (f"lakewrap group {group_id}: {len(written)} materializations ({names}"
                       + (", ..." if len(written) > 8 else "") + ")")
        if written:
            head.run(con, sql.set_commit_message(lake.alias),
                     {"author": "lakewrap", "message": message, "extra_info": json.dumps(extra)})
            snapshot, warning = executor.commit(con, head, pin, commit_id)
        else:  # every member had nothing to write (atomic)
            head.run(con, sql.ROLLBACK)
            snapshot, warning = None, None
        committed = True
        for i, w in written:
            w.landed(executor, out.results[i], snapshot, warning)
        return rest
    except BaseException as exc:
        if not committed:
            executor.rollback(con, head if head is not None else _Quiet())  # type: ignore[arg-type]
            cause = exc.error if isinstance(exc, _Failed) else exc
            text = str(cause).strip()
            error = text.splitlines()[0] if text else type(cause).__name__
            for r in (out.results[i] for i in idxs):  # rolled back: nothing was written
                r.rows_inserted = r.rows_updated = r.rows_deleted = 0
                r.warnings.clear()
                r.tests.clear()
        raise
    finally:
        for i, log in logs.items():
            r = out.results[i]
            note = (None if committed else f"rolled back with group {group_id}: {error}")
            log.close(r.status if committed else "rolled back", r.error if committed else note)


class _Quiet:
    """A statement log that logs nothing (an atomic group before its first member's log exists)."""

    def run(self, con: Any, statement: str, params: dict[str, Any] | None = None, role: str | None = None) -> Any:
        text, bind = inline(statement, params)  # no pandas import (execute/binding.py)
        return con.execute(text, bind) if bind else con.execute(text)

    def note(self, text: str) -> None:
        pass
