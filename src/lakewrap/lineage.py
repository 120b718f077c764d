"""Column-level lineage over a project's whole DAG, from sqlglot's ``sqlglot.lineage``.

Two layers:

* :func:`query_paths`: inside one SELECT, the paths from an output column down to the table
  columns it is computed from, through CTEs, subqueries, joins, ``*``, aggregates, ``CASE``,
  window functions and set operations (``UNION``).
* :class:`Lineage`: the project's relations (every model and every source: seeds and tables of the
  lake no model writes) with their known columns, and each model column's direct inputs, so that
  :meth:`Lineage.upstream` follows a column through the models it reads down to source columns
  and :meth:`Lineage.downstream` to every model column computed from it.

Columns are known from, in this order: a model's ``-- column`` contracts (names and types), the
SELECT list (names; ``*`` expanded with the upstream relations' known columns), a seed's CSV
header and its sidecar's declared types, and, when a lake exists, the lake tables' actual columns
and types (:func:`lake_columns`, a read-only ``information_schema`` query through the substrate).
Nothing here writes anything.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from lakewrap.errors import Location, SelectionError, suggest
from lakewrap.project import Project
from lakewrap.spec import ModelSpec

DIALECT = "duckdb"
UNKNOWN = "UNKNOWN"  # a column whose type nothing says (sqlglot reads it as an unknown type)


# --- one query ------------------------------------------------------------------------------------


def _schema(columns: Mapping[str, Mapping[str, str | None]]) -> dict[str, Any]:
    """``{"schema.table": {col: type}}`` as sqlglot's nested schema mapping."""
    out: dict[str, Any] = {}
    for key, cols in columns.items():
        schema, _, table = key.partition(".")
        out.setdefault(schema, {})[table] = {c: (t or UNKNOWN) for c, t in cols.items()}
    return out


def _roots(sql: Any, columns: Mapping[str, Mapping[str, str | None]]) -> dict[str, Any]:
    """sqlglot's lineage node of every output column of the SELECT ``sql``, by lower-case name (one
    qualification and one walk shared by all columns)."""
    from sqlglot.lineage import lineage

    schema: Any = _schema(columns) or None
    roots = lineage(None, sql, schema=schema, dialect=DIALECT)
    return {name.lower(): node for name, node in roots.items()}


def query_paths(sql: Any, column: str,
                columns: Mapping[str, Mapping[str, str | None]] | None = None) -> list[tuple[str, ...]]:
    """Every path from output ``column`` of the SELECT ``sql`` (text or a sqlglot tree) to a table
    column it reads: ``(column, <cte or subquery>.<col>, ..., schema.table.col)``, sorted.

    ``columns`` are the known columns of the tables read (``{"schema.table": {col: type}}``), used
    to resolve unqualified names and expand ``*``. A column computed from no table column (a
    literal, ``count(*)``) has no path.
    """
    roots = _roots(sql, columns or {})
    if column.lower() not in roots:
        from sqlglot.errors import SqlglotError

        raise SqlglotError(f"Cannot find column '{column}' in query.")
    return _paths(roots[column.lower()], column.lower())


def _paths(root: Any, column: str) -> list[tuple[str, ...]]:
    from sqlglot import exp

    found: set[tuple[str, ...]] = set()

    def walk(node: Any, path: tuple[str, ...]) -> None:
        if isinstance(node.source, exp.Table) and not node.downstream:
            found.add((*path, f"{_table_key(node.source)}.{node.name.rsplit('.', 1)[-1]}"))
            return
        named = getattr(node, "reference_node_name", "")  # the CTE or subquery, not its alias in FROM
        step = ((f"{named}.{node.name.rsplit('.', 1)[-1]}" if named else node.name),) \
            if path and "." in node.name else ()
        for child in node.downstream:
            walk(child, (*path, *step))

    walk(root, (column,))
    return sorted(found)


def _table_key(table: Any) -> str:
    parts = [p for p in (table.args.get("db"), table.this) if p is not None]
    return ".".join(p.name.lower() for p in parts)


def output_names(sql: Any, columns: Mapping[str, Mapping[str, str | None]]) -> tuple[str, ...] | None:
    """The SELECT's output column names with ``*`` expanded from ``columns``; None when a ``*``
    reads a relation whose columns are not known."""
    import sqlglot
    from sqlglot.errors import SqlglotError
    from sqlglot.optimizer.qualify import qualify

    tree = sqlglot.parse_one(sql, dialect=DIALECT) if isinstance(sql, str) else sql.copy()
    try:
        tree = qualify(tree, schema=_schema(columns) or None, dialect=DIALECT, validate_qualify_columns=False,
                       quote_identifiers=False)
    except SqlglotError:
        return None
    names = tuple(n.lower() for n in getattr(tree, "named_selects", ()))
    return None if not names or "*" in names else names


# --- the project ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Relation:
    """A model or a source with what is known of its columns (names in order, types or None)."""

    key: str  # schema.table, lower case
    name: str  # as written
    kind: str  # "model", "seed" or "table" (a lake table no model writes)
    path: str | None  # the model or seed file
    columns: dict[str, str | None] | None  # None: not known
    descriptions: dict[str, str] = field(default_factory=dict)
    line: int | None = None  # a model's first SQL line

    @property
    def location(self) -> Location | None:
        return Location(self.path, self.line) if self.path else None


@dataclass(frozen=True)
class ColumnStep:
    """One column in a lineage tree: which relation, which column, how the model computes it,
    the CTE/subquery columns passed on the way, and the next columns (up- or downstream)."""

    relation: str
    column: str
    kind: str
    path: str | None
    expression: str | None = None
    via: tuple[str, ...] = ()
    next: tuple[ColumnStep, ...] = ()

    @property
    def name(self) -> str:
        return f"{self.relation}.{self.column}"

    def to_dict(self) -> dict[str, Any]:
        return {"column": self.name, "relation": self.relation, "kind": self.kind, "path": self.path,
                "expression": self.expression, "via": list(self.via), "next": [n.to_dict() for n in self.next]}

    def reached(self) -> list[str]:
        """Every column of the tree below this one, sorted (for downstream: every column computed from it)."""
        return sorted({n.name for n in self.next} | {r for n in self.next for r in n.reached()})

    def leaves(self) -> list[str]:
        if not self.next:
            return [self.name]
        return sorted({leaf for n in self.next for leaf in n.leaves()})


class Lineage:
    """Every relation of a project and the direct inputs of every model column."""

    def __init__(self, relations: dict[str, Relation], inputs: dict[str, dict[str, list[tuple[str, ...]]]],
                 expressions: dict[str, dict[str, str]], problems: dict[str, str]) -> None:
        self.relations = relations
        self.inputs = inputs  # model key -> column -> paths (see query_paths)
        self.expressions = expressions  # model key -> column -> its SQL in the model
        self.problems = problems  # model key -> why its lineage is not known
        self.consumers: dict[str, set[str]] = {}  # "rel.col" -> model columns reading it directly
        for key, cols in inputs.items():
            for col, paths in cols.items():
                for p in paths:
                    self.consumers.setdefault(p[-1], set()).add(f"{key}.{col}")

    # --- resolving names ------------------------------------------------------------------------

    def resolve(self, text: str) -> tuple[Relation, str]:
        """``schema.model.column`` (or ``model.column`` where the name is unique) → the relation and
        the column, or a :class:`SelectionError` with a did-you-mean."""
        parts = text.strip().lower().split(".")
        if len(parts) == 3:
            rel = self.relations.get(f"{parts[0]}.{parts[1]}")
        elif len(parts) == 2:
            hits = [r for r in self.relations.values() if r.key.split(".", 1)[1] == parts[0]]
            models = [r for r in hits if r.kind == "model"]
            hits = models if len(models) == 1 else hits  # a model's name wins over a source's
            rel = hits[0] if len(hits) == 1 else None
            if len(hits) > 1:
                raise SelectionError(f"`{parts[0]}` names {len(hits)} relations: "
                                     + ", ".join(sorted(r.name for r in hits)), hint="write schema.model.column")
        else:
            raise SelectionError(f"`{text}` is not a column name", hint="write schema.model.column, e.g. "
                                 "sales.orders.amount")
        if rel is None:
            wanted = ".".join(parts[:-1])
            close = suggest(wanted, [r.key for r in self.relations.values()]
                            + [r.key.split(".", 1)[1] for r in self.relations.values()])
            raise SelectionError(f"no model or source `{wanted}`",
                                 hint=(f"did you mean `{close}`? " if close else "")
                                 + "models and sources: " + ", ".join(sorted(self.relations)))
        column = parts[-1]
        if rel.columns is None:
            raise SelectionError(f"the columns of `{rel.name}` are not known",
                                 location=rel.location,
                                 hint=self.problems.get(rel.key) or "give its SELECT a column list or "
                                 "`-- column` contracts, or run it once so that the lake has its table")
        if column not in rel.columns:
            close = suggest(column, list(rel.columns))
            raise SelectionError(f"`{rel.name}` has no column `{column}`",
                                 location=rel.location,
                                 hint=(f"did you mean `{close}`? " if close else "")
                                 + "its columns: " + ", ".join(rel.columns))
        return rel, column

    # --- walking --------------------------------------------------------------------------------

    def _step(self, key: str, column: str, via: tuple[str, ...], nxt: tuple[ColumnStep, ...]) -> ColumnStep:
        rel = self.relations.get(key)
        return ColumnStep(relation=rel.name if rel else key, column=column, kind=rel.kind if rel else "table",
                          path=rel.path if rel else None, expression=self.expressions.get(key, {}).get(column),
                          via=via, next=nxt)

    def upstream(self, key: str, column: str, via: tuple[str, ...] = (), seen: frozenset[str] = frozenset()) \
            -> ColumnStep:
        """The tree of columns ``key.column`` is computed from, down to source columns."""
        here = f"{key}.{column}"
        children = []
        if here not in seen:
            for path in self.inputs.get(key, {}).get(column, []):
                rel, _, col = path[-1].rpartition(".")
                children.append(self.upstream(rel, col, tuple(path[1:-1]), seen | {here}))
        return self._step(key, column, via, tuple(sorted(children, key=lambda s: s.name)))

    def downstream(self, key: str, column: str, seen: frozenset[str] = frozenset()) -> ColumnStep:
        """The tree of model columns computed from ``key.column``, directly or through other models."""
        here = f"{key}.{column}"
        children = []
        if here not in seen:
            for reader in sorted(self.consumers.get(here, ())):
                rel, _, col = reader.rpartition(".")
                via = next((tuple(p[1:-1]) for p in self.inputs[rel][col] if p[-1] == here), ())
                children.append(replace(self.downstream(rel, col, seen | {here}), via=via))
        return self._step(key, column, (), tuple(children))


def passes_through(step: ColumnStep) -> bool:
    """Whether the model's column is a plain reference to a column of that name (``t.c AS c``)."""
    return (step.expression or "").lower().rsplit(".", 1)[-1].strip('"') == step.column


def render_text(tree: ColumnStep, direction: str) -> str:
    """The tree as indented text, one column a line: ``name  = expression  [file]``."""
    lines: list[str] = []

    def line(step: ColumnStep, prefix: str, branch: str) -> None:
        text = step.name
        if step.via:
            text += "  via " + ", ".join(step.via)
        if step.expression and step.kind == "model" and not passes_through(step):
            text += f"  = {step.expression}"
        text += f"  [{step.kind}{' ' + step.path if step.path else ''}]"
        lines.append(prefix + branch + text)
        inner = prefix + ("    " if branch in ("└── ", "") else "│   ")
        for i, child in enumerate(step.next):
            line(child, inner if branch else "", "└── " if i == len(step.next) - 1 else "├── ")

    line(tree, "", "")
    if direction == "upstream":
        lines.append("sources: " + (", ".join(tree.leaves()) if tree.next else "(none)"))
    else:
        lines.append("computed from it: " + (", ".join(tree.reached()) or "(none)"))
    return "\n".join(lines) + "\n"


# --- building it ----------------------------------------------------------------------------------


def seed_relations(root: Path) -> dict[str, Relation]:
    """Every seed as a relation: columns from the CSV header (or the sidecar's ``[columns]``),
    types from the sidecar."""
    from lakewrap.seedfiles import seeds
    from lakewrap.seedformat import _first_record  # the one reader of a seed's first record

    out: dict[str, Relation] = {}
    for seed in seeds(root):
        declared = dict(seed.format.columns)
        names = list(declared) if not seed.format.header else _first_record(seed.path, seed.format)
        cols = {n.strip().lower(): declared.get(n.strip()) for n in names if n.strip()}
        out[seed.target.lower()] = Relation(seed.target.lower(), seed.target, "seed", seed.rel, cols)
    return out


def lake_columns(root: Path) -> dict[str, dict[str, str]] | None:
    """The lake's tables and their columns with types (``information_schema``, read-only through the
    substrate's ``query``), None when the project has no lake or it cannot be read."""
    from lakewrap.errors import LakewrapError
    from lakewrap.inspect import query

    text = ("SELECT table_schema, table_name, column_name, data_type FROM information_schema.columns "
            "WHERE table_schema NOT IN ('main', 'information_schema', 'pg_catalog', 'lakewrap') "
            "ORDER BY table_schema, table_name, ordinal_position")
    try:
        result = query(root, text)
    except LakewrapError:
        return None
    out: dict[str, dict[str, str]] = {}
    for schema, table, column, type_ in result.rows:
        if ":" in str(table):
            continue  # lakewrap's own bookkeeping tables
        out.setdefault(f"{schema}.{table}".lower(), {})[str(column).lower()] = str(type_)
    return out


def build(project: Project, root: Path, lake: Mapping[str, Mapping[str, str]] | None = None) -> Lineage:
    """The lineage of every model of ``project``; ``lake``: :func:`lake_columns`, when a lake exists."""
    relations = seed_relations(root)
    lake = lake or {}
    for key, cols in lake.items():
        seed = relations.get(key)
        if seed is not None and seed.columns is not None:
            declared = seed.columns
            relations[key] = Relation(key, seed.name, "seed", seed.path,
                                      {c: cols.get(c, declared.get(c)) for c in (declared or cols)})
        elif key not in project.models:
            relations[key] = Relation(key, key, "table", None, dict(cols))
    inputs: dict[str, dict[str, list[tuple[str, ...]]]] = {}
    expressions: dict[str, dict[str, str]] = {}
    problems: dict[str, str] = {}
    for spec in project.order():
        key = spec.target.key
        known: dict[str, dict[str, str | None]] = {k: dict(r.columns) for k, r in relations.items()
                                                   if r.columns is not None}
        tree, why = _tree(spec)
        outputs = _model_columns(spec, tree, known, lake.get(key))
        if why is not None:
            problems[key] = why
        elif outputs is None:
            problems[key] = ("its SELECT reads `*` of a relation whose columns are not known: give "
                             "`-- column` contracts, or run its upstream first")
        relations[key] = Relation(key, str(spec.target), "model", spec.path, outputs,
                                  {c.name.lower(): c.description for c in spec.columns if c.description},
                                  spec.body_line)
        if tree is None or outputs is None:
            continue
        inputs[key], expressions[key] = {}, {}
        try:
            roots = _roots(tree, known)
        except Exception as exc:  # sqlglot's lineage cannot follow this query
            problems[key] = str(exc)
            roots = {}
        for col in outputs:
            node = roots.get(col)
            if node is None:
                problems.setdefault(key, f"column `{col}` is not followed by sqlglot's lineage")
                inputs[key][col] = []
                continue
            inputs[key][col] = _paths(node, col)
            expressions[key][col], typed = _expression(node)
            if outputs[col] is None:
                outputs[col] = typed or _passed_type(inputs[key][col], expressions[key][col], col, relations)
    _sources_seen(relations, inputs, problems)
    return Lineage(relations, inputs, expressions, problems)


def _sources_seen(relations: dict[str, Relation], inputs: Mapping[str, Mapping[str, list[tuple[str, ...]]]],
                  problems: dict[str, str]) -> None:
    """A table no seed, model or lake describes gets the columns the models read of it (types
    unknown), and says so."""
    seen: dict[str, dict[str, None]] = {}
    for cols in inputs.values():
        for paths in cols.values():
            for p in paths:
                rel, _, col = p[-1].rpartition(".")
                if rel not in relations or relations[rel].columns is None:
                    seen.setdefault(rel, {})[col] = None
    for rel, names in seen.items():
        relations[rel] = Relation(rel, rel, "table", None, dict(sorted(names.items())))
        problems.setdefault(rel, "no seed or lake table describes it: its columns are those the models "
                                 "read of it, their types unknown")


def _tree(spec: ModelSpec) -> tuple[Any, str | None]:
    """The model's SELECT as a sqlglot tree, or None and why (a literal model has no SELECT)."""
    if spec.strategy.kind == "literal":
        return None, "a literal model's statements have no column lineage"
    if "python" in spec.extensions:  # its SELECT reads the function's result, which no SQL describes
        return None, ("a Python model: its columns are computed by its function, so column lineage stops at "
                      "it (its columns come from its `column=` contracts or its table in the lake)")
    from lakewrap.sqltext import take_query

    try:
        return take_query(spec.sql, spec.path), None
    except Exception as exc:  # reported by `lakewrap compile` with its location
        return None, str(exc)


def _model_columns(spec: ModelSpec, tree: Any, known: Mapping[str, Mapping[str, str | None]],
                   actual: Mapping[str, str] | None) -> dict[str, str | None] | None:
    contract = {c.name.lower(): c.type for c in spec.columns}
    names: Iterable[str] | None = [n.lower() for n in spec.output_columns] if spec.output_columns else None
    if names is None and tree is not None:
        names = output_names(tree, known)
    if names is None and contract:
        names = list(contract)
    if names is None and actual:
        names = list(actual)
    if names is None:
        return None
    actual = actual or {}
    return {n: contract.get(n) or actual.get(n) for n in names}


def _expression(node: Any) -> tuple[str, str | None]:
    """The SELECT item of a lineage root (qualified by sqlglot) as DuckDB SQL, and its type when
    the item says it (a ``CAST``)."""
    from sqlglot import exp

    expr = node.expression
    if isinstance(expr, exp.Alias):
        expr = expr.this
    typed = expr.args["to"].sql(dialect=DIALECT) if isinstance(expr, exp.Cast) else None
    return str(expr.sql(dialect=DIALECT)), typed


def _passed_type(paths: list[tuple[str, ...]], expression: str, column: str,
                 relations: Mapping[str, Relation]) -> str | None:
    """The type of the one column a plain column reference passes on, when that one is known."""
    if len(paths) != 1 or not passes_through(ColumnStep("", column, "model", None, expression)):
        return None
    rel, _, col = paths[0][-1].rpartition(".")
    found = relations.get(rel)
    return (found.columns or {}).get(col) if found is not None else None


def of_project(root: Path, *, with_lake: bool = True) -> Lineage:
    """:func:`build` for the project at ``root`` (its models parsed, its lake read when one exists)."""
    from lakewrap.compile import load_project
    from lakewrap.project import require_project

    root = require_project(root)
    project = load_project(root, None)
    return build(project, root, lake_columns(root) if with_lake else None)
