"""The one redactor: every secret lakewrap knows, in every form lakewrap can compute, becomes ``***``.

Every output channel passes its text through :func:`redact` (or a lake's ``redact``, which adds the
project's absolute path and the values handed to DuckDB): messages and errors, ``--format json``,
the files under ``target/``, the statement logs, the run log, the state tables and a data test's
failing-row sample (redacted before it is stored or printed, :func:`redact_value`).

The secrets are the values of :data:`SECRET_ENV` (read at each call, set or not when the lake was
opened) plus the ones a caller passes. Each is matched case-insensitively as written, reversed,
base64 (standard and URL-safe, standalone or at any offset inside a longer base64 text),
URL-encoded and hex. A value shorter than :data:`MIN_DERIVED` characters is matched only as
written: its derived forms are too short to tell apart from ordinary text.
"""

from __future__ import annotations

import base64
import functools
import os
import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

# Where lakewrap takes credentials from. PostgreSQL's come from PGPASSWORD (a password in the dsn
# is refused, lakewrap.dsn); an Iceberg REST catalog's bearer token from LAKEWRAP_ICEBERG_TOKEN.
SECRET_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "PGPASSWORD",
              "LAKEWRAP_ICEBERG_TOKEN")
MASK = "***"
MIN_DERIVED = 6


def secret_values(extra: Iterable[str | None] = ()) -> frozenset[str]:
    """The secret values to hide now: the environment's (:data:`SECRET_ENV`) and ``extra``."""
    return frozenset(v for v in (*(os.environ.get(n) for n in SECRET_ENV), *extra) if v)


def forms(secret: str) -> set[str]:
    """``secret`` and the forms of it a query or a library can produce (matched ignoring case)."""
    out = {secret}
    if len(secret) < MIN_DERIVED:
        return out
    raw = secret.encode()
    out |= {secret[::-1], quote(secret, safe=""), quote(secret), quote_plus(secret), raw.hex()}
    for encoded in _base64(raw):
        out |= {encoded, encoded.translate(str.maketrans("+/", "-_"))}
    return {f for f in out if f}


def _base64(raw: bytes) -> set[str]:
    """Base64 of ``raw`` alone, and the characters that depend only on ``raw`` when it starts at
    byte offset 0, 1 or 2 of a longer text (so ``to_base64('x' || secret)`` is caught too)."""
    out = {base64.b64encode(raw).decode()}
    for k in range(3):
        encoded = base64.b64encode(b"\0" * k + raw).decode()
        start, end = -(-8 * k // 6), 8 * (k + len(raw)) // 6
        out.add(encoded[start:end])
    return out


@functools.lru_cache(maxsize=64)
def _lowered_forms(values: frozenset[str]) -> tuple[str, ...]:
    return tuple(sorted({f.lower() for v in values for f in forms(v)}, key=len, reverse=True))


@functools.lru_cache(maxsize=256)
def _pattern(found: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile("|".join(map(re.escape, found)), re.IGNORECASE)


def redact(text: str, *, extra: Iterable[str | None] = (), roots: Sequence[Path] = ()) -> str:
    """``text`` with every secret (and its forms) masked and each of ``roots`` made relative.

    Example:
        >>> redact("could not connect: wp-terc3s / S3CRET-PW", extra=["s3cret-pw"])
        'could not connect: *** / ***'
    """
    for root in roots:
        uri = root.as_uri()
        text = text.replace(uri + "/", "").replace(uri, ".")
        text = text.replace(str(root) + os.sep, "").replace(str(root), ".")
    values = secret_values(extra)
    if not values:
        return text
    # A substring search per form finds the few present (C speed); only those go to the regex,
    # which masks them in the original text ignoring case (an alternation of every form ran at
    # 0.6 MB/s, the search at hundreds).
    lowered = text.lower()
    found = tuple(f for f in _lowered_forms(values) if f in lowered)
    return _pattern(found).sub(MASK, text) if found else text


def redact_value(value: Any, text: Callable[[str], str] = redact) -> Any:
    """A JSON-like tree with every string passed through ``text`` (a redactor, :func:`redact` by
    default); a leaf of another type (a number too) whose text shows a secret becomes its redacted
    text, and stays as it is otherwise.

    Example:
        >>> redact_value([{"k": "AKIA-canary-1"}], lambda s: s.replace("AKIA-canary-1", MASK))
        [{'k': '***'}]
    """
    if isinstance(value, str):
        return text(value)
    if isinstance(value, dict):
        return {redact_value(k, text): redact_value(v, text) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_value(v, text) for v in value]
    if value is None or isinstance(value, bool):
        return value
    shown = str(value)
    masked = text(shown)
    return value if masked == shown else masked
