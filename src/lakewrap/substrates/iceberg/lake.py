"""The lake handle of Iceberg's write path ``sql``: the same catalog handle, whose connections
attach the REST catalog to DuckDB (:func:`lakewrap.substrates.iceberg.sql_connect.connect`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lakewrap.execute.iceberg import IcebergLake


@dataclass
class IcebergSqlLake(IcebergLake):
    """:class:`IcebergLake` whose :meth:`connect` is a DuckDB session with the REST catalog attached
    (a read-only handle keeps the plain session: reads go through pinned views)."""

    def connect(self) -> Any:
        if self.read_only:
            return super().connect()
        from lakewrap.substrates.iceberg.sql_connect import connect

        return connect(self)
