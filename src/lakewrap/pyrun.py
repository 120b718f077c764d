"""Running a Python model's function for one step (docs/python-models.md).

The function gets a :class:`Context`; what it returns (a pyarrow Table, a DuckDB relation, a pandas
or polars DataFrame, an iterator of Arrow record batches) becomes one Arrow table, registered on
the step's connection under the name the model's SELECT reads (``pymodels.relation_name``). From
there the step is a SQL model's: the same compiled plan, staged, guarded, tested and committed
with its state. The function runs in a thread of its own with the model's ``timeout=``; past it the
function's DuckDB query is interrupted, the thread abandoned and the step fails, nothing written.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from lakewrap.errors import Location, ModelError
from lakewrap.plan import make_plan
from lakewrap.pyfiles import error_in_file, function_of
from lakewrap.pymodels import python_of
from lakewrap.spec import ModelSpec, SnapshotStrategy, TableRef


@dataclass(frozen=True)
class Partition:
    """``ctx.partition``: the partition's text (``"2024-01-02"``) and its window ``[start, end)``."""

    value: str
    start: datetime
    end: datetime


@dataclass
class Context:
    """What a Python model's function receives as ``ctx``."""

    con: Any
    partition: Partition | None
    params: dict[str, Any]
    target: str
    _read: Callable[[str, str], Any]
    _allowed: dict[str, TableRef]
    _where: Location
    logs: list[str] = field(default_factory=list)

    def ref(self, name: str) -> Any:
        """The table ``schema.name`` as a DuckDB relation, read as the commit records (pinned)."""
        parts = name.split(".") if isinstance(name, str) else []
        key = name.lower() if isinstance(name, str) else ""
        if len(parts) != 2 or key not in self._allowed:
            declared = ", ".join(sorted(str(t) for t in self._allowed.values())) or "(none)"
            raise ModelError(f"ctx.ref({name!r}) reads a table the model does not declare",
                             location=self._where,
                             hint=f"its declared reads: {declared}; call ctx.ref with the literal name, or list "
                                  "it in deps=[...]")
        ref = self._allowed[key]
        return self._read(ref.schema_name, ref.name)

    def log(self, *parts: Any) -> None:
        """A line in the run log (``lakewrap_log``) of this step."""
        self.logs.append(" ".join(str(p) for p in parts))


@dataclass
class Ran:
    """A function's result for one step, and what goes with it into the commit."""

    spec: ModelSpec  # the spec to plan with (its result's columns filled in where a plan needs them)
    inputs: dict[str, Any]
    provenance: dict[str, Any]
    logs: list[str]


def to_arrow(value: Any, where: Location) -> Any:
    """One Arrow table from whatever the function returned (a located error when it is no table)."""
    import pyarrow as pa  # type: ignore[import-untyped]

    if value is None:
        raise ModelError("the function returned nothing (None)", location=where,
                         hint="return a pyarrow Table, a DuckDB relation, a pandas or polars DataFrame, "
                              "or an iterator of Arrow record batches")
    if isinstance(value, pa.Table):
        return value
    if isinstance(value, pa.RecordBatch):
        return pa.Table.from_batches([value])
    if isinstance(value, pa.RecordBatchReader):
        return value.read_all()
    module = type(value).__module__.split(".")[0].lstrip("_")
    if module == "duckdb" and hasattr(value, "to_arrow_table"):
        return value.to_arrow_table()
    if module == "pandas" and hasattr(value, "columns"):
        return pa.Table.from_pandas(value, preserve_index=False)
    if module == "polars" and hasattr(value, "to_arrow"):
        return value.to_arrow()
    if isinstance(value, Iterable) and not isinstance(value, (str, bytes, dict)):
        batches = list(value)
        if not batches:
            raise ModelError("the function's iterator yielded no record batch", location=where,
                             hint="yield at least one (possibly empty) pyarrow.RecordBatch, so the columns are known")
        if not all(isinstance(b, pa.RecordBatch) for b in batches):
            bad = next(b for b in batches if not isinstance(b, pa.RecordBatch))
            raise ModelError(f"the function's iterator yielded a {type(bad).__name__}, not a pyarrow.RecordBatch",
                             location=where, hint="yield pyarrow.RecordBatch objects of one schema")
        try:
            return pa.Table.from_batches(batches)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise ModelError(f"the record batches do not share one schema: {exc}", location=where) from None
    kind = type(value).__name__
    raise ModelError(f"the function returned {'an' if kind[:1] in 'aeiou' else 'a'} {kind}, which is no table",
                     location=where,
                     hint="return a pyarrow Table, a DuckDB relation, a pandas or polars DataFrame, "
                          "or an iterator of Arrow record batches")


def _required(spec: ModelSpec) -> list[tuple[str, str]]:
    """(column, why) the model's annotations name: they must be in the result."""
    out: list[tuple[str, str]] = []
    if spec.partition is not None:
        out.append((spec.partition.key, "the partition key (partitioned=)"))
    strategy = spec.strategy
    for col in getattr(strategy, "unique_key", ()) or ():
        out.append((col, "a unique_key column"))
    if isinstance(strategy, SnapshotStrategy):
        if strategy.updated_at:
            out.append((strategy.updated_at, "snapshot updated_at="))
        if isinstance(strategy.check_cols, tuple):
            out += [(c, "a snapshot check_cols= column") for c in strategy.check_cols]
    out += [(c.name, "a column= contract") for c in spec.columns]
    return out


def check_columns(spec: ModelSpec, names: list[str], where: Location) -> None:
    """The result holds every column the annotations name (and, with contracts, only those)."""
    have = {n.lower() for n in names}
    for col, why in _required(spec):
        if col.lower() not in have:
            raise ModelError(f"the function's result has no column `{col}` ({why})", location=where,
                             hint="its columns: " + (", ".join(names) or "(none)"))
    if spec.columns:
        declared = {c.name.lower() for c in spec.columns}
        extra = [n for n in names if n.lower() not in declared]
        if extra:
            raise ModelError(f"the function's result has column `{extra[0]}`, which no column= contract declares",
                             location=where, hint="declare every column of the result in column=[...], or none")


def _call(fn: Callable[..., Any], ctx: Context, timeout: float, path: Path, rel: str, where: Location) -> Any:
    """``fn(ctx)`` converted to Arrow, in a thread, within ``timeout`` seconds."""
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["value"] = to_arrow(fn(ctx), where)
        except BaseException as exc:  # reported by the caller, located on the file
            box["error"] = exc

    thread = threading.Thread(target=work, name=f"lakewrap-python-{ctx.target}", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        with suppress(Exception):  # a connection already closed
            ctx.con.interrupt()  # a DuckDB query of the function stops; plain Python keeps running, abandoned
        thread.join(1.0)
        raise ModelError(f"the function did not return within its timeout of {timeout:g} s", location=where,
                         hint="raise timeout= on the decorator, or make the function faster")
    if "error" in box:
        exc = box["error"]
        if isinstance(exc, ModelError):
            raise exc
        if isinstance(exc, Exception):
            raise error_in_file(exc, path, rel, "the function raised") from exc
        raise exc
    return box["value"]


def run_model(substrate: Any, lake: Any, con: Any, spec: ModelSpec, value: str | None, now: datetime) -> Ran:
    """Run the function of ``spec`` for partition ``value``: its result, ready for the model's plan."""
    with substrate.python_reads(lake, con, spec) as (cursor, read, provenance):
        table, logs = evaluate(spec, Path(lake.root), cursor, read, value, now)
    names = list(table.column_names)
    if spec.columns_known is None and spec.strategy.kind in ("merge", "snapshot"):
        spec = spec.replace(output_columns=tuple(names))  # what the LIMIT 0 probe of a SQL model reads
    return Ran(spec, {relation_of(spec): table}, dict(provenance), logs)


def relation_of(spec: ModelSpec) -> str:
    info = python_of(spec)
    assert info is not None
    return str(info["relation"])


def evaluate(spec: ModelSpec, root: Path, cursor: Any, read: Callable[[str, str], Any], value: str | None,
             now: datetime) -> tuple[Any, list[str]]:
    """The function's result as an Arrow table (its columns checked) and its ``ctx.log`` lines;
    ``read(schema, name)`` is ``ctx.ref``'s reader, ``cursor`` is ``ctx.con``."""
    info = python_of(spec)
    assert info is not None
    fn = function_of(spec, root)
    code = getattr(fn, "__code__", None)  # a registered function may live outside the project
    path = Path(code.co_filename) if code is not None and Path(code.co_filename).is_file() else root / spec.path
    where = Location(spec.path, int(info["def_line"]), None, _line(path, int(info["def_line"])))
    plan = make_plan(spec, substrate="ducklake", partition=value, now=now)  # the window, as the step binds it
    b = plan.binding
    partition = Partition(b.value, b.start, b.end) if b is not None else None
    params = {k: v.python() for k, v in plan.params().items()}
    allowed = {u.key: u for u in spec.all_upstreams}
    ctx = Context(cursor, partition, params, str(spec.target), read, allowed, where)
    table = _call(fn, ctx, float(info["timeout"]), path, spec.path, where)
    check_columns(spec, list(table.column_names), where)
    return table, ctx.logs


def _line(path: Path, line: int) -> str | None:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    return lines[line - 1] if 0 < line <= len(lines) else None
