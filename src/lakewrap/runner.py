"""``lakewrap run`` and ``lakewrap seed``: materialize selected models, in dependency order.

The same code for every substrate: each (model, partition) is one commit through the substrate's
materializer (:meth:`~lakewrap.substrates.protocol.Substrate.materializer`), planned by its
``plan_step`` (:mod:`lakewrap.steps`); runs go through :mod:`lakewrap.scheduler`. A model whose
upstream model failed in this run is skipped. Results are written to ``target/run_results.json``
and ``target/run/<run_id>/results.json`` (failures survive the process; only committed
materializations are recorded in the lake, in the same commit as their data).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import Any

from lakewrap.config import load_config
from lakewrap.execute.executor import Result
from lakewrap.runlog import RunLog
from lakewrap.seedfiles import Seed, seeds
from lakewrap.signals import cancellable, settle
from lakewrap.steps import (
    RunReport,
    materialize_spec,
    new_run_id,
    partitions_for,
    plan_model,
    plan_partitions,
    probe_columns,
    refuse_empty,
    write_results,
)
from lakewrap.substrates.registry import resolve

# the names callers have imported from here since before lakewrap.steps
__all__ = ["RunReport", "materialize_spec", "new_run_id", "partitions_for", "plan_model", "plan_partitions",
           "probe_columns", "refuse_empty", "run_project", "seed_project", "seed_step", "serial_steps", "write_results"]


def run_project(
    root: Path,
    selectors: Sequence[str] = (),
    *,
    exclude: Sequence[str] = (),
    partition: str | None = None,
    start: str | None = None,
    end: str | None = None,
    full_refresh: bool = False,
    strict: bool = False,
    now: datetime | None = None,
    run_id: str | None = None,
    workers: int | None = None,
    executor: Any = "auto",
    scheduler: str | None = None,
    fail_fast: bool = False,
    missing_only: bool = False,
    command: str = "run",
    progress: Any = None,
    stale: bool = False,
    reappend: bool = False,
    group: bool | None = None,
    atomic: bool = False,
    batch_size: int | None = None,
) -> RunReport:
    """Materialize the selected models of the project at ``root`` (see :mod:`lakewrap.scheduler`).

    Independent models run in parallel on ``workers`` (default: one per core for the ``process`` and
    ``dask`` executors, one for threads: :func:`lakewrap.runsteps.default_workers`); ``executor`` is
    ``auto``, ``thread``, ``process``, ``dask`` or a callable ``fn(task) -> Result``. An ``append``
    partition already recorded is not run again unless ``reappend`` (:mod:`lakewrap.skips`). A range
    of a separable model is written ``batch_size`` partitions at a time (default: the model's
    ``batch=``; :mod:`lakewrap.batches`). ``group``: group commit (None: ``[run] group_commit``;
    :mod:`lakewrap.grouping`); ``atomic``: every step in one commit, or none.

    Example:
        >>> report = run_project(Path("examples/shop"), ["orders+"], partition="2024-01-02")  # doctest: +SKIP
        >>> [r.status for r in report.results]  # doctest: +SKIP
    """
    root = root.resolve()
    from lakewrap import scheduler as sched
    from lakewrap.batches import check_batch_size
    from lakewrap.runsteps import RunOptions

    check_batch_size(batch_size)
    opts = RunOptions(selectors=tuple(selectors), exclude=tuple(exclude), partition=partition, start=start,
                            end=end, full_refresh=full_refresh, strict=strict, now=now, workers=workers,
                            executor=executor, scheduler=scheduler, fail_fast=fail_fast,
                            missing_only=missing_only, command=command, stale=stale, reappend=reappend,
                            group=group, atomic=atomic, batch_size=batch_size)
    return sched.run(root, opts, run_id=run_id, progress=progress)


def seed_project(root: Path, *, run_id: str | None = None) -> RunReport:
    """Load ``seeds/**/*.csv`` into tables, replacing their content, one transaction per table.

    ``seeds/raw/orders.csv`` → ``raw.orders``; ``seeds/x.csv`` → ``raw.x``; a sidecar
    ``seeds/raw/orders.toml`` sets the dialect and column types (:mod:`lakewrap.seedformat`). A
    file whose bytes and statements are what the table's last seed commit recorded, the table
    unchanged since, is not loaded again: its result is ``unchanged`` and nothing is committed
    (:func:`seed_step`). The run is recorded in the run log (command ``seed``, one step per table)
    and ``run_results.json`` with its final status; SIGINT/SIGTERM interrupt the table being
    loaded and cancel the rest (see :func:`serial_steps`).
    """
    root = root.resolve()
    found = seeds(root)  # every file and sidecar checked before the first is loaded
    now = datetime.now(timezone.utc)
    run_id = run_id or new_run_id(now)
    config = load_config(root)
    substrate = resolve(config.lake)
    lake = substrate.open(root, config=config)
    report = RunReport(run_id=run_id, started_at=now.isoformat())
    folder = root / "target" / "run" / run_id
    seeder = substrate.seeder(lake, run_id, folder)
    con = seeder.connect()
    log_con = con if lake.one_connection else con.cursor()  # a signal interrupts `con` only
    log: RunLog | None = None
    try:
        log = RunLog.open(substrate.runlog(lake, log_con), lake.redact, run_id, "seed", args={"command": "seed"},
                          executor="serial", workers=1, steps=len(found),
                          on_flush=lambda: write_results(root, folder, report))
        steps = []
        for seed in found:
            compiled = seeder.plan(seed)
            steps.append((Result(model=seed.rel, target=compiled.target, partition=None, strategy="seed",
                                 status="cancelled", error="the run was cancelled"),
                          partial(seed_step, seeder, con, seed, compiled)))
        serial_steps(report, con, steps, lambda r: substrate.resolve_outcome(lake, log_con, run_id, r), log.step)
    finally:
        report.finished_at = datetime.now(timezone.utc).isoformat()
        if report.status == "running":  # refused before any step ran
            report.status = "failed"
        if log is not None:
            log.finish(report.status, report.results, resumable=False)  # `lakewrap seed` again, not resume
            report.run_log_errors = log.errors
            log.close()
        if log_con is not con:
            log_con.close()
        lake.close(con)
        write_results(root, folder, report)
    return report


def seed_step(seeder: Any, con: Any, seed: Seed, compiled: Any) -> Result:
    """One seed: ``unchanged`` (nothing committed) when the lake's record of the commit that left the
    table as it is holds this plan's ``sql_sha256`` and this file's ``sha256``; else the load, with
    the file's hash recorded in its commit (``seed_sha256``)."""
    warning = None
    try:
        held = seeder.loaded(con, compiled.target)
    except Exception as exc:  # the lake's records unreadable: load (a load is always right)
        held, text = None, str(exc).strip()
        warning = f"could not read the table's last seed commit ({text.splitlines()[0] if text else exc}); loaded"
    if held == (compiled.sql_sha256, seed.sha256):
        return Result(model=seed.rel, target=compiled.target, partition=None, strategy="seed", status="unchanged",
                      sql_sha256=compiled.sql_sha256)
    result: Result = seeder.materialize(con, compiled, provenance={"seed_sha256": seed.sha256})
    if warning is not None:
        result.warnings.append(warning)
    return result


def serial_steps(report: RunReport, con: Any, steps: Iterable[tuple[Result, Callable[[], Result]]],
                 resolve: Callable[[Result], Result], record: Callable[[Result], None] = lambda r: None) -> None:
    """Run steps one at a time in this process (``seed``) and set ``report.status``.

    Each step is (its ``cancelled`` result, the callable that runs it). SIGINT/SIGTERM interrupt the
    statement running on ``con`` and cancel the steps not started; a step that ran and did not
    report success is ``resolve``d from the lake before it is ``record``ed. ``report.status`` is
    ``running`` only while this runs: on any exception it is ``failed``.
    """
    report.status = "failed"
    with cancellable(con) as cancelled:
        for not_run, run in steps:
            result = not_run if cancelled.is_set() else settle(resolve(run()), cancelled)
            report.results.append(result)
            record(result)
        report.status = ("success" if report.ok else "cancelled" if cancelled.is_set() else "failed")
