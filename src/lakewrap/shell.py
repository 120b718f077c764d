"""``lakewrap shell``: the lake from another DuckDB client, or from a Python console.

``attach_statements`` gives the statements a DuckDB client (the ``duckdb`` CLI, another program,
a notebook) runs to open a project's DuckLake as lakewrap does: ``LOAD`` of each extension binary
from its PyPI wheel, the session time zone, the ``ATTACH`` with the catalog and ``DATA_PATH`` of
``lakewrap.toml``, and ``USE``. They hold no credential: S3 keys come from the client's own
secret (a comment says so), a PostgreSQL password from ``PGPASSWORD`` or a service file, as for
lakewrap. ``interact`` opens a Python console with ``con``, a read-only or read-write connection to the lake.
Neither creates anything: a lake that does not exist yet is an error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def attach_statements(root: Path) -> list[str]:
    """The statements that attach the project's DuckLake in a DuckDB client (see the module)."""
    import duckdb

    from lakewrap.execute import statements as sql
    from lakewrap.execute.extensions import ORDER, bundled_path

    root = root.resolve()
    cfg = _lake_config(root)
    needed = {"ducklake", *(("sqlite_scanner",) if cfg.catalog == "sqlite" else ()),
              *(("postgres_scanner",) if cfg.catalog == "postgres" else ()), *(("httpfs",) if cfg.is_s3 else ())}
    out = []
    for name in sorted(needed, key=ORDER.index):
        path = bundled_path(name, duckdb.__version__)
        out.append(sql.load_extension(str(path), is_path=True) if path else sql.load_extension(name, is_path=False))
    out.append(sql.set_option("TimeZone", "UTC"))
    if cfg.is_s3:
        out.append("-- data on S3: create a secret first, e.g. CREATE SECRET (TYPE s3, PROVIDER credential_chain)")
    match cfg.catalog:
        case "postgres":
            catalog = f"postgres:{cfg.dsn}"
        case "sqlite":
            catalog = f"sqlite:{cfg.catalog_path(root)}"
        case _:
            catalog = str(cfg.catalog_path(root))
    out.append(sql.attach_ducklake(catalog, cfg.alias, cfg.data_location(root), {}))
    out.append(sql.use(cfg.alias))
    return [s if s.startswith("--") else s + ";" for s in out]


def interact(root: Path, *, stdin_is_tty: bool, read_only: bool = True) -> None:
    """A Python console whose ``con`` is a DuckDB connection to the lake: read-only, or read-write
    with the sandbox of a run (settings locked, files only in the project and the lake)."""
    import code
    import sys

    from lakewrap.execute.lake import Lake

    _lake_config(root)
    if not stdin_is_tty:  # statements piped in: no prompts in the output
        sys.ps1 = sys.ps2 = ""
    lake = Lake.open(root.resolve(), read_only=read_only)
    con = lake.connect()
    mode = "read-only" if read_only else "read-write"
    banner = (f"lakewrap shell: `con` is a {mode} DuckDB connection to {lake.alias} (USE {lake.alias}); "
              "e.g. con.sql(\"SHOW ALL TABLES\").show(). Ctrl-D leaves.") if stdin_is_tty else ""
    scope: dict[str, Any] = {"con": con}
    try:
        code.interact(banner=banner, local=scope, exitmsg="")
    finally:
        lake.close(con)


def _lake_config(root: Path) -> Any:
    """The lake's config; a folder that is no project, or a lake never created, is refused (exit 2)."""
    from lakewrap.execute.lake import Lake
    from lakewrap.project import require_project
    from lakewrap.substrates import of_project

    root = require_project(root)
    cfg = of_project(root).shell_config(root)  # refused where another DuckDB client cannot attach the lake
    Lake.open(root).check_exists()
    return cfg
