"""The run roles of Iceberg (both write paths): planning a step, a seed's plan, a step's outcome
looked up, the records a run skips by, and the run log's DuckDB file.

The state of record is in the lake itself: each commit's snapshot summary (write path pyiceberg)
or the target's state table (write path sql), read through the substrate's ``materializations``.
The run log, which Iceberg has no place for, is a DuckDB file of its own (``[lake] runlog``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from lakewrap.compilers import iceberg as ice
from lakewrap.compilers.artifacts import CompiledPlan, CompiledStatement
from lakewrap.outcome import landed, needs_lookup, unanswered
from lakewrap.plan import Param, Substrate
from lakewrap.skips import appended
from lakewrap.spec import DynamicPartitioning
from lakewrap.steps import plan_model, probe_columns
from lakewrap.substrates.iceberg.reads import reads_of

if TYPE_CHECKING:
    from lakewrap.execute.executor import Result
    from lakewrap.execute.iceberg import IcebergLake
    from lakewrap.plan import Plan
    from lakewrap.project import Project
    from lakewrap.runlog import Store
    from lakewrap.seedfiles import Seed
    from lakewrap.spec import ModelSpec
    from lakewrap.stale import StaleModel
    from lakewrap.substrates.iceberg.commit import IcebergExecutor

Materializations = Callable[["IcebergLake", str], list[dict[str, Any]]]


def plan_step(lake: IcebergLake, con: Any, spec: ModelSpec, value: str | None, now: datetime, *,
              substrate: Substrate, watermark: datetime | None, scratch: bool) -> Plan:
    """The plan of one step: ``watermark`` recorded for a dynamic partition, the columns of a
    ``SELECT *`` merge or snapshot probed on ``con`` (in a scratch session pinning the model's
    reads when ``scratch``; write path sql reads the attached catalog directly)."""
    def probe(plan: Plan) -> tuple[str, ...]:
        if not scratch:
            return probe_columns(con, plan)
        reads = reads_of(spec)
        own = str(spec.target).lower()
        with lake.scratch(con, reads, deferrable=[r for r in reads if r.lower() != own]) as (cursor, _):
            return probe_columns(cursor, plan)

    mark = watermark if isinstance(spec.partition, DynamicPartitioning) else None
    return plan_model(spec, value, now, substrate=substrate, watermark=mark, probe=probe)


def summary_watermark(lake: IcebergLake, target: str) -> datetime | None:
    """The latest watermark recorded in the target's snapshot summaries (write path pyiceberg)."""
    from lakewrap.substrates.iceberg.summary import PREFIX

    table = lake.load(target)
    marks = [s.summary.additional_properties.get(PREFIX + "watermark") for s in table.snapshots()
             if s.summary is not None] if table is not None else []
    found = [datetime.fromisoformat(m) for m in marks if m]
    return max(found) if found else None


def state_watermark(lake: IcebergLake, target: str) -> datetime | None:
    """The latest watermark recorded in the target's state table (write path sql)."""
    from lakewrap.substrates.iceberg.state import state_rows

    found = [r["watermark"] for r in state_rows(lake, target) if r.get("watermark") is not None]
    return max(found) if found else None


def seed_plan(seed: Seed) -> CompiledPlan:
    """Replace ``schema.name`` with the rows of the seed's CSV file (one pyiceberg commit)."""
    statements = (CompiledStatement(role="stage", sql=ice.seed_stage(seed.format.read_options()),
                                    params={"path": Param(type="VARCHAR", value=str(seed.path))}),)
    commits = (ice.seed_commit(seed.target),)
    return CompiledPlan(model=seed.path.stem, path=seed.rel, target=seed.target, strategy="seed",
                        substrate="iceberg", write_path="pyiceberg", window=None, idempotent=True,
                        idempotent_note="a re-run replaces the table's content", statements=statements,
                        sql_sha256=CompiledPlan.digest(statements, commits), commits=commits)


class Seeder:
    """``lakewrap seed`` on Iceberg, on either write path: DuckDB reads each CSV file on a plain
    session of the lake, one pyiceberg commit replaces the table."""

    def __init__(self, lake: IcebergLake, executor: IcebergExecutor) -> None:
        self.lake, self.executor = lake, executor

    def connect(self) -> Any:
        from lakewrap.execute.iceberg import IcebergLake

        return IcebergLake.connect(self.lake)  # the pyiceberg write path's session, also under write path sql

    def plan(self, seed: Seed) -> CompiledPlan:
        return seed_plan(seed)

    def loaded(self, con: Any, target: str) -> tuple[str, str] | None:
        """(``sql_sha256``, ``seed_sha256``) in the summary of the table's current snapshot when a
        lakewrap seed commit made it (None: another commit came after, or no table): seeds commit
        through pyiceberg on both write paths, so the summary holds the record."""
        from lakewrap.substrates.iceberg.summary import PREFIX

        table = self.lake.load(target)
        snap = table.current_snapshot() if table is not None else None
        props = snap.summary.additional_properties if snap is not None and snap.summary is not None else {}
        if props.get(PREFIX + "strategy") != "seed" or props.get(PREFIX + "target") != target:
            return None
        sha = props.get(PREFIX + "seed_sha256")
        return (props.get(PREFIX + "sql_sha256", ""), str(json.loads(sha))) if sha else None

    def materialize(self, con: Any, compiled: CompiledPlan, *, provenance: dict[str, Any] | None = None) -> Result:
        return self.executor.materialize(con, compiled, provenance=provenance)


def resolve_outcome(lake: IcebergLake, run_id: str, result: Result, materializations: Materializations) -> Result:
    """``result`` as the lake has it (:mod:`lakewrap.outcome`): the target's commits carrying run
    ``run_id`` and the step's partition."""
    if not needs_lookup(result):
        return result
    try:
        found = [m for m in materializations(lake, result.target)
                 if m["run_id"] == run_id and (m["partition"] or None) == result.partition]
    except Exception as exc:
        return unanswered(result, exc, lake.redact)
    if not found:
        return result
    m = found[-1]
    return landed(result, (m["rows_inserted"], m["rows_updated"], m["rows_deleted"]), m["snapshot_id"])


class Records:
    """What a run skips by (:mod:`lakewrap.skips`), read from the lake's own records."""

    def __init__(self, lake: IcebergLake, materializations: Materializations,
                 stale: Callable[[Project, Sequence[ModelSpec]], dict[str, StaleModel]]) -> None:
        self.lake, self._of, self._stale = lake, materializations, stale

    def latest(self, target: str) -> dict[str | None, tuple[str, str]]:
        """partition → (``sql_sha256``, run id) of its latest materialization."""
        return {m["partition"] or None: (m["sql_sha256"], m["run_id"] or "") for m in self._of(self.lake, target)}

    def appended(self, target: str) -> dict[str, set[str]]:
        return appended((m["partition"] or None, bool(m["full_refresh"]), m["run_id"] or "")
                        for m in self._of(self.lake, target))

    def stale(self, project: Project, chosen: Sequence[ModelSpec]) -> dict[str, StaleModel]:
        return self._stale(project, chosen)


def runlog(lake: IcebergLake) -> Store:
    """The run log's own DuckDB file (``[lake] runlog``, default beside the embedded catalog)."""
    from lakewrap.runlog import DuckDBFileStore

    return DuckDBFileStore(lake.runlog_path())
