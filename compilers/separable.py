"""Partition separability: whether one statement pair over the window of N consecutive partitions
writes exactly what N per-partition materializations would (a range backfill's batch,
:mod:`lakewrap.batches`).

The proof starts from the columns the SELECT's own WHERE keeps inside the window
(:meth:`~lakewrap.compilers.blocks.Blocks.bounded_columns`: ``col >= $partition_start AND col <
$partition_end`` among its ``AND``-ed conditions). The partition key the SELECT returns must be

* such a column, unchanged (:meth:`~lakewrap.compilers.blocks.Blocks.window_proven`), or
* **derived** from one (:func:`_follows`): ``date_trunc('<unit>', col)`` with a unit at the grain
  or finer, ``CAST(... AS TIMESTAMP | TIMESTAMPTZ | DATE)``, nested in any order, in UTC partitions.
  Each step maps a value to a boundary of its unit at or before it, and in UTC every boundary of the
  grain is a boundary of a unit at the grain or finer (hourly: hour and finer; daily: day; weekly:
  day, week, as lakewrap's and DuckDB's weeks both start on Monday; monthly: day, month; yearly: day,
  month, quarter, year), so a row's key lies in the partition of its bounded column, which the
  WHERE keeps in the window. A coarser unit (``month`` for a daily or weekly grain) can move a key
  to an earlier partition; another time zone moves the boundaries. The unit must be a string
  constant in the text (sqlglot reads ``date_trunc(day, ts)``, a column ``day``, as the unit DAY),
  one of :data:`UNITS` (checked against DuckDB by the tests). The per-partition plan keeps its
  window guard, with the same statements in a batch; it can fire in neither.

Every other part of the SELECT must then not depend on which window it runs for, nor mix rows of two
partitions:

* the window bounds are used only in the two WHERE comparisons of that column (``$partition_value``
  nowhere; a bound compared with a second column keeps other rows in a wider window), so the FROM
  clause (its joins, derived tables, CTEs, subqueries) is one fixed relation and the WHERE keeps a
  row or not on that row alone: the rows of a wider window are the union of the rows of its
  partitions;
* what runs after the WHERE is row-wise: no window function, no ``DISTINCT``, no ``LIMIT``/``OFFSET``,
  no ``QUALIFY``, no sample, no aggregate unless ``GROUP BY`` holds the partition key (its name, its
  output position, ``GROUP BY ALL``) or an expression that stays in a row's partition (the bounded
  column, a derivation of it as above): each group then lies inside one partition; a ``HAVING``
  filters whole groups; ``ROLLUP``/``CUBE``/``GROUPING SETS`` are refused;
* a top-level ``UNION``/``INTERSECT``/``EXCEPT`` is refused (the window proof does not hold for it);
* the SELECT does not read the table it writes (a batch would read it before its own earlier
  partitions are written);
* the strategy writes per row: ``delete+insert``; ``append`` without ``lookback`` (with a lookback,
  per-partition appends write the overlapping partitions again); ``merge`` without ``predicate=``
  when ``unique_key`` holds the partition key (rows of two partitions never share a key) or, when it
  does not (:func:`latest_partition_merge`), in UTC partitions, without ``lookback``, and updating
  every non-key column (the default, or ``matched=replace``). Merging partition after partition
  then leaves, for each key, the row of the latest partition holding it; the compiled MERGE of
  such a model always deduplicates its source so (by ``date_trunc(<grain unit>, key) DESC``, then
  ``dedupe=latest_by``'s column) and refuses a key twice within one partition, not across
  partitions (``dedupe=error``), for one partition as for a batch. ``table``, ``view``,
  ``snapshot`` and ``literal`` are not partition writes;
* the model has no data tests and no hooks (both run once per materialization, with its window).

What is not proven is not separable: the model runs per partition, as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import sqlglot
from sqlglot import exp
from sqlglot.tokens import TokenType  # type: ignore[attr-defined]

from lakewrap.compilers.artifacts import Separability
from lakewrap.plan import Plan
from lakewrap.spec import MergeStrategy, TimePartitioning
from lakewrap.sqltext import take_statement

if TYPE_CHECKING:
    from lakewrap.compilers.blocks import Blocks

WINDOW_PARAMS = ("partition_start", "partition_end", "partition_value")
_AFTER_WHERE = (("distinct", "DISTINCT"), ("limit", "LIMIT"), ("offset", "OFFSET"), ("qualify", "QUALIFY"),
                ("sample", "a sample"))
# DuckDB's date_trunc specifiers (any case) → the unit they truncate to. Only these spellings are
# followed; tests/test_range_backfill.py checks each against DuckDB.
_SPELLINGS = {
    "microsecond": ("microsecond", "microseconds", "us", "usec"),
    "millisecond": ("millisecond", "milliseconds", "ms", "msec"),
    "second": ("second", "seconds", "s", "sec", "secs"),
    "minute": ("minute", "minutes", "m", "min", "mins"),
    "hour": ("hour", "hours", "h", "hr", "hrs"),
    "day": ("day", "days", "d"),
    "week": ("week", "weeks", "w"),
    "month": ("month", "months", "mon", "mons"),
    "quarter": ("quarter", "quarters"),
    "year": ("year", "years", "y", "yr", "yrs"),
    "decade": ("decade", "decades"),
    "century": ("century", "centuries"),
    "millennium": ("millennium", "millennia"),
}
UNITS = {spelling: unit for unit, names in _SPELLINGS.items() for spelling in names}
_SUB_HOUR = ("microsecond", "millisecond", "second", "minute", "hour")
# The units whose every bucket lies inside one partition of the grain (in UTC): the grain's
# boundaries are boundaries of the unit. A week straddles months and years; a quarter is coarser
# than a month.
FINE = {
    "hourly": frozenset(_SUB_HOUR),
    "daily": frozenset((*_SUB_HOUR, "day")),
    "weekly": frozenset((*_SUB_HOUR, "day", "week")),
    "monthly": frozenset((*_SUB_HOUR, "day", "month")),
    "yearly": frozenset((*_SUB_HOUR, "day", "month", "quarter", "year")),
}
_SAME_INSTANT = (exp.DataType.Type.TIMESTAMP, exp.DataType.Type.TIMESTAMPNTZ, exp.DataType.Type.TIMESTAMPTZ)
_NOT_WINDOW = "the SELECT's own WHERE is not proven to be the window on the partition key it returns"
PROVEN = ("the SELECT's WHERE is the window on the key it returns, and the rest is row-wise: a range of "
          "partitions is written with one statement pair")


def separability(blocks: Blocks, plan: Plan) -> Separability | None:
    """The verdict for a time-partitioned plan (None for any other)."""
    part = plan.model.partition
    if not isinstance(part, TimePartitioning) or plan.binding is None:
        return None
    why, derived = _verdict(blocks, plan)
    if why is not None:
        return Separability(proven=False, batch=part.batch, reason=why)
    reason = PROVEN
    if derived is not None:
        reason = (f"the SELECT's WHERE is the window on {derived}, and the key it returns, {part.key}, is computed "
                  f"from {derived} by truncations at the grain or finer, so it lies in its row's partition; the rest "
                  "is row-wise: a range of partitions is written with one statement pair")
    if latest_partition_merge(plan):
        reason += "; the MERGE takes each key's row of its latest partition, as partition after partition would"
    return Separability(proven=True, batch=part.batch, reason=reason)


def latest_partition_merge(plan: Plan) -> bool:
    """Whether ``plan`` is a merge whose ``unique_key`` lacks the partition key and whose partitions
    can be merged at once (:func:`_merge_refusal`). Its statements are then always the
    partition-aware form (:meth:`~lakewrap.compilers.strategies.Strategies.merge`): the source
    deduplicated per key keeping the row of the latest partition, duplicates refused within one
    partition only. For one partition that is today's MERGE; for a range it is what merging the
    partitions one after the other leaves, since each merge then replaces every non-key column."""
    strategy, part = plan.model.strategy, plan.model.partition
    return (isinstance(strategy, MergeStrategy) and isinstance(part, TimePartitioning)
            and not _holds_key(strategy, part) and _merge_refusal(plan) is None)


def _holds_key(strategy: MergeStrategy, part: TimePartitioning) -> bool:
    return part.key.lower() in {k.lower() for k in strategy.unique_key}


def _merge_refusal(plan: Plan) -> str | None:
    """Why a merge cannot be written a range at a time; None when it can."""
    strategy, part = plan.model.strategy, plan.model.partition
    assert isinstance(strategy, MergeStrategy) and isinstance(part, TimePartitioning)
    if strategy.predicate is not None:
        return "a merge with predicate= is not proven separable"
    if _holds_key(strategy, part):
        return None  # rows of two partitions never share a key
    if part.tz != "UTC":
        return (f"a merge whose unique_key lacks the partition key is batched only in UTC partitions (tz={part.tz}): "
                "its rows' partitions are found with date_trunc, in UTC")
    if part.lookback:
        return ("a merge whose unique_key lacks the partition key, with a lookback, merges a key of two "
                "partitions in one statement on every partition")
    if not _updates_every_column(strategy, plan.columns):
        return ("a merge whose unique_key lacks the partition key and that updates only some columns keeps an "
                "earlier partition's values in the others")
    return None


def _updates_every_column(strategy: MergeStrategy, columns: tuple[str, ...] | None) -> bool:
    """Whether a matched row gets every non-key column of the source row (``matched=replace``, or
    no ``update_columns``/``exclude_columns`` leaving one out)."""
    keys = {k.lower() for k in strategy.unique_key}
    if strategy.update_columns is not None:
        return columns is not None and {c.lower() for c in columns} - keys <= {c.lower() for c in
                                                                               strategy.update_columns}
    return not {c.lower() for c in strategy.exclude_columns} - keys


def why_not(blocks: Blocks, plan: Plan) -> str | None:
    """Why ``plan``'s model cannot be written a range at a time; None when it can."""
    return _verdict(blocks, plan)[0]


def _verdict(blocks: Blocks, plan: Plan) -> tuple[str | None, str | None]:
    """Why not (None: separable), and the column a derived partition key is computed from (None: the
    key is returned unchanged)."""
    why = _refusal(blocks, plan)
    if isinstance(why, str):
        return why, None
    return None, why and ".".join(c for c in why if c)


def _proof(blocks: Blocks, plan: Plan, query: exp.Select) -> _Proof:
    part = plan.model.partition
    assert isinstance(part, TimePartitioning)
    origin = take_statement(plan.model.sql, plan.model.path).meta_origin
    return _Proof(blocks.bounded_columns(plan, query), part, plan.model.sql, origin)


def _refusal(blocks: Blocks, plan: Plan) -> str | tuple[str, str] | None:
    """Why not; else None, or the bounded column a derived partition key is computed from."""
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
    if isinstance(strategy, MergeStrategy) and (why := _merge_refusal(plan)) is not None:
        return why
    if spec.tests:
        return "data tests run once per materialization, on its window"
    if spec.hooks:
        return "hooks run once per materialization, with its window"
    if "python" in spec.extensions:
        return "a Python model's function runs once per partition"
    query = blocks.query(plan)
    if not isinstance(query, exp.Select):
        return "the SELECT is a set operation (UNION, INTERSECT, EXCEPT)"
    proof = _proof(blocks, plan, query)
    proven = blocks.window_proven(plan, query)
    window = _window_column(query, proof) if proven else _derived_key(query, proof)
    if isinstance(window, str):
        return window
    if not _bounds_only_in_window(query, window):
        return "the window parameters are used outside the WHERE's two window comparisons"
    for arg, label in _AFTER_WHERE:
        if query.args.get(arg) is not None:
            return f"{label} applies across the window"
    if any(isinstance(e, exp.Window) for e in _own_nodes(query)):
        return "a window function reads rows across the window"
    if any(isinstance(e, exp.TableSample) for e in query.find_all(exp.TableSample)):
        return "a sample is not row-wise"
    if (why := _grouping(query, part.key, proof)) is not None:
        return why
    if blocks.reads_target(plan, query):
        return "the SELECT reads the table it writes"
    return None if proven else window


@dataclass(frozen=True)
class _Proof:
    """What the key proofs read: the columns the WHERE bounds (qualifier, name; lower case), the
    partitioning, and the model's body with the origin of its tree's token positions."""

    bounded: set[tuple[str, str]]
    part: TimePartitioning
    body: str
    origin: int


def _window_column(query: exp.Select, proof: _Proof) -> tuple[str, str]:
    """The bounded column of a key returned unchanged (``window_proven``)."""
    key = proof.part.key.lower()
    for e in query.expressions:
        if isinstance(e, exp.Column) and e.name.lower() == key:
            return e.table.lower(), key
    return "", key  # ``SELECT *``


def _derived_key(query: exp.Select, proof: _Proof) -> tuple[str, str] | str:
    """The bounded column the returned partition key is computed from, when every row's key lies in
    the partition of that column's value (so in the window the WHERE keeps it in); else why not."""
    key = proof.part.key
    if not proof.bounded:
        return _NOT_WINDOW
    if any(_expands(e) for e in query.expressions):
        return f"{_NOT_WINDOW}: a `*` or COLUMNS() beside a computed key can return another column named {key}"
    returned = [e for e in query.expressions if e.alias_or_name.lower() == key.lower()]
    if len(returned) != 1:
        return _NOT_WINDOW
    node = returned[0].unalias()
    followed = _follows(node, proof)
    if isinstance(followed, str):
        return f"{_NOT_WINDOW}: {key} {followed}"
    return followed


def _expands(e: exp.Expr) -> bool:
    """Whether a SELECT-list entry can expand to several columns (``*``, ``t.*``, ``COLUMNS(...)``)."""
    return (isinstance(e, exp.Star) or (isinstance(e, exp.Column) and isinstance(e.this, exp.Star))
            or e.find(exp.Columns) is not None)


def _follows(node: exp.Expr, proof: _Proof) -> tuple[str, str] | str:
    """The bounded column ``node`` is, or is computed from by truncations that keep a value inside its
    partition: ``date_trunc('<unit>', ...)`` at the grain or finer, ``CAST(... AS TIMESTAMP)``,
    ``TIMESTAMPTZ`` (the same instant in lakewrap's UTC session) or ``DATE`` (a truncation to the
    day). Else why not, as a phrase."""
    units: list[str] = []
    while not isinstance(node, exp.Column):
        if type(node) is exp.Cast and not node.to.expressions and (
                node.to.this in _SAME_INSTANT or node.to.this == exp.DataType.Type.DATE):
            if node.to.this == exp.DataType.Type.DATE:
                units.append("day")
        elif isinstance(node, exp.TimestampTrunc | exp.DateTrunc):
            unit = _literal_unit(node, proof)
            if unit not in UNITS:
                return ("is a date_trunc whose unit is not a string constant lakewrap knows "
                        f"({', '.join(sorted(_SPELLINGS))})")
            units.append(UNITS[unit])
        else:
            return (f"is computed by `{_short(node)}`; only date_trunc('<unit>', <the column the WHERE bounds>), "
                    "optionally cast to TIMESTAMP, TIMESTAMPTZ or DATE, is followed")
        node = node.this
    if (node.table.lower(), node.name.lower()) not in proof.bounded:
        return f"is derived from {node.sql(dialect='duckdb')}, which the WHERE does not bound to the window"
    if units and proof.part.tz != "UTC":
        return f"is truncated in UTC, but the partitions are in tz={proof.part.tz}"
    grain = proof.part.grain.value
    coarse = [u for u in units if u not in FINE[grain]]
    if coarse:
        return (f"is truncated to the {coarse[0]}, coarser than the {grain} grain (a key can fall outside "
                "its row's partition)")
    return node.table.lower(), node.name.lower()


def _literal_unit(node: exp.Expr, proof: _Proof) -> str | None:
    """The unit of a ``date_trunc``/``datetrunc`` call when it is written as a string constant (sqlglot
    reads ``date_trunc(day, ts)``, a column ``day``, as the unit DAY too), from the body's tokens."""
    start, end = node.meta.get("start"), node.meta.get("end")
    if start is None or end is None:
        return None
    at = proof.origin + end + 1
    if proof.body[proof.origin + start:at].lower() not in ("date_trunc", "datetrunc"):
        return None
    try:
        tokens = sqlglot.Dialect.get_or_raise("duckdb").tokenize(proof.body[at:at + 200])
    except sqlglot.errors.TokenError:
        return None
    kinds = [t.token_type for t in tokens[:3]]
    if kinds != [TokenType.L_PAREN, TokenType.STRING, TokenType.COMMA]:
        return None
    return tokens[1].text.lower()


def _short(node: exp.Expr) -> str:
    text = node.sql(dialect="duckdb")
    return text if len(text) <= 60 else text[:57] + "..."


def _bounds_only_in_window(query: exp.Select, column: tuple[str, str]) -> bool:
    """Whether ``$partition_start``/``$partition_end`` appear only in the WHERE's ``AND``-ed
    comparisons of ``column`` with them (``$partition_value`` nowhere): any other use (a second
    column compared with a bound, a bound in the SELECT list) differs between a partition's window
    and a wider one."""
    where = query.args["where"]
    top_level = list(where.this.flatten()) if isinstance(where.this, exp.And) else [where.this]
    allowed = set()
    for c in top_level:
        bound = c.expression
        if (isinstance(bound, exp.Cast) and isinstance(bound.this, exp.Placeholder)
                and bound.to.this == exp.DataType.Type.TIMESTAMP and isinstance(c.this, exp.Column)
                and (c.this.table.lower(), c.this.name.lower()) == column
                and (type(c), bound.this.name) in ((exp.GTE, "partition_start"), (exp.LT, "partition_end"))):
            allowed.add(id(bound.this))
    return all(id(ph) in allowed for ph in query.find_all(exp.Placeholder) if ph.name in WINDOW_PARAMS)


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


def _grouping(query: exp.Select, key: str, proof: _Proof) -> str | None:
    """Why the aggregation can mix rows of two partitions; None when every group lies in one: GROUP BY
    holds the key (its name, its output position, ``GROUP BY ALL``) or an expression that stays in a
    row's partition (:func:`_follows`: the bounded column, a truncation of it at the grain or finer)."""
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
            if 1 <= pos <= len(query.expressions) and query.expressions[pos - 1].alias_or_name.lower() == key:
                return None
        if not isinstance(_follows(e, proof), str):
            return None
    return "GROUP BY does not hold the partition key itself (groups coarser than the grain can span partitions)"
