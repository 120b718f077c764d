"""DuckLake's change feed: the substrate half of ``lakewrap run --stale`` (:mod:`lakewrap.stale`).

A DuckLake materialization pins the one lake snapshot its transaction read. :class:`DuckLakeFeed`
answers :class:`lakewrap.stale.Feed`'s two questions from the catalog: the latest materialization
of each partition (``lakewrap.materializations``), and which of them a change of one upstream
table after the pin touched -- through DuckLake's change feed (``ducklake_table_changes``), or, for
a table re-created after the pin (``CREATE OR REPLACE``), through the rows that differ between the
table at the pin and now. :func:`lakewrap.stale.find_stale` applies the shared rules.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from lakewrap.errors import PlanError
from lakewrap.execute.binding import inline
from lakewrap.stale import Latest, StaleModel, find_stale, rows_touched

if TYPE_CHECKING:
    from lakewrap.compilers.stale import WindowFilter
    from lakewrap.execute.lake import Lake
    from lakewrap.project import Project
    from lakewrap.spec import ModelSpec


def latest(con: Any, alias: str, target: str) -> list[Latest]:
    from lakewrap.compilers import stale as q

    rows = con.execute(*inline(q.latest_query(), {"target": target})).fetchall()
    out = [Latest(r[0], r[1], r[2], int(r[3]), group_reads=tuple(t.lower() for t in r[8] or ()), run_id=r[7])
           for r in rows if r[3] is not None]
    if any(r.group_reads for r in out):  # read inside a group commit: where that commit landed
        own = {(run, part): int(snap) for run, part, snap in
               con.execute(*inline(q.member_commits(alias), {"target": target})).fetchall()}
        out = [replace(r, own=own.get((r.run_id, r.partition), -1)) if r.group_reads else r for r in out]
    return out


def current_snapshot(con: Any, alias: str) -> int:
    from lakewrap.compilers import lake as q

    return int(con.execute(q.current_snapshot(alias)).fetchone()[0])


def current_identity(con: Any, alias: str, table: str) -> tuple[str, int] | None:
    """The current table id of ``table`` and the snapshot that created it (None: not a lake table)."""
    from lakewrap.compilers import stale as q

    schema, name = table.split(".", 1)
    row = con.execute(*inline(q.table_identity(alias), {"schema": schema, "name": name})).fetchone()
    return None if row is None else (str(row[0]), int(row[1]))


def _altered_after(con: Any, alias: str, identity: tuple[str, int], since: int) -> int | None:
    """The last snapshot after ``since`` that altered table ``identity`` (a schema change), other
    than the one that created it (a partitioned table is created and laid out in one snapshot)."""
    from lakewrap.compilers import stale as q

    table_id, created = identity
    row = con.execute(*inline(q.altered_since(alias), {"since": since, "table_id": table_id})).fetchone()
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
        records = latest(self.con, self.alias, target)
        if whole_table and records:  # unpartitioned or dynamic: the model's latest materialization
            last = max(records, key=lambda r: r.pin)
            records = [replace(last, partition=None, window_start=None, window_end=None)]
        return records

    def touched(self, target: str, table: str, records: list[Latest], window: WindowFilter | None,
                time_part: bool) -> Iterable[tuple[str | None, str]]:
        # a change in a record's own commit is one its group wrote before it, which it read
        # (Latest.own; docs/running.md, "Group commit and --atomic")
        since = min(r.pin for r in records)
        try:
            identity = current_identity(self.con, self.alias, table)
            altered = _altered_after(self.con, self.alias, identity, since) if identity else None
        except Exception as exc:  # DuckLake's metadata tables unreadable: assume the worst
            for r in records:
                yield r.partition, f"{table}: cannot tell whether it was replaced ({exc})"
            return
        if altered is not None:
            for r in records:
                if r.pin < altered != r.own:
                    yield r.partition, f"{table} was altered at snapshot {altered}"
            records = [r for r in records if r.pin >= altered or altered == r.own]
        created = identity[1] if identity else None
        recreated = [r for r in records if created is not None and r.pin < created != r.own]
        gone = {id(r) for r in recreated}
        fresh = [r for r in records if id(r) not in gone]
        if recreated:
            assert identity is not None
            yield from self._by_content(table, identity, recreated, window, time_part)
        if fresh:  # the feed of the current table, from its creation at the earliest
            yield from self._by_feed(target, table, fresh, window, time_part, created)

    def _by_feed(self, target: str, table: str, records: list[Latest], window: WindowFilter | None,
                 time_part: bool, created: int | None = None) -> Iterable[tuple[str | None, str]]:
        """The records (all pinned on the current table) whose window a change-feed row touched."""
        from lakewrap.compilers import stale as q

        schema, name = table.split(".", 1)
        how = "in its window" if window is not None and window.precise else "mapping not derivable: any change counts"
        for own in sorted({r.own for r in records}):  # one query per own commit (usually one or two)
            mine = [r for r in records if r.own == own]
            since = max(min(r.pin for r in mine), -1 if created is None else created)
            params = {"target": target, "since": since, "until": self.until, "own": own}
            try:
                rows = self.con.execute(*inline(q.touched_partitions(self.alias, schema, name, window), params)
                                        ).fetchall()
            except Exception as exc:  # no change feed (not a lake table, gone, renamed column): conservative
                for r in mine:
                    yield r.partition, f"{table}: no usable change feed ({str(exc).strip().splitlines()[0]})"
                continue
            touched = {r[0] for r in rows}
            for r in mine:
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
        ids = {str(r[0]) for r in self.con.execute(*inline(q.table_ids(self.alias), {"schema": schema, "name": name}))
               .fetchall()}
        changes = self.con.execute(*inline(q.snapshot_changes(self.alias), {"since": -1, "upto": pins[-1]})).fetchall()
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


def detect(con: Any, alias: str, project: Project, selected: Sequence[ModelSpec],
           until: int | None = None) -> dict[str, StaleModel]:
    """The stale partitions of each selected model of a DuckLake (in ``selected``'s DAG order), read
    through ``con`` up to snapshot ``until`` (None: the current one).

    Example:
        >>> found = detect(con, "lake", project, project.select(["orders+"]))  # doctest: +SKIP
        >>> found["sales.orders"].values()  # doctest: +SKIP
        ['2024-01-02']
    """
    until = current_snapshot(con, alias) if until is None else until
    return find_stale(DuckLakeFeed(con, alias, until), project, selected)


def feed(lake: Lake, con: Any) -> DuckLakeFeed:
    """The change feed of ``lake`` read through ``con``, up to the lake's current snapshot."""
    return DuckLakeFeed(con, lake.alias, current_snapshot(con, lake.alias))
