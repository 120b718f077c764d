"""The state store of an Iceberg lake, on both write paths, and its reads (``query``, ``status``,
``history``, ``compile --as-of N``).

pyiceberg: every materialization's state is in the summary of the snapshot(s) its commit added
(keys ``lakewrap.*``; an overwrite adds a delete and an append snapshot, both carrying it). DuckDB
SQL (``write_path = "sql"``): a row of the target's state table, committed in the same catalog
transaction as the data. Nothing is kept beside the lake that could disagree with the data.
Snapshots removed by expiry take their history with them. :func:`typed_materializations` gives
either as :class:`lakewrap.provenance.Materialization` records.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from lakewrap.errors import ExecutionError, PlanError
from lakewrap.execute import sandbox
from lakewrap.execute.iceberg import IcebergLake
from lakewrap.provenance import Materialization, RunOrSnapshot
from lakewrap.provenance_record import decode
from lakewrap.substrates.iceberg.summary import PREFIX, row_counts, total_records

# the summary properties that hold JSON
_JSON_KEYS = ("params", "tests", "restored_from", "schema_changes", "deferred")


def materializations(table: Any) -> list[dict[str, Any]]:
    """One entry per lakewrap commit of ``table``, oldest first (the commit's last snapshot)."""
    if table is None:
        return []
    by_commit: dict[str, list[Any]] = {}
    for snap in table.snapshots():
        props = snap.summary.additional_properties if snap.summary is not None else {}
        cid = props.get(PREFIX + "commit_id")
        if cid:
            by_commit.setdefault(cid, []).append(snap)
    out = []
    for snaps in by_commit.values():
        snaps.sort(key=lambda s: (s.sequence_number or 0, s.timestamp_ms))
        first, last = snaps[0], snaps[-1]
        props = {k.removeprefix(PREFIX): v for k, v in last.summary.additional_properties.items()
                 if k.startswith(PREFIX)}
        parent = table.metadata.snapshot_by_id(first.parent_snapshot_id) if first.parent_snapshot_id else None
        appended = sum(int(s.summary.additional_properties.get("added-records", 0)) for s in snaps
                       if s.summary.operation.value == "append")
        deleted = max(0, total_records(parent) + appended - total_records(last))
        strategy = props.get("strategy", "")
        inserted, updated, deleted = row_counts(strategy, appended, deleted,
                                                rebuilt=props.get("full_refresh") == "true",
                                                replaced=props.get("matched") == "replace")
        if props.get("counts"):  # a merge that rewrote the whole table: the totals count every row as replaced
            counts = json.loads(props["counts"])
            inserted, updated, deleted = counts["inserted"], counts["updated"], counts["deleted"]
        out.append({
            "snapshot_id": last.snapshot_id,
            "run_id": props.get("run_id"),
            "partition": props.get("partition") or None,
            "strategy": strategy,
            "rows_inserted": inserted,
            "rows_updated": updated,
            "rows_deleted": deleted,
            "sql_sha256": props.get("sql_sha256", ""),
            "committed_at": datetime.fromtimestamp(last.timestamp_ms / 1000, tz=timezone.utc).isoformat(),
            "pins": json.loads(props["pins"]) if props.get("pins") else {},
            "model": props.get("model"),
            "full_refresh": props.get("full_refresh") == "true",
            "timestamp_ms": last.timestamp_ms,
            # for to_materialization: every lakewrap.* key, and the commit's snapshots
            "props": props, "snapshots": [(s.snapshot_id, s.summary.operation.value) for s in snaps],
        })
    out.sort(key=lambda m: m["timestamp_ms"])
    return out


def state_rows(lake: IcebergLake, target: str) -> list[dict[str, Any]]:
    """The rows of ``target``'s state table (write path ``sql``), in commit order (oldest first).

    Each row was committed in the same catalog transaction as the data it describes. Its
    ``snapshot_id`` is derived from the target's lineage: the snapshot the next materialization
    started from (its ``base_snapshot``), or the table's current snapshot for the last one. The
    members of one group commit (one commit id) share the snapshot their commit left.
    """
    from lakewrap.compilers.iceberg_sql import STATE_SCHEMA, state_table_name

    state = lake.load(f"{STATE_SCHEMA}.{state_table_name(target)}")
    if state is None or state.current_snapshot() is None:
        return []
    # the order in which the state table received its rows: one append snapshot per materialization
    rows: list[dict[str, Any]] = state.scan().to_arrow().to_pylist()
    table = lake.load(target)
    lineage: list[int] = []
    if table is not None and table.current_snapshot() is not None:
        from pyiceberg.table.snapshots import ancestors_of

        lineage = [s.snapshot_id for s in ancestors_of(table.current_snapshot(), table.metadata)][::-1]
    position = {sid: i for i, sid in enumerate(lineage)}
    rows.sort(key=lambda r: (position.get(r["base_snapshot"], -1) if r["base_snapshot"] is not None else -1,
                             r["started_at"]))
    for i, row in enumerate(rows):
        j = i + 1  # the next commit's row (a group commit's members share one commit id and base)
        while j < len(rows) and rows[j]["commit_id"] == row["commit_id"]:
            j += 1
        nxt = rows[j]["base_snapshot"] if j < len(rows) else (lineage[-1] if lineage else None)
        row["snapshot_id"] = nxt
        snap = table.metadata.snapshot_by_id(nxt) if table is not None and nxt is not None else None
        row["committed_ms"] = snap.timestamp_ms if snap is not None else None
    return rows


def sql_materializations(lake: IcebergLake, target: str) -> list[dict[str, Any]]:
    """:func:`materializations` of a target written by DuckDB SQL (read from its state table)."""
    out = []
    for r in state_rows(lake, target):
        # the commit time of its snapshot; the start of the attempt when it added none
        committed = (datetime.fromtimestamp(r["committed_ms"] / 1000, tz=timezone.utc)
                     if r["committed_ms"] is not None else r["started_at"])
        out.append({
            "snapshot_id": r["snapshot_id"], "run_id": r["run_id"], "partition": r["partition_value"],
            "strategy": r["strategy"], "rows_inserted": r["rows_inserted"], "rows_updated": r["rows_updated"],
            "rows_deleted": r["rows_deleted"], "sql_sha256": r["sql_sha256"],
            "committed_at": committed.isoformat() if committed is not None else None,
            "pins": json.loads(r["pins"]) if r["pins"] else {}, "model": r["model"],
            "commit_id": r["commit_id"], "full_refresh": bool(r.get("full_refresh")),
        })
    return out


def materializations_of(lake: IcebergLake, target: str) -> list[dict[str, Any]]:
    """The materializations of ``target``, oldest first, on either write path."""
    if lake.config.write_path == "sql":
        return sql_materializations(lake, target)
    return materializations(lake.load(target))


def as_of_snapshots(lake: IcebergLake, names: list[str], as_of: RunOrSnapshot) -> dict[str, int | None]:
    """Each table's snapshot as the lake stood when run ``as_of`` (or snapshot ``as_of``) committed.

    The instant is the last commit of that run (or that snapshot's commit); each table is read at
    its latest snapshot at or before it (None: the table did not exist yet).
    """
    tables = {n: lake.load(n) for n in names}
    instant: int | None = None
    if as_of.snapshot is not None:
        for t in tables.values():
            snap = t.metadata.snapshot_by_id(as_of.snapshot) if t is not None else None
            if snap is not None:
                instant = snap.timestamp_ms
    elif lake.config.write_path == "sql":  # the run's materializations, from the state tables
        stamps = []
        for name, t in tables.items():
            if t is None or name.startswith("lakewrap."):
                continue
            for m in sql_materializations(lake, name):
                snap = t.metadata.snapshot_by_id(m["snapshot_id"]) if m["snapshot_id"] is not None else None
                if m["run_id"] == as_of.run_id and snap is not None:
                    stamps.append(snap.timestamp_ms)
        instant = max(stamps) if stamps else None
    else:
        stamps = [s.timestamp_ms for t in tables.values() if t is not None for s in t.snapshots()
                  if s.summary is not None and s.summary.additional_properties.get(PREFIX + "run_id") == as_of.run_id]
        instant = max(stamps) if stamps else None
    if instant is None:
        raise PlanError(f"no snapshot or run `{as_of}` in this lake",
                        hint="`lakewrap history MODEL` lists runs and snapshot ids")
    out: dict[str, int | None] = {}
    for name, t in tables.items():
        snaps = [s for s in t.snapshots() if s.timestamp_ms <= instant] if t is not None else []
        out[name] = max(snaps, key=lambda s: (s.timestamp_ms, s.sequence_number or 0)).snapshot_id if snaps else None
    return out


def query_cursor(root: Path, text: str, as_of: RunOrSnapshot | None, fetch: Any) -> Any:
    """Run one read-only SELECT over every table of the catalog (each a view), optionally as of a run."""
    lake = IcebergLake.open(root.resolve(), read_only=True)
    names = lake.tables()
    pins: dict[str, int] | None = None
    if as_of is not None:
        at = as_of_snapshots(lake, names, as_of)
        names = [n for n in names if at[n] is not None]
        pins = {n: sid for n, sid in at.items() if sid is not None}
    con = lake.connect()
    try:
        with lake.scratch(con, names, pins) as (cursor, _):
            try:
                return fetch(cursor.execute(text))
            except Exception as exc:
                raise ExecutionError(lake.redact(str(exc)).strip(), hint=sandbox.access_hint(str(exc))) from None
    finally:
        lake.close(con)


# --- typed records ----------------------------------------------------------------------------------


def _json(value: Any, default: Any) -> Any:
    return json.loads(value) if value else default


def to_materialization(target: str, d: dict[str, Any]) -> Materialization:
    """One pyiceberg commit's summary (:func:`materializations`) as a :class:`Materialization`."""
    props: dict[str, str] = d["props"]
    extra: dict[str, Any] = {k: v for k, v in props.items() if k != "statements"}
    for key in _JSON_KEYS:
        if props.get(key):
            extra[key] = json.loads(props[key])
    extra["snapshots"] = [list(s) for s in d["snapshots"]]
    operation = ", ".join(op for _, op in d["snapshots"])
    extra["operation"] = operation
    statements: list[dict[str, Any]] = []
    if props.get("statements"):
        payload = decode(props["statements"])
        statements = list(payload.get("statements", []))
        extra["commits"] = list(payload.get("commits", []))
    return Materialization(
        run_id=d["run_id"] or "", model=props.get("model", ""), target=target, partition=d["partition"],
        window_start=props.get("window_start") or None, window_end=props.get("window_end") or None,
        strategy=d["strategy"], rows_inserted=d["rows_inserted"], rows_updated=d["rows_updated"],
        rows_deleted=d["rows_deleted"], sql_sha256=d["sql_sha256"], committed_at=d["committed_at"],
        # the deferred reads (another environment's tables) beside the own pins, as on DuckLake
        pins={**d["pins"], **({"deferred": json.loads(props["deferred"])} if props.get("deferred") else {})},
        snapshot_id=int(d["snapshot_id"]), author=None,
        commit_message=f"pyiceberg {operation} of {target} (snapshots " + ", ".join(
            f"{sid} {op}" for sid, op in d["snapshots"]) + ")",
        extra_info=extra, statements=statements,
    )


def commit_snapshots(table: Any, snapshot_id: int | None, base: int | None) -> list[list[Any]]:
    """The snapshots one DuckDB commit added (a DELETE and an INSERT add one each): from
    ``snapshot_id`` back along the parents to ``base``, oldest first, as ``[id, operation]``."""
    out: list[list[Any]] = []
    sid = snapshot_id
    while table is not None and sid is not None and sid != base:
        snap = table.metadata.snapshot_by_id(sid)
        if snap is None:
            break
        out.append([snap.snapshot_id, snap.summary.operation.value if snap.summary else "?"])
        sid = snap.parent_snapshot_id
    return out[::-1]


def row_to_materialization(target: str, row: dict[str, Any], table: Any) -> Materialization:
    """One state row (write path ``sql``, :func:`state_rows`) as a :class:`Materialization`."""
    base = row.get("base_snapshot")
    snapshots = commit_snapshots(table, row.get("snapshot_id"), base)
    extra: dict[str, Any] = {
        "write_path": "sql", "commit_id": row["commit_id"], "base_snapshot": str(base) if base is not None else "",
        "full_refresh": bool(row.get("full_refresh")), "attempt": row.get("attempt"),
        "lakewrap_version": row.get("lakewrap_version"), "tests": _json(row.get("tests"), []),
        "schema_changes": _json(row.get("schema_changes"), []), "snapshots": snapshots,
        "operation": ", ".join(op for _, op in snapshots),
    }
    if row.get("params") is not None:
        extra["params"] = _json(row["params"], {})
    extra.update(_json(row.get("provenance"), {}))
    committed = (datetime.fromtimestamp(row["committed_ms"] / 1000, tz=timezone.utc)
                 if row.get("committed_ms") is not None else row["started_at"])
    window = (f" partition {row['partition_value']}" if row["partition_value"] else "")
    return Materialization(
        run_id=row["run_id"], model=row["model"], target=target, partition=row["partition_value"],
        window_start=row["window_start"].isoformat() if row["window_start"] else None,
        window_end=row["window_end"].isoformat() if row["window_end"] else None, strategy=row["strategy"],
        rows_inserted=row["rows_inserted"], rows_updated=row["rows_updated"], rows_deleted=row["rows_deleted"],
        sql_sha256=row["sql_sha256"], pins=_json(row["pins"], {}),
        committed_at=committed.isoformat() if committed is not None else "", snapshot_id=row.get("snapshot_id"),
        author=None, commit_message=f"lakewrap {row['strategy']} {target}{window} (DuckDB commit "
        f"{row['commit_id']}: " + (", ".join(f"{sid} {op}" for sid, op in snapshots) or "no snapshot") + ")",
        extra_info=extra, statements=_json(row.get("statements"), []),
    )


def typed_materializations(lake: IcebergLake, target: str) -> list[Materialization]:
    """State store: the materializations of ``target`` as typed records, oldest first, on either
    write path (with the statements the record carries)."""
    from lakewrap.compilers.iceberg_sql import STATE_SCHEMA

    if lake.config.write_path == "sql":  # records in the state tables
        if target.startswith(STATE_SCHEMA + "."):
            return []
        table = lake.load(target)
        return [row_to_materialization(target, row, table) for row in state_rows(lake, target)]
    return [to_materialization(target, d) for d in materializations(lake.load(target))]
