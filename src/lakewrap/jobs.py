"""The job queue: runs asked for (by the CLI, the HTTP API, schedules, triggers) and drained by
workers (:mod:`lakewrap.jobworker`), in the ``lakewrap_jobs`` table beside the run log.

Example:
    >>> with open_queue(root) as jobs:  # doctest: +SKIP
    ...     job = jobs.enqueue(["core.ev"], partition="2024-01-02", requested_by="api")
    ...     jobs.get(job.id).status
    'queued'

Where the table lives is the substrate's choice (:meth:`lakewrap.substrates.protocol.Substrate.job_store`,
docs/queue.md): the catalog's PostgreSQL database, a SQLite file beside a SQLite catalog's run log,
or a SQLite file beside a DuckDB-file catalog (which one process owns: an API process enqueues
there while the one worker holds the catalog).

``enqueue`` refuses what ``lakewrap run`` would refuse before anything runs (an unknown model, a
partition that is not of the model's grain, half a range) with the same errors, and stores nothing.
A ``dedupe_key`` is unique: enqueueing it again returns the job that has it, from any process.
"""

from __future__ import annotations

import builtins
import json
import os
import socket
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from lakewrap.errors import PlanError, StateError
from lakewrap.jobstore import JobStore

KINDS = ("run", "resume")
STATUSES = ("queued", "running", "succeeded", "failed", "cancelled")
FINAL = ("succeeded", "failed", "cancelled")
REQUESTERS = ("cli", "api", "schedule:", "trigger:")


@dataclass(frozen=True)
class Job:
    id: int
    kind: str  # "run" | "resume"
    selection: tuple[str, ...]  # selectors as given to `lakewrap run`
    partition: str | None  # one partition, or
    start: str | None  # a range (start, end inclusive, like `lakewrap run --start/--end`)
    end: str | None
    resume_of: str | None  # run id, for kind == "resume"
    status: str  # queued | running | succeeded | failed | cancelled
    attempts: int
    heartbeat_at: str | None  # ISO-8601 UTC
    run_id: str | None  # the run-log run this job became (lakewrap_runs.run_id)
    requested_by: str  # "cli", "api", "schedule:<name>", "trigger:<target>"
    dedupe_key: str | None  # unique when not null: enqueue with an existing key returns that job
    error: str | None
    created_at: str
    started_at: str | None
    finished_at: str | None
    worker: str | None = None  # who runs it now (host:pid), while running

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["selection"] = list(self.selection)
        return out

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Job:
        return cls(id=int(row["id"]), kind=row["kind"], selection=tuple(json.loads(row["selection"])),
                   partition=row["partition_value"], start=row["start_value"], end=row["end_value"],
                   resume_of=row["resume_of"], status=row["status"], attempts=int(row["attempts"]),
                   heartbeat_at=row["heartbeat_at"], run_id=row["run_id"], requested_by=row["requested_by"],
                   dedupe_key=row["dedupe_key"], error=row["error"], created_at=row["created_at"],
                   started_at=row["started_at"], finished_at=row["finished_at"], worker=row["worker"])


def worker_name() -> str:
    """This process as a worker: ``host:pid``."""
    return f"{socket.gethostname()}:{os.getpid()}"


class JobQueue:
    """The queue of one project's lake (environment): see the module docs."""

    def __init__(self, root: Path, store: JobStore) -> None:
        self.root = root
        self.store = store

    @property
    def exclusive(self) -> bool:
        """One worker at a time drains this queue (its catalog has one owner process)."""
        return self.store.exclusive

    @property
    def where(self) -> str:
        return self.store.where

    # -- asking -----------------------------------------------------------------------------------
    def enqueue(self, selection: Sequence[str], *, partition: str | None = None, start: str | None = None,
                end: str | None = None, kind: str = "run", resume_of: str | None = None,
                requested_by: str = "cli", dedupe_key: str | None = None) -> Job:
        """Queue a run (or a resume of run ``resume_of``), checked against the project first."""
        selection = (selection,) if isinstance(selection, str) else tuple(selection)  # a str is a Sequence too
        if kind not in KINDS:
            raise PlanError(f"unknown job kind `{kind}`", hint="use run or resume")
        if not any(requested_by == r or (r.endswith(":") and requested_by.startswith(r) and len(requested_by) > len(r))
                   for r in REQUESTERS):
            raise PlanError(f"requested_by `{requested_by}` is not one of cli, api, schedule:<name>, trigger:<target>")
        if kind == "resume":
            if not resume_of:
                raise PlanError("a resume job needs the run id it resumes (resume_of)")
            if selection or partition or start or end:
                raise PlanError("a resume job runs its run's own selection and partitions",
                                hint="give only resume_of")
        else:
            if resume_of:
                raise PlanError("resume_of only applies to kind resume")
            self._check(selection, partition, start, end)
        row = {"kind": kind, "selection": json.dumps(list(selection)), "partition_value": partition,
               "start_value": start, "end_value": end, "resume_of": resume_of, "requested_by": requested_by,
               "dedupe_key": dedupe_key}
        return Job.from_row(self.store.insert(row))

    def _check(self, selection: Sequence[str], partition: str | None, start: str | None, end: str | None) -> None:
        """What ``lakewrap run`` refuses before anything runs: selection, partitions, grains."""
        from lakewrap.compile import load_project
        from lakewrap.compilecache import _Cache
        from lakewrap.runsteps import check_grains
        from lakewrap.steps import plan_partitions, refuse_empty

        cache = _Cache.open(self.root, True)
        project = load_project(self.root, cache)
        selected = project.select(selection)
        refuse_empty(selected, selection, ())
        plan_partitions(selected, partition, start, end)
        check_grains(project, selected)
        if cache is not None:
            cache.save()

    def get(self, job_id: int) -> Job | None:
        row = self.store.get(int(job_id))
        return Job.from_row(row) if row else None

    def by_key(self, dedupe_key: str) -> Job | None:
        """The job queued with ``dedupe_key`` (None: none)."""
        row = self.store.get_by_key(dedupe_key)
        return Job.from_row(row) if row else None

    def list(self, *, status: str | None = None, limit: int = 50) -> builtins.list[Job]:
        """The newest ``limit`` jobs (of ``status``), newest first."""
        if status is not None and status not in STATUSES:
            raise PlanError(f"unknown job status `{status}`", hint="use one of " + ", ".join(STATUSES))
        if limit < 1:
            raise PlanError(f"limit must be at least 1, not {limit}")
        return [Job.from_row(r) for r in self.store.list(status, limit)]

    # -- worker side ------------------------------------------------------------------------------
    def claim(self, worker: str) -> Job | None:
        """The oldest queued job, now ``running`` for ``worker`` (attempts + 1, a heartbeat, its run id
        chosen: a new one, the run it resumes, or the one it had); None when nothing is queued."""
        from lakewrap.steps import new_run_id

        row = self.store.claim(worker, new_run_id())
        return Job.from_row(row) if row else None

    def heartbeat(self, job_id: int, worker: str) -> None:
        """The job is alive. Raises :class:`StateError` when it is no longer ``worker``'s running job
        (reclaimed after a stall, or finished elsewhere)."""
        if not self.store.heartbeat(int(job_id), worker):
            raise StateError(f"job {job_id} is no longer running on {worker}")

    def finish(self, job_id: int, status: str, *, run_id: str | None, error: str | None) -> None:
        if status not in FINAL:
            raise PlanError(f"a job finishes succeeded, failed or cancelled, not `{status}`",
                            hint="hand a job back with release()")
        self.store.finish(int(job_id), status, run_id, error)

    def release(self, job_id: int, worker: str) -> Job | None:
        """Hand ``worker``'s running job back: queued again (as a resume of its run, attempts kept)."""
        row = self.store.release(int(job_id), worker)
        return Job.from_row(row) if row else None

    def reclaim(self, timeout_s: float) -> builtins.list[Job]:
        """Running jobs whose heartbeat is older than ``timeout_s`` seconds, handed back as
        :meth:`release` does; the jobs as they are now."""
        return [Job.from_row(r) for r in self.store.reclaim(timeout_s)]

    def close(self) -> None:
        self.store.close()


@contextmanager
def open_queue(root: Path, *, env: str | None = None) -> Iterator[JobQueue]:
    """The job queue of the project at ``root`` (in environment ``env``, default ``LAKEWRAP_ENV``)."""
    from lakewrap.config import load_config
    from lakewrap.project import require_project
    from lakewrap.substrates.registry import resolve

    root = require_project(root)
    config = load_config(root, env)
    queue = JobQueue(root, resolve(config.lake).job_store(root, config))
    try:
        yield queue
    finally:
        queue.close()
