"""``lakewrap promote``: registered on the group of :mod:`lakewrap.cli` (which passes its run-report
printer, so this module does not import the CLI back)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from lakewrap.cli_io import handled, logical_time, project_option


def register(main: click.Group, emit_run: Callable[[Any, str], None]) -> None:
    @main.command("promote")
    @click.argument("selectors", nargs=-1)
    @click.option("--from", "source", required=True, help="The environment whose built SQL is promoted (e.g. dev).")
    @click.option("--to", "target", required=True, help="The environment the models are re-run in (e.g. prod).")
    @click.option("--exclude", multiple=True, help="Selectors to leave out.")
    @click.option("--force", is_flag=True, help="Run even the models whose SQL differs from what --from built.")
    @click.option("--partition", help="Partition value (default: the latest complete partition).")
    @click.option("--start", help="First partition of a range (inclusive).")
    @click.option("--end", help="Last partition of a range (inclusive).")
    @click.option("--now", "now", help="Logical run time, ISO 8601 (default: the current time).")
    @click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
    @project_option
    @handled
    def promote_cmd(selectors: tuple[str, ...], source: str, target: str, exclude: tuple[str, ...], force: bool,
                    partition: str | None, start: str | None, end: str | None, now: str | None, fmt: str,
                    project: Path) -> None:
        """Re-run the selected models in --to (never copies), refusing when their SQL differs from
        what --from built (docs/environments.md)."""
        from lakewrap.promote import promote

        emit_run(promote(project, source, target, selectors, exclude=exclude, force=force, partition=partition,
                         start=start, end=end, now=logical_time(now)), fmt)
