"""Compile a project (or a selection of it) into :class:`CompiledPlan` objects, with a content cache.

Compiled SQL does not depend on the partition value (windows are bound parameters), so a model's
statements are cached by the sha256 of its file, lakewrap's version and the substrate; a warm
compile re-reads the cache, checks each file's hash, and only re-binds parameters.
Never imports duckdb, pyarrow or pyiceberg.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from lakewrap import __version__
from lakewrap.compilers import compiler_for
from lakewrap.compilers.artifacts import CompiledPlan, CompiledStatement, Window
from lakewrap.errors import PlanError
from lakewrap.plan import Plan, Substrate, make_plan
from lakewrap.project import Project, discover
from lakewrap.spec import ModelSpec, TimePartitioning

CACHE_FILE = Path("target") / "cache" / "compile-v1.json"
# Bump when a change alters compiled output or the cached shape without a version change.
CACHE_FORMAT = 2


@dataclass
class _Cache:
    path: Path
    entries: dict[str, dict[str, object]]
    dirty: bool = False

    @classmethod
    def open(cls, root: Path, enabled: bool) -> _Cache | None:
        if not enabled:
            return None
        path = root / CACHE_FILE
        try:
            data = json.loads(path.read_text())
            if data.get("version") != __version__ or data.get("format") != CACHE_FORMAT:
                raise ValueError
            entries = data["entries"]
        except (OSError, ValueError, KeyError, TypeError):
            entries = {}
        return cls(path, entries)

    def save(self) -> None:
        if not self.dirty:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"version": __version__, "format": CACHE_FORMAT, "entries": self.entries}))
            os.replace(tmp, self.path)
        except OSError:
            pass  # a read-only project still compiles; it just stays cold


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def load_project(root: Path, cache: _Cache | None) -> Project:
    """Parse every model, reusing cached specs whose file hash is unchanged."""
    root = root.resolve()
    if cache is None:
        return Project.load(root)
    from lakewrap.parse import parse_model

    project = Project(root)
    specs: list[ModelSpec] = []
    for path in discover(root):
        raw = path.read_bytes()
        rel = path.relative_to(root).as_posix()
        digest = _sha(raw)
        entry = cache.entries.get(rel)
        if entry is not None and entry.get("sha") == digest:
            specs.append(ModelSpec.model_validate_json(str(entry["spec"])))
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            text = None  # parse_model reports it with a location
        spec = parse_model(path, root, text=text)
        cache.entries[rel] = {"sha": digest, "spec": spec.model_dump_json(), "plans": {}}
        cache.dirty = True
        specs.append(spec)
    return _index(project, specs)


def _index(project: Project, specs: list[ModelSpec]) -> Project:
    from lakewrap.errors import Location, ProjectError

    for spec in specs:
        other = project.models.get(spec.target.key)
        if other is not None:
            raise ProjectError(
                f"two models write `{spec.target}`: {other.path} and {spec.path}",
                location=Location(spec.path),
                hint="rename one of the files or give it a `-- target`",
            )
        project.models[spec.target.key] = spec
    return project


def plan_for(spec: ModelSpec, substrate: Substrate, partition: str | None, now: datetime) -> Plan:
    """The plan of one model; ``partition`` only applies to time-partitioned models."""
    value = partition if isinstance(spec.partition, TimePartitioning) else None
    try:
        return make_plan(spec, substrate=substrate, partition=value, now=now)
    except PlanError as exc:
        raise PlanError(f"{spec.path}: {exc.message}", hint=exc.hint) from None


def compile_plan(plan: Plan, cache: _Cache | None = None) -> CompiledPlan:
    """Compile one plan, reusing cached statement text when the model is unchanged."""
    compiler = compiler_for(plan.substrate)
    entry = cache.entries.get(plan.model.path) if cache is not None else None
    key = f"{plan.substrate}:{','.join(plan.columns) if plan.columns else '*'}"
    cached = entry["plans"].get(key) if entry is not None else None  # type: ignore[attr-defined]
    if cached is None:
        compiled = compiler.compile(plan)
        if entry is not None and cache is not None:
            entry["plans"][key] = compiled.model_dump(mode="json", exclude={"window"})  # type: ignore[index]
            cache.dirty = True
        return compiled
    return _rebind(CompiledPlan.model_validate(cached | {"window": None}), plan)


def _rebind(compiled: CompiledPlan, plan: Plan) -> CompiledPlan:
    """Attach this plan's parameter values and window to cached statements."""
    available = plan.params()
    statements = tuple(
        s.model_copy(update={"params": {k: available[k] for k in s.params}})
        for s in compiled.statements
    )
    b = plan.binding
    window = None
    if b is not None:
        window = Window(kind=b.kind, value=b.value, start=b.start.isoformat(), end=b.end.isoformat(),
                        closed="[start, end)" if b.kind == "time" else "(start, end]", lookback=b.lookback)
    return compiled.model_copy(update={"statements": statements, "window": window})


def compile_project(
    root: Path,
    selectors: Sequence[str] = (),
    *,
    exclude: Sequence[str] = (),
    partition: str | None = None,
    substrate: Substrate = "ducklake",
    now: datetime | None = None,
    use_cache: bool = True,
) -> list[CompiledPlan]:
    """Compile the selected models of the project at ``root``, in dependency order.

    Example:
        >>> plans = compile_project(Path("examples/shop"), ["orders"], partition="2024-01-02")  # doctest: +SKIP
        >>> print(plans[0].statements[-2].sql)  # doctest: +SKIP
    """
    now = now or datetime.now(timezone.utc)
    cache = _Cache.open(root.resolve(), use_cache)
    project = load_project(root, cache)
    selected = project.select(selectors, exclude)
    plans = [compile_plan(plan_for(spec, substrate, partition, now), cache) for spec in selected]
    if cache is not None:
        cache.save()
    return plans
