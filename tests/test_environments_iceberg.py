"""Defer, promote and ``state:`` against another environment, on Iceberg lakes: two pyiceberg embedded
SQL catalogs (SQLite files) are two environments; a third case defers to a prod written by DuckDB SQL
through a real REST catalog (the test REST adapter on 127.0.0.1).

Expected table contents are computed here in plain Python from the seed rows; the other catalog's
state (every table's metadata file and snapshot ids) is read with pyiceberg's own catalog, and its
warehouse's files listed, before and after.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from envproject import BIG, ROWS_V1, ROWS_V2, big_of, build_prod, cli, files, make_project, query, selected, write_seed

ENVS = """\
[lake]
substrate = "iceberg"

[env.prod.lake]
path = ".lakewrap/prod.db"
warehouse = ".lakewrap/wh-prod"
runlog = ".lakewrap/prod-runlog.duckdb"

[env.dev]
defer = "prod"

[env.dev.lake]
path = ".lakewrap/dev.db"
warehouse = ".lakewrap/wh-dev"
runlog = ".lakewrap/dev-runlog.duckdb"
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path / "p", ENVS)


def big_rows(root: Path, env: str) -> list[tuple[int, int]]:
    return sorted((r["id"], r["doubled"]) for r in query(root, env, "SELECT * FROM sales.big"))


def open_catalog(root: Path, env: str) -> Any:
    from pyiceberg.catalog.sql import SqlCatalog

    warehouse = (root / ".lakewrap" / f"wh-{env}").as_uri()
    return SqlCatalog("lakewrap", uri=f"sqlite:///{root / '.lakewrap' / f'{env}.db'}", warehouse=warehouse)


def catalog_state(root: Path, env: str) -> dict[str, tuple[str, list[int]]]:
    """Every table of ``env``'s catalog: its metadata file and snapshot ids, read by pyiceberg alone."""
    cat = open_catalog(root, env)
    out = {}
    for ns in cat.list_namespaces():
        for ident in cat.list_tables(ns):
            table = cat.load_table(ident)
            out[".".join(ident)] = (table.metadata_location, [s.snapshot_id for s in table.snapshots()])
    return out


def dev_records(root: Path, target: str) -> list[Any]:
    from lakewrap.config import load_config
    from lakewrap.substrates.registry import resolve

    config = load_config(root, "dev")
    sub = resolve(config.lake)
    return sub.materializations(sub.open(root, config=config, read_only=True), target)


# --- defer -------------------------------------------------------------------------------------------


def test_defer_reads_the_other_catalog_at_its_pinned_snapshot_and_leaves_it_unchanged(project: Path) -> None:
    build_prod(project)
    before, before_files = catalog_state(project, "prod"), files(project / ".lakewrap" / "wh-prod")
    orders_pin = before["sales.orders"][1][-1]

    cli(project, "run", "--env", "dev", "big")  # dev has no lake yet: sales.orders is prod's

    assert catalog_state(project, "prod") == before  # not one snapshot, not one metadata file more
    assert files(project / ".lakewrap" / "wh-prod") == before_files
    assert big_rows(project, "dev") == big_of(ROWS_V1)
    assert sorted(catalog_state(project, "dev")) == ["sales.big"]  # nothing of prod's was copied
    (m,) = dev_records(project, "sales.big")
    assert m.pins == {"deferred": {"env": "prod", "tables": ["sales.orders"],
                                   "snapshots": {"sales.orders": orders_pin}}}

    # explain prints the pin with the environment's name; reproduce skips it, naming both
    shown = cli(project, "explain", m.run_id, "--env", "dev").output
    pins_line = next(line for line in shown.splitlines() if line.startswith("-- pins:"))
    assert json.loads(pins_line.removeprefix("-- pins:").strip()) == m.pins, shown
    out = json.loads(cli(project, "reproduce", m.run_id, "--env", "dev", "--format", "json").output)
    (rep,) = out["results"]
    assert rep["status"] == "SKIPPED", rep
    assert f"sales.orders from environment `prod` (deferred, at its snapshots sales.orders {orders_pin})" \
        in rep["detail"], rep

    # dev builds its own sales.orders from other rows: big then reads dev's table, nothing deferred
    write_seed(project, ROWS_V2)
    cli(project, "seed", "--env", "dev")
    cli(project, "run", "--env", "dev", "orders", "big")
    assert big_rows(project, "dev") == big_of(ROWS_V2)
    last = dev_records(project, "sales.big")[-1]
    assert "deferred" not in last.pins and set(last.pins) == {"sales.orders"}, last.pins
    assert last.pins["sales.orders"] == catalog_state(project, "dev")["sales.orders"][1][-1]
    assert catalog_state(project, "prod") == before
    assert files(project / ".lakewrap" / "wh-prod") == before_files


def test_a_chain_of_deferred_reads_and_a_select_star_probe(project: Path) -> None:
    """top reads big, which dev never built: deferred too; a `SELECT *` merge probes its columns
    over the deferred view."""
    build_prod(project)
    (project / "models" / "sales" / "copy.sql").write_text(
        "-- materialized incremental\n-- unique_key id\nSELECT * FROM sales.big\n")
    cli(project, "run", "--env", "dev", "top", "copy")
    assert query(project, "dev", "SELECT top FROM sales.top") == [{"top": max(d for _, d in big_of(ROWS_V1))}]
    got = sorted((r["id"], r["doubled"]) for r in query(project, "dev", "SELECT * FROM sales.copy"))
    assert got == big_of(ROWS_V1)
    assert dev_records(project, "sales.top")[-1].pins["deferred"]["tables"] == ["sales.big"]


def test_defer_pins_each_table_once_per_lake_handle(project: Path) -> None:
    """A lake handle pins prod's tables once: a prod commit after the pin is not read by dev."""
    from lakewrap.compile import load_project
    from lakewrap.config import load_config
    from lakewrap.execute.iceberg import IcebergLake
    from lakewrap.steps import materialize_spec, new_run_id
    from lakewrap.substrates.registry import resolve

    build_prod(project)
    config = load_config(project, "dev")
    lake = IcebergLake.open(project, config=config)
    pinned = lake.defer.table("sales.orders")  # the first deferred read pins every prod table
    assert pinned is not None and pinned.snapshot_id == catalog_state(project, "prod")["sales.orders"][1][-1]
    write_seed(project, ROWS_V2)  # prod moves on after the pin
    os.environ["LAKEWRAP_ENV"] = "prod"
    try:
        cli(project, "seed", "--env", "prod")
        cli(project, "run", "--env", "prod", "orders")
    finally:
        del os.environ["LAKEWRAP_ENV"]
    assert catalog_state(project, "prod")["sales.orders"][1][-1] != pinned.snapshot_id
    con = lake.connect()
    try:
        spec = load_project(project, None).select(["big"])[0]
        executor = resolve(config.lake).materializer(lake, new_run_id(), project / "target" / "run" / "t")
        result = materialize_spec(lake, con, executor, spec, None, datetime.now(timezone.utc), None)
        assert result.status == "success", result.error
    finally:
        lake.close(con)
    assert big_rows(project, "dev") == big_of(ROWS_V1)  # what prod held at the pin, not its newer rows
    assert dev_records(project, "sales.big")[-1].pins["deferred"]["snapshots"] == {
        "sales.orders": pinned.snapshot_id}
    assert big_rows(project, "prod") == big_of(ROWS_V1)  # prod's own big was not rebuilt


def test_defer_to_an_environment_without_a_lake_is_a_clear_error(project: Path) -> None:
    result = cli(project, "run", "--env", "dev", "big", code=1)
    assert "environment `prod` (which this environment defers to) has no lake yet" in result.output
    assert not (project / ".lakewrap" / "prod.db").exists()  # reading it created nothing


@pytest.mark.parametrize(("edit", "words"), [
    (('path = ".lakewrap/dev.db"\nwarehouse = ".lakewrap/wh-dev"\n', 'catalog = "rest"\nwrite_path = "sql"\n'
      'rest = { uri = "http://127.0.0.1:9" }\n'),
     "deferring is not implemented on Iceberg's write path \"sql\""),
    (('[env.prod.lake]\npath = ".lakewrap/prod.db"\nwarehouse = ".lakewrap/wh-prod"\n'
      'runlog = ".lakewrap/prod-runlog.duckdb"\n', '[env.prod.lake]\nsubstrate = "ducklake"\n'
      'path = ".lakewrap/prod.ducklake"\n'),
     "an Iceberg environment defers to Iceberg lakes only, not to substrate `ducklake`"),
])
def test_defer_refusals_are_located_on_the_defer_line(project: Path, edit: tuple[str, str], words: str) -> None:
    text = ENVS.replace(*edit)
    assert text != ENVS
    (project / "lakewrap.toml").write_text(text)
    result = cli(project, "compile", code=1)
    assert words in result.output and "env.dev.defer: " in result.output, result.output
    line = text.splitlines().index('defer = "prod"') + 1
    assert f"lakewrap.toml:{line}:" in result.output, result.output


# --- promote and state against prod -----------------------------------------------------------------


def test_promote_and_state_modified_against_prod(project: Path) -> None:
    build_prod(project)
    cli(project, "run", "--env", "dev", "big")  # deferred read of prod's sales.orders
    # nothing differs from prod: state:modified+ against prod selects nothing
    assert selected(project, "--env", "dev", "--state", "prod", "state:modified+") == set()

    prod_big = catalog_state(project, "prod")["sales.big"][1]
    cli(project, "promote", "--from", "dev", "--to", "prod", "big")  # built with a deferred read: no --force
    after = catalog_state(project, "prod")["sales.big"][1]
    assert after[: len(prod_big)] == prod_big and len(after) > len(prod_big)  # re-run in prod: new snapshots
    assert big_rows(project, "prod") == big_of(ROWS_V1)

    (project / "models" / "sales" / "big.sql").write_text(BIG.replace("amount * 2", "amount * 3"))
    assert selected(project, "--env", "dev", "--state", "prod", "state:modified") == {"sales.big"}
    assert selected(project, "--env", "dev", "--state", "prod", "state:modified+") == {"sales.big", "sales.top"}
    refused = cli(project, "promote", "--from", "dev", "--to", "prod", "big", code=1)
    assert "models/sales/big.sql: the SQL differs from what `dev` built" in refused.output
    assert catalog_state(project, "prod")["sales.big"][1] == after  # refused: nothing written
    cli(project, "run", "--env", "dev", "big")
    assert big_rows(project, "dev") == big_of(ROWS_V1, factor=3)
    cli(project, "promote", "--from", "dev", "--to", "prod", "big")
    assert big_rows(project, "prod") == big_of(ROWS_V1, factor=3)
    # prod now built what dev built: nothing is modified against it any more
    assert selected(project, "--env", "dev", "--state", "prod", "state:modified+") == set()


# --- prod written by DuckDB SQL through a REST catalog -----------------------------------------------


def test_defer_to_a_prod_written_through_a_rest_catalog(tmp_path: Path, rest_uri: str) -> None:
    """dev (pyiceberg, embedded catalog) defers to a prod on write path sql behind the REST adapter."""
    toml = ENVS.replace('[env.prod.lake]\npath = ".lakewrap/prod.db"\nwarehouse = ".lakewrap/wh-prod"\n'
                        'runlog = ".lakewrap/prod-runlog.duckdb"\n',
                        f'[env.prod.lake]\ncatalog = "rest"\nwrite_path = "sql"\n'
                        f'runlog = ".lakewrap/prod-runlog.duckdb"\n\n[env.prod.lake.rest]\nuri = "{rest_uri}"\n')
    root = make_project(tmp_path / "p", toml)
    build_prod(root)
    from pyiceberg.catalog.rest import RestCatalog

    rest = RestCatalog("check", uri=rest_uri)

    def state() -> dict[str, tuple[str, list[int]]]:
        return {".".join(i): (t.metadata_location, [s.snapshot_id for s in t.snapshots()])
                for ns in rest.list_namespaces() for i in rest.list_tables(ns) for t in [rest.load_table(i)]}

    before = state()
    server_files = files(tmp_path / "rest-server" / "wh")
    cli(root, "run", "--env", "dev", "big")
    assert big_rows(root, "dev") == big_of(ROWS_V1)
    assert state() == before
    assert files(tmp_path / "rest-server" / "wh") == server_files
    (m,) = dev_records(root, "sales.big")
    assert m.pins["deferred"]["snapshots"] == {"sales.orders": before["sales.orders"][1][-1]}


def test_stale_sees_a_deferred_table_once_this_catalog_has_its_own(project: Path) -> None:
    """prod's commits to a deferred table are not seen (its pin is not in `lakewrap.pins`); once dev
    builds the table itself, what read prod's is stale and `run --stale` rebuilds it from dev's."""
    build_prod(project)
    cli(project, "run", "--env", "dev", "big")
    nothing = json.loads(cli(project, "run", "--env", "dev", "--stale", "--format", "json").output)
    assert nothing["results"] == [], nothing
    write_seed(project, ROWS_V2)
    cli(project, "seed", "--env", "dev")
    cli(project, "run", "--env", "dev", "orders")
    rebuilt = json.loads(cli(project, "run", "--env", "dev", "--stale", "--format", "json").output)
    assert [(r["target"], r["status"]) for r in rebuilt["results"]] == [("sales.big", "success")], rebuilt
    assert big_rows(project, "dev") == big_of(ROWS_V2)
    assert "deferred" not in dev_records(project, "sales.big")[-1].pins
