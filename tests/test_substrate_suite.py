"""The shared substrate suite: the same small project on every substrate, through the
substrate-neutral entry points (``compile_project``, ``seed_project``, ``run_project``,
``inspect.query``, ``Substrate.materializations``).

A new substrate passes it by adding its ``[lake]`` to :data:`TOML`. ``memory`` is the worked
example of docs/architecture.md, "Adding a substrate" (tests/memory_substrate.py), installed for
these tests only through a real ``lakewrap.substrates`` entry point (a dist-info on ``sys.path``).

Each case checks: the compiled plans come from the substrate's compiler; a run succeeds; the
tables equal a reference computed by plain DuckDB from the same input rows; one typed
materialization record per step with its run id and partition; a second run of the same partition
keeps the contents; the run log agrees with the records; a view is refused before anything is
written where the substrate's capabilities say it holds none.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import duckdb
import pytest

from helpers import install_dist
from lakewrap import frozen
from lakewrap.compile import compile_project
from lakewrap.config import load_config
from lakewrap.errors import LakewrapError
from lakewrap.inspect import query, status
from lakewrap.runner import run_project, seed_project
from lakewrap.substrates import registry
from lakewrap.substrates.protocol import Substrate

TOML = {
    "ducklake": '[lake]\nsubstrate = "ducklake"\n',
    "iceberg": '[lake]\nsubstrate = "iceberg"\n',  # pyiceberg, the embedded SQL catalog
    "memory": '[lake]\nsubstrate = "memory"\n',
}

ORDERS = """\
order_id,customer_id,amount,created_at
1,1,10.50,2024-01-01 09:00:00
2,2,20.00,2024-01-01 23:59:59
3,1,30.25,2024-01-02 00:00:00
4,3,40.00,2024-01-02 12:00:00
5,2,50.00,2024-01-03 08:00:00
"""

MODELS = {
    "models/sales/customers.sql": """\
-- materialized table
SELECT customer_id, count(*) AS orders, sum(amount) AS spent
FROM raw.orders
GROUP BY customer_id
""",
    "models/sales/daily.sql": """\
-- materialized incremental
-- partitioned daily key=created_at start=2024-01-01
SELECT order_id, customer_id, amount, created_at
FROM raw.orders
WHERE created_at >= $partition_start AND created_at < $partition_end
""",
    "models/sales/latest.sql": """\
-- materialized incremental
-- partitioned daily key=created_at start=2024-01-01
-- unique_key order_id
SELECT order_id, amount, created_at
FROM raw.orders
WHERE created_at >= $partition_start AND created_at < $partition_end
""",
}

# the independent reference: the same rows, the same question, plain DuckDB (no lakewrap)
REFERENCE = {
    "sales.customers": "SELECT customer_id, count(*), sum(amount) FROM o GROUP BY ALL ORDER BY 1",
    "sales.daily": "SELECT order_id, customer_id, amount, created_at FROM o WHERE created_at < $until ORDER BY 1",
    "sales.latest": "SELECT order_id, amount, created_at FROM o WHERE created_at < $until ORDER BY 1",
}
READ = {
    "sales.customers": "SELECT customer_id, orders, spent FROM sales.customers ORDER BY 1",
    "sales.daily": "SELECT order_id, customer_id, amount, created_at FROM sales.daily ORDER BY 1",
    "sales.latest": "SELECT order_id, amount, created_at FROM sales.latest ORDER BY 1",
}
NOW = datetime(2024, 6, 1, tzinfo=timezone.utc)
DAYS = ("2024-01-01", "2024-01-02")


@pytest.fixture(scope="module")
def memory_installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """``memory`` registered through a real entry point for this module only."""
    site = install_dist(tmp_path_factory.mktemp("site"), "lakewrap_memory", "lakewrap.substrates",
                        "memory = memory_substrate:Memory")
    tests = str(Path(__file__).parent)
    added = [p for p in (str(site), tests) if p not in sys.path]
    sys.path[:0] = added

    def clear() -> None:  # everything that remembers which substrates there are
        frozen._ADAPTERS.clear()  # ProjectConfig's validator: its [lake] union is the registry's
        registry._table.cache_clear()
        registry.get.cache_clear()
        registry.of_plan.cache_clear()

    clear()
    try:
        assert "memory" in registry.names()
        yield
    finally:
        for p in added:
            sys.path.remove(p)
        clear()


@pytest.fixture(params=sorted(TOML))
def project(request: pytest.FixtureRequest, tmp_path: Path, memory_installed: None) -> tuple[str, Path]:
    name = request.param
    root = tmp_path / name
    for rel, text in {**MODELS, "seeds/raw/orders.csv": ORDERS}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (root / "lakewrap.toml").write_text(TOML[name])
    return name, root


def reference(root: Path, target: str, until: str) -> list[tuple[Any, ...]]:
    con = duckdb.connect()
    try:
        con.execute("CREATE TABLE o AS SELECT * FROM read_csv($p, header = true)",
                    {"p": str(root / "seeds/raw/orders.csv")})
        params = {"until": until} if "$until" in REFERENCE[target] else None
        return [tuple(r) for r in con.execute(REFERENCE[target], params).fetchall()]
    finally:
        con.close()


def contents(root: Path) -> dict[str, list[tuple[Any, ...]]]:
    return {t: [tuple(r) for r in query(root, sql).rows] for t, sql in READ.items()}


def normal(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Values compared by their text (a DECIMAL on one substrate is a DOUBLE on another)."""
    return [tuple(str(float(v)) if isinstance(v, float) or type(v).__name__ == "Decimal" else str(v)
                  for v in r) for r in rows]


def run_days(root: Path, run_id: str) -> list[Any]:
    reports = []
    for day in DAYS:  # two workers: the three models run at once, their first commits may conflict
        report = run_project(root, partition=day, now=NOW, run_id=f"{run_id}-{day}", workers=2)
        assert report.status == "success", [(r.target, r.error) for r in report.results]
        reports.append(report)
    return reports


def test_the_same_project_runs_the_same_on_every_substrate(project: tuple[str, Path]) -> None:
    name, root = project
    substrate: Substrate = registry.resolve(load_config(root).lake)
    assert substrate.name == name
    caps = substrate.capabilities
    # compile: every plan names the substrate whose compiler wrote it
    plans = compile_project(root, partition=DAYS[0], now=NOW, use_cache=False)
    assert {p.target for p in plans} == set(READ)
    for plan in plans:
        assert (plan.substrate, plan.write_path) == (caps.name, caps.write_path)
        assert registry.of_plan(plan.substrate, plan.write_path) is substrate
        assert bool(plan.commits) == (caps.write_path == "pyiceberg")  # pyiceberg commits, not SQL writes

    seeded = seed_project(root, run_id="seed")
    assert seeded.status == "success", [r.error for r in seeded.results]
    reports = run_days(root, "first")
    # what ran is what compiled
    assert {r.target: r.sql_sha256 for r in reports[0].results} == {p.target: p.sql_sha256 for p in plans}
    first = contents(root)
    until = "2024-01-03 00:00:00"
    for target, rows in first.items():
        assert normal(rows) == normal(reference(root, target, until)), target
    assert len(first["sales.daily"]) == 4  # the reference is not empty

    # one typed record per materialization, with its run id and partition
    lake = substrate.open(root)
    for target in ("sales.daily", "sales.latest"):
        records = substrate.materializations(lake, target)
        assert [(m.run_id, m.partition) for m in records] == [(f"first-{d}", d) for d in DAYS]
        assert all(m.target == target and m.sql_sha256 for m in records)
    table = substrate.materializations(lake, "sales.customers")
    assert [(m.run_id, m.partition, m.strategy) for m in table] == [(f"first-{d}", None, "table") for d in DAYS]

    # the run log agrees with the records
    steps = query(root, "SELECT run_id, target, partition_value, status, rows_inserted FROM lakewrap_steps "
                        "WHERE run_id LIKE 'first-%' ORDER BY run_id, target").rows
    by_step = {(r[0], r[1], r[2]): (r[3], r[4]) for r in steps}
    for target in READ:
        for m in substrate.materializations(lake, target):
            assert by_step[(m.run_id, m.target, m.partition)] == ("success", m.rows_inserted), (target, m)
    assert len(by_step) == 3 * len(DAYS)
    runs = query(root, "SELECT run_id, status FROM lakewrap_runs WHERE run_id LIKE 'first-%' ORDER BY 1").rows
    assert [tuple(r) for r in runs] == [(f"first-{d}", "success") for d in DAYS]

    # `lakewrap status` reads the same records
    shown = {st.target: (st.partitions, st.last_run) for st in status(root, now=NOW)}
    assert shown["sales.daily"] == (list(DAYS), f"first-{DAYS[-1]}")
    assert shown["sales.customers"][1] == f"first-{DAYS[-1]}"

    # a second run of the same partition keeps the contents
    again = run_project(root, partition=DAYS[1], now=NOW, run_id="again")
    assert again.status == "success"
    assert contents(root) == first
    assert [m.run_id for m in substrate.materializations(lake, "sales.daily")][-1] == "again"


def test_a_view_is_refused_before_anything_is_written_where_capabilities_say_so(
        project: tuple[str, Path]) -> None:
    name, root = project
    assert registry.resolve(load_config(root).lake).name == name
    (root / "models/sales/recent.sql").write_text("-- materialized view\nSELECT order_id FROM raw.orders\n")
    substrate = registry.resolve(load_config(root).lake)
    if substrate.capabilities.supports_views:
        assert seed_project(root, run_id="seed").status == "success"
        report = run_project(root, ["recent"], now=NOW, run_id="view")
        assert report.status == "success"
        assert len(query(root, "SELECT * FROM sales.recent").rows) == 5
        return
    with pytest.raises(LakewrapError) as info:
        compile_project(root, ["recent"], now=NOW, use_cache=False)
    assert "view" in info.value.message and "recent.sql" in info.value.render()
    report = run_project(root, ["recent"], now=NOW, run_id="view")
    assert report.status == "failed"
    assert "view" in (report.results[0].error or "")
    assert substrate.materializations(substrate.open(root), "sales.recent") == []
