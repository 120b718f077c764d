"""Deferring on DuckLake: the tables an environment's lake lacks, read from another environment's lake.

An environment with ``defer = "prod"`` (``docs/environments.md``) attaches prod's lake read-only, as
``lakewrap_defer``, beside its own, pinned at the snapshot that was prod's current one when the
lake handle first connected (``ATTACH ... (READ_ONLY, SNAPSHOT_VERSION pin)``).

The rule, per materialization: each table the model reads (its upstreams, the model's own target
excepted) that the environment's own lake does not hold (no table or view of that name,
read inside the materialization's transaction) and the other lake holds at the pin is deferred:
inside that transaction a view of that name is created that reads ``lakewrap_defer.<schema>.<name>``
(the pinned attachment), and dropped again
before the commit, so nothing of it reaches the environment's lake (no snapshot records it) and
nothing is written to the other lake (attached read-only). Selected models run before the models
reading them, so a table this run builds is never deferred; a table present in the own lake is read
there even when it is older than the other lake's.

The pins of the materialization record ``"deferred": {"env": ..., "snapshot": pin, "tables": [...]}``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lakewrap.errors import ConfigError, Location, relpath
from lakewrap.execute import statements as stmts

if TYPE_CHECKING:
    from lakewrap.config import DuckLakeLakeConfig
    from lakewrap.execute.log import StatementLog

ALIAS = "lakewrap_defer"


@dataclass
class Deferred:
    """The lake an environment defers to, and the snapshot it is read at (set on first attach)."""

    env: str
    config: DuckLakeLakeConfig
    root: Path
    pin: int | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def sandbox(self) -> tuple[list[str], list[str]]:
        """The other lake's data folder and catalog file, which the connection must read."""
        cfg = self.config
        data = cfg.data_location(self.root)
        folders = [data if cfg.is_s3 else str(Path(data).resolve())]
        files: list[str] = []
        if cfg.catalog != "postgres":
            catalog = str(cfg.catalog_path(self.root).resolve())
            files += [catalog, catalog + ".wal"]
        return folders, files

    def attach(self, con: Any) -> None:
        """Attach the other lake read-only on ``con`` and pin its current snapshot (once per handle)."""
        cfg = self.config
        path = cfg.catalog_path(self.root)
        if cfg.catalog != "postgres" and not path.exists():
            raise ConfigError(f"environment `{self.env}` (which this environment defers to) has no lake yet: "
                              f"no catalog at {relpath(path, self.root)}", location=Location("lakewrap.toml"),
                              hint=f"build it first (`lakewrap run --env {self.env}`), or remove defer")
        with self._lock:
            if self.pin is None:  # the other lake's current snapshot, read once for this handle
                con.execute(self.attach_statement(None))
                self.pin = int(con.execute(stmts.current_snapshot(ALIAS)).fetchone()[0])
                con.execute(stmts.detach(ALIAS))
        con.execute(self.attach_statement(self.pin))

    def attach_statement(self, pin: int | None) -> str:
        """``ATTACH`` of the other lake as ``lakewrap_defer``, read-only, at snapshot ``pin`` (None:
        its current one); also the line ``lakewrap shell`` gives DuckDB's CLI."""
        cfg = self.config
        path = cfg.catalog_path(self.root)
        spec = {"duckdb": str(path), "sqlite": f"sqlite:{path}", "postgres": f"postgres:{cfg.dsn}"}[cfg.catalog]
        options: dict[str, int | str | bool] = {"READ_ONLY": True}
        if pin is not None:
            options["SNAPSHOT_VERSION"] = pin
        return str(stmts.attach_ducklake(spec, ALIAS, cfg.data_location(self.root), options))

    def _exists(self, con: Any, catalog: str, schema: str, name: str, log: StatementLog) -> bool:
        found = log.run(con, stmts.relation_exists(), {"catalog": catalog, "schema": schema, "name": name})
        return bool(found.fetchone()[0])

    def open_views(self, con: Any, alias: str, target: str, reads: tuple[str, ...],
                   log: StatementLog) -> tuple[list[str], list[str], list[str]]:
        """Inside the open transaction: a view for each read the own lake lacks and the other lake
        holds at the pin. Returns (deferred tables, views created, schemas created)."""
        tables: list[str] = []
        schemas: list[str] = []
        for read in sorted({r.lower() for r in reads} - {target.lower()}):
            schema, _, name = read.rpartition(".")
            schema = schema or "main"
            if self._exists(con, alias, schema, name, log) or not self._exists(con, ALIAS, schema, name, log):
                continue
            if not log.run(con, stmts.schema_exists(), {"catalog": alias, "schema": schema}).fetchone()[0]:
                log.run(con, stmts.create_schema(schema))
                schemas.append(schema)
            log.run(con, stmts.deferred_view(schema, name, ALIAS))
            tables.append(f"{schema}.{name}")
        return tables, list(tables), schemas

    def close_views(self, con: Any, target: str, views: list[str], schemas: list[str], log: StatementLog) -> None:
        """Before the commit: drop the views (and the schemas made for them, but the target's)."""
        for view in views:
            schema, _, name = view.rpartition(".")
            log.run(con, stmts.drop_view(schema, name))
        keep = target.lower().rpartition(".")[0]
        for schema in schemas:
            if schema != keep:
                log.run(con, stmts.drop_schema(schema))

    def record(self, tables: list[str]) -> dict[str, Any]:
        """What the materialization's pins say of its deferred reads."""
        return {"env": self.env, "snapshot": self.pin, "tables": tables}
