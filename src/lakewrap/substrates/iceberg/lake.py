"""The lake handle of Iceberg's write path ``sql``: the same catalog handle, whose connections
attach the REST catalog to DuckDB (:func:`lakewrap.execute.iceberg_sql.connect`)."""

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
        from lakewrap.execute.iceberg_sql import connect

        return connect(self)
