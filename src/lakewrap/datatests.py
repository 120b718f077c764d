"""``lakewrap test``: run the models' ``-- test`` lines against the data as published (read-only).

The statements are the very ones ``lakewrap run`` executes before COMMIT (compiled by
:mod:`lakewrap.compilers.checks`), on a read-only connection. With ``--partition`` a partitioned
model's tests cover that partition's window; without it, the whole table (for an SCD2 snapshot:
its current versions), as an unpartitioned model's always do. The statements, with their bound
values, are logged to ``target/test/<id>/<target>.sql``.

Each model's tests run in the session its substrate gives
(:meth:`~lakewrap.substrates.protocol.Substrate.test_session`): on DuckLake the lake's read-only
connection, on Iceberg a scratch session where the target and the tables the model reads are views
at their current snapshots (as during ``run``, minus the write).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from lakewrap.compile import load_project, plan_for
from lakewrap.compilecache import _Cache
from lakewrap.errors import LakewrapError
from lakewrap.execute.checks import TestOutcome, run_test
from lakewrap.plan import Param
from lakewrap.spec import ModelSpec, TimePartitioning

# A whole-table run binds the window parameters a `-- test sql` query may use to the widest range
# (DuckDB casts the text '-infinity' / 'infinity' to a timestamp).
WHOLE_TABLE = {"partition_start": Param(type="VARCHAR", value="-infinity"),
               "partition_end": Param(type="VARCHAR", value="infinity"),
               "partition_value": Param(type="VARCHAR", value="")}


@dataclass
class ModelTests:
    """The tests of one model (for one partition, or the whole table)."""

    model: str
    target: str
    partition: str | None
    tests: list[TestOutcome] = field(default_factory=list)
    error: str | None = None  # the model could not be compiled or its tests could not run

    @property
    def ok(self) -> bool:
        return self.error is None and all(t.status in ("pass", "warn") for t in self.tests)

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "target": self.target, "partition": self.partition, "ok": self.ok,
                "error": self.error, "tests": [t.to_dict() for t in self.tests]}


@dataclass
class TestReport:
    """What ``lakewrap test`` found; ``ok`` is false when an ``error`` test failed or could not run."""

    __test__ = False  # not a pytest class

    results: list[ModelTests] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.results)

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "results": [r.to_dict() for r in self.results]}


def run_tests(root: Path, selectors: Sequence[str] = (), *, exclude: Sequence[str] = (),
                 partition: str | None = None, now: datetime | None = None) -> TestReport:
    """Run the tests of the selected models against the lake's current data.

    Example:
        >>> report = run_tests(Path("examples/shop"), ["orders"], partition="2024-01-02")  # doctest: +SKIP
        >>> report.ok  # doctest: +SKIP
    """
    from lakewrap.project import require_project
    from lakewrap.runner import plan_partitions

    root = require_project(root)
    now = now or datetime.now(timezone.utc)
    cache = _Cache.open(root, True)
    project = load_project(root, cache)
    selected = [s for s in project.select(selectors, exclude) if s.tests]
    plan_partitions(selected, partition, None, None)  # a bad value or a needless --partition: usage error
    report = TestReport()
    if not selected:
        return report
    from lakewrap.runner import new_run_id

    folder = root / "target" / "test" / new_run_id(now)
    from lakewrap.substrates import of_project

    sub = of_project(root)
    lake = sub.open(root, read_only=True)
    con = lake.connect()
    try:
        for spec in selected:
            with sub.test_session(lake, con, spec) as cursor:
                report.results.append(_test_model(cursor, lake, folder, spec, partition, now))
    finally:
        lake.close(con)
    if cache is not None:
        cache.save()
    return report


def _test_model(con: Any, lake: Any, folder: Path, spec: ModelSpec, partition: str | None,
                now: datetime) -> ModelTests:
    value = partition if isinstance(spec.partition, TimePartitioning) else None
    out = ModelTests(model=spec.path, target=str(spec.target), partition=value)
    try:
        plan = plan_for(spec, lake.config.substrate, value, now, lake.root)
        if value is None:
            plan = plan.replace(binding=None)  # the whole table
        from lakewrap.compilers import compiler_for
        from lakewrap.compilers.artifacts import CompiledPlan
        from lakewrap.compilers.checks import compile_tests

        statements = compile_tests(plan, compiler_for(plan.substrate), fallback=WHOLE_TABLE if value is None else None)
    except LakewrapError as exc:
        out.error = lake.redact(exc.render())
        return out
    compiled = CompiledPlan(model=spec.name, path=spec.path, target=str(spec.target), strategy=spec.strategy.kind,
                            substrate=plan.substrate, write_path="sql", window=None, idempotent=True,
                            idempotent_note="read-only", statements=statements,
                            sql_sha256=CompiledPlan.digest(statements))
    from lakewrap.execute import sandbox

    try:
        # the tests' SQL, on DuckDB's parse; no file reads where the lake has no file sandbox (docs/security.md)
        sandbox.check_plan(compiled, files=lake.sandbox() is not None)
    except LakewrapError as exc:
        out.error = lake.redact(exc.render())
        return out
    from lakewrap.execute.log import StatementLog

    log = StatementLog(folder, compiled, lake.redact)
    try:
        for st in compiled.statements:
            info = st.test
            assert info is not None
            try:
                out.tests.append(run_test(con, st, log, spec.path, lake))
            except Exception as exc:  # e.g. the table does not exist yet: that test cannot run
                out.tests.append(TestOutcome(info.name, info.kind, info.severity, spec.path, info.line, "error",
                                             error=lake.redact(str(exc).strip().splitlines()[0])))
    finally:
        log.close("ok" if out.ok else "failed", out.error)
    return out
