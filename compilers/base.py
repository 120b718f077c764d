"""The compiler every substrate shares: a plan's strategy shapes, checks and schema check, rendered
once into a :class:`~lakewrap.compilers.artifacts.CompiledPlan`.

A substrate compiler is mostly data: it sets :class:`Capabilities` and overrides a shape only where
its capabilities force a different statement. The shapes live in
:mod:`lakewrap.compilers.strategies` (built from :mod:`lakewrap.compilers.blocks`), the vocabulary
they share in :mod:`lakewrap.compilers.shape`. Pure: no I/O, no database driver.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from lakewrap.compilers import checks, schema
from lakewrap.compilers import sql as q
from lakewrap.compilers.artifacts import CompiledPlan, CompiledStatement, Effect, SchemaCheck, window_of
from lakewrap.compilers.separable import separability
from lakewrap.compilers.shape import Capabilities, Shape, stages_result
from lakewrap.compilers.strategies import Strategies
from lakewrap.plan import Plan
from lakewrap.spec import (
    AppendStrategy,
    DeleteInsertStrategy,
    LiteralStrategy,
    MergeStrategy,
    SnapshotStrategy,
    TableStrategy,
    ViewStrategy,
)
from lakewrap.sqltext import parameters

__all__ = ["Capabilities", "Compiler"]  # Capabilities (compilers/shape.py) with the compiler it configures

_EFFECTS: dict[type, Effect] = {exp.Insert: "insert", exp.Delete: "delete", exp.Update: "update", exp.Merge: "merge"}


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


class Compiler(Strategies):
    """Compiles a :class:`~lakewrap.plan.Plan` into a :class:`CompiledPlan`."""

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
        window = window_of(plan.binding)
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
            separable=separability(self, plan),
        )

    def probe(self, plan: Plan) -> CompiledStatement:
        """``SELECT * FROM (<model SELECT>) LIMIT 0``: lets the executor read a ``SELECT *`` model's columns."""
        node = self.empty_of(self.query(plan))
        available = plan.params()
        return CompiledStatement(role="stage", sql=q.render(node),
                                 params={k: available[k] for k in sorted(parameters(node)) if k in available})

    def preview(self, plan: Plan, limit: int) -> CompiledStatement:
        """``SELECT * FROM (<model SELECT>) LIMIT n``: the first rows of the result (``lakewrap show``)."""
        node = self.empty_of(self.query(plan)).limit(exp.Literal.number(limit), copy=False)
        available = plan.params()
        return CompiledStatement(role="stage", sql=q.render(node), note="the first rows of the model's SELECT",
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
        return checks.attach(plan, self, builders[type(strategy)](plan))

    def schema_check(self, plan: Plan, shapes: list[Shape]) -> SchemaCheck | None:
        """How ``run`` compares the result with the live table (``lakewrap.compilers.schema``)."""
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
