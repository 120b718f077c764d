"""The shared statement shapes of every strategy, read through a substrate's :class:`Capabilities`.

A substrate compiler is mostly data: it sets capabilities and overrides a shape only where its
capabilities force a different statement. Pure: no I/O, no database driver.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Literal

from sqlglot import exp

from lakewrap import grammar
from lakewrap.compilers import sql as q
from lakewrap.compilers.artifacts import (
    STAGE,
    CompiledPlan,
    CompiledStatement,
    Effect,
    Role,
    SchemaCheck,
    TestInfo,
    Window,
)
from lakewrap.errors import Location, ModelError, UnsupportedError
from lakewrap.plan import Plan
from lakewrap.spec import (
    AppendStrategy,
    DeleteInsertStrategy,
    LiteralStrategy,
    MergeStrategy,
    SnapshotStrategy,
    TableStrategy,
    TimePartitioning,
    ViewStrategy,
)
from lakewrap.sqltext import parameters, parse_body, take_statement

CHANGES = "__lakewrap_changes"
DELETED = "__lakewrap_deleted"
VALID_FROM = "__lakewrap_valid_from"
TARGET = "target"
SOURCE = "source"


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


_EFFECTS: dict[type, Effect] = {exp.Insert: "insert", exp.Delete: "delete", exp.Update: "update", exp.Merge: "merge"}


def stages_result(shape: Shape) -> bool:
    """Whether ``shape`` stages the SELECT's rows (``STAGE``; an SCD2 snapshot may stage only its changes)."""
    return shape.role == "stage" and isinstance(shape.node, exp.Create) and shape.node.this.name == STAGE


def _effect(shape: Shape) -> Effect | None:
    """What the row count a write returns means (a CTAS counts the rows it inserted); for the stage of
    the SELECT's rows, the size of the result (the executor's "empty result" check)."""
    if stages_result(shape):
        return "stage"
    if shape.role != "write":
        return None
    if isinstance(shape.node, exp.Create):
        return "insert" if shape.node.args.get("kind") == "TABLE" else None
    return _EFFECTS.get(type(shape.node))


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


@dataclass(frozen=True)
class Shape:
    """One statement under construction: role, AST and a note for the reader."""

    role: Role
    node: exp.Expr
    note: str | None = None
    text: str | None = None  # the statement's text when not ``render(node)``: a literal model's, as written,
    # or DDL sqlglot's DuckDB generator cannot express (``node`` still carries its parameters)
    test: TestInfo | None = None  # test statements: which ``-- test`` line


class Compiler:
    """Compiles a :class:`~lakewrap.plan.Plan` into a :class:`CompiledPlan`."""

    caps: ClassVar[Capabilities]

    def compile(self, plan: Plan) -> CompiledPlan:
        """Build, render once, and attach to each statement the parameters it uses."""
        spec = plan.model
        shapes = self.shapes(plan)
        available = plan.params()
        statements: list[CompiledStatement] = []
        for shape in shapes:
            if shape.text is not None:  # a literal model's statement, as written, or DDL sqlglot drops
                text, used = shape.text, parameters(shape.node)
            else:
                text = q.render(shape.node)
                # A named parameter renders as `$name`: text without `$` has none (saves a tree walk).
                used = parameters(shape.node) if "$" in text else set()
            statements.append(
                CompiledStatement(
                    role=shape.role,
                    sql=text,
                    params={k: available[k] for k in sorted(used) if k in available},
                    note=shape.note,
                    effect=_effect(shape),
                    test=shape.test,
                )
            )
        stmts = tuple(statements)
        idem, note = self.idempotency(plan)
        binding = plan.binding
        window = None
        if binding is not None:
            window = Window(
                kind=binding.kind,
                value=binding.value,
                start=binding.start.isoformat(),
                end=binding.end.isoformat(),
                closed="[start, end)" if binding.kind == "time" else "(start, end]",
                lookback=binding.lookback,
            )
        return CompiledPlan(
            model=spec.path.rsplit("/", 1)[-1].removesuffix(".sql"),
            path=spec.path,
            target=str(spec.target),
            strategy=spec.strategy.kind,
            substrate=self.caps.name,
            write_path=self.caps.write_path,
            window=window,
            idempotent=idem,
            idempotent_note=note,
            statements=stmts,
            sql_sha256=CompiledPlan.digest(stmts),
            schema_check=self.schema_check(plan, shapes),
        )

    def probe(self, plan: Plan) -> CompiledStatement:
        """``SELECT * FROM (<model SELECT>) LIMIT 0``: lets the executor read a ``SELECT *`` model's columns."""
        node = self.empty_of(self.query(plan))
        available = plan.params()
        return CompiledStatement(role="stage", sql=q.render(node),
                                 params={k: available[k] for k in sorted(parameters(node)) if k in available})

    # --- dispatch ---------------------------------------------------------------------------------

    def shapes(self, plan: Plan) -> list[Shape]:
        strategy = plan.model.strategy
        builders: dict[type, Callable[[Plan], list[Shape]]] = {
            TableStrategy: self.table,
            ViewStrategy: self.view,
            DeleteInsertStrategy: self.delete_insert,
            MergeStrategy: self.merge,
            AppendStrategy: self.append,
            SnapshotStrategy: self.snapshot,
            LiteralStrategy: self.literal,
        }
        from lakewrap.compilers import checks

        return checks.attach(plan, self, builders[type(strategy)](plan))

    def schema_check(self, plan: Plan, shapes: list[Shape]) -> SchemaCheck | None:
        """How ``run`` compares the result with the live table (``lakewrap.compilers.schema``)."""
        from lakewrap.compilers import schema

        return schema.check_for(plan, self, shapes)

    def idempotency(self, plan: Plan) -> tuple[bool | None, str]:
        match plan.model.strategy:
            case AppendStrategy():
                return False, "append inserts the rows again on every re-run"
            case LiteralStrategy():
                return None, "a literal model runs as written; lakewrap cannot tell whether a re-run is safe"
            case SnapshotStrategy():
                return True, "a re-run with an unchanged source writes no new versions"
            case _:
                return True, "a re-run replaces the same rows"

    # --- helpers ----------------------------------------------------------------------------------

    def query(self, plan: Plan) -> exp.Query:
        """A fresh copy of the model's SELECT AST (parsed once per process), window bounds comparable."""
        statement = take_statement(plan.model.sql, plan.model.path)
        tree = statement.tree
        if plan.binding is not None:
            tree = naive_bounds(tree)
        if self.caps.catalog is not None:
            tree = q.in_catalog(tree, self.caps.catalog)
        assert isinstance(tree, exp.Query)
        # What runs is the user's text with the same substitutions made at token positions, checked
        # on DuckDB's parse tree (lakewrap.grammar); the tree above is for lakewrap's own analysis.
        where = Location(plan.model.path, statement.line)
        q.keep_text(tree, grammar.edited_select(statement.text, bounds=plan.binding is not None,
                                                catalog=self.caps.catalog, rel=plan.model.path, where=where))
        return tree

    def target(self, plan: Plan) -> exp.Table:
        t = plan.model.target
        tbl = q.table(t.schema_name, t.name)
        if self.caps.catalog is not None:
            tbl.set("catalog", q.ident(self.caps.catalog))
        return tbl

    def columns(self, plan: Plan, why: str) -> tuple[str, ...]:
        if plan.columns is None:
            raise ModelError(
                f"{why} needs the model's column list, but the SELECT uses `*`",
                location=Location(plan.model.path, plan.model.body_line),
                hint="list the columns in the SELECT, declare them with `-- column <name> <type>`, "
                "or compile where the lake is reachable so lakewrap can read them",
            )
        return plan.columns

    def setup(self, plan: Plan) -> Shape:
        t = plan.model.target
        catalog = q.ident(self.caps.catalog) if self.caps.catalog is not None else None
        return Shape("setup", exp.Create(this=exp.Table(db=q.ident(t.schema_name), catalog=catalog), kind="SCHEMA",
                                         exists=True))

    def stage(self, plan: Plan, select: exp.Expr) -> Shape:
        node = exp.Create(
            this=q.table(None, STAGE),
            kind="TABLE",
            replace=True,
            properties=exp.Properties(expressions=[exp.TemporaryProperty()]),
            expression=select,
        )
        return Shape("stage", node, "the SELECT's rows, computed once")

    def drop(self, name: str) -> Shape:
        return Shape("cleanup", exp.Drop(tables=[q.table(None, name)], kind="TABLE", exists=True))

    def from_stage(self, alias: str | None = None, relation: str = STAGE) -> exp.Select:
        src = q.table(None, relation)
        return exp.Select().from_(q.aliased(src, alias) if alias else src, copy=False)

    def window_condition(self, plan: Plan, qualifier: str | None = None) -> exp.Expr:
        binding = plan.binding
        assert binding is not None and plan.model.partition is not None
        key = q.col(plan.model.partition.key, qualifier)
        if binding.kind == "time":
            lo: exp.Expr = exp.GTE(this=key, expression=window_bound("partition_start"))
            hi: exp.Expr = exp.LT(this=key.copy(), expression=window_bound("partition_end"))
        else:
            lo = exp.GT(this=key, expression=window_bound("partition_start"))
            hi = exp.LTE(this=key.copy(), expression=window_bound("partition_end"))
        return exp.and_(lo, hi, copy=False)

    def guard_window(self, plan: Plan) -> Shape:
        assert plan.model.partition is not None
        # `cond IS NOT TRUE` also counts rows whose key is NULL: they belong to no window.
        outside = exp.Not(this=exp.Paren(this=exp.Is(this=exp.Paren(this=self.window_condition(plan)),
                                                       expression=exp.true())))
        sel = self.from_stage().where(outside, copy=False)
        key = plan.model.partition.key
        msg = [q.as_text(q.count_star()), q.string(f" rows have {key} outside the partition window "
                                                   "(or NULL); they would be lost or duplicated on re-run")]
        return Shape("guard", q.fail_if(sel, msg), "refuse rows outside the window")

    def window_proven(self, plan: Plan, query: exp.Query) -> bool:
        """Whether the SELECT itself keeps every row inside the window, so the guard can never fire.

        Proven when the top-level SELECT's WHERE has, among its ``AND``-ed conditions, the two
        comparisons the guard makes (``key >= $partition_start`` and ``key < $partition_end``, or
        ``>``/``<=`` for a dynamic window; after :func:`naive_bounds`) on the same column that the
        SELECT returns unchanged as the partition key. A WHERE also drops NULL keys. GROUP BY,
        DISTINCT, HAVING, QUALIFY and LIMIT only drop or merge rows whose key passed the WHERE, so
        they keep the proof; anything else (a UNION, a computed or renamed key, a bound in a
        subquery, another spelling of the comparison) leaves the guard in place.
        """
        assert plan.binding is not None and plan.model.partition is not None
        if not isinstance(query, exp.Select) or (where := query.args.get("where")) is None:
            return False
        key = plan.model.partition.key.lower()
        returned = [e for e in query.expressions if e.alias_or_name.lower() == key and not isinstance(e, exp.Star)]
        star = [e for e in query.expressions if isinstance(e, exp.Star) and not any(e.args.values())]
        if len(returned) == 1 and isinstance(returned[0], exp.Column) and returned[0].name.lower() == key:
            column: exp.Column = returned[0]
        elif not returned and star and not query.args.get("joins"):
            column = exp.column(key)
        else:
            return False
        time = plan.binding.kind == "time"
        wanted = {(exp.GTE if time else exp.GT, "partition_start"), (exp.LT if time else exp.LTE, "partition_end")}
        for cond in where.this.flatten() if isinstance(where.this, exp.And) else [where.this]:
            bound = cond.expression if isinstance(cond, exp.GTE | exp.GT | exp.LT | exp.LTE) else None
            if (isinstance(bound, exp.Cast) and isinstance(bound.this, exp.Placeholder)
                    and bound.to.this == exp.DataType.Type.TIMESTAMP
                    and isinstance(cond.this, exp.Column) and cond.this.name.lower() == key
                    and cond.this.table.lower() == column.table.lower()):
                wanted.discard((type(cond), bound.this.name))
        return not wanted

    def reads_target(self, plan: Plan, query: exp.Query) -> bool:
        """Whether the SELECT reads the table it writes (it must then be staged before a DELETE)."""
        t = plan.model.target
        return any(tbl.name.lower() == t.name.lower() and tbl.db.lower() in ("", t.schema_name.lower())
                   for tbl in query.find_all(exp.Table))

    def guard_keys(self, plan: Plan, keys: tuple[str, ...], check_duplicates: bool,
                   relation: str = STAGE) -> list[Shape]:
        label = ", ".join(keys)
        nulls = q.or_all(exp.Is(this=q.col(k), expression=exp.Null()) for k in keys)
        null_sel = self.from_stage(relation=relation).where(nulls, copy=False)
        out = [Shape("guard", q.fail_if(null_sel, [q.as_text(q.count_star()),
                                                    q.string(f" rows have a NULL unique_key ({label})")]),
                     "refuse NULL keys")]
        if check_duplicates:
            grouped = (
                exp.select(*(q.col(k) for k in keys), copy=False)
                .from_(q.table(None, relation), copy=False)
                .group_by(*(q.col(k) for k in keys), copy=False)
                .having(exp.GT(this=q.count_star(), expression=exp.Literal.number(1)), copy=False)
            )
            example_parts: list[exp.Expr] = []
            for i, k in enumerate(keys):
                example_parts += ([q.string(", ")] if i else []) + [q.as_text(q.col(k))]
            example = exp.Min(this=q.concat(example_parts))
            sel = exp.Select().from_(grouped.subquery(q.ident("dupes"), copy=False), copy=False)
            msg = [q.as_text(q.count_star()),
                   q.string(f" unique_key ({label}) values occur more than once, e.g. ("), example, q.string(")")]
            out.append(Shape("guard", q.fail_if(sel, msg), "refuse duplicate keys"))
        return out

    def bootstrap(self, plan: Plan, source: exp.Expr) -> list[Shape]:
        create = exp.Create(this=self.target(plan), kind="TABLE", exists=True, expression=source)
        out = [Shape("bootstrap", create, "first run: create the table from the result's schema")]
        part = plan.model.partition
        if isinstance(part, TimePartitioning) and self.caps.partition_ddl:
            transforms = {
                "hourly": ("year", "month", "day", "hour"),
                "daily": ("year", "month", "day"),
                "weekly": ("year", "month"),
                "monthly": ("year", "month"),
                "yearly": ("year",),
            }[part.grain.value]
            keys = [exp.Anonymous(this=fn, expressions=[q.col(part.key)]) for fn in transforms]
            out.append(Shape("bootstrap", q.set_partitioned_by(self.target(plan), keys),
                             "physical layout by the partition key (no-op when unchanged)"))
        return out

    def empty_of(self, select: exp.Query) -> exp.Select:
        """``SELECT * FROM (<select>) LIMIT 0``: the result's schema, no rows."""
        return q.limit_zero(exp.select(exp.Star(), copy=False).from_(select.subquery(q.ident("result"), copy=False),
                                                                    copy=False))

    def insert_by_name(self, plan: Plan, select: exp.Expr) -> exp.Insert:
        return exp.Insert(this=self.target(plan), expression=select, by_name=True)

    # --- strategies -------------------------------------------------------------------------------

    def table(self, plan: Plan) -> list[Shape]:
        if not self.caps.supports_create_or_replace:
            # Created on the first run from the result's schema, then emptied and refilled in the
            # same transaction: readers see the old rows or the new ones, never an empty table. The
            # executor first gives the table the result's columns (ALTER TABLE, from the live table).
            shapes = [self.setup(plan), self.stage(plan, self.query(plan))]
            shapes += self.bootstrap(plan, q.limit_zero(self.from_stage().select(exp.Star(), copy=False)))
            note = ("full rebuild: remove every row (before it, the table takes the result's columns: "
                    "ALTER TABLE ... ADD/DROP/RENAME COLUMN, from DESCRIBE)")
            shapes.append(Shape("write", exp.Delete(this=self.target(plan)), note))
            shapes.append(Shape("write", self.insert_by_name(plan, self.from_stage().select(exp.Star(), copy=False)),
                                "full rebuild: insert the result, by column name"))
            shapes.append(self.drop(STAGE))
            return shapes
        if plan.model.columns:  # a contract is checked on the staged result, before the write
            node = exp.Create(this=self.target(plan), kind="TABLE", replace=True,
                              expression=self.from_stage().select(exp.Star()))
            return [self.setup(plan), self.stage(plan, self.query(plan)), Shape("write", node, "full rebuild"),
                    self.drop(STAGE)]
        node = exp.Create(this=self.target(plan), kind="TABLE", replace=True, expression=self.query(plan))
        return [self.setup(plan), Shape("write", node, "full rebuild")]

    def view(self, plan: Plan) -> list[Shape]:
        if not self.caps.supports_views:
            raise UnsupportedError(
                f"{self.caps.name} cannot hold a view (model {plan.model.path})",
                location=Location(plan.model.path),
                hint="use `-- materialized table`, or keep the view on a DuckLake",
            )
        node = exp.Create(this=self.target(plan), kind="VIEW", replace=True, expression=self.query(plan))
        return [self.setup(plan), Shape("write", node, "view over the SELECT")]

    def staged(self, plan: Plan, select: exp.Expr | None = None) -> list[Shape]:
        shapes = [self.setup(plan), self.stage(plan, select if select is not None else self.query(plan))]
        if plan.binding is not None and not self.window_proven(plan, self.query(plan)):
            shapes.append(self.guard_window(plan))  # a deduplicating ``select`` only drops rows of the SELECT
        return shapes

    def unstaged(self, plan: Plan) -> exp.Query | None:
        """The model's SELECT when a write can read it directly: the SELECT keeps its rows inside its
        window if it has one (:meth:`window_proven`), does not read the target, no contract needs the
        staged result and ``on_schema_change ignore`` need not leave a new column out of it.
        Staging then only copies the rows once more (append: 1.5x the SQL time of a plain INSERT at
        1M rows; an SCD2 snapshot of the whole source: 2.2x, benchmarks/strategies.py)."""
        if plan.model.columns or plan.model.on_schema_change == "ignore":
            return None
        query = self.query(plan)
        if plan.binding is not None and not self.window_proven(plan, query):
            return None
        return None if self.reads_target(plan, query) else query

    def delete_insert(self, plan: Plan) -> list[Shape]:
        if (query := self.unstaged(plan)) is not None:
            shapes = [self.setup(plan), *self.bootstrap(plan, self.empty_of(query.copy()))]
            delete = exp.Delete(this=self.target(plan), where=exp.Where(this=self.window_condition(plan)))
            shapes.append(Shape("write", delete, "remove the window's current rows"))
            shapes.append(Shape("write", self.insert_by_name(plan, query),
                                "insert the window's new rows, by column name (the SELECT keeps to the window)"))
            return shapes
        shapes = self.staged(plan)
        shapes += self.bootstrap(plan, q.limit_zero(self.from_stage().select(exp.Star(), copy=False)))
        delete = exp.Delete(this=self.target(plan), where=exp.Where(this=self.window_condition(plan)))
        shapes.append(Shape("write", delete, "remove the window's current rows"))
        shapes.append(Shape("write", self.insert_by_name(plan, self.from_stage().select(exp.Star(), copy=False)),
                            "insert the window's new rows, by column name"))
        shapes.append(self.drop(STAGE))
        return shapes

    def append(self, plan: Plan) -> list[Shape]:
        query = self.query(plan) if plan.binding is None and not plan.model.columns else self.unstaged(plan)
        if query is not None:  # unwindowed, or a window the SELECT keeps; a contract needs the staged result
            shapes = [self.setup(plan)]
            shapes += self.bootstrap(plan, self.empty_of(query.copy()))
            shapes.append(Shape("write", self.insert_by_name(plan, query), "insert the rows, by column name"))
            return shapes
        shapes = self.staged(plan)
        shapes += self.bootstrap(plan, q.limit_zero(self.from_stage().select(exp.Star(), copy=False)))
        shapes.append(Shape("write", self.insert_by_name(plan, self.from_stage().select(exp.Star(), copy=False)),
                            "insert the rows, by column name"))
        shapes.append(self.drop(STAGE))
        return shapes

    def deduped(self, plan: Plan, keys: tuple[str, ...], order_by: str) -> exp.Select:
        """Keep the row with the greatest ``order_by`` per key (``dedupe=latest_by``)."""
        window = exp.Window(
            this=exp.RowNumber(),
            partition_by=[q.col(k) for k in keys],
            order=exp.Order(expressions=[exp.Ordered(this=q.col(order_by), desc=True, nulls_first=False)]),
        )
        rank = exp.EQ(this=window, expression=exp.Literal.number(1))
        ranked = self.query(plan).subquery(q.ident("result"), copy=False)
        return exp.select(exp.Star(), copy=False).from_(ranked, copy=False).qualify(rank, copy=False)

    def merge(self, plan: Plan) -> list[Shape]:
        strategy = plan.model.strategy
        assert isinstance(strategy, MergeStrategy)
        if not self.caps.supports_merge:
            raise UnsupportedError(f"{self.caps.name} has no MERGE", location=Location(plan.model.path))
        if strategy.predicate is not None and not self.caps.supports_merge_predicate:
            raise UnsupportedError(
                f"{self.caps.name} cannot honour unique_key predicate=",
                location=Location(plan.model.path),
                hint="remove predicate=, or use a substrate whose MERGE accepts extra match conditions",
            )
        columns = self.columns(plan, "MERGE")
        keys = strategy.unique_key
        lowered_keys = {k.lower() for k in keys}
        if strategy.update_columns is not None:
            wanted = {c.lower() for c in strategy.update_columns}
            updated = [c for c in columns if c.lower() in wanted]
        else:
            excluded = {c.lower() for c in strategy.exclude_columns} | lowered_keys
            updated = [c for c in columns if c.lower() not in excluded]
        select = (self.deduped(plan, keys, strategy.dedupe_by) if strategy.dedupe_by else self.query(plan))
        shapes = self.staged(plan, select)
        shapes += self.guard_keys(plan, keys, check_duplicates=strategy.dedupe == "error")
        shapes += self.bootstrap(plan, q.limit_zero(self.from_stage().select(exp.Star(), copy=False)))
        on = q.keys_equal(keys, TARGET, SOURCE)
        if strategy.matched == "replace":
            # The same rows as the MERGE, written as a delete and an insert. Both read every target key,
            # but the delete's semi join carries no row positions and updates nothing (10M rows: 0.30 s
            # against 0.35 s; docs/strategies.md). The replaced rows get new row ids, and the change
            # feed shows them deleted and inserted, not updated.
            hit = exp.Exists(this=self.from_stage(SOURCE).select(exp.Literal.number(1), copy=False)
                             .where(on, copy=False))
            shapes.append(Shape("write", exp.Delete(this=q.aliased(self.target(plan), TARGET),
                                                    where=exp.Where(this=hit)),
                                "remove the rows whose key the result holds (matched=replace)"))
            shapes.append(Shape("write", self.insert_by_name(plan, self.from_stage().select(exp.Star(), copy=False)),
                                "insert the result, by column name"))
            shapes.append(self.drop(STAGE))
            return shapes
        if strategy.predicate is not None:
            import sqlglot

            on = exp.and_(on, exp.Paren(this=sqlglot.condition(strategy.predicate, dialect="duckdb")), copy=False)
        whens = []
        if updated:
            sets = [exp.EQ(this=q.col(c), expression=q.col(c, SOURCE)) for c in updated]
            whens.append(exp.When(matched=True, then=exp.Update(expressions=sets)))
        insert = exp.Insert(
            this=exp.Tuple(expressions=[q.col(c) for c in columns]),
            expression=exp.Tuple(expressions=[q.col(c, SOURCE) for c in columns]),
        )
        whens.append(exp.When(matched=False, then=insert))
        node = exp.Merge(
            this=q.aliased(self.target(plan), TARGET),
            using=q.aliased(q.table(None, STAGE), SOURCE),
            on=on,
            whens=exp.Whens(expressions=whens),
        )
        note = "upsert on " + ", ".join(keys) + ("" if updated else " (every column is a key: insert only)")
        shapes.append(Shape("write", node, note))
        shapes.append(self.drop(STAGE))
        return shapes

    def snapshot(self, plan: Plan) -> list[Shape]:
        s = plan.model.strategy
        assert isinstance(s, SnapshotStrategy)
        columns = self.columns(plan, "an SCD2 snapshot")
        keys = s.unique_key
        lowered_keys = {k.lower() for k in keys}
        # The guards check the versions to open, not the whole SELECT (a NULL key is always new, a NULL
        # timestamp is let through to its guard): a key repeated among rows that change nothing
        # writes nothing, and checking every row of the source would cost a second pass over it
        # (at 1M rows, 0.10 s beside the comparison's 0.14 s). Without hard deletes the SELECT is
        # then read once, by the comparison; hard deletes read it twice (which keys left it), so it
        # is staged, as when the SELECT must be (Compiler.unstaged).
        direct = self.unstaged(plan) if s.hard_deletes == "ignore" else None
        if direct is None:
            shapes = self.staged(plan)  # with a watermark (timestamp, hard_deletes=ignore): only the new rows
            source: exp.Expr = q.aliased(q.table(None, STAGE), SOURCE)
            result = self.from_stage()
        else:
            shapes = [self.setup(plan)]
            source = direct.subquery(q.ident(SOURCE), copy=False)
            result = exp.Select().from_(direct.copy().subquery(q.ident("result"), copy=False), copy=False)
        if s.strategy == "timestamp":
            assert s.updated_at is not None
            valid_from: exp.Expr = q.col(s.updated_at, SOURCE)
            empty_ts: exp.Expr = q.col(s.updated_at)
        else:
            valid_from = q.param("run_timestamp")
            empty_ts = exp.cast(exp.Null(), exp.DataType.build(exp.DataType.Type.TIMESTAMPTZ), copy=False)
        meta = [
            exp.alias_(empty_ts.copy(), "valid_from", quoted=True, copy=False),
            exp.alias_(empty_ts, "valid_to", quoted=True, copy=False),
            exp.alias_(exp.cast(exp.Null(), exp.DataType.build(exp.DataType.Type.BOOLEAN), copy=False), "is_current",
                       quoted=True, copy=False),
        ]
        if s.hard_deletes == "new_record":
            no_flag = exp.cast(exp.Null(), exp.DataType.build(exp.DataType.Type.BOOLEAN), copy=False)
            meta.append(exp.alias_(no_flag, "is_deleted", quoted=True, copy=False))
        shapes += self.bootstrap(plan, q.limit_zero(result.select(exp.Star(), *meta, copy=False)))

        current = "current"
        matched: list[exp.Expr] = [q.keys_equal(keys, current, SOURCE), q.col("is_current", current)]
        part, binding = plan.model.partition, plan.binding
        if (s.strategy == "timestamp" and s.hard_deletes == "ignore" and binding is not None
                and binding.kind == "dynamic" and part is not None and s.updated_at is not None
                and part.key.lower() == s.updated_at.lower()):
            # A watermark on updated_at: every row read is past the window's start (the SELECT's WHERE
            # or the window guard), so a current version at or before it is older than all of them
            # and its key a change either way. Comparing only with the newer versions lets the scan
            # of the table skip the files the statistics put before the start: at 10M rows, 0.06 s
            # instead of 0.37 s (benchmarks/strategies.py).
            matched.append(exp.GT(this=q.col(s.updated_at, current), expression=window_bound("partition_start")))
        joined = exp.and_(*matched, copy=False)
        if s.strategy == "timestamp":
            assert s.updated_at is not None
            changed: exp.Expr = exp.GT(this=q.col(s.updated_at, SOURCE), expression=q.col(s.updated_at, current))
        else:
            checked = columns if s.check_cols == "all" else s.check_cols
            assert checked is not None
            cols = [c for c in checked if c.lower() not in lowered_keys]
            changed = q.or_all(
                exp.NullSafeNEQ(this=q.col(c, SOURCE), expression=q.col(c, current)) for c in cols
            ) if cols else exp.false()
        is_new = exp.Is(this=q.col(keys[0], current), expression=exp.Null())
        conditions = [is_new, changed]
        if s.hard_deletes == "new_record":
            conditions.insert(1, q.col("is_deleted", current))
        if s.strategy == "timestamp":
            assert s.updated_at is not None
            conditions.append(exp.Is(this=q.col(s.updated_at, SOURCE), expression=exp.Null()))
        changes = (
            exp.select(*(q.col(c, SOURCE) for c in columns), copy=False)
            .from_(source, copy=False)
            .join(q.left_join(q.aliased(self.target(plan), current), joined), copy=False)
            .where(q.or_all(conditions), copy=False)
        )
        if s.strategy == "timestamp" and s.hard_deletes != "ignore":
            # A key that left the source and came back may carry an old timestamp. When it is not
            # after the key's last recorded change (its last closed version or deletion record), the
            # new version starts at the run's timestamp, so validity intervals never overlap and the
            # history never claims the key existed while it was deleted.
            prior = "prior"
            last_to = (exp.select(*(q.col(k) for k in keys), exp.alias_(exp.Max(this=q.col("valid_to")), "last_to",
                                                                        quoted=True, copy=False), copy=False)
                       .from_(self.target(plan), copy=False).group_by(*(q.col(k) for k in keys), copy=False))
            changes = changes.join(q.left_join(last_to.subquery(q.ident(prior), copy=False),
                                             q.keys_equal(keys, prior, SOURCE)), copy=False)
            bound = exp.func("greatest", q.col("valid_from", current), q.col("last_to", prior))
            fresh = exp.or_(exp.Is(this=bound, expression=exp.Null()), exp.GT(this=valid_from, expression=bound.copy()),
                            copy=False)
            valid_from = exp.Case(ifs=[exp.If(this=fresh, true=valid_from.copy())], default=q.param("run_timestamp"))
        changes = changes.select(exp.alias_(valid_from, VALID_FROM, quoted=True, copy=False), copy=False)
        shapes.append(Shape("stage", exp.Create(
            this=q.table(None, CHANGES), kind="TABLE", replace=True,
            properties=exp.Properties(expressions=[exp.TemporaryProperty()]), expression=changes),
            "new keys and changed rows: the versions to open"))
        shapes += self.snapshot_guards(plan, CHANGES)
        close = exp.Update(
            this=q.aliased(self.target(plan), TARGET),
            expressions=[
                exp.EQ(this=q.col("valid_to"), expression=q.col(VALID_FROM, "changes")),
                exp.EQ(this=q.col("is_current"), expression=exp.false()),
            ],
            from_=exp.From(this=q.aliased(q.table(None, CHANGES), "changes")),
            where=exp.Where(this=exp.and_(q.keys_equal(keys, TARGET, "changes"), q.col("is_current", TARGET),
                                          copy=False)),
        )
        shapes.append(Shape("write", close, "close the superseded current versions"))
        if s.hard_deletes != "ignore":
            gone = exp.Not(this=exp.Exists(this=exp.select(exp.Literal.number(1), copy=False)
                                           .from_(q.aliased(q.table(None, STAGE), SOURCE), copy=False)
                                           .where(q.keys_equal(keys, SOURCE, TARGET), copy=False)))
            live: exp.Expr = q.col("is_current", TARGET)
            if s.hard_deletes == "new_record":
                live = exp.and_(live, exp.Not(this=exp.func("coalesce", q.col("is_deleted", TARGET), exp.false())),
                                copy=False)
                deleted = exp.select(*(q.col(c, TARGET) for c in columns), copy=False).from_(
                    q.aliased(self.target(plan), TARGET), copy=False).where(exp.and_(live.copy(), gone.copy()),
                                                                            copy=False)
                shapes.append(Shape("stage", exp.Create(
                    this=q.table(None, DELETED), kind="TABLE", replace=True,
                    properties=exp.Properties(expressions=[exp.TemporaryProperty()]), expression=deleted),
                    "current versions whose key left the source"))
            shapes.append(Shape("write", exp.Update(
                this=q.aliased(self.target(plan), TARGET),
                expressions=[
                    exp.EQ(this=q.col("valid_to"), expression=q.param("run_timestamp")),
                    exp.EQ(this=q.col("is_current"), expression=exp.false()),
                ],
                where=exp.Where(this=exp.and_(live, gone, copy=False)),
            ), "close versions whose key left the source (hard delete)"))
            if s.hard_deletes == "new_record":
                tomb = exp.select(
                    *(q.col(c) for c in columns),
                    exp.alias_(q.param("run_timestamp"), "valid_from", quoted=True, copy=False),
                    exp.alias_(exp.Null(), "valid_to", quoted=True, copy=False),
                    exp.alias_(exp.true(), "is_current", quoted=True, copy=False),
                    exp.alias_(exp.true(), "is_deleted", quoted=True, copy=False),
                    copy=False,
                ).from_(q.table(None, DELETED), copy=False)
                shapes.append(Shape("write", self.insert_by_name(plan, tomb), "record each hard delete as a version"))
        opened = [
            *(q.col(c) for c in columns),
            exp.alias_(q.col(VALID_FROM), "valid_from", quoted=True, copy=False),
            exp.alias_(exp.Null(), "valid_to", quoted=True, copy=False),
            exp.alias_(exp.true(), "is_current", quoted=True, copy=False),
        ]
        if s.hard_deletes == "new_record":
            opened.append(exp.alias_(exp.false(), "is_deleted", quoted=True, copy=False))
        opening = exp.select(*opened, copy=False).from_(q.table(None, CHANGES), copy=False)
        shapes.append(Shape("write", self.insert_by_name(plan, opening), "open the new versions"))
        shapes.append(self.drop(CHANGES))
        if s.hard_deletes == "new_record":
            shapes.append(self.drop(DELETED))
        if direct is None:
            shapes.append(self.drop(STAGE))
        return shapes

    def snapshot_guards(self, plan: Plan, relation: str) -> list[Shape]:
        """An SCD2 snapshot's guards on the versions to open: no NULL or repeated key, no NULL timestamp."""
        s = plan.model.strategy
        assert isinstance(s, SnapshotStrategy)
        shapes = self.guard_keys(plan, s.unique_key, check_duplicates=True, relation=relation)
        if s.strategy == "timestamp":
            assert s.updated_at is not None
            null_ts = self.from_stage(relation=relation).where(
                exp.Is(this=q.col(s.updated_at), expression=exp.Null()), copy=False)
            shapes.append(Shape("guard", q.fail_if(null_ts, [q.as_text(q.count_star()),
                                                             q.string(f" rows have a NULL {s.updated_at}")]),
                                "refuse versions without a timestamp"))
        return shapes

    def literal(self, plan: Plan) -> list[Shape]:
        statements = parse_body(plan.model.sql, plan.model.path)
        return [Shape("literal", st.tree, text=st.text.strip()) for st in statements]
