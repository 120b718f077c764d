"""``-- retry N`` on every substrate: a step whose every commit conflicts makes exactly N + 1
attempts (the first and N retries), then fails with the conflict; nothing of it lands.

Each materializer comes from its substrate (``resolve(config.lake).materializer(..., policy=)``),
with the policy built from the model's ``-- retry`` as the scheduler builds it (``attempts =
retries + 1``, ``lakewrap.scheduler.build_steps``). The conflicts are real: just before each
commit, the materializer's ``before_commit`` hook has another writer commit to the same table
(DuckLake: the model's fence row, the conflict point of two writers of a model; Iceberg: a row in
the partition the materialization replaces, or a row of the target the REST catalog's requirement
guards). Sleeps are recorded, not slept.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from icehouse_sql import rest_toml
from lakewrap.compile import compile_plan, load_project
from lakewrap.config import load_config
from lakewrap.execute.retry import RetryPolicy
from lakewrap.plan import make_plan
from lakewrap.runner import run_project
from lakewrap.substrates.registry import key, resolve

UTC = timezone.utc
NOW = datetime(2024, 6, 1, tzinfo=UTC)
DI = ("-- materialized incremental\n-- partitioned daily key=ts\n-- retry 2\n"
      "SELECT id, v, ts FROM raw.src WHERE ts >= $partition_start AND ts < $partition_end\n")
SCHEMA = pa.schema([("id", pa.int32()), ("v", pa.int32()), ("ts", pa.timestamp("us", tz="UTC"))])
ROWS = [{"id": d * 100 + i, "v": 0, "ts": datetime(2024, 1, 1, 6, tzinfo=UTC) + timedelta(days=d)}
        for d in range(2) for i in range(5)]


def iceberg_source(lake: Any) -> None:
    lake.ensure_namespace("raw")
    lake.catalog().create_table(("raw", "src"), schema=SCHEMA).append(pa.Table.from_pylist(ROWS, schema=SCHEMA))


def ducklake_source(root: Path) -> None:
    lake = resolve(load_config(root).lake).open(root)
    con = lake.connect()
    try:
        con.execute("CREATE SCHEMA raw")
        con.execute("CREATE TABLE raw.src (id INTEGER, v INTEGER, ts TIMESTAMPTZ)")
        con.executemany("INSERT INTO raw.src VALUES (?, ?, ?)", [(r["id"], r["v"], r["ts"]) for r in ROWS])
    finally:
        lake.close(con)


def setup(root: Path, substrate: str, rest: str | None) -> None:
    (root / "models" / "out").mkdir(parents=True)
    (root / "models" / "out" / "di.sql").write_text(DI)
    toml = {"ducklake": "[lake]\n", "iceberg": '[lake]\nsubstrate = "iceberg"\n'}.get(substrate)
    (root / "lakewrap.toml").write_text(toml if toml is not None else rest_toml(rest or ""))
    if substrate == "ducklake":
        ducklake_source(root)
    else:
        iceberg_source(resolve(load_config(root).lake).open(root))


@pytest.mark.parametrize("substrate", ["ducklake", "iceberg", "iceberg-sql"])
def test_retry_2_makes_exactly_three_attempts_on_a_conflict_at_every_commit(substrate: str, tmp_path: Path,
                                                                            request: pytest.FixtureRequest) -> None:
    rest = request.getfixturevalue("rest_uri") if substrate == "iceberg-sql" else None
    root = tmp_path / "project"
    root.mkdir()
    setup(root, substrate, rest)
    assert run_project(root, partition="2024-01-01", now=NOW).ok  # the table, its fence / state exist
    config = load_config(root)
    sub = resolve(config.lake)
    assert key(config.lake) == substrate
    lake = sub.open(root, config=config)
    (spec,) = load_project(root, None).select(["out.di"])
    assert spec.retry == 2
    policy = RetryPolicy(attempts=spec.retry + 1)
    compiled = compile_plan(make_plan(spec, substrate=substrate, partition="2024-01-01", now=NOW))
    delays: list[float] = []
    executor: Any = sub.materializer(lake, "run-retry", root / "target" / "retry", policy=policy)
    executor.sleep, executor.rng = delays.append, random.Random(3)
    con = lake.connect() if substrate != "iceberg-sql" else _sql_connect(lake)
    intrusions: list[int] = []

    def intrude(_handle: Any) -> None:  # another writer commits while this attempt's commit is pending
        intrusions.append(1)
        if substrate == "ducklake":
            other = con.cursor()  # its own transaction, autocommitted
            try:
                other.execute(f"USE {lake.alias}")
                other.execute(_fence_update("out.di"), {"run_id": f"intruder-{len(intrusions)}", "sql_sha256": "x"})
            finally:
                other.close()
        else:
            table = lake.load("out.di")
            table.append(table.scan().to_arrow().slice(0, 1))

    executor.before_commit = intrude
    try:
        result = executor.materialize(con, compiled, reads=("raw.src",))
    finally:
        lake.close(con)
    assert result.status == "failed", result
    assert result.attempts == 3 and len(intrusions) == 3
    assert [a["attempt"] for a in result.attempt_errors] == [1, 2, 3]
    assert len(delays) == 2  # backoff between attempts only
    assert all(a["error_class"] in CONFLICTS[substrate] for a in result.attempt_errors), result.attempt_errors
    assert result.error_class in CONFLICTS[substrate]
    assert "run-retry" not in recorded_runs(root, substrate, lake)


# what each substrate calls the conflict (DuckLake classifies DuckDB's error text; Iceberg keeps
# pyiceberg's exception, or the SQL path's Conflict after the state table showed nothing landed)
CONFLICTS = {"ducklake": {"RetryableError"}, "iceberg": {"ValidationException", "CommitFailedException"},
             "iceberg-sql": {"Conflict"}}


def recorded_runs(root: Path, substrate: str, lake: Any) -> set[str]:
    if substrate != "ducklake":
        return {m.run_id for m in resolve(load_config(root).lake).materializations(lake, "out.di")}
    con = lake.connect()
    try:
        return {r[0] for r in con.execute("SELECT run_id FROM lakewrap.materializations").fetchall()}
    finally:
        lake.close(con)


def _sql_connect(lake: Any) -> Any:
    from lakewrap.substrates.iceberg.sql_connect import connect

    return connect(lake)


def _fence_update(target: str) -> str:
    from lakewrap.execute import statements as sql

    return sql.fence_update(target)
