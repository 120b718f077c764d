"""One small project (merge, delete+insert, SCD2 snapshot) end to end on every kind of lake.

Catalogs: the embedded DuckDB file, SQLite, PostgreSQL (a throw-away server, ``servers.py``), and
data on ``s3://`` (moto's S3 server) with a DuckDB-file and a PostgreSQL catalog. Each run seeds,
runs three days, re-seeds changed sources, runs two days again, then re-runs them unchanged; after
each step the tables must equal what ``lakeproject.Expected`` computes in plain Python, every
successful materialization must be exactly one snapshot with lakewrap's commit message, and a
re-run must be idempotent.

The PostgreSQL cases need Debian's ``postgresql`` package (``-m "not postgres"`` leaves them out).
"""

from __future__ import annotations

import json
import os
import secrets
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import lakewrap
from lakeproject import Expected, actual_tables, cli, open_lake, write_project, write_seeds
from lakewrap.cli import main
from lakewrap.compilers import lake as sql
from lakewrap.execute.lake import Lake as LakewrapLake
from lakewrap.execute.log import StatementLog
from servers import S3, Postgres, free_port, moto_s3, postgres, wait_for_port  # noqa: F401  (fixtures)

AWS_KEY_ID, AWS_SECRET = "lakewrap-test-key", "lakewrap-test-secret"


@dataclass(frozen=True)
class Catalog:
    id: str
    catalog: str  # duckdb | sqlite | postgres
    s3: bool = False

    def __str__(self) -> str:
        return self.id


CATALOGS = [
    Catalog("duckdb", "duckdb"),
    Catalog("sqlite", "sqlite"),
    pytest.param(Catalog("postgres", "postgres"), marks=pytest.mark.postgres, id="postgres"),
    Catalog("s3-duckdb", "duckdb", s3=True),
    pytest.param(Catalog("s3-postgres", "postgres", s3=True), marks=pytest.mark.postgres, id="s3-postgres"),
]


@dataclass
class Lake:
    """A project folder configured for one catalog, and where to look for its pieces."""

    root: Path
    cat: Catalog
    pg: Postgres | None = None
    dbname: str | None = None
    s3: S3 | None = None
    bucket: str | None = None


def make_lake(tmp_path: Path, cat: Catalog, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Lake:
    name = f"{cat.id.replace('-', '_')}_{secrets.token_hex(3)}"  # unique per test: a database, a bucket
    lake = Lake(tmp_path / "project", cat)
    lines = ["[lake]"]
    if cat.catalog == "duckdb":
        if cat.s3:
            lines.append('path = "catalog/lake.ducklake"')
    elif cat.catalog == "sqlite":
        lines.append('catalog = "sqlite"')
    else:
        pg: Postgres = request.getfixturevalue("postgres")
        lake.pg, lake.dbname = pg, f"lake_{name}"
        lines += ['catalog = "postgres"', f'dsn = "{pg.create_database(lake.dbname)}"']
        monkeypatch.setenv("PGPASSWORD", pg.password)
    if cat.s3:
        s3: S3 = request.getfixturevalue("moto_s3")
        lake.s3, lake.bucket = s3, f"lake-{name.replace('_', '-')}"
        s3.create_bucket(lake.bucket)
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", AWS_KEY_ID)
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", AWS_SECRET)
        lines += [f'data_path = "s3://{lake.bucket}/warehouse/"', "data_inlining_row_limit = 0", "",
                  "[lake.s3]", f'endpoint = "{s3.endpoint}"', 'url_style = "path"', "use_ssl = false"]
    write_project(lake.root, 1, toml="\n".join(lines) + "\n")
    return lake


def run(lake: Lake, *args: str) -> list[dict[str, Any]]:
    code, out, err = cli(*args, "--project", str(lake.root), "--format", "json")
    assert code == 0, err
    results: list[dict[str, Any]] = json.loads(out)["results"]
    return results


def snapshots(lake: Lake) -> list[tuple[Any, ...]]:
    con = open_lake(lake.root)
    try:
        return [tuple(r) for r in con.execute(
            "SELECT snapshot_id, author, commit_message, commit_extra_info FROM snapshots() ORDER BY 1").fetchall()]
    finally:
        con.close()


def check(lake: Lake, expected: Expected, results: list[dict[str, Any]],
          before: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """The tables hold what ``expected`` computed; every commit is one new snapshot carrying
    lakewrap's message, and nothing else wrote one except each model's one-time fence (unauthored)."""
    assert actual_tables(lake.root) == expected.tables()
    after = snapshots(lake)
    new = {s[0]: s for s in after if s[0] not in {b[0] for b in before}}
    # an unchanged snapshot model commits its record (no data) too
    committed = [r for r in results if r["status"] == "success" or (r["status"] == "unchanged" and r["snapshot_id"])]
    shared: dict[int, list[dict[str, Any]]] = {}  # a group commit's snapshot: its members' results
    for r in committed:
        shared.setdefault(r["snapshot_id"], []).append(r)
    for snap_id, members in shared.items():
        snap = new.pop(snap_id)
        assert snap[1] == "lakewrap"
        extra = json.loads(snap[3])
        names = [f"{r['target']}" + (f" {r['partition']}" if r["partition"] else "") for r in members]
        batches = {tuple(r.get("batch") or ()) for r in members}
        if len(members) == 1 and members[0]["group"] is None and not members[0].get("batch"):  # committed alone
            r = members[0]
            assert snap[2] == f"lakewrap {r['strategy']} {r['target']}" + (
                f" partition {r['partition']}" if r["partition"] else "")
            entries = [extra]
        elif len(batches) == 1 and () not in batches:  # a range batch: one entry naming its partitions
            r, batch = members[0], list(batches.pop())
            assert {m["group"] for m in members} == {None} and {m["target"] for m in members} == {r["target"]}
            assert snap[2] == f"lakewrap {r['strategy']} {r['target']} partitions {batch[0]}..{batch[-1]}", snap[2]
            assert extra["batch"] == batch and extra["partition"] == batch[0]
            entries = [dict(extra, partition=part) for part in batch]
        else:  # one group commit: its message names every member, its extra_info holds each one's entry
            group = {r["group"] for r in members}
            assert len(group) == 1 and snap[2].startswith(f"lakewrap group {group.pop()}: {len(members)} ")
            assert all(n in snap[2] for n in names), (snap[2], names)
            entries = extra["members"]
        assert sorted((e["target"], e["partition"]) for e in entries) == sorted(
            (r["target"], r["partition"]) for r in members)
    assert all(s[1] is None for s in new.values()), new  # only fence creations remain
    assert len(new) <= 3
    return after


@pytest.mark.parametrize("cat", CATALOGS, ids=str)
def test_a_project_end_to_end(cat: Catalog, tmp_path: Path, request: pytest.FixtureRequest,
                              monkeypatch: pytest.MonkeyPatch) -> None:
    lake = make_lake(tmp_path, cat, request, monkeypatch)
    expected = Expected.empty()
    days = ["2024-01-01", "2024-01-02", "2024-01-03"]

    seeded = run(lake, "seed")
    assert [(r["target"], r["status"], r["rows_inserted"]) for r in seeded] == [
        ("raw.customers", "success", 3), ("raw.orders", "success", 7)]
    before = snapshots(lake)

    # 1. three days, first load
    results = run(lake, "run", "--start", days[0], "--end", days[-1], "--now", "2024-01-05T00:00:00Z")
    assert [(r["target"], r["partition"], r["status"]) for r in results] == [
        ("marts.customer_history", None, "success"),
        *(("sales.orders", d, "success") for d in days),
        *(("sales.daily_revenue", d, "success") for d in days),
    ]
    expected.run(1, days, datetime(2024, 1, 5, tzinfo=timezone.utc))
    before = check(lake, expected, results, before)

    # 2. the sources change; two days again
    write_seeds(lake.root, 2)
    run(lake, "seed")
    before = snapshots(lake)
    results = run(lake, "run", "--start", days[0], "--end", days[1], "--now", "2024-01-06T00:00:00Z")
    by = {(r["target"], r["partition"]): r for r in results}
    assert all(r["status"] == "success" for r in results), results
    assert (by[("marts.customer_history", None)]["rows_inserted"],
            by[("marts.customer_history", None)]["rows_updated"]) == (2, 2)  # Ann's new tier, Dee; Ann, Cy closed
    # sales.orders is written as one range batch (a merge whose key lacks the partition key, proven
    # separable): its counts are on its first day, each key counted once -- order 7 new, and the two
    # days' four re-merged orders (3 and 4 among them) updated, as per partition; the other day shows 0
    first, second = by[("sales.orders", "2024-01-01")], by[("sales.orders", "2024-01-02")]
    assert first["batch"] == second["batch"] == days[:2]
    assert (first["rows_inserted"], first["rows_updated"]) == (1, 4)
    assert (second["rows_inserted"], second["rows_updated"]) == (0, 0)
    expected.run(2, days[:2], datetime(2024, 1, 6, tzinfo=timezone.utc))
    before = check(lake, expected, results, before)

    # 3. the same run again: same tables, and the unchanged snapshot model writes only its record
    results = run(lake, "run", "--start", days[0], "--end", days[1], "--now", "2024-01-06T00:00:00Z")
    assert [r["status"] for r in results if r["target"] == "marts.customer_history"] == ["unchanged"]
    check(lake, expected, results, before)

    # the read path of the CLI and lakewrap's own record
    code, out, err = cli("query", "SELECT count(*) AS n FROM sales.orders", "--project", str(lake.root),
                         "--format", "json")
    assert code == 0 and json.loads(out) == [{"n": len(expected.orders)}], err
    table = lakewrap.Project(lake.root).query("SELECT max(order_id) AS top FROM sales.orders")
    assert table.to_pylist() == [{"top": max(expected.orders)}]
    history = lakewrap.Project(lake.root).history("sales.orders")
    assert len(history) == 3 + 2 + 2 and all(h["snapshot_id"] is not None for h in history)

    where_things_are(lake)


def where_things_are(lake: Lake) -> None:
    """The catalog and the data files are where lakewrap.toml says."""
    local = lake.root / ".lakewrap"
    parquet_here = sorted(p.name for p in lake.root.rglob("*.parquet"))
    if lake.cat.catalog == "duckdb":
        path = lake.root / "catalog" / "lake.ducklake" if lake.cat.s3 else local / "lake.ducklake"
        assert path.is_file()
    elif lake.cat.catalog == "sqlite":
        with sqlite3.connect(local / "lake.sqlite") as db:
            assert db.execute("SELECT count(*) FROM ducklake_snapshot").fetchone()[0] == len(snapshots(lake))
    else:
        assert lake.pg is not None and lake.dbname is not None
        assert int(lake.pg.psql("SELECT count(*) FROM ducklake_snapshot", lake.dbname)) == len(snapshots(lake))
        assert not list(local.glob("*.ducklake")) and not list(local.glob("*.sqlite"))
    if lake.cat.s3:
        assert lake.s3 is not None and lake.bucket is not None
        keys = lake.s3.keys(lake.bucket, "warehouse/")
        assert any(k.startswith("warehouse/sales/orders/") and k.endswith(".parquet") for k in keys), keys
        assert parquet_here == []  # nothing on local disk


# --- secrets: a canary credential must never come out ----------------------------------------------


@contextmanager
def moto_with_auth() -> Iterator[str]:
    """A second moto S3 server that checks credentials (unknown keys get 403): its endpoint."""
    port = free_port()
    env = dict(os.environ, INITIAL_NO_AUTH_ACTION_COUNT="0")
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        if not wait_for_port(port, proc, timeout=30):
            pytest.fail("moto's S3 server (with auth) did not start", pytrace=False)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def intrude_once(monkeypatch: pytest.MonkeyPatch, target: str) -> list[str]:
    """Just before a materialization of ``target`` updates its fence, another connection commits
    an update of the same fence row: a real DuckLake conflict, so the executor must retry."""
    original = StatementLog.run
    fired: list[str] = []

    def run(self: StatementLog, con: Any, statement: str, params: dict[str, Any] | None = None,
            role: str | None = None) -> Any:
        if not fired and statement == sql.fence_update(target):
            fired.append(target)
            other = con.cursor()  # its own connection and transaction on the same DuckDB instance
            try:
                other.execute(f"UPDATE lake.lakewrap.\"fence:{target}\" SET run_id = 'intruder'")
            finally:
                other.close()
        return original(self, con, statement, params, role)

    monkeypatch.setattr(StatementLog, "run", run)
    return fired


@pytest.mark.parametrize("cat", [
    Catalog("s3-duckdb", "duckdb", s3=True),
    pytest.param(Catalog("s3-postgres", "postgres", s3=True), marks=pytest.mark.postgres, id="s3-postgres"),
], ids=str)
def test_a_canary_secret_never_leaks(cat: Catalog, tmp_path: Path, request: pytest.FixtureRequest,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """AWS_SECRET_ACCESS_KEY, AWS_ACCESS_KEY_ID and PGPASSWORD hold canaries while every phase fails
    once: a failing statement, a conflict and its retry, a wrong endpoint, a wrong bucket, refused
    credentials, a wrong PostgreSQL password or port, a failing query. No canary may appear in the
    output, in an exception, in ``target/``, in the catalog (its file or database) or in the lake."""
    canary = f"canary{secrets.token_hex(8)}"
    key_canary = f"AKIA{secrets.token_hex(8).upper()}"
    lake = make_lake(tmp_path, cat, request, monkeypatch)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key_canary)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", canary)
    monkeypatch.setenv("PGPASSWORD", canary)
    toml = (lake.root / "lakewrap.toml").read_text()
    if lake.pg is not None:  # a role whose password is the canary owns the catalog database
        role = f"canary_{lake.dbname}"
        lake.pg.psql(f"CREATE ROLE {role} LOGIN PASSWORD '{canary}'")
        lake.pg.psql(f"ALTER DATABASE {lake.dbname} OWNER TO {role}")
        lake.pg.psql(f"GRANT ALL ON SCHEMA public TO {role}", lake.dbname)
        toml = toml.replace("user=postgres", f"user={role}")
        (lake.root / "lakewrap.toml").write_text(toml)
    seen: list[str] = []

    def cli_run(*args: str, code: int | None = None) -> str:
        result = CliRunner().invoke(main, [*args, "--project", str(lake.root)])
        seen.extend([result.stdout, result.stderr, repr(result.exception)])
        if code is not None:
            assert result.exit_code == code, result.stderr
        return result.stdout + result.stderr

    def api(call: Callable[[lakewrap.Project], Any]) -> None:
        try:
            report = call(lakewrap.Project(lake.root))
            seen.append(json.dumps(getattr(report, "to_dict", lambda: {})(), default=str))
        except Exception as exc:
            seen.extend([str(exc), repr(exc)])

    # it works, with the canaries as the real credentials
    cli_run("seed", code=0)
    cli_run("run", "--start", "2024-01-01", "--end", "2024-01-02", "--now", "2024-01-05T00:00:00Z", code=0)

    # a conflict, then the retry succeeds
    fired = intrude_once(monkeypatch, "sales.daily_revenue")
    out = cli_run("run", "daily_revenue", "--partition", "2024-01-01", "--format", "json", code=0)
    assert fired and json.loads(out[: out.rindex("}") + 1])["results"][0]["attempts"] == 2
    logs = "".join(p.read_text() for p in (lake.root / "target" / "run").rglob("*.sql"))
    assert "conflicted; retrying" in logs
    monkeypatch.undo()
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key_canary)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", canary)
    monkeypatch.setenv("PGPASSWORD", canary)

    # a statement that fails at run time, through the CLI and the API
    model = lake.root / "models" / "sales" / "daily_revenue.sql"
    good_model = model.read_text()
    model.write_text(good_model.replace("count(*) AS orders", "CAST(status AS INTEGER) AS orders"))
    cli_run("run", "daily_revenue", "--partition", "2024-01-01", code=1)
    api(lambda p: p.run(["daily_revenue"], partition="2024-01-01"))
    model.write_text(good_model)
    cli_run("query", "SELECT * FROM sales.nope", code=1)
    api(lambda p: p.query("SELECT * FROM sales.nope"))

    # the data path is wrong: nothing listens, the bucket does not exist, the keys are refused
    assert lake.s3 is not None
    wrong = {
        "endpoint": toml.replace(lake.s3.endpoint, f"127.0.0.1:{free_port()}"),
        "bucket": toml.replace(f"s3://{lake.bucket}/", "s3://no-such-bucket/"),
    }
    with moto_with_auth() as endpoint:
        wrong["credentials"] = toml.replace(lake.s3.endpoint, endpoint)
        for name, text in wrong.items():
            if lake.pg is not None:  # a new catalog database: one catalog stores one data path
                db = f"{lake.dbname}_{name}"
                lake.pg.psql(f"CREATE DATABASE {db} OWNER canary_{lake.dbname}")
                text = text.replace(f"dbname={lake.dbname} ", f"dbname={db} ")
            else:
                text = text.replace("catalog/lake.ducklake", f"catalog/{name}.ducklake")
            (lake.root / "lakewrap.toml").write_text(text)
            assert "error:" in cli_run("seed", code=1), name
            api(lambda p: p.seed())
            cli_run("run", "sales.orders", "--partition", "2024-01-01", code=1)
    if lake.pg is not None:  # PostgreSQL refuses the password, or nothing listens on the port
        for text in (toml.replace(f"user=canary_{lake.dbname}", "user=postgres"),
                     toml.replace(f"port={lake.pg.port}", f"port={free_port()}")):
            (lake.root / "lakewrap.toml").write_text(text)
            assert "cannot attach the lake" in cli_run("run", code=1)
            api(lambda p: p.run())
            cli_run("status", code=1)
    (lake.root / "lakewrap.toml").write_text(toml)

    # nowhere: what was printed or raised, the files, the lake, the catalog
    for text in seen:
        assert canary not in text and key_canary not in text, text
    for path in lake.root.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert canary.encode() not in data and key_canary.encode() not in data, path
    con = open_lake(lake.root)
    try:
        dumped = repr(con.execute("SELECT * FROM snapshots()").fetchall())
        for schema, name in con.execute("SELECT table_schema, table_name FROM information_schema.tables "
                                        "WHERE table_catalog = current_database()").fetchall():
            dumped += repr(con.execute(f'SELECT * FROM "{schema}"."{name}"').fetchall())
    finally:
        con.close()
    assert "lakewrap delete+insert sales.daily_revenue" in dumped
    assert canary not in dumped and key_canary not in dumped
    if lake.pg is not None:
        dump = subprocess.run([str(lake.pg.bindir / "pg_dump"), "-h", str(lake.pg.socket_dir), "-p",
                               str(lake.pg.port), "-U", "postgres", lake.dbname or ""],
                              capture_output=True, text=True, check=True).stdout
        assert "ducklake_snapshot" in dump and canary not in dump and key_canary not in dump

    # and the redaction itself, before any connection exists
    redact = LakewrapLake.open(lake.root).redact
    assert redact(f"a {canary} b {key_canary} c") == "a *** b *** c"
