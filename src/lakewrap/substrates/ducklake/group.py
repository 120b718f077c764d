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

Which members share a transaction, and what a member's failure does, is the shared loop's
(:mod:`lakewrap.execute.group`); this module is DuckLake's one transaction (:func:`transaction`).
"""

from __future__ import annotations

import json
import time
import uuid
from typing import TYPE_CHECKING, Any

from lakewrap import __version__
from lakewrap.execute import statements as sql
from lakewrap.execute.executor import Job
from lakewrap.execute.group import Failed, GroupOutcome, Member, Quiet, rolled_back
from lakewrap.execute.log import StatementLog

if TYPE_CHECKING:
    from lakewrap.substrates.ducklake.materialize import Executor, Written


def transaction(executor: Executor, con: Any, members: list[Member], jobs: dict[int, Job], idxs: list[int],
                 out: GroupOutcome, group_id: str, atomic: bool, seconds: float) -> list[int]:
    """One transaction over ``idxs`` (until the time bound); the members left for the next."""
    lake = executor.lake
    logs: dict[int, StatementLog] = {}
    written: list[tuple[int, Written]] = []
    committed = False
    error: str | None = None
    fences: dict[str, str | None] = {}
    executor.read_fences(con, [members[i].target for i in idxs], Quiet())  # type: ignore[arg-type]
    for pos, i in enumerate(idxs):  # before BEGIN: a probe that fails inside would abort the transaction
        target = members[i].target
        if target not in fences:
            fences[target] = executor._fence(con, target, Quiet())  # type: ignore[arg-type]
        if not atomic and not members[i].after:  # planned (and checked) before the transaction
            try:
                jobs.setdefault(i, members[i].plan())
                executor.check(jobs[i].compiled)
            except Exception as exc:
                raise Failed(pos, exc) from exc
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
        begin = head if head is not None else Quiet()
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
                raise Failed(pos, exc) from exc
            if w is None:
                if not atomic:
                    raise Failed(pos, RuntimeError("nothing to write"), nothing=True)
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
            executor.rollback(con, head if head is not None else Quiet())  # type: ignore[arg-type]
            error = rolled_back(out, idxs, exc)
        raise
    finally:
        for i, log in logs.items():
            r = out.results[i]
            note = (None if committed else f"rolled back with group {group_id}: {error}")
            log.close(r.status if committed else "rolled back", r.error if committed else note)
