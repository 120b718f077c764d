"""SQL for ``lakewrap maintain``: DuckLake compaction, snapshot expiry, old-file and orphan cleanup.

Pure builders (no I/O). The DuckLake 1.5.5 functions and signatures were checked on a real lake
(``duckdb_functions()``): ``ducklake_rewrite_data_files(catalog, table, schema =>, delete_threshold =>)``,
``ducklake_merge_adjacent_files(catalog, table, schema =>)``, ``ducklake_expire_snapshots(catalog,
versions =>, dry_run =>)``, ``ducklake_cleanup_old_files(catalog, cleanup_all =>, dry_run =>)``,
``ducklake_delete_orphaned_files(catalog, older_than =>, dry_run =>)`` and
``ducklake_list_files(catalog, table, schema =>)``. Each is called as a table function in a
``SELECT``, which returns the rows a ``CALL`` would.
"""

from __future__ import annotations

from sqlglot import exp

from lakewrap.compilers import sql as q
from lakewrap.compilers.lake import MATERIALIZATIONS, STATE_SCHEMA


def _kw(name: str, value: exp.Expr) -> exp.Kwarg:
    return exp.Kwarg(this=exp.var(name), expression=value)


def _call(fn: str, *args: exp.Expr) -> exp.Table:
    return exp.Table(this=exp.Anonymous(this=fn, expressions=list(args)))


def _select_all(fn: str, *args: exp.Expr) -> str:
    return q.render(exp.select(exp.Star()).from_(_call(fn, *args)))


def rewrite_data_files(alias: str, schema: str, name: str) -> str:
    """Rewrite the data files of ``schema.name`` whose deleted-row share reaches ``$threshold``."""
    return _select_all("ducklake_rewrite_data_files", q.string(alias), q.string(name),
                       _kw("schema", q.string(schema)), _kw("delete_threshold", q.param("threshold")))


def merge_adjacent_files(alias: str, schema: str, name: str) -> str:
    """Merge the small adjacent data files of ``schema.name`` (files without deletes)."""
    return _select_all("ducklake_merge_adjacent_files", q.string(alias), q.string(name),
                       _kw("schema", q.string(schema)))


def list_files(alias: str, schema: str, name: str) -> str:
    """The data files (and delete files) of the current snapshot of ``schema.name``."""
    return q.render(exp.select(q.count_star(), exp.Count(this=exp.column("delete_file")))
                    .from_(_call("ducklake_list_files", q.string(alias), q.string(name),
                                 _kw("schema", q.string(schema)))))


def expire_snapshots(alias: str, dry_run: bool) -> str:
    """Expire exactly the snapshots ``$versions`` (never ``older_than``: lakewrap chooses them)."""
    versions = exp.cast(q.param("versions"), exp.DataType.build("UBIGINT[]", dialect="duckdb"))
    return q.render(exp.select(exp.column("snapshot_id")).from_(_call(
        "ducklake_expire_snapshots", q.string(alias), _kw("versions", versions),
        _kw("dry_run", exp.Boolean(this=dry_run)))))


def cleanup_old_files(alias: str, dry_run: bool) -> str:
    """Delete every file that only expired snapshots referenced (``cleanup_all``)."""
    return q.render(exp.select(exp.column("path")).from_(_call(
        "ducklake_cleanup_old_files", q.string(alias), _kw("cleanup_all", exp.true()),
        _kw("dry_run", exp.Boolean(this=dry_run)))))


def delete_orphaned_files(alias: str, dry_run: bool) -> str:
    """Delete the files under the data path that no snapshot knows, older than ``$older_than``."""
    return q.render(exp.select(exp.column("path")).from_(_call(
        "ducklake_delete_orphaned_files", q.string(alias), _kw("older_than", q.param("older_than")),
        _kw("dry_run", exp.Boolean(this=dry_run)))))


def snapshots(alias: str) -> str:
    """Every snapshot: id, time, commit extra info."""
    return q.render(exp.select(exp.column("snapshot_id"), exp.column("snapshot_time"),
                               exp.column("commit_extra_info"))
                    .from_(exp.Table(this=exp.Anonymous(this="snapshots"), db=q.ident(alias)))
                    .order_by(exp.column("snapshot_id")))


def run_records() -> str:
    """The run records whose snapshots retention protects: run, target, partition, pins, time."""
    return q.render(exp.select(exp.column("run_id"), exp.column("target"), exp.column("partition_value"),
                               exp.column("pins"), exp.column("committed_at"))
                    .from_(q.table(STATE_SCHEMA, MATERIALIZATIONS)))


def storage_files() -> str:
    """How many files lie under the glob ``$pattern`` (the lake's data path)."""
    return q.render(exp.select(q.count_star()).from_(_call("glob", q.param("pattern"))))
