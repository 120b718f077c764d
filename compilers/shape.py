"""What every compiler module shares: :class:`Capabilities`, :class:`Shape`, the window bounds and
the names of the temporary relations a plan stages into.

Pure: no I/O, no database driver. The strategy shapes (:mod:`lakewrap.compilers.strategies`), the
data tests and contracts (:mod:`lakewrap.compilers.checks`) and the schema checks
(:mod:`lakewrap.compilers.schema`) build on it; it imports none of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sqlglot import exp

from lakewrap.compilers import sql as q
from lakewrap.compilers.artifacts import STAGE, Role, TestInfo

CHANGES = "__lakewrap_changes"
DELETED = "__lakewrap_deleted"
VALID_FROM = "__lakewrap_valid_from"
TARGET = "target"
SOURCE = "source"
# DuckDB's date_trunc unit of each time grain: date_trunc(unit, ts) is the start of ts's partition
# in UTC (lakewrap's weeks are ISO weeks, from Monday, as DuckDB's 'week')
PARTITION_UNIT = {"hourly": "hour", "daily": "day", "weekly": "week", "monthly": "month", "yearly": "year"}


# The window bounds are bound as TIMESTAMPTZ. Compared with a TIMESTAMP column, DuckDB casts every
# row of the column to TIMESTAMPTZ (an ICU conversion), which also defeats DuckLake's file pruning
# and parquet zone maps: a one-day window of a 1M-row table read every file, 0.4-0.6 s instead of
# 0.01 s (benchmarks/strategies.py). A comparison with CAST(<bound> AS TIMESTAMP) selects the same
# rows in lakewrap's session (TimeZone = UTC) for a TIMESTAMP, TIMESTAMPTZ or DATE key -- for a
# TIMESTAMPTZ key DuckDB folds the constant back to TIMESTAMPTZ rather than cast the column -- and
# lets every side prune. Only direct operands of a comparison are cast; elsewhere (a SELECT list,
# arithmetic, an explicit cast) a bound keeps its TIMESTAMPTZ type.
WINDOW_BOUNDS = ("partition_start", "partition_end")
_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Between, exp.NullSafeEQ, exp.NullSafeNEQ)


def window_bound(name: str) -> exp.Cast:
    """``CAST($<name> AS TIMESTAMP)``: a window bound as one side of a comparison."""
    return exp.Cast(this=q.param(name), to=exp.DataType.build(exp.DataType.Type.TIMESTAMP))


def naive_bounds(tree: exp.Expr) -> exp.Expr:
    """Cast the window bounds that ``tree`` compares with something (in place; see WINDOW_BOUNDS)."""
    for ph in list(tree.find_all(exp.Placeholder)):
        if ph.name in WINDOW_BOUNDS and isinstance(ph.parent, _COMPARISONS):
            ph.replace(window_bound(ph.name))
    return tree


def stages_result(shape: Shape) -> bool:
    """Whether ``shape`` stages the SELECT's rows (``STAGE``; an SCD2 snapshot may stage only its changes)."""
    return shape.role == "stage" and isinstance(shape.node, exp.Create) and shape.node.this.name == STAGE


@dataclass(frozen=True)
class Capabilities:
    """What a substrate can do; the shared shapes read these flags."""

    name: str
    write_path: Literal["sql", "pyiceberg"] = "sql"
    supports_views: bool = True
    supports_create_or_replace: bool = True
    supports_merge: bool = True
    max_merge_update_actions: int = 1
    supports_merge_predicate: bool = True
    partition_ddl: bool = True
    # The attached catalog every lake table is named in (three-part names), for a substrate whose
    # catalog cannot be selected with USE (Iceberg through DuckDB's REST client); None: two-part.
    catalog: str | None = None
    # The materializer records one state row per partition of a range window (Window.partitions), so
    # a range backfill of a separable model may write a batch of partitions with one statement pair.
    range_writes: bool = False


@dataclass(frozen=True)
class Shape:
    """One statement under construction: role, AST and a note for the reader."""

    role: Role
    node: exp.Expr
    note: str | None = None
    text: str | None = None  # the statement's text when not ``render(node)``: a literal model's, as written,
    # or DDL sqlglot's DuckDB generator cannot express (``node`` still carries its parameters)
    test: TestInfo | None = None  # test statements: which ``-- test`` line
