"""DuckDB's tokenizer and parser, in this process: tokens and JSON parse trees of SQL text.

``json_serialize_sql`` parses without binding on an in-memory connection of the process (one DuckDB
thread): it opens no lake and loads no extension. :func:`serialize_docs` parses many texts in one
query: a query costs about 0.3 ms whatever it does, a statement's tree about 0.1 ms more (measured
on DuckDB 1.5.5), so a batch of 100 costs what 20 single calls do.
"""

from __future__ import annotations

import json
import os
import threading
from bisect import bisect_left
from collections.abc import Callable, Sequence
from itertools import accumulate
from typing import Any

_con: tuple[int, Any] | None = None
_inherited: list[Any] = []
_local = threading.local()


def connection() -> Any:
    """This thread's cursor on an in-memory DuckDB database of this process, one DuckDB thread
    (parsing needs no more). A run compiles in its worker threads: a connection is not to be
    shared between threads, so each gets its own cursor.

    A forked compile worker opens its own database, and keeps the one it inherited referenced:
    destroying a database whose scheduler threads did not survive the fork would wait for them
    forever.
    """
    global _con
    pid = os.getpid()
    if _con is None or _con[0] != pid:
        import duckdb

        if _con is not None:
            _inherited.append(_con[1])
        _con = (pid, duckdb.connect(":memory:", config={"threads": 1}))
    cursor = getattr(_local, "cursor", None)
    if cursor is None or cursor[0] is not _con[1]:
        if cursor is not None:
            _inherited.append(cursor)
        cursor = (_con[1], _con[1].cursor())
        _local.cursor = cursor
    return cursor[1]


def raw_tokens(text: str) -> list[tuple[int, Any]]:
    """DuckDB's tokens of ``text`` as (character offset, DuckDB token type); comments are not tokens.

    The kinds are left as DuckDB's enum values: comparing one costs about 1 µs, so callers look at
    the kind only of the tokens whose first character matters (see :func:`is_operator`).
    """
    import duckdb

    tokens: list[tuple[int, Any]] = duckdb.tokenize(text)
    if text.isascii():
        return tokens
    char = char_offsets(text)
    return [(char(pos), kind) for pos, kind in tokens]


_KINDS: dict[Any, str] = {}


def _kinds() -> dict[Any, str]:
    """DuckDB's token kinds by value (reading ``.name`` of each token costs ~1 µs: a third of tokenizing)."""
    import duckdb

    _KINDS.update({kind: kind.name for kind in duckdb.token_type.__members__.values()})
    return _KINDS


def load() -> None:
    """Import duckdb and read its token kinds (before forking workers that all need them)."""
    _kinds()


def is_operator(kind: Any) -> bool:
    """Whether a token of :func:`raw_tokens` is an operator (``(``, ``;``, ``$`` ...)."""
    names = _KINDS or _kinds()
    return names[kind] == "operator"


def char_offsets(text: str) -> Callable[[int], int]:
    """Byte offset in ``text``'s UTF-8 → character offset (DuckDB's tokens and tree count bytes;
    its syntax errors count characters)."""
    if text.isascii():
        return lambda b: b
    starts = list(accumulate((len(c.encode()) for c in text), initial=0))
    return lambda b: bisect_left(starts, b)


def token_text(body: str, pos: int, nxt: int) -> str:
    """A token's text: up to the next token, without the blanks and comments after it."""
    text = body[pos:nxt]
    for marker in ("--", "/*"):
        cut = text.find(marker, 1)
        if cut > 0 and not text.startswith(("'", '"', "$")):
            text = text[:cut]
    return text.rstrip()


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def serialize_doc(text: str) -> str:
    """DuckDB's parse tree of ``text`` as JSON text (parsed, never bound or run).

    The text is passed as a string literal, its quotes doubled: a bound parameter makes DuckDB
    prepare the statement, 1.7 ms a call instead of 0.24 ms (measured), and its client import
    numpy, pandas and pyarrow the first time.
    """
    doc: str = connection().execute(f"SELECT json_serialize_sql({_literal(text)})").fetchone()[0]
    return doc


def serialize_docs(texts: Sequence[str]) -> list[str]:
    """:func:`serialize_doc` of each text, in one query over a list of string literals: about 0.1 ms
    a text in batches of 100, against 0.45 ms a query of its own (a query costs ~0.3 ms, whatever
    it does). Never a bound parameter: binding any Python value makes DuckDB's client import
    numpy, pandas and pyarrow (0.45 s)."""
    if len(texts) < 2:
        return [serialize_doc(t) for t in texts]
    query = "SELECT [json_serialize_sql(x) FOR x IN [" + ", ".join(map(_literal, texts)) + "]]"
    docs: list[str] = connection().execute(query).fetchone()[0]
    return docs


def serialize(text: str) -> dict[str, Any]:
    """:func:`serialize_doc`, decoded."""
    result: dict[str, Any] = json.loads(serialize_doc(text))
    return result
