"""Apache Iceberg, on either write path: ``iceberg`` (rows computed by DuckDB, committed by one
pyiceberg transaction whose snapshot summary carries the record) and ``iceberg-sql`` (DuckDB SQL
through DuckDB's Iceberg REST client, records in state tables). One catalog handle serves both.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lakewrap.config import IcebergLakeConfig
from lakewrap.substrates.protocol import Substrate

if TYPE_CHECKING:
    from lakewrap.compilers.base import Compiler
    from lakewrap.config import ProjectConfig
    from lakewrap.execute.executor import Materializer, Result
    from lakewrap.execute.iceberg import IcebergLake
    from lakewrap.execute.retry import RetryPolicy
    from lakewrap.plan import Plan
    from lakewrap.spec import ModelSpec
    from lakewrap.substrates.iceberg.feed import IcebergFeed
    from lakewrap.substrates.iceberg.maintain import IcebergMaintainer


class Iceberg(Substrate):
    """Iceberg written through pyiceberg (``write_path = "pyiceberg"``, the default)."""

    name = "iceberg"
    config_class = IcebergLakeConfig

    def compiler(self) -> Compiler:
        from lakewrap.compilers.iceberg import IcebergCompiler

        return IcebergCompiler()

    def open(self, root: Path, *, config: ProjectConfig | None = None, read_only: bool = False) -> IcebergLake:
        from lakewrap.execute.iceberg import IcebergLake

        return IcebergLake.open(root, config=config, read_only=read_only)

    def materializer(self, lake: IcebergLake, run_id: str, folder: Path, *, policy: RetryPolicy | None = None,
                     strict: bool = False) -> Materializer:
        from lakewrap.execute.retry import RetryPolicy
        from lakewrap.substrates.iceberg.commit import IcebergExecutor

        return IcebergExecutor(lake, run_id, folder, policy=policy or RetryPolicy(), strict=strict)

    def plan_step(self, lake: IcebergLake, con: Any, spec: ModelSpec, partition: str | None, now: datetime) -> Plan:
        from lakewrap.iceberg_run import plan_model

        return plan_model(lake, con, spec, partition, now)

    def resolve_outcome(self, lake: IcebergLake, con: Any, run_id: str, result: Result) -> Result:
        from lakewrap.outcome import resolve_iceberg

        return resolve_iceberg(lake, run_id, result)

    def materializations(self, lake: IcebergLake, target: str) -> list[dict[str, Any]]:
        from lakewrap.iceberg_state import materializations_of

        return materializations_of(lake, target)

    def feed(self, lake: IcebergLake, con: Any) -> IcebergFeed:
        from lakewrap.substrates.iceberg.feed import IcebergFeed

        return IcebergFeed(lake, con)

    def maintainer(self, root: Path, config: ProjectConfig) -> IcebergMaintainer:
        from lakewrap.substrates.iceberg.maintain import IcebergMaintainer

        return IcebergMaintainer(root, config)


class IcebergSql(Iceberg):
    """Iceberg written by DuckDB SQL through a REST catalog (``write_path = "sql"``)."""

    name = "iceberg-sql"

    def compiler(self) -> Compiler:
        from lakewrap.compilers.iceberg_sql import IcebergSqlCompiler

        return IcebergSqlCompiler()

    def materializer(self, lake: IcebergLake, run_id: str, folder: Path, *, policy: RetryPolicy | None = None,
                     strict: bool = False) -> Materializer:
        from lakewrap.execute.retry import RetryPolicy
        from lakewrap.substrates.iceberg.sql_write import IcebergSqlExecutor

        return IcebergSqlExecutor(lake, run_id, folder, policy=policy or RetryPolicy(), strict=strict)

    def feed(self, lake: IcebergLake, con: Any) -> IcebergFeed:
        from lakewrap.substrates.iceberg.feed import IcebergSqlFeed

        return IcebergSqlFeed(lake, con)

    def maintainer(self, root: Path, config: ProjectConfig) -> IcebergMaintainer:
        """Refused: the run records of this write path derive their snapshot ids from each table's
        lineage, which a compaction commit would shift."""
        from lakewrap.errors import UnsupportedError

        raise UnsupportedError(
            "lakewrap maintain does not run on Iceberg tables written by DuckDB SQL (write_path = \"sql\")",
            hint="its run records derive their snapshot ids from each table's lineage, which a compaction "
            "commit would shift; pyiceberg's table.maintenance.expire_snapshots() expires snapshots (deleting "
            "no file); `lakewrap maintain` runs on the pyiceberg write path (docs/maintenance.md)",
        )
