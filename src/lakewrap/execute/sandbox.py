"""What SQL a user wrote may do: DuckDB's own sandbox settings, plus a check of each statement.

Two layers (``docs/security.md``):

* **DuckDB's sandbox** (:func:`lock`): once lakewrap has loaded the extensions, created the S3
  secret and attached the lake, a connection gets ``enable_external_access = false`` with
  ``allowed_directories`` / ``allowed_paths`` limited to the project folder, the lake's data path
  (an ``s3://`` prefix too), its catalog file and ``[security] allow_paths``; then
  ``lock_configuration = true``, so no later statement changes a setting.
* **The statement check** (:func:`check`), on DuckDB's own parser: the statement types
  (``duckdb.extract_statements``), the function and table names of a SELECT
  (``json_serialize_sql``), and for the other statement types DuckDB's tokens
  (``duckdb.tokenize``: a name followed by ``(`` is a call). Refused: every function that reads
  settings or secrets, writes files, checkpoints or flushes, enables logging, runs SQL given as a
  string, or reaches the catalog server directly; table functions of a SELECT must be on the allow
  list :data:`TABLE_FUNCTIONS` (tests/test_security_sandbox.py classifies every table function the
  bundled extensions register, so a new one is refused until it is classified).

The check runs on a private in-memory connection that has external access off: DuckDB's parser
runs some PRAGMAs while it splits statements (``PRAGMA import_database('x')`` opens ``x/schema.sql``),
so text holding the keyword PRAGMA is refused before it is split.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from lakewrap.errors import PlanError
from lakewrap.execute.binding import literal

if TYPE_CHECKING:
    from lakewrap.compilers.artifacts import CompiledPlan

# Table functions user SQL may call: they read tables, files inside the sandbox, or constants.
TABLE_FUNCTIONS = frozenset({
    "generate_series", "range", "unnest", "repeat", "repeat_row", "json_each", "json_tree", "glob",
    "read_csv", "read_csv_auto", "read_json", "read_json_auto", "read_json_objects", "read_json_objects_auto",
    "read_ndjson", "read_ndjson_auto", "read_ndjson_objects", "read_parquet", "parquet_scan", "read_avro",
    "read_blob", "read_text", "read_duckdb", "read_postgres_binary", "sniff_csv", "summary", "seq_scan",
    "parquet_bloom_probe", "parquet_file_metadata", "parquet_full_metadata", "parquet_kv_metadata",
    "parquet_metadata", "parquet_schema", "histogram", "histogram_values", "icu_calendar_names",
    "pg_timezone_names", "test_all_types", "test_vector_types",
    "iceberg_scan", "iceberg_metadata", "iceberg_snapshots", "iceberg_column_stats", "iceberg_partition_stats",
    "iceberg_schema_properties", "iceberg_table_properties",
    "duckdb_approx_database_count", "duckdb_columns", "duckdb_connection_count", "duckdb_constraints",
    "duckdb_coordinate_systems", "duckdb_dependencies", "duckdb_extensions", "duckdb_external_file_cache",
    "duckdb_functions", "duckdb_indexes", "duckdb_keywords", "duckdb_memory", "duckdb_optimizers",
    "duckdb_prepared_statements", "duckdb_schemas", "duckdb_secret_types", "duckdb_sequences",
    "duckdb_table_sample", "duckdb_tables", "duckdb_temporary_files", "duckdb_types", "duckdb_variables",
    "duckdb_views",
    "pragma_collations", "pragma_database_size", "pragma_metadata_info", "pragma_platform", "pragma_show",
    "pragma_storage_info", "pragma_table_info", "pragma_user_agent", "pragma_version",
    # DuckLake's readers, also as <alias>.<name>() on the attached lake
    "ducklake_current_snapshot", "ducklake_last_committed_snapshot", "ducklake_list_files", "ducklake_options",
    "ducklake_settings", "ducklake_snapshots", "ducklake_table_changes", "ducklake_table_deletions",
    "ducklake_table_info", "ducklake_table_insertions", "ducklake_scan",
    "current_snapshot", "last_committed_snapshot", "list_files", "options", "settings", "snapshots",
    "table_changes", "table_deletions", "table_info", "table_insertions",
})

# The table functions of TABLE_FUNCTIONS that read a file or folder by its path. Where DuckDB's file
# sandbox cannot be set (an Iceberg ``rest`` or ``glue`` catalog decides where each table's files are),
# user SQL may not call them at all (``check(..., files=False)``).
FILE_READERS = frozenset({
    name for name in TABLE_FUNCTIONS
    if name.startswith(("read_", "parquet_", "iceberg_")) or name in ("glob", "sniff_csv")
})

# Functions (table or scalar, by name, any schema) that no statement a user wrote may call.
DENIED_FUNCTIONS = frozenset({
    # settings, secrets, environment, logs (which may hold statements), attached paths (a DSN)
    "current_setting", "getenv", "duckdb_settings", "duckdb_secrets", "which_secret", "duckdb_databases",
    "duckdb_logs", "duckdb_logs_parsed", "duckdb_log_contexts", "duckdb_profiling_settings",
    "iceberg_load_table_response",  # a REST catalog's answer, vended credentials included
    # writes files, checkpoints, flushes, logs, profiles
    "checkpoint", "force_checkpoint", "enable_logging", "disable_logging", "truncate_duckdb_logs", "write_log",
    "enable_profiling", "disable_profiling", "iceberg_to_ducklake", "set_iceberg_schema_properties",
    "set_iceberg_table_properties", "remove_iceberg_schema_properties", "remove_iceberg_table_properties",
    "ducklake_add_data_files", "ducklake_cleanup_old_files", "ducklake_commit", "ducklake_delete_orphaned_files",
    "ducklake_expire_snapshots", "ducklake_flush_inlined_data", "ducklake_merge_adjacent_files",
    "ducklake_rewrite_data_files", "ducklake_set_commit_message", "ducklake_set_option",
    "add_data_files", "cleanup_old_files", "delete_orphaned_files", "expire_snapshots", "flush_inlined_data",
    "merge_adjacent_files", "rewrite_data_files", "set_commit_message", "set_option",
    # SQL (or a plan) given as a value: it would escape this check
    "query", "query_table", "json_execute_serialized_sql",
    # the catalog server or another database, directly
    "postgres_attach", "postgres_configure_pool", "postgres_execute", "postgres_query", "postgres_scan",
    "postgres_scan_pushdown", "pg_clear_cache", "sqlite_attach", "sqlite_query", "sqlite_scan",
    # Python objects by address
    "arrow_scan", "arrow_scan_dumb", "pandas_scan", "python_map_function",
})

# Built-in views over the denied functions (``FROM duckdb_databases`` needs no parentheses).
DENIED_RELATIONS = frozenset({"duckdb_settings", "pg_settings", "duckdb_databases", "pragma_database_list",
                              "duckdb_logs", "duckdb_secrets"})

QUERY_TYPES = frozenset({"SELECT"})
# what a model's statements (lakewrap's plan around the user's SQL, a literal model's own) may be
MODEL_TYPES = frozenset({"SELECT", "INSERT", "UPDATE", "DELETE", "CREATE", "DROP", "ALTER", "MERGE_INTO"})

_lock = threading.Lock()
_checker: Any = None
_checked: set[str] = set()  # "<sql_sha256>:<files>" of the plans this process checked


def _connection() -> Any:
    """The private connection statements are parsed on (external access off, settings locked)."""
    global _checker
    if _checker is None:
        import duckdb

        _checker = duckdb.connect(config={"enable_external_access": False, "lock_configuration": True,
                                          "autoload_known_extensions": False,
                                          "autoinstall_known_extensions": False})
    return _checker


def check(text: str, *, allowed: frozenset[str], what: str, hint: str | None = None,
          catalog_tables: bool = True, single: bool = False, files: bool = True) -> None:
    """Refuse ``text`` unless each statement is of an ``allowed`` type and calls nothing denied.

    ``what`` names the SQL in the error (``"the query"``, ``"models/x.sql"``); ``hint`` is the
    error's hint for a refused statement type. ``catalog_tables=False`` also refuses the tables
    of the lake's catalog database (``__ducklake_metadata_<alias>``), which only DuckLake writes.
    ``single``: exactly one statement. ``files=False`` (a connection DuckDB's file sandbox does not
    cover) also refuses the table functions that read files by path (:data:`FILE_READERS`).

    Raises:
        PlanError: the statement type or the function or table it names, and why.
    """
    import duckdb

    names = _tokens(text)
    if "pragma" in {n for n, _ in names}:
        raise _refused(what, "PRAGMA", "a PRAGMA changes settings or runs a command")
    with _lock:
        con = _connection()
        try:
            statements = con.extract_statements(text)
        except duckdb.Error as exc:
            raise PlanError(f"{what}: DuckDB cannot parse it: {str(exc).splitlines()[0]}") from None
        if single and len(statements) != 1:
            raise PlanError(f"{what} runs exactly one statement, got {len(statements)}",
                            hint="run one SELECT at a time")
        for st in statements:
            kind = st.type.name
            if kind not in allowed:
                raise _refused(what, kind.replace("_", " "), "this statement type is not allowed here", hint)
            if kind in ("CREATE", "DROP") and _is_secret(st.query):
                raise _refused(what, f"{kind} SECRET", "a secret would redirect or break the lake's storage access")
            if kind == "SELECT":
                _check_tree(con, st.query, what)
    if not files and _file_scan(text):
        raise _refused(what, "FROM '<file>'", "this lake's catalog decides where files are, so DuckDB's file "
                       "sandbox cannot be set and no file is read from SQL (an Iceberg rest or glue catalog)",
                       "load files as seeds, or see docs/security.md")
    for name, called in names:
        if not catalog_tables and name.startswith("__ducklake_metadata"):
            raise _refused(what, name, "the lake's catalog is written by DuckLake only")
        if called and name in DENIED_FUNCTIONS:
            raise _refused(what, f"{name}()", _why(name))
        if called and not files and name in FILE_READERS:
            raise _refused(what, f"{name}()", "this lake's catalog decides where files are, so DuckDB's file "
                           "sandbox cannot be set and no file is read from SQL (an Iceberg rest or glue catalog)",
                           "load files as seeds, or see docs/security.md")
        if not called and name in DENIED_RELATIONS:
            raise _refused(what, name, _why(name))


def check_plan(compiled: CompiledPlan, *, files: bool = True) -> None:
    """Check every statement of a model's plan (once per plan and process) before any runs.

    The plan's statements hold the user's SQL; lakewrap's own statements around it (the fence,
    state rows, the commit message) are run by the executor, not kept in the plan.
    """
    files = files or compiled.strategy == "seed"  # lakewrap's own read of a checked seed file (seedfiles.py)
    key = f"{compiled.sql_sha256}:{files}"
    if key in _checked:
        return
    for st in compiled.statements:
        check(st.sql, allowed=MODEL_TYPES, what=compiled.path, catalog_tables=False, files=files)
    _checked.add(key)


_NAME = re.compile(r'"(?:[^"]|"")*"|[\w$]+')


def _tokens(text: str) -> list[tuple[str, bool]]:
    """(lower-cased name, called) of each identifier or keyword token, by DuckDB's tokenizer.

    A token's text runs to the next token (comments are not tokens), so its name is the quoted
    identifier or word it starts with; it is called when the next token is ``(``.
    """
    import duckdb

    tokens = duckdb.tokenize(text)
    out = []
    for i, (start, kind) in enumerate(tokens):
        if kind not in (duckdb.token_type.identifier, duckdb.token_type.keyword):
            continue
        found = _NAME.match(text, start)
        name = found.group(0) if found else ""
        if name.startswith('"'):
            name = name[1:-1].replace('""', '"')
        called = i + 1 < len(tokens) and text.startswith("(", tokens[i + 1][0])
        out.append((name.lower(), called))
    return out


_PATHLIKE = re.compile(r"[/\\:]|\.(csv|tsv|txt|json|jsonl|ndjson|parquet|avro|xlsx|duckdb|db|gz|zst)$", re.I)


def _file_scan(text: str) -> bool:
    """Whether ``text`` reads a file by naming it as a table: ``FROM 'x.csv'``, ``JOIN 'dir/*.parquet'``
    (a string after FROM or JOIN, DuckDB's replacement scan), or a table name that is a path."""
    import duckdb

    tokens = duckdb.tokenize(text)
    for (start, kind), (nxt, nkind) in itertools.pairwise(tokens):
        if (kind == duckdb.token_type.keyword and nkind == duckdb.token_type.string_const
                and text[start:nxt].strip().lower() in ("from", "join")):
            return True
    names = [n for n, _ in _tokens(text)]
    return any(_PATHLIKE.search(n) for n in names)


_OBJECTS = frozenset({"table", "view", "macro", "function", "schema", "type", "sequence", "index"})


def _is_secret(statement: str) -> bool:
    """Whether a CREATE or DROP statement makes or removes a secret (``CREATE OR REPLACE PERSISTENT SECRET``)."""
    for name, _ in _tokens(statement):
        if name == "secret":
            return True
        if name in _OBJECTS:
            return False
    return False


def _check_tree(con: Any, text: str, what: str) -> None:
    """A SELECT's functions and tables, from DuckDB's parse tree (``json_serialize_sql``)."""
    arg = literal(text)  # written in, not bound: no pandas import (execute/binding.py)
    doc = json.loads((con.execute(f"SELECT json_serialize_sql({arg})") if arg is not None
                      else con.execute("SELECT json_serialize_sql(?)", [text])).fetchone()[0])
    if doc.get("error"):
        raise PlanError(f"{what}: DuckDB cannot parse it: {doc.get('error_message', '')}")
    for kind, name in _names(doc):
        if kind != "table" and name in DENIED_FUNCTIONS:
            raise _refused(what, f"{name}()", _why(name))
        if kind == "table_function" and name not in TABLE_FUNCTIONS:
            raise _refused(what, f"{name}()", "only the table functions docs/security.md lists may be called")
        if kind == "table" and name in DENIED_RELATIONS:
            raise _refused(what, name, _why(name))


def _names(node: Any) -> Iterator[tuple[str, str]]:
    """("function" | "table_function" | "table", lower-cased name) of every node of a parse tree."""
    if isinstance(node, list):
        for item in node:
            yield from _names(item)
        return
    if not isinstance(node, dict):
        return
    if node.get("type") == "TABLE_FUNCTION" and isinstance(node.get("function"), dict):
        yield "table_function", str(node["function"].get("function_name", "")).lower()
    elif "function_name" in node:
        yield "function", str(node["function_name"]).lower()
    if node.get("type") == "BASE_TABLE":
        yield "table", str(node.get("table_name", "")).lower()
    for value in node.values():
        yield from _names(value)


def _why(name: str) -> str:
    if name in ("current_setting", "getenv", "duckdb_settings", "pg_settings", "duckdb_secrets", "which_secret",
                "duckdb_databases", "pragma_database_list", "iceberg_load_table_response"):
        return "settings, secrets and attached paths are not readable from SQL"
    if name in ("query", "query_table", "json_execute_serialized_sql"):
        return "SQL given as a value would escape lakewrap's statement check"
    if name.startswith(("postgres_", "sqlite_", "pg_")):
        return "the catalog server and other databases are not reachable from SQL"
    if name.endswith("_scan") or name == "python_map_function":
        return "Python objects are not reachable from SQL"
    return "it writes files, changes the lake outside a materialization, or logs"


def _refused(what: str, construct: str, why: str, hint: str | None = None) -> PlanError:
    return PlanError(f"{what}: `{construct}` is refused: {why}",
                     hint=hint or "see docs/security.md for what SQL may do in lakewrap")


# --- DuckDB's sandbox ------------------------------------------------------------------------------

REFUSED_ACCESS = "disabled by configuration"  # in DuckDB's error for a file outside the sandbox


def access_hint(message: str) -> str | None:
    """The hint for a DuckDB error ``message`` that refused a file outside the sandbox, else None."""
    if REFUSED_ACCESS in message:
        return "to read files of another folder, list it in [security] allow_paths in lakewrap.toml (docs/security.md)"
    return None



def lock(con: Any, directories: Iterable[str] | None, paths: Iterable[str] = ()) -> None:
    """Limit ``con``'s file access to ``directories`` and ``paths``, then lock every setting.

    Directories end with ``/`` (DuckDB matches them as prefixes: ``s3://bucket/prefix/`` works too).
    ``directories=None`` leaves file access as it is and only locks the settings: DuckDB's Iceberg
    REST client writes where the REST catalog says, which lakewrap cannot know beforehand.
    """
    for statement in lock_statements(directories, paths):
        con.execute(statement)


def lock_statements(directories: Iterable[str] | None, paths: Iterable[str] = (), *,
                    locked: bool = True) -> list[str]:
    """The statements :func:`lock` runs, in order; ``locked=False`` leaves out the final
    ``lock_configuration`` (``lakewrap shell`` hands them to DuckDB's CLI, whose safe mode locks)."""
    from lakewrap.execute import statements as sql

    out = []
    if directories is not None:
        dirs = sorted({d if d.endswith("/") else d + "/" for d in directories})
        out.append(sql.set_list("allowed_directories", dirs))
        out.append(sql.set_list("allowed_paths", sorted(set(paths))))
        out.append(sql.set_option("enable_external_access", "false"))
    if locked:
        out.append(sql.set_option("lock_configuration", "true"))
    return out
