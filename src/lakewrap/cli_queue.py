"""``lakewrap enqueue``, ``lakewrap worker`` and ``lakewrap jobs``: the job queue from the command
line (docs/queue.md); registered on the group of :mod:`lakewrap.cli`."""

from __future__ import annotations

import json
import sys
from datetime import datetime, timezone
from pathlib import Path

import click

from lakewrap.cli_io import _say, _show_table, _write, handled, project_option
from lakewrap.errors import PlanError


def _line(text: str) -> None:
    stamp = datetime.now(timezone.utc).strftime("%H:%M:%S")
    _write(f"{stamp} {text}\n")
    sys.stdout.flush()


def register(main: click.Group) -> None:
    @main.command("enqueue")
    @click.argument("selectors", nargs=-1)
    @click.option("--partition", help="One partition value (default: the latest complete partition when it runs).")
    @click.option("--start", help="First partition of a range (inclusive).")
    @click.option("--end", help="Last partition of a range (inclusive).")
    @click.option("--dedupe-key", "dedupe_key",
                  help="A job with this key is queued once: asking again prints that job.")
    @click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
    @project_option
    @handled
    def enqueue_cmd(selectors: tuple[str, ...], partition: str | None, start: str | None, end: str | None,
                    dedupe_key: str | None, fmt: str, project: Path) -> None:
        """Queue a run of SELECTORS for a worker; prints the job id (checked like `lakewrap run`)."""
        from lakewrap.jobs import open_queue

        with open_queue(project) as queue:
            before = queue.by_key(dedupe_key) if dedupe_key else None
            job = queue.enqueue(selectors, partition=partition, start=start, end=end, requested_by="cli",
                                dedupe_key=dedupe_key)
        if fmt == "json":
            _write(json.dumps({**job.to_json(), "created": before is None}, indent=2) + "\n")
            return
        _write(f"{job.id}\n")
        note = f"already queued as job {job.id} ({job.status})" if before is not None else f"job {job.id} queued"
        _say("queued:" if before is None else "note:", note + " (run it with `lakewrap worker`)", "green", stderr=True)

    @main.command("worker")
    @click.option("--concurrency", type=int, default=1, show_default=True,
                  help="Worker processes, each running one job at a time (PostgreSQL catalogs only above 1).")
    @click.option("--once", is_flag=True, help="Run what is queued, then exit.")
    @click.option("--heartbeat", type=float, default=5.0, show_default=True,
                  help="Seconds between heartbeats of the running job.")
    @click.option("--reclaim-after", "reclaim_after", type=float, default=60.0, show_default=True,
                  help="Hand back (and resume) a running job whose heartbeat is older than this many seconds.")
    @click.option("--grace", type=float, default=20.0, show_default=True,
                  help="After SIGTERM, seconds the current job may still run before it is cancelled and handed back.")
    @click.option("--max-attempts", "max_attempts", type=int, default=3, show_default=True,
                  help="A job claimed more often than this (its workers keep stopping) fails.")
    @project_option
    @handled
    def worker_cmd(concurrency: int, once: bool, heartbeat: float, reclaim_after: float, grace: float,
                   max_attempts: int, project: Path) -> None:
        """Claim queued jobs and run them (SIGTERM: finish or hand back the current job, exit 0)."""
        from lakewrap.jobs import open_queue
        from lakewrap.jobworker import Worker, WorkerOptions, child_argv, supervise

        if concurrency < 1:
            raise PlanError(f"--concurrency must be at least 1, not {concurrency}")
        if heartbeat <= 0 or reclaim_after <= heartbeat:
            raise PlanError(f"--reclaim-after ({reclaim_after:g}) must be longer than --heartbeat ({heartbeat:g}), "
                            "which must be above 0", hint="e.g. --heartbeat 5 --reclaim-after 60")
        if max_attempts < 1:
            raise PlanError(f"--max-attempts must be at least 1, not {max_attempts}")
        opts = WorkerOptions(heartbeat=heartbeat, reclaim_after=reclaim_after, grace=grace, once=once,
                             max_attempts=max_attempts)
        if concurrency > 1:
            with open_queue(project) as queue:
                if queue.exclusive:
                    raise PlanError(f"--concurrency {concurrency}: {queue.where} takes one worker at a time",
                                    hint="drop --concurrency, or put the catalog on PostgreSQL (docs/queue.md)")
            sys.exit(supervise(child_argv(project.resolve(), opts), concurrency, _line))
        Worker(project.resolve(), opts, say=_line).serve()

    @main.command("jobs")
    @click.option("--status", type=click.Choice(["queued", "running", "succeeded", "failed", "cancelled"]),
                  help="Only the jobs in this state.")
    @click.option("--limit", type=int, default=50, show_default=True, help="The newest this many jobs.")
    @click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
    @project_option
    @handled
    def jobs_cmd(status: str | None, limit: int, fmt: str, project: Path) -> None:
        """List the queue's jobs, newest first."""
        from lakewrap.jobs import open_queue
        from lakewrap.jobworker import describe

        with open_queue(project) as queue:
            jobs = queue.list(status=status, limit=limit)
        if fmt == "json":
            _write(json.dumps([j.to_json() for j in jobs], indent=2) + "\n")
            return
        rows = [[str(j.id), j.status, describe(j) if j.kind == "run" else f"resume {j.resume_of}", str(j.attempts),
                 j.run_id or "", j.requested_by, j.created_at[:19], (j.error or "")[:80]] for j in jobs]
        _show_table(["id", "status", "job", "attempts", "run_id", "requested_by", "created_at", "error"], rows,
                    right={"id", "attempts"})
