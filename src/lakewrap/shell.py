"""``lakewrap shell``: the lake from another DuckDB client, or from a Python console.

``attach_statements`` gives the statements a DuckDB client (the ``duckdb`` CLI, another program,
a notebook) runs to open a project's DuckLake as lakewrap does: ``LOAD`` of each extension binary
from its PyPI wheel, the session time zone, the ``ATTACH`` with the catalog and ``DATA_PATH`` of
``lakewrap.toml``, and ``USE``. They hold no credential: S3 keys come from the client's own
secret (a comment says so), a PostgreSQL password from ``PGPASSWORD`` or a service file, as for
lakewrap. ``interact`` opens a Python console with ``con``, a read-only or read-write connection to the lake.
``run_cli`` starts DuckDB's own CLI with an init file of those statements followed by the sandbox
of a run (``sandbox.lock_statements``) and the CLI's safe mode; its version must be the duckdb
package's, which the extension wheels are built for. None creates anything: a lake that does not exist yet is an error.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

CLI_ENV = "LAKEWRAP_DUCKDB_CLI"  # names the DuckDB CLI to start, instead of the one found


def attach_statements(root: Path, *, read_only: bool = False) -> list[str]:
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
    options: dict[str, int | str | bool] = {}
    if cfg.data_inlining_row_limit is not None:
        options["DATA_INLINING_ROW_LIMIT"] = cfg.data_inlining_row_limit
    if read_only:
        options["READ_ONLY"] = True
    out.append(sql.attach_ducklake(catalog, cfg.alias, cfg.data_location(root), options))
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


def find_cli() -> str | None:
    """The DuckDB CLI to start: the one ``LAKEWRAP_DUCKDB_CLI`` names, else the binary of the
    ``duckdb-cli`` wheel installed beside lakewrap, else ``duckdb`` on ``PATH``; None without one.

    The wheel's own ``duckdb`` command is a Python wrapper that dies of the first Ctrl-C (a
    KeyboardInterrupt while it waits for the binary), so its binary is started directly.
    """
    import importlib.util
    import shutil

    from lakewrap.errors import ConfigError

    named = os.environ.get(CLI_ENV)
    if named:
        found = shutil.which(named)
        if found is None:
            raise ConfigError(f"{CLI_ENV}={named} is not an executable",
                              hint=f"name the DuckDB CLI in {CLI_ENV}, unset it, or use `lakewrap shell --python`")
        return found
    spec = importlib.util.find_spec("duckdb_cli")
    if spec is not None and spec.origin is not None:
        binary = Path(spec.origin).with_name("duckdb")
        if binary.is_file() and os.access(binary, os.X_OK):
            return str(binary)
    return shutil.which("duckdb")


def check_cli_version(cli: str) -> None:
    """Refuse a CLI whose DuckDB is not the duckdb package's (the wheels' extensions would not load)."""
    import re
    import subprocess

    import duckdb

    from lakewrap.errors import ConfigError

    try:
        out = subprocess.run([cli, "--version"], capture_output=True, text=True, timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        out = f"cannot run it: {exc}"
    found = re.match(r"v?(\d+\.\d+\.\d+)\b", out)
    if found is None or found.group(1) != duckdb.__version__:
        raise ConfigError(
            f"the DuckDB CLI {cli} is version {found.group(1) if found else repr(out[:80])}, "
            f"not DuckDB {duckdb.__version__}, which lakewrap's extensions are built for",
            hint=f"install the matching CLI (`pip install duckdb-cli=={duckdb.__version__}`), name one in "
            f"{CLI_ENV}, or use `lakewrap shell --python`")


def cli_statements(root: Path, *, read_only: bool) -> list[str]:
    """The CLI's init file: the attach statements, then the sandbox of a run (settings locked).

    A lake on S3 is refused: its secret would have to be written into the file (docs/security.md).
    """
    from lakewrap.errors import ConfigError, Location
    from lakewrap.execute.lake import Lake
    from lakewrap.execute.sandbox import lock_statements

    root = root.resolve()
    if _lake_config(root).is_s3:
        raise ConfigError("DuckDB's CLI is not started for a lake on S3: its credentials would have to be "
                          "written into the CLI's init file", location=Location("lakewrap.toml"),
                          hint="use `lakewrap shell --python` (the keys go to DuckDB's secret manager only), "
                          "or `lakewrap shell --print` in a client with a secret of its own")
    lake = Lake.open(root, read_only=read_only)
    lake.close(lake.connect())  # a catalog held by another process is refused here, as by a run (or --wait)
    # read-write with `defer`: the other lake, read-only at the snapshot just pinned, as in the
    # Python console (`lakewrap_defer`; docs/environments.md, "Defer")
    deferred = [lake.defer.attach_statement(lake.defer.pin) + ";"] if lake.defer is not None else []
    # DuckDB 1.5.5's `.safe_mode` (measured) refuses the dot commands that reach files or a system
    # shell (.read, .output, .shell, .open...) and itself sets enable_external_access = false and
    # lock_configuration = true, failing if the settings are already locked: so it comes last
    return [*attach_statements(root, read_only=read_only), *deferred,
            *(s + ";" for s in lock_statements(*lake.sandbox(), locked=False)), ".safe_mode"]


def run_cli(root: Path, cli: str, *, read_only: bool) -> int:
    """Start the DuckDB CLI on the lake (stdin, stdout and stderr are the shell's); its exit code.

    The init file is written 0600 in a private temporary folder and removed when the CLI exits,
    also on Ctrl-C, which the CLI handles (this process only waits).
    """
    import shutil
    import signal
    import subprocess
    import tempfile

    check_cli_version(cli)
    statements = cli_statements(root, read_only=read_only)
    folder = tempfile.mkdtemp(prefix="lakewrap-shell-")  # 0700
    try:
        init = os.path.join(folder, "init.sql")
        fd = os.open(init, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write("\n".join(statements) + "\n")
        previous = signal.signal(signal.SIGINT, lambda *_: None)  # a handler, not SIG_IGN: exec resets it
        try:
            # -cmd, not -init: the CLI sets options of its own after an init file, which a locked
            # configuration refuses; an error in the file ends the CLI before it reads stdin
            return subprocess.call([cli, "-no-init", "-cmd", f".read {init}"])
        finally:
            signal.signal(signal.SIGINT, previous)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _lake_config(root: Path) -> Any:
    """The lake's config; a folder that is no project, or a lake never created, is refused (exit 2)."""
    from lakewrap.execute.lake import Lake
    from lakewrap.project import require_project
    from lakewrap.substrates import of_project

    root = require_project(root)
    cfg = of_project(root).shell_config(root)  # refused where another DuckDB client cannot attach the lake
    Lake.open(root).check_exists()
    return cfg
