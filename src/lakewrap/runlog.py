"""The run log: runs, steps, attempts and log lines, as four tables in a run-log database.

Written only by the process that coordinates a run, in small transactions of their own, never
inside a materialization's transaction. Where the tables live is the substrate's choice
(:meth:`lakewrap.substrates.protocol.Substrate.runlog` returns a :class:`Store`):

* DuckLake, DuckDB-file and PostgreSQL catalogs (:class:`AttachedStore`): through DuckDB's
  attachment of the catalog database (``__ducklake_metadata_<alias>``) on the coordinator's
  connection. DuckDB refuses a transaction that writes both that database and the lake, so a
  run-log write cannot slip into a materialization's commit, and no DuckLake snapshot is created
  for it.
* DuckLake, SQLite catalogs (:class:`SQLiteStore`): Python's ``sqlite3`` on a SQLite file beside
  the catalog (``lake.sqlite`` → ``lake.sqlite-runlog``), with a busy timeout. Writing the catalog
  file itself is no option: a DuckDB attachment of it in the same process wedges (DuckLake 1.5.5),
  and two SQLite libraries in one process (DuckDB's and Python's) do not see each other's locks on
  one file.
* Iceberg (:class:`DuckDBFileStore`): a DuckDB database file of its own (``[lake] runlog``, by
  default ``runlog.duckdb`` beside the embedded catalog), opened for each flush and closed again,
  so that another process (a second run, ``lakewrap query``) can open it in between.

Rows are buffered and flushed at most every ``interval`` (5) seconds, at once after a failure, and at
the end of the run; ``target/run_results.json`` is rewritten at the same moments. A process killed
with ``kill -9`` loses at most the last interval of log rows; what it committed to the lake is in
the lake's state of record (``lakewrap.materializations``, Iceberg's snapshot summaries or state
tables), which ``lakewrap resume`` reads.

Read them with ``lakewrap query "SELECT * FROM lakewrap_runs"`` (read-only sessions expose the four
tables as views: :func:`expose`) or from any DuckDB client: ``SELECT * FROM
__ducklake_metadata_lake.lakewrap_runs`` on DuckLake, ``ATTACH '.lakewrap/runlog.duckdb'`` on Iceberg.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from lakewrap import __version__
from lakewrap.compilers import runlog as rsql
from lakewrap.execute import statements as stmts
from lakewrap.execute.binding import inline
from lakewrap.execute.retry import RetryPolicy, retrying

# A catalog or run-log file another process is writing answers "database is locked" or holds its
# lock for a moment: a run-log write waits (up to about 50 s) rather than lose its rows.
LOCKED_RETRY = RetryPolicy(attempts=30, base=0.05, cap=2.0)
# What DuckDB 1.5.5 says when another process holds a database file's lock
FILE_LOCKED = ("Could not set lock on file", "Conflicting lock is held")


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat()


class Store:
    """Where the rows go: ``write(rows)`` in one transaction, ``read_run``, ``last_step``; and how a
    read session sees them (:meth:`exposed`)."""

    def write(self, rows: list[tuple[str, dict[str, Any]]], replace_run: str | None) -> None:
        raise NotImplementedError

    def read_run(self, run_id: str) -> dict[str, Any] | None:
        raise NotImplementedError

    def last_step(self, run_id: str) -> int:
        """The highest step number ``run_id`` recorded (0: none)."""
        raise NotImplementedError

    def close(self) -> None:
        pass


def _values(head: str, row: str, rows: list[dict[str, Any]]) -> str | None:
    """One INSERT of all of ``rows`` (``head``, then ``row`` per row with its values written as
    literals: :mod:`lakewrap.execute.binding`); None when a value is not one
    :func:`~lakewrap.execute.binding.literal` writes. One multi-row INSERT of 200 rows takes 17 ms,
    200 one-row INSERTs 120 ms (measured, DuckDB 1.5.5), and nothing is imported for it."""
    tuples = []
    for values in rows:
        text, left = inline(row, values)
        if left is not None:
            return None
        tuples.append(text)
    return head + ", ".join(tuples)


def _duckdb_write(con: Any, catalog: str | None, rows: list[tuple[str, dict[str, Any]]], replace_run: str | None,
                  create: bool) -> None:
    """One transaction on a DuckDB connection: the tables (when ``create``), the run's old row
    removed, the rows inserted (one statement per table); rolled back on any error."""
    by_table: dict[str, list[dict[str, Any]]] = {}
    for table, row in rows:
        by_table.setdefault(table, []).append(row)
    con.execute(stmts.BEGIN)
    try:
        if create:  # another run may be creating them too: a conflict retries it all
            for stmt in stmts.ddl("duckdb", catalog):
                con.execute(stmt)
        if replace_run is not None:
            con.execute(*inline(stmts.delete_run("duckdb", catalog), {"run_id": replace_run}))
        for table, table_rows in by_table.items():
            head, row = stmts.insert_rows(table, "duckdb", catalog)
            many = _values(head, row, table_rows)
            if many is not None:
                con.execute(many)
                continue
            insert = stmts.insert(table, "duckdb", catalog)
            for values in table_rows:  # a value bound by DuckDB (none lakewrap writes today)
                con.execute(insert, values)
        con.execute(stmts.COMMIT)
    except Exception:
        with suppress(Exception):
            con.execute(stmts.ROLLBACK)
        raise


def _duckdb_run(con: Any, catalog: str | None, run_id: str) -> dict[str, Any] | None:
    import duckdb

    try:
        cursor = con.execute(*inline(stmts.select_run("duckdb", catalog), {"run_id": run_id}))
    except duckdb.CatalogException:
        return None  # no run has written this run log yet
    row = cursor.fetchone()
    return dict(zip([d[0] for d in cursor.description], row, strict=True)) if row else None


def _duckdb_last_step(con: Any, catalog: str | None, run_id: str) -> int:
    row = con.execute(*inline(stmts.last_step("duckdb", catalog), {"run_id": run_id})).fetchone()
    return int(row[0] or 0) if row else 0


class AttachedStore(Store):
    """The tables in a database attached to the coordinator's connection (DuckLake's catalog database)."""

    def __init__(self, con: Any, catalog: str, lock: Any = None) -> None:
        self.lock: Any = lock if lock is not None else contextlib.nullcontext()
        self.con = con
        self.catalog = catalog
        # The tables are created (if missing) in the first write's transaction: four DDL statements
        # of their own would be four more commits (4-7 ms of every run; 2 ms inside one transaction).
        self.created = False

    def write(self, rows: list[tuple[str, dict[str, Any]]], replace_run: str | None) -> None:
        def locked() -> None:
            with self.lock:  # the run's steps share this instance (see Lake.statement_lock)
                _duckdb_write(self.con, self.catalog, rows, replace_run, not self.created)
                self.created = True

        retrying(locked, LOCKED_RETRY)

    def read_run(self, run_id: str) -> dict[str, Any] | None:
        with self.lock:
            return _duckdb_run(self.con, self.catalog, run_id)

    def last_step(self, run_id: str) -> int:
        with self.lock:
            return _duckdb_last_step(self.con, self.catalog, run_id)


class DuckDBFileStore(Store):
    """The tables in a DuckDB database file of their own, opened for each write and closed again.

    DuckDB admits one process at a time to a database file: holding it open for the whole run would
    lock out ``lakewrap query`` and every concurrent run. A locked file is waited for.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.created = False

    def _open(self, read_only: bool = False) -> Any:
        import duckdb

        def once() -> Any:
            try:
                return duckdb.connect(str(self.path), read_only=read_only)
            except duckdb.IOException as exc:
                if any(m in str(exc) for m in FILE_LOCKED):
                    from lakewrap.errors import TransientExecutionError

                    raise TransientExecutionError(str(exc).splitlines()[0]) from None
                raise

        if not read_only:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        return retrying(once, LOCKED_RETRY)

    def write(self, rows: list[tuple[str, dict[str, Any]]], replace_run: str | None) -> None:
        def once() -> None:
            con = self._open()
            try:
                _duckdb_write(con, None, rows, replace_run, not self.created)
                self.created = True
            finally:
                con.close()

        retrying(once, LOCKED_RETRY)

    def read_run(self, run_id: str) -> dict[str, Any] | None:
        if not self.path.exists():
            return None
        con = self._open(read_only=True)
        try:
            return _duckdb_run(con, None, run_id)
        finally:
            con.close()

    def last_step(self, run_id: str) -> int:
        if not self.path.exists():
            return 0
        con = self._open(read_only=True)
        try:
            return _duckdb_last_step(con, None, run_id)
        finally:
            con.close()

    def attach(self, con: Any) -> str | None:
        """ATTACH the file read-only to ``con`` as ``__lakewrap_runlog`` (before the session's
        sandbox is locked); None when no run has written it yet or another process holds it."""
        if not self.path.exists():
            return None
        try:
            retrying(lambda: _attach_read_only(con, str(self.path), "duckdb"), LOCKED_RETRY)
        except Exception:
            return None
        return rsql.RUNLOG_ALIAS


def _attach_read_only(con: Any, path: str, kind: str) -> None:
    try:
        con.execute(stmts.attach_runlog(path, kind))
    except Exception as exc:
        if any(m in str(exc) for m in FILE_LOCKED):
            from lakewrap.errors import TransientExecutionError

            raise TransientExecutionError(str(exc).splitlines()[0]) from None
        raise


class SQLiteStore(Store):
    def __init__(self, path: Path) -> None:
        import sqlite3  # only here: a run on any other catalog does not load it (1-4 ms)

        self.db = sqlite3.connect(path, timeout=60, isolation_level=None, check_same_thread=False)
        for stmt in stmts.ddl("sqlite"):
            self.db.execute(stmt)

    def write(self, rows: list[tuple[str, dict[str, Any]]], replace_run: str | None) -> None:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            if replace_run is not None:
                self.db.execute(stmts.delete_run("sqlite"), {"run_id": replace_run})
            for table, row in rows:
                self.db.execute(stmts.insert(table, "sqlite"), row)
            self.db.execute("COMMIT")
        except Exception:
            with suppress(Exception):
                self.db.execute("ROLLBACK")
            raise

    def read_run(self, run_id: str) -> dict[str, Any] | None:
        cursor = self.db.execute(stmts.select_run("sqlite"), {"run_id": run_id})
        row = cursor.fetchone()
        return dict(zip([d[0] for d in cursor.description], row, strict=True)) if row else None

    def last_step(self, run_id: str) -> int:
        row = self.db.execute(stmts.last_step("sqlite"), {"run_id": run_id}).fetchone()
        return int(row[0] or 0) if row else 0

    def close(self) -> None:
        self.db.close()


def attach_sqlite(con: Any, path: Path) -> str | None:
    """ATTACH a SQLite run-log file read-only to ``con``; the catalog name, or None (no run log yet)."""
    if not path.exists():
        return None
    try:
        con.execute(stmts.attach_runlog(str(path), "sqlite"))
    except Exception:
        return None
    return rsql.RUNLOG_ALIAS


def expose(con: Any, catalog: str | None) -> None:
    """Make the run-log tables of ``catalog`` (an attached database; None: no run log yet) readable
    by their short names, as temporary views on ``con`` (a read-only session)."""
    if catalog is None:
        return
    for name in rsql.TABLES:
        with suppress(Exception):  # a lake that never ran anything has no run log yet
            con.execute(stmts.expose_view(name, catalog))


def read_run(store: Store, run_id: str) -> dict[str, Any] | None:
    """The ``lakewrap_runs`` row of ``run_id`` (None when the run log has no such run)."""
    try:
        return store.read_run(run_id)
    finally:
        store.close()


@dataclass
class RunLog:
    """Buffers run-log rows and flushes them in their own transactions.

    Example:
        >>> store = substrate.runlog(lake, con)  # doctest: +SKIP
        >>> log = RunLog.open(store, lake.redact, run_id, "run", args={...}, results=write)  # doctest: +SKIP
        >>> log.step(result); log.line("info", "retrying"); log.finish("success", counts)  # doctest: +SKIP
    """

    backend: Store
    run_id: str
    run: dict[str, Any]
    redact: Callable[[str], str]
    on_flush: Callable[[], None] = lambda: None
    interval: float = 5.0
    pending: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    run_dirty: bool = False
    last_flush: float = 0.0
    steps: int = 0
    errors: list[str] = field(default_factory=list)
    earlier: int = 0  # a resumed run's steps committed before the resume: counted as succeeded

    @classmethod
    def open(cls, store: Store, redact: Callable[[str], str], run_id: str, command: str, *, args: dict[str, Any],
             executor: str, workers: int, steps: int, on_flush: Callable[[], None] = lambda: None,
             previous: dict[str, Any] | None = None, earlier: int = 0) -> RunLog:
        """Record the run as ``running``. A resumed run (``previous``: its row) keeps its start time,
        counts its ``earlier`` committed steps with the new ones, and numbers its steps after the
        ones it recorded before."""
        run = {
            "run_id": run_id, "command": command, "status": "running", "args": json.dumps(args, default=str),
            "started_at": previous["started_at"] if previous else now_iso(), "finished_at": None,
            "executor": executor, "workers": workers, "steps": steps + earlier, "succeeded": earlier, "failed": 0,
            "skipped": 0, "cancelled": 0, "resumable": False, "lakewrap_version": __version__, "pid": os.getpid(),
        }
        log = cls(store, run_id, run, redact, on_flush, earlier=earlier)
        if previous:
            with suppress(Exception):  # numbering only; a lake without step rows starts at 1
                log.steps = log.backend.last_step(run_id)
        log.run_dirty = True
        log.line("info", None, None, f"{command} started: {steps} steps, executor {executor}, {workers} workers"
                 + (" (resumed)" if previous else ""))
        log.flush()
        return log

    def line(self, level: str, target: str | None, partition: str | None, message: str) -> None:
        self.pending.append((rsql.LOG, {"run_id": self.run_id, "logged_at": now_iso(), "level": level, "target": target,
                                        "partition_value": partition, "message": self.redact(message)}))

    def step(self, result: Any) -> None:
        """Record one finished (model, partition): its step row, its attempts and log lines."""
        self.steps += 1
        r = result
        self.pending.append((rsql.STEPS, {
            "run_id": self.run_id, "step": self.steps, "model": r.model, "target": r.target,
            "partition_value": r.partition, "status": r.status, "attempts": r.attempts,
            "rows_inserted": r.rows_inserted, "rows_updated": r.rows_updated, "rows_deleted": r.rows_deleted,
            "snapshot_id": r.snapshot_id, "seconds": round(r.seconds, 6), "finished_at": now_iso(),
            "sql_sha256": r.sql_sha256 or None, "error_class": r.error_class,
            "error": self.redact(r.error) if r.error else None,
        }))
        failures = list(getattr(r, "attempt_errors", []) or [])
        for a in failures:
            self.pending.append((rsql.ATTEMPTS, {
                "run_id": self.run_id, "target": r.target, "partition_value": r.partition, "attempt": a["attempt"],
                "outcome": "retried" if a["attempt"] < r.attempts else r.status,  # failed or cancelled
                "error_class": a["error_class"], "error": self.redact(a["error"]), "seconds": a["seconds"],
            }))
        if r.status in ("success", "unchanged") and r.attempts:
            self.pending.append((rsql.ATTEMPTS, {
                "run_id": self.run_id, "target": r.target, "partition_value": r.partition, "attempt": r.attempts,
                "outcome": "committed" if r.status == "success" else "unchanged", "error_class": None,
                "error": None, "seconds": None,
            }))
        for line in getattr(r, "log_lines", ()) or ():
            self.line("info", r.target, r.partition, line)
        for h in getattr(r, "hooks", ()):  # the model's hooks: their output, then how they ended
            for out in h["output"]:
                self.line("info", r.target, r.partition, f"{h['event']} {h['path']}: {out}")
            if h["status"] == "ok":
                self.line("info", r.target, r.partition, f"{h['event']} hook {h['path']}: ok in {h['seconds']:.2f}s")
        for w in r.warnings:
            self.line("warning", r.target, r.partition, w)
        if r.status == "failed":
            self.line("error", r.target, r.partition, r.error or "failed")
        elif r.status in ("skipped", "cancelled"):
            self.line("info", r.target, r.partition, f"{r.status}: {r.error or ''}".rstrip(": "))
        if r.status == "failed" or time.monotonic() - self.last_flush >= self.interval:
            self.flush()

    def counts(self, results: list[Any]) -> None:
        by: dict[str, int] = {}
        for r in results:
            by[r.status] = by.get(r.status, 0) + 1
        self.run.update(succeeded=self.earlier + by.get("success", 0) + by.get("unchanged", 0),
                        failed=by.get("failed", 0),
                        skipped=by.get("skipped", 0), cancelled=by.get("cancelled", 0))
        self.run_dirty = True

    def finish(self, status: str, results: list[Any], *, resumable: bool) -> None:
        self.counts(results)
        self.run.update(status=status, finished_at=now_iso(), resumable=resumable)
        self.line("info" if status == "success" else "error", None, None, f"run {status}")
        self.flush()

    def flush(self) -> None:
        """Write buffered rows in one transaction (the run row replaced when it changed)."""
        self.last_flush = time.monotonic()
        rows = self.pending
        self.pending = []
        if self.run_dirty:
            rows = [(rsql.RUNS, dict(self.run)), *rows]
        try:
            if rows:
                self.backend.write(rows, self.run_id if self.run_dirty else None)
            self.run_dirty = False
        except Exception as exc:  # the run log must never fail a run: keep the rows for the next flush
            self.pending = [r for r in rows if r[0] != rsql.RUNS] + self.pending
            self.errors.append(self.redact(str(exc)).splitlines()[0])
        self.on_flush()

    def close(self) -> None:
        self.backend.close()
