"""Load DuckDB extensions from the PyPI wheels (``duckdb-extension-<name>``), autoinstall off.

DuckDB's extension repository is often unreachable (and always is in CI here), so the binaries
shipped as wheels for the pinned DuckDB are loaded by path. Only when no bundled binary matches the
running DuckDB does lakewrap fall back to DuckDB's own ``INSTALL``.
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path
from typing import Any

from lakewrap.errors import ExecutionError
from lakewrap.execute import statements as sql

# Avro must load before iceberg; the -scanner wheels are the ones whose binaries load.
ORDER = ("avro", "iceberg", "httpfs", "ducklake", "sqlite_scanner", "postgres_scanner")

load_seconds: dict[str, float] = {}


def bundled_path(name: str, duckdb_version: str) -> Path | None:
    """The wheel's extension binary for this DuckDB version, if the wheel is installed."""
    spec = importlib.util.find_spec(f"duckdb_extension_{name}")
    if spec is None or not spec.submodule_search_locations:
        return None
    base = Path(next(iter(spec.submodule_search_locations)))
    path = base / "extensions" / f"v{duckdb_version}" / f"{name}.duckdb_extension"
    return path if path.exists() else None


def load(con: Any, names: tuple[str, ...]) -> None:
    """Load ``names`` (in dependency order) into the connection."""
    import duckdb

    for name in sorted(names, key=lambda n: ORDER.index(n) if n in ORDER else len(ORDER)):
        start = time.perf_counter()
        path = bundled_path(name, duckdb.__version__)
        try:
            if path is not None:
                con.execute(sql.load_extension(str(path), is_path=True))
            else:
                con.execute(sql.install_extension(name))
                con.execute(sql.load_extension(name, is_path=False))
        except duckdb.Error as exc:
            raise ExecutionError(
                f"cannot load the DuckDB extension `{name}`: {str(exc).splitlines()[0]}",
                hint=f"pip install duckdb-extension-{name.replace('_', '-')}=={duckdb.__version__}",
            ) from None
        load_seconds[name] = time.perf_counter() - start
