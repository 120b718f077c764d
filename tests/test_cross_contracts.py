"""Cross-model contracts (issue 23, items 1 and 5): a model that reads a column its upstream no longer
returns, or whose upstream's type change breaks its `-- column` contract, is refused by `compile` and
by `run` at the reference's line and column, the upstream named, before anything is written (the
lake's snapshot list compared before and after). Real DuckLake lakes, the CLI in-process."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from helpers import run
from lakewrap.config import load_config
from lakewrap.contracts_graph import model_columns
from lakewrap.project import Project
from lakewrap.substrates.registry import resolve

UP = "-- materialized table\nSELECT CAST(1 AS BIGINT) AS id, CAST(2.5 AS DECIMAL(18, 2)) AS amount\n"
DOWN = ("-- materialized table\n-- column id BIGINT\n-- column total \"DECIMAL(38,2)\"\n"
        "SELECT id, sum(amount) AS total\nFROM app.up\nGROUP BY id\n")
CHANGES = {
    "drop": ("-- materialized table\nSELECT CAST(1 AS BIGINT) AS id\n", (4, 16)),
    "rename": ("-- materialized table\nSELECT CAST(1 AS BIGINT) AS id, CAST(2.5 AS DECIMAL(18, 2)) AS amount_eur\n",
               (4, 16)),
    "retype": ("-- materialized table\nSELECT CAST(1 AS BIGINT) AS id, CAST(2.5 AS DOUBLE) AS amount\n", (4, 27)),
}


def write(root: Path, models: dict[str, str]) -> None:
    for name, text in models.items():
        path = root / "models" / "app" / f"{name}.sql"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def snapshots(root: Path) -> list[int]:
    lake = resolve(load_config(root).lake).open(root)
    con = lake.connect()
    try:
        return [r[0] for r in con.execute(f"SELECT snapshot_id FROM {lake.alias}.snapshots() ORDER BY 1").fetchall()]
    finally:
        lake.close(con)


def lake_sql(root: Path, *statements: str) -> list[tuple[object, ...]]:
    """Statements on the lake as another client would run them (outside lakewrap)."""
    lake = resolve(load_config(root).lake).open(root)
    con = lake.connect()
    try:
        rows: list[tuple[object, ...]] = []
        for sql in statements:
            rows = con.execute(sql).fetchall()
        return rows
    finally:
        lake.close(con)


@pytest.mark.parametrize("change", list(CHANGES))
def test_an_upstream_change_refuses_the_downstream_at_compile_and_run_writes_nothing(tmp_path: Path,
                                                                                   change: str) -> None:
    root = tmp_path / "p"
    write(root, {"up": UP, "down": DOWN})
    code, out, err = run("compile", "--project", str(root))
    assert code == 0 and "error" not in err, err
    code, out, err = run("run", "--project", str(root))
    assert code == 0, out + err
    before = snapshots(root)
    rows_before = lake_sql(root, "SELECT * FROM app.up ORDER BY ALL")

    text, (line, column) = CHANGES[change]
    write(root, {"up": text})
    for command in ("compile", "run"):
        code, out, err = run(command, "--project", str(root))
        assert code == 1, (command, out, err)
        assert f"error: models/app/down.sql:{line}:{column}: " in err, (command, err)
        assert "`app.up` (models/app/up.sql)" in err and "nothing was run" in err, err
        caret = err.splitlines()[2]
        assert caret.index("^") == 4 + column - 1, err  # under the reference, past the 4-space indent
    if change == "rename":
        assert "did you mean `amount_eur`?" in err
    if change == "retype":
        assert "declared DECIMAL(38,2)" in err and "returns DOUBLE" in err
    assert snapshots(root) == before  # nothing committed: not even the changed upstream
    assert lake_sql(root, "SELECT * FROM app.up ORDER BY ALL") == rows_before


def test_select_star_chains_carry_the_change(tmp_path: Path) -> None:
    root = tmp_path / "p"
    write(root, {
        "a": "-- materialized table\nSELECT 1 AS id, 'x' AS label, 3 AS qty\n",
        "b": "-- materialized view\nSELECT * EXCLUDE (qty) FROM app.a\n",
        "c": "-- materialized table\nWITH base AS (SELECT * FROM app.b)\nSELECT base.id, upper(base.label) AS label\n"
             "FROM base\n",
    })
    code, _, err = run("compile", "--project", str(root))
    assert code == 0, err
    known = model_columns(Project.load(root)).known
    assert known["app.b"].columns == (("id", "INTEGER"), ("label", "VARCHAR"))  # DuckDB bound the chain
    assert known["app.c"].origin == "duckdb"

    write(root, {"a": "-- materialized table\nSELECT 1 AS id, 'x' AS name, 3 AS qty\n"})
    code, _, err = run("compile", "--project", str(root))
    assert code == 1
    assert "error: models/app/c.sql:3:23: column `label` is not returned by upstream model `app.b`" in err, err


def built_then_renamed(root: Path, models: dict[str, str]) -> list[int]:
    """The models run on a source `raw.people (id, name)`, then `name` renamed by another client;
    the lake's snapshot list after that."""
    write(root, models)
    lake_sql(root, "CREATE SCHEMA raw", "CREATE TABLE raw.people AS SELECT 1 AS id, 'ann' AS name")
    code, out, err = run("run", "--project", str(root))
    assert code == 0, out + err
    lake_sql(root, "ALTER TABLE raw.people RENAME COLUMN name TO full_name")
    return snapshots(root)


def test_a_source_changed_outside_lakewrap_is_caught_by_run(tmp_path: Path) -> None:
    root = tmp_path / "p"
    before = built_then_renamed(root, {"names": "-- materialized table\nSELECT id, name AS who\nFROM raw.people\n"})
    code, _, err = run("compile", "--project", str(root))
    assert code == 0, err  # compile opens no lake: the source's columns are the lake's to say
    code, out, err = run("run", "--project", str(root))
    assert code == 1, out + err
    assert "error: models/app/names.sql:2:12: " in err and "full_name" in err, err  # at `name`, located
    assert snapshots(root) == before
    assert lake_sql(root, "SELECT * FROM app.names") == [(1, "ann")]
    # the source's columns are the lake's: known by `run` (DuckDB's binder on them), not by `compile`
    assert model_columns(Project.load(root)).known["app.names"].columns == (("id", None), ("who", None))


def test_a_source_change_that_breaks_a_rebuilt_chain_refuses_the_whole_run(tmp_path: Path) -> None:
    root = tmp_path / "p"
    before = built_then_renamed(root, {"people": "-- materialized table\nSELECT * FROM raw.people\n",
                                       "names": "-- materialized table\nSELECT id, name AS who\nFROM app.people\n"})
    code, out, err = run("run", "--project", str(root))
    assert code == 1, out + err
    assert ("error: models/app/names.sql:2:12: column `name` is not returned by upstream model `app.people`"
            in err), err
    assert "did you mean `full_name`?" in err
    assert snapshots(root) == before  # app.people, which would have committed first, was not run either
    assert lake_sql(root, "SELECT * FROM app.people") == [(1, "ann")]


def test_a_model_whose_columns_cannot_be_known_is_a_warning(tmp_path: Path) -> None:
    root = tmp_path / "p"
    write(root, {
        "wide": "-- materialized table\nSELECT * FROM raw.events\n",
        "narrow": "-- materialized table\nSELECT id FROM app.wide\n",
    })
    for _ in range(2):  # the second compile is served by the cache, and says it again
        code, _out, err = run("compile", "--project", str(root))
        assert code == 0, err
        assert ("warning: models/app/wide.sql: the columns of `app.wide` cannot be known (it selects `*`"
                in err), err
        assert "(app.narrow) are not checked against it" in err
    assert model_columns(Project.load(root)).known["app.wide"].columns is None


def test_the_refusal_shown_in_the_docs_is_what_the_example_project_prints(tmp_path: Path) -> None:
    root = tmp_path / "shop"
    shutil.copytree(Path(__file__).resolve().parent.parent / "examples" / "shop", root)
    orders = root / "models" / "sales" / "orders.sql"
    orders.write_text(orders.read_text().replace("DECIMAL(18, 2)) AS amount,", "DECIMAL(18, 2)) AS amount_total,"))
    code, _, err = run("compile", "--project", str(root))
    assert code == 1
    docs = (Path(__file__).resolve().parent.parent / "docs" / "contracts.md").read_text()
    shown = docs.split("## Across models", 1)[1].split("```text\n", 1)[1].split("```", 1)[0]
    assert err == shown


READS = {  # SELECT → {(column, the tables one of which must return it)}
    "SELECT a.id, b.x FROM s.t AS a JOIN s.u AS b ON a.id = b.id": {"id": ["s.t"], "x": ["s.u"],
                                                                     "ID": ["s.u"]},  # b.id: the same name, other table
    "SELECT id, amount * 2 AS amount FROM s.t WHERE amount > 0": {"id": ["s.t"], "amount": ["s.t"]},
    "WITH base AS (SELECT * FROM s.t) SELECT base.id FROM base": {"id": ["s.t"]},
    "WITH base AS (SELECT id AS k FROM s.t) SELECT base.k FROM base": {"id": ["s.t"]},  # k is the CTE's own
    "SELECT list_transform(l, y -> y + 1) AS z FROM s.t": {"l": ["s.t"]},  # a lambda's name is no column
    "SELECT t.s.f FROM s.t AS t": {},  # a struct field: not certain
    "SELECT id FROM s.t WHERE id IN (SELECT id FROM s.u WHERE flag)": {"id": ["s.t"]},  # correlated: left out
    "SELECT x FROM read_csv('f.csv')": {},  # a table function's columns are not known
}


@pytest.mark.parametrize("sql", list(READS))
def test_column_reads_name_only_the_certain_tables(sql: str) -> None:
    from lakewrap.column_reads import column_reads
    from lakewrap.sqltext import parse_body

    statement = parse_body(sql, "m.sql")[0]
    got = json.loads(column_reads(statement.tree, statement) or "{}")
    want = {(name.lower(), tuple(keys)) for name, keys in READS[sql].items()}
    assert {(name.lower(), tuple(keys)) for name, _, _, keys in got["reads"]} == want
    for name, offset, _, _ in got["reads"]:
        assert sql[offset:].lower().lstrip('"').startswith(name.lower()) or sql[offset:offset + 1].isalpha()
