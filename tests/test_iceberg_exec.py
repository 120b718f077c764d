"""Every strategy on a real Iceberg lake (pyiceberg SqlCatalog), against the independent reference.

The scenario tests of ``test_strategies_exec.py`` run unchanged on Iceberg: only the harness
(``icehouse.IcebergLakehouse``/``IcebergChecker``) differs, so the same models, source histories,
expected contents, row counts, warnings and guard refusals are checked, plus every recorded state
through Iceberg time travel and lakewrap's state in the snapshot summaries.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings

import test_strategies_exec as scenarios
from icehouse import IcebergChecker, IcebergLakehouse
from lakehouse import Checker, Lakehouse, assert_same_rows, fetch, partition
from servers import moto_s3  # noqa: F401  (fixture)
from strategy_reference import RefModel, Row, Table

SCENARIOS = [
    "test_delete_insert_daily_with_late_rows",
    "test_merge_unpartitioned_options",
    "test_merge_partitioned_latest_by",
    "test_append_partitioned_and_unpartitioned",
    "test_scd2_timestamp_and_check_with_hard_deletes",
    "test_scd2_timestamp_with_a_watermark_reads_only_new_rows",
    "test_empty_result_warns_and_strict_refuses",
]


@pytest.mark.parametrize("name", SCENARIOS)
def test_scenario_on_iceberg(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scenarios, "Lakehouse", IcebergLakehouse)
    monkeypatch.setattr(scenarios, "Checker", IcebergChecker)
    getattr(scenarios, name)(tmp_path)


# --- cross-substrate differential: the same models over the same random histories ------------------

ICE_EXAMPLES = 60 if os.environ.get("LAKEWRAP_NIGHTLY") == "1" else 6
# No shrinking: one example runs two lakes for up to six steps; a failure prints its full history.
CROSS = settings(max_examples=ICE_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow],
                 phases=[Phase.explicit, Phase.reuse, Phase.generate])


def drive_both(root: Path, files: dict[str, str], models: list[RefModel], source: str, types: dict[str, str],
               steps: list[tuple[Table, str | None]]) -> None:
    """Run every step on a DuckLake, an Iceberg lake written by pyiceberg and an Iceberg lake written by
    DuckDB SQL through a REST catalog; each must match the reference, and the three the same content."""
    from icehouse_sql import RestSqlChecker, RestSqlLakehouse

    rest = RestSqlLakehouse(root / "iceberg-sql", files)
    houses = [(Lakehouse(root / "ducklake", files), Checker), (IcebergLakehouse(root / "iceberg", files),
                                                               IcebergChecker), (rest, RestSqlChecker)]
    checkers = [make(lh, models) for lh, make in houses]
    try:
        for k, (rows, part) in enumerate(steps, 1):
            contents = []
            for (lh, _), checker in zip(houses, checkers, strict=True):
                lh.sql(tables={source: rows}, types={source: types})
                report = lh.run(partition=part, now=scenarios.now(k))
                checker.step(report, {source: rows}, partition=part, now=scenarios.now(k))
                con = lh.connect()
                try:
                    contents.append({m.target: fetch(con, m.target) for m in models})
                finally:
                    con.close()
            ducklake, iceberg, iceberg_sql = contents
            for m in models:
                assert_same_rows(iceberg[m.target], ducklake[m.target], m.columns,
                                 f"step {k} {m.target}: Iceberg differs from DuckLake")
                assert_same_rows(iceberg_sql[m.target], ducklake[m.target], m.columns,
                                 f"step {k} {m.target}: Iceberg written by DuckDB SQL differs from DuckLake")
        for checker in checkers:
            checker.verify()
    finally:
        rest.close()


@pytest.mark.slow
@CROSS
@given(history=scenarios.event_history)
def test_cross_substrate_partitioned_strategies(history: list[tuple[list[tuple[Any, ...]], int, str | None]],
                                                tmp_path_factory: pytest.TempPathFactory) -> None:
    files, models = scenarios.event_models()
    del files["raw/events.sql"]  # a literal model: here the harness sets the source before each run
    rows: list[Row] = []
    next_id = [1]
    steps = []
    for ops, day, glitch in history:
        scenarios.apply_event_ops(rows, ops, next_id)
        steps.append((scenarios.with_glitch(rows, glitch, day), partition(day)))
    drive_both(scenarios.fresh_root(tmp_path_factory), files, models, "raw.events", scenarios.EVENTS, steps)


@pytest.mark.slow
@CROSS
@given(history=scenarios.dim_history)
def test_cross_substrate_scd2_snapshots(history: list[tuple[list[tuple[Any, ...]], str | None]],
                                        tmp_path_factory: pytest.TempPathFactory) -> None:
    specs = scenarios.dim_specs()
    files = {f"out/{t.split('.')[1]}.sql": scenarios.snapshot_header(s) + "FROM raw.dim\n" for t, s in specs.items()}
    models = [scenarios.snapshot_model(t, "raw.dim", s) for t, s in specs.items()]
    rows: list[Row] = []
    gone: list[int] = []
    next_id = [1]
    steps: list[tuple[Table, str | None]] = []
    for ops, glitch in history:
        scenarios.apply_dim_ops(rows, ops, gone, next_id)
        source = [dict(r) for r in rows]
        if glitch == "duplicate_key" and source:
            source.append(source[0] | {"v": 9})
        elif glitch == "null_updated_at" and source:
            source[-1] = source[-1] | {"updated_at": None}
        steps.append((source, None))
    drive_both(scenarios.fresh_root(tmp_path_factory), files, models, "raw.dim", scenarios.DIM, steps)


# --- write path sql: DuckDB writing through the REST adapter ------------------------------------


@pytest.mark.parametrize("name", SCENARIOS)
def test_scenario_on_iceberg_sql(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from icehouse_sql import RestSqlChecker, RestSqlLakehouse

    monkeypatch.setattr(scenarios, "Lakehouse", RestSqlLakehouse)
    monkeypatch.setattr(scenarios, "Checker", RestSqlChecker)
    getattr(scenarios, name)(tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["test_merge_partitioned_latest_by",
                                  "test_scd2_timestamp_and_check_with_hard_deletes"])
def test_scenario_on_iceberg_sql_with_an_s3_warehouse(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      request: pytest.FixtureRequest) -> None:
    """The same scenarios with the warehouse in a bucket on moto's S3 server: DuckDB writes the data
    files to S3 through its S3 secret, the REST adapter's FileIO writes the metadata there."""
    from functools import partial

    from icehouse_sql import AWS_KEY_ID, AWS_SECRET, RestSqlChecker, RestSqlLakehouse

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", AWS_KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", AWS_SECRET)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setattr(scenarios, "Lakehouse", partial(RestSqlLakehouse, s3=request.getfixturevalue("moto_s3")))
    monkeypatch.setattr(scenarios, "Checker", RestSqlChecker)
    getattr(scenarios, name)(tmp_path)
    assert not list(tmp_path.rglob("*.parquet"))  # every data file went to S3


def test_table_full_rebuild_on_iceberg_sql(tmp_path: Path) -> None:
    """``materialized table`` on write path sql (created on the first run, then DELETE + INSERT BY
    NAME in one transaction), step by step against the reference, including a source that becomes
    empty."""
    from icehouse_sql import RestSqlChecker, RestSqlLakehouse
    from strategy_reference import table as ref_table

    s = scenarios
    lh = RestSqlLakehouse(tmp_path, {"out/customer_totals.sql": "-- materialized table\n"
                                     "SELECT customer_id, count(*) AS orders, sum(amount) AS total\n"
                                     "FROM raw.orders GROUP BY customer_id\n"})

    def totals(sources: dict[str, Table], _w: Any) -> Table:
        groups: dict[Any, list[Row]] = {}
        for r in sources["raw.orders"]:
            groups.setdefault(r["customer_id"], []).append(r)
        return [{"customer_id": c, "orders": len(rs),
                 "total": sum(r["amount"] for r in rs if r["amount"] is not None)
                 if any(r["amount"] is not None for r in rs) else None} for c, rs in groups.items()]

    model = RefModel("out.customer_totals", ("customer_id", "orders", "total"), totals,
                     lambda before, rows, _w, _n: ref_table(before, rows))
    checker = RestSqlChecker(lh, [model])
    history = [
        [s.insert(s.order(1, s.at(0, 1), customer=1, amount=5), s.order(2, s.at(0, 2), customer=1, amount=None),
                  s.order(3, s.at(0, 3), customer=2, amount=7, status="shipped"))],
        ["UPDATE raw.orders SET amount = 50, status = 'shipped' WHERE order_id = 1",
         "DELETE FROM raw.orders WHERE order_id = 3", s.insert(s.order(4, s.at(1), customer=3, amount=None))],
        ["DELETE FROM raw.orders"],
        [s.insert(s.order(5, s.at(2), customer=2, amount=1))],
    ]
    try:
        for step, statements in enumerate(history, 1):
            sources = lh.sql(*statements, types={"raw.orders": s.ORDERS},
                             tables={"raw.orders": []} if step == 1 else {}, read=["raw.orders"])
            report = lh.run(now=s.now(step))
            checker.step(report, sources, partition=None, now=s.now(step))
        checker.verify()
    finally:
        lh.close()
