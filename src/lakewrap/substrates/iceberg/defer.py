"""Deferring on Iceberg: the tables an environment's catalog lacks, read from another environment's catalog.

An environment with ``defer = "prod"`` (``docs/environments.md``) on the pyiceberg write path opens
prod's catalog read-only beside its own. Iceberg has no catalog-wide snapshot, so the pin is one
snapshot id per table: the first time a lake handle needs a deferred table, every table of prod's
catalog is read once (its current snapshot id and the metadata file that holds it), and every later
deferred read of that handle is of those (table, snapshot) pairs, so a prod commit during the dev run
is not seen.

The rule, per materialization (:meth:`lakewrap.execute.iceberg.IcebergLake.scratch`): each table the
model reads (its upstreams, the model's own target excepted) that the environment's catalog does
not hold, and prod's held at the pin, is a view of the materialization's scratch session over
``iceberg_scan(<prod's metadata file>, snapshot_from_id => <pin>)``; the scratch session is an
in-memory DuckDB database dropped after the commit, so nothing of it reaches either catalog. Prod's
catalog is only read (``load_table``), never written.

The materialization's record says ``"deferred": {"env": ..., "tables": [...], "snapshots": {table:
pin}}`` (the summary property ``lakewrap.deferred``), apart from its ``pins``, which name tables of
the environment's own catalog only (the change feed and snapshot expiry read those).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lakewrap.errors import ConfigError, Location, NoLake

if TYPE_CHECKING:
    from lakewrap.execute.iceberg import IcebergLake


@dataclass(frozen=True)
class DeferredTable:
    """One table of the other catalog as a deferred read sees it: its metadata file and pinned snapshot."""

    name: str
    metadata_location: str
    snapshot_id: int | None  # None: the table has no snapshot (it was created empty)


@dataclass
class Deferred:
    """The catalog an environment defers to, and each of its tables' pinned snapshot (read once)."""

    env: str
    lake: IcebergLake  # the other environment's lake, opened read-only: nothing creates or writes it
    pins: dict[str, DeferredTable] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def sandbox(self) -> list[str] | None:
        """The folders the other lake's files are in (None: its catalog decides, a REST or Glue one)."""
        return self.lake.sandbox()

    def table(self, name: str) -> DeferredTable | None:
        """``schema.name`` of the other catalog at its pin (None: it held no such table then)."""
        with self._lock:
            if self.pins is None:
                self.pins = self._pin()
            return self.pins.get(name.lower())

    def _pin(self) -> dict[str, DeferredTable]:
        """Every table of the other catalog at its current snapshot, read in one pass."""
        try:
            names = self.lake.tables()
        except NoLake as exc:
            raise ConfigError(f"environment `{self.env}` (which this environment defers to) has no lake yet: "
                              f"{exc.message.removeprefix('the lake does not exist yet: ')}",
                              location=Location("lakewrap.toml"),
                              hint=f"build it first (`lakewrap run --env {self.env}`), or remove defer") from None
        out: dict[str, DeferredTable] = {}
        for name in names:
            table = self.lake.load(name)
            if table is None:  # dropped since the listing
                continue
            snap = table.current_snapshot()
            out[name.lower()] = DeferredTable(name, table.metadata_location,
                                              int(snap.snapshot_id) if snap is not None else None)
        return out

    def record(self, tables: dict[str, int | None]) -> dict[str, Any]:
        """What a materialization records of its deferred reads (``tables``: name → pinned snapshot)."""
        return {"env": self.env, "tables": sorted(tables), "snapshots": dict(sorted(tables.items()))}
