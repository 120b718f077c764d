"""``lakewrap maintain``: compaction, snapshot expiry, old-file and orphan cleanup.

This module is the DuckLake half and the shared policy (:func:`choose_expired`, the report); an
Iceberg lake (pyiceberg write path) is maintained by :mod:`lakewrap.maintain_iceberg` with the same
four steps built from the table metadata.

On a DuckLake, in order: (1) compact the selected models' tables (``ducklake_rewrite_data_files``
for delete-heavy files, then ``ducklake_merge_adjacent_files``); (2) expire the snapshots the ``[maintain]`` policy
lets go -- older than ``retain_days``, not among the newest ``keep_last``, and never one that a
retained run record references (its pins or its own snapshot), so every retained build can still
be read at its pin and restored; (3) delete the files only expired snapshots referenced
(``ducklake_cleanup_old_files``); (4) delete files under the data path that no snapshot knows --
what a writer killed before COMMIT leaves -- once older than ``orphan_min_age_minutes``
(``ducklake_delete_orphaned_files``). ``dry_run`` runs every step's read-only form and changes
nothing. See ``docs/maintenance.md``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from lakewrap.config import MaintainConfig, load_config
from lakewrap.errors import UnsupportedError


@dataclass
class TableFiles:
    """One compacted table: its current snapshot's data and delete files, before and after."""

    table: str
    data_files_before: int
    delete_files_before: int
    data_files_after: int | None = None
    delete_files_after: int | None = None
    rewritten: int = 0  # files the delete-heavy rewrite processed
    merged: int = 0  # files merge_adjacent_files processed


@dataclass
class MaintainReport:
    """What ``maintain`` did (or, with ``dry_run``, would do)."""

    dry_run: bool
    policy: dict[str, Any]
    tables: list[TableFiles] = field(default_factory=list)
    snapshots_before: int = 0
    snapshots_after: int = 0
    snapshots_expired: list[int] = field(default_factory=list)
    snapshots_protected: int = 0
    old_files_removed: list[str] = field(default_factory=list)
    orphans_removed: list[str] = field(default_factory=list)
    storage_files_before: int = 0
    storage_files_after: int = 0
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["tables"] = [dict(t.__dict__) for t in self.tables]
        return out


def protected_snapshots(records: Sequence[tuple[Any, ...]], snaps: Sequence[tuple[Any, ...]],
                        protect: str) -> set[int]:
    """Snapshot ids that retained run records reference: their pins and their own commits.

    ``records`` are (run_id, target, partition_value, pins, committed_at); ``snaps`` are
    (snapshot_id, snapshot_time, commit_extra_info). With ``protect="latest"`` only the latest
    record of each (target, partition) is retained.
    """
    if protect == "latest":
        latest: dict[tuple[str, str | None], tuple[Any, ...]] = {}
        for r in records:
            key = (r[1], r[2])
            if key not in latest or r[4] > latest[key][4]:
                latest[key] = r
        records = list(latest.values())
    keep: set[int] = set()
    owners = set()
    for run_id, target, partition, pins, _ in records:
        owners.add((run_id, target, partition))
        try:
            pin = json.loads(pins or "{}").get("snapshot")
        except ValueError:
            pin = None
        if pin is not None:
            keep.add(int(pin))
    for snapshot_id, _, extra in snaps:
        if not extra:
            continue
        try:
            info = json.loads(extra)
        except ValueError:
            continue
        if isinstance(info, dict) and (info.get("run_id"), info.get("target"), info.get("partition")) in owners:
            keep.add(int(snapshot_id))
    return keep


def choose_expired(snaps: Sequence[tuple[Any, ...]], protected: set[int], policy: MaintainConfig,
                   now: datetime, order: Callable[[tuple[Any, ...]], Any] = lambda s: int(s[0])) -> list[int]:
    """The snapshots to expire: older than the retention, not the newest ``keep_last``, not protected.

    ``snaps`` are (snapshot_id, snapshot_time, ...); ``order`` sorts them oldest first (DuckLake's
    ids grow with time; Iceberg's are random).
    """
    cutoff = now - timedelta(days=policy.retain_days)
    newest = {int(s[0]) for s in sorted(snaps, key=order)[-policy.keep_last:]}
    return sorted(int(s[0]) for s in snaps
                  if s[1] <= cutoff and int(s[0]) not in newest and int(s[0]) not in protected)


def maintain(root: Path, selectors: Sequence[str] = (), *, dry_run: bool = False,
             now: datetime | None = None) -> MaintainReport:
    """Compact, expire, clean up (see the module doc); ``dry_run`` changes nothing.

    Example:
        >>> report = maintain(Path("examples/shop"), dry_run=True)  # doctest: +SKIP
        >>> report.snapshots_expired, report.orphans_removed  # doctest: +SKIP
    """
    from lakewrap.compile import load_project
    from lakewrap.compilers import maintenance as q
    from lakewrap.execute.lake import Lake

    root = root.resolve()
    config = load_config(root)
    if config.lake.substrate == "iceberg" and config.lake.write_path == "sql":
        raise UnsupportedError(
            "lakewrap maintain does not run on Iceberg tables written by DuckDB SQL (write_path = \"sql\")",
            hint="its run records derive their snapshot ids from each table's lineage, which a compaction "
            "commit would shift; pyiceberg's table.maintenance.expire_snapshots() expires snapshots (deleting "
            "no file); `lakewrap maintain` runs on the pyiceberg write path (docs/maintenance.md)",
        )
    policy = config.maintain
    now = now or datetime.now(timezone.utc)
    report = MaintainReport(dry_run=dry_run, policy=policy.dump())
    project = load_project(root, None)
    specs = [s for s in project.select(selectors) if s.strategy.kind != "view"]
    if config.lake.substrate == "iceberg":
        from lakewrap.execute.iceberg import IcebergLake
        from lakewrap.maintain_iceberg import maintain_iceberg

        lake_ice = IcebergLake.open(root, config=config)
        return maintain_iceberg(lake_ice, [str(s.target) for s in specs], policy, report, dry_run=dry_run, now=now)
    # read-write even for a dry run: DuckLake 1.5.5 refuses ducklake_delete_orphaned_files(dry_run
    # => true) on a READ_ONLY attach ("Cannot append to a readonly database")
    lake = Lake.open(root)
    con = lake.connect()
    alias = lake.alias
    pattern = lake.config.data_location(root) + "**"

    def count_storage() -> int:
        return int(con.execute(q.storage_files(), {"pattern": pattern}).fetchone()[0])

    def files_of(schema: str, name: str) -> tuple[int, int] | None:
        try:
            row = con.execute(q.list_files(alias, schema, name)).fetchone()
        except Exception:  # the model has not created its table yet
            return None
        return int(row[0]), int(row[1])

    try:
        report.storage_files_before = count_storage()
        # (1) compaction of the selected models' tables
        for spec in specs:
            schema, name = spec.target.schema_name, spec.target.name
            files = files_of(schema, name)
            if files is None:
                continue
            entry = TableFiles(str(spec.target), *files)
            report.tables.append(entry)
            if not policy.compact or dry_run:
                continue
            rows = con.execute(q.rewrite_data_files(alias, schema, name),
                               {"threshold": policy.delete_threshold}).fetchall()
            entry.rewritten = sum(int(r[2]) for r in rows)
            rows = con.execute(q.merge_adjacent_files(alias, schema, name)).fetchall()
            entry.merged = sum(int(r[2]) for r in rows)
            entry.data_files_after, entry.delete_files_after = files_of(schema, name) or (0, 0)
        if dry_run and policy.compact:
            report.notes.append("compaction has no dry run in DuckLake: the tables' current files are listed")
        # (2) expiry, sparing every snapshot a retained run record references
        snaps = con.execute(q.snapshots(alias)).fetchall()
        try:
            records = con.execute(q.run_records()).fetchall()
        except Exception as exc:
            if "does not exist" not in str(exc):
                raise
            records = []  # a lake lakewrap never wrote to (read-only dry run): no run record
        protected = protected_snapshots(records, snaps, policy.protect)
        report.snapshots_before = len(snaps)
        report.snapshots_protected = len(protected & {int(s[0]) for s in snaps})
        expire = choose_expired(snaps, protected, policy, now)
        if expire:
            rows = con.execute(q.expire_snapshots(alias, dry_run), {"versions": expire}).fetchall()
            report.snapshots_expired = sorted(int(r[0]) for r in rows)
        # (3) files only expired snapshots referenced
        report.old_files_removed = sorted(lake.redact(r[0]) for r in con.execute(
            q.cleanup_old_files(alias, dry_run)).fetchall())
        if dry_run and expire:
            report.notes.append("old files: only those already scheduled for deletion are listed; the expiry "
                                "would schedule the files of the expired snapshots too")
        # (4) orphans: files no snapshot knows, older than the minimum age
        older_than = now - timedelta(minutes=policy.orphan_min_age_minutes)
        report.orphans_removed = sorted(lake.redact(r[0]) for r in con.execute(
            q.delete_orphaned_files(alias, dry_run), {"older_than": older_than}).fetchall())
        report.snapshots_after = len(con.execute(q.snapshots(alias)).fetchall())
        report.storage_files_after = count_storage()
    finally:
        lake.close(con)
    return report
