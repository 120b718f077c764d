"""One scheduler for every substrate (issue 19, item 3): the same backfills, ``--workers``,
``--missing-only``, ``--fail-fast``, ``resume`` and Ctrl-C on DuckLake and on Iceberg through both
write paths (pyiceberg commits; DuckDB SQL through the test REST adapter), each with the run log
(``lakewrap_runs``, ``_steps``, ``_attempts``, ``_log``) read back through ``lakewrap query``.

The sources are seed files, so one project text runs on each substrate; expected tables come from
an uninterrupted serial backfill of the same project in a fresh lake of the same substrate.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from helpers import InterruptAfter
from lakeproject import cli
from lakewrap.api import Project
from lakewrap.config import load_config
from lakewrap.runner import run_project
from lakewrap.scheduler import resume
from lakewrap.substrates import resolve
from test_skip_rules import DAYS, NOW, SRC, project

MODELS = {  # test_skip_rules' models (DAYS, NOW and the source rows SRC too) in schema app, the sums cast
    "app/events.sql": "-- materialized incremental\n-- partitioned daily key=day start=2024-01-01\n"
                       "SELECT id, day, v FROM raw.src WHERE day >= $partition_start AND day < $partition_end\n",
    "app/daily.sql": "-- materialized incremental\n-- partitioned daily key=day start=2024-01-01\n"
                      "SELECT CAST(date_trunc('day', day) AS TIMESTAMP) AS day, count(*) AS n,\n"
                      "CAST(sum(v) AS BIGINT) AS total\n"
                      "FROM app.events WHERE day >= $partition_start AND day < $partition_end GROUP BY ALL\n",
    "app/total.sql": "-- materialized table\nSELECT count(*) AS n, CAST(sum(v) AS BIGINT) AS total FROM app.events\n",
}
TABLES = ("app.events", "app.daily", "app.total")
SUBSTRATES = ["ducklake", "iceberg", "iceberg-sql"]

Lakes = Callable[[Path], Path]


@pytest.fixture(params=SUBSTRATES)
def lakes(request: pytest.FixtureRequest) -> Iterator[Lakes]:
    """Makes project folders on one substrate: each seeded, an iceberg-sql one with a REST adapter of its own."""
    substrate = request.param
    with ExitStack() as stack:
        def make(root: Path, models: dict[str, str] = MODELS) -> Path:
            toml = None
            if substrate == "iceberg":
                toml = '[lake]\nsubstrate = "iceberg"\n'
            elif substrate == "iceberg-sql":
                from icehouse_sql import rest_toml, start_rest

                uri, _ = start_rest(root, stack)
                toml = rest_toml(uri)
            project(root, SRC, models, toml)  # test_skip_rules' project: the models, the seed file, seeded
            assert resolve(load_config(root).lake).name == substrate
            return root

        yield make


def tables(root: Path) -> dict[str, list[tuple[Any, ...]]]:
    project = Project(root)
    return {t: [tuple(r.values()) for r in project.query(f"SELECT * FROM {t} ORDER BY ALL").to_pylist()]
            for t in TABLES}


def query(root: Path, text: str) -> list[tuple[Any, ...]]:
    """``lakewrap query TEXT`` (the CLI), as rows."""
    code, out, err = cli("query", text, "--project", str(root), "--format", "json")
    assert code == 0, err
    return [tuple(r.values()) for r in json.loads(out)]


def backfill(root: Path, *args: str, code: int = 0) -> dict[str, Any]:
    got, out, err = cli("backfill", "app.events+", "--project", str(root), "--start", DAYS[0], "--end", DAYS[-1],
                        "--now", NOW, "--format", "json", *args)
    assert got == code, out + err
    return json.loads(out)  # type: ignore[no-any-return]


def committed(root: Path, run_id: str) -> set[tuple[str, str | None]]:
    """The (target, partition) steps run ``run_id`` committed, as the lake's own records have them."""
    project = Project(root)
    return {(target, m["partition"]) for target in TABLES for m in project.history(target) if m["run_id"] == run_id}


def check_runlog(root: Path, doc: dict[str, Any]) -> None:
    """The run log (through `lakewrap query`) says what the report says, and its successes are what the
    lake committed for the run."""
    run_id = doc["run_id"]
    ((status, steps, succeeded, cancelled),) = query(
        root, f"SELECT status, steps, succeeded, cancelled FROM lakewrap_runs WHERE run_id = '{run_id}'")
    counts = doc["counts"]
    assert (status, steps, succeeded, cancelled) == (doc["status"], doc["steps"],
                                                     counts["success"] + counts["unchanged"], counts["cancelled"])
    recorded = {(t, p): s for t, p, s in query(
        root, f"SELECT target, partition_value, status FROM lakewrap_steps WHERE run_id = '{run_id}'")}
    assert {k for k, s in recorded.items() if s == "success"} == committed(root, run_id)
    attempts = query(root, f"SELECT count(*) FROM lakewrap_attempts WHERE run_id = '{run_id}' "
                           "AND outcome = 'committed'")
    assert attempts == [(sum(s == "success" for s in recorded.values()),)]


_REFERENCES: dict[str, dict[str, list[tuple[Any, ...]]]] = {}


def reference(lakes: Lakes, tmp: Path, substrate: str) -> dict[str, list[tuple[Any, ...]]]:
    """The tables of one uninterrupted serial backfill in a fresh lake of ``substrate``."""
    if substrate not in _REFERENCES:
        root = lakes(tmp / "reference")
        doc = backfill(root, "--workers", "1")
        assert doc["status"] == "success" and doc["counts"]["success"] == 9
        _REFERENCES[substrate] = tables(root)
        assert len(_REFERENCES[substrate]["app.events"]) == len(SRC)
        assert _REFERENCES[substrate]["app.total"] == [(len(SRC), sum(r[2] for r in SRC))]
    return _REFERENCES[substrate]


def substrate_of(root: Path) -> str:
    return resolve(load_config(root).lake).name


def test_parallel_workers_equal_a_serial_run(tmp_path: Path, lakes: Lakes) -> None:
    root = lakes(tmp_path / "lake")
    doc = backfill(root, "--workers", "3")
    assert doc["status"] == "success" and doc["counts"]["success"] == 9, doc
    assert tables(root) == reference(lakes, tmp_path, substrate_of(root))
    check_runlog(root, doc)
    assert query(root, f"SELECT workers, command FROM lakewrap_runs WHERE run_id = '{doc['run_id']}'") == [
        (3, "backfill")]


def test_missing_only_runs_nothing_twice_and_fail_fast_stops(tmp_path: Path, lakes: Lakes) -> None:
    root = lakes(tmp_path / "lake", {**MODELS, "app/bad.sql": "-- materialized incremental\n"
                                     "-- partitioned daily key=day start=2024-01-01\n"
                                     "SELECT day FROM raw.no_such_table WHERE day >= $partition_start "
                                     "AND day < $partition_end\n"})
    code, out, err = cli("backfill", "app.events", "--project", str(root), "--start", DAYS[0], "--end", DAYS[1],
                         "--now", NOW)
    assert code == 0, out + err
    doc = backfill(root, "--missing-only")
    assert sorted((s["target"], s["partition"]) for s in doc["not_rerun"]) == [
        ("app.events", DAYS[0]), ("app.events", DAYS[1])]
    assert len(doc["results"]) == 7 and doc["status"] == "success"
    again = backfill(root, "--missing-only")
    assert again["results"] == [] and len(again["not_rerun"]) == 9  # nothing changed: nothing runs
    assert tables(root) == reference(lakes, tmp_path, substrate_of(root))
    check_runlog(root, doc)

    # --batch-size 1: one step per day on every substrate (a DuckLake batch fails its days together)
    code, out, err = cli("backfill", "app.bad", "--project", str(root), "--start", DAYS[0], "--end", DAYS[-1],
                         "--now", NOW, "--fail-fast", "--format", "json", "--batch-size", "1")
    failed = json.loads(out)
    assert code == 1 and [r["status"] for r in failed["results"]] == ["failed", "skipped", "skipped", "skipped"]
    assert all("--fail-fast" in r["error"] for r in failed["results"][1:])
    check_runlog(root, failed)


def test_a_cancelled_run_resumes_to_what_one_backfill_makes(tmp_path: Path, lakes: Lakes) -> None:
    root = lakes(tmp_path / "lake")
    report = run_project(root, ["app.events+"], start=DAYS[0], end=DAYS[-1], now=datetime.fromisoformat(NOW),
                         executor=InterruptAfter(5), command="backfill", batch_size=1)  # 9 steps, as on Iceberg
    assert report.status == "cancelled" and report.resumable
    done = {(r.target, r.partition) for r in report.results if r.status == "success"}
    assert 5 <= len(done) < 9, done
    check_runlog(root, report.to_dict())

    again = resume(root, report.run_id)
    assert again.status == "success", [r.error for r in again.results]
    assert not {(r.target, r.partition) for r in again.results} & done  # nothing committed is run twice
    assert tables(root) == reference(lakes, tmp_path, substrate_of(root))
    assert query(root, "SELECT run_id, status, steps, succeeded, cancelled FROM lakewrap_runs "
                       "WHERE command <> 'seed'") == [(report.run_id, "success", 9, 9, 0)]


SLOW = ("-- materialized incremental\n-- partitioned daily key=d start=2024-01-01\n"
        "SELECT $partition_start::DATE AS d, count(*) AS n\n"
        "FROM range(200000) AS a(i), range(2000) AS b(j) WHERE hash(i * j) % 7 = 0\n")


@pytest.mark.parametrize("lakes", ["iceberg", "iceberg-sql"], indirect=True)
def test_ctrl_c_stops_an_iceberg_backfill_within_seconds(tmp_path: Path, lakes: Lakes) -> None:
    """A real `lakewrap backfill` process of 30 slow partitions, sent SIGINT once its first step
    committed: it exits within seconds (the statement DuckDB computes is interrupted), recorded
    ``cancelled``, and its run log holds exactly the steps the lake committed."""
    root = lakes(tmp_path / "lake", {"app/slow.sql": SLOW})
    runs = root / "target" / "run"
    earlier = set(runs.glob("*/*.sql"))  # the seed's
    proc = subprocess.Popen([sys.executable, "-c", "from lakewrap.cli import main; main(prog_name='lakewrap')",
                             "backfill", "--project", str(root), "--start", "2024-01-01", "--end", "2024-01-30",
                             "--format", "json", "--no-group"],  # each day its own commit: a signal between two
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline:
        logs = [p for p in set(runs.glob("*/*.sql")) - earlier if "-- outcome: success" in p.read_text()]
        if logs:
            break
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()
    time.sleep(0.5)  # inside the next step's statement
    proc.send_signal(signal.SIGINT)
    sent = time.monotonic()
    out, err = proc.communicate(timeout=120)
    stopped = time.monotonic() - sent
    print(f"\n{substrate_of(root)}: stopped {stopped:.2f} s after SIGINT")
    assert stopped < 10, err
    doc = json.loads(out)
    assert proc.returncode == 1 and doc["status"] == "cancelled", err
    statuses = [r["status"] for r in doc["results"]]
    assert statuses.count("success") >= 1 and statuses.count("cancelled") >= 25, statuses
    ((landed,),) = query(root, "SELECT count(*) FROM lakewrap_steps WHERE status = 'success' "
                               f"AND run_id = '{doc['run_id']}'")
    history = [m for m in Project(root).history("app.slow") if m["run_id"] == doc["run_id"]]
    assert landed == len(history) == statuses.count("success")
