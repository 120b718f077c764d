"""A Python model's reads on DuckLake (docs/python-models.md): a cursor of the step's connection
with the lake in use, and ``ctx.ref`` reading each table ``AT (VERSION => pin)``, the snapshot the
materialization then records as its pin."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from lakewrap.execute import statements as stmts

if TYPE_CHECKING:
    from lakewrap.execute.lake import Lake


@contextmanager
def python_reads(lake: Lake, con: Any) -> Iterator[tuple[Any, Any, dict[str, Any]]]:
    from lakewrap.compilers.python import read_at

    cursor = con.cursor()  # its own: a function past its timeout is interrupted there, not the step's
    try:
        with lake.statement_lock:
            cursor.execute(stmts.use(lake.alias))
            pin = int(cursor.execute(stmts.current_snapshot(lake.alias)).fetchone()[0])
        yield cursor, lambda schema, name: cursor.sql(read_at(schema, name, pin)), {"snapshot": pin}
    finally:
        cursor.close()
