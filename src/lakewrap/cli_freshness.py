"""``lakewrap freshness``: each model's and source's age and state (docs/schedules.md, "Freshness").

Registered on the ``lakewrap`` group by :func:`register` (called at the end of ``lakewrap.cli``); the
work is in :mod:`lakewrap.freshness`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from lakewrap.cli_io import _show_table, _write, handled, logical_time, project_option

STYLES = {"ok": "green", "warn": "yellow", "error": "red", "never": "magenta"}


def _dur(seconds: float | None) -> str:
    from lakewrap.durations import render_duration

    return "-" if seconds is None else render_duration(seconds)


@click.command("freshness")
@click.argument("selectors", nargs=-1)
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("--now", "now", help="The time to measure ages at, ISO 8601 (default: the current time).")
@project_option
@handled
def freshness_cmd(selectors: tuple[str, ...], fmt: str, now: str | None, project: Path) -> None:
    """Each model's (with `-- freshness`) and each [sources] table's age and state: ok, warn, error
    or never. Exit 1 when one is past its error_after (or never loaded and has one).

    Selectors: the model selectors of `lakewrap run`, and source names (raw.events or source:raw.events).
    """
    from lakewrap.freshness import breached, check

    rows = check(project, selectors, logical_time(now))
    if fmt == "json":
        _write(json.dumps([r.to_dict() for r in rows], indent=2) + "\n")
    else:
        _show_table(("kind", "name", "age", "warn after", "error after", "state", "from", "loaded at"),
                    [(r.kind, r.name, _dur(r.age_seconds), _dur(r.warn_after), _dur(r.error_after), r.state,
                      r.basis, r.loaded_at.isoformat(timespec="seconds") if r.loaded_at else "-") for r in rows],
                    styles=[STYLES[r.state] for r in rows])
    if breached(rows):
        sys.exit(1)


def register(group: click.Group) -> None:
    group.add_command(freshness_cmd)
