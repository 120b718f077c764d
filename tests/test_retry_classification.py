"""Which errors lakewrap retries as a whole transaction: each retryable marker is needed by a case.

The classification is a list of error texts (``lakewrap.execute.retry.RETRYABLE``); a marker dropped
from it silently turns a busy catalog or a lost race into a failed run. So every marker has a case
below whose text holds that marker and no other, and the errors that can be raised for real on this
machine are raised for real: a DuckLake commit conflict between two transactions, and a DuckLake on
a SQLite catalog that another process holds locked (``database is locked``, which DuckLake reports
with "Failed to probe DuckLake metadata" when attaching and "Failed to query most recent snapshot"
when reading). The PostgreSQL and Iceberg REST texts are the servers' own wording (the REST ones
are raised for real in ``test_iceberg_sql.py``).

Measured here: the real read error of a locked SQLite catalog holds both "Failed to query most
recent snapshot" and "database is locked", so for it either marker alone suffices; the case of the
first marker alone is DuckLake's prefix with another SQLite busy text (``SQLITE_BUSY``), the form
the marker exists for (a snapshot read refused by a busy catalog, whatever SQLite's wording).
"""

from __future__ import annotations

import random
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb
import pytest

from lakewrap.errors import TransientExecutionError
from lakewrap.execute import sandbox
from lakewrap.execute.extensions import connect
from lakewrap.execute.lake import Lake
from lakewrap.execute.retry import BUSY, RETRYABLE, RetryPolicy, is_retryable, retry_reason, retrying

ROOT = Path(__file__).resolve().parent.parent

# one text per marker, each holding that marker and no other (checked below)
ONLY: dict[str, str] = {
    "Transaction conflict": 'TransactionContext Error: Transaction conflict - attempting to delete from table with '
                            'index "1" - but another transaction has deleted from it',
    "Failed to commit DuckLake transaction": "TransactionContext Error: Failed to commit: Failed to commit DuckLake "
                                             "transaction.",
    "database is locked": 'IO Error: Failed to probe DuckLake metadata: Failed to prepare query "SELECT type FROM '
                          "sqlite_master WHERE lower(name)=lower('ducklake_metadata');\": database is locked",
    "Conflict_409": "HTTP Error: Conflict_409: Requirement failed: branch main has changed",
    "CommitFailedException": "CommitFailedException: Requirement failed: branch main has changed",
    "ducklake_snapshot_pkey": 'duplicate key value violates unique constraint "ducklake_snapshot_pkey"',
    "could not serialize access": "ERROR: could not serialize access due to concurrent update",
    "Failed to query most recent snapshot": "IO Error: Failed to query most recent snapshot for DuckLake: "
                                            "SQLITE_BUSY",
}

NOT_RETRYABLE = (
    duckdb.BinderException('Binder Error: Referenced column "x" not found in FROM clause!'),
    duckdb.CatalogException("Catalog Error: Table with name nope does not exist!"),
    duckdb.ConstraintException("Constraint Error: NOT NULL constraint failed: t.a"),
    duckdb.ConversionException("Conversion Error: Could not convert string 'oops' to INT64"),
    duckdb.InvalidInputException("Invalid Input Error: 3 rows have day outside the partition window"),
    duckdb.IOException('IO Error: Cannot open file "nope.parquet": No such file or directory'),
    # near misses: a different lock, and a commit of DuckDB's own that failed for another reason
    duckdb.IOException("IO Error: Could not set lock on file \"x.duckdb\": Conflicting lock is held"),
    duckdb.TransactionException("TransactionContext Error: cannot commit - no transaction is active"),
    ValueError("conflict"),
)


def test_every_marker_has_a_case_holding_it_alone() -> None:
    assert set(ONLY) == set(RETRYABLE), "a marker was added or dropped without its case"
    for marker, text in ONLY.items():
        assert [m for m in ONLY if m in text] == [marker], text


@pytest.mark.parametrize("marker", sorted(ONLY))
def test_each_marker_alone_is_retryable(marker: str) -> None:
    assert is_retryable(duckdb.TransactionException(ONLY[marker]))
    assert is_retryable(RuntimeError(ONLY[marker]))  # by text, whatever the class


@pytest.mark.parametrize("marker", sorted(ONLY))
def test_each_marker_alone_names_what_happened(marker: str) -> None:
    """The note of a retried attempt says a busy catalog for SQLite's lock, a conflict for the rest."""
    busy = marker in ("database is locked", "Failed to query most recent snapshot")
    assert (marker in BUSY) == busy
    assert retry_reason(RuntimeError(ONLY[marker])) == ("found the catalog busy" if busy else "conflicted")


@pytest.mark.parametrize("exc", NOT_RETRYABLE, ids=lambda e: type(e).__name__ + ":" + str(e)[:30])
def test_other_errors_are_not_retryable(exc: Exception) -> None:
    assert not is_retryable(exc)


def test_a_transient_execution_error_is_retryable_by_class() -> None:
    assert is_retryable(TransientExecutionError("the commit outcome was looked up: it did not land"))


def test_a_real_ducklake_commit_conflict_is_retryable(tmp_path: Path) -> None:
    con = connect(("ducklake",))
    try:
        con.execute(f"ATTACH 'ducklake:{tmp_path}/cat.ducklake' AS lake (DATA_PATH '{tmp_path}/data')")
        con.execute("CREATE TABLE lake.t AS SELECT 1 AS a")
        a, b = con.cursor(), con.cursor()
        a.execute("BEGIN")
        b.execute("BEGIN")
        a.execute("DELETE FROM lake.t")
        b.execute("DELETE FROM lake.t")
        a.execute("COMMIT")
        with pytest.raises(duckdb.Error) as caught:
            b.execute("COMMIT")
    finally:
        con.close()
    assert "Transaction conflict" in str(caught.value)
    assert is_retryable(caught.value) and retry_reason(caught.value) == "conflicted"


@contextmanager
def held_locked(catalog: Path) -> Iterator[subprocess.Popen[str]]:
    """``catalog`` (a SQLite file) held locked (``BEGIN EXCLUSIVE``) by another process until the block
    ends or the holder's stdin is closed.

    Another process, not this one: SQLite's file locks are per process, so a lock taken here would
    not block DuckDB's SQLite in the same process."""
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sqlite3, sys\n"
         f"s = sqlite3.connect({str(catalog)!r}, isolation_level=None)\n"
         "s.execute('BEGIN EXCLUSIVE')\nprint('locked', flush=True)\nsys.stdin.read()\n"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        yield holder
    finally:
        assert holder.stdin is not None
        if not holder.stdin.closed:
            holder.stdin.close()
        holder.wait(timeout=30)


@pytest.fixture
def locked_sqlite_catalog(tmp_path: Path) -> Iterator[str]:
    """A DuckLake on a SQLite catalog, held locked by another process (``held_locked``)."""
    con = connect(("ducklake", "sqlite_scanner"))
    attach = f"ATTACH 'ducklake:sqlite:{tmp_path}/cat.sqlite' AS lake (DATA_PATH '{tmp_path}/data')"
    try:
        con.execute(attach)
        con.execute("CREATE TABLE lake.t AS SELECT 1 AS a")
    finally:
        con.close()
    with held_locked(tmp_path / "cat.sqlite"):
        yield attach


def _error_of(con: Any, statement: str) -> duckdb.Error:
    with pytest.raises(duckdb.Error) as caught:
        con.execute(statement)
    return caught.value


def test_a_locked_sqlite_catalog_is_retryable_when_attaching_and_reading(tmp_path: Path,
                                                                          locked_sqlite_catalog: str) -> None:
    fresh = connect(("ducklake", "sqlite_scanner"))
    try:
        probe = _error_of(fresh, locked_sqlite_catalog)
    finally:
        fresh.close()
    # attaching says only "database is locked" of the markers: that marker alone must classify it
    assert [m for m in RETRYABLE if m in str(probe)] == ["database is locked"], probe
    assert is_retryable(probe) and retry_reason(probe) == "found the catalog busy"


def test_a_sqlite_catalog_locked_after_attaching_is_retryable(tmp_path: Path) -> None:
    con = connect(("ducklake", "sqlite_scanner"))
    try:
        con.execute(f"ATTACH 'ducklake:sqlite:{tmp_path}/cat.sqlite' AS lake (DATA_PATH '{tmp_path}/data')")
        con.execute("CREATE TABLE lake.t AS SELECT 1 AS a")
        with held_locked(tmp_path / "cat.sqlite"):
            read = _error_of(con, "SELECT * FROM lake.t")
        assert "Failed to query most recent snapshot" in str(read) and is_retryable(read), read
        assert retry_reason(read) == "found the catalog busy"
        assert con.execute("SELECT * FROM lake.t").fetchall() == [(1,)]  # and a retry once the lock is gone works
    finally:
        con.close()


def test_connecting_waits_out_a_catalog_locked_while_the_sandbox_is_set(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The sandbox's SETs read a DuckLake catalog too: a commit of another process that holds a SQLite
    catalog past SQLite's 5 s busy wait made ``Lake.connect()`` fail (seen in CI with four writers).
    Here the lock is taken for real, by another process, just before the sandbox is set, and held
    6 s: connecting waits it out (the wrapper only times the lock; the sandbox code runs unchanged)."""
    (tmp_path / "lakewrap.toml").write_text('[lake]\ncatalog = "sqlite"\n')
    lake = Lake.open(tmp_path)
    lake.connect().close()  # the catalog and lakewrap's state tables exist
    real_lock, seen = sandbox.lock, []

    def lock_after_another_process_locks_the_catalog(con: Any, *args: Any) -> None:
        if not seen:
            with held_locked(lake.config.catalog_path(tmp_path)) as holder:
                assert holder.stdin is not None
                threading.Timer(6.0, holder.stdin.close).start()
                started = time.monotonic()
                try:
                    real_lock(con, *args)
                except duckdb.Error as exc:
                    seen.append((time.monotonic() - started, exc))
                    raise
        real_lock(con, *args)

    monkeypatch.setattr(sandbox, "lock", lock_after_another_process_locks_the_catalog)
    con = lake.connect()
    try:
        assert len(seen) == 1 and "database is locked" in str(seen[0][1]), seen  # the lock was met for real
        with pytest.raises(duckdb.Error, match="the configuration has been locked"):
            con.execute("SET enable_external_access = true")  # and the sandbox is set and locked
        assert con.execute("SELECT count(*) FROM lakewrap.materializations").fetchone() == (0,)
    finally:
        con.close()


def test_retrying_reruns_only_retryable_errors_with_capped_backoff() -> None:
    policy = RetryPolicy(attempts=5, base=0.1, cap=0.25)
    calls: list[int] = []
    delays: list[float] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 4:
            raise duckdb.TransactionException(ONLY["Transaction conflict"])
        return "done"

    assert retrying(flaky, policy, rng=random.Random(1), sleep=delays.append) == "done"
    assert len(calls) == 4 and len(delays) == 3
    assert all(0 <= d <= min(policy.cap, policy.base * 2 ** i) for i, d in enumerate(delays))

    calls.clear()
    delays.clear()

    def broken() -> str:
        calls.append(1)
        raise duckdb.BinderException("Binder Error: nope")

    with pytest.raises(duckdb.BinderException):
        retrying(broken, policy, rng=random.Random(1), sleep=delays.append)
    assert (len(calls), delays) == (1, [])

    calls.clear()

    def always() -> str:
        calls.append(1)
        raise duckdb.TransactionException(ONLY["database is locked"])

    with pytest.raises(duckdb.TransactionException):
        retrying(always, policy, rng=random.Random(1), sleep=delays.append)
    assert len(calls) == policy.attempts and len(delays) == policy.attempts - 1


def test_backoff_grows_then_stays_under_the_cap() -> None:
    policy = RetryPolicy(attempts=20, base=0.05, cap=3.0)
    rng = random.Random(7)
    for attempt in range(1, 20):
        bound = min(3.0, 0.05 * 2 ** (attempt - 1))
        samples = [policy.delay(attempt, rng) for _ in range(200)]
        assert all(0 <= s <= bound for s in samples)
        assert max(samples) > bound * 0.8  # jitter spans the whole range, not a fixed fraction of it


def test_the_default_policy_is_the_documented_one() -> None:
    """docs/running.md and docs/configuration.md promise 20 attempts, backoff from 50 ms capped at 3 s:
    a change of the defaults must change those pages too."""
    policy = RetryPolicy()
    assert (policy.attempts, policy.base, policy.cap) == (20, 0.05, 3.0)
    text = (ROOT / "docs" / "running.md").read_text()
    assert "capped (3 s)" in text and "from 50 ms" in text
    assert "(so 20 attempts)" in (ROOT / "docs" / "configuration.md").read_text()


def test_a_policy_cannot_be_changed_in_place() -> None:
    """``retrying``'s default policy is one shared object: it must be immutable."""
    import dataclasses

    with pytest.raises(dataclasses.FrozenInstanceError):
        RetryPolicy().attempts = 1  # type: ignore[misc]


def test_the_backoff_draws_from_the_given_rng_or_a_fresh_one() -> None:
    policy = RetryPolicy(attempts=4, base=0.1, cap=1.0)

    def failing_twice() -> Any:
        calls: list[int] = []

        def fn() -> str:
            calls.append(1)
            if len(calls) <= 2:
                raise duckdb.TransactionException(ONLY["Transaction conflict"])
            return "done"

        return fn

    delays: list[float] = []
    assert retrying(failing_twice(), policy, rng=random.Random(3), sleep=delays.append) == "done"
    reference = random.Random(3)
    assert delays == [policy.delay(1, reference), policy.delay(2, reference)]  # the seeded rng's draws
    delays.clear()
    assert retrying(failing_twice(), policy, sleep=delays.append) == "done"  # no rng: a fresh one
    assert len(delays) == 2 and all(0 <= d <= 0.2 for d in delays)
