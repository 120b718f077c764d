"""Every strategy on a real Iceberg lake (pyiceberg SqlCatalog), against the independent reference.

The scenario tests of ``test_strategies_exec.py`` run unchanged on Iceberg: only the harness
(``icehouse.IcebergLakehouse``/``IcebergChecker``) differs, so the same models, source histories,
expected contents, row counts, warnings and guard refusals are checked, plus every recorded state
through Iceberg time travel and lakewrap's state in the snapshot summaries.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import test_strategies_exec as scenarios
from icehouse import IcebergChecker, IcebergLakehouse

SCENARIOS = [
    "test_delete_insert_daily_with_late_rows",
    "test_merge_unpartitioned_options",
    "test_merge_partitioned_latest_by",
    "test_append_partitioned_and_unpartitioned",
    "test_scd2_timestamp_and_check_with_hard_deletes",
    "test_empty_result_warns_and_strict_refuses",
]


@pytest.mark.parametrize("name", SCENARIOS)
def test_scenario_on_iceberg(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scenarios, "Lakehouse", IcebergLakehouse)
    monkeypatch.setattr(scenarios, "Checker", IcebergChecker)
    getattr(scenarios, name)(tmp_path)
