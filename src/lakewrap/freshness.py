"""``lakewrap freshness``: how old each model's and each source's data is, against its policy.

A model's age is ``now`` minus the commit time of its last materialization in the lake's state of
record (the substrate's state store: ``lakewrap.materializations`` joined to its snapshot on
DuckLake, the snapshot summaries or state tables on Iceberg). A ``[sources."schema.table"]``
table's age is ``now`` minus ``max(loaded_at)`` when it names a column (a ``TIMESTAMP`` without a
time zone is read as UTC, a ``DATE`` as its midnight UTC), else minus the time of the lake's last
commit that changed the table's rows (:meth:`lakewrap.substrates.protocol.Substrate.changed_at`).

States: ``never`` (nothing recorded), ``error`` (older than ``error_after``), ``warn`` (older than
``warn_after``), ``ok``. :func:`breached` is what makes the command exit 1: an ``error``, or a
``never`` with an ``error_after`` (a table that has never been loaded is as late as can be).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lakewrap.errors import ExecutionError, SelectionError

if TYPE_CHECKING:
    from lakewrap.config_sched import SourceConfig
    from lakewrap.spec import Freshness

STATES = ("ok", "warn", "error", "never")


def state_of(age: float | None, warn_after: int | None, error_after: int | None) -> str:
    """``never`` / ``error`` / ``warn`` / ``ok`` of an age in seconds (None: nothing recorded).
    An age equal to a threshold is not past it."""
    if age is None:
        return "never"
    if error_after is not None and age > error_after:
        return "error"
    if warn_after is not None and age > warn_after:
        return "warn"
    return "ok"


def as_instant(value: Any) -> datetime | None:
    """A load or commit time as an aware UTC instant (naive: UTC; a date: its midnight UTC; text: ISO 8601)."""
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    if isinstance(value, date) and not isinstance(value, datetime):
        value = datetime(value.year, value.month, value.day)
    if not isinstance(value, datetime):
        raise ValueError(f"{value!r} is not a time")
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)


@dataclass
class Fresh:
    """One model's or source's freshness at ``now``."""

    kind: str  # "model" | "source"
    name: str  # schema.table
    basis: str  # what the time is: "last materialization", "max(<col>)", "last commit"
    loaded_at: datetime | None
    age_seconds: float | None
    warn_after: int | None
    error_after: int | None
    state: str

    def to_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["loaded_at"] = self.loaded_at.isoformat() if self.loaded_at is not None else None
        return out


def judge(kind: str, name: str, basis: str, at: datetime | None, policy: Freshness | None,
          now: datetime) -> Fresh:
    """The :class:`Fresh` of a table last loaded ``at``, under ``policy`` (None: no thresholds)."""
    age = None if at is None else max(0.0, (now - at).total_seconds())
    warn = policy.warn_after if policy is not None else None
    error = policy.error_after if policy is not None else None
    return Fresh(kind, name, basis, at, age, warn, error, state_of(age, warn, error))


def breached(rows: Sequence[Fresh]) -> bool:
    """Whether any row is an error-level breach (``lakewrap freshness`` exits 1)."""
    return any(r.state == "error" or (r.state == "never" and r.error_after is not None) for r in rows)


def last_committed(committed: Sequence[str]) -> datetime | None:
    """The newest of a target's recorded commit times."""
    times = [t for t in (as_instant(c) for c in committed if c) if t is not None]
    return max(times) if times else None


def _split(selectors: Sequence[str], sources: dict[str, SourceConfig]) -> tuple[list[str], list[str]]:
    """Selectors naming a source (``raw.events`` or ``source:raw.events``) and the rest (models)."""
    by_key = {k.lower(): k for k in sources}
    mine, rest = [], []
    for sel in selectors:
        name = sel.removeprefix("source:")
        if name.lower() in by_key:
            mine.append(by_key[name.lower()])
        elif sel.startswith("source:"):
            raise SelectionError(f"`{sel}`: no [sources.\"{name}\"] table in lakewrap.toml",
                                 hint="sources: " + (", ".join(sorted(sources)) or "none declared"))
        else:
            rest.append(sel)
    return mine, rest


def check(root: Path, selectors: Sequence[str] = (), now: datetime | None = None) -> list[Fresh]:
    """The freshness of the selected models and sources at ``now`` (default: the clock).

    Without selectors: every model with a ``-- freshness`` line and every ``[sources]`` table; with
    them, the models they select (a model without a policy is ``ok`` once materialized) and the
    sources they name."""
    from lakewrap.compile import load_project
    from lakewrap.config import load_config
    from lakewrap.project import require_project
    from lakewrap.substrates import of_project

    root = require_project(root)
    now = now or datetime.now(timezone.utc)
    config = load_config(root)
    project = load_project(root, None)
    if selectors:
        source_names, rest = _split(selectors, config.sources)
        specs = project.select(rest) if rest else []
    else:
        source_names = sorted(config.sources)
        specs = [s for s in project.select(()) if s.freshness is not None]
    sub = of_project(root)
    out: list[Fresh] = []
    if specs:
        with sub.state_reader(sub.open(root, read_only=True)) as read:
            for spec in specs:
                at = last_committed([m.committed_at for m in read(str(spec.target))])
                out.append(judge("model", str(spec.target), "last materialization", at, spec.freshness, now))
    for name in source_names:
        out.append(_source(root, sub, name, config.sources[name], now))
    return out


def _source(root: Path, sub: Any, name: str, src: SourceConfig, now: datetime) -> Fresh:
    from lakewrap.spec import Freshness

    policy = Freshness(warn_after=src.warn_seconds, error_after=src.error_seconds)
    if src.loaded_at is None:
        return judge("source", name, "last commit", sub.changed_at(root, name), policy, now)
    from lakewrap.compilers import freshness as q

    schema, table = name.split(".", 1)
    try:
        value = sub.query(root, q.max_loaded_at(schema, table, src.loaded_at), None, lambda c: c.fetchone()[0])
    except ExecutionError as exc:
        raise ExecutionError(f"[sources.\"{name}\"]: cannot read max({src.loaded_at}): {exc.message}",
                             hint="check the table and its loaded_at column in lakewrap.toml") from None
    try:
        at = as_instant(value)
    except ValueError:
        raise ExecutionError(f"[sources.\"{name}\"]: loaded_at column `{src.loaded_at}` holds {value!r}, not a time",
                             hint="name a TIMESTAMP, TIMESTAMPTZ or DATE column") from None
    return judge("source", name, f"max({src.loaded_at})", at, policy, now)
