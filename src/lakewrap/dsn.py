"""PostgreSQL connection strings (libpq's two forms), parsed to find a password in them.

A dsn is either ``key=value`` pairs (values optionally in single quotes, ``\\`` escaping) or a URI
``postgresql://[user[:password]@][host][:port][/dbname][?param=value&...]``. A password may hide
in the URI's user info, in its query (``?password=...``) or as a ``password`` key; lakewrap
refuses all three (PGPASSWORD or a service file / ``~/.pgpass`` hold it instead).
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, unquote, urlsplit

_URI = re.compile(r"postgres(ql)?://", re.IGNORECASE)
_USERINFO_PASSWORD = re.compile(r"://[^@/?#\s]*:[^@?#\s]*@")
_PAIR = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*('(?:[^'\\]|\\.)*'|(?:[^\s'\\]|\\.)*)")


class DsnError(ValueError):
    """A dsn that cannot be parsed."""


def parse(dsn: str) -> dict[str, str]:
    """The dsn's parameters as libpq reads them (the URI's user info as ``user`` / ``password``).

    Example:
        >>> parse("postgresql://me@db.internal:5432/lake?sslmode=require")
        {'user': 'me', 'host': 'db.internal', 'port': '5432', 'dbname': 'lake', 'sslmode': 'require'}
        >>> parse("dbname=lake host='my host' user=me")
        {'dbname': 'lake', 'host': 'my host', 'user': 'me'}
    """
    if _URI.match(dsn):
        return _parse_uri(dsn)
    out: dict[str, str] = {}
    pos = 0
    while pos < len(dsn):
        if not dsn[pos:].strip():
            break
        m = _PAIR.match(dsn, pos)
        if m is None or m.end() == pos:
            raise DsnError("write the dsn as key=value pairs, e.g. \"dbname=lake host=127.0.0.1 user=lakewrap\", "
                           "or as postgresql://user@host:port/dbname")
        value = m.group(2)
        if value.startswith("'"):
            value = value[1:-1]
        out[m.group(1).lower()] = re.sub(r"\\(.)", r"\1", value)
        pos = m.end()
    return out


def _parse_uri(dsn: str) -> dict[str, str]:
    parts = urlsplit(dsn)
    out: dict[str, str] = {}
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, netloc = netloc.rsplit("@", 1)
        user, colon, password = userinfo.partition(":")
        if user:
            out["user"] = unquote(user)
        if colon:
            out["password"] = unquote(password)
    host, _, port = netloc.rpartition(":") if not netloc.endswith("]") else (netloc, "", "")
    if not host:
        host, port = port, ""
    if host:
        out["host"] = unquote(host)
    if port:
        out["port"] = port
    if parts.path.strip("/"):
        out["dbname"] = unquote(parts.path.lstrip("/"))
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        out[key.lower()] = value
    return out


def has_password(dsn: str) -> bool:
    """Whether ``dsn`` carries a password (in any of libpq's spellings). An unparsable dsn counts
    as carrying one when the word ``password`` is in it, so its text is never echoed."""
    if _USERINFO_PASSWORD.search(dsn):  # user:pw@ even with a raw / in the password
        return True
    try:
        return "password" in parse(dsn)
    except DsnError:
        return "password" in dsn.lower()
