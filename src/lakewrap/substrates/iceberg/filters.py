"""pyiceberg row filters from the compiled ``delete_where`` conditions of an Iceberg commit."""

from __future__ import annotations

from datetime import date, datetime, timezone
from typing import Any

from lakewrap.errors import ExecutionError


def count_matching(table: Any, delete: Any) -> int:
    if table is None:
        return 0
    return int(table.scan(row_filter=delete).to_arrow().num_rows)


def to_filter(condition: str, params: dict[str, Any], cursor: Any, schema: Any) -> Any:
    """A pyiceberg row filter from a compiled ``delete_where`` condition.

    The condition is SQL the compiler rendered; it is parsed, not built, here. Parameters take the
    type of the column they are compared with; a ``(k) IN (SELECT k FROM <staged table>)`` reads
    the keys from DuckDB.
    """
    import sqlglot
    from pyiceberg import expressions as ie
    from sqlglot import exp

    types = {f.name: str(f.field_type) for f in schema.fields}

    def name(node: exp.Expr) -> str:
        if not isinstance(node, exp.Column):
            raise ExecutionError(f"cannot use `{node.sql()}` in an Iceberg row filter")
        return node.name

    def value(node: exp.Expr, column: str) -> Any:
        if isinstance(node, exp.Cast):
            node = node.this
        if isinstance(node, exp.Placeholder):
            v = params[node.name]
        elif isinstance(node, exp.Boolean):
            v = node.this
        elif isinstance(node, exp.Literal):
            v = node.to_py()
        else:
            raise ExecutionError(f"cannot use `{node.sql()}` in an Iceberg row filter")
        return typed(v, types.get(column, ""))

    # pyiceberg's predicate classes are pydantic models typed for keyword construction
    comparisons: dict[type, Any] = {exp.EQ: ie.EqualTo, exp.GTE: ie.GreaterThanOrEqual, exp.GT: ie.GreaterThan,
                   exp.LT: ie.LessThan, exp.LTE: ie.LessThanOrEqual}

    def convert(node: exp.Expr) -> Any:
        if isinstance(node, exp.Paren):
            return convert(node.this)
        if isinstance(node, exp.Boolean):
            return ie.AlwaysTrue() if node.this else ie.AlwaysFalse()
        if isinstance(node, exp.And):
            return ie.And(convert(node.this), convert(node.expression))
        if isinstance(node, exp.Or):
            return ie.Or(convert(node.this), convert(node.expression))
        if isinstance(node, exp.Not):
            return ie.Not(convert(node.this))
        for kind, pred in comparisons.items():
            if isinstance(node, kind):
                column = name(node.this)
                return pred(column, value(node.expression, column))
        if isinstance(node, exp.In) and node.args.get("query") is not None:
            lhs = node.this
            columns = [name(c) for c in lhs.expressions] if isinstance(lhs, exp.Tuple) else [name(lhs)]
            keys = cursor.execute(node.args["query"].this.sql(dialect="duckdb")).fetchall()
            if not keys:
                return ie.AlwaysFalse()
            if len(columns) == 1:
                return in_(columns[0], {typed(k[0], types.get(columns[0], "")) for k in keys if k[0] is not None})
            alternatives = [ie.And(*(equal_to(c, typed(v, types.get(c, "")))
                                     for c, v in zip(columns, k, strict=True))) for k in set(keys)]
            return ie.Or(*alternatives) if len(alternatives) > 1 else alternatives[0]
        raise ExecutionError(f"cannot use `{node.sql()}` in an Iceberg row filter")

    in_: Any = ie.In
    equal_to: Any = ie.EqualTo
    return convert(sqlglot.parse_one(condition, read="duckdb"))


def typed(v: Any, field_type: str) -> Any:
    """A Python value as pyiceberg compares it with a field of ``field_type``."""
    if isinstance(v, datetime):
        if field_type == "timestamptz":
            return v if v.tzinfo else v.replace(tzinfo=timezone.utc)
        if field_type == "timestamp":  # lakewrap's session time zone is UTC
            return v.astimezone(timezone.utc).replace(tzinfo=None) if v.tzinfo else v
        if field_type == "date":
            return v.astimezone(timezone.utc).date() if v.tzinfo else v.date()
    if isinstance(v, date) and not isinstance(v, datetime) and field_type in ("timestamp", "timestamptz"):
        return datetime(v.year, v.month, v.day, tzinfo=timezone.utc if field_type == "timestamptz" else None)
    return v
