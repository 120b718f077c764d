"""Provenance: ``explain``, ``reproduce`` and ``compile --as-of`` (``restore``:
:mod:`lakewrap.provenance_restore`), above the substrates.

Everything is read from the lake's own records, committed in the same transaction as the data
(``docs/running.md``), through the substrate's provenance backend
(:class:`~lakewrap.substrates.protocol.ProvenanceBackend`: DuckLake's in
:mod:`lakewrap.substrates.ducklake.provenance`, Iceberg's in :mod:`lakewrap.substrates.iceberg.provenance`
and :mod:`lakewrap.substrates.iceberg.provenance_sql`). This module holds what every substrate
shares: the typed record (:class:`Materialization`), the one parser of a run id or snapshot id
(:func:`run_or_snapshot`), which materializations a command means, the ``explain`` printout and
the reproduce comparison. The SQL comes from :mod:`lakewrap.compilers.provenance`. See
``docs/provenance.md``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from lakewrap.compilers import provenance as sqlp
from lakewrap.compilers.artifacts import CompiledPlan
from lakewrap.errors import PlanError, StateError
from lakewrap.plan import Param
from lakewrap.substrates import of_project

if TYPE_CHECKING:
    from lakewrap.substrates.protocol import ProvenanceBackend

# The type of each parameter a plan can bind (recorded values are text).
PARAM_TYPES: dict[str, Literal["TIMESTAMPTZ", "VARCHAR"]] = {
    "partition_start": "TIMESTAMPTZ", "partition_end": "TIMESTAMPTZ", "run_timestamp": "TIMESTAMPTZ",
    "partition_value": "VARCHAR",
}
COMMANDS = "explain, reproduce, restore and compile --as-of"


@dataclass(frozen=True)
class RunOrSnapshot:
    """What ``explain``, ``compile --as-of`` and ``query --as-of`` were given: a run id or a snapshot id."""

    run_id: str | None = None
    snapshot: int | None = None

    @property
    def kind(self) -> Literal["run", "snapshot"]:
        return "snapshot" if self.snapshot is not None else "run"

    def __str__(self) -> str:
        return str(self.snapshot) if self.snapshot is not None else str(self.run_id)


_SNAPSHOT = re.compile(r"[0-9]+")
_SIGNED = re.compile(r"[-+][0-9]+")


def run_or_snapshot(text: str | int) -> RunOrSnapshot:
    """The one rule (``docs/provenance.md``): surrounding spaces are ignored; decimal digits only
    (``0``, ``12``) are a snapshot id; a signed number (``-5``, ``+5``) is refused, since no
    snapshot id is negative and no run id looks like one; anything else is a run id.

    Example:
        >>> run_or_snapshot(" 12 "), run_or_snapshot("20240104T000000Z-f97057").kind
        (RunOrSnapshot(run_id=None, snapshot=12), 'run')
    """
    value = str(text).strip()
    if _SNAPSHOT.fullmatch(value):
        return RunOrSnapshot(snapshot=int(value))
    if _SIGNED.fullmatch(value) or not value:
        raise PlanError(f"`{value}` is neither a snapshot id nor a run id",
                        hint="a snapshot id is a whole number, 0 or more; a run id looks like 20240104T000000Z-f97057; "
                        "`lakewrap history MODEL` lists both")
    return RunOrSnapshot(run_id=value)


@contextmanager
def backend(root: Path) -> Iterator[ProvenanceBackend]:
    """The provenance backend of the lake at ``root``, closed afterwards."""
    found = of_project(root).provenance(root)
    try:
        yield found
    finally:
        found.close()


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


def unknown_run(run_id: str) -> StateError:
    return StateError(f"no materialization of run `{run_id}` is recorded in this lake",
                      hint="`lakewrap history MODEL` lists the runs that materialized a model; a run that failed "
                      "or changed nothing committed none")


def explain(root: Path, what: str | int) -> list[Materialization]:
    """What produced a snapshot, or what a run materialized: model, partition, run, pins and SQL.

    Example:
        >>> (m,) = explain(Path("examples/shop"), "18")  # doctest: +SKIP
        >>> m.target, m.partition, m.pins, m.statements[1]["sql"][:40]  # doctest: +SKIP
        ('sales.orders', '2024-01-01', {'snapshot': 17}, 'CREATE OR REPLACE TEMPORARY TABLE "__lak')
    """
    root = root.resolve()
    ref = run_or_snapshot(what)
    with backend(root) as records:
        if ref.snapshot is not None:
            return records.by_snapshot(ref.snapshot)
        assert ref.run_id is not None
        found = records.by_run(ref.run_id)
    if not found:
        raise unknown_run(ref.run_id)
    return found


def explain_sql(root: Path, items: list[Materialization]) -> str:
    """``lakewrap explain``'s printout of ``items``, read from the lake at ``root``."""
    found = of_project(root.resolve())
    with backend(root.resolve()) as records:  # the DDL printout reads no further record
        return explain_text(items, found.transcript.setup_before_begin, found.transcript.shows_base,
                            records.explain_ddl)


def explain_text(items: list[Materialization], setup_before_begin: bool, shows_base: bool,
                 ddl_of: Callable[[Materialization], tuple[dict[str, Any] | None, list[dict[str, Any]]]]) -> str:
    """Each materialization as a header and its statements in one transaction, as they ran
    (``ddl_of``: the substrate's DDL outside the plan, :meth:`ProvenanceBackend.explain_ddl`)."""
    from lakewrap.compilers.artifacts import CommitOp
    from lakewrap.output import RULE

    lines: list[str] = []
    for m in items:
        window = f"  window [{m.window_start}, {m.window_end})" if m.window_start else ""
        lines += [RULE, f"-- snapshot:   {m.snapshot_id if m.snapshot_id is not None else '(expired)'}",
                  f"-- run:        {m.run_id}", f"-- model:      {m.model}", f"-- target:     {m.target}",
                  f"-- partition:  {m.partition or '(none: the whole table)'}{window}",
                  f"-- strategy:   {m.strategy}",
                  f"-- pins:       {json.dumps(m.pins, sort_keys=True)}",
                  f"-- rows:       +{m.rows_inserted} ~{m.rows_updated} -{m.rows_deleted}",
                  f"-- committed:  {m.committed_at}",
                  f"-- message:    {m.commit_message or ''}",
                  f"-- sql_sha256: {m.sql_sha256}"]
        if shows_base:  # e.g. Iceberg: the target's snapshot the transaction started from
            lines.append(f"-- base:       {m.extra_info['base_snapshot'] or '(none: the table was new)'}")
        if m.extra_info.get("restored_from"):
            lines.append(f"-- restored:   {json.dumps(m.extra_info['restored_from'], sort_keys=True)}")
        params = m.params
        if params:
            lines.append("-- params:     " + ", ".join(f"${k} = {v.type} '{v.value}'" for k, v in params.items()))
        lines += [RULE]
        begun = not m.statements
        if not m.statements:
            lines += ["BEGIN TRANSACTION;", ""]
            lines.append(f"-- (not recorded: {m.extra_info['statements_omitted']})" if m.extra_info.get(
                "statements_omitted") else "-- (the statements of this sql_sha256 are not in the lake's records)")
        ddl = ddl_of(m)
        statements = list(m.statements)
        if ddl[0]:  # --full-refresh: before the plan's statements
            statements.insert(0, ddl[0])
        at = next((i for i, st in enumerate(statements) if st.get("role") in ("bootstrap", "write")), len(statements))
        statements[at:at] = ddl[1]  # on_schema_change: before the first write, where the executor ran it
        # e.g. Iceberg through DuckDB runs its setup statements before BEGIN, each committed on its own
        begin = next((i for i, st in enumerate(statements) if st.get("role") != "setup"), len(statements)) \
            if setup_before_begin else 0
        for i, st in enumerate(statements, 1):
            if not begun and i - 1 >= begin:
                lines += ["BEGIN TRANSACTION;", ""]
                begun = True
            lines.append(f"-- [{i}] {st.get('role')}" + (f": {st['note']}" if st.get("note") else ""))
            if st.get("sql"):
                lines.append(str(st["sql"]).rstrip().rstrip(";") + ";")
            lines.append("")
        if not begun:
            lines += ["BEGIN TRANSACTION;", ""]
        commits = m.extra_info.get("commits") or []
        for i, op in enumerate(commits, len(statements) + 1):  # Iceberg: pyiceberg operations, as comments
            commit = CommitOp.validate(op)
            lines += [f"-- [{i}] commit" + (f": {commit.note}" if commit.note else ""), f"--   {commit.line()}", ""]
        if commits:
            lines += [f"-- committed by pyiceberg as {m.extra_info.get('operation')}; the DuckDB statements only "
                      "staged rows", "ROLLBACK;", ""]
        else:
            lines += ["COMMIT;", ""]
    return "\n".join(lines)


# --- compile --as-of --------------------------------------------------------------------------------


def compile_as_of(root: Path, selectors: Sequence[str], *, as_of: str, partition: str | None = None,
                  exclude: Sequence[str] = (), now: datetime | None = None,
                  use_cache: bool = True) -> tuple[list[CompiledPlan], list[str]]:
    """The selected models' plans with every upstream read pinned to what run ``as_of`` read (or to
    snapshot ``as_of``, a number). Returns the plans and warnings (a model changed since the run)."""
    from lakewrap.compile import compile_project

    root = root.resolve()
    ref = run_or_snapshot(as_of)
    plans = compile_project(root, selectors, exclude=exclude, partition=partition, now=now, use_cache=use_cache)
    with backend(root) as records:
        if ref.snapshot is not None:
            return records.pinned_at_snapshot(plans, ref), []
        assert ref.run_id is not None
        matched, warnings = _match_run(plans, records.by_run(ref.run_id), ref.run_id)
        return [records.pinned_to(plan, m) for plan, m in matched], warnings


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


def project_specs(root: Path) -> list[Any]:
    """Every model of the project at ``root`` (a substrate's as-of pins need what each reads)."""
    from lakewrap.compile import load_project

    return list(load_project(root, None).select([]))


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
    target = _target_of(root, model) if model is not None else None
    with backend(root) as records:
        found = records.by_run(run_id)
        if not found:
            raise unknown_run(run_id)
        found = select_materializations(found, run_id, target, partition)
        return ReproduceReport(run_id, records.reproduce(found))


def reproduction(m: Materialization, pin: int | None) -> Reproduction:
    """A reproduction not yet run: ``ERROR`` until compared, ``SKIPPED`` for views and literal models."""
    out = Reproduction(m.run_id, m.target, m.partition, m.strategy, m.snapshot_id, pin, status="ERROR")
    if m.strategy in ("view", "literal"):
        out.status = "SKIPPED"
        out.detail = ("a view holds no rows: `lakewrap explain` shows its SQL" if m.strategy == "view" else
                      "a literal model's statements may write any table: lakewrap cannot tell which to compare")
    deferred = m.pins.get("deferred") if isinstance(m.pins, dict) else None
    if deferred:  # reproduce replays reads of this lake only; those tables were another lake's
        out.status = "SKIPPED"
        # one snapshot of the other lake (DuckLake), or one per table (Iceberg: "snapshots")
        at = (f"at its snapshots {', '.join(f'{t} {sid}' for t, sid in deferred['snapshots'].items())}"
              if isinstance(deferred.get("snapshots"), dict) else f"at its snapshot {deferred.get('snapshot')}")
        out.detail = (f"it read {', '.join(deferred.get('tables', []))} from environment `{deferred.get('env')}` "
                      f"(deferred, {at}): reproduce replays reads of this lake only (docs/environments.md)")
    return out


def guarded(out: Reproduction, redact: Callable[[str], str], run: Callable[[], None]) -> None:
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
