"""Apache Iceberg, on either write path: ``iceberg`` (rows computed by DuckDB, committed by one
pyiceberg transaction whose snapshot summary carries the record) and ``iceberg-sql`` (DuckDB SQL
through DuckDB's Iceberg REST client, records in state tables). One catalog handle serves both.
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
    from lakewrap.execute.executor import Result
    from lakewrap.execute.iceberg import IcebergLake
    from lakewrap.execute.retry import RetryPolicy
    from lakewrap.plan import Plan
    from lakewrap.project import Project
    from lakewrap.runlog import Store
    from lakewrap.spec import ModelSpec
    from lakewrap.stale import StaleModel
    from lakewrap.substrates.iceberg.run import Records, Seeder


class Iceberg(Substrate):
    """Iceberg written through pyiceberg (``write_path = "pyiceberg"``, the default)."""

    name = "iceberg"

    def compiler(self) -> Compiler:
        from lakewrap.compilers.iceberg import IcebergCompiler

        return IcebergCompiler()

    def open(self, root: Path, *, config: ProjectConfig | None = None, read_only: bool = False) -> IcebergLake:
        from lakewrap.execute.iceberg import IcebergLake

        return IcebergLake.open(root, config=config, read_only=read_only)

    def materializer(self, lake: IcebergLake, run_id: str, folder: Path, *, policy: RetryPolicy | None = None,
                     strict: bool = False) -> Any:
        from lakewrap.execute.iceberg_commit import IcebergExecutor
        from lakewrap.execute.retry import RetryPolicy

        return IcebergExecutor(lake, run_id, folder, policy=policy or RetryPolicy(), strict=strict)

    def watermark(self, lake: IcebergLake, target: str) -> datetime | None:
        """The latest watermark the target's commits recorded (dynamic partitions)."""
        from lakewrap.substrates.iceberg.run import summary_watermark

        return summary_watermark(lake, target)

    def plan_step(self, lake: IcebergLake, con: Any, spec: ModelSpec, partition: str | None, now: datetime) -> Plan:
        from lakewrap.spec import DynamicPartitioning
        from lakewrap.substrates.iceberg.run import plan_step

        mark = self.watermark(lake, str(spec.target)) if isinstance(spec.partition, DynamicPartitioning) else None
        return plan_step(lake, con, spec, partition, now, substrate=self.name, watermark=mark,  # type: ignore[arg-type]
                         scratch=self.probe_in_scratch)

    probe_in_scratch = True  # a SELECT * model's columns are probed over pinned views of its reads

    def run_step(self, materializer: Any, con: Any, spec: ModelSpec, compiled: CompiledPlan, *,
                 drop_first: bool = False) -> Result:
        from lakewrap.substrates.iceberg.run import reads_of

        return materializer.materialize(con, compiled, reads=reads_of(spec),  # type: ignore[no-any-return]
                                        drop_first=drop_first)

    def run_input(self, materializer: Any, con: Any, compiled: CompiledPlan, name: str, data: Any) -> Result:
        return materializer.materialize(con, compiled, inputs={name: data})  # type: ignore[no-any-return]

    def resolve_outcome(self, lake: IcebergLake, con: Any, run_id: str, result: Result) -> Result:
        from lakewrap.substrates.iceberg.run import resolve_outcome

        return resolve_outcome(lake, run_id, result, self.materializations)

    def step_records(self, lake: IcebergLake, con: Any) -> Records:
        from lakewrap.substrates.iceberg.run import Records

        return Records(lake, self.materializations,
                       lambda project, chosen: self.stale(lake.root, project, chosen))

    def seeder(self, lake: IcebergLake, run_id: str, folder: Path) -> Seeder:
        from lakewrap.execute.iceberg_commit import IcebergExecutor
        from lakewrap.substrates.iceberg.run import Seeder

        return Seeder(lake, IcebergExecutor(lake, run_id, folder))  # seeds commit through pyiceberg on both paths

    def runlog(self, lake: IcebergLake, con: Any) -> Store:
        from lakewrap.substrates.iceberg.run import runlog

        return runlog(lake)

    def materializations(self, lake: IcebergLake, target: str) -> list[dict[str, Any]]:
        from lakewrap.iceberg_state import materializations_of

        return materializations_of(lake, target)

    def stale(self, root: Path, project: Project, selected: Sequence[ModelSpec]) -> dict[str, StaleModel]:
        from lakewrap.stale_iceberg import detect_iceberg

        return detect_iceberg(root, project, selected)


class IcebergSql(Iceberg):
    """Iceberg written by DuckDB SQL through a REST catalog (``write_path = "sql"``)."""

    name = "iceberg-sql"
    probe_in_scratch = False  # the attached REST catalog reads a model's tables directly

    def compiler(self) -> Compiler:
        from lakewrap.compilers.iceberg_sql import IcebergSqlCompiler

        return IcebergSqlCompiler()

    def open(self, root: Path, *, config: ProjectConfig | None = None, read_only: bool = False) -> IcebergLake:
        from lakewrap.substrates.iceberg.lake import IcebergSqlLake

        return IcebergSqlLake.open(root, config=config, read_only=read_only)

    def materializer(self, lake: IcebergLake, run_id: str, folder: Path, *, policy: RetryPolicy | None = None,
                     strict: bool = False) -> Any:
        from lakewrap.execute.iceberg_sql import IcebergSqlExecutor
        from lakewrap.execute.retry import RetryPolicy

        return IcebergSqlExecutor(lake, run_id, folder, policy=policy or RetryPolicy(), strict=strict)

    def watermark(self, lake: IcebergLake, target: str) -> datetime | None:
        from lakewrap.substrates.iceberg.run import state_watermark

        return state_watermark(lake, target)
