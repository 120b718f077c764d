"""``lakewrap explain``, ``reproduce`` and ``restore``: thin commands over :mod:`lakewrap.provenance`.

Registered on the ``lakewrap`` group by :func:`register` (called at the end of ``lakewrap.cli``), so
that these commands live apart from the others; both share :mod:`lakewrap.cli_io`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from lakewrap.cli_io import _say, _show_table, _write, handled, project_option


@click.command("explain")
@click.argument("snapshot_or_run")
@click.option("--format", "fmt", type=click.Choice(["sql", "json"]), default="sql", show_default=True)
@project_option
@handled
def explain_cmd(snapshot_or_run: str, fmt: str, project: Path) -> None:
    """Which model, partition and run produced a snapshot (a number), or what a run materialized:
    pins, parameter values and the exact statements executed, read from the lake's own records."""
    from lakewrap.project import require_project
    from lakewrap.provenance import explain, explain_sql

    root = require_project(project)
    items = explain(root, snapshot_or_run)
    if fmt == "json":
        _write(json.dumps([m.to_dict() for m in items], indent=2, default=str) + "\n")
    else:
        _write(explain_sql(root, items))


@click.command("reproduce")
@click.argument("run_id")
@click.option("--model", help="Only this model's materializations.")
@click.option("--partition", help="Only this partition.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@project_option
@handled
def reproduce_cmd(run_id: str, model: str | None, partition: str | None, fmt: str, project: Path) -> None:
    """Re-execute a run's recorded SQL against its pinned inputs in scratch space and compare with the table.

    Reads the lake only (attached read-only). Exit code 1 unless every materialization is MATCH (or
    SKIPPED: views, literal models).
    """
    from lakewrap.project import require_project
    from lakewrap.provenance import reproduce

    report = reproduce(require_project(project), run_id, model=model, partition=partition)
    if fmt == "json":
        _write(json.dumps(report.to_dict(), indent=2, default=str) + "\n")
    else:
        columns = ("model", "partition", "strategy", "snapshot", "pin", "result", "rows", "only in repro",
                   "only in table")
        rows = [(r.target, r.partition or "-", r.strategy, str(r.snapshot_id), str(r.pin), r.status,
                 str(r.rows_in_table), str(r.only_in_reproduction), str(r.only_in_table)) for r in report.results]
        styles = [{"MATCH": "green", "MISMATCH": "red", "ERROR": "red", "SKIPPED": "yellow"}[r.status]
                  for r in report.results]
        _show_table(columns, rows, title=f"reproduce {run_id}", right=("rows", "only in repro", "only in table"),
                    styles=styles)
        for r in report.results:
            if r.detail:
                where = r.target + (f" {r.partition}" if r.partition else "")
                _say(f"{r.status.lower()}:", f"{where}: {r.detail}",
                     "yellow" if r.status == "SKIPPED" else "red")
    if not report.ok:
        sys.exit(1)


@click.command("restore")
@click.argument("model")
@click.option("--partition", help="The partition to restore (partitioned models).")
@click.option("--to", "to_run", help="Restore the content as of this run's materialization.")
@click.option("--to-snapshot", "to_snapshot", type=int, help="Restore the content as of this snapshot id.")
@click.option("--dry-run", is_flag=True, help="Print the plan; write nothing.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@project_option
@handled
def restore_cmd(model: str, partition: str | None, to_run: str | None, to_snapshot: int | None, dry_run: bool,
                fmt: str, project: Path) -> None:
    """Put one partition (or a whole unpartitioned table) back as of a run or snapshot, as a new commit.

    One transaction, with its own record in lakewrap.materializations (strategy `restore`, its pins
    naming the snapshot and run restored) and commit message; other partitions are untouched.
    """
    from lakewrap.output import plan_sql
    from lakewrap.provenance_restore import restore

    out = restore(project, model, partition=partition, to_run=to_run, to_snapshot=to_snapshot, dry_run=dry_run)
    if fmt == "json":
        _write(json.dumps(out.to_dict(), indent=2, default=str) + "\n")
        return
    if dry_run:
        _write(plan_sql(out.plan))
        return
    r = out.result
    what = f"{out.target}" + (f" partition {out.partition}" if out.partition else "")
    source = f"run {out.from_run} (snapshot {out.from_snapshot})" if out.from_run else f"snapshot {out.from_snapshot}"
    _say("restored:", f"{what} to {source}: -{r.rows_deleted} +{r.rows_inserted} rows, new snapshot "
         f"{r.snapshot_id}, run {out.run_id}", "green")


def emit_as_of(plans: list[Any], warnings: list[str], fmt: str, as_of: str) -> None:
    """Print ``compile --as-of`` output: the pinned plans, warnings on stderr."""
    from lakewrap.output import as_of_sql, plans_json
    from lakewrap.provenance import run_or_snapshot

    for w in warnings:
        _say("warning:", w, "yellow", stderr=True)
    _write(plans_json(plans) if fmt == "json" else as_of_sql(plans, run_or_snapshot(as_of)))


def register(group: click.Group) -> None:
    for command in (explain_cmd, reproduce_cmd, restore_cmd):
        group.add_command(command)
