"""``lakewrap show MODEL``: the model's SELECT run read-only, its first rows and column types.

The SELECT is the one a run embeds (``Compiler.preview``: ``SELECT * FROM (<the model's SELECT>)
LIMIT n``, window bounds and catalog as a run writes them), planned as a run plans the step (the
substrate's ``plan_step``: ``--partition`` or the latest complete partition, a dynamic model's
recorded watermark), checked by the sandbox of ``lakewrap query`` and run on the lake's read-only
connection, in the session the substrate gives ``lakewrap test`` (``test_session``): on DuckLake one
statement, which reads one snapshot of the lake; on Iceberg a scratch session whose views pin every
table the model reads at its current snapshot. Nothing is written: no snapshot, no run-log row, no
statement log.

With ``-- column`` contracts, each returned column is compared with its declaration as the run's
contract guard compares them (names case-insensitively, types as DuckDB spells them, no implicit
cast), and ``not_null`` against the rows shown (``docs/looking.md``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from lakewrap import __version__
from lakewrap.errors import PlanError, SelectionError, UnsupportedError
from lakewrap.execute.binding import inline
from lakewrap.listing import SCHEMA_VERSION
from lakewrap.spec import ModelSpec

DEFAULT_LIMIT = 10


@dataclass
class Column:
    name: str
    type: str  # as DuckDB spells it (``DECIMAL(18,2)``, ``TIMESTAMP WITH TIME ZONE``)
    declared: str | None = None  # the `-- column` type, spelled by DuckDB; None: no contract for it
    not_null: bool = False
    problem: str | None = None  # how the result breaks the contract


@dataclass
class Shown:
    """What ``show`` found: the model, the window it read, the columns and the first rows."""

    spec: ModelSpec
    substrate: str
    sql: str
    params: dict[str, Any]
    window: Any  # compilers.artifacts.Window or None
    columns: list[Column]
    rows: list[tuple[Any, ...]]
    limit: int
    truncated: bool  # the SELECT returned more than ``limit`` rows
    problems: list[str] = field(default_factory=list)  # contract mismatches, one sentence each

    @property
    def contract_ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        """The JSON document of ``lakewrap show --format json`` (``docs/looking.md``, "JSON")."""
        spec = self.spec
        return {"schema_version": SCHEMA_VERSION, "lakewrap_version": __version__, "model": spec.name,
                "path": spec.path, "target": str(spec.target), "strategy": spec.strategy.kind,
                "substrate": self.substrate, "window": self.window.dump() if self.window is not None else None,
                "sql": self.sql, "params": self.params,
                "columns": [c.__dict__ for c in self.columns],
                "contract": {"declared": bool(spec.columns), "ok": self.contract_ok, "problems": self.problems},
                "rows": [list(r) for r in self.rows], "limit": self.limit, "truncated": self.truncated}


def one_model(project: Any, model: str) -> ModelSpec:
    """The model ``model`` names (``name`` or ``schema.name``); a did-you-mean when none does."""
    text = model.strip()
    if not text or text.startswith("+") or text.endswith("+") or ":" in text:
        raise SelectionError(f"`show` takes one model, not the selector `{model}`",
                             hint="name it as name or schema.name (`lakewrap ls` lists them)")
    found = project.select([text])
    if len(found) != 1:
        raise SelectionError(f"`{model}` names {len(found)} models: {', '.join(str(s.target) for s in found)}",
                             hint="name one as schema.name")
    spec: ModelSpec = found[0]
    return spec


def show(root: Path, model: str, *, partition: str | None = None, limit: int = DEFAULT_LIMIT,
         now: datetime | None = None) -> Shown:
    """Run ``model``'s SELECT read-only on the project's lake; its first ``limit`` rows and its columns."""
    from lakewrap.listing import load
    from lakewrap.steps import plan_partitions
    from lakewrap.substrates import of_project

    if limit < 0:
        raise PlanError(f"--limit {limit} is negative", hint="give 0 (the columns only) or more")
    project = load(root)
    root = project.root
    spec = one_model(project, model)
    if spec.strategy.kind == "literal":
        raise PlanError(f"{spec.path}: `{spec.target}` is a literal model: its statements are not one SELECT",
                        hint="`lakewrap compile` prints its statements; show runs a wrapped model's SELECT")
    plan_partitions([spec], partition, None, None)  # a bad value names the form the model's grain takes
    now = now or datetime.now(timezone.utc)
    sub = of_project(root)
    lake = sub.open(root, read_only=True)
    con = lake.connect()
    try:
        plan = sub.plan_step(lake, con, spec, partition, now)
        return _run(sub, lake, con, spec, plan, limit, now)
    finally:
        lake.close(con)


def _session(sub: Any, lake: Any, con: Any, spec: ModelSpec, plan: Any, now: datetime) -> Any:
    """The read session the preview runs in: the substrate's test session or, for a Python model,
    the session its step reads in, with the function run there (``ctx.ref`` pinned as in a run)
    and its result registered as the relation the model's SELECT reads."""
    if "python" not in spec.extensions:
        return sub.test_session(lake, con, spec)
    from contextlib import contextmanager

    @contextmanager
    def session() -> Any:
        from lakewrap.pyrun import evaluate, relation_of

        with sub.python_reads(lake, con, spec) as (cursor, read, _):
            value = plan.binding.value if plan.binding is not None else None
            table, _logs = evaluate(spec, Path(lake.root), cursor, read, value, now)
            cursor.register(relation_of(spec), table)
            yield cursor

    return session()


def _run(sub: Any, lake: Any, con: Any, spec: ModelSpec, plan: Any, limit: int, now: datetime) -> Shown:
    from lakewrap.compile import _window
    from lakewrap.compilers import compiler_for
    from lakewrap.execute import sandbox
    from lakewrap.execute.locate import located, remember

    statement = compiler_for(plan.substrate).preview(plan, limit + 1)  # one more: whether there are more
    sandbox.check(statement.sql, allowed=sandbox.QUERY_TYPES, what=spec.path, single=True,
                  files=sub.file_sandbox(lake.root))
    params = {k: v.python() for k, v in statement.params.items()}
    try:
        session = _session(sub, lake, con, spec, plan, now)
    except NotImplementedError:
        raise UnsupportedError(f"substrate `{sub.name}` gives no read session a model's SELECT can run in",
                               hint="`lakewrap show` runs in the session of Substrate.test_session, which this "
                               "substrate does not implement") from None
    with session as cursor:
        try:
            result = cursor.execute(*inline(statement.sql, params)) if params else cursor.execute(statement.sql)
            names = [(d[0], str(d[1])) for d in result.description]
            rows = result.fetchall()
        except Exception as exc:
            remember(exc, statement.sql, "probe")  # located on the model file by its token
            raise located(exc, spec.path, lake.root, redact=lake.redact) from None
        declared = _declared_types(cursor, spec)
    shown = Shown(spec, plan.substrate, statement.sql, {k: v.dump() for k, v in statement.params.items()},
                  _window(plan), [Column(n, t) for n, t in names], rows[:limit], limit, len(rows) > limit)
    if spec.columns:
        _compare(shown, declared)
    return shown


def _declared_types(cursor: Any, spec: ModelSpec) -> dict[str, str]:
    """Each contract's type as DuckDB spells it (``typeof(CAST(NULL AS <type>))``, as the guard reads it)."""
    if not spec.columns:
        return {}
    from sqlglot import exp

    from lakewrap.compilers import sql as q

    select = exp.select(*(exp.Anonymous(this="typeof", expressions=[
        exp.cast(exp.Null(), exp.DataType.build(c.type, dialect="duckdb"))]) for c in spec.columns))
    spelled = cursor.execute(q.render(select)).fetchone()
    return {c.name.lower(): str(t) for c, t in zip(spec.columns, spelled, strict=True)}


def _compare(shown: Shown, declared: dict[str, str]) -> None:
    """Mark each column against its contract; collect the mismatches (file:line: sentence)."""
    path = shown.spec.path
    by_name = {c.name.lower(): c for c in shown.spec.columns}
    returned = {c.name.lower() for c in shown.columns}
    for i, col in enumerate(shown.columns):
        contract = by_name.get(col.name.lower())
        if contract is None:
            col.problem = f"the SELECT returns column `{col.name}` ({col.type}) that no `-- column` declares"
            shown.problems.append(f"{path}: {col.problem}")
            continue
        col.declared, col.not_null = declared[col.name.lower()], contract.not_null
        if col.declared != col.type:
            col.problem = f"column `{col.name}` is declared {col.declared} but the SELECT returns {col.type}"
        elif contract.not_null and (nulls := sum(r[i] is None for r in shown.rows)):
            col.problem = f"column `{col.name}` is declared not_null but {nulls} of the rows shown are NULL"
        if col.problem:
            shown.problems.append(f"{path}:{contract.line}: {col.problem}")
    for contract in shown.spec.columns:
        if contract.name.lower() not in returned:
            shown.problems.append(f"{path}:{contract.line}: column `{contract.name}` is declared "
                                  f"{declared[contract.name.lower()]} but the SELECT does not return it")
