"""Run a project's selected DAG as steps — one (model, partition) each — in parallel where allowed.

* A step waits for the steps of its upstream models it reads: the same partition when both models
  are time-partitioned (their grains must match: a mismatch is refused before anything runs),
  every step of the upstream otherwise.
* Writers to one table are serialized: a target has at most one step in flight, and its
  partitions run in ascending order (a ``--full-refresh`` drops the table in its first one). On a
  lake whose commits are optimistic (Iceberg: the lake handle's ``parallel_writers``), partitions
  of one table start in that order but run in parallel, a conflicting commit retried as a whole.
* A failed step's downstream steps are ``skipped`` (transitively); ``--fail-fast`` stops
  scheduling after the first failure (in-flight steps finish).
* Each step retries retryable errors only, ``-- retry N`` times (default: ``[run] retries`` in
  lakewrap.toml), with capped, jittered exponential backoff (the executor's policy).
* SIGINT/SIGTERM cancel the run: in-flight statements are interrupted and rolled back, nothing
  new starts, the run is recorded ``cancelled`` and can be resumed (``lakewrap resume RUN_ID``).
  A step that ran and did not report success is looked up in the lake before it is recorded: one
  whose COMMIT landed all the same is a ``success`` (:mod:`lakewrap.outcome`).
* ``resume`` skips the steps whose materialization the lake's state of record (DuckLake's
  ``lakewrap.materializations``, Iceberg's snapshot summaries or state tables) records for the run,
  ``missing_only`` those already materialized with the same compiled SQL (``sql_sha256``), both
  only while their inputs are unchanged; an ``append`` partition already recorded is not appended
  again unless ``reappend`` (:mod:`lakewrap.skips`).

The run log (:mod:`lakewrap.runlog`) and ``target/run_results.json`` are written as steps finish.
Every substrate runs through this module: what differs (the lake handle, planning a step, the
materializer, the commit lookup, the records skips read, the run log's store) is asked of the
project's substrate (:mod:`lakewrap.substrates`).
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from lakewrap import tracing
from lakewrap.batches import batch_steps, member_result
from lakewrap.compile import compile_plan, files_digest, load_project
from lakewrap.compilecache import _Cache
from lakewrap.config import load_config
from lakewrap.contracts_graph import catalog_of, check_run
from lakewrap.errors import PlanError, StateError, UnsupportedError
from lakewrap.execute.executor import Result
from lakewrap.hooks import RunHooks
from lakewrap.hooks import check_config as check_hooks
from lakewrap.pools import make_runner
from lakewrap.project import Project
from lakewrap.runlog import RunLog, read_run
from lakewrap.runsteps import (
    RunOptions,
    Step,
    build_steps,
    check_atomic,
    check_grains,
    default_workers,
    groupable_steps,
)
from lakewrap.signals import on_signals as _on_signals
from lakewrap.signals import settle
from lakewrap.skips import RESUMED
from lakewrap.spec import ModelSpec
from lakewrap.steps import RunReport, new_run_id, plan_partitions, refuse_empty, write_results
from lakewrap.substrates.protocol import Substrate
from lakewrap.substrates.registry import key as key_of
from lakewrap.substrates.registry import resolve as substrate_of
from lakewrap.workers import StepRunner, Task

Progress = Callable[[str, Any], None]  # ("start", total) / ("step", result) / ("end", report)
Control = Callable[[Callable[[], None]], None]  # handed the run's cancel function (execute)


class Scheduler:
    """Dispatches ready steps to a :class:`StepRunner` and records their results."""

    def __init__(self, steps: list[Step], runner: StepRunner, workers: int, log: RunLog, report: RunReport,
                 fail_fast: bool, progress: Progress | None,
                 resolve: Callable[[Result], Result] | None = None, per_target: int = 1,
                 groupable: Callable[[Step], bool] | None = None, atomic: bool = False,
                 chains: bool = True) -> None:
        self.steps = steps
        # group commit (lakewrap.grouping): which steps may share a commit (None: no grouping)
        self.groupable = groupable or (lambda step: False)
        self.grouping = groupable is not None or atomic
        self.atomic = atomic
        self.chains = chains  # a group may take in the steps that read its members (Substrate.group_chains)
        self.unit_of: dict[int, str] = {}  # step index -> the group (or step) it was submitted in
        self.units: dict[str, int] = {}  # group -> its members in flight
        # steps of one target in flight at once: 1 (one writer per table), or more on a lake whose
        # commits are optimistic and retried (Iceberg: ``parallel_writers`` of its lake handle)
        self.per_target = max(1, per_target)
        self.resolve = resolve  # the lake's word on a step that ran and did not succeed (lakewrap.outcome)
        self.runner = runner
        self.workers = workers
        self.log = log
        self.report = report
        self.fail_fast = fail_fast
        self.progress = progress
        self.done: queue.Queue[tuple[Task, Result]] = queue.Queue()
        self.cancelled = threading.Event()
        self.stopping = False
        self.results: dict[int, Result] = {}
        self.index = {(s.task.target, s.task.partition): s.index for s in steps}
        self.order: dict[str, list[int]] = {}
        for s in steps:
            self.order.setdefault(s.task.target, []).append(s.index)
        self.cursor = dict.fromkeys(self.order, 0)  # per target: its first step that may be pending
        self.busy: dict[str, int] = dict.fromkeys(self.order, 0)  # per target: its steps in flight
        self.on_finish: Callable[[Result], None] | None = None  # each result as it is recorded (lakewrap.tracing)

    def cancel(self) -> None:
        """Stop scheduling and interrupt in-flight steps (safe from a signal handler)."""
        if not self.cancelled.is_set():
            self.cancelled.set()
            self.runner.cancel()

    def _finish(self, step: Step, result: Result) -> None:
        if step.members:  # a batch: its members finish with it (lakewrap.batches)
            result.batch = list(step.task.batch)
        step.status = result.status
        self.results[step.index] = result
        self.report.results.append(result)
        self.log.step(result)
        if self.on_finish is not None:
            self.on_finish(result)
        if result.group is not None:  # the run log's lines say which group commit a step was in
            self.log.line("info", result.target, result.partition,
                          f"{'committed' if result.status in ('success', 'unchanged') else result.status} "
                          f"in group {result.group}" + (f" (snapshot {result.snapshot_id})"
                                                        if result.snapshot_id is not None else ""))
        if self.progress:
            self.progress("step", result)
        for i in step.members:
            member = self.steps[i]
            self._finish(member, member_result(result, member.task.partition or "", step.task.batch))

    def skip_pending(self, why: str) -> None:
        """Record every step not started as ``skipped`` for ``why``."""
        for step in self.steps:
            if step.status == "pending":
                self._finish(step, step.task.skipped("skipped", why))

    def _blocked_by(self, step: Step) -> Step | None:
        for d in sorted(step.deps):
            dep = self.steps[d]
            if dep.status in ("failed", "skipped", "cancelled"):
                return dep
        return None

    def skip_blocked(self, step: Step, blocker: Step) -> None:
        """Record ``step`` ``skipped``: ``blocker``, a step it depends on, did not commit."""
        t = blocker.task
        why = (f"an upstream model failed in this run: {t.target}" + (f" {t.partition}" if t.partition else "")
               if blocker.status == "failed" else self.results[blocker.index].error or "not run")
        self._finish(step, step.task.skipped("skipped", why))

    def _submit_groups(self) -> int:
        """Submit the groups that may start now (lakewrap.grouping); the steps submitted."""
        from lakewrap.grouping import new_group_id, next_groups

        if self.atomic:
            if self.units or any(s.index in self.unit_of for s in self.steps):
                return 0  # the one group of the run is submitted once
            groups = [[s for s in self.steps if s.status == "pending"]]
        else:
            groups = next_groups(self, self.workers - len(self.units))
        started = 0
        for group in groups:
            if not group:
                continue
            gid = new_group_id() if len(group) > 1 or self.atomic else f"step-{group[0].index}"
            for step in group:
                step.status = "running"
                self.busy[step.task.target] += 1
                self.unit_of[step.index] = gid
            self.units[gid] = len(group)
            started += len(group)
            if len(group) == 1 and not self.atomic:
                self.runner.submit(group[0].task, lambda t, r: self.done.put((t, r)))
            else:
                from dataclasses import replace

                from lakewrap.grouping import GROUP_SECONDS, after

                tasks = [replace(s.task, after=a) for s, a in zip(group, after(group), strict=True)]
                self.runner.submit_group(tasks, gid, lambda t, r: self.done.put((t, r)),
                                         atomic=self.atomic, seconds=GROUP_SECONDS)
        return started

    def _ready(self, inflight: int) -> list[Step]:
        """Resolve skips, then the steps to start now (deps all committed; at most ``per_target``
        steps of a target in flight, started in its partitions' order)."""
        out: list[Step] = []
        started: set[int] = set()
        busy = dict(self.busy)
        changed = True
        while changed:
            changed = False
            for target, idxs in self.order.items():
                if busy[target] >= self.per_target:
                    continue
                ptr = self.cursor[target]
                while ptr < len(idxs) and self.steps[idxs[ptr]].status != "pending":
                    ptr += 1  # a step never becomes pending again
                self.cursor[target] = ptr
                for i in idxs[ptr:]:
                    if busy[target] >= self.per_target:
                        break
                    step = self.steps[i]
                    if step.status != "pending" or i in started:
                        continue
                    blocker = self._blocked_by(step)
                    if blocker is not None:
                        self.skip_blocked(step, blocker)
                        changed = True
                        continue
                    committed = all(self.steps[d].status in ("success", "unchanged", "done") for d in step.deps)
                    if committed and inflight + len(out) < self.workers:
                        out.append(step)
                        started.add(i)
                        busy[target] += 1
                    elif self.per_target == 1:
                        break  # one writer per table: its partitions run strictly in order
        return out

    def run(self) -> None:
        inflight = 0
        while True:
            if not (self.cancelled.is_set() or self.stopping) and self.grouping:
                inflight += self._submit_groups()
            elif not (self.cancelled.is_set() or self.stopping):
                for step in self._ready(inflight):
                    step.status = "running"
                    self.busy[step.task.target] += 1
                    inflight += 1
                    self.runner.submit(step.task, lambda t, r: self.done.put((t, r)))
            if inflight == 0:  # nothing running and nothing can start: done (or stopped)
                break
            try:
                task, result = self.done.get(timeout=0.2)
            except queue.Empty:
                if time.monotonic() - self.log.last_flush >= self.log.interval and self.log.pending:
                    self.log.flush()
                continue
            inflight -= 1
            self.busy[task.target] -= 1
            step = self.steps[self.index[(task.target, task.partition)]]
            unit = self.unit_of.get(step.index)
            if unit is not None:
                self.units[unit] -= 1
                if not self.units[unit]:
                    del self.units[unit]
            if self.resolve is not None:
                result = self.resolve(result)
            self._finish(step, settle(result, self.cancelled))
            if result.status == "failed" and self.fail_fast:
                self.stopping = True
        why = "the run was cancelled" if self.cancelled.is_set() else "not run: --fail-fast stopped the run"
        for step in self.steps:
            if step.status == "pending":
                self._finish(step, step.task.skipped("cancelled" if self.cancelled.is_set() else "skipped", why))


@dataclass
class Prepared:
    root: Path
    run_id: str
    now: datetime
    opts: RunOptions
    project: Project
    cache: _Cache | None
    selected: list[ModelSpec]
    steps: list[Step]
    workers: int


def prepare(root: Path, opts: RunOptions, run_id: str | None) -> Prepared:
    """Everything that can be refused before anything runs: selection, partitions, grains."""
    root = root.resolve()
    now = opts.now or datetime.now(timezone.utc)
    opts.now = now
    run_id = run_id or new_run_id(now)
    cache = _Cache.open(root, True)
    project = load_project(root, cache)
    selected = project.select(opts.selectors, opts.exclude)
    refuse_empty(selected, opts.selectors, opts.exclude)
    if any("state:" in s for s in (*opts.selectors, *opts.exclude)):
        # what `state:` selects changes as the run commits: a resume runs the models selected now
        opts.selectors, opts.exclude = tuple(str(s.target) for s in selected), ()
    if opts.stale:
        from lakewrap.stale import plan_stale

        selected, partitions, _ = plan_stale(root, project, selected, partition=opts.partition, start=opts.start,
                                             end=opts.end, full_refresh=opts.full_refresh)
    else:
        partitions = plan_partitions(selected, opts.partition, opts.start, opts.end)
    check_grains(project, selected)
    if opts.atomic:
        check_atomic(selected)
    config = load_config(root)
    check_hooks(root, config)  # every [hooks] script there, before anything runs
    workers = opts.workers or config.run.workers or default_workers(opts.executor)
    if workers < 1:
        raise PlanError(f"--workers must be at least 1, not {workers}")
    steps = build_steps(project, selected, partitions, root, run_id, now, opts, config.run.retries)
    return Prepared(root, run_id, now, opts, project, cache, selected, steps, workers)


def execute(prep: Prepared, *, progress: Progress | None = None, resume: dict[str, Any] | None = None,
            control: Control | None = None) -> RunReport:
    """Run prepared steps; never raises for model or data errors (they are in the report).

    ``control`` is handed the run's cancel function once the run has started (what SIGINT/SIGTERM
    call in the main thread): a caller running the run in another thread, such as a queue worker
    (:mod:`lakewrap.jobworker`), stops it with that."""
    root, opts = prep.root, prep.opts
    config = load_config(root)
    # None unless tracing is enabled; refused here, before anything opens, without the otel extra
    trace = tracing.start(config, prep.run_id, opts.command)
    substrate = substrate_of(config.lake)
    lake = substrate.open(root, config=config)
    runner = make_runner(opts.executor, prep.workers, opts.scheduler)
    report = RunReport(run_id=prep.run_id, started_at=prep.now.isoformat() if resume is None
                       else str(resume.get("started_at")))
    folder = root / "target" / "run" / prep.run_id
    with ExitStack() as stack:
        if runner.kind in ("thread", "callable") and not lake.one_connection:
            stack.enter_context(lake.shared())
        con = lake.connect()
        try:  # cross-model contracts, against the lake's tables as they are, before anything runs
            name = key_of(config.lake)
            check_run(prep.project, prep.selected, con, name, catalog_of(root, name, substrate.compiler),
                      partition=opts.partition, now=prep.now, digest=files_digest(prep.cache, prep.selected))
        except BaseException:
            lake.close(con)
            raise
        # what the lake already holds: committed steps of this run (resume), the same SQL (missing-only),
        # append partitions already recorded
        try:
            skip_done(prep, substrate, lake, con, resume is not None)
            batch_done(prep, substrate, lake, con)
        except BaseException:
            lake.close(con)
            raise
        if lake.one_connection and runner.kind not in ("thread", "callable"):
            lake.close(con)  # an idle connection share-locks a SQLite catalog: other processes could not commit
            con = None
        else:
            stack.callback(lake.close, con)
        if runner.kind == "thread":
            runner.cache = prep.cache
        runner.start(lake, prep.project, con)
        stack.callback(runner.close)
        if opts.atomic and not (substrate.group_commit and substrate.group_chains and runner.groups):
            raise UnsupportedError(
                "--atomic needs one transaction over several tables, in which a model reads what its "
                "upstreams wrote: "
                + (f"the `{runner.kind}` executor commits each step in its own"
                   if substrate.group_commit and substrate.group_chains else
                   f"the `{substrate.name}` substrate cannot record the pins of a model whose upstream is "
                   "written in the same commit" if substrate.group_commit
                   else f"the `{substrate.name}` substrate commits each table on its own"),
                hint="run --atomic on a DuckLake with the thread, process or dask executor (docs/running.md)")
        todo = [s for s in prep.steps if s.status in ("pending", "batched")]
        # a resumed run's counts cover every step of the run: those it committed before, too
        report.earlier = sum(s.status == "done" and s.reason == RESUMED for s in prep.steps)
        log = RunLog.open(substrate.runlog(lake, con), lake.redact, prep.run_id, opts.command,
                          args=opts.to_args(), executor=runner.kind, workers=runner.workers, steps=len(todo),
                          previous=resume, earlier=report.earlier,
                          on_flush=lambda: write_results(root, folder, report))
        stack.callback(log.close)
        for s in prep.steps:
            if s.status == "done":
                log.line("info", s.task.target, s.task.partition, s.reason)
        report.not_rerun = [{"target": s.task.target, "partition": s.task.partition, "reason": s.reason}
                            for s in prep.steps if s.status == "done"]
        # --fail-fast stops at the first failure: a group would go on with its other members
        grouped = (opts.group if opts.group is not None else config.run.group_commit) and (
            substrate.group_commit and runner.groups) and (opts.atomic or not opts.fail_fast)
        scheduler = Scheduler(prep.steps, runner, runner.workers, log, report, opts.fail_fast, progress,
                              lambda result: substrate.resolve_outcome(lake, con, prep.run_id, result),
                              per_target=runner.workers if lake.parallel_writers else 1,
                              groupable=groupable_steps(prep.project) if grouped else None, atomic=opts.atomic,
                              chains=substrate.group_chains)
        if control is not None:
            control(scheduler.cancel)
        if trace is not None:
            scheduler.on_finish = trace.step
        if progress:
            progress("start", len(todo))
        restore = _on_signals(scheduler.cancel)
        run_hooks = RunHooks(root, config, prep.run_id, opts.command, lake.redact, log)
        try:
            try:
                if not run_hooks.start(report):  # on_run_start failed: no step runs
                    scheduler.skip_pending("not run: the on_run_start hook failed")
                scheduler.run()
            except BaseException:
                scheduler.cancel()
                raise
            finally:
                report.results = [scheduler.results[s.index] for s in prep.steps if s.index in scheduler.results]
                report.finished_at = datetime.now(timezone.utc).isoformat()
                # every step in the lake is a success, even when the signal came after the last commit
                status = ("success" if report.ok else "cancelled" if scheduler.cancelled.is_set() else "failed")
                report.status = status
                report.resumable = status != "success"
                run_hooks.end(report, status)
                log.finish(status, report.results, resumable=report.resumable)
                report.run_log_errors = log.errors
                if trace is not None:
                    trace.finish(report)
        finally:
            restore()
    if prep.cache is not None:
        prep.cache.save()  # after the lake and the run log are closed: it remembers their statements too
    write_results(root, folder, report)
    if progress:
        progress("end", report)
    return report


def skip_done(prep: Prepared, substrate: Substrate, lake: Any, con: Any, resuming: bool) -> None:
    """Mark the steps the lake already holds ``done``, each with its reason (:mod:`lakewrap.skips`)."""
    from lakewrap.skips import mark

    def sha_of(spec: ModelSpec, partition: str | None) -> str | None:
        try:
            return compile_plan(substrate.plan_step(lake, con, spec, partition, prep.now), prep.cache).sql_sha256
        except Exception:  # it fails again when it runs, and is reported there
            return None

    mark(prep.steps, prep.selected, prep.project, substrate.step_records(lake, con), run_id=prep.run_id,
         resuming=resuming, missing_only=prep.opts.missing_only, reappend=prep.opts.reappend,
         full_refresh=prep.opts.full_refresh, sha_of=sha_of)


def batch_done(prep: Prepared, substrate: Substrate, lake: Any, con: Any) -> None:
    """Cut the pending steps of separable models into range batches (:mod:`lakewrap.batches`)."""

    def separable(spec: ModelSpec, partition: str) -> bool:
        try:
            compiled = compile_plan(substrate.plan_step(lake, con, spec, partition, prep.now), prep.cache)
        except Exception:  # it fails again when it runs, per partition, and is reported there
            return False
        return compiled.separable is not None and compiled.separable.proven

    batch_steps(prep.steps, prep.project.models, size=prep.opts.batch_size, separable=separable)


def run(root: Path, opts: RunOptions, *, run_id: str | None = None, progress: Progress | None = None,
        control: Control | None = None) -> RunReport:
    """Plan and run ``opts`` on the project at ``root`` (``lakewrap run`` / ``backfill``)."""
    return execute(prepare(root, opts, run_id), progress=progress, control=control)


def resume(root: Path, run_id: str, *, workers: int | None = None, executor: Any = "auto",
           scheduler: str | None = None, progress: Progress | None = None,
           control: Control | None = None) -> RunReport:
    """Re-run a failed, cancelled or killed run: the steps it has not committed, same arguments."""
    from lakewrap.project import require_project

    root = require_project(root)
    config = load_config(root)
    substrate = substrate_of(config.lake)
    # a lake never created holds no run: it is not created here either
    substrate.open(root, config=config, read_only=True).check_exists()
    lake = substrate.open(root, config=config)
    con = lake.connect()
    try:
        row = read_run(substrate.runlog(lake, con), run_id)
    except Exception:
        row = None
    finally:
        lake.close(con)
    if row is None:
        raise StateError(f"the lake records no run `{run_id}`",
                         hint="list runs with: lakewrap query \"SELECT run_id, status FROM lakewrap_runs\"")
    if row["status"] == "success":
        raise StateError(f"run `{run_id}` succeeded; there is nothing to resume")
    if row["command"] == "seed":
        raise StateError(f"run `{run_id}` is a `lakewrap seed`; seeds are not resumed",
                         hint="load them again with `lakewrap seed` (each table is replaced in full)")
    opts = RunOptions.from_args(json.loads(row["args"]))
    opts.workers, opts.executor, opts.scheduler = workers, executor, scheduler
    opts.missing_only = False
    prep = prepare(root, opts, run_id)
    return execute(prep, progress=progress, resume=row, control=control)
