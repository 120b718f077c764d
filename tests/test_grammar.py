"""DuckDB's grammar is the judge: malformed SQL, transaction control in literal models, nesting and
size limits, and the SELECT that runs being the user's text (lakewrap.grammar).

Malformed and refused models are run against a real embedded DuckLake, which must be left exactly
as it was: the same snapshots, the same files, byte for byte.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

import lakewrap
from grammar_corpus import MALFORMED, MARK
from lakewrap import grammar, select_edits
from lakewrap.errors import Location, SqlError
from lakewrap.execute.lake import Lake
from lakewrap.parse import parse_model

LAKEWRAP = str(Path(sys.executable).parent / "lakewrap")
HEADER = "-- materialized table\n\n"  # the SELECT starts on line 3


def _lake_state(root: Path) -> tuple[list[tuple[object, ...]], dict[str, str]]:
    """The lake's snapshots and every file under .lakewrap/ with its sha256."""
    files = {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
             for p in sorted((root / ".lakewrap").rglob("*")) if p.is_file()}
    con = Lake.open(root, read_only=True).connect()
    try:
        snapshots = con.execute("SELECT snapshot_id, changes FROM lake.snapshots() ORDER BY 1").fetchall()
    finally:
        con.close()
    return snapshots, files


@pytest.fixture(scope="module")
def lake_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("grammar")
    (root / "models").mkdir()
    (root / "models" / "good.sql").write_text("-- materialized table\nSELECT 1 AS a\n")
    assert lakewrap.Project(root).run().ok
    return root


def _expected(case: str, first_line: int) -> tuple[int, int]:
    before = case[: case.index(MARK)]
    return first_line + before.count("\n"), len(before) - (before.rfind("\n") + 1) + 1


def test_malformed_corpus_is_rejected_where_the_error_is_and_writes_nothing(lake_project: Path) -> None:
    assert len(MALFORMED) >= 40
    before = _lake_state(lake_project)
    model = lake_project / "models" / "bad.sql"
    wrong = []
    for case in MALFORMED:
        model.write_text(HEADER + case.replace(MARK, "") + "\n")
        with pytest.raises(SqlError) as err:
            lakewrap.Project(lake_project).run()
        loc = err.value.location
        assert loc is not None and loc.path == "models/bad.sql", case
        if (loc.line, loc.column) != _expected(case, 3) or not err.value.hint:
            wrong.append((case, loc.line, loc.column, err.value.message))
    model.unlink()
    assert wrong == []
    assert _lake_state(lake_project) == before


def test_the_issue_examples_are_errors_not_other_queries(tmp_path: Path) -> None:
    """`> >` was compiled to a bit shift and `,,` to one comma: both are DuckDB syntax errors."""
    (tmp_path / "models").mkdir()
    model = tmp_path / "models" / "m.sql"
    model.write_text(
        "-- materialized incremental\n-- partitioned daily key=created_at\n"
        "SELECT order_id, customer_id, created_at\nFROM raw.orders\n"
        "WHERE created_at >= $partition_start AND created_at < $partition_end\n  AND customer_id > > 190\n"
    )
    proc = subprocess.run([LAKEWRAP, "compile", "--project", str(tmp_path),
                           "--partition", "2024-01-02"], capture_output=True, text=True)
    assert proc.returncode == 1, proc.stdout
    assert proc.stdout == ""
    assert "models/m.sql:6:21: DuckDB cannot parse the SQL: unexpected `>`" in proc.stderr
    assert "Traceback" not in proc.stderr
    model.write_text("-- materialized table\nSELECT order_id,, amount FROM raw.orders\n")
    with pytest.raises(SqlError, match="unexpected `,`") as err:
        parse_model(model, tmp_path)
    assert (err.value.location.line, err.value.location.column) == (2, 17)  # type: ignore[union-attr]


# --- literal models stay inside their transaction ----------------------------------------------------

SPELLINGS = [
    "END", "end", "END TRANSACTION", "COMMIT", "commit work", "COMMIT TRANSACTION", "ABORT", "ROLLBACK",
    "ROLLBACK TRANSACTION", "START TRANSACTION", "BEGIN", "BEGIN TRANSACTION", "CHECKPOINT", "CHECKPOINT lake",
    "FORCE CHECKPOINT", "DETACH lake", "ATTACH ':memory:' AS other", "USE memory", "SET threads = 1",
    "SET VARIABLE v = 1", "RESET threads", "PRAGMA version", "PRAGMA enable_profiling", "LOAD httpfs",
    "INSTALL httpfs", "FORCE INSTALL httpfs", "EXPORT DATABASE 'out'", "IMPORT DATABASE 'out'", "VACUUM",
    "ANALYZE", "UPDATE EXTENSIONS", "/* a comment */ COMMIT", "(COMMIT)",
]


def test_transaction_control_in_any_spelling_is_refused_with_its_line(lake_project: Path) -> None:
    before = _lake_state(lake_project)
    model = lake_project / "models" / "lit.sql"
    wrong = []
    for spelling in SPELLINGS:
        model.write_text("CREATE TABLE main.lit AS SELECT 1 AS a;\n\n\n"
                         f"  {spelling};\nINSERT INTO main.lit VALUES (2);\n")
        try:
            lakewrap.Project(lake_project).run()
        except SqlError as exc:
            loc = exc.location
            ok = loc is not None and (loc.path, loc.line) == ("models/lit.sql", 4) and (
                "cannot run" in exc.message or (spelling == "(COMMIT)" and "cannot parse" in exc.message))
            if not ok:
                wrong.append((spelling, exc.render()))
        else:
            wrong.append((spelling, "accepted"))
    model.unlink()
    assert wrong == []
    assert _lake_state(lake_project) == before
    assert not (lake_project / "out").exists()


def test_literal_statements_are_split_where_duckdb_splits_them(tmp_path: Path) -> None:
    """A semicolon inside a dollar-quoted string or a comment does not end a statement."""
    (tmp_path / "models").mkdir()
    model = tmp_path / "models" / "lit.sql"
    model.write_text("CREATE TABLE main.lit AS SELECT $$a;b$$ AS s, 'c;d' AS t; -- one; two\n"
                     "/* x; y */ INSERT INTO main.lit VALUES ('e', 'f;g')\n")
    spec = parse_model(model, tmp_path)
    from lakewrap.compile import compile_project

    [plan] = compile_project(tmp_path, use_cache=False)
    assert [s.sql for s in plan.statements if s.role == "literal"] == [
        "CREATE TABLE main.lit AS SELECT $$a;b$$ AS s, 'c;d' AS t",
        "INSERT INTO main.lit VALUES ('e', 'f;g')",
    ]
    assert spec.target.name == "lit"


# --- nesting and size limits ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "line", "column", "message"),
    [
        ("SELECT " + "(" * 500 + "1" + ")" * 500 + " AS x", 3, 8 + grammar.MAX_DEPTH, "nests parentheses"),
        ("SELECT 1 AS x FROM t WHERE " + " AND ".join(["a = 1"] * 3) + "\n  AND "
         + "+".join(["1"] * 20_000) + " > 0", 3, 1, "expression depth"),
        ("SELECT 1 AS x FROM t WHERE " + "NOT " * 3000 + "a", 3, None, "expression depth"),
        ("SELECT '" + "x" * (grammar.MAX_CHARS + 10) + "' AS x", 3, None, "characters long"),
    ],
    ids=["parentheses", "long-chain", "not-chain", "huge-body"],
)
def test_nesting_and_size_limits_are_located_errors(tmp_path: Path, body: str, line: int, column: int | None,
                                                    message: str) -> None:
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "deep.sql").write_text(HEADER + body + "\n")
    proc = subprocess.run([LAKEWRAP, "compile", "--project", str(tmp_path)],
                          capture_output=True, text=True)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr and "RecursionError" not in proc.stderr
    first = proc.stderr.splitlines()[0]
    assert first.startswith(f"error: models/deep.sql:{line}:" + (f"{column}:" if column else "")), first
    assert message in first


# --- the SELECT that runs is the user's text ------------------------------------------------------------


def test_compiled_select_is_the_text_as_written_with_declared_substitutions(tmp_path: Path) -> None:
    """sqlglot re-renders some queries into a different DuckDB parse tree (found on TPC-DS); the text
    as written is what runs, edited only where a window bound is compared."""
    (tmp_path / "models").mkdir()
    select = ("SELECT order_id,   amount::DECIMAL(10, 2) AS amount, created_at -- the day\n"
              "FROM raw.orders WHERE created_at >= $partition_start AND ($partition_end) > created_at\n"
              "  AND $partition_start + INTERVAL 1 HOUR <= created_at + INTERVAL 1 DAY")
    (tmp_path / "models" / "m.sql").write_text("-- materialized incremental\n-- partitioned daily key=created_at\n"
                                               + select + "\n")
    from lakewrap.compile import compile_project

    [plan] = compile_project(tmp_path, partition="2024-01-02", use_cache=False)
    edited = select.replace(">= $partition_start", ">= CAST($partition_start AS TIMESTAMP)").replace(
        "($partition_end)", "(CAST($partition_end AS TIMESTAMP))")
    stage = next(s for s in plan.statements if s.role == "stage")
    assert stage.sql.endswith(" AS\n" + edited), stage.sql


def test_a_substitution_that_changes_the_tree_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tree comparison is live: an edit beyond the declared substitutions is refused, named."""
    real = select_edits._edits

    def wrong(tree: object, text: str, bounds: bool, catalog: str | None,
              found: list[select_edits.Substitution] | None = None) -> list[tuple[int, int, str]]:
        edits = real(tree, text, bounds, catalog, found)
        at = text.index("> 190")
        return [*edits, (at, at + 1, ">>")]

    monkeypatch.setattr(select_edits, "_edits", wrong)
    with pytest.raises(SqlError, match="would change its meaning at") as err:
        grammar.edited_select("SELECT a FROM t WHERE a >= $partition_start AND b > 190", bounds=True,
                              catalog=None, rel="m.sql", where=Location("m.sql", 3))
    assert "COMPARISON" in err.value.message or "FUNCTION" in err.value.message


BATCHED = [
    ("SELECT a FROM raw.t WHERE a >= $partition_start AND a < $partition_end", True, None),
    ("SELECT a FROM raw.t WHERE a BETWEEN $partition_start AND $partition_end", True, None),
    ("SELECT a FROM raw.t WHERE a BETWEEN f($partition_end) AND $partition_end", True, None),
    ('SELECT "ü" AS u, 1.5e300 AS x, \'it\'\'s\' AS s FROM raw.t JOIN "x"."y" USING (a) WHERE a > $partition_start',
     True, "ice"),
    ("SELECT a FROM raw.t WHERE b = 'raw.t' AND a >= $partition_start", False, "ice"),
    ("SELECT a FROM raw.t WHERE a >= $partition_start AND", True, None),
    ("SELECT a FROM raw.t", True, None),
]


def _alone(text: str, bounds: bool, catalog: str | None) -> str | None:
    select_edits._EDITED.clear()
    try:
        return grammar.edited_select(text, bounds=bounds, catalog=catalog, rel="m.sql", where=Location("m.sql", 1))
    except SqlError:
        return None


def test_the_batched_check_remembers_what_each_select_gets_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cold compile checks its SELECTs in batches (prepare_selects: two DuckDB queries per batch):
    each result is the one edited_select computes alone, and a SELECT the batch cannot settle (DuckDB
    rejects it, or its edits must fall back) is left for edited_select, never remembered wrong."""
    alone = {case: _alone(*case) for case in BATCHED}
    assert "CAST($partition_start AS TIMESTAMP)" in str(alone[BATCHED[0]])
    assert alone[BATCHED[2]] == BATCHED[2][0]  # the bound under BETWEEN could not be placed: left as written
    assert str(alone[BATCHED[3]]).count('"ice".') == 2 and alone[BATCHED[6]] == BATCHED[6][0]
    assert alone[BATCHED[5]] is None
    queries: list[int] = []
    real = select_edits.serialize_docs
    monkeypatch.setattr(select_edits, "serialize_docs", lambda texts: queries.append(len(texts)) or real(texts))
    matched: list[bool] = []
    expected = select_edits._as_expected
    monkeypatch.setattr(select_edits, "_as_expected", lambda *a: matched.append(expected(*a)) or matched[-1])
    select_edits._EDITED.clear()
    grammar.prepare_selects(BATCHED)
    # decided on the JSON text, but for the BETWEEN that falls back and the double DuckDB spells 1.5e300
    assert matched == [True, True, False, False, True]
    remembered = {case: select_edits._EDITED.get(case) for case in BATCHED}
    assert queries == [6, 5]  # the texts as written, then the edited ones, each batch in one query
    assert remembered[BATCHED[5]] is None and remembered[BATCHED[2]] is None
    assert {c: r for c, r in remembered.items() if r is not None} == {
        c: alone[c] for c in BATCHED if c not in (BATCHED[2], BATCHED[5])}
    assert {case: _alone(*case) for case in BATCHED} == alone  # and alone again, after the batch


def test_a_batch_with_a_wrong_edit_remembers_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    real = select_edits._edits

    def wrong(tree: object, text: str, bounds: bool, catalog: str | None,
              found: list[select_edits.Substitution] | None = None) -> list[tuple[int, int, str]]:
        at = text.index("> 190")
        return [*real(tree, text, bounds, catalog, found), (at, at + 1, ">>")]

    monkeypatch.setattr(select_edits, "_edits", wrong)
    texts = [(f"SELECT a, {i} AS i FROM t WHERE a >= $partition_start AND b > 190", True, None) for i in range(5)]
    select_edits._EDITED.clear()
    grammar.prepare_selects(texts)
    assert not any(case in select_edits._EDITED for case in texts)
    with pytest.raises(SqlError, match="would change its meaning at"):
        grammar.edited_select(texts[0][0], bounds=True, catalog=None, rel="m.sql", where=Location("m.sql", 3))


def test_iceberg_sql_catalog_is_inserted_at_the_table_names() -> None:
    text = 'SELECT a FROM raw.t JOIN "ü"."v" USING (a), (SELECT 1 FROM x.y) z, read_csv(\'f\') WHERE b = \'raw.t\''
    edited = grammar.edited_select(text, bounds=False, catalog="ice", rel="m.sql", where=Location("m.sql", 1))
    assert edited == ('SELECT a FROM "ice".raw.t JOIN "ice"."ü"."v" USING (a), (SELECT 1 FROM "ice".x.y) z, '
                      "read_csv('f') WHERE b = 'raw.t'")


def test_duckdb_version_is_part_of_the_cache_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A check result cached under one DuckDB is not served under another."""
    import importlib.util

    from lakewrap import targetdir

    fake = tmp_path / "duckdb"
    fake.mkdir()
    (fake / "__init__.py").write_text("__version__ = '1'\n")
    real = importlib.util.find_spec

    def find_spec(name: str, *args: object) -> object:
        if name == "duckdb":
            return importlib.util.spec_from_file_location("duckdb", fake / "__init__.py",
                                                          submodule_search_locations=[str(fake)])
        return real(name, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    targetdir.code_key.cache_clear()
    try:
        first = targetdir.code_key()
        (fake / "__init__.py").write_text("__version__ = '2.0'\n")
        targetdir.code_key.cache_clear()
        assert targetdir.code_key() != first
    finally:
        targetdir.code_key.cache_clear()
