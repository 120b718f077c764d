"""The skip rules of ``lakewrap.skips`` one at a time, on one small real DuckLake lake (fast: the
mutation target ``skip-rules``).

``tests/test_skip_rules.py`` proves end to end that re-runs equal one backfill; this file calls
:func:`lakewrap.skips.mark` itself with the scheduler's real steps (``build_steps``), the real
``sql_sha256`` of each model (planned by the substrate's ``plan_step``, as the scheduler does) and
DuckLake's records of the lake (``Substrate.step_records``: the ``Records`` of
:mod:`lakewrap.substrates.ducklake.run`), and checks which step is skipped with which reason: only
partitions whose latest record has the model's SQL (never every partition once one exists), only
the resumed run's own commits on ``resume``, never a step whose dependency runs or whose upstream
changed, and no recorded append partition appended twice unless ``--reappend`` / ``--full-refresh``
(and then still not twice by one run).
"""

from __future__ import annotations

import contextlib
import csv
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from lakeproject import cli
from lakewrap import skips
from lakewrap.compile import compile_plan, load_project
from lakewrap.execute.lake import Lake
from lakewrap.runsteps import RunOptions, Step, build_steps
from lakewrap.substrates.protocol import StepRecords
from lakewrap.substrates.registry import get

DAYS = ["2024-01-01", "2024-01-02", "2024-01-03"]
NOW = "2024-01-06T00:00:00+00:00"
DAILY = "-- materialized incremental\n-- partitioned daily key=day start=2024-01-01\n"
MODELS = {
    "main/events.sql": DAILY + "SELECT id, day, v FROM raw.src\n"
                               "WHERE day >= $partition_start AND day < $partition_end\n",
    "main/daily.sql": DAILY + "SELECT CAST(date_trunc('day', day) AS TIMESTAMP) AS day, count(*) AS n\n"
                              "FROM main.events WHERE day >= $partition_start AND day < $partition_end GROUP BY ALL\n",
    "main/total.sql": "-- materialized table\nSELECT count(*) AS n FROM main.events\n",
    "app/log.sql": DAILY + "-- append\n"
                           "SELECT id, day, v FROM raw.src WHERE day >= $partition_start AND day < $partition_end\n",
    "app/all.sql": "-- materialized incremental\n-- append\nSELECT id, v FROM raw.src\n",
}


def build(root: Path) -> Path:
    """events, daily and log backfilled for the first two days (one run), total and all run once."""
    for rel, text in MODELS.items():
        (root / "models" / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / "models" / rel).write_text(text)
    (root / "seeds" / "raw").mkdir(parents=True)
    with (root / "seeds" / "raw" / "src.csv").open("w", newline="") as f:
        csv.writer(f).writerows([("id", "day", "v"), *((i, f"{DAYS[i % 3]} 0{i}:00:00", i) for i in range(1, 7))])
    for args in (["seed"], ["backfill", "main.events+", "app.log", "app.all", "--start", DAYS[0], "--end", DAYS[1]]):
        code, out, err = cli(*args, "--project", str(root), "--now", NOW) if args[0] != "seed" else cli(
            *args, "--project", str(root))
        assert code == 0, out + err
    return root


def records(root: Path, con: Any) -> StepRecords:
    """What the scheduler hands :func:`lakewrap.skips.mark`: the DuckLake substrate's records, read on ``con``."""
    return get("ducklake").step_records(Lake.open(root), con)


def connected(root: Path) -> Iterator[tuple[Path, Any, str]]:
    con = Lake.open(root).connect()
    try:
        (run_id,) = con.execute("SELECT DISTINCT run_id FROM lakewrap.materializations WHERE target = 'main.events'"
                                ).fetchone()
        yield root, con, run_id
    finally:
        con.close()


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Any, str]]:
    """The built lake (shared: the tests only read it), a connection and the run id that built it."""
    yield from connected(build(tmp_path_factory.mktemp("skips") / "lake"))


@pytest.fixture
def own_lake(tmp_path: Path) -> Iterator[tuple[Path, Any, str]]:
    """A lake of the test's own, which it may change."""
    yield from connected(build(tmp_path / "lake"))


def marked(root: Path, con: Any, targets: list[str], days: list[str], *, run_id: str = "r-now",
           resuming: bool = False, missing_only: bool = False, reappend: bool = False, full_refresh: bool = False,
           sha: dict[str, str | None] | None = None, days_of: dict[str, list[str]] | None = None,
           first: tuple[str, ...] = ()) -> dict[tuple[str, str | None], str]:
    """The steps of ``targets`` over ``days`` (the scheduler's own; over ``days_of[target]`` for
    those it names), marked; (target, partition) -> reason of each step not run again. The models
    ``first`` names come first (they must not read the others)."""
    project = load_project(root, None)
    selected = sorted(project.select(targets), key=lambda spec: spec.target.key not in first)
    now = datetime.fromisoformat(NOW)
    parts = [(days_of or {}).get(spec.target.key, list(days)) if spec.partition is not None else [None]
             for spec in selected]
    steps = build_steps(project, selected, parts, root, run_id, now, RunOptions(full_refresh=full_refresh), 0)

    def sha_of(spec: Any, partition: str | None) -> str | None:
        if sha is not None and spec.target.key in sha:
            return sha[spec.target.key]
        return compile_plan(get("ducklake").plan_step(Lake.open(root), con, spec, partition, now)).sql_sha256

    skips.mark(steps, selected, project, records(root, con), run_id=run_id, resuming=resuming,
               missing_only=missing_only, reappend=reappend, full_refresh=full_refresh, sha_of=sha_of)
    out = {}
    for s in steps:
        assert isinstance(s, Step)
        if s.status == "done":
            out[(s.task.target, s.task.partition)] = s.reason
        else:
            assert s.status == "pending" and s.reason == "", (s.task.target, s.status, s.reason)
    return out


def test_missing_only_skips_exactly_the_recorded_partitions(lake: tuple[Path, Any, str]) -> None:
    root, con, _ = lake
    got = marked(root, con, ["main.events", "main.daily"], DAYS, missing_only=True)
    assert got == {(t, d): skips.MISSING for t in ("main.events", "main.daily") for d in DAYS[:2]}


def test_a_plain_run_skips_nothing_it_may_rewrite(lake: tuple[Path, Any, str]) -> None:
    root, con, run_id = lake
    assert marked(root, con, ["main.events", "main.daily", "main.total"], DAYS) == {}
    assert marked(root, con, ["main.events", "main.total"], DAYS, run_id=run_id) == {}


def test_a_changed_or_uncompilable_model_is_not_skipped(lake: tuple[Path, Any, str]) -> None:
    root, con, _ = lake
    for other in ("0" * 64, "f" * 64):  # another SQL, whichever way its hash sorts
        assert marked(root, con, ["main.events"], DAYS, missing_only=True, sha={"main.events": other}) == {}
    assert marked(root, con, ["main.events"], DAYS, missing_only=True, sha={"main.events": None}) == {}


def test_resume_skips_only_what_the_resumed_run_committed(lake: tuple[Path, Any, str]) -> None:
    root, con, run_id = lake
    got = marked(root, con, ["main.events", "main.total"], DAYS, run_id=run_id, resuming=True)
    assert got == {("main.events", DAYS[0]): skips.RESUMED, ("main.events", DAYS[1]): skips.RESUMED}
    # another run's commits are not the resumed run's, whether its id sorts before or after
    for other in ("20230101T000000Z-000000", "20990101T000000Z-ffffff"):
        assert marked(root, con, ["main.events"], DAYS, run_id=other, resuming=True) == {}, other


def test_a_step_whose_dependency_runs_is_run(lake: tuple[Path, Any, str]) -> None:
    """total (whole table) reads every events partition: events 03 runs, so total runs; daily 01
    depends on events 01 only, which is skipped, so daily 01 is skipped too."""
    root, con, _ = lake
    got = marked(root, con, ["main.events", "main.daily", "main.total"], DAYS, missing_only=True)
    assert ("main.total", None) not in got and ("main.daily", DAYS[0]) in got
    # with only the recorded days, total's dependencies are all skipped: it is skipped as well
    got = marked(root, con, ["main.events", "main.total"], DAYS[:2], missing_only=True)
    assert got == {("main.events", DAYS[0]): skips.MISSING, ("main.events", DAYS[1]): skips.MISSING,
                   ("main.total", None): skips.MISSING}


def test_a_selected_model_without_steps_does_not_stop_the_others_being_looked_at(
        lake: tuple[Path, Any, str]) -> None:
    """A selected model can have no step (no partition of it in the range), or no recorded one: the
    models after it are still looked up."""
    root, con, _ = lake
    for flags in ({"missing_only": True}, {}):
        got = marked(root, con, ["main.events", "main.daily", "app.log"], DAYS, days_of={"main.events": []}, **flags)
        want = {("app.log", d): skips.APPENDED for d in DAYS[:2]}
        if flags:
            want |= {("main.daily", d): skips.MISSING for d in DAYS[:2]}
        assert got == want, flags
    # nor does a model of another strategy before an append model
    assert marked(root, con, ["main.events", "app.log"], DAYS, first=("main.events",)) == {
        ("app.log", d): skips.APPENDED for d in DAYS[:2]}
    # nor does one whose steps are all unrecorded (events of day 03 only)
    got = marked(root, con, ["main.events", "main.daily"], DAYS[:2], days_of={"main.events": DAYS[2:]},
                 missing_only=True)
    assert got == {("main.daily", d): skips.MISSING for d in DAYS[:2]}


def test_a_step_whose_upstream_changed_since_its_pin_is_run(own_lake: tuple[Path, Any, str]) -> None:
    root, con, _ = own_lake
    con.execute("UPDATE raw.src SET v = v + 100 WHERE day < TIMESTAMP '2024-01-02'")
    got = marked(root, con, ["main.events"], DAYS, missing_only=True)
    assert got == {("main.events", DAYS[1]): skips.MISSING}  # day 01's source rows changed: it runs


def test_a_recorded_append_partition_is_not_appended_again(lake: tuple[Path, Any, str]) -> None:
    root, con, run_id = lake
    assert marked(root, con, ["app.log"], DAYS) == {("app.log", d): skips.APPENDED for d in DAYS[:2]}
    # an append partition is never appended twice, whether its dependencies run or --missing-only is given
    assert marked(root, con, ["app.log"], DAYS, missing_only=True, sha={"app.log": "0" * 64}) == {
        ("app.log", d): skips.APPENDED for d in DAYS[:2]}
    for flags in ({"reappend": True}, {"full_refresh": True}):
        assert marked(root, con, ["app.log"], DAYS, **flags) == {}, flags  # type: ignore[arg-type]
        # ... but a resumed run does not append a partition it committed itself a second time
        assert marked(root, con, ["app.log"], DAYS, run_id=run_id, **flags) == {  # type: ignore[arg-type]
            ("app.log", d): skips.APPENDED for d in DAYS[:2]}, flags
    # an append model without time partitions appends on every run
    assert marked(root, con, ["app.all"], DAYS) == {}


def test_the_recorded_append_partitions_are_read_from_the_lake(lake: tuple[Path, Any, str]) -> None:
    root, con, run_id = lake
    assert records(root, con).appended("app.log") == {d: {run_id} for d in DAYS[:2]}
    assert records(root, con).appended("app.all") == {}  # recorded, no partition
    assert records(root, con).appended("app.none") == {}


def test_appended_partitions_count_since_the_last_full_refresh() -> None:
    records = [("a", False, "r1"), (None, False, "r1"), ("b", False, "r1"), ("a", False, "r2"),
               ("c", True, "r3"), ("d", False, "r4"), ("c", False, "r5")]
    assert skips.appended(records[:4]) == {"a": {"r1", "r2"}, "b": {"r1"}}
    assert skips.appended(records) == {"c": {"r3", "r5"}, "d": {"r4"}}
    assert skips.appended([(None, True, "r1")]) == {}


def test_duplicates_decides_from_the_partitions_present() -> None:
    present = {"a": {"r1"}}
    assert skips.duplicates(present, "a", "r2", reappend=False)
    assert not skips.duplicates(present, "a", "r2", reappend=True)
    assert skips.duplicates(present, "a", "r1", reappend=True)
    assert not skips.duplicates(present, "b", "r1", reappend=False)
    assert not skips.duplicates(present, None, "r1", reappend=False)
    assert not skips.duplicates({}, "a", "r1", reappend=False)


def test_a_full_refresh_recorded_in_the_lake_forgets_the_partitions_before_it(tmp_path: Path) -> None:
    """The flag comes from the committing snapshot's commit message (``full_refresh``): after a
    --full-refresh run of day 01, the table holds day 01 of that run only."""
    root = build(tmp_path / "lake")
    code, out, err = cli("run", "app.log", "--partition", DAYS[0], "--full-refresh", "--project", str(root),
                         "--now", NOW)
    assert code == 0, out + err
    with contextlib.closing(Lake.open(root).connect()) as con:
        runs = [r[0] for r in con.execute("SELECT run_id FROM lakewrap.materializations WHERE target = 'app.log' "
                                          "ORDER BY committed_at").fetchall()]
        assert len(runs) == 3 and runs[0] == runs[1] != runs[2]
        assert records(root, con).appended("app.log") == {DAYS[0]: {runs[2]}}
