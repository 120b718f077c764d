"""``lakewrap maintain``: compaction, snapshot expiry, old-file and orphan cleanup.

This module is the substrate-neutral half: the command (:func:`maintain`), the policy that picks
the snapshots to expire (:func:`choose_expired`) and the report. Each substrate's maintainer role
(:meth:`lakewrap.substrates.protocol.Substrate.maintainer`) does the four steps on its lake, in
order: (1) compact the selected models' tables; (2) expire the snapshots the ``[maintain]``
policy lets go -- older than ``retain_days``, not among the newest ``keep_last``, and never one
that a retained run record references, so every retained build can still be read at its pin and
restored; (3) delete the files only expired snapshots referenced; (4) delete the files no snapshot
knows -- what a writer killed before its commit leaves -- once older than
``orphan_min_age_minutes``. ``dry_run`` changes nothing. DuckLake:
:mod:`lakewrap.substrates.ducklake.maintain`; Iceberg on the pyiceberg write path:
:mod:`lakewrap.substrates.iceberg.maintain`; a substrate that cannot be maintained (Iceberg written
by DuckDB SQL) refuses with a hint. See ``docs/maintenance.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from lakewrap.config import MaintainConfig, load_config


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
    """Compact, expire, clean up (see the module doc) through the substrate's maintainer; ``dry_run``
    changes nothing.

    Example:
        >>> report = maintain(Path("examples/shop"), dry_run=True)  # doctest: +SKIP
        >>> report.snapshots_expired, report.orphans_removed  # doctest: +SKIP
    """
    from lakewrap.compile import load_project
    from lakewrap.substrates.registry import resolve

    root = root.resolve()
    config = load_config(root)
    maintainer = resolve(config.lake).maintainer(root, config)  # a substrate that cannot refuses here
    policy = config.maintain
    now = now or datetime.now(timezone.utc)
    report = MaintainReport(dry_run=dry_run, policy=policy.dump())
    project = load_project(root, None)
    specs = [s for s in project.select(selectors) if s.strategy.kind != "view"]
    return maintainer.maintain(specs, report, dry_run=dry_run, now=now)
