"""Python models: ``@lakewrap.model(...)`` functions → :class:`~lakewrap.spec.ModelSpec` (docs/python-models.md).

A Python model is declared, never run, here. Its keywords are the SQL header's annotations: each is
rendered into the header line it stands for (``partitioned="daily key=ts"`` → ``-- partitioned
daily key=ts``) and the header, with the body ``SELECT * FROM <the function's result>``, goes
through :func:`lakewrap.parse.parse_model`: one validator for both kinds of model. An error of that
parse is moved to the decorator's keyword in the ``.py`` file. The SELECT carries a comment naming
the function's file, line and source hash, so the compiled plan's ``sql_sha256`` changes with the
function (and with the project modules it imports). The DAG edges come from ``deps=[...]`` or from
the literal ``ctx.ref("schema.table")`` calls in the function's source (:mod:`ast`).

Running the function is :mod:`lakewrap.pyrun`.
"""

from __future__ import annotations

import ast
import hashlib
import sys
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lakewrap.errors import LakewrapError, Location, ModelError, choices_hint
from lakewrap.spec import ModelSpec, TableRef

MARK = "__lakewrap_model__"
PY_ONLY = ("deps", "timeout")  # keywords of a Python model that are no header annotation
DEFAULT_TIMEOUT = 3600.0
_REPEATABLE_LIST = ("test", "column", "tag", "on")  # a list is one header line per item (tag, on: one line)



@dataclass(frozen=True)
class Declared:
    """What ``@lakewrap.model(...)`` attached to a function: its keywords, unvalidated."""

    keywords: dict[str, Any]


def model(**keywords: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Declare a Python model; the keywords are the SQL header's annotations (docs/python-models.md).

    Example:
        >>> @model(materialized="table")  # doctest: +SKIP
        ... def scores(ctx):
        ...     return ctx.ref("sales.orders").aggregate("customer_id, sum(amount) AS total")
    """
    def mark(fn: Callable[..., Any]) -> Callable[..., Any]:
        setattr(fn, MARK, Declared(dict(keywords)))
        return fn

    return mark


def python_of(spec: ModelSpec) -> dict[str, Any] | None:
    """The ``python`` record of a Python model's spec (None for a SQL model)."""
    got = spec.extensions.get("python")
    return got if isinstance(got, dict) else None


def relation_name(target: TableRef) -> str:
    """The name the function's result is registered under for the model's SELECT."""
    return f"__lakewrap_py__{target.schema_name}__{target.name}".lower()


# --- the source -----------------------------------------------------------------------------------


@dataclass
class Source:
    """A function's place in its file: the file's text and tree, its ``def`` and decorator."""

    rel: str
    text: str
    tree: ast.Module | None
    node: ast.FunctionDef | ast.AsyncFunctionDef | None
    call: ast.Call | None  # the ``model(...)`` decorator call
    line: int

    def at(self, line: int | None = None, column: int | None = None) -> Location:
        line = line or self.line
        lines = self.text.splitlines()
        snippet = lines[line - 1] if 0 < line <= len(lines) else None
        return Location(self.rel, line, column, snippet)


def _decorator(node: ast.FunctionDef | ast.AsyncFunctionDef) -> ast.Call | None:
    for dec in node.decorator_list:
        if isinstance(dec, ast.Call):
            f = dec.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            if name == "model":
                return dec
    return None


def source_of(fn: Callable[..., Any], rel: str, text: str | None, tree: ast.Module | None) -> Source:
    code = getattr(fn, "__code__", None)
    first = code.co_firstlineno if code is not None else 1
    node: ast.FunctionDef | ast.AsyncFunctionDef | None = None
    if tree is not None:
        for cand in ast.walk(tree):
            if isinstance(cand, (ast.FunctionDef, ast.AsyncFunctionDef)) and cand.name == fn.__name__:
                start = min([d.lineno for d in cand.decorator_list] + [cand.lineno])
                if start <= first <= cand.lineno:
                    node = cand
                    break
    call = _decorator(node) if node is not None else None
    line = call.lineno if call is not None else node.lineno if node is not None else first
    return Source(rel, text or "", tree, node, call, line)


def file_source(fn: Callable[..., Any], root: Path | None) -> Source:
    """The source of a function defined anywhere (``Project.register``)."""
    code = getattr(fn, "__code__", None)
    filename = code.co_filename if code is not None else "<unknown>"
    path = Path(filename)
    rel = filename
    if root is not None:
        try:
            rel = path.resolve().relative_to(root.resolve()).as_posix()
        except (ValueError, OSError):
            rel = path.name
    try:
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
    except (OSError, SyntaxError, ValueError):
        text, tree = "", None
    return source_of(fn, rel, text, tree)


# --- keywords → header ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Line:
    keyword: str
    text: str  # the header line, ``-- <keyword> <value>``
    line: int  # where the value is in the .py file
    column: int  # 1-based column of the value's first character there


def _value_nodes(src: Source, key: str) -> list[ast.expr]:
    if src.call is None:
        return []
    for kw in src.call.keywords:
        if kw.arg == key:
            v = kw.value
            return list(v.elts) if isinstance(v, (ast.List, ast.Tuple)) else [v]
    return []


def _where(src: Source, key: str, index: int) -> tuple[int, int]:
    nodes = _value_nodes(src, key)
    if index < len(nodes):
        node = nodes[index]
        quote = 1 if isinstance(node, ast.Constant) and isinstance(node.value, str) else 0
        return node.lineno, node.col_offset + 1 + quote
    if src.call is not None:
        for kw in src.call.keywords:
            if kw.arg == key:
                return kw.lineno, kw.col_offset + 1
    return src.line, 1


def _key_where(src: Source, key: str) -> tuple[int, int]:
    for kw in src.call.keywords if src.call is not None else ():
        if kw.arg == key:
            return kw.lineno, kw.col_offset + 1
    return src.line, 1


def _render(key: str, value: Any, src: Source) -> list[_Line]:
    """One keyword's header lines; a typed form (list, int, bool) written as the header's text."""
    def line(text: str, index: int = 0) -> _Line:
        where = _where(src, key, index)
        return _Line(key, f"-- {key} {text}".rstrip(), where[0], where[1])

    if isinstance(value, bool):
        if key == "append" and value:
            return [line("")]
        if key == "append":
            return []
        raise ModelError(f"`{key}=` takes text, not {value}", location=src.at(*_where(src, key, 0)),
                         hint=f"write {key}=\"...\" with the text of a `-- {key}` header line")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return [line(str(value))]
    if isinstance(value, (list, tuple)):
        items = [str(v) for v in value]
        if key in ("test", "column"):
            return [line(item, i) for i, item in enumerate(items)]
        if key in ("tag", "on"):
            return [line(" ".join(items))]
        return [line(",".join(items))]
    if isinstance(value, str):
        return [line(value)]
    raise ModelError(f"`{key}=` takes text (or a list of texts), not {type(value).__name__}",
                     location=src.at(*_where(src, key, 0)),
                     hint=f"write {key}=\"...\" with the text of a `-- {key}` header line")


def _moved(exc: LakewrapError, lines: list[_Line], src: Source) -> LakewrapError:
    """A parse error of the rendered header, moved onto the decorator's keyword in the .py file."""
    loc = exc.location
    if loc is not None and loc.line is not None and 1 <= loc.line <= len(lines):
        ln = lines[loc.line - 1]
        prefix = len(f"-- {ln.keyword} ")
        column = ln.column + max(0, (loc.column or 1) - 1 - prefix)
        where = src.at(ln.line, column)
        message = f"`{ln.keyword}=`: {exc.message}" if not exc.message.startswith(f"`-- {ln.keyword}`") else (
            f"`{ln.keyword}=`" + exc.message[len(f"`-- {ln.keyword}`"):])
    else:
        where, message = src.at(src.line, None), exc.message
    hint = exc.hint.replace("`-- ", "`") if exc.hint else exc.hint  # a header line's usage: the keyword's text
    return type(exc)(message, location=where, hint=hint)


# --- a function → its spec ------------------------------------------------------------------------


def build_spec(fn: Callable[..., Any], keywords: dict[str, Any], src: Source, *, schema: str,
               root: Path | None, save: bool = True) -> ModelSpec:
    """The validated spec of one Python model (errors located on ``src``'s decorator); ``save``:
    keep a newly parsed spec in the project's cache (``lakewrap unit`` writes nothing)."""
    known: tuple[str, ...] = (*CORE, *PY_ONLY)
    for key in keywords:
        if key not in known and key not in (known := (*_keywords(), *PY_ONLY)):  # a plugin's keyword?
            raise ModelError(f"unknown model keyword `{key}`", location=src.at(*_key_where(src, key)),
                             hint=choices_hint(key, known, "keyword"))
    if not callable(fn):
        raise ModelError("a Python model must be a function", location=src.at())
    lines: list[_Line] = []
    for key, value in keywords.items():
        if key not in PY_ONLY:
            lines += _render(key, value, src)
    name = getattr(fn, "__name__", "model")
    default = TableRef(schema_name=schema, name=name)
    target = default
    for ln in lines:
        if ln.keyword == "target":
            parts = ln.text.split(None, 2)[-1].split(".")
            if len(parts) == 2 and all(parts):
                target = TableRef(schema_name=parts[0], name=parts[1])
    if not any(ln.keyword == "target" for ln in lines):  # the default: <schema folder>.<function name>
        lines.append(_Line("target", f"-- target {target}", src.line, 1))
    timeout = _timeout(keywords.get("timeout"), src)
    deps = _deps(keywords.get("deps"), src)
    digest = source_hash(src, root)
    body = (f"SELECT * /* python {src.rel}:{src.line} {name}() source {digest} */ "
            f'FROM "{relation_name(target)}"')
    text = "\n".join([ln.text for ln in lines] + [body]) + "\n"
    try:
        spec = _parsed(text, src.rel, root, save, lambda: _parse(text, src.rel))
    except LakewrapError as exc:
        raise _moved(exc, lines, src) from None
    if spec.partition is not None and spec.partition.kind == "dynamic":
        ln = next(x for x in lines if x.keyword == "partitioned")
        raise ModelError("`partitioned=`: a Python model takes calendar partitions; dynamic (watermark) "
                         "windows are not supported", location=src.at(ln.line, ln.column),
                         hint="write partitioned=\"hourly|daily|weekly|monthly|yearly key=<col>\"")
    if not spec.wrapped:
        raise ModelError("a Python model needs `materialized=`", location=src.at(),
                         hint='write materialized="table" (or "incremental", "snapshot")')
    if spec.strategy.kind == "view":
        ln = next(x for x in lines if x.keyword == "materialized")
        raise ModelError("a Python model cannot be a view: its rows exist only while it runs",
                         location=src.at(ln.line, ln.column), hint='write materialized="table"')
    ups = deps if deps is not None else _refs(src)
    python = {"function": name, "line": src.line, "def_line": src.node.lineno if src.node else src.line,
              "source_sha256": digest, "timeout": timeout, "relation": relation_name(target),
              "deps": [str(u) for u in ups]}
    return spec.replace(upstreams=tuple(u for u in ups if u.key != spec.target.key),
                        extensions={**spec.extensions, "python": python})


CORE = ("materialized", "target", "partitioned", "unique_key", "append", "snapshot", "on", "test", "column",
        "on_schema_change", "tag", "retry", "freshness", "description")  # the core header keywords


def _keywords() -> tuple[str, ...]:
    from lakewrap.annotations.registry import default_registry

    return tuple(default_registry().keywords)


CACHE_FILE = Path("target") / "cache" / "python-v1.json"
_CACHES: dict[str, dict[str, str]] = {}  # project root -> {sha256 of (path, rendered header): spec JSON}


def _parse(text: str, rel: str) -> ModelSpec:
    from lakewrap.parse import parse_model  # sqlglot, duckdb's parser and pydantic: only on a cache miss

    return parse_model(Path(rel), Path("."), text=text, rel=rel)


def _parsed(text: str, rel: str, root: Path | None, save: bool, parse: Callable[[], ModelSpec]) -> ModelSpec:
    """``parse()``'s spec of the rendered model text, kept in ``target/cache/python-v1.json`` under
    lakewrap's code key (as the compile cache keeps a SQL file's spec), so a warm compile of a
    project with Python models neither parses SQL nor validates (no sqlglot, duckdb or pydantic)."""
    import json

    if root is None:
        return parse()
    from lakewrap.targetdir import code_key, write_atomic

    key = hashlib.sha256(f"{rel}\0{text}".encode()).hexdigest()
    entries = _CACHES.get(str(root))
    if entries is None:
        try:
            doc = json.loads((root / CACHE_FILE).read_text(encoding="utf-8"))
            entries = dict(doc["specs"]) if doc.get("key") == code_key() else {}
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            entries = {}
        _CACHES[str(root)] = entries
    got = entries.get(key)
    if got is not None:
        try:
            return ModelSpec.decode(json.loads(got))
        except (ValueError, TypeError, KeyError, AttributeError):
            pass  # damaged: parse again
    spec = parse()
    entries[key] = spec.dump_json()
    while len(entries) > 2000:  # the oldest first
        entries.pop(next(iter(entries)))
    if not save:
        return spec
    with suppress(OSError):  # a read-only project stays cold
        write_atomic(root / CACHE_FILE, json.dumps({"key": code_key(), "specs": entries}))
    return spec


def _timeout(value: Any, src: Source) -> float:
    if value is None:
        return DEFAULT_TIMEOUT
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return float(value)
    raise ModelError(f"`timeout=` must be a number of seconds above 0, not {value!r}",
                     location=src.at(*_where(src, "timeout", 0)), hint="write timeout=600")


def _table_ref(text: Any, where: Location) -> TableRef:
    parts = text.split(".") if isinstance(text, str) else []
    if len(parts) != 2 or not all(p.strip() for p in parts):
        raise ModelError(f"`{text}` is not a table name `schema.table`", location=where,
                         hint='name the table in two parts, e.g. ctx.ref("sales.orders")')
    return TableRef(schema_name=parts[0].strip(), name=parts[1].strip())


def _deps(value: Any, src: Source) -> tuple[TableRef, ...] | None:
    if value is None:
        return None
    items = [value] if isinstance(value, str) else list(value) if isinstance(value, (list, tuple)) else None
    if items is None:
        raise ModelError("`deps=` takes a list of table names", location=src.at(*_where(src, "deps", 0)),
                         hint='write deps=["sales.orders"]')
    return tuple(_table_ref(t, src.at(*_where(src, "deps", i))) for i, t in enumerate(items))


def _refs(src: Source) -> tuple[TableRef, ...]:
    """The literal ``ctx.ref("...")`` calls of the function's body; a call with any other argument
    cannot be read without running the function: a located error asking for ``deps=``."""
    node = src.node
    if node is None:
        raise ModelError("the function's source cannot be read to find its `ctx.ref(...)` calls",
                         location=src.at(), hint='declare its reads: deps=["schema.table", ...]')
    args = node.args.posonlyargs + node.args.args
    ctx = args[0].arg if args else None
    found: dict[str, TableRef] = {}
    for call in ast.walk(node):
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "ref"
                and isinstance(call.func.value, ast.Name) and call.func.value.id == ctx):
            continue
        arg = call.args[0] if call.args else None
        where = src.at(call.lineno, call.col_offset + 1)
        if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)) or len(call.args) != 1:
            raise ModelError(f"`{ctx}.ref(...)` is called with an argument that is not a literal table name",
                             location=where,
                             hint='the DAG is read without running the function: write the name literally, '
                                  'or declare every read with deps=["schema.table", ...]')
        ref = _table_ref(arg.value, where)
        found.setdefault(ref.key, ref)
    return tuple(found.values())


def source_hash(src: Source, root: Path | None) -> str:
    """sha256 of the function (its decorator included), of its file's code outside any model
    function (imports, helpers, constants), and of the project's modules the file imports."""
    h = hashlib.sha256()
    if src.tree is None or src.node is None:
        h.update(src.rel.encode())
        return h.hexdigest()
    for stmt in src.tree.body:
        is_model = isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and _decorator(stmt) is not None
        if is_model and stmt is not src.node:
            continue
        h.update((ast.get_source_segment(src.text, stmt, padded=True) or "").encode() + b"\0")
        if stmt is src.node:  # the decorator lines, which get_source_segment leaves out
            for dec in stmt.decorator_list:
                h.update((ast.get_source_segment(src.text, dec) or "").encode() + b"\0")
    for path in sorted(_project_imports(src.tree, root)):
        h.update(path.encode() + b"\0" + Path(path).read_bytes() + b"\0")
    return h.hexdigest()


def _imported(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names |= {f"{node.module}.{a.name}" for a in node.names}
    return names


def _project_imports(tree: ast.Module, root: Path | None) -> set[str]:
    """The files of the modules under ``root`` that ``tree`` imports, transitively (as loaded)."""
    if root is None:
        return set()
    base = str(root.resolve())
    found: set[str] = set()
    todo = list(_imported(tree))
    while todo:
        mod = sys.modules.get(todo.pop())
        file = getattr(mod, "__file__", None)
        if not file or not str(Path(file).resolve()).startswith(base + "/") or file in found:
            continue
        found.add(file)
        try:
            todo += list(_imported(ast.parse(Path(file).read_text(encoding="utf-8"))))
        except (OSError, SyntaxError, ValueError):
            continue
    return found


def compile_error(spec: ModelSpec, exc: LakewrapError) -> LakewrapError:
    """``exc`` from compiling ``spec``; for a Python model's ``SELECT *`` that needs its column list,
    the error names the decorator and the keyword that gives the columns."""
    info = python_of(spec)
    if info is None or "column list" not in exc.message:
        return exc
    return ModelError(f"a {spec.strategy.kind} Python model needs its columns to compile; only running the "
                      "function tells them", location=Location(spec.path, int(info["line"])),
                      hint='declare them: column=["id INTEGER", ...] (a run reads them from the result)')
