"""A connection to a project's lake: DuckDB, the extensions, secrets, ATTACH, USE, state tables."""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lakewrap.compilers import lake as sql
from lakewrap.config import LakeConfig, ProjectConfig, load_config
from lakewrap.errors import ConfigError, ExecutionError, Location, relpath
from lakewrap.execute import extensions


@dataclass
class Lake:
    """One project's lake. ``connect()`` returns a ready DuckDB connection with the lake in use.

    Example:
        >>> lake = Lake.open(Path("examples/shop"))  # doctest: +SKIP
        >>> con = lake.connect()  # doctest: +SKIP
        >>> con.execute("SELECT count(*) FROM sales.orders").fetchone()  # doctest: +SKIP
    """

    root: Path
    config: LakeConfig
    read_only: bool = False
    secrets: list[str] = field(default_factory=list)
    _state_ready: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def open(cls, root: Path, *, config: ProjectConfig | None = None, read_only: bool = False) -> Lake:
        cfg = (config or load_config(root)).lake
        if cfg.substrate != "ducklake":
            raise ConfigError(
                f"substrate `{cfg.substrate}` cannot be run yet",
                location=Location("lakewrap.toml"),
                hint="use substrate = \"ducklake\"",
            )
        return cls(root.resolve(), cfg, read_only)

    @property
    def alias(self) -> str:
        return self.config.alias

    def redact(self, text: str) -> str:
        """Remove every known secret value (and the project's absolute path) from ``text``."""
        for secret in self.secrets:
            if secret:
                text = text.replace(secret, "***")
        return text.replace(str(self.root) + os.sep, "").replace(str(self.root), ".")

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
        """A new DuckDB connection with the lake attached and selected (``USE``)."""
        import duckdb

        cfg = self.config
        con = duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False})
        needed = ["ducklake"]
        if cfg.catalog == "sqlite":
            needed.append("sqlite_scanner")
        if cfg.catalog == "postgres":
            needed.append("postgres_scanner")
        if cfg.is_s3:
            needed.append("httpfs")
        extensions.load(con, tuple(needed))
        con.execute(sql.set_option("TimeZone", "UTC"))
        if cfg.is_s3:
            self._s3_secret(con)
        data = cfg.data_location(self.root)
        if not cfg.is_s3:
            Path(data).mkdir(parents=True, exist_ok=True)
        options: dict[str, int | str | bool] = {}
        if cfg.data_inlining_row_limit is not None:
            options["DATA_INLINING_ROW_LIMIT"] = cfg.data_inlining_row_limit
        if self.read_only:
            options["READ_ONLY"] = True
        try:
            con.execute(sql.attach_ducklake(self.catalog_spec(), cfg.alias, data, options))
        except duckdb.Error as exc:
            con.close()
            raise self.attach_error(exc) from None
        con.execute(sql.use(cfg.alias))
        if not self.read_only:
            self.ensure_state(con)
        return con

    def attach_error(self, exc: Exception) -> ExecutionError:
        text = self.redact(str(exc))
        held = re.search(r"Conflicting lock is held in .*?\(PID (\d+)\)", text)
        if held:
            where = relpath(self.config.catalog_path(self.root), self.root)
            return ExecutionError(
                f"the lake catalog {where} is held by another process (PID {held.group(1)})",
                hint="a DuckDB-file catalog admits one process at a time: wait for it to finish, or use "
                "catalog = \"sqlite\" or \"postgres\" in lakewrap.toml for concurrent writers",
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
            self.secrets += [key, secret]
            if token:
                options["session_token"] = token
                self.secrets.append(token)
        try:
            con.execute(sql.create_s3_secret(options))
        except Exception as exc:  # the statement holds credentials: never show it
            raise ExecutionError(f"cannot configure S3 access: {self.redact(str(exc)).splitlines()[0]}") from None

    def ensure_state(self, con: Any) -> None:
        """Create lakewrap's state schema and tables once per process (their own transaction)."""
        with self._lock:
            if self._state_ready:
                return
            con.execute(sql.BEGIN)
            try:
                for stmt in sql.state_ddl():
                    con.execute(stmt)
                con.execute(sql.COMMIT)
            except Exception:
                con.execute(sql.ROLLBACK)
                raise
            self._state_ready = True
