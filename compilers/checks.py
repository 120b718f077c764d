"""Data tests (``-- test``) and schema contracts (``-- column``) compiled into plan statements.

Pure, like every compiler module: a plan in, sqlglot ASTs out, no database. The shapes are
substrate-neutral DuckDB SQL over a *relation*: the staged result (contracts, checked before the
write) or the target table as written in the open transaction (tests, checked after the write and
before COMMIT: write-audit-publish). An Iceberg compiler reuses :func:`failing_rows` and
:func:`test_statement` over the relation its write path exposes (the DuckDB-REST table inside its
transaction, or the staged Arrow result registered as a view before the pyiceberg commit).

One test is one statement: ``WITH failing AS MATERIALIZED (<failing rows>) SELECT (SELECT
count(*) FROM failing) AS __lakewrap_failures, * FROM failing LIMIT 20``. It returns nothing when
the test passes; otherwise up to 20 failing rows, each carrying the total count, so the executor
reads the count and the sample from one computation of the failing rows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

from lakewrap.compilers import sql as q
from lakewrap.compilers.artifacts import STAGE, CompiledStatement, ScriptInfo, TestInfo
from lakewrap.compilers.shape import Shape, naive_bounds
from lakewrap.errors import Location, ModelError
from lakewrap.plan import Param, Plan
from lakewrap.spec import ColumnSpec, SnapshotStrategy, TestSpec
from lakewrap.sqltext import parameters

if TYPE_CHECKING:
    from lakewrap.compilers.base import Compiler

SAMPLE_ROWS = 20
FAILURES = "__lakewrap_failures"
ROW = "t"  # the alias of the tested relation inside every failing-rows query


# --- the relation a test reads --------------------------------------------------------------------


def scope(plan: Plan, compiler: Compiler) -> exp.Expr | None:
    """The rows a test covers: the partition window being written, the current versions of an SCD2
    history, or None (the whole table; also for literal models, whose writes lakewrap cannot see)."""
    conds: list[exp.Expr] = []
    if plan.binding is not None and plan.model.partition is not None and plan.model.wrapped:
        conds.append(compiler.window_condition(plan, ROW))
    if isinstance(plan.model.strategy, SnapshotStrategy):
        conds.append(q.col("is_current", ROW))
    return q.and_all(conds) if conds else None


def scoped_rows(plan: Plan, compiler: Compiler, condition: exp.Expr | None = None) -> exp.Select:
    """``SELECT * FROM <target> AS t WHERE <scope> [AND <condition>]``."""
    sel = exp.select(exp.Star()).from_(q.aliased(compiler.target(plan), ROW), copy=False)
    conds = [c for c in (scope(plan, compiler), condition) if c is not None]
    return sel.where(q.and_all(conds), copy=False) if conds else sel


def _is_null(name: str) -> exp.Expr:
    return exp.Is(this=q.col(name, ROW), expression=exp.Null())


def _not(cond: exp.Expr) -> exp.Expr:
    return exp.Not(this=exp.paren(cond))


# --- failing rows per kind ------------------------------------------------------------------------


def _unique(plan: Plan, compiler: Compiler, test: TestSpec) -> exp.Query:
    names = test.args["columns"]
    # NULL is not a value that can repeat: rows with a NULL in the key are not compared (not_null is)
    present = q.and_all(_not(_is_null(c)) for c in names)
    inner = scoped_rows(plan, compiler, present).subquery(q.ident(ROW), copy=False)
    cols = [q.col(c) for c in names]
    return (exp.select(*cols, exp.alias_(q.count_star(), "occurrences", quoted=True))
            .from_(inner, copy=False).group_by(*(c.copy() for c in cols), copy=False)
            .having(exp.GT(this=q.count_star(), expression=exp.Literal.number(1)), copy=False))


def _not_null(plan: Plan, compiler: Compiler, test: TestSpec) -> exp.Query:
    return scoped_rows(plan, compiler, q.or_all(_is_null(c) for c in test.args["columns"]))


def _accepted_values(plan: Plan, compiler: Compiler, test: TestSpec) -> exp.Query:
    value = q.as_text(q.col(test.args["column"], ROW))
    outside = exp.Not(this=exp.In(this=value, expressions=[q.string(v) for v in test.args["values"]]))
    return scoped_rows(plan, compiler, exp.and_(_not(_is_null(test.args["column"])), outside))


def _relationships(plan: Plan, compiler: Compiler, test: TestSpec) -> exp.Query:
    schema, _, name = str(test.args["to_table"]).partition(".")
    parent = q.aliased(q.table(schema, name), "parent")
    if compiler.caps.catalog is not None:  # three-part names (Iceberg through DuckDB SQL)
        parent.set("catalog", q.ident(compiler.caps.catalog))
    found = exp.Exists(this=exp.select(exp.Literal.number(1)).from_(parent).where(
        exp.EQ(this=q.col(test.args["to_column"], "parent"), expression=q.col(test.args["column"], ROW))))
    return scoped_rows(plan, compiler, exp.and_(_not(_is_null(test.args["column"])), exp.Not(this=found)))


def _row_count(plan: Plan, compiler: Compiler, test: TestSpec) -> exp.Query:
    bounds: list[exp.Expr] = []
    if "min" in test.args:
        bounds.append(exp.GTE(this=q.count_star(), expression=exp.Literal.number(test.args["min"])))
    if "max" in test.args:
        bounds.append(exp.LTE(this=q.count_star(), expression=exp.Literal.number(test.args["max"])))
    return (exp.select(exp.alias_(q.count_star(), "row_count", quoted=True))
            .from_(scoped_rows(plan, compiler).subquery(q.ident(ROW), copy=False), copy=False)
            .having(_not(q.and_all(bounds)), copy=False))


def _expression(plan: Plan, compiler: Compiler, test: TestSpec) -> exp.Query:
    cond = sqlglot.condition(test.args["expression"], dialect="duckdb")
    # a row passes when the expression is TRUE; FALSE and NULL fail
    return scoped_rows(plan, compiler, exp.Not(this=exp.paren(exp.Is(this=exp.paren(cond), expression=exp.true()))))


def _sql_file(plan: Plan, compiler: Compiler, test: TestSpec) -> exp.Query:
    path = test.args["path"]
    where = Location(plan.model.path, test.line)
    text = plan.test_sql.get(path)
    if text is None:
        raise ModelError(f"`-- test sql {path}`: the file was not read", location=where,
                         hint=f"create {path} (project-relative) holding a query that returns the failing rows")
    try:
        trees = [t for t in sqlglot.parse(text, read="duckdb") if t is not None]
    except (ParseError, sqlglot.errors.TokenError) as exc:
        raise ModelError(f"`-- test sql {path}`: {path} is not valid SQL: {str(exc).splitlines()[0]}",
                         location=where, hint="the file holds one SELECT returning the failing rows") from None
    if len(trees) != 1 or not isinstance(trees[0], exp.Query):
        raise ModelError(f"`-- test sql {path}`: {path} must hold exactly one SELECT", location=where,
                         hint="the file holds one SELECT returning the failing rows (no other statements)")
    tree = trees[0]
    unknown = sorted({p.name for p in tree.find_all(exp.Placeholder)} - set(plan.params()) -
                     {"partition_start", "partition_end", "partition_value"})
    if unknown:
        raise ModelError(f"`-- test sql {path}`: unknown parameter ${unknown[0]}", location=where,
                         hint="a test query may use $partition_start, $partition_end and $partition_value")
    out = naive_bounds(tree)
    if compiler.caps.catalog is not None:  # three-part names (Iceberg through DuckDB SQL)
        out = q.in_catalog(out, compiler.caps.catalog)
    assert isinstance(out, exp.Query)
    return out


def _relation(plan: Plan, compiler: Compiler, test: TestSpec) -> exp.Query:
    """A script test's statement: the rows it covers, handed to its Python function (which returns
    the failing ones; :mod:`lakewrap.scripttests`)."""
    return scoped_rows(plan, compiler)


def script_info(plan: Plan, test: TestSpec) -> ScriptInfo:
    """The function of a script test: its file (with the sha256 of the text the plan read) or, for a
    kind a plugin registered with a function, the kind's name."""
    import hashlib

    path = test.args.get("path")
    params = {str(k): str(v) for k, v in dict(test.args.get("params") or {}).items()}
    if path is None:
        return ScriptInfo(path=None, function=test.kind, params=params)
    text = plan.test_sql.get(path)
    if text is None:
        raise ModelError(f"`-- test script {path}`: the file was not read",
                         location=Location(plan.model.path, test.line),
                         hint=f"create {path} (project-relative) with a function returning the failing rows")
    return ScriptInfo(path=path, function=str(test.args.get("function", "check")), params=params,
                      sha256=hashlib.sha256(text.encode()).hexdigest())


Builder = Callable[[Plan, "Compiler", TestSpec], exp.Query]

KINDS: dict[str, Builder] = {
    "unique": _unique,
    "not_null": _not_null,
    "accepted_values": _accepted_values,
    "relationships": _relationships,
    "row_count": _row_count,
    "expression": _expression,
    "sql": _sql_file,
    "script": _relation,
}
# kinds whose statement is the relation a Python function reads, not a failing-rows query
SCRIPTS: set[str] = {"script"}


def register_kind(name: str, builder: Builder | None = None) -> None:
    """Let a plugin compile its own ``-- test`` kind (its parser is registered with the keyword
    registry); without ``builder``, the kind is a script kind (:func:`lakewrap.scripttests.script_kind`)."""
    KINDS[name] = builder or _relation
    if builder is None:
        SCRIPTS.add(name)


def failing_rows(plan: Plan, compiler: Compiler, test: TestSpec) -> exp.Query:
    """The query returning the rows (or groups) that fail ``test``."""
    builder = KINDS.get(test.kind)
    if builder is None:
        raise ModelError(f"test kind `{test.kind}` has no compiler", location=Location(plan.model.path, test.line),
                         hint="the plugin that parses this kind must also call lakewrap.compilers.checks.register_kind")
    return builder(plan, compiler, test)


def test_name(test: TestSpec) -> str:
    """A readable, stable name: ``unique order_id``, ``accepted_values status=a,b``."""
    parts = [test.kind]
    for key, value in test.args.items():
        text = ",".join(map(str, value)) if isinstance(value, list) else str(value)
        parts.append(text if key in ("columns", "expression", "path", "column") and test.kind != "accepted_values"
                     else f"{key}={text}")
    if test.kind == "accepted_values":
        parts = [test.kind, f"{test.args['column']}={','.join(test.args['values'])}"]
    elif test.kind == "relationships":
        parts = [test.kind, f"{test.args['column']} -> {test.args['to_table']}.{test.args['to_column']}"]
    elif test.kind in SCRIPTS:
        where = [f"{test.args['path']}:{test.args.get('function', 'check')}"] if "path" in test.args else []
        parts = [test.kind, *where, *(f"{k}={v}" for k, v in dict(test.args.get("params") or {}).items())]
    return " ".join(parts)


def test_statement(rows: exp.Query) -> exp.Select:
    """``WITH failing AS MATERIALIZED (<rows>) SELECT (SELECT count(*) FROM failing) AS
    __lakewrap_failures, * FROM failing LIMIT 20``: the failing rows computed once, counted, sampled.

    Not ``count(*) OVER ()`` over the rows: DuckDB 1.5.5's window operator now and then fails that
    query with "INTERNAL Error: Attempted to access index 0 within vector of size 0" (in
    ``WindowLocalSourceState::Finalize``), measured in 2 of 30 runs of an Iceberg data test.
    """
    failing = q.ident("failing")
    count = exp.select(q.count_star()).from_(exp.Table(this=failing.copy()), copy=False)
    total = exp.alias_(count.subquery(copy=False), FAILURES, quoted=True)
    sel = exp.select(total, exp.Star()).from_(exp.Table(this=failing.copy()), copy=False)
    sel = sel.with_(failing, as_=rows, materialized=True, copy=False)
    return sel.limit(exp.Literal.number(SAMPLE_ROWS), copy=False)  # a literal: an int would be parsed


def test_shapes(plan: Plan, compiler: Compiler) -> list[Shape]:
    """One ``test`` statement per ``-- test`` line, in file order."""
    out = []
    for test in plan.model.tests:
        name = test_name(test)
        script = script_info(plan, test) if test.kind in SCRIPTS else None
        info = TestInfo(name=name, kind=test.kind, severity=test.severity, line=test.line, script=script)
        rows = failing_rows(plan, compiler, test)
        node = rows if script is not None else test_statement(rows)
        note = (f"{name} (severity {test.severity}): these rows go to "
                f"{script.path + ':' if script.path else 'the plugin function '}{script.function}()"
                if script is not None else f"{name} (severity {test.severity})")
        out.append(Shape("test", node, note, test=info))
    return out


# --- contracts ------------------------------------------------------------------------------------


def contract_shapes(plan: Plan, relation: exp.Table, database: str | None) -> list[Shape]:
    """Guards that ``relation`` has exactly the declared columns and types, and no NULL where
    ``not_null`` is declared. ``database`` is where DuckDB lists the relation (``temp`` for the
    stage; None for the lake's current database)."""
    contracts = plan.model.columns
    if not contracts:
        return []
    return [Shape("guard", _types_guard(plan, relation, database), "contract: exact column names and types"),
            *([Shape("guard", _not_null_guard(plan, relation, contracts), "contract: not_null columns")]
              if any(c.not_null for c in contracts) else [])]


def _types_guard(plan: Plan, relation: exp.Table, database: str | None) -> exp.Select:
    path = plan.model.path
    # The declared type as DuckDB spells it: typeof(CAST(NULL AS <type>)) is the text duckdb_columns() shows.
    declared = exp.Values(expressions=[
        exp.Tuple(expressions=[
            q.string(c.name), exp.Literal.number(c.line),
            exp.Anonymous(this="typeof", expressions=[
                exp.cast(exp.Null(), exp.DataType.build(c.type, dialect="duckdb"))]),
        ]) for c in plan.model.columns
    ], alias=exp.TableAlias(this=q.ident("declared"), columns=[q.ident(n) for n in ("name", "line", "type")]))
    db = q.string(database) if database is not None else exp.func("current_database")
    actual = (exp.select(exp.alias_(exp.column("column_name"), "name", quoted=True),
                         exp.alias_(exp.column("data_type"), "type", quoted=True))
              .from_(exp.Table(this=exp.Anonymous(this="duckdb_columns")))
              .where(q.and_all([
                  exp.EQ(this=exp.column("database_name"), expression=db),
                  exp.EQ(this=exp.column("schema_name"), expression=q.string(relation.db or "main")),
                  exp.EQ(this=exp.column("table_name"), expression=q.string(relation.name)),
              ])))
    d, a = "declared", "actual"
    same_name = exp.EQ(this=exp.Lower(this=q.col("name", d)), expression=exp.Lower(this=q.col("name", a)))
    differs = exp.NullSafeNEQ(this=q.col("type", d), expression=q.col("type", a))
    problem = exp.Case(ifs=[
        exp.If(this=exp.Is(this=q.col("name", a), expression=exp.Null()),
               true=q.concat([q.string(f"{path}:"), q.as_text(q.col("line", d)), q.string(": column `"),
                              q.col("name", d), q.string("` is declared "), q.col("type", d),
                              q.string(" but the SELECT does not return it")])),
        exp.If(this=exp.Is(this=q.col("name", d), expression=exp.Null()),
               true=q.concat([q.string(f"{path}: the SELECT returns column `"), q.col("name", a),
                              q.string("` ("), q.col("type", a), q.string(") that no `-- column` declares")])),
    ], default=q.concat([q.string(f"{path}:"), q.as_text(q.col("line", d)), q.string(": column `"),
                         q.col("name", d), q.string("` is declared "), q.col("type", d),
                         q.string(" but the SELECT returns "), q.col("type", a)]))
    joined = (exp.select(exp.alias_(problem, "problem", quoted=True))
              .from_(declared)
              .join(actual.subquery(q.ident(a)), on=same_name, join_type="FULL")
              .where(differs))
    message = exp.Anonymous(this="string_agg", expressions=[q.col("problem"), q.string("; ")])
    raise_ = exp.Anonymous(this="error", expressions=[q.concat([
        q.string("lakewrap contract: "), message,
        q.string(" (nothing was written; cast in the SELECT or change the `-- column` line)")])])
    case = exp.Case(ifs=[exp.If(this=exp.GT(this=q.count_star(), expression=exp.Literal.number(0)), true=raise_)])
    return exp.select(case).from_(joined.subquery(q.ident("problems")))


def _not_null_guard(plan: Plan, relation: exp.Table, contracts: Sequence[ColumnSpec]) -> exp.Select:
    path = plan.model.path
    required = [c for c in contracts if c.not_null]
    counts = [exp.alias_(exp.Sum(this=exp.Case(ifs=[exp.If(this=_null(c.name), true=exp.Literal.number(1))],
                                               default=exp.Literal.number(0))), f"n{i}", quoted=True)
              for i, c in enumerate(required)]
    parts: list[exp.Expr] = []
    for i, c in enumerate(required):
        n = q.col(f"n{i}")
        parts.append(exp.Case(ifs=[exp.If(this=exp.GT(this=n, expression=exp.Literal.number(0)),
                                          true=q.concat([q.string(f"{path}:{c.line}: column `{c.name}` is declared "
                                                                  "not_null but "), q.as_text(n.copy()),
                                                         q.string(" rows are NULL; ")]))],
                              default=q.string("")))
    any_null = q.or_all(exp.GT(this=q.col(f"n{i}"), expression=exp.Literal.number(0)) for i in range(len(required)))
    raise_ = exp.Anonymous(this="error", expressions=[q.concat([q.string("lakewrap contract: "), *parts,
                                                                q.string("nothing was written")])])
    counted = exp.select(*counts).from_(relation.copy())
    return exp.select(exp.Case(ifs=[exp.If(this=any_null, true=raise_)])).from_(counted.subquery(q.ident("nulls")))


def _null(name: str) -> exp.Expr:
    return exp.Is(this=q.col(name), expression=exp.Null())


# --- placing the checks in a plan -----------------------------------------------------------------


def attach(plan: Plan, compiler: Compiler, shapes: list[Shape]) -> list[Shape]:
    """``shapes`` with the contract guards after the stage (before anything is written) and the
    tests after the last write, before the clean-up (inside the transaction, before COMMIT).

    A model without ``-- test`` and ``-- column`` lines gets ``shapes`` back unchanged.
    """
    if not plan.model.tests and not plan.model.columns:
        return shapes
    out = list(shapes)
    if plan.model.columns:
        stage = next((i for i, s in enumerate(out) if s.role == "stage"), None)
        if stage is not None:
            out[stage + 1:stage + 1] = contract_shapes(plan, q.table(None, STAGE), "temp")
        else:  # a view: its columns are checked once it exists, inside the transaction
            write = max(i for i, s in enumerate(out) if s.role in ("write", "literal"))
            out[write + 1:write + 1] = contract_shapes(plan, compiler.target(plan), None)
    if plan.model.tests:
        end = len(out)
        while end > 0 and out[end - 1].role == "cleanup":
            end -= 1
        out[end:end] = test_shapes(plan, compiler)
    return out


def compile_tests(plan: Plan, compiler: Compiler, fallback: dict[str, Param] | None = None,
                  ) -> tuple[CompiledStatement, ...]:
    """Only the test statements of ``plan``, rendered (``lakewrap test``: no write around them).

    ``plan.binding`` None tests the whole table, whatever the model's partitioning; ``fallback``
    binds the parameters the plan does not (a ``-- test sql`` query's window, then).
    """
    available = {**(fallback or {}), **plan.params()}
    out = []
    for shape in test_shapes(plan, compiler):
        used = parameters(shape.node)
        out.append(CompiledStatement(role="test", sql=q.render(shape.node), note=shape.note, test=shape.test,
                                     params={k: available[k] for k in sorted(used) if k in available}))
    return tuple(out)
