"""DuckDB's own parser as the judge of model SQL (sqlglot is not DuckDB's grammar).

Every model body is checked here before sqlglot reads it: each statement is parsed by DuckDB
(``json_serialize_sql`` parses without binding, opens no lake and loads no extension), so a
statement DuckDB rejects is a located error before anything is compiled or run. Statement
boundaries are DuckDB's tokenizer's semicolons. Literal models are refused any statement that
would leave or change lakewrap's transaction or session, judged on DuckDB's statement type and
the statement's first keyword.

The SELECT a wrapped model embeds is the user's text as written, with lakewrap's declared
substitutions made as edits at token positions and checked on DuckDB's parse tree:
:mod:`lakewrap.select_edits` (:func:`edited_select` and :func:`prepare_selects` are re-exported
here). See ``docs/architecture.md``, "DuckDB's grammar is the judge".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lakewrap.duckdb_parser import is_operator, raw_tokens
from lakewrap.duckdb_parser import serialize as _serialize
from lakewrap.duckdb_parser import token_text as _token_text
from lakewrap.errors import Location, SqlError
from lakewrap.select_edits import edited_select, prepare_selects
from lakewrap.sqlpos import OPENERS, offset_location

__all__ = ["MAX_CHARS", "MAX_DEPTH", "Span", "check_body", "check_limits", "edited_select", "prepare_selects",
           "spans"]

# Deepest nesting of parentheses a model may use: sqlglot's recursive parser overflows Python's
# stack at about 450 levels; real queries stay far below.
MAX_DEPTH = 200
# Largest model file, in characters: a model is a query, not data.
MAX_CHARS = 1_000_000

# Literal models run inside lakewrap's transaction on the lake: statements that end, start or
# leave it, or change the session or the installation, are refused. DuckDB's statement type
# first; some spellings hide behind another type (CHECKPOINT is a CALL, PRAGMA version a SELECT,
# IMPORT DATABASE is executed while parsed), so the first keyword is looked at too, before DuckDB
# parses the statement.
_REFUSED_TYPES = {
    "TRANSACTION": "transaction control",
    "ATTACH": "ATTACH",
    "DETACH": "DETACH",
    "SET": "a session setting",
    "VARIABLE_SET": "a session setting",
    "LOAD": "loading or installing an extension",
    "EXPORT": "EXPORT DATABASE",
    "PRAGMA": "PRAGMA",
    "VACUUM": "VACUUM",
    "UPDATE_EXTENSIONS": "updating extensions",
}
_REFUSED_KEYWORDS = {
    "BEGIN": "transaction control",
    "START": "transaction control",
    "COMMIT": "transaction control",
    "END": "transaction control",
    "ABORT": "transaction control",
    "ROLLBACK": "transaction control",
    "CHECKPOINT": "CHECKPOINT",
    "FORCE": "CHECKPOINT",
    "ATTACH": "ATTACH",
    "DETACH": "DETACH",
    "USE": "USE",
    "SET": "a session setting",
    "RESET": "a session setting",
    "PRAGMA": "PRAGMA",
    "LOAD": "loading an extension",
    "INSTALL": "installing an extension",
    "EXPORT": "EXPORT DATABASE",
    "IMPORT": "IMPORT DATABASE",
    "VACUUM": "VACUUM",
    "ANALYZE": "ANALYZE",
}



@dataclass(frozen=True)
class Span:
    """One statement of a body: ``body[start:end]``, from its first token to its last."""

    start: int
    end: int


def spans(body: str) -> list[Span]:
    """The statements of ``body`` cut at DuckDB's semicolons, each from its first token to its last."""
    toks = raw_tokens(body)
    if not toks:
        return []
    if ";" not in body:  # one statement (the usual model): no token is a semicolon
        pos = toks[-1][0]
        return [Span(toks[0][0], pos + len(_token_text(body, pos, len(body))))]
    out: list[Span] = []
    first: int | None = None
    last_end = 0
    for i, (pos, kind) in enumerate(toks):
        if body.startswith(";", pos) and is_operator(kind):
            if first is not None:
                out.append(Span(first, last_end))
            first = None
            continue
        if first is None:
            first = pos
        nxt = toks[i + 1][0] if i + 1 < len(toks) else len(body)
        last_end = pos + len(_token_text(body, pos, nxt))
    if first is not None:
        out.append(Span(first, last_end))
    return out


def check_limits(body: str, rel: str) -> None:
    """Refuse a body too large or too deeply nested to analyse, with its location (never a traceback)."""
    if len(body) > MAX_CHARS:
        raise SqlError(
            f"the model is {len(body):,} characters long; lakewrap reads models of at most {MAX_CHARS:,}",
            location=offset_location(body, MAX_CHARS, rel),
            hint="a model is one query: load data with a seed, and split very long SQL into several models",
        )
    if body.count("(") <= MAX_DEPTH:
        return  # fewer opening parentheses than the limit, in tokens or not: nothing to count
    depth = 0
    for pos, kind in raw_tokens(body):
        ch = body[pos]
        if ch == "(" and is_operator(kind):
            depth += 1
            if depth > MAX_DEPTH:
                raise SqlError(
                    f"the SQL nests parentheses more than {MAX_DEPTH} deep",
                    location=offset_location(body, pos, rel),
                    hint="flatten the expression (drop redundant parentheses, or move parts into a CTE)",
                )
        elif ch == ")" and is_operator(kind):
            depth = max(depth - 1, 0)


def _syntax_error(body: str, span: Span, message: str, position: int | None, rel: str) -> SqlError:

    offset = span.start + position if position is not None else span.start
    offset = min(offset, len(body))
    rest = body[offset:span.end].split(None, 1)
    token = rest[0] if rest and offset < span.end else ""
    if message.startswith("unterminated"):
        what = message.split(" at or near", 1)[0]
        hint = next((h for opener, _, h in OPENERS if body.startswith(opener, offset)), "close it")
        return SqlError(f"DuckDB cannot parse the SQL: an {what} starts here",
                        location=offset_location(body, offset, rel), hint=hint)
    if not message.startswith("syntax error"):  # a limit of the parser (expression depth, ...)
        return SqlError(f"DuckDB cannot parse the SQL: {message}", location=offset_location(body, offset, rel),
                        hint="flatten the expression: fewer nested operators, parentheses or subqueries "
                        "(move parts into CTEs)")
    if not token:
        # "at end of input": point just after the statement's last token
        offset = span.end
        what = "the statement ends too early"
        hint = ("the model body must be valid DuckDB SQL: something is missing at the end (an operand, a "
                "closing parenthesis, a clause's argument)")
    else:
        near = _near(body, offset, span.end)
        what = f"unexpected `{near}`"
        hint = ("the model body must be valid DuckDB SQL: DuckDB's parser stops at the caret; look there and "
                "just before it for a doubled, missing or dangling operator, comma, keyword or parenthesis")
    detail = message[:1].lower() + message[1:]
    return SqlError(f"DuckDB cannot parse the SQL: {what} ({detail})",
                    location=offset_location(body, offset, rel), hint=hint)


def _near(body: str, offset: int, end: int) -> str:
    toks = [p for p, _ in raw_tokens(body[offset:end])]
    nxt = toks[1] if len(toks) > 1 else end - offset
    text = _token_text(body[offset:end], 0, nxt) or body[offset:end].split(None, 1)[0]
    return text if len(text) <= 40 else text[:37] + "..."


def check_body(body: str, rel: str, *, literal: bool) -> list[Span]:
    """Check every statement of ``body`` with DuckDB's parser; return their spans.

    Raises:
        SqlError: located at the offending token, for a statement DuckDB rejects, or (``literal``)
            for a statement that would leave lakewrap's transaction or change the session.
    """
    out = spans(body)
    for span in out:
        text = body[span.start:span.end]
        if literal:
            words = text.upper().lstrip("(").split(None, 2)
            first = words[0] if words else ""
            if words[:2] == ["UPDATE", "EXTENSIONS"]:
                raise _refused("updating extensions", "UPDATE EXTENSIONS", offset_location(body, span.start, rel))
            if first in _REFUSED_KEYWORDS:
                raise _refused(_REFUSED_KEYWORDS[first], first, offset_location(body, span.start, rel))
        statements = _parse(body, span, rel, literal)
        if literal:
            _check_literal_type(statements, text, offset_location(body, span.start, rel))
    return out


def _parse(body: str, span: Span, rel: str, literal: bool) -> list[Any]:
    """DuckDB's statements of ``body[span]``; a located error when its parser rejects them.

    ``duckdb.extract_statements`` is the fast check (~0.05 ms, no connection); only a rejected
    statement is parsed again by ``json_serialize_sql``, whose error carries the offset.
    """
    import duckdb

    text = body[span.start:span.end]
    try:
        return list(duckdb.extract_statements(text))
    except duckdb.Error as exc:
        result = _serialize(text)
        if result.get("error") and result.get("error_type") != "not implemented":
            position = result.get("position")
            raise _syntax_error(body, span, str(result.get("error_message", "syntax error")),
                                int(position) if position is not None else None, rel) from None
        if not literal:
            return []  # parsed, but refused past the grammar (mixed parameter styles): checked later
        raise SqlError(f"DuckDB cannot read the statement: {str(exc).splitlines()[0]}",
                       location=offset_location(body, span.start, rel),
                       hint="a literal model's statements must be plain DuckDB SQL") from None


def _check_literal_type(statements: list[Any], text: str, where: Location) -> None:
    for st in statements:
        kind = st.type.name
        if kind in _REFUSED_TYPES:
            raise _refused(_REFUSED_TYPES[kind], text.split(None, 1)[0].upper(), where)


def _refused(what: str, keyword: str, where: Location) -> SqlError:
    return SqlError(
        f"a literal model cannot run `{keyword}` ({what}): lakewrap runs its statements in one transaction "
        "on the lake, and this would leave it or change the session",
        location=where,
        hint="remove the statement; lakewrap sends BEGIN and COMMIT itself, and sets up the session",
    )
