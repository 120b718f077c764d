"""Seeds with types (docs/seeds.md): a sidecar ``seeds/<schema>/<table>.toml`` declares column types
and the CSV's dialect; a bad sidecar is refused at its line:column before anything loads; a value
that does not convert is reported at the CSV's line and column, nothing written; an unchanged CSV
(and sidecar) is not loaded again: no new snapshot, ``unchanged`` in the results and the run log.

Real lakes on every built-in substrate: DuckLake (DuckDB-file catalog), Iceberg through pyiceberg
(SQLite catalog) and Iceberg written by DuckDB SQL (the test REST adapter). The expected rows are
read from the CSV by Python's ``csv`` module, independently of DuckDB.
"""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from icehouse_sql import rest_toml
from lakewrap import Project
from lakewrap.config import load_config
from lakewrap.errors import ProjectError
from lakewrap.seedfiles import seeds
from lakewrap.substrates.registry import resolve

LAKEWRAP = str(Path(sys.executable).with_name("lakewrap"))
SUBSTRATES = ("ducklake", "iceberg", "iceberg-sql")
CSV = ('id,amount,day,note,ratio\n'
       '1,4.99,2024-01-01,"a, quoted\nnote",0.5\n'
       '2,446.90,2024-01-02,plain,1.25\n'
       '3,0.10,2024-01-03,,2\n')
SIDECAR = '# the types of raw.orders\n[columns]\namount = "DECIMAL(12, 2)"\nid = "INTEGER"\nday = "DATE"\n'


def project(root: Path, substrate: str, request: pytest.FixtureRequest, csv_text: str = CSV,
            sidecar: str | None = SIDECAR) -> Path:
    (root / "seeds" / "raw").mkdir(parents=True)
    (root / "seeds" / "raw" / "orders.csv").write_text(csv_text)
    if sidecar is not None:
        (root / "seeds" / "raw" / "orders.toml").write_text(sidecar)
    toml = {"ducklake": "[lake]\n", "iceberg": '[lake]\nsubstrate = "iceberg"\n'}.get(substrate)
    (root / "lakewrap.toml").write_text(toml if toml is not None else rest_toml(request.getfixturevalue("rest_uri")))
    return root


def lake_snapshots(root: Path) -> list[Any]:
    """Every snapshot of the lake: DuckLake's snapshot list; on Iceberg, each table's snapshot ids."""
    lake = resolve(load_config(root).lake).open(root)
    if load_config(root).lake.substrate == "ducklake":
        con = lake.connect()
        try:
            return [r[0] for r in con.execute("SELECT snapshot_id FROM lake.snapshots() ORDER BY 1").fetchall()]
        finally:
            lake.close(con)
    catalog = lake.catalog()
    out = []
    for ns in catalog.list_namespaces():
        for ident in catalog.list_tables(ns):
            table = catalog.load_table(ident)
            out += [(".".join(ident), s.snapshot_id) for s in table.snapshots()]
    return sorted(out)


def reference(csv_text: str) -> list[tuple[Any, ...]]:
    """The rows as the declared types read them, by Python's csv module (NULL for an empty field)."""
    rows = list(csv.reader(csv_text.splitlines(keepends=True)))[1:]
    return [(int(i), Decimal(a), date.fromisoformat(d), n or None, float(r)) for i, a, d, n, r in rows]


def table_rows(p: Project) -> list[tuple[Any, ...]]:
    return sorted(tuple(r.values()) for r in p.query("SELECT * FROM raw.orders").to_pylist())


def run_steps(p: Project, run_id: str) -> list[dict[str, Any]]:
    return p.query(f"SELECT target, status, attempts, snapshot_id FROM lakewrap_steps "
                   f"WHERE run_id = '{run_id}'").to_pylist()


@pytest.mark.parametrize("substrate", SUBSTRATES)
def test_typed_seed_has_the_declared_types_and_an_unchanged_reseed_writes_nothing(
        tmp_path: Path, substrate: str, request: pytest.FixtureRequest) -> None:
    root = project(tmp_path, substrate, request)
    p = Project(root)
    first = p.seed()
    assert first.ok and [r.status for r in first.results] == ["success"]
    described = {r["column_name"]: r["column_type"] for r in p.query("DESCRIBE raw.orders").to_pylist()}
    # declared: exactly those types; not declared: DuckDB's detection (note VARCHAR, ratio DOUBLE)
    assert described == {"id": "INTEGER", "amount": "DECIMAL(12,2)", "day": "DATE", "note": "VARCHAR",
                         "ratio": "DOUBLE"}
    assert table_rows(p) == reference(CSV)

    before = lake_snapshots(root)
    again = p.seed()
    assert again.ok and [(r.status, r.snapshot_id, r.attempts) for r in again.results] == [("unchanged", None, 0)]
    assert lake_snapshots(root) == before  # no commit at all
    assert run_steps(p, again.run_id) == [{"target": "raw.orders", "status": "unchanged", "attempts": 0,
                                           "snapshot_id": None}]
    saved = json.loads((root / "target" / "run_results.json").read_text())
    assert saved["run_id"] == again.run_id and saved["counts"]["unchanged"] == 1
    assert [r["status"] for r in saved["results"]] == ["unchanged"]

    changed = CSV + "4,12.00,2024-01-04,new,3.5\n"
    (root / "seeds" / "raw" / "orders.csv").write_text(changed)
    third = p.seed()
    assert [r.status for r in third.results] == ["success"] and third.results[0].rows_inserted == 4
    assert len(lake_snapshots(root)) > len(before)
    assert table_rows(p) == reference(changed)

    # the sidecar alone changes the statement: loaded again, with the new type
    (root / "seeds" / "raw" / "orders.toml").write_text(SIDECAR.replace("DECIMAL(12, 2)", "DECIMAL(10, 3)"))
    fourth = p.seed()
    assert [r.status for r in fourth.results] == ["success"]
    assert {r["column_name"]: r["column_type"] for r in p.query("DESCRIBE raw.orders").to_pylist()}["amount"] \
        == "DECIMAL(10,3)"
    assert [r.status for r in p.seed().results] == ["unchanged"]


@pytest.mark.parametrize("substrate", ["ducklake", "iceberg"])
def test_a_table_changed_outside_lakewrap_is_seeded_again(tmp_path: Path, substrate: str,
                                                          request: pytest.FixtureRequest) -> None:
    root = project(tmp_path, substrate, request)
    p = Project(root)
    assert p.seed().ok
    lake = resolve(load_config(root).lake).open(root)
    if substrate == "ducklake":
        con = lake.connect()
        try:
            con.execute("DELETE FROM raw.orders WHERE id = 2")
        finally:
            lake.close(con)
    else:
        table = lake.load("raw.orders")
        table.delete("id = 2")
    assert len(table_rows(p)) == 2
    report = p.seed()
    assert [r.status for r in report.results] == ["success"]  # the table no longer holds the CSV
    assert table_rows(p) == reference(CSV)
    assert [r.status for r in p.seed().results] == ["unchanged"]


BAD = ('id,amount,day,note,ratio\n'
       '1,4.99,2024-01-01,"spans\ntwo lines",0.5\n'
       '2,4,46.90,2024-01-02,plain,1.25\n')


@pytest.mark.parametrize("substrate", ["ducklake", "iceberg"])
def test_a_value_that_does_not_convert_is_located_at_the_csv_line_and_nothing_is_written(
        tmp_path: Path, substrate: str, request: pytest.FixtureRequest) -> None:
    root = project(tmp_path, substrate, request)
    p = Project(root)
    assert p.seed().ok
    before, rows = lake_snapshots(root), table_rows(p)
    bad = CSV + "4,12.O0,2024-01-04,typo,3.5\n"  # the letter O: physical line 6 (a value spans lines 2-3)
    (root / "seeds" / "raw" / "orders.csv").write_text(bad)
    done = subprocess.run([LAKEWRAP, "seed", "--project", str(root)], capture_output=True, text=True,
                          env={"NO_COLOR": "1", "PATH": "/usr/bin:/bin"}, timeout=300)
    assert done.returncode == 1
    assert ("error: seeds/raw/orders.csv:6:3: value '12.O0' of column `amount` does not convert to "
            "DECIMAL(12, 2) (declared in seeds/raw/orders.toml)\n"
            "    4,12.O0,2024-01-04,typo,3.5\n"
            "      ^\n") in done.stderr, done.stderr
    assert "hint: fix the value, declare another type" in done.stderr
    assert lake_snapshots(root) == before and table_rows(p) == rows  # nothing written
    result = json.loads((root / "target" / "run_results.json").read_text())["results"][0]
    assert result["status"] == "failed"
    assert result["error_location"] == {"path": "seeds/raw/orders.csv", "line": 6, "column": 3}
    assert result["warnings"] == []  # the lake was asked whether it landed (it did not), without an error


def test_the_first_bad_value_is_reported_and_the_others_counted(tmp_path: Path,
                                                                request: pytest.FixtureRequest) -> None:
    text = CSV + "4,x,2024-01-04,a,1\n5,2,2024-13-01,b,1\n6,y,2024-01-06,c,1\n"
    root = project(tmp_path, "ducklake", request, csv_text=text)
    report = Project(root).seed()
    (result,) = report.results
    assert result.status == "failed" and result.error_location == {"path": "seeds/raw/orders.csv", "line": 6,
                                                                   "column": 3}
    assert "value 'x' of column `amount`" in (result.error or "")
    assert "2 more values of the file do not read either" in (result.error or "")
    assert not (root / ".lakewrap" / "lake.ducklake").exists() or lake_snapshots(root)[-1] <= 1


def test_dialect_keys_header_false_delimiter_null_and_date_format(tmp_path: Path,
                                                                  request: pytest.FixtureRequest) -> None:
    text = "1;'a;b';31/01/2024;NA\n2;'it''s';01/02/2024;7.5\n"
    sidecar = ('header = false\ndelimiter = ";"\nquote = "\'"\nnull = ["NA"]\ndate_format = "%d/%m/%Y"\n'
               '[columns]\nid = "BIGINT"\nlabel = "VARCHAR"\nday = "DATE"\nscore = "DECIMAL(4, 1)"\n')
    root = project(tmp_path, "ducklake", request, csv_text=text, sidecar=sidecar)
    p = Project(root)
    assert p.seed().ok
    assert [(r["column_name"], r["column_type"]) for r in p.query("DESCRIBE raw.orders").to_pylist()] == [
        ("id", "BIGINT"), ("label", "VARCHAR"), ("day", "DATE"), ("score", "DECIMAL(4,1)")]
    assert sorted(tuple(r.values()) for r in p.query("SELECT * FROM raw.orders").to_pylist()) == [
        (1, "a;b", date(2024, 1, 31), None), (2, "it's", date(2024, 2, 1), Decimal("7.5"))]


def test_an_undeclared_column_keeps_the_detected_type(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    root = project(tmp_path, "ducklake", request, sidecar=None)
    p = Project(root)
    assert p.seed().ok
    described = {r["column_name"]: r["column_type"] for r in p.query("DESCRIBE raw.orders").to_pylist()}
    assert described["amount"] == "DOUBLE" and described["id"] == "BIGINT"  # as before sidecars: detected


@pytest.mark.parametrize(("sidecar", "where", "message", "hint"), [
    ('delimter = ";"\n', (1, 1), "unknown key `delimter`", "did you mean `delimiter`?"),
    ('header = true\n\n[columns]\n  amont = "DECIMAL(12, 2)"\n', (4, 3),
     "column `amont` is not in seeds/raw/orders.csv", "did you mean `amount`?"),
    ('[columns]\namount = "DECIMEL(12, 2)"\n', (2, 10), "DuckDB does not know the type 'DECIMEL(12, 2)'",
     'Did you mean "DECIMAL"?'),
    ('[columns]\namount = "DECIMAL(40, 2)"\n', (2, 10), "DECIMAL type width must be between 1 and 38", None),
    ('columns = { id = "INTEGER", "amount" = 5 }\n', (1, 40), "the type of column `amount` must be a string", None),
    ('delimiter = ";;"\n', (1, 13), "`delimiter` must be one character", None),
    ('header = "no"\n', (1, 10), "`header` must be true or false", None),
    ("null = [1]\n", (1, 8), "`null` must be a string or a list of strings", None),
    ('header = false\n[columns]\nid = "INTEGER"\n', (2, 1), "[columns] declares 1 columns but the first row", None),
    ('header = false\n', (1, 10), "`header = false` needs a [columns] table", None),
    ('[columns]\namount = "DECIMAL(12, 2)\n', (2, None), "is not valid TOML", None),
])
def test_a_bad_sidecar_is_refused_at_its_line_and_column(tmp_path: Path, request: pytest.FixtureRequest,
                                                         sidecar: str, where: tuple[int, int | None], message: str,
                                                         hint: str | None) -> None:
    root = project(tmp_path, "ducklake", request, sidecar=sidecar)
    with pytest.raises(ProjectError) as caught:
        seeds(root)
    err = caught.value
    assert err.location is not None and err.location.path == "seeds/raw/orders.toml"
    assert (err.location.line, err.location.column if where[1] is not None else None) == where, err.render()
    assert message in err.message, err.render()
    if hint is not None:
        assert hint in (err.hint or ""), err.render()


def test_a_bad_sidecar_loads_nothing_and_exits_1(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    root = project(tmp_path, "ducklake", request, sidecar='[columns]\nid = "INTEGER"\nnope = "INTEGER"\n')
    (root / "seeds" / "raw" / "fine.csv").write_text("a\n1\n")
    done = subprocess.run([LAKEWRAP, "seed", "--project", str(root)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    assert re.search(r"^error: seeds/raw/orders.toml:3:1: column `nope` is not in seeds/raw/orders.csv", done.stderr,
                     re.M), done.stderr
    assert not (root / ".lakewrap").exists()  # checked before the lake was opened: fine.csv not loaded either


def test_a_sidecar_without_its_csv_is_refused(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    root = project(tmp_path, "ducklake", request)
    (root / "seeds" / "raw" / "order.toml").write_text(SIDECAR)
    with pytest.raises(ProjectError, match=r"seeds/raw/order\.toml has no CSV file beside it") as caught:
        seeds(root)
    assert "did you mean orders.toml?" in (caught.value.hint or "")


def test_an_unchanged_reseed_makes_nothing_stale(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    root = project(tmp_path, "ducklake", request)
    (root / "models" / "s").mkdir(parents=True)
    (root / "models" / "s" / "totals.sql").write_text(
        "-- materialized incremental\n-- partitioned daily key=day start=2024-01-01\n"
        "SELECT day, sum(amount) AS amount FROM raw.orders\n"
        "WHERE day >= $partition_start AND day < $partition_end GROUP BY day\n")
    p = Project(root)
    assert p.seed().ok and p.run(start="2024-01-01", end="2024-01-03").ok
    assert [r.status for r in p.seed().results] == ["unchanged"]
    assert p.run(stale=True).results == []
    (root / "seeds" / "raw" / "orders.csv").write_text(CSV.replace("446.90", "446.91"))
    assert [r.status for r in p.seed().results] == ["success"]
    rerun = p.run(stale=True)
    assert [(r.target, r.partition) for r in rerun.results] == [("s.totals", "2024-01-02")]


DOC = Path(__file__).resolve().parent.parent / "docs" / "seeds.md"
EXAMPLE = re.compile(r"^<!-- seed-example: (.+?) -->\n```\w*\n(.*?)^```\n", re.S | re.M)


def test_the_example_of_docs_seeds_md_loads_with_the_types_it_shows(tmp_path: Path) -> None:
    blocks = {m.group(1): m.group(2) for m in EXAMPLE.finditer(DOC.read_text())}
    command = 'lakewrap query "DESCRIBE raw.payments"'
    assert set(blocks) == {"seeds/raw/payments.csv", "seeds/raw/payments.toml", command}
    (tmp_path / "seeds" / "raw").mkdir(parents=True)
    for name in ("seeds/raw/payments.csv", "seeds/raw/payments.toml"):
        (tmp_path / name).write_text(blocks[name])
    env = {"NO_COLOR": "1", "COLUMNS": "200", "PATH": "/usr/bin:/bin"}
    assert subprocess.run([LAKEWRAP, "seed", "--project", str(tmp_path)], capture_output=True, text=True,
                          env=env, timeout=300).returncode == 0
    shown = subprocess.run([LAKEWRAP, "query", "--project", str(tmp_path), "DESCRIBE raw.payments"],
                           capture_output=True, text=True, env=env, timeout=300)
    assert [line.rstrip() for line in shown.stdout.splitlines()] == blocks[command].splitlines()
    rows = Project(tmp_path).query("SELECT * FROM raw.payments ORDER BY payment_id").to_pylist()
    assert rows == [
        {"payment_id": 1, "order_id": 17, "amount": "1,204.50", "paid_on": date(2024, 1, 3), "method": "card"},
        {"payment_id": 2, "order_id": 18, "amount": None, "paid_on": date(2024, 1, 4), "method": None}]
