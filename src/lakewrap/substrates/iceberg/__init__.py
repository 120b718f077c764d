"""Apache Iceberg, on either write path: ``iceberg`` (rows computed by DuckDB, committed by one
pyiceberg transaction whose snapshot summary carries the record) and ``iceberg-sql`` (DuckDB SQL
through DuckDB's Iceberg REST client, records in state tables). One catalog handle serves both.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lakewrap.substrates.protocol import Substrate, Transcript

if TYPE_CHECKING:
    from lakewrap.compilers.base import Compiler
    from lakewrap.config import LakeConfig, ProjectConfig
    from lakewrap.execute.executor import Result
    from lakewrap.execute.iceberg import IcebergLake
    from lakewrap.execute.retry import RetryPolicy
    from lakewrap.plan import Plan
    from lakewrap.project import Project
    from lakewrap.provenance import Materialization, RunOrSnapshot
    from lakewrap.spec import ModelSpec
    from lakewrap.stale import StaleModel
    from lakewrap.substrates.iceberg.provenance import IcebergProvenance


class Iceberg(Substrate):
    """Iceberg written through pyiceberg (``write_path = "pyiceberg"``, the default)."""

    name = "iceberg"
    transcript = Transcript(as_of="every upstream is a view at its pinned snapshot (the setup statements)",
                            lists_pins=True, shows_base=True)

    def compiler(self) -> Compiler:
        from lakewrap.compilers.iceberg import IcebergCompiler

        return IcebergCompiler()

    def open(self, root: Path, *, config: ProjectConfig | None = None, read_only: bool = False) -> IcebergLake:
        from lakewrap.execute.iceberg import IcebergLake

        return IcebergLake.open(root, config=config, read_only=read_only)

    def materializer(self, lake: IcebergLake, run_id: str, folder: Path, *, policy: RetryPolicy | None = None,
                     strict: bool = False) -> Any:
        from lakewrap.execute.iceberg_commit import IcebergExecutor

        return IcebergExecutor(lake, run_id, folder, strict=strict)

    def plan_step(self, lake: IcebergLake, con: Any, spec: ModelSpec, partition: str | None, now: datetime) -> Plan:
        from lakewrap.iceberg_run import plan_model

        return plan_model(lake, con, spec, partition, now)

    def resolve_outcome(self, lake: IcebergLake, con: Any, run_id: str, result: Result) -> Result:
        from lakewrap.outcome import resolve_iceberg

        return resolve_iceberg(lake, run_id, result)

    def materializations(self, lake: IcebergLake, target: str) -> list[Materialization]:
        from lakewrap.substrates.iceberg.state import typed_materializations

        return typed_materializations(lake, target)

    def query(self, root: Path, text: str, as_of: RunOrSnapshot | None, fetch: Callable[[Any], Any]) -> Any:
        from lakewrap.substrates.iceberg.state import query_cursor

        return query_cursor(root, text, as_of, fetch)

    def file_sandbox(self, root: Path) -> bool:
        # a rest or glue catalog: no file sandbox on its connections (docs/security.md)
        return self.open(root.resolve(), read_only=True).sandbox() is not None

    @contextmanager
    def test_session(self, lake: IcebergLake, con: Any, spec: ModelSpec) -> Iterator[Any]:
        """A scratch session where the target and the tables the model reads are views at their
        current snapshots (as during ``run``, minus the write)."""
        from lakewrap.substrates.iceberg.reads import reads_of

        with lake.scratch(con, (*reads_of(spec), str(spec.target))) as (cursor, _):
            yield cursor

    def shell_config(self, root: Path) -> LakeConfig:
        from lakewrap.errors import ConfigError, Location

        raise ConfigError("`lakewrap shell` opens DuckLake lakes only", location=Location("lakewrap.toml"),
                          hint="on Iceberg, read the tables with `lakewrap query` or a pyiceberg catalog "
                          "(docs/iceberg.md, \"Catalogs\")")

    def provenance(self, root: Path) -> IcebergProvenance:
        from lakewrap.substrates.iceberg.provenance import IcebergProvenance

        return IcebergProvenance(root)

    def stale(self, root: Path, project: Project, selected: Sequence[ModelSpec]) -> dict[str, StaleModel]:
        from lakewrap.stale_iceberg import detect_iceberg

        return detect_iceberg(root, project, selected)


class IcebergSql(Iceberg):
    """Iceberg written by DuckDB SQL through a REST catalog (``write_path = "sql"``)."""

    name = "iceberg-sql"
    transcript = Transcript(setup_before_begin=True, shows_base=True, as_of="every upstream read is pinned with "
                            "AT (VERSION => n) (an Iceberg snapshot id per table)")

    def compiler(self) -> Compiler:
        from lakewrap.compilers.iceberg_sql import IcebergSqlCompiler

        return IcebergSqlCompiler()

    def materializer(self, lake: IcebergLake, run_id: str, folder: Path, *, policy: RetryPolicy | None = None,
                     strict: bool = False) -> Any:
        from lakewrap.execute.iceberg_sql import IcebergSqlExecutor

        return IcebergSqlExecutor(lake, run_id, folder, strict=strict)

    def provenance(self, root: Path) -> IcebergProvenance:
        from lakewrap.substrates.iceberg.provenance_sql import IcebergSqlProvenance

        return IcebergSqlProvenance(root)
