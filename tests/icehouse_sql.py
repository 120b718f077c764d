"""The Iceberg execution harness (``icehouse.py``) on write path ``sql``: DuckDB writes through the
test REST adapter (``rest_adapter.py``, Flask over a pyiceberg SqlCatalog on SQLite).

:class:`RestSqlLakehouse` starts its own adapter (stopped when the object is collected or
:meth:`close` is called) and configures ``catalog = "rest"``, ``write_path = "sql"``; with ``s3``
the warehouse is a bucket on moto's S3 server. :class:`RestSqlChecker` reads lakewrap's state back
from the Iceberg state tables instead of snapshot summaries.
"""

from __future__ import annotations

import secrets
import weakref
from collections import Counter
from collections.abc import Mapping
from contextlib import ExitStack
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from icehouse import IcebergChecker, IcebergLakehouse
from lakehouse import show
from lakewrap.compile import compile_project

AWS_KEY_ID, AWS_SECRET = "lakewrap-test-key", "lakewrap-test-secret"


def start_rest(root: Path, stack: ExitStack, s3: Any = None) -> tuple[str, str | None]:
    """Start a REST adapter for a lake under ``root``; (uri, s3 warehouse or None)."""
    from pyiceberg.catalog.sql import SqlCatalog

    from rest_adapter import serve

    server_dir = root / "rest-server"
    server_dir.mkdir(parents=True, exist_ok=True)
    props: dict[str, str] = {}
    warehouse = None
    if s3 is not None:
        bucket = f"icesql-{secrets.token_hex(4)}"
        s3.create_bucket(bucket)
        warehouse = f"s3://{bucket}/wh"
        props = {"s3.endpoint": f"http://{s3.endpoint}", "s3.access-key-id": AWS_KEY_ID,
                 "s3.secret-access-key": AWS_SECRET, "s3.region": "us-east-1"}
    backing = SqlCatalog("rest", uri=f"sqlite:///{server_dir / 'rest.db'}",
                         warehouse=warehouse or (server_dir / "wh").as_uri(), **props)
    return stack.enter_context(serve(backing)), warehouse


def rest_toml(uri: str, warehouse: str | None = None, s3: Any = None) -> str:
    lines = ["[lake]", 'substrate = "iceberg"', 'catalog = "rest"', 'write_path = "sql"']
    if warehouse:
        lines.append(f'warehouse = "{warehouse}"')
    if s3 is not None:
        lines += ["", "[lake.s3]", f'endpoint = "{s3.endpoint}"', 'url_style = "path"', "use_ssl = false"]
    lines += ["", "[lake.rest]", f'uri = "{uri}"']
    return "\n".join(lines) + "\n"


class RestSqlLakehouse(IcebergLakehouse):
    """A project whose Iceberg lake is served by a REST adapter of its own and written by DuckDB SQL."""

    substrate = "iceberg-sql"

    def __init__(self, root: Path, models: Mapping[str, str], s3: Any = None):
        root = root.resolve()
        root.mkdir(parents=True, exist_ok=True)
        self.stack = ExitStack()
        uri, warehouse = start_rest(root, self.stack, s3)
        weakref.finalize(self, self.stack.close)
        super().__init__(root, models, toml=rest_toml(uri, warehouse, s3))

    def close(self) -> None:
        self.stack.close()


class RestSqlChecker(IcebergChecker):
    """:class:`IcebergChecker` reading lakewrap's state from the state tables (write path sql)."""

    def no_snapshot_ok(self, target: str, counts: tuple[int, int, int]) -> bool:
        """DuckDB creates an Iceberg table without a snapshot, and a write of no rows adds none: a
        first run with an empty result leaves the target with no snapshot to report."""
        table = self.lakehouse.ice.load(target)
        return counts == (0, 0, 0) and table is not None and table.current_snapshot() is None

    def sha(self, target: str, partition: str | None) -> str:
        if target not in self.shas:
            (plan,) = compile_project(self.lakehouse.root, [target], partition=partition, use_cache=False,
                                      now=datetime(2024, 6, 1, tzinfo=timezone.utc), substrate="iceberg-sql")
            self.shas[target] = plan.sql_sha256
        return self.shas[target]

    def verify_state(self, con: Any) -> None:
        from lakewrap.substrates.iceberg.state import materializations_of

        live = {t for t, tr in self.tracked.items() if not tr.lost}
        got: Counter[tuple[Any, ...]] = Counter()
        snapshots = set()
        for target in live:
            for m in materializations_of(self.lakehouse.ice, target):
                got[(m["run_id"], target, m["partition"], m["strategy"], m["rows_inserted"], m["rows_updated"],
                     m["rows_deleted"], m["sql_sha256"])] += 1
                snapshots.add(m["snapshot_id"])
        want = Counter((c.run_id, c.target, c.partition, c.strategy, c.inserted, c.updated, c.deleted, c.sql_sha256)
                       for c in self.commits if c.target in live)
        assert got == want, f"the state tables disagree with the commits:\n  missing:\n{show(want - got)}" \
                            f"\n  unexpected:\n{show(got - want)}"
        assert snapshots == {c.snapshot_id for c in self.commits if c.target in live}
