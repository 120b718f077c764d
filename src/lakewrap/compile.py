"""Compile a project (or a selection of it) into :class:`CompiledPlan` objects, with a content cache.

Compiled SQL does not depend on the partition value (windows are bound parameters), so a model's
statements are cached as a template keyed by the sha256 of its file (:mod:`lakewrap.compilecache`).
A warm compile reads the cache once, checks each file's hash, and only re-binds parameters.

A cold compile parses (and, when the whole project is compiled, compiles) the changed models in
forked worker processes, one per available core (Linux only; ``LAKEWRAP_JOBS=1`` or ``jobs=1``
keeps it in one process), which this process imports sqlglot, duckdb and the compilers for before
forking. A worker parses :data:`CHUNK` models, has DuckDB check the SELECTs they embed in batches
(``select_edits.prepare_selects``), then compiles them. Results are merged back in file order and
any model that failed in a worker is redone in this process, so output and errors are the same as
a serial compile.

Imports duckdb only for its parser (:mod:`lakewrap.grammar`, an in-memory connection that opens no
lake and loads no extension), and only when a model file is parsed or a plan compiled afresh; never
pyarrow or pyiceberg.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from lakewrap import fanout
from lakewrap.compilecache import Template, _Cache, _Entry, _json_text
from lakewrap.errors import ModelError, PlanError
from lakewrap.plan import Plan, Substrate, make_plan
from lakewrap.project import Project, model_files, require_project
from lakewrap.spec import ModelSpec, TimePartitioning

if TYPE_CHECKING:
    from lakewrap.compilers.artifacts import CompiledPlan, Window
    from lakewrap.compilers.base import Compiler

def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --- fan-out over cores (lakewrap.fanout) ---------------------------------------------------------


def _before_fork(substrate: Substrate | None) -> None:
    """Import what the workers parse and compile with once, before they fork, instead of once in
    each (sqlglot, duckdb, the compilers: ~0.3 CPU s a process), and load the keyword registry."""
    from lakewrap import duckdb_parser, parse
    from lakewrap.annotations.registry import default_registry

    default_registry()
    duckdb_parser.load()
    if substrate is not None:
        _compiler(substrate)
    assert parse.parse_model is not None


# --- loading --------------------------------------------------------------------------------------


@dataclass
class _Precompile:
    """Compile each parsed model too (for a whole-project compile), with these plan inputs."""

    substrate: Substrate
    partition: str | None
    now: datetime


@dataclass
class _Parsed:
    """One model parsed (and maybe compiled): as objects in this process, as JSON through a pipe.

    From a worker, ``templates`` come with ``templates_json``, their text in the cache, encoded there
    rather than in this process.
    """

    spec: ModelSpec | None = None
    plan: Plan | None = None
    compiled: CompiledPlan | None = None
    spec_json: str | None = None
    templates: dict[str, Template] = field(default_factory=dict)
    templates_json: str | None = None

    def spec_object(self) -> ModelSpec:
        return self.spec if self.spec is not None else ModelSpec.decode(json.loads(self.spec_json or ""))


def _template(compiled: CompiledPlan) -> Template:
    doc = compiled.dump(exclude={"window"})
    for st in (*doc["statements"], *doc.get("commits", ())):
        st["params"] = list(st["params"])
    return doc


def _plan_key(plan: Plan) -> str:
    key = f"{plan.substrate}:{','.join(plan.columns) if plan.columns else '*'}"
    if plan.test_sql:  # `-- test sql` files are part of the compiled plan
        key += ":" + _sha(json.dumps(plan.test_sql, sort_keys=True).encode())
    return key


def _parse_one(path: Path, root: Path, text: str | None, rel: str) -> _Parsed | None:
    """Parse one model (a worker's unit of work); None when it fails, to be redone for its error."""
    from lakewrap.parse import parse_model

    try:
        return _Parsed(parse_model(path, root, text=text, rel=rel))
    except Exception:
        return None


def _parse_many(models: Sequence[tuple[Path, str | None, str]], root: Path,
                pre: _Precompile | None) -> list[_Parsed | None]:
    """Parse (path, text, rel) models, and with ``pre`` compile them too, a :data:`CHUNK` at a time."""
    out: list[_Parsed | None] = []
    for chunk in fanout.chunks(models):
        parsed = [_parse_one(path, root, text, rel) for path, text, rel in chunk]
        if pre is not None:
            _compile_parsed([p for p in parsed if p is not None], root, pre)
        out += parsed
    return out


def _compile_parsed(parsed: list[_Parsed], root: Path, pre: _Precompile) -> None:
    """Plan and compile parsed models; one that fails is planned and compiled again, in dependency
    order, if it is selected (and raises there)."""
    for got in parsed:
        if got.spec is not None:
            with contextlib.suppress(Exception):
                got.plan = plan_for(got.spec, pre.substrate, pre.partition, pre.now, root)
    planned = [(got, got.plan) for got in parsed if got.plan is not None]
    _prepare_selects([plan for _, plan in planned])
    for got, plan in planned:
        with contextlib.suppress(Exception):
            got.compiled = _compiler(plan.substrate).compile(plan)


def _prepare_selects(plans: Sequence[Plan]) -> None:
    """Check the SELECTs these plans' statements embed ahead of compiling them one by one: DuckDB
    parses them in batches (``select_edits.prepare_selects``) and ``Compiler.query`` finds the
    checked text it asks ``grammar.edited_select`` for. A guess that misses costs time, never a check."""
    from lakewrap.select_edits import prepare_selects
    from lakewrap.sqltext import parse_body

    requests: list[tuple[str, bool, str | None]] = []
    for plan in plans:
        spec = plan.model
        if spec.strategy.kind == "literal":
            continue  # its statements run as written: nothing embedded
        try:
            statements = parse_body(spec.sql, spec.path)  # the parse's trees, not parsed again
            catalog = _compiler(plan.substrate).caps.catalog
        except Exception:
            continue
        if statements:
            requests.append((statements[0].text, plan.binding is not None, catalog))
    prepare_selects(requests)


def _to_wire(parsed: _Parsed | None) -> _Parsed | None:
    """What a worker sends back: JSON texts and templates, which unpickle without validation."""
    if parsed is None or parsed.spec is None:
        return None
    wire = _Parsed(spec_json=parsed.spec.dump_json())
    if parsed.plan is not None and parsed.compiled is not None:
        wire.templates[_plan_key(parsed.plan)] = _template(parsed.compiled)
    wire.templates_json = _json_text(wire.templates)
    return wire


def load_project(root: Path, cache: _Cache | None, *, jobs: int | None = None,
                 precompile: _Precompile | None = None) -> Project:
    """Parse every model, reusing cached specs whose file hash is unchanged.

    Changed models are parsed in parallel (see the module docs). Errors are raised in file order,
    as a serial parse raises them: the first bad file, or the second of two files writing one table.
    """
    from lakewrap.errors import Location, ProjectError

    root = root.resolve()
    cache = cache if cache is not None else _Cache.memory()
    files = model_files(root)
    paths = [path for path, _ in files]
    prefix = str(root) + os.sep
    old = cache.entries
    fresh: dict[str, _Entry] = {}
    rels: list[str] = []
    hits: dict[int, ModelSpec] = {}
    misses: list[tuple[int, Path, str | None]] = []  # (index, path, text)
    for i, path in enumerate(paths):
        raw = path.read_bytes()
        text_path = str(path)
        rel = text_path[len(prefix):] if text_path.startswith(prefix) else path.relative_to(root).as_posix()
        if os.sep != "/":  # pragma: no cover - Windows
            rel = rel.replace(os.sep, "/")
        rels.append(rel)
        digest = _sha(raw)
        entry = old.get(rel)
        if entry is not None and entry.sha == digest and entry.spec_json is not None:
            try:
                hits[i] = ModelSpec.decode(json.loads(entry.spec_json))
                fresh[rel] = entry
                continue
            except (ValueError, TypeError, KeyError, AttributeError):
                pass  # a damaged entry: parse the file again
        try:
            text: str | None = raw.decode("utf-8")
        except UnicodeDecodeError:
            text = None  # parse_model reports it with a location
        fresh[rel] = _Entry(digest, _plans={})
        misses.append((i, path, text))

    n_jobs = fanout.jobs(jobs) if len(misses) >= 2 * fanout.MIN_PER_JOB else 1
    if n_jobs > 1:
        _before_fork(precompile.substrate if precompile is not None else None)
    parsed = fanout.fan_out(misses, lambda ms: _parse_many([(m[1], m[2], files[m[0]][1]) for m in ms], root,
                                                           precompile), n_jobs, _to_wire)
    done: dict[int, _Parsed | None] = {m[0]: p for m, p in zip(misses, parsed, strict=True)}

    project = Project(root)
    for i, path in enumerate(paths):
        rel = rels[i]
        entry = fresh[rel]
        if i in done:
            got = done[i]
            if got is None:  # failed in a worker (or the worker died): parse here, for its error
                from lakewrap.parse import parse_model

                got = _Parsed(parse_model(path, root, text=_text_of(path), rel=files[i][1]))
            spec = got.spec_object()
            entry.plans.update(got.templates)  # a fresh entry: these are all its templates
            entry.plans_json = got.templates_json
            if got.plan is not None and got.compiled is not None:
                key = _plan_key(got.plan)
                cache.ready[(got.plan.model.path, key)] = (got.plan, got.compiled)
                if cache.path is not None:
                    entry.add(key, _template(got.compiled))
            if cache.path is not None:
                entry.spec_json = got.spec_json if got.spec_json is not None else spec.dump_json()
        else:
            spec = hits[i]
        other = project.models.get(spec.target.key)
        if other is not None:
            raise ProjectError(
                f"two models write `{spec.target}`: {other.path} and {spec.path}",
                location=Location(spec.path),
                hint="rename one of the files or give it a `-- target`",
            )
        project.models[spec.target.key] = spec
    from lakewrap.pyfiles import add_to

    add_to(project, save=cache.path is not None)  # models/**/*.py, registered functions (docs/python-models.md)
    if misses or fresh.keys() != old.keys():
        cache.dirty = True
    cache.entries = fresh
    return project


def _text_of(path: Path) -> str | None:
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        return None


# --- planning and compiling -----------------------------------------------------------------------


def plan_for(spec: ModelSpec, substrate: Substrate, partition: str | None, now: datetime,
             root: Path | None = None) -> Plan:
    """The plan of one model; ``partition`` only applies to time-partitioned models.

    With ``root``, the files of the model's ``-- test sql`` lines are read into the plan.
    """
    value = partition if isinstance(spec.partition, TimePartitioning) else None
    try:
        plan = make_plan(spec, substrate=substrate, partition=value, now=now)
    except PlanError as exc:
        raise PlanError(f"{spec.path}: {exc.message}", hint=exc.hint) from None
    if root is not None and spec.tests:
        from lakewrap.testfiles import read_test_files

        plan = read_test_files(plan, root)
    return plan


def _compiler(substrate: str) -> Compiler:
    from lakewrap.compilers import compiler_for

    return compiler_for(substrate)


def compile_plan(plan: Plan, cache: _Cache | None = None) -> CompiledPlan:
    """Compile one plan, reusing cached statement text when the model is unchanged."""
    key = _plan_key(plan)
    if cache is not None and cache.ready:
        ready = cache.ready.pop((plan.model.path, key), None)
        if ready is not None and ready[0] == plan:
            return ready[1]
    entry = cache.entries.get(plan.model.path) if cache is not None else None
    cached = entry.plans.get(key) if entry is not None else None
    if cached is not None:
        try:
            return _from_template(cached, plan)
        except (KeyError, TypeError, ValueError, AttributeError):
            pass  # a damaged entry: compile afresh and replace it
    try:
        compiled = _compiler(plan.substrate).compile(plan)
    except RecursionError:
        from lakewrap.errors import Location, SqlError

        raise SqlError("the SQL is nested too deeply to compile",
                       location=Location(plan.model.path, plan.model.body_line),
                       hint="flatten the expression: fewer nested parentheses, subqueries or CASEs") from None
    if entry is not None and cache is not None and cache.path is not None:
        entry.add(key, _template(compiled))
        cache.dirty = True
    return compiled


def _window(plan: Plan) -> Window | None:
    from lakewrap.compilers.artifacts import window_of

    return window_of(plan.binding)


def _from_template(template: Template, plan: Plan) -> CompiledPlan:
    """A cached template with this plan's parameter values and window attached."""
    from lakewrap.compilers.artifacts import CompiledPlan

    available = plan.params()
    statements = [{**st, "params": {k: available[k] for k in st["params"]}} for st in template["statements"]]
    commits = [{**op, "params": {k: available[k] for k in op["params"]}} for op in template.get("commits", ())]
    return CompiledPlan.decode({**template, "statements": statements, "commits": commits, "window": _window(plan)})


@dataclass(frozen=True)
class Compiled:
    """What ``lakewrap compile`` prints: the plans, each selected model's (``owners[i]`` the model of
    ``plans[i]``), of ``project`` on ``substrate``."""

    project: Project
    substrate: Substrate
    owners: tuple[ModelSpec, ...]
    plans: list[CompiledPlan]


def compile_project(
    root: Path,
    selectors: Sequence[str] = (),
    *,
    exclude: Sequence[str] = (),
    partition: str | None = None,
    substrate: Substrate | None = None,
    now: datetime | None = None,
    use_cache: bool = True,
    jobs: int | None = None,
) -> list[CompiledPlan]:
    """Compile the selected models of the project at ``root``, in dependency order.

    ``substrate`` defaults to ``[lake] substrate`` of the project's ``lakewrap.toml`` (DuckLake
    without the file).

    ``jobs`` caps the worker processes of a cold compile (default: ``LAKEWRAP_JOBS``, else the
    available cores); the output does not depend on it.

    Example:
        >>> plans = compile_project(Path("examples/shop"), ["orders"], partition="2024-01-02")  # doctest: +SKIP
        >>> print(plans[0].statements[-2].sql)  # doctest: +SKIP
    """
    return compile_selection(root, selectors, exclude=exclude, partition=partition, substrate=substrate, now=now,
                             use_cache=use_cache, jobs=jobs).plans


def compile_selection(
    root: Path,
    selectors: Sequence[str] = (),
    *,
    exclude: Sequence[str] = (),
    partition: str | None = None,
    substrate: Substrate | None = None,
    now: datetime | None = None,
    use_cache: bool = True,
    jobs: int | None = None,
) -> Compiled:
    """:func:`compile_project`, with the project and the model of each plan."""
    root = require_project(root)  # a folder that is not a project gets no target/
    now = now or datetime.now(timezone.utc)
    if substrate is None:
        from lakewrap.config import load_config
        from lakewrap.substrates.registry import key

        substrate = key(load_config(root).lake)  # a registered substrate's name
    cache = _Cache.open(root.resolve(), use_cache) or _Cache.memory()
    # A whole-project compile compiles every model anyway: do it in the workers, beside the parse.
    pre = _Precompile(substrate, partition, now) if not selectors and not exclude else None
    with fanout.fewer_collections():
        project = load_project(root, cache, jobs=jobs, precompile=pre)
        selected = project.select(selectors, exclude)
        _check_contracts(root, project, selected, cache, substrate, partition, now)
        if pre is None:
            _precompile_selected(selected, cache, substrate, partition, now, jobs, root)
        out: list[CompiledPlan] = []
        for spec in selected:  # in dependency order: the first failing model is the one reported
            try:
                out.append(compile_plan(plan_for(spec, substrate, partition, now, root), cache))
            except ModelError as exc:
                from lakewrap.pymodels import compile_error

                raise compile_error(spec, exc) from None
    cache.save()
    return Compiled(project, substrate, tuple(selected), out)


def _check_contracts(root: Path, project: Project, selected: list[ModelSpec], cache: _Cache, substrate: Substrate,
                     partition: str | None, now: datetime) -> None:
    """Cross-model contracts (:mod:`lakewrap.contracts_graph`), skipped while no model file changed
    since the last check passed (the digest of every file's hash and of the selection)."""
    from lakewrap.contracts_graph import check_compile

    check_compile(root.resolve(), project, selected, substrate, partition, now, files_digest(cache, selected))


def files_digest(cache: _Cache | None, selected: Sequence[ModelSpec]) -> str | None:
    """A hash of every model file's hash and of the selection (None without a cache on disk): what
    a check over the whole project, such as the cross-model contracts, depends on."""
    if cache is None or cache.path is None:
        return None
    parts = sorted(f"{rel}\t{e.sha}" for rel, e in cache.entries.items())
    return _sha("\n".join([*parts, *(s.target.key for s in selected)]).encode())


def _precompile_selected(selected: list[ModelSpec], cache: _Cache, substrate: Substrate, partition: str | None,
                         now: datetime, jobs: int | None, root: Path | None = None) -> None:
    """Compile the selected models missing from the cache in parallel (a selection on a cold cache)."""
    missing: list[Plan] = []
    for spec in selected:
        entry = cache.entries.get(spec.path)
        if entry is None:
            continue
        try:
            plan = plan_for(spec, substrate, partition, now, root)
        except PlanError:
            continue  # raised again, in order, by compile_project
        if _plan_key(plan) not in entry.plans:
            missing.append(plan)
    n_jobs = fanout.jobs(jobs) if len(missing) >= 2 * fanout.MIN_PER_JOB else 1
    if n_jobs <= 1:
        _prepare_selects(missing)  # compile_plan does them one by one, with these SELECTs checked
        return
    _before_fork(substrate)

    def work(plans: Sequence[Plan]) -> list[CompiledPlan | None]:
        out: list[CompiledPlan | None] = []
        for chunk in fanout.chunks(plans):
            _prepare_selects(chunk)
            for plan in chunk:
                try:
                    out.append(_compiler(plan.substrate).compile(plan))
                except Exception:
                    out.append(None)  # compiled again in order by compile_plan, which raises the error
        return out

    def wire(compiled: CompiledPlan | None) -> Template | None:
        return None if compiled is None else _template(compiled)

    for plan, got in zip(missing, fanout.fan_out(missing, work, n_jobs, wire), strict=True):
        key = _plan_key(plan)
        entry = cache.entries[plan.model.path]
        if isinstance(got, dict):  # from a worker
            entry.add(key, got)
        elif got is not None:
            cache.ready[(plan.model.path, key)] = (plan, got)
            if cache.path is not None:
                entry.add(key, _template(got))
        cache.dirty = True
