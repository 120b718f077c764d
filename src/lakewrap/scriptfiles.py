"""The project's script files (hooks, script tests): a project-relative path checked, resolved, and
a close match among the project's files when it names none.

One place for the rules every caller shares: the model annotations (``-- pre_run``, ``-- test
script``: located on the annotation), ``[hooks]`` in ``lakewrap.toml`` (located on the key's
line) and the run, which checks again (a cached model spec is not parsed again).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from lakewrap.errors import suggest

# folders never searched for a close match: lakewrap's own, caches, virtualenvs, VCS
_SKIP = {"target", "node_modules", "__pycache__"}
_MAX_FILES = 20_000


def problem(rel: str) -> str | None:
    """Why ``rel`` cannot name a file inside the project (None: its spelling is fine)."""
    if not rel or rel.startswith("/") or "\\" in rel or "\x00" in rel or ".." in rel.split("/"):
        return f"`{rel}` must be a path inside the project"
    return None


def project_files(root: Path) -> Iterator[str]:
    """The project's files, relative to ``root`` (hidden folders, ``target/`` and caches left out)."""
    count = 0
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in _SKIP)
        base = Path(folder).relative_to(root)
        for name in sorted(files):
            yield (base / name).as_posix()
            count += 1
            if count >= _MAX_FILES:
                return


def close_match(root: Path, rel: str) -> str | None:
    """The project file whose path is closest to ``rel`` (same suffix first), if one is close; else
    one whose file name is close to ``rel``'s (``hook/notify.py`` for ``hooks/notify.py``)."""
    files = list(project_files(root))
    same = [f for f in files if Path(f).suffix == Path(rel).suffix]
    close = suggest(rel, same) or suggest(rel, files)
    if close is not None:
        return close
    name = suggest(Path(rel).name, [Path(f).name for f in same])
    return next((f for f in same if Path(f).name == name), None) if name is not None else None


def missing_hint(root: Path, rel: str, what: str) -> str:
    """``did you mean `hooks/notify.py`?`` or what to create."""
    close = close_match(root, rel)
    if close is not None:
        return f"did you mean `{close}`? (paths are relative to the project folder)"
    return f"create {rel} (relative to the project folder): {what}"


def resolve(root: Path, rel: str) -> Path:
    """The file ``rel`` names, resolved; ``ValueError`` with the reason when it is outside the
    project, missing or not a file."""
    bad = problem(rel)
    if bad is not None:
        raise ValueError(bad)
    root = root.resolve()
    path = (root / rel).resolve()
    if not path.is_relative_to(root):
        raise ValueError(f"`{rel}` resolves outside the project")
    if not path.exists():
        raise FileNotFoundError(f"`{rel}`: no such file")
    if not path.is_file():
        raise ValueError(f"`{rel}` is not a file")
    return path


def runnable(path: Path) -> bool:
    """A hook is a Python file (``.py``, run with lakewrap's interpreter) or an executable."""
    return path.suffix == ".py" or os.access(path, os.X_OK)


def functions(path: Path) -> list[str] | None:
    """The names of the top-level functions of a Python file, read without running it (None: the
    file is not valid Python)."""
    import ast

    try:
        tree = ast.parse(path.read_bytes(), filename=path.name)
    except (SyntaxError, ValueError, OSError):
        return None
    return [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
