"""The pure parts of tests, contracts and on_schema_change: no lake needed."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakewrap.compile import compile_project
from lakewrap.compilers.artifacts import SchemaCheck
from lakewrap.compilers.iceberg import widens
from lakewrap.compilers.schema import SchemaChangeError, drift, fits, replace_columns, resolve


@pytest.mark.parametrize(("src", "dst", "ok"), [
    ("INTEGER", "INTEGER", True),
    ("INTEGER", "BIGINT", True), ("BIGINT", "INTEGER", False),
    ("SMALLINT", "HUGEINT", True), ("UINTEGER", "BIGINT", True), ("UBIGINT", "BIGINT", False),
    ("INTEGER", "UBIGINT", False),  # negative values
    ("INTEGER", "DOUBLE", True), ("BIGINT", "DOUBLE", False),  # 2**53 + 1 is not a DOUBLE
    ("SMALLINT", "FLOAT", True), ("INTEGER", "FLOAT", False),
    ("FLOAT", "DOUBLE", True), ("DOUBLE", "FLOAT", False), ("DOUBLE", "INTEGER", False),
    ("DECIMAL(18,2)", "DECIMAL(20,2)", True), ("DECIMAL(18,2)", "DECIMAL(18,3)", False),
    ("DECIMAL(18,2)", "DECIMAL(19,3)", True), ("DECIMAL(18,3)", "DECIMAL(18,2)", False),
    ("INTEGER", "DECIMAL(10,0)", True), ("INTEGER", "DECIMAL(12,3)", False), ("DOUBLE", "DECIMAL(38,10)", False),
    ("DATE", "TIMESTAMP", True), ("TIMESTAMP", "DATE", False),
    ("TIMESTAMP", "TIMESTAMP WITH TIME ZONE", False),  # depends on the session time zone
    ("INTEGER", "VARCHAR", False), ("VARCHAR", "INTEGER", False),
])
def test_fits_means_every_value_is_stored_exactly(src: str, dst: str, ok: bool) -> None:
    assert fits(src, dst) is ok


def test_drift_compares_by_name_not_position() -> None:
    table = [("a", "INTEGER"), ("n", "INTEGER"), ("valid_from", "TIMESTAMP")]
    assert not drift([("n", "INTEGER"), ("A", "INTEGER")], table, managed=("valid_from",))
    d = drift([("a", "BIGINT"), ("c", "VARCHAR")], table, managed=("VALID_FROM",))
    assert d.added == [("c", "VARCHAR")] and d.removed == [("n", "INTEGER")]
    assert d.changed == [("a", "INTEGER", "BIGINT")]


def check(mode: str, relation: str | None = "__lakewrap_stage", named: tuple[str, ...] = ()) -> SchemaCheck:
    return SchemaCheck(mode=mode, relation=relation, named=named)  # type: ignore[arg-type]


TABLE = [("id", "INTEGER"), ("a", "INTEGER"), ("b", "VARCHAR")]
RESULT = [("id", "INTEGER"), ("a", "DOUBLE"), ("c", "VARCHAR")]  # a widened, b gone, c new


def test_fail_names_every_difference_and_the_model() -> None:
    with pytest.raises(SchemaChangeError) as err:
        resolve(check("fail"), "models/m.sql", ("s", "t"), RESULT, TABLE)
    text = err.value.render()
    assert text.startswith("models/m.sql: the SELECT's columns differ from table s.t:")
    for part in ("new column `c` (VARCHAR)", "column `b` (VARCHAR) is no longer returned",
                 "column `a` is INTEGER in the table but the SELECT returns DOUBLE", "hint: add `-- on_schema_change"):
        assert part in text


def test_a_new_table_or_no_change_needs_nothing() -> None:
    assert resolve(check("fail"), "m.sql", ("s", "t"), RESULT, []) == []
    assert resolve(check("fail"), "m.sql", ("s", "t"), list(reversed(TABLE)), TABLE) == []


def test_sync_widens_adds_and_drops() -> None:
    out = resolve(check("sync_all_columns"), "m.sql", ("s", "t"), RESULT, TABLE)
    assert [s.replace("\n", " ") for s in out] == [
        'ALTER TABLE "s"."t" ALTER COLUMN "a" SET DATA TYPE DOUBLE',
        'ALTER TABLE "s"."t" ADD COLUMN "c" TEXT',
        'ALTER TABLE "s"."t" DROP COLUMN "b"',
    ]


def test_a_rebuild_adds_first_replaces_retyped_columns_and_drops_last() -> None:
    """Iceberg through DuckDB: new field ids before any drop, so no step returns to an earlier schema."""
    table = [("id", "INTEGER"), ("a", "INTEGER"), ("b", "VARCHAR"), ("k", "BIGINT"), ("valid_to", "TIMESTAMP")]
    result = [("id", "BIGINT"), ("a", "VARCHAR"), ("c", "DOUBLE"), ("k", "INTEGER")]
    out = replace_columns(("s", "t"), result, table, managed=("valid_to",), widens=widens, catalog="ice")
    t = '"ice"."s"."t"'
    assert [s.replace("\n", " ") for s in out] == [
        f'ALTER TABLE {t} ADD COLUMN "c" DOUBLE',
        f'ALTER TABLE {t} ALTER COLUMN "id" SET DATA TYPE BIGINT',  # an Iceberg promotion: in place
        f'ALTER TABLE {t} ADD COLUMN "__lakewrap_retyped_a" TEXT',
        f'ALTER TABLE {t} DROP COLUMN "a"',
        f'ALTER TABLE {t} RENAME COLUMN "__lakewrap_retyped_a" TO "a"',
        f'ALTER TABLE {t} ADD COLUMN "__lakewrap_retyped_k" INT',  # narrower: the table takes the result's type
        f'ALTER TABLE {t} DROP COLUMN "k"',
        f'ALTER TABLE {t} RENAME COLUMN "__lakewrap_retyped_k" TO "k"',
        f'ALTER TABLE {t} DROP COLUMN "b"',  # valid_to is managed (SCD2): kept
    ]
    assert replace_columns(("s", "t"), list(reversed(table)), table) == []
    renewed = replace_columns(("s", "t"), table[:2], table[:3], renew="id", catalog="ice")
    assert [s.replace("\n", " ") for s in renewed] == [
        f'ALTER TABLE {t} ADD COLUMN "__lakewrap_retyped_id" INT', f'ALTER TABLE {t} DROP COLUMN "id"',
        f'ALTER TABLE {t} RENAME COLUMN "__lakewrap_retyped_id" TO "id"', f'ALTER TABLE {t} DROP COLUMN "b"']


@pytest.mark.parametrize("mode", ["append_new_columns", "ignore"])
def test_a_conversion_is_refused_unless_synced(mode: str) -> None:
    with pytest.raises(SchemaChangeError, match="writing it would convert values"):
        resolve(check(mode), "m.sql", ("s", "t"), RESULT, TABLE)


def test_append_and_ignore_on_new_and_removed_columns() -> None:
    result = [("id", "INTEGER"), ("a", "SMALLINT"), ("c", "VARCHAR")]  # a narrower: stored exactly
    assert [s.replace("\n", " ") for s in resolve(check("append_new_columns"), "m.sql", ("s", "t"), result, TABLE)] == [
        'ALTER TABLE "s"."t" ADD COLUMN "c" TEXT']
    assert [s.replace("\n", " ") for s in resolve(check("ignore"), "m.sql", ("s", "t"), result, TABLE)] == [
        'ALTER TABLE "__lakewrap_stage" DROP COLUMN "c"']  # the staged copy only
    with pytest.raises(SchemaChangeError, match="cannot leave it out"):
        resolve(check("ignore", named=("id", "a", "c")), "m.sql", ("s", "t"), result, TABLE)
    with pytest.raises(SchemaChangeError, match="cannot leave it out"):
        resolve(check("ignore", relation=None), "m.sql", ("s", "t"), result, TABLE)


def test_quoted_names_survive_the_alter_statements() -> None:
    out = resolve(check("sync_all_columns"), "m.sql", ("my schema", 'we"ird'),
                  [("id", "INTEGER"), ('c"; DROP', "INTEGER")], [("id", "INTEGER")])
    assert out == ['ALTER TABLE "my schema"."we""ird"\nADD COLUMN "c""; DROP" INT']


def _project(tmp_path: Path, text: str) -> Path:
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "m.sql").write_text(text)
    return tmp_path


def test_a_model_without_checks_compiles_without_test_statements(tmp_path: Path) -> None:
    (plan,) = compile_project(_project(tmp_path, "-- materialized incremental\n-- append\nSELECT 1 AS x\n"),
                              use_cache=False)
    assert all(s.role != "test" and s.test is None for s in plan.statements)
    assert plan.schema_check is not None and plan.schema_check.mode == "fail"
    assert plan.schema_check.relation is None


def test_table_and_view_plans_have_no_schema_check(tmp_path: Path) -> None:
    (plan,) = compile_project(_project(tmp_path, "-- materialized table\n-- test not_null x\nSELECT 1 AS x\n"),
                              use_cache=False)
    assert plan.schema_check is None
    assert [s.role for s in plan.statements][-1] == "test"


def test_a_test_sql_file_must_hold_one_select(tmp_path: Path) -> None:
    from lakewrap.errors import ModelError

    root = _project(tmp_path, "-- materialized table\n-- test sql checks/bad.sql\nSELECT 1 AS x\n")
    (root / "checks").mkdir()
    (root / "checks" / "bad.sql").write_text("SELECT 1; DELETE FROM t")
    with pytest.raises(ModelError, match=r"checks/bad.sql must hold exactly one SELECT") as err:
        compile_project(root, use_cache=False)
    assert err.value.location is not None and (err.value.location.path, err.value.location.line) == ("models/m.sql", 2)
    (root / "checks" / "bad.sql").write_text("SELECT * FROM t WHERE x > $threshold")
    with pytest.raises(ModelError, match=r"unknown parameter \$threshold"):
        compile_project(root, use_cache=False)


def test_an_edited_test_file_is_not_served_from_the_cache(tmp_path: Path) -> None:
    root = _project(tmp_path, "-- materialized table\n-- test sql checks/t.sql\nSELECT 1 AS x\n")
    (root / "checks").mkdir()
    (root / "checks" / "t.sql").write_text("SELECT * FROM main.m WHERE x < 0")
    (first,) = compile_project(root)
    (root / "checks" / "t.sql").write_text("SELECT * FROM main.m WHERE x > 5")
    (second,) = compile_project(root)
    assert "x < 0" in first.statements[-1].sql and "x > 5" in second.statements[-1].sql
