"""``lakewrap run --stale``: the materialized partitions whose inputs changed since they were built.

Each materialization records ``pins`` (the snapshot its transaction read: one DuckLake snapshot,
or one Iceberg snapshot per upstream table) and, for time partitions, the window it read (widened
by ``lookback``). A partition is stale when one of its model's upstream tables changed after that
pin -- as DuckLake's change feed (``ducklake_table_changes``) or an Iceberg snapshot diff
(:mod:`lakewrap.stale_iceberg`) shows -- and the changed row (inserted, deleted, or either image of
an updated row) falls in the partition's recorded window by the model's own window filter
(:mod:`lakewrap.compilers.stale`). Where that mapping cannot be derived the detection is
conservative: every materialized partition with an older pin is stale. Rebuilding a stale
partition of a selected upstream model makes the overlapping partitions of its selected
downstream models stale too. ``docs/maintenance.md`` lists the rules and their limits.

The rules above are :func:`find_stale`; a *feed* (:class:`DuckLakeFeed`, or
:class:`lakewrap.stale_iceberg.IcebergFeed`) answers the two substrate questions: the latest
materialization of each partition, and which of them a change of one upstream table touched.
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


@dataclass
class Latest:
    """The latest materialization of one partition (``partition`` None: an unpartitioned model)."""

    partition: str | None
    window_start: datetime | None
    window_end: datetime | None
    pin: int  # DuckLake: the lake snapshot it read
    pins: dict[str, int | None] = field(default_factory=dict)  # Iceberg: each upstream's snapshot (None: empty)


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


def latest(con: Any, target: str) -> list[Latest]:
    from lakewrap.compilers import stale as q

    rows = con.execute(q.latest_query(), {"target": target}).fetchall()
    return [Latest(r[0], r[1], r[2], int(r[3])) for r in rows if r[3] is not None]


def current_snapshot(con: Any, alias: str) -> int:
    from lakewrap.compilers import lake as q

    return int(con.execute(q.current_snapshot(alias)).fetchone()[0])


def _identity(con: Any, alias: str, table: str) -> tuple[str, int] | None:
    """The current table id of ``table`` and the snapshot that created it (None: not a lake table)."""
    from lakewrap.compilers import stale as q

    schema, name = table.split(".", 1)
    row = con.execute(q.table_identity(alias), {"schema": schema, "name": name}).fetchone()
    return None if row is None else (str(row[0]), int(row[1]))


def _altered_after(con: Any, alias: str, identity: tuple[str, int], since: int) -> int | None:
    """The last snapshot after ``since`` that altered table ``identity`` (a schema change), other
    than the one that created it (a partitioned table is created and laid out in one snapshot)."""
    from lakewrap.compilers import stale as q

    table_id, created = identity
    row = con.execute(q.altered_since(alias), {"since": since, "table_id": table_id}).fetchone()
    altered = None if row is None or row[0] is None else int(row[0])
    return None if altered == created else altered


CHANGE_KINDS = ("tables_inserted_into", "tables_deleted_from", "inlined_insert", "inlined_delete",
                "tables_altered", "tables_dropped")


@dataclass
class DuckLakeFeed:
    """DuckLake's change feed (``ducklake_table_changes``) from each pin up to snapshot ``until``;
    for a table re-created after a pin (``CREATE OR REPLACE``: a seed, a table model's rebuild), the
    rows that differ between the table at the pin and now, compared by content."""

    con: Any
    alias: str
    until: int
    _diffs: dict[tuple[str, int], Any] = field(default_factory=dict)

    def latest(self, target: str, whole_table: bool) -> list[Latest]:
        records = latest(self.con, target)
        if whole_table and records:  # unpartitioned or dynamic: the model's latest materialization
            last = max(records, key=lambda r: r.pin)
            records = [Latest(None, None, None, last.pin)]
        return records

    def touched(self, target: str, table: str, records: list[Latest], window: WindowFilter | None,
                time_part: bool) -> Iterable[tuple[str | None, str]]:
        since = min(r.pin for r in records)
        try:
            identity = _identity(self.con, self.alias, table)
            altered = _altered_after(self.con, self.alias, identity, since) if identity else None
        except Exception as exc:  # DuckLake's metadata tables unreadable: assume the worst
            for r in records:
                yield r.partition, f"{table}: cannot tell whether it was replaced ({exc})"
            return
        if altered is not None:
            for r in records:
                if r.pin < altered:
                    yield r.partition, f"{table} was altered at snapshot {altered}"
            records = [r for r in records if r.pin >= altered]
        created = identity[1] if identity else None
        recreated = [r for r in records if created is not None and r.pin < created]
        fresh = [r for r in records if created is None or r.pin >= created]
        if recreated:
            assert identity is not None
            yield from self._by_content(table, identity, recreated, window, time_part)
        if fresh:
            yield from self._by_feed(target, table, fresh, window, time_part)

    def _by_feed(self, target: str, table: str, records: list[Latest], window: WindowFilter | None,
                 time_part: bool) -> Iterable[tuple[str | None, str]]:
        """The records (all pinned on the current table) whose window a change-feed row touched."""
        from lakewrap.compilers import stale as q

        schema, name = table.split(".", 1)
        since = min(r.pin for r in records)
        try:
            rows = self.con.execute(q.touched_partitions(self.alias, schema, name, window),
                                    {"target": target, "since": since, "until": self.until}).fetchall()
        except Exception as exc:  # no change feed (not a lake table, gone, renamed column): conservative
            for r in records:
                yield r.partition, f"{table}: no usable change feed ({str(exc).strip().splitlines()[0]})"
            return
        how = "in its window" if window is not None and window.precise else "mapping not derivable: any change counts"
        touched = {r[0] for r in rows}
        for r in records:
            if (r.partition if time_part else None) in touched or (not time_part and rows):
                yield r.partition, f"{table} changed after snapshot {r.pin} ({how})"

    def _by_content(self, table: str, identity: tuple[str, int], records: list[Latest],
                    window: WindowFilter | None, time_part: bool) -> Iterable[tuple[str | None, str]]:
        """The records pinned before ``table`` was re-created whose window a row that differs
        between the table at the pin and now touches. Pins between the same two changes of the
        table read the same rows: one comparison per such state, skipped when the row count and
        the sum of the row hashes are equal."""
        states = self._states(table, sorted({r.pin for r in records}), identity[1])
        groups: list[tuple[int, list[Latest], Any]] = []
        for state in sorted(set(states.values())):
            group = [r for r in records if states[r.pin] == state]
            try:
                rows = self._diff(table, state)
            except Exception as exc:  # columns changed, or a version unreadable: conservative
                for r in group:
                    yield r.partition, f"{table} was re-created at snapshot {identity[1]}: {exc}"
                continue
            if rows is not None and rows.num_rows:
                groups.append((state, group, rows))
        yield from rows_touched(self.con, table, groups, window, time_part,
                                lambda pin: f"{table} was re-created at snapshot {identity[1]} with other rows")

    def _states(self, table: str, pins: list[int], created: int) -> dict[int, int]:
        """Each pin's table state: the last snapshot up to the pin that changed a table of that name."""
        from lakewrap.compilers import stale as q

        schema, name = table.split(".", 1)
        ids = {str(r[0]) for r in self.con.execute(q.table_ids(self.alias), {"schema": schema, "name": name})
               .fetchall()}
        changes = self.con.execute(q.snapshot_changes(self.alias), {"since": -1, "upto": pins[-1]}).fetchall()
        changed = [int(sid) for sid, kinds in changes
                   if any(ids.intersection(kinds.get(k) or ()) for k in CHANGE_KINDS)]
        out: dict[int, int] = {}
        for pin in pins:
            before = [s for s in changed if s <= pin]
            out[pin] = before[-1] if before else pin
        return out

    def _diff(self, table: str, state: int) -> Any:
        """The rows that differ between ``table`` at snapshot ``state`` and now (None: none);
        raises when they cannot be compared. Asked once per (table, state) per detection."""
        from lakewrap.compilers import stale as q

        key = (table.lower(), state)
        if key not in self._diffs:
            schema, name = table.split(".", 1)
            try:
                then = self.con.execute(q.describe_at(self.alias, schema, name, state)).fetchall()
                now = self.con.execute(q.describe_at(self.alias, schema, name, None)).fetchall()
                if [c[:2] for c in then] != [c[:2] for c in now]:
                    raise PlanError(f"its columns differ from snapshot {state}'s")
                digests = {self.con.execute(q.content_digest(self.alias, schema, name, v)).fetchone()
                           for v in (state, None)}
                self._diffs[key] = None if len(digests) == 1 else self.con.execute(
                    q.content_changes(self.alias, schema, name, state)).to_arrow_table()
            except Exception as exc:
                self._diffs[key] = exc
        found = self._diffs[key]
        if isinstance(found, Exception):
            raise found
        return found


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


def detect(con: Any, alias: str, project: Project, selected: Sequence[ModelSpec],
           until: int | None = None) -> dict[str, StaleModel]:
    """The stale partitions of each selected model of a DuckLake (in ``selected``'s DAG order).

    Example:
        >>> found = detect(con, "lake", project, project.select(["orders+"]))  # doctest: +SKIP
        >>> found["sales.orders"].values()  # doctest: +SKIP
        ['2024-01-02']
    """
    until = current_snapshot(con, alias) if until is None else until
    return find_stale(DuckLakeFeed(con, alias, until), project, selected)


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
    """:func:`find_stale` on the lake of the project at ``root``, DuckLake or Iceberg."""
    from lakewrap.config import load_config

    if load_config(root).lake.substrate == "iceberg":
        from lakewrap.stale_iceberg import detect_iceberg

        return detect_iceberg(root, project, selected)
    from lakewrap.execute.lake import Lake

    lake = Lake.open(root, read_only=True)
    con = lake.connect()
    try:
        return detect(con, lake.alias, project, selected)
    finally:
        lake.close(con)
