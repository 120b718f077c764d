"""The worked example of docs/architecture.md, "Adding a substrate": a substrate named ``memory``.

Its tables are plain tables of one DuckDB database file (no DuckLake, no Iceberg): the simplest
real storage there is. It is a file, ``.lakewrap/memory.duckdb`` by default (``[lake] path``),
rather than DuckDB's ``:memory:`` because a run opens several connections one after another (the
coordinator's, each step's, ``status``' reader) and every one of them must see the same tables; a
``:memory:`` database lives and dies with one connection. Connections of one process to the file
share one DuckDB instance (DuckDB's instance cache), so threads see each other's commits.

What it implements, one role each (the rest keep :class:`Substrate`'s refusal):

- ``config_class``: :class:`MemoryLakeConfig` (``substrate = "memory"``, ``path``);
- ``compiler``: the shared compiler with :class:`Capabilities` of its own (no views, no
  ``SET PARTITIONED BY``);
- ``open``: :class:`MemoryLake`, the lake handle;
- ``materializer``: :class:`MemoryMaterializer`, the shared attempt/retry loop with its hooks (BEGIN,
  the statements and tests, the state row, COMMIT; ROLLBACK on failure);
- ``plan_step``, ``run_step`` (the base's), ``resolve_outcome``, ``step_records``, ``seeder``;
- ``runlog``: the run log's four tables in a DuckDB file of their own (``runlog.DuckDBFileStore``,
  the store Iceberg uses), ``.lakewrap/memory-runlog.duckdb``;
- ``materializations``: the state table ``lakewrap_state.materializations`` (one row per
  materialization, committed in the same transaction as the data) as typed records.

Registered through the ``lakewrap.substrates`` entry point by tests/test_substrate_suite.py.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from sqlglot import exp

from lakewrap.compilers import sql as q
from lakewrap.compilers.artifacts import CompiledPlan, CompiledStatement
from lakewrap.compilers.base import Capabilities, Compiler
from lakewrap.compilers.lake import seed_table
from lakewrap.config import ProjectConfig, SubstrateConfig, load_config
from lakewrap.errors import UnsupportedError
from lakewrap.execute import checks
from lakewrap.execute.executor import Job, Materializer, Result, Tally, emptied
from lakewrap.execute.log import StatementLog
from lakewrap.execute.retry import is_retryable
from lakewrap.outcome import landed, needs_lookup, unanswered
from lakewrap.plan import Param, Plan
from lakewrap.provenance import Materialization
from lakewrap.redact import redact
from lakewrap.runlog import DuckDBFileStore, Store
from lakewrap.skips import appended
from lakewrap.spec import ModelSpec
from lakewrap.steps import plan_model, probe_columns
from lakewrap.substrates.protocol import Substrate

NAME = "memory"
STATE_SCHEMA, STATE_TABLE = "lakewrap_state", "materializations"
# the state table's columns: what a Materialization record is read back from
STATE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("run_id", "VARCHAR"), ("commit_id", "VARCHAR"), ("model", "VARCHAR"), ("target", "VARCHAR"),
    ("partition_value", "VARCHAR"), ("window_start", "VARCHAR"), ("window_end", "VARCHAR"),
    ("strategy", "VARCHAR"), ("rows_inserted", "BIGINT"), ("rows_updated", "BIGINT"),
    ("rows_deleted", "BIGINT"), ("sql_sha256", "VARCHAR"), ("full_refresh", "BOOLEAN"),
    ("attempt", "BIGINT"), ("committed_at", "VARCHAR"), ("seq", "BIGINT"),
)


class MemoryLakeConfig(SubstrateConfig):
    """``[lake]`` of ``substrate = "memory"``."""

    substrate: Literal["memory"] = "memory"
    path: str = ".lakewrap/memory.duckdb"  # the DuckDB file, relative to the project


class MemoryCompiler(Compiler):
    """The shared shapes on plain DuckDB tables: no views (so that the suite sees a capability
    refusal), no ``ALTER TABLE ... SET PARTITIONED BY`` (a DuckDB table has no partitioning)."""

    caps = Capabilities(name=NAME, write_path="sql", supports_views=False, supports_create_or_replace=True,
                        supports_merge=True, max_merge_update_actions=1, supports_merge_predicate=True,
                        partition_ddl=False)


# --- lakewrap's own statements, built with sqlglot ------------------------------------------------

def _state() -> exp.Table:
    return q.table(STATE_SCHEMA, STATE_TABLE)


def state_ddl() -> list[str]:
    columns = [exp.ColumnDef(this=q.ident(c), kind=exp.DataType.build(t)) for c, t in STATE_COLUMNS]
    return [q.render(exp.Create(this=exp.Table(db=q.ident(STATE_SCHEMA)), kind="SCHEMA", exists=True)),
            q.render(exp.Create(this=exp.Schema(this=_state(), expressions=columns), kind="TABLE", exists=True))]


def state_insert() -> str:
    seq = exp.select(exp.func("COALESCE", exp.func("MAX", exp.column("seq")), exp.Literal.number(0))
                     + exp.Literal.number(1)).from_(_state()).subquery()
    values = [seq if c == "seq" else q.param(c) for c, _ in STATE_COLUMNS]
    return q.render(exp.insert(exp.select(*values), _state(),
                               columns=[q.ident(c) for c, _ in STATE_COLUMNS]))


def state_select(where: exp.Expr) -> str:
    return q.render(exp.select(*(exp.column(c) for c, _ in STATE_COLUMNS)).from_(_state())
                    .where(where).order_by(exp.column("seq")))


def _eq(column: str) -> exp.Expr:
    return exp.column(column).eq(q.param(column))


def _nullsafe(column: str) -> exp.Expr:
    return exp.NullSafeEQ(this=exp.column(column), expression=q.param(column))


def _count(target: str) -> str:
    schema, name = target.split(".", 1)
    return q.render(exp.select(exp.func("COUNT", exp.Star())).from_(q.table(schema, name)))


def _drop(target: str) -> str:
    schema, name = target.split(".", 1)
    return q.render(exp.Drop(this=q.table(schema, name), kind="TABLE", exists=True))


BEGIN, COMMIT, ROLLBACK = "BEGIN", "COMMIT", "ROLLBACK"


def _rows(con: Any, where: exp.Expr, params: dict[str, Any]) -> list[dict[str, Any]]:
    import duckdb

    try:
        cursor = con.execute(state_select(where), params)
    except duckdb.CatalogException:  # nothing committed yet: no state table
        return []
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


# --- the lake handle ------------------------------------------------------------------------------

class MemoryLake:
    """The DuckDB file; each :meth:`connect` is a connection of the process's one instance of it."""

    parallel_writers = False  # DuckDB's optimistic transactions conflict on one table; retried anyway
    one_connection = False  # threads share the process's one instance of the file
    many_processes = False  # one DuckDB file, one process: the process and dask executors are refused

    def __init__(self, root: Path, config: MemoryLakeConfig, read_only: bool) -> None:
        self.root, self._config, self.read_only = root, config, read_only
        self.statement_lock = threading.RLock()
        self.path = root / config.path

    @property
    def config(self) -> MemoryLakeConfig:
        return self._config

    @property
    def alias(self) -> str:
        return NAME

    @property
    def is_shared(self) -> bool:
        return False  # every connect() is a connection of its own (on the one instance)

    @contextmanager
    def shared(self) -> Iterator[MemoryLake]:
        yield self

    def redact(self, text: str) -> str:
        return redact(text, roots=(self.root,))

    def connect(self) -> Any:
        import duckdb

        # read-only connections too open the file read-write: the process's instance is shared, and
        # DuckDB refuses a second instance of one file with another configuration
        self.path.parent.mkdir(parents=True, exist_ok=True)
        return duckdb.connect(str(self.path))

    def close(self, con: Any) -> None:
        con.close()

    def check_exists(self) -> None:
        from lakewrap.errors import NoLake

        if self.read_only and not self.path.exists():
            raise NoLake("the lake does not exist yet", hint="create it with `lakewrap seed` or `lakewrap run`")

    def runlog_path(self) -> Path:
        return self.path.with_name(self.path.stem + "-runlog.duckdb")


# --- the materializer -----------------------------------------------------------------------------

@dataclass
class MemoryMaterializer(Materializer):
    """The shared loop (``execute/executor.py``) with this substrate's hooks: one transaction per
    materialization, the state row in it."""

    lake: MemoryLake

    def rollback(self, con: Any, log: StatementLog) -> None:
        try:
            log.run(con, ROLLBACK)
        except Exception as exc:  # no transaction open
            log.note(f"rollback: {exc}")

    def retryable(self, exc: BaseException) -> bool:
        """DuckDB's optimistic conflicts (two first runs creating one schema, two writers of one
        table) are cured by running the whole transaction again."""
        import duckdb

        return is_retryable(exc) or (isinstance(exc, duckdb.TransactionException) and "conflict" in str(exc))

    def attempt(self, con: Any, job: Job, result: Result, log: StatementLog, attempt: int) -> None:
        compiled = job.compiled
        tally = Tally()
        result.tests.clear()
        result.schema_changes.clear()
        outcomes: list[checks.TestOutcome] = []
        schema_check = compiled.schema_check
        log.run(con, BEGIN)
        for stmt in state_ddl():  # DuckDB creates tables inside a transaction: gone again on ROLLBACK
            log.run(con, stmt)
        if job.drop_first:
            log.run(con, _drop(compiled.target))
        for st in compiled.statements:
            if schema_check is not None and st.role == "write":
                result.schema_changes = checks.check_schema(con, schema_check, compiled, log)
                schema_check = None
            if st.role == "test":  # write-audit-publish: the written rows, before COMMIT
                self.run_test(con, st, result, log, outcomes)
                continue
            self.counted(con, st, log, tally, lambda: int(log.run(con, _count(compiled.target)).fetchone()[0]))
            if schema_check is not None and st.role == "bootstrap":
                result.schema_changes = checks.check_schema(con, schema_check, compiled, log, bootstrapped=True)
                schema_check = None
        tally.fill(result)
        if (failed := checks.failure(outcomes)) is not None:
            raise failed
        if warning := emptied(compiled.path, tally.stage_rows, tally.inserted, tally.deleted, self.strict):
            result.warnings.append(warning)
        window = compiled.window
        log.run(con, state_insert(), {
            "run_id": self.run_id, "commit_id": uuid.uuid4().hex, "model": compiled.path,
            "target": compiled.target, "partition_value": result.partition,
            "window_start": window.start if window else None, "window_end": window.end if window else None,
            "strategy": compiled.strategy, "rows_inserted": tally.inserted, "rows_updated": tally.updated,
            "rows_deleted": tally.deleted, "sql_sha256": compiled.sql_sha256, "full_refresh": job.drop_first,
            "attempt": attempt, "committed_at": datetime.now(timezone.utc).isoformat(),
        })
        if self.before_commit is not None:
            self.before_commit(con)
        log.run(con, COMMIT)
        result.status = "success"


# --- the run roles --------------------------------------------------------------------------------

def seed_plan(seed: Any) -> CompiledPlan:
    setup, replace = seed_table(seed.schema, seed.name, seed.format.read_options())
    statements = (
        CompiledStatement(role="setup", sql=setup),
        CompiledStatement(role="write", sql=replace, effect="insert",
                          params={"path": Param(type="VARCHAR", value=str(seed.path))}),
    )
    return CompiledPlan(model=seed.path.stem, path=seed.rel, target=seed.target, strategy="seed", substrate=NAME,
                        write_path="sql", window=None, idempotent=True,
                        idempotent_note="a re-run replaces the table's content", statements=statements,
                        sql_sha256=CompiledPlan.digest(statements))


class MemorySeeder:
    def __init__(self, lake: MemoryLake, materializer: MemoryMaterializer) -> None:
        self.lake, self.materializer = lake, materializer

    def connect(self) -> Any:
        return self.lake.connect()

    def plan(self, seed: Any) -> CompiledPlan:
        return seed_plan(seed)

    def loaded(self, con: Any, target: str) -> tuple[str, str] | None:
        return None  # this substrate keeps no record of a seed's bytes: every seed loads

    def materialize(self, con: Any, compiled: CompiledPlan, *, provenance: dict[str, Any] | None = None) -> Result:
        return self.materializer.materialize(con, compiled)


class MemoryRecords:
    """What a run skips by, from the state table."""

    def __init__(self, con: Any) -> None:
        self.con = con

    def latest(self, target: str) -> dict[str | None, tuple[str, str]]:
        return {r["partition_value"]: (r["sql_sha256"], r["run_id"])
                for r in _rows(self.con, _eq("target"), {"target": target})}

    def appended(self, target: str) -> dict[str, set[str]]:
        return appended((r["partition_value"], bool(r["full_refresh"]), r["run_id"])
                        for r in _rows(self.con, _eq("target"), {"target": target}))

    def stale(self, project: Any, chosen: Sequence[ModelSpec]) -> dict[str, Any]:
        raise UnsupportedError(f"substrate `{NAME}` has no change feed", hint="run without --stale")


def _record(row: dict[str, Any]) -> Materialization:
    return Materialization(
        run_id=row["run_id"], model=row["model"], target=row["target"], partition=row["partition_value"],
        window_start=row["window_start"], window_end=row["window_end"], strategy=row["strategy"],
        rows_inserted=int(row["rows_inserted"]), rows_updated=int(row["rows_updated"]),
        rows_deleted=int(row["rows_deleted"]), sql_sha256=row["sql_sha256"], pins={},
        committed_at=row["committed_at"], snapshot_id=None, author="lakewrap", commit_message=None,
        extra_info={"commit_id": row["commit_id"], "attempt": int(row["attempt"])})


class Memory(Substrate):
    name = NAME
    config_class = MemoryLakeConfig

    def compiler(self) -> Compiler:
        return MemoryCompiler()

    def open(self, root: Path, *, config: ProjectConfig | None = None, read_only: bool = False) -> MemoryLake:
        lake = (config or load_config(root)).lake
        assert isinstance(lake, MemoryLakeConfig)
        return MemoryLake(root, lake, read_only)

    def materializer(self, lake: MemoryLake, run_id: str, folder: Path, *, policy: Any = None,
                     strict: bool = False) -> MemoryMaterializer:
        from lakewrap.execute.retry import RetryPolicy

        return MemoryMaterializer(lake, run_id, folder, policy=policy or RetryPolicy(), strict=strict)

    def plan_step(self, lake: MemoryLake, con: Any, spec: ModelSpec, partition: str | None, now: datetime) -> Plan:
        return plan_model(spec, partition, now, substrate=NAME, watermark=None,
                          probe=lambda plan: probe_columns(con, plan))

    def resolve_outcome(self, lake: MemoryLake, con: Any, run_id: str, result: Result) -> Result:
        if not needs_lookup(result):
            return result
        where = exp.and_(_eq("run_id"), _eq("target"), _nullsafe("partition_value"))
        params = {"run_id": run_id, "target": result.target, "partition_value": result.partition}
        try:
            own = lake.connect() if con is None else con
            try:
                rows = _rows(own, where, params)
            finally:
                if con is None:
                    lake.close(own)
        except Exception as exc:
            return unanswered(result, exc, lake.redact)
        if not rows:
            return result
        last = rows[-1]
        return landed(result, (last["rows_inserted"], last["rows_updated"], last["rows_deleted"]), None,
                      last["attempt"])

    def step_records(self, lake: MemoryLake, con: Any) -> MemoryRecords:
        return MemoryRecords(con)

    def seeder(self, lake: MemoryLake, run_id: str, folder: Path) -> MemorySeeder:
        return MemorySeeder(lake, self.materializer(lake, run_id, folder))

    def runlog(self, lake: MemoryLake, con: Any) -> Store:
        return DuckDBFileStore(lake.runlog_path())

    def query(self, root: Path, text: str, as_of: Any, fetch: Any) -> Any:
        """``lakewrap query``: the lake's tables, and the run log's as temporary views (attached
        read-only for the statement, detached again: the run log's own writes open its file)."""
        from lakewrap import runlog

        self.check_as_of(as_of)
        lake = self.open(root, read_only=True)
        con = lake.connect()
        store = DuckDBFileStore(lake.runlog_path())
        alias = store.attach(con)
        try:
            runlog.expose(con, alias)
            return fetch(con.execute(text))
        finally:
            if alias is not None:
                con.execute(q.render(exp.Detach(this=exp.to_identifier(alias))))
            lake.close(con)

    def check_as_of(self, as_of: Any) -> None:
        if as_of is not None:
            raise UnsupportedError(f"--as-of is not implemented on substrate `{NAME}`", hint="drop --as-of")

    def materializations(self, lake: MemoryLake, target: str) -> list[Materialization]:
        con = lake.connect()
        try:
            return [_record(r) for r in _rows(con, _eq("target"), {"target": target})]
        finally:
            lake.close(con)


__all__ = ["Memory", "MemoryCompiler", "MemoryLake", "MemoryLakeConfig", "MemoryMaterializer"]
