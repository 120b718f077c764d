"""The window filters ``run --stale`` reads from a model's SELECT (pure; no lake)."""

from __future__ import annotations

import sqlglot
from sqlglot import exp

from lakewrap.compilers import maintenance as m
from lakewrap.compilers import stale as st


def filters(sql: str, *tables: str) -> dict[str, list[str | None]]:
    found = st.window_filters(st.parse_select(sql), list(tables))
    return {k: [p.sql("duckdb") if p is not None else None for p in v.predicates] for k, v in found.items()}


def test_qualified_alias_and_join_partner() -> None:
    got = filters("SELECT o.id FROM raw.orders AS o JOIN raw.customers AS c ON o.cid = c.id "
                  "WHERE o.ts >= $partition_start AND o.ts < $partition_end AND c.x > 1",
                  "raw.orders", "raw.customers")
    assert got == {"raw.orders": ["ts >= $partition_start AND ts < $partition_end"], "raw.customers": [None]}


def test_unqualified_needs_a_single_source() -> None:
    assert filters("SELECT * FROM raw.e WHERE ts >= $partition_start", "raw.e") == {
        "raw.e": ["ts >= $partition_start"]}
    # two tables in the SELECT: an unqualified column could be either's
    assert filters("SELECT * FROM raw.e, raw.f WHERE ts >= $partition_start", "raw.e", "raw.f") == {
        "raw.e": [None], "raw.f": [None]}


def test_or_is_kept_whole_and_other_conjuncts_are_ignored() -> None:
    got = filters("SELECT * FROM raw.e WHERE (ts >= $partition_start AND ts < $partition_end) OR ts IS NULL "
                  "AND v > 0", "raw.e")
    assert got["raw.e"][0] is not None and "OR" in got["raw.e"][0]
    got = filters("SELECT * FROM raw.e WHERE v > 0 AND CAST(ts AS DATE) = CAST($partition_value AS DATE)", "raw.e")
    assert got == {"raw.e": ["CAST(ts AS DATE) = CAST($partition_value AS DATE)"]}


def test_each_reference_needs_its_own_filter() -> None:
    sql = ("SELECT * FROM raw.e WHERE ts >= $partition_start AND ts < $partition_end "
           "UNION ALL SELECT * FROM raw.e WHERE v = 1")
    found = st.window_filters(st.parse_select(sql), ["raw.e"])
    assert not found["raw.e"].precise  # the second branch reads every row
    sql = "WITH x AS (SELECT * FROM raw.e WHERE ts >= $partition_start) SELECT * FROM x WHERE v = 1"
    found = st.window_filters(st.parse_select(sql), ["raw.e"])
    assert found["raw.e"].precise  # the CTE's reference carries the filter; x itself is not an upstream


def test_statements_parse_back() -> None:
    window = st.window_filters(st.parse_select(
        "SELECT * FROM raw.e WHERE ts >= $partition_start AND ts < $partition_end"), ["raw.e"])["raw.e"]
    texts = [st.touched_partitions("lake", "raw", "e", window), st.touched_partitions("lake", "raw", "e", None),
             st.latest_query(), st.table_identity("lake"), st.altered_since("lake"),
             m.rewrite_data_files("lake", "s", "t"), m.merge_adjacent_files("lake", "s", "t"),
             m.expire_snapshots("lake", True), m.cleanup_old_files("lake", False),
             m.delete_orphaned_files("lake", True), m.snapshots("lake"), m.run_records(), m.storage_files(),
             m.list_files("lake", "s", "t")]
    for text in texts:  # real statements, not opaque commands (the lake tests execute them)
        assert isinstance(sqlglot.parse_one(text, read="duckdb"), exp.Select), text
    touched = texts[0]
    assert '"c"."ts" >= "l"."window_start_ts"' in touched and "INTERSECT" in touched
    assert "AND (" not in texts[1].split("ON")[-1]  # no window: any change after the pin
