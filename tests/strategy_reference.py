"""A plain-Python reference of lakewrap's strategies, written from docs/design.md, "Strategy semantics"
(never from lakewrap's SQL).

Rows are dicts. A table is a list of rows (a multiset). Each strategy function takes the table
before a materialization (``None`` when it does not exist yet) and the model's result rows, and
returns an :class:`Outcome`: the table after it, what changed, and whether it committed. Guards
that refuse a materialization raise :class:`Refused`; the table is then unchanged.

Semantics implemented here (docs/design.md, "Strategy semantics"):

* table: the result replaces the table; view: the result, evaluated when read.
* delete+insert: rows of the table whose partition key is in the window are deleted, the result
  is inserted; result rows outside the window (or with a NULL key) refuse the run.
* append: the result is inserted (partitioned: with the same window guard).
* merge: the result (deduplicated first when ``dedupe=latest_by``) is matched on the unique key;
  matched rows get the update columns, unmatched rows are inserted; nothing is deleted. NULL keys
  refuse the run, and so do duplicate keys with ``dedupe=error``.
* SCD2 snapshot: a key is *changed* when it has no current version, when its current version is a
  hard-delete marker (``new_record``), or (timestamp) when the source ``updated_at`` is newer than
  the current version's, or (check) when a checked column differs (NULL-safe). Each changed key's
  current version is closed (``valid_to`` = the new version's ``valid_from``, ``is_current`` false)
  and a new version opens with ``valid_from`` = source ``updated_at`` (timestamp) or the run
  timestamp (check). With timestamp and hard deletes tracked, a returning key whose ``updated_at``
  is not after the key's last recorded change (its versions' latest ``valid_to``, or its current
  deletion record's ``valid_from``) opens its new version at the run timestamp instead. Keys
  missing from the source: ``ignore`` leaves them open; ``invalidate`` closes them at the run
  timestamp; ``new_record`` closes them and opens a marker version with ``is_deleted`` true. No
  change at all writes no rows (status ``unchanged``; on DuckLake its record still commits). A NULL
  or repeated key, or a NULL ``updated_at`` (timestamp), among the rows that would open versions
  refuses the run.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

Row = dict[str, Any]
Table = list[Row]


class Refused(Exception):
    """A guard refused the materialization; ``reasons`` name every guard the result violates."""

    def __init__(self, reasons: set[str]):
        super().__init__(", ".join(sorted(reasons)))
        self.reasons = reasons


class Ambiguous(Exception):
    """The semantics do not determine the outcome (e.g. a ``latest_by`` tie between different rows)."""


# What each guard's error message says (the reference only names the guard; tests match on these).
GUARD_TEXT = {
    "window": "outside the partition window",
    "null_key": "NULL unique_key",
    "duplicate_key": "occur more than once",
    "null_updated_at": "rows have a NULL",
}


@dataclass
class Outcome:
    table: Table | None
    status: Literal["success", "unchanged"] = "success"
    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Window:
    """A half-open window ``[start, end)`` on ``key``."""

    key: str
    start: datetime
    end: datetime

    def holds(self, value: datetime | None) -> bool:
        return value is not None and self.start <= value < self.end


def multiset(rows: Iterable[Row], columns: Sequence[str]) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(r[c] for c in columns) for r in rows)


def _guard_window(rows: Table, window: Window | None, reasons: set[str]) -> None:
    if window is not None and any(not window.holds(r[window.key]) for r in rows):
        reasons.add("window")


def _key(row: Row, keys: Sequence[str]) -> tuple[Any, ...]:
    return tuple(row[k] for k in keys)


def _guard_keys(rows: Table, keys: Sequence[str], duplicates: bool, reasons: set[str]) -> None:
    if any(v is None for r in rows for v in _key(r, keys)):
        reasons.add("null_key")
    if duplicates:
        seen = Counter(_key(r, keys) for r in rows)
        if any(n > 1 for n in seen.values()):
            reasons.add("duplicate_key")


# --- table, view, delete+insert, append -------------------------------------------------------------


def table(before: Table | None, result: Table) -> Outcome:
    return Outcome([dict(r) for r in result], inserted=len(result))


def delete_insert(before: Table | None, result: Table, window: Window) -> Outcome:
    reasons: set[str] = set()
    _guard_window(result, window, reasons)
    if reasons:
        raise Refused(reasons)
    old = before or []
    kept = [dict(r) for r in old if not window.holds(r[window.key])]
    deleted = len(old) - len(kept)
    out = Outcome(kept + [dict(r) for r in result], inserted=len(result), deleted=deleted)
    if not result and deleted:
        out.warnings.append(f"the result is empty but the partition had {deleted} rows")
    return out


def append(before: Table | None, result: Table, window: Window | None) -> Outcome:
    reasons: set[str] = set()
    _guard_window(result, window, reasons)
    if reasons:
        raise Refused(reasons)
    return Outcome([dict(r) for r in before or []] + [dict(r) for r in result], inserted=len(result))


# --- merge ------------------------------------------------------------------------------------------


def latest_by(rows: Table, keys: Sequence[str], order_by: str) -> Table:
    """One row per key: the greatest ``order_by`` (NULL sorts lowest). Ties between different rows
    are :class:`Ambiguous` (any of them satisfies "latest")."""
    groups: dict[tuple[Any, ...], list[Row]] = {}
    for r in rows:
        groups.setdefault(_key(r, keys), []).append(r)
    out = []
    for group in groups.values():
        present = [r for r in group if r[order_by] is not None]
        if present:
            top = max(r[order_by] for r in present)
            best = [r for r in present if r[order_by] == top]
        else:
            best = group
        if any(b != best[0] for b in best[1:]):
            raise Ambiguous(f"latest_by({order_by}) tie between {best}")
        out.append(best[0])
    return out


def merge(
    before: Table | None,
    result: Table,
    *,
    keys: Sequence[str],
    columns: Sequence[str],
    window: Window | None = None,
    dedupe_by: str | None = None,
    update_columns: Sequence[str] | None = None,
    exclude_columns: Sequence[str] = (),
    matched: Literal["update", "replace"] = "update",
) -> Outcome:
    """``matched=update``: a matched row's update columns take the result's values; ``replace``: the
    matched row is deleted and the result's row inserted (counted as such)."""
    staged = latest_by(result, keys, dedupe_by) if dedupe_by else list(result)
    reasons: set[str] = set()
    _guard_window(staged, window, reasons)
    _guard_keys(staged, keys, duplicates=dedupe_by is None, reasons=reasons)
    if reasons:
        raise Refused(reasons)
    if update_columns is not None:
        updates = list(update_columns)
    else:
        updates = [c for c in columns if c not in keys and c not in exclude_columns]
    rows = {_key(r, keys): dict(r) for r in before or []}
    assert len(rows) == len(before or []), "the reference target lost its unique key"
    inserted = updated = deleted = 0
    for r in staged:
        k = _key(r, keys)
        if matched == "replace":
            deleted += k in rows
            rows[k] = {c: r[c] for c in columns}
            inserted += 1
        elif k in rows:
            for c in updates:
                rows[k][c] = r[c]
            updated += 1
        else:
            rows[k] = {c: r[c] for c in columns}
            inserted += 1
    return Outcome(list(rows.values()), inserted=inserted, updated=updated, deleted=deleted)


# --- SCD2 snapshot ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scd2:
    keys: tuple[str, ...]
    columns: tuple[str, ...]  # the model's output columns
    strategy: Literal["timestamp", "check"]
    updated_at: str | None = None
    check_cols: tuple[str, ...] | None = None  # None: all columns
    hard_deletes: Literal["ignore", "invalidate", "new_record"] = "ignore"

    @property
    def meta(self) -> tuple[str, ...]:
        base = ("valid_from", "valid_to", "is_current")
        return (*base, "is_deleted") if self.hard_deletes == "new_record" else base

    @property
    def all_columns(self) -> tuple[str, ...]:
        return (*self.columns, *self.meta)


def snapshot(before: Table | None, result: Table, spec: Scd2, run_ts: datetime) -> Outcome:
    versions = copy.deepcopy(before or [])
    current = {_key(v, spec.keys): v for v in versions if v["is_current"]}
    assert len(current) == sum(1 for v in versions if v["is_current"]), "two current versions of one key"
    checked = [c for c in (spec.check_cols or spec.columns) if c not in spec.keys]

    def changed(row: Row, cur: Row | None) -> bool:
        if cur is None:  # also every row with a NULL key: no version has one
            return True
        if spec.hard_deletes == "new_record" and cur["is_deleted"]:
            return True
        if spec.strategy == "timestamp":
            if row[spec.updated_at] is None:  # type: ignore[index]
                return True  # cannot be ordered: refused below
            return bool(row[spec.updated_at] > cur[spec.updated_at])  # type: ignore[index]
        return any(row[c] != cur[c] for c in checked)  # None == None: NULL-safe

    # The guards check the rows that would open versions (docs/strategies.md, "Guards"): a key
    # repeated among rows that change nothing writes nothing and is not refused.
    changes = [row for row in result if changed(row, current.get(_key(row, spec.keys)))]
    reasons: set[str] = set()
    _guard_keys(changes, spec.keys, duplicates=True, reasons=reasons)
    if spec.strategy == "timestamp" and any(r[spec.updated_at] is None for r in changes):  # type: ignore[index]
        reasons.add("null_updated_at")
    if reasons:
        raise Refused(reasons)

    opened: Table = []
    updated = 0
    for row in changes:
        cur = current.get(_key(row, spec.keys))
        if spec.strategy == "check":
            valid_from = run_ts
        else:
            valid_from = row[spec.updated_at]  # type: ignore[index]
            if spec.hard_deletes != "ignore":
                # lakewrap's refinement of docs/design.md's SCD2 columns (docs/strategies.md): a key that
                # left the source and came back with an old updated_at starts at the run timestamp, so validity
                # intervals never overlap and never cover the time the key was deleted.
                key = _key(row, spec.keys)
                ends = [v["valid_to"] for v in versions if _key(v, spec.keys) == key and v["valid_to"] is not None]
                bounds = [*ends, *([cur["valid_from"]] if cur else [])]
                if bounds and not valid_from > max(bounds):
                    valid_from = run_ts
        if cur is not None:
            cur["valid_to"], cur["is_current"] = valid_from, False
            updated += 1
        new = {c: row[c] for c in spec.columns} | {"valid_from": valid_from, "valid_to": None, "is_current": True}
        if spec.hard_deletes == "new_record":
            new["is_deleted"] = False
        opened.append(new)
    if spec.hard_deletes != "ignore":
        present = {_key(r, spec.keys) for r in result}
        for key, cur in current.items():
            if key in present or not cur["is_current"] or cur.get("is_deleted"):
                continue
            cur["valid_to"], cur["is_current"] = run_ts, False
            updated += 1
            if spec.hard_deletes == "new_record":
                opened.append({c: cur[c] for c in spec.columns}
                              | {"valid_from": run_ts, "valid_to": None, "is_current": True, "is_deleted": True})
    if not opened and not updated:
        return Outcome(before, status="unchanged")
    return Outcome(versions + opened, inserted=len(opened), updated=updated)


# --- a model = its SELECT in Python + a strategy ------------------------------------------------------


@dataclass
class RefModel:
    """What the reference knows about one model: how to compute its result and apply it."""

    target: str
    columns: tuple[str, ...]
    select: Callable[[dict[str, Table], Window | None], Table]  # sources, window -> result rows
    apply: Callable[[Table | None, Table, Window | None, datetime], Outcome]
    window_key: str | None = None  # partitioned models: the partition key
    tz: str = "UTC"  # ... and the time zone of their daily partitions
