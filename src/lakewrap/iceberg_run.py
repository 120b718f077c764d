"""``lakewrap run`` and ``lakewrap seed`` on an Iceberg lake (write path pyiceberg).

The same selection, partition planning, dependency order and skip-on-upstream-failure as the
DuckLake runner (:mod:`lakewrap.runner`); each (model, partition) is one pyiceberg transaction
through :class:`~lakewrap.substrates.iceberg.commit.IcebergExecutor`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import Any

from lakewrap.compile import _Cache, compile_plan, load_project
from lakewrap.compilers import iceberg as ice
from lakewrap.compilers.artifacts import CompiledPlan, CompiledStatement
from lakewrap.errors import PlanError
from lakewrap.execute.executor import Result
from lakewrap.execute.iceberg import IcebergLake
from lakewrap.execute.locate import located
from lakewrap.outcome import resolve_iceberg
from lakewrap.plan import Param, Plan, Substrate, make_plan
from lakewrap.runner import (
    RunReport,
    new_run_id,
    plan_partitions,
    probe_columns,
    refuse_empty,
    serial_steps,
    write_results,
)
from lakewrap.seedfiles import seed_files
from lakewrap.skips import APPENDED, appended, duplicates
from lakewrap.spec import DynamicPartitioning, ModelSpec, TimePartitioning
from lakewrap.substrates.iceberg.commit import IcebergExecutor
from lakewrap.substrates.iceberg.reads import reads_of
from lakewrap.substrates.iceberg.sql_connect import connect as connect_sql
from lakewrap.substrates.iceberg.sql_write import IcebergSqlExecutor
from lakewrap.substrates.iceberg.summary import PREFIX


def watermark(lake: IcebergLake, target: str) -> datetime | None:
    """The latest watermark recorded in the target's snapshot summaries (dynamic partitions)."""
    if lake.config.write_path == "sql":
        from lakewrap.substrates.iceberg.state import state_rows

        found = [r["watermark"] for r in state_rows(lake, target) if r.get("watermark") is not None]
        return max(found) if found else None
    table = lake.load(target)
    marks = [s.summary.additional_properties.get(PREFIX + "watermark") for s in table.snapshots()
             if s.summary is not None] if table is not None else []
    found = [datetime.fromisoformat(m) for m in marks if m]
    return max(found) if found else None


def recorded_appends(lake: IcebergLake, spec: ModelSpec) -> dict[str, set[str]]:
    """The partitions of a time-partitioned ``append`` model its table holds (:func:`lakewrap.skips.appended`),
    read from the snapshot summaries or the state table (write path sql)."""
    if spec.strategy.kind != "append" or not isinstance(spec.partition, TimePartitioning):
        return {}
    from lakewrap.substrates.iceberg.state import materializations_of

    return appended((m["partition"], bool(m["full_refresh"]), m["run_id"] or "")
                    for m in materializations_of(lake, str(spec.target)))


def plan_model(lake: IcebergLake, con: Any, spec: ModelSpec, value: str | None, now: datetime) -> Plan:
    mark = watermark(lake, str(spec.target)) if isinstance(spec.partition, DynamicPartitioning) else None
    substrate: Substrate = "iceberg-sql" if lake.config.write_path == "sql" else "iceberg"
    try:
        plan = make_plan(spec, substrate=substrate, partition=value, now=now, watermark=mark)
    except PlanError as exc:
        raise PlanError(f"{spec.path}: {exc.message}", hint=exc.hint) from None
    if plan.columns is None and spec.strategy.kind in ("merge", "snapshot") and substrate == "iceberg-sql":
        plan = plan.replace(columns=probe_columns(con, plan))  # the attached catalog reads it
    elif plan.columns is None and spec.strategy.kind in ("merge", "snapshot"):
        with lake.scratch(con, reads_of(spec)) as (cursor, _):
            plan = plan.replace(columns=probe_columns(cursor, plan))
    return plan


def materialize_spec(lake: IcebergLake, con: Any, executor: IcebergExecutor | IcebergSqlExecutor, spec: ModelSpec,
                     value: str | None, now: datetime, cache: _Cache | None, *, drop_first: bool = False) -> Result:
    def failed(exc: Exception) -> Result:
        out = Result(model=spec.path, target=str(spec.target), partition=value, strategy=spec.strategy.kind,
                     status="failed", error_class=type(exc).__name__)
        out.fail(located(exc, spec.path, lake.root), lake.redact)
        return out

    try:
        plan = plan_model(lake, con, spec, value, now)
        if spec.tests:
            from lakewrap.testfiles import read_test_files

            plan = read_test_files(plan, lake.root)
        compiled = compile_plan(plan, cache)
    except Exception as exc:  # a LakewrapError, or the column probe's DuckDB error (it ran the model's SELECT)
        return failed(exc)
    rebuilds = spec.strategy.kind in ("delete+insert", "merge", "append", "snapshot")
    return executor.materialize(con, compiled, reads=reads_of(spec), drop_first=drop_first and rebuilds)


def run_iceberg_project(
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
    stale: bool = False,
    reappend: bool = False,
) -> RunReport:
    """Materialize the selected models of an Iceberg project (see :func:`lakewrap.runner.run_project`);
    ``stale`` runs only the partitions whose inputs changed (:mod:`lakewrap.substrates.iceberg.feed`); an
    ``append`` partition already recorded is not run again unless ``reappend`` (:mod:`lakewrap.skips`)."""
    root = root.resolve()
    now = now or datetime.now(timezone.utc)
    run_id = run_id or new_run_id(now)
    cache = _Cache.open(root, True)
    project = load_project(root, cache)
    selected = project.select(selectors, exclude)
    refuse_empty(selected, selectors, exclude)
    if stale:
        from lakewrap.stale import plan_stale

        selected, partitions, _ = plan_stale(root, project, selected, partition=partition, start=start, end=end,
                                             full_refresh=full_refresh)
    else:
        partitions = plan_partitions(selected, partition, start, end)
    lake = IcebergLake.open(root)
    report = RunReport(run_id=run_id, started_at=now.isoformat())
    folder = root / "target" / "run" / run_id
    con = connect_sql(lake) if lake.config.write_path == "sql" else lake.connect()
    try:
        executor: IcebergExecutor | IcebergSqlExecutor = (
            IcebergSqlExecutor(lake, run_id, folder, strict=strict) if lake.config.write_path == "sql"
            else IcebergExecutor(lake, run_id, folder, strict=strict))
        failed: set[str] = set()  # targets failed, skipped or cancelled in this run: their readers are skipped

        def step(spec: ModelSpec, value: str | None, first: bool) -> Result:
            if {u.target.key for u in project.upstream_models(spec)} & failed:
                return Result(model=spec.path, target=str(spec.target), partition=value,
                              strategy=spec.strategy.kind, status="skipped",
                              error="an upstream model failed in this run")
            return materialize_spec(lake, con, executor, spec, value, now, cache, drop_first=full_refresh and first)

        def record(result: Result) -> None:
            if result.status in ("failed", "skipped", "cancelled"):
                failed.add(result.target)

        def steps() -> Iterator[tuple[Result, Callable[[], Result]]]:
            for spec, values in zip(selected, partitions, strict=True):
                present = recorded_appends(lake, spec) if not (full_refresh or reappend) else {}
                for i, value in enumerate(values):
                    if duplicates(present, value, run_id, reappend=False):
                        report.not_rerun.append({"target": spec.target.key, "partition": value, "reason": APPENDED})
                        continue
                    yield (Result(model=spec.path, target=str(spec.target), partition=value,
                                  strategy=spec.strategy.kind, status="cancelled", error="the run was cancelled"),
                           partial(step, spec, value, i == 0))

        serial_steps(report, con, steps(), lambda r: resolve_iceberg(lake, run_id, r), record)
        if cache is not None:
            cache.save()
    finally:
        lake.close(con)
        report.finished_at = datetime.now(timezone.utc).isoformat()
        write_results(root, folder, report)
    return report


def seed_iceberg_project(root: Path, *, run_id: str | None = None) -> RunReport:
    """Load ``seeds/**/*.csv`` into Iceberg tables, replacing their content, one commit per table."""
    root = root.resolve()
    seeds = root / "seeds"
    files = seed_files(root)  # every file checked before the first is loaded
    now = datetime.now(timezone.utc)
    run_id = run_id or new_run_id(now)
    lake = IcebergLake.open(root)
    report = RunReport(run_id=run_id, started_at=now.isoformat())
    folder = root / "target" / "run" / run_id
    con = lake.connect()
    try:
        executor = IcebergExecutor(lake, run_id, folder)
        steps = []
        for path in files:
            rel = path.relative_to(root).as_posix()
            parts = path.relative_to(seeds).with_suffix("").parts
            schema, name = (parts[0], parts[-1]) if len(parts) > 1 else ("raw", parts[0])
            statements = (CompiledStatement(role="stage", sql=ice.seed_stage(),
                                            params={"path": Param(type="VARCHAR", value=str(path))}),)
            commits = (ice.seed_commit(f"{schema}.{name}"),)
            compiled = CompiledPlan(model=path.stem, path=rel, target=f"{schema}.{name}", strategy="seed",
                                    substrate="iceberg", write_path="pyiceberg", window=None, idempotent=True,
                                    idempotent_note="a re-run replaces the table's content", statements=statements,
                                    sql_sha256=CompiledPlan.digest(statements, commits), commits=commits)
            steps.append((Result(model=rel, target=compiled.target, partition=None, strategy="seed",
                                 status="cancelled", error="the run was cancelled"),
                          partial(executor.materialize, con, compiled)))
        serial_steps(report, con, steps, lambda r: resolve_iceberg(lake, run_id, r))
    finally:
        lake.close(con)
        report.finished_at = datetime.now(timezone.utc).isoformat()
        write_results(root, folder, report)
    return report


def materialize_input(root: Path, spec: ModelSpec, name: str, data: Any, partition: str | None, now: datetime,
                      run_id: str | None) -> Result:
    """``lakewrap.materialize()`` on an Iceberg lake: ``data`` is registered as ``name`` for the plan's SQL."""
    lake = IcebergLake.open(root)
    sql_path = lake.config.write_path == "sql"
    plan = make_plan(spec, substrate="iceberg-sql" if sql_path else "iceberg", partition=partition, now=now)
    compiled = compile_plan(plan)
    run_id = run_id or new_run_id(now)
    folder = root / "target" / "run" / run_id
    con = connect_sql(lake) if sql_path else lake.connect()
    try:
        executor = IcebergSqlExecutor(lake, run_id, folder) if sql_path else IcebergExecutor(lake, run_id, folder)
        result = executor.materialize(con, compiled, inputs={name: data})
    finally:
        lake.close(con)
    report = RunReport(run_id=run_id, started_at=now.isoformat(), results=[result],
                       finished_at=datetime.now(timezone.utc).isoformat())
    write_results(root, folder, report)
    return result
