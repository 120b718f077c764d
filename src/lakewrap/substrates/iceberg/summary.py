"""What lakewrap writes into an Iceberg snapshot summary, and how a commit is read back from it.

Each materialization on the pyiceberg write path (:mod:`lakewrap.substrates.iceberg.commit`) puts its
state under ``lakewrap.*`` keys in the summary of the snapshot that writes its data; ``status``,
``history``, ``maintain`` and ``--stale`` read them.
"""

from __future__ import annotations

from typing import Any

PREFIX = "lakewrap."
# the summary key of a commit ``lakewrap maintain`` made (value "compact"): it changed no row and is
# not a materialization (it carries no ``lakewrap.commit_id``)
MAINTAIN_KEY = PREFIX + "maintain"
COMPACT = "compact"  # MAINTAIN_KEY of a compaction commit: no row changed (lakewrap.substrates.iceberg.maintain)


def committed_snapshots(table: Any, commit_id: str) -> list[Any]:
    """The table's snapshots carrying ``commit_id``, oldest first."""
    if table is None:
        return []
    out = [s for s in table.snapshots() if s.summary is not None
           and s.summary.additional_properties.get(PREFIX + "commit_id") == commit_id]
    return sorted(out, key=lambda s: (s.sequence_number or 0, s.timestamp_ms))


def row_counts(strategy: str, appended: int, deleted: int, *, rebuilt: bool, replaced: bool) -> tuple[int, int, int]:
    """A commit's (inserted, updated, deleted) from the rows it appended and the rows the table's
    total lost to its delete (the executor's result and ``lakewrap.substrates.iceberg.state`` count alike).

    A rebuild (a full table, ``--full-refresh``) counts only the rows written, as DuckLake's drop and
    re-create; a merge or an SCD2 snapshot counts the rows it replaced as updated, except a merge
    with ``matched=replace``, which counts them deleted and the rows written inserted, as on DuckLake.
    """
    if rebuilt or strategy == "table":
        return appended, 0, 0
    if strategy in ("merge", "snapshot") and not replaced:
        return appended - deleted, deleted, 0
    return appended, 0, deleted


def total_records(snapshot: Any) -> int:
    if snapshot is None or snapshot.summary is None:
        return 0
    return int(snapshot.summary.additional_properties.get("total-records", 0))
