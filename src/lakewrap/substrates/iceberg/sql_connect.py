"""A DuckDB connection for Iceberg's ``sql`` write path: the REST catalog attached through DuckDB's
Iceberg extension, with its credentials in DuckDB secrets that are never logged."""

from __future__ import annotations

from typing import Any

from lakewrap.compilers import iceberg_sql as isql
from lakewrap.compilers import lake as sql
from lakewrap.errors import ExecutionError
from lakewrap.execute import extensions, sandbox
from lakewrap.execute.iceberg import TOKEN_ENV, IcebergLake

TOKEN_SECRET = "lakewrap_iceberg_token"


def connect(lake: IcebergLake) -> Any:
    """A DuckDB connection with the REST catalog attached as ``ice``.

    S3 credentials go into a DuckDB S3 secret and a bearer token (``LAKEWRAP_ICEBERG_TOKEN``) into
    an Iceberg secret; the statements creating them are never logged, and their values are
    redacted from every error.
    """
    import os

    rest = lake.config.rest
    if rest is None or lake.config.write_path != "sql":
        raise ExecutionError("write_path = \"sql\" needs catalog = \"rest\"", hint="see docs/iceberg.md")
    con = extensions.connect(("avro", "iceberg", "httpfs"))
    try:
        con.execute(sql.set_option("TimeZone", "UTC", everywhere=True))
        if lake.config.is_s3:
            lake._s3_secret(con)
        token = os.environ.get(TOKEN_ENV)
        if token:
            lake.secrets.append(token)
            try:
                con.execute(isql.token_secret(TOKEN_SECRET, token))
            except Exception as exc:  # the statement holds the token: never show it
                raise ExecutionError(f"cannot configure the REST token: {lake.redact(str(exc)).splitlines()[0]}") \
                    from None
        # The catalog's warehouse name (`[lake.rest] warehouse`), never the storage location: DuckDB
        # 1.5.5 attaches an `s3://...` name read-only.
        warehouse = rest.warehouse or ""
        try:
            con.execute(isql.attach(warehouse, rest.uri, TOKEN_SECRET if token else None))
        except Exception as exc:
            raise ExecutionError(f"cannot attach the Iceberg REST catalog: {lake.redact(str(exc)).splitlines()[0]}",
                                 hint="check [lake.rest] uri in lakewrap.toml and that the catalog is reachable") \
                from None
        sandbox.lock(con, None)  # data files go where the REST catalog says (docs/security.md)
    except Exception:
        con.close()
        raise
    return con
