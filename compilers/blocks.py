"""The building blocks of the strategy shapes: the model's SELECT, its target, the set-up, stage,
guards and first-run bootstrap, read through a substrate's :class:`~lakewrap.compilers.shape.Capabilities`.

:class:`Blocks` is the base of :class:`~lakewrap.compilers.strategies.Strategies`; a substrate
compiler overrides a block only where its capabilities force a different statement. Pure: no I/O,
no database driver.
"""

from __future__ import annotations

from typing import ClassVar

from sqlglot import exp

from lakewrap import grammar
from lakewrap.compilers import sql as q
from lakewrap.compilers.artifacts import STAGE
from lakewrap.compilers.shape import PARTITION_UNIT, Capabilities, Shape, naive_bounds, window_bound
from lakewrap.errors import Location, ModelError
from lakewrap.plan import Plan
from lakewrap.spec import TimePartitioning
from lakewrap.sqltext import take_statement


class Blocks:
    """The pieces every strategy is assembled from."""

    caps: ClassVar[Capabilities]

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

        Proven when the top-level SELECT's WHERE bounds (:meth:`bounded_columns`) the same column
        that the SELECT returns unchanged as the partition key. A WHERE also drops NULL keys. GROUP BY,
        DISTINCT, HAVING, QUALIFY and LIMIT only drop or merge rows whose key passed the WHERE, so
        they keep the proof; anything else (a UNION, a computed or renamed key, a bound in a
        subquery, another spelling of the comparison) leaves the guard in place.
        """
        assert plan.binding is not None and plan.model.partition is not None
        if not isinstance(query, exp.Select) or query.args.get("where") is None:
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
        return (column.table.lower(), key) in self.bounded_columns(plan, query)

    def bounded_columns(self, plan: Plan, query: exp.Query) -> set[tuple[str, str]]:
        """The columns, as (qualifier, name) in lower case, that the top-level SELECT's WHERE keeps
        inside the window: among its ``AND``-ed conditions, both comparisons the guard makes
        (``col >= $partition_start`` and ``col < $partition_end``, or ``>``/``<=`` for a dynamic
        window; after :func:`naive_bounds`) on that column. What the window proofs start from
        (:meth:`window_proven`, and a derived key in :mod:`lakewrap.compilers.separable`)."""
        assert plan.binding is not None
        if not isinstance(query, exp.Select) or (where := query.args.get("where")) is None:
            return set()
        time = plan.binding.kind == "time"
        wanted = {(exp.GTE if time else exp.GT, "partition_start"), (exp.LT if time else exp.LTE, "partition_end")}
        seen: dict[tuple[str, str], set[tuple[type, str]]] = {}
        for cond in where.this.flatten() if isinstance(where.this, exp.And) else [where.this]:
            bound = cond.expression if isinstance(cond, exp.GTE | exp.GT | exp.LT | exp.LTE) else None
            if (isinstance(bound, exp.Cast) and isinstance(bound.this, exp.Placeholder)
                    and bound.to.this == exp.DataType.Type.TIMESTAMP and isinstance(cond.this, exp.Column)):
                col = (cond.this.table.lower(), cond.this.name.lower())
                seen.setdefault(col, set()).add((type(cond), bound.this.name))
        return {col for col, got in seen.items() if wanted <= got}

    def reads_target(self, plan: Plan, query: exp.Query) -> bool:
        """Whether the SELECT reads the table it writes (it must then be staged before a DELETE)."""
        t = plan.model.target
        return any(tbl.name.lower() == t.name.lower() and tbl.db.lower() in ("", t.schema_name.lower())
                   for tbl in query.find_all(exp.Table))

    def guard_keys(self, plan: Plan, keys: tuple[str, ...], check_duplicates: bool,
                   relation: str = STAGE, *, per_partition: exp.Expr | None = None) -> list[Shape]:
        """Refuse NULL keys and, with ``check_duplicates``, a key held by two rows; with
        ``per_partition`` (the row's partition, :meth:`partition_of`), two rows of one partition."""
        label = ", ".join(keys)
        nulls = q.or_all(exp.Is(this=q.col(k), expression=exp.Null()) for k in keys)
        null_sel = self.from_stage(relation=relation).where(nulls, copy=False)
        out = [Shape("guard", q.fail_if(null_sel, [q.as_text(q.count_star()),
                                                    q.string(f" rows have a NULL unique_key ({label})")]),
                     "refuse NULL keys")]
        if check_duplicates:
            grouping: list[exp.Expr] = [q.col(k) for k in keys]
            if per_partition is not None:
                grouping.append(per_partition)
            grouped = (
                exp.select(*(q.col(k) for k in keys), copy=False)
                .from_(q.table(None, relation), copy=False)
                .group_by(*grouping, copy=False)
                .having(exp.GT(this=q.count_star(), expression=exp.Literal.number(1)), copy=False)
            )
            example_parts: list[exp.Expr] = []
            for i, k in enumerate(keys):
                example_parts += ([q.string(", ")] if i else []) + [q.as_text(q.col(k))]
            example = exp.Min(this=q.concat(example_parts))
            sel = exp.Select().from_(grouped.subquery(q.ident("dupes"), copy=False), copy=False)
            where = "" if per_partition is None else " in one partition"
            msg = [q.as_text(q.count_star()),
                   q.string(f" unique_key ({label}) values occur more than once{where}, e.g. ("), example,
                   q.string(")")]
            out.append(Shape("guard", q.fail_if(sel, msg), "refuse duplicate keys" + where))
        return out

    def partition_of(self, plan: Plan) -> exp.Expr:
        """``date_trunc(<grain's unit>, <partition key>)``: the partition a row lies in, for a UTC
        time partitioning (lakewrap's weeks, like DuckDB's, start on Monday)."""
        part = plan.model.partition
        assert isinstance(part, TimePartitioning) and part.tz == "UTC"
        unit = PARTITION_UNIT[part.grain.value]
        return exp.TimestampTrunc(this=q.col(part.key), unit=exp.Var(this=unit.upper()))

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

    def staged(self, plan: Plan, select: exp.Expr | None = None, *, query: exp.Query | None = None) -> list[Shape]:
        """Stage ``select`` (default: the model's SELECT), guarded to its window unless proven.

        ``query`` is the model's SELECT tree that ``select`` embeds: the proof only reads it, so it
        spares a parse of the model's text."""
        if select is None:
            select = query = self.query(plan)
        shapes = [self.setup(plan), self.stage(plan, select)]
        if plan.binding is not None and not self.window_proven(plan, query if query is not None else self.query(plan)):
            shapes.append(self.guard_window(plan))  # a deduplicating ``select`` only drops rows of the SELECT
        return shapes

    def direct(self, plan: Plan, query: exp.Query) -> bool:
        """Whether a write can read the model's SELECT ``query`` directly: it keeps its rows inside its
        window if it has one (:meth:`window_proven`), does not read the target, no contract needs the
        staged result and ``on_schema_change ignore`` need not leave a new column out of it.
        Staging then only copies the rows once more (append: 1.5x the SQL time of a plain INSERT at
        1M rows; an SCD2 snapshot of the whole source: 2.2x, benchmarks/strategies.py)."""
        if plan.model.columns or plan.model.on_schema_change == "ignore":
            return False
        if plan.binding is not None and not self.window_proven(plan, query):
            return False
        return not self.reads_target(plan, query)

    def deduped(self, query: exp.Query, keys: tuple[str, ...], order_by: str | None,
                latest: exp.Expr | None = None) -> exp.Select:
        """``query`` keeping one row per key: the greatest ``order_by`` (``dedupe=latest_by``); with
        ``latest`` (a row's partition), the row of the latest partition first, then the greatest
        ``order_by`` within it."""
        order = [] if latest is None else [exp.Ordered(this=latest, desc=True, nulls_first=False)]
        if order_by is not None:
            order.append(exp.Ordered(this=q.col(order_by), desc=True, nulls_first=False))
        window = exp.Window(
            this=exp.RowNumber(),
            partition_by=[q.col(k) for k in keys],
            order=exp.Order(expressions=order),
        )
        rank = exp.EQ(this=window, expression=exp.Literal.number(1))
        ranked = query.subquery(q.ident("result"), copy=False)
        return exp.select(exp.Star(), copy=False).from_(ranked, copy=False).qualify(rank, copy=False)
