"""The Iceberg compiler (write path ``pyiceberg``): DuckDB computes, pyiceberg commits.

The plan has two halves:

* SQL statements that run in a scratch DuckDB session where every Iceberg table the model reads
  (its sources and its own target) is a view over ``iceberg_scan`` at a pinned snapshot. They are
  the shared shapes of :class:`~lakewrap.compilers.base.Compiler` -- stage, guards, the SCD2
  change sets -- minus the statements that would write the target. On a first run the target's
  view does not exist yet, and the shared ``CREATE TABLE IF NOT EXISTS ... LIMIT 0`` bootstrap
  makes an empty stand-in with the result's schema, so first and later runs are the same plan.
* :class:`~lakewrap.compilers.artifacts.CommitOp` operations, applied in one pyiceberg
  ``table.transaction()``: ``overwrite`` (delete the rows a filter matches, append the computed
  rows) or ``append``. Merge and SCD2 are computed in DuckDB and written back by key, never with
  pyiceberg's row-by-row ``upsert()``.

Data tests (write-audit-publish): the commit is the write, so the tests cannot read the table after
it. Each reads instead the table as the commit will leave it -- a subquery of the pinned rows the
commit's delete filter keeps plus the rows it appends -- and they run before the commit: a failing
``error`` test means no commit at all.

Capabilities: no views, no ``CREATE OR REPLACE``, no partition DDL (the partition spec is set when
the commit creates the table), MERGE computed rather than executed, and no ``predicate=`` on a
merge (a delete by key cannot honour an extra match condition).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from sqlglot import exp

from lakewrap.compilers import sql as q
from lakewrap.compilers.artifacts import STAGE, CommitOp, CompiledPlan
from lakewrap.compilers.base import Compiler
from lakewrap.compilers.schema import DECIMAL, Changes
from lakewrap.compilers.shape import CHANGES, DELETED, SOURCE, TARGET, VALID_FROM, Capabilities, Shape
from lakewrap.errors import Location, UnsupportedError
from lakewrap.plan import Plan
from lakewrap.spec import MergeStrategy, SnapshotStrategy, TimePartitioning

MATCHED = "__lakewrap_matched"
ROWS = "__lakewrap_rows"
CLOSED = "__lakewrap_closed"
AFTER = "__lakewrap_after"  # the alias of the table-after-the-commit in a test

# A merge into an unpartitioned table matching more keys than this rewrites the table instead of
# filtering by key (see CommitOp.rewrite; benchmarks/iceberg.py).
REWRITE_ABOVE = 1000

# The Iceberg partition transform of each partition grain (Iceberg has no week transform).
TRANSFORMS = {"hourly": "hour", "daily": "day", "weekly": "day", "monthly": "month", "yearly": "year"}

# The statements of a shared shape that stay: everything that computes, nothing that writes.
_KEEP = ("stage", "guard", "bootstrap")


class IcebergCompiler(Compiler):
    """Apache Iceberg through pyiceberg transactions, any catalog."""

    caps = Capabilities(
        name="iceberg",
        write_path="pyiceberg",
        supports_views=False,
        supports_create_or_replace=False,
        supports_merge=True,
        max_merge_update_actions=1,
        supports_merge_predicate=False,
        partition_ddl=False,
    )

    def compile(self, plan: Plan) -> CompiledPlan:
        compiled = super().compile(plan)
        available = plan.params()
        commits = tuple(
            op.replace(params={k: available[k] for k in sorted(names) if k in available})
            for op, names in self.commit_ops(plan)
        )
        return compiled.replace(commits=commits, sql_sha256=CompiledPlan.digest(compiled.statements, commits))

    # --- the SQL half ---------------------------------------------------------------------------

    def shapes(self, plan: Plan) -> list[Shape]:
        """The shared shapes; the tests (last) read the table as the commit will leave it."""
        shapes = super().shapes(plan)
        first = next((i for i, s in enumerate(shapes) if s.role == "test"), None)
        if first is None:
            return shapes
        target, after = self.target(plan), self.after(plan)
        return [*shapes[:first], *(replace(s, node=reading(s.node, target, after)) for s in shapes[first:])]

    def after(self, plan: Plan) -> exp.Query:
        """The target's rows after the commit: those the delete filter keeps, plus the appended rows."""
        if plan.model.strategy.kind == "table":
            return exp.select(exp.Star()).from_(q.table(None, STAGE))
        kept = exp.select(exp.Star()).from_(self.target(plan))
        if (replaced := self.replaced(plan)) is not None:
            # pyiceberg deletes the rows the filter holds for; a NULL keeps the row
            kept = kept.where(exp.Not(this=exp.func("coalesce", exp.paren(replaced), exp.false())))
        rows = exp.select(exp.Star()).from_(q.table(None, ROWS))
        return exp.Union(this=kept, expression=rows, distinct=False, by_name=True)

    def replaced(self, plan: Plan) -> exp.Expr | None:
        """The commit's delete filter (the rows its new rows replace); None for an append."""
        match plan.model.strategy:
            case MergeStrategy(unique_key=keys):
                return self.keys_in(keys, MATCHED)
            case SnapshotStrategy(unique_key=keys):
                return exp.and_(exp.EQ(this=q.col("is_current"), expression=exp.true()), self.keys_in(keys, CLOSED))
        match plan.model.strategy.kind:
            case "table":
                return exp.true()
            case "delete+insert":
                return self.window_condition(plan)
        return None

    def computing(self, shapes: list[Shape]) -> list[Shape]:
        """The shared shapes minus setup, writes and cleanup; bootstraps become stand-ins."""
        out = []
        for s in shapes:
            if s.role not in _KEEP:
                continue
            if s.role == "bootstrap":
                s = Shape("bootstrap", s.node, "first run: an empty stand-in for the target with the result's "
                          "schema (the commit creates the Iceberg table)")
            out.append(s)
        return out

    def table(self, plan: Plan) -> list[Shape]:
        return [self.stage(plan, self.query(plan))]

    def direct(self, plan: Plan, query: exp.Query) -> bool:
        return False  # the commit appends the staged rows: a windowed write always stages them

    def delete_insert(self, plan: Plan) -> list[Shape]:
        shapes = self.computing(super().delete_insert(plan))
        return shapes + self.rows(plan, exp.select(exp.Star()).from_(q.table(None, STAGE)), "the window's new rows")

    def append(self, plan: Plan) -> list[Shape]:
        if plan.binding is None:
            shapes = [self.stage(plan, self.query(plan))]
            shapes += self.bootstrap(plan, exp.select(exp.Star()).from_(q.table(None, STAGE)).limit(0))
            shapes = self.computing(shapes)
        else:
            shapes = self.computing(super().append(plan))
        return shapes + self.rows(plan, exp.select(exp.Star()).from_(q.table(None, STAGE)), "the rows")

    def rows(self, plan: Plan, select: exp.Query, what: str) -> list[Shape]:
        """``__lakewrap_rows``: the rows the commit appends, typed like the target by an INSERT BY NAME.

        The same implicit casts and name matching as DuckLake's ``INSERT ... BY NAME`` into the
        target, so both substrates store the same values with the same column types.
        """
        empty = exp.select(exp.Star()).from_(self.target(plan)).limit(0)
        return [Shape("stage", self.temp(ROWS, empty), "the rows to append, with the target's columns and types"),
                Shape("stage", exp.Insert(this=q.table(None, ROWS), expression=select, by_name=True),
                      f"{what}: the rows to append, by column name")]

    def merge(self, plan: Plan) -> list[Shape]:
        shapes = self.computing(super().merge(plan))
        strategy = plan.model.strategy
        assert isinstance(strategy, MergeStrategy)
        columns = self.columns(plan, "MERGE")
        keys = strategy.unique_key
        lowered = {k.lower() for k in keys}
        if strategy.update_columns is not None:
            wanted = {c.lower() for c in strategy.update_columns}
            updated = {c for c in columns if c.lower() in wanted}
        else:
            excluded = {c.lower() for c in strategy.exclude_columns} | lowered
            updated = {c for c in columns if c.lower() not in excluded}
        on = q.keys_equal(keys, TARGET, SOURCE)
        # every column of the target row, the updated ones from the result (as MERGE's UPDATE SET:
        # a column the result no longer returns keeps its value)
        replaced = [exp.alias_(q.col(c, SOURCE), c, quoted=True) for c in columns if c in updated]
        row = exp.Column(this=exp.Star(replace=replaced) if replaced else exp.Star(), table=q.ident(TARGET))
        matched = (
            exp.select(row)
            .from_(q.aliased(self.target(plan), TARGET))
            .join(q.aliased(q.table(None, STAGE), SOURCE), on=on, join_type="INNER")
        )
        shapes.append(Shape("stage", self.temp(MATCHED, matched),
                            "the target's rows whose key is in the result, updated: they replace those rows"))
        fresh = (
            exp.select(*(q.col(c, SOURCE) for c in columns))
            .from_(q.aliased(q.table(None, STAGE), SOURCE))
            .where(exp.Not(this=exp.Exists(this=exp.select(exp.Literal.number(1))
                                           .from_(q.aliased(self.target(plan), TARGET)).where(on.copy()))))
        )
        rows = exp.Union(this=exp.select(exp.Star()).from_(q.table(None, MATCHED)), expression=fresh,
                         distinct=False, by_name=True)
        return shapes + self.rows(plan, rows, "updated rows and new keys")

    def snapshot(self, plan: Plan) -> list[Shape]:
        shapes = self.computing(super().snapshot(plan))
        s = plan.model.strategy
        assert isinstance(s, SnapshotStrategy)
        columns = self.columns(plan, "an SCD2 snapshot")
        keys = s.unique_key
        changes = "changes"
        closes: exp.Expr = exp.Not(this=exp.Is(this=q.col(keys[0], changes), expression=exp.Null()))
        if s.hard_deletes != "ignore":
            gone = exp.Not(this=exp.Exists(this=exp.select(exp.Literal.number(1))
                                           .from_(q.aliased(q.table(None, STAGE), SOURCE))
                                           .where(q.keys_equal(keys, SOURCE, TARGET))))
            live: exp.Expr = q.col("is_current", TARGET)
            if s.hard_deletes == "new_record":
                live = exp.and_(live, exp.Not(this=exp.func("coalesce", q.col("is_deleted", TARGET), exp.false())))
            closes = exp.or_(closes, exp.paren(exp.and_(live, gone)))
        kept = [q.col(c, TARGET) for c in columns] + [q.col("valid_from", TARGET)]
        closed = exp.select(
            *kept,
            exp.alias_(exp.func("coalesce", q.col(VALID_FROM, changes), q.param("run_timestamp")), "valid_to",
                       quoted=True),
            exp.alias_(exp.false(), "is_current", quoted=True),
            *([q.col("is_deleted", TARGET)] if s.hard_deletes == "new_record" else []),
        ).from_(q.aliased(self.target(plan), TARGET)).join(
            q.aliased(q.table(None, CHANGES), changes), on=q.keys_equal(keys, TARGET, changes), join_type="LEFT",
        ).where(exp.and_(q.col("is_current", TARGET), exp.paren(closes)))
        shapes.append(Shape("stage", self.temp(CLOSED, closed),
                            "current versions that are superseded or whose key left the source, closed"))
        opened = [
            *(q.col(c) for c in columns),
            exp.alias_(q.col(VALID_FROM), "valid_from", quoted=True),
            exp.alias_(exp.Null(), "valid_to", quoted=True),
            exp.alias_(exp.true(), "is_current", quoted=True),
        ]
        if s.hard_deletes == "new_record":
            opened.append(exp.alias_(exp.false(), "is_deleted", quoted=True))
        parts: list[exp.Query] = [exp.select(exp.Star()).from_(q.table(None, CLOSED))]
        if s.hard_deletes == "new_record":
            parts.append(exp.select(
                *(q.col(c) for c in columns),
                exp.alias_(q.param("run_timestamp"), "valid_from", quoted=True),
                exp.alias_(exp.Null(), "valid_to", quoted=True),
                exp.alias_(exp.true(), "is_current", quoted=True),
                exp.alias_(exp.true(), "is_deleted", quoted=True),
            ).from_(q.table(None, DELETED)))
        parts.append(exp.select(*opened).from_(q.table(None, CHANGES)))
        rows = parts[0]
        for part in parts[1:]:
            rows = exp.Union(this=rows, expression=part, distinct=False, by_name=True)
        return shapes + self.rows(plan, rows, "closed versions, hard-delete records and new versions")

    def literal(self, plan: Plan) -> list[Shape]:
        raise UnsupportedError(
            f"a literal model cannot write an Iceberg table (model {plan.model.path})",
            location=Location(plan.model.path),
            hint="wrap it (`-- materialized table|incremental|snapshot`), or keep it on a DuckLake",
        )

    def temp(self, name: str, select: exp.Expr) -> exp.Create:
        return exp.Create(this=q.table(None, name), kind="TABLE", replace=True,
                          properties=exp.Properties(expressions=[exp.TemporaryProperty()]), expression=select)

    # --- the commit half ------------------------------------------------------------------------

    def commit_ops(self, plan: Plan) -> list[tuple[CommitOp, set[str]]]:
        """Each commit operation with the parameter names its filter uses."""
        target = str(plan.model.target)
        from_stage = q.render(exp.select(exp.Star()).from_(q.table(None, STAGE)))
        from_rows = q.render(exp.select(exp.Star()).from_(q.table(None, ROWS)))
        part = plan.model.partition
        replaced = self.replaced(plan)
        delete_where = q.render(replaced) if replaced is not None else None
        spec = ""
        layout: tuple[str, str] | None = None
        if isinstance(part, TimePartitioning):
            layout = (TRANSFORMS[part.grain.value], part.key)
            spec = f"; a new table is partitioned by {layout[0]}({layout[1]})"
        match plan.model.strategy.kind:
            case "table":
                return [(CommitOp(partition=layout, operation="overwrite", table=target, rows=from_stage,
                                  delete_where="TRUE", note="full rebuild: replace every row" + spec), set())]
            case "delete+insert":
                assert replaced is not None
                return [(CommitOp(partition=layout, operation="overwrite", table=target, rows=from_rows,
                                  delete_where=delete_where, note="replace the window's rows" + spec),
                         {p.name for p in replaced.find_all(exp.Placeholder)})]
            case "append":
                return [(CommitOp(partition=layout, operation="append", table=target, rows=from_rows,
                                  note="insert the rows" + spec), set())]
            case "merge":
                merge = plan.model.strategy
                assert isinstance(merge, MergeStrategy)
                note = ("upsert on " + ", ".join(merge.unique_key) + " computed in DuckDB: replace the matched "
                        "rows, add the new keys" + spec)
                whole = part is None  # an unpartitioned target may be rewritten instead (CommitOp.rewrite)
                count = exp.select(q.count_star()).from_(q.table(None, MATCHED))
                return [(CommitOp(partition=layout, operation="overwrite", table=target, rows=from_rows,
                                  delete_where=delete_where, note=note,
                                  rewrite=q.render(self.after(plan)) if whole else None,
                                  rewrite_keys=q.render(count) if whole else None,
                                  rewrite_above=REWRITE_ABOVE if whole else None,
                                  replaces_matched=merge.matched == "replace"), set())]
            case "snapshot":
                note = ("SCD2: replace the closed current versions, add the new versions (nothing is committed "
                        "when no row changed)" + spec)
                return [(CommitOp(partition=layout, operation="overwrite", table=target, rows=from_rows,
                                  delete_where=delete_where, note=note), set())]
        return []  # pragma: no cover - view and literal plans are refused by their shapes

    def keys_in(self, keys: tuple[str, ...], source: str) -> exp.Expr:
        """``("k1", "k2") IN (SELECT "k1", "k2" FROM <source>)``; one key without the parentheses."""
        lhs: exp.Expr = q.col(keys[0]) if len(keys) == 1 else exp.Tuple(expressions=[q.col(k) for k in keys])
        sub = exp.select(*(q.col(k) for k in keys)).from_(q.table(None, source))
        return exp.In(this=lhs, query=exp.Subquery(this=sub))


def reading(node: exp.Expr, table: exp.Table, query: exp.Query) -> exp.Expr:
    """``node`` with every reference to ``table`` reading ``(query)`` instead (aliases kept)."""
    def swap(n: exp.Expr) -> exp.Expr:
        if isinstance(n, exp.Table) and n.name == table.name and n.db == table.db and not n.catalog:
            alias = n.args.get("alias") or exp.TableAlias(this=q.ident(AFTER))
            return exp.Subquery(this=query.copy(), alias=alias)
        return n

    return node.transform(swap, copy=False)


# --- the scratch DuckDB session ------------------------------------------------------------------
# A materialization computes in a fresh in-memory database attached for it, where each Iceberg table
# it reads is a view over iceberg_scan at the snapshot it pins. Metadata locations are catalog data
# (file:// or s3:// URIs), never credentials; they are string literals escaped by sqlglot.


def attach_memory(alias: str) -> str:
    """``ATTACH ':memory:' AS "<alias>"``: a database of its own for one materialization."""
    return q.render(q.command("ATTACH", exp.Literal.string(":memory:"), "AS", q.ident(alias)))


def create_schema(schema: str) -> str:
    return q.render(exp.Create(this=exp.Table(db=q.ident(schema)), kind="SCHEMA", exists=True))


def scan(location: str, snapshot_id: int | None) -> exp.Table:
    """``iceberg_scan('<metadata location>'[, snapshot_from_id => n])`` as a table expression."""
    args: list[exp.Expr] = [exp.Literal.string(location)]
    if snapshot_id is not None:
        args.append(exp.Kwarg(this=exp.var("snapshot_from_id"), expression=exp.Literal.number(snapshot_id)))
    return exp.Table(this=exp.Anonymous(this="iceberg_scan", expressions=args))


def scan_view(schema: str, name: str, location: str, snapshot_id: int | None) -> str:
    """``CREATE OR REPLACE VIEW "schema"."name" AS SELECT * FROM iceberg_scan(...)``."""
    select = exp.select(exp.Star()).from_(scan(location, snapshot_id))
    return q.render(exp.Create(this=q.table(schema, name), kind="VIEW", replace=True, expression=select))


def evolved_view(schema: str, name: str, location: str, snapshot_id: int | None,
                 columns: Sequence[tuple[str, str]], changes: Changes) -> str:
    """The target's view with ``on_schema_change``'s changes applied, as the commit will apply them
    to the Iceberg table: dropped columns gone, widened ones cast, added ones NULL."""
    widened = {c.lower(): t for c, t in changes.widen}
    dropped = {c.lower() for c in changes.drop}
    items: list[exp.Expr] = []
    for col, _ in columns:
        if col.lower() in dropped:
            continue
        items.append(exp.alias_(exp.cast(q.col(col), exp.DataType.build(widened[col.lower()], dialect="duckdb")),
                                col, quoted=True) if col.lower() in widened else q.col(col))
    items += [exp.alias_(exp.cast(exp.Null(), exp.DataType.build(t, dialect="duckdb")), c, quoted=True)
              for c, t in changes.add]
    select = exp.select(*items).from_(scan(location, snapshot_id))
    return q.render(exp.Create(this=q.table(schema, name), kind="VIEW", replace=True, expression=select))


_PROMOTIONS = {("INTEGER", "BIGINT"), ("FLOAT", "DOUBLE")}


def widens(was: str, now: str) -> bool:
    """Whether Iceberg changes a column from DuckDB type ``was`` to ``now`` in place: its type
    promotions are int to long, float to double and a decimal's precision (same scale)."""
    if (was, now) in _PROMOTIONS:
        return True
    a, b = DECIMAL.match(was), DECIMAL.match(now)
    return bool(a and b and a.group(2) == b.group(2) and int(b.group(1)) >= int(a.group(1)))


def seed_stage(options: dict[str, Any] | None = None) -> str:
    """``CREATE OR REPLACE TEMPORARY TABLE __lakewrap_stage AS SELECT * FROM read_csv($path, ...)``.

    The CSV dialect and types are the ones DuckLake seeds use (``compilers.lake.seed_table``).
    """
    from lakewrap.compilers.lake import seed_table

    create = seed_table("s", "t", options)[1]  # parse the shared statement and retarget it at the stage
    import sqlglot

    tree = sqlglot.parse_one(create, read="duckdb")
    assert isinstance(tree, exp.Create)
    tree.set("this", q.table(None, STAGE))
    tree.set("properties", exp.Properties(expressions=[exp.TemporaryProperty()]))
    return q.render(tree)


def seed_commit(target: str) -> CommitOp:
    return CommitOp(operation="overwrite", table=target, delete_where="TRUE",
                    rows=q.render(exp.select(exp.Star()).from_(q.table(None, STAGE))),
                    note="replace the table's content with the CSV's rows")
