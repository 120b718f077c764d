"""Schedules as pure functions: which due times of a cron expression fall between two instants, in
a time zone, and which of them a catch-up policy turns into jobs (docs/schedules.md).

Nothing here reads a clock or a database: ``lakewrap scheduler`` (:mod:`lakewrap.ticks`) passes the
instants in. Due times are aware datetimes in UTC; a cron expression is read in its schedule's time
zone (croniter walks the local calendar, so ``0 2 * * *`` in ``Europe/Berlin`` is 01:00 UTC in
winter and 00:00 UTC in summer; a local time that a DST change skips fires at the next one that
exists).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Literal

CatchUp = Literal["all", "latest", "skip"]
CATCH_UP: tuple[CatchUp, ...] = ("all", "latest", "skip")
MAX_DUE = 10_000  # due times computed per look; more is a cursor from long ago (caught up in pieces)
_ALIASES = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")


def cron_problem(expr: str) -> str | None:
    """Why ``expr`` is not a five-field cron expression (or one of ``@hourly``, ``@daily``, ...), or None."""
    from croniter import croniter  # type: ignore[import-untyped]

    text = expr.strip()
    if text.startswith("@"):
        return None if text in _ALIASES else f"unknown alias `{text}` (known: {', '.join(_ALIASES)})"
    fields = text.split()
    if len(fields) != 5:
        return f"expected 5 fields (minute hour day-of-month month day-of-week), got {len(fields)}"
    try:
        croniter(text)
    except (ValueError, KeyError) as exc:
        if "out of range" in str(exc):
            return "a field is out of range (minute 0-59, hour 0-23, day 1-31, month 1-12, weekday 0-7)"
        return "a field is not a number, range, list, step (*/15) or name (mon, jan)"
    return None


def due_times(cron: str, tz: str, after: datetime, upto: datetime, *, limit: int = MAX_DUE) -> list[datetime]:
    """The due times ``t`` of ``cron`` in ``tz`` with ``after < t <= upto`` (aware instants), in UTC,
    oldest first; at most ``limit`` of them (the oldest)."""
    from zoneinfo import ZoneInfo

    from croniter import croniter  # type: ignore[import-untyped]

    if after.tzinfo is None or upto.tzinfo is None:
        raise ValueError("due_times takes aware datetimes")
    local = ZoneInfo(tz)
    it = croniter(cron.strip(), after.astimezone(local))
    out: list[datetime] = []
    while len(out) < limit:
        nxt: datetime = it.get_next(datetime)
        if nxt <= after:  # croniter's DST fold can repeat an instant
            continue
        if nxt > upto:
            break
        utc = nxt.astimezone(timezone.utc)
        if not out or utc > out[-1]:
            out.append(utc)
    return out


@dataclass(frozen=True)
class Decision:
    """What a look at a schedule decided: the due times that become jobs, those dropped by the
    policy, and the cursor to record (the last due time looked at)."""

    fire: tuple[datetime, ...]
    skipped: tuple[datetime, ...]
    cursor: datetime


def decide(due: Sequence[datetime], policy: CatchUp, now: datetime, cursor: datetime,
           grace: timedelta) -> Decision:
    """Apply the catch-up ``policy`` to ``due`` (oldest first, all ``<= now``):

    - ``all``: every due time becomes a job (missed ticks are caught up, oldest first);
    - ``latest``: only the most recent becomes a job, the missed ones before it are skipped;
    - ``skip``: only a due time no older than ``grace`` at ``now`` becomes a job (a scheduler that
      was down does not run the ticks it missed, nor a late one).

    ``cursor`` is the previous cursor, kept when nothing was due.
    """
    if policy not in CATCH_UP:
        raise ValueError(f"unknown catch-up policy {policy!r}")
    if not due:
        return Decision((), (), cursor)
    last = due[-1]
    if policy == "all":
        return Decision(tuple(due), (), last)
    if policy == "latest":
        return Decision((last,), tuple(due[:-1]), last)
    on_time = tuple(t for t in due if now - t <= grace)[-1:]
    return Decision(on_time, tuple(t for t in due if t not in on_time), last)


def iso(t: datetime) -> str:
    """A due time as it appears in job keys: UTC, seconds, ``Z`` (``2024-01-02T06:00:00Z``)."""
    return t.astimezone(timezone.utc).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def previous_due(cron: str, tz: str, upto: datetime, count: int) -> list[datetime]:
    """The ``count`` latest due times ``<= upto``, newest first, in UTC."""
    from zoneinfo import ZoneInfo

    from croniter import croniter  # type: ignore[import-untyped]

    it = croniter(cron.strip(), (upto + timedelta(microseconds=1)).astimezone(ZoneInfo(tz)))
    out: list[datetime] = []
    while len(out) < count:
        prev: datetime = it.get_prev(datetime)
        utc = prev.astimezone(timezone.utc)
        if utc > upto:
            continue
        if out and utc >= out[-1]:  # a DST fold walked back to the same or a later instant
            continue
        out.append(utc)
    return out


@dataclass(frozen=True)
class Schedule:
    """One schedule, from ``[schedules.<name>]`` or a model's ``-- schedule`` line (named by its target)."""

    name: str
    cron: str
    tz: str
    select: tuple[str, ...]
    partition: str  # "latest" | "none" | a value
    catch_up: CatchUp
    grace: timedelta
    where: str  # "lakewrap.toml" or the model file, for messages

