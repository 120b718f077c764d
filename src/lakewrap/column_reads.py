"""What a model's SELECT reads of each table, column by column, found once when the file is parsed.

The cross-model check (:mod:`lakewrap.contracts_graph`) needs, for every model, the columns it
takes from each upstream table and where in the file it names them, and how its output expands
when it selects ``*``. Both come from sqlglot's scopes of the parsed SELECT (``traverse_scope``:
CTEs, subqueries, joins, lambdas and output aliases are resolved there), computed here beside the
rest of the parse, so they are cached with the spec and a warm compile never parses again.

The result is one compact JSON text (``ModelSpec.column_reads``), read only by the check:

- ``reads``: ``[name, offset in the body, alias_ok, [table keys]]``, one per column (the first
  reference of it) whose table is known: the reference must be a column of one of those tables (``alias_ok``: or the
  SELECT's own output alias of that name, which DuckDB lets ``WHERE``/``GROUP BY`` use);
- ``star``: how a ``SELECT *`` model's output expands, items ``["col", name]`` and
  ``["all", table key, [excluded names]]``, or null when the output is not a star or cannot be
  expanded from the text (``COLUMNS(...)``, ``USING`` joins, table functions).

A reference this cannot attribute to a table with certainty (a table function's column, a struct
field, a column of an outer query) is left out: the check then says nothing about it, and DuckDB's
binder still judges it when the model runs.
"""

from __future__ import annotations

import json
from typing import Any

from sqlglot import exp
from sqlglot.optimizer.scope import Scope, traverse_scope

from lakewrap.sqltext import Statement

_SATISFIED = "satisfied"  # a derived table (CTE, subquery) that names the column itself


def column_reads(query: exp.Expr, statement: Statement) -> str | None:
    """The JSON text described in the module docs; None when sqlglot cannot scope the query."""
    try:
        return _one_select(query, statement) or _scoped(query, statement)
    except Exception:  # sqlglot's scoping gave up on this shape: nothing to check, never a guess
        return None


def _scoped(query: exp.Expr, statement: Statement) -> str:
    scopes = traverse_scope(query)
    reads: list[list[Any]] = []
    seen: set[tuple[str, bool, tuple[str, ...]]] = set()
    for scope in scopes:
        aliases = _aliases(scope)
        for col in scope.columns:
            if col.find_ancestor(exp.Select) is not scope.expression:
                continue  # a subquery's name sqlglot could not place: not certain
            if isinstance(col.this, exp.Star) or col.args.get("db") or col.args.get("catalog"):
                continue
            keys = _tables_of(scope, col)
            if not keys:
                continue
            alias_ok = not col.table and col.name.lower() in aliases
            once = (col.name.lower(), alias_ok, tuple(keys))
            if once in seen:
                continue  # the first reference of a column is the one an error points at
            seen.add(once)
            reads.append([col.name, _where(col, statement), alias_ok, keys])
    star = _recipe(scopes[-1]) if scopes else None
    return json.dumps({"reads": reads, "star": star}, separators=(",", ":"))


# nodes that open a scope of their own (or bind names) inside a SELECT: sqlglot's scopes resolve them
_NESTED = (exp.Select, exp.Subquery, exp.CTE, exp.Lambda, exp.Unnest, exp.Lateral, exp.Union, exp.Intersect,
           exp.Except, exp.Columns)


def _one_select(query: exp.Expr, statement: Statement) -> str | None:
    """The common case without sqlglot's scopes (a third of a parse's time): one SELECT over named
    tables, no subquery, CTE, lambda or ``COLUMNS``; None for any other query."""
    if not isinstance(query, exp.Select):
        return None
    from_ = query.args.get("from_") or query.args.get("from")
    joins = query.args.get("joins") or ()
    sources = [from_.this] if isinstance(from_, exp.From) else []
    sources += [j.this for j in joins]
    tables: dict[str, str] = {}  # alias (or name) → key
    for src in sources:
        key = _key(src) if isinstance(src, exp.Table) and not src.args.get("joins") else None
        if key is None:
            return None
        tables[src.alias_or_name.lower()] = key
    columns: list[exp.Column] = []
    for node in query.find_all(exp.Column, *_NESTED):
        if node is query:
            continue
        if not isinstance(node, exp.Column):
            return None
        columns.append(node)
    aliases = {p.alias.lower() for p in query.expressions if isinstance(p, exp.Alias)}
    everything = list(dict.fromkeys(tables.values()))
    reads: list[list[Any]] = []
    seen: set[tuple[str, bool, tuple[str, ...]]] = set()
    for col in columns:
        if isinstance(col.this, exp.Star) or col.args.get("db") or col.args.get("catalog"):
            continue
        if col.table:
            key = tables.get(col.table.lower())
            if key is None:
                continue  # a struct field (`s.field`)
            keys = [key]
        elif everything:
            keys = everything
        else:
            continue
        alias_ok = not col.table and col.name.lower() in aliases
        once = (col.name.lower(), alias_ok, tuple(keys))
        if once not in seen:
            seen.add(once)
            reads.append([col.name, _where(col, statement), alias_ok, keys])
    return json.dumps({"reads": reads, "star": _simple_recipe(query, tables, joins)}, separators=(",", ":"))


def _simple_recipe(query: exp.Select, tables: dict[str, str], joins: Any) -> list[list[Any]] | None:
    items: list[list[Any]] = []
    starred = False
    for proj in query.expressions:
        star = proj if isinstance(proj, exp.Star) else proj.this if isinstance(proj, exp.Column) else None
        if isinstance(star, exp.Star):
            if star.args.get("replace") or star.args.get("rename"):
                return None
            starred = True
            excluded = [e.name.lower() for e in star.args.get("except") or ()]
            if isinstance(proj, exp.Star):
                keys = list(tables.values())
            elif proj.table.lower() in tables:
                keys = [tables[proj.table.lower()]]
            else:
                return None
            items += [["all", key, excluded] for key in keys]
        elif proj.alias_or_name and isinstance(proj, (exp.Alias, exp.Column)):
            items.append(["col", proj.alias_or_name])
        else:
            items.append(["col", ""])  # an unnamed expression: a star beside it cannot be expanded
    if not starred:
        return None
    if any(i == ["col", ""] for i in items) or any(j.args.get("using") or j.args.get("method") for j in joins):
        return None
    return items


def _where(col: exp.Column, statement: Statement) -> int:
    """The body offset where the reference starts: its first name's token (``o`` of ``o.amount``),
    not the call around it (turned into a line and column only for an error)."""
    for part in (col.args.get("table"), col.this):
        start = part.meta.get("start") if isinstance(part, exp.Expr) else None
        if isinstance(start, int):
            return statement.meta_origin + start
    starts = [n.meta["start"] for n in col.walk() if isinstance(n.meta.get("start"), int)]
    return statement.meta_origin + min(starts) if starts else statement.start


def _aliases(scope: Scope) -> set[str]:
    select = scope.expression
    if not isinstance(select, exp.Select):
        return set()
    return {p.alias.lower() for p in select.expressions if isinstance(p, exp.Alias)}


def _key(table: exp.Table) -> str | None:
    if not isinstance(table.this, exp.Identifier) or not table.name or table.args.get("catalog"):
        return None  # a table function, or a three-part name no model writes
    return f"{(table.db or 'main').lower()}.{table.name.lower()}"  # TableRef.key


def _tables_of(scope: Scope, col: exp.Column) -> list[str] | None:
    """The tables one of which must have ``col``; None when that is not certain."""
    if col.table:
        at: Scope | None = scope
        while at is not None and col.table not in at.selected_sources:
            at = at.parent  # a correlated reference to an outer query's table
        if at is None:
            return None  # a struct field (`s.field`), or a name sqlglot could not bind
        got = _behind(at.selected_sources[col.table][1], col.name)
        return None if got in (None, _SATISFIED) else list(got)
    if scope.parent is not None and not scope.is_cte and not scope.is_derived_table:
        return None  # an unqualified name in a correlated subquery may be the outer query's
    keys: list[str] = []
    for _, source in scope.selected_sources.values():
        got = _behind(source, col.name)
        if got is None or got == _SATISFIED:
            return None
        keys += got
    return keys or None


def _behind(source: Any, name: str) -> list[str] | str | None:
    """The tables a column ``name`` of ``source`` comes from: ``[key]`` for a table, the tables
    behind the stars of a derived table that does not name it itself, :data:`_SATISFIED` when it
    names it, None when unknown."""
    if isinstance(source, exp.Table):
        key = _key(source)
        return [key] if key is not None else None
    if not isinstance(source, Scope) or not isinstance(source.expression, exp.Select):
        return None
    keys: list[str] = []
    for proj in source.expression.expressions:
        if isinstance(proj, exp.Star) or (isinstance(proj, exp.Column) and isinstance(proj.this, exp.Star)):
            picked = (source.selected_sources.values() if isinstance(proj, exp.Star)
                      else [source.selected_sources[proj.table]] if proj.table in source.selected_sources else None)
            if picked is None:
                return None
            for _, inner in picked:
                got = _behind(inner, name)
                if got is None or got == _SATISFIED:
                    return got
                keys += got
        elif proj.alias_or_name.lower() == name.lower():
            return _SATISFIED
    return keys or None


def _recipe(scope: Scope) -> list[list[Any]] | None:
    """How the output of ``scope``'s SELECT expands, when it selects ``*`` (else None)."""
    select = scope.expression
    if not isinstance(select, exp.Select):
        return None
    if not any(isinstance(p, exp.Star) or (isinstance(p, exp.Column) and isinstance(p.this, exp.Star))
               for p in select.expressions) or select.find(exp.Columns) is not None:
        return None
    if any(j.args.get("using") or j.args.get("method") for j in select.args.get("joins") or ()):
        return None  # USING and NATURAL joins merge columns: leave it to DuckDB
    items: list[list[Any]] = []
    for proj in select.expressions:
        star = proj if isinstance(proj, exp.Star) else proj.this if isinstance(proj, exp.Column) else None
        if isinstance(star, exp.Star):
            if star.args.get("replace") or star.args.get("rename"):
                return None
            excluded = [e.name.lower() for e in star.args.get("except") or ()]
            sources = (list(scope.selected_sources.values()) if isinstance(proj, exp.Star)
                       else [scope.selected_sources[proj.table]] if proj.table in scope.selected_sources else None)
            if sources is None:
                return None
            for _, source in sources:
                got = _expand(source, excluded)
                if got is None:
                    return None
                items += got
        elif proj.alias_or_name and isinstance(proj, (exp.Alias, exp.Column)):
            items.append(["col", proj.alias_or_name])
        else:
            return None  # an unnamed expression next to a star: DuckDB names it
    return items


def _expand(source: Any, excluded: list[str]) -> list[list[Any]] | None:
    if isinstance(source, exp.Table):
        key = _key(source)
        return None if key is None else [["all", key, excluded]]
    if not isinstance(source, Scope) or not isinstance(source.expression, exp.Select):
        return None
    inner = _recipe(source)
    if inner is None:  # a derived table with named columns only
        names = [p.alias_or_name for p in source.expression.expressions]
        if not all(names):
            return None
        inner = [["col", n] for n in names]
    out: list[list[Any]] = []
    for item in inner:
        if item[0] == "col":
            if item[1].lower() not in excluded:
                out.append(item)
        else:
            out.append(["all", item[1], sorted({*item[2], *excluded})])
    return out
