"""DuckLake: tables in a DuckLake catalog (DuckDB, SQLite or PostgreSQL), written by DuckDB SQL.

Records live in lakewrap's own tables in the catalog (``lakewrap.materializations``, the run log),
committed in the same transaction as the data.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lakewrap.config import DuckLakeLakeConfig
from lakewrap.substrates.protocol import Substrate

if TYPE_CHECKING:
    from lakewrap.compilers.artifacts import CompiledPlan
    from lakewrap.compilers.base import Compiler
    from lakewrap.config import LakeConfig, ProjectConfig
    from lakewrap.execute.executor import GroupStep, Result
    from lakewrap.execute.lake import Lake
    from lakewrap.execute.retry import RetryPolicy
    from lakewrap.jobstore import JobStore
    from lakewrap.plan import Plan
    from lakewrap.provenance import Materialization, RunOrSnapshot
    from lakewrap.runlog import Store
    from lakewrap.spec import ModelSpec
    from lakewrap.substrates.ducklake.feed import DuckLakeFeed
    from lakewrap.substrates.ducklake.maintain import DuckLakeMaintainer
    from lakewrap.substrates.ducklake.materialize import Executor
    from lakewrap.substrates.ducklake.provenance import DuckLakeProvenance
    from lakewrap.substrates.ducklake.run import Records, Seeder


class DuckLake(Substrate):
    name = "ducklake"
    config_class = DuckLakeLakeConfig

    def defer_refusal(self, other: Substrate) -> str | None:
        """A DuckLake defers to another DuckLake (attached read-only at a pinned snapshot)."""
        return None if isinstance(other, DuckLake) else (
            f"a DuckLake environment defers to DuckLake lakes only, not to substrate `{other.name}`")

    def compiler(self) -> Compiler:
        from lakewrap.compilers.ducklake import DuckLakeCompiler

        return DuckLakeCompiler()

    def open(self, root: Path, *, config: ProjectConfig | None = None, read_only: bool = False) -> Lake:
        from lakewrap.execute.lake import Lake

        return Lake.open(root, config=config, read_only=read_only)

    def materializer(self, lake: Lake, run_id: str, folder: Path, *, policy: RetryPolicy | None = None,
                     strict: bool = False) -> Executor:
        from lakewrap.execute.retry import RetryPolicy
        from lakewrap.substrates.ducklake.materialize import Executor

        return Executor(lake, run_id, folder, policy=policy or RetryPolicy(), strict=strict)

    def plan_step(self, lake: Lake, con: Any, spec: ModelSpec, partition: str | None, now: datetime) -> Plan:
        from lakewrap.substrates.ducklake.run import plan_step

        return plan_step(con, spec, partition, now)

    def run_step(self, materializer: Executor, con: Any, spec: ModelSpec, compiled: CompiledPlan, *,
                 drop_first: bool = False, inputs: dict[str, Any] | None = None,
                 provenance: dict[str, Any] | None = None) -> Result:
        """One step; its reads go along for an environment that defers (substrates/ducklake/defer.py)."""
        reads = tuple(str(u) for u in spec.all_upstreams) if materializer.lake.defer is not None else ()
        return materializer.materialize(con, compiled, reads=reads, drop_first=drop_first, inputs=inputs,
                                        provenance=provenance)

    group_commit = True

    def run_group(self, materializer: Executor, con: Any, steps: list[GroupStep], *, group_id: str,
                  atomic: bool = False, seconds: float = 30.0, cancelled: Any = None) -> list[Result]:
        """Steps in one DuckLake transaction (:mod:`lakewrap.substrates.ducklake.group`)."""
        from lakewrap.execute.group import Member, commit_group
        from lakewrap.substrates.ducklake.group import transaction

        defer = materializer.lake.defer is not None
        members = [Member.of(s, defer) for s in steps]
        return commit_group(materializer, con, members, transaction, group_id=group_id, atomic=atomic,
                            seconds=seconds, cancelled=cancelled).results

    @contextmanager
    def python_reads(self, lake: Lake, con: Any, spec: ModelSpec) -> Iterator[tuple[Any, Any, dict[str, Any]]]:
        from lakewrap.substrates.ducklake.pyreads import python_reads

        with python_reads(lake, con) as got:
            yield got

    def run_input(self, materializer: Executor, con: Any, compiled: CompiledPlan, name: str, data: Any) -> Result:
        from lakewrap.execute.lake import CONNECT_RETRY
        from lakewrap.execute.retry import retrying

        # registering reads the lake's catalog, which a concurrent commit may hold (SQLite)
        retrying(lambda: con.register(name, data), CONNECT_RETRY)
        return materializer.materialize(con, compiled)

    def resolve_outcome(self, lake: Lake, con: Any, run_id: str, result: Result) -> Result:
        from lakewrap.substrates.ducklake.run import resolve_outcome

        return resolve_outcome(lake, con, run_id, result)

    def step_records(self, lake: Lake, con: Any) -> Records:
        from lakewrap.substrates.ducklake.run import Records

        return Records(con, lake.alias)

    def seeder(self, lake: Lake, run_id: str, folder: Path) -> Seeder:
        from lakewrap.substrates.ducklake.run import Seeder

        return Seeder(lake, self.materializer(lake, run_id, folder), self.name)

    def runlog(self, lake: Lake, con: Any) -> Store:
        from lakewrap.substrates.ducklake.run import runlog

        return runlog(lake, con)

    def job_store(self, root: Path, config: ProjectConfig) -> JobStore:
        """The job queue beside the run log: in the PostgreSQL catalog database (any number of
        workers), in the SQLite catalog's run-log file, or in a SQLite file beside a DuckDB-file
        catalog (``lake.ducklake`` → ``lake.ducklake-jobs``), which an API process can write while
        the one worker owns the catalog. The two files are drained by one worker at a time."""
        from lakewrap.dsn import parse
        from lakewrap.errors import relpath
        from lakewrap.jobstore import PostgresJobs, SQLiteJobs

        lake = config.lake
        assert isinstance(lake, DuckLakeLakeConfig)
        if lake.catalog == "postgres":
            assert lake.dsn is not None  # a postgres catalog has a dsn (DuckLakeLakeConfig)
            name = parse(lake.dsn).get("dbname", "")
            return PostgresJobs(lake.dsn, where=f"the PostgreSQL catalog database {name}".rstrip())
        path = lake.catalog_path(root)
        path = path.with_name(path.name + ("-runlog" if lake.catalog == "sqlite" else "-jobs"))
        kind = "SQLite" if lake.catalog == "sqlite" else "DuckDB-file"
        return SQLiteJobs(path, exclusive=True, where=f"the {kind} catalog's job file {relpath(path, root)}")

    def materializations(self, lake: Lake, target: str) -> list[Materialization]:
        with self.state_reader(lake) as read:
            return read(target)

    @contextmanager
    def state_reader(self, lake: Lake) -> Iterator[Callable[[str], list[Materialization]]]:
        from lakewrap.substrates.ducklake.provenance import materializations

        con = lake.connect()
        try:
            yield lambda target: materializations(con, lake.alias, target)
        finally:
            lake.close(con)

    def query(self, root: Path, text: str, as_of: RunOrSnapshot | None, fetch: Callable[[Any], Any]) -> Any:
        from lakewrap.errors import ExecutionError
        from lakewrap.execute import sandbox

        self.check_as_of(as_of)
        lake = self.open(root, read_only=True)
        con = lake.connect()
        try:
            return fetch(con.execute(text))
        except Exception as exc:
            raise ExecutionError(lake.redact(str(exc)).strip(), hint=sandbox.access_hint(str(exc))) from None
        finally:
            lake.close(con)

    def check_as_of(self, as_of: RunOrSnapshot | None) -> None:
        if as_of is not None:
            from lakewrap.errors import PlanError

            raise PlanError("--as-of is implemented for Iceberg lakes only",
                            hint="on a DuckLake, read a past snapshot with `FROM t AT (VERSION => n)`")

    @contextmanager
    def test_session(self, lake: Lake, con: Any, spec: ModelSpec) -> Iterator[Any]:
        yield con  # the tests read the lake itself, on its read-only connection

    def shell_config(self, root: Path) -> LakeConfig:
        from lakewrap.config import load_config

        return load_config(root).lake

    def provenance(self, root: Path) -> DuckLakeProvenance:
        from lakewrap.substrates.ducklake.provenance import DuckLakeProvenance

        return DuckLakeProvenance(root)

    def feed(self, lake: Lake, con: Any) -> DuckLakeFeed:
        from lakewrap.substrates.ducklake.feed import feed

        return feed(lake, con)

    def changed_at(self, root: Path, table: str) -> datetime | None:
        from lakewrap.substrates.ducklake.freshness import changed_at

        lake = self.open(root, read_only=True)
        con = lake.connect()
        try:
            return changed_at(con, lake.alias, table)
        finally:
            lake.close(con)

    def maintainer(self, root: Path, config: ProjectConfig) -> DuckLakeMaintainer:
        from lakewrap.substrates.ducklake.maintain import DuckLakeMaintainer

        return DuckLakeMaintainer(root, config)
