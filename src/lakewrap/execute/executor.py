"""The materializer's shared loop: one compiled plan, one commit, retried as a whole under a policy.

Every substrate's materializer (:meth:`lakewrap.substrates.protocol.Substrate.materializer`) is a
:class:`Materializer`: this module runs the attempts -- capped, jittered exponential backoff under
a :class:`~lakewrap.execute.retry.RetryPolicy`, only for errors the substrate classifies retryable,
a rollback after every failed attempt, each failed attempt recorded (the run log's attempts) --
fills the :class:`Result`, keeps the statement log and redacts what it reports. The substrate
supplies the hooks: the sandbox check of the plan's SQL, one attempt (begin, run the statements and
the tests before publishing, commit, and look the commit up when its outcome is unknown), the
rollback, and which errors a retry may cure:

* DuckLake: :mod:`lakewrap.substrates.ducklake.materialize`;
* Iceberg, pyiceberg commits: :mod:`lakewrap.substrates.iceberg.commit`;
* Iceberg, DuckDB SQL through a REST catalog: :mod:`lakewrap.substrates.iceberg.sql_write`.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from lakewrap.compilers.artifacts import CompiledPlan, CompiledStatement
from lakewrap.errors import ExecutionError, LakewrapError
from lakewrap.execute import checks, locate, sandbox
from lakewrap.execute.log import StatementLog
from lakewrap.execute.retry import RETRYABLE, RetryPolicy, is_retryable, retry_reason

Status = Literal["success", "unchanged", "failed", "skipped", "cancelled"]

__all__ = ["RETRYABLE", "GroupStep", "Job", "Materializer", "Result", "RetryPolicy", "StrictRefusal", "Tally",
           "is_retryable"]


@dataclass
class Result:
    """What one materialization did."""

    model: str
    target: str
    partition: str | None
    strategy: str
    status: Status
    rows_inserted: int = 0
    rows_updated: int = 0
    rows_deleted: int = 0
    snapshot_id: int | None = None
    seconds: float = 0.0
    attempts: int = 0
    sql_sha256: str = ""
    warnings: list[str] = field(default_factory=list)
    error: str | None = None
    error_class: str | None = None
    # every data test run before COMMIT: name, severity, line, status, failing-row count, <= 20 sample rows
    tests: list[dict[str, Any]] = field(default_factory=list)
    schema_changes: list[str] = field(default_factory=list)  # ALTER statements on_schema_change ran
    # each failed attempt: {"attempt", "error_class", "error", "seconds"} (the run log's attempts)
    attempt_errors: list[dict[str, Any]] = field(default_factory=list)
    # where the error is in the model file: {"path", "line", "column"} (execute/locate.py)
    error_location: dict[str, Any] | None = None
    # what `--debug` adds: the statement that failed, DuckDB's own message, the traceback (not in JSON)
    error_debug: str | None = None
    log_lines: list[str] = field(default_factory=list)  # a Python model's ctx.log(...) lines (the run log's)
    # the model's hooks that ran around it (lakewrap.hooks.HookRun as dicts)
    hooks: list[dict[str, Any]] = field(default_factory=list)
    # the group commit it was committed in, or rolled back with (docs/running.md, "Group commit and --atomic")
    group: str | None = None
    # a batch of a range backfill (lakewrap.batches): every partition its one commit wrote
    batch: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out.pop("error_debug")
        return out

    def fail(self, err: LakewrapError, redact: Callable[[str], str]) -> None:
        """Record ``err`` (located on the model file by :func:`locate.located`) as this result's error."""
        self.error = redact(err.render())
        self.error_location = locate.location_dict(err) or {"path": self.model, "line": None, "column": None}
        debug = getattr(err, "debug", None)
        self.error_debug = redact(debug) if debug else None


class StrictRefusal(ExecutionError):
    """``--strict`` refused a materialization (e.g. an empty result for a partition with data)."""


def emptied(path: str, stage_rows: int | None, inserted: int, deleted: int, strict: bool) -> str | None:
    """The warning when an empty result removed a partition's rows (``--strict``: a refusal).

    The result's size is the staged row count, or for a plan that stages nothing (``Compiler.direct``
    in compilers/blocks.py) the rows it inserted.
    """
    if (stage_rows if stage_rows is not None else inserted) != 0 or deleted == 0:
        return None
    warning = f"the result is empty but the partition had {deleted} rows; they were removed"
    if strict:
        raise StrictRefusal(f"{path}: {warning}", hint="check the model's source; run without --strict to accept")
    return warning


@dataclass(frozen=True)
class Job:
    """One materialization's inputs, the same for every attempt.

    ``reads`` are the tables the model reads (``schema.name``); ``inputs`` are Arrow tables (or
    anything DuckDB scans) registered under their names for the plan's SQL; ``provenance`` is
    recorded beside the commit's pins (a restore names the run and snapshot it restored).
    """

    compiled: CompiledPlan
    reads: tuple[str, ...] = ()
    drop_first: bool = False
    inputs: dict[str, Any] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class GroupStep:
    """One step handed to a substrate's ``run_group``: its result so far (model, target, partition,
    strategy), its model's spec, how to compile its plan (called before the group's transaction,
    or inside it for ``--atomic``), whether it drops the table first, its attempts when it runs
    alone (1 + the model's retries), and the positions of the members it reads (``after``: planned
    inside the transaction, once they wrote)."""

    result: Result
    spec: Any
    plan: Callable[[], CompiledPlan]
    drop_first: bool = False
    attempts: int = 1
    after: tuple[int, ...] = ()


@dataclass
class Tally:
    """The rows one attempt's statements wrote, from the counts their statements return."""

    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    stage_rows: int | None = None  # the SELECT's rows, staged (None: the plan stages nothing)

    def add(self, effect: str, n: int, grown: int = 0, *, count_deletes: bool = True) -> None:
        """Count a statement's ``n`` rows by its effect; ``grown`` is how many rows a merge added."""
        match effect:
            case "stage":  # the stage of the SELECT's rows: its CREATE TABLE AS counts them
                self.stage_rows = n
            case "insert":
                self.inserted += n
            case "delete":
                self.deleted += n if count_deletes else 0
            case "update":
                self.updated += n
            case "merge":
                self.inserted += grown
                self.updated += n - grown

    @property
    def unchanged(self) -> bool:
        return self.inserted == self.updated == self.deleted == 0

    def fill(self, result: Result) -> None:
        result.rows_inserted, result.rows_updated, result.rows_deleted = self.inserted, self.updated, self.deleted


@dataclass
class Materializer:
    """Runs compiled plans on one lake for one run id; a substrate subclasses it with its hooks."""

    lake: Any
    run_id: str
    log_dir: Path
    policy: RetryPolicy = field(default_factory=RetryPolicy)
    strict: bool = False
    rng: random.Random = field(default_factory=random.Random)
    sleep: Callable[[float], None] = time.sleep
    # test hook: called just before the commit with what the substrate commits through (the
    # connection, or pyiceberg's open transaction)
    before_commit: Callable[[Any], None] | None = None

    def materialize(self, con: Any, compiled: CompiledPlan, *, reads: tuple[str, ...] = (),
                    drop_first: bool = False, inputs: dict[str, Any] | None = None,
                    provenance: dict[str, Any] | None = None) -> Result:
        """Execute ``compiled`` as one commit, retrying what may be cured; never raises for data errors.

        A failure is returned as a ``failed`` :class:`Result` (with the redacted error, located on
        the model file); every attempt was rolled back and nothing is written. See :class:`Job`
        for the keyword arguments.
        """
        started = time.perf_counter()
        job = Job(compiled, reads, drop_first, inputs or {}, provenance or {})
        window = compiled.window
        result = Result(model=compiled.path, target=compiled.target, partition=window.value if window else None,
                        strategy=compiled.strategy, status="failed", sql_sha256=compiled.sql_sha256)
        log = StatementLog(self.log_dir, compiled, self.lake.redact)
        try:
            self.check(compiled)
            self.prepare(con, job, log)
            for attempt in range(1, self.policy.attempts + 1):
                result.attempts = attempt
                tried = time.perf_counter()
                try:
                    self.attempt(con, job, result, log, attempt)
                    break
                except Exception as exc:
                    self.rollback(con, log)
                    retry = self.retryable(exc)
                    text = str(exc).strip()
                    result.attempt_errors.append({
                        "attempt": attempt, "seconds": round(time.perf_counter() - tried, 6),
                        "error_class": self.attempt_class(exc, retry),
                        "error": self.lake.redact(text.splitlines()[0] if text else ""),
                    })
                    # rolled back: nothing was written, and a retry counts (and warns) afresh
                    result.rows_inserted = result.rows_updated = result.rows_deleted = 0
                    result.warnings.clear()
                    if not retry or attempt == self.policy.attempts:
                        raise
                    delay = self.policy.delay(attempt, self.rng)
                    log.note(f"attempt {attempt} {self.retry_reason(exc)}; retrying in {delay:.3f}s: "
                             f"{type(exc).__name__}" + (f": {text.splitlines()[0]}" if text else ""))
                    self.sleep(delay)
        except Exception as exc:  # a LakewrapError or the engine's: located on the model file, classified
            result.fail(locate.located(exc, compiled.path, self.lake.root, compiled=compiled), self.lake.redact)
            result.error_class = self.error_class(exc)
        finally:
            self.release(con, job)
            result.seconds = time.perf_counter() - started
            result.warnings = [self.lake.redact(w) for w in result.warnings]  # they quote engine errors
            log.close(result.status, result.error)
        return result

    # --- the substrate's hooks ------------------------------------------------------------------

    def check(self, compiled: CompiledPlan) -> None:
        """Refuse the plan before anything runs: the user's SQL on DuckDB's parse (docs/security.md)."""
        sandbox.check_plan(compiled)

    def prepare(self, con: Any, job: Job, log: StatementLog) -> None:
        """Before the first attempt: the inputs registered on ``con``."""
        for name, data in job.inputs.items():
            con.register(name, data)

    def release(self, con: Any, job: Job) -> None:
        """After the last attempt, whatever its outcome."""
        for name in job.inputs:
            with suppress(Exception):  # already gone, or never registered
                con.unregister(name)

    def attempt(self, con: Any, job: Job, result: Result, log: StatementLog, attempt: int) -> None:
        """One attempt: begin, run the statements and the tests, commit (looking the commit up when
        its outcome is unknown); fills ``result`` and sets its status once committed. Raises on
        failure, before or instead of committing."""
        raise NotImplementedError

    def rollback(self, con: Any, log: StatementLog) -> None:
        """Undo a failed attempt; never raises."""

    def retryable(self, exc: BaseException) -> bool:
        """Whether re-running the whole attempt may succeed."""
        return is_retryable(exc)

    def retry_reason(self, exc: BaseException) -> str:
        """What happened to an attempt that ``exc`` ended and that is retried, for its note
        (``attempt N <reason>; retrying in ...``): a conflict or a busy catalog."""
        return retry_reason(exc)

    def attempt_class(self, exc: BaseException, retryable: bool) -> str:
        """The error class a failed attempt is recorded under."""
        return type(exc).__name__

    def error_class(self, exc: BaseException) -> str:
        """The error class of a failed result."""
        return type(exc).__name__

    # --- shared steps ---------------------------------------------------------------------------

    def run_test(self, con: Any, st: CompiledStatement, result: Result, log: StatementLog,
                 outcomes: list[checks.TestOutcome]) -> None:
        """Write-audit-publish: one test on the written rows, before the commit; a ``warn`` is reported."""
        outcome = checks.run_test(con, st, log, result.model, self.lake)
        outcomes.append(outcome)
        result.tests.append(outcome.to_dict())
        if outcome.status == "warn":
            result.warnings.append(outcome.summary())

    def execute(self, con: Any, st: CompiledStatement, log: StatementLog) -> Any:
        """One compiled statement with its parameters bound."""
        params = {k: v.python() for k, v in st.params.items()}
        return log.run(con, st.sql, params or None, role=st.role)

    def counted(self, con: Any, st: CompiledStatement, log: StatementLog, tally: Tally,
                count: Callable[[], int], *, count_deletes: bool = True) -> Any:
        """Execute ``st`` and add what it wrote to ``tally`` (a merge's added rows: ``count()`` before
        and after)."""
        before = count() if st.effect == "merge" else 0
        cursor = self.execute(con, st, log)
        if st.effect is not None:
            n = int(cursor.fetchone()[0])
            tally.add(st.effect, n, count() - before if st.effect == "merge" else 0, count_deletes=count_deletes)
        return cursor
