"""Load DuckDB extensions from the PyPI wheels (``duckdb-extension-<name>``), autoinstall off.

DuckDB's extension repository is often unreachable (and always is in CI here), so the binaries
shipped as wheels for the pinned DuckDB are loaded by path, and nothing is fetched from the network.

**The versions are checked first.** Before a connection is opened, the running DuckDB must be one
lakewrap supports (:data:`SUPPORTED_DUCKDB`, the version ``pyproject.toml`` pins) and each extension
it needs must be installed as the wheel built for that DuckDB; otherwise the error names the
``pip install`` that fixes it (:func:`check_versions`).

**Each binary's signature is checked once.** DuckDB checks an extension's signature at every
``LOAD`` by hashing the whole file: 80-86 ms of every process for the 36 MB DuckLake binary (2.7
ms without the check, measured). lakewrap lets DuckDB check a wheel's binary the first time it is
loaded, then remembers that file by its identity (path, size, modification and change times, inode,
device) in ``verified-extensions.json`` in lakewrap's cache folder. A later process whose binaries
all still match opens its connection with ``allow_unsigned_extensions``, loads them, and switches the
option off before any other statement; DuckDB refuses to switch it on again while the database runs,
so no statement after that (no model) can load an unchecked extension. A binary replaced in any way
(a reinstall, an edit) no longer matches and is checked again. Trusting the record is trusting the
installation: whoever can replace a file in site-packages can replace lakewrap's own code.

The cache folder is ``$LAKEWRAP_CACHE_DIR``, else ``$XDG_CACHE_HOME/lakewrap``, else
``~/.cache/lakewrap``; when it cannot be written, every process has its binaries checked.
"""

from __future__ import annotations

import importlib.util
import json
import os
from contextlib import suppress
from pathlib import Path
from typing import Any

from lakewrap.errors import ExecutionError
from lakewrap.execute import statements as sql

# Avro must load before iceberg; the -scanner wheels are the ones whose binaries load.
ORDER = ("avro", "iceberg", "httpfs", "ducklake", "sqlite_scanner", "postgres_scanner")
RECORD = "verified-extensions.json"
# httpfs copies AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN into these settings when
# it loads (DuckDB 1.5.5, measured), where `current_setting()` would read them: they are reset at once.
ENV_COPIED_SETTINGS = ("s3_access_key_id", "s3_secret_access_key", "s3_session_token")
_CONFIG: dict[str, bool] = {"autoinstall_known_extensions": False, "autoload_known_extensions": False}

# The DuckDB versions lakewrap is built and tested against (pyproject.toml pins duckdb and every
# duckdb-extension-* wheel to it): the SQL lakewrap renders and the behaviour it relies on were
# measured on these.
SUPPORTED_DUCKDB = ("1.5.5",)

# the identities this process has seen DuckDB check (or read from the record), by path
_verified: dict[str, list[int]] = {}
_read = False


def bundled_path(name: str, duckdb_version: str) -> Path | None:
    """The wheel's extension binary for this DuckDB version, if the wheel is installed."""
    spec = importlib.util.find_spec(f"duckdb_extension_{name}")
    if spec is None or not spec.submodule_search_locations:
        return None
    base = Path(next(iter(spec.submodule_search_locations)))
    path = base / "extensions" / f"v{duckdb_version}" / f"{name}.duckdb_extension"
    return path if path.exists() else None


def cache_dir() -> Path:
    """lakewrap's per-user cache folder (see the module's docstring)."""
    if configured := os.environ.get("LAKEWRAP_CACHE_DIR"):
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "lakewrap"


def wheel(name: str) -> str:
    """The PyPI distribution that ships the extension ``name``."""
    return f"duckdb-extension-{name.replace('_', '-')}"


def check_versions(names: tuple[str, ...]) -> list[tuple[str, Path]]:
    """The binaries of the extensions ``names``, in loading order, once the versions are checked.

    Raises:
        ExecutionError: the running DuckDB is not a version lakewrap supports, or an extension's
            wheel is missing or was built for another DuckDB; the hint is the ``pip install`` that
            installs the supported versions. Nothing is installed from the network.
    """
    from importlib.metadata import PackageNotFoundError, version

    import duckdb

    running = duckdb.__version__
    ordered = sorted(names, key=lambda n: ORDER.index(n) if n in ORDER else len(ORDER))
    if running not in SUPPORTED_DUCKDB:
        want = SUPPORTED_DUCKDB[-1]
        raise ExecutionError(
            f"this is DuckDB {running}; lakewrap supports DuckDB {' or '.join(SUPPORTED_DUCKDB)}",
            hint="pip install " + " ".join(f"{dist}=={want}" for dist in ("duckdb", *map(wheel, ordered))))
    out: list[tuple[str, Path]] = []
    missing: list[str] = []
    for name in ordered:
        path = bundled_path(name, running)
        if path is None:
            try:
                found = f"{wheel(name)} {version(wheel(name))} is installed, without a binary for it"
            except PackageNotFoundError:
                found = f"{wheel(name)} is not installed"
            missing.append(f"`{name}` ({found})")
        else:
            out.append((name, path))
    if missing:
        raise ExecutionError(f"DuckDB {running} needs the extension{'s' if len(missing) > 1 else ''} "
                             + ", ".join(missing),
                             hint="pip install " + " ".join(f"{wheel(n)}=={running}" for n in ordered))
    return out


def connect(names: tuple[str, ...]) -> Any:
    """A new in-memory DuckDB connection with the extensions ``names`` loaded.

    Raises:
        ExecutionError: DuckDB or an extension is not a version lakewrap supports
            (:func:`check_versions`), or an extension cannot be loaded (it fails DuckDB's signature
            check); the hint names the wheel to install.
    """
    return connect_binaries(check_versions(names))


def connect_binaries(binaries: list[tuple[str, Path]]) -> Any:
    """:func:`connect` for given binaries, in loading order."""
    import duckdb

    identities = {str(path): _identity(path) for _, path in binaries}
    checked = all(ident is not None and _known(path, ident) for path, ident in identities.items())
    config: dict[str, str | bool | int | float | list[str]] = {**_CONFIG, "allow_unsigned_extensions": checked}
    con = duckdb.connect(config=config)
    try:
        for name, path in binaries:
            _load(con, name, path)
        if checked:  # off before any other statement; DuckDB refuses to turn it on again
            con.execute(sql.set_option("allow_unsigned_extensions", "false"))
        # DuckDB draws a progress bar on stdout for a statement running over 2 s, inside lakewrap's
        # own output (a --format json document, a report line); a session setting (it cannot be
        # global), off already in every cursor of the connection (DuckDB 1.5.5, measured)
        con.execute(sql.set_option("enable_progress_bar", "false"))
        if any(name == "httpfs" for name, _ in binaries):
            for setting in ENV_COPIED_SETTINGS:  # credentials reach DuckDB only as a secret
                con.execute(sql.reset_option(setting))
    except BaseException:
        con.close()
        raise
    if not checked:  # DuckDB checked every signature: remember the binaries it accepted
        _remember({path: ident for path, ident in identities.items() if ident is not None})
    return con


def _load(con: Any, name: str, path: Path) -> None:
    import duckdb

    try:
        con.execute(sql.load_extension(str(path), is_path=True))
    except duckdb.Error as exc:
        raise ExecutionError(
            f"cannot load the DuckDB extension `{name}`: {str(exc).splitlines()[0]}",
            hint=f"pip install {wheel(name)}=={duckdb.__version__}",
        ) from None


def _identity(path: Path) -> list[int] | None:
    """What changes whenever the file does: size, mtime, ctime (which no tool can set), inode, device."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]


def _known(path: str, identity: list[int]) -> bool:
    global _read
    if not _read:  # the record, once a process
        _read = True
        try:
            record = json.loads((cache_dir() / RECORD).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            record = None
        if isinstance(record, dict):
            for key, value in record.items():
                if isinstance(value, list) and all(isinstance(v, int) for v in value):
                    _verified.setdefault(key, value)
    return _verified.get(path) == identity


def _remember(identities: dict[str, list[int]]) -> None:
    if all(_verified.get(path) == ident for path, ident in identities.items()):
        return
    from lakewrap.targetdir import write_atomic

    _verified.update(identities)
    with suppress(OSError):  # a read-only home: every process has its binaries checked
        write_atomic(cache_dir() / RECORD, json.dumps(_verified, indent=1, sort_keys=True))


def forget() -> None:
    """Forget what this process read or recorded (tests that move the cache folder)."""
    global _read
    _verified.clear()
    _read = False
