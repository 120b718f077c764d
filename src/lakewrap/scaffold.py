"""``lakewrap init``: write a new project that runs at once.

The project has a commented ``lakewrap.toml`` (the embedded lake of the chosen substrate), one CSV
seed, two table models (a staging model over the seed and a mart over the staging model) and data
tests on both. Both models are ``table`` models, so ``lakewrap seed && lakewrap run`` needs no
partition and works on DuckLake and Iceberg alike (Iceberg has no views).
"""

from __future__ import annotations

from pathlib import Path

from lakewrap.errors import ConfigError, choices_hint

SUBSTRATES = ("ducklake", "iceberg")

_TOML = {
    "ducklake": '''\
# lakewrap.toml: where the lake lives (docs/configuration.md).
# Without other keys this is the embedded DuckLake: its catalog is the DuckDB file
# .lakewrap/lake.ducklake and its data files go to .lakewrap/data/, both in this folder.
# Credentials never go in this file; they come from the environment.

[lake]
substrate = "ducklake"
# catalog = "duckdb"                 # duckdb (default) | sqlite | postgres
# path = ".lakewrap/lake.ducklake"   # the catalog file of a duckdb or sqlite catalog
# data_path = ".lakewrap/data/"      # a local folder or s3://bucket/prefix/

# [run]
# retries = 19                       # retries of retryable errors per model (the default)
''',
    "iceberg": '''\
# lakewrap.toml: where the lake lives (docs/configuration.md, docs/iceberg.md).
# Without other keys this is the embedded Iceberg lake: a pyiceberg SQL catalog (SQLite) and a
# local warehouse, both under .lakewrap/ in this folder.
# Credentials never go in this file; they come from the environment.

[lake]
substrate = "iceberg"
# catalog = "sql"                    # sql (default) | glue | rest
# warehouse = "s3://bucket/prefix/"  # where the table files go

# [run]
# retries = 19                       # retries of retryable errors per model (the default)
''',
}

SEED = """\
order_id,customer_id,amount,status,created_at
1,10,120.50,placed,2024-01-01 09:15:00
2,11,80.00,shipped,2024-01-01 11:40:00
3,10,42.25,shipped,2024-01-02 08:05:00
4,12,310.00,returned,2024-01-02 16:30:00
5,11,15.75,placed,2024-01-03 10:00:00
6,13,99.99,shipped,2024-01-03 18:45:00
"""

STAGING = """\
-- materialized table
-- description "Orders from the seed raw.orders, with typed columns"
-- test unique order_id
-- test not_null order_id
-- test accepted_values status=placed,shipped,returned
SELECT order_id, customer_id, CAST(amount AS DECIMAL(18, 2)) AS amount, status,
       CAST(created_at AS TIMESTAMP) AS created_at
FROM raw.orders
"""

MART = """\
-- materialized table
-- description "Orders and revenue per status, from staging.orders"
-- test unique status
SELECT status, count(*) AS orders, sum(amount) AS revenue
FROM staging.orders
GROUP BY status
"""

GITIGNORE = """\
# the embedded lake and lakewrap's build output
.lakewrap/
target/
"""


def files(substrate: str) -> dict[str, str]:
    """The new project's files, path (relative, ``/``-separated) to text."""
    if substrate not in SUBSTRATES:
        raise ConfigError(f"unknown substrate `{substrate}`", hint=choices_hint(substrate, SUBSTRATES, "substrate"))
    return {
        "lakewrap.toml": _TOML[substrate],
        "seeds/raw/orders.csv": SEED,
        "models/staging/orders.sql": STAGING,
        "models/marts/orders_by_status.sql": MART,
        ".gitignore": GITIGNORE,
    }


def init_project(root: Path, substrate: str = "ducklake", *, force: bool = False) -> list[Path]:
    """Write a new project into ``root`` (created if missing); returns the files written.

    A folder that exists and is not empty is refused unless ``force``; with ``force`` only the
    scaffold's own files are (over)written, nothing else in the folder is touched.
    """
    content = files(substrate)
    if root.exists() and not root.is_dir():
        raise ConfigError(f"`{root}` exists and is not a folder", hint="pass a new or empty folder to lakewrap init")
    if root.is_dir() and not force:
        present = sorted(p.name for p in root.iterdir())
        if present:
            shown = ", ".join(present[:5]) + (" ..." if len(present) > 5 else "")
            raise ConfigError(f"`{root}` is not empty ({shown})",
                              hint="pass a new or empty folder, or --force to write the project's files into it")
    written = []
    for rel, text in content.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written
