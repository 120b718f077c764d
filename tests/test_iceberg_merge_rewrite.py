"""A merge into an unpartitioned Iceberg table that matches many keys rewrites the table instead of
binding a key filter of that many values (``CommitOp.rewrite``): same content, same counts, in the
result and in the state recorded in the snapshot summary (whose totals alone would count every row
of the rewritten table as updated).

The expected table is computed here in Python from the two source versions (a dict keyed by id),
not by lakewrap; the statement log shows which commit form ran.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest

from icehouse import IcebergLakehouse
from lakehouse import result_for
from lakewrap.compilers.iceberg import REWRITE_ABOVE
from lakewrap.substrates.iceberg.state import materializations

NOW = datetime(2024, 6, 1, tzinfo=timezone.utc)
MODEL = "-- materialized incremental\n-- unique_key id\nSELECT id, v FROM raw.src\n"
TYPES = {"raw.src": {"id": "INTEGER", "v": "VARCHAR"}}


@pytest.mark.parametrize("how", ["update", "replace"])
@pytest.mark.parametrize("matched", [REWRITE_ABOVE // 2, REWRITE_ABOVE + 500])
def test_many_matched_keys_give_the_same_table_and_counts(tmp_path: Path, matched: int, how: str) -> None:
    model = MODEL.replace("unique_key id", f"unique_key id matched={how}")
    lake = IcebergLakehouse(tmp_path, {"sales/m.sql": model})
    first = [{"id": i, "v": f"a{i}"} for i in range(3000)]
    lake.sql(tables={"raw.src": first}, types=TYPES)
    assert result_for(lake.run(now=NOW), "sales.m").status == "success"
    # the second version: `matched` existing ids (every other one) change, 200 new ids arrive
    changed = [{"id": i, "v": f"b{i}"} for i in range(0, 2 * matched, 2)]
    new = [{"id": 10_000 + i, "v": f"n{i}"} for i in range(200)]
    lake.sql(tables={"raw.src": changed + new}, types=TYPES)
    report = lake.run(now=NOW)
    result = result_for(report, "sales.m")
    assert result.status == "success", result.error
    # matched=replace counts as DuckLake's delete and insert: the matched rows deleted, the result inserted
    counts = (matched, 200, 0) if how == "update" else (0, matched + 200, matched)
    assert (result.rows_updated, result.rows_inserted, result.rows_deleted) == counts
    *_, state = materializations(lake.ice.load("sales.m"))
    assert (state["rows_updated"], state["rows_inserted"], state["rows_deleted"]) == counts
    expected = {r["id"]: r["v"] for r in first} | {r["id"]: r["v"] for r in changed + new}
    table = lake.ice.load("sales.m")
    stored = table.scan().to_arrow().to_pylist()
    assert len(stored) == len(expected)
    assert {r["id"]: r["v"] for r in stored} == expected
    assert table.current_snapshot().snapshot_id == result.snapshot_id
    log = (tmp_path / "target" / "run" / report.run_id / "sales.m.sql").read_text()
    assert ("rewrites the table" in log) == (matched > REWRITE_ABOVE)
