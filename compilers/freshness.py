"""SQL for ``lakewrap freshness``: a source table's newest load time and the lake's snapshot times.

Pure, like every compiler module; :mod:`lakewrap.freshness` runs the first through the substrate's
read role, :mod:`lakewrap.substrates.ducklake.freshness` the second on a DuckLake.
"""

from __future__ import annotations

from sqlglot import exp

from lakewrap.compilers import sql as q


def max_loaded_at(schema: str, name: str, column: str) -> str:
    """``SELECT max("column") FROM "schema"."name"``: the newest load time of a source's rows."""
    return q.render(exp.select(exp.Max(this=q.col(column))).from_(q.table(schema, name)))


def snapshot_changes(alias: str) -> str:
    """Every snapshot of the lake ``alias`` with its time and its ``changes`` map, newest first."""
    sid = exp.column("snapshot_id")
    return q.render(exp.select(sid, exp.column("snapshot_time"), exp.column("changes"))
                    .from_(exp.Table(this=exp.Anonymous(this="snapshots"), db=q.ident(alias)))
                    .order_by(exp.Ordered(this=sid.copy(), desc=True)))
