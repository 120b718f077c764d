"""One step of a run, for every substrate: the run id and report, the partitions a selection
runs, a step's plan (the substrates' ``plan_step`` build on :func:`plan_model`), and
:func:`materialize_spec`, which plans, compiles and commits one (model, partition) through the
substrate's materializer. Used by :mod:`lakewrap.scheduler`, :mod:`lakewrap.workers`, the seed
runner (:mod:`lakewrap.runner`) and ``lakewrap.materialize()``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import Any

from lakewrap import __version__, hooks
from lakewrap.compile import compile_plan
from lakewrap.compilecache import _Cache
from lakewrap.errors import PlanError, SelectionError
from lakewrap.execute.binding import inline
from lakewrap.execute.executor import Result
from lakewrap.execute.locate import located, remember
from lakewrap.partitions import Grain, parse_partition, partition_range
from lakewrap.plan import Plan, Substrate, make_plan, widen
from lakewrap.spec import ModelSpec, TimePartitioning
from lakewrap.substrates.registry import resolve
from lakewrap.targetdir import write_atomic


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
    hooks: list[dict[str, Any]] = field(default_factory=list)  # the [hooks] that ran (lakewrap.hooks)
    warnings: list[str] = field(default_factory=list)  # of the run as a whole (a failed [hooks] script)

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
                "hooks": self.hooks, "warnings": self.warnings, "results": [r.to_dict() for r in self.results]}


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


def probe_columns(con: Any, plan: Plan) -> tuple[str, ...]:
    """The output columns of a ``SELECT *`` model, read from the lake (no rows are fetched)."""
    from lakewrap.compilers import compiler_for

    probe = compiler_for(plan.substrate).probe(plan)
    params = {k: v.python() for k, v in probe.params.items()}
    try:
        cursor = con.execute(*inline(probe.sql, params)) if params else con.execute(probe.sql)
    except Exception as exc:
        remember(exc, probe.sql, "probe")  # located on the model file by its token (execute/locate.py)
        raise
    return tuple(d[0] for d in cursor.description)


def plan_model(spec: ModelSpec, value: str | None, now: datetime, *, substrate: Substrate,
               watermark: datetime | None, probe: Callable[[Plan], tuple[str, ...]]) -> Plan:
    """The plan of one step (the substrates' ``plan_step``): ``watermark`` is what the lake recorded
    for a dynamic partition; ``probe(plan)`` reads a ``SELECT *`` merge's or snapshot's columns."""
    try:
        plan = make_plan(spec, substrate=substrate, partition=value, now=now, watermark=watermark)
    except PlanError as exc:
        raise PlanError(f"{spec.path}: {exc.message}", hint=exc.hint) from None
    if plan.columns is None and spec.strategy.kind in ("merge", "snapshot"):
        plan = plan.replace(columns=probe(plan))
    return plan


def compile_step(lake: Any, con: Any, spec: ModelSpec, value: str | None, now: datetime,
                 cache: _Cache | None, batch: Sequence[str] = ()) -> Any:
    """The compiled plan of one step with what the lake knows (the substrate's ``plan_step``), its
    test files read; ``batch``: the partitions of a range batch, bound as one window. Raises what
    planning raises."""
    plan = resolve(lake.config).plan_step(lake, con, spec, value, now)
    if len(batch) > 1:
        plan = widen(plan, tuple(batch))
    if spec.tests:
        from lakewrap.testfiles import read_test_files

        plan = read_test_files(plan, lake.root)
    return compile_plan(plan, cache)


def materialize_spec(lake: Any, con: Any, executor: Any, spec: ModelSpec, value: str | None, now: datetime,
                     cache: _Cache | None, *, drop_first: bool = False, batch: Sequence[str] = ()) -> Result:
    """Plan, compile and run one step on ``lake`` (any substrate's handle) through ``executor`` (its
    materializer); never raises for model or data errors (they are in the result). ``batch``: the
    partitions of a range backfill's batch (``value`` first), written with one window."""
    substrate = resolve(lake.config)
    ran = None
    try:
        if "python" in spec.extensions:  # run the function first: its result is what the plan reads
            from lakewrap.pyrun import run_model

            ran = run_model(substrate, lake, con, spec, value, now)
            spec = ran.spec
        compiled = compile_step(lake, con, spec, value, now, cache, batch)
    except Exception as exc:  # a LakewrapError, or the column probe's DuckDB error (it ran the model's SELECT)
        failed = Result(model=spec.path, target=str(spec.target), partition=value, strategy=spec.strategy.kind,
                        status="failed", error_class=type(exc).__name__)
        failed.fail(located(exc, spec.path, lake.root), lake.redact)
        return hooks.after_step(lake, spec, failed, getattr(executor, "run_id", None), None) if spec.hooks else failed
    # table and view plans replace the whole target anyway; literal models write what they write.
    rebuilds = spec.strategy.kind in ("delete+insert", "merge", "append", "snapshot")
    extra = {} if ran is None else {"inputs": ran.inputs, "provenance": ran.provenance}
    step: Callable[[], Result] = partial(substrate.run_step, executor, con, spec, compiled,
                                         drop_first=drop_first and rebuilds, **extra)
    if spec.hooks:  # pre_run, then the step, then post_run or on_failure (lakewrap.hooks)
        result: Result = hooks.around_step(lake, spec, getattr(executor, "run_id", None), compiled.window, step)
    else:
        result = step()
    if ran is not None:
        result.log_lines += ran.logs
    return result


def write_results(root: Path, folder: Path, report: RunReport) -> None:
    from lakewrap.redact import redact

    text = redact(json.dumps(report.to_dict(), indent=2, default=str), roots=(root,))
    for path in (folder / "results.json", root / "target" / "run_results.json"):
        write_atomic(path, text)  # threads of one process (``materialize`` on a shared lake) write too
