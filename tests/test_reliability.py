"""The reliability battery on real DuckLakes (docs/design.md, "Transaction protocol").

* crash safety: ``kill -9`` at random points of a writer process, then the lake's invariants;
* concurrency on one table: two writers of the same *new* partition (the per-model fence makes one
  of them conflict and retry), four writer processes on disjoint partitions, and the raw DuckLake
  hazard the fence exists for;
* a fault at every statement boundary of every strategy: nothing is written, the result is failed;
* a DuckDB-file catalog held by another process: ``lakewrap run`` fails fast and writes nothing;
* the retry policy: conflicts are retried with backoff, everything else is attempted once.

Nothing here is mocked. The one test double, :class:`FaultInjector`, wraps a real DuckDB connection
and raises instead of running a chosen statement; every other statement runs on DuckDB.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest

from lakewrap import materialize
from lakewrap.compile import load_project
from lakewrap.compilers import lake as sql
from lakewrap.compilers.runlog import metadata_catalog
from lakewrap.errors import ConfigError
from lakewrap.execute.executor import RETRYABLE, Result, RetryPolicy, is_retryable
from lakewrap.execute.lake import Lake
from lakewrap.runner import RunReport, materialize_spec, run_project, write_results
from lakewrap.substrates.ducklake.materialize import Executor

NIGHTLY = os.environ.get("LAKEWRAP_NIGHTLY") == "1"
EVENTS = "main.events"
JAN = datetime(2024, 1, 1)


# --- helpers ---------------------------------------------------------------------------------------


def make_project(root: Path, catalog: str = "duckdb", models: dict[str, str] | None = None) -> Path:
    """A project folder; ``catalog`` other than the embedded DuckDB file goes into lakewrap.toml."""
    root.mkdir(parents=True, exist_ok=True)
    if catalog != "duckdb":
        (root / "lakewrap.toml").write_text(f'[lake]\ncatalog = "{catalog}"\n')
    for rel, text in (models or {}).items():
        path = root / "models" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def day_of(k: int) -> datetime:
    """The k-th daily partition (k = 0: 2024-01-01)."""
    return JAN + timedelta(days=k)


def events(k: int, gen: int, rows: int, writer: int = 0) -> pa.Table:
    """``rows`` rows of partition k, all of generation ``gen``, ids 0..rows-1."""
    return pa.table({
        "day": [day_of(k)] * rows,
        "id": list(range(rows)),
        "gen": [gen] * rows,
        "writer": [writer] * rows,
    })


def write_events(lake: Path | Lake, k: int, gen: int, rows: int, writer: int = 0, run_id: str | None = None) -> Result:
    """Replace partition k (delete+insert) through the public API."""
    return materialize(events(k, gen, rows, writer), target=EVENTS, strategy="delete+insert",
                       partition=f"{day_of(k):%Y-%m-%d}", partition_key="day", lake=lake, run_id=run_id)


def digest(con: Any, table: str) -> str:
    rows = con.execute(f"SELECT * FROM {table} ORDER BY ALL").fetchall()
    return hashlib.sha256(repr(rows).encode()).hexdigest()


def state_rows(con: Any, target: str | None = None) -> list[tuple[Any, ...]]:
    query = ("SELECT run_id, target, partition_value, strategy, rows_inserted, rows_updated, rows_deleted "
             "FROM lakewrap.materializations")
    if target is None:
        return con.execute(query + " ORDER BY ALL").fetchall()  # type: ignore[no-any-return]
    return con.execute(query + " WHERE target = $t ORDER BY ALL", {"t": target}).fetchall()  # type: ignore[no-any-return]


def snapshot_count(con: Any) -> int:
    return int(con.execute("SELECT count(*) FROM lake.snapshots()").fetchone()[0])


def table_exists(con: Any, schema: str, name: str) -> bool:
    return bool(con.execute(sql.table_exists(), {"schema": schema, "name": name}).fetchone()[0])


@contextmanager
def connected(root: Path) -> Iterator[Any]:
    con = Lake.open(root).connect()
    try:
        yield con
    finally:
        con.close()


# --- 1. crash safety: kill -9 at random points --------------------------------------------------------

PARTS = 3
ROWS = (5, 20, 20)  # partition 0 is inlined into the catalog (≤ 10 rows), the others go to Parquet

# One writer process: generation g replaces partition g % PARTS with ROWS[p] rows of generation g,
# delete+insert for odd g and merge for even g, and prints each generation once it has committed.
CRASH_WRITER = """
import sys
from datetime import datetime, timedelta

import duckdb  # noqa: F401  (imported up front: the kill window covers the materializations)
import pyarrow as pa

import lakewrap.compile  # noqa: F401
import lakewrap.substrates.ducklake.materialize  # noqa: F401
from lakewrap import materialize

root, start, count, parts = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rows = [int(n) for n in sys.argv[5].split(",")]
print("ready", flush=True)
for g in range(start + 1, start + 1 + count):
    p = g % parts
    day = datetime(2024, 1, 1) + timedelta(days=p)
    data = pa.table({"day": [day] * rows[p], "id": list(range(rows[p])), "gen": [g] * rows[p]})
    merge = g % 2 == 0
    result = materialize(data, target="main.events", strategy="merge" if merge else "delete+insert", lake=root,
                         partition=f"{day:%Y-%m-%d}", partition_key="day",
                         unique_key=("day", "id") if merge else None, run_id=f"gen-{g:06d}")
    if result.status != "success":
        print(f"generation {g}: {result.status}: {result.error}", file=sys.stderr, flush=True)
        sys.exit(3)
    print("committed", g, flush=True)
"""


def audit_generations(root: Path) -> tuple[int, list[str]]:
    """Open the lake (this replays whatever the killed writer left) and check its invariants.

    Returns the highest committed generation and the violations found: a partition mixing
    generations or holding duplicate/missing ids, data disagreeing with the state rows, a
    generation without exactly one state row and one snapshot, or a partition not at the state
    the committed generations imply (so untouched partitions are unchanged).
    """
    problems: list[str] = []
    with connected(root) as con:
        data: dict[int, list[tuple[int, int]]] = {}
        if table_exists(con, "main", "events"):
            for day, ident, gen in con.execute("SELECT day, id, gen FROM main.events").fetchall():
                data.setdefault((day - JAN).days, []).append((ident, gen))
        runs = [r[0] for r in con.execute("SELECT run_id FROM lakewrap.materializations WHERE target = $t",
                                          {"t": EVENTS}).fetchall()]
        parts_of_state = dict(con.execute("SELECT run_id, partition_value FROM lakewrap.materializations "
                                          "WHERE target = $t", {"t": EVENTS}).fetchall())
        snaps = Counter(r[0] for r in con.execute(
            "SELECT json_extract_string(commit_extra_info, '$.run_id') FROM lake.snapshots() "
            "WHERE json_extract_string(commit_extra_info, '$.target') = $t", {"t": EVENTS}).fetchall())
    committed = sorted(int(r.removeprefix("gen-")) for r in runs)
    found = committed[-1] if committed else 0
    if committed != list(range(1, found + 1)):
        problems.append(f"state rows are not generations 1..{found} exactly once: {committed}")
    if sorted(snaps.elements()) != sorted(runs):
        problems.append(f"snapshots disagree with state rows: {sorted(snaps.items())} vs {sorted(runs)}")
    for run, value in parts_of_state.items():
        g = int(run.removeprefix("gen-"))
        if value != f"{day_of(g % PARTS):%Y-%m-%d}":
            problems.append(f"state row {run} names partition {value}")
    for p in range(PARTS):
        rows = data.get(p, [])
        gens = {g for _, g in rows}
        expected = max((g for g in range(1, found + 1) if g % PARTS == p), default=None)
        if len(gens) > 1:
            problems.append(f"partition {p} mixes generations {sorted(gens)}")
        if rows and sorted(i for i, _ in rows) != list(range(ROWS[p])):
            problems.append(f"partition {p} has ids {sorted(i for i, _ in rows)} (duplicates or missing)")
        actual = next(iter(gens)) if len(gens) == 1 else None
        if actual != expected:
            problems.append(f"partition {p} holds generation {actual}, the state rows say {expected}")
    return found, problems


@dataclass
class CrashFigures:
    kills: int = 0
    reported: int = 0
    landed_unreported: int = 0
    violations: list[str] = field(default_factory=list)
    kill_points: Counter[str] = field(default_factory=Counter)


def kill_point(root: Path, gen: int) -> str:
    """Where the writer of generation ``gen`` was killed, read from its statement log."""
    logs = sorted((root / "target" / "run" / f"gen-{gen:06d}").glob("*.sql"))
    if not logs:
        return "before the first statement (connect, attach)"
    block = logs[-1].read_text().rsplit("-- model ", 1)[-1].splitlines()
    if any(line.startswith("-- outcome:") for line in block):
        return "after the outcome was logged"
    starts = [i for i, line in enumerate(block) if line.startswith("-- [")]
    if not starts:
        return "before the first statement (connect, attach)"
    last = starts[-1]
    text = next((line for line in block[last + 1:] if not line.startswith("--")), "")
    done = any(line.startswith("-- ok") for line in block[last + 1:])
    return ("after " if done else "during ") + " ".join(text.split()[:3]).rstrip(";")


def start_writer(script: Path, root: Path, start: int, count: int, stderr: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(script), str(root), str(start), str(count), str(PARTS), ",".join(map(str, ROWS))],
        stdout=subprocess.PIPE, stderr=stderr, text=True,
    )


@pytest.mark.slow
def test_kill_9_at_random_points_leaves_every_partition_before_or_after(tmp_path: Path) -> None:
    """A writer process is SIGKILLed after a random delay, again and again; after each kill the
    catalog opens, each partition holds exactly one generation (before or after the write in
    flight), state rows and snapshots agree with the data, and the highest committed generation
    is the last one the writer reported or the one after it (landed, but killed before it said so).
    """
    trials = 200 if NIGHTLY else 50
    rng = random.Random(20240101)
    root = make_project(tmp_path / "project")
    script = tmp_path / "writer.py"
    script.write_text(CRASH_WRITER)
    figures = CrashFigures()
    found = 0
    for trial in range(trials):
        with (tmp_path / f"writer-{trial}.err").open("w") as err:
            proc = start_writer(script, root, found, 10_000, err)
            assert proc.stdout is not None
            ready = proc.stdout.readline()
            assert ready.strip() == "ready", (tmp_path / f"writer-{trial}.err").read_text()
            time.sleep(rng.uniform(0, 2.0))  # the first materialization takes ~1.3 s, the next ~1 s
            proc.send_signal(signal.SIGKILL)
            out, _ = proc.communicate(timeout=30)
        assert proc.returncode == -signal.SIGKILL, (
            f"trial {trial}: the writer exited by itself ({proc.returncode}): "
            + (tmp_path / f"writer-{trial}.err").read_text())
        figures.kills += 1
        reported = [int(line.split()[1]) for line in out.splitlines() if line.startswith("committed")]
        figures.reported += len(reported)
        last = reported[-1] if reported else found
        new_found, problems = audit_generations(root)
        figures.violations += [f"trial {trial}: {p}" for p in problems]
        if not last <= new_found <= last + 1:
            figures.violations.append(f"trial {trial}: found generation {new_found}, last reported {last}")
        figures.landed_unreported += new_found == last + 1
        figures.kill_points[kill_point(root, last + 1)] += 1
        found = new_found

    # the lake is still writable: a re-run completes and the invariants still hold
    with (tmp_path / "final.err").open("w") as err:
        proc = start_writer(script, root, found, 4, err)
        out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, (tmp_path / "final.err").read_text()
    final, problems = audit_generations(root)
    figures.violations += [f"final: {p}" for p in problems]
    print(f"\nkill -9: {figures.kills} kills, {figures.reported} reported commits, "
          f"{figures.landed_unreported} landed-but-unreported, {found} generations before the re-run, "
          f"{len(figures.violations)} violations; kill points: {dict(figures.kill_points.most_common())}")
    assert figures.violations == []
    assert final == found + 4
    assert figures.reported + figures.landed_unreported == found  # every generation accounted for


# --- 2. concurrency on one table -------------------------------------------------------------------


def test_raw_ducklake_duplicates_a_new_partition_without_the_fence(tmp_path: Path) -> None:
    """The hazard the fence protects against (duckdb/ducklake#1393 shape), on raw DuckLake 1.5.5:
    two transactions replace the same *new* partition (their DELETEs remove nothing) and both
    commit, so the partition holds both writers' rows. With a fence row updated in both
    transactions, as lakewrap's executor does, the second COMMIT conflicts instead.
    """
    lake = Lake.open(make_project(tmp_path / "project"))
    with lake.shared():
        setup = lake.connect()
        setup.execute("CREATE TABLE t (day DATE, id INTEGER, writer INTEGER)")
        setup.execute("ALTER TABLE t SET PARTITIONED BY (day)")
        setup.execute("CREATE TABLE fence (n INTEGER)")
        setup.execute("INSERT INTO fence VALUES (0)")

        def race(day: str, fenced: bool, rows: int) -> tuple[list[str], int, int]:
            writers = [lake.connect(), lake.connect()]
            for cur in writers:
                cur.execute("BEGIN TRANSACTION")
            for w, cur in enumerate(writers):
                cur.execute("DELETE FROM t WHERE day = $d", {"d": day})
                cur.execute(f"INSERT INTO t SELECT DATE '{day}', i, {w} FROM range({rows}) AS r(i)")
                if fenced:
                    cur.execute("UPDATE fence SET n = n + 1")
            outcome = []
            for cur in writers:
                try:
                    cur.execute("COMMIT")
                    outcome.append("committed")
                except duckdb.Error as exc:
                    outcome.append(str(exc))
                    assert is_retryable(exc), exc
                cur.close()
            n, distinct = setup.execute("SELECT count(*), count(DISTINCT id) FROM t WHERE day = $d",
                                        {"d": day}).fetchone()
            return outcome, n, distinct

        for rows in (5, 50):  # inlined and Parquet
            outcome, n, distinct = race(f"2024-02-0{rows // 50 + 1}", fenced=False, rows=rows)
            assert outcome == ["committed", "committed"]
            assert (n, distinct) == (2 * rows, rows)  # duplicates: the hazard is real

            outcome, n, distinct = race(f"2024-03-0{rows // 50 + 1}", fenced=True, rows=rows)
            assert outcome[0] == "committed" and "Transaction conflict" in outcome[1]
            assert (n, distinct) == (rows, rows)
        setup.close()


def rows_of_round(r: int) -> int:
    return 5 if r % 2 else 20  # inlined into the catalog, or Parquet


def check_same_partition_rounds(con: Any, rounds: int, attempts: list[tuple[int, int]], label: str) -> None:
    """After the rounds: per partition exactly one writer's rows, no duplicates, two state rows."""
    parts = con.execute("SELECT day, count(*), count(DISTINCT id), count(DISTINCT writer) FROM main.events "
                        "GROUP BY day ORDER BY day").fetchall()
    states = Counter(row[2] for row in state_rows(con, EVENTS))
    fence = con.execute('SELECT count(*) FROM lakewrap."fence:main.events"').fetchone()[0]
    retried = sum(1 for a in attempts if max(a) > 1)
    duplicates = sum(n - distinct for _, n, distinct, _ in parts)
    print(f"\n{label}: attempts per round {attempts}; {retried}/{rounds} rounds had a retry, "
          f"{sum(sum(a) - 2 for a in attempts)} retries in all, {duplicates} duplicate rows")
    assert len(parts) == rounds
    assert duplicates == 0
    for day, n, _, writers in parts:
        assert (n, writers) == (rows_of_round((day - JAN).days), 1), day
    assert len(states) == rounds and set(states.values()) == {2}  # both writers committed, in turn
    assert fence == 1
    assert retried > 0  # the writers did overlap, and the fence made the later one retry


@pytest.mark.slow
def test_two_threads_writing_the_same_new_partition_never_duplicate(tmp_path: Path) -> None:
    """Two threads (cursors of one shared DuckDB instance on a DuckDB-file catalog) replace the
    same new partition at the same moment, 20 rounds; the first round also creates the table.
    Both commit, one after the other (the fence makes the later one conflict and retry): no
    duplicate rows, one writer's rows per partition, two state rows per partition."""
    rounds = 20
    lake = Lake.open(make_project(tmp_path / "project"))
    attempts: list[tuple[int, int]] = []
    with lake.shared():
        for r in range(rounds):
            barrier = threading.Barrier(2)
            results: list[Result | None] = [None, None]
            errors: list[BaseException] = []

            def writer(w: int, r: int = r, barrier: threading.Barrier = barrier,
                       results: list[Result | None] = results, errors: list[BaseException] = errors) -> None:
                try:
                    barrier.wait(timeout=60)
                    results[w] = write_events(lake, r, gen=r, rows=rows_of_round(r), writer=w,
                                              run_id=f"round-{r:02d}-writer-{w}")
                except BaseException as exc:  # surfaced by the assertion below
                    errors.append(exc)

            threads = [threading.Thread(target=writer, args=(w,)) for w in (0, 1)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=120)
            assert errors == []
            assert all(res is not None and res.status == "success" for res in results), results
            attempts.append((results[0].attempts, results[1].attempts))  # type: ignore[union-attr]
        con = lake.connect()
        check_same_partition_rounds(con, rounds, attempts, "2 threads, DuckDB-file catalog")
        con.close()


def _same_partition_writer(root: str, worker: int, rounds: int, barrier: Any, queue: Any) -> None:
    """One process of the same-new-partition test: each round, meet the other writer, then write."""
    try:
        out = []
        for r in range(rounds):
            barrier.wait(timeout=300)
            res = write_events(Path(root), r, gen=r, rows=rows_of_round(r), writer=worker,
                               run_id=f"round-{r:02d}-writer-{worker}")
            out.append((r, res.status, res.attempts, res.error))
        queue.put((worker, out))
    except BaseException as exc:
        barrier.abort()
        queue.put((worker, repr(exc)))


@pytest.mark.slow
def test_two_processes_writing_the_same_new_partition_never_duplicate(tmp_path: Path) -> None:
    """The same race between two processes on a SQLite catalog (threads cannot share one: see
    ``test_threads_cannot_share_a_sqlite_catalog``)."""
    rounds = 10
    root = make_project(tmp_path / "project", "sqlite")
    ctx = multiprocessing.get_context("spawn")
    barrier, queue = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_same_partition_writer, args=(str(root), w, rounds, barrier, queue)) for w in (0, 1)]
    for p in procs:
        p.start()
    outputs = dict(queue.get(timeout=900) for _ in procs)
    for p in procs:
        p.join(timeout=60)
    assert all(isinstance(out, list) for out in outputs.values()), "\n".join(
        out for out in outputs.values() if isinstance(out, str))
    assert all(row[1] == "success" for out in outputs.values() for row in out), outputs
    attempts = [(a[2], b[2]) for a, b in zip(outputs[0], outputs[1], strict=True)]
    with connected(root) as con:
        check_same_partition_rounds(con, rounds, attempts, "2 processes, SQLite catalog")


def _open_lake(root: str, barrier: Any, queue: Any) -> None:
    try:
        barrier.wait(timeout=120)
        Lake.open(Path(root)).connect().close()
        queue.put("ok")
    except BaseException as exc:
        queue.put(repr(exc))


@pytest.mark.slow
def test_processes_opening_a_new_sqlite_catalog_at_once(tmp_path: Path) -> None:
    """Four processes open a new SQLite-catalog lake at the same moment: DuckLake's initialization
    and lakewrap's state tables race ("database is locked", a failed COMMIT), and every process
    must still connect (ATTACH and the state DDL retry such errors)."""
    root = make_project(tmp_path / "project", "sqlite")
    ctx = multiprocessing.get_context("spawn")
    barrier, queue = ctx.Barrier(4), ctx.Queue()
    procs = [ctx.Process(target=_open_lake, args=(str(root), barrier, queue)) for _ in range(4)]
    for p in procs:
        p.start()
    outcomes = [queue.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert outcomes == ["ok"] * 4
    with connected(root) as con:
        assert table_exists(con, "lakewrap", "materializations")


def test_threads_cannot_share_a_sqlite_catalog(tmp_path: Path) -> None:
    """DuckLake 1.5.5 wedges a SQLite catalog when cursors of one DuckDB instance commit
    concurrently ("database is locked" on every later statement of the process), so
    ``Lake.shared()`` refuses it with a hint instead."""
    lake = Lake.open(make_project(tmp_path / "project", "sqlite"))
    with pytest.raises(ConfigError, match="threads cannot share a lake whose catalog is SQLite") as err, \
            lake.shared():
        pass  # pragma: no cover
    assert err.value.hint is not None and "one process per writer" in err.value.hint


def test_threads_writing_run_results_at_once(tmp_path: Path) -> None:
    """``materialize`` from threads of one process writes target/run_results.json concurrently:
    each writer has its own temporary file (one per process made the later os.replace fail)."""
    errors: list[BaseException] = []

    def write(i: int) -> None:
        try:
            for _ in range(100):
                write_results(tmp_path, tmp_path / "target" / "run" / f"r{i}", RunReport(run_id=f"r{i}", started_at=""))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert json.loads((tmp_path / "target" / "run_results.json").read_text())["run_id"] in {"r0", "r1", "r2", "r3"}


def _disjoint_writer(root: str, worker: int, ks: list[int], barrier: Any, queue: Any) -> None:
    """One process of the disjoint-partitions test: materialize partitions ``ks`` one by one."""
    try:
        barrier.wait(timeout=120)
        out = []
        for k in ks:
            res = write_events(Path(root), k, gen=k, rows=5 if k % 2 else 20, writer=worker,
                               run_id=f"worker-{worker}-part-{k:02d}")
            out.append((k, res.status, res.attempts, res.error))
        queue.put((worker, out))
    except BaseException:
        import traceback

        queue.put((worker, traceback.format_exc()))


@pytest.mark.slow
def test_four_processes_on_disjoint_partitions_of_one_table(tmp_path: Path) -> None:
    """Four processes (SQLite catalog, multiprocessing spawn), 8 partitions each, all on one new
    table: every write lands (DuckLake conflicts per table, so they retry), nothing is lost or
    duplicated, and the table's digest equals a serial run of the same writes."""
    workers, per_worker = 4, 8
    root = make_project(tmp_path / "parallel", "sqlite")
    ctx = multiprocessing.get_context("spawn")
    barrier, queue = ctx.Barrier(workers), ctx.Queue()
    plan = {w: [w * per_worker + i for i in range(per_worker)] for w in range(workers)}
    procs = [ctx.Process(target=_disjoint_writer, args=(str(root), w, plan[w], barrier, queue))
             for w in range(workers)]
    started = time.perf_counter()
    for p in procs:
        p.start()
    outputs = dict(queue.get(timeout=600) for _ in procs)
    wall = time.perf_counter() - started
    for p in procs:
        p.join(timeout=60)
    assert all(isinstance(out, list) for out in outputs.values()), "\n".join(
        out for out in outputs.values() if isinstance(out, str))
    results = [row for out in outputs.values() for row in out]
    failed = [row for row in results if row[1] != "success"]
    assert failed == []
    attempts = [row[2] for row in results]

    serial = Lake.open(make_project(tmp_path / "serial"))  # same writes, one after the other
    with serial.shared():
        for w in range(workers):
            for k in plan[w]:
                assert write_events(serial, k, gen=k, rows=5 if k % 2 else 20, writer=w,
                                    run_id=f"worker-{w}-part-{k:02d}").status == "success"
        con = serial.connect()
        expected_digest, expected_states = digest(con, EVENTS), state_rows(con)
        con.close()
    with connected(root) as con:
        n, distinct = con.execute("SELECT count(*), count(DISTINCT (day, id)) FROM main.events").fetchone()
        got_digest, got_states = digest(con, EVENTS), state_rows(con)
    print(f"\n{workers} processes x {per_worker} partitions (SQLite catalog): {sum(attempts) - len(attempts)} "
          f"retries, max attempts {max(attempts)}, attempts histogram {sorted(Counter(attempts).items())}, "
          f"{wall:.1f}s wall")
    expected_rows = sum(5 if k % 2 else 20 for k in range(workers * per_worker))
    assert (n, distinct) == (expected_rows, expected_rows)
    assert got_digest == expected_digest
    assert got_states == expected_states  # one state row per partition, same counts


# --- 3. a fault at every statement boundary ------------------------------------------------------------


class InjectedFault(RuntimeError):
    """The error :class:`FaultInjector` raises (not retryable)."""


Rule = Callable[[int, str], BaseException | None]


class FaultInjector:
    """A fault injector around a REAL DuckDB connection (not a mock).

    Every ``execute`` is counted and, unless ``rule(n, statement)`` returns an exception for it,
    forwarded to DuckDB; a returned exception is raised *instead of* running the statement, which
    is a failure between statement n-1 and statement n; a cursor's statements count in the same
    sequence. Everything else (``register``, ``close``, results) is the real connection's.
    """

    def __init__(self, con: Any, rule: Rule | None = None) -> None:
        self._con = con
        self.rule = rule
        self.statements: list[str] = []

    def execute(self, statement: str, *args: Any) -> Any:
        self.statements.append(statement)
        fault = self.rule(len(self.statements), statement) if self.rule else None
        if fault is not None:
            raise fault
        return self._con.execute(statement, *args)

    def cursor(self) -> FaultInjector:
        """A cursor of the real connection whose statements are counted (and faulted) in this sequence."""
        child = FaultInjector(self._con.cursor(), self.rule)
        child.statements = self.statements
        return child

    def __getattr__(self, name: str) -> Any:
        return getattr(self._con, name)


def fail_once(at: int) -> Rule:
    return lambda n, st: InjectedFault(f"injected fault before statement {n}") if n == at else None


def fail_from(at: int) -> Rule:
    """The connection is lost at statement ``at``: it and everything after it fail (ROLLBACK too)."""
    return lambda n, st: InjectedFault(f"connection lost at statement {n}") if n >= at else None


@dataclass
class FaultyLake(Lake):
    """A real :class:`Lake` whose connections go through a :class:`FaultInjector` with ``rule``."""

    rule: Rule | None = None
    injectors: list[FaultInjector] = field(default_factory=list)

    def connect(self) -> Any:
        injector = FaultInjector(super().connect(), self.rule)
        self.injectors.append(injector)
        return injector


@dataclass(frozen=True)
class LakeState:
    digest: str
    states: tuple[tuple[Any, ...], ...]
    snapshots: int
    fences: int


def lake_state(lake: Lake, target: str) -> LakeState:
    con = Lake.connect(lake)  # without a fault injector
    try:
        return LakeState(digest(con, target), tuple(state_rows(con)), snapshot_count(con),
                         int(con.execute(f'SELECT count(*) FROM lakewrap."fence:{target}"').fetchone()[0]))
    finally:
        con.close()


def _di(gen: int, poison: bool = False, outside: bool = False) -> tuple[pa.Table, dict[str, Any]]:
    ks = [1] * 20
    if outside:
        ks[-1] = 2  # a row of the next day: the window guard refuses it
    v: list[Any] = [gen * 100 + i for i in range(20)]
    if poison:
        v = [str(x) for x in v[:-1]] + ["oops"]  # VARCHAR: the INSERT's cast to BIGINT fails on the last row
    data = pa.table({"day": [day_of(k) for k in ks], "id": list(range(20)), "v": v})
    return data, {"strategy": "delete+insert", "partition": "2024-01-02", "partition_key": "day"}


def _mg(gen: int, poison: bool = False, duplicate: bool = False) -> tuple[pa.Table, dict[str, Any]]:
    ids = [*range(10), 100 + gen]
    if duplicate:
        ids[-1] = 0
    v: list[Any] = [gen * 100 + i for i in range(len(ids))]
    if poison:
        v = [str(x) for x in v[:-1]] + ["oops"]
    return pa.table({"id": ids, "v": v}), {"strategy": "merge", "unique_key": "id"}


def _ap(gen: int, poison: bool = False) -> tuple[pa.Table, dict[str, Any]]:
    v: list[Any] = [gen * 100 + i for i in range(3)]
    if poison:
        v = [str(x) for x in v[:-1]] + ["oops"]
    return pa.table({"id": [gen] * 3, "v": v}), {"strategy": "append"}


def _sn(hard_deletes: str) -> Callable[..., tuple[pa.Table, dict[str, Any]]]:
    def data(gen: int, poison: bool = False) -> tuple[pa.Table, dict[str, Any]]:
        ids = [i for i in range(12) if i != gen % 12]  # one key leaves the source each generation
        v: list[Any] = [gen * 100 + i for i in ids]
        if poison:
            v = [str(x) for x in v[:-1]] + ["oops"]
        return pa.table({"id": ids, "v": v}), {"strategy": "snapshot", "unique_key": "id",
                                                 "hard_deletes": hard_deletes}
    return data


SCENARIOS: dict[str, Callable[..., tuple[pa.Table, dict[str, Any]]]] = {
    "delete+insert": _di,
    "merge": _mg,
    "append": _ap,
    "snapshot-invalidate": _sn("invalidate"),
    "snapshot-new_record": _sn("new_record"),
}


def target_of(name: str) -> str:
    return f"main.{name.replace('+', '_').replace('-', '_')}"


def faulty_materialize(lake: FaultyLake, name: str, gen: int, rule: Rule | None, target: str | None = None,
                       **variant: bool) -> Result:
    data, kwargs = SCENARIOS[name](gen, **variant)
    lake.rule = rule
    try:
        return materialize(data, target=target or target_of(name), lake=lake,
                           run_id=f"{name}-gen-{gen}-{rule is not None}-{time.perf_counter_ns()}", **kwargs)
    finally:
        lake.rule = None


def written_to(lake: Lake, target: str) -> tuple[int, int]:
    """(rows in ``target``, lakewrap state rows of ``target``); (0, 0) when it does not exist."""
    con = Lake.connect(lake)
    try:
        schema, name = target.split(".")
        rows = con.execute(f"SELECT count(*) FROM {target}").fetchone()[0] if table_exists(con, schema, name) else 0
        return int(rows), len(state_rows(con, target))
    finally:
        con.close()


@pytest.mark.parametrize("name", [
    # delete+insert runs in the quick suite; the other strategies (~5-18 s each) with the slow ones
    pytest.param(name, marks=() if name == "delete+insert" else pytest.mark.slow) for name in SCENARIOS
])
def test_a_fault_at_every_statement_boundary_writes_nothing(tmp_path: Path, name: str) -> None:
    """A fault before each statement of one materialization, or a connection lost from there on.

    Inside the materialization's transaction (BEGIN, each compiled statement, the fence update,
    the state rows, the commit message, COMMIT) the result is failed after one attempt and the
    table's digest, lakewrap's state rows, the fence and the snapshot count are exactly as before.
    Before it (the read that finds the model's fence; a first run creates the fence inside its own
    transaction) the same holds, unless the executor recovered from the fault (the probe is a read),
    in which case the write landed exactly once. After
    COMMIT (reading back the snapshot id) the transaction has committed: the result must be
    ``success`` (not failed, and not retried) and the write must have landed exactly once.
    The first run of a model (no table, no fence yet) is covered the same way, on fresh targets.
    """
    target = target_of(name)
    lake = FaultyLake.open(make_project(tmp_path / "project"))
    assert isinstance(lake, FaultyLake)
    with lake.shared():
        cold = faulty_materialize(lake, name, 1, None)  # creates the table and the fence
        assert cold.status == "success", cold.error
        cold_statements = lake.injectors[-1].statements
        before = lake_state(lake, target)
        counted = faulty_materialize(lake, name, 2, None)
        assert counted.status == "success", counted.error
        statements = lake.injectors[-1].statements
        assert lake_state(lake, target).snapshots == before.snapshots + 1  # one materialization, one snapshot
        post_commit = len(statements)
        # after COMMIT, one read of the snapshot id (the newest: nothing else commits here), on a cursor
        assert statements[-1] == sql.newest_snapshot(metadata_catalog(lake.alias))
        assert statements[-2] == sql.COMMIT
        begin = max(i for i, st in enumerate(statements, 1) if st == sql.BEGIN)  # the materialization's
        figures: Counter[str] = Counter()
        for offset, mode in ((100, fail_once), (200, fail_from)):
            for n in range(1, len(statements) + 1):
                before = lake_state(lake, target)
                result = faulty_materialize(lake, name, offset + n, mode(n))  # new data every time
                after = lake_state(lake, target)
                where = f"{mode.__name__}({n}) before `{statements[n - 1][:60]}`"
                landed = n == post_commit or (n < begin and result.status == "success")
                if landed:
                    assert result.status == "success" and result.attempts == 1, where
                    assert after.snapshots == before.snapshots + 1, where
                    assert len(after.states) == len(before.states) + 1, where
                    if n == post_commit:
                        assert result.snapshot_id is None and result.warnings, where
                    figures["landed"] += 1
                    continue
                assert result.status == "failed", where
                assert result.attempts == 1, where
                assert "injected fault" in (result.error or "") or "connection lost" in (result.error or ""), where
                assert after == before, where
                figures["failed, nothing written"] += 1
        assert figures["failed, nothing written"] >= 2 * (post_commit - begin)

        # the first run of a model: each position on a fresh target
        for n in range(1, len(cold_statements) + 1):
            fresh = f"{target}_cold_{n}"
            result = faulty_materialize(lake, name, 1, fail_once(n), target=fresh)
            where = f"first run, fail_once({n}) before `{cold_statements[n - 1][:60]}`"
            rows, states = written_to(lake, fresh)
            if result.status == "success":
                assert states == 1 and rows > 0, where
            else:
                assert (rows, states) == (0, 0), where
            figures["first run " + result.status] += 1
        print(f"\n{name}: {len(statements)} statement positions (first run {len(cold_statements)}): {dict(figures)}")

        # a failing later statement of the strategy itself (a CAST of a poisoned row), and guards
        variants: list[dict[str, bool]] = [{"poison": True}]
        if name == "delete+insert":
            variants.append({"outside": True})
        if name == "merge":
            variants.append({"duplicate": True})
        for variant in variants:
            before = lake_state(lake, target)
            result = faulty_materialize(lake, name, 99, None, **variant)
            assert result.status == "failed" and result.attempts == 1, (variant, result)
            assert lake_state(lake, target) == before, variant


def test_a_poisoned_source_row_fails_a_model_after_its_delete(tmp_path: Path) -> None:
    """A model run (``run_project``) whose INSERT fails after its DELETE has run (a NULL into a
    NOT NULL column of the table): the result is failed after one attempt, and the partition, the
    state and the snapshots are as before. (A source whose type drifts, VARCHAR for BIGINT, no
    longer gets this far: ``on_schema_change fail`` refuses it before the DELETE.)"""
    model = ("-- materialized incremental\n-- partitioned daily key=day start=2024-01-01\n"
             "SELECT day, id, v FROM raw.src WHERE day >= $partition_start AND day < $partition_end\n")
    root = make_project(tmp_path / "project", models={"main/events.sql": model})
    with connected(root) as con:
        con.execute("CREATE SCHEMA IF NOT EXISTS raw")
        con.execute("CREATE TABLE raw.src AS SELECT TIMESTAMP '2024-01-02' + to_minutes(i) AS day, i AS id, "
                    "i * 10 AS v FROM range(20) AS r(i)")
    first = run_project(root, ["events"], partition="2024-01-02")
    assert [r.status for r in first.results] == ["success"]
    with connected(root) as con:
        con.execute("CREATE OR REPLACE TABLE raw.src AS SELECT TIMESTAMP '2024-01-02' + to_minutes(i) AS day, "
                    "i AS id, CASE WHEN i = 19 THEN NULL ELSE i * 7 END AS v "
                    "FROM range(20) AS r(i)")
        con.execute("ALTER TABLE main.events ALTER COLUMN v SET NOT NULL")
        before = (digest(con, EVENTS), state_rows(con), snapshot_count(con))
    second = run_project(root, ["events"], partition="2024-01-02")
    (result,) = second.results
    assert result.status == "failed" and result.attempts == 1
    assert result.error_class == "ConstraintException", result.error
    assert result.error is not None and result.error.startswith("models/main/events.sql: ")
    log = (root / "target" / "run" / second.run_id / "main.events__2024-01-02.sql").read_text()
    assert "DELETE FROM" in log and "-- failed after" in log  # the DELETE ran before the INSERT failed
    with connected(root) as con:
        assert (digest(con, EVENTS), state_rows(con), snapshot_count(con)) == before


# --- 4. a held DuckDB-file catalog ---------------------------------------------------------------------

HOLDER = """
import sys, time
from pathlib import Path
from lakewrap.execute.lake import Lake
con = Lake.open(Path(sys.argv[1])).connect()
print("ready", flush=True)
time.sleep(300)
"""


def test_a_held_catalog_fails_fast_and_writes_nothing(tmp_path: Path) -> None:
    root = make_project(tmp_path / "project", models={"main/numbers.sql": "-- materialized table\nSELECT 1 AS x\n"})
    assert run_project(root).ok
    with connected(root) as con:
        before = (digest(con, "main.numbers"), state_rows(con), snapshot_count(con))
    files_before = sorted(p.relative_to(root) for p in (root / ".lakewrap").rglob("*"))
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(root)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        started = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-c", "from lakewrap.cli import main; main(prog_name='lakewrap')",
             "run", "--project", str(root)],
            capture_output=True, text=True, timeout=60,
        )
        elapsed = time.perf_counter() - started
    finally:
        holder.kill()
        holder.communicate(timeout=30)
    print(f"\nheld catalog: exit {proc.returncode} after {elapsed:.2f}s")
    assert proc.returncode == 1, proc.stderr
    assert elapsed < 5
    message = " ".join(proc.stderr.split())
    assert f"the lake catalog .lakewrap/lake.ducklake is held by another process (PID {holder.pid})" in message
    assert str(root) not in proc.stderr
    assert sorted(p.relative_to(root) for p in (root / ".lakewrap").rglob("*")) == files_before
    with connected(root) as con:
        assert (digest(con, "main.numbers"), state_rows(con), snapshot_count(con)) == before


# --- 5. the retry policy -------------------------------------------------------------------------------

EVENTS_MODEL = ("-- materialized incremental\n-- partitioned daily key=day start=2024-01-01\n"
                "SELECT day, id, v FROM raw.src WHERE day >= $partition_start AND day < $partition_end\n")
RETRY_MODELS = {
    "main/events.sql": EVENTS_MODEL,
    "main/unbound.sql": EVENTS_MODEL.replace("SELECT day, id, v", "SELECT day, id, no_such_column"),
    "main/shifted.sql": EVENTS_MODEL.replace("SELECT day,", "SELECT day + INTERVAL 1 DAY AS day,"),
}


@dataclass
class RetryHarness:
    """One lake, one executor with a recording ``sleep``, one fault-injected connection."""

    root: Path
    lake: Lake
    con: FaultInjector
    policy: RetryPolicy = field(default_factory=lambda: RetryPolicy(attempts=5, base=0.01, cap=0.04))
    delays: list[float] = field(default_factory=list)

    def run(self, model: str, rule: Rule | None = None) -> Result:
        project = load_project(self.root, None)
        (spec,) = project.select([model])
        run_id = f"retry-{time.perf_counter_ns()}"
        executor = Executor(self.lake, run_id, self.root / "target" / "run" / run_id, policy=self.policy,
                            rng=random.Random(7), sleep=self.delays.append)
        self.con.rule = rule
        try:
            return materialize_spec(self.lake, self.con, executor, spec, "2024-01-02", datetime.now(timezone.utc), None)
        finally:
            self.con.rule = None

    def state(self) -> tuple[str, list[tuple[Any, ...]], int]:
        return digest(self.con, EVENTS), state_rows(self.con), snapshot_count(self.con)

    def changes_since(self, snapshots: int) -> list[dict[str, list[str]]]:
        rows = self.con.execute("SELECT changes FROM lake.snapshots() ORDER BY snapshot_id OFFSET $n",
                                {"n": snapshots}).fetchall()
        return [r[0] for r in rows]


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[RetryHarness]:
    root = make_project(tmp_path / "project", models=RETRY_MODELS)
    lake = Lake.open(root)
    con = lake.connect()
    con.execute("CREATE SCHEMA IF NOT EXISTS raw")
    con.execute("CREATE TABLE raw.src AS SELECT TIMESTAMP '2024-01-02' + to_minutes(i) AS day, i AS id, "
                "i * 10 AS v FROM range(20) AS r(i)")
    h = RetryHarness(root, lake, FaultInjector(con))
    try:
        assert h.run("events").status == "success"  # the table and its fence exist from here on
        yield h
    finally:
        con.close()


def conflicts_at_commit(times: int, text: str) -> Rule:
    """The materialization's COMMIT (the one after the commit message; not the fence's) fails
    ``times`` times with ``text``, as DuckLake's COMMIT does when a concurrent writer won."""
    previous = [""]
    failed = [0]

    def rule(n: int, statement: str) -> BaseException | None:
        after_message = previous[0].startswith("CALL")
        previous[0] = statement
        if statement == sql.COMMIT and after_message and failed[0] < times:
            failed[0] += 1
            return duckdb.TransactionException(f"TransactionContext Error: Failed to commit: {text}")
        return None

    return rule


@pytest.mark.parametrize("text", RETRYABLE)
def test_a_retryable_error_is_retried_with_backoff_and_succeeds(harness: RetryHarness, text: str) -> None:
    before = harness.state()
    harness.delays.clear()
    result = harness.run("events", conflicts_at_commit(2, text))
    assert result.status == "success" and result.attempts == 3, result.error
    policy = harness.policy
    assert len(harness.delays) == 2
    for attempt, delay in enumerate(harness.delays, 1):
        assert 0 <= delay <= min(policy.cap, policy.base * 2 ** (attempt - 1))
    after = harness.state()
    assert after[0] == before[0]  # same rows (a replace of the same partition)
    assert after[2] == before[2] + 1  # the retried transaction committed once
    assert len(after[1]) == len(before[1]) + 1
    assert [r for r in harness.con.execute(
        "SELECT attempt FROM lakewrap.materializations ORDER BY committed_at DESC LIMIT 1").fetchall()] == [(3,)]


def test_retries_give_up_after_the_budget_and_write_nothing(harness: RetryHarness) -> None:
    before = harness.state()
    harness.delays.clear()
    result = harness.run("events", conflicts_at_commit(99, "Transaction conflict - another transaction won"))
    assert result.status == "failed"
    assert result.attempts == harness.policy.attempts
    assert result.error_class == "RetryableError"
    assert len(harness.delays) == harness.policy.attempts - 1
    caps = [min(harness.policy.cap, harness.policy.base * 2 ** (a - 1)) for a in range(1, harness.policy.attempts)]
    assert all(0 <= d <= c for d, c in zip(harness.delays, caps, strict=True))
    assert harness.state() == before


@pytest.mark.parametrize(
    ("model", "rule", "error_class"),
    [
        ("unbound", None, "BinderException"),
        ("shifted", None, "InvalidInputException"),  # the window guard
        ("events", lambda n, st: duckdb.ConstraintException("Constraint Error: NOT NULL constraint failed: v")
         if st.startswith('INSERT INTO "main"."events"') else None, "ConstraintException"),
        ("events", lambda n, st: duckdb.ConversionException("Conversion Error: Could not convert string 'x'")
         if st.startswith('DELETE FROM "main"."events"') else None, "ConversionException"),
    ],
    ids=["binder", "guard", "not-null", "conversion"],
)
def test_a_non_retryable_error_is_attempted_once(harness: RetryHarness, model: str, rule: Rule | None,
                                                  error_class: str) -> None:
    before = harness.state()
    harness.delays.clear()
    result = harness.run(model, rule)
    assert result.status == "failed"
    assert result.attempts == 1
    assert result.error_class == error_class, result.error
    assert result.error is not None and result.error.startswith(f"models/main/{model}.sql:")
    assert harness.delays == []
    after = harness.state()
    assert after[:2] == before[:2]
    # a model's first run creates its fence inside its own transaction: a failed first run leaves
    # no snapshot at all
    assert after[2] == before[2]


def test_a_real_cast_failure_is_attempted_once(harness: RetryHarness) -> None:
    harness.con.execute("CREATE OR REPLACE TABLE raw.src AS SELECT TIMESTAMP '2024-01-02' + to_minutes(i) AS day, "
                        "i AS id, CASE WHEN i = 19 THEN 'oops' ELSE CAST(i AS VARCHAR) END AS v "
                        "FROM range(20) AS r(i)")
    before = harness.state()
    result = harness.run("events")
    # v drifted from BIGINT to VARCHAR: refused before the write by on_schema_change (default fail),
    # which is not retryable either (before issue 6 this was the INSERT's ConversionException)
    assert (result.status, result.attempts, result.error_class) == ("failed", 1, "SchemaChangeError")
    assert harness.delays == []
    assert harness.state() == before


def test_error_classification() -> None:
    for text in RETRYABLE:
        assert is_retryable(duckdb.TransactionException(f"TransactionContext Error: {text}"))
    assert is_retryable(duckdb.TransactionException(
        'Failed to commit: Failed to commit DuckLake transaction.\nTransaction conflict - attempting to insert into '
        'table with index "1" - but another transaction has deleted from it'))
    for exc in (duckdb.BinderException('Binder Error: Referenced column "x" not found'),
                duckdb.ConversionException("Conversion Error: Could not convert string 'oops' to INT64"),
                duckdb.InvalidInputException("Invalid Input Error: 3 rows have day outside the partition window"),
                duckdb.ConstraintException("Constraint Error: NOT NULL constraint failed"),
                duckdb.CatalogException("Catalog Error: Table with name nope does not exist!")):
        assert not is_retryable(exc), exc


# --- the snapshot id a materialization reports ------------------------------------------------------


class _Direct:
    """The executor's statement log, reduced to running statements (and remembering their text)."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def run(self, con: Any, text: str, params: Any = None, role: str | None = None) -> Any:
        self.texts.append(text)
        return con.execute(text, params)


@pytest.mark.parametrize("other", ["none", "before", "after"])
def test_the_reported_snapshot_is_the_commits_own_when_another_writer_commits_beside_it(
        tmp_path: Path, other: str) -> None:
    """``Executor.committed_snapshot`` takes the newest snapshot only when it is right after the pin;
    with another commit before or after ours it finds ours by its commit_id (a real DuckLake, two
    connections of one DuckDB instance writing different tables)."""
    lake = Lake.open(tmp_path)
    con = lake.connect()
    try:
        con.execute("CREATE TABLE main.ours (x INTEGER)")
        con.execute("CREATE TABLE main.theirs (x INTEGER)")
        theirs = con.cursor()
        theirs.execute("USE lake")

        def their_commit() -> None:
            theirs.execute("BEGIN TRANSACTION")
            theirs.execute("INSERT INTO main.theirs VALUES (1)")
            theirs.execute("COMMIT")

        con.execute("BEGIN TRANSACTION")
        pin = con.execute("SELECT id FROM lake.current_snapshot()").fetchone()[0]
        con.execute("INSERT INTO main.ours VALUES (1)")
        con.execute("CALL lake.set_commit_message('t', 'm', extra_info => $e)", {"e": json.dumps({"commit_id": "c1"})})
        if other == "before":
            their_commit()
        con.execute("COMMIT")
        if other == "after":
            their_commit()
        log = _Direct()
        got = Executor(lake, "run", tmp_path / "log").committed_snapshot(con, log, pin, "c1")
        ours = [r[0] for r in con.execute("SELECT snapshot_id FROM lake.snapshots() WHERE "
                                          "json_extract_string(commit_extra_info, '$.commit_id') = 'c1'").fetchall()]
        assert [got] == ours
        assert got == pin + (2 if other == "before" else 1)
        looked_up = any("SNAPSHOTS" in t.upper() for t in log.texts)
        assert looked_up == (other != "none")  # the history is read only when another commit interleaved
    finally:
        lake.close(con)
