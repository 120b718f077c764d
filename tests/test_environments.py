"""Environments (``[env.<name>]``), defer, ``lakewrap promote`` and the ``state:`` selectors, on real
DuckLake lakes (DuckDB-file catalogs), through the ``lakewrap`` command.

Expected table contents are computed here in plain Python from the seed rows; the other lake's
snapshot list is read straight from its catalog file with plain DuckDB (no lakewrap, no extension).
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import duckdb
import pytest

from envproject import (
    BIG,
    ORDERS,
    ROWS_V1,
    ROWS_V2,
    big_of,
    build_prod,
    cli,
    files,
    make_project,
    query,
    selected,
    write_seed,
)

TOML = """\
# base: the file's own [lake] is not used by these tests' commands
[lake]
data_inlining_row_limit = 0

[env.prod.lake]
path = ".lakewrap/prod.ducklake"
data_path = ".lakewrap/prod"

[env.dev]
defer = "prod"

[env.dev.lake]
path = ".lakewrap/dev.ducklake"
data_path = ".lakewrap/dev"

[env.dev.run]
retries = 2
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path / "p", TOML)


def catalog(root: Path, env: str) -> list[tuple[Any, ...]]:
    """Every snapshot of ``env``'s lake with its changes, read from the catalog file by plain DuckDB."""
    con = duckdb.connect(str(root / ".lakewrap" / f"{env}.ducklake"), read_only=True)
    try:
        return con.execute("SELECT s.snapshot_id, s.schema_version, c.changes_made FROM ducklake_snapshot s "
                           "LEFT JOIN ducklake_snapshot_changes c USING (snapshot_id) ORDER BY 1").fetchall()
    finally:
        con.close()


# --- configuration ---------------------------------------------------------------------------------


def test_an_environment_overrides_lake_and_run_key_by_key(project: Path) -> None:
    from lakewrap.config import load_config

    base, dev, prod = load_config(project, ""), load_config(project, "dev"), load_config(project, "prod")
    assert (base.env, base.lake.path, base.run.retries) == (None, None, 19)
    assert (dev.env, dev.defer, dev.lake.path, dev.run.retries) == ("dev", "prod", ".lakewrap/dev.ducklake", 2)
    assert dev.lake.data_inlining_row_limit == 0  # inherited from [lake]
    assert (prod.defer, prod.lake.data_path, prod.run.retries) == (None, ".lakewrap/prod", 19)
    assert base.envs == dev.envs == ("prod", "dev")


@pytest.mark.parametrize(("edit", "line", "words"), [
    (("retries = 2", "retries = -1"), 17, "env.dev: run.retries: Input should be greater than or equal to 0"),
    (('data_path = ".lakewrap/dev"', 'catalog = "sqlit"'), 14, "env.dev: lake.catalog: Input should be"),
    (("[env.dev.run]", "[env.dev.runs]"), 16, "unknown key `env.dev.runs`"),
    (('defer = "prod"', 'defer = "prd"'), 10, "env.dev.defer: no other environment `prd`"),
    (('defer = "prod"', 'deffer = "prod"'), 10, "unknown key `env.dev.deffer`"),
    (('defer = "prod"', 'defer = "dev"'), 10, "env.dev.defer: no other environment `dev`"),
    (('path = ".lakewrap/dev.ducklake"\ndata_path = ".lakewrap/dev"', 'substrate = "iceberg"'), 10,
     "an Iceberg environment defers to Iceberg lakes only, not to substrate `ducklake` (environment `dev` is "
     "substrate = \"iceberg\", `prod` is \"ducklake\")"),
])
def test_environment_typos_are_located_in_their_section(project: Path, edit: tuple[str, str], line: int,
                                                         words: str) -> None:
    text = TOML.replace(*edit)
    assert text != TOML
    (project / "lakewrap.toml").write_text(text)
    result = cli(project, "compile", code=1)
    assert words in result.output, result.output
    assert f"lakewrap.toml:{line}:" in result.output, result.output
    hint = {"runs": "did you mean `run`?", "prd": "did you mean `prod`?", "deffer": "did you mean `defer`?"}
    for key, want in hint.items():
        if f"`{key}`" in words or f"env.dev.{key}`" in words:
            assert want in result.output


def test_an_unknown_environment_on_the_command_line_lists_the_known_ones(project: Path) -> None:
    result = cli(project, "run", "--env", "prdo", code=2)
    assert "lakewrap.toml: --env prdo: no environment `prdo` in it" in result.output
    assert "did you mean `prod`?" in result.output and "`dev`, `prod`" in result.output
    assert not (project / ".lakewrap").exists()  # refused before anything was opened
    os.environ["LAKEWRAP_ENV"] = "deev"
    try:
        result = cli(project, "status", code=2)
    finally:
        del os.environ["LAKEWRAP_ENV"]
    assert "no environment `deev`" in result.output and "did you mean `dev`?" in result.output


def test_env_selects_the_lake_and_leaves_the_variable_as_it_was(project: Path) -> None:
    cli(project, "seed", "--env", "prod")
    assert "LAKEWRAP_ENV" not in os.environ  # --env set it for the command only
    assert (project / ".lakewrap" / "prod.ducklake").exists()
    assert not (project / ".lakewrap" / "lake.ducklake").exists()
    assert not (project / ".lakewrap" / "dev.ducklake").exists()
    assert sorted((r["id"], r["amount"]) for r in query(project, "prod", "SELECT * FROM raw.orders")) == ROWS_V1


# --- defer -------------------------------------------------------------------------------------------


def test_defer_reads_the_other_lake_at_its_pinned_snapshot_and_leaves_it_unchanged(project: Path) -> None:
    build_prod(project)
    before, before_files = catalog(project, "prod"), files(project / ".lakewrap" / "prod")
    prod_current = before[-1][0]

    cli(project, "run", "--env", "dev", "big")  # dev has no lake yet: raw.orders, sales.orders are prod's

    assert catalog(project, "prod") == before  # the other lake: not one snapshot, not one file more
    assert files(project / ".lakewrap" / "prod") == before_files
    got = sorted((r["id"], r["doubled"]) for r in query(project, "dev", "SELECT * FROM sales.big"))
    assert got == big_of(ROWS_V1)
    records = query(project, "dev", "SELECT target, pins FROM lakewrap.materializations")
    assert [r["target"] for r in records] == ["sales.big"]
    assert json.loads(records[0]["pins"])["deferred"] == {"env": "prod", "snapshot": prod_current,
                                                          "tables": ["sales.orders"]}
    # nothing of the deferred read is left in dev's lake: no table, no view, no schema change record
    names = query(project, "dev", "SELECT table_schema || '.' || table_name AS t FROM information_schema.tables "
                  "WHERE table_catalog = 'lake' AND table_schema = 'sales'")
    assert [r["t"] for r in names] == ["sales.big"]
    changes = " ".join(str(c) for _, _, c in catalog(project, "dev"))
    assert "view" not in changes.lower() and "orders" not in changes
    # reproduce replays reads of dev's lake only: a deferred build is skipped with the reason, never compared
    run_id = query(project, "dev", "SELECT run_id FROM lakewrap.materializations")[0]["run_id"]
    shown = cli(project, "reproduce", run_id, "--env", "dev", "--format", "json").output
    (rep,) = json.loads(shown)["results"]
    assert rep["status"] == "SKIPPED" and "sales.orders from environment `prod`" in rep["detail"], shown

    # A table present in dev's own lake is read there, not deferred: dev seeds other rows and builds
    # its own sales.orders; big then reads dev's.
    write_seed(project, ROWS_V2)
    cli(project, "seed", "--env", "dev")
    cli(project, "run", "--env", "dev", "orders", "big")
    got = sorted((r["id"], r["doubled"]) for r in query(project, "dev", "SELECT * FROM sales.big"))
    assert got == big_of(ROWS_V2)
    pins = [json.loads(r["pins"]) for r in query(project, "dev", "SELECT pins FROM lakewrap.materializations "
                                                  "WHERE target = 'sales.big' ORDER BY started_at")]
    assert "deferred" not in pins[-1]
    assert catalog(project, "prod") == before


def test_defer_pins_the_snapshot_the_handle_first_read(project: Path) -> None:
    """A lake handle pins the other lake once: a prod commit after the pin is not read by dev."""
    from lakewrap.compile import load_project
    from lakewrap.config import load_config
    from lakewrap.execute.lake import Lake
    from lakewrap.steps import materialize_spec, new_run_id
    from lakewrap.substrates.registry import resolve

    build_prod(project)
    config = load_config(project, "dev")
    lake = Lake.open(project, config=config)
    con = lake.connect()  # pins prod now
    pinned = catalog(project, "prod")[-1][0]
    try:
        lake.close(con)
        write_seed(project, ROWS_V2)  # prod moves on after the pin (another process)
        os.environ["LAKEWRAP_ENV"] = "prod"
        try:
            cli(project, "seed", "--env", "prod")
            cli(project, "run", "--env", "prod", "orders")
        finally:
            del os.environ["LAKEWRAP_ENV"]
        assert catalog(project, "prod")[-1][0] > pinned
        con = lake.connect()
        spec = load_project(project, None).select(["big"])[0]
        executor = resolve(config.lake).materializer(lake, new_run_id(), project / "target" / "run" / "t")
        result = materialize_spec(lake, con, executor, spec, None, datetime.now(timezone.utc), None)
        assert result.status == "success", result.error
        rows = sorted(con.execute("SELECT id, doubled FROM sales.big").fetchall())
        pins = json.loads(con.execute("SELECT pins FROM lakewrap.materializations").fetchone()[0])
    finally:
        lake.close(con)
    assert rows == big_of(ROWS_V1)  # what prod held at the pin, not its newer rows
    assert pins["deferred"]["snapshot"] == pinned


def test_a_view_model_cannot_read_a_deferred_table(project: Path) -> None:
    build_prod(project)
    (project / "models" / "sales" / "v.sql").write_text("-- materialized view\nSELECT * FROM sales.orders\n")
    result = cli(project, "run", "--env", "dev", "v", code=1)
    assert "a view model cannot read a deferred table (sales.orders)" in result.output


def test_defer_to_an_environment_without_a_lake_is_a_clear_error(project: Path) -> None:
    result = cli(project, "run", "--env", "dev", "big", code=1)
    assert "environment `prod` (which this environment defers to) has no lake yet" in result.output


# --- promote -----------------------------------------------------------------------------------------


def test_promote_reruns_in_the_target_refuses_a_sql_difference_and_force_runs_it(project: Path) -> None:
    build_prod(project)
    write_seed(project, ROWS_V2)  # prod's raw.orders stays V1: promote must re-run there, not copy dev's rows
    cli(project, "seed", "--env", "dev")
    cli(project, "run", "--env", "dev", "orders", "big")
    assert sorted((r["id"], r["doubled"]) for r in query(project, "dev", "SELECT * FROM sales.big")) == big_of(ROWS_V2)

    # The model edited after dev built it: refused, prod untouched.
    (project / "models" / "sales" / "big.sql").write_text(BIG.replace("amount * 2", "amount * 3"))
    before = catalog(project, "prod")
    result = cli(project, "promote", "--from", "dev", "--to", "prod", "big", code=1)
    assert "models/sales/big.sql: the SQL differs from what `dev` built" in result.output
    assert "--force" in result.output
    assert catalog(project, "prod") == before

    # --force runs it in prod, on prod's data
    cli(project, "promote", "--from", "dev", "--to", "prod", "big", "--force")
    prod_big = sorted((r["id"], r["doubled"]) for r in query(project, "prod", "SELECT * FROM sales.big"))
    assert prod_big == big_of(ROWS_V1, factor=3)
    assert len(catalog(project, "prod")) == len(before) + 1  # one new materialization, run in prod

    # dev builds the edited SQL: promote now succeeds without --force, and equals a direct run in prod
    cli(project, "run", "--env", "dev", "big")
    result = cli(project, "promote", "--from", "dev", "--to", "prod", "big")
    assert "sales.big" in result.output and "success" in result.output
    runs = query(project, "prod", "SELECT command, status FROM lakewrap_runs ORDER BY started_at")
    assert runs[-1] == {"command": "promote", "status": "success"}
    promoted = sorted((r["id"], r["doubled"]) for r in query(project, "prod", "SELECT * FROM sales.big"))
    cli(project, "run", "--env", "prod", "big")
    direct = sorted((r["id"], r["doubled"]) for r in query(project, "prod", "SELECT * FROM sales.big"))
    assert promoted == direct == big_of(ROWS_V1, factor=3)
    shas = query(project, "prod", "SELECT DISTINCT sql_sha256 FROM lakewrap.materializations "
                 "WHERE target = 'sales.big' AND run_id IN (SELECT run_id FROM lakewrap.materializations "
                 "WHERE target = 'sales.big' ORDER BY started_at DESC LIMIT 2)")
    dev_sha = query(project, "dev", "SELECT sql_sha256 FROM lakewrap.materializations WHERE target = 'sales.big' "
                    "ORDER BY started_at DESC LIMIT 1")
    assert [r["sql_sha256"] for r in shas] == [dev_sha[0]["sql_sha256"]]


def test_promote_refuses_a_model_the_source_never_built(project: Path) -> None:
    build_prod(project)
    cli(project, "run", "--env", "dev", "big")
    result = cli(project, "promote", "--from", "dev", "--to", "prod", "top", code=1)
    assert "`dev` never built sales.top" in result.output
    result = cli(project, "promote", "--from", "dev", "--to", "prdo", "big", code=2)
    assert "did you mean `prod`?" in result.output


# --- state selection ---------------------------------------------------------------------------------


def test_state_modified_follows_edits_of_a_model_and_of_an_upstream(project: Path) -> None:
    build_prod(project)
    assert selected(project, "--env", "prod", "state:modified") == set()
    assert selected(project, "--env", "prod", "state:new") == set()

    (project / "models" / "sales" / "big.sql").write_text(BIG.replace("> 15", "> 25"))
    assert selected(project, "--env", "prod", "state:modified") == {"sales.big"}
    assert selected(project, "--env", "prod", "state:modified+") == {"sales.big", "sales.top"}

    (project / "models" / "sales" / "big.sql").write_text(BIG)  # back as built: not modified any more
    (project / "models" / "sales" / "orders.sql").write_text(ORDERS.replace("amount FROM", "amount  FROM"))
    assert selected(project, "--env", "prod", "state:modified") == {"sales.orders"}
    assert selected(project, "--env", "prod", "state:modified+") == {"sales.orders", "sales.big", "sales.top"}

    (project / "models" / "sales" / "fresh.sql").write_text("-- materialized table\nSELECT 1 AS one\n")
    assert selected(project, "--env", "prod", "state:new") == {"sales.fresh"}
    assert selected(project, "--env", "prod", "state:modified") == {"sales.orders", "sales.fresh"}

    # run takes them too: only what changed runs, and then nothing is modified
    result = cli(project, "run", "--env", "prod", "state:modified+")
    assert {"sales.orders", "sales.big", "sales.top", "sales.fresh"} <= set(result.output.split())
    runs = query(project, "prod", "SELECT args FROM lakewrap_runs ORDER BY started_at DESC LIMIT 1")
    # the run records what it selected (resume finishes that), not the selector, which changes as it commits
    assert set(json.loads(runs[0]["args"])["selectors"]) == {"sales.orders", "sales.big", "sales.top", "sales.fresh"}
    assert selected(project, "--env", "prod", "state:modified") == set()
    cli(project, "run", "--env", "prod", "state:modified", code=2)  # nothing selected


def test_state_compares_with_another_environment_given_by_state(project: Path) -> None:
    build_prod(project)
    cli(project, "run", "--env", "dev", "big")
    (project / "models" / "sales" / "big.sql").write_text(BIG.replace("> 15", "> 25"))
    # dev's own lake: orders and top never ran there (new), big changed
    assert selected(project, "--env", "dev", "state:new") == {"sales.orders", "sales.top"}
    assert selected(project, "--env", "dev", "state:modified") == {"sales.orders", "sales.big", "sales.top"}
    # against prod's lake: only big differs
    assert selected(project, "--env", "dev", "--state", "prod", "state:modified") == {"sales.big"}
    assert "LAKEWRAP_STATE" not in os.environ
    result = cli(project, "compile", "state:changed", code=2)
    assert "unknown state selector `state:changed`" in result.output


def test_state_on_a_lake_that_does_not_exist_is_every_model_new(project: Path) -> None:
    assert selected(project, "--env", "prod", "state:new") == {"sales.orders", "sales.big", "sales.top"}
    assert not (project / ".lakewrap").exists()  # read-only: no lake created


def test_state_selection_and_promote_on_iceberg_lakes(tmp_path: Path) -> None:
    """Environments, state: and promote read the substrate's own records: here two Iceberg lakes
    (pyiceberg's embedded SQL catalog)."""
    root = tmp_path / "ice"
    (root / "models" / "sales").mkdir(parents=True)
    (root / "lakewrap.toml").write_text(
        '[lake]\nsubstrate = "iceberg"\n\n'
        '[env.prod.lake]\npath = ".lakewrap/prod.db"\nwarehouse = ".lakewrap/wh-prod"\n'
        'runlog = ".lakewrap/prod-runlog.duckdb"\n\n'
        '[env.dev.lake]\npath = ".lakewrap/dev.db"\nwarehouse = ".lakewrap/wh-dev"\n'
        'runlog = ".lakewrap/dev-runlog.duckdb"\n')
    (root / "models" / "sales" / "orders.sql").write_text(ORDERS)
    (root / "models" / "sales" / "big.sql").write_text(BIG)
    write_seed(root, ROWS_V1)
    for env in ("dev", "prod"):
        cli(root, "seed", "--env", env)
    cli(root, "run", "--env", "dev")
    assert selected(root, "--env", "prod", "state:new") == {"sales.orders", "sales.big"}
    assert selected(root, "--env", "dev", "state:modified") == set()
    (root / "models" / "sales" / "big.sql").write_text(BIG.replace("amount * 2", "amount * 4"))
    assert selected(root, "--env", "dev", "state:modified+") == {"sales.big"}
    result = cli(root, "promote", "--from", "dev", "--to", "prod", "orders", "big", code=1)
    assert "models/sales/big.sql: the SQL differs from what `dev` built" in result.output
    cli(root, "promote", "--from", "dev", "--to", "prod", "orders")
    cli(root, "promote", "--from", "dev", "--to", "prod", "big", "--force")
    got = sorted((r["id"], r["doubled"]) for r in query(root, "prod", "SELECT * FROM sales.big"))
    assert got == big_of(ROWS_V1, factor=4)
