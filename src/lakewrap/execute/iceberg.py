"""An Iceberg lake: a pyiceberg catalog (sql, glue or rest) plus a DuckDB session that reads it.

DuckDB computes (the model's SELECT, guards, merge and SCD2 change sets) over views that pin each
Iceberg table the model reads to one snapshot (``iceberg_scan(<metadata>, snapshot_from_id =>
n)``); pyiceberg commits. Credentials come from the environment only (``AWS_*`` for S3 and Glue,
``LAKEWRAP_ICEBERG_TOKEN`` for a REST catalog's bearer token): they go into catalog properties and
the DuckDB S3 secret, never into SQL that is logged, and their values are redacted from every
message.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lakewrap.compilers import iceberg as ice
from lakewrap.compilers import lake as sql
from lakewrap.config import IcebergLakeConfig, ProjectConfig, load_config
from lakewrap.errors import ConfigError, ExecutionError, Location, NoLake, relpath
from lakewrap.execute import extensions, sandbox
from lakewrap.redact import redact

TOKEN_ENV = "LAKEWRAP_ICEBERG_TOKEN"  # one of lakewrap.redact.SECRET_ENV
SERIALIZABLE = {"write.delete.isolation-level": "serializable", "write.update.isolation-level": "serializable"}
_scratch_ids = itertools.count(1)


@dataclass
class Pinned:
    """One Iceberg table as a materialization read it: its pyiceberg handle and pinned snapshot."""

    name: str
    table: Any  # pyiceberg Table, or None when it does not exist yet
    snapshot_id: int | None
    # the environment whose catalog it was read from (``defer``), None for this lake's own tables
    deferred: str | None = None


@dataclass
class IcebergLake:
    """One project's Iceberg catalog and the DuckDB session that reads it.

    Example:
        >>> lake = IcebergLake.open(Path("examples/shop"))  # doctest: +SKIP
        >>> lake.catalog().list_namespaces()  # doctest: +SKIP
    """

    root: Path
    config: IcebergLakeConfig
    read_only: bool = False
    secrets: list[str] = field(default_factory=list)
    allow_paths: tuple[str, ...] = ()  # [security] allow_paths, absolute (SecurityConfig.directories)
    # the environment's ``defer``: the other catalog, read-only (lakewrap.substrates.iceberg.defer);
    # None without defer and on read-only handles
    defer: Any = None
    _catalog: Any = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    # Taken by the run's coordinator around its own look-ups (the run log, a step's outcome). Each
    # step has a DuckDB instance of its own (:meth:`connect`), so steps need no lock between them.
    statement_lock: threading.RLock = field(default_factory=threading.RLock, repr=False)
    is_shared = False  # every connect() is a new DuckDB instance: threads never share one
    # Several steps may write one table at once: each commit is optimistic (a conflict is refused
    # by the catalog and the whole materialization retried; disjoint partitions rebase in pyiceberg)
    parallel_writers = True
    one_connection = False  # each connection is a session of its own over the catalog
    many_processes = True  # every catalog (sql on SQLite, glue, rest) is opened by any process

    @classmethod
    def open(cls, root: Path, *, config: ProjectConfig | None = None, read_only: bool = False) -> IcebergLake:
        project = config or load_config(root)
        cfg = project.lake
        if not isinstance(cfg, IcebergLakeConfig):  # a caller opened a lake of another substrate as Iceberg
            raise ConfigError(f"substrate `{cfg.substrate}` is not Iceberg", location=Location("lakewrap.toml"))
        root = root.resolve()
        defer = None
        if project.defer is not None and not read_only:
            from lakewrap.substrates.iceberg.defer import Deferred

            # the other environment's lake, opened read-only: reading it creates nothing
            defer = Deferred(project.defer, cls.open(root, config=load_config(root, project.defer), read_only=True))
        return cls(root, cfg, read_only, allow_paths=tuple(project.security.directories(root)), defer=defer)

    @property
    def alias(self) -> str:
        return self.config.alias

    def redact(self, text: str) -> str:
        """``text`` through the one redactor (:mod:`lakewrap.redact`), the project's path relative."""
        return redact(text, extra=self.secrets, roots=(self.root,))

    # --- the catalog ------------------------------------------------------------------------------

    def s3_properties(self) -> dict[str, str]:
        """pyiceberg FileIO properties for an ``s3://`` warehouse (keys from the environment)."""
        if not self.config.is_s3:
            return {}
        s3 = self.config.s3
        assert s3 is not None
        props = {"s3.region": s3.region}
        if s3.endpoint:
            props["s3.endpoint"] = ("https://" if s3.use_ssl else "http://") + s3.endpoint
        if s3.url_style == "vhost" and s3.endpoint:
            props["s3.force-virtual-addressing"] = "true"
        key, secret = os.environ.get("AWS_ACCESS_KEY_ID"), os.environ.get("AWS_SECRET_ACCESS_KEY")
        token = os.environ.get("AWS_SESSION_TOKEN")
        if key and secret:
            props["s3.access-key-id"], props["s3.secret-access-key"] = key, secret
            if token:
                props["s3.session-token"] = token
            self.secrets += [v for v in (key, secret, token) if v and v not in self.secrets]
        return props

    def catalog(self) -> Any:
        """The pyiceberg catalog (created once per lake object)."""
        with self._lock:
            if self._catalog is None:
                self._catalog = self._make_catalog()
            return self._catalog

    def check_exists(self) -> None:
        """Read-only: a :class:`NoLake` error when the embedded catalog was never created (nothing
        creates it then: reading never makes a lake)."""
        path = self.config.iceberg_catalog_path(self.root)
        if self.read_only and self.config.catalog == "sql" and not path.exists():
            raise NoLake(f"the lake does not exist yet: no catalog at {relpath(path, self.root)}",
                         hint="create it with `lakewrap seed` or `lakewrap run`")

    def _make_catalog(self) -> Any:
        cfg = self.config
        warehouse = cfg.warehouse_location(self.root)
        props = self.s3_properties()
        self.check_exists()
        try:
            match cfg.catalog:
                case "sql":
                    from pyiceberg.catalog.sql import SqlCatalog

                    path = cfg.iceberg_catalog_path(self.root)
                    path.parent.mkdir(parents=True, exist_ok=True)
                    if not cfg.is_s3:
                        Path(cfg.warehouse_location(self.root).removeprefix("file://")).mkdir(parents=True,
                                                                                               exist_ok=True)
                    return SqlCatalog("lakewrap", uri=f"sqlite:///{path}", warehouse=warehouse, **props)
                case "glue":
                    from pyiceberg.catalog.glue import GlueCatalog

                    glue = cfg.glue
                    assert glue is not None
                    gprops = {"glue.region": glue.region, "warehouse": warehouse, **props}
                    if glue.endpoint:
                        gprops["glue.endpoint"] = glue.endpoint
                    if glue.catalog_id:
                        gprops["glue.id"] = glue.catalog_id
                    return GlueCatalog("lakewrap", **gprops)
                case "rest":
                    from pyiceberg.catalog.rest import RestCatalog

                    rest = cfg.rest
                    assert rest is not None
                    rprops = {"uri": rest.uri, **props}
                    if rest.warehouse:
                        rprops["warehouse"] = rest.warehouse
                    token = os.environ.get(TOKEN_ENV)
                    if token:
                        rprops["token"] = token
                        self.secrets.append(token)
                    return RestCatalog("lakewrap", **rprops)
        except OSError as exc:
            raise ExecutionError(f"cannot open the Iceberg catalog: {self.redact(str(exc))}",
                                 hint="check [lake] in lakewrap.toml (catalog, path, warehouse)") from None
        except Exception as exc:
            raise ExecutionError(f"cannot open the Iceberg catalog: {self.redact(str(exc)).splitlines()[0]}",
                                 hint="check [lake] in lakewrap.toml and that the catalog is reachable") from None
        raise AssertionError(cfg.catalog)  # pragma: no cover

    def load(self, name: str) -> Any:
        """The pyiceberg table ``schema.name``, or None when it does not exist."""
        from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

        schema, _, table = name.partition(".")
        try:
            return self.catalog().load_table((schema, table))
        except (NoSuchTableError, NoSuchNamespaceError):
            return None

    def ensure_namespace(self, schema: str) -> None:
        props: dict[str, str] = {}
        if self.config.catalog == "glue":  # Glue databases carry their location
            props["location"] = f"{self.config.warehouse_location(self.root)}/{schema}.db"
        catalog = self.catalog()
        try:
            catalog.create_namespace_if_not_exists(schema, properties=props)
        except Exception:
            # Processes creating it at once: pyiceberg's SQL catalog checks, then inserts, so the
            # loser gets the database's unique-constraint error, not NamespaceAlreadyExistsError
            # (seen: three first runs of one project in parallel). The namespace exists either way.
            if not catalog.namespace_exists(schema):
                raise

    def tables(self) -> list[str]:
        """Every ``schema.name`` in the catalog."""
        cat = self.catalog()
        out = []
        for ns in cat.list_namespaces():
            out += [".".join(ident) for ident in cat.list_tables(ns)]
        return sorted(out)

    # --- DuckDB -----------------------------------------------------------------------------------

    def connect(self) -> Any:
        """An in-memory DuckDB with the avro and iceberg extensions (and S3 access for an s3 warehouse)."""
        needed = ("avro", "iceberg", "httpfs") if self.config.is_s3 else ("avro", "iceberg")
        con = extensions.connect(needed)
        try:
            con.execute(sql.set_option("TimeZone", "UTC", everywhere=True))
            if self.config.is_s3:
                self._s3_secret(con)
            if self.read_only:  # the run log, for `lakewrap query "... lakewrap_runs"` (see scratch())
                from lakewrap.runlog import DuckDBFileStore

                DuckDBFileStore(self.runlog_path()).attach(con)
            sandbox.lock(con, self.sandbox())
        except Exception:
            con.close()
            raise
        return con

    def close(self, con: Any) -> None:
        con.close()

    @contextmanager
    def shared(self) -> Iterator[IcebergLake]:
        """What :meth:`lakewrap.execute.lake.Lake.shared` is for threads: here nothing to share, each
        step's connection is an instance of its own (pyiceberg commits; DuckDB only computes)."""
        yield self

    def runlog_path(self) -> Path:
        """The run log's DuckDB file (``[lake] runlog``; :mod:`lakewrap.runlog`)."""
        return self.config.runlog_path(self.root)

    def sandbox(self) -> list[str] | None:
        """The folders DuckDB sessions of this lake may read (:func:`sandbox.lock`): the project, the
        warehouse (a local folder, also as its ``file://`` URI, or its ``s3://`` prefix), ``[security]
        allow_paths``. None for a REST or Glue catalog, which alone decides where each table's files
        are (the settings are still locked; docs/security.md). With ``defer``, also the other lake's
        folders (None when its catalog is a REST or Glue one)."""
        if self.config.catalog != "sql":
            return None
        warehouse = self.config.warehouse_location(self.root)
        folders = [str(self.root), self.root.as_uri(), warehouse, *self.allow_paths]
        if warehouse.startswith("file://"):
            folders.append(warehouse.removeprefix("file://"))
        if self.defer is not None:
            other = self.defer.sandbox()
            if other is None:
                return None
            folders += [f for f in other if f not in folders]
        return folders

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
        try:
            con.execute(sql.create_s3_secret(options))
        except Exception as exc:  # the statement holds credentials: never show it
            raise ExecutionError(f"cannot configure S3 access: {self.redact(str(exc)).splitlines()[0]}") from None

    @contextmanager
    def scratch(self, con: Any, names: Iterable[str], snapshots: dict[str, int] | None = None,
                hidden: Iterable[str] = (), deferrable: Iterable[str] = ()) -> Iterator[tuple[Any, dict[str, Pinned]]]:
        """A cursor whose current database is a fresh in-memory one holding a view per existing table.

        Each of ``names`` (``schema.name``) is pinned to its current snapshot, or to
        ``snapshots[name]`` when given; tables that do not exist, and ``hidden`` ones (a target
        being rebuilt from scratch), get no view. With ``defer``, each of ``deferrable`` that this
        catalog lacks is a view of the other catalog's table at its pin (its :class:`Pinned` says
        ``deferred``). The database is detached on exit, so stand-ins and temporary tables never
        outlive the materialization.
        """
        hidden = set(hidden)
        deferrable = {n.lower() for n in deferrable} if self.defer is not None else set()
        cursor = con.cursor()
        alias = f"lakewrap_scratch_{next(_scratch_ids)}"
        pinned: dict[str, Pinned] = {}
        try:
            cursor.execute(ice.attach_memory(alias))
            cursor.execute(sql.use(alias))
            schemas: set[str] = set()
            for name in dict.fromkeys(names):
                table = self.load(name)
                sid = None
                if table is not None:
                    snap = table.current_snapshot()
                    sid = snapshots.get(name) if snapshots and name in snapshots else (
                        snap.snapshot_id if snap is not None else None)
                other = self.defer.table(name) if table is None and name.lower() in deferrable else None
                pinned[name] = Pinned(name, table, sid) if other is None else Pinned(
                    name, None, other.snapshot_id, deferred=self.defer.env)
                schema, _, short = name.partition(".")
                if schema not in schemas:
                    cursor.execute(ice.create_schema(schema))
                    schemas.add(schema)
                if table is not None and name not in hidden:
                    cursor.execute(ice.scan_view(schema, short, table.metadata_location, sid))
                elif other is not None and name not in hidden:  # defer: the other catalog's table, pinned
                    cursor.execute(ice.scan_view(schema, short, other.metadata_location, other.snapshot_id))
            if self.read_only:  # the run-log tables by their short names (none when connect() attached none)
                from lakewrap.compilers.runlog import RUNLOG_ALIAS
                from lakewrap.runlog import expose

                expose(cursor, RUNLOG_ALIAS)
            yield cursor, pinned
        finally:
            with suppress(Exception):
                cursor.execute(sql.use("memory"))
                cursor.execute(sql.detach(alias))
            cursor.close()
