"""The DuckLake compiler: DuckDB SQL inside one transaction; every shape as the base defines it."""

from __future__ import annotations

from lakewrap.compilers.base import Capabilities, Compiler


class DuckLakeCompiler(Compiler):
    """DuckLake supports views, ``CREATE OR REPLACE``, MERGE with one UPDATE action, and
    ``ALTER TABLE ... SET PARTITIONED BY``; its materializer writes range batches."""

    caps = Capabilities(
        name="ducklake",
        write_path="sql",
        supports_views=True,
        supports_create_or_replace=True,
        supports_merge=True,
        max_merge_update_actions=1,
        supports_merge_predicate=True,
        partition_ddl=True,
        range_writes=True,
    )
