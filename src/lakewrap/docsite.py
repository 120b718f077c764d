"""``lakewrap docs generate``: what the documentation site shows, gathered read-only.

:func:`collect` builds one JSON-ready dictionary (the site's data, also written as
``target/docs/data.json``): every model and source with its annotations, description, columns
(types and descriptions, :mod:`lakewrap.lineage`), compiled SQL, tests, upstreams and downstreams
and column lineage; when a lake exists, what it recorded: partitions materialized, stale and
missing, recent materializations with row counts (the substrate's ``materializations()`` and
``stale()`` through :mod:`lakewrap.inspect`) and each test's last outcome (the runs' results files
under ``target/run/``). Nothing is written to the lake. :func:`layout` places the DAG in layers for
the graph. :mod:`lakewrap.docsite_html` renders the pages.
"""

from __future__ import annotations

import functools
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from lakewrap.lineage import Lineage, Relation
from lakewrap.spec import ModelSpec, TimePartitioning

STRIP_AFTER = 7  # partitions shown after the latest materialized one
STRIP_MAX = 120  # cells of a calendar strip at most (the most recent ones)
HISTORY = 10  # materializations listed per model


def collect(root: Path, now: datetime | None = None) -> dict[str, Any]:
    """Everything the site shows for the project at ``root``."""
    from lakewrap.compile import compile_project, load_project
    from lakewrap.lineage import build, lake_columns
    from lakewrap.output import plan_sql
    from lakewrap.project import require_project

    root = require_project(root)
    now = now or datetime.now(timezone.utc)
    project = load_project(root, None)
    lake, note = _lake(root)
    graph = build(project, root, lake_columns(root) if lake else None)
    compiled = {p.target.lower(): p for p in compile_project(root, now=now)}
    facts = _lake_facts(root, now, [str(s.target) for s in project.order()]
                        + sorted({str(u) for s in project.models.values() for u in s.all_upstreams
                                  if u.key not in project.models})) if lake else {}
    outcomes = last_test_outcomes(root)
    down = project.downstream()
    models = []
    for spec in project.order():
        key = spec.target.key
        plan = compiled.get(key)
        models.append({
            **_relation(graph, graph.relations[key]),
            "strategy": spec.strategy.kind, "materialized": spec.materialized, "tags": list(spec.tags),
            "description": spec.description, "annotations": header_lines(root, spec),
            "partitioning": _partitioning(spec), "sql": spec.sql.strip(),
            "compiled": plan_sql(plan) if plan is not None else None,
            "compiled_for": (plan.window.value if plan is not None and plan.window is not None else None),
            "upstream": sorted(u.key for u in spec.all_upstreams),
            "downstream": sorted(down[key]),
            "tests": [_test(t, root, spec, outcomes.get(key, {})) for t in spec.tests],
            **facts.get(key, {}),
        })
    readers: dict[str, set[str]] = {}
    for spec in project.models.values():
        for u in spec.all_upstreams:
            readers.setdefault(u.key, set()).add(spec.target.key)
    sources = []
    for key in sorted(set(readers) | {k for k, r in graph.relations.items() if r.kind != "model"}):
        if key in project.models:
            continue
        rel = graph.relations.get(key) or Relation(key, key, "table", None, None)
        sources.append({**_relation(graph, rel), "downstream": sorted(readers.get(key, ())), "upstream": [],
                        **facts.get(key, {})})
    return {"project": root.name, "generated_at": now.isoformat(timespec="seconds"), "lake": note,
            "has_lake": lake, "models": models, "sources": sources, "runs": recent_runs(root) if lake else [],
            "graph": layout([(m["key"], m["upstream"]) for m in models], [s["key"] for s in sources])}


def _lake(root: Path) -> tuple[bool, str]:
    """Whether the project has a lake to read, and the sentence the site says about it."""
    from lakewrap.errors import LakewrapError
    from lakewrap.substrates import of_project

    try:
        of_project(root).open(root, read_only=True).check_exists()
    except LakewrapError as exc:
        return False, f"No lake to read ({exc.message}): partitions, history and test outcomes are not shown."
    return True, "Partitions, history and test outcomes as the lake recorded them when the site was generated."


def _relation(graph: Lineage, rel: Relation) -> dict[str, Any]:
    cols = rel.columns
    lineage: dict[str, Any] = {}
    for col in cols or {}:
        up = graph.upstream(rel.key, col)
        down = graph.downstream(rel.key, col)
        lineage[col] = {"upstream": up.to_dict(), "downstream": down.to_dict(),
                        "sources": up.leaves() if up.next else []}
    return {"key": rel.key, "name": rel.name, "kind": rel.kind, "path": rel.path,
            "columns": None if cols is None else [
                {"name": c, "type": t, "description": rel.descriptions.get(c)} for c, t in cols.items()],
            "columns_note": graph.problems.get(rel.key), "lineage": lineage}


def header_lines(root: Path, spec: ModelSpec) -> list[str]:
    """The model file's header lines, as written."""
    try:
        lines = (root / spec.path).read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    return [line for line in lines[: spec.body_line - 1] if line.strip()]


def _partitioning(spec: ModelSpec) -> str | None:
    p = spec.partition
    if p is None:
        return None
    if isinstance(p, TimePartitioning):
        extra = (f" start={p.start}" if p.start else "") + (f" lookback={p.lookback}" if p.lookback else "")
        return f"{getattr(p.grain, 'value', p.grain)} key={p.key} tz={p.tz}{extra}"
    return f"dynamic key={p.key}"


def _test(test: Any, root: Path, spec: ModelSpec, outcomes: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """One ``-- test`` line: its kind, its text as written, and the last outcome a run recorded."""
    try:
        line = (root / spec.path).read_text(encoding="utf-8").splitlines()[test.line - 1]
    except (OSError, IndexError):
        line = ""
    args = line.strip().removeprefix("--").strip().removeprefix("test").strip().removeprefix(test.kind).strip()
    return {"kind": test.kind, "severity": test.severity, "line": test.line, "args": args,
            "last": outcomes.get(test.line)}


def last_test_outcomes(root: Path) -> dict[str, dict[int, dict[str, Any]]]:
    """Per target and test line, the last outcome a run recorded in ``target/run/*/results.json``."""
    out: dict[str, dict[int, dict[str, Any]]] = {}
    for path in sorted((root / "target" / "run").glob("*/results.json")):  # run ids sort by time
        try:
            report = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        for r in report.get("results", []):
            for t in r.get("tests") or []:
                out.setdefault(str(r.get("target", "")).lower(), {})[int(t.get("line", 0))] = {
                    "status": t.get("status"), "failures": t.get("failures", 0), "run_id": report.get("run_id"),
                    "partition": r.get("partition")}
    return out


def _lake_facts(root: Path, now: datetime, targets: list[str]) -> dict[str, dict[str, Any]]:
    """Per relation: the calendar strip (models) and the recent history (every target the lake
    recorded materializations of, seeds too), read through the substrate's state store."""
    from lakewrap.errors import LakewrapError
    from lakewrap.inspect import status
    from lakewrap.substrates import of_project

    out: dict[str, dict[str, Any]] = {}
    try:
        rows = status(root, now=now)
        sub = of_project(root)
        with sub.state_reader(sub.open(root, read_only=True)) as read:
            found = {t.lower(): read(t) for t in targets}
    except LakewrapError:
        return out
    for target, records in found.items():
        newest = sorted(records, key=lambda m: str(m.committed_at), reverse=True)[:HISTORY]
        out[target] = {"history": [_history_row(m) for m in newest]}
    for st in rows:
        out.setdefault(st.target.lower(), {}).update(
            {"strip": strip(st.partitions, st.gaps, st.stale), "stale": st.stale, "failures": st.failures})
    return out


def recent_runs(root: Path) -> list[dict[str, Any]]:
    """The ten latest runs of the run log (``lakewrap_runs``, read-only), newest first."""
    from lakewrap.errors import LakewrapError
    from lakewrap.inspect import query

    try:
        result = query(root, "SELECT run_id, command, status, started_at, steps, succeeded, failed, skipped "
                             "FROM lakewrap_runs ORDER BY started_at DESC LIMIT 10")
    except LakewrapError:  # a run log this substrate keeps elsewhere, or none yet
        return []
    return [dict(zip(result.columns, (str(v) if v is not None else None for v in row), strict=True))
            for row in result.rows]


def _history_row(m: Any) -> dict[str, Any]:
    keys = ("snapshot_id", "run_id", "partition", "strategy", "rows_inserted", "rows_updated", "rows_deleted",
            "committed_at")
    return {k: (str(getattr(m, k)) if k == "committed_at" else getattr(m, k)) for k in keys}


def strip(done: list[str], gaps: list[str], stale: list[str]) -> dict[str, Any]:
    """The calendar strip: from the first partition to a few past the latest materialized one (at most
    :data:`STRIP_MAX` cells, the latest), each ``materialized``, ``stale`` or ``gap``; the gaps after it
    are counted."""
    cells = sorted(set(done) | set(gaps))
    if not cells:
        return {"cells": [], "later_gaps": 0, "last_gap": None}
    end = cells.index(max(done)) + 1 + STRIP_AFTER if done else min(len(cells), STRIP_AFTER)
    shown, later = cells[:end], [c for c in cells[end:] if c in set(gaps)]
    bad, ok = set(stale), set(done)
    return {"cells": [{"value": c, "state": "stale" if c in bad else "materialized" if c in ok else "gap"}
                      for c in shown[-STRIP_MAX:]],
            "later_gaps": len(later), "last_gap": later[-1] if later else None}


def _barycenter(key: str, ups: dict[str, list[str]], pos: dict[str, int]) -> tuple[float, str]:
    parents = [pos[u] for u in ups.get(key, []) if u in pos]
    return (sum(parents) / len(parents) if parents else float(pos[key]), key)


def layout(models: list[tuple[str, list[str]]], sources: list[str]) -> dict[str, Any]:
    """A layered drawing of the DAG: sources in layer 0, each model one layer past its deepest
    upstream; within a layer nodes are ordered by the mean position of their upstreams (two sweeps).
    Returns nodes with ``x``, ``y`` and edges ``[from, to]``."""
    from lakewrap.graph import layers as layers_of

    layer = layers_of(models, sources)  # models come upstream first
    ups = dict(models)
    layers: dict[int, list[str]] = {}
    for key in layer:
        layers.setdefault(layer[key], []).append(key)
    for i in layers:
        layers[i].sort()
    for _ in range(2):
        pos = {k: n for row in layers.values() for n, k in enumerate(row)}
        for i in sorted(layers)[1:]:
            layers[i].sort(key=functools.partial(_barycenter, ups=ups, pos=pos))
    nodes = [{"key": k, "layer": i, "x": 40 + i * 280, "y": 40 + n * 70, "kind": "model" if k in ups else "source"}
             for i in sorted(layers) for n, k in enumerate(layers[i])]
    edges = [[u, k] for k, upstream in models for u in upstream if u in layer]
    width = 40 + (max(layers, default=0) + 1) * 280
    height = 40 + max((len(r) for r in layers.values()), default=1) * 70
    return {"nodes": nodes, "edges": edges, "width": width, "height": height}
