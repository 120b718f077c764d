"""A Python model's reads on DuckLake (docs/python-models.md): a cursor of the step's connection
with the lake in use, and ``ctx.ref`` reading each table ``AT (VERSION => pin)``, the snapshot the
materialization then records as its pin."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lakewrap.execute import statements as stmts

if TYPE_CHECKING:
    from lakewrap.execute.lake import Lake
    from lakewrap.provenance import Materialization


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


def reproduce_inputs(root: Path, con: Any, m: Materialization) -> dict[str, Any]:
    """``lakewrap reproduce`` of a Python model: its function run again with ``ctx.ref`` reading
    the lake at the materialization's pin; refused (a :class:`StateError`) when the function's
    source is no longer the one that ran."""
    from datetime import datetime, timezone

    from lakewrap.compile import load_project
    from lakewrap.compilers.python import read_at
    from lakewrap.errors import StateError
    from lakewrap.pymodels import python_of
    from lakewrap.pyrun import evaluate, relation_of

    spec = load_project(root, None).models.get(m.target.lower())
    info = python_of(spec) if spec is not None else None
    if spec is None or info is None:
        raise StateError(f"the Python model of `{m.target}` is no longer in the project",
                         hint="reproduce re-runs a Python model's function: it must still be there")
    ran = " ".join(str(st.get("sql", "")) for st in m.statements)
    if f"source {info['source_sha256']} " not in ran:
        raise StateError(f"the function of `{m.target}` changed since this materialization (its source hash "
                         "differs from the one recorded)",
                         hint="reproduce re-runs the function as it is now; check out the source that ran")
    pin = m.pin
    table, _ = evaluate(spec, root, con, lambda schema, name: con.sql(read_at(schema, name, pin)), m.partition,
                        datetime.now(timezone.utc))
    return {relation_of(spec): table}
