"""Apache Iceberg, on either write path: ``iceberg`` (rows computed by DuckDB, committed by one
pyiceberg transaction whose snapshot summary carries the record) and ``iceberg-sql`` (DuckDB SQL
through DuckDB's Iceberg REST client, records in state tables). One catalog handle serves both.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lakewrap.config import IcebergLakeConfig
from lakewrap.substrates.protocol import Substrate, Transcript

if TYPE_CHECKING:
    from lakewrap.compilers.artifacts import CompiledPlan
    from lakewrap.compilers.base import Compiler
    from lakewrap.config import LakeConfig, ProjectConfig
    from lakewrap.execute.executor import GroupStep, Materializer, Result
    from lakewrap.execute.iceberg import IcebergLake
    from lakewrap.execute.retry import RetryPolicy
    from lakewrap.plan import Plan
    from lakewrap.provenance import Materialization, RunOrSnapshot
    from lakewrap.runlog import Store
    from lakewrap.spec import ModelSpec
    from lakewrap.substrates.iceberg.feed import IcebergFeed
    from lakewrap.substrates.iceberg.maintain import IcebergMaintainer
    from lakewrap.substrates.iceberg.provenance import IcebergProvenance
    from lakewrap.substrates.iceberg.run import Records, Seeder


def _records(lake: IcebergLake, target: str) -> list[dict[str, Any]]:
    """The materializations of ``target`` as the summaries or state rows hold them (the run's skips
    and commit look-ups read these fields)."""
    from lakewrap.substrates.iceberg.state import materializations_of

    return materializations_of(lake, target)


class Iceberg(Substrate):
    """Iceberg written through pyiceberg (``write_path = "pyiceberg"``, the default)."""

    name = "iceberg"
    config_class = IcebergLakeConfig
    transcript = Transcript(as_of="every upstream is a view at its pinned snapshot (the setup statements)",
                            lists_pins=True, shows_base=True)

    def defer_refusal(self, other: Substrate) -> str | None:
        """The pyiceberg write path defers to an Iceberg lake on either write path: a deferred read
        is a view of the scratch session over the other catalog's table at its pinned snapshot."""
        return None if isinstance(other, Iceberg) else (
            f"an Iceberg environment defers to Iceberg lakes only, not to substrate `{other.name}`")

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
                 drop_first: bool = False, inputs: dict[str, Any] | None = None,
                 provenance: dict[str, Any] | None = None) -> Result:
        from lakewrap.substrates.iceberg.reads import reads_of

        return materializer.materialize(con, compiled, reads=reads_of(spec),  # type: ignore[no-any-return]
                                        drop_first=drop_first, inputs=inputs, provenance=provenance)

    @contextmanager
    def python_reads(self, lake: Any, con: Any, spec: ModelSpec) -> Iterator[tuple[Any, Any, dict[str, Any]]]:
        """A scratch session with a view per read pinned at its current snapshot; the commit's
        own session pins them again (a commit between the two is a conflict only a writer outside
        the run can cause)."""
        from lakewrap.compilers.python import read

        if not self.probe_in_scratch:  # the SQL write path (IcebergSql): not built yet
            from lakewrap.errors import UnsupportedError

            raise UnsupportedError(f"{spec.path}: Python models do not run on Iceberg's DuckDB-SQL write path",
                                   hint='use write_path = "pyiceberg", or DuckLake (docs/python-models.md)')
        with lake.scratch(con, [str(u) for u in spec.all_upstreams]) as (cursor, _):
            yield cursor, lambda schema, name: cursor.sql(read(schema, name)), {}

    def run_input(self, materializer: Any, con: Any, compiled: CompiledPlan, name: str, data: Any) -> Result:
        return materializer.materialize(con, compiled, inputs={name: data})  # type: ignore[no-any-return]

    def resolve_outcome(self, lake: IcebergLake, con: Any, run_id: str, result: Result) -> Result:
        from lakewrap.substrates.iceberg.run import resolve_outcome

        return resolve_outcome(lake, run_id, result, _records)

    def step_records(self, lake: IcebergLake, con: Any) -> Records:
        from lakewrap.substrates.iceberg.run import Records

        return Records(lake, _records,
                       lambda project, chosen: self.stale(lake.root, project, chosen))

    def seeder(self, lake: IcebergLake, run_id: str, folder: Path) -> Seeder:
        from lakewrap.substrates.iceberg.commit import IcebergExecutor
        from lakewrap.substrates.iceberg.run import Seeder

        return Seeder(lake, IcebergExecutor(lake, run_id, folder))  # seeds commit through pyiceberg on both paths

    def runlog(self, lake: IcebergLake, con: Any) -> Store:
        from lakewrap.substrates.iceberg.run import runlog

        return runlog(lake)

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

    def feed(self, lake: IcebergLake, con: Any) -> IcebergFeed:
        from lakewrap.substrates.iceberg.feed import IcebergFeed

        return IcebergFeed(lake, con)

    def changed_at(self, root: Path, table: str) -> datetime | None:
        """The time of the table's current snapshot (the last commit that changed it)."""
        from datetime import timezone

        found = self.open(root, read_only=True).load(table)
        snap = found.current_snapshot() if found is not None else None
        return None if snap is None else datetime.fromtimestamp(snap.timestamp_ms / 1000, tz=timezone.utc)

    def maintainer(self, root: Path, config: ProjectConfig) -> IcebergMaintainer:
        from lakewrap.substrates.iceberg.maintain import IcebergMaintainer

        return IcebergMaintainer(root, config)


class IcebergSql(Iceberg):
    """Iceberg written by DuckDB SQL through a REST catalog (``write_path = "sql"``)."""

    name = "iceberg-sql"
    transcript = Transcript(setup_before_begin=True, shows_base=True, as_of="every upstream read is pinned with "
                            "AT (VERSION => n) (an Iceberg snapshot id per table)")
    probe_in_scratch = False  # the attached REST catalog reads a model's tables directly
    # one DuckDB transaction is one POST /v1/transactions/commit; a member's state row records its
    # upstreams' snapshot ids, which a member of the same open commit has not got: no chains
    group_commit = True
    group_chains = False

    def run_group(self, materializer: Any, con: Any, steps: list[GroupStep], *, group_id: str,
                  atomic: bool = False, seconds: float = 30.0, cancelled: Any = None) -> list[Result]:
        """Steps in one catalog transaction (:mod:`lakewrap.substrates.iceberg.sql_group`)."""
        from lakewrap.execute.group import Member, commit_group
        from lakewrap.substrates.iceberg.sql_group import transaction

        members = [Member.of(s, True) for s in steps]
        return commit_group(materializer, con, members, transaction, group_id=group_id, atomic=atomic,
                            seconds=seconds, cancelled=cancelled).results

    def defer_refusal(self, other: Substrate) -> str | None:
        """Refused: this write path's statements name every table in the attached REST catalog."""
        return ("deferring is not implemented on Iceberg's write path \"sql\": its statements name every "
                "table in the attached REST catalog (\"ice\".\"schema\".\"name\"), so a deferred read would "
                "change the statements that run, and DuckDB 1.5.5 creates no view in a REST catalog; "
                "give this environment write_path = \"pyiceberg\"")

    def compiler(self) -> Compiler:
        from lakewrap.compilers.iceberg_sql import IcebergSqlCompiler

        return IcebergSqlCompiler()

    def open(self, root: Path, *, config: ProjectConfig | None = None, read_only: bool = False) -> IcebergLake:
        from lakewrap.substrates.iceberg.lake import IcebergSqlLake

        return IcebergSqlLake.open(root, config=config, read_only=read_only)

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

    def provenance(self, root: Path) -> IcebergProvenance:
        from lakewrap.substrates.iceberg.provenance_sql import IcebergSqlProvenance

        return IcebergSqlProvenance(root)

    def watermark(self, lake: IcebergLake, target: str) -> datetime | None:
        from lakewrap.substrates.iceberg.run import state_watermark

        return state_watermark(lake, target)
