"""``lakewrap maintain`` on a DuckLake: the substrate half of :mod:`lakewrap.maintain`.

In order: (1) compact the selected models' tables (``ducklake_rewrite_data_files`` for
delete-heavy files, then ``ducklake_merge_adjacent_files``); (2) expire the snapshots
:func:`~lakewrap.maintain.choose_expired` picks, sparing every snapshot a retained run record
references (its pins or its own snapshot: :func:`protected_snapshots`); (3) delete the files only
expired snapshots referenced (``ducklake_cleanup_old_files``); (4) delete files under the data path
that no snapshot knows, once older than ``orphan_min_age_minutes``
(``ducklake_delete_orphaned_files``). ``dry_run`` runs every step's read-only form.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lakewrap.execute.binding import inline
from lakewrap.maintain import MaintainReport, TableFiles, choose_expired

if TYPE_CHECKING:
    from lakewrap.config import ProjectConfig
    from lakewrap.spec import ModelSpec


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
        entries: list[Any] = (info["members"] if isinstance(info, dict) and isinstance(info.get("members"), list)
                              else [info])
        # a group commit's snapshot: kept while any of its members' records is (docs/running.md)
        if any(isinstance(e, dict) and (e.get("run_id"), e.get("target"), e.get("partition")) in owners
               for e in entries):
            keep.add(int(snapshot_id))
    return keep


@dataclass
class DuckLakeMaintainer:
    """The maintainer of the DuckLake of the project at ``root``."""

    root: Path
    config: ProjectConfig

    def maintain(self, specs: Sequence[ModelSpec], report: MaintainReport, *, dry_run: bool,
                 now: datetime) -> MaintainReport:
        """Steps 1-4 of the module doc (compaction: the tables of ``specs`` only), into ``report``."""
        from lakewrap.compilers import maintenance as q
        from lakewrap.execute.lake import Lake

        root, policy = self.root, self.config.maintain
        # read-write even for a dry run: DuckLake 1.5.5 refuses ducklake_delete_orphaned_files(dry_run
        # => true) on a READ_ONLY attach ("Cannot append to a readonly database")
        lake = Lake.open(root, config=self.config)
        con = lake.connect()
        alias = lake.alias
        pattern = lake.config.data_location(root) + "**"

        def count_storage() -> int:
            return int(con.execute(*inline(q.storage_files(), {"pattern": pattern})).fetchone()[0])

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
                rows = con.execute(*inline(q.expire_snapshots(alias, dry_run), {"versions": expire})).fetchall()
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
