"""Parameters written into a statement as literals instead of bound by DuckDB's Python client.

DuckDB 1.5.5's Python client imports pandas the first time it binds a parameter that is not
``None`` (any type, ``duckdb.Value`` objects too), whenever pandas is installed: 0.5-0.7 s of every
``lakewrap run`` that binds one (measured: ``con.execute("SELECT ?", [1])`` 0.51-0.58 s in a fresh
process with pandas installed, 0.001 s with ``None``). A run binds its bookkeeping values (run id,
row counts, commit message) and the partition window, so every run with pandas installed paid it.

:func:`inline` writes the values in as literals that DuckDB types the way it types a bound
parameter: a parameter takes its type from where it stands, so a string is an untyped string
literal (``'2024-01-01'`` compared with a TIMESTAMP is a TIMESTAMP, as a bound ``str`` is), an
integer an integer literal, a float, a datetime or a date a typed literal. Placeholders are found
with DuckDB's own tokenizer (``duckdb.tokenize``): a ``$name`` inside a string literal or a
comment is never touched. A value of any other type, or a placeholder with no value, leaves the
statement to DuckDB's binding as before.
"""

from __future__ import annotations

import itertools
import math
from datetime import date, datetime, time
from typing import Any

_MAX_BIGINT = 2**63 - 1


def literal(value: Any) -> str | None:
    """``value`` as a DuckDB literal typed as a bound parameter would be; None: not inlinable."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value) if -_MAX_BIGINT - 1 <= value <= _MAX_BIGINT else None
    if isinstance(value, float):
        text = "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
        return f"CAST('{text}' AS DOUBLE)"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'" if "\x00" not in value else None
    if isinstance(value, datetime):
        kind = "TIMESTAMP" if value.tzinfo is None else "TIMESTAMPTZ"
        return f"{kind} '{value.isoformat(sep=' ')}'"
    if isinstance(value, date):
        return f"DATE '{value.isoformat()}'"
    if isinstance(value, time) and value.tzinfo is None:
        return f"TIME '{value.isoformat()}'"
    return None


def inline(statement: str, params: dict[str, Any] | None) -> tuple[str, dict[str, Any] | None]:
    """``statement`` with its ``$name`` placeholders replaced by literals of ``params``: the text and
    the parameters left to bind (None when none are); unchanged when any value is not inlinable."""
    if not params:
        return statement, params
    if not isinstance(params, dict):
        return statement, params  # positional parameters: left to DuckDB
    texts: dict[str, str] = {}
    for name, value in params.items():
        text = literal(value)
        if text is None:
            return statement, params
        texts[name] = text
    spans = _placeholders(statement)
    if spans is None or {name for _, _, name in spans} != set(texts):
        return statement, params  # DuckDB's binding says what is missing or left over
    out: list[str] = []
    last = 0
    for start, end, name in spans:
        out += [statement[last:start], texts[name]]
        last = end
    out.append(statement[last:])
    return "".join(out), None


def _placeholders(statement: str) -> list[tuple[int, int, str]] | None:
    """``(start, end, name)`` of every ``$name`` token of ``statement`` (None: it does not tokenize)."""
    import duckdb

    try:
        tokens = duckdb.tokenize(statement)
    except Exception:
        return None
    names = (duckdb.token_type.identifier, duckdb.token_type.keyword)  # ``$target``: a keyword token
    spans: list[tuple[int, int, str]] = []
    for (pos, _), (nxt, kind) in itertools.pairwise(tokens):
        if statement[pos] == "$" and nxt == pos + 1 and kind in names:
            end = nxt
            while end < len(statement) and (statement[end].isalnum() or statement[end] == "_"):
                end += 1
            spans.append((pos, end, statement[nxt:end]))
    return spans
