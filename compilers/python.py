"""SQL a Python model's ``ctx.ref`` reads with (docs/python-models.md): the table pinned at the
snapshot the materialization records (DuckLake), or the pinned view of a scratch session (Iceberg)."""

from __future__ import annotations

from sqlglot import exp

from lakewrap.compilers import sql as q
from lakewrap.compilers.provenance import at


def read_at(schema: str, name: str, version: int) -> str:
    """``SELECT * FROM "schema"."name" AT (VERSION => n)``."""
    return exp.select(exp.Star()).from_(at(schema, name, version)).sql(dialect="duckdb")


def read(schema: str, name: str) -> str:
    """``SELECT * FROM "schema"."name"``."""
    return exp.select(exp.Star()).from_(q.table(schema, name)).sql(dialect="duckdb")
