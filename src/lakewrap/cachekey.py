"""The key every cache under ``target/cache/`` is valid for: this exact lakewrap and sqlglot."""

from __future__ import annotations

import functools
import hashlib
import os

from lakewrap import __version__


@functools.cache
def code_key() -> str:
    """lakewrap's version plus the size and mtime of its own and sqlglot's source files.

    An installed release never changes these; an editable checkout does whenever a compiler is
    edited, and no cache may outlive that edit.
    """
    from importlib.util import find_spec

    h = hashlib.sha256(__version__.encode())
    dirs: list[str] = [os.path.dirname(os.path.abspath(__file__))]
    for name in ("lakewrap.compilers", "sqlglot"):
        try:
            spec = find_spec(name)
        except (ImportError, ValueError):  # pragma: no cover - broken installs
            spec = None
        if spec is not None and spec.submodule_search_locations:
            dirs += list(spec.submodule_search_locations)
    for top in dict.fromkeys(dirs):
        if os.path.basename(top) == "sqlglot":
            names = [os.path.join(top, "_version.py")]  # one file tells the installed version
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
