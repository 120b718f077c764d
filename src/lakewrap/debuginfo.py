"""``lakewrap debug``: what a bug report needs, and never a credential.

Versions (lakewrap, Python, DuckDB, pyiceberg, each extension wheel), the extension binaries
lakewrap loads, the project's lake (substrate, catalog) and whether it can be opened (read-only, as
``lakewrap query`` does: nothing is created), and which credential variables are set: their names
and ``set`` or ``not set``, never a value (the output still goes through the one redactor).
"""

from __future__ import annotations

import os
import platform
import sys
from dataclasses import dataclass
from pathlib import Path

from lakewrap import __version__
from lakewrap.errors import LakewrapError, NoLake
from lakewrap.redact import SECRET_ENV


@dataclass(frozen=True)
class Line:
    section: str
    key: str
    value: str
    ok: bool = True


def _dist(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def report(project: Path) -> list[Line]:
    import duckdb

    from lakewrap.execute import extensions

    lines = [Line("versions", "lakewrap", __version__),
             Line("versions", "python", f"{platform.python_version()} ({sys.executable})"),
             Line("versions", "duckdb", duckdb.__version__, duckdb.__version__ in extensions.SUPPORTED_DUCKDB),
             Line("versions", "pyiceberg", _dist("pyiceberg"))]
    for name in extensions.ORDER:
        path = extensions.bundled_path(name, duckdb.__version__)
        dist = extensions.wheel(name)
        lines.append(Line("extensions", name, f"{dist} {_dist(dist)}: " + (str(path) if path else "no binary"),
                          path is not None))
    lines.extend(_lake(project))
    for var in SECRET_ENV:
        lines.append(Line("credentials", var, "set" if os.environ.get(var) else "not set"))
    return lines


def _lake(project: Path) -> list[Line]:
    from lakewrap.config import load_config
    from lakewrap.inspect import query
    from lakewrap.project import require_project

    try:
        root = require_project(project)
    except LakewrapError as err:
        return [Line("project", "folder", f"{project}: {err.message}", False)]
    out = [Line("project", "folder", str(root))]
    try:
        lake = load_config(root).lake
    except LakewrapError as err:
        return [*out, Line("project", "lakewrap.toml", err.render().splitlines()[0], False)]
    out.append(Line("project", "substrate", lake.substrate))
    out.append(Line("project", "catalog", str(lake.catalog)))
    try:
        query(root, "SELECT 1")
    except NoLake as err:
        out.append(Line("project", "reachable", f"no lake yet: {err.message}"))
    except LakewrapError as err:
        out.append(Line("project", "reachable", f"no: {err.message}", False))
    else:
        out.append(Line("project", "reachable", "yes (opened read-only)"))
    return out
