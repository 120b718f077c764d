"""A small lakewrap project (merge, delete+insert, SCD2 snapshot) and ways to look inside its lake.

The expected table contents are computed here in plain Python from the seed rows, independently of
lakewrap and DuckDB, and compared with what a run leaves in the lake.
"""

from __future__ import annotations

import csv
import hashlib
import io
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from lakewrap.cli import main

ORDERS_HEADER = "order_id,customer_id,amount,status,created_at,updated_at"
ORDERS_V1 = """\
1,1,10.50,placed,2024-01-01 09:00:00,2024-01-01 09:00:00
1,1,10.50,shipped,2024-01-01 09:00:00,2024-01-01 18:00:00
2,2,20.00,placed,2024-01-01 23:59:59,2024-01-01 23:59:59
3,1,30.25,placed,2024-01-02 00:00:00,2024-01-02 00:00:00
4,3,40.00,returned,2024-01-02 12:00:00,2024-01-02 13:00:00
5,2,50.00,placed,2024-01-03 08:00:00,2024-01-03 08:00:00
6,3,60.00,placed,2024-01-04 08:00:00,2024-01-04 08:00:00
"""
# v2: order 2 shipped, order 3 re-priced, a new order 7 on day 2, order 5 (day 3) changed but day 3
# is not re-run, so the lake keeps its old version.
ORDERS_V2 = """\
1,1,10.50,shipped,2024-01-01 09:00:00,2024-01-01 18:00:00
2,2,20.00,placed,2024-01-01 23:59:59,2024-01-01 23:59:59
2,2,20.00,shipped,2024-01-01 23:59:59,2024-01-02 10:00:00
3,1,31.75,placed,2024-01-02 00:00:00,2024-01-02 09:00:00
4,3,40.00,returned,2024-01-02 12:00:00,2024-01-02 13:00:00
7,4,70.00,placed,2024-01-02 18:30:00,2024-01-02 18:30:00
5,2,55.00,returned,2024-01-03 08:00:00,2024-01-03 20:00:00
6,3,60.00,placed,2024-01-04 08:00:00,2024-01-04 08:00:00
"""
CUSTOMERS_HEADER = "customer_id,name,tier,updated_at"
CUSTOMERS_V1 = """\
1,Ann,gold,2024-01-01 00:00:00
2,Bob,silver,2024-01-01 00:00:00
3,Cy,bronze,2024-01-01 00:00:00
"""
# v2: Ann moves to platinum, Cy is gone (hard delete), Dee is new.
CUSTOMERS_V2 = """\
1,Ann,platinum,2024-01-02 06:00:00
2,Bob,silver,2024-01-01 00:00:00
4,Dee,gold,2024-01-02 07:00:00
"""

MODELS = {
    "models/sales/orders.sql": """\
-- materialized incremental
-- partitioned daily key=created_at start=2024-01-01
-- unique_key order_id dedupe=latest_by(updated_at)
SELECT order_id, customer_id, amount, status, created_at, updated_at
FROM raw.orders
WHERE created_at >= $partition_start AND created_at < $partition_end
""",
    "models/sales/daily_revenue.sql": """\
-- materialized incremental
-- partitioned daily key=order_day start=2024-01-01
SELECT
    CAST(date_trunc('day', created_at) AS TIMESTAMP) AS order_day,
    status,
    count(*) AS orders,
    sum(amount) AS revenue
FROM sales.orders
WHERE created_at >= $partition_start AND created_at < $partition_end
GROUP BY ALL
""",
    "models/marts/customer_history.sql": """\
-- snapshot strategy=timestamp unique_key=customer_id updated_at=updated_at hard_deletes=invalidate
SELECT customer_id, name, tier, updated_at
FROM raw.customers
""",
}

TS = "%Y-%m-%d %H:%M:%S"


def write_project(root: Path, version: int = 1, toml: str | None = None) -> Path:
    """The project's models and the seeds of ``version`` (1 or 2); ``toml`` becomes lakewrap.toml."""
    for rel, text in MODELS.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    write_seeds(root, version)
    if toml is not None:
        (root / "lakewrap.toml").write_text(toml)
    return root


def write_seeds(root: Path, version: int) -> None:
    seeds = root / "seeds" / "raw"
    seeds.mkdir(parents=True, exist_ok=True)
    orders, customers = (ORDERS_V1, CUSTOMERS_V1) if version == 1 else (ORDERS_V2, CUSTOMERS_V2)
    (seeds / "orders.csv").write_text(ORDERS_HEADER + "\n" + orders)
    (seeds / "customers.csv").write_text(CUSTOMERS_HEADER + "\n" + customers)


def _rows(header: str, body: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(header + "\n" + body)))


# --- the expected lake, computed without lakewrap ---------------------------------------------------


@dataclass
class Expected:
    """What the three tables must hold, as sorted tuples of Python values."""

    orders: dict[int, tuple[Any, ...]]
    revenue: dict[tuple[datetime, str], tuple[Any, ...]]
    history: list[tuple[Any, ...]]

    @classmethod
    def empty(cls) -> Expected:
        return cls({}, {}, [])

    def run(self, version: int, days: Iterable[str], now: datetime) -> None:
        """Apply one ``lakewrap run`` over ``days`` with the seeds of ``version`` at time ``now``."""
        raw_orders = _rows(ORDERS_HEADER, ORDERS_V1 if version == 1 else ORDERS_V2)
        for day in days:
            start = datetime.strptime(day, "%Y-%m-%d")
            end = start + timedelta(days=1)
            # sales.orders: merge the latest version (by updated_at) of each order created that day
            latest: dict[int, dict[str, str]] = {}
            for r in raw_orders:
                created = datetime.strptime(r["created_at"], TS)
                if start <= created < end:
                    oid = int(r["order_id"])
                    if oid not in latest or r["updated_at"] > latest[oid]["updated_at"]:
                        latest[oid] = r
            for oid, r in latest.items():
                self.orders[oid] = (oid, int(r["customer_id"]), round(float(r["amount"]), 2), r["status"],
                                    datetime.strptime(r["created_at"], TS), datetime.strptime(r["updated_at"], TS))
            # sales.daily_revenue: replace that day's rows with an aggregate of the merged orders
            self.revenue = {k: v for k, v in self.revenue.items() if k[0] != start}
            groups: dict[str, list[float]] = {}
            for o in self.orders.values():
                if start <= o[4] < end:
                    groups.setdefault(o[3], []).append(o[2])
            for status, amounts in groups.items():
                self.revenue[(start, status)] = (start, status, len(amounts), round(sum(amounts), 2))
        # marts.customer_history: SCD2 on updated_at, hard deletes closed at the run time
        source = {int(r["customer_id"]): r for r in _rows(CUSTOMERS_HEADER,
                                                           CUSTOMERS_V1 if version == 1 else CUSTOMERS_V2)}
        history = []
        for row in self.history:
            cid, name, tier, updated, valid_from, _, current = row
            if current and cid in source and datetime.strptime(source[cid]["updated_at"], TS) > updated:
                row = (cid, name, tier, updated, valid_from, datetime.strptime(source[cid]["updated_at"], TS), False)
            elif current and cid not in source:
                row = (cid, name, tier, updated, valid_from, now.replace(tzinfo=None), False)
            history.append(row)
        current_ids = {r[0] for r in history if r[6]}
        for cid, r in source.items():
            if cid not in current_ids:
                ts = datetime.strptime(r["updated_at"], TS)
                history.append((cid, r["name"], r["tier"], ts, ts, None, True))
        self.history = history

    def tables(self) -> dict[str, list[tuple[Any, ...]]]:
        return {
            "sales.orders": sorted(self.orders.values()),
            "sales.daily_revenue": sorted(self.revenue.values()),
            "marts.customer_history": sorted(self.history, key=repr),
        }


# --- looking inside a lake --------------------------------------------------------------------------

QUERIES = {
    "sales.orders": "SELECT order_id, customer_id, round(amount, 2), status, created_at, updated_at "
                    "FROM sales.orders ORDER BY ALL",
    "sales.daily_revenue": "SELECT order_day, status, orders, round(revenue, 2) FROM sales.daily_revenue ORDER BY ALL",
    "marts.customer_history": "SELECT customer_id, name, tier, updated_at, valid_from, valid_to, is_current "
                              "FROM marts.customer_history",
}


def actual_tables(root: Path) -> dict[str, list[tuple[Any, ...]]]:
    """The three tables as the lake holds them (one read-only connection)."""
    con = open_lake(root)
    try:
        out = {}
        for name, sql in QUERIES.items():
            rows = [tuple(r) for r in con.execute(sql).fetchall()]
            out[name] = sorted(rows, key=repr) if name == "marts.customer_history" else rows
        return out
    finally:
        con.close()


def cli(*args: str) -> tuple[int, str, str]:
    """``lakewrap <args>`` in-process: (exit code, stdout, stderr)."""
    result = CliRunner().invoke(main, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def open_lake(root: Path) -> Any:
    """A read-only DuckDB connection to the project's lake, through lakewrap (the caller closes it)."""
    from lakewrap.execute.lake import Lake

    return Lake.open(root, read_only=True).connect()


class Inspector:
    """Reads an embedded lake (``.lakewrap/lake.ducklake``, the default layout) without lakewrap.

    One DuckDB instance with the ducklake extension loaded once; each look ATTACHes the lake
    ``READ_ONLY``, reads, and DETACHes, so lakewrap can open the file between two looks.
    """

    def __init__(self) -> None:
        import duckdb

        from conftest import extension_path

        self.con = duckdb.connect(config={"autoinstall_known_extensions": False,
                                          "autoload_known_extensions": False})
        self.con.execute(f"LOAD '{extension_path('ducklake')}'")

    def close(self) -> None:
        self.con.close()

    def state(self, root: Path) -> tuple[list[int], str]:
        """(snapshot ids, digest of every table and view): what a failed command must leave as it was."""
        catalog = root / ".lakewrap" / "lake.ducklake"
        data = root / ".lakewrap" / "data"
        self.con.execute(f"ATTACH 'ducklake:{catalog}' AS chk (DATA_PATH '{data}/', READ_ONLY)")
        self.con.execute("BEGIN TRANSACTION")  # one consistent read
        try:
            snapshots = [r[0] for r in
                         self.con.execute("SELECT snapshot_id FROM chk.snapshots() ORDER BY 1").fetchall()]
            h = hashlib.sha256()
            tables = self.con.execute(
                "SELECT table_schema, table_name, table_type FROM information_schema.tables "
                "WHERE table_catalog = 'chk' ORDER BY ALL").fetchall()
            for schema, name, kind in tables:
                cursor = self.con.execute(f'SELECT * FROM chk."{schema}"."{name}" ORDER BY ALL')
                h.update(repr((schema, name, kind, [d[:2] for d in cursor.description])).encode())
                h.update(repr(cursor.fetchall()).encode())
            return snapshots, h.hexdigest()
        finally:
            self.con.execute("ROLLBACK")
            self.con.execute("DETACH chk")
