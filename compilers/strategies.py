"""The statement shapes of every strategy (table, view, delete+insert, merge, append, SCD2 snapshot,
literal), assembled from :class:`~lakewrap.compilers.blocks.Blocks`.

Pure: no I/O, no database driver. A substrate compiler overrides a strategy only where its
capabilities force a different statement (``compilers/iceberg.py``).
"""

from __future__ import annotations

from sqlglot import exp

from lakewrap.compilers import sql as q
from lakewrap.compilers.artifacts import STAGE
from lakewrap.compilers.blocks import Blocks
from lakewrap.compilers.separable import latest_partition_merge
from lakewrap.compilers.shape import CHANGES, DELETED, SOURCE, TARGET, VALID_FROM, Shape, window_bound
from lakewrap.errors import Location, UnsupportedError
from lakewrap.plan import Plan
from lakewrap.spec import MergeStrategy, SnapshotStrategy
from lakewrap.sqltext import parse_body


class Strategies(Blocks):
    """One method per strategy, each returning the plan's statements in order."""

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

    def delete_insert(self, plan: Plan) -> list[Shape]:
        query = self.query(plan)
        if self.direct(plan, query):
            shapes = [self.setup(plan), *self.bootstrap(plan, self.empty_of(q.kept_copy(query)))]
            delete = exp.Delete(this=self.target(plan), where=exp.Where(this=self.window_condition(plan)))
            shapes.append(Shape("write", delete, "remove the window's current rows"))
            shapes.append(Shape("write", self.insert_by_name(plan, query),
                                "insert the window's new rows, by column name (the SELECT keeps to the window)"))
            return shapes
        shapes = self.staged(plan, query, query=query)
        shapes += self.bootstrap(plan, q.limit_zero(self.from_stage().select(exp.Star(), copy=False)))
        delete = exp.Delete(this=self.target(plan), where=exp.Where(this=self.window_condition(plan)))
        shapes.append(Shape("write", delete, "remove the window's current rows"))
        shapes.append(Shape("write", self.insert_by_name(plan, self.from_stage().select(exp.Star(), copy=False)),
                            "insert the window's new rows, by column name"))
        shapes.append(self.drop(STAGE))
        return shapes

    def append(self, plan: Plan) -> list[Shape]:
        query = self.query(plan)
        # unwindowed, or a window the SELECT keeps; a contract needs the staged result
        if (plan.binding is None and not plan.model.columns) or self.direct(plan, query):
            shapes = [self.setup(plan)]
            shapes += self.bootstrap(plan, self.empty_of(q.kept_copy(query)))
            shapes.append(Shape("write", self.insert_by_name(plan, query), "insert the rows, by column name"))
            return shapes
        shapes = self.staged(plan, query, query=query)
        shapes += self.bootstrap(plan, q.limit_zero(self.from_stage().select(exp.Star(), copy=False)))
        shapes.append(Shape("write", self.insert_by_name(plan, self.from_stage().select(exp.Star(), copy=False)),
                            "insert the rows, by column name"))
        shapes.append(self.drop(STAGE))
        return shapes

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
        query = self.query(plan)
        # A unique_key without the partition key (separable.latest_partition_merge): each key's row of
        # the latest partition, duplicates refused within a partition: what merging the partitions of
        # a range one after the other leaves, and today's MERGE for one partition.
        latest = self.partition_of(plan) if self.caps.range_writes and latest_partition_merge(plan) else None
        select = query
        if strategy.dedupe_by:
            select = self.deduped(query, keys, strategy.dedupe_by, latest and latest.copy())
        shapes = self.staged(plan, select, query=query)
        shapes += self.guard_keys(plan, keys, check_duplicates=strategy.dedupe == "error",
                                  per_partition=latest and latest.copy())
        shapes += self.bootstrap(plan, q.limit_zero(self.from_stage().select(exp.Star(), copy=False)))
        source: exp.Expr = q.aliased(q.table(None, STAGE), SOURCE)
        rows = self.from_stage().select(exp.Star(), copy=False)
        if latest is not None and not strategy.dedupe_by:  # the stage held every row, for the guard
            rows = self.deduped(rows, keys, None, latest.copy())
            source = rows.copy().subquery(q.ident(SOURCE), copy=False)
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
            shapes.append(Shape("write", self.insert_by_name(plan, rows), "insert the result, by column name"))
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
            using=source,
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
        # is staged, as when the SELECT must be (Compiler.direct).
        query = self.query(plan)
        staging = s.hard_deletes != "ignore" or not self.direct(plan, query)
        if staging:  # with a watermark (timestamp, hard_deletes=ignore): only the new rows
            shapes = self.staged(plan, query, query=query)
            source: exp.Expr = q.aliased(q.table(None, STAGE), SOURCE)
            result = self.from_stage()
        else:
            shapes = [self.setup(plan)]
            source = query.subquery(q.ident(SOURCE), copy=False)
            result = exp.Select().from_(q.kept_copy(query).subquery(q.ident("result"), copy=False), copy=False)
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
        if staging:
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
