"""Range backfills (issue 20, item 3): a separable model's range written a batch at a time.

* The separability verdict (compilers/separable.py), read from ``lakewrap compile --start/--end``:
  a separable SELECT gives one plan per batch, anything else one plan per partition.
* Hypothesis: on random histories (random rows, random late updates, a random batch size, random
  ranges re-run) a range backfill leaves the same table as per-partition backfills, and both equal
  a reference computed here in plain DuckDB, for delete+insert (with and without lookback), append
  and merge.
* After a range run: one state row per partition (same run, SQL hash, pins), explain and
  restore per partition, ``--missing-only`` skips every partition, ``--stale`` re-runs only the
  changed one, and ``resume`` runs only the failed batch's partitions.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import duckdb
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from lakewrap.api import Project
from lakewrap.batches import compile_range
from lakewrap.cli import main

DAY0 = datetime(2024, 1, 1)
DAYS = 8
HEAD = "-- materialized incremental\n-- partitioned daily key=ts start=2024-01-01{extra}\n"
WINDOW = "WHERE ts >= $partition_start AND ts < $partition_end"


def day(i: int) -> str:
    return (DAY0 + timedelta(days=i)).date().isoformat()


def write_models(root: Path, models: dict[str, str]) -> None:
    (root / "lakewrap.toml").write_text("")
    for rel, text in models.items():
        path = root / "models" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def write_seed(root: Path, rows: list[tuple[int, datetime, int]], name: str = "events") -> None:
    path = root / "seeds" / "raw" / f"{name}.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    body = "".join(f"{i},{ts:%Y-%m-%d %H:%M:%S},{v}\n" for i, ts, v in rows)
    path.write_text("id,ts,v\n" + body)
    # the column types do not depend on the rows (an empty seed has none to infer from)
    (root / "seeds" / "raw" / f"{name}.toml").write_text('[columns]\nid = "BIGINT"\nts = "TIMESTAMP"\nv = "BIGINT"\n')


# --- the verdict -----------------------------------------------------------------------------------

SEPARABLE = {
    "rowwise": f"SELECT id, ts, v * 2 AS w FROM raw.events {WINDOW}",
    "star": f"SELECT * FROM raw.events {WINDOW}",
    "join_dimension": "SELECT e.id, e.ts, d.n FROM raw.events AS e JOIN (SELECT 1 AS k, 'x' AS n) AS d ON d.k = 1 "
                      "WHERE e.ts >= $partition_start AND e.ts < $partition_end",
    "group_by_key": f"SELECT ts, count(*) AS n, sum(v) AS s FROM raw.events {WINDOW} GROUP BY ts",
    "group_by_all": f"SELECT ts, v, count(*) AS n FROM raw.events {WINDOW} GROUP BY ALL HAVING count(*) > 0",
    "group_by_position": f"SELECT ts, count(*) AS n FROM raw.events {WINDOW} GROUP BY 1",
    "group_finer_than_key": f"SELECT ts, v, count(*) AS n FROM raw.events {WINDOW} GROUP BY v, ts",
    "subquery_aggregate": "SELECT id, ts, (SELECT max(v) FROM raw.events) AS top FROM raw.events " + WINDOW,
}
NOT_SEPARABLE = {
    "window_function": (f"SELECT id, ts, sum(v) OVER (ORDER BY ts) AS running FROM raw.events {WINDOW}",
                        "window function"),
    "limit": (f"SELECT id, ts FROM raw.events {WINDOW} ORDER BY ts LIMIT 5", "LIMIT"),
    "distinct": (f"SELECT DISTINCT ts, v FROM raw.events {WINDOW}", "DISTINCT"),
    "coarser_group": ("SELECT max(ts) AS ts, sum(v) AS s FROM raw.events " + WINDOW +
                      " GROUP BY date_trunc('month', ts)", "not proven to be the window"),
    "aggregate_whole_window": (f"SELECT ts, count(*) OVER () AS n FROM raw.events {WINDOW}", "window function"),
    "partition_value": (f"SELECT id, ts, $partition_value AS p FROM raw.events {WINDOW}", "outside the WHERE"),
    "bound_elsewhere": (f"SELECT id, ts, $partition_start AS s FROM raw.events {WINDOW}", "outside the WHERE"),
    "union": (f"SELECT id, ts FROM raw.events {WINDOW} UNION ALL SELECT id, ts FROM raw.events {WINDOW}",
              "set operation"),
    "computed_key": ("SELECT id, ts + INTERVAL 1 HOUR AS ts FROM raw.events " + WINDOW, "not proven"),
    "qualify": (f"SELECT id, ts FROM raw.events {WINDOW} QUALIFY row_number() OVER (PARTITION BY id) = 1",
                "QUALIFY"),
}


# a key derived from the bounded column ts (key=day), a merge whose unique_key lacks the partition key
DAY_HEAD = "-- materialized incremental\n-- partitioned {grain} key=day start=2024-01-01{extra}\n"
DAY_SEPARABLE = {
    "derived_group_all": "SELECT CAST(date_trunc('day', ts) AS TIMESTAMP) AS day, count(*) AS n, "
                         f"CAST(sum(v) AS BIGINT) AS v FROM raw.events {WINDOW} GROUP BY ALL",
    "derived_group_alias": f"SELECT date_trunc('day', ts) AS day, count(*) AS n FROM raw.events {WINDOW} GROUP BY day",
    "derived_group_position": f"SELECT date_trunc('day', ts) AS day, count(*) AS n FROM raw.events {WINDOW} GROUP BY 1",
    "derived_group_expression": "SELECT CAST(date_trunc('day', ts) AS TIMESTAMPTZ) AS day, count(*) AS n FROM "
                                f"raw.events {WINDOW} GROUP BY CAST(date_trunc('day', ts) AS TIMESTAMPTZ)",
    "derived_group_finer": f"SELECT date_trunc('day', ts) AS day, ts, count(*) AS n FROM raw.events {WINDOW} "
                           "GROUP BY ts",
    "derived_group_finer_unit": "SELECT date_trunc('day', date_trunc('hour', ts)) AS day, count(*) AS n FROM "
                                f"raw.events {WINDOW} GROUP BY date_trunc('hour', ts)",
    "derived_rowwise_hour": f"SELECT date_trunc('hour', ts) AS day, id FROM raw.events {WINDOW}",
    "derived_date_cast": f"SELECT CAST(ts AS DATE) AS day, id FROM raw.events {WINDOW}",
    "derived_spelling": f"SELECT DATE_TRUNC('Days', ts)::TIMESTAMP AS day, id FROM raw.events {WINDOW}",
    "derived_renamed": f"SELECT ts AS day, id FROM raw.events {WINDOW}",
    "derived_qualified": "SELECT date_trunc('day', e.ts) AS day, count(*) AS n FROM raw.events AS e "
                         "WHERE e.ts >= $partition_start AND e.ts < $partition_end GROUP BY ALL",
}
DAY_NOT_SEPARABLE = {
    "coarser_unit": (f"SELECT date_trunc('month', ts) AS day, count(*) AS n FROM raw.events {WINDOW} GROUP BY ALL",
                     "truncated to the month, coarser than the daily grain"),
    "unbounded_column": (f"SELECT date_trunc('day', updated) AS day, id FROM raw.events {WINDOW}",
                         "derived from updated, which the WHERE does not bound"),
    "other_qualifier": ("SELECT date_trunc('day', ts) AS day, e.id FROM raw.events AS e "
                        "WHERE e.ts >= $partition_start AND e.ts < $partition_end", "does not bound"),
    "other_function": (f"SELECT ts + INTERVAL 1 DAY AS day, id FROM raw.events {WINDOW}", "is computed by"),
    "time_bucket": (f"SELECT time_bucket(INTERVAL 1 DAY, ts) AS day, id FROM raw.events {WINDOW}", "is computed by"),
    "try_cast": (f"SELECT TRY_CAST(ts AS DATE) AS day, id FROM raw.events {WINDOW}", "is computed by"),
    "cast_varchar": (f"SELECT CAST(ts AS VARCHAR) AS day, id FROM raw.events {WINDOW}", "is computed by"),
    "column_unit": (f"SELECT date_trunc(unit, ts) AS day, id FROM raw.events {WINDOW}", "not a string constant"),
    "swapped_arguments": (f"SELECT date_trunc(ts, 'day') AS day, id FROM raw.events {WINDOW}", "not a string"),
    "unknown_unit": (f"SELECT date_trunc('dow', ts) AS day, id FROM raw.events {WINDOW}", "not a string constant"),
    "star_beside": (f"SELECT *, date_trunc('day', ts) AS day FROM raw.events {WINDOW}", "another column named day"),
    "coarser_group": ("SELECT date_trunc('month', ts) AS m, date_trunc('day', min(ts)) AS day FROM raw.events " +
                      WINDOW + " GROUP BY 1", "is computed by `MIN(ts)`"),
    "group_without_key": (f"SELECT date_trunc('day', ts) AS day, count(*) AS n FROM raw.events {WINDOW} GROUP BY id",
                          "GROUP BY does not hold the partition key"),
    "second_bounded_column": (f"SELECT date_trunc('day', ts) AS day, id FROM raw.events {WINDOW} "
                              "AND updated >= $partition_start", "outside the WHERE's two window comparisons"),
}


def verdicts(tmp_path: Path, models: dict[str, str]) -> dict[str, list[Any]]:
    write_models(tmp_path, models)
    plans = compile_range(tmp_path, start=day(0), end=day(5), batch_size=4, now=datetime(2024, 6, 1),
                          use_cache=False)
    out: dict[str, list[Any]] = {}
    for p in plans:
        out.setdefault(p.target, []).append(p)
    return out


def test_separable_selects_compile_one_plan_per_batch(tmp_path: Path) -> None:
    got = verdicts(tmp_path, {f"m/{name}.sql": HEAD.format(extra="") + sql for name, sql in SEPARABLE.items()})
    for name in SEPARABLE:
        plans = got[f"m.{name}"]
        assert all(p.separable is not None and p.separable.proven for p in plans), (name, plans[0].separable)
        assert [[w.value for w in p.window.partitions] for p in plans] == [
            [day(0), day(1), day(2), day(3)], [day(4), day(5)]], name
        assert plans[0].window.start == "2024-01-01T00:00:00+00:00"
        assert plans[0].window.end == "2024-01-05T00:00:00+00:00"
        # the same statements as a one-partition plan: the same sql_sha256
        assert len({p.sql_sha256 for p in plans}) == 1


def test_non_separable_selects_stay_per_partition(tmp_path: Path) -> None:
    models = {f"m/{name}.sql": HEAD.format(extra="") + sql for name, (sql, _) in NOT_SEPARABLE.items()}
    models["m/append_lookback.sql"] = HEAD.format(extra=" lookback=1") + "-- append\n" + \
        f"SELECT id, ts FROM raw.events {WINDOW}"
    models["m/reads_itself.sql"] = HEAD.format(extra="") + \
        f"SELECT id, ts FROM raw.events {WINDOW} AND id NOT IN (SELECT id FROM m.reads_itself)"
    models["m/tested.sql"] = HEAD.format(extra="") + "-- test not_null id\n" + f"SELECT id, ts FROM raw.events {WINDOW}"
    got = verdicts(tmp_path, models)
    reasons = {name: why for name, (_, why) in NOT_SEPARABLE.items()}
    reasons |= {"append_lookback": "lookback", "reads_itself": "reads the table", "tested": "data tests"}
    for name, why in reasons.items():
        plans = got[f"m.{name}"]
        assert [p.window.value for p in plans] == [day(i) for i in range(6)], name
        assert all(not p.window.partitions for p in plans), name
        assert plans[0].separable is not None and not plans[0].separable.proven, name
        if why is not None:
            assert why in plans[0].separable.reason, (name, plans[0].separable.reason)


def test_bounds_on_a_second_column_are_not_separable(tmp_path: Path) -> None:
    """A second column compared with a window bound keeps other rows in a wider window (a row of day 2
    updated on day 1 is outside day 2's window, inside days 1..2's)."""
    sql = f"SELECT id, ts FROM raw.events {WINDOW} AND updated >= $partition_start"
    got = verdicts(tmp_path, {"m/two.sql": HEAD.format(extra="") + sql})["m.two"]
    assert len(got) == 6 and "outside the WHERE's two window comparisons" in got[0].separable.reason


def day_models(cases: dict[str, Any], grain: str = "daily", extra: str = "") -> dict[str, str]:
    return {f"m/{name}.sql": DAY_HEAD.format(grain=grain, extra=extra) + (sql if isinstance(sql, str) else sql[0])
            for name, sql in cases.items()}


def test_derived_keys_compile_one_plan_per_batch(tmp_path: Path) -> None:
    """A key computed from the bounded column by truncations at the grain or finer: batched, with
    the per-partition plan's statements (and its window guard, which cannot fire)."""
    got = verdicts(tmp_path, day_models(DAY_SEPARABLE))
    for name in DAY_SEPARABLE:
        plans = got[f"m.{name}"]
        assert [len(p.window.partitions) for p in plans] == [4, 2], (name, plans[0].separable)
        assert "is computed from" in plans[0].separable.reason or name == "derived_renamed", name
        assert len({p.sql_sha256 for p in plans}) == 1, name
    one = compile_range(tmp_path, ["derived_group_all"], start=day(0), end=day(0), now=datetime(2024, 6, 1),
                        use_cache=False)[0]
    assert one.sql_sha256 == got["m.derived_group_all"][0].sql_sha256
    assert [s.role for s in one.statements].count("guard") == 1  # refuse rows outside the window: kept


def test_derived_keys_refused(tmp_path: Path) -> None:
    got = verdicts(tmp_path, day_models(DAY_NOT_SEPARABLE))
    for name, (_, why) in DAY_NOT_SEPARABLE.items():
        plans = got[f"m.{name}"]
        assert len(plans) == 6 and not any(p.window.partitions for p in plans), name
        reason = plans[0].separable.reason
        assert not plans[0].separable.proven and (why is None or why in reason), (name, reason)


@pytest.mark.parametrize(("grain", "unit", "proven"), [
    ("hourly", "hour", True), ("hourly", "minute", True), ("hourly", "day", False),
    ("daily", "second", True), ("daily", "week", False),
    ("weekly", "week", True), ("weekly", "day", True), ("weekly", "month", False), ("weekly", "year", False),
    ("monthly", "month", True), ("monthly", "day", True), ("monthly", "week", False), ("monthly", "quarter", False),
    ("yearly", "year", True), ("yearly", "quarter", True), ("yearly", "month", True), ("yearly", "week", False),
    ("yearly", "decade", False),
])
def test_derived_key_units_per_grain(tmp_path: Path, grain: str, unit: str, proven: bool) -> None:
    start = {"hourly": "2024-01-01T00", "weekly": "2024-W01", "monthly": "2024-01", "yearly": "2024"}.get(grain,
                                                                                                       day(0))
    head = f"-- materialized incremental\n-- partitioned {grain} key=day start={start}\n"
    write_models(tmp_path, {"m/k.sql": head + f"SELECT date_trunc('{unit}', ts) AS day, id FROM raw.events {WINDOW}"})
    first = compile_range(tmp_path, start=start, end=start, now=datetime(2026, 6, 1), use_cache=False)[0]
    assert first.separable.proven is proven, first.separable.reason
    if not proven:
        assert f"coarser than the {grain} grain" in first.separable.reason


def test_derived_key_needs_utc(tmp_path: Path) -> None:
    write_models(tmp_path, day_models({"berlin": DAY_SEPARABLE["derived_group_all"],
                                       "renamed": DAY_SEPARABLE["derived_renamed"]}, extra=" tz=Europe/Berlin"))
    got = verdicts(tmp_path, {})
    assert "tz=Europe/Berlin" in got["m.berlin"][0].separable.reason and len(got["m.berlin"]) == 6
    assert got["m.renamed"][0].separable.proven  # no truncation: the same instant in any zone


def test_date_trunc_units_agree_with_duckdb_and_the_partitions() -> None:
    """Every spelling lakewrap follows truncates as DuckDB's canonical unit does, and each unit lakewrap
    calls fine for a grain keeps every instant in its partition (UTC; weeks from Monday, as lakewrap's
    ISO weeks); each unit it refuses moves some instant out of its partition."""
    from lakewrap.compilers.separable import FINE, UNITS
    from lakewrap.partitions import Grain, partition_of

    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    instants = [datetime(2019, 12, 28) + timedelta(hours=7 * i, minutes=i % 60, seconds=i % 7) for i in range(2600)]
    instants += [datetime(y, 1, 1) for y in range(2019, 2027)] + [datetime(2020, 12, 31, 23, 59, 59)]
    con.execute("CREATE TABLE t AS SELECT unnest(?) AS ts", [instants])
    for spelling, unit in UNITS.items():
        for written in (spelling, spelling.upper()):
            diff = con.execute(f"SELECT count(*) FROM t WHERE date_trunc('{written}', ts) <> "
                               f"date_trunc('{unit}', ts)").fetchone()[0]
            assert diff == 0, (written, unit)
    units = sorted(set(UNITS.values()))
    truncated = {u: [r[0] for r in con.execute(f"SELECT date_trunc('{u}', ts) FROM t ORDER BY rowid").fetchall()]
                 for u in units}
    for grain, fine in FINE.items():
        g = Grain(grain)
        home = [partition_of(g, ts.replace(tzinfo=timezone.utc)).value for ts in instants]
        for u in units:
            moved = sum(partition_of(g, x.replace(tzinfo=timezone.utc)).value != h
                        for x, h in zip(truncated[u], home, strict=True))
            assert (moved == 0) == (u in fine), (grain, u, moved)


MERGE_BODY = f"SELECT id, ts, v FROM raw.events {WINDOW}"
MERGES = {  # unique_key without the partition key ts: batched in UTC, no lookback, every column updated
    "latest": ("", "-- unique_key id\n", None),
    "latest_by": ("", "-- unique_key id dedupe=latest_by(v)\n", None),
    "replace": ("", "-- unique_key id matched=replace\n", None),
    "update_all": ("", "-- unique_key id update_columns=ts,v\n", None),
    "update_some": ("", "-- unique_key id update_columns=v\n", "updates only some columns"),
    "exclude": ("", "-- unique_key id exclude_columns=v\n", "updates only some columns"),
    "predicate": ("", "-- unique_key id predicate=\"target.v > 0\"\n", "predicate="),
    "berlin": (" tz=Europe/Berlin", "-- unique_key id\n", "only in UTC partitions (tz=Europe/Berlin)"),
    "lookback": (" lookback=1", "-- unique_key id\n", "with a lookback"),
}


def test_merge_without_the_partition_key(tmp_path: Path) -> None:
    """Batched when partition after partition would leave each key's row of its latest partition;
    its statements are then that form for one partition too (one sql_sha256), else today's."""
    got = verdicts(tmp_path, {f"m/{name}.sql": HEAD.format(extra=extra) + line + MERGE_BODY
                              for name, (extra, line, _) in MERGES.items()})
    for name, (_, _, why) in MERGES.items():
        plans = got[f"m.{name}"]
        sql = "\n".join(st.sql for st in plans[0].statements)
        if why is None:
            assert [len(p.window.partitions) for p in plans] == [4, 2], (name, plans[0].separable)
            assert "latest partition" in plans[0].separable.reason
            one = compile_range(tmp_path, [name], start=day(0), end=day(0), now=datetime(2024, 6, 1),
                                use_cache=False)[0]
            assert {p.sql_sha256 for p in plans} == {one.sql_sha256}, name
            assert "DATE_TRUNC('DAY', \"ts\") DESC" in sql, name
        else:
            assert len(plans) == 6 and not plans[0].separable.proven, name
            assert why in plans[0].separable.reason, (name, plans[0].separable.reason)
            assert "DATE_TRUNC" not in sql and "in one partition" not in sql, name  # today's statements
    assert "values occur more than once in one partition" in "\n".join(st.sql for st in got["m.latest"][0].statements)


def test_batch_annotation_and_errors(tmp_path: Path) -> None:
    write_models(tmp_path, {"m/a.sql": HEAD.format(extra=" batch=2") + f"SELECT id, ts FROM raw.events {WINDOW}"})
    plans = compile_range(tmp_path, start=day(0), end=day(4), now=datetime(2024, 6, 1), use_cache=False)
    assert [len(p.window.partitions) for p in plans] == [2, 2, 0]  # the last batch is one partition
    one = compile_range(tmp_path, start=day(0), end=day(4), batch_size=1, now=datetime(2024, 6, 1), use_cache=False)
    assert len(one) == 5 and not any(p.window.partitions for p in one)
    (tmp_path / "models" / "m" / "a.sql").write_text(HEAD.format(extra=" batch=0") + "SELECT 1 AS ts")
    res = CliRunner().invoke(main, ["compile", "--project", str(tmp_path)])
    assert res.exit_code != 0
    assert "models/m/a.sql:2" in res.output and "batch must be between 1 and 10000" in res.output


def test_compile_says_why(tmp_path: Path) -> None:
    """``lakewrap compile --start/--end`` prints the verdict in each plan's header and in JSON."""
    write_models(tmp_path, {"m/ok.sql": HEAD.format(extra=" batch=3") + SEPARABLE["group_by_key"],
                            "m/win.sql": HEAD.format(extra="") + NOT_SEPARABLE["window_function"][0],
                            "m/lim.sql": HEAD.format(extra="") + NOT_SEPARABLE["limit"][0],
                            "m/dis.sql": HEAD.format(extra="") + NOT_SEPARABLE["distinct"][0],
                            "m/coarse.sql": HEAD.format(extra="") + NOT_SEPARABLE["coarser_group"][0]})
    args = ["compile", "--project", str(tmp_path), "--start", day(0), "--end", day(3), "--now", "2024-06-01"]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    headers: dict[str, list[str]] = {}
    for block in res.output.split("-- model:      models/")[1:]:
        lines = block.splitlines()
        headers.setdefault(lines[0], []).append(next(x for x in lines if x.startswith("-- batches:")))
    assert headers["m/ok.sql"] == ["-- batches:    yes, batch=3 unless --batch-size (the SELECT's WHERE is the window "
                                   "on the key it returns, and the rest is row-wise: a range of partitions is "
                                   "written with one statement pair)"] * 2  # days 0..2, then day 3
    for name, key in (("win", "window_function"), ("lim", "limit"), ("dis", "distinct"), ("coarse", "coarser_group")):
        lines = headers[f"m/{name}.sql"]
        assert len(lines) == 4, name  # one plan per partition
        assert all(x.startswith("-- batches:    NO, per partition (") and NOT_SEPARABLE[key][1] in x
                   for x in lines), (name, lines)
    plans = json.loads(CliRunner().invoke(main, [*args, "--format", "json", "--batch-size", "4"]).output)["plans"]
    by_model: dict[str, list[Any]] = {}
    for p in plans:
        by_model.setdefault(p["target"], []).append(p)
    assert [len(p["window"]["partitions"]) for p in by_model["m.ok"]] == [4]
    assert by_model["m.win"][0]["separable"]["proven"] is False
    assert "window function" in by_model["m.win"][0]["separable"]["reason"]


@pytest.mark.parametrize(("value", "message"), [
    ("0", "batch must be between 1 and 10000, got 0"),
    ("-3", "batch must be between 1 and 10000, got -3"),
    ("10001", "batch must be between 1 and 10000, got 10001"),
    ("abc", "batch must be a whole number, got `abc`"),
    ("2.5", "batch must be a whole number, got `2.5`"),
    ("", "option `batch` has an empty value"),
])
def test_bad_batch_annotation_writes_nothing(tmp_path: Path, value: str, message: str) -> None:
    sql = f"SELECT id, ts FROM raw.events {WINDOW}"
    write_models(tmp_path, {"m/a.sql": HEAD.format(extra=f" batch={value}") + sql})
    write_seed(tmp_path, [(1, DAY0, 1)])
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    for args in (["compile"], ["backfill", "--start", day(0), "--end", day(2)], ["run"]):
        res = CliRunner().invoke(main, [*args, "--project", str(tmp_path)])
        assert res.exit_code != 0, (args, res.output)
        # file, line and column (the option's value), what is wrong and what to write
        assert f"models/m/a.sql:2:{HEAD.splitlines()[1].index('{extra}') + 2}:" in res.output
        assert message in res.output and "hint:" in res.output, res.output
    assert not (tmp_path / ".lakewrap").exists()  # no lake, no state
    assert [p for p in sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) if p not in before
            and not str(p).startswith("target")] == []


@pytest.mark.parametrize("size", ["0", "-1"])
def test_bad_batch_size_writes_nothing(tmp_path: Path, size: str) -> None:
    write_models(tmp_path, {"m/a.sql": HEAD.format(extra="") + f"SELECT id, ts FROM raw.events {WINDOW}"})
    for args in (["backfill", "--start", day(0), "--end", day(2)], ["run"], ["compile", "--start", day(0), "--end",
                                                                            day(2)]):
        res = CliRunner().invoke(main, [*args, "--batch-size", size, "--project", str(tmp_path)])
        assert res.exit_code != 0, (args, res.output)
        assert f"--batch-size must be at least 1, not {size}" in res.output and "hint:" in res.output, res.output
    assert not (tmp_path / ".lakewrap").exists()  # the lake was never opened
    with pytest.raises(Exception, match="--batch-size must be at least 1"):
        Project(tmp_path).backfill(start=day(0), end=day(2), batch_size=0)
    assert not (tmp_path / ".lakewrap").exists()


# --- range backfill == per-partition backfills == reference ---------------------------------------------

KEY_DAY = "-- materialized incremental\n-- partitioned daily key=day start=2024-01-01{extra}\n"
STRATEGIES = {  # name: (header, header options, strategy line, body)
    "di": (HEAD, "", "", BODY := f"SELECT id, ts, v * 10 + 1 AS w FROM raw.events {WINDOW}\n"),
    "dilb": (HEAD, " lookback=1", "", BODY),
    "app": (HEAD, "", "-- append\n", BODY),
    "mrg": (HEAD, "", "-- unique_key id,ts\n", BODY),
    # a key derived from ts (date_trunc), aggregated per day
    "dk": (KEY_DAY, "", "", "SELECT CAST(date_trunc('day', ts) AS TIMESTAMP) AS day, count(*) AS n, "
           f"CAST(sum(v) AS BIGINT) AS w FROM raw.events {WINDOW} GROUP BY ALL\n"),
    # unique_key k without ts: k spans days; raw.keyed holds one row per (day, k)
    "mke": (HEAD, "", "-- unique_key k\n", f"SELECT ts, CAST(hour(ts) AS BIGINT) AS k, v * 10 + 1 AS w FROM raw.keyed "
            f"{WINDOW}\n"),
    "mkl": (HEAD, "", "-- unique_key k dedupe=latest_by(id)\n",
            MK := f"SELECT ts, id % 5 AS k, id, v * 10 + 1 AS w FROM raw.events {WINDOW}\n"),
    "mkr": (HEAD, "", "-- unique_key k dedupe=latest_by(id) matched=replace\n", MK),
}
COLUMNS = {"dk": "day, n, w", "mke": "k, ts, w", "mkl": "k, ts, w", "mkr": "k, ts, w"}


def both(batch: int) -> dict[str, str]:
    out = {}
    for name, (head, extra, line, body) in STRATEGIES.items():
        out[f"r/{name}.sql"] = head.format(extra=f"{extra} batch={batch}") + line + body
        out[f"p/{name}.sql"] = head.format(extra=f"{extra} batch=1") + line + body
    return out


def keyed(rows: list[tuple[int, datetime, int]]) -> list[tuple[int, datetime, int]]:
    """The first row of each (day, hour): a key ``hour(ts)`` held once per partition."""
    seen: dict[tuple[Any, int], tuple[int, datetime, int]] = {}
    for r in rows:
        seen.setdefault((r[1].date(), r[1].hour), r)
    return list(seen.values())


class Reference:
    """What each strategy's table holds after backfills of ranges: each partition's rows computed by
    plain DuckDB (in memory, no lake, no lakewrap), kept per strategy in Python; the merges applied
    partition after partition."""

    def __init__(self) -> None:
        self.tables: dict[str, Any] = {"di": {}, "dilb": {}, "app": Counter(), "mrg": {}, "dk": {}, "mke": {},
                                       "mkl": {}, "mkr": {}}

    def backfill(self, rows: list[tuple[int, datetime, int]], first: int, last: int) -> None:
        con = duckdb.connect()
        for name, data in (("events", rows), ("keyed", keyed(rows))):
            con.execute(f"CREATE TABLE {name} (id BIGINT, ts TIMESTAMP, v BIGINT)")
            if data:
                con.executemany(f"INSERT INTO {name} VALUES (?, ?, ?)", data)

        def rows_of(d: int, select: str = "id, ts, v * 10 + 1", table: str = "events",
                    tail: str = "") -> list[tuple[Any, ...]]:
            lo, hi = DAY0 + timedelta(days=d), DAY0 + timedelta(days=d + 1)
            return [tuple(r) for r in con.execute(
                f"SELECT {select} FROM {table} WHERE ts >= ? AND ts < ? {tail} ORDER BY ALL", [lo, hi]).fetchall()]

        for d in range(first, last + 1):
            self.tables["di"][d] = rows_of(d)
            for back in (d - 1, d):  # lookback=1: the partition before is rewritten too
                self.tables["dilb"][back] = rows_of(back)
            self.tables["app"].update(rows_of(d))
            for r in rows_of(d):
                self.tables["mrg"][(r[0], r[1])] = r
            self.tables["dk"][d] = rows_of(d, "CAST(date_trunc('day', ts) AS TIMESTAMP), count(*), "
                                              "CAST(sum(v) AS BIGINT)", tail="GROUP BY ALL")
            for r in rows_of(d, "hour(ts), ts, v * 10 + 1", "keyed"):
                self.tables["mke"][r[0]] = r
            latest = rows_of(d, "id % 5, ts, v * 10 + 1", tail="QUALIFY row_number() OVER (PARTITION BY id % 5 "
                                                               "ORDER BY id DESC) = 1")
            for r in latest:
                self.tables["mkl"][r[0]] = self.tables["mkr"][r[0]] = r
        con.close()

    def rows(self, name: str) -> list[tuple[Any, ...]]:
        t = self.tables[name]
        if name in ("di", "dilb", "dk"):
            return sorted(r for part in t.values() for r in part)
        if name == "app":
            return sorted(t.elements())
        return sorted(t.values())


def table(project: Project, name: str) -> list[tuple[Any, ...]]:
    columns = COLUMNS.get(name.split(".")[1], "id, ts, w")
    return sorted(tuple(r.values()) for r in project.query(f"SELECT {columns} FROM {name}").to_pylist())


row = st.tuples(st.integers(0, DAYS - 1), st.integers(0, 23), st.integers(-50, 50))


# one rich history besides the random ones: keys k of the merges held by several days of every batch
RICH = {"first": [(i % DAYS, (i * 5) % 24, i - 12) for i in range(25)], "late": [(2, 10, 7), (5, 0, -3), (6, 15, 1)],
        "drop": {3, 7}, "batch": 3, "span": (1, 5)}


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@example(**RICH)
@given(first=st.lists(row, max_size=25), late=st.lists(row, max_size=8), drop=st.sets(st.integers(0, 24)),
       batch=st.integers(2, 6), span=st.tuples(st.integers(0, DAYS - 1), st.integers(0, DAYS - 1)))
def test_range_backfill_equals_per_partition_backfills(tmp_path_factory: pytest.TempPathFactory,
                                                       first: list[tuple[int, int, int]],
                                                       late: list[tuple[int, int, int]], drop: set[int], batch: int,
                                                       span: tuple[int, int]) -> None:
    root = tmp_path_factory.mktemp("range")
    write_models(root, both(batch))
    rows = [(i, DAY0 + timedelta(days=d, hours=h), v) for i, (d, h, v) in enumerate(first)]
    project, ref = Project(root), Reference()
    write_seed(root, rows)
    write_seed(root, keyed(rows), "keyed")
    assert project.seed().ok
    report = project.backfill(start=day(0), end=day(DAYS - 1))
    assert report.ok, [r.error for r in report.results if r.error]
    ref.backfill(rows, 0, DAYS - 1)
    for name in STRATEGIES:  # batches of `batch` partitions (a last one of one partition is no batch)
        got = {r.partition: r.batch for r in report.results if r.target == f"r.{name}"}
        chunks = [[day(i) for i in range(k, min(k + batch, DAYS))] for k in range(0, DAYS, batch)]
        assert got == {p: (c if len(c) > 1 else []) for c in chunks for p in c}, name
    assert not any(r.batch for r in report.results if r.target.startswith("p."))
    # late updates: some rows gone, some changed, some new; then a random range again
    changed = [(i, ts, v + 1 if i % 3 == 0 else v) for i, ts, v in rows if i not in drop]
    changed += [(1000 + j, DAY0 + timedelta(days=d, hours=h), v) for j, (d, h, v) in enumerate(late)]
    write_seed(root, changed)
    write_seed(root, keyed(changed), "keyed")
    assert project.seed().ok
    lo, hi = sorted(span)
    report = project.backfill(start=day(lo), end=day(hi), reappend=True)
    assert report.ok, [r.error for r in report.results if r.error]
    ref.backfill(changed, lo, hi)
    for name in STRATEGIES:
        expected = ref.rows(name)
        assert table(project, f"p.{name}") == expected, name
        assert table(project, f"r.{name}") == expected, name
    states = project.query("SELECT target, partition_value, count(*) AS n FROM lakewrap.materializations "
                           "WHERE target LIKE 'r.%' GROUP BY ALL").to_pylist()
    assert len(states) == len(STRATEGIES) * DAYS
    for s in states:  # one state row per partition and run, batched or not
        d = (datetime.fromisoformat(s["partition_value"]) - DAY0).days
        assert s["n"] == (2 if lo <= d <= hi else 1), s


# --- per partition after a range run -----------------------------------------------------------------------


def lake_cli(root: Path, *args: str) -> Any:
    res = CliRunner().invoke(main, [*args, "--project", str(root), "--format", "json"])
    assert res.exit_code in (0, 1), res.output
    return json.loads(res.output)


def test_state_explain_missing_only_stale_resume_after_a_range_run(tmp_path: Path) -> None:
    body = ("SELECT id, ts, CAST(CASE WHEN v = 99 THEN 'x' ELSE CAST(v AS VARCHAR) END AS BIGINT) AS w "
            f"FROM raw.events {WINDOW}\n")
    write_models(tmp_path, {"m/di.sql": HEAD.format(extra=" batch=3") + body})
    rows = [(i, DAY0 + timedelta(days=i % DAYS, hours=i % 24), i) for i in range(40)]
    rows[13] = (13, rows[13][1], 99)  # day 5 (13 % 8): the batch of days 3..5 fails
    write_seed(tmp_path, rows)
    project = Project(tmp_path)
    assert project.seed().ok
    report = lake_cli(tmp_path, "backfill", "--start", day(0), "--end", day(DAYS - 1))
    status = {r["partition"]: (r["status"], r["batch"]) for r in report["results"]}
    assert status[day(0)] == ("success", [day(0), day(1), day(2)])
    assert {status[day(i)][0] for i in (3, 4, 5)} == {"failed"}
    assert status[day(6)] == ("success", [day(6), day(7)])
    run_id = report["run_id"]
    # one state row per committed partition: same run, same sql_sha256, same pins
    states = project.query("SELECT partition_value, run_id, sql_sha256, pins, window_start FROM "
                           "lakewrap.materializations WHERE target = 'm.di' ORDER BY 1").to_pylist()
    assert [s["partition_value"] for s in states] == [day(i) for i in (0, 1, 2, 6, 7)]
    assert {s["run_id"] for s in states} == {run_id}
    assert len({s["sql_sha256"] for s in states}) == 1 and len({s["pins"] for s in states[:3]}) == 1
    assert [s["window_start"].date().isoformat() for s in states] == [day(i) for i in (0, 1, 2, 6, 7)]
    # explain: each partition of the batch, with the snapshot that committed it
    explained = {m.partition: m for m in project.explain(run_id)}
    assert set(explained) == {day(i) for i in (0, 1, 2, 6, 7)}
    assert explained[day(1)].snapshot_id == explained[day(0)].snapshot_id is not None
    assert explained[day(6)].snapshot_id != explained[day(0)].snapshot_id
    # fix the row, then resume: only the failed batch runs (as a batch), the rest is committed
    rows[13] = (13, rows[13][1], 13)
    write_seed(tmp_path, rows)
    assert project.seed().ok
    resumed = lake_cli(tmp_path, "resume", run_id)
    assert resumed["ok"], resumed
    assert sorted(r["partition"] for r in resumed["results"]) == [day(3), day(4), day(5)]
    assert {tuple(r["batch"]) for r in resumed["results"]} == {(day(3), day(4), day(5))}
    assert table_w(project) == sorted((i, ts, v) for i, ts, v in rows)
    # --missing-only: every partition is there with the same SQL
    again = lake_cli(tmp_path, "backfill", "--start", day(0), "--end", day(DAYS - 1), "--missing-only")
    assert again["results"] == [] and len(again["not_rerun"]) == DAYS
    # --stale: change one row of day 1; only that partition runs, on its own
    rows[1] = (1, rows[1][1], 1000)
    write_seed(tmp_path, rows)
    assert project.seed().ok
    stale = lake_cli(tmp_path, "run", "--stale")
    assert [(r["partition"], r["batch"]) for r in stale["results"]] == [(day(1), [])]
    assert table_w(project) == sorted((i, ts, v) for i, ts, v in rows)
    # restore: day 1 alone, back to what the range run's batch committed; the other days untouched
    restored = project.restore("m.di", partition=day(1), to_run=run_id)
    assert restored.partition == day(1) and restored.from_run == run_id
    assert (restored.result.rows_deleted, restored.result.rows_inserted) == (5, 5)  # ids 1, 9, 17, 25, 33
    rows[1] = (1, rows[1][1], 1)
    assert table_w(project) == sorted((i, ts, v) for i, ts, v in rows)


def table_w(project: Project) -> list[tuple[Any, ...]]:
    return sorted((r["id"], r["ts"], r["w"]) for r in project.query("SELECT id, ts, w FROM m.di").to_pylist())


def test_non_separable_model_runs_per_partition(tmp_path: Path) -> None:
    write_models(tmp_path, {"m/lim.sql": HEAD.format(extra=" batch=4") +
                            f"SELECT id, ts FROM raw.events {WINDOW} ORDER BY ts LIMIT 2\n"})
    rows = [(i, DAY0 + timedelta(days=i % 4, hours=i), i) for i in range(20)]
    write_seed(tmp_path, rows)
    project = Project(tmp_path)
    assert project.seed().ok
    report = project.backfill(start=day(0), end=day(3))
    assert report.ok and len(report.results) == 4 and not any(r.batch for r in report.results)
    got = sorted(r["id"] for r in project.query("SELECT id FROM m.lim").to_pylist())
    expected = sorted(i for d in range(4) for i in sorted((i for i in range(20) if i % 4 == d),
                                                           key=lambda i: rows[i][1])[:2])
    assert got == expected  # two rows per day: the LIMIT applies to each partition
    # per partition, each its own window and state row; on a DuckLake the consecutive partitions share
    # one group commit (docs/running.md, "Group commit and --atomic")
    assert len({r.group for r in report.results}) == 1 and all(r.group for r in report.results)
    assert sorted(r.partition for r in report.results) == [day(d) for d in range(4)]


def test_merge_without_partition_key_duplicate_in_one_partition_fails_the_batch(tmp_path: Path) -> None:
    """unique_key id without the partition key, dedupe=error: an id on several days is merged as day after
    day would (its latest day's row); an id twice in one day fails that day per partition and the whole
    batch in a range, which then writes nothing. The batch's counts: each key once."""
    body = "-- unique_key id\n" + f"SELECT id, ts, v * 10 + 1 AS w FROM raw.events {WINDOW}\n"
    write_models(tmp_path, {"r/mk.sql": HEAD.format(extra=" batch=3") + body,
                            "p/mk.sql": HEAD.format(extra=" batch=1") + body})
    spread = [(1, 0, 5), (1, 1, 6), (1, 2, 7), (3, 0, 1), (3, 2, 2), (2, 1, 8)]  # (id, day, v)
    rows = [(i, DAY0 + timedelta(days=d, hours=n), v) for n, (i, d, v) in enumerate(spread)]
    write_seed(tmp_path, [*rows, (2, DAY0 + timedelta(days=1, hours=20), 9)])  # id 2 twice on day 1
    project = Project(tmp_path)
    assert project.seed().ok
    report = project.backfill(start=day(0), end=day(2))
    status = {(r.target, r.partition): r.status for r in report.results}
    assert [status[("r.mk", day(d))] for d in range(3)] == ["failed"] * 3
    assert [status[("p.mk", day(d))] for d in range(3)] == ["success", "failed", "success"]
    failed = next(r for r in report.results if r.target == "r.mk" and r.error)
    assert "unique_key (id) values occur more than once in one partition, e.g. (2)" in failed.error
    states = project.query("SELECT target FROM lakewrap.materializations WHERE target LIKE '_.mk'").to_pylist()
    assert sorted(s["target"] for s in states) == ["p.mk", "p.mk"]
    assert project.query("SELECT count(*) AS n FROM information_schema.tables WHERE table_schema = 'r'"
                         ).to_pylist() == [{"n": 0}]  # the batch wrote nothing, not even its table
    write_seed(tmp_path, rows)
    assert project.seed().ok
    for rerun in (False, True):
        report = project.backfill(start=day(0), end=day(2), reappend=rerun)
        assert report.ok, [r.error for r in report.results if r.error]
        expected = [(1, DAY0 + timedelta(days=2, hours=2), 71), (2, DAY0 + timedelta(days=1, hours=5), 81),
                    (3, DAY0 + timedelta(days=2, hours=4), 21)]
        assert table(project, "r.mk") == table(project, "p.mk") == expected
        batch = next(r for r in report.results if r.target == "r.mk" and r.partition == day(0))
        per = [r for r in report.results if r.target == "p.mk"]
        assert batch.batch == [day(0), day(1), day(2)]
        members = [r for r in report.results if r.target == "r.mk" and r.partition != day(0)]
        assert batch.seconds > 0 and [(r.seconds, r.rows_inserted) for r in members] == [(0.0, 0), (0.0, 0)]
        # the batch counts each key once: new keys inserted, existing keys updated; per partition each
        # day's rows count (p.mk kept days 0 and 2 of the failed run: only id 2 is new)
        assert (batch.rows_inserted, batch.rows_updated) == ((0, 3) if rerun else (3, 0))
        assert (sum(r.rows_inserted for r in per), sum(r.rows_updated for r in per)) == ((0, 6) if rerun else (1, 5))
