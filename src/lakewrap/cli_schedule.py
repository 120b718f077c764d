"""``lakewrap scheduler``: schedules' due times and triggers' upstream commits as jobs of the queue
(docs/schedules.md); registered on the group of :mod:`lakewrap.cli`, the work in :mod:`lakewrap.ticks`."""

from __future__ import annotations

import json
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import click

from lakewrap.cli_io import _say, _write, handled, logical_time, project_option
from lakewrap.errors import PlanError


def _print(look: Any, fmt: str, *, idle: bool = True) -> None:
    """One look's jobs and errors; ``idle=False``: nothing for a look that did nothing (the loop)."""
    if not idle and not (look.enqueued or look.errors):
        return
    if fmt == "json":
        _write(json.dumps(look.to_dict()) + "\n")
    else:
        for job in look.enqueued:
            what = f"schedule {job['schedule']} due {job['due']}" if "schedule" in job else (
                f"trigger {job['trigger']} (upstream commits up to {job['window_end']})")
            _write(f"enqueued: job {job['job_id']} for {what}, partition {job['partition'] or '-'}\n")
        for err in look.errors:
            _say("error:", err, "red", stderr=True)
        _say("looked:", f"{len(look.enqueued)} enqueued, {len(look.existing)} already queued, "
             f"{len(look.skipped)} skipped, {len(look.errors)} failed", "cyan", stderr=True)
    sys.stdout.flush()


@click.command("scheduler")
@click.option("--once", is_flag=True, help="Look once (enqueue what is due now), then exit.")
@click.option("--now", "now", help="With --once: the time to look at, ISO 8601 (default: the current time).")
@click.option("--interval", type=float, default=30.0, show_default=True, help="Seconds between looks.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@project_option
@handled
def scheduler_cmd(once: bool, now: str | None, interval: float, fmt: str, project: Path) -> None:
    """Enqueue a job for each due time of the project's schedules ([schedules.<name>], -- schedule) and
    for each partition whose upstream rows changed (-- trigger upstream). Each due time becomes one
    job, however many schedulers run. Stops on SIGTERM or SIGINT."""
    from datetime import datetime, timezone

    from lakewrap.ticks import look, run_loop

    if now is not None and not once:
        raise PlanError("--now applies to --once", hint="a looping scheduler reads the clock")
    if interval <= 0:
        raise PlanError(f"--interval must be above 0, not {interval:g}")
    if once:
        found = look(project, logical_time(now) or datetime.now(timezone.utc))
        _print(found, fmt)
        if found.errors:
            sys.exit(1)
        return
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: stop.set())
    run_loop(project, interval=interval, stop=stop, report=lambda found: _print(found, fmt, idle=False))


def register(group: click.Group) -> None:
    group.add_command(scheduler_cmd)
