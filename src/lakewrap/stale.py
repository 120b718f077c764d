"""``lakewrap run --stale``: the materialized partitions whose inputs changed since they were built.

Each materialization records ``pins`` (the snapshot its transaction read: one DuckLake snapshot,
or one Iceberg snapshot per upstream table) and, for time partitions, the window it read (widened
by ``lookback``). A partition is stale when one of its model's upstream tables changed after that
pin -- as DuckLake's change feed (``ducklake_table_changes``) or an Iceberg snapshot diff
shows -- and the changed row (inserted, deleted, or either image of
an updated row) falls in the partition's recorded window by the model's own window filter
(:mod:`lakewrap.compilers.stale`). Where that mapping cannot be derived the detection is
conservative: every materialized partition with an older pin is stale. Rebuilding a stale
partition of a selected upstream model makes the overlapping partitions of its selected
downstream models stale too. ``docs/maintenance.md`` lists the rules and their limits.

The rules above are :func:`find_stale`, substrate-neutral; a *feed* (:class:`Feed`), which each
substrate's change-feed role provides (:meth:`lakewrap.substrates.protocol.Substrate.feed`:
:mod:`lakewrap.substrates.ducklake.feed`, :mod:`lakewrap.substrates.iceberg.feed`), answers the two
substrate questions: the latest materialization of each partition, and which of them a change of
one upstream table touched.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from lakewrap.errors import PlanError
from lakewrap.partitions import Grain, parse_partition
from lakewrap.project import Project
from lakewrap.spec import ModelSpec, TimePartitioning, ViewStrategy

if TYPE_CHECKING:
    from lakewrap.compilers.stale import WindowFilter
    from lakewrap.substrates.protocol import LakeHandle


@dataclass
class Latest:
    """The latest materialization of one partition (``partition`` None: an unpartitioned model)."""

    partition: str | None
    window_start: datetime | None
    window_end: datetime | None
    pin: int  # DuckLake: the lake snapshot it read
    pins: dict[str, int | None] = field(default_factory=dict)  # Iceberg: each upstream's snapshot (None: empty)
    # Iceberg with ``defer``: the upstreams it read from another environment's catalog (not in ``pins``)
    deferred: tuple[str, ...] = ()
    # DuckLake group commit: the upstreams it read as its own transaction wrote them (``group_reads``),
    # and the snapshot that transaction committed (``own``): what that snapshot changed in the tables
    # it reads was written before it in its own transaction, so it read it (-1: not known)
    group_reads: tuple[str, ...] = ()
    own: int = -1
    run_id: str | None = None


class Feed(Protocol):
    """What :func:`find_stale` asks of a substrate."""

    def latest(self, target: str, whole_table: bool) -> list[Latest]:
        """The latest materialization of each partition of ``target`` (of the table when ``whole_table``)."""

    def touched(self, target: str, table: str, records: list[Latest], window: WindowFilter | None,
                time_part: bool) -> Iterable[tuple[str | None, str]]:
        """(partition, reason) for each of ``records`` a change of ``table`` after its pin touched:
        through ``window`` when it is precise and ``time_part``, any change otherwise; every record
        (conservatively) when the change cannot be read."""


@dataclass
class StaleModel:
    """One model's stale partitions, each with why it is stale."""

    target: str
    time_partitioned: bool
    partitions: dict[str | None, list[str]] = field(default_factory=dict)

    def add(self, partition: str | None, reason: str) -> None:
        reasons = self.partitions.setdefault(partition, [])
        if reason not in reasons and len(reasons) < 5:
            reasons.append(reason)

    def values(self) -> list[str | None]:
        if not self.time_partitioned:
            return [None] if self.partitions else []
        return [*sorted(p for p in self.partitions if p is not None)]

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target, "partitions": [{"partition": p, "reasons": r}
                                                      for p, r in sorted(self.partitions.items(), key=_order)]}


def _order(item: tuple[str | None, list[str]]) -> str:
    return item[0] or ""


def _is_view(spec: ModelSpec) -> bool:
    return isinstance(spec.strategy, ViewStrategy)


def rebuildable(spec: ModelSpec) -> bool:
    """Whether ``run --stale`` re-runs the model's stale partitions: not an ``append`` model, whose
    re-run would append the partition's rows a second time (``lakewrap status`` still lists them)."""
    return spec.strategy.kind != "append"


def _sources(project: Project, spec: ModelSpec) -> list[tuple[str, bool]]:
    """The tables ``spec`` reads, as (schema.name, read directly): views of the project are
    replaced by the tables they read (recursively), which are then mapped conservatively."""
    out: dict[str, bool] = {}
    todo: list[tuple[ModelSpec, bool]] = [(spec, True)]
    seen: set[str] = set()
    while todo:
        current, direct = todo.pop()
        for ref in current.all_upstreams:
            if ref.key == spec.target.key or ref.key in seen:
                continue
            seen.add(ref.key)
            model = project.models.get(ref.key)
            if model is not None and _is_view(model):
                todo.append((model, False))
                continue
            out[f"{ref.schema_name}.{ref.name}"] = direct and out.get(f"{ref.schema_name}.{ref.name}", True)
    return sorted(out.items())



def rows_touched(con: Any, table: str, groups: list[tuple[int, list[Latest], Any]], window: WindowFilter | None,
                 time_part: bool, reason: Callable[[int], str]) -> Iterable[tuple[str | None, str]]:
    """(partition, reason) for each record of ``groups`` -- (pin, records, changed rows as Arrow) --
    whose window one of its pin's changed rows satisfies (any changed row, when the window filter
    is not precise or the model not time-partitioned), with ``reason(pin)``. Shared by DuckLake's
    re-created tables and Iceberg's snapshot diffs."""
    import pyarrow as pa  # type: ignore[import-untyped]

    from lakewrap.compilers import stale as q

    precise = time_part and window is not None and window.precise
    how = "in its window" if precise else "mapping not derivable: any change counts"
    mapped = [(pin, r) for pin, group, _ in groups for r in group]
    if not precise:
        for pin, r in mapped:
            yield r.partition, f"{reason(pin)} ({how})"
        return
    if not mapped:
        return
    changed = [rows.append_column(q.PIN, pa.array([pin] * rows.num_rows, pa.int64())) for pin, _, rows in groups]
    latest = pa.table({
        "partition_value": pa.array([r.partition for _, r in mapped], pa.string()),
        "window_start": pa.array([r.window_start for _, r in mapped], pa.timestamp("us", tz="UTC")),
        "window_end": pa.array([r.window_end for _, r in mapped], pa.timestamp("us", tz="UTC")),
        "pin": pa.array([pin for pin, _ in mapped], pa.int64())})
    with registered(con, {LATEST_REL: latest, CHANGES_REL: pa.concat_tables(changed)}):
        try:
            touched = {row[0] for row in con.execute(q.touched_by_rows(LATEST_REL, CHANGES_REL, window)).fetchall()}
        except Exception as exc:  # a window the rows cannot be compared with: conservative
            for _, r in mapped:
                yield r.partition, f"{table}: its changes cannot be mapped ({str(exc).strip().splitlines()[0]})"
            return
    for pin, r in mapped:
        if r.partition in touched:
            yield r.partition, f"{reason(pin)} ({how})"


LATEST_REL, CHANGES_REL = "__lakewrap_latest", "__lakewrap_changes"


@contextmanager
def registered(con: Any, relations: dict[str, Any]) -> Iterator[None]:
    """``relations`` (Arrow tables) registered on ``con`` under their names for the block."""
    for name, data in relations.items():
        con.register(name, data)
    try:
        yield
    finally:
        for name in relations:
            con.unregister(name)



def find_stale(feed: Feed, project: Project, selected: Sequence[ModelSpec]) -> dict[str, StaleModel]:
    """The stale partitions of each selected model (in ``selected``'s DAG order), read from ``feed``."""
    from lakewrap.compilers import stale as q

    out: dict[str, StaleModel] = {}
    for spec in selected:
        target = spec.target.key
        time_part = isinstance(spec.partition, TimePartitioning)
        found = out[target] = StaleModel(str(spec.target), time_part)
        if _is_view(spec):
            continue  # a view reads its upstreams live: never stale
        records = feed.latest(str(spec.target), not time_part)
        if not records:
            continue  # never materialized: a gap (lakewrap status), not stale
        select = None
        if time_part and spec.wrapped:  # a literal model's statements are not mapped: conservative
            try:
                select = q.parse_select(spec.sql)
            except Exception:
                select = None
        sources = _sources(project, spec)
        filters = q.window_filters(select, [t for t, _ in sources]) if select is not None else {}
        for table, direct in sources:
            window = filters.get(table.lower()) if direct else None
            for partition, reason in feed.touched(str(spec.target), table, records, window, time_part):
                found.add(partition, reason)
        _propagate(project, spec, records, found, out)
    return out


def _propagate(project: Project, spec: ModelSpec, records: list[Latest], found: StaleModel,
               out: dict[str, StaleModel]) -> None:
    """A partition rebuilt upstream in this run makes the overlapping downstream partitions stale."""
    from lakewrap.plan import bind_time

    mine = spec.partition
    for up in _upstream_through_views(project, spec):
        theirs = out.get(up.target.key)
        if theirs is None or not theirs.partitions or up.target.key == spec.target.key or not rebuildable(up):
            continue
        for value in theirs.values():
            if isinstance(mine, TimePartitioning) and isinstance(up.partition, TimePartitioning) and value:
                window = bind_time(up.partition, value)  # what the upstream rebuild rewrites
                for r in records:
                    if r.window_start is not None and r.window_end is not None and (
                            r.window_start < window.end and window.start < r.window_end):
                        found.add(r.partition, f"upstream {theirs.target} partition {value} is rebuilt")
            else:
                for r in records:
                    found.add(r.partition, f"upstream {theirs.target} is rebuilt")


def _upstream_through_views(project: Project, spec: ModelSpec) -> list[ModelSpec]:
    """The models ``spec`` reads, each view among them replaced by the models it reads (recursively):
    a rebuild behind a view changes what the view returns."""
    out: dict[str, ModelSpec] = {}
    todo, seen = project.upstream_models(spec), {spec.target.key}
    while todo:
        up = todo.pop()
        if up.target.key in seen:
            continue
        seen.add(up.target.key)
        if _is_view(up):
            todo += project.upstream_models(up)
        else:
            out[up.target.key] = up
    return [out[k] for k in sorted(out)]


def restrict(found: dict[str, StaleModel], project: Project, start: str | None, end: str | None) -> None:
    """Keep only the stale partitions from ``start`` to ``end`` (inclusive) of time-partitioned models."""
    if start is None and end is None:
        return
    if start is None or end is None:
        raise PlanError("give both --start and --end", hint="e.g. --start 2024-01-01 --end 2024-01-31")
    for key, model in found.items():
        part = project.models[key].partition
        if not isinstance(part, TimePartitioning):
            continue
        grain = Grain(part.grain)
        lo, hi = parse_partition(grain, start, part.tz), parse_partition(grain, end, part.tz)
        model.partitions = {p: r for p, r in model.partitions.items()
                            if p is not None and lo <= parse_partition(grain, p, part.tz) <= hi}


def plan_stale(root: Any, project: Project, selected: Sequence[ModelSpec], *, partition: str | None,
               start: str | None, end: str | None, full_refresh: bool
               ) -> tuple[list[ModelSpec], list[list[str | None]], dict[str, StaleModel]]:
    """The models and partitions ``run --stale`` rebuilds: the stale ones, within ``start..end``."""
    if partition is not None:
        raise PlanError("--stale finds the partitions itself; it takes no --partition",
                        hint="drop --partition, or restrict with --start/--end")
    if full_refresh:
        raise PlanError("--stale and --full-refresh do not combine",
                        hint="--full-refresh rebuilds everything; drop one of them")
    found = detect_at(root, project, selected)
    restrict(found, project, start, end)
    chosen = [s for s in selected if found[s.target.key].values() and rebuildable(s)]
    return chosen, [found[s.target.key].values() for s in chosen], found


def detect_at(root: Path, project: Project, selected: Sequence[ModelSpec]) -> dict[str, StaleModel]:
    """:func:`find_stale` on the lake of the project at ``root``, through its substrate's change feed."""
    from lakewrap.config import load_config
    from lakewrap.substrates.registry import resolve

    return resolve(load_config(root).lake).stale(root, project, selected)


def detect_on(lake: LakeHandle, con: Any, project: Project, selected: Sequence[ModelSpec]) -> dict[str, StaleModel]:
    """:func:`find_stale` on an opened ``lake`` read through its connection ``con`` (``lakewrap status``
    reads the stale column on the connection it lists the partitions with).

    Example:
        >>> found = detect_on(lake, con, project, project.select(["orders+"]))  # doctest: +SKIP
        >>> found["sales.orders"].values()  # doctest: +SKIP
        ['2024-01-02']
    """
    from lakewrap.substrates.registry import resolve

    return find_stale(resolve(lake.config).feed(lake, con), project, selected)
