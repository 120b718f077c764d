"""Positions in SQL text: character offsets to file lines and columns, and unterminated constructs."""

from __future__ import annotations

from lakewrap.errors import Location


def line_text(sql: str, line: int) -> str:
    lines = sql.splitlines()
    return lines[line - 1] if 0 < line <= len(lines) else ""


def offset_location(sql: str, offset: int, path: str) -> Location:
    """The :class:`Location` (1-based line and column, with the line's text) of ``sql[offset]``."""
    line = sql.count("\n", 0, offset) + 1
    column = offset - (sql.rfind("\n", 0, offset) + 1) + 1
    return Location(path, line, column, line_text(sql, line) or None)


OPENERS = (
    ("'", "an unterminated string literal", "close it with `'` (write `''` for a quote inside it)"),
    ('"', "an unterminated quoted name", 'close it with `"`'),
    ("/*", "an unterminated block comment", "close it with `*/`"),
    ("$", "an unterminated dollar-quoted string", "close it with the same `$tag$` it opened with"),
)
