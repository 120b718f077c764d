"""Read-only views of a lake: ``query``, ``status`` and ``history``.

Everything here reads what the lake itself recorded, through the project's substrate
(:mod:`lakewrap.substrates`: its reads and its state store of typed records); nothing is kept in a
side file that could disagree with the data.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from lakewrap.compile import load_project
from lakewrap.errors import PlanError, UnsupportedError
from lakewrap.execute import sandbox
from lakewrap.freshness import judge, last_committed
from lakewrap.partitions import Grain, latest_complete, parse_partition, partition_range
from lakewrap.project import require_project
from lakewrap.provenance import run_or_snapshot
from lakewrap.spec import TimePartitioning
from lakewrap.substrates import of_project


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


def _query(root: Path, text: str, as_of: str | None, fetch: Any) -> Any:
    """``fetch(cursor)`` of one read-only statement on the project's lake, optionally as of a run
    or snapshot (:func:`lakewrap.provenance.run_or_snapshot`)."""
    root = require_project(root).resolve()
    ref = run_or_snapshot(as_of) if as_of is not None else None
    sub = of_project(root)
    sub.check_as_of(ref)
    check_read_only(text, files=sub.file_sandbox(root))
    return sub.query(root, text, ref, fetch)


def query(root: Path, text: str, as_of: str | None = None) -> QueryResult:
    """Run one read-only SELECT against the lake (two-part names resolve in the lake).

    On Iceberg, ``as_of`` (a run id or a snapshot id) reads every table as it stood when that run
    or snapshot committed.
    """
    result: QueryResult = _query(root, text, as_of, lambda c: QueryResult([d[0] for d in c.description],
                                                                            c.fetchall()))
    return result


def query_arrow(root: Path, text: str, as_of: str | None = None) -> Any:
    """The same as :func:`query`, as a pyarrow Table."""
    return _query(root, text, as_of, lambda c: c.to_arrow_table())


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
    # lakewrap.freshness: ok | warn | error | never against the model's `-- freshness` (None: no policy)
    freshness: str | None = None
    age_seconds: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def status(root: Path, selectors: tuple[str, ...] = (), now: datetime | None = None) -> list[ModelStatus]:
    """Per model: materialized partitions, gaps, the last run, failures since the last success."""
    root = require_project(root)
    now = now or datetime.now(timezone.utc)
    project = load_project(root, None)
    sub = of_project(root)
    with sub.state_reader(sub.open(root, read_only=True)) as read:
        rows = _status(root, project, selectors, now,
                       lambda target: [(m.partition, m.run_id, m.committed_at) for m in read(target)])
    if any(r.last_run for r in rows):
        try:
            found = sub.stale(root, project, project.select(selectors))
        except UnsupportedError:  # a substrate without a change feed: no stale column
            found = None
        if found is not None:
            _show_stale(rows, found)
    return rows


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
        fresh = judge("model", target, "last materialization", last_committed([str(r[2]) for r in rows]),
                      spec.freshness, now)
        st.age_seconds = fresh.age_seconds
        st.freshness = fresh.state if spec.freshness is not None else None
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
    """The materializations of one model, newest first, with their snapshot ids."""
    root = require_project(root)
    project = load_project(root, None)
    specs = project.select([model])
    if len(specs) != 1:
        raise PlanError(f"`{model}` names {len(specs)} models", hint="use schema.name")
    sub = of_project(root)
    found = sub.materializations(sub.open(root, read_only=True), str(specs[0].target))
    keys = ("snapshot_id", "run_id", "partition", "strategy", "rows_inserted", "rows_updated", "rows_deleted",
            "sql_sha256", "committed_at", "pins")
    return [{k: getattr(m, k) for k in keys} for m in reversed(found)]
