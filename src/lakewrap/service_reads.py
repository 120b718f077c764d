"""What ``lakewrap serve`` reads, without FastAPI: the run log's runs, steps and lines, and each
model's partitions, gaps, stale partitions and last run (``lakewrap status``'s rows), and the
freshness of models and sources (:func:`lakewrap.freshness.check`, as ``lakewrap freshness``).

Every read opens the project's lake read-only through its substrate, runs bound SELECTs on the run
log's tables (``lakewrap_runs``, ``lakewrap_steps``, ``lakewrap_attempts``, ``lakewrap_log``, the
views a read-only session exposes, :func:`lakewrap.runlog.expose`) and closes it again. Reads of one
process take turns (:data:`LOCK`): a DuckDB-file catalog admits one DuckDB instance per process.
A catalog another process holds (the worker, during a run) is waited for ``LAKEWRAP_WAIT``
seconds (:mod:`lakewrap.execute.lockwait`), then :class:`Busy` is raised.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from lakewrap.errors import LakewrapError, SelectionError
from lakewrap.execute.binding import inline
from lakewrap.execute.lockwait import HELD

LOCK = threading.Lock()
RUN_COLUMNS = ("run_id", "command", "status", "args", "started_at", "finished_at", "executor", "workers", "steps",
               "succeeded", "failed", "skipped", "cancelled", "resumable", "lakewrap_version")
STEP_COLUMNS = ("step", "model", "target", "partition_value", "status", "attempts", "rows_inserted",
                "rows_updated", "rows_deleted", "snapshot_id", "seconds", "finished_at", "sql_sha256",
                "error_class", "error")
ATTEMPT_COLUMNS = ("target", "partition_value", "attempt", "outcome", "error_class", "error", "seconds")
LOG_COLUMNS = ("logged_at", "level", "target", "partition_value", "message")
RUN_STATUSES = ("running", "success", "failed", "cancelled")
STRIP_MAX = 60  # cells of a model's calendar strip (the latest)
STRIP_AFTER = 7  # gaps shown after the latest materialized partition


class Busy(LakewrapError):
    """The catalog is held by another process (a DuckDB-file catalog during a worker's run)."""


def keep_open(root: Path) -> None:
    """Keep one read-only session of ``root``'s lake open between reads (a catalog many processes
    share, PostgreSQL): opening the lake costs a run-log read ~0.1 s. Never for a catalog one process
    owns (a DuckDB file): an open session would keep the worker out."""
    KEEP.add(root)


KEEP: set[Path] = set()
_OPEN: dict[Path, tuple[Any, Any]] = {}  # root -> (lake, connection), under LOCK


def _connect(root: Path) -> tuple[Any, Any]:
    from lakewrap.substrates import of_project

    try:
        lake = of_project(root).open(root, read_only=True)
        return lake, lake.connect()
    except Exception as exc:
        if HELD.search(str(exc)):
            raise Busy("the catalog is held by another process (a run is writing it)",
                       hint="retry in a few seconds; `lakewrap serve --wait SECONDS` waits longer") from None
        raise


def _fetch(root: Path, sql: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows of one bound SELECT on the lake's read-only session; [] when no lake or no run log exists yet.

    A kept session (:func:`keep_open`) that fails, or lacks the run log (its views are made when it
    opens), is closed and the SELECT tried once more on a new one."""
    import duckdb

    from lakewrap.errors import NoLake

    with LOCK:
        kept = _OPEN.pop(root, None)
        while True:
            try:
                lake, con = kept or _connect(root)
            except NoLake:
                return []  # nothing seeded or run yet: no run log either
            healthy = True
            try:
                cursor = con.execute(*inline(sql, params))
                names = [d[0] for d in cursor.description]
                return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
            except Exception as exc:
                healthy = False
                if kept is not None:  # a session opened earlier: try a new one
                    continue
                if isinstance(exc, duckdb.CatalogException):
                    return []  # no run has written the run log yet
                raise
            finally:
                if healthy and root in KEEP:
                    _OPEN[root] = (lake, con)
                else:
                    lake.close(con)
                kept = None


def _run_dict(row: dict[str, Any]) -> dict[str, Any]:
    out = dict(row)
    with contextlib.suppress(ValueError):  # the run's arguments as recorded; text if they do not parse
        out["args"] = json.loads(out["args"]) if out.get("args") else {}
    out["resumable"] = bool(out.get("resumable"))
    return out


def list_runs(root: Path, *, status: str | None = None, limit: int = 50) -> list[dict[str, Any]]:
    """The newest ``limit`` runs of the run log (of ``status``), newest first."""
    where = " WHERE status = $status" if status is not None else ""
    params: dict[str, Any] = {"limit": limit, **({"status": status} if status is not None else {})}
    rows = _fetch(root, f"SELECT {', '.join(RUN_COLUMNS)} FROM lakewrap_runs{where} "
                        "ORDER BY started_at DESC, run_id DESC LIMIT $limit", params)
    return [_run_dict(r) for r in rows]


def get_run(root: Path, run_id: str) -> dict[str, Any] | None:
    """``{"run": ..., "steps": [...]}``: the run, its steps in order, each with its attempts; None
    when the run log has no such run."""
    runs = _fetch(root, f"SELECT {', '.join(RUN_COLUMNS)} FROM lakewrap_runs WHERE run_id = $run_id",
                  {"run_id": run_id})
    if not runs:
        return None
    run = _run_dict(runs[0])
    steps = _fetch(root, f"SELECT {', '.join(STEP_COLUMNS)} FROM lakewrap_steps WHERE run_id = $run_id "
                         "ORDER BY step", {"run_id": run_id})
    attempts = _fetch(root, f"SELECT {', '.join(ATTEMPT_COLUMNS)} FROM lakewrap_attempts WHERE run_id = $run_id "
                            "ORDER BY target, partition_value, attempt", {"run_id": run_id})
    for step in steps:
        step["partition"] = step.pop("partition_value")
        step["attempt_log"] = [{k: v for k, v in a.items() if k not in ("target", "partition_value")}
                               for a in attempts
                               if a["target"] == step["target"] and a["partition_value"] == step["partition"]]
    return {"run": run, "steps": steps}


def run_logs(root: Path, run_id: str) -> list[dict[str, Any]] | None:
    """The run's log lines in order; None when the run log has no such run."""
    if not _fetch(root, "SELECT run_id FROM lakewrap_runs WHERE run_id = $run_id", {"run_id": run_id}):
        return None
    rows = _fetch(root, f"SELECT {', '.join(LOG_COLUMNS)} FROM lakewrap_log WHERE run_id = $run_id "
                        "ORDER BY logged_at", {"run_id": run_id})
    for r in rows:
        r["partition"] = r.pop("partition_value")
    return rows


@contextlib.contextmanager
def _turn() -> Iterator[None]:
    """One read of this process at a time; a catalog another process holds is :class:`Busy`."""
    with LOCK:
        try:
            yield
        except Exception as exc:
            if HELD.search(str(exc)):
                raise Busy("the catalog is held by another process (a run is writing it)",
                           hint="retry in a few seconds") from None
            raise


def _statuses(root: Path, selectors: tuple[str, ...], now: datetime | None) -> list[Any]:
    from lakewrap.inspect import status

    with _turn():
        return status(root, selectors, now)


def _fresh(root: Path, selectors: Sequence[str], now: datetime | None) -> list[Any]:
    """:func:`lakewrap.freshness.check`, what `lakewrap freshness --format json` prints."""
    from lakewrap.freshness import check

    with _turn():
        return check(root, selectors, now)


def _fresh_of(row: Any) -> dict[str, Any]:
    """A model's freshness as `lakewrap freshness --format json` has it, without kind and name."""
    return {k: v for k, v in row.to_dict().items() if k not in ("kind", "name")}


def freshness(root: Path, now: datetime | None = None) -> dict[str, Any]:
    """``lakewrap freshness --format json``: every model with a policy and every ``[sources]`` table,
    and whether one is an error-level breach (the command's exit 1)."""
    from lakewrap.freshness import breached

    rows = _fresh(root, (), now)
    return {"freshness": [r.to_dict() for r in rows], "breached": breached(rows)}


def _summary(st: Any) -> dict[str, Any]:
    return {"target": st.target, "path": st.model, "strategy": st.strategy, "partitions": len(st.partitions),
            "gaps": len(st.gaps), "stale": len(st.stale), "failures": len(st.failures), "last_run": st.last_run,
            "last_committed_at": st.last_committed_at}


def models(root: Path, now: datetime | None = None) -> list[dict[str, Any]]:
    """Every model in dependency order: counts of partitions, gaps, stale partitions and failures,
    and its calendar strip."""
    failed = failed_partitions(root)
    now = now or datetime.now(timezone.utc)  # one instant for the gaps and the ages
    rows = _statuses(root, (), now)
    fresh = {r.name.lower(): _fresh_of(r) for r in _fresh(root, [st.target for st in rows], now)} if rows else {}
    return [{**_summary(st), "freshness": fresh.get(st.target.lower()),
             "failed_partitions": sorted(failed.get(st.target.lower(), set())),
             "strip": strip(st, failed.get(st.target.lower(), set()))} for st in rows]


def failed_partitions(root: Path) -> dict[str, set[str]]:
    """Per target (case-folded): the partitions whose latest step in the run log failed (none since
    succeeded)."""
    rows = _fetch(root, "SELECT lower(target) AS target, partition_value, "
                        "max(finished_at) FILTER (WHERE status = 'failed') AS failed_at, "
                        "max(finished_at) FILTER (WHERE status IN ('success', 'unchanged')) AS ok_at "
                        "FROM lakewrap_steps WHERE partition_value IS NOT NULL GROUP BY ALL", {})
    out: dict[str, set[str]] = {}
    for r in rows:
        if r["failed_at"] is not None and (r["ok_at"] is None or r["failed_at"] > r["ok_at"]):
            out.setdefault(r["target"], set()).add(r["partition_value"])
    return out


def strip(st: Any, failed: set[str]) -> dict[str, Any]:
    """The calendar strip of a model: from its first partition to :data:`STRIP_AFTER` past the latest
    materialized or failed one (the latest :data:`STRIP_MAX` cells), each ``materialized``, ``stale``,
    ``failed`` (its latest step failed: :func:`failed_partitions`) or ``gap``; the gaps after it are
    counted."""
    stale, done = set(st.stale), set(st.partitions)
    cells = sorted(done | set(st.gaps) | failed)
    seen = done | failed
    end = cells.index(max(seen)) + 1 + STRIP_AFTER if seen else min(len(cells), STRIP_AFTER)
    later = [c for c in cells[end:] if c not in seen]
    return {"cells": [{"value": c, "state": "failed" if c in failed else "stale" if c in stale
                       else "materialized" if c in done else "gap"} for c in cells[:end][-STRIP_MAX:]],
            "later_gaps": len(later), "last_gap": later[-1] if later else None}


def model(root: Path, target: str, now: datetime | None = None) -> dict[str, Any]:
    """One model's partitions, gaps, stale partitions (with why), failures and last run.

    ``target`` is ``schema.name`` (or the model's name when that is unique); anything else, a
    selector such as ``tag:x`` too, is a :class:`SelectionError`."""
    from lakewrap.compile import load_project
    from lakewrap.errors import suggest

    project = load_project(root, None)
    specs = list(project.select(()))
    key = target.lower()
    found = [s for s in specs if str(s.target).lower() == key] or [s for s in specs if s.name.lower() == key]
    if len(found) != 1:
        close = suggest(target, [str(s.target) for s in specs])
        raise SelectionError(f"no model `{target}`" if not found else f"`{target}` names {len(found)} models",
                             hint=f"did you mean `{close}`?" if close else "list the models with GET /models")
    now = now or datetime.now(timezone.utc)
    st = _statuses(root, (str(found[0].target),), now)[0]
    out = _summary(st)
    out["freshness"] = _fresh_of(_fresh(root, (st.target,), now)[0])
    failed = failed_partitions(root).get(st.target.lower(), set())
    out.update(partitions=st.partitions, gaps=st.gaps, stale=st.stale, stale_reasons=st.stale_reasons,
               failures=st.failures, failed_partitions=sorted(failed), strip=strip(st, failed))
    return out
