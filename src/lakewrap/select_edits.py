"""The SELECT a wrapped model embeds: the user's text as written, with lakewrap's declared
substitutions made as edits at token positions, checked on DuckDB's parse tree.

A window bound (``$partition_start``, ``$partition_end``) compared directly is cast to TIMESTAMP
(``compilers/shape.py``, WINDOW_BOUNDS), and on the Iceberg SQL write path every ``schema.table`` is
named in the catalog. DuckDB's tree of the edited text, the substitutions undone and positions
ignored, must equal the tree of the text as written; any difference is an error, never a silent
rewrite. :func:`prepare_selects` runs the same check for many SELECTs with two DuckDB queries per
batch. See ``docs/architecture.md``, "DuckDB's grammar is the judge".
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterable
from typing import Any

from lakewrap.duckdb_parser import char_offsets, is_operator, raw_tokens, serialize, serialize_doc, serialize_docs
from lakewrap.duckdb_parser import token_text as _token_text
from lakewrap.errors import Location, SqlError

_WINDOW_BOUNDS = ("partition_start", "partition_end")
_NO_LOCATION = 2**64 - 1


def _normal(node: Any, catalog: str | None) -> Any:
    """The tree without positions (they differ between two texts of one query), with the declared
    substitutions undone: a window bound cast to TIMESTAMP as a comparison's operand is the bare
    bound, and a table named in lakewrap's ``catalog`` is named without it."""
    if isinstance(node, list):
        return [_normal(v, catalog) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: _normal(v, catalog) for k, v in node.items() if k != "query_location"}
    if out.get("class") in ("COMPARISON", "BETWEEN"):
        for key in ("left", "right", "input", "lower", "upper"):
            if _is_cast_bound(out.get(key)):
                out[key] = out[key]["child"]
    elif catalog is not None and out.get("type") == "BASE_TABLE" and out.get("catalog_name") == catalog:
        out["catalog_name"] = ""
    return out


def _same(a: Any, b: Any, catalog: str | None) -> bool:
    """``_normal(a) == _normal(b)``, in one walk without copying (the trees of a model's SELECT).

    Subtrees equal as they are, positions included (all of the text before the first edit), are
    compared by ``==`` alone, without walking them in Python.
    """
    if a == b:
        return True
    if isinstance(a, dict):
        if not isinstance(b, dict):
            return False
        keys = a.keys() - {"query_location"}
        if keys != b.keys() - {"query_location"}:
            return False
        operands = a.get("class") in ("COMPARISON", "BETWEEN")
        table = catalog is not None and a.get("type") == "BASE_TABLE"
        for k in keys:
            x, y = a[k], b[k]
            if operands and k in ("left", "right", "input", "lower", "upper"):
                x = x["child"] if _is_cast_bound(x) else x
                y = y["child"] if _is_cast_bound(y) else y
            elif table and k == "catalog_name":
                x, y = ("" if x == catalog else x), ("" if y == catalog else y)
            if not _same(x, y, catalog):
                return False
        return True
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(_same(x, y, catalog) for x, y in zip(a, b, strict=True))
    return False


def _is_cast_bound(node: Any) -> bool:
    return (isinstance(node, dict) and node.get("class") == "CAST" and not node.get("try_cast")
            and isinstance(node.get("cast_type"), dict) and node["cast_type"].get("id") == "TIMESTAMP"
            and isinstance(node.get("child"), dict) and node["child"].get("class") == "PARAMETER"
            and node["child"].get("identifier") in _WINDOW_BOUNDS)


Substitution = tuple[dict[str, Any], str, Any]  # (node, key, value): the node's key set to the value


def _edits(tree: Any, text: str, bounds: bool, catalog: str | None,
           found: list[Substitution] | None = None) -> list[tuple[int, int, str]]:
    """(start, end, replacement) edits of ``text`` for the substitutions, found on DuckDB's tree.

    ``found`` receives what each edit is meant to do to the tree: a compared bound wrapped in
    ``CAST(... AS TIMESTAMP)``, a table given the catalog (see :func:`_as_expected`).
    """
    toks = raw_tokens(text)
    params = [(pos, _token_text(text, toks[i + 1][0], toks[i + 2][0] if i + 2 < len(toks) else len(text)))
              for i, (pos, kind) in enumerate(toks[:-1]) if text.startswith("$", pos) and is_operator(kind)]
    edits: dict[int, tuple[int, int, str]] = {}
    meant: list[Substitution] = [] if found is None else found
    char = char_offsets(text)

    def at(node: dict[str, Any]) -> int | None:
        where = node.get("query_location")
        return char(where) if isinstance(where, int) and where != _NO_LOCATION else None

    def bound_at(node: dict[str, Any], key: str, after: int | None = None, before: int | None = None) -> None:
        name = node[key]["identifier"]
        spots = [p for p, n in params if n == name and (after is None or p > after) and (before is None or p < before)]
        if spots:
            pos = spots[0] if after is not None else spots[-1]
            edits[pos] = (pos, pos + 1 + len(name), f"CAST(${name} AS TIMESTAMP)")
            meant.append((node, key, _cast(node[key])))

    def walk(node: Any) -> None:
        if isinstance(node, list):
            for v in node:
                if isinstance(v, (dict, list)):
                    walk(v)
            return
        kind = node.get("class")
        if bounds and kind in ("COMPARISON", "BETWEEN") and (where := at(node)) is not None:
            if kind == "COMPARISON":
                if _is_bound(node.get("left")):
                    bound_at(node, "left", before=where)
                if _is_bound(node.get("right")):
                    bound_at(node, "right", after=where)
            else:
                lower = _is_bound(node.get("lower"))
                if lower:
                    bound_at(node, "lower", after=where)
                if _is_bound(node.get("upper")):
                    after = max([where, *[p for p, _ in params if p > where][:1]]) if lower else where
                    bound_at(node, "upper", after=after)
        if (catalog is not None and node.get("type") == "BASE_TABLE" and node.get("schema_name")
                and not node.get("catalog_name") and (where := at(node)) is not None):
            edits[where] = (where, where, '"' + catalog.replace('"', '""') + '".')
            meant.append((node, "catalog_name", catalog))
        for v in node.values():
            if isinstance(v, (dict, list)):
                walk(v)

    walk(tree)
    return sorted(edits.values())


def _is_bound(node: Any) -> bool:
    return isinstance(node, dict) and node.get("class") == "PARAMETER" and node.get("identifier") in _WINDOW_BOUNDS


_EDITED: dict[tuple[str, bool, str | None], str] = {}


def edited_select(text: str, *, bounds: bool, catalog: str | None, rel: str, where: Location) -> str:
    """The user's SELECT ``text`` with lakewrap's substitutions made at token positions.

    ``bounds``: cast the window bounds a comparison compares with to TIMESTAMP (see
    ``compilers/shape.py``, WINDOW_BOUNDS); ``catalog``: name every ``schema.table`` in that
    catalog. DuckDB's tree of the result, the substitutions undone, must equal the tree of
    ``text``. The result is remembered (:func:`prepare_selects` fills the same memory in batches).

    Raises:
        SqlError: the trees differ (a bug in lakewrap, never a silent rewrite), naming the construct.
    """
    key = (text, bounds, catalog)
    done = _EDITED.get(key)
    if done is not None:
        return done
    if _nothing_to_substitute(text, bounds, catalog):
        _EDITED[key] = text
        return text
    original = serialize(text)
    if original.get("error"):
        raise SqlError(f"DuckDB cannot parse the SQL: {original.get('error_message')}", location=where,
                       hint="the model body must be one DuckDB SELECT")
    edited, difference = _apply(text, original, bounds, catalog)
    if difference is not None and bounds:
        # A bound the edits could not place exactly (in an expression inside a BETWEEN): casting is
        # only for file pruning, the rows are the same without it, so the bounds stay as written.
        edited, difference = _apply(text, original, False, catalog)
    if difference is not None:
        raise SqlError(
            f"lakewrap's rendering of the SELECT would change its meaning at {difference}",
            location=where,
            hint="this is a bug in lakewrap; please report it with the model. Nothing was run",
        )
    _EDITED[key] = edited
    return edited


def _nothing_to_substitute(text: str, bounds: bool, catalog: str | None) -> bool:
    return catalog is None and (not bounds or not any(f"${b}" in text for b in _WINDOW_BOUNDS))


def _edited(text: str, tree: Any, bounds: bool, catalog: str | None, found: list[Substitution]) -> str:
    edited = text
    for start, end, new in reversed(_edits(tree, text, bounds, catalog, found)):
        edited = edited[:start] + new + edited[end:]
    return edited


def _apply(text: str, original: dict[str, Any], bounds: bool, catalog: str | None) -> tuple[str, str | None]:
    """``text`` edited, and the first construct where its tree differs from ``original``'s (None: equal)."""
    found: list[Substitution] = []
    edited = _edited(text, original["statements"], bounds, catalog, found)
    if edited == text:
        return text, None
    return edited, _difference(original, serialize_doc(edited), found, catalog)


def _difference(original: dict[str, Any], after_doc: str, found: list[Substitution], catalog: str | None) -> str | None:
    """Where DuckDB's tree of the edited text (its JSON text ``after_doc``), the substitutions
    undone, differs from the tree of the text as written (``original``); None: nowhere."""
    if _as_expected(original, after_doc, found):
        return None
    after = json.loads(after_doc)
    if after.get("error"):
        return f"`{after.get('error_message')}`"
    tree = original["statements"]
    if _same(tree, after.get("statements"), catalog):
        return None
    return _first_difference(_normal(tree, catalog), _normal(after.get("statements"), catalog))


_POSITION = re.compile(r'"query_location":\d+,')


def _as_expected(original: dict[str, Any], after_doc: str, found: list[Substitution]) -> bool:
    """Whether ``after_doc`` is, positions aside, the JSON text of ``original`` with the substitutions
    ``found`` made in it.

    Then DuckDB's tree of the edited text is exactly the tree as written plus the declared
    substitutions, which is what the tree comparison proves, without decoding the edited tree
    (0.3 ms a SELECT) or walking it. In JSON text, ``"query_location":<digits>,`` can only be a
    key and its value (a quote inside a string is escaped, and no other key holds that name), so
    removing them compares the trees without positions. False is no verdict: the JSON may just be
    spelled differently (a number, an escape); the trees are then compared node by node.
    """
    undo: list[Substitution] = []
    try:
        for node, key, value in found:
            undo.append((node, key, node[key]))
            node[key] = value
        expected = json.dumps(original, ensure_ascii=False, separators=(",", ":"))
    except (RecursionError, ValueError, TypeError):
        return False
    finally:
        for node, key, value in reversed(undo):
            node[key] = value
    return _POSITION.sub("", expected) == _POSITION.sub("", after_doc)


def _cast(bound: dict[str, Any]) -> dict[str, Any]:
    """DuckDB's tree of ``CAST(<bound> AS TIMESTAMP)`` (its JSON's keys in DuckDB's order)."""
    return {"class": "CAST", "type": "OPERATOR_CAST", "alias": "", "query_location": 0, "child": bound,
            "cast_type": {"id": "TIMESTAMP", "type_info": None}, "try_cast": False}


BATCH = 100  # SELECTs per pair of queries in prepare_selects


def prepare_selects(requests: Iterable[tuple[str, bool, str | None]]) -> None:
    """:func:`edited_select` of many ``(text, bounds, catalog)`` at once, remembered for its calls.

    The same check, batched: the texts as written are parsed in one ``json_serialize_sql`` query
    per :data:`BATCH`, the edits found on their trees, the edited texts parsed in a second query
    and the trees compared. A SELECT whose check does not pass at once (DuckDB rejects a text, the
    trees differ, a bound to leave uncast) is not remembered: :func:`edited_select` does it again
    alone, falls back or raises. Never raises itself.
    """
    todo: dict[tuple[str, bool, str | None], None] = {}
    for key in requests:
        if key in _EDITED:
            continue
        if _nothing_to_substitute(*key):
            _EDITED[key] = key[0]
        else:
            todo[key] = None
    keys = list(todo)
    for i in range(0, len(keys), BATCH):
        with contextlib.suppress(Exception):  # a batch that fails is checked one SELECT at a time
            _prepare(keys[i:i + BATCH])


def _prepare(keys: list[tuple[str, bool, str | None]]) -> None:
    texts = list(dict.fromkeys(text for text, _, _ in keys))
    originals = {text: json.loads(doc) for text, doc in zip(texts, serialize_docs(texts), strict=True)}
    edited: dict[tuple[str, bool, str | None], tuple[str, list[Substitution]]] = {}
    for key in keys:
        text, bounds, catalog = key
        original = originals[text]
        if not original.get("error"):
            found: list[Substitution] = []
            new = _edited(text, original["statements"], bounds, catalog, found)
            if new == text:
                _EDITED[key] = text
            else:
                edited[key] = (new, found)
    news = list(dict.fromkeys(new for new, _ in edited.values()))
    afters = dict(zip(news, serialize_docs(news), strict=True))
    for key, (new, found) in edited.items():
        if _difference(originals[key[0]], afters[new], found, key[2]) is None:
            _EDITED[key] = new


def _first_difference(a: Any, b: Any, path: str = "the query") -> str:
    """The first construct where two trees differ, named by its DuckDB node class."""
    if isinstance(a, dict) and isinstance(b, dict):
        here = str(a.get("class") or a.get("type") or path)
        for k in a.keys() | b.keys():
            if a.get(k) != b.get(k):
                return _first_difference(a.get(k), b.get(k), f"{here}.{k}")
        return here
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for x, y in zip(a, b, strict=True):
            if x != y:
                return _first_difference(x, y, path)
    return f"`{path}`"
