"""DuckLake: tables in a DuckLake catalog (DuckDB, SQLite or PostgreSQL), written by DuckDB SQL.

Records live in lakewrap's own tables in the catalog (``lakewrap.materializations``, the run log),
committed in the same transaction as the data.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lakewrap.config import DuckLakeLakeConfig
from lakewrap.substrates.protocol import Substrate

if TYPE_CHECKING:
    from lakewrap.compilers.base import Compiler
    from lakewrap.config import ProjectConfig
    from lakewrap.execute.executor import Result
    from lakewrap.execute.lake import Lake
    from lakewrap.execute.retry import RetryPolicy
    from lakewrap.plan import Plan
    from lakewrap.spec import ModelSpec
    from lakewrap.substrates.ducklake.feed import DuckLakeFeed
    from lakewrap.substrates.ducklake.maintain import DuckLakeMaintainer
    from lakewrap.substrates.ducklake.materialize import Executor


class DuckLake(Substrate):
    name = "ducklake"
    config_class = DuckLakeLakeConfig

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
        from lakewrap.runner import plan_model

        return plan_model(con, spec, partition, now)

    def resolve_outcome(self, lake: Lake, con: Any, run_id: str, result: Result) -> Result:
        from lakewrap.outcome import resolve

        return resolve(lake, con, run_id, result)

    def feed(self, lake: Lake, con: Any) -> DuckLakeFeed:
        from lakewrap.substrates.ducklake.feed import feed

        return feed(lake, con)

    def maintainer(self, root: Path, config: ProjectConfig) -> DuckLakeMaintainer:
        from lakewrap.substrates.ducklake.maintain import DuckLakeMaintainer

        return DuckLakeMaintainer(root, config)
