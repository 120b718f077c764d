"""The SQL a user writes cannot read credentials, files outside the lake, or change anything it should not.

* Every table function the bundled extensions register is classified (allowed or denied) by
  ``lakewrap.execute.sandbox``: a new one must be looked at before user SQL may call it.
* A hostile-SQL corpus for ``lakewrap query`` and for models (file reads, writes through COPY and
  functions, logging, checkpoint and flush, catalog-server queries, settings and secrets, SQL given
  as a string, transaction control) on a DuckLake and an Iceberg project: each is refused and the
  lake's snapshots, its data folder's files and the project's files are the same before and after.
* On a PostgreSQL catalog with data on moto's S3, with a distinct canary in every credential
  variable: the project runs inside the sandbox, hostile queries and models are refused, and even
  a connection's own settings, secrets and attached paths (read without lakewrap's statement
  check) hold no canary; no output and no file of the project holds one either.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

import pytest

from lakeproject import Inspector, cli
from lakewrap.errors import PlanError
from lakewrap.execute import extensions, sandbox
from lakewrap.execute.lake import Lake
from servers import S3, Postgres, moto_s3, postgres  # noqa: F401  (fixtures)

SEED = "id,name\n1,ann\n2,bob\n"
MODEL = "-- materialized table\nSELECT id, name FROM raw.people\n"


def write_project(root: Path, toml: str = "[lake]\n") -> Path:
    (root / "seeds" / "raw").mkdir(parents=True)
    (root / "seeds" / "raw" / "people.csv").write_text(SEED)
    (root / "models" / "marts").mkdir(parents=True)
    (root / "models" / "marts" / "people.sql").write_text(MODEL)
    (root / "lakewrap.toml").write_text(toml)
    return root


def ok(root: Path, *args: str) -> str:
    code, out, err = cli(*args, "--project", str(root))
    assert code == 0, err + out
    return out


def files(folder: Path, skip: tuple[str, ...] = ()) -> list[str]:
    """Every file under ``folder`` (relative), leaving out those under the ``skip`` prefixes."""
    out = (str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    return sorted(p for p in out if not p.startswith(skip))


def hostile_queries(root: Path, outside: Path, data: str) -> list[str]:
    """Statements `lakewrap query` must refuse (``data``: the lake's data folder or s3:// prefix)."""
    return [
        # file reads outside the project and the lake
        "SELECT * FROM read_csv('/etc/passwd')",
        f"SELECT content FROM read_text('{outside}')",
        f"SELECT count(*) FROM glob('{outside.parent}/*')",
        # writes through COPY and functions, checkpoint and flush, logging
        f"COPY (SELECT 1 AS a) TO '{root}/written.csv'",
        f"COPY (SELECT 1 AS a) TO '{data}written.parquet'",
        f"EXPORT DATABASE '{root}/export'",
        "SELECT * FROM ducklake_flush_inlined_data('lake')",
        "SELECT * FROM lake.merge_adjacent_files()",
        "SELECT * FROM ducklake_expire_snapshots('lake', older_than => now())",
        "CALL checkpoint()",
        "SELECT * FROM force_checkpoint()",
        f"CALL enable_logging(storage => 'file', storage_path => '{root}/logs')",
        f"SELECT * FROM enable_logging(storage => 'file', storage_path => '{root}/logs.csv')",
        "SELECT write_log('x')",
        # the catalog server and other databases, directly
        "SELECT * FROM postgres_query('__ducklake_metadata_lake', 'SELECT 1')",
        "SELECT * FROM sqlite_query('x.sqlite', 'SELECT 1')",
        f"ATTACH '{outside.parent}/other.duckdb' AS other",
        # settings, secrets, attached paths; SQL given as a string
        "SELECT current_setting('s3_secret_access_key')",
        "SELECT name, value FROM duckdb_settings()",
        "SELECT * FROM pg_catalog.pg_settings",
        "SELECT * FROM duckdb_secrets()",
        "SELECT * FROM which_secret('s3://b/x', 's3')",
        "SELECT path FROM duckdb_databases()",
        "SELECT path FROM duckdb_databases",
        "SELECT * FROM query('SELECT current_setting(''s3_access_key_id'')')",
        "SELECT * FROM query_table('pg_settings')",
        # transaction control, settings, extensions
        "BEGIN", "COMMIT", "END", "ABORT", "START TRANSACTION", "ROLLBACK", "CHECKPOINT",
        "SET lock_configuration = false", "RESET enable_external_access", "PRAGMA database_list",
        "PRAGMA import_database('export')", "USE memory", "DETACH lake", "LOAD httpfs",
        "SELECT 1; DELETE FROM marts.people",
    ]


# Models (path under models/ -> text) that must fail without writing: the user's SQL reads settings,
# files outside the lake, or calls what writes files or escapes the transaction.
def hostile_models(root: Path, outside: Path) -> dict[str, str]:
    table = "-- materialized table\n"
    return {
        "h/setting.sql": table + "SELECT current_setting('s3_secret_access_key') AS s",
        "h/settings.sql": table + "SELECT name, value FROM duckdb_settings()",
        "h/passwd.sql": table + "SELECT * FROM read_csv('/etc/passwd')",
        "h/outside.sql": table + f"SELECT content FROM read_text('{outside}')",
        "h/flush.sql": table + "SELECT * FROM ducklake_flush_inlined_data('lake')",
        "h/checkpoint.sql": table + "SELECT * FROM checkpoint()",
        "h/logging.sql": table + f"SELECT * FROM enable_logging(storage => 'file', storage_path => '{root}/l')",
        "h/query.sql": table + "SELECT * FROM query('SELECT 1 AS a')",
        "h/catalog.sql": table + "SELECT * FROM __ducklake_metadata_lake.ducklake_snapshot",
        "h/copy.sql": f"-- target h.copy\nCOPY (SELECT 1 AS a) TO '{root}/copied.csv';\n",
        "h/literal_setting.sql": "CREATE TABLE h.lit AS SELECT current_setting('s3_access_key_id') AS k;\n",
        "h/macro.sql": "CREATE MACRO h.m() AS current_setting('s3_session_token');\n",
        "h/secret.sql": "-- target h.secret\nCREATE SECRET h_s3 (TYPE s3, ENDPOINT '127.0.0.1:9', SCOPE 's3://x/');\n",
        "h/set.sql": "-- target h.set\nSET enable_external_access = true;\n",
        "h/end.sql": "CREATE TABLE h.a AS SELECT 1 AS x;\nEND;\nCREATE TABLE h.b AS SELECT 1 AS x;\n",
        "h/abort.sql": "CREATE TABLE h.c AS SELECT 1 AS x;\nABORT;\n",
    }


def refuse_all(root: Path, statements: list[str], models: dict[str, str], state: Any) -> list[str]:
    """Run each hostile query and model; each must fail and leave ``state()`` as it was.

    Returns every output (for the canary checks)."""
    outputs = []
    before = state()
    for text in statements:
        code, out, err = cli("query", text, "--project", str(root))
        outputs += [out, err]
        assert code != 0, (text, out)
        assert "refused" in err or "disabled by configuration" in err or "exactly one" in err, (text, err)
    for rel, text in models.items():
        path = root / "models" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        code, out, err = cli("run", f"path:models/{rel}", "--project", str(root),
                             "--format", "json")
        path.unlink()
        outputs += [out, err]
        doc = json.loads(out) if code == 1 and out.strip() else {}
        if code == 2 or "results" not in doc:  # refused when the model was read (a located error)
            assert code in (1, 2) and f"models/{rel}:" in err and "Usage" not in err, (rel, err)
            assert code == 2 or doc.get("path") == f"models/{rel}", (rel, out)
        else:  # refused when it ran: failed, nothing written
            assert code == 1, (rel, out, err)
            (result,) = json.loads(out)["results"]
            assert result["status"] == "failed", (rel, out)
            assert "is refused" in result["error"] or "disabled by configuration" in result["error"], (rel, out)
    assert state() == before
    return outputs


def test_every_table_function_is_classified(tmp_path: Path) -> None:
    con = extensions.connect(("avro", "iceberg", "httpfs", "ducklake", "sqlite_scanner", "postgres_scanner"))
    try:
        con.execute(f"ATTACH 'ducklake:{tmp_path}/c.ducklake' AS lake (DATA_PATH '{tmp_path}/d/')")
        names = {r[0] for r in con.execute(
            "SELECT DISTINCT function_name FROM duckdb_functions() WHERE function_type = 'table'").fetchall()}
    finally:
        con.close()
    assert len(names) > 120
    assert not sandbox.TABLE_FUNCTIONS & sandbox.DENIED_FUNCTIONS
    assert sorted(names - sandbox.TABLE_FUNCTIONS - sandbox.DENIED_FUNCTIONS) == []


REFUSED_SPELLINGS = [
    "SELECT current_setting/* a comment */ ('s3_secret_access_key')",
    "SELECT current_setting\n-- a comment\n('s3_secret_access_key')",
    'SELECT "Current_Setting"(\'s3_secret_access_key\')',
    "SELECT main.current_setting('s3_secret_access_key')",
    "SELECT list_transform([1], x -> current_setting('s3_access_key_id'))",
    "WITH s AS (FROM duckdb_settings()) FROM s",
    "SELECT * FROM (SUMMARIZE SELECT current_setting('s3_session_token'))",
    "SELECT * FROM t AT (VERSION => (SELECT 1 FROM duckdb_secrets()))",
    'SELECT * FROM pg_catalog . "pg_settings"',
    "SELECT * FROM some_new_table_function()",
]
ALLOWED = [
    "SELECT 1 AS checkpoint, 'current_setting(x)' AS s",
    "SELECT * FROM lake.snapshots()",
    "SELECT * FROM ducklake_table_changes('lake', 'main', 't', 1, 2)",
    "DESCRIBE marts.people", "SUMMARIZE marts.people", "SHOW TABLES", "FROM marts.people", "VALUES (1)",
    "WITH a AS (SELECT * FROM range(3)) SELECT * FROM a, generate_series(1, 2)",
    "SELECT * FROM read_csv('seeds/raw/people.csv')",
]


def test_the_check_sees_through_spellings() -> None:
    for text in REFUSED_SPELLINGS:
        for allowed in (sandbox.QUERY_TYPES, sandbox.MODEL_TYPES):
            with pytest.raises(PlanError, match="is refused"):
                sandbox.check(text, allowed=allowed, what="q")
    for text in [f"INSERT INTO t {t}" for t in REFUSED_SPELLINGS[:5]] + [
            "CREATE MACRO m() AS current_setting('x')", "CREATE OR REPLACE PERSISTENT SECRET s (TYPE s3)",
            "DROP SECRET lakewrap_s3", "INSERT INTO __ducklake_metadata_lake.ducklake_snapshot VALUES (1)"]:
        with pytest.raises(PlanError, match="is refused"):
            sandbox.check(text, allowed=sandbox.MODEL_TYPES, what="m", catalog_tables=False)
    for text in ALLOWED:
        sandbox.check(text, allowed=sandbox.QUERY_TYPES, what="q")
    sandbox.check("CREATE TABLE secret AS SELECT 1 AS checkpoint", allowed=sandbox.MODEL_TYPES, what="m")


def test_hostile_sql_changes_nothing_on_ducklake(tmp_path: Path) -> None:
    root = write_project(tmp_path / "project")
    outside = tmp_path / "outside.txt"
    outside.write_text("not the lake's\n")
    ok(root, "seed")
    ok(root, "run")
    ok(root, "query", "SELECT count(*) FROM marts.people")  # the caches a query writes exist now
    inspector = Inspector()
    try:
        def state() -> tuple[Any, ...]:
            return inspector.state(root), files(root / ".lakewrap" / "data"), files(root, ("target/run",))

        data = f"{root}/.lakewrap/data/"
        refuse_all(root, hostile_queries(root, outside, data), hostile_models(root, outside), state)
    finally:
        inspector.close()
    # what the sandbox leaves allowed: the lake, the project's files, a folder [security] allows
    assert json.loads(ok(root, "query", "SELECT count(*) AS n FROM marts.people", "--format", "json")) == [{"n": 2}]
    seed = root / "seeds" / "raw" / "people.csv"
    counted = ok(root, "query", f"SELECT count(*) AS n FROM read_csv('{seed}')", "--format", "json")
    assert json.loads(counted) == [{"n": 2}]
    (root / "lakewrap.toml").write_text(f'[lake]\n\n[security]\nallow_paths = ["{tmp_path}"]\n')
    assert "not the lake's" in ok(root, "query", f"SELECT content FROM read_text('{outside}')")


def test_hostile_sql_changes_nothing_on_iceberg(tmp_path: Path) -> None:
    root = write_project(tmp_path / "project", '[lake]\nsubstrate = "iceberg"\n')
    outside = tmp_path / "outside.txt"
    outside.write_text("not the lake's\n")
    ok(root, "seed")
    ok(root, "run")
    ok(root, "query", "SELECT count(*) FROM marts.people")

    def state() -> tuple[Any, ...]:
        return files(root, ("target/run",))

    queries = [q for q in hostile_queries(root, outside, f"{root}/.lakewrap/warehouse/")
               if "lake" not in q.lower() or "read" in q.lower()]
    models = {k: v for k, v in hostile_models(root, outside).items()
              if k in ("h/setting.sql", "h/passwd.sql", "h/outside.sql", "h/logging.sql", "h/query.sql")}
    refuse_all(root, queries, models, state)
    assert json.loads(ok(root, "query", "SELECT count(*) AS n FROM marts.people", "--format", "json")) == [{"n": 2}]


@pytest.mark.postgres
def test_credentials_never_reach_sql_on_postgres_and_s3(tmp_path: Path, postgres: Postgres, moto_s3: S3,  # noqa: F811
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    tag = secrets.token_hex(4)
    canaries = {"AWS_ACCESS_KEY_ID": f"CANARYKEYID{tag}", "AWS_SECRET_ACCESS_KEY": f"canary-secret-{tag}",
                "AWS_SESSION_TOKEN": f"canary-token-{tag}", "LAKEWRAP_ICEBERG_TOKEN": f"canary-rest-{tag}",
                "PGPASSWORD": postgres.password}
    for name, value in canaries.items():
        monkeypatch.setenv(name, value)
    dbname, bucket = f"sandbox_{tag}", f"sandbox-{tag}"
    moto_s3.create_bucket(bucket)
    toml = (f'[lake]\ncatalog = "postgres"\ndsn = "{postgres.create_database(dbname)}"\n'
            f'data_path = "s3://{bucket}/lake/"\ndata_inlining_row_limit = 0\n\n'
            f'[lake.s3]\nendpoint = "{moto_s3.endpoint}"\nurl_style = "path"\nuse_ssl = false\n')
    root = write_project(tmp_path / "project", toml)
    outside = tmp_path / "outside.txt"
    outside.write_text("x\n")
    outputs = [ok(root, "seed"), ok(root, "run"), ok(root, "query", "SELECT * FROM marts.people")]
    assert "bob" in outputs[-1]

    def state() -> tuple[Any, ...]:
        snaps = postgres.psql("SELECT string_agg(snapshot_id::text, ',' ORDER BY 1) FROM ducklake_snapshot", dbname)
        return snaps, sorted(moto_s3.keys(bucket)), files(root, ("target/run",))

    # the credential part of the corpus, and writes to the S3 data path
    words = ("setting", "secret", "databases", "query", "postgres", "flush", "s3://", "copy", "checkpoint")
    corpus = hostile_queries(root, outside, f"s3://{bucket}/lake/")
    queries = [*(q for q in corpus if any(w in q.lower() for w in words)),
               *(f"SELECT current_setting('{s}')" for s in extensions.ENV_COPIED_SETTINGS),
               f"SELECT * FROM read_csv('s3://{bucket}/other/x.csv')"]
    models = {k: v for k, v in hostile_models(root, outside).items()
              if k in ("h/setting.sql", "h/settings.sql", "h/literal_setting.sql", "h/macro.sql", "h/copy.sql")}
    outputs += refuse_all(root, queries, models, state)

    # the second layer: what a connection holds, read past lakewrap's statement check
    for read_only in (True, False):
        lake = Lake.open(root, read_only=read_only)
        con = lake.connect()
        try:
            # DuckDB redacts a secret's secret and session token but shows its key id: lakewrap's
            # statement check refuses duckdb_secrets() (asserted above); the rest is redacted here
            shown = repr(con.execute("SELECT * FROM duckdb_secrets()").fetchall())
            assert canaries["AWS_SECRET_ACCESS_KEY"] not in shown and canaries["AWS_SESSION_TOKEN"] not in shown
            for text in ["SELECT name, value FROM duckdb_settings()", "SELECT path, options FROM duckdb_databases()",
                         *(f"SELECT current_setting('{s}')" for s in extensions.ENV_COPIED_SETTINGS)]:
                outputs.append(repr(con.execute(text).fetchall()))
            for text in ["SET s3_secret_access_key = 'x'", "SET enable_external_access = true",
                         "RESET allowed_directories"]:
                with pytest.raises(Exception, match="configuration has been locked"):
                    con.execute(text)
        finally:
            lake.close(con)
    assert sum("s3_secret_access_key" in o for o in outputs) >= 1  # the settings were read
    stored = [p.read_bytes().decode(errors="replace") for p in root.rglob("*") if p.is_file()]
    for name, value in canaries.items():
        assert not [o for o in outputs + stored if value in o], name


def test_a_rest_catalog_lake_reads_no_file_from_sql(tmp_path: Path) -> None:
    """A REST catalog decides where each table's files are, so its DuckDB sessions get no file
    sandbox: there, queries, models and data tests may not call a file-reading function at all."""
    from pyiceberg.catalog.sql import SqlCatalog

    from icehouse_sql import rest_toml
    from rest_adapter import serve

    server = tmp_path / "rest-server"
    server.mkdir()
    backing = SqlCatalog("rest", uri=f"sqlite:///{server / 'rest.db'}", warehouse=(server / "wh").as_uri())
    outside = tmp_path / "outside.csv"
    outside.write_text("secret_column\nnot the lake's\n")
    with serve(backing) as uri:
        root = write_project(tmp_path / "project", rest_toml(uri))
        ok(root, "seed")
        ok(root, "run")  # a model over a table still runs
        for query in (f"SELECT * FROM read_csv('{outside}')", f"SELECT * FROM '{outside}'",
                      f"SELECT count(*) FROM glob('{tmp_path}/*')", f"FROM read_text('{outside}')"):
            code, out, err = cli("query", query, "--project", str(root))
            assert code != 0 and "not the lake's" not in out + err, (query, out + err)
        (root / "models" / "marts" / "leak.sql").write_text(
            f"-- materialized table\nSELECT * FROM read_csv('{outside}')\n")
        code, out, err = cli("run", "marts.leak", "--project", str(root))
        assert code == 1 and "read_csv()` is refused" in out + err and "not the lake's" not in out + err, out + err
        assert json.loads(ok(root, "query", "SELECT count(*) AS n FROM marts.people", "--format", "json")) == [{"n": 2}]
