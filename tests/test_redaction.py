"""The one redactor: a distinct canary per secret variable, each absent from every output channel.

The end-to-end case runs a PostgreSQL catalog (the role's password is the PGPASSWORD canary) with
data on moto's S3 (the AWS canaries are the real keys DuckDB signs with), so the secrets really
travel. Hostile models and a data test then select each canary (built from two halves, as SQL that
got hold of a secret would) as written, reversed, base64, URL-encoded, hex and in upper case, into
a failing test's sample, an error, ``query`` output; a dsn carrying the dsn-password canary is
refused. Afterwards no form of any canary may be in what was printed (text and JSON), in any file
of the project (``target/`` included), in any table of the lake (run log, state, test results) or
in the catalog database. Every canary is distinct, so dropping any one variable from the redactor
fails the test.
"""

from __future__ import annotations

import base64
import json
import secrets
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from lakeproject import cli, open_lake, write_project
from lakewrap import redact as redaction
from lakewrap.config import ConfigError, load_config
from lakewrap.dsn import has_password, parse
from servers import S3, Postgres, moto_s3, postgres  # noqa: F401  (fixtures)


def canary(prefix: str) -> str:
    """A secret-looking value with the characters URL-encoding and base64 treat specially."""
    return f"{prefix}{secrets.token_hex(6)}/{secrets.token_hex(4)}+{secrets.token_hex(4)}"


def shown_forms(value: str) -> dict[str, str]:
    """What a query (or a library) can make of a secret, computed here independently of lakewrap."""
    raw = value.encode()
    return {"raw": value, "reversed": value[::-1], "upper": value.upper(), "lower": value.lower(),
            "base64": base64.b64encode(raw).decode(), "url": quote(value, safe=""), "hex": raw.hex().upper()}


def leaked(texts: dict[str, str], canaries: dict[str, str]) -> list[str]:
    """Which (variable, form, channel) show up: a form is searched ignoring case."""
    out = []
    for var, value in canaries.items():
        for form, text in shown_forms(value).items():
            out += [f"{var} {form} in {where}" for where, t in texts.items() if text.lower() in t.lower()]
    return out


# --- the redactor itself ---------------------------------------------------------------------------


@pytest.mark.parametrize("var", redaction.SECRET_ENV)
def test_each_secret_variable_is_masked_in_every_form(var: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each variable alone: its value in each form (and inside a longer base64 text at each byte
    offset) is masked; text without a secret is left exactly as it was."""
    for name in redaction.SECRET_ENV:
        monkeypatch.delenv(name, raising=False)
    value = canary("c")
    monkeypatch.setenv(var, value)
    forms = shown_forms(value)
    forms |= {f"base64 at {k}": base64.b64encode(b"x" * k + value.encode() + b"yz").decode()[4:-4] for k in range(3)}
    for form, text in forms.items():
        out = redaction.redact(f"before {text} after")
        assert out.startswith("before ") and out.endswith(" after"), (form, out)
        assert not leaked({form: out}, {var: value}), (form, out)
    assert redaction.redact("nothing secret here: 42, /a/b+c") == "nothing secret here: 42, /a/b+c"


def test_samples_and_json_trees_are_redacted(monkeypatch: pytest.MonkeyPatch) -> None:
    value = canary("s")
    monkeypatch.setenv("PGPASSWORD", value)
    rows = [{"v": value[::-1], value: 1, "n": 7, "blob": value.encode(), "when": None}]
    assert redaction.redact_value(rows) == [{"v": "***", "***": 1, "n": 7, "blob": "b'***'", "when": None}]


def test_an_error_raised_without_a_lake_at_hand_is_redacted(monkeypatch: pytest.MonkeyPatch) -> None:
    from lakewrap.errors import ExecutionError, Location

    value = canary("e")
    monkeypatch.setenv("AWS_SESSION_TOKEN", value)
    err = ExecutionError(f"failed: {value[::-1]}", location=Location("models/m.sql", 1, snippet=value.upper()),
                         hint=f"not {quote(value, safe='')}")
    texts = {"render": err.render(), "str": str(err), "json": json.dumps(err.to_dict())}
    assert not leaked(texts, {"AWS_SESSION_TOKEN": value}) and "failed: ***" in texts["render"], texts


# --- dsn ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dsn", [
    "postgresql://lakewrap@db.internal/lake?password={pw}",
    "postgresql://lakewrap@db.internal/lake?sslmode=require&PassWord={pw}",
    "postgres://lakewrap:{pw}@db.internal:5432/lake",
    "dbname=lake host=db.internal password={pw}",
    "dbname=lake host=db.internal password = '{pw} with space'",
])
def test_a_dsn_with_a_password_is_refused_and_never_echoed(dsn: str, tmp_path: Path) -> None:
    """Every spelling libpq reads a password from is refused at load time, before anything is
    written: the password is in no output and no file lakewrap writes (config cache included)."""
    pw = canary("dsn")
    root = write_project(tmp_path / "p", 1, toml=f'[lake]\ncatalog = "postgres"\ndsn = "{dsn.format(pw=pw)}"\n')
    assert has_password(dsn.format(pw=pw))
    for args in (["run"], ["run", "--format", "json"], ["status"], ["seed"]):
        code, out, err = cli(*args, "--project", str(root))
        assert code != 0 and "PGPASSWORD" in out + err, (args, out, err)
        assert not leaked({"stdout": out, "stderr": err}, {"dsn": pw}), (args, out, err)
    written = [p for p in root.rglob("*") if p.is_file() and p.name != "lakewrap.toml"]
    assert not leaked({str(p): p.read_text(errors="replace") for p in written}, {"dsn": pw})
    assert not (root / "target" / "cache" / "config.json").exists()


def test_a_dsn_without_a_password_is_parsed_as_libpq_reads_it(tmp_path: Path) -> None:
    assert parse("postgresql://me@db:6432/lake?sslmode=require") == {
        "user": "me", "host": "db", "port": "6432", "dbname": "lake", "sslmode": "require"}
    assert parse(r"dbname=lake host='a b' user=o\'k") == {"dbname": "lake", "host": "a b", "user": "o'k"}
    (tmp_path / "lakewrap.toml").write_text('[lake]\ncatalog = "postgres"\ndsn = "postgresql://me@db/lake"\n')
    assert load_config(tmp_path).lake.dsn == "postgresql://me@db/lake"
    (tmp_path / "lakewrap.toml").write_text('[lake]\ncatalog = "postgres"\ndsn = "dbname=lake host"\n')
    with pytest.raises(ConfigError, match="key=value"):
        load_config(tmp_path)


# --- end to end: every channel, after failures and hostile SQL ------------------------------------


def halves(value: str) -> str:
    """``value`` as SQL that builds it from two literals: neither is a form of the secret."""
    mid = len(value) // 2
    return f"('{value[:mid]}' || '{value[mid:]}')"


def canaries_in_env(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A distinct canary in each variable the redactor reads, set in the environment."""
    values = {"AWS_ACCESS_KEY_ID": f"AKIA{secrets.token_hex(8).upper()}", "AWS_SECRET_ACCESS_KEY": canary("sk"),
              "AWS_SESSION_TOKEN": canary("st"), "PGPASSWORD": canary("pg"), "LAKEWRAP_ICEBERG_TOKEN": canary("rt")}
    assert set(redaction.SECRET_ENV) <= set(values)  # a new variable needs its canary here
    for var, value in values.items():
        monkeypatch.setenv(var, value)
    return values


def hostile_models(root: Path, canaries: dict[str, str]) -> None:
    """A data test whose failing rows are every canary in every form (its model's table holds none),
    a model whose error message quotes each canary reversed and encoded."""
    values = ", ".join(f"('{var}', {halves(v)})" for var, v in canaries.items())
    (root / "tests").mkdir()
    (root / "tests" / "leak.sql").write_text(
        "SELECT name, v, reverse(v) AS rev, upper(v) AS up, to_base64(v::BLOB) AS b64, "
        "to_base64(('x' || v)::BLOB) AS b64_shifted, url_encode(v) AS url, hex(v) AS hx "
        f"FROM (VALUES {values}) AS t(name, v)\n")
    (root / "models" / "sales" / "leaky.sql").write_text(
        "-- materialized table\n-- test sql tests/leak.sql severity=warn\nSELECT 1 AS id\n")
    (root / "models" / "sales" / "blocked.sql").write_text(
        "-- materialized table\n-- test sql tests/leak.sql\nSELECT 1 AS id\n")
    forms = " || '|' || ".join(f"reverse({halves(v)}) || to_base64({halves(v)}::BLOB) || url_encode({halves(v)})"
                               for v in canaries.values())
    (root / "models" / "sales" / "boom.sql").write_text(
        f"-- materialized table\nSELECT CAST({forms} AS INTEGER) AS x\n")


class Commands:
    """``lakewrap`` in-process on one project, keeping every stdout and stderr in ``seen``."""

    def __init__(self, root: Path):
        self.root = root
        self.seen: dict[str, str] = {}

    def __call__(self, *args: str, code: int | None = None) -> str:
        rc, out, err = cli(*args, "--project", str(self.root))
        self.seen[f"{' '.join(args)}: stdout"], self.seen[f"{' '.join(args)}: stderr"] = out, err
        if code is not None:
            assert rc == code, (args, out, err)
        return out + err

    def hostile(self, canaries: dict[str, str]) -> None:
        """Seed, then the hostile models through run (text and JSON), test and query."""
        run = self
        run("seed", code=0)
        run("run", "sales.leaky", code=0)
        out = run("run", "sales.leaky", "--format", "json", code=0)
        warned = json.loads(out)["results"][0]["tests"][0]
        assert warned["status"] == "warn" and warned["failures"] == len(canaries)
        assert {r["name"] for r in warned["sample"]} == set(canaries) and all(
            r[c] == "***" for r in warned["sample"] for c in ("v", "rev", "up", "b64", "url", "hx")), warned["sample"]
        assert "***" in run("run", "sales.blocked", code=1)
        run("run", "sales.blocked", "--format", "json", code=1)
        assert "***" in run("run", "sales.boom", code=1)
        run("run", "sales.boom", "--format", "json", code=1)
        run("test", "sales.leaky", "sales.blocked", code=1)
        run("test", "sales.leaky", "--format", "json", code=0)
        run("query", f"SELECT reverse({halves(canaries['PGPASSWORD'])}) AS r, "
            f"{halves(canaries['AWS_SECRET_ACCESS_KEY'])} AS s", code=0)
        for fmt in ("json", "csv"):
            run("query", f"SELECT hex({halves(canaries['AWS_SESSION_TOKEN'])}) AS h", "--format", fmt, code=0)
        # what a query could read of the session (refused, or printed redacted: either is fine here)
        for statement in ("SELECT reverse(current_setting('s3_secret_access_key')) AS r, "
                          "to_base64(current_setting('s3_access_key_id')::BLOB) AS b, "
                          "url_encode(current_setting('s3_session_token')) AS t",
                          "SELECT name, value, upper(value) AS up FROM duckdb_settings()"):
            run("query", statement)
            run("query", statement, "--format", "json")
        for model in ("boom", "blocked"):
            run("history", model, code=0)
            run("history", model, "--format", "json", code=0)
        run("status", "--format", "json")

    def files(self, folder: Path, label: str = "") -> None:
        for path in folder.rglob("*"):
            if path.is_file():
                self.seen[label + str(path.relative_to(folder))] = path.read_bytes().decode(errors="replace")


@pytest.mark.postgres
def test_no_canary_reaches_any_channel(tmp_path: Path, postgres: Postgres, moto_s3: S3,  # noqa: F811
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """DuckLake on a PostgreSQL catalog (PGPASSWORD is its role's password) with data on S3 (the AWS
    canaries sign the requests)."""
    canaries = canaries_in_env(monkeypatch)
    dsn_password = canary("dp")
    name = f"redact_{secrets.token_hex(3)}"
    dsn = postgres.create_database(name).replace(f"user={postgres.user}", f"user={name}")
    postgres.psql(f"CREATE ROLE {name} LOGIN PASSWORD '{canaries['PGPASSWORD']}'")
    postgres.psql(f"ALTER DATABASE {name} OWNER TO {name}")
    postgres.psql(f"GRANT ALL ON SCHEMA public TO {name}", name)
    bucket = name.replace("_", "-")
    moto_s3.create_bucket(bucket)
    toml = (f'[lake]\ncatalog = "postgres"\ndsn = "{dsn}"\ndata_path = "s3://{bucket}/lake/"\n'
            f'data_inlining_row_limit = 0\n\n[lake.s3]\nendpoint = "{moto_s3.endpoint}"\nurl_style = "path"\n'
            "use_ssl = false\n")
    root = write_project(tmp_path / "project", 1, toml=toml)
    hostile_models(root, canaries)
    run = Commands(root)
    run.hostile(canaries)
    seen = run.seen
    # the dsn password canary: refused in each spelling, the good lakewrap.toml restored after
    for bad in (dsn.replace(f"user={name}", f"user={name} password={dsn_password}"),
                f"postgresql://{name}@{postgres.host}:{postgres.port}/{name}?password={quote(dsn_password)}"):
        (root / "lakewrap.toml").write_text(toml.replace(dsn, bad))
        assert "PGPASSWORD" in run("run", code=1)
    (root / "lakewrap.toml").write_text(toml)

    run.files(root)  # every file of the project
    assert any(k.startswith("target/run/") and k.endswith("sales.leaky.sql") for k in seen)
    # every table of the lake (run log, state, test results), its snapshots, the catalog database
    con = open_lake(root)
    try:
        seen["snapshots"] = repr(con.execute("SELECT * FROM snapshots()").fetchall())
        tables = con.execute("SELECT table_schema, table_name FROM information_schema.tables "
                             "WHERE table_catalog = current_database()").fetchall()
        for schema, table in tables:
            seen[f"{schema}.{table}"] = repr(con.execute(f'SELECT * FROM "{schema}"."{table}"').fetchall())
    finally:
        con.close()
    assert {"lakewrap.test_results", "sales.leaky"} <= set(seen)
    assert "***" in seen["lakewrap.test_results"]  # the stored sample: redacted, not dropped
    seen["pg_dump"] = subprocess.run(
        [str(postgres.bindir / "pg_dump"), "-h", str(postgres.socket_dir), "-p", str(postgres.port), "-U",
         postgres.user, name], capture_output=True, text=True, check=True).stdout
    # the run log lives in the catalog database: boom's error is there, redacted
    assert "ducklake_snapshot" in seen["pg_dump"] and "lakewrap_steps" in seen["pg_dump"]
    assert "Could not convert string '***" in seen["pg_dump"]
    assert leaked(seen, {**canaries, "dsn password": dsn_password}) == []


def test_no_canary_reaches_any_channel_on_iceberg_rest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Iceberg on a REST catalog that receives the LAKEWRAP_ICEBERG_TOKEN canary as its bearer token
    (the test server records it), warehouse in a local folder: the same hostile models, and no form
    of a canary in the output, the project, the server's files or the snapshot summaries."""
    import flask
    from pyiceberg.catalog.sql import SqlCatalog

    import rest_adapter

    canaries = canaries_in_env(monkeypatch)
    tokens: list[str | None] = []
    make_app = rest_adapter.make_app

    def recording_app(*args: Any) -> Any:
        app = make_app(*args)
        app.before_request(lambda: tokens.append(flask.request.headers.get("Authorization")))
        return app

    monkeypatch.setattr(rest_adapter, "make_app", recording_app)
    server_dir = tmp_path / "rest-server"
    server_dir.mkdir()
    backing = SqlCatalog("rest", uri=f"sqlite:///{server_dir / 'rest.db'}", warehouse=(server_dir / "wh").as_uri())
    with rest_adapter.serve(backing) as uri:
        root = write_project(tmp_path / "project", 1,
                             toml=f'[lake]\nsubstrate = "iceberg"\ncatalog = "rest"\n\n[lake.rest]\nuri = "{uri}"\n')
        hostile_models(root, canaries)
        run = Commands(root)
        run.hostile(canaries)
    assert f"Bearer {canaries['LAKEWRAP_ICEBERG_TOKEN']}" in tokens  # the token really travelled
    run.files(root)
    run.files(server_dir, "rest-server/")
    tables = [backing.load_table(ident) for ns in backing.list_namespaces() for ident in backing.list_tables(ns)]
    summaries = [s.summary.additional_properties for t in tables for s in t.snapshots() if s.summary]
    assert any("lakewrap.tests" in s for s in summaries), summaries
    run.seen["snapshot summaries"] = repr(summaries)
    assert leaked(run.seen, canaries) == []
