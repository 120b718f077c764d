"""The executor's own statements, built by :mod:`lakewrap.compilers.lake` and remembered.

Every statement lakewrap runs is a sqlglot AST rendered once, but importing sqlglot costs about
0.1 s, a third of what a one-model ``lakewrap run`` adds to a hand-written script. These texts
depend only on their arguments and on the code that renders them, so they are kept in the compile
cache (``target/cache``, keyed by lakewrap's and sqlglot's code like the models' templates): a
warm run takes every statement from there and never imports sqlglot.

Use this module as you would :mod:`lakewrap.compilers.lake` (``statements.fence_update(target)``);
it also serves the builders of :mod:`lakewrap.compilers.schema` (``statements.columns_query()``) and
:mod:`lakewrap.compilers.runlog` (``statements.ddl("duckdb", catalog)``).
The S3 secret, which carries credentials, is never remembered: it is built afresh each time.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

BEGIN = "BEGIN TRANSACTION"
COMMIT = "COMMIT"
ROLLBACK = "ROLLBACK"

# Builders whose output must never be written to disk.
_NEVER = frozenset({"create_s3_secret"})

_texts: dict[str, Any] = {}
_added = False


def preload(texts: object) -> None:
    """Take remembered statements from a cache file (anything malformed is ignored)."""
    if isinstance(texts, dict):
        for key, value in texts.items():
            if isinstance(key, str) and (isinstance(value, str) or (
                    isinstance(value, list) and all(isinstance(v, str) for v in value))):
                _texts.setdefault(key, value)


def remembered() -> tuple[dict[str, Any], bool]:
    """The statements to save, and whether any was added since the last :func:`saved`."""
    return dict(_texts), _added


def saved() -> None:
    global _added
    _added = False


def _builder(name: str) -> Callable[..., Any]:
    """The builder ``name`` of :mod:`lakewrap.compilers.lake`, ``.schema`` or ``.runlog``."""
    import importlib

    for module in ("lake", "schema", "runlog"):
        found = getattr(importlib.import_module(f"lakewrap.compilers.{module}"), name, None)
        if callable(found):
            return found  # type: ignore[no-any-return]
    raise AttributeError(f"no statement builder named {name!r}")


def __getattr__(name: str) -> Callable[..., Any]:
    if name.startswith("__"):
        raise AttributeError(name)
    if name in _NEVER:
        return _builder(name)

    def build(*args: Any, **kwargs: Any) -> Any:
        global _added
        key = name + json.dumps([args, kwargs], sort_keys=True, default=str)
        text = _texts.get(key)
        if text is None:
            text = _builder(name)(*args, **kwargs)
            if not isinstance(text, str | list):
                return text  # not a statement text (e.g. a table reference): nothing to remember
            _texts[key] = text
            _added = True
        return text

    build.__name__ = name
    return build
