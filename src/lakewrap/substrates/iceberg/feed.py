"""Iceberg's change feed, on either write path: the rows each upstream's snapshots changed since a pin
(the substrate half of ``lakewrap run --stale``, :mod:`lakewrap.stale`).

Iceberg has no row-level change feed, but every snapshot lists the data files it added and removed
(manifest entries ``ADDED``/``DELETED`` carrying its snapshot id). A materialization pins one
snapshot of each upstream table: ``lakewrap.pins`` in its snapshot summary (:class:`IcebergFeed`,
the pyiceberg write path), or the ``pins`` column of the target's state table
(:class:`IcebergSqlFeed`, the SQL write path). For each distinct pin the files added and
removed by the snapshots after it, along the current snapshot's lineage, are netted by path (a
file added then removed again cancels); only those files are read, and the rows that differ
between the added and the removed ones (``EXCEPT ALL`` both ways: a copy-on-write rewrite of a
file that deletes one row leaves just that row) are the changed rows. They are mapped to
partitions by the model's own window filter, exactly as DuckLake's change feed is
(:func:`lakewrap.compilers.stale.touched_by_rows`); :func:`lakewrap.stale.find_stale` applies the
shared rules.

Commits that keep the content are skipped without reading a file: operation ``replace`` (the
Iceberg spec's compaction) and lakewrap's own compaction (summary ``lakewrap.maintain =
compact``). Skipping them is exact, not an approximation: their added rows equal their removed
rows, so the multiset difference is the same with or without them, provided the files they
replaced are still readable.

Conservative (every partition with that pin stale), with the reason in ``lakewrap status``:
the pinned snapshot is no longer in the current lineage (the table was replaced, rolled back, or
the snapshot expired), the schema changed after the pin, the model recorded no pin for the table,
or its files cannot be read. Delete files (merge-on-read) added or removed after the pin switch
that pin to a full diff of the two snapshots' rows (deletes applied by pyiceberg), which is exact
but reads the whole table twice.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from lakewrap.stale import Latest, registered, rows_touched
from lakewrap.substrates.iceberg.summary import COMPACT, MAINTAIN_KEY

if TYPE_CHECKING:
    from lakewrap.compilers.stale import WindowFilter
    from lakewrap.execute.iceberg import IcebergLake

NO_PIN = -1  # the pin of a table that had no snapshot (or did not exist) when the partition was built
ADDED, REMOVED = "__lakewrap_added", "__lakewrap_removed"


class Unreadable(Exception):
    """The rows changed since a pin cannot be told: every partition with that pin is stale."""


def content_preserving(snapshot: Any) -> bool:
    """A commit that rewrites files without changing the rows: Iceberg's ``replace`` operation, or
    a lakewrap compaction (summary ``lakewrap.maintain = compact``)."""
    summary = snapshot.summary
    if summary is None:
        return False
    return bool(summary.operation.value == "replace"
                or summary.additional_properties.get(MAINTAIN_KEY) == COMPACT)


@dataclass
class Diff:
    """The data files that differ between a pinned snapshot and the current one (by path)."""

    added: dict[str, Any] = field(default_factory=dict)
    removed: dict[str, Any] = field(default_factory=dict)
    deletes: bool = False  # a delete file was added or removed: diff the two snapshots' rows instead

    def add(self, path: str, data_file: Any) -> None:
        if self.removed.pop(path, None) is None:
            self.added[path] = data_file

    def remove(self, path: str, data_file: Any) -> None:
        if self.added.pop(path, None) is None:
            self.removed[path] = data_file


Entries = list[tuple[bool, str, Any]]  # one snapshot's own changes: (added, path, data file)


def file_diff(table: Any, pin: int | None, cache: dict[int, Entries | None] | None = None) -> Diff:
    """The files the snapshots after ``pin`` (None: every snapshot) added and removed, netted.

    ``cache`` keeps each snapshot's own changes (None: it added or removed a delete file) between
    calls for several pins of one table.
    """
    from pyiceberg.table.snapshots import ancestors_of

    meta = table.metadata
    current = table.current_snapshot()
    if current is None:
        if pin is None:
            return Diff()
        raise Unreadable(f"it has no current snapshot but was read at snapshot {pin}")
    lineage = list(ancestors_of(current, meta))[::-1]
    ids = [s.snapshot_id for s in lineage]
    if pin is not None and pin not in ids:
        raise Unreadable(f"snapshot {pin} is no longer in its history (replaced, rolled back or expired)")
    after = lineage[ids.index(pin) + 1:] if pin is not None else lineage
    schemas = {s.schema_id for s in after} | ({meta.snapshot_by_id(pin).schema_id} if pin is not None else set())
    if schemas - {meta.current_schema_id, None}:
        raise Unreadable(f"its schema changed after snapshot {pin}")
    cache = {} if cache is None else cache
    diff = Diff()
    for snap in after:
        if content_preserving(snap):
            continue
        if snap.snapshot_id not in cache:
            cache[snap.snapshot_id] = own_changes(table, snap)
        entries = cache[snap.snapshot_id]
        if entries is None:
            diff.deletes = True
            return diff
        for added, path, data_file in entries:
            if added:
                diff.add(path, data_file)
            else:
                diff.remove(path, data_file)
    return diff


def own_changes(table: Any, snap: Any) -> Entries | None:
    """The data files ``snap`` itself added and removed (None: it added or removed a delete file)."""
    from pyiceberg.manifest import DataFileContent, ManifestContent, ManifestEntryStatus

    out: Entries = []
    for manifest in snap.manifests(table.io):
        if manifest.added_snapshot_id != snap.snapshot_id:
            continue  # carried over from an earlier snapshot
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
            if entry.snapshot_id != snap.snapshot_id or entry.status == ManifestEntryStatus.EXISTING:
                continue
            if manifest.content == ManifestContent.DELETES or entry.data_file.content != DataFileContent.DATA:
                return None
            out.append((entry.status == ManifestEntryStatus.ADDED, entry.data_file.file_path, entry.data_file))
    return out


@dataclass
class IcebergFeed:
    """Snapshot diffs of an Iceberg lake's tables; ``con`` is a DuckDB session (for ``EXCEPT ALL``
    and the window join)."""

    lake: IcebergLake
    con: Any
    _tables: dict[str, Any] = field(default_factory=dict)
    _rows: dict[tuple[str, int], Any] = field(default_factory=dict)  # (table, pin) -> rows or Unreadable
    _files: dict[str, Any] = field(default_factory=dict)  # data file path -> its rows
    _snapshots: dict[str, dict[int, Entries | None]] = field(default_factory=dict)  # table -> own_changes

    def table(self, name: str) -> Any:
        key = name.lower()
        if key not in self._tables:
            self._tables[key] = self.lake.load(name)
        return self._tables[key]

    def latest(self, target: str, whole_table: bool) -> list[Latest]:
        """Each partition's last materialization: its window and its pin of every upstream table."""
        found: dict[str | None, Latest] = {}
        for record in self.records(target):  # commit order, oldest first
            found[record.partition] = record
        records = list(found.values())
        if whole_table and records:
            return [Latest(None, None, None, records[-1].pin, records[-1].pins, records[-1].deferred)]
        return records

    def records(self, target: str) -> Iterable[Latest]:
        """Every materialization of ``target`` in commit order, oldest first: from the snapshot
        summaries pyiceberg committed (the pin is the materialization's own snapshot)."""
        from lakewrap.substrates.iceberg.state import materializations

        for m in materializations(self.table(target)):
            props = m["props"]
            start, end = props.get("window_start") or None, props.get("window_end") or None
            yield Latest(m["partition"], datetime.fromisoformat(start) if start else None,
                         datetime.fromisoformat(end) if end else None, m["snapshot_id"], _pins(props.get("pins")),
                         _deferred(props.get("deferred")))

    def touched(self, target: str, table: str, records: list[Latest], window: WindowFilter | None,
                time_part: bool) -> Iterable[tuple[str | None, str]]:
        groups: list[tuple[int, list[Latest], Any]] = []
        deferred = [r for r in records if table.lower() in r.deferred]
        if deferred and self.table(table) is not None:  # read from another catalog, which this one now has
            for r in deferred:
                yield r.partition, f"{table}: read from another environment (defer); this catalog has it now"
        records = [r for r in records if table.lower() not in r.deferred]  # else: prod's commits are not seen
        for pin, group in _by_pin(records, table).items():
            if pin is None:
                for r in group:
                    yield r.partition, f"{table}: no pin recorded for it"
                continue
            try:
                rows = self.changed_rows(table, pin)
            except Unreadable as exc:
                for r in group:
                    yield r.partition, f"{table}: {exc}"
                continue
            if rows.num_rows:
                groups.append((pin, group, rows))
        yield from rows_touched(self.con, table, groups, window, time_part,
                                lambda pin: f"{table} changed after {_since(pin)}")

    def changed_rows(self, name: str, pin: int) -> Any:
        """The rows of ``name`` that differ between snapshot ``pin`` (``NO_PIN``: none) and now,
        as an Arrow table in the current schema; raises :class:`Unreadable`."""
        key = (name.lower(), pin)
        if key not in self._rows:
            try:
                self._rows[key] = self._changed_rows(name, None if pin == NO_PIN else pin)
            except Unreadable as exc:  # asked again by each model reading the table: answered once
                self._rows[key] = exc
        found = self._rows[key]
        if isinstance(found, Unreadable):
            raise found
        return found

    def _changed_rows(self, name: str, pin: int | None) -> Any:
        table = self.table(name)
        if table is None:
            if pin is None:
                return _empty()
            raise Unreadable("it is not a table of this catalog now")
        try:
            diff = file_diff(table, pin, self._snapshots.setdefault(name.lower(), {}))
            if diff.deletes:  # merge-on-read: the two snapshots' rows, deletes applied
                added = table.scan().to_arrow()
                removed = table.scan(snapshot_id=pin).to_arrow() if pin is not None else added.schema.empty_table()
            else:
                added, removed = self._read(table, diff.added), self._read(table, diff.removed)
        except Unreadable:
            raise
        except Exception as exc:  # a file gone (orphan cleanup), a type pyarrow cannot read, ...
            raise Unreadable(f"cannot read its changes ({str(exc).strip().splitlines()[0]})") from None
        if added.num_rows == 0 and removed.num_rows == 0:
            return added
        from lakewrap.compilers import stale as q

        try:
            removed = removed.select(added.column_names).cast(added.schema)
            with registered(self.con, {ADDED: added, REMOVED: removed}):
                return self.con.execute(q.net_changes(ADDED, REMOVED)).to_arrow_table()
        except Exception as exc:  # columns DuckDB cannot compare: conservative
            raise Unreadable(f"its rows cannot be compared ({str(exc).strip().splitlines()[0]})") from None

    def _read(self, table: Any, files: dict[str, Any]) -> Any:
        """The rows of ``files`` in the table's current schema (each file read once per feed)."""
        import pyarrow as pa  # type: ignore[import-untyped]
        from pyiceberg.expressions import AlwaysTrue
        from pyiceberg.io.pyarrow import ArrowScan, schema_to_pyarrow
        from pyiceberg.table import FileScanTask

        schema = table.metadata.schema()
        todo = [f for p, f in files.items() if p not in self._files]
        if todo:
            scan = ArrowScan(table.metadata, table.io, schema, AlwaysTrue())
            for f in todo:
                self._files[f.file_path] = scan.to_table([FileScanTask(f)])
        parts = [self._files[p] for p in files]
        if not parts:
            return schema_to_pyarrow(schema).empty_table()
        return pa.concat_tables(parts, promote_options="permissive")


class IcebergSqlFeed(IcebergFeed):
    """The feed of Iceberg written by DuckDB SQL: the materializations are rows of the target's state table."""

    def records(self, target: str) -> Iterable[Latest]:
        from lakewrap.substrates.iceberg.state import state_rows

        for row in state_rows(self.lake, target):  # commit order, oldest first
            yield Latest(row["partition_value"], row["window_start"], row["window_end"], 0, _pins(row["pins"]))


def _pins(text: Any) -> dict[str, int | None]:
    import json

    raw = json.loads(text) if isinstance(text, str) and text else {}
    return {str(k).lower(): (int(v) if v is not None else None) for k, v in raw.items()}


def _deferred(text: Any) -> tuple[str, ...]:
    """The tables a record read from another environment's catalog (``lakewrap.deferred``)."""
    import json

    raw = json.loads(text) if isinstance(text, str) and text else {}
    return tuple(str(t).lower() for t in raw.get("tables", []))


def _pin_of(record: Latest, table: str) -> int | None:
    """The snapshot of ``table`` the record read: ``NO_PIN`` for an empty or missing table, None
    when the materialization recorded no pin for it."""
    key = table.lower()
    if key not in record.pins:
        return None
    pin = record.pins[key]
    return NO_PIN if pin is None else pin


def _by_pin(records: Sequence[Latest], table: str) -> dict[int | None, list[Latest]]:
    out: dict[int | None, list[Latest]] = {}
    for r in records:
        out.setdefault(_pin_of(r, table), []).append(r)
    return out


def _since(pin: int | None) -> str:
    return "it was read empty" if pin == NO_PIN else f"snapshot {pin}"


def _empty() -> Any:
    import pyarrow as pa  # type: ignore[import-untyped]

    return pa.table({})
