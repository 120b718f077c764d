"""The ``lakewrap`` command: a thin layer over the library.

Each command parses its options, calls one library function and prints. One handler
(:func:`lakewrap.cli_io.handled`) maps :class:`~lakewrap.errors.LakewrapError` to a red message and
an exit code (1: a model or run error; 2: bad usage); ``--debug`` shows the traceback instead.
``explain``, ``reproduce`` and ``restore`` live in :mod:`lakewrap.cli_provenance`.
"""

from __future__ import annotations

import atexit
import gc
import json
import sys
from pathlib import Path
from typing import Any

import click

from lakewrap import __version__
from lakewrap.cli_io import F, _say, _show_table, _write, handled, logical_time, project_option


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="lakewrap")
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
def main(debug: bool) -> None:
    """lakewrap: compile annotated SELECTs into the DDL/DML that maintains DuckLake and Iceberg tables."""
    _exit_without_collecting()
    _show_warnings()


def _show_warnings() -> None:
    """lakewrap's own warnings (a model whose columns cannot be known) as `warning:` lines on stderr."""
    import warnings

    shown = warnings.showwarning

    def show(message: Any, category: type[Warning], *args: Any, **kwargs: Any) -> None:
        if category.__module__.startswith("lakewrap."):
            _say("warning:", str(message), "yellow", stderr=True)
        else:
            shown(message, category, *args, **kwargs)

    warnings.showwarning = show


_exit_armed = False


def _exit_without_collecting() -> None:
    """Skip the interpreter's garbage collections at exit (the OS frees the memory anyway).

    After a one-model `lakewrap run` the process tracks some 33,000 objects (pydantic, click,
    duckdb, lakewrap); the collections at shutdown cost 20-30 ms of a 0.5-0.7 s process. Objects
    are still released as their modules are cleared; only garbage in reference cycles is left to the
    OS, and lakewrap closes its connections and files explicitly.
    """
    global _exit_armed
    if not _exit_armed:
        _exit_armed = True
        atexit.register(gc.freeze)


batch_size_option = click.option(
    "--batch-size", type=int, default=None,
    help="Partitions per statement pair in a range of a separable model (default: its batch=, 31; 1: per "
         "partition). docs/running.md, \"Range backfills\".")

@main.command("compile")
@click.argument("selectors", nargs=-1)
@click.option("--exclude", multiple=True, help="Selectors to leave out.")
@click.option("--partition", help="Partition value for partitioned models (e.g. 2024-01-02).")
@click.option("--start", help="First partition of a range (inclusive): one plan per batch or partition.")
@click.option("--end", help="Last partition of a range (inclusive).")
@batch_size_option
@click.option("--format", "fmt", type=click.Choice(["sql", "json"]), default="sql", show_default=True)
@click.option("--no-cache", is_flag=True, help="Ignore and do not write target/cache/.")
@click.option("--now", "now", help="Logical run time, ISO 8601 (default: the current time).")
@click.option("--as-of", "as_of", help="Pin every upstream read to what this run read (or a snapshot id).")
@project_option
@handled
def compile_cmd(
    selectors: tuple[str, ...], exclude: tuple[str, ...], partition: str | None, start: str | None,
    end: str | None, batch_size: int | None, fmt: str, no_cache: bool, now: str | None, as_of: str | None,
    project: Path,
) -> None:
    """Print the exact statements a run would execute, per model, in dependency order.

    Selectors: name, schema.name, +name (with upstreams), name+ (with downstreams), tag:x,
    path:models/x. Without selectors, every model. Partitioned models without --partition compile for
    their latest complete partition.
    """
    from lakewrap.compile import compile_selection
    from lakewrap.project import require_project

    require_project(project)
    if start is not None or end is not None:  # a range: the batches a run would write (lakewrap.batches)
        from lakewrap.batches import compile_range_selection
        from lakewrap.errors import PlanError

        if as_of is not None or partition is not None:
            raise PlanError("--start/--end take neither --partition nor --as-of",
                            hint="compile one partition with --partition, or a range with --start/--end")
        if start is None or end is None:
            raise PlanError("give both --start and --end", hint="e.g. --start 2024-01-01 --end 2024-01-31")
        compiled = compile_range_selection(project, selectors, exclude=exclude, start=start, end=end,
                                           batch_size=batch_size, now=logical_time(now), use_cache=not no_cache)
        _write_compiled(project, compiled, fmt, batches=True)
        return
    if as_of is not None:  # reads the lake (lakewrap.provenance); plain compile never does
        from lakewrap.cli_provenance import emit_as_of
        from lakewrap.provenance import compile_as_of

        emit_as_of(*compile_as_of(project, selectors, as_of=as_of, partition=partition, exclude=exclude,
                                  now=logical_time(now), use_cache=not no_cache), fmt, as_of)
        return
    compiled = compile_selection(
        project, selectors, exclude=exclude, partition=partition, now=logical_time(now), use_cache=not no_cache
    )
    _write_compiled(project, compiled, fmt, batches=False)


def _write_compiled(root: Path, compiled: Any, fmt: str, *, batches: bool) -> None:
    """The plans, each with the commit of the run that writes it (lakewrap.commitplan)."""
    from lakewrap.commitplan import of_compiled
    from lakewrap.output import plans_json, plans_sql

    commits = of_compiled(root, compiled)
    _write(plans_json(compiled.plans, commits) if fmt == "json"
           else plans_sql(compiled.plans, batches=batches, commits=commits))


def _emit_run(report: Any, fmt: str) -> None:
    if fmt == "json":
        _write(json.dumps(report.to_dict(), indent=2, default=str) + "\n")
    else:
        columns = ("model", "partition", "status", "inserted", "updated", "deleted", "snapshot", "seconds")
        rows = [(r.target, r.partition or "-", r.status, str(r.rows_inserted), str(r.rows_updated),
                 str(r.rows_deleted), str(r.snapshot_id) if r.snapshot_id is not None else "-", f"{r.seconds:.2f}")
                for r in report.results]
        styles = [{"success": "green", "unchanged": "cyan", "failed": "red", "skipped": "yellow",
                   "cancelled": "magenta"}[r.status]
                  for r in report.results]
        _show_table(columns, rows, title=f"run {report.run_id}", right=("inserted", "updated", "deleted", "seconds"),
                    styles=styles)
        for r in report.results:
            for w in r.warnings:
                _say("warning:", f"{r.target} {r.partition or ''}: {w}", "yellow")
            if r.error:
                _say_error(r, stderr=True)
        from lakewrap.progress import not_rerun

        for line in not_rerun(report):
            _say("not run:", line, "yellow")
        for w in getattr(report, "warnings", ()):  # of the run as a whole: a [hooks] script that failed
            _say("warning:", w, "yellow")
        _say_resume(report)
    if not report.ok:
        sys.exit(1)


def resume_command(run_id: str) -> str:
    """The exact ``lakewrap resume RUN_ID`` for this invocation (``--project`` when it was given,
    ``--env`` when the run had one)."""
    import shlex

    ctx = click.get_current_context()
    command = ["lakewrap", "resume", run_id]
    if ctx.get_parameter_source("project") not in (None, click.core.ParameterSource.DEFAULT):
        command += ["--project", str(ctx.params["project"])]
    from lakewrap.config_env import chosen

    if (env := chosen()) is not None:  # the run's environment (--env or LAKEWRAP_ENV)
        command += ["--env", env]
    return shlex.join(command)


def _say_resume(report: Any) -> None:
    """A cancelled run the run log records: the command that finishes it (``--project`` as given).

    A failed run is resumable too, but its errors come first: they are what to fix before resuming.
    """
    if report.resumable and report.status == "cancelled":
        _say("resume:", f"run {report.status}; finish it with: {resume_command(report.run_id)}", "magenta")


def _say_error(r: Any, *, stderr: bool = False) -> None:
    """A failed result's error: ``error: models/x.sql:7:6: ...`` (its line, caret and hint follow) when
    it is located in the model file, else ``error: <target>: ...``; ``--debug`` adds the failed
    statement, DuckDB's own message and the traceback."""
    located = bool((getattr(r, "error_location", None) or {}).get("line"))
    _say("error:", r.error if located else f"{r.target}: {r.error}", "bold red", stderr=stderr)
    _say_debug(r, stderr=stderr)


def _say_debug(r: Any, *, stderr: bool = False) -> None:
    """With ``--debug``: the failed statement, DuckDB's own message and the traceback of ``r``'s error."""
    debug = getattr(r, "error_debug", None)
    if debug and click.get_current_context().find_root().params.get("debug"):
        _write(debug + "\n", stderr=stderr)


def parallel_options(fn: F) -> F:
    """--workers, --executor, --scheduler: where the steps of run / backfill / resume execute."""
    fn = click.option("--scheduler", "scheduler", help="Dask scheduler address (with --executor dask; "
                      "default: a LocalCluster).")(fn)
    fn = click.option("--executor", type=click.Choice(["auto", "thread", "process", "dask"]), default="auto",
                      show_default=True, help="Where steps run (auto: threads; processes on a SQLite catalog).")(fn)
    fn = click.option("--workers", type=click.IntRange(min=1),
                      help="Steps in parallel (default: one per core for --executor process and dask, "
                      "1 for threads).")(fn)
    return fn


def group_options(fn: Any) -> Any:
    """``--no-group`` and ``--atomic`` (docs/running.md, "Group commit and --atomic")."""
    fn = click.option("--atomic", is_flag=True,
                      help="Publish every selected model and partition in one commit, or nothing.")(fn)
    fn = click.option("--no-group", "no_group", is_flag=True,
                      help="One transaction per (model, partition): no group commit ([run] group_commit).")(fn)
    return fn


reappend_option = click.option(
    "--reappend", is_flag=True,
    help="Append again the partitions of append models that are already recorded (duplicates their rows).")


@main.command("run")
@click.argument("selectors", nargs=-1)
@click.option("--exclude", multiple=True, help="Selectors to leave out.")
@click.option("--partition", help="Partition value (default: the latest complete partition).")
@click.option("--start", help="First partition of a range (inclusive).")
@click.option("--end", help="Last partition of a range (inclusive).")
@click.option("--full-refresh", is_flag=True, help="Drop and rebuild the selected targets.")
@click.option("--strict", is_flag=True, help="Refuse an empty result for a partition that has data.")
@click.option("--fail-fast", is_flag=True, help="Start nothing new after the first failure.")
@click.option("--stale", is_flag=True, help="Only the partitions whose upstream data changed since they were "
              "built (DuckLake change feeds; docs/maintenance.md).")
@reappend_option
@batch_size_option
@click.option("--now", "now", help="Logical run time, ISO 8601 (default: the current time).")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@parallel_options
@group_options
@project_option
@handled
def run_cmd(selectors: tuple[str, ...], exclude: tuple[str, ...], partition: str | None, start: str | None,
            end: str | None, full_refresh: bool, strict: bool, fail_fast: bool, stale: bool, reappend: bool,
            batch_size: int | None, now: str | None, fmt: str, workers: int | None, executor: str,
            scheduler: str | None, no_group: bool, atomic: bool, project: Path) -> None:
    """Materialize the selected models in dependency order, one transaction per partition (several
    at once on a DuckLake: group commit and range batches; --atomic: the whole run)."""
    from lakewrap.runner import run_project

    report = run_project(project, selectors, exclude=exclude, partition=partition, start=start, end=end,
                         full_refresh=full_refresh, strict=strict, now=logical_time(now), workers=workers,
                         executor=executor, scheduler=scheduler, fail_fast=fail_fast, stale=stale,
                         reappend=reappend, batch_size=batch_size, group=False if no_group else None,
                         atomic=atomic)
    _emit_run(report, fmt)


@main.command("test")
@click.argument("selectors", nargs=-1)
@click.option("--exclude", multiple=True, help="Selectors to leave out.")
@click.option("--partition", help="Test this partition of partitioned models (default: the whole table).")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("--unit-only", is_flag=True, help="Only the unit tests (tests/unit/*.toml); no lake is opened.")
@click.option("--data-only", is_flag=True, help="Only the `-- test` lines on published data.")
@project_option
@handled
def test_cmd(selectors: tuple[str, ...], exclude: tuple[str, ...], partition: str | None, fmt: str,
             unit_only: bool, data_only: bool, project: Path) -> None:
    """Run the unit tests (tests/unit/*.toml), then the models' `-- test` lines on the published data.

    Exit code 1 when a unit test fails or an error-severity test finds failing rows or cannot run;
    warn tests only report.
    """
    from lakewrap.cli_unit import emit_unit
    from lakewrap.datatests import run_tests
    from lakewrap.unittests import run_unit_tests, unit_files

    if unit_only and data_only:
        raise click.UsageError("--unit-only and --data-only exclude each other")
    unit = None if data_only or not (unit_only or unit_files(project)) else run_unit_tests(
        project, selectors, exclude)
    if unit is not None and (unit_only or fmt != "json"):
        emit_unit(unit, fmt)
    if unit_only:
        sys.exit(1 if unit is not None and not unit.ok else 0)
    report = run_tests(project, selectors, exclude=exclude, partition=partition)
    if fmt == "json":
        doc = report.to_dict()
        if unit is not None:
            doc["ok"] = doc["ok"] and unit.ok
            doc["unit"] = [r.to_dict() for r in unit.results]
        _write(json.dumps(doc, indent=2, default=str) + "\n")
    else:
        _emit_tests(report)
    if not report.ok or (unit is not None and not unit.ok):
        sys.exit(1)


def _emit_tests(report: Any) -> None:
    """The table ``lakewrap test`` prints, then each failure with its first failing row."""
    if not report.results:
        _write("no selected model has tests\n")
        return
    styles = {"pass": "green", "warn": "yellow", "fail": "red", "error": "red"}
    rows: list[tuple[str, ...]] = []
    row_styles: list[str | None] = []
    for r in report.results:
        if r.error:
            rows.append((r.target, r.partition or "-", "-", "-", "error", "-"))
            row_styles.append("red")
        for t in r.tests:
            rows.append((r.target, r.partition or "-", t.name, t.severity, t.status, str(t.failures)))
            row_styles.append(styles[t.status])
    _show_table(("model", "partition", "test", "severity", "status", "failing rows"), rows,
                right=("failing rows",), styles=row_styles)
    for r in report.results:
        if r.error:
            _say_error(r)
        for t in r.tests:
            if t.status == "error":
                _say("error:", f"{t.path}:{t.line}: test `{t.name}`: {t.error or ''}", "bold red")
            elif t.status in ("fail", "warn"):
                _say(f"{t.status}:", t.summary(), styles[t.status])


@main.command("backfill")
@click.argument("selectors", nargs=-1)
@click.option("--start", required=True, help="First partition (inclusive).")
@click.option("--end", required=True, help="Last partition (inclusive).")
@click.option("--exclude", multiple=True, help="Selectors to leave out.")
@click.option("--missing-only", is_flag=True, help="Skip partitions already materialized with the same SQL "
              "whose inputs did not change since.")
@reappend_option
@batch_size_option
@click.option("--fail-fast", is_flag=True, help="Start nothing new after the first failure.")
@click.option("--strict", is_flag=True, help="Refuse an empty result for a partition that has data.")
@click.option("--now", "now", help="Logical run time, ISO 8601 (default: the current time).")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@parallel_options
@group_options
@project_option
@handled
def backfill_cmd(selectors: tuple[str, ...], start: str, end: str, exclude: tuple[str, ...], missing_only: bool,
                 reappend: bool, batch_size: int | None, fail_fast: bool, strict: bool, now: str | None, fmt: str,
                 workers: int | None, executor: str, scheduler: str | None, no_group: bool, atomic: bool,
                 project: Path) -> None:
    """Materialize every partition from --start to --end, in dependency order per partition."""
    from lakewrap.progress import for_terminal, summary
    from lakewrap.runner import run_project

    report = run_project(project, selectors, exclude=exclude, start=start, end=end, strict=strict,
                         now=logical_time(now), workers=workers, executor=executor, scheduler=scheduler,
                         fail_fast=fail_fast, missing_only=missing_only, command="backfill",
                         progress=for_terminal(fmt), reappend=reappend, batch_size=batch_size,
                         group=False if no_group else None, atomic=atomic)
    _emit_summary(report, fmt, summary(report))


@main.command("resume")
@click.argument("run_id")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@parallel_options
@project_option
@handled
def resume_cmd(run_id: str, fmt: str, workers: int | None, executor: str, scheduler: str | None,
               project: Path) -> None:
    """Re-run a failed, cancelled or killed run, skipping what it committed (read from the lake)."""
    from lakewrap.progress import for_terminal, summary
    from lakewrap.scheduler import resume

    report = resume(project, run_id, workers=workers, executor=executor, scheduler=scheduler,
                    progress=for_terminal(fmt))
    _emit_summary(report, fmt, summary(report))


def _emit_summary(report: Any, fmt: str, line: str) -> None:
    if fmt == "json":
        _emit_run(report, fmt)
        return
    for r in report.results:
        if r.status == "failed" and r.error:
            _say("failed:", f"{r.target} {r.partition or ''}: {r.error.splitlines()[0]}", "red")
            _say_debug(r)
    for w in getattr(report, "warnings", ()):  # a [hooks] script that failed
        _say("warning:", w, "yellow")
    _write(line + "\n")
    _say_resume(report)
    if not report.ok:
        sys.exit(1)


@main.command("seed")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@project_option
@handled
def seed_cmd(fmt: str, project: Path) -> None:
    """Load seeds/**/*.csv into tables (seeds/raw/orders.csv -> raw.orders), one transaction each."""
    from lakewrap.runner import seed_project

    _emit_run(seed_project(project), fmt)


@main.command("query")
@click.argument("statement")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
@click.option("--as-of", "as_of", help="Iceberg: read the lake as of a run id or snapshot id.")
@project_option
@handled
def query_cmd(statement: str, fmt: str, as_of: str | None, project: Path) -> None:
    """Run one read-only SELECT against the lake."""
    from lakewrap.inspect import query

    result = query(project, statement, as_of=as_of)
    if fmt == "json":
        rows = [dict(zip(result.columns, row, strict=True)) for row in result.rows]
        _write(json.dumps(rows, indent=2, default=str) + "\n")
    elif fmt == "csv":
        import csv
        import io

        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(result.columns)
        writer.writerows(result.rows)
        _write(buffer.getvalue())
    else:
        _show_table(result.columns, [["NULL" if v is None else str(v) for v in row] for row in result.rows])


@main.command("status")
@click.argument("selectors", nargs=-1)
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@project_option
@handled
def status_cmd(selectors: tuple[str, ...], fmt: str, project: Path) -> None:
    """Per model: materialized partitions, gaps, last run, failures since the last success."""
    from lakewrap.inspect import status

    rows = status(project, selectors)
    if fmt == "json":
        _write(json.dumps([r.to_dict() for r in rows], indent=2, default=str) + "\n")
        return
    table = []
    for r in rows:
        parts = f"{len(r.partitions)} ({r.partitions[0]} .. {r.partitions[-1]})" if len(r.partitions) > 1 else (
            r.partitions[0] if r.partitions else ("-" if r.last_run is None else "whole table"))
        gaps = f"{len(r.gaps)}: " + ", ".join(r.gaps[:3]) + (" ..." if len(r.gaps) > 3 else "") if r.gaps else "-"
        stale = f"{len(r.stale)}: " + ", ".join(r.stale[:3]) + (" ..." if len(r.stale) > 3 else "") if r.stale else "-"
        table.append((r.target, r.strategy, parts, gaps, stale, r.last_run or "never", str(len(r.failures)) or "-",
                      r.freshness or "-"))
    _show_table(("model", "strategy", "partitions", "gaps", "stale", "last run", "failures", "freshness"), table)


@main.command("history")
@click.argument("model")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@project_option
@handled
def history_cmd(model: str, fmt: str, project: Path) -> None:
    """The materializations of MODEL with snapshot ids, row counts and SQL hashes."""
    from lakewrap.inspect import history

    rows = history(project, model)
    if fmt == "json":
        _write(json.dumps(rows, indent=2, default=str) + "\n")
        return
    columns = ("snapshot", "run", "partition", "strategy", "+rows", "~rows", "-rows", "sql_sha256", "committed")
    _show_table(columns, [(str(r["snapshot_id"]), r["run_id"], r["partition"] or "-", r["strategy"],
                           str(r["rows_inserted"]), str(r["rows_updated"]), str(r["rows_deleted"]),
                           r["sql_sha256"][:12], str(r["committed_at"])) for r in rows],
                right=("+rows", "~rows", "-rows"))


@main.command("maintain")
@click.argument("selectors", nargs=-1)
@click.option("--dry-run", is_flag=True, help="Show what would be compacted, expired and deleted; change nothing.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@project_option
@handled
def maintain_cmd(selectors: tuple[str, ...], dry_run: bool, fmt: str, project: Path) -> None:
    """Compact the selected models' tables, expire unprotected snapshots, delete old and orphan files."""
    from lakewrap.maintain import maintain

    report = maintain(project, selectors, dry_run=dry_run)
    if fmt == "json":
        _write(json.dumps(report.to_dict(), indent=2, default=str) + "\n")
        return
    would = "would " if dry_run else ""

    def after(before: int, now: int | None) -> str:
        return f"{before} -> {now}" if now is not None else str(before)

    _show_table(("table", "data files", "delete files", "rewritten", "merged"),
                [(t.table, after(t.data_files_before, t.data_files_after),
                  after(t.delete_files_before, t.delete_files_after), str(t.rewritten), str(t.merged))
                 for t in report.tables], title="compaction" + (" (dry run: current files)" if dry_run else ""))
    _say("snapshots:", f"{report.snapshots_before} before, {would}expire {len(report.snapshots_expired)}, "
         f"{report.snapshots_protected} protected by run records, {report.snapshots_after} after", "cyan")
    _say("files:", f"{would}remove {len(report.old_files_removed)} old and {len(report.orphans_removed)} orphan "
         f"files; {report.storage_files_before} on storage before, {report.storage_files_after} after", "cyan")
    for note in report.notes:
        _say("note:", note, "yellow")


@main.command("shell")
@click.option("--print", "--print-attach", "print_only", is_flag=True,
              help="Print the statements that attach the lake in another DuckDB client, and exit.")
@click.option("--read-only", "read_only", is_flag=True, help="Open the lake read-only (nothing can change).")
@click.option("--python", "python", is_flag=True,
              help="A Python console with `con` even when DuckDB's CLI is installed.")
@project_option
@handled
def shell_cmd(print_only: bool, read_only: bool, python: bool, project: Path) -> None:
    """DuckDB's CLI on the lake, read-write and sandboxed (else a Python console with `con`).

    The CLI is $LAKEWRAP_DUCKDB_CLI, else `duckdb` beside lakewrap or on PATH; --print prints the ATTACH.
    """
    from lakewrap import shell

    if print_only:
        sys.stdout.write("\n".join(shell.attach_statements(project, read_only=read_only)) + "\n")
        return
    cli = None if python else shell.find_cli()
    if cli is None:
        shell.interact(project, stdin_is_tty=sys.stdin.isatty(), read_only=read_only)
    else:
        sys.exit(shell.run_cli(project, cli, read_only=read_only))


from lakewrap.cli_provenance import register  # noqa: E402  (registered on the group defined above)
from lakewrap.cli_unit import register as register_unit  # noqa: E402

register(main)
register_unit(main)

from lakewrap.cli_envs import register as register_envs  # noqa: E402

register_envs(main, _emit_run)

from lakewrap.cli_look import register as register_look  # noqa: E402  (ls, graph, show)

register_look(main)

from lakewrap.cli_workflow import register as register_workflow  # noqa: E402  (init, clean, debug)

register_workflow(main)

from lakewrap.cli_docs import register as register_docs  # noqa: E402  (lineage, docs generate|serve)

register_docs(main)

from lakewrap.cli_freshness import register as register_freshness  # noqa: E402  (freshness)

register_freshness(main)

from lakewrap.cli_queue import register as register_queue  # noqa: E402  (enqueue, worker, jobs)

register_queue(main)

from lakewrap.cli_schedule import register as register_schedule  # noqa: E402  (scheduler)

register_schedule(main)

from lakewrap.cli_serve import register as register_serve  # noqa: E402  (serve: the HTTP API and /ui)

register_serve(main)

if __name__ == "__main__":  # pragma: no cover
    main()
