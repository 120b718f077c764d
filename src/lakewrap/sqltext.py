"""Parsing of model SQL with sqlglot, with located errors and a per-process AST cache.

The parser and the compilers both need the model's AST; :func:`parse_body` parses once and keeps
the result, so compiling a model never parses its SQL twice.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError
from sqlglot.parser import Parser
from sqlglot.tokens import Token, Tokenizer, TokenType  # type: ignore[attr-defined]

from lakewrap.errors import Location, SqlError
from lakewrap.sqlpos import OPENERS, line_text, offset_location

DIALECT = "duckdb"


@dataclass(frozen=True)
class Statement:
    """One statement of a model body: its AST, the original text and its first line.

    The tree's token positions (node ``meta`` ``start``/``end``) count from ``meta_origin`` in the
    body: 0 when it was parsed from the whole body's tokens, ``start`` when from ``text`` alone.
    """

    tree: exp.Expr
    text: str
    line: int
    start: int = 0  # character offset of ``text`` in the parsed body
    meta_origin: int = 0


_CACHE: dict[str, tuple[Statement, ...]] = {}


def node_location(node: exp.Expr, statement: Statement, sql: str, path: str) -> Location:
    """Where ``node`` (part of ``statement``'s AST) starts in ``sql``, from the tokens' positions.

    sqlglot keeps positions on some nodes only (``CAST`` has none, its operand has), so the earliest
    position in the subtree is widened to the start of the word it is glued to (``CAST(x`` → ``C``).
    Falls back to the statement's first line when sqlglot kept no position at all.
    """
    starts = [n.meta["start"] for n in node.walk() if isinstance(n.meta.get("start"), int)]
    if not starts:
        return Location(path, statement.line, None, line_text(sql, statement.line) or None)
    offset = statement.meta_origin + min(starts)
    while offset > statement.start and not sql[offset - 1].isspace() and sql[offset - 1] not in ",;":
        offset -= 1
    return offset_location(sql, offset, path)


def _unterminated(sql: str, offset: int) -> tuple[int, str, str] | None:
    """After the last good token: skip blanks and complete comments, name the construct left open."""
    i = offset
    n = len(sql)
    while i < n:
        if sql[i].isspace():
            i += 1
        elif sql.startswith("--", i):
            end = sql.find("\n", i)
            i = n if end < 0 else end + 1
        elif sql.startswith("/*", i) and sql.find("*/", i + 2) >= 0:
            i = sql.find("*/", i + 2) + 2
        else:
            break
    for opener, what, hint in OPENERS:
        if sql.startswith(opener, i):
            return i, what, hint
    return None


def _token_error(sql: str, path: str, exc: TokenError, tokens: list[Token]) -> SqlError:
    """A located error for SQL the tokenizer cannot read (an open quote or comment)."""
    after = tokens[-1].end + 1 if tokens else 0
    found = _unterminated(sql, after)
    if found is not None:
        offset, what, hint = found
        return SqlError(f"cannot read the SQL: {what} starts here", location=offset_location(sql, offset, path),
                        hint=hint)
    return SqlError(
        f"cannot read the SQL: {str(exc).splitlines()[0]}",
        location=offset_location(sql, after, path) if tokens else Location(path),
        hint="check for an unterminated string, quoted name or comment",
    )


_CLASS = re.compile(r"<class '(?:[\w]+\.)*(\w+)'>")


def _parse_message(description: str, highlight: str) -> str:
    """sqlglot's parse error in user terms (no Python class names)."""
    at = f"`{highlight}`" if highlight.strip() else "the end of the statement"
    if description.startswith("Required keyword"):
        return f"the expression before {at} is incomplete"
    if description.startswith("Invalid expression / Unexpected token"):
        return f"unexpected {at}"
    return f"{_CLASS.sub(lambda m: m.group(1), description)} (at {at})"


_DIALECT_OBJ = sqlglot.Dialect.get_or_raise(DIALECT)
_COMMENT = re.compile(r"--[^\n]*|/\*.*?\*/", re.S)


def _inside_text(chunk: list[Token], sql: str, start: int, end: int) -> list[Token]:
    """The chunk's tokens without the comments the tokenizer attached from outside ``sql[start:end]``."""
    first, last = chunk[0], chunk[-1]
    if not first.comments and not last.comments:
        return chunk
    before = sql.rfind(";", 0, start) + 1
    lead = len(_COMMENT.findall(sql, before, start)) if first.comments else 0
    after = sql.find(";", end)
    trail = len(_COMMENT.findall(sql, end, len(sql) if after < 0 else after)) if last.comments else 0
    if not lead and not trail:
        return chunk
    out = list(chunk)
    if len(out) == 1:
        out[0] = _with_comments(first, first.comments[lead: len(first.comments) - trail])
    else:
        out[0] = _with_comments(first, first.comments[lead:])
        out[-1] = _with_comments(last, last.comments[: len(last.comments) - trail])
    return out


def _with_comments(tok: Token, comments: list[str]) -> Token:
    return Token(tok.token_type, tok.text, tok.line, tok.col, tok.start, tok.end, comments)


def parse_body(sql: str, path: str) -> tuple[Statement, ...]:
    """Parse ``sql`` (whole-file text with the header blanked) into statements.

    Statement texts are cut from the original text at DuckDB's semicolons, so a literal model runs
    exactly what was written, split as DuckDB splits it.

    Raises:
        SqlError: located, for SQL sqlglot cannot read, or nested too deeply for it.
    """
    cached = _CACHE.get(sql)
    if cached is not None:
        return cached
    try:
        return _parse_body(sql, path)
    except RecursionError:
        first = len(sql) - len(sql.lstrip())
        raise SqlError("the SQL is nested too deeply to analyse", location=offset_location(sql, first, path),
                       hint="flatten the expression: fewer nested operators, parentheses or subqueries "
                       "(move parts into CTEs)") from None


_LOCAL = threading.local()


def _tools() -> tuple[Tokenizer, Parser]:
    """This thread's sqlglot tokenizer and parser (each resets itself per call): building them
    cost about a tenth of parsing a model."""
    tools: tuple[Tokenizer, Parser] | None = getattr(_LOCAL, "tools", None)
    if tools is None:
        tools = _LOCAL.tools = (_DIALECT_OBJ.tokenizer(), _DIALECT_OBJ.parser())
    return tools


def _parse_body(sql: str, path: str) -> tuple[Statement, ...]:
    tokenizer, parser = _tools()
    try:
        tokens = tokenizer.tokenize(sql)
    except TokenError as exc:
        raise _token_error(sql, path, exc, list(tokenizer.tokens)) from None
    chunks = _split(tokens, sql)
    out: list[Statement] = []
    for chunk in chunks:
        start, end = chunk[0].start, chunk[-1].end + 1
        text = sql[start:end]
        try:
            # Positions stay those of the body's tokens (see Statement.meta_origin).
            trees = parser.parse(_inside_text(chunk, sql, start, end), text)
            origin = 0
        except ParseError:
            try:
                trees = sqlglot.parse(text, read=DIALECT)
                origin = start
            except ParseError as exc:
                raise _parse_error(sql, path, exc, start) from None
        found = [t for t in trees if t is not None]
        if not found:
            continue
        out.append(Statement(found[0], text, chunk[0].line, start, origin))
    result = tuple(out)
    _CACHE[sql] = result
    return result


def _parse_error(sql: str, path: str, exc: ParseError, start: int) -> SqlError:
    """A located error for a statement (``sql[start:]``) that sqlglot cannot parse."""
    err = exc.errors[0] if exc.errors else {}
    description = str(err.get("description") or str(exc).splitlines()[0])
    highlight = str(err.get("highlight") or "")
    rel_line, rel_col = err.get("line"), err.get("col")
    location = Location(path)
    if isinstance(rel_line, int) and isinstance(rel_col, int):
        # sqlglot counts lines from the statement's start and gives the column where the offending
        # token *ends*; point at where it begins, in the whole file.
        first = sql.rfind("\n", 0, start) + 1
        head = start - first if rel_line == 1 else 0
        line = sql.count("\n", 0, start) + rel_line
        col = head + rel_col - (len(highlight) - 1 if "\n" not in highlight and highlight else 0)
        location = Location(path, line, max(col, 1), line_text(sql, line) or None)
    return SqlError(
        f"cannot parse the SQL: {_parse_message(description, highlight)}",
        location=location,
        hint="the model body must be valid DuckDB SQL; look for a missing operand, comma or parenthesis "
        "just before the caret",
    )


def _split(tokens: list[Token], sql: str) -> list[list[Token]]:
    """The tokens of each statement, cut where DuckDB's tokenizer sees a semicolon (not sqlglot's)."""
    if ";" not in sql:  # one statement (the usual model): no token to look for
        return [tokens] if tokens else []
    from bisect import bisect_right

    from lakewrap.grammar import spans

    cuts = spans(sql)
    starts = [c.start for c in cuts]
    chunks: list[list[Token]] = [[] for _ in cuts]
    for tok in tokens:
        if tok.token_type == TokenType.SEMICOLON and sql.startswith(";", tok.start):
            continue
        i = max(bisect_right(starts, tok.start) - 1, 0)
        if chunks:
            chunks[i].append(tok)
    return [c for c in chunks if c]


_PARAM = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")


def parameter_location(sql: str, name: str, path: str) -> Location:
    """Where ``$name`` first appears in ``sql`` (for error messages)."""
    for i, line in enumerate(sql.splitlines(), 1):
        for m in _PARAM.finditer(line):
            if m.group(1) == name:
                return Location(path, i, m.start() + 1, line)
    return Location(path)


_NAMED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def parameters(tree: exp.Expr) -> set[str]:
    """Names of the ``$name`` parameters an AST uses (not ``?`` or ``$1``)."""
    return {p.name for p in tree.find_all(exp.Placeholder) if _NAMED.match(p.name or "")}


def parameter_uses(tree: exp.Expr, nodes: Sequence[exp.Expr] | None = None) -> tuple[set[str], bool]:
    """In one walk: :func:`parameters` and whether the AST also uses ``?`` or ``$1`` style ones
    (``nodes``: the tree's ``find_all`` result, of these types and maybe others, when the caller
    walked it)."""
    names: set[str] = set()
    positional = False
    for p in tree.find_all(exp.Placeholder, exp.Parameter) if nodes is None else nodes:
        if isinstance(p, exp.Placeholder) and _NAMED.match(p.name or ""):
            names.add(p.name)
        elif isinstance(p, (exp.Placeholder, exp.Parameter)):
            positional = True
    return names, positional


def positional_parameter_location(sql: str, path: str) -> Location:
    """Where the first ``?`` or ``$1`` parameter is in ``sql`` (strings and comments skipped)."""
    tokens = sqlglot.Dialect.get_or_raise(DIALECT).tokenize(sql)
    for i, tok in enumerate(tokens):
        if tok.token_type == TokenType.PLACEHOLDER and not _NAMED.match(tok.text.lstrip(":$")):
            return offset_location(sql, tok.start, path)
        nxt = tokens[i + 1] if i + 1 < len(tokens) else None
        if (
            tok.token_type == TokenType.PARAMETER
            and nxt is not None
            and nxt.token_type == TokenType.NUMBER
            and nxt.start == tok.end + 1
        ):
            return offset_location(sql, tok.start, path)
    return Location(path)


def take_query(sql: str, path: str) -> exp.Expr:
    """The first statement's AST, owned by the caller (free to mutate).

    Hands over the tree :func:`parse_body` cached and forgets it, instead of deep-copying it: for
    a parsed model, a copy costs more than parsing the text again, and a compile needs the tree
    once. A later call parses afresh.
    """
    return take_statement(sql, path).tree


def take_statement(sql: str, path: str) -> Statement:
    """:func:`take_query`, with the statement's text and positions."""
    cached = _CACHE.pop(sql, None)
    statements = cached if cached is not None else parse_body(sql, path)
    _CACHE.pop(sql, None)
    return statements[0]
