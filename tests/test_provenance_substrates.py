"""The provenance tests every substrate shares, run on each: DuckLake, Iceberg (pyiceberg) and
Iceberg through DuckDB SQL (a REST catalog).

One history per substrate (the models and source versions of ``test_provenance.py``; on Iceberg
without the view and with the sums cast, ``test_provenance_iceberg.py``). What the commands report
is checked against references computed without the code under test, which each substrate's
:class:`Case` reads its own way: DuckLake with plain DuckDB at ``AT (VERSION => n)`` and the whole
lake's digest (``Inspector.state``); Iceberg with pyiceberg ``scan(snapshot_id=...)``, the snapshot
summaries straight from the table metadata and every file of the lake; Iceberg through DuckDB SQL
with a plain pyiceberg scan of the state tables and every table's metadata location. The tests
that belong to one substrate stay in its file.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

import lakewrap
from lakehouse import daily_window, partition
from lakeproject import Inspector, cli
from lakewrap.errors import PlanError, SelectionError, StateError, UnsupportedError
from test_provenance import MODELS, History, ev, plain
from test_provenance_iceberg import IceHistory, _rewrite_summary, _tamper_pins, lake_files, summary, table
from test_provenance_iceberg import rows as ice_rows
from test_provenance_iceberg import state as ice_state
from test_provenance_iceberg_sql import STATE, SqlHistory, load, pointers, state_of
from test_provenance_iceberg_sql import rows as sql_rows

SUBSTRATES = ["ducklake", "iceberg", "iceberg-sql"]


class Case:
    """One substrate's history and the references read without lakewrap."""

    name: str
    strategies: ClassVar[set[str]]

    def __init__(self, history: Any, inspector: Inspector) -> None:
        self.history = history
        self.root: Path = history.house.root
        self.ins = inspector

    def state(self) -> Any:
        """What any write changes (compared before and after a command that must write nothing)."""
        raise NotImplementedError

    def rows(self, target: str, snapshot_id: int | None = None, day: int | None = None) -> list[Any]:
        """The rows of ``target`` (at ``snapshot_id``; in the window of partition ``day``), sorted."""
        raise NotImplementedError

    def count(self, target: str, snapshot_id: int) -> int:
        """The rows of ``target`` at ``snapshot_id``."""
        return len(self.rows(target, snapshot_id))

    def recorded_pin(self, run_id: str, r: Any) -> int | None:
        """The pin the record of ``r`` (a reproduction) names: what the reproduction starts from."""
        raise NotImplementedError


class DuckLakeCase(Case):
    name = "ducklake"
    strategies: ClassVar[set[str]] = {"table", "delete+insert", "merge", "append", "snapshot", "view"}

    def state(self) -> Any:
        return self.ins.state(self.root)

    def rows(self, target: str, snapshot_id: int | None = None, day: int | None = None) -> list[Any]:
        schema, name = target.split(".")
        source = f'"{schema}"."{name}"' + (f" AT (VERSION => {snapshot_id})" if snapshot_id is not None else "")
        if day is None:
            return sorted(plain(self.ins, self.root, f"SELECT * FROM {source}"))
        w = daily_window(partition(day), "ts")
        return sorted(plain(self.ins, self.root, f"SELECT * FROM {source} WHERE ts >= $s AND ts < $e",
                            {"s": w.start, "e": w.end}))

    def count(self, target: str, snapshot_id: int) -> int:
        schema, name = target.split(".")
        (n,), = plain(self.ins, self.root, f'SELECT count(*) FROM "{schema}"."{name}" AT (VERSION => {snapshot_id})')
        return int(n)

    def recorded_pin(self, run_id: str, r: Any) -> int | None:
        (pins,), = plain(self.ins, self.root, "SELECT pins FROM lakewrap.materializations WHERE run_id = $r AND "
                         "target = $t AND coalesce(partition_value, '') = $p",
                         {"r": run_id, "t": r.target, "p": r.partition or ""})
        return json.loads(pins)["snapshot"]  # type: ignore[no-any-return]


class IcebergCase(Case):
    name = "iceberg"
    strategies: ClassVar[set[str]] = {"table", "delete+insert", "merge", "append", "snapshot"}

    def state(self) -> Any:
        return ice_state(self.root)

    def rows(self, target: str, snapshot_id: int | None = None, day: int | None = None) -> list[Any]:
        return ice_rows(self.root, target, snapshot_id, day)

    def recorded_pin(self, run_id: str, r: Any) -> int | None:
        base = summary(self.root, r.target, r.snapshot_id)["lakewrap.base_snapshot"]
        return int(base) if base else None


class IcebergSqlCase(Case):
    name = "iceberg-sql"
    strategies: ClassVar[set[str]] = {"table", "delete+insert", "merge", "append", "snapshot"}

    def state(self) -> Any:
        return pointers(self.history)

    def rows(self, target: str, snapshot_id: int | None = None, day: int | None = None) -> list[Any]:
        return sql_rows(self.history, target, snapshot_id, day)

    def recorded_pin(self, run_id: str, r: Any) -> int | None:
        (row,) = [s for s in state_of(self.history, r.target) if s["run_id"] == run_id
                  and s["partition_value"] == r.partition]
        return row["base_snapshot"]  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def sql_built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SqlHistory]:
    """The DuckDB-SQL history is built once (a REST catalog); the tests leave its records as they found them."""
    h = SqlHistory(tmp_path_factory.mktemp("prov-sql") / "proj")
    h.build()
    yield h
    h.house.close()  # type: ignore[attr-defined]


def _case(request: pytest.FixtureRequest, tmp_path: Path, inspector: Inspector) -> Case:
    if request.param == "iceberg-sql":
        return IcebergSqlCase(request.getfixturevalue("sql_built"), inspector)
    h: Any = History(tmp_path / "proj") if request.param == "ducklake" else IceHistory(tmp_path / "proj")
    h.build()
    return DuckLakeCase(h, inspector) if request.param == "ducklake" else IcebergCase(h, inspector)


@pytest.fixture(params=SUBSTRATES)
def case(request: pytest.FixtureRequest, tmp_path: Path, inspector: Inspector) -> Case:
    return _case(request, tmp_path, inspector)


@pytest.fixture(params=["ducklake", "iceberg"])
def own_case(request: pytest.FixtureRequest, tmp_path: Path, inspector: Inspector) -> Case:
    """A history of its own (the test changes records it does not put back)."""
    return _case(request, tmp_path, inspector)


def test_reproduce_matches_every_strategy_after_a_history(case: Case) -> None:
    root, history = case.root, case.history
    # a later change of the source must not matter: the reproduction reads what each run read
    history.source([ev(9, "z", 999, 0, 3, 3), ev(10, "z", 1, 1, 3, 3)])
    before = case.state()
    seen = set()
    for run_id, committed in history.runs:
        report = lakewrap.Project(root).reproduce(run_id)
        got = {(r.target, r.partition): r for r in report.results}
        assert {k: r.snapshot_id for k, r in got.items()} == {(r.target, r.partition): r.snapshot_id
                                                               for r in committed}, run_id
        for r in report.results:
            seen.add(r.strategy)
            if r.strategy == "view":  # a view holds no rows
                assert r.status == "SKIPPED" and "view" in (r.detail or ""), r
                continue
            assert r.status == "MATCH", r
            assert r.only_in_reproduction == r.only_in_table == 0 and r.digest_reproduced == r.digest_table
            # the table's row count, read here at the committed snapshot without lakewrap
            assert r.rows_in_table == r.rows_reproduced == case.count(r.target, r.snapshot_id)
            assert r.pin == case.recorded_pin(run_id, r)
        assert report.ok
    assert seen == case.strategies
    assert case.state() == before, "reproduce wrote to the lake"


def _pins_altered(case: Case, run_id: str, first_run: str) -> Any:
    """Rewrite the recorded pins of ``run_id``'s ``m.di`` to those ``first_run`` recorded; returns
    the function that puts them back."""
    root = case.root
    if isinstance(case, DuckLakeCase):
        ((old_pin,), (pins,)) = [plain(case.ins, root, "SELECT pins FROM lakewrap.materializations WHERE run_id = $r "
                                       "AND target = 'm.di'", {"r": r})[0] for r in (first_run, run_id)]
        assert old_pin != pins
        update = "UPDATE lakewrap.materializations SET pins = '{}' WHERE run_id = '{}' AND target = 'm.di'"
        case.history.house.sql(update.format(old_pin, run_id))
        return lambda: case.history.house.sql(update.format(pins, run_id))
    if isinstance(case, IcebergCase):
        first = next(r for r in case.history.runs[[x for x, _ in case.history.runs].index(first_run)][1]
                     if r.target == "m.di")
        res = next(r for r in case.history.runs[[x for x, _ in case.history.runs].index(run_id)][1]
                   if r.target == "m.di")
        old_pins = json.loads(summary(root, "m.di", first.snapshot_id)["lakewrap.pins"])
        pins = json.loads(summary(root, "m.di", res.snapshot_id)["lakewrap.pins"])
        assert old_pins != pins
        _tamper_pins(root, "m.di", res.snapshot_id, old_pins)
        return lambda: _tamper_pins(root, "m.di", res.snapshot_id, pins)
    import pyarrow as pa

    h = case.history
    first_row = next(r for r in state_of(h, "m.di") if r["run_id"] == first_run)
    state = load(h, STATE)
    data = state.scan().to_arrow()
    altered = [first_row["pins"] if r == run_id else p
               for r, p in zip(data.column("run_id").to_pylist(), data.column("pins").to_pylist(), strict=True)]
    assert altered != data.column("pins").to_pylist()
    state.overwrite(data.set_column(data.schema.get_field_index("pins"), "pins", pa.array(altered, pa.string())))
    return lambda: load(h, STATE).overwrite(data)


def test_reproduce_mismatch_when_a_pin_is_altered(case: Case) -> None:
    """The recorded pins of one materialization rewritten to an earlier run's (then put back, so a
    shared history is left as it was)."""
    root = case.root
    first_run = case.history.runs[1][0]  # V1, partition 1
    run_id = case.history.runs[3][0]  # V2, partition 1: id 5 appeared in it, id 4 changed
    code, out, _ = cli("reproduce", run_id, "--model", "m.di", "--project", str(root), "--format", "json")
    assert code == 0 and json.loads(out)["results"][0]["status"] == "MATCH"
    put_back = _pins_altered(case, run_id, first_run)
    try:
        code, out, _ = cli("reproduce", run_id, "--model", "m.di", "--project", str(root), "--format", "json")
    finally:
        put_back()
    (r,) = json.loads(out)["results"]
    assert code == 1 and r["status"] == "MISMATCH"
    # at the old pin partition 1 of the source held ids 3, 4 (V1); the table holds 3, 4, 5 (V2), 4 changed;
    # partition 0 (ids 1, 2) is the same in both
    assert (r["only_in_reproduction"], r["only_in_table"]) == (1, 2)
    # the original pins are back: the run reproduces again
    code, out, _ = cli("reproduce", run_id, "--model", "m.di", "--project", str(root), "--format", "json")
    assert code == 0 and json.loads(out)["results"][0]["status"] == "MATCH"


def test_reproduce_mismatch_when_the_recorded_sql_is_tampered(own_case: Case) -> None:
    case = own_case
    root = case.root
    run_id, committed = case.history.runs[2]
    # the recorded SQL holds the model's SELECT as written (`sum(amount)`)
    if isinstance(case, DuckLakeCase):
        where = "sql_sha256 IN (SELECT sql_sha256 FROM lakewrap.materializations WHERE target = 'm.full')"
        case.history.house.sql("UPDATE lakewrap.compiled_sql SET statements = replace(statements, 'sum(amount)', "
                               f"'sum(amount) + 1') WHERE {where}")
        (text,), = plain(case.ins, root, f"SELECT string_agg(statements, '') FROM lakewrap.compiled_sql WHERE {where}")
        assert "sum(amount) + 1" in text, "the tamper changed nothing"
    else:
        from lakewrap.provenance_record import decode, encode

        res = next(r for r in committed if r.target == "m.full")

        def tamper(props: dict[str, str]) -> None:
            payload = decode(props["lakewrap.statements"])
            before = json.dumps(payload)
            for st in payload["statements"]:
                st["sql"] = st["sql"].replace("sum(amount)", "sum(amount) + 1")
            assert json.dumps(payload) != before, "the tamper changed nothing"
            props["lakewrap.statements"] = encode(payload)

        _rewrite_summary(root, "m.full", res.snapshot_id, tamper)
    report = lakewrap.Project(root).reproduce(run_id, model="m.full")
    (r,) = report.results
    assert r.status == "MISMATCH" and r.only_in_reproduction == r.only_in_table == 3  # keys a, b, c
    assert not report.ok


def _restore_records(case: Case, out: Any, run_b: str, snap_b: int, before: Any, snaps_before: set[int]) -> None:
    """What the restore committed, read from the lake's own records without lakewrap."""
    root = case.root
    if isinstance(case, DuckLakeCase):
        snapshots_after, _ = case.state()
        assert len(snapshots_after) == len(before[0]) + 1 and out.result.snapshot_id == snapshots_after[-1]
        (row,) = plain(case.ins, root, "SELECT run_id, strategy, partition_value, pins FROM lakewrap.materializations "
                       "WHERE strategy = 'restore'")
        assert row[:3] == (out.run_id, "restore", partition(1))
        assert json.loads(row[3])["restored_from"] == {"snapshot": snap_b, "run_id": run_b}
        (extra,), = plain(case.ins, root, f"SELECT commit_extra_info FROM lake.snapshots() "
                          f"WHERE snapshot_id = {out.result.snapshot_id}")
        info = json.loads(extra)
        assert (info["strategy"], info["target"], info["pins"]["restored_from"]["run_id"]) == ("restore", "m.di", run_b)
        (fence_run,), = plain(case.ins, root, 'SELECT run_id FROM lakewrap."fence:m.di"')
        assert fence_run == out.run_id
        return
    new = [s for s in (table(root, "m.di") if isinstance(case, IcebergCase) else load(case.history, "m.di")).snapshots()
           if s.snapshot_id not in snaps_before]
    if isinstance(case, IcebergCase):
        pointers_before, _ = before
        after, _ = case.state()
        assert {k: v for k, v in after.items() if k != "m.di"} == {k: v for k, v in pointers_before.items()
                                                                    if k != "m.di"}
        # one atomic commit: pyiceberg's overwrite adds its delete and its append snapshot together
        commits = {s.summary.additional_properties["lakewrap.commit_id"] for s in new}
        assert len(commits) == 1 and out.result.snapshot_id == new[-1].snapshot_id
        props = summary(root, "m.di", out.result.snapshot_id)
        assert (props["lakewrap.run_id"], props["lakewrap.strategy"], props["lakewrap.partition"]) == (
            out.run_id, "restore", partition(1))
        assert json.loads(props["lakewrap.restored_from"]) == {"snapshot": snap_b, "run_id": run_b}
        return
    after = case.state()
    changed = {n for n in after if after[n] != before.get(n)}
    assert changed == {"m.di", STATE}, "only the target and its state table changed"
    assert new and out.result.snapshot_id == new[-1].snapshot_id
    (row,) = [s for s in state_of(case.history, "m.di") if s["run_id"] == out.run_id]
    assert (row["strategy"], row["partition_value"]) == ("restore", partition(1))
    assert json.loads(row["provenance"]) == {"restored_from": {"snapshot": snap_b, "run_id": run_b}}


def test_restore_partition_returns_exact_rows_and_leaves_others(case: Case) -> None:
    root = case.root
    run_b = case.history.runs[1][0]  # partition 1 with V1
    snap_b = next(r.snapshot_id for r in case.history.runs[1][1] if r.target == "m.di")
    expected = case.rows("m.di", snap_b, day=1)
    day0 = case.rows("m.di", day=0)
    assert expected != case.rows("m.di", day=1), "the history must have changed partition 1"
    before = case.state()
    code, out, _ = cli("restore", "m.di", "--partition", partition(1), "--to", run_b, "--dry-run",
                       "--project", str(root))
    assert code == 0 and str(snap_b) in out
    if isinstance(case, IcebergSqlCase):
        assert f'FROM "ice"."m"."di" AT (VERSION => {snap_b})' in out
    elif isinstance(case, DuckLakeCase):
        assert f'FROM "m"."di" AT (VERSION => {snap_b})' in out
    assert case.state() == before, "--dry-run wrote to the lake"
    ice_table = table(root, "m.di") if isinstance(case, IcebergCase) else (
        load(case.history, "m.di") if isinstance(case, IcebergSqlCase) else None)
    snaps_before = {s.snapshot_id for s in ice_table.snapshots()} if ice_table is not None else set()

    out_ = lakewrap.Project(root).restore("m.di", partition=partition(1), to_run=run_b)

    assert case.rows("m.di", day=1) == expected
    assert case.rows("m.di", day=0) == day0
    _restore_records(case, out_, run_b, snap_b, before, snaps_before)
    # the restore is itself a materialization: explain names it, reproduce rebuilds it
    (m,) = lakewrap.Project(root).explain(out_.result.snapshot_id)
    assert (m.run_id, m.strategy, m.partition) == (out_.run_id, "restore", partition(1))
    if not isinstance(case, DuckLakeCase):  # DuckLake keeps it in the record's pins (above)
        assert m.extra_info["restored_from"]["run_id"] == run_b
    (r,) = lakewrap.Project(root).reproduce(out_.run_id).results
    assert r.status == "MATCH", r


def test_restore_whole_table_to_snapshot_and_dry_run(own_case: Case) -> None:
    case = own_case
    root = case.root
    snap = next(r.snapshot_id for r in case.history.runs[2][1] if r.target == "m.scd")
    expected = case.rows("m.scd", snap)
    assert expected != case.rows("m.scd")
    before = case.state()
    code, out, err = cli("restore", "m.scd", "--to-snapshot", str(snap), "--dry-run", "--project", str(root))
    assert code == 0, err
    if isinstance(case, DuckLakeCase):
        assert f'FROM "m"."scd" AT (VERSION => {snap})' in out and 'DELETE FROM "m"."scd";' in out
    else:
        assert "__lakewrap_restore_source" in out and "pyiceberg overwrite m.scd: delete where TRUE" in out
    assert case.state() == before, "--dry-run wrote to the lake"
    code, out, err = cli("restore", "m.scd", "--to-snapshot", str(snap), "--project", str(root))
    assert code == 0, err
    assert case.rows("m.scd") == expected
    if isinstance(case, DuckLakeCase):
        assert len(case.state()[0]) == len(before[0]) + 1
    else:
        assert lake_files(root) != before[1]


def test_explain_snapshot_and_run(own_case: Case) -> None:
    case = own_case
    root = case.root
    run_id, committed = case.history.runs[3]
    res = next(r for r in committed if r.target == "m.di")
    code, out, _ = cli("explain", str(res.snapshot_id), "--project", str(root), "--format", "json")
    # a DuckLake group commit's snapshot holds several materializations: explain lists each
    (m,) = [x for x in json.loads(out) if x["target"] == "m.di"]
    assert code == 0 and (m["run_id"], m["target"], m["partition"], m["strategy"], m["snapshot_id"]) == (
        run_id, "m.di", partition(1), "delete+insert", res.snapshot_id)
    assert m["sql_sha256"] == res.sql_sha256
    w = daily_window(partition(1), "ts")
    assert m["params"]["partition_start"] == w.start.isoformat()
    if isinstance(case, DuckLakeCase):
        (pins, sha), = plain(case.ins, root, "SELECT pins, sql_sha256 FROM lakewrap.materializations "
                             "WHERE run_id = $r AND target = 'm.di'", {"r": run_id})
        assert m["pins"] == json.loads(pins) and m["sql_sha256"] == sha
        (statements,), = plain(case.ins, root, "SELECT statements FROM lakewrap.compiled_sql WHERE sql_sha256 = $s",
                               {"s": sha})
        assert [s["sql"] for s in m["statements"]] == [s["sql"] for s in json.loads(statements)]
    else:
        props = summary(root, "m.di", res.snapshot_id)
        assert m["pins"] == json.loads(props["lakewrap.pins"]) and set(m["pins"]) == {"raw.events"}
        assert m["sql_sha256"] == props["lakewrap.sql_sha256"]
        assert m["extra_info"]["base_snapshot"] == props["lakewrap.base_snapshot"]
        assert m["extra_info"]["operation"] == "delete, append"
        # the statements are those the plan holds: the model compiled now has the same sql_sha256
        (plan,) = lakewrap.Project(root).compile(["m.di"], partition=partition(1))
        assert plan.sql_sha256 == m["sql_sha256"]
        assert [s["sql"] for s in m["statements"]] == [s.sql for s in plan.statements]
        # any snapshot of the commit names it (an overwrite adds a delete and an append snapshot)
        first = table(root, "m.di").metadata.snapshot_by_id(res.snapshot_id).parent_snapshot_id
        assert json.loads(cli("explain", str(first), "--project", str(root), "--format", "json")[1])[0][
            "run_id"] == run_id
    code, text, _ = cli("explain", run_id, "--project", str(root))
    assert code == 0 and text.count("-- run:        " + run_id) == len(committed)
    if isinstance(case, DuckLakeCase):
        assert 'DELETE FROM "m"."di"' in text and "-- base:" not in text
    else:
        assert "pyiceberg overwrite m.di: delete where" in text
        assert f"-- base:       {summary(root, 'm.di', res.snapshot_id)['lakewrap.base_snapshot']}" in text


def _source_snapshot(case: Case) -> int:
    if isinstance(case, DuckLakeCase):
        (sid,), = plain(case.ins, case.root, "SELECT max(snapshot_id) FROM lake.snapshots() WHERE "
                        "json_extract_string(commit_extra_info, '$.run_id') IS NULL")
        return int(sid)
    t = table(case.root, "raw.events") if isinstance(case, IcebergCase) else load(case.history, "raw.events")
    return int(t.current_snapshot().snapshot_id)


def test_bad_inputs_are_clear_and_write_nothing(case: Case, tmp_path: Path) -> None:
    root = case.root
    project = lakewrap.Project(root)
    run_b = case.history.runs[1][0]
    source_snap = _source_snapshot(case)
    before = case.state()
    with pytest.raises(StateError, match="no materialization of run `nope`") as e1:
        project.restore("m.di", partition=partition(1), to_run="nope")
    assert "lakewrap history" in (e1.value.hint or "")
    with pytest.raises(StateError, match="no materialization of run `nope`"):
        project.reproduce("nope")
    with pytest.raises(StateError, match="no materialization of run"):
        project.explain("nope")
    with pytest.raises(StateError, match="the lake has no snapshot 99999"):
        project.explain(99999)
    # a snapshot lakewrap did not commit (the source's), named as such
    owner = "" if isinstance(case, DuckLakeCase) else " of raw.events"
    with pytest.raises(StateError, match=f"snapshot {source_snap}{owner} was not committed by a lakewrap"):
        project.explain(source_snap)
    with pytest.raises(SelectionError, match=r"no model matches `m\.nope`"):
        project.restore("m.nope", partition=partition(1), to_run=run_b)
    with pytest.raises(StateError, match=f"did not materialize partition {partition(0)}") as e2:
        project.restore("m.di", partition=partition(0), to_run=run_b)
    assert partition(1) in (e2.value.hint or "")
    with pytest.raises(StateError, match=f"run {run_b} did not materialize `m.full`"):
        project.reproduce(run_b, model="m.full")
    with pytest.raises(StateError, match=r"did not materialize `m\.full`"):
        project.compile(["m.full"], as_of=run_b)
    with pytest.raises(PlanError, match="name the partition"):
        project.restore("m.di", to_run=run_b)
    with pytest.raises(PlanError, match="exactly one of"):
        project.restore("m.di", partition=partition(1))
    with pytest.raises(PlanError, match="whole table"):
        project.restore("m.full", partition=partition(1), to_run=run_b)
    if isinstance(case, DuckLakeCase):
        with pytest.raises(UnsupportedError, match="view model"):
            project.restore("m.v", to_snapshot=before[0][-1])
    else:  # Iceberg snapshot ids are per table: another table's is refused by name
        with pytest.raises(StateError, match=f"`m.scd` has no snapshot {source_snap} .it is a snapshot of raw.events"):
            project.restore("m.scd", to_snapshot=source_snap)
    code, _, err = cli("restore", "m.di", "--partition", partition(1), "--to", "nope", "--project", str(root))
    assert code == 1 and "no materialization of run `nope`" in err
    assert case.state() == before

    # a project of this substrate that never ran: a clear error, and no lake created
    never = tmp_path / "never"
    (never / "models" / "m").mkdir(parents=True)
    (never / "models" / "m" / "full.sql").write_text(MODELS["m/full.sql"])
    (never / "lakewrap.toml").write_text(f'[lake]\nsubstrate = "{case.name.split("-")[0]}"\n')
    for call in (lambda p: p.explain("1"), lambda p: p.reproduce("r"),
                 lambda p: p.restore("m.full", to_snapshot=1), lambda p: p.compile(["m.full"], as_of="r")):
        with pytest.raises(StateError, match="does not exist") as e3:
            call(lakewrap.Project(never))
        assert "lakewrap run" in (e3.value.hint or "")
    assert not (never / ".lakewrap").exists() and not (never / "warehouse").exists()
