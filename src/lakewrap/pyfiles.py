"""Python model files and registered functions (docs/python-models.md): ``models/**/*.py`` loaded
(the project folder on ``sys.path``, the project's own changed modules imported afresh), each
``@lakewrap.model`` function's spec built by :mod:`lakewrap.pymodels`, and the function found again
when a step runs it."""

from __future__ import annotations

import ast
import importlib.util
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lakewrap.errors import Location, ModelError, ProjectError
from lakewrap.pymodels import MARK, Declared, build_spec, file_source, python_of, source_of
from lakewrap.spec import ModelSpec

# (project root, target key) -> the function, filled when a file is loaded or a function registered
_FUNCTIONS: dict[tuple[str, str], Callable[..., Any]] = {}
# project root -> functions given to ``Project.register`` (with their keywords), in registration order
REGISTERED: dict[str, list[tuple[Callable[..., Any], dict[str, Any]]]] = {}


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


def load_file(path: Path, rel: str, root: Path, *, save: bool = True) -> list[ModelSpec]:
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
        spec = build_spec(value, declared.keywords, source_of(value, rel, text, tree), schema=schema, root=root,
                          save=save)
        _FUNCTIONS[(str(root), spec.target.key)] = value
        out.append(spec)
    return sorted(out, key=lambda s: python_of(s)["line"])  # type: ignore[index]


def register(root: Path, fn: Callable[..., Any], keywords: dict[str, Any]) -> ModelSpec:
    """``Project.register``: validate ``fn`` with ``keywords`` now, remember it for the project."""
    declared = getattr(fn, MARK, None)
    merged = {**(declared.keywords if isinstance(declared, Declared) else {}), **keywords}
    spec = build_spec(fn, merged, file_source(fn, root), schema="main", root=root)
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


def python_models(root: Path, *, save: bool = True) -> list[ModelSpec]:
    """Every Python model of the project: its ``models/**/*.py`` files, then registered functions."""
    root = root.resolve()
    out: list[ModelSpec] = []
    files = model_files(root)
    folders = _script_folders(root, save=save) if files else ()
    for path in files:
        rel = path.relative_to(root).as_posix()
        if not str(path.resolve()).startswith(str(root) + "/"):
            raise ProjectError(f"{rel} resolves outside the project (a symlink?)", location=Location(rel),
                               hint="keep model files inside the project folder")
        _refuse_unlisted(rel, folders)  # before any of its code runs
        out += load_file(path, rel, root, save=save)
    for fn, keywords in REGISTERED.get(str(root), []):
        out.append(build_spec(fn, keywords, file_source(fn, root), schema="main", root=root, save=save))
    return out


def _script_folders(root: Path, *, save: bool) -> tuple[str, ...]:
    from lakewrap.config import load_config

    return tuple(load_config(root, save=save).security.scripts)


def _refuse_unlisted(rel: str, folders: tuple[str, ...]) -> None:
    """A Python model file is code that runs as whoever runs lakewrap: like a model's hooks, it
    is run only from a folder ``[security] scripts`` lists (docs/security.md, "Scripts")."""
    from lakewrap.config_hooks import allowed

    if allowed(rel, folders):
        return
    folder = rel.rpartition("/")[0]
    listed = ", ".join(f'"{f}"' for f in folders)
    raise ModelError(f"`{rel}` is a Python model, whose code runs as you, and `{folder}` is not a folder whose "
                     "scripts models may run" + (f" ([security] scripts = [{listed}])" if folders else ""),
                     location=Location(rel, 1),
                     hint=f"add `scripts = [\"{folder}\"]` to [security] in lakewrap.toml once you trust whoever "
                     "may write there as you trust lakewrap.toml (docs/security.md, \"Scripts\")")


def function_of(spec: ModelSpec, root: Path) -> Callable[..., Any]:
    """The function of a Python model (its file loaded again when this process has not yet)."""
    key = (str(root.resolve()), spec.target.key)
    fn = _FUNCTIONS.get(key)
    if fn is None:
        load_file(root / spec.path, spec.path, root.resolve(), save=False)
        fn = _FUNCTIONS.get(key)
    if fn is None:
        raise ModelError(f"the function of `{spec.target}` is gone from {spec.path}", location=Location(spec.path),
                         hint="run again: the file changed while the run was planned")
    return fn


def add_to(project: Any, *, save: bool = True) -> None:
    """Add the project's Python models to ``project`` (a :class:`lakewrap.project.Project`)."""
    for spec in python_models(project.root, save=save):
        other = project.models.get(spec.target.key)
        if other is not None:
            raise ProjectError(
                f"two models write `{spec.target}`: {other.path} and {spec.path}",
                location=Location(spec.path, python_of(spec)["line"]),  # type: ignore[index]
                hint="rename one of them or give it a `target=`",
            )
        project.models[spec.target.key] = spec
