"""Parameters written in as literals (``lakewrap.execute.binding``) mean what DuckDB's binding of
the same values means, and a run binds nothing, so DuckDB's client never imports pandas for it."""

from __future__ import annotations

import subprocess
import sys
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import duckdb
from hypothesis import given, settings
from hypothesis import strategies as st

from lakewrap.execute.binding import inline, literal

VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False), st.text(alphabet=st.characters(blacklist_characters="\x00", codec="utf-8")),
    st.datetimes(min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1)),
    st.datetimes(min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1),
                 timezones=st.sampled_from([timezone.utc, timezone(timedelta(hours=5, minutes=30))])),
    st.dates(min_value=date(1, 1, 1), max_value=date(9999, 12, 31)),
)
# where a parameter stands decides its type: alone, compared, cast, concatenated, inserted
CONTEXTS = ("SELECT $v, typeof($v)", "SELECT $v IS NULL, CAST($v AS VARCHAR)",
            "SELECT [$v, $v] = [$v, $v]", "SELECT 'it''s $v -- not a parameter' || CAST($v AS VARCHAR)")


def _con() -> Any:
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")  # as every lakewrap session is
    return con


@settings(max_examples=200, deadline=None)
@given(value=VALUES, context=st.sampled_from(CONTEXTS))
def test_an_inlined_value_reads_as_the_bound_value(value: Any, context: str) -> None:
    con = _con()
    text, left = inline(context, {"v": value})
    assert left is None and "$v" not in text.replace("$v -- not", "")
    assert con.execute(text).fetchall() == con.execute(context, {"v": value}).fetchall()


def test_a_string_compared_with_a_timestamp_is_cast_as_a_bound_one_is() -> None:
    con = _con()
    sql = "SELECT TIMESTAMP '2024-01-02' >= $s, CAST($s AS TIMESTAMP) + INTERVAL 1 DAY"
    params = {"s": "2024-01-02 00:00:00"}
    assert con.execute(inline(sql, params)[0]).fetchall() == con.execute(sql, params).fetchall()


def test_what_cannot_be_written_in_is_left_to_duckdb() -> None:
    assert literal(object()) is None and literal(2**64) is None and literal("a\x00b") is None
    sql = "SELECT $a, $b"
    assert inline(sql, {"a": 1, "b": [1, 2]}) == (sql, {"a": 1, "b": [1, 2]})  # a list: bound as before
    assert inline(sql, {"a": 1}) == (sql, {"a": 1})  # a missing value: DuckDB's own error
    assert inline("SELECT $a", {"a": 1, "b": 2}) == ("SELECT $a", {"a": 1, "b": 2})  # one left over: likewise
    assert inline("SELECT $target", {"target": "x"}) == ("SELECT 'x'", None)  # a keyword after $ is a name too


def test_a_run_of_a_project_imports_no_pandas(tmp_path: Path) -> None:
    """pandas is installed here (the dev extra): DuckDB's client imports it on its first bound
    parameter, which costs 0.5 s of every run."""
    import importlib.util

    assert importlib.util.find_spec("pandas") is not None
    root = tmp_path / "p"
    (root / "models" / "m").mkdir(parents=True)
    (root / "lakewrap.toml").write_text("")
    (root / "models" / "m" / "daily.sql").write_text(
        "-- materialized incremental\n-- partitioned daily key=day start=2024-01-01\n"
        "SELECT CAST($partition_start AS TIMESTAMP) AS day, 1 AS n WHERE day >= $partition_start "
        "AND day < $partition_end\n")
    (root / "models" / "m" / "t.sql").write_text("-- materialized table\nSELECT 1 AS id\n")
    # what reads the lake's records before or around a step: a watermark merge, an append partition
    # already recorded, a SELECT * model's column probe
    (root / "models" / "m" / "dyn.sql").write_text(
        "-- materialized incremental\n-- partitioned dynamic key=ts\n-- unique_key id\n"
        "SELECT TIMESTAMP '2024-01-02 10:00' AS ts, 1 AS id WHERE ts > $partition_start AND ts <= $partition_end\n")
    (root / "models" / "m" / "log.sql").write_text(
        "-- materialized incremental\n-- partitioned daily key=day start=2024-01-01\n-- append\n"
        "SELECT CAST($partition_start AS TIMESTAMP) AS day, 2 AS n WHERE day >= $partition_start "
        "AND day < $partition_end\n")
    (root / "models" / "m" / "star.sql").write_text("-- materialized table\nSELECT * FROM m.t\n")
    rng = "'--start', '2024-01-01', '--end', '2024-01-03'"
    for args in (f"'run', {rng}", f"'run', {rng}", f"'backfill', {rng}, '--missing-only'",
                 f"'run', {rng}, '--reappend'", "'run', '--stale'"):
        code = ("import sys\nfrom lakewrap.cli import main\n"
                f"try:\n    main([{args}, '--project', sys.argv[1]])\n"
                "except SystemExit as exc:\n    assert not exc.code, exc.code\n"
                "print('pandas' in sys.modules)\n")
        out = subprocess.run([sys.executable, "-c", code, str(root)], capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, (args, out.stderr)
        assert out.stdout.strip().splitlines()[-1] == "False", (args, out.stdout)
