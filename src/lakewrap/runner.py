"""``lakewrap run`` and ``lakewrap seed``: materialize selected models, in dependency order.

Each (model, partition) is one transaction through :class:`~lakewrap.execute.executor.Executor`.
A model whose upstream model failed in this run is skipped. Results are written to
``target/run_results.json`` and ``target/run/<run_id>/results.json`` (failures survive the process;
only committed materializations are recorded in the lake, in the same transaction as their data).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import Any

from lakewrap import __version__
from lakewrap.compile import _Cache, compile_plan
from lakewrap.compilers.artifacts import CompiledPlan, CompiledStatement
from lakewrap.errors import PlanError, SelectionError
from lakewrap.execute import statements as sql
from lakewrap.execute.executor import Result
from lakewrap.execute.lake import Lake
from lakewrap.execute.locate import located, remember
from lakewrap.outcome import resolve as resolve_outcome
from lakewrap.partitions import Grain, parse_partition, partition_range
from lakewrap.plan import Param, Plan, make_plan
from lakewrap.runlog import RunLog
from lakewrap.seedfiles import seed_files
from lakewrap.signals import cancellable, settle
from lakewrap.spec import DynamicPartitioning, ModelSpec, TimePartitioning
from lakewrap.substrates.ducklake.materialize import Executor
from lakewrap.targetdir import write_atomic


def _substrate(root: Path) -> str:
    """The project's substrate (``[lake] substrate`` in lakewrap.toml)."""
    from lakewrap.config import load_config

    return load_config(root).lake.substrate


def new_run_id(now: datetime | None = None) -> str:
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{os.urandom(3).hex()}"  # what secrets.token_hex does, without importing hmac (~5 ms)


@dataclass
class RunReport:
    """All results of one run."""

    run_id: str
    started_at: str
    results: list[Result] = field(default_factory=list)
    finished_at: str | None = None
    status: str = "running"  # running | success | failed | cancelled (run, backfill, resume)
    not_rerun: list[dict[str, Any]] = field(default_factory=list)  # steps the lake already held
    run_log_errors: list[str] = field(default_factory=list)
    earlier: int = 0  # a resumed run: its steps committed before the resume (counted as succeeded)
    resumable: bool = False  # the run log records the run, and `lakewrap resume RUN_ID` can finish it

    @property
    def ok(self) -> bool:
        return all(r.status in ("success", "unchanged") for r in self.results)

    def counts(self) -> dict[str, int]:
        out = {"success": self.earlier, "unchanged": 0, "failed": 0, "skipped": 0, "cancelled": 0}
        for r in self.results:
            out[r.status] = out.get(r.status, 0) + 1
        return out

    def final_status(self) -> str:
        """``status``; a finished report left ``running`` (one materialization) is its outcome."""
        if self.status == "running" and self.finished_at is not None:
            return "success" if self.ok else "failed"
        return self.status

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "lakewrap_version": __version__, "started_at": self.started_at,
                "finished_at": self.finished_at, "ok": self.ok, "status": self.final_status(),
                "counts": self.counts(),
                "steps": len(self.results) + self.earlier, "resumable": self.resumable,
                "not_rerun": self.not_rerun, "run_log_errors": self.run_log_errors,
                "results": [r.to_dict() for r in self.results]}


def refuse_empty(selected: Sequence[ModelSpec], selectors: Sequence[str], exclude: Sequence[str]) -> None:
    """An empty selection is a usage error (exit 2), never a run of nothing that reports success."""
    if selected:
        return
    given = " ".join([*selectors, *(f"--exclude {e}" for e in exclude)])
    raise SelectionError(f"nothing selected: {given} leaves no model" if given else
                         "nothing selected: the project has no models",
                         hint="list the models with `lakewrap compile`; select them by name, tag:x or path:models/x"
                         if given else "put models in models/<schema>/<name>.sql")


def partitions_for(spec: ModelSpec, partition: str | None, start: str | None, end: str | None) -> list[str | None]:
    """The partition values a run materializes for ``spec`` (each one checked)."""
    part = spec.partition
    if not isinstance(part, TimePartitioning):
        return [None]
    if start is not None or end is not None:
        if start is None or end is None:
            raise PlanError("give both --start and --end", hint="e.g. --start 2024-01-01 --end 2024-01-31")
        try:
            first = parse_partition(Grain(part.grain), start, part.tz)
            last = parse_partition(Grain(part.grain), end, part.tz)
            return [p.value for p in partition_range(first, last)]
        except PlanError as exc:
            raise PlanError(f"{spec.path}: {exc.message}", hint=exc.hint) from None
    if partition is not None:
        try:
            parse_partition(Grain(part.grain), partition, part.tz)
        except PlanError as exc:
            raise PlanError(f"{spec.path}: {exc.message}", hint=exc.hint) from None
    return [partition]


def plan_partitions(specs: Sequence[ModelSpec], partition: str | None, start: str | None,
                    end: str | None) -> list[list[str | None]]:
    """Each selected model's partition values, all checked before anything runs.

    A bad value, a reversed range, or a partition for a selection without any time-partitioned
    model is a usage error, raised before the first materialization commits.
    """
    if partition is not None and (start is not None or end is not None):
        raise PlanError("give either --partition or --start/--end, not both")
    if (start is None) != (end is None):
        raise PlanError("give both --start and --end", hint="e.g. --start 2024-01-01 --end 2024-01-31")
    given = "--partition" if partition is not None else "--start/--end" if start is not None else None
    if given and specs and not any(isinstance(s.partition, TimePartitioning) for s in specs):
        if len(specs) == 1:
            spec = specs[0]
            kind = "has a dynamic (watermark) partition" if spec.partition is not None else "is not partitioned"
            raise PlanError(f"{spec.path}: model `{spec.target}` {kind}; it takes no {given}",
                            hint=f"drop {given}")
        raise PlanError(f"none of the {len(specs)} selected models is time-partitioned; {given} does not apply",
                        hint=f"drop {given}, or select a partitioned model")
    return [partitions_for(spec, partition, start, end) for spec in specs]


def watermark_of(con: Any, target: str) -> datetime | None:
    row = con.execute(sql.last_watermark(), {"target": target}).fetchone()
    return row[0] if row and row[0] is not None else None


def probe_columns(con: Any, plan: Plan) -> tuple[str, ...]:
    """The output columns of a ``SELECT *`` model, read from the lake (no rows are fetched)."""
    from lakewrap.compilers import compiler_for

    probe = compiler_for(plan.substrate).probe(plan)
    params = {k: v.python() for k, v in probe.params.items()}
    try:
        cursor = con.execute(probe.sql, params) if params else con.execute(probe.sql)
    except Exception as exc:
        remember(exc, probe.sql, "probe")  # located on the model file by its token (execute/locate.py)
        raise
    return tuple(d[0] for d in cursor.description)


def plan_model(con: Any, spec: ModelSpec, value: str | None, now: datetime) -> Plan:
    watermark = watermark_of(con, str(spec.target)) if isinstance(spec.partition, DynamicPartitioning) else None
    try:
        plan = make_plan(spec, partition=value, now=now, watermark=watermark)
    except PlanError as exc:
        raise PlanError(f"{spec.path}: {exc.message}", hint=exc.hint) from None
    if plan.columns is None and spec.strategy.kind in ("merge", "snapshot"):
        plan = plan.replace(columns=probe_columns(con, plan))
    return plan


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
) -> RunReport:
    """Materialize the selected models of the project at ``root`` (see :mod:`lakewrap.scheduler`).

    Independent models run in parallel on ``workers`` (default: one per core for the ``process`` and
    ``dask`` executors, one for threads: :func:`lakewrap.scheduler.default_workers`); ``executor`` is
    ``auto``, ``thread``, ``process``, ``dask`` or a callable ``fn(task) -> Result``. An ``append``
    partition already recorded is not run again unless ``reappend`` (:mod:`lakewrap.skips`).

    Example:
        >>> report = run_project(Path("examples/shop"), ["orders+"], partition="2024-01-02")  # doctest: +SKIP
        >>> [r.status for r in report.results]  # doctest: +SKIP
    """
    root = root.resolve()
    if _substrate(root) == "iceberg":
        from lakewrap.iceberg_run import run_iceberg_project

        unsupported = [name for name, given in (("--workers", workers is not None),
                                                ("--executor", executor != "auto"),
                                                ("--scheduler", scheduler is not None),
                                                ("--fail-fast", fail_fast), ("--missing-only", missing_only))
                       if given]
        if unsupported:  # the Iceberg runner is serial and knows none of these yet: refuse, never ignore
            raise PlanError(f"{', '.join(unsupported)}: not supported on Iceberg yet",
                            hint="drop the option; on Iceberg, models run one at a time in dependency order")
        return run_iceberg_project(root, selectors, exclude=exclude, partition=partition, start=start, end=end,
                                   full_refresh=full_refresh, strict=strict, now=now, run_id=run_id, stale=stale,
                                   reappend=reappend)
    from lakewrap import scheduler as sched

    opts = sched.RunOptions(selectors=tuple(selectors), exclude=tuple(exclude), partition=partition, start=start,
                            end=end, full_refresh=full_refresh, strict=strict, now=now, workers=workers,
                            executor=executor, scheduler=scheduler, fail_fast=fail_fast,
                            missing_only=missing_only, command=command, stale=stale, reappend=reappend)
    return sched.run(root, opts, run_id=run_id, progress=progress)


def materialize_spec(con: Any, executor: Executor, spec: ModelSpec, value: str | None, now: datetime,
                     cache: _Cache | None, *, drop_first: bool = False) -> Result:
    try:
        plan = plan_model(con, spec, value, now)
        if spec.tests:
            from lakewrap.testfiles import read_test_files

            plan = read_test_files(plan, executor.lake.root)
        compiled = compile_plan(plan, cache)
    except Exception as exc:  # a LakewrapError, or the column probe's DuckDB error (it ran the model's SELECT)
        failed = Result(model=spec.path, target=str(spec.target), partition=value, strategy=spec.strategy.kind,
                        status="failed", error_class=type(exc).__name__)
        failed.fail(located(exc, spec.path, executor.lake.root), executor.lake.redact)
        return failed
    # table and view plans replace the whole target anyway; literal models write what they write.
    rebuilds = spec.strategy.kind in ("delete+insert", "merge", "append", "snapshot")
    return executor.materialize(con, compiled, drop_first=drop_first and rebuilds)


def write_results(root: Path, folder: Path, report: RunReport) -> None:
    from lakewrap.redact import redact

    text = redact(json.dumps(report.to_dict(), indent=2, default=str), roots=(root,))
    for path in (folder / "results.json", root / "target" / "run_results.json"):
        write_atomic(path, text)  # threads of one process (``materialize`` on a shared lake) write too


def seed_project(root: Path, *, run_id: str | None = None) -> RunReport:
    """Load ``seeds/**/*.csv`` into tables, replacing their content, one transaction per table.

    ``seeds/raw/orders.csv`` → ``raw.orders``; ``seeds/x.csv`` → ``raw.x``. The run is recorded in
    the run log (command ``seed``, one step per table) and ``run_results.json`` with its final status;
    SIGINT/SIGTERM interrupt the table being loaded and cancel the rest (see :func:`serial_steps`).
    """
    root = root.resolve()
    if _substrate(root) == "iceberg":
        from lakewrap.iceberg_run import seed_iceberg_project

        return seed_iceberg_project(root, run_id=run_id)
    seeds = root / "seeds"
    files = seed_files(root)  # every file checked before the first is loaded
    now = datetime.now(timezone.utc)
    run_id = run_id or new_run_id(now)
    lake = Lake.open(root)
    report = RunReport(run_id=run_id, started_at=now.isoformat())
    folder = root / "target" / "run" / run_id
    con = lake.connect()
    log_con = con if lake.config.catalog == "sqlite" else con.cursor()  # a signal interrupts `con` only
    log: RunLog | None = None
    try:
        executor = Executor(lake, run_id, folder)
        log = RunLog.open(lake, log_con, run_id, "seed", args={"command": "seed"}, executor="serial", workers=1,
                          steps=len(files), on_flush=lambda: write_results(root, folder, report))
        steps = []
        for path in files:
            rel = path.relative_to(root).as_posix()
            parts = path.relative_to(seeds).with_suffix("").parts
            schema, name = (parts[0], parts[-1]) if len(parts) > 1 else ("raw", parts[0])
            setup, replace = sql.seed_table(schema, name)
            statements = (
                CompiledStatement(role="setup", sql=setup),
                CompiledStatement(role="write", sql=replace, effect="insert",
                                  params={"path": Param(type="VARCHAR", value=str(path))}),
            )
            compiled = CompiledPlan(model=path.stem, path=rel, target=f"{schema}.{name}", strategy="seed",
                                    substrate="ducklake", write_path="sql", window=None, idempotent=True,
                                    idempotent_note="a re-run replaces the table's content", statements=statements,
                                    sql_sha256=CompiledPlan.digest(statements))
            steps.append((Result(model=rel, target=compiled.target, partition=None, strategy="seed",
                                 status="cancelled", error="the run was cancelled"),
                          partial(executor.materialize, con, compiled)))
        serial_steps(report, con, steps, lambda r: resolve_outcome(lake, log_con, run_id, r), log.step)
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


def serial_steps(report: RunReport, con: Any, steps: Iterable[tuple[Result, Callable[[], Result]]],
                 resolve: Callable[[Result], Result], record: Callable[[Result], None] = lambda r: None) -> None:
    """Run steps one at a time in this process (``seed``, Iceberg runs) and set ``report.status``.

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
