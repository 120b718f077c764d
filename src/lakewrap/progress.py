"""Progress of a run or backfill: a live rich display on a terminal, plain lines elsewhere.

Both take the scheduler's events (``start`` with the number of steps, ``step`` with each
:class:`~lakewrap.execute.executor.Result`, ``end`` with the report) and end with a summary.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO


def _eta(done: int, total: int, elapsed: float) -> str:
    if done == 0 or done >= total:
        return "-"
    left = elapsed / done * (total - done)
    return f"{int(left // 60)}m{int(left % 60):02d}s" if left >= 60 else f"{left:.0f}s"


class PlainProgress:
    """One line per finished step, with counts and an ETA (for logs and pipes)."""

    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out or sys.stderr
        self.total = 0
        self.counts: dict[str, int] = {}
        self.started = time.monotonic()

    def __call__(self, event: str, payload: Any) -> None:
        if event == "start":
            self.total, self.started = int(payload), time.monotonic()
            self.out.write(f"{self.total} steps to run\n")
        elif event == "step":
            r = payload
            self.counts[r.status] = self.counts.get(r.status, 0) + 1
            done = sum(self.counts.values())
            part = f" {r.partition}" if r.partition else ""
            tail = f": {r.error.splitlines()[0]}" if r.error and r.status != "success" else ""
            self.out.write(f"[{done}/{self.total}] {r.target}{part} {r.status} ({r.seconds:.2f}s, "
                           f"{r.attempts} attempt{'s' if r.attempts != 1 else ''}) "
                           f"eta {_eta(done, self.total, time.monotonic() - self.started)}{tail}\n")
        self.out.flush()


class LiveProgress:
    """A rich live display: a bar, counts by status, failures so far, elapsed time and ETA."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.console = Console(stderr=True, highlight=False)
        self.bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TextColumn("{task.fields[counts]}"), TimeElapsedColumn(), TextColumn("eta"),
                            TimeRemainingColumn(), console=self.console, transient=False)
        self.task: Any = None
        self.counts: dict[str, int] = {}

    def _text(self) -> str:
        c = self.counts
        return (f"[green]{c.get('success', 0) + c.get('unchanged', 0)} ok[/] [red]{c.get('failed', 0)} failed[/] "
                f"[yellow]{c.get('skipped', 0)} skipped[/] [magenta]{c.get('cancelled', 0)} cancelled[/]")

    def __call__(self, event: str, payload: Any) -> None:
        from rich.markup import escape

        if event == "start":
            self.bar.start()
            self.task = self.bar.add_task("steps", total=int(payload), counts=self._text())
        elif event == "step":
            r = payload
            self.counts[r.status] = self.counts.get(r.status, 0) + 1
            self.bar.update(self.task, advance=1, counts=self._text())
            if r.status == "failed":
                part = f" {r.partition}" if r.partition else ""
                self.bar.console.print(f"[red]failed:[/] {r.target}{part}: {escape((r.error or '').splitlines()[0])}")
        elif event == "end":
            self.bar.stop()


def summary(report: Any) -> str:
    """``N steps: a succeeded, b failed, ...`` plus what was not re-run, one line.

    A resumed run counts every step of the run: those committed before the resume as succeeded.
    """
    c = report.counts()
    line = (f"run {report.run_id} {report.status}: {len(report.results) + report.earlier} steps, "
            f"{c['success'] + c['unchanged']} succeeded ({c['unchanged']} unchanged), {c['failed']} failed, "
            f"{c['skipped']} skipped, {c['cancelled']} cancelled")
    if report.not_rerun:
        line += "; not run again: " + "; ".join(not_rerun(report))
    return line


def not_rerun(report: Any) -> list[str]:
    """``N <reason>`` for each reason the run did not run steps the lake already held."""
    counts: dict[str, int] = {}
    for item in report.not_rerun:
        counts[item["reason"]] = counts.get(item["reason"], 0) + 1
    return [f"{n} {'step' if n == 1 else 'steps'}: {reason}" for reason, n in counts.items()]


def for_terminal(fmt: str) -> Any:
    """The progress display for ``--format``: none for JSON, live on a terminal, plain otherwise."""
    if fmt == "json":
        return None
    return LiveProgress() if sys.stderr.isatty() else PlainProgress()
