"""``lakewrap maintain`` on an Iceberg lake written by pyiceberg: the substrate half of :mod:`lakewrap.maintain`.

pyiceberg 0.12 offers only ``table.maintenance.expire_snapshots()``, which removes snapshots from
the metadata and deletes no file. lakewrap builds the rest from the table metadata, per table:

1. **Compaction** of the selected models' tables: in each partition (of the current spec), the
   data files smaller than ``write.target-file-size-bytes`` are merged when there are at least
   two, in one commit per table: an ``overwrite`` (pyiceberg 0.12 cannot write Iceberg's
   ``replace``) whose summary says ``lakewrap.maintain = compact`` and has no
   ``lakewrap.commit_id``: it is not a materialization and changes no row. Files with delete
   files attached are left alone (pyiceberg writes none; another engine's would need merging).
2. **Expiry** of the snapshots :func:`~lakewrap.maintain.choose_expired` picks (per table: older
   than ``retain_days``, not among the table's newest ``keep_last``) that no retained run record
   references: its own commit's snapshots, its ``base_snapshot`` (the replay starts there), its
   upstream ``pins`` and a restore's source; branch and tag heads are never expired.
3. **Old files**: the manifest lists, manifests and data files live only in expired snapshots --
   the files of the remaining snapshots are read from their manifests first, and none of them is
   ever deleted -- plus the previous metadata files that still list an expired snapshot.
4. **Orphans**: files under the table's location that neither a remaining snapshot nor the
   current metadata (and its metadata log) reference -- what a writer killed before its commit
   leaves -- once older than ``orphan_min_age_minutes``.

``dry_run`` computes the same lists from the same metadata and changes nothing. The DuckDB write
path (``write_path = "sql"``) has no maintainer (:meth:`lakewrap.substrates.iceberg.IcebergSql.maintainer`
refuses): its materializations are rows of a state table whose snapshot ids are derived from the
target's lineage, which a compaction commit would shift.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lakewrap.config import MaintainConfig
from lakewrap.execute.iceberg import IcebergLake
from lakewrap.maintain import MaintainReport, TableFiles, choose_expired
from lakewrap.substrates.iceberg.summary import COMPACT, MAINTAIN_KEY

if TYPE_CHECKING:
    from lakewrap.config import ProjectConfig
    from lakewrap.spec import ModelSpec


@dataclass
class Referenced:
    """The files a set of a table's snapshots needs, read from their manifests (cached per manifest)."""

    table: Any
    _manifests: dict[str, set[str]] = field(default_factory=dict)

    def files(self, snapshot_ids: Iterable[int]) -> set[str]:
        """Manifest lists, manifests and the data/delete files live (added or existing) in them."""
        out: set[str] = set()
        for sid in snapshot_ids:
            snap = self.table.metadata.snapshot_by_id(sid)
            if snap is None:
                continue
            out.add(snap.manifest_list)
            for manifest in snap.manifests(self.table.io):
                out.add(manifest.manifest_path)
                path = manifest.manifest_path
                if path not in self._manifests:
                    entries = manifest.fetch_manifest_entry(self.table.io, discard_deleted=True)
                    self._manifests[path] = {e.data_file.file_path for e in entries}
                out |= self._manifests[path]
        return out


def protected_snapshots(records: dict[str, list[dict[str, Any]]], protect: str) -> dict[str, set[int]]:
    """Per table, the snapshot ids retained run records reference.

    ``records`` maps each table to its :func:`lakewrap.substrates.iceberg.state.materializations`. A record
    protects the snapshots its commit added, its ``base_snapshot`` (in its target), each upstream
    pin (in that upstream) and, for a restore, the snapshot it copied. With ``protect="latest"``
    only the latest record of each (target, partition) is retained.
    """
    keep: dict[str, set[int]] = {}
    for target, rows in records.items():
        if protect == "latest":
            latest: dict[str | None, dict[str, Any]] = {}
            for m in rows:  # oldest first
                latest[m["partition"]] = m
            rows = list(latest.values())
        for m in rows:
            own = keep.setdefault(target, set())
            own.update(int(sid) for sid, _ in m["snapshots"])
            props = m["props"]
            if props.get("base_snapshot"):
                own.add(int(props["base_snapshot"]))
            if props.get("restored_from"):
                source = json.loads(props["restored_from"]).get("snapshot")
                if source is not None:
                    own.add(int(source))
            for upstream, sid in m["pins"].items():
                if sid is not None:
                    keep.setdefault(upstream, set()).add(int(sid))
    return keep


def heads(table: Any) -> set[int]:
    """The snapshots branches and tags point at (pyiceberg never expires them either)."""
    return {ref.snapshot_id for ref in table.metadata.refs.values()}


def snapshot_rows(table: Any) -> list[tuple[int, datetime, int]]:
    """(snapshot id, commit time, sequence number) of every snapshot of ``table``."""
    return [(s.snapshot_id, datetime.fromtimestamp(s.timestamp_ms / 1000, tz=timezone.utc),
             s.sequence_number or 0) for s in table.metadata.snapshots]


def commit_order(row: tuple[Any, ...]) -> tuple[int, datetime]:
    """Iceberg snapshot ids are random: the newest are those with the highest sequence number."""
    return row[2], row[1]


# --- storage ----------------------------------------------------------------------------------------


def _fs(table: Any) -> tuple[Any, str, str]:
    """(pyarrow filesystem, scheme, path) of the table's location."""
    from pyiceberg.io.pyarrow import PyArrowFileIO

    io = table.io
    if not isinstance(io, PyArrowFileIO):
        io = PyArrowFileIO(dict(table.io.properties))
    scheme, netloc, path = PyArrowFileIO.parse_location(table.location(), io.properties)
    return io.fs_by_scheme(scheme, netloc), scheme, path


def key(location: str) -> str:
    """A file location as the filesystem lists it (``file:///a/b`` and ``/a/b`` are one file)."""
    from pyiceberg.io.pyarrow import PyArrowFileIO

    return PyArrowFileIO.parse_location(location)[2]


def listing(table: Any) -> dict[str, tuple[str, datetime]]:
    """Every file under the table's location: listed path -> (location to delete, modification time)."""
    from pyarrow import fs as pafs  # type: ignore[import-untyped]

    filesystem, scheme, path = _fs(table)
    infos = filesystem.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
    out = {}
    for info in infos:
        if info.type != pafs.FileType.File:
            continue
        mtime = info.mtime if info.mtime is not None else datetime.now(timezone.utc)  # unknown: never old
        mtime = mtime.astimezone(timezone.utc) if mtime.tzinfo else mtime.replace(tzinfo=timezone.utc)
        out[info.path] = (f"{scheme}://{info.path}", mtime)
    return out


def stale_metadata(table: Any, remaining: set[int]) -> list[str]:
    """Previous metadata files (the metadata log) that still list a snapshot not in ``remaining``."""
    from pyiceberg.serializers import FromInputFile

    out = []
    for entry in table.metadata.metadata_log:
        try:
            old = FromInputFile.table_metadata(table.io.new_input(entry.metadata_file))
        except (FileNotFoundError, OSError):
            continue  # deleted by an earlier maintain
        if any(s.snapshot_id not in remaining for s in old.snapshots):
            out.append(entry.metadata_file)
    return out


# --- compaction -------------------------------------------------------------------------------------


def small_file_groups(table: Any) -> tuple[list[list[Any]], int, int]:
    """The groups of scan tasks to merge (one per partition), and the current data and delete file counts."""
    from pyiceberg.table import TableProperties

    target = int(table.properties.get(TableProperties.WRITE_TARGET_FILE_SIZE_BYTES,
                                      TableProperties.WRITE_TARGET_FILE_SIZE_BYTES_DEFAULT))
    spec_id = table.metadata.default_spec_id
    groups: dict[tuple[Any, ...], list[Any]] = {}
    data = deletes = 0
    seen_deletes: set[str] = set()
    for task in table.scan().plan_files():
        data += 1
        seen_deletes |= {d.file_path for d in task.delete_files}
        f = task.file
        if task.delete_files or f.spec_id != spec_id or f.file_size_in_bytes >= target:
            continue
        groups.setdefault(tuple(f.partition), []).append(task)
    deletes = len(seen_deletes)
    return [g for g in groups.values() if len(g) > 1], data, deletes


def compact(name: str, table: Any, dry_run: bool) -> TableFiles:
    """Merge each partition's small data files, all in one commit of the table; no row changes.

    The rows of each group are read with its scan tasks and written back with pyiceberg's own
    writer (so the new files land in the same partition). When another writer committed since the
    table was loaded, pyiceberg validates the commit against the new head (the table's isolation
    level: lakewrap creates tables ``serializable``): a merged file removed, or a file added to a
    partition being merged, raises ``ValidationException`` and nothing changes.
    """
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.io.pyarrow import ArrowScan, _dataframe_to_data_files

    groups, data, deletes = small_file_groups(table)
    entry = TableFiles(name, data, deletes, merged=sum(len(g) for g in groups))
    if dry_run or not groups:
        return entry
    tx = table.transaction()
    # Iceberg's spec names a rewrite that changes no row `replace`, but pyiceberg 0.12 cannot write
    # one ("Operation not implemented: Operation.REPLACE"): it is an `overwrite` marked as lakewrap's
    with tx.update_snapshot(snapshot_properties={MAINTAIN_KEY: COMPACT}).overwrite() as rewrite:
        for group in groups:
            rows = ArrowScan(tx.table_metadata, table.io, tx.table_metadata.schema(), AlwaysTrue()).to_table(group)
            for new in _dataframe_to_data_files(table_metadata=tx.table_metadata, write_uuid=rewrite.commit_uuid,
                                                df=rows, io=table.io):
                rewrite.append_data_file(new)
            for task in group:
                rewrite.delete_data_file(task.file)
    tx.commit_transaction()
    _, entry.data_files_after, entry.delete_files_after = small_file_groups(table.refresh())
    return entry


# --- the command ------------------------------------------------------------------------------------


@dataclass
class IcebergMaintainer:
    """The maintainer of the Iceberg lake (pyiceberg write path) of the project at ``root``."""

    root: Path
    config: ProjectConfig

    def maintain(self, specs: Sequence[ModelSpec], report: MaintainReport, *, dry_run: bool,
                 now: datetime) -> MaintainReport:
        """Steps 1-4 of the module doc on every table of the lake (compaction: the tables of ``specs``)."""
        lake = IcebergLake.open(self.root, config=self.config)
        return maintain_iceberg(lake, [str(s.target) for s in specs], self.config.maintain, report,
                                dry_run=dry_run, now=now)


def maintain_iceberg(lake: IcebergLake, targets: Sequence[str], policy: MaintainConfig, report: MaintainReport,
                     *, dry_run: bool, now: datetime) -> MaintainReport:
    """Steps 1-4 of the module doc on every table of ``lake`` (compaction: ``targets`` only)."""
    from lakewrap.substrates.iceberg.state import materializations

    names = lake.tables()
    tables = {n: lake.load(n) for n in names}
    report.storage_files_before = sum(len(listing(t)) for t in tables.values())
    # (1) compaction of the selected models' tables
    from pyiceberg.exceptions import CommitFailedException, ValidationException

    for target in targets:
        if tables.get(target) is None:
            continue
        try:
            entry = compact(target, tables[target], dry_run or not policy.compact)
        except (CommitFailedException, ValidationException) as exc:
            entry = TableFiles(target, *small_file_groups(tables[target])[1:])
            report.notes.append(f"compaction of {target} skipped: another writer changed its files meanwhile "
                                f"({lake.redact(str(exc)).splitlines()[0]}); the next maintain retries")
        report.tables.append(entry if policy.compact else TableFiles(target, entry.data_files_before,
                                                                   entry.delete_files_before))
        tables[target] = lake.load(target)
    if dry_run and policy.compact:
        report.notes.append("compaction (dry run): `merged` counts the small files each table's commit would merge")
        if any(t.merged for t in report.tables):
            report.notes.append("old files: each compaction commit also makes the metadata file before it a "
                                "previous one, which the expiry then removes too (not listed here)")
    # (2) expiry, sparing every snapshot a retained run record references
    protected = protected_snapshots({n: materializations(t) for n, t in tables.items()}, policy.protect)
    older_than = now - timedelta(minutes=policy.orphan_min_age_minutes)
    for name, table in tables.items():
        snaps = snapshot_rows(table)
        keep = protected.get(name, set()) | heads(table)
        report.snapshots_before += len(snaps)
        report.snapshots_protected += len(protected.get(name, set()) & {s[0] for s in snaps})
        expire = choose_expired(snaps, keep, policy, now, order=commit_order)
        remaining = {s[0] for s in snaps} - set(expire)
        refs = Referenced(table)
        needed = refs.files(remaining)
        old = sorted((refs.files(expire) - needed) if expire else set())
        # the current metadata file too: after the expiry commit, it is a previous one listing them
        metadata = [*stale_metadata(table, remaining), table.metadata_location] if expire else []
        if expire and not dry_run:
            table.maintenance.expire_snapshots().by_ids(expire).commit()
            table = lake.load(name)
            for location in [*old, *metadata]:
                table.io.delete(location)
        report.snapshots_expired += expire
        report.old_files_removed += [lake.redact(p) for p in [*old, *metadata]]
        # (3) orphans: files under the table's location nothing references, older than the minimum age
        known = {key(p) for p in [*needed, *old, *metadata, table.metadata_location,
                                  *(e.metadata_file for e in table.metadata.metadata_log)]}
        orphans = sorted(location for path, (location, mtime) in listing(table).items()
                         if path not in known and mtime <= older_than)
        if not dry_run:
            for location in orphans:
                table.io.delete(location)
        report.orphans_removed += [lake.redact(p) for p in orphans]
        report.snapshots_after += len(table.metadata.snapshots)
        tables[name] = table
    if dry_run:
        report.snapshots_after = report.snapshots_before - len(report.snapshots_expired)
    report.snapshots_expired.sort()
    report.old_files_removed.sort()
    report.orphans_removed.sort()
    report.storage_files_after = sum(len(listing(t)) for t in tables.values())
    return report
