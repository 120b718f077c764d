"""Small sqlglot AST builders and the one place SQL text is produced: :func:`render`.

Identifiers are always quoted through sqlglot; values never appear in SQL text (they are bound
parameters). Statements sqlglot's DuckDB dialect cannot express (``ALTER TABLE ... SET PARTITIONED
BY``, which it silently drops) are built by :func:`command` from rendered parts, never by patching
sqlglot.

Statements are built in place: builders take fresh nodes and adopt them (sqlglot's ``copy=False``).
A statement is built once and shares no node with another, so sqlglot's defensive deep copies
(about a fifth of the compiler's time at 2000 models) buy nothing; a node used twice is copied by
the caller.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterable, Sequence

from sqlglot import exp
from sqlglot.dialects.duckdb import DuckDB

_DIALECT = DuckDB()


# A model's SELECT is rendered as the user wrote it: its tree carries its text (keep_text) and
# render() puts that text where the tree would have been generated. The stand-in's name carries a
# per-process nonce, so no identifier a user writes can collide with it.
_TEXT = "lakewrap_text"
_STAND_IN = f"__lakewrap_sql_{secrets.token_hex(6)}_"
_STAND_IN_RE = re.compile(re.escape(_STAND_IN) + r"(\d+)")


def keep_text(tree: exp.Expr, text: str) -> None:
    """Render ``tree`` (a model's SELECT) as ``text`` wherever it appears in a statement."""
    tree.meta[_TEXT] = text


def kept_copy(tree: exp.Query) -> exp.Select:
    """A second use of ``tree`` (a model's SELECT carrying its text): a fresh node that renders as the
    same text and holds the same parameters, without a deep copy of the whole tree (a copy of the
    SELECT for the first-run bootstrap was about a tenth of a cold compile's CPU).

    Only what :func:`render` and :func:`lakewrap.sqltext.parameters` read is kept: an analysis that
    walks the SELECT's tables or columns must be given ``tree`` itself.
    """
    text = tree.meta[_TEXT]
    copy = exp.Select(expressions=[p.copy() for p in tree.find_all(exp.Placeholder, exp.Parameter)])
    keep_text(copy, text)
    return copy


def _kept(node: exp.Expr) -> list[exp.Expr]:
    """The subtrees of ``node`` that carry their text (not descending into them)."""
    out: list[exp.Expr] = []
    stack = [node]
    while stack:
        n = stack.pop()
        meta = n._meta  # the attribute, not the property: reading ``meta`` allocates a dict
        if meta and _TEXT in meta:
            out.append(n)
        else:
            stack.extend(n.iter_expressions())
    return out


def render(node: exp.Expr) -> str:
    """The single rendering of a statement: what is printed, logged, executed and golden.

    A model's SELECT inside it is its text as written, with lakewrap's substitutions
    (``lakewrap.grammar.edited_select``), never sqlglot's re-rendering.
    """
    kept = _kept(node)
    if not kept:
        return _DIALECT.generate(node, copy=False, pretty=True)  # trees are built fresh per statement
    if kept[0] is node:
        return str(node.meta[_TEXT])
    swaps: list[tuple[exp.Expr, exp.Expr]] = []
    try:
        for i, sub in enumerate(kept):
            stand_in = exp.column(f"{_STAND_IN}{i}")
            sub.replace(stand_in)
            swaps.append((stand_in, sub))
        text = _DIALECT.generate(node, copy=False, pretty=True)
    finally:
        for placed, original in swaps:
            placed.replace(original)
    return _STAND_IN_RE.sub(lambda m: str(kept[int(m.group(1))].meta[_TEXT]), text)


def command(keyword: str, *parts: exp.Expr | str) -> exp.Command:
    """A statement sqlglot's DuckDB dialect cannot express, built from rendered AST parts.

    sqlglot 30's DuckDB generator drops ``SET PARTITIONED BY`` from ``ALTER TABLE`` and only knows
    ``CALL`` as an opaque command; its compiled build (sqlglotc) forbids subclassing expressions or
    generators. So such statements are an :class:`exp.Command` whose tail joins *rendered*
    sub-expressions (identifiers quoted by sqlglot) with fixed keywords: no value or name ever
    enters as raw text. The golden tests execute every such statement against a real DuckLake.
    """
    tail = " ".join(p if isinstance(p, str) else _DIALECT.generate(p, copy=False) for p in parts)
    return exp.Command(this=keyword, expression=exp.Literal.string(" " + tail))


def set_partitioned_by(tbl: exp.Table, keys: Sequence[exp.Expr]) -> exp.Command:
    """``ALTER TABLE <tbl> SET PARTITIONED BY (<keys>)``."""
    return command("ALTER", "TABLE", tbl, "SET PARTITIONED BY", exp.Tuple(expressions=list(keys)))


def create_partitioned(create: exp.Create) -> str:
    """``CREATE TABLE [IF NOT EXISTS] <tbl> PARTITIONED BY (<keys>) AS <select>``, pretty like :func:`render`.

    ``create`` carries the keys as a ``PartitionedByProperty``, which sqlglot 30's DuckDB generator
    drops ("Unsupported property"); the clause is rendered from the same AST and put back in place.
    The tree keeps the statement's parameters visible to :func:`lakewrap.sqltext.parameters`.
    """
    props = create.args.get("properties")
    part = next(p for p in props.expressions if isinstance(p, exp.PartitionedByProperty)) if props else None
    assert part is not None and create.expression is not None, "not a partitioned CREATE TABLE ... AS"
    head = render(exp.Create(this=create.this.copy(), kind="TABLE", exists=create.args.get("exists")))
    keys = _DIALECT.generate(exp.Tuple(expressions=[k.copy() for k in part.this.expressions]), copy=False)
    return f"{head} PARTITIONED BY {keys} AS\n{render(create.expression.copy())}"


def ident(name: str) -> exp.Identifier:
    """A quoted identifier; quotes inside the name are escaped by sqlglot."""
    return exp.to_identifier(name, quoted=True)


def table(schema: str | None, name: str) -> exp.Table:
    """A quoted ``"schema"."name"`` table reference."""
    return exp.Table(this=ident(name), db=ident(schema) if schema else None)


def in_catalog(tree: exp.Expr, catalog: str) -> exp.Expr:
    """Name every ``schema.table`` reference of ``tree`` in ``catalog`` (in place; three-part names).

    References without a schema (CTEs, temporary tables) and ones already naming a catalog stay.
    """
    for tbl in tree.find_all(exp.Table):
        if tbl.args.get("db") is not None and tbl.args.get("catalog") is None and isinstance(tbl.this,
                                                                                             exp.Identifier):
            tbl.set("catalog", ident(catalog))
    return tree


def aliased(tbl: exp.Table, alias: str) -> exp.Table:
    """``tbl AS "alias"`` (sets the alias on ``tbl`` itself, a fresh node)."""
    tbl.set("alias", exp.TableAlias(this=ident(alias)))
    return tbl


def col(name: str, qualifier: str | None = None) -> exp.Column:
    """A quoted column, optionally qualified by a (quoted) table alias."""
    return exp.Column(this=ident(name), table=ident(qualifier) if qualifier else None)


def param(name: str) -> exp.Placeholder:
    """A named parameter, ``$name``."""
    return exp.Placeholder(this=name)


def string(value: str) -> exp.Literal:
    return exp.Literal.string(value)


def and_all(conditions: Iterable[exp.Expr]) -> exp.Expr:
    conds = list(conditions)
    return exp.and_(*conds, copy=False) if len(conds) > 1 else conds[0]


def or_all(conditions: Iterable[exp.Expr]) -> exp.Expr:
    conds = list(conditions)
    return exp.or_(*conds, copy=False) if len(conds) > 1 else conds[0]


def keys_equal(keys: Sequence[str], left: str, right: str) -> exp.Expr:
    """``left.k1 = right.k1 AND ...``."""
    return and_all(exp.EQ(this=col(k, left), expression=col(k, right)) for k in keys)


def fail_if(count_from: exp.Select, message: Sequence[exp.Expr]) -> exp.Select:
    """A guard: ``SELECT CASE WHEN count(*) > 0 THEN error(<message>) END FROM ...``.

    DuckDB's ``error()`` raises while the statement runs, so the guard fails loudly even when the
    compiled SQL is pasted into another client. ``message`` parts are concatenated.
    """
    raise_ = exp.Anonymous(this="error", expressions=[concat([string("lakewrap guard: "), *message])])
    case = exp.Case(ifs=[exp.If(this=exp.GT(this=count_star(), expression=exp.Literal.number(0)), true=raise_)])
    return count_from.select(case, copy=False)


def concat(parts: Sequence[exp.Expr]) -> exp.Expr:
    """``a || b || ...``."""
    text = parts[0]
    for p in parts[1:]:
        text = exp.DPipe(this=text, expression=p, safe=True)
    return text


def count_star() -> exp.Count:
    return exp.Count(this=exp.Star())


def as_text(node: exp.Expr) -> exp.Expr:
    """``CAST(node AS VARCHAR)``."""
    return exp.cast(node, exp.DataType.build(exp.DataType.Type.VARCHAR), copy=False)


def limit_zero(select: exp.Select) -> exp.Select:
    """``<select> LIMIT 0`` (in place): the result's schema, no rows."""
    return select.limit(exp.Literal.number(0), copy=False)


def left_join(source: exp.Expr, on: exp.Expr) -> exp.Join:
    """``LEFT JOIN <source> ON <on>``, for ``Select.join`` (its ``join_type=`` parses a string)."""
    return exp.Join(this=source, on=on, side="LEFT")
