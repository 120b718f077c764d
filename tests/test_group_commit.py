"""Group commit and ``--atomic`` (issue 20) on real DuckLakes.

Several materializations share one lake transaction; a failed member is rolled back out of its
group and the others committed without it; ``--atomic`` publishes everything or nothing; a
process killed inside a group's transaction leaves every member table all-old or all-new; the
provenance commands still work per materialization. Expected tables come from an independent
plain DuckDB (in memory) running the same SELECTs on the same CSV rows.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import duckdb
import pytest

from lakeproject import cli, open_lake
from lakewrap.provenance import explain, reproduce
from lakewrap.runner import run_project
from lakewrap.scheduler import resume

NOW = "2024-01-06T00:00:00+00:00"
DAYS = ["2024-01-01", "2024-01-02", "2024-01-03", "2024-01-04"]
EVENTS = "day,id,v\n" + "".join(f"2024-01-0{d} 0{i}:00:00,{d * 10 + i},{d * i}\n"
                                 for d in range(1, 5) for i in range(1, 4))
TABLES = {f"m.t{i}": f"SELECT id, v * {i} AS w FROM raw.events" for i in range(1, 6)}
DAILY = ("-- materialized incremental\n-- partitioned daily key=day start=2024-01-01\n"
         "SELECT day, id, v + 1 AS v1 FROM raw.events WHERE day >= $partition_start AND day < $partition_end\n")


def project(root: Path, tables: dict[str, str] | None = None, extra: dict[str, str] | None = None,
            toml: str | None = None) -> Path:
    if toml is not None:
        root.mkdir(parents=True, exist_ok=True)
        (root / "lakewrap.toml").write_text(toml)
    for target, sql in (tables or TABLES).items():
        schema, name = target.split(".")
        path = root / "models" / schema / f"{name}.sql"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"-- materialized table\n{sql}\n")
    for rel, text in (extra or {}).items():
        (root / "models" / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / "models" / rel).write_text(text)
    (root / "seeds" / "raw").mkdir(parents=True, exist_ok=True)
    (root / "seeds" / "raw" / "events.csv").write_text(EVENTS)
    code, _, err = cli("seed", "--project", str(root))
    assert code == 0, err
    return root


def reference(sql: str) -> list[tuple[Any, ...]]:
    """``sql`` on the seed's rows in a plain in-memory DuckDB (no lake, no lakewrap)."""
    con = duckdb.connect()
    con.execute("CREATE SCHEMA raw")
    with tempfile.TemporaryDirectory() as tmp:
        con.execute("CREATE TABLE raw.events AS SELECT * FROM read_csv($p, header = true)",
                    {"p": str(_csv(Path(tmp)))})
    return sorted(tuple(r) for r in con.execute(sql).fetchall())


def _csv(folder: Path) -> Path:
    path = folder / "events.csv"
    path.write_text(EVENTS)
    return path


def rows(root: Path, sql: str, params: dict[str, Any] | None = None) -> list[tuple[Any, ...]]:
    con = open_lake(root)
    try:
        cursor = con.execute(sql, params) if params else con.execute(sql)
        return sorted((tuple(r) for r in cursor.fetchall()), key=repr)
    finally:
        con.close()


def table(root: Path, target: str) -> list[tuple[Any, ...]]:
    return rows(root, f"SELECT * FROM {target}")


def snapshots(root: Path) -> int:
    return int(rows(root, "SELECT max(snapshot_id) FROM lake.snapshots()")[0][0])


def records(root: Path, target: str) -> list[tuple[Any, ...]]:
    return rows(root, "SELECT run_id, partition_value FROM lakewrap.materializations WHERE target = $t",
                {"t": target})


# --- 1. a group, and one failing member ------------------------------------------------------------


def test_independent_models_share_one_snapshot_and_each_keeps_its_records(tmp_path: Path) -> None:
    root = project(tmp_path / "p")
    before = snapshots(root)
    report = run_project(root, now=_now())
    assert report.status == "success"
    assert {r.group for r in report.results} != {None}
    assert len({r.snapshot_id for r in report.results}) == 1  # one commit for the five
    assert snapshots(root) == before + 1
    for target, sql in TABLES.items():
        assert table(root, target) == reference(sql)
        assert records(root, target) == [(report.run_id, None)]
    # the commit message holds one entry per member, each naming its own target
    extra = json.loads(rows(root, "SELECT commit_extra_info FROM lake.snapshots() WHERE snapshot_id = $s",
                            {"s": before + 1})[0][0])
    assert sorted(m["target"] for m in extra["members"]) == sorted(TABLES)
    # explain of the run, and of the shared snapshot, finds each member's own record and pins
    found = explain(root, report.run_id)
    assert sorted(m.target for m in found) == sorted(TABLES)
    assert all(m.snapshot_id == before + 1 and m.pins["snapshot"] == before for m in found)
    assert {m.extra_info["target"] for m in explain(root, before + 1)} == set(TABLES)
    assert reproduce(root, report.run_id).ok
    # the run log's lines say which group each step was committed in
    lines = rows(root, "SELECT target, message FROM __ducklake_metadata_lake.lakewrap_log WHERE run_id = $r",
                 {"r": report.run_id})
    assert {t for t, msg in lines if "in group " in msg} == set(TABLES)
    # --no-group: one snapshot per step, same tables
    again = run_project(root, now=_now(), group=False)
    assert len({r.snapshot_id for r in again.results}) == len(TABLES) and {r.group for r in again.results} == {None}
    for target, sql in TABLES.items():
        assert table(root, target) == reference(sql)


# the process executor runs a group in one worker process, on its own connection (a catalog several
# processes open: SQLite here)
EXECUTORS = [pytest.param("thread", None, id="thread"),
             pytest.param("process", '[lake]\ncatalog = "sqlite"\n', id="process-sqlite")]


@pytest.mark.parametrize(("executor", "toml"), EXECUTORS)
def test_a_failing_member_is_rolled_back_and_the_others_land_once(tmp_path: Path, executor: str,
                                                                  toml: str | None) -> None:
    tables = dict(TABLES)
    tables["m.t3"] = "SELECT id, no_such_column FROM raw.events"
    root = project(tmp_path / "p", tables, toml=toml)
    before = snapshots(root)
    report = run_project(root, now=_now(), executor=executor)
    assert {r.group for r in report.results if r.target != "m.t3"} - {None}  # they committed as a group
    assert report.status == "failed"
    by = {r.target: r for r in report.results}
    assert by["m.t3"].status == "failed" and "no_such_column" in (by["m.t3"].error or "")
    assert by["m.t3"].error_location and by["m.t3"].error_location["line"] == 2  # reported as a step's failure
    ok = [t for t in TABLES if t != "m.t3"]
    assert all(by[t].status == "success" for t in ok)
    assert len({by[t].snapshot_id for t in ok}) == 1  # the four committed again together, once
    assert snapshots(root) == before + 1  # the rolled-back attempt left no snapshot, the failure none
    for t in ok:
        assert table(root, t) == reference(TABLES[t])  # nothing duplicated
        assert records(root, t) == [(report.run_id, None)]
    assert records(root, "m.t3") == []
    assert rows(root, "SELECT count(*) FROM information_schema.tables WHERE table_name = 't3'") == [(0,)]
    steps = rows(root, "SELECT target, status FROM lakewrap_steps WHERE run_id = $r",
                 {"r": report.run_id})
    assert dict(steps)["m.t3"] == "failed" and sum(s == "success" for _, s in steps) == 4
    assert rows(root, "SELECT executor FROM lakewrap_runs WHERE run_id = $r",
                {"r": report.run_id}) == [(executor,)]


# A chain over two levels beside an independent model: m.a -> m.b -> m.c, m.d
CHAIN = {"m.a": "SELECT id, v FROM raw.events", "m.b": "SELECT id, v * 2 AS w FROM m.a",
         "m.c": "SELECT id, w + 1 AS x FROM m.b", "m.d": "SELECT id FROM raw.events WHERE v > 2"}
CHAIN_REF = {"m.a": "SELECT id, v FROM raw.events", "m.b": "SELECT id, v * 2 AS w FROM raw.events",
             "m.c": "SELECT id, v * 2 + 1 AS x FROM raw.events", "m.d": CHAIN["m.d"]}


@pytest.mark.parametrize(("executor", "toml"), EXECUTORS)
def test_downstream_levels_join_the_group_and_read_their_upstreams_in_the_transaction(
        tmp_path: Path, executor: str, toml: str | None) -> None:
    root = project(tmp_path / "p", CHAIN, toml=toml)
    before = snapshots(root)
    report = run_project(root, now=_now(), executor=executor)
    assert report.status == "success"
    by = {r.target: r for r in report.results}
    assert len({r.snapshot_id for r in report.results}) == 1 and snapshots(root) == before + 1  # one commit
    for target, sql in CHAIN_REF.items():
        assert table(root, target) == reference(sql)
    # each member's pins name what it read: m.b read m.a's rows written in the same transaction
    found = {m.target: m for m in explain(root, report.run_id)}
    assert found["m.a"].pins["snapshot"] == before and "group_reads" not in found["m.a"].pins
    assert found["m.b"].pins["group_reads"] == ["m.a"] and found["m.c"].pins["group_reads"] == ["m.b"]
    assert by["m.b"].group == by["m.a"].group
    assert reproduce(root, report.run_id).ok  # m.b and m.c read their upstreams as the transaction wrote them
    # a second run rewrites the same tables in one commit again
    again = run_project(root, now=_now())
    assert again.status == "success" and snapshots(root) == before + 2
    for target, sql in CHAIN_REF.items():
        assert table(root, target) == reference(sql)


def test_a_failing_middle_member_takes_only_its_downstream_out_of_the_group(tmp_path: Path) -> None:
    root = project(tmp_path / "p", CHAIN)
    first = run_project(root, now=_now())
    assert first.status == "success"
    broken = dict(CHAIN, **{"m.b": "SELECT id, CAST('x' || v AS INTEGER) AS w FROM m.a"})  # fails as it runs
    for target, sql in broken.items():
        schema, name = target.split(".")
        (root / "models" / schema / f"{name}.sql").write_text(f"-- materialized table\n{sql}\n")
    before = snapshots(root)
    report = run_project(root, now=_now())
    assert report.status == "failed"
    by = {r.target: r for r in report.results}
    assert by["m.b"].status == "failed" and "Conversion" in (by["m.b"].error or "")
    assert by["m.c"].status == "skipped" and "m.b" in (by["m.c"].error or "")
    assert by["m.a"].status == by["m.d"].status == "success"
    assert by["m.a"].snapshot_id == by["m.d"].snapshot_id  # committed again together, once
    assert snapshots(root) == before + 1
    for target in ("m.a", "m.d"):
        assert table(root, target) == reference(CHAIN_REF[target])
        assert sorted(r for r, _ in records(root, target)) == sorted([first.run_id, report.run_id])  # once each
    for target in ("m.b", "m.c"):  # as the first run left them
        assert table(root, target) == reference(CHAIN_REF[target])
        assert [r for r, _ in records(root, target)] == [first.run_id]


def test_consecutive_partitions_share_a_commit_and_skips_work_per_partition(tmp_path: Path) -> None:
    root = project(tmp_path / "p", {}, {"d/daily.sql": DAILY})
    before = snapshots(root)
    # --batch-size 1: per partition (a range batch of this separable model would be one step)
    report = run_project(root, ["d.daily"], start=DAYS[0], end=DAYS[-1], now=_now(), command="backfill",
                         batch_size=1)
    assert report.status == "success" and len(report.results) == 4
    assert {r.snapshot_id for r in report.results} == {before + 1} and not any(r.batch for r in report.results)
    repro = reproduce(root, report.run_id)  # each partition replayed with its table's group members
    assert repro.ok and sorted(r.partition for r in repro.results if r.status == "MATCH") == DAYS
    assert sorted(p for _, p in records(root, "d.daily")) == DAYS
    assert table(root, "d.daily") == reference("SELECT day, id, v + 1 AS v1 FROM raw.events")
    # --missing-only and --stale see every partition as built; resume has nothing to do
    again = run_project(root, ["d.daily"], start=DAYS[0], end=DAYS[-1], now=_now(), missing_only=True,
                        command="backfill")
    assert again.results == [] and len(again.not_rerun) == 4
    assert run_project(root, ["d.daily"], stale=True, now=_now()).results == []
    # one day's source changes: only that partition is stale, and it is rebuilt alone
    (root / "seeds" / "raw" / "events.csv").write_text(EVENTS.replace("2024-01-02 01:00:00,21,2",
                                                                      "2024-01-02 01:00:00,21,200"))
    assert cli("seed", "--project", str(root))[0] == 0
    stale = run_project(root, ["d.daily"], stale=True, now=_now())
    assert [(r.partition, r.status) for r in stale.results] == [("2024-01-02", "success")]
    con = duckdb.connect()
    con.execute("CREATE TABLE e AS SELECT * FROM read_csv($p, header = true)", {"p": str(_csv(tmp_path))})
    expected = sorted(tuple(r) for r in con.execute(
        "SELECT day, id, CASE WHEN id = 21 THEN 201 ELSE v + 1 END FROM e").fetchall())
    assert table(root, "d.daily") == expected
    # explain of one partition of the grouped backfill finds that partition's own record
    found = [m for m in explain(root, report.run_id) if m.partition == "2024-01-03"]
    assert len(found) == 1 and found[0].params["partition_start"].value.startswith("2024-01-03")


# --- 2. --atomic ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("executor", "toml"), EXECUTORS)
def test_atomic_publishes_nothing_when_the_last_model_fails(tmp_path: Path, executor: str, toml: str | None) -> None:
    chain = {"m.a": "SELECT id, v FROM raw.events", "m.b": "SELECT id, v * 2 AS v2 FROM m.a",
             "m.c": "SELECT id, v2 + 1 AS v3 FROM m.b"}
    root = project(tmp_path / "p", chain, toml=toml)
    first = run_project(root, now=_now(), atomic=True, executor=executor)
    assert first.status == "success" and len({r.snapshot_id for r in first.results}) == 1
    assert table(root, "m.c") == reference("SELECT id, v * 2 + 1 FROM raw.events")
    # every member is planned inside the transaction: the first one's statement log says where BEGIN went
    head = (root / "target" / "run" / first.run_id / "m.a.sql").read_text()
    assert "BEGIN TRANSACTION ran before this member was planned; the transaction reads snapshot" in head
    mat = next(m for m in explain(root, first.run_id) if m.target == "m.c")
    assert mat.pins["group_reads"] == ["m.b"]  # it read m.b as this transaction had written it
    assert {r.status for r in reproduce(root, first.run_id).results} == {"MATCH"}
    before = {t: table(root, t) for t in chain}
    snap = snapshots(root)
    (root / "models" / "m" / "a.sql").write_text("-- materialized table\nSELECT id, v + 100 AS v FROM raw.events\n")
    (root / "models" / "m" / "c.sql").write_text("-- materialized table\nSELECT id, v2 / 'x' AS v3 FROM m.b\n")
    code, out, err = cli("run", "--atomic", "--executor", executor, "--format", "json", "--now", NOW,
                         "--project", str(root))
    assert code == 1, err
    doc = json.loads(out)
    by = {r["target"]: r for r in doc["results"]}
    assert doc["status"] == "failed" and by["m.c"]["status"] == "failed"
    assert by["m.a"]["status"] == by["m.b"]["status"] == "skipped"
    assert "not published: the --atomic run failed at m.c" in by["m.a"]["error"]
    assert snapshots(root) == snap  # no new snapshot
    assert {t: table(root, t) for t in chain} == before  # no table changed
    run = rows(root, "SELECT status, executor FROM lakewrap_runs WHERE run_id = $r", {"r": doc["run_id"]})
    assert run == [("failed", executor)]


# --- 3. kill -9 inside a group commit ----------------------------------------------------------------

CHILD = """
import os, signal, sys, threading, time
from datetime import datetime
from pathlib import Path

from lakewrap.substrates.ducklake.materialize import Executor
from lakewrap.runner import run_project

mode, delay = sys.argv[2], float(sys.argv[3])
commit = Executor.commit

def hooked(self, con, log, pin, commit_id):
    if mode == "open":  # the group's transaction is open, every member written: say so and wait
        print("open", flush=True)
        sys.stdin.readline()
    else:  # killed while the COMMIT runs
        threading.Timer(delay, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
    return commit(self, con, log, pin, commit_id)

Executor.commit = hooked
report = run_project(Path(sys.argv[1]), now=datetime.fromisoformat("2024-01-06T00:00:00+00:00"),
                     run_id=sys.argv[4])
print("done", report.status, flush=True)
"""


def test_kill_9_inside_a_group_commit_leaves_all_old_or_all_new_and_resume_completes(tmp_path: Path) -> None:
    # five independent tables and m.d1, a downstream member reading m.t1 inside the transaction
    down = {"m.d1": "SELECT id, w + 1 AS w FROM m.t1"}
    old = {t: f"SELECT id, v * {i} AS w FROM raw.events" for i, t in enumerate(TABLES, 1)} | down
    new = {t: f"SELECT id, v * {i} + 1000 AS w FROM raw.events" for i, t in enumerate(TABLES, 1)} | down
    expected = {"old": {**old, "m.d1": "SELECT id, v + 1 AS w FROM raw.events"},
                "new": {**new, "m.d1": "SELECT id, v + 1001 AS w FROM raw.events"}}
    root = project(tmp_path / "p", old)
    assert run_project(root, now=_now()).status == "success"
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    project(root, new)  # the models change: the next run rewrites every table
    outcomes = []
    for trial, (mode, delay) in enumerate([("open", 0.0), ("commit", 0.0), ("commit", 0.02)]):
        run_id = f"kill-{trial}"
        proc = subprocess.Popen([sys.executable, str(script), str(root), mode, str(delay), run_id],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        if mode == "open":
            assert proc.stdout.readline().strip() == "open", proc.stderr.read() if proc.stderr else ""
            proc.send_signal(signal.SIGKILL)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == -signal.SIGKILL, (out, err)
        state = []
        for t in old:
            got = table(root, t)
            state.append(next((k for k, sql in expected.items() if got == reference(sql[t])), "mixed"))
        assert len(set(state)) == 1 and state[0] != "mixed", (trial, state)
        landed = records(root, "m.t1").count((run_id, None)) == 1
        assert landed == (state[0] == "new")  # the records are in the same commit as the data
        if not landed:
            done = resume(root, run_id)
            assert done.status == "success", [r.error for r in done.results]
            assert [table(root, t) for t in old] == [reference(expected["new"][t]) for t in old]
            assert all(records(root, t).count((run_id, None)) == 1 for t in old)
            project(root, old)  # back to the old models, for the next trial to rewrite
            assert run_project(root, now=_now()).status == "success"
            project(root, new)
        else:
            project(root, old)
            assert run_project(root, now=_now()).status == "success"
            project(root, new)
        outcomes.append((mode, delay, state[0]))
    assert outcomes[0][2] == "old"  # killed with the transaction open: nothing published
    print(f"\nkill -9 inside a group commit: {outcomes}")


def _now() -> Any:
    from datetime import datetime

    return datetime.fromisoformat(NOW)
