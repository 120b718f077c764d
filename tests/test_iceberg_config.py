"""``[lake] substrate = "iceberg"``: its defaults, its typed catalog settings, and located errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lakeproject import cli
from lakewrap.config import load_config
from lakewrap.errors import ConfigError


def config(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    (tmp_path / "lakewrap.toml").write_text(text)
    return load_config(tmp_path).lake


def test_the_substrate_alone_is_the_embedded_default(tmp_path: Path) -> None:
    lake = config(tmp_path, '[lake]\nsubstrate = "iceberg"\n')
    assert (lake.catalog, lake.write_path, lake.is_s3) == ("sql", "pyiceberg", False)
    assert lake.iceberg_catalog_path(tmp_path) == tmp_path / ".lakewrap" / "iceberg.db"
    assert lake.warehouse_location(tmp_path) == (tmp_path / ".lakewrap" / "warehouse").resolve().as_uri()


def test_glue_rest_and_s3_settings(tmp_path: Path) -> None:
    glue = config(tmp_path, '[lake]\nsubstrate = "iceberg"\ncatalog = "glue"\nwarehouse = "s3://b/wh/"\n'
                            '[lake.glue]\nendpoint = "http://127.0.0.1:5055"\nregion = "eu-west-1"\n')
    assert glue.glue is not None and glue.glue.region == "eu-west-1" and glue.s3 is not None
    assert glue.warehouse_location(tmp_path) == "s3://b/wh"
    rest = config(tmp_path, '[lake]\nsubstrate = "iceberg"\ncatalog = "rest"\n[lake.rest]\nuri = "http://h:8181"\n')
    assert rest.rest is not None and rest.rest.uri == "http://h:8181"


@pytest.mark.parametrize(("text", "message"), [
    ('catalog = "glue"\n', "a glue catalog needs warehouse"),
    ('catalog = "rest"\n', "a rest catalog needs [lake.rest]"),
    ('catalog = "sqlite"\n', "is a DuckLake catalog"),
    ('data_path = "d"\n', "use warehouse"),
    ('dsn = "dbname=x"\n', "dsn does not apply"),
    ('write_path = "sql"\n', 'needs catalog = "rest"'),
    ('catalog = "sql"\n[lake.glue]\nregion = "x"\n', "[lake.glue] only applies"),
    ('catalog = "glue"\nwarehouse = "s3://b"\n[lake.glue]\nendpoint = "http://k:s@h"\n', "without credentials"),
    ('catalog = "rest"\n[lake.rest]\nuri = "http://h"\ntoken = "t"\n', "must not hold credentials"),
    ('catalog = "glue"\nwarehouse = "s3://b"\n[lake.glue]\nsecret_access_key = "x"\n',
     "must not hold credentials"),
])
def test_bad_iceberg_settings_are_located_errors(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        config(tmp_path, '[lake]\nsubstrate = "iceberg"\n' + text)
    assert message in info.value.render()
    assert info.value.location is not None and info.value.location.path == "lakewrap.toml"


def test_iceberg_keys_are_refused_on_ducklake(tmp_path: Path) -> None:
    for text in ('warehouse = "w"\n', 'catalog = "glue"\n', 'write_path = "sql"\n'):
        with pytest.raises(ConfigError):
            config(tmp_path, "[lake]\n" + text)


def test_compile_follows_the_configured_substrate(tmp_path: Path) -> None:
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "m.sql").write_text("-- materialized incremental\n-- unique_key id\n"
                                               "SELECT id, v FROM raw.t\n")
    (tmp_path / "lakewrap.toml").write_text('[lake]\nsubstrate = "iceberg"\n')
    code, out, err = cli("compile", "--project", str(tmp_path), "--format", "json", "--no-cache")
    assert code == 0, err
    (plan,) = json.loads(out)["plans"]
    assert (plan["substrate"], plan["write_path"]) == ("iceberg", "pyiceberg")
    (op,) = plan["commits"]
    assert op["operation"] == "overwrite" and op["delete_where"].startswith('"id" IN')
    code, out, _ = cli("compile", "--project", str(tmp_path), "--no-cache")
    assert code == 0 and "] commit: upsert on id" in out and "pyiceberg overwrite main.m: delete where" in out
    (tmp_path / "lakewrap.toml").write_text('[lake]\nsubstrate = "iceberg"\ncatalog = "rest"\nwrite_path = "sql"\n'
                                            '[lake.rest]\nuri = "http://h:1"\n')
    code, out, err = cli("compile", "--project", str(tmp_path), "--no-cache")
    assert code == 0, err
    assert "(substrate iceberg, write path sql)" in out and 'MERGE INTO "ice"."main"."m" AS "target"' in out
    assert 'FROM "ice".raw.t' in out and 'INSERT INTO "ice"."lakewrap"."main__m" BY NAME' in out
    # the namespaces and the state table are created before BEGIN
    assert out.index('CREATE TABLE IF NOT EXISTS "ice"."lakewrap"."main__m"') < out.index("BEGIN TRANSACTION;")
    code, out, err = cli("compile", "--project", str(tmp_path), "--no-cache", "--format", "json")
    (plan,) = json.loads(out)["plans"]
    assert (plan["substrate"], plan["write_path"], plan["commits"]) == ("iceberg", "sql", [])


