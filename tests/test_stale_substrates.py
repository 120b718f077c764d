"""``lakewrap run --stale`` tests shared by the substrates, each run on DuckLake and on Iceberg.

The randomized histories are each substrate's own (DuckLake's are written by SQL and checked
against the change feed's rules, Iceberg's by plain pyiceberg and checked against net row
changes: ``tests/test_stale.py`` and ``tests/test_stale_iceberg.py`` compute what they expect);
the scenario of a join partner without a window filter is one test over a driver per substrate
that writes the upstream tables with that substrate's own client (DuckDB SQL on the lake, plain
pyiceberg), independently of the code under test.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa
import pytest

import lakewrap
import test_stale as ducklake
import test_stale_iceberg as iceberg
from lakewrap.execute.iceberg import IcebergLake
from lakewrap.execute.lake import Lake

HISTORIES: dict[str, Callable[..., None]] = {"ducklake": ducklake.history, "iceberg": iceberg.history}


@pytest.mark.parametrize(("substrate", "seed"), [
    *(pytest.param("ducklake", seed, marks=pytest.mark.slow, id=f"ducklake-{seed}") for seed in (1, 2, 3, 4)),
    pytest.param("iceberg", 7, id="iceberg-7"),
])
def test_stale_rebuilds_exactly_the_touched_partitions(tmp_path: Path, substrate: str, seed: int) -> None:
    HISTORIES[substrate](tmp_path, seed, rounds=3)


class Driver(Protocol):
    """Writes a substrate's upstream tables with its own client and reads back what lakewrap wrote."""

    def project(self, root: Path, models: dict[str, str]) -> None: ...

    def create(self, root: Path, name: str, rows: pa.Table) -> None: ...

    def append(self, root: Path, name: str, rows: pa.Table) -> None: ...

    def replace(self, root: Path, name: str, rows: pa.Table) -> None: ...

    def rows(self, root: Path, name: str) -> list[dict[str, Any]]: ...

    def rebuilt(self, root: Path, run_id: str, target: str) -> set[str | None]: ...


class DuckLakeDriver:
    """DuckDB SQL on a lake connection (the project's default ``[lake]``)."""

    def project(self, root: Path, models: dict[str, str]) -> None:
        ducklake.write_project(root, models)

    def _run(self, root: Path, rows: pa.Table, *statements: str) -> None:
        lake = Lake.open(root)
        con = lake.connect()
        try:
            con.register("new_rows", rows)
            con.execute("BEGIN")
            for sql in statements:
                con.execute(sql)
            con.execute("COMMIT")
        finally:
            lake.close(con)

    def create(self, root: Path, name: str, rows: pa.Table) -> None:
        self._run(root, rows, f"CREATE SCHEMA IF NOT EXISTS {name.split('.')[0]}",
                  f"CREATE TABLE {name} AS SELECT * FROM new_rows")

    def append(self, root: Path, name: str, rows: pa.Table) -> None:
        self._run(root, rows, f"INSERT INTO {name} SELECT * FROM new_rows")

    def replace(self, root: Path, name: str, rows: pa.Table) -> None:
        self._run(root, rows, f"DELETE FROM {name}", f"INSERT INTO {name} SELECT * FROM new_rows")

    def rows(self, root: Path, name: str) -> list[dict[str, Any]]:
        cols = ("id", "ts", "label")
        return [dict(zip(cols, r, strict=True)) for r in ducklake.fetch(root, f"SELECT {', '.join(cols)} FROM {name}")]

    def rebuilt(self, root: Path, run_id: str, target: str) -> set[str | None]:
        return set(ducklake.rebuilt(root, run_id).get(target, set()))


class IcebergDriver:
    """Plain pyiceberg on the project's SqlCatalog."""

    def project(self, root: Path, models: dict[str, str]) -> None:
        iceberg.write_project(root, models)

    def create(self, root: Path, name: str, rows: pa.Table) -> None:
        lake = IcebergLake.open(root)
        schema, table = name.split(".")
        lake.ensure_namespace(schema)
        lake.catalog().create_table((schema, table), schema=rows.schema).append(rows)

    def append(self, root: Path, name: str, rows: pa.Table) -> None:
        IcebergLake.open(root).load(name).append(rows)

    def replace(self, root: Path, name: str, rows: pa.Table) -> None:
        IcebergLake.open(root).load(name).overwrite(rows)

    def rows(self, root: Path, name: str) -> list[dict[str, Any]]:
        return iceberg.scan(root, name)

    def rebuilt(self, root: Path, run_id: str, target: str) -> set[str | None]:
        return iceberg.rebuilt_of(root, run_id, target)


DRIVERS: dict[str, Driver] = {"ducklake": DuckLakeDriver(), "iceberg": IcebergDriver()}

JOINED = """\
-- materialized incremental
-- partitioned daily key=ts start=2024-01-01
SELECT e.id, e.ts, d.label FROM raw.events AS e JOIN raw.dims AS d ON e.v = d.v
WHERE e.ts >= $partition_start AND e.ts < $partition_end
"""


def dims(label: str) -> pa.Table:
    return pa.table({"v": pa.array([1], pa.int32()), "label": [label]})


@pytest.mark.parametrize("substrate", sorted(DRIVERS))
def test_join_partner_without_window_is_conservative(tmp_path: Path, substrate: str) -> None:
    lake = DRIVERS[substrate]
    lake.project(tmp_path, {"models/sales/ev.sql": iceberg.MODELS["models/sales/ev.sql"]})
    lake.create(tmp_path, "raw.events", iceberg.arrow({i: (datetime(2024, 1, 1) + timedelta(hours=10 * i), 1)
                                                       for i in range(10)}))
    assert lakewrap.Project(tmp_path).run(start="2024-01-01", end="2024-01-04").ok
    lake.create(tmp_path, "raw.dims", dims("x"))
    lake.project(tmp_path, {"models/sales/joined.sql": JOINED})
    project = lakewrap.Project(tmp_path)
    assert project.run(["sales.joined"], start="2024-01-01", end="2024-01-04").ok
    # a late event on day 3: precise, only that day
    lake.append(tmp_path, "raw.events", iceberg.arrow({99: (datetime(2024, 1, 3, 5), 1)}))
    assert {s.target: s.stale for s in project.status()} == {"sales.ev": ["2024-01-03"], "sales.joined": ["2024-01-03"]}
    report = project.run(stale=True)
    assert lake.rebuilt(tmp_path, report.run_id, "sales.joined") == {"2024-01-03"}
    # a change of the join partner: no window maps it, so every materialized partition is stale
    lake.replace(tmp_path, "raw.dims", dims("y"))
    stale = {s.target: s.stale for s in project.status()}
    assert stale == {"sales.ev": [], "sales.joined": ["2024-01-01", "2024-01-02", "2024-01-03", "2024-01-04"]}
    report = project.run(stale=True, start="2024-01-02", end="2024-01-03")  # --start/--end restrict
    assert lake.rebuilt(tmp_path, report.run_id, "sales.joined") == {"2024-01-02", "2024-01-03"}
    assert {r["label"] for r in lake.rows(tmp_path, "sales.joined") if r["ts"].day in (2, 3)} == {"y"}
    stale = {s.target: s.stale for s in project.status()}
    assert stale == {"sales.ev": [], "sales.joined": ["2024-01-01", "2024-01-04"]}
