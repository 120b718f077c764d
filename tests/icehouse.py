"""The execution-test harness of ``lakehouse.py`` on a real Iceberg lake (pyiceberg SqlCatalog on SQLite).

:class:`IcebergLakehouse` keeps :class:`~lakehouse.Lakehouse`'s interface: ``sql()`` runs plain SQL
over the sources (each Iceberg table copied into an in-memory DuckDB, changed tables written back
with one pyiceberg overwrite each), ``run()`` runs ``run_project`` (which dispatches to the Iceberg
runner from ``lakewrap.toml``), and ``head`` names the lake's state after each step -- Iceberg has
no lake-wide snapshot id, so ``head`` indexes a list of {table: snapshot id}.

:class:`IcebergChecker` reads every recorded state back through Iceberg time travel
(``scan(snapshot_id=...)``) and checks that the snapshot summaries record exactly the committed
materializations.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa

from lakehouse import ARROW, Checker, Lakehouse, assert_same_rows, quote, show
from lakewrap.compile import compile_project
from lakewrap.compilers import iceberg as ice
from lakewrap.config import load_config
from lakewrap.execute.iceberg import IcebergLake
from lakewrap.runner import RunReport, run_project
from strategy_reference import Row, Table

ICEBERG_TOML = '[lake]\nsubstrate = "iceberg"\n'


class IcebergLakehouse(Lakehouse):
    """One project folder whose lake is the embedded Iceberg default under ``<root>/.lakewrap/``."""

    substrate = "iceberg"

    def __init__(self, root: Path, models: Mapping[str, str], toml: str = ICEBERG_TOML):
        self.root = root.resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "lakewrap.toml").write_text(toml)
        for rel, text in models.items():
            path = self.root / "models" / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        (self.root / "models").mkdir(parents=True, exist_ok=True)
        self.ice = IcebergLake.open(self.root)
        self.versions: list[dict[str, int | None]] = [{}]
        self.head = 0

    def remember(self) -> None:
        """Record every table's current snapshot as the state after this step."""
        state: dict[str, int | None] = {}
        for name in self.ice.tables():
            snap = self.ice.load(name).current_snapshot()
            state[name] = snap.snapshot_id if snap is not None else None
        self.versions.append(state)
        self.head = len(self.versions) - 1

    def connect(self, read_only: bool = True) -> Any:
        """A DuckDB connection where every Iceberg table is a view at its current snapshot."""
        con = self.ice.connect()
        for name in self.ice.tables():
            schema, _, short = name.partition(".")
            con.execute(ice.create_schema(schema))
            con.execute(ice.scan_view(schema, short, self.ice.load(name).metadata_location, None))
        return con

    def sql(self, *statements: str, read: Sequence[str] = (), tables: Mapping[str, Sequence[Row]] | None = None,
            types: Mapping[str, Mapping[str, str]] | None = None) -> dict[str, Table]:
        """Run plain SQL over copies of the sources; write back each table whose content changed."""
        con = self.ice.connect()
        try:
            before: dict[str, Any] = {}
            for name in self.ice.tables():
                con.execute(f"CREATE SCHEMA IF NOT EXISTS {quote(name.split('.')[0])}")
                con.execute(f"CREATE TABLE {quote(name)} AS SELECT * FROM iceberg_scan("
                            f"'{self.ice.load(name).metadata_location}')")
                before[name] = digest(con, name)
            for name, rows in (tables or {}).items():
                cols = (types or {})[name]
                con.execute(f"CREATE SCHEMA IF NOT EXISTS {quote(name.rsplit('.', 1)[0])}")
                con.execute(f"CREATE TABLE IF NOT EXISTS {quote(name)} ("
                            + ", ".join(f"{quote(c)} {t}" for c, t in cols.items()) + ")")
                con.execute(f"DELETE FROM {quote(name)}")
                data = pa.Table.from_pylist([dict(r) for r in rows],
                                            schema=pa.schema([(c, ARROW[t]) for c, t in cols.items()]))
                con.register("__rows", data)
                con.execute(f"INSERT INTO {quote(name)} BY NAME SELECT * FROM __rows")
                con.unregister("__rows")
            for statement in statements:
                con.execute(statement)
            names = [f"{s}.{t}" for s, t in con.execute(
                "SELECT schema_name, table_name FROM duckdb_tables() WHERE database_name = 'memory'").fetchall()]
            for name in names:
                if before.get(name) == digest(con, name) and name not in (tables or {}):
                    continue
                rows_now = con.execute(f"SELECT * FROM {quote(name)}").to_arrow_table()
                table = self.ice.load(name)
                if table is None:
                    self.ice.ensure_namespace(name.split(".")[0])
                    self.ice.catalog().create_table(tuple(name.split(".")), schema=rows_now.schema).append(rows_now)
                else:
                    table.overwrite(rows_now.select([f.name for f in table.schema().fields]))
            out = {}
            for name in read:
                cursor = con.execute(f"SELECT * FROM {quote(name)}")
                cols = [d[0] for d in cursor.description]
                out[name] = [dict(zip(cols, r, strict=True)) for r in cursor.fetchall()]
        finally:
            con.close()
        self.remember()
        return out

    def seed(self, files: Mapping[str, Sequence[Row]], columns: Mapping[str, Sequence[str]]) -> None:
        super().seed(files, columns)
        self.remember()

    def materialize(self, rows: Sequence[Row], types: Mapping[str, str], **options: Any) -> Any:
        result = super().materialize(rows, types, **options)
        self.remember()
        return result

    def run(self, *selectors: str, partition: str | None = None, now: datetime, strict: bool = False) -> RunReport:
        report = run_project(self.root, list(selectors), partition=partition, now=now, strict=strict, reappend=True)
        self.remember()
        return report

    def read(self, target: str, version: int) -> Table | None:
        """The rows of ``target`` in the recorded state ``version`` (None: it did not exist)."""
        state = self.versions[version]
        if target not in state:
            return None
        table = self.ice.load(target)
        sid = state[target]
        if sid is None:
            return []
        return table.scan(snapshot_id=sid).to_arrow().to_pylist()  # type: ignore[no-any-return]


def digest(con: Any, name: str) -> tuple[Any, ...]:
    return tuple(con.execute(f"SELECT count(*), sum(hash(t)) FROM {quote(name)} AS t").fetchone())


class IcebergChecker(Checker):
    """:class:`~lakehouse.Checker` reading states and lakewrap's state from Iceberg snapshots."""

    lakehouse: IcebergLakehouse
    unchanged_commits: ClassVar[bool] = False  # Iceberg: an SCD2 run that changes nothing commits nothing

    def sha(self, target: str, partition: str | None) -> str:
        """The Iceberg plan's sql_sha256 (the base memo is keyed by model text, shared with DuckLake)."""
        if target not in self.shas:
            (plan,) = compile_project(self.lakehouse.root, [target], partition=partition, use_cache=False,
                                      now=datetime(2024, 6, 1, tzinfo=timezone.utc), substrate="iceberg")
            self.shas[target] = plan.sql_sha256
        return self.shas[target]

    def verify(self) -> None:
        assert load_config(self.lakehouse.root).lake.substrate == "iceberg"
        for version, target, expected, what in self.checkpoints:
            if self.tracked[target].lost:
                continue
            actual = self.lakehouse.read(target, version)
            assert_same_rows(actual, expected, self.tracked[target].model.columns, f"{what} (state {version})")
        self.verify_state(None)

    def verify_state(self, con: Any) -> None:
        from lakewrap.substrates.iceberg.state import materializations

        live = {t for t, tr in self.tracked.items() if not tr.lost}
        got: Counter[tuple[Any, ...]] = Counter()
        snapshots = set()
        for target in live:
            for m in materializations(self.lakehouse.ice.load(target)):
                got[(m["run_id"], target, m["partition"], m["strategy"], m["rows_inserted"], m["rows_updated"],
                     m["rows_deleted"], m["sql_sha256"])] += 1
                snapshots.add(m["snapshot_id"])
        want = Counter((c.run_id, c.target, c.partition, c.strategy, c.inserted, c.updated, c.deleted, c.sql_sha256)
                       for c in self.commits if c.target in live)
        assert got == want, f"the snapshot summaries disagree with the commits:\n  missing:\n{show(want - got)}" \
                            f"\n  unexpected:\n{show(got - want)}"
        assert snapshots == {c.snapshot_id for c in self.commits if c.target in live}
