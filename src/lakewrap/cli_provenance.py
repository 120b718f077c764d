"""``lakewrap explain``, ``reproduce`` and ``restore``: thin commands over :mod:`lakewrap.provenance`.

Registered on the ``lakewrap`` group by :func:`register` (called at the end of ``lakewrap.cli``), so
that these commands live apart from the others.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from lakewrap.cli import _say, _show_table, _write, handled

# the same option as lakewrap.cli's (imported from it, its type is lost in the import cycle)
project_option = click.option("--project", "project", type=click.Path(file_okay=False, path_type=Path),
                              default=Path("."), show_default="the current directory",
                              help="The project folder (holds models/).")


def _explain_text(items: list[Any]) -> str:
    from lakewrap.compilers.artifacts import CommitOp
    from lakewrap.output import RULE

    lines: list[str] = []
    for m in items:
        window = f"  window [{m.window_start}, {m.window_end})" if m.window_start else ""
        lines += [RULE, f"-- snapshot:   {m.snapshot_id if m.snapshot_id is not None else '(expired)'}",
                  f"-- run:        {m.run_id}", f"-- model:      {m.model}", f"-- target:     {m.target}",
                  f"-- partition:  {m.partition or '(none: the whole table)'}{window}",
                  f"-- strategy:   {m.strategy}",
                  f"-- pins:       {json.dumps(m.pins, sort_keys=True)}",
                  f"-- rows:       +{m.rows_inserted} ~{m.rows_updated} -{m.rows_deleted}",
                  f"-- committed:  {m.committed_at}",
                  f"-- message:    {m.commit_message or ''}",
                  f"-- sql_sha256: {m.sql_sha256}"]
        if "base_snapshot" in m.extra_info:  # Iceberg: the target's snapshot the transaction started from
            lines.append(f"-- base:       {m.extra_info['base_snapshot'] or '(none: the table was new)'}")
        if m.extra_info.get("restored_from"):
            lines.append(f"-- restored:   {json.dumps(m.extra_info['restored_from'], sort_keys=True)}")
        params = m.params
        if params:
            lines.append("-- params:     " + ", ".join(f"${k} = {v.type} '{v.value}'" for k, v in params.items()))
        lines += [RULE]
        begun = not m.statements
        if not m.statements:
            lines += ["BEGIN TRANSACTION;", ""]
            lines.append(f"-- (not recorded: {m.extra_info['statements_omitted']})" if m.extra_info.get(
                "statements_omitted") else "-- (the statements of this sql_sha256 are not in the lake's records)")
        ddl = _ddl(m)
        statements = list(m.statements)
        if ddl[0]:  # --full-refresh: before the plan's statements
            statements.insert(0, ddl[0])
        at = next((i for i, st in enumerate(statements) if st.get("role") in ("bootstrap", "write")), len(statements))
        statements[at:at] = ddl[1]  # on_schema_change: before the first write, where the executor ran it
        # Iceberg through DuckDB runs its setup statements before BEGIN, each committed on its own
        begin = next((i for i, st in enumerate(statements) if st.get("role") != "setup"), len(statements)) \
            if m.extra_info.get("write_path") == "sql" else 0
        for i, st in enumerate(statements, 1):
            if not begun and i - 1 >= begin:
                lines += ["BEGIN TRANSACTION;", ""]
                begun = True
            lines.append(f"-- [{i}] {st.get('role')}" + (f": {st['note']}" if st.get("note") else ""))
            if st.get("sql"):
                lines.append(str(st["sql"]).rstrip().rstrip(";") + ";")
            lines.append("")
        if not begun:
            lines += ["BEGIN TRANSACTION;", ""]
        commits = m.extra_info.get("commits") or []
        for i, op in enumerate(commits, len(statements) + 1):  # Iceberg: pyiceberg operations, as comments
            commit = CommitOp.validate(op)
            lines += [f"-- [{i}] commit" + (f": {commit.note}" if commit.note else ""), f"--   {commit.line()}", ""]
        if commits:
            lines += [f"-- committed by pyiceberg as {m.extra_info.get('operation')}; the DuckDB statements only "
                      "staged rows", "ROLLBACK;", ""]
        else:
            lines += ["COMMIT;", ""]
    return "\n".join(lines)


def _ddl(m: Any) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """What changed the table's DDL outside the plan's statements, as statements to print: the
    ``--full-refresh`` (None without one) and the changes ``on_schema_change`` made."""
    from lakewrap.compilers import iceberg_sql as isql
    from lakewrap.compilers import lake as sql

    schema, _, name = m.target.partition(".")
    refresh = None
    if m.extra_info.get("full_refresh") in (True, "true"):
        note = "--full-refresh: the table was rebuilt from empty"
        if m.extra_info.get("write_path") == "sql":  # Iceberg through DuckDB: every row deleted first
            refresh = {"role": "refresh", "note": note, "sql": isql.delete_all(m.target)}
        elif "base_snapshot" in m.extra_info:  # pyiceberg: the commit overwrote every row
            refresh = {"role": "refresh", "note": note + " (the commit overwrote every row)"}
        else:
            refresh = {"role": "refresh", "note": note, "sql": sql.drop_table(schema, name)}
    changes = m.extra_info.get("schema_changes") or []
    if isinstance(changes, dict):  # pyiceberg: applied by the commit's update_schema
        from lakewrap.compilers.schema import Changes

        said = Changes(add=changes.get("add", []), widen=changes.get("widen", []), drop=changes.get("drop", []),
                       leave_out=changes.get("leave_out", [])).describe()
        return refresh, [{"role": "schema", "note": "on_schema_change, applied by the commit (pyiceberg "
                          "update_schema): " + "; ".join(said)}]
    return refresh, [{"role": "schema", "note": "on_schema_change", "sql": text} for text in changes]


@click.command("explain")
@click.argument("snapshot_or_run")
@click.option("--format", "fmt", type=click.Choice(["sql", "json"]), default="sql", show_default=True)
@project_option
@handled
def explain_cmd(snapshot_or_run: str, fmt: str, project: Path) -> None:
    """Which model, partition and run produced a snapshot (a number), or what a run materialized:
    pins, parameter values and the exact statements executed, read from the lake's own records."""
    from lakewrap.project import require_project
    from lakewrap.provenance import explain

    items = explain(require_project(project), snapshot_or_run)
    if fmt == "json":
        _write(json.dumps([m.to_dict() for m in items], indent=2, default=str) + "\n")
    else:
        _write(_explain_text(items))


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
    from lakewrap.output import plans_json, plans_sql

    for w in warnings:
        _say("warning:", w, "yellow", stderr=True)
    if fmt == "json":
        _write(plans_json(plans))
        return
    what = f"-- as of {'snapshot' if as_of.strip().lstrip('-').isdigit() else 'run'} {as_of.strip()}: "
    if plans and plans[0].substrate == "iceberg" and plans[0].write_path != "sql":
        head = what + "every upstream is a view at its pinned snapshot (the setup statements)\n"
        for p in plans:
            head += "".join(f"-- pin: {st.note}\n" for st in p.statements if st.role == "setup"
                            and (st.note or "").startswith("pinned upstream"))
    else:
        head = what + "every upstream read is pinned with AT (VERSION => n)" + (
            " (an Iceberg snapshot id per table)\n" if plans and plans[0].substrate == "iceberg" else "\n")
    _write(head + plans_sql(plans))


def register(group: click.Group) -> None:
    for command in (explain_cmd, reproduce_cmd, restore_cmd):
        group.add_command(command)
