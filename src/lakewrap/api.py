"""The Python API for other runtimes (orchestrators, workers, notebooks).

Example:
    >>> import lakewrap
    >>> project = lakewrap.Project("examples/shop")  # doctest: +SKIP
    >>> project.seed(); report = project.run(partition="2024-01-02")  # doctest: +SKIP
    >>> project.query("SELECT count(*) AS n FROM sales.orders").to_pylist()  # doctest: +SKIP
    [{'n': 40}]

    Write an Arrow table produced by any code with the same strategies and guarantees:

    >>> lakewrap.materialize(table, target="sales.orders", strategy="merge", unique_key="order_id",
    ...                      partition="2024-01-02", partition_key="created_at", lake="examples/shop")  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from lakewrap.compilers.artifacts import CompiledPlan
from lakewrap.errors import PlanError
from lakewrap.execute.executor import Result
from lakewrap.inspect import ModelStatus
from lakewrap.maintain import MaintainReport
from lakewrap.partitions import Grain
from lakewrap.spec import (
    AppendStrategy,
    DeleteInsertStrategy,
    MergeStrategy,
    ModelSpec,
    SnapshotStrategy,
    TableRef,
    TableStrategy,
    TimePartitioning,
)
from lakewrap.steps import RunReport, new_run_id, write_results
from lakewrap.substrates.registry import resolve

if TYPE_CHECKING:
    from lakewrap.execute.lake import Lake
    from lakewrap.provenance import Materialization, ReproduceReport
    from lakewrap.provenance_restore import RestoreResult

INPUT = "__lakewrap_input"


class Project:
    """A lakewrap project folder (``models/``, ``seeds/``, optional ``lakewrap.toml``)."""

    def __init__(self, path: str | Path | None = None) -> None:
        """``path``: the project folder; None (``Project()``) makes a programmatic project in a new
        temporary folder (``project.root``) holding its lake, whose models are registered functions."""
        if path is None:
            import tempfile

            path = tempfile.mkdtemp(prefix="lakewrap-project-")
            (Path(path) / "models").mkdir()
        self.root = Path(path).resolve()

    def register(self, fn: Any, **annotations: Any) -> ModelSpec:
        """Add the Python model ``fn(ctx)`` with the annotations of ``@lakewrap.model`` (which it may
        carry already), validated now as a model file is: a bad keyword raises here, located on the
        function's file and line (docs/python-models.md). Returns its spec; returns ``fn`` unchanged."""
        from lakewrap.pyfiles import register

        return register(self.root, fn, annotations)

    def compile(self, selectors: Sequence[str] = (), *, partition: str | None = None,
                now: datetime | None = None, as_of: str | None = None) -> list[CompiledPlan]:
        """The compiled plans of the selected models (see ``lakewrap compile``).

        ``as_of`` (a run id or snapshot id) pins every upstream read to what that run read.
        """
        from lakewrap.compile import compile_project

        if as_of is not None:
            from lakewrap.provenance import compile_as_of

            return compile_as_of(self.root, selectors, as_of=as_of, partition=partition, now=now)[0]

        return compile_project(self.root, selectors, partition=partition, now=now)

    def run(self, selectors: Sequence[str] = (), *, partition: str | None = None, start: str | None = None,
            end: str | None = None, full_refresh: bool = False, strict: bool = False,
            now: datetime | None = None, workers: int | None = None, executor: Any = "auto",
            scheduler: str | None = None, fail_fast: bool = False, stale: bool = False,
            reappend: bool = False, batch_size: int | None = None) -> RunReport:
        """Materialize the selected models (see ``lakewrap run``); failures are in the report.

        ``stale=True`` runs only the partitions whose upstream data changed since they were built
        (``lakewrap run --stale``, ``docs/maintenance.md``). An ``append`` partition already
        recorded is not run again (it is listed in ``report.not_rerun``) unless ``reappend=True``.

        ``executor`` is ``"auto"``, ``"thread"``, ``"process"``, ``"dask"`` (``scheduler`` = a
        Dask scheduler address, or a LocalCluster), or any callable ``fn(task) -> Result`` run once
        per (model, partition): see :mod:`lakewrap.workers`.
        """
        from lakewrap.runner import run_project

        return run_project(self.root, selectors, partition=partition, start=start, end=end,
                           full_refresh=full_refresh, strict=strict, now=now, workers=workers, executor=executor,
                           scheduler=scheduler, fail_fast=fail_fast, stale=stale, reappend=reappend,
                           batch_size=batch_size)

    def backfill(self, selectors: Sequence[str] = (), *, start: str, end: str, missing_only: bool = False,
                 now: datetime | None = None, workers: int | None = None, executor: Any = "auto",
                 scheduler: str | None = None, fail_fast: bool = False, reappend: bool = False,
                 batch_size: int | None = None) -> RunReport:
        """Every partition from ``start`` to ``end`` (see ``lakewrap backfill``); a separable model's
        partitions ``batch_size`` at a time (default: its ``batch=``)."""
        from lakewrap.runner import run_project

        return run_project(self.root, selectors, start=start, end=end, now=now, workers=workers, executor=executor,
                           scheduler=scheduler, fail_fast=fail_fast, missing_only=missing_only, command="backfill",
                           reappend=reappend, batch_size=batch_size)

    def resume(self, run_id: str, *, workers: int | None = None, executor: Any = "auto",
               scheduler: str | None = None) -> RunReport:
        """Re-run what run ``run_id`` has not committed (see ``lakewrap resume``)."""
        from lakewrap.scheduler import resume

        return resume(self.root, run_id, workers=workers, executor=executor, scheduler=scheduler)

    def seed(self) -> RunReport:
        """Load ``seeds/**/*.csv`` (see ``lakewrap seed``)."""
        from lakewrap.runner import seed_project

        return seed_project(self.root)

    def test(self, selectors: Sequence[str] = (), *, partition: str | None = None) -> Any:
        """Run the selected models' ``-- test`` lines against the published data (see ``lakewrap test``).

        Returns a :class:`lakewrap.datatests.TestReport` (``ok``, and per model each test's outcome,
        failing-row count and sample).
        """
        from lakewrap.datatests import run_tests

        return run_tests(self.root, selectors, partition=partition)

    def query(self, sql: str, *, as_of: str | None = None) -> Any:
        """One read-only SELECT against the lake, as a ``pyarrow.Table`` (Iceberg: ``as_of`` a run or snapshot id)."""
        from lakewrap.inspect import query_arrow

        return query_arrow(self.root, sql, as_of=as_of)

    def status(self, selectors: Sequence[str] = ()) -> list[ModelStatus]:
        """Per model: partitions, gaps, last run, failures (see ``lakewrap status``)."""
        from lakewrap.inspect import status

        return status(self.root, tuple(selectors))

    def maintain(self, selectors: Sequence[str] = (), *, dry_run: bool = False) -> MaintainReport:
        """Compact, expire snapshots, delete old and orphan files (see ``lakewrap maintain``)."""
        from lakewrap.maintain import maintain

        return maintain(self.root, tuple(selectors), dry_run=dry_run)

    def history(self, model: str) -> list[dict[str, Any]]:
        """The materializations of ``model`` with snapshot ids (see ``lakewrap history``)."""
        from lakewrap.inspect import history

        return history(self.root, model)

    # Provenance (DuckLake and Iceberg): lakewrap.provenance, docs/provenance.md

    def explain(self, snapshot_or_run: str | int) -> list[Materialization]:
        """What produced a snapshot, or what a run materialized (``lakewrap explain``)."""
        from lakewrap.provenance import explain

        return explain(self.root, str(snapshot_or_run))

    def reproduce(self, run_id: str, *, model: str | None = None,
                  partition: str | None = None) -> ReproduceReport:
        """Rebuild a run's materializations in scratch space and compare (``lakewrap reproduce``)."""
        from lakewrap.provenance import reproduce

        return reproduce(self.root, run_id, model=model, partition=partition)

    def restore(self, model: str, *, partition: str | None = None, to_run: str | None = None,
                to_snapshot: int | None = None, dry_run: bool = False) -> RestoreResult:
        """Put a partition (or table) back as of a run or snapshot, as a new commit (``lakewrap restore``)."""
        from lakewrap.provenance_restore import restore

        return restore(self.root, model, partition=partition, to_run=to_run, to_snapshot=to_snapshot,
                       dry_run=dry_run)


StrategyName = Literal["table", "delete+insert", "merge", "append", "snapshot"]


def _columns_of(data: Any) -> tuple[Any, tuple[str, ...]]:
    """An object DuckDB can scan, and its column names (Arrow, pandas, or a DuckDB relation)."""
    if hasattr(data, "fetch_arrow_table") and hasattr(data, "columns"):  # a DuckDB relation
        data = data.fetch_arrow_table()
    if hasattr(data, "schema") and hasattr(data.schema, "names"):
        return data, tuple(data.schema.names)
    if hasattr(data, "columns"):
        return data, tuple(str(c) for c in data.columns)
    raise PlanError(f"cannot materialize a {type(data).__name__}",
                    hint="pass a pyarrow Table, a pandas DataFrame or a DuckDB relation")


def materialize(
    data: Any,
    *,
    target: str,
    strategy: StrategyName,
    lake: str | Path | Lake = ".",
    partition: str | None = None,
    partition_key: str | None = None,
    grain: str = "daily",
    tz: str = "UTC",
    unique_key: str | Sequence[str] | None = None,
    dedupe_by: str | None = None,
    matched: Literal["update", "replace"] = "update",
    updated_at: str | None = None,
    check_cols: Sequence[str] | None = None,
    hard_deletes: Literal["ignore", "invalidate", "new_record"] = "ignore",
    now: datetime | None = None,
    run_id: str | None = None,
) -> Result:
    """Write ``data`` into ``target`` with a strategy, in one transaction, with lakewrap's state.

    The same compiler, guards and executor as a model run: a partitioned write refuses rows outside
    the partition's window, a merge refuses NULL or duplicate keys (or dedupes with ``dedupe_by``),
    and a failure writes nothing. A merge updates matched rows in place (``matched="update"``) or
    deletes them and inserts the data's rows (``"replace"``, as ``-- unique_key ... matched=replace``).
    Returns the :class:`Result`; raises nothing for data errors (check ``result.status``).
    """
    from lakewrap.compile import compile_plan
    from lakewrap.plan import make_plan

    scan, columns = _columns_of(data)
    schema, _, name = target.rpartition(".")
    keys = (unique_key,) if isinstance(unique_key, str) else tuple(unique_key or ())
    match strategy:
        case "table":
            strat: Any = TableStrategy()
        case "delete+insert":
            strat = DeleteInsertStrategy()
        case "append":
            strat = AppendStrategy()
        case "merge":
            if matched not in ("update", "replace"):
                raise PlanError(f"unknown matched `{matched}`",
                                hint='use matched="update" (the default: MERGE updates a matched row in place) or '
                                'matched="replace" (delete the matched rows, insert the data\'s)')
            strat = MergeStrategy(unique_key=keys, dedupe="latest_by" if dedupe_by else "error", dedupe_by=dedupe_by,
                                  matched=matched)
        case "snapshot":
            strat = SnapshotStrategy(strategy="timestamp" if updated_at else "check", unique_key=keys,
                                     updated_at=updated_at, check_cols=tuple(check_cols) if check_cols else
                                     (None if updated_at else "all"), hard_deletes=hard_deletes)
        case _:
            raise PlanError(f"unknown strategy `{strategy}`",
                            hint="use table, delete+insert, merge, append or snapshot")
    part = None
    if partition is not None or strategy == "delete+insert":
        if partition_key is None:
            raise PlanError("a partitioned write needs partition_key=<column>")
        part = TimePartitioning(grain=Grain(grain), key=partition_key, tz=tz)
    spec = ModelSpec(
        path=f"<materialize {target}>", name=name, target=TableRef(schema_name=schema or "main", name=name),
        materialized="snapshot" if strategy == "snapshot" else ("table" if strategy == "table" else "incremental"),
        strategy=strat, partition=part, sql="SELECT * FROM " + INPUT, body_line=1, output_columns=columns,
    )
    now = now or datetime.now(timezone.utc)
    if isinstance(lake, str | Path):  # a project folder; else an opened lake handle (``Lake.shared()``)
        from lakewrap.config import load_config

        root = Path(lake).resolve()
        config = load_config(root)
        substrate = resolve(config.lake)
        handle: Any = substrate.open(root, config=config)
    else:
        handle, substrate = lake, resolve(lake.config)
    plan = make_plan(spec, substrate=substrate.name, partition=partition, now=now)  # type: ignore[arg-type]
    compiled = compile_plan(plan)
    run_id = run_id or new_run_id(now)
    folder = handle.root / "target" / "run" / run_id
    con = handle.connect()
    try:
        result = substrate.run_input(substrate.materializer(handle, run_id, folder), con, compiled, INPUT, scan)
    finally:
        handle.close(con)
    report = RunReport(run_id=run_id, started_at=now.isoformat(), results=[result],
                       finished_at=datetime.now(timezone.utc).isoformat())
    write_results(handle.root, folder, report)
    return result
