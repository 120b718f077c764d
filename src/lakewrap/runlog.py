"""The run log: runs, steps, attempts and log lines, as tables in the lake's catalog database.

Written only by the process that coordinates a run, in small transactions of their own, never
inside a materialization's transaction:

* DuckDB-file and PostgreSQL catalogs: through DuckDB's attachment of the catalog database
  (``__ducklake_metadata_<alias>``) on the coordinator's connection. DuckDB refuses a transaction
  that writes both that database and the lake, so a run-log write cannot slip into a
  materialization's commit, and no DuckLake snapshot is created for it.
* SQLite catalogs: Python's ``sqlite3`` on a SQLite file beside the catalog (``lake.sqlite`` →
  ``lake.sqlite-runlog``), with a busy timeout. Writing the catalog file itself is no option: a
  DuckDB attachment of it in the same process wedges (DuckLake 1.5.5), and two SQLite libraries
  in one process (DuckDB's and Python's) do not see each other's locks on one file.

Rows are buffered and flushed at most every ``interval`` (5) seconds, at once after a failure, and at
the end of the run; ``target/run_results.json`` is rewritten at the same moments. A process killed
with ``kill -9`` loses at most the last interval of log rows; what it committed to the lake is in
``lakewrap.materializations`` (the state of record), which ``lakewrap resume`` reads.

Read them with ``lakewrap query "SELECT * FROM lakewrap_runs"`` (read-only sessions expose the four
tables as views) or from any DuckDB client: ``SELECT * FROM __ducklake_metadata_lake.lakewrap_runs``.
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
from lakewrap.execute.lake import CONNECT_RETRY, Lake
from lakewrap.execute.retry import retrying


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat()


def sqlite_runlog_path(lake: Lake) -> Path:
    path = lake.config.catalog_path(lake.root)
    return path.with_name(path.name + "-runlog")


def expose(con: Any, lake: Lake) -> None:
    """Make the run-log tables readable by their short names (temporary views) in a read session."""
    catalog = stmts.metadata_catalog(lake.alias)
    if lake.config.catalog == "sqlite":
        path = sqlite_runlog_path(lake)
        if not path.exists():
            return
        try:
            con.execute(stmts.attach_sqlite(str(path)))
        except Exception:
            return
        catalog = rsql.RUNLOG_ALIAS
    for name in rsql.TABLES:
        with suppress(Exception):  # a lake that never ran anything has no run log yet
            con.execute(stmts.expose_view(name, catalog))


class _Backend:
    """Where the rows go: ``write(rows_by_table)`` in one transaction; ``read_run``."""

    def write(self, rows: list[tuple[str, dict[str, Any]]], replace_run: str | None) -> None:
        raise NotImplementedError

    def read_run(self, run_id: str) -> dict[str, Any] | None:
        raise NotImplementedError

    def last_step(self, run_id: str) -> int:
        """The highest step number ``run_id`` recorded (0: none)."""
        raise NotImplementedError

    def close(self) -> None:
        pass


_SOURCE = "__lakewrap_runlog_rows"
_ARROW = {"VARCHAR": "string", "BIGINT": "int64", "DOUBLE": "float64", "BOOLEAN": "bool"}


SMALL_FLUSH = 64  # rows; above this a flush goes through Arrow


def _arrow_table(table: str, rows: list[dict[str, Any]]) -> Any:
    import pyarrow as pa  # type: ignore[import-untyped]

    schema = pa.schema([(c, pa.type_for_alias(_ARROW[t])) for c, t in rsql.TABLES[table]])
    return pa.Table.from_pylist(rows, schema=schema)


class _DuckDBBackend(_Backend):
    def __init__(self, con: Any, alias: str) -> None:
        self.lock: Any = contextlib.nullcontext()
        self.con = con
        self.catalog = stmts.metadata_catalog(alias)
        # The tables are created (if missing) in the first write's transaction: four DDL statements
        # of their own would be four more commits (4-7 ms of every run; 2 ms inside one transaction).
        self.created = False

    def write(self, rows: list[tuple[str, dict[str, Any]]], replace_run: str | None) -> None:
        by_table: dict[str, list[dict[str, Any]]] = {}
        for table, row in rows:
            by_table.setdefault(table, []).append(row)
        # A few rows (a run of a few models) are bound one by one (about 1 ms each); a big flush
        # goes as one INSERT per table from an Arrow table, which costs importing pyarrow (~0.1 s).
        frames = ({t: _arrow_table(t, r) for t, r in by_table.items()} if len(rows) > SMALL_FLUSH else None)

        def once() -> None:
            self.con.execute(stmts.BEGIN)
            try:
                if not self.created:  # another run may be creating them too: a conflict retries it all
                    for stmt in stmts.ddl("duckdb", self.catalog):
                        self.con.execute(stmt)
                if replace_run is not None:
                    self.con.execute(stmts.delete_run("duckdb", self.catalog), {"run_id": replace_run})
                if frames is None:
                    for table, table_rows in by_table.items():
                        insert = stmts.insert(table, "duckdb", self.catalog)
                        for row in table_rows:
                            self.con.execute(insert, row)
                for table, frame in (frames or {}).items():
                    self.con.register(_SOURCE, frame)
                    try:
                        self.con.execute(stmts.insert_from(table, _SOURCE, self.catalog))
                    finally:
                        self.con.unregister(_SOURCE)
                self.con.execute(stmts.COMMIT)
                self.created = True
            except Exception:
                with suppress(Exception):
                    self.con.execute(stmts.ROLLBACK)
                raise

        def locked() -> None:
            with self.lock:  # the run's steps share this instance (see Lake.statement_lock)
                once()

        retrying(locked, CONNECT_RETRY)

    def read_run(self, run_id: str) -> dict[str, Any] | None:
        import duckdb

        try:
            cursor = self.con.execute(stmts.select_run("duckdb", self.catalog), {"run_id": run_id})
        except duckdb.CatalogException:
            return None  # no run has written the run log of this lake yet
        row = cursor.fetchone()
        return dict(zip([d[0] for d in cursor.description], row, strict=True)) if row else None

    def last_step(self, run_id: str) -> int:
        with self.lock:
            row = self.con.execute(stmts.last_step("duckdb", self.catalog), {"run_id": run_id}).fetchone()
        return int(row[0] or 0) if row else 0


class _SQLiteBackend(_Backend):
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


def backend_for(lake: Lake, con: Any) -> _Backend:
    if lake.config.catalog == "sqlite":
        return _SQLiteBackend(sqlite_runlog_path(lake))
    backend = _DuckDBBackend(con, lake.alias)
    backend.lock = lake.statement_lock
    return backend


def read_run(lake: Lake, con: Any, run_id: str) -> dict[str, Any] | None:
    """The ``lakewrap_runs`` row of ``run_id`` (None when the lake has no such run)."""
    backend = backend_for(lake, con)
    try:
        return backend.read_run(run_id)
    finally:
        backend.close()


@dataclass
class RunLog:
    """Buffers run-log rows and flushes them in their own transactions.

    Example:
        >>> log = RunLog.open(lake, con, run_id, "run", args={...}, results=write)  # doctest: +SKIP
        >>> log.step(result); log.line("info", "retrying"); log.finish("success", counts)  # doctest: +SKIP
    """

    backend: _Backend
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
    def open(cls, lake: Lake, con: Any, run_id: str, command: str, *, args: dict[str, Any], executor: str,
             workers: int, steps: int, on_flush: Callable[[], None] = lambda: None,
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
        log = cls(backend_for(lake, con), run_id, run, lake.redact, on_flush, earlier=earlier)
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
