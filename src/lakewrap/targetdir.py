"""Files lakewrap keeps under a project's ``target/``: the key its caches are valid for, and how
every file there is replaced (whole or not at all)."""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path

from lakewrap import __version__


@functools.cache
def code_key() -> str:
    """lakewrap's version plus the size and mtime of its own source files, sqlglot's and duckdb's.

    An installed release never changes these; an editable checkout does whenever a compiler is
    edited, and no cache may outlive that edit.
    """
    from importlib.util import find_spec

    h = hashlib.sha256(__version__.encode())
    dirs: list[str] = [os.path.dirname(os.path.abspath(__file__))]
    for name in ("lakewrap.compilers", "sqlglot", "duckdb"):  # duckdb: its parser judges model SQL
        try:
            spec = find_spec(name)
        except (ImportError, ValueError):  # pragma: no cover - broken installs
            spec = None
        if spec is not None and spec.submodule_search_locations:
            dirs += list(spec.submodule_search_locations)
    for top in dict.fromkeys(dirs):
        if os.path.basename(top) == "sqlglot":
            names = [os.path.join(top, "_version.py")]  # one file tells the installed version
        elif os.path.basename(top) == "duckdb":
            names = [os.path.join(top, "__init__.py")]  # rewritten by every install
        else:
            names = sorted(
                os.path.join(d, f) for d, _, files in os.walk(top) for f in files if f.endswith(".py")
            )
        for name in names:
            try:
                st = os.stat(name)
            except OSError:
                continue
            h.update(f"{name}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` at once: readers see the old file or the new one, never a part.

    The temporary file is one per process and thread, so concurrent writers never share one.

    Raises:
        OSError: the folder cannot be created or written (a read-only project).
    """
    import threading

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}-{threading.get_ident()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
