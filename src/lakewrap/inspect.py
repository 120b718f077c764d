"""Read-only views of a lake: ``query``, ``status`` and ``history``.

Everything here reads what the lake itself recorded (lakewrap's state tables and DuckLake's
snapshots); nothing is kept in a side file that could disagree with the data.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from lakewrap.compile import load_project
from lakewrap.errors import ExecutionError, PlanError
from lakewrap.execute import sandbox
from lakewrap.execute import statements as sql
from lakewrap.execute.lake import Lake
from lakewrap.partitions import Grain, latest_complete, parse_partition, partition_range
from lakewrap.project import require_project
from lakewrap.spec import TimePartitioning


@dataclass
class QueryResult:
    columns: list[str]
    rows: list[tuple[Any, ...]]


def check_read_only(text: str, *, files: bool = True) -> None:
    """Refuse anything but one SELECT (DESCRIBE, SHOW, SUMMARIZE, FROM, VALUES ...) calling nothing
    :mod:`lakewrap.execute.sandbox` denies, on DuckDB's parse, before it reaches the lake.
    ``files=False``: the lake's connections have no file sandbox, so no file-reading function either."""
    sandbox.check(text, allowed=sandbox.QUERY_TYPES, what="`lakewrap query`", single=True, files=files,
                  hint="`lakewrap query` is read-only: give a SELECT; models change tables "
                  "(write one and use `lakewrap run`)")


def _iceberg(root: Path) -> bool:
    from lakewrap.config import load_config

    return load_config(root.resolve()).lake.substrate == "iceberg"


def _check_query(root: Path, text: str, as_of: str | None) -> bool:
    """The statement check of a query on this project's lake; whether the lake is Iceberg."""
    iceberg = _check_as_of(root, as_of)
    files = True
    if iceberg:  # a rest or glue catalog: no file sandbox on its connections (docs/security.md)
        from lakewrap.execute.iceberg import IcebergLake

        files = IcebergLake.open(root.resolve(), read_only=True).sandbox() is not None
    check_read_only(text, files=files)
    return iceberg


def _check_as_of(root: Path, as_of: str | None) -> bool:
    """Whether the project is on Iceberg; ``as_of`` (a run id or snapshot id) is refused on DuckLake."""
    iceberg = _iceberg(root)
    if as_of is not None and not iceberg:
        raise PlanError("--as-of is implemented for Iceberg lakes only",
                        hint="on a DuckLake, read a past snapshot with `FROM t AT (VERSION => n)`")
    return iceberg


def query(root: Path, text: str, as_of: str | None = None) -> QueryResult:
    """Run one read-only SELECT against the lake (two-part names resolve in the lake).

    On Iceberg, ``as_of`` (a run id or a snapshot id) reads every table as it stood when that run
    or snapshot committed.
    """
    root = require_project(root)
    if _check_query(root, text, as_of):
        from lakewrap.iceberg_state import query_cursor

        result: QueryResult = query_cursor(root, text, as_of,
                                           lambda c: QueryResult([d[0] for d in c.description], c.fetchall()))
        return result
    lake = Lake.open(root.resolve(), read_only=True)
    con = lake.connect()
    try:
        cursor = con.execute(text)
        return QueryResult([d[0] for d in cursor.description], cursor.fetchall())
    except Exception as exc:
        raise ExecutionError(lake.redact(str(exc)).strip(), hint=sandbox.access_hint(str(exc))) from None
    finally:
        lake.close(con)


def query_arrow(root: Path, text: str, as_of: str | None = None) -> Any:
    """The same as :func:`query`, as a pyarrow Table."""
    root = require_project(root)
    if _check_query(root, text, as_of):
        from lakewrap.iceberg_state import query_cursor

        return query_cursor(root, text, as_of, lambda c: c.to_arrow_table())
    lake = Lake.open(root.resolve(), read_only=True)
    con = lake.connect()
    try:
        return con.execute(text).to_arrow_table()
    except Exception as exc:
        raise ExecutionError(lake.redact(str(exc)).strip(), hint=sandbox.access_hint(str(exc))) from None
    finally:
        lake.close(con)


@dataclass
class ModelStatus:
    model: str
    target: str
    strategy: str
    partitions: list[str] = field(default_factory=list)
    gaps: list[str] = field(default_factory=list)
    last_run: str | None = None
    last_committed_at: str | None = None
    failures: list[dict[str, Any]] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)  # partitions whose inputs changed (lakewrap.stale)
    stale_reasons: dict[str, list[str]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _state_rows(con: Any, statement: str, params: dict[str, Any] | None = None) -> list[tuple[Any, ...]]:
    try:
        return list(con.execute(statement, params).fetchall() if params else con.execute(statement).fetchall())
    except Exception as exc:
        if "does not exist" in str(exc):
            return []  # nothing has run yet
        raise


def status(root: Path, selectors: tuple[str, ...] = (), now: datetime | None = None) -> list[ModelStatus]:
    """Per model: materialized partitions, gaps, the last run, failures since the last success."""
    root = require_project(root)
    now = now or datetime.now(timezone.utc)
    project = load_project(root, None)
    if _iceberg(root):
        from lakewrap.execute.iceberg import IcebergLake
        from lakewrap.iceberg_state import status_rows

        ice = IcebergLake.open(root, read_only=True)

        def rows_of(target: str) -> list[tuple[Any, ...]]:
            return list(status_rows(ice, target))

        rows = _status(root, project, selectors, now, rows_of)
        if any(r.last_run for r in rows):
            from lakewrap.stale import detect_at

            _show_stale(rows, detect_at(root, project, project.select(selectors)))
        return rows
    lake = Lake.open(root, read_only=True)
    con = lake.connect()
    try:
        rows = _status(root, project, selectors, now,
                       lambda target: _state_rows(con, sql.materialized_partitions(), {"target": target}))
        if any(r.last_run for r in rows):
            from lakewrap.stale import detect_on

            _show_stale(rows, detect_on(lake, con, project, project.select(selectors)))
        return rows
    finally:
        lake.close(con)


def _show_stale(rows: list[ModelStatus], found: dict[str, Any]) -> None:
    """Each model's stale partitions (:mod:`lakewrap.stale`), with why."""
    for r in rows:
        model = found[r.target.lower()]
        r.stale = [p or "whole table" for p in model.values()]
        r.stale_reasons = {p or "whole table": model.partitions[p] for p in model.values()}


def _status(root: Path, project: Any, selectors: tuple[str, ...], now: datetime,
            rows_of: Any) -> list[ModelStatus]:
    out: list[ModelStatus] = []
    for spec in project.select(selectors):
        target = str(spec.target)
        st = ModelStatus(spec.path, target, spec.strategy.kind)
        rows = rows_of(target)
        st.partitions = sorted({r[0] for r in rows if r[0] is not None})
        if rows:
            last = max(rows, key=lambda r: r[2])
            st.last_run, st.last_committed_at = last[1], str(last[2])
        part = spec.partition
        if isinstance(part, TimePartitioning) and (part.start or st.partitions):
            grain = Grain(part.grain)
            first = parse_partition(grain, part.start or st.partitions[0], part.tz)
            last_p = latest_complete(grain, now, part.tz)
            done = set(st.partitions)
            if first <= last_p:
                st.gaps = [p.value for p in partition_range(first, last_p) if p.value not in done]
        st.failures = failures_since(root, target, st.last_committed_at)
        out.append(st)
    return out


def failures_since(root: Path, target: str, committed_at: str | None) -> list[dict[str, Any]]:
    """Failed steps of ``target`` recorded in ``target/run/*/results.json`` after its last commit."""
    out: list[dict[str, Any]] = []
    for path in sorted((root / "target" / "run").glob("*/results.json")):
        try:
            report = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if committed_at is not None and str(report.get("started_at", "")) <= committed_at.replace(" ", "T"):
            continue
        for r in report.get("results", []):
            if r.get("target") == target and r.get("status") == "failed":
                out.append({"run_id": report.get("run_id"), "partition": r.get("partition"), "error": r.get("error")})
    return out


def history(root: Path, model: str) -> list[dict[str, Any]]:
    """The materializations of one model, newest first, with their DuckLake (or Iceberg) snapshot ids."""
    root = require_project(root)
    if _iceberg(root):
        from lakewrap import iceberg_state

        return iceberg_state.history(root, model)
    project = load_project(root, None)
    specs = project.select([model])
    if len(specs) != 1:
        raise PlanError(f"`{model}` names {len(specs)} models", hint="use schema.name")
    spec = specs[0]
    lake = Lake.open(root, read_only=True)
    con = lake.connect()
    try:
        rows = _state_rows(con, sql.history(lake.alias), {"target": str(spec.target)})
    finally:
        lake.close(con)
    keys = ["snapshot_id", "run_id", "partition", "strategy", "rows_inserted", "rows_updated", "rows_deleted",
            "sql_sha256", "committed_at", "pins"]
    out = []
    for r in rows:
        item = dict(zip(keys, r, strict=True))
        item["pins"] = json.loads(item["pins"]) if item["pins"] else {}
        item["committed_at"] = str(item["committed_at"])
        out.append(item)
    return out
