"""Partition separability: whether one statement pair over the window of N consecutive partitions
writes exactly what N per-partition materializations would (a range backfill's batch,
:mod:`lakewrap.batches`).

The proof extends :meth:`~lakewrap.compilers.blocks.Blocks.window_proven` (the SELECT's own WHERE
keeps every row inside the window, on the key it returns unchanged). Every other part of the SELECT
must then not depend on which window it runs for, nor mix rows of two partitions:

* the window bounds are used only in those two WHERE comparisons (``$partition_value`` nowhere), so
  the FROM clause (its joins, derived tables, CTEs, subqueries) is one fixed relation and the WHERE
  keeps a row or not on that row alone: the rows of a wider window are the union of the rows of its
  partitions;
* what runs after the WHERE is row-wise: no window function, no ``DISTINCT``, no ``LIMIT``/``OFFSET``,
  no ``QUALIFY``, no sample, no aggregate unless ``GROUP BY`` holds the partition key itself (each
  group then lies inside one instant, so inside one partition; a ``HAVING`` filters whole groups);
  ``ROLLUP``/``CUBE``/``GROUPING SETS`` are refused;
* a top-level ``UNION``/``INTERSECT``/``EXCEPT`` is refused (the window proof does not hold for it);
* the SELECT does not read the table it writes (a batch would read it before its own earlier
  partitions are written);
* the strategy writes per row: ``delete+insert``; ``append`` without ``lookback`` (with a lookback,
  per-partition appends write the overlapping partitions again); ``merge`` when ``unique_key``
  holds the partition key and there is no ``predicate=`` (rows of two partitions never share a key).
  ``table``, ``view``, ``snapshot`` and ``literal`` are not partition writes;
* the model has no data tests and no hooks (both run once per materialization, with its window).

What is not proven is not separable: the model runs per partition, as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlglot import exp

from lakewrap.compilers.artifacts import Separability
from lakewrap.plan import Plan
from lakewrap.spec import TimePartitioning

if TYPE_CHECKING:
    from lakewrap.compilers.blocks import Blocks

WINDOW_PARAMS = ("partition_start", "partition_end", "partition_value")
_AFTER_WHERE = (("distinct", "DISTINCT"), ("limit", "LIMIT"), ("offset", "OFFSET"), ("qualify", "QUALIFY"),
                ("sample", "a sample"))


def separability(blocks: Blocks, plan: Plan) -> Separability | None:
    """The verdict for a time-partitioned plan (None for any other)."""
    part = plan.model.partition
    if not isinstance(part, TimePartitioning) or plan.binding is None:
        return None
    why = why_not(blocks, plan)
    return Separability(proven=why is None, batch=part.batch,
                        reason=why or "the SELECT's WHERE is the window on the key it returns, and the rest is "
                        "row-wise: a range of partitions is written with one statement pair")


def why_not(blocks: Blocks, plan: Plan) -> str | None:
    """Why ``plan``'s model cannot be written a range at a time; None when it can."""
    if not blocks.caps.range_writes:
        return f"the {blocks.caps.name} materializer writes one partition per commit"
    spec = plan.model
    part = spec.partition
    assert isinstance(part, TimePartitioning)
    strategy = spec.strategy
    kind = strategy.kind
    if kind not in ("delete+insert", "append", "merge"):
        return f"a {kind} model is not a partition write"
    if kind == "append" and part.lookback:
        return "an append with a lookback appends the overlapping partitions again on every partition"
    if kind == "merge":
        keys = {k.lower() for k in getattr(strategy, "unique_key", ())}
        if part.key.lower() not in keys:
            return "a merge whose unique_key lacks the partition key can match a row of another partition"
        if getattr(strategy, "predicate", None) is not None:
            return "a merge with predicate= is not proven separable"
    if spec.tests:
        return "data tests run once per materialization, on its window"
    if spec.hooks:
        return "hooks run once per materialization, with its window"
    if "python" in spec.extensions:
        return "a Python model's function runs once per partition"
    query = blocks.query(plan)
    if not isinstance(query, exp.Select):
        return "the SELECT is a set operation (UNION, INTERSECT, EXCEPT)"
    if not blocks.window_proven(plan, query):
        return "the SELECT's own WHERE is not proven to be the window on the partition key it returns"
    where = query.args["where"]
    inside = [ph for ph in where.find_all(exp.Placeholder) if ph.name in WINDOW_PARAMS]
    every = [ph for ph in query.find_all(exp.Placeholder) if ph.name in WINDOW_PARAMS]
    top_level = list(where.this.flatten()) if isinstance(where.this, exp.And) else [where.this]
    in_bounds = [ph for c in top_level for ph in c.find_all(exp.Placeholder)
                 if isinstance(c, exp.GTE | exp.GT | exp.LT | exp.LTE) and ph.name in WINDOW_PARAMS]
    if len(every) != len(in_bounds) or len(inside) != len(in_bounds):
        return "the window parameters are used outside the WHERE's two window comparisons"
    for arg, label in _AFTER_WHERE:
        if query.args.get(arg) is not None:
            return f"{label} applies across the window"
    if any(isinstance(e, exp.Window) for e in _own_nodes(query)):
        return "a window function reads rows across the window"
    if any(isinstance(e, exp.TableSample) for e in query.find_all(exp.TableSample)):
        return "a sample is not row-wise"
    if (why := _grouping(query, part.key)) is not None:
        return why
    if blocks.reads_target(plan, query):
        return "the SELECT reads the table it writes"
    return None


def _own_nodes(query: exp.Select) -> list[exp.Expr]:
    """The nodes of the top-level SELECT evaluated after its WHERE (its list, HAVING, ORDER BY),
    not those of subqueries (fixed relations: they do not see the window)."""
    out: list[exp.Expr] = []
    roots: list[exp.Expr] = list(query.expressions)
    for arg in ("having", "order"):
        if (node := query.args.get(arg)) is not None:
            roots.append(node)
    for root in roots:
        stack = [root]
        while stack:  # depth first, not into subqueries
            node = stack.pop()
            out.append(node)
            stack += [c for c in node.iter_expressions() if not isinstance(c, exp.Subquery | exp.Select)]
    return out


def _grouping(query: exp.Select, key: str) -> str | None:
    group = query.args.get("group")
    aggregates = any(isinstance(n, exp.AggFunc) for n in _own_nodes(query))
    if group is None:
        if aggregates or query.args.get("having") is not None:
            return "an aggregate without GROUP BY reads every row of the window"
        return None
    if any(group.args.get(a) for a in ("grouping_sets", "cube", "rollup")):
        return "GROUP BY ROLLUP, CUBE or GROUPING SETS builds groups across partitions"
    if group.args.get("all"):
        return None  # GROUP BY ALL groups by every non-aggregate output, the returned key among them
    key = key.lower()
    for e in group.expressions:
        if isinstance(e, exp.Column) and e.name.lower() == key:
            return None
        if isinstance(e, exp.Literal) and e.is_int:
            pos = int(e.this)
            if 1 <= pos <= len(query.expressions):
                out = query.expressions[pos - 1]
                if isinstance(out, exp.Column) and out.name.lower() == key:
                    return None
    return "GROUP BY does not hold the partition key itself (groups coarser than the grain can span partitions)"
