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
import importlib.util
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lakewrap.errors import LakewrapError, Location, ModelError, ProjectError, choices_hint
from lakewrap.spec import ModelSpec, TableRef

MARK = "__lakewrap_model__"
PY_ONLY = ("deps", "timeout")  # keywords of a Python model that are no header annotation
DEFAULT_TIMEOUT = 3600.0
_REPEATABLE_LIST = ("test", "column", "tag", "on")  # a list is one header line per item (tag, on: one line)

# (project root, target key) -> the function, filled when a file is loaded or a function registered
_FUNCTIONS: dict[tuple[str, str], Callable[..., Any]] = {}
# project root -> functions given to ``Project.register`` (with their keywords), in registration order
REGISTERED: dict[str, list[tuple[Callable[..., Any], dict[str, Any]]]] = {}


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


def _source(fn: Callable[..., Any], rel: str, text: str | None, tree: ast.Module | None) -> Source:
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


def _file_source(fn: Callable[..., Any], root: Path | None) -> Source:
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
    return _source(fn, rel, text, tree)


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
               root: Path | None) -> ModelSpec:
    """The validated spec of one Python model (errors located on ``src``'s decorator)."""
    from lakewrap.annotations.registry import default_registry
    from lakewrap.parse import parse_model

    reg = default_registry()
    known = (*reg.keywords, *PY_ONLY)
    for key in keywords:
        if key not in known:
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
        spec = parse_model(Path(src.rel), Path("."), text=text, rel=src.rel)
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


# --- files ----------------------------------------------------------------------------------------


def model_files(root: Path) -> list[Path]:
    """``models/**/*.py``, sorted."""
    models = root / "models"
    return sorted(p for p in models.rglob("*.py") if p.is_file()) if models.is_dir() else []


@contextmanager
def _on_path(root: Path) -> Iterator[None]:
    """The project folder first on ``sys.path`` while a model file runs (its own modules import)."""
    entry = str(root)
    added = entry not in sys.path
    if added:
        sys.path.insert(0, entry)
    try:
        yield
    finally:
        if added:
            sys.path.remove(entry)


_LOADED: dict[str, bytes] = {}  # a project module's file -> its bytes when it was imported


def _forget_changed(root: Path) -> None:
    """Drop from ``sys.modules`` the project's own modules whose file changed since they were
    imported, so a model file imports them afresh (installed packages are never dropped)."""
    base = str(root) + "/"
    for name, mod in list(sys.modules.items()):
        file = getattr(mod, "__file__", None)
        if not file or not file.startswith(base) or "-packages/" in file:
            continue
        try:
            data = Path(file).read_bytes()
        except OSError:
            continue
        if _LOADED.setdefault(file, data) != data:
            del sys.modules[name]
            _LOADED[file] = data


def _execute(path: Path, rel: str, root: Path) -> dict[str, Any]:
    """The module namespace of one model file (a syntax error or an exception at import: located)."""
    text = path.read_text(encoding="utf-8")
    _forget_changed(root)
    try:
        code = compile(text, str(path), "exec")
    except SyntaxError as exc:
        line = exc.lineno or 1
        raise ModelError(f"the Python file does not compile: {exc.msg}",
                         location=Location(rel, line, exc.offset, (text.splitlines() or [""])[line - 1]
                                           if line <= len(text.splitlines()) else None),
                         hint="fix the syntax error") from None
    name = "lakewrap_models." + rel.removesuffix(".py").replace("/", ".")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec) if spec is not None else None
    namespace: dict[str, Any] = module.__dict__ if module is not None else {"__name__": name}
    namespace["__file__"] = str(path)
    try:
        with _on_path(root):
            exec(code, namespace)  # a model file is the project's own code
    except Exception as exc:
        raise error_in_file(exc, path, rel, "importing the model file raised") from None
    _forget_changed(root)  # remembers the bytes of the modules it imported
    return namespace


def error_in_file(exc: BaseException, path: Path, rel: str, what: str) -> ModelError:
    """``exc`` located at the deepest frame of its traceback that is in ``path``."""
    import traceback

    line = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if Path(frame.filename).resolve() == path.resolve():
            line = frame.lineno
    text = path.read_text(encoding="utf-8").splitlines() if path.is_file() else []
    snippet = text[line - 1] if line and line <= len(text) else None
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    message = f"{what} {type(exc).__name__}: {first}".rstrip(": ")
    return ModelError(message, location=Location(rel, line, None, snippet),
                      hint="fix the function; `lakewrap --debug run` shows the traceback")


def load_file(path: Path, rel: str, root: Path) -> list[ModelSpec]:
    """The models one ``models/**/*.py`` file declares (a file with none declares nothing)."""
    namespace = _execute(path, rel, root)
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text)
    parts = rel.split("/")
    schema = parts[1] if len(parts) > 2 else "main"
    out: list[ModelSpec] = []
    seen: set[int] = set()
    for value in list(namespace.values()):
        declared = getattr(value, MARK, None)
        if not isinstance(declared, Declared) or id(value) in seen:
            continue
        code = getattr(value, "__code__", None)
        if code is None or Path(code.co_filename).resolve() != path.resolve():
            continue  # imported from another file: declared there
        seen.add(id(value))
        spec = build_spec(value, declared.keywords, _source(value, rel, text, tree), schema=schema, root=root)
        _FUNCTIONS[(str(root), spec.target.key)] = value
        out.append(spec)
    return sorted(out, key=lambda s: python_of(s)["line"])  # type: ignore[index]


def register(root: Path, fn: Callable[..., Any], keywords: dict[str, Any]) -> ModelSpec:
    """``Project.register``: validate ``fn`` with ``keywords`` now, remember it for the project."""
    declared = getattr(fn, MARK, None)
    merged = {**(declared.keywords if isinstance(declared, Declared) else {}), **keywords}
    spec = build_spec(fn, merged, _file_source(fn, root), schema="main", root=root)
    listed = REGISTERED.setdefault(str(root), [])
    for i, (other, _) in enumerate(listed):
        if getattr(other, "__name__", None) == getattr(fn, "__name__", None) and other is not fn:
            listed[i] = (fn, merged)
            break
    else:
        if all(other is not fn for other, _ in listed):
            listed.append((fn, merged))
    _FUNCTIONS[(str(root), spec.target.key)] = fn
    return spec


def python_models(root: Path) -> list[ModelSpec]:
    """Every Python model of the project: its ``models/**/*.py`` files, then registered functions."""
    root = root.resolve()
    out: list[ModelSpec] = []
    for path in model_files(root):
        rel = path.relative_to(root).as_posix()
        if not str(path.resolve()).startswith(str(root) + "/"):
            raise ProjectError(f"{rel} resolves outside the project (a symlink?)", location=Location(rel),
                               hint="keep model files inside the project folder")
        out += load_file(path, rel, root)
    for fn, keywords in REGISTERED.get(str(root), []):
        out.append(build_spec(fn, keywords, _file_source(fn, root), schema="main", root=root))
    return out


def function_of(spec: ModelSpec, root: Path) -> Callable[..., Any]:
    """The function of a Python model (its file loaded again when this process has not yet)."""
    key = (str(root.resolve()), spec.target.key)
    fn = _FUNCTIONS.get(key)
    if fn is None:
        load_file(root / spec.path, spec.path, root.resolve())
        fn = _FUNCTIONS.get(key)
    if fn is None:
        raise ModelError(f"the function of `{spec.target}` is gone from {spec.path}", location=Location(spec.path),
                         hint="run again: the file changed while the run was planned")
    return fn


def add_to(project: Any) -> None:
    """Add the project's Python models to ``project`` (a :class:`lakewrap.project.Project`)."""
    for spec in python_models(project.root):
        other = project.models.get(spec.target.key)
        if other is not None:
            raise ProjectError(
                f"two models write `{spec.target}`: {other.path} and {spec.path}",
                location=Location(spec.path, python_of(spec)["line"]),  # type: ignore[index]
                hint="rename one of them or give it a `target=`",
            )
        project.models[spec.target.key] = spec
