"""Where the job queue's table lives: a PostgreSQL database or a SQLite file (docs/queue.md).

The substrate chooses (:meth:`lakewrap.substrates.protocol.Substrate.job_store`); this module
only talks to the database it is given. Rows travel as dicts of the columns of
:data:`lakewrap.compilers.jobs.COLUMNS`, times as ISO 8601 UTC text.

* :class:`PostgresJobs`: psycopg on the catalog's database (the dsn of ``lakewrap.toml``; the
  password from ``PGPASSWORD``, a service file or ``~/.pgpass``, as libpq finds it), autocommit,
  each operation one statement; a claim takes the oldest queued row with ``FOR UPDATE SKIP LOCKED``,
  so any number of workers claim without waiting on each other and never the same job. Times
  are the server's clock (``now()``), so workers on several hosts agree on heartbeat ages.
* :class:`SQLiteJobs`: Python's ``sqlite3`` on a file, each read-then-write under ``BEGIN
  IMMEDIATE`` (one writer at a time, a busy timeout for the others); times from this host's
  clock. ``exclusive``: one worker at a time drains it (an ``flock`` on ``<file>.worker``).
"""

from __future__ import annotations

import builtins
import contextlib
import fcntl
import os
import threading
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from lakewrap.compilers import jobs as q
from lakewrap.errors import StateError
from lakewrap.redact import redact


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def _iso(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.astimezone(timezone.utc).isoformat(timespec="microseconds")
    return value


def _row(cursor: Any, values: Any) -> dict[str, Any] | None:
    if values is None:
        return None
    return {d[0]: _iso(v) for d, v in zip(cursor.description, values, strict=True)}


class JobStore:
    """The operations :class:`lakewrap.jobs.JobQueue` needs, on one database."""

    exclusive: bool = False  # one worker at a time (a catalog one process owns)
    where: str = ""  # where the table is, for messages and ``lakewrap jobs`` (no credential)

    def insert(self, row: dict[str, Any]) -> dict[str, Any]:
        """Queue ``row``; with a ``dedupe_key`` already stored, the stored row instead."""
        raise NotImplementedError

    def get(self, job_id: int) -> dict[str, Any] | None:
        raise NotImplementedError

    def get_by_key(self, dedupe_key: str) -> dict[str, Any] | None:
        raise NotImplementedError

    def list(self, status: str | None, limit: int) -> builtins.list[dict[str, Any]]:
        raise NotImplementedError

    def claim(self, worker: str, run_id: str) -> dict[str, Any] | None:
        raise NotImplementedError

    def heartbeat(self, job_id: int, worker: str) -> bool:
        raise NotImplementedError

    def finish(self, job_id: int, status: str, run_id: str | None, error: str | None) -> None:
        raise NotImplementedError

    def release(self, job_id: int, worker: str) -> dict[str, Any] | None:
        raise NotImplementedError

    def reclaim(self, timeout_s: float) -> builtins.list[dict[str, Any]]:
        raise NotImplementedError

    @contextlib.contextmanager
    def worker_slot(self) -> Iterator[None]:
        """Held while a worker drains the queue; refuses a second worker on an exclusive store."""
        yield

    @contextlib.contextmanager
    def setup_lock(self) -> Iterator[None]:
        """Held by one starting worker at a time, while it creates the lake if it is new (DuckLake
        fails when two processes initialize one PostgreSQL catalog at once)."""
        yield

    def close(self) -> None:
        pass


class SQLiteJobs(JobStore):
    def __init__(self, path: Path, *, exclusive: bool, where: str) -> None:
        import sqlite3

        self.path = path
        self.exclusive = exclusive
        self.where = where
        self.lock = threading.Lock()  # a worker's heartbeat thread shares the connection
        path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(path, timeout=60, isolation_level=None, check_same_thread=False)
        for stmt in q.DDL["sqlite"]:
            self.db.execute(stmt)

    @contextlib.contextmanager
    def _write(self) -> Iterator[Any]:
        with self.lock:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                yield self.db
                self.db.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(Exception):
                    self.db.execute("ROLLBACK")
                raise

    def _one(self, sql: str, params: dict[str, Any]) -> dict[str, Any] | None:
        cursor = self.db.execute(sql, params)
        return _row(cursor, cursor.fetchone())

    def insert(self, row: dict[str, Any]) -> dict[str, Any]:
        with self._write() as db:
            if row["dedupe_key"] is not None:
                found = self._one(q.SQ_BY_KEY, {"dedupe_key": row["dedupe_key"]})
                if found is not None:
                    return found
            cursor = db.execute(q.SQ_INSERT, {**row, "now": now_iso()})
            made = self._one(q.SQ_GET, {"id": cursor.lastrowid})
        assert made is not None
        return made

    def get(self, job_id: int) -> dict[str, Any] | None:
        with self.lock:
            return self._one(q.SQ_GET, {"id": job_id})

    def get_by_key(self, dedupe_key: str) -> dict[str, Any] | None:
        with self.lock:
            return self._one(q.SQ_BY_KEY, {"dedupe_key": dedupe_key})

    def list(self, status: str | None, limit: int) -> builtins.list[dict[str, Any]]:
        with self.lock:
            cursor = self.db.execute(q.SQ_LIST_STATUS if status else q.SQ_LIST, {"status": status, "limit": limit})
            return [r for r in (_row(cursor, v) for v in cursor.fetchall()) if r is not None]

    def claim(self, worker: str, run_id: str) -> dict[str, Any] | None:
        with self._write() as db:
            found = db.execute(q.SQ_NEXT).fetchone()
            if found is None:
                return None
            db.execute(q.SQ_CLAIM, {"id": found[0], "worker": worker, "run_id": run_id, "now": now_iso()})
            return self._one(q.SQ_GET, {"id": found[0]})

    def heartbeat(self, job_id: int, worker: str) -> bool:
        with self._write() as db:
            return bool(db.execute(q.SQ_HEARTBEAT, {"id": job_id, "worker": worker, "now": now_iso()}).rowcount)

    def finish(self, job_id: int, status: str, run_id: str | None, error: str | None) -> None:
        with self._write() as db:
            db.execute(q.SQ_FINISH, {"id": job_id, "status": status, "run_id": run_id, "error": error,
                                     "now": now_iso()})

    def release(self, job_id: int, worker: str) -> dict[str, Any] | None:
        with self._write() as db:
            if not db.execute(q.SQ_RELEASE, {"id": job_id, "worker": worker}).rowcount:
                return None
            return self._one(q.SQ_GET, {"id": job_id})

    def reclaim(self, timeout_s: float) -> builtins.list[dict[str, Any]]:
        cutoff = datetime.fromtimestamp(datetime.now(timezone.utc).timestamp() - timeout_s, timezone.utc)
        out: builtins.list[dict[str, Any]] = []
        with self._write() as db:
            for (job_id,) in db.execute(q.SQ_STALE, {"cutoff": cutoff.isoformat(timespec="microseconds")}).fetchall():
                db.execute(q.SQ_REQUEUE, {"id": job_id})
                row = self._one(q.SQ_GET, {"id": job_id})
                if row is not None:
                    out.append(row)
        return out

    @contextlib.contextmanager
    def worker_slot(self) -> Iterator[None]:
        if not self.exclusive:
            yield
            return
        lock_path = self.path.with_name(self.path.name + ".worker")
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                other = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
                raise StateError(f"another worker (pid {other}) is draining this queue; {self.where} takes one "
                                 "worker at a time",
                                 hint="stop that worker first, or put the catalog on PostgreSQL for several "
                                 "workers (docs/queue.md)") from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(os.getpid()).encode(), 0)
            yield
        finally:
            os.close(fd)  # closing the descriptor drops the lock

    def close(self) -> None:
        with self.lock:
            self.db.close()


class PostgresJobs(JobStore):
    def __init__(self, dsn: str, *, where: str) -> None:
        import psycopg

        self.where = where
        self.lock = threading.Lock()
        try:
            self.db = psycopg.connect(dsn, autocommit=True, connect_timeout=30)
        except psycopg.Error as exc:
            first = redact(str(exc)).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise StateError(f"cannot connect to the catalog's PostgreSQL database for the job queue: {first}",
                             hint="check [lake] dsn in lakewrap.toml and PGPASSWORD (or ~/.pgpass)") from None
        with self.db.transaction():
            self.db.execute(q.PG_DDL_LOCK)
            for stmt in q.DDL["postgres"]:
                self.db.execute(stmt)

    def _one(self, sql: str, params: dict[str, Any]) -> dict[str, Any] | None:
        with self.lock:
            cursor = self.db.execute(sql, params)
            return _row(cursor, cursor.fetchone()) if cursor.description else None

    def _all(self, sql: str, params: dict[str, Any]) -> builtins.list[dict[str, Any]]:
        with self.lock:
            cursor = self.db.execute(sql, params)
            return [r for r in (_row(cursor, v) for v in cursor.fetchall()) if r is not None]

    def insert(self, row: dict[str, Any]) -> dict[str, Any]:
        made = self._one(q.PG_INSERT, row)
        if made is None:  # the dedupe key is taken: that job
            made = self._one(q.PG_BY_KEY, {"dedupe_key": row["dedupe_key"]})
        assert made is not None
        return made

    def get(self, job_id: int) -> dict[str, Any] | None:
        return self._one(q.PG_GET, {"id": job_id})

    def get_by_key(self, dedupe_key: str) -> dict[str, Any] | None:
        return self._one(q.PG_BY_KEY, {"dedupe_key": dedupe_key})

    def list(self, status: str | None, limit: int) -> builtins.list[dict[str, Any]]:
        return self._all(q.PG_LIST_STATUS if status else q.PG_LIST, {"status": status, "limit": limit})

    def claim(self, worker: str, run_id: str) -> dict[str, Any] | None:
        return self._one(q.PG_CLAIM, {"worker": worker, "run_id": run_id})

    def heartbeat(self, job_id: int, worker: str) -> bool:
        with self.lock:
            return bool(self.db.execute(q.PG_HEARTBEAT, {"id": job_id, "worker": worker}).rowcount)

    def finish(self, job_id: int, status: str, run_id: str | None, error: str | None) -> None:
        with self.lock:
            self.db.execute(q.PG_FINISH, {"id": job_id, "status": status, "run_id": run_id, "error": error})

    def release(self, job_id: int, worker: str) -> dict[str, Any] | None:
        return self._one(q.PG_RELEASE, {"id": job_id, "worker": worker})

    def reclaim(self, timeout_s: float) -> builtins.list[dict[str, Any]]:
        return self._all(q.PG_RECLAIM, {"timeout": float(timeout_s)})

    @contextlib.contextmanager
    def setup_lock(self) -> Iterator[None]:
        with self.lock:
            self.db.execute(q.PG_SETUP_LOCK)
        try:
            yield
        finally:
            with self.lock:
                self.db.execute(q.PG_SETUP_UNLOCK)

    def close(self) -> None:
        with self.lock:
            self.db.close()
