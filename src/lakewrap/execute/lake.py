"""A connection to a project's lake: DuckDB, the extensions, secrets, ATTACH, USE, state tables."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lakewrap.config import DuckLakeLakeConfig, ProjectConfig, load_config
from lakewrap.errors import ConfigError, ExecutionError, Location, NoLake, relpath
from lakewrap.execute import extensions, sandbox
from lakewrap.execute import statements as sql
from lakewrap.execute.lockwait import HELD, wait_seconds, waiting_for_lock
from lakewrap.execute.retry import RetryPolicy, retrying
from lakewrap.redact import redact

# A SQLite catalog answers "database is locked" at once while another process commits (DuckLake
# has no busy timeout for it); on a loaded machine a commit can hold the lock for seconds, so the
# connection phase waits longer than a materialization's conflict retries (up to about 50 s).
CONNECT_RETRY = RetryPolicy(attempts=30, base=0.05, cap=2.0)


@dataclass
class Lake:
    """One project's lake. ``connect()`` returns a ready DuckDB connection with the lake in use.

    Example:
        >>> lake = Lake.open(Path("examples/shop"))  # doctest: +SKIP
        >>> con = lake.connect()  # doctest: +SKIP
        >>> con.execute("SELECT count(*) FROM sales.orders").fetchone()  # doctest: +SKIP
    """

    root: Path
    config: DuckLakeLakeConfig
    read_only: bool = False
    secrets: list[str] = field(default_factory=list)
    allow_paths: tuple[str, ...] = ()  # [security] allow_paths, absolute (SecurityConfig.directories)
    _state_ready: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)
    # Held around each statement that threads send through cursors of one shared instance: with
    # DuckDB/DuckLake 1.5.5, statements of two cursors running at the same moment (a COMMIT beside
    # another step's statement, a cursor opened or closed meanwhile) crashed the process twice in
    # about five full test runs (a segfault, an abort). Each statement still uses every core.
    statement_lock: threading.RLock = field(default_factory=threading.RLock)
    _shared: Any = field(default=None, repr=False)  # the instance ``shared()`` hands out cursors of
    # the environment's ``defer``: the other lake, attached read-only beside this one
    # (lakewrap.substrates.ducklake.defer); None without defer and on read-only handles
    defer: Any = None
    # one writer per table (lakewrap.scheduler): concurrent DuckLake writers of one table only conflict
    parallel_writers = False

    @property
    def one_connection(self) -> bool:
        """An idle connection share-locks a SQLite catalog, which blocks every other writer's commit:
        the run holds one connection at a time, opened where it is used."""
        return self.config.catalog == "sqlite"

    @property
    def many_processes(self) -> bool:
        """Whether processes other than this one can open the catalog (not a DuckDB file)."""
        return self.config.catalog != "duckdb"

    @classmethod
    def open(cls, root: Path, *, config: ProjectConfig | None = None, read_only: bool = False) -> Lake:
        project = config or load_config(root)
        cfg = project.lake
        if not isinstance(cfg, DuckLakeLakeConfig):  # a caller opened a lake of another substrate as a DuckLake
            raise ConfigError(
                f"substrate `{cfg.substrate}` is not a DuckLake",
                location=Location("lakewrap.toml"),
                hint="use substrate = \"ducklake\"",
            )
        root = root.resolve()
        defer = None
        if project.defer is not None and not read_only:
            from lakewrap.substrates.ducklake.defer import Deferred

            other = load_config(root, project.defer).lake
            assert isinstance(other, DuckLakeLakeConfig)  # config_env.check_defer
            defer = Deferred(project.defer, other, root)
        return cls(root, cfg, read_only, allow_paths=tuple(project.security.directories(root)), defer=defer)

    @property
    def alias(self) -> str:
        return self.config.alias

    def redact(self, text: str) -> str:
        """``text`` through the one redactor (:mod:`lakewrap.redact`): every credential value and
        its derived forms masked, the project's absolute path made relative.

        Credentials are the values lakewrap handed to DuckDB and, whether used yet or not, those of
        the environment variables lakewrap reads them from (:data:`lakewrap.redact.SECRET_ENV`).
        """
        return redact(text, extra=self.secrets, roots=(self.root,))

    def catalog_spec(self) -> str:
        cfg = self.config
        match cfg.catalog:
            case "duckdb":
                path = cfg.catalog_path(self.root)
                path.parent.mkdir(parents=True, exist_ok=True)
                return str(path)
            case "sqlite":
                path = cfg.catalog_path(self.root)
                path.parent.mkdir(parents=True, exist_ok=True)
                return f"sqlite:{path}"
            case "postgres":
                assert cfg.dsn is not None
                return f"postgres:{cfg.dsn}"
        raise AssertionError(cfg.catalog)  # pragma: no cover

    def connect(self) -> Any:
        """A new DuckDB connection with the lake attached and selected (``USE``).

        Inside ``with lake.shared():`` it is instead a new cursor on the one shared instance.
        """
        shared = self._shared
        if shared is not None:
            cursor = shared.cursor()
            self._session(cursor)
            return cursor
        return self._open()

    @property
    def is_shared(self) -> bool:
        """Whether ``connect()`` hands out cursors of one shared instance (inside ``shared()``)."""
        return self._shared is not None

    @contextmanager
    def shared(self) -> Iterator[Lake]:
        """Let threads share one DuckDB instance: inside the block ``connect()`` returns cursors of it.

        A DuckDB-file catalog admits one DuckDB instance per process (a second ATTACH in the same
        process fails with "Unique file handle conflict"). Each cursor is its own connection (own
        transaction, own temporary tables and registered inputs), so threads materialize
        concurrently and DuckLake's conflict detection and the executor's retries apply between
        them as between processes.

        A SQLite catalog is refused: on DuckLake 1.5.5 cursors of one instance writing to it
        concurrently wedge it ("database is locked" on every later statement of the process, also
        for new cursors, until the process exits). Run one process per writer there instead.
        """
        if self.config.catalog == "sqlite":
            raise ConfigError(
                "threads cannot share a lake whose catalog is SQLite",
                location=Location("lakewrap.toml"),
                hint="run one process per writer (each with its own connection), "
                "or use catalog = \"duckdb\" or \"postgres\"",
            )
        if self._shared is not None:
            raise ExecutionError("this lake is already shared by a `with lake.shared():` block")
        base = self._open()
        self._shared = base
        try:
            yield self
        finally:
            self._shared = None
            self.close(base)

    def close(self, con: Any) -> None:
        """Close a connection :meth:`connect` returned (inside ``shared()``: only that cursor).

        A connection of its own DETACHes the lake first: after a DuckLake COMMIT fails (a conflict),
        DuckDB 1.5.5 does not free the instance on ``close()``, so its catalog would stay attached
        in this process (a DuckDB-file catalog then refuses every later ATTACH here with "Unique
        file handle conflict"; a PostgreSQL catalog keeps its connection open).
        """
        if self._shared is None:
            with suppress(Exception):  # closing anyway
                con.execute(sql.use("memory"))
                con.execute(sql.detach(self.alias))
        con.close()

    def _session(self, con: Any) -> None:
        """What ``_open`` does per connection, for a cursor: it inherits the global settings
        (``TimeZone``), and a cursor's progress bar is off by default (DuckDB 1.5.5, measured)."""
        con.execute(sql.use(self.config.alias))

    def sandbox(self) -> tuple[list[str], list[str]]:
        """(folders, files) the lake's connections may read and write (:func:`sandbox.lock`).

        The project folder (models' seeds, the default catalog and data path), the data path (a
        local folder or its ``s3://`` prefix), the catalog file and its WAL, and ``[security]
        allow_paths``.
        """
        cfg = self.config
        data = cfg.data_location(self.root)
        folders = [str(self.root), data if cfg.is_s3 else str(Path(data).resolve()), *self.allow_paths]
        files: list[str] = []
        if cfg.catalog != "postgres":
            catalog = str(cfg.catalog_path(self.root).resolve())
            files += [catalog, catalog + ".wal"]
        if self.defer is not None:
            more_folders, more_files = self.defer.sandbox()
            folders += more_folders
            files += more_files
        return folders, files

    def runlog_path(self) -> Path:
        """A SQLite catalog's run-log file, beside it (``lake.sqlite`` → ``lake.sqlite-runlog``):
        :mod:`lakewrap.runlog`; other catalogs keep the run log in the catalog database."""
        path = self.config.catalog_path(self.root)
        return path.with_name(path.name + "-runlog")

    def check_exists(self) -> None:
        """A :class:`NoLake` error when the catalog file (DuckDB or SQLite) was never created; a
        read-only connection checks this first, so reading never makes a lake."""
        path = self.config.catalog_path(self.root)
        if self.config.catalog != "postgres" and not path.exists():
            raise NoLake(f"the lake does not exist yet: no catalog at {relpath(path, self.root)}",
                         hint="create it with `lakewrap seed` or `lakewrap run`")

    def _open(self) -> Any:
        import duckdb

        cfg = self.config
        if self.read_only:
            self.check_exists()
        needed = ["ducklake"]
        if cfg.catalog == "sqlite":
            needed.append("sqlite_scanner")
        if cfg.catalog == "postgres":
            needed.append("postgres_scanner")
        if cfg.is_s3:
            needed.append("httpfs")
        con = extensions.connect(tuple(needed))
        con.execute(sql.set_option("TimeZone", "UTC", everywhere=True))
        if cfg.is_s3:
            self._s3_secret(con)
        data = cfg.data_location(self.root)
        options: dict[str, int | str | bool] = {}
        if cfg.data_inlining_row_limit is not None:
            options["DATA_INLINING_ROW_LIMIT"] = cfg.data_inlining_row_limit
        if self.read_only:
            options["READ_ONLY"] = True
        try:
            if not cfg.is_s3 and not self.read_only:
                Path(data).mkdir(parents=True, exist_ok=True)
            catalog = self.catalog_spec()  # creates a catalog file's folder
        except OSError as exc:
            con.close()
            where = relpath(Path(exc.filename), self.root) if exc.filename else "a folder"
            raise ExecutionError(f"cannot attach the lake: cannot create {where}: {exc.strerror}",
                                 hint="check path and data_path in lakewrap.toml") from None
        try:
            # a SQLite catalog another process is creating or writing answers "database is locked"
            attach = sql.attach_ducklake(catalog, cfg.alias, data, options)
            # another process holding a DuckDB-file catalog: waited out up to --wait seconds
            waiting_for_lock(lambda: retrying(lambda: con.execute(attach), CONNECT_RETRY))
        except duckdb.Error as exc:
            con.close()
            raise self.attach_error(exc) from None
        try:
            retrying(lambda: con.execute(sql.use(cfg.alias)), CONNECT_RETRY)  # reads the catalog: may be locked
        except duckdb.Error as exc:
            self.close(con)
            raise self.attach_error(exc) from None
        if self.read_only:  # the run log's tables by their short names (lakewrap query "... lakewrap_runs")
            from lakewrap import runlog

            runlog.expose(con, runlog.attach_sqlite(con, self.runlog_path()) if self.config.catalog == "sqlite"
                          else sql.metadata_catalog(self.alias))
        try:
            if self.defer is not None:
                self.defer.attach(con)
            if not self.read_only:
                self.ensure_state(con)
            # its SETs read the catalog too, which a concurrent commit may hold locked past SQLite's 5 s
            retrying(lambda: sandbox.lock(con, *self.sandbox()), CONNECT_RETRY)  # then no setting changes
        except Exception:
            self.close(con)
            raise
        return con

    def attach_error(self, exc: Exception) -> ExecutionError | NoLake:
        text = self.redact(str(exc))
        if self.read_only and "creating a new DuckLake is explicitly disabled" in text:  # a PostgreSQL catalog
            return NoLake("the lake does not exist yet: its catalog database holds no DuckLake",
                          hint="create it with `lakewrap seed` or `lakewrap run`")
        held = HELD.search(text)
        if held:
            where = relpath(self.config.catalog_path(self.root), self.root)
            return ExecutionError(
                f"the lake catalog {where} is held by another process (PID {held.group(1)})"
                + (f"; waited {wait_seconds():g} s" if wait_seconds() else ""),
                hint="a DuckDB-file catalog admits one process at a time: wait for it to finish (--wait SECONDS "
                "waits for it), or use catalog = \"sqlite\" or \"postgres\" in lakewrap.toml for concurrent writers",
            )
        return ExecutionError(f"cannot attach the lake: {text.splitlines()[0]}",
                              hint="check [lake] in lakewrap.toml (catalog, path, dsn, data_path)")

    def _s3_secret(self, con: Any) -> None:
        s3 = self.config.s3
        assert s3 is not None
        options: dict[str, str | bool] = {"region": s3.region, "url_style": s3.url_style, "use_ssl": s3.use_ssl}
        if s3.endpoint:
            options["endpoint"] = s3.endpoint
        key, secret = os.environ.get("AWS_ACCESS_KEY_ID"), os.environ.get("AWS_SECRET_ACCESS_KEY")
        token = os.environ.get("AWS_SESSION_TOKEN")
        if key and secret:
            options["key_id"], options["secret"] = key, secret
            if token:
                options["session_token"] = token
            self.secrets += [v for v in (key, secret, token) if v and v not in self.secrets]
        try:
            con.execute(sql.create_s3_secret(options))
        except Exception as exc:  # the statement holds credentials: never show it
            raise ExecutionError(f"cannot configure S3 access: {self.redact(str(exc)).splitlines()[0]}") from None

    def ensure_state(self, con: Any) -> None:
        """Create lakewrap's state schema and tables once per process (their own transaction)."""
        with self._lock:
            if self._state_ready:
                return
            retrying(lambda: self._create_state(con), CONNECT_RETRY)  # others may be creating them too
            self._state_ready = True

    def _create_state(self, con: Any) -> None:
        con.execute(sql.BEGIN)
        try:
            for stmt in sql.state_ddl():
                con.execute(stmt)
            con.execute(sql.COMMIT)
        except Exception:
            with suppress(Exception):  # a failed COMMIT has already ended the transaction
                con.execute(sql.ROLLBACK)
            raise
