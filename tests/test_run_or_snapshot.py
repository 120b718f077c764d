"""One rule for "a run id or a snapshot id" (``docs/provenance.md``), on every substrate.

``explain``, ``compile --as-of``, ``query --as-of`` and ``restore --to-snapshot`` read their
argument through :func:`lakewrap.provenance.run_or_snapshot`: digits only (spaces around ignored) are
a snapshot id, a signed number is refused, anything else is a run id. The edge cases run here on a
real lake of each substrate, with one model run once.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import lakewrap
from icehouse import IcebergLakehouse
from icehouse_sql import RestSqlLakehouse
from lakehouse import Lakehouse, at
from lakeproject import cli
from lakewrap.errors import PlanError, StateError
from lakewrap.provenance import RunOrSnapshot, run_or_snapshot

MODELS = {"m/full.sql": "-- materialized table\nSELECT k, CAST(count(*) AS BIGINT) AS n FROM raw.events GROUP BY k\n"}
EVENTS = [{"k": "a"}, {"k": "b"}, {"k": "a"}]


@pytest.mark.parametrize(("text", "want"), [
    ("0", RunOrSnapshot(snapshot=0)), ("12", RunOrSnapshot(snapshot=12)), (" 12 ", RunOrSnapshot(snapshot=12)),
    (12, RunOrSnapshot(snapshot=12)), ("20240104T000000Z-f97057", RunOrSnapshot(run_id="20240104T000000Z-f97057")),
    (" nope\t", RunOrSnapshot(run_id="nope")), ("1e3", RunOrSnapshot(run_id="1e3")),
])
def test_the_rule(text: Any, want: RunOrSnapshot) -> None:
    got = run_or_snapshot(text)
    assert got == want
    assert got.kind == ("snapshot" if want.snapshot is not None else "run")
    assert str(got) == str(want.snapshot if want.snapshot is not None else want.run_id)


@pytest.mark.parametrize("text", ["-5", " -5 ", "+5", -5, "", "   "])
def test_signed_numbers_and_nothing_are_refused(text: Any) -> None:
    with pytest.raises(PlanError, match="is neither a snapshot id nor a run id") as err:
        run_or_snapshot(text)
    assert "lakewrap history" in (err.value.hint or "")


@pytest.fixture(params=["ducklake", "iceberg", "iceberg-sql"])
def lake(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Any, str, int]]:
    """A lake of the substrate with ``m.full`` run once: (house, run id, the snapshot it committed)."""
    house: Any = {"ducklake": Lakehouse, "iceberg": IcebergLakehouse, "iceberg-sql": RestSqlLakehouse}[
        request.param](tmp_path / "proj", MODELS)
    try:
        house.sql(tables={"raw.events": EVENTS}, types={"raw.events": {"k": "VARCHAR"}})
        report = house.run("m.full", now=at(3))
        assert report.ok, [r.error for r in report.results]
        (result,) = report.results
        assert result.snapshot_id is not None
        yield house, report.run_id, result.snapshot_id
    finally:
        if hasattr(house, "close"):
            house.close()


def test_every_command_reads_one_rule(lake: tuple[Any, str, int]) -> None:
    house, run_id, snapshot = lake
    root = house.root
    project = lakewrap.Project(root)
    # a snapshot id, with or without spaces: the materialization that committed it
    (m,) = project.explain(str(snapshot))
    assert (m.run_id, m.target, m.snapshot_id) == (run_id, "m.full", snapshot)
    assert [x.run_id for x in project.explain(f" {snapshot} ")] == [run_id]
    # a run id, with or without spaces
    assert [x.snapshot_id for x in project.explain(f" {run_id} ")] == [snapshot]
    (plan,) = project.compile(["m.full"], as_of=f" {run_id} ")
    assert plan.target == "m.full"
    # 0 is a snapshot id: never looked up as a run
    with pytest.raises(StateError, match="snapshot 0") as zero:
        project.explain("0")
    assert "no materialization of run" not in str(zero.value)
    # an unknown run id
    with pytest.raises(StateError, match="no materialization of run `nope`"):
        project.explain("nope")
    with pytest.raises(StateError, match="no materialization of run `nope`"):
        project.compile(["m.full"], as_of="nope")
    # a negative number: refused as what it is, by every command, before the lake is read
    for call in (lambda: project.explain("-5"), lambda: project.compile(["m.full"], as_of="-5"),
                 lambda: project.query("SELECT 1", as_of="-5"),
                 lambda: project.restore("m.full", to_snapshot=-5)):
        with pytest.raises(PlanError, match="`-5` is neither a snapshot id nor a run id"):
            call()
    code, _, err = cli("compile", "m.full", "--as-of", "-5", "--project", str(root))
    assert code == 2 and "`-5` is neither a snapshot id nor a run id" in err
    # the as-of header names what it was given, as the rule read it
    code, out, err = cli("compile", "m.full", "--as-of", f" {snapshot} ", "--project", str(root), "--no-cache")
    assert code == 0, err
    assert out.startswith(f"-- as of snapshot {snapshot}: ")
    code, out, err = cli("compile", "m.full", "--as-of", run_id, "--project", str(root), "--no-cache")
    assert code == 0, err
    assert out.startswith(f"-- as of run {run_id}: ")


def test_query_as_of_reads_the_same_rule(lake: tuple[Any, str, int]) -> None:
    house, run_id, snapshot = lake
    project = lakewrap.Project(house.root)
    if not isinstance(house, IcebergLakehouse):  # DuckLake reads a past snapshot with AT (VERSION => n)
        with pytest.raises(PlanError, match="--as-of is implemented for Iceberg lakes only"):
            project.query("SELECT count(*) AS n FROM m.full", as_of=run_id)
        return
    by_run = project.query("SELECT count(*) AS n FROM m.full", as_of=f" {run_id} ")
    by_snapshot = project.query("SELECT count(*) AS n FROM m.full", as_of=f" {snapshot} ")
    assert by_run.to_pylist() == by_snapshot.to_pylist() == [{"n": 2}]
    with pytest.raises(PlanError, match="no snapshot or run `nope`"):
        project.query("SELECT 1", as_of="nope")
    with pytest.raises(PlanError, match="no snapshot or run `0`"):
        project.query("SELECT 1", as_of="0")
