"""DuckLake: tables in a DuckLake catalog (DuckDB, SQLite or PostgreSQL), written by DuckDB SQL.

Records live in lakewrap's own tables in the catalog (``lakewrap.materializations``, the run log),
committed in the same transaction as the data.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lakewrap.substrates.protocol import Substrate

if TYPE_CHECKING:
    from lakewrap.compilers.artifacts import CompiledPlan
    from lakewrap.compilers.base import Compiler
    from lakewrap.config import ProjectConfig
    from lakewrap.execute.executor import Executor, Result
    from lakewrap.execute.lake import Lake
    from lakewrap.execute.retry import RetryPolicy
    from lakewrap.plan import Plan
    from lakewrap.project import Project
    from lakewrap.runlog import Store
    from lakewrap.spec import ModelSpec
    from lakewrap.stale import StaleModel
    from lakewrap.substrates.ducklake.run import Records, Seeder


class DuckLake(Substrate):
    name = "ducklake"

    def compiler(self) -> Compiler:
        from lakewrap.compilers.ducklake import DuckLakeCompiler

        return DuckLakeCompiler()

    def open(self, root: Path, *, config: ProjectConfig | None = None, read_only: bool = False) -> Lake:
        from lakewrap.execute.lake import Lake

        return Lake.open(root, config=config, read_only=read_only)

    def materializer(self, lake: Lake, run_id: str, folder: Path, *, policy: RetryPolicy | None = None,
                     strict: bool = False) -> Executor:
        from lakewrap.execute.executor import Executor
        from lakewrap.execute.retry import RetryPolicy

        return Executor(lake, run_id, folder, policy=policy or RetryPolicy(), strict=strict)

    def plan_step(self, lake: Lake, con: Any, spec: ModelSpec, partition: str | None, now: datetime) -> Plan:
        from lakewrap.substrates.ducklake.run import plan_step

        return plan_step(con, spec, partition, now)

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

        return Seeder(lake, self.materializer(lake, run_id, folder))

    def runlog(self, lake: Lake, con: Any) -> Store:
        from lakewrap.substrates.ducklake.run import runlog

        return runlog(lake, con)

    def stale(self, root: Path, project: Project, selected: Sequence[ModelSpec]) -> dict[str, StaleModel]:
        from lakewrap.stale import detect

        lake = self.open(root, read_only=True)
        con = lake.connect()
        try:
            return detect(con, lake.alias, project, selected)
        finally:
            lake.close(con)
