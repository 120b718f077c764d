"""When a DuckLake table's rows last changed: the time of the newest snapshot that created the table
(by name) or inserted into, deleted from, or inlined rows into one of the table ids the name has had
(``lakewrap freshness`` for a ``[sources]`` table without ``loaded_at``)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from lakewrap.execute.binding import inline

DATA_CHANGES = ("tables_inserted_into", "tables_deleted_from", "inlined_insert", "inlined_delete")


def changed_at(con: Any, alias: str, table: str) -> datetime | None:
    from lakewrap.compilers import freshness as qf
    from lakewrap.compilers import stale as q

    schema, name = table.split(".", 1)
    ids = {str(r[0]) for r in con.execute(*inline(q.table_ids(alias), {"schema": schema, "name": name})).fetchall()}
    if not ids:
        return None
    for _, at, changes in con.execute(qf.snapshot_changes(alias)).fetchall():
        created = {c.lower() for c in (changes.get("tables_created") or ())}
        if table.lower() in created or any(ids.intersection(changes.get(k) or ()) for k in DATA_CHANGES):
            return at if at.tzinfo is not None else at.replace(tzinfo=timezone.utc)  # type: ignore[no-any-return]
    return None
