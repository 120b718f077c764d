"""One small project end to end on every kind of Iceberg lake, and the canary-secret check.

Catalogs: the embedded default (pyiceberg SqlCatalog on SQLite, local warehouse), the same with an
``s3://`` warehouse on moto's S3 server, Glue on moto's server with an ``s3://`` warehouse, and the
test REST adapter (``rest_adapter.py``) with a local and with an S3 warehouse. Each seeds, runs
three days, re-seeds changed sources, runs two days again, then re-runs them unchanged; the tables
must equal what ``lakeproject.Expected`` computes in plain Python, and every successful
materialization must be one commit whose snapshot summary carries its run id.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import lakewrap
from lakeproject import QUERIES, Expected, cli, write_project, write_seeds
from lakewrap.cli import main
from lakewrap.execute.iceberg import IcebergLake
from lakewrap.substrates.iceberg.state import materializations_of
from servers import S3, free_port, moto_s3  # noqa: F401  (fixtures)

AWS_KEY_ID, AWS_SECRET = "lakewrap-test-key", "lakewrap-test-secret"


@dataclass(frozen=True)
class Kind:
    id: str
    catalog: str  # sql | glue | rest
    s3: bool = False
    write_path: str = "pyiceberg"  # or sql: DuckDB writes through the REST catalog

    def __str__(self) -> str:
        return self.id


KINDS = [Kind("sql", "sql"), Kind("sql-s3", "sql", s3=True), Kind("glue-s3", "glue", s3=True),
         Kind("rest", "rest"), Kind("rest-s3", "rest", s3=True), Kind("rest-sql", "rest", write_path="sql"),
         Kind("rest-sql-s3", "rest", s3=True, write_path="sql")]


@dataclass
class IceProject:
    root: Path
    kind: Kind
    s3: S3 | None = None
    bucket: str | None = None


@pytest.fixture
def stack() -> Iterator[ExitStack]:
    with ExitStack() as s:
        yield s


def make_project(tmp_path: Path, kind: Kind, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch,
                 stack: ExitStack) -> IceProject:
    """A project configured for ``kind`` (a REST adapter is started for it, stopped by ``stack``)."""
    proj = IceProject(tmp_path / "project", kind)
    lines = ["[lake]", 'substrate = "iceberg"']
    warehouse = None
    s3_lines: list[str] = []
    if kind.s3:
        s3: S3 = request.getfixturevalue("moto_s3")
        proj.s3, proj.bucket = s3, f"ice-{kind.id}-{secrets.token_hex(3)}"
        s3.create_bucket(proj.bucket)
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", AWS_KEY_ID)
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", AWS_SECRET)
        monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        warehouse = f"s3://{proj.bucket}/wh"
        s3_lines = ["", "[lake.s3]", f'endpoint = "{s3.endpoint}"', 'url_style = "path"', "use_ssl = false"]
    if kind.catalog == "glue":
        assert proj.s3 is not None
        proj.s3.clear_glue()  # the session's one Glue catalog: no table of an earlier test (any order)
        lines += ['catalog = "glue"', f'warehouse = "{warehouse}"', *s3_lines, "", "[lake.glue]",
                  f'endpoint = "http://{proj.s3.endpoint}"', 'region = "us-east-1"']
    elif kind.catalog == "rest":
        from pyiceberg.catalog.sql import SqlCatalog

        from rest_adapter import serve

        server_dir = tmp_path / "rest-server"
        server_dir.mkdir()
        props: dict[str, str] = {}
        if proj.s3 is not None:
            props = {"s3.endpoint": f"http://{proj.s3.endpoint}", "s3.access-key-id": AWS_KEY_ID,
                     "s3.secret-access-key": AWS_SECRET, "s3.region": "us-east-1"}
        backing = SqlCatalog("rest", uri=f"sqlite:///{server_dir / 'rest.db'}",
                             warehouse=warehouse or (server_dir / "wh").as_uri(), **props)
        uri = stack.enter_context(serve(backing))
        lines += ['catalog = "rest"']
        if kind.write_path == "sql":
            lines.append('write_path = "sql"')
        if warehouse:
            lines.append(f'warehouse = "{warehouse}"')
        lines += [*s3_lines, "", "[lake.rest]", f'uri = "{uri}"']
    else:
        if warehouse:
            lines.append(f'warehouse = "{warehouse}"')
        lines += s3_lines
    write_project(proj.root, 1, toml="\n".join(lines) + "\n")
    return proj


def run(proj: IceProject, *args: str) -> list[dict[str, Any]]:
    code, out, err = cli(*args, "--project", str(proj.root), "--format", "json")
    assert code == 0, err + out
    results: list[dict[str, Any]] = json.loads(out)["results"]
    return results


def actual_tables(root: Path) -> dict[str, list[tuple[Any, ...]]]:
    out = {}
    for name, sql in QUERIES.items():
        rows = [tuple(r) for r in lakewrap.Project(root).query(sql).to_pylist() for r in [list(r.values())]]
        out[name] = sorted(rows, key=repr) if name == "marts.customer_history" else rows
    return out


def check(proj: IceProject, expected: Expected, results: list[dict[str, Any]]) -> None:
    """The tables hold what ``expected`` computed; each success is recorded once at its commit's
    snapshot, which it shares only with the other members of its group commit (sql path)."""
    assert actual_tables(proj.root) == expected.tables()
    lake = IcebergLake.open(proj.root, read_only=True)
    for r in results:
        if r["status"] != "success":
            continue
        at_snapshot = [m for m in materializations_of(lake, r["target"]) if m["snapshot_id"] == r["snapshot_id"]]
        members = {(o["target"], o["partition"]) for o in results
                   if o["target"] == r["target"] and (o is r or (r["group"] is not None and o["group"] == r["group"]))}
        assert {(r["target"], m["partition"]) for m in at_snapshot} == members, r
        found = [m for m in at_snapshot if m["partition"] == r["partition"]]
        assert len(found) == 1 and found[0]["strategy"] == r["strategy"], r


@pytest.mark.parametrize("kind", KINDS, ids=str)
def test_a_project_end_to_end_on_iceberg(kind: Kind, tmp_path: Path, request: pytest.FixtureRequest,
                                         monkeypatch: pytest.MonkeyPatch, stack: ExitStack) -> None:
    proj = make_project(tmp_path, kind, request, monkeypatch, stack)
    expected = Expected.empty()
    days = ["2024-01-01", "2024-01-02", "2024-01-03"]

    seeded = run(proj, "seed")
    assert [(r["target"], r["status"], r["rows_inserted"]) for r in seeded] == [
        ("raw.customers", "success", 3), ("raw.orders", "success", 7)]

    results = run(proj, "run", "--start", days[0], "--end", days[-1], "--now", "2024-01-05T00:00:00Z")
    assert [(r["target"], r["partition"], r["status"]) for r in results] == [
        ("marts.customer_history", None, "success"),
        *(("sales.orders", d, "success") for d in days),
        *(("sales.daily_revenue", d, "success") for d in days),
    ]
    expected.run(1, days, datetime(2024, 1, 5, tzinfo=timezone.utc))
    check(proj, expected, results)

    write_seeds(proj.root, 2)
    run(proj, "seed")
    results = run(proj, "run", "--start", days[0], "--end", days[1], "--now", "2024-01-06T00:00:00Z")
    by = {(r["target"], r["partition"]): r for r in results}
    assert all(r["status"] == "success" for r in results), results
    assert (by[("marts.customer_history", None)]["rows_inserted"],
            by[("marts.customer_history", None)]["rows_updated"]) == (2, 2)
    assert (by[("sales.orders", "2024-01-02")]["rows_inserted"],
            by[("sales.orders", "2024-01-02")]["rows_updated"]) == (1, 2)
    expected.run(2, days[:2], datetime(2024, 1, 6, tzinfo=timezone.utc))
    check(proj, expected, results)

    results = run(proj, "run", "--start", days[0], "--end", days[1], "--now", "2024-01-06T00:00:00Z")
    assert [r["status"] for r in results if r["target"] == "marts.customer_history"] == ["unchanged"]
    check(proj, expected, results)

    code, out, err = cli("query", "SELECT count(*) AS n FROM sales.orders", "--project", str(proj.root),
                         "--format", "json")
    assert code == 0 and json.loads(out) == [{"n": len(expected.orders)}], err
    history = lakewrap.Project(proj.root).history("sales.orders")
    assert len(history) == 3 + 2 + 2 and all(h["snapshot_id"] is not None for h in history)
    # as of the first run: the five orders of its three days (the second run added order 7)
    first_run = history[-1]["run_id"]
    old = lakewrap.Project(proj.root).query("SELECT count(*) AS n FROM sales.orders", as_of=first_run)
    assert old.to_pylist() == [{"n": 5}]
    if proj.s3 is not None:  # every data file is on S3, none on local disk
        assert proj.bucket is not None
        keys = proj.s3.keys(proj.bucket, "wh/")
        assert any(k.endswith(".parquet") for k in keys) and any(k.endswith(".metadata.json") for k in keys)
        assert not list(proj.root.rglob("*.parquet"))


@pytest.mark.parametrize("kind", [Kind("sql-s3", "sql", s3=True), Kind("glue-s3", "glue", s3=True),
                                  Kind("rest-sql-s3", "rest", s3=True, write_path="sql")], ids=str)
def test_a_canary_secret_never_leaks_on_iceberg(kind: Kind, tmp_path: Path, request: pytest.FixtureRequest,
                                                monkeypatch: pytest.MonkeyPatch, stack: ExitStack) -> None:
    """AWS keys hold canaries (moto accepts any key) while runs succeed, a statement fails, a query
    fails and the S3 endpoint is wrong: no canary in the output, an exception, ``target/``, the
    catalog file or the warehouse's metadata."""
    canary, key_canary = f"canary{secrets.token_hex(8)}", f"AKIA{secrets.token_hex(8).upper()}"
    proj = make_project(tmp_path, kind, request, monkeypatch, stack)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key_canary)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", canary)
    monkeypatch.setenv("LAKEWRAP_ICEBERG_TOKEN", canary)
    seen: list[str] = []

    def cli_run(*args: str, code: int | None = None) -> str:
        result = CliRunner().invoke(main, [*args, "--project", str(proj.root)])
        seen.extend([result.stdout, result.stderr, repr(result.exception)])
        if code is not None:
            assert result.exit_code == code, result.stdout + result.stderr
        return result.stdout + result.stderr

    cli_run("seed", code=0)
    cli_run("run", "--start", "2024-01-01", "--end", "2024-01-02", "--now", "2024-01-05T00:00:00Z", code=0)
    model = proj.root / "models" / "sales" / "daily_revenue.sql"
    good = model.read_text()
    model.write_text(good.replace("count(*) AS orders", "CAST(status AS INTEGER) AS orders"))
    assert "error:" in cli_run("run", "daily_revenue", "--partition", "2024-01-01", code=1)
    model.write_text(good)
    cli_run("query", "SELECT * FROM sales.nope", code=1)
    toml = (proj.root / "lakewrap.toml").read_text()
    assert proj.s3 is not None
    (proj.root / "lakewrap.toml").write_text(toml.replace(proj.s3.endpoint, f"127.0.0.1:{free_port()}"))
    assert "error:" in cli_run("run", "sales.orders", "--partition", "2024-01-01", code=1)
    (proj.root / "lakewrap.toml").write_text(toml)
    for text in seen:
        assert canary not in text and key_canary not in text, text
    for path in proj.root.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert canary.encode() not in data and key_canary.encode() not in data, path
    assert proj.bucket is not None
    client = proj.s3.client()
    for key in proj.s3.keys(proj.bucket):
        if key.endswith(".json"):
            body = client.get_object(Bucket=proj.bucket, Key=key)["Body"].read()
            assert canary.encode() not in body and key_canary.encode() not in body, key
    redact = IcebergLake.open(proj.root).redact
    assert redact(f"a {canary} b {key_canary} c") == "a *** b *** c"
