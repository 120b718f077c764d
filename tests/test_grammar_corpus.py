"""A corpus of valid DuckDB queries, compiled and run as lakewrap models on a real DuckLake.

The 22 TPC-H and 99 TPC-DS queries shipped by the ``duckdb-extension-tpch``/``-tpcds`` wheels (data
from their generators at a tiny scale factor) and the hand-written ``FEATURES`` of
``grammar_corpus.py`` (window functions, QUALIFY, PIVOT, lambdas, structs, ``COLUMNS(*)``,
``EXCLUDE``/``REPLACE``, ASOF joins, ...) are each one ``-- materialized table`` model. For every
query: no false rejection, DuckDB's parse tree of the SELECT in the compiled statement equals the
tree of the query as written, and the table lakewrap materialized holds the same rows (as a
multiset) as DuckDB running the query itself on the same lake. One ``lakewrap run`` per lake (TPC-H
and TPC-DS both have a ``customer`` table, so they need two).

A query that names an output column only by an expression (``sum(x)``, 16 of the 121) is refused
by lakewrap's naming rule (``docs/annotations.md``), never by the grammar; the test checks that
reason and materializes it as ``SELECT * FROM (<query as written>)``.
"""

from __future__ import annotations

import json
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import lakewrap
from conftest import extension_path
from grammar_corpus import FEATURES
from lakewrap.compile import compile_project
from lakewrap.errors import SqlError
from lakewrap.execute.lake import Lake
from lakewrap.parse import parse_model

TPCH_SF = 0.01
TPCDS_SF = 0.01
UNNAMED = "has no name"


def _cell(value: Any) -> Any:
    if isinstance(value, float):
        return float(f"{value:.9g}")  # parallel float sums differ in the last digits
    if isinstance(value, Decimal):
        return value.normalize()
    if isinstance(value, (list, tuple)):
        return tuple(_cell(v) for v in value)
    if isinstance(value, dict):
        return tuple((k, _cell(v)) for k, v in value.items())
    return value


def _rows(con: Any, sql: str) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(_cell(v) for v in row) for row in con.execute(sql).fetchall())


def _tree(con: Any, sql: str) -> Any:
    def strip(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: strip(v) for k, v in node.items() if k != "query_location"}
        if isinstance(node, list):
            return [strip(v) for v in node]
        return node

    result = json.loads(con.execute("SELECT json_serialize_sql(?)", [sql]).fetchone()[0])
    assert not result.get("error"), (sql, result)
    return strip(result["statements"])


def _load(root: Path, generator: str, call: str, queries_from: str) -> tuple[list[str], Any]:
    """Generate the benchmark's tables into the project's lake; return its queries.

    A lake connection is sandboxed (no extension loads after lakewrap's set-up, files only inside
    the project), so the generator runs on a plain DuckDB connection and hands the tables over as
    Parquet files inside the project."""
    import duckdb

    (root / "models").mkdir(parents=True, exist_ok=True)
    (root / "gen").mkdir()
    gen = duckdb.connect()
    try:
        gen.execute(f"LOAD '{extension_path(generator)}'")
        gen.execute(call)
        tables = [t for (t,) in gen.execute("SELECT table_name FROM duckdb_tables()").fetchall()]
        for table in tables:
            gen.execute(f"COPY \"{table}\" TO '{root / 'gen' / table}.parquet' (FORMAT parquet)")
        queries = [q for (q,) in gen.execute(f"SELECT query FROM {queries_from}() ORDER BY query_nr").fetchall()]
    finally:
        gen.close()
    con = Lake.open(root).connect()
    for table in tables:
        parquet = root / "gen" / f"{table}.parquet"
        con.execute(f'CREATE TABLE lake.main."{table}" AS SELECT * FROM read_parquet(\'{parquet}\')')
    return queries, con


def _materialize_and_compare(root: Path, con: Any, named: dict[str, str]) -> None:
    """Write each query as a model, check parse trees, run once, compare every table with DuckDB's rows."""
    model_dir = root / "models" / "corpus"
    model_dir.mkdir(parents=True, exist_ok=True)
    bodies: dict[str, str] = {}
    rejected_by_naming = []
    for name, query in named.items():
        body = query.strip().rstrip(";").strip()
        path = model_dir / f"{name}.sql"
        path.write_text("-- materialized table\n" + body + "\n")
        try:
            parse_model(path, root)
        except SqlError as exc:
            assert UNNAMED in exc.message, (name, exc.render())  # never a grammar rejection
            rejected_by_naming.append(name)
            body = f"SELECT * FROM (\n{body}\n)"
            path.write_text("-- materialized table\n" + body + "\n")
        bodies[name] = body
    expected = {name: _rows(con, body) for name, body in bodies.items()}
    trees = {name: _tree(con, body) for name, body in bodies.items()}
    con.close()

    plans = compile_project(root, use_cache=False)
    for plan in plans:
        name = plan.model
        [write] = [s for s in plan.statements if s.role == "write"]
        head, select = write.sql.split(" AS\n", 1)
        assert head == f'CREATE OR REPLACE TABLE "corpus"."{name}"', write.sql
        assert select == bodies[name]  # the text as written
        assert _tree_of(select) == trees[name], name

    report = lakewrap.Project(root).run(workers=2)  # independent models: two at a time
    failed = [(r.model, r.error) for r in report.results if r.status != "success"]
    assert failed == []
    con = Lake.open(root, read_only=True).connect()
    try:
        different = [name for name in bodies if _rows(con, f'SELECT * FROM lake.corpus."{name}"') != expected[name]]
    finally:
        con.close()
    assert different == []
    return None


_PARSER: Any = None


def _tree_of(sql: str) -> Any:
    global _PARSER
    if _PARSER is None:
        import duckdb

        _PARSER = duckdb.connect()
    return _tree(_PARSER, sql)


def test_tpch_queries_and_duckdb_features_compile_unchanged_and_return_duckdbs_rows(tmp_path: Path) -> None:
    queries, con = _load(tmp_path, "tpch", f"CALL dbgen(sf={TPCH_SF})", "tpch_queries")
    assert len(queries) == 22
    named = {f"tpch_q{i:02d}": q for i, q in enumerate(queries, 1)}
    named.update({f"feature_{i:03d}": q for i, q in enumerate(FEATURES, 1)})
    assert len(named) == 22 + len(FEATURES) >= 22 + 100
    _materialize_and_compare(tmp_path, con, named)


def test_tpcds_queries_compile_unchanged_and_return_duckdbs_rows(tmp_path: Path) -> None:
    queries, con = _load(tmp_path, "tpcds", f"CALL dsdgen(sf={TPCDS_SF})", "tpcds_queries")
    assert len(queries) == 99
    _materialize_and_compare(tmp_path, con, {f"tpcds_q{i:02d}": q for i, q in enumerate(queries, 1)})
