"""``lakewrap unit``: a model's SELECT run on fixture rows in an in-memory DuckDB (no lake opened).

A unit test is one TOML file under ``tests/unit/`` (``docs/unit-tests.md``): the model, the
partition, rows for each table the model reads and the rows its SELECT must return. The SELECT is
the model's own text (what ``compile`` prints) with the partition's parameters bound as a run binds
them; the inputs are tables of the same ``schema.name`` in a fresh ``duckdb.connect()``. Rows are
compared as multisets on the columns the expected rows name (floats to 9 significant digits).

How a model's rows are produced is looked up in :data:`RUNNERS` by the model's kind: a SQL model's
SELECT, or a Python model's function (``ctx.ref`` reading the fixture tables; docs/python-models.md),
each a function taking the connection, the spec, the bound parameters and the project root and
returning ``(columns, rows)``.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, time, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

from lakewrap.errors import LakewrapError, Location, ModelError
from lakewrap.spec import ModelSpec

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

UNIT_DIR = "tests/unit"
Rows = list[tuple[Any, ...]]
Runner = Callable[[Any, ModelSpec, dict[str, Any], Path], tuple[list[str], Rows]]
_PARAM = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")
_KEYS = {"model", "partition", "now", "given", "expect", "description"}


def _run_sql(con: Any, spec: ModelSpec, params: dict[str, Any], root: Path) -> tuple[list[str], Rows]:
    used = {k: v for k, v in params.items() if k in set(_PARAM.findall(spec.sql))}
    cur = con.execute(spec.sql, used) if used else con.execute(spec.sql)
    return [d[0] for d in cur.description], cur.fetchall()


def _run_python(con: Any, spec: ModelSpec, params: dict[str, Any], root: Path) -> tuple[list[str], Rows]:
    from lakewrap.compilers.python import read
    from lakewrap.pyrun import evaluate

    now = params.get("run_timestamp") or datetime.now(timezone.utc)
    table, _ = evaluate(spec, root, con, lambda schema, name: con.sql(read(schema, name)),
                        params.get("partition_value"), now)
    return list(table.column_names), [tuple(r.values()) for r in table.to_pylist()]


# The model kind → how its output rows are computed.
RUNNERS: dict[str, Runner] = {"sql": _run_sql, "py": _run_python}


def model_kind(spec: ModelSpec) -> str:
    return "sql" if spec.path.endswith(".sql") else Path(spec.path).suffix.lstrip(".")


@dataclass
class UnitResult:
    """One unit test file's outcome: ``pass``, ``fail`` (rows differ) or ``error`` (cannot run)."""

    path: str
    model: str
    partition: str | None
    status: str
    missing: Rows = field(default_factory=list)
    extra: Rows = field(default_factory=list)
    columns: list[str] = field(default_factory=list)
    error: str | None = None

    def diff(self) -> str:
        """The row diff, set-diff style: ``-`` expected but not produced, ``+`` produced, not expected."""
        head = (f"{self.path}: model {self.model}" + (f", partition {self.partition}" if self.partition else "")
                + f": {len(self.missing)} missing, {len(self.extra)} extra row(s)")
        lines = [head, "  columns: " + ", ".join(self.columns)]
        lines += ["  - " + _show(r) for r in self.missing]
        lines += ["  + " + _show(r) for r in self.extra]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "model": self.model, "partition": self.partition, "status": self.status,
                "columns": self.columns, "missing": [list(r) for r in self.missing],
                "extra": [list(r) for r in self.extra], "error": self.error}


def _show(row: tuple[Any, ...]) -> str:
    return "(" + ", ".join("NULL" if v is None else str(v) for v in row) + ")"


def _locate(path: str, text: str, needle: str) -> Location:
    """The first line holding ``needle`` (the key or table an error is about)."""
    for n, line in enumerate(text.splitlines(), 1):
        col = line.find(needle)
        if col >= 0:
            return Location(path, n, col + 1, line.rstrip())
    return Location(path, 1, 1)


def _load(path: Path, rel: str) -> tuple[dict[str, Any], str]:
    text = path.read_text(encoding="utf-8")
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"\(at line (\d+), column (\d+)\)", str(exc))
        line, col = (int(m.group(1)), int(m.group(2))) if m else (None, None)
        snippet = text.splitlines()[line - 1] if line and line <= len(text.splitlines()) else None
        raise ModelError(f"malformed TOML: {str(exc).split(' (at')[0]}", location=Location(rel, line, col, snippet),
                         hint="a unit test is TOML: model = \"...\", [given.\"schema.table\"] rows = [...], "
                         "[expect] rows = [...] (docs/unit-tests.md)") from None
    for key in doc:
        if key not in _KEYS:
            raise ModelError(f"unknown key `{key}`", location=_locate(rel, text, key),
                             hint="keys: " + ", ".join(sorted(_KEYS)))
    return doc, text


def _sql_type(values: list[Any]) -> str:
    kinds = {type(v) for v in values if v is not None}
    if not kinds:
        return "VARCHAR"
    if kinds <= {bool}:
        return "BOOLEAN"
    if kinds <= {int}:
        return "BIGINT"
    if kinds <= {int, float}:
        return "DOUBLE"
    if kinds <= {datetime}:
        aware = {v.tzinfo is not None for v in values if v is not None}
        return "TIMESTAMPTZ" if aware == {True} else "TIMESTAMP"
    if kinds <= {date}:
        return "DATE"
    if kinds <= {time}:
        return "TIME"
    return "VARCHAR"


def _fixture_table(schema: str, name: str, kinds: dict[str, str]) -> tuple[str, str, str]:
    """The statements that hold a fixture's rows: its schema, its table with these column types
    (DuckDB's names; ``ValueError`` for one sqlglot cannot read), and the INSERT its rows bind to."""
    import sqlglot
    from sqlglot import exp

    from lakewrap.compilers import sql as q

    columns = []
    for column, kind in kinds.items():
        try:
            dtype = exp.DataType.build(kind, dialect="duckdb")
        except (sqlglot.errors.ParseError, sqlglot.errors.TokenError, TypeError, ValueError):
            raise ValueError(f"`{kind}` (column `{column}`) is not one DuckDB type") from None
        columns.append(exp.ColumnDef(this=q.ident(column), kind=dtype))
    table = q.table(schema, name)
    create_schema = q.render(exp.Create(this=exp.Table(db=q.ident(schema)), kind="SCHEMA", exists=True))
    create = q.render(exp.Create(this=exp.Schema(this=table, expressions=columns), kind="TABLE"))
    values = exp.Values(expressions=[exp.Tuple(expressions=[exp.Placeholder() for _ in kinds])])
    insert = q.render(exp.Insert(this=q.table(schema, name), expression=values))
    return create_schema, create, insert


def _rows_of(spec: Any, what: str, rel: str, text: str) -> tuple[list[str], list[dict[str, Any]], dict[str, str]]:
    if not isinstance(spec, dict) or not isinstance(spec.get("rows", []), list):
        raise ModelError(f"`{what}` must be a table with `rows = [{{...}}, ...]`", location=_locate(rel, text, what),
                         hint="rows are inline tables: rows = [{ id = 1, amount = 2.5 }]")
    rows = spec.get("rows", [])
    types = spec.get("types", {})
    cols: list[str] = list(types)
    for row in rows:
        if not isinstance(row, dict):
            raise ModelError(f"`{what}`: each row is an inline table", location=_locate(rel, text, what))
        cols += [c for c in row if c not in cols]
    return cols, rows, types


def _normal(v: Any) -> Any:
    """A value as compared: numbers to 9 significant digits (ints stay exact), datetimes in UTC."""
    if isinstance(v, bool) or v is None:
        return v
    if isinstance(v, int):
        return v
    if isinstance(v, (float, Decimal)):
        f = float(v)
        return int(f) if f.is_integer() and abs(f) < 2**53 else float(f"{f:.9g}")
    if isinstance(v, datetime) and v.tzinfo is not None:
        return v.astimezone(timezone.utc)
    return v


def run_unit_file(path: Path, rel: str, specs: dict[str, ModelSpec], root: Path | None = None) -> UnitResult:
    """Run one unit test file against a fresh in-memory DuckDB; never opens the lake."""
    import duckdb

    from lakewrap.plan import make_plan

    doc, text = _load(path, rel)
    name = doc.get("model")
    if not isinstance(name, str):
        raise ModelError("no `model = \"schema.name\"`", location=Location(rel, 1, 1),
                         hint="name the model under test, e.g. model = \"sales.orders_daily\"")
    spec = specs.get(name.lower())
    if spec is None:
        from difflib import get_close_matches

        close = get_close_matches(name.lower(), list(specs), n=1)
        raise ModelError(f"unknown model `{name}`", location=_locate(rel, text, name),
                         hint=f"did you mean `{close[0]}`?" if close else "name a model as schema.name or name")
    partition = doc.get("partition")
    now = doc.get("now")
    plan = make_plan(spec, partition=None if partition is None else str(partition),
                     now=now if isinstance(now, datetime) else None)
    params = {k: p.python() for k, p in plan.params().items()}
    given = doc.get("given", {})
    reads = {ref.key: ref for ref in spec.all_upstreams}
    for table in given:
        if table.lower() not in reads:
            raise ModelError(f"`{table}` is not an input of model `{spec.target}`",
                             location=_locate(rel, text, table),
                             hint="inputs: " + (", ".join(str(r) for r in reads.values()) or "none"))
    gkeys = {t.lower() for t in given}
    absent = [str(r) for k, r in reads.items() if k not in gkeys]
    if absent:
        raise ModelError(f"no rows given for input(s) {', '.join(absent)} of model `{spec.target}`",
                         location=Location(rel, 1, 1),
                         hint="add [given.\"" + absent[0] + "\"] rows = [] (an empty input is allowed, "
                         "with `types` to declare its columns)")
    con = duckdb.connect(":memory:")
    try:
        con.execute("SET TimeZone = 'UTC'")
        for table, body in given.items():
            cols, rows, types = _rows_of(body, table, rel, text)
            ref = reads[table.lower()]
            kinds = {c: types.get(c) or _sql_type([r.get(c) for r in rows]) for c in cols}
            try:
                create_schema, create, insert = _fixture_table(ref.schema_name, ref.name, kinds)
                con.execute(create_schema)
                con.execute(create)
                if rows:
                    con.executemany(insert, [[r.get(c) for c in cols] for r in rows])
            except (duckdb.Error, ValueError) as exc:
                raise ModelError(f"rows of `{table}` cannot be loaded: {str(exc).splitlines()[0]}",
                                 location=_locate(rel, text, table),
                                 hint="declare the column types: types = { col = \"DECIMAL(18,2)\" }") from None
        runner = RUNNERS.get(model_kind(spec))
        if runner is None:
            raise LakewrapError(f"{rel}: no unit-test runner for {model_kind(spec)} models")
        try:
            out_cols, out_rows = runner(con, spec, params, root if root is not None else path.parent)
        except duckdb.Error as exc:
            return UnitResult(rel, str(spec.target), plan.binding.value if plan.binding else None, "error",
                              error=str(exc).splitlines()[0])
        except ModelError as exc:  # a Python model's function raised, returned no table, ...
            return UnitResult(rel, str(spec.target), plan.binding.value if plan.binding else None, "error",
                              error=exc.render())
    finally:
        con.close()
    ecols, erows, _ = _rows_of(doc.get("expect", {}), "expect", rel, text)
    lower = [c.lower() for c in out_cols]
    for c in ecols:
        if c.lower() not in lower:
            raise ModelError(f"expected column `{c}` is not in the output of `{spec.target}`",
                             location=_locate(rel, text, c), hint="output columns: " + ", ".join(out_cols))
    idx = [lower.index(c.lower()) for c in ecols]
    got = Counter(tuple(_normal(r[i]) for i in idx) for r in out_rows)
    want = Counter(tuple(_normal(r.get(c)) for c in ecols) for r in erows)
    missing, extra = list((want - got).elements()), list((got - want).elements())
    return UnitResult(rel, str(spec.target), plan.binding.value if plan.binding else None,
                      "fail" if missing or extra else "pass", sorted(missing, key=repr), sorted(extra, key=repr),
                      ecols)


def unit_files(root: Path) -> list[Path]:
    folder = root / UNIT_DIR
    return sorted(folder.rglob("*.toml")) if folder.is_dir() else []


@dataclass
class UnitReport:
    results: list[UnitResult]

    @property
    def ok(self) -> bool:
        return all(r.status == "pass" for r in self.results)


def run_unit_tests(root: Path, selectors: Sequence[str] = (), exclude: Sequence[str] = ()) -> UnitReport:
    """Every ``tests/unit/*.toml`` whose model is selected; reads model files only (no lake)."""
    from lakewrap.project import Project, require_project

    root = require_project(Path(root))
    project = Project.load(root)
    specs: dict[str, ModelSpec] = {}
    for s in project.models.values():
        specs[s.target.key] = s
        specs.setdefault(s.name.lower(), s)
    chosen = {s.target.key for s in project.select(selectors, exclude)} if (selectors or exclude) else None
    results = []
    for path in unit_files(root):
        rel = path.relative_to(root).as_posix()
        result = run_unit_file(path, rel, specs, root)
        if chosen is None or specs[result.model.lower()].target.key in chosen:
            results.append(result)
    return UnitReport(results)
