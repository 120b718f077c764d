"""A windowed write skips its stage and guard only when the SELECT provably keeps to the window.

``Compiler.window_proven`` (compilers/blocks.py) decides from the SELECT's own WHERE. These tests pin
down which SELECTs qualify, and check on a real lake that the unstaged plans write what a plain
DuckDB query of the source selects, while every SELECT that does not qualify is still guarded:
its out-of-window rows are refused and nothing is written.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from lakewrap.api import Project
from lakewrap.compile import compile_project

DAILY = "-- materialized incremental\n-- partitioned daily key=ts\n"
SOURCE = "FROM raw.events"
WINDOW = "ts >= $partition_start AND ts < $partition_end"

PROVEN = {
    "plain": f"SELECT id, ts, v {SOURCE} WHERE {WINDOW}",
    "star": f"SELECT * {SOURCE} WHERE {WINDOW}",
    "more conditions": f"SELECT id, ts {SOURCE} WHERE v > 0 AND {WINDOW} AND id IS NOT NULL",
    "grouped by the key": f"SELECT ts, count(*) AS n {SOURCE} WHERE {WINDOW} GROUP BY ts",
    "qualified alike": f"SELECT e.id, e.ts {SOURCE} AS e WHERE e.ts >= $partition_start AND e.ts < $partition_end",
    "a CTE above": f"WITH x AS (SELECT * {SOURCE}) SELECT id, ts FROM x WHERE {WINDOW}",
}
GUARDED = {
    "key computed": f"SELECT id, ts + INTERVAL 1 DAY AS ts {SOURCE} WHERE {WINDOW}",
    "key renamed": f"SELECT id, v AS ts {SOURCE} WHERE {WINDOW}",
    "one bound only": f"SELECT id, ts {SOURCE} WHERE ts >= $partition_start",
    "bound inside OR": f"SELECT id, ts {SOURCE} WHERE ({WINDOW}) OR v > 100",
    "bound in a subquery": f"SELECT id, ts FROM (SELECT * {SOURCE} WHERE {WINDOW}) AS s",
    "BETWEEN": f"SELECT id, ts {SOURCE} WHERE ts BETWEEN $partition_start AND $partition_end",
    "union": f"SELECT id, ts {SOURCE} WHERE {WINDOW} UNION ALL SELECT id, ts {SOURCE}",
    "other table's key": f"SELECT b.id, b.ts {SOURCE} AS a JOIN raw.events AS b ON a.id = b.id "
                         "WHERE a.ts >= $partition_start AND a.ts < $partition_end",
    "star over a join": f"SELECT * {SOURCE} AS a JOIN raw.other AS b USING (id) WHERE {WINDOW}",
}


def _roles(tmp_path: Path, header: str, select: str) -> list[str]:
    (tmp_path / "models").mkdir(exist_ok=True)
    (tmp_path / "models" / "m.sql").write_text(header + select + "\n")
    (plan,) = compile_project(tmp_path, partition="2024-01-02", use_cache=False)
    return [s.role for s in plan.statements]


@pytest.mark.parametrize("strategy", ["-- append\n", ""])
@pytest.mark.parametrize("case", sorted(PROVEN))
def test_a_select_that_keeps_to_its_window_is_written_directly(tmp_path: Path, case: str, strategy: str) -> None:
    roles = _roles(tmp_path, DAILY + strategy, PROVEN[case])
    assert "stage" not in roles and "guard" not in roles, roles


@pytest.mark.parametrize("strategy", ["-- append\n", ""])
@pytest.mark.parametrize("case", sorted(GUARDED))
def test_any_other_select_is_staged_and_guarded(tmp_path: Path, case: str, strategy: str) -> None:
    roles = _roles(tmp_path, DAILY + strategy, GUARDED[case])
    assert "stage" in roles and "guard" in roles, roles


def test_a_dynamic_window_needs_its_own_comparisons(tmp_path: Path) -> None:
    header = "-- materialized incremental\n-- partitioned dynamic key=ts\n-- unique_key id\n"
    ok = f"SELECT id, ts {SOURCE} WHERE ts > $partition_start AND ts <= $partition_end"
    roles = _roles(tmp_path, header, ok)
    assert roles.count("guard") == 2, roles  # NULL and duplicate keys; the window one is proven
    roles = _roles(tmp_path, header, f"SELECT id, ts {SOURCE} WHERE {WINDOW}")  # [start, end) on a (start, end]
    assert roles.count("guard") == 3, roles


def test_a_select_reading_its_own_table_is_staged_before_the_delete(tmp_path: Path) -> None:
    for reads in ("main.m", "m", "MAIN.M"):  # models/m.sql writes main.m
        assert "stage" in _roles(tmp_path, DAILY, f"SELECT id, ts, v FROM {reads} WHERE {WINDOW}"), reads
    assert "stage" not in _roles(tmp_path, DAILY, f"SELECT id, ts, v FROM other.m WHERE {WINDOW}")


def test_a_contract_keeps_the_stage(tmp_path: Path) -> None:
    header = DAILY + "-- column id INTEGER\n-- column ts TIMESTAMP\n"
    assert "stage" in _roles(tmp_path, header, f"SELECT id, ts {SOURCE} WHERE {WINDOW}")


# --- on a real lake ---------------------------------------------------------------------------------

ROWS = [(i, f"2024-01-0{1 + i % 3} {i % 24:02d}:00:00", i * 10) for i in range(30)] + [(99, None, 0)]


def _lake(tmp_path: Path, models: dict[str, str]) -> Project:
    (tmp_path / "models" / "s").mkdir(parents=True)
    for name, text in models.items():
        (tmp_path / "models" / "s" / f"{name}.sql").write_text(text + "\n")
    (tmp_path / "seeds" / "raw").mkdir(parents=True)
    lines = ["id,ts,v"] + [f"{i},{ts or ''},{v}" for i, ts, v in ROWS]
    (tmp_path / "seeds" / "raw" / "events.csv").write_text("\n".join(lines) + "\n")
    project = Project(tmp_path)
    project.seed()
    return project


def _expected(day: str) -> list[tuple[int, str, int]]:
    """The window's rows, by plain DuckDB over the seed rows (not through lakewrap)."""
    con = duckdb.connect()
    con.execute("CREATE TABLE e (id INTEGER, ts TIMESTAMP, v INTEGER)")
    con.executemany("INSERT INTO e VALUES (?, ?, ?)", ROWS)
    return con.execute("SELECT id, strftime(ts, '%Y-%m-%d %H:%M:%S'), v FROM e WHERE ts >= CAST(? AS TIMESTAMP) "
                       "AND ts < CAST(? AS TIMESTAMP) + INTERVAL 1 DAY ORDER BY id", [day, day]).fetchall()


def test_unstaged_writes_equal_the_windowed_source(tmp_path: Path) -> None:
    project = _lake(tmp_path, {"di": DAILY + PROVEN["plain"], "ap": DAILY + "-- append\n" + PROVEN["plain"]})
    for day in ("2024-01-02", "2024-01-03", "2024-01-02"):  # a re-run of a day replaces it (delete+insert)
        report = project.run(partition=day, reappend=True)  # and appends it again (asked for)
        assert report.ok, [r.error for r in report.results]
    got = {t: project.query(f"SELECT id, strftime(ts, '%Y-%m-%d %H:%M:%S') AS ts, v FROM s.{t} ORDER BY id, ts")
           .to_pylist() for t in ("di", "ap")}
    want = sorted(_expected("2024-01-02") + _expected("2024-01-03"))
    assert [tuple(r.values()) for r in got["di"]] == want
    assert [tuple(r.values()) for r in got["ap"]] == sorted(want + _expected("2024-01-02"))  # appended twice


def test_a_guarded_select_still_refuses_rows_outside_the_window(tmp_path: Path) -> None:
    project = _lake(tmp_path, {"shifted": DAILY + GUARDED["key computed"].replace("SELECT id,", "SELECT id, v,")})
    (result,) = project.run(partition="2024-01-02").results
    assert result.status == "failed" and "outside the partition window" in (result.error or "")
    tables = project.query("SELECT count(*) AS n FROM duckdb_tables() WHERE table_name = 'shifted'").to_pylist()
    assert tables == [{"n": 0}]


def test_on_schema_change_ignore_keeps_the_stage(tmp_path: Path) -> None:
    """``ignore`` leaves a new column out of the staged copy; an unstaged INSERT would carry it."""
    header = DAILY + "-- on_schema_change ignore\n"
    assert "stage" in _roles(tmp_path, header, PROVEN["plain"])


def test_an_unstaged_write_that_empties_its_partition_warns(tmp_path: Path) -> None:
    """Without a stage the executor counts the inserted rows; the empty-result check still fires."""
    project = _lake(tmp_path, {"di": DAILY + PROVEN["plain"]})
    assert project.run(partition="2024-01-02").ok
    before = len(_expected("2024-01-02"))
    kept = [r for r in ROWS if not (r[1] or "").startswith("2024-01-02")]
    lines = ["id,ts,v"] + [f"{i},{ts or ''},{v}" for i, ts, v in kept]
    (tmp_path / "seeds" / "raw" / "events.csv").write_text("\n".join(lines) + "\n")
    project.seed()
    (refused,) = project.run(partition="2024-01-02", strict=True).results
    assert refused.status == "failed" and "the result is empty" in (refused.error or "")
    assert project.query("SELECT count(*) AS n FROM s.di").to_pylist() == [{"n": before}]  # nothing written
    (result,) = project.run(partition="2024-01-02").results
    assert result.status == "success" and result.rows_deleted == before and result.rows_inserted == 0
    assert result.warnings == [f"the result is empty but the partition had {before} rows; they were removed"]
