"""Provenance: ``explain``, ``reproduce`` and ``compile --as-of`` (``restore``:
:mod:`lakewrap.provenance_restore`).

Everything is read from the lake's own records, committed in the same transaction as the data
(``docs/running.md``). DuckLake: ``lakewrap.materializations`` (run, model, partition, strategy,
pins), ``lakewrap.compiled_sql`` (the statements, by ``sql_sha256``) and each snapshot's commit
message and ``extra_info`` (which also holds the values bound to the statements' parameters).
Iceberg: each commit's snapshot summary, read by :mod:`lakewrap.provenance_iceberg`, the substrate
half behind :func:`substrate`. The SQL comes from :mod:`lakewrap.compilers.provenance`; this module
only runs it. See ``docs/provenance.md``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any, Literal

from lakewrap.compilers import provenance as sqlp
from lakewrap.compilers.artifacts import CompiledPlan
from lakewrap.errors import PlanError, StateError, UnsupportedError
from lakewrap.plan import Param

# The type of each parameter a plan can bind (recorded values are text).
PARAM_TYPES: dict[str, Literal["TIMESTAMPTZ", "VARCHAR"]] = {
    "partition_start": "TIMESTAMPTZ", "partition_end": "TIMESTAMPTZ", "run_timestamp": "TIMESTAMPTZ",
    "partition_value": "VARCHAR",
}
COMMANDS = "explain, reproduce, restore and compile --as-of"


def substrate(root: Path, command: str) -> Literal["ducklake", "iceberg"]:
    """The lake's substrate: ``ducklake`` (records in lakewrap's tables) or ``iceberg`` (records in
    snapshot summaries, :mod:`lakewrap.provenance_iceberg`, or in state tables on write path
    ``sql``, :mod:`lakewrap.provenance_iceberg_sql`); anything else is refused."""
    from lakewrap.config import load_config

    cfg = load_config(root).lake
    if cfg.substrate == "iceberg":  # either write path: lakewrap.provenance_iceberg(_sql)
        return "iceberg"
    if cfg.substrate == "ducklake":
        return "ducklake"
    raise UnsupportedError(  # pragma: no cover - no other substrate runs yet
        f"`lakewrap {command}` is implemented for DuckLake and Iceberg lakes only",
        hint=f"{COMMANDS} read the records lakewrap's own commits carry",
    )


@dataclass
class Materialization:
    """One recorded materialization: what ``lakewrap explain`` prints."""

    run_id: str
    model: str
    target: str
    partition: str | None
    window_start: str | None
    window_end: str | None
    strategy: str
    rows_inserted: int
    rows_updated: int
    rows_deleted: int
    sql_sha256: str
    pins: dict[str, Any]
    committed_at: str
    snapshot_id: int | None
    author: str | None
    commit_message: str | None
    extra_info: dict[str, Any]
    statements: list[dict[str, Any]] = field(default_factory=list)

    @property
    def pin(self) -> int:
        """The snapshot every read of the materialization's transaction saw (the one before it)."""
        value = self.pins.get("snapshot")
        if not isinstance(value, int):
            raise StateError(f"the materialization of `{self.target}` in run {self.run_id} records no pin",
                             hint="it was committed by a lakewrap without pins; it cannot be reproduced")
        return value

    @property
    def params(self) -> dict[str, Param]:
        """The parameter values bound when it ran (``extra_info``), else the window's from its row."""
        recorded = self.extra_info.get("params")
        if isinstance(recorded, dict):
            return {k: Param(type=PARAM_TYPES.get(k, "VARCHAR"), value=str(v)) for k, v in recorded.items()}
        out: dict[str, Param] = {}
        if self.window_start and self.window_end:
            out["partition_start"] = Param(type="TIMESTAMPTZ", value=self.window_start)
            out["partition_end"] = Param(type="TIMESTAMPTZ", value=self.window_end)
        if self.partition is not None:
            out["partition_value"] = Param(type="VARCHAR", value=self.partition)
        return out

    @property
    def schema_name(self) -> tuple[str, str]:
        schema, name = self.target.split(".", 1)
        return schema, name

    def to_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["params"] = {k: v.value for k, v in self.params.items()}
        return out


def _iso(value: Any) -> str | None:
    return None if value is None else value.isoformat() if isinstance(value, datetime) else str(value)


def read_materializations(con: Any, alias: str, by: Literal["run_id", "snapshot_id"],
                          value: str | int) -> list[Materialization]:
    """The materializations of a run (or the one a snapshot committed), with their statements."""
    rows = con.execute(sqlp.materializations(alias, by), {"value": value}).fetchall()
    out = []
    for r in rows:
        d = dict(zip(sqlp.MATERIALIZATION_COLUMNS, r, strict=True))
        out.append(Materialization(
            run_id=d["run_id"], model=d["model"], target=d["target"], partition=d["partition_value"],
            window_start=_iso(d["window_start"]), window_end=_iso(d["window_end"]), strategy=d["strategy"],
            rows_inserted=d["rows_inserted"], rows_updated=d["rows_updated"], rows_deleted=d["rows_deleted"],
            sql_sha256=d["sql_sha256"], pins=json.loads(d["pins"]) if d["pins"] else {},
            committed_at=str(d["committed_at"]), snapshot_id=d["snapshot_id"], author=d["author"],
            commit_message=d["commit_message"],
            extra_info=json.loads(d["commit_extra_info"]) if d["commit_extra_info"] else {},
        ))
    for m in out:
        found = con.execute(sqlp.compiled_statements(), {"sql_sha256": m.sql_sha256}).fetchone()
        m.statements = json.loads(found[0]) if found else []
    return out


def open_ducklake(root: Path) -> tuple[Any, Any]:
    from lakewrap.execute.lake import Lake

    lake = Lake.open(root, read_only=True)
    return lake, lake.connect()


def unknown_run(run_id: str) -> StateError:
    return StateError(f"no materialization of run `{run_id}` is recorded in this lake",
                      hint="`lakewrap history MODEL` lists the runs that materialized a model; a run that failed "
                      "or changed nothing committed none")


def _by_run_or_snapshot(con: Any, alias: str, what: str) -> list[Materialization]:
    text = what.strip()
    if text.isdigit():
        found = read_materializations(con, alias, "snapshot_id", int(text))
        if found:
            return found
        snap = con.execute(sqlp.snapshot(alias), {"value": int(text)}).fetchone()
        if snap is None:
            raise StateError(f"the lake has no snapshot {text}",
                             hint="`lakewrap history MODEL` lists the snapshots of a model's materializations")
        said = f"author {snap[1]!r}, message {snap[2]!r}" if snap[1] or snap[2] else "it has no commit message"
        raise StateError(f"snapshot {text} was not committed by a lakewrap materialization ({said})",
                         hint="seeds and plain SQL commit snapshots too; `lakewrap history MODEL` lists the "
                         "snapshots lakewrap committed")
    found = read_materializations(con, alias, "run_id", text)
    if not found:
        raise unknown_run(text)
    return found


def _iceberg_by_run_or_snapshot(records: Any, what: str) -> list[Materialization]:
    text = what.strip()
    if text.lstrip("-").isdigit():
        found: list[Materialization] = records.by_snapshot(int(text))
        if found:
            return found
        owner = records.owner(int(text))
        if owner is None:
            raise StateError(f"the lake has no snapshot {text}",
                             hint="`lakewrap history MODEL` lists the snapshots of a model's materializations")
        name, snap = owner
        raise StateError(f"snapshot {text} of {name} was not committed by a lakewrap materialization (operation "
                         f"{snap.summary.operation.value if snap.summary else '?'}, no lakewrap.run_id in its summary)",
                         hint="seeds and plain pyiceberg writes commit snapshots too; `lakewrap history MODEL` lists "
                         "the snapshots lakewrap committed")
    found = records.by_run(text)
    if not found:
        raise unknown_run(text)
    return found


def explain(root: Path, what: str) -> list[Materialization]:
    """What produced a snapshot, or what a run materialized: model, partition, run, pins and SQL.

    Example:
        >>> (m,) = explain(Path("examples/shop"), "18")  # doctest: +SKIP
        >>> m.target, m.partition, m.pins, m.statements[1]["sql"][:40]  # doctest: +SKIP
        ('sales.orders', '2024-01-01', {'snapshot': 17}, 'CREATE OR REPLACE TEMPORARY TABLE "__lak')
    """
    root = root.resolve()
    if substrate(root, "explain") == "iceberg":
        from lakewrap.provenance_iceberg import IcebergRecords

        return _iceberg_by_run_or_snapshot(IcebergRecords.open(root), what)
    lake, con = open_ducklake(root)
    try:
        return _by_run_or_snapshot(con, lake.alias, what)
    finally:
        lake.close(con)


# --- compile --as-of --------------------------------------------------------------------------------


def pinned_plan(plan: CompiledPlan, version: int, params: dict[str, Param] | None = None) -> CompiledPlan:
    """``plan`` with every upstream read at ``AT (VERSION => version)`` and, when given, the parameter
    values a run bound (its window, its run timestamp)."""
    target = tuple(plan.target.split(".", 1))
    assert len(target) == 2
    statements = []
    for st in plan.statements:
        text = st.sql if st.role == "literal" else sqlp.pin_reads(st.sql, version, (target[0], target[1]))
        bound = {k: (params or {}).get(k, v) for k, v in st.params.items()}
        statements.append(st.replace(sql=text, params=bound))
    stmts = tuple(statements)
    return plan.replace(statements=stmts, sql_sha256=CompiledPlan.digest(stmts))


def compile_as_of(root: Path, selectors: Sequence[str], *, as_of: str, partition: str | None = None,
                  exclude: Sequence[str] = (), now: datetime | None = None,
                  use_cache: bool = True) -> tuple[list[CompiledPlan], list[str]]:
    """The selected models' plans with every upstream read pinned to what run ``as_of`` read (or to
    snapshot ``as_of``, a number). Returns the plans and warnings (a model changed since the run)."""
    from lakewrap.compile import compile_project

    root = root.resolve()
    kind = substrate(root, "compile --as-of")
    plans = compile_project(root, selectors, exclude=exclude, partition=partition, now=now, use_cache=use_cache)
    if kind == "iceberg":
        return _iceberg_as_of(root, plans, as_of.strip())
    lake, con = open_ducklake(root)
    try:
        if as_of.strip().isdigit():
            version = int(as_of.strip())
            if con.execute(sqlp.snapshot(lake.alias), {"value": version}).fetchone() is None:
                raise StateError(f"the lake has no snapshot {version}",
                                 hint="`lakewrap history MODEL` lists the snapshots of a model's materializations")
            return [pinned_plan(p, version) for p in plans], []
        recorded = read_materializations(con, lake.alias, "run_id", as_of.strip())
    finally:
        lake.close(con)
    matched, warnings = _match_run(plans, recorded, as_of)
    return [pinned_plan(plan, m.pin, m.params) for plan, m in matched], warnings


def _match_run(plans: list[CompiledPlan], recorded: list[Materialization],
               as_of: str) -> tuple[list[tuple[CompiledPlan, Materialization]], list[str]]:
    """Each plan with the materialization of run ``as_of`` it re-renders, and a warning per model
    whose SQL changed since."""
    if not recorded:
        raise unknown_run(as_of)
    out, warnings = [], []
    for plan in plans:
        value = plan.window.value if plan.window is not None and plan.window.kind == "time" else None
        match = [m for m in recorded if m.target == plan.target and (value is None or m.partition == value)]
        if not match:
            done = ", ".join(sorted(f"{m.target}" + (f" {m.partition}" if m.partition else "") for m in recorded))
            raise StateError(f"run {as_of} did not materialize `{plan.target}`"
                             + (f" partition {value}" if value else ""),
                             hint=f"it materialized: {done}; pick one of those (--partition), or another run")
        m = match[-1]
        if m.sql_sha256 != plan.sql_sha256:
            warnings.append(f"{plan.target}: the model's SQL changed since run {as_of} (sql_sha256 "
                            f"{m.sql_sha256[:12]} then, {plan.sql_sha256[:12]} now); `lakewrap explain {as_of}` "
                            "shows the statements it executed")
        out.append((plan, m))
    return out, warnings


def _iceberg_as_of(root: Path, plans: list[CompiledPlan], as_of: str) -> tuple[list[CompiledPlan], list[str]]:
    from lakewrap.provenance_iceberg import IcebergRecords, as_of_pins
    from lakewrap.provenance_iceberg import pinned_plan as ice_pinned
    from lakewrap.substrates.iceberg.run import reads_of

    records = IcebergRecords.open(root)
    lake = records.lake
    if as_of.lstrip("-").isdigit():
        if not records.has_snapshot(int(as_of)):
            raise StateError(f"the lake has no snapshot {as_of}",
                             hint="`lakewrap history MODEL` lists the snapshots of a model's materializations")
        specs = {str(s.target): s for s in _project_specs(root)}
        out = []
        for plan in plans:
            spec = specs[plan.target]
            out.append(ice_pinned(lake, plan, as_of_pins(lake, list(reads_of(spec)), int(as_of))))
        return out, []
    matched, warnings = _match_run(plans, records.by_run(as_of), as_of)
    return [ice_pinned(lake, plan, m.pins, m.params) for plan, m in matched], warnings


def _project_specs(root: Path) -> list[Any]:
    from lakewrap.compile import load_project

    return list(load_project(root, None).select([]))


# --- reproduce --------------------------------------------------------------------------------------


@dataclass
class Reproduction:
    """One materialization rebuilt in scratch space and compared with the table as it committed it."""

    run_id: str
    target: str
    partition: str | None
    strategy: str
    snapshot_id: int | None
    pin: int | None
    status: Literal["MATCH", "MISMATCH", "SKIPPED", "ERROR"]
    rows_reproduced: int = 0
    rows_in_table: int = 0
    only_in_reproduction: int = 0
    only_in_table: int = 0
    digest_reproduced: str | None = None
    digest_table: str | None = None
    detail: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class ReproduceReport:
    run_id: str
    results: list[Reproduction]

    @property
    def ok(self) -> bool:
        return all(r.status in ("MATCH", "SKIPPED") for r in self.results)

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "ok": self.ok, "results": [r.to_dict() for r in self.results]}


def _target_of(root: Path, model: str) -> str:
    from lakewrap.compile import load_project

    specs = load_project(root, None).select([model])
    if len(specs) != 1:
        raise PlanError(f"`{model}` names {len(specs)} models", hint="use schema.name")
    return str(specs[0].target)


def select_materializations(found: list[Materialization], run_id: str, target: str | None,
            partition: str | None) -> list[Materialization]:
    if target is not None:
        mine = [m for m in found if m.target == target]
        if not mine:
            done = ", ".join(sorted({m.target for m in found}))
            raise StateError(f"run {run_id} did not materialize `{target}`", hint=f"it materialized: {done}")
        found = mine
    if partition is not None:
        mine = [m for m in found if m.partition == partition]
        if not mine:
            parts = ", ".join(sorted({m.partition or "(whole table)" for m in found}))
            raise StateError(f"run {run_id} did not materialize partition {partition}"
                             + (f" of `{target}`" if target else ""),
                             hint=f"partitions it materialized: {parts}")
        found = mine
    return found


def reproduce(root: Path, run_id: str, *, model: str | None = None, partition: str | None = None) -> ReproduceReport:
    """Re-execute a run's recorded statements against its pinned inputs, in scratch space, and compare.

    For each materialization of the run: copy the target as of the pin (the snapshot the run's
    transaction read: the table before it) into an in-memory scratch database, run the recorded
    statements with every other lake table read at the pin and the target redirected to the copy,
    then compare the copy with the table as of the materialization's own snapshot, as multisets of
    rows. The lake is attached read-only: nothing is written to it.

    Example:
        >>> report = reproduce(Path("examples/shop"), "20240104T000000Z-f97057")  # doctest: +SKIP
        >>> report.ok, {r.status for r in report.results}  # doctest: +SKIP
        (True, {'MATCH', 'SKIPPED'})
    """
    root = root.resolve()
    kind = substrate(root, "reproduce")
    target = _target_of(root, model) if model is not None else None
    if kind == "iceberg":
        return _reproduce_iceberg(root, run_id, target, partition)
    lake, con = open_ducklake(root)
    try:
        found = read_materializations(con, lake.alias, "run_id", run_id)
        if not found:
            raise unknown_run(run_id)
        found = select_materializations(found, run_id, target, partition)
        return ReproduceReport(run_id, [_reproduce_one(con, m, lake.redact) for m in found])
    finally:
        lake.close(con)


def _reproduce_iceberg(root: Path, run_id: str, target: str | None, partition: str | None) -> ReproduceReport:
    from lakewrap.provenance_iceberg import IcebergRecords, reproduce_one

    records = IcebergRecords.open(root)
    found = records.by_run(run_id)
    if not found:
        raise unknown_run(run_id)
    found = select_materializations(found, run_id, target, partition)
    lake = records.lake
    if lake.config.write_path == "sql":
        from lakewrap.execute.iceberg_sql import connect
        from lakewrap.provenance_iceberg_sql import reproduce_one as replay

        con = connect(lake)
        one: Any = partial(replay, con)
    else:
        con = lake.connect()
        one = partial(reproduce_one, lake, con)
    try:
        results = []
        for m in found:
            out = _reproduction(m, None)
            if out.status == "ERROR":
                _guarded(out, lake.redact, partial(one, m, out))
            results.append(out)
        return ReproduceReport(run_id, results)
    finally:
        lake.close(con)


def _reproduction(m: Materialization, pin: int | None) -> Reproduction:
    """A reproduction not yet run: ``ERROR`` until compared, ``SKIPPED`` for views and literal models."""
    out = Reproduction(m.run_id, m.target, m.partition, m.strategy, m.snapshot_id, pin, status="ERROR")
    if m.strategy in ("view", "literal"):
        out.status = "SKIPPED"
        out.detail = ("a view holds no rows: `lakewrap explain` shows its SQL" if m.strategy == "view" else
                      "a literal model's statements may write any table: lakewrap cannot tell which to compare")
    return out


def _guarded(out: Reproduction, redact: Any, run: Any) -> None:
    """Run one reproduction; a failure is reported with the materialization (status ``ERROR``)."""
    try:
        run()
    except StateError as exc:
        out.detail = exc.render()
    except Exception as exc:  # a DuckDB error while re-executing: report it with the materialization
        out.detail = redact(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)


def bound(text: str, params: dict[str, Param]) -> tuple[Any, ...]:
    """``(text,)`` or ``(text, values)``: the arguments of ``execute()`` with the recorded values of
    the parameters ``text`` uses; a parameter whose value was not recorded is a :class:`StateError`."""
    from lakewrap.sqltext import parameters

    used = parameters(sqlp.parse(text)) if "$" in text else set()
    missing = sorted(used - params.keys())
    if missing:
        raise StateError(f"the value of ${missing[0]} this materialization bound is not recorded",
                         hint="it was committed before lakewrap recorded parameter values; it cannot be reproduced")
    return (text, {k: params[k].python() for k in sorted(used)}) if used else (text,)


def compare(con: Any, mine: Any, table: Any, out: Reproduction) -> None:
    """Compare the reproduction ``mine`` with ``table`` (sqlglot table expressions) as multisets of
    rows and by an order-independent digest; sets ``out``'s counts, digests and status."""
    columns = tuple(d[0] for d in con.execute(sqlp.probe(table.copy())).description)
    reproduced = tuple(d[0] for d in con.execute(sqlp.probe(mine.copy())).description)
    if set(c.lower() for c in reproduced) != set(c.lower() for c in columns):
        out.status = "MISMATCH"
        out.detail = f"columns differ: reproduced {list(reproduced)}, table {list(columns)}"
        return
    out.only_in_reproduction = int(con.execute(sqlp.only_in(mine.copy(), table.copy(), columns)).fetchone()[0])
    out.only_in_table = int(con.execute(sqlp.only_in(table.copy(), mine.copy(), columns)).fetchone()[0])
    n, h = con.execute(sqlp.content_digest(mine.copy(), columns)).fetchone()
    out.rows_reproduced, out.digest_reproduced = int(n), f"{int(n)}:{int(h) % 2**128:032x}"
    n, h = con.execute(sqlp.content_digest(table.copy(), columns)).fetchone()
    out.rows_in_table, out.digest_table = int(n), f"{int(n)}:{int(h) % 2**128:032x}"
    same = out.only_in_reproduction == out.only_in_table == 0 and out.digest_reproduced == out.digest_table
    out.status = "MATCH" if same else "MISMATCH"


def replay_alters(con: Any, alters: list[str], target: tuple[str, str], catalog: str | None = None) -> None:
    """The ``ALTER TABLE`` statements ``on_schema_change`` ran, applied to the scratch copy."""
    for text in alters:
        if (alter := sqlp.scratch_alter(text, target, catalog)) is not None:
            con.execute(alter)


def _reproduce_one(con: Any, m: Materialization, redact: Any) -> Reproduction:
    out = _reproduction(m, m.pins.get("snapshot"))
    if out.status == "SKIPPED":
        return out
    if m.snapshot_id is None or not m.statements:
        out.detail = "its snapshot or its statements are no longer in the lake (expired or deleted)"
        return out
    schema, name = m.schema_name
    snapshot_id = m.snapshot_id
    con.execute(sqlp.attach_scratch())

    def run() -> None:
        pin = m.pin
        con.execute(sqlp.scratch_schema(schema))
        try:
            con.execute(sqlp.probe_at(schema, name, pin))
            existed = True
        except Exception:  # the table did not exist before this materialization (its first run)
            existed = False
        if existed and not m.extra_info.get("full_refresh"):  # --full-refresh dropped it first
            con.execute(sqlp.copy_to_scratch(schema, name, pin))
        alters = [str(a) for a in m.extra_info.get("schema_changes", [])]
        for st in m.statements:
            if st.get("role") == "test":
                continue
            if alters and st.get("role") == "write":  # where on_schema_change ran them: see Executor
                replay_alters(con, alters, (schema, name))
                alters = []
            text = sqlp.scratch_statement(st["sql"], pin, (schema, name))
            if text is not None:
                con.execute(*bound(text, m.params))
            if alters and st.get("role") == "bootstrap":  # ... or right after CREATE TABLE IF NOT EXISTS
                replay_alters(con, alters, (schema, name))
                alters = []
        compare(con, sqlp.scratch_table(schema, name), sqlp.at(schema, name, snapshot_id), out)

    try:
        _guarded(out, redact, run)
    finally:
        con.execute(sqlp.detach_scratch())  # each statement ran on its own (autocommit): nothing is open
    return out
