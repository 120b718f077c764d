"""Parsing of model SQL with sqlglot, with located errors and a per-process AST cache.

The parser and the compilers both need the model's AST; :func:`parse_body` parses once and keeps
the result, so compiling a model never parses its SQL twice.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import Token, TokenType

from lakewrap.errors import Location, SqlError

DIALECT = "duckdb"


@dataclass(frozen=True)
class Statement:
    """One statement of a model body: its AST, the original text and its first line."""

    tree: exp.Expression
    text: str
    line: int


_CACHE: dict[str, tuple[Statement, ...]] = {}


def _line_text(sql: str, line: int) -> str:
    lines = sql.splitlines()
    return lines[line - 1] if 0 < line <= len(lines) else ""


def parse_body(sql: str, path: str) -> tuple[Statement, ...]:
    """Parse ``sql`` (whole-file text with the header blanked) into statements.

    Statement texts are cut from the original text at the tokenizer's semicolons, so a literal
    model runs exactly what was written.
    """
    cached = _CACHE.get(sql)
    if cached is not None:
        return cached
    try:
        tokens = sqlglot.Dialect.get_or_raise(DIALECT).tokenize(sql)
    except TokenError as exc:
        m = re.search(r"[Ll]ine (\d+), [Cc]ol: (\d+)", str(exc))
        line = int(m.group(1)) if m else None
        raise SqlError(
            f"cannot read the SQL: {str(exc).splitlines()[0]}",
            location=Location(path, line, int(m.group(2)) if m else None, _line_text(sql, line or 0) or None),
            hint="check for an unterminated string, quoted name or comment",
        ) from None
    chunks = _split(tokens)
    out: list[Statement] = []
    for chunk in chunks:
        start, end = chunk[0].start, chunk[-1].end + 1
        text = sql[start:end]
        try:
            trees = sqlglot.parse(text, read=DIALECT)
        except ParseError as exc:
            err = exc.errors[0] if exc.errors else {}
            line = (err.get("line") or 1) + chunk[0].line - 1
            col = err.get("col")
            raise SqlError(
                f"cannot parse the SQL: {err.get('description') or str(exc).splitlines()[0]}",
                location=Location(path, line, col, _line_text(sql, line) or None),
                hint="the model body must be valid DuckDB SQL",
            ) from None
        trees = [t for t in trees if t is not None]
        if not trees:
            continue
        out.append(Statement(trees[0], text, chunk[0].line))
    result = tuple(out)
    _CACHE[sql] = result
    return result


def _split(tokens: list[Token]) -> list[list[Token]]:
    chunks: list[list[Token]] = []
    current: list[Token] = []
    for tok in tokens:
        if tok.token_type == TokenType.SEMICOLON:
            if current:
                chunks.append(current)
            current = []
        else:
            current.append(tok)
    if current:
        chunks.append(current)
    return chunks


_PARAM = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")


def parameter_location(sql: str, name: str, path: str) -> Location:
    """Where ``$name`` first appears in ``sql`` (for error messages)."""
    for i, line in enumerate(sql.splitlines(), 1):
        for m in _PARAM.finditer(line):
            if m.group(1) == name:
                return Location(path, i, m.start() + 1, line)
    return Location(path)


def parameters(tree: exp.Expression) -> set[str]:
    """Names of the ``$name`` parameters an AST uses."""
    return {p.name for p in tree.find_all(exp.Placeholder) if p.name}


def has_positional_parameter(tree: exp.Expression) -> bool:
    """Whether the AST uses ``?`` or ``$1`` style parameters."""
    for p in tree.find_all(exp.Placeholder):
        if not p.name or p.name.isdigit():
            return True
    return any(True for _ in tree.find_all(exp.Parameter))
