"""Time partitions: values, half-open windows and calendar arithmetic.

A partition is named by a *value* in the grain's canonical format and covers the half-open window
``[start, end)`` of instants. Windows are computed from **local calendar boundaries** in the
partition's time zone, never by adding a fixed number of hours, so a daily partition on a DST day
lasts 23 or 25 hours, and consecutive windows never overlap or leave a gap.

========  ==================  =======================================
grain     value format        window
========  ==================  =======================================
hourly    ``2024-03-10T05``   local hour start → next local hour start
daily     ``2024-03-10``      local midnight → next local midnight
weekly    ``2024-W10``        ISO week: Monday 00:00 → next Monday
monthly   ``2024-03``         first of month → first of next month
yearly    ``2024``            1 January → next 1 January
========  ==================  =======================================

A local wall time that does not exist (skipped by a DST jump) maps to the instant of the jump, so
an hour (or, in Pacific/Apia on 2011-12-30, a day) that is skipped entirely has an empty window and
is not a valid partition: :func:`parse_partition` refuses it and ``next``/``previous`` step over it.
Window bounds carry the fixed UTC offset in force at that instant, so comparing and subtracting them
is exact (datetimes sharing one ``ZoneInfo`` compare and subtract by wall time, ignoring offsets).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from enum import Enum
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from lakewrap.errors import PlanError, suggest


class Grain(str, Enum):
    """The calendar unit of a time partition."""

    HOURLY = "hourly"
    DAILY = "daily"
    WEEKLY = "weekly"
    MONTHLY = "monthly"
    YEARLY = "yearly"


_FORMATS: dict[Grain, tuple[re.Pattern[str], str]] = {
    # re.ASCII: `\d` would otherwise accept any Unicode digit ("٢٠٢٤"), giving non-canonical values.
    Grain.HOURLY: (re.compile(r"^(\d{4})-(\d{2})-(\d{2})[T ](\d{2})(?::00(?::00)?)?$", re.ASCII), "YYYY-MM-DDTHH"),
    Grain.DAILY: (re.compile(r"^(\d{4})-(\d{2})-(\d{2})$", re.ASCII), "YYYY-MM-DD"),
    Grain.WEEKLY: (re.compile(r"^(\d{4})-W(\d{2})$", re.ASCII), "YYYY-Www (ISO week)"),
    Grain.MONTHLY: (re.compile(r"^(\d{4})-(\d{2})$", re.ASCII), "YYYY-MM"),
    Grain.YEARLY: (re.compile(r"^(\d{4})$", re.ASCII), "YYYY"),
}

UTC = timezone.utc


@lru_cache(maxsize=256)
def zone(name: str) -> ZoneInfo:
    """Resolve an IANA time zone name, or raise :class:`PlanError` with a suggestion."""
    try:
        if not name or name.startswith(("/", ".")) or ".." in name:
            raise ZoneInfoNotFoundError(name)
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        close = suggest(name, _common_zones())
        hint = "use an IANA name such as `UTC` or `Europe/Berlin`"
        raise PlanError(
            f"unknown time zone `{name}`",
            hint=f"did you mean `{close}`? {hint}" if close else hint,
        ) from None


@lru_cache(maxsize=1)
def _common_zones() -> frozenset[str]:
    return frozenset(available_timezones())


@dataclass(frozen=True, order=True)
class Window:
    """A half-open interval of instants ``[start, end)``, both timezone-aware."""

    start: datetime
    end: datetime

    def contains(self, instant: datetime) -> bool:
        """Whether an aware instant lies inside the window."""
        return self.start <= instant < self.end

    @property
    def duration(self) -> timedelta:
        return self.end - self.start


def _instant(wall: datetime, tz: ZoneInfo) -> datetime:
    """The instant of a local wall time, with the fixed UTC offset in force then.

    An ambiguous wall time (repeated by a DST fall-back) maps to its first occurrence. A skipped wall
    time maps to the instant of the jump: the first instant whose local time is after it.

    ``astimezone`` to the wall time's own ``ZoneInfo`` is a no-op, and aware datetimes that share a
    ``ZoneInfo`` compare and subtract by wall time, so the result is converted through UTC.
    """
    try:
        first = wall.replace(tzinfo=tz, fold=0).astimezone(UTC)
        if _local(first, tz) != wall:
            # Inside a gap, fold=0 reads the wall time with the offset before the jump (an instant at
            # or after the jump) and fold=1 with the offset after it (an instant before the jump).
            # Bisect between them for the first instant whose local time is not before `wall`.
            lo, hi = wall.replace(tzinfo=tz, fold=1).astimezone(UTC), first
            while hi - lo > timedelta(microseconds=1):
                mid = lo + (hi - lo) // 2
                if _local(mid, tz) >= wall:
                    hi = mid
                else:
                    lo = mid
            first = hi
        local = first.astimezone(tz)
    except OverflowError:
        raise PlanError(
            f"{wall.isoformat()} in {tz.key} is outside the supported range of instants",
            hint="use a partition between the years 0002 and 9998",
        ) from None
    offset = local.utcoffset()
    assert offset is not None
    return local.replace(tzinfo=timezone(offset), fold=0)


def _local(instant: datetime, tz: ZoneInfo) -> datetime:
    """The naive local wall time of an aware instant."""
    return instant.astimezone(tz).replace(tzinfo=None, fold=0)


@dataclass(frozen=True, order=True)
class Partition:
    """One time partition: its grain, its local wall-clock start and its time zone name."""

    grain: Grain
    wall: datetime  # naive local wall time of the partition's start
    tz: str = "UTC"

    @property
    def value(self) -> str:
        """The canonical value, e.g. ``2024-03-10`` for a daily partition."""
        w = self.wall
        # Not strftime: its %Y does not zero-pad years before 1000 on every platform.
        match self.grain:
            case Grain.HOURLY:
                return f"{w.year:04d}-{w.month:02d}-{w.day:02d}T{w.hour:02d}"
            case Grain.DAILY:
                return f"{w.year:04d}-{w.month:02d}-{w.day:02d}"
            case Grain.WEEKLY:
                year, week, _ = w.date().isocalendar()
                return f"{year:04d}-W{week:02d}"
            case Grain.MONTHLY:
                return f"{w.year:04d}-{w.month:02d}"
            case Grain.YEARLY:
                return f"{w.year:04d}"
        raise AssertionError(self.grain)  # pragma: no cover

    def next(self) -> Partition:
        """The partition right after this one (stepping over partitions a DST jump skips)."""
        return self._walk(+1)

    def previous(self) -> Partition:
        """The partition right before this one (stepping over partitions a DST jump skips)."""
        return self._walk(-1)

    def _walk(self, n: int) -> Partition:
        part = Partition(self.grain, _step(self.grain, self.wall, n), self.tz)
        while part.window.duration <= timedelta(0):
            part = Partition(self.grain, _step(self.grain, part.wall, n), self.tz)
        return part

    @property
    def window(self) -> Window:
        """The half-open window of instants this partition covers, in its time zone."""
        tz = zone(self.tz)
        return Window(_instant(self.wall, tz), _instant(_step(self.grain, self.wall, +1), tz))

    def __str__(self) -> str:
        return self.value


def _step(grain: Grain, wall: datetime, n: int) -> datetime:
    try:
        match grain:
            case Grain.HOURLY:
                return wall + timedelta(hours=n)
            case Grain.DAILY:
                return wall + timedelta(days=n)
            case Grain.WEEKLY:
                return wall + timedelta(weeks=n)
            case Grain.MONTHLY:
                months = wall.year * 12 + (wall.month - 1) + n
                return wall.replace(year=months // 12, month=months % 12 + 1)
            case Grain.YEARLY:
                return wall.replace(year=wall.year + n)
    except (OverflowError, ValueError):
        raise PlanError(
            f"stepping {n:+d} {grain.value} partition(s) from {wall.isoformat()} leaves the supported years",
            hint="use a partition between the years 0002 and 9998",
        ) from None
    raise AssertionError(grain)  # pragma: no cover


def parse_partition(grain: Grain, value: str, tz: str = "UTC") -> Partition:
    """Parse a partition value of ``grain`` into a :class:`Partition`.

    >>> parse_partition(Grain.DAILY, "2024-03-10", "America/New_York").window.duration
    datetime.timedelta(seconds=82800)

    Raises:
        PlanError: the value has the wrong format, names an impossible date, or names an hour that
            a DST jump skips entirely.
    """
    pattern, shape = _FORMATS[grain]
    m = pattern.match(value.strip())
    if m is None:
        raise PlanError(
            f"`{value}` is not a {grain.value} partition value",
            hint=f"{grain.value} partitions are written {shape}, e.g. `{_EXAMPLES[grain]}`",
        )
    nums = [int(g) for g in m.groups()]
    try:
        match grain:
            case Grain.HOURLY:
                if nums[3] > 23:
                    raise ValueError("hour must be in 0..23")
                wall = datetime(nums[0], nums[1], nums[2], nums[3])
            case Grain.DAILY:
                wall = datetime(nums[0], nums[1], nums[2])
            case Grain.WEEKLY:
                wall = datetime.combine(date.fromisocalendar(nums[0], nums[1], 1), datetime.min.time())
            case Grain.MONTHLY:
                wall = datetime(nums[0], nums[1], 1)
            case Grain.YEARLY:
                wall = datetime(nums[0], 1, 1)
    except ValueError as exc:
        raise PlanError(
            f"`{value}` is not a valid {grain.value} partition: {exc}",
            hint=f"{grain.value} partitions are written {shape}, e.g. `{_EXAMPLES[grain]}`",
        ) from None
    if wall.year < 2 or wall.year > 9998:
        raise PlanError(
            f"`{value}` is outside the supported years 0002..9998",
            hint=f"{grain.value} partitions are written {shape}, e.g. `{_EXAMPLES[grain]}`",
        )
    part = Partition(grain, wall, tz)
    if part.window.duration <= timedelta(0):
        raise PlanError(
            f"{grain.value} partition `{value}` does not exist in {tz}: a clock change skips it entirely",
            hint=f"use `{part.next().value}`, which starts at the same instant",
        )
    return part


_EXAMPLES = {
    Grain.HOURLY: "2024-01-02T05",
    Grain.DAILY: "2024-01-02",
    Grain.WEEKLY: "2024-W01",
    Grain.MONTHLY: "2024-01",
    Grain.YEARLY: "2024",
}


def partition_of(grain: Grain, instant: datetime, tz: str = "UTC") -> Partition:
    """The partition whose window contains the aware ``instant``."""
    if instant.tzinfo is None:
        raise ValueError("partition_of needs a timezone-aware instant")
    try:
        local = instant.astimezone(zone(tz)).replace(tzinfo=None, fold=0)
    except OverflowError:  # the local time of an instant at datetime's ends can fall outside it
        raise PlanError(
            f"{instant.isoformat()} in {tz} is outside the supported range of instants",
            hint="use a time between the years 0002 and 9998",
        ) from None
    match grain:
        case Grain.HOURLY:
            wall = local.replace(minute=0, second=0, microsecond=0)
        case Grain.DAILY:
            wall = local.replace(hour=0, minute=0, second=0, microsecond=0)
        case Grain.WEEKLY:
            day = local.date() - timedelta(days=local.weekday())
            wall = datetime.combine(day, datetime.min.time())
        case Grain.MONTHLY:
            wall = datetime(local.year, local.month, 1)
        case Grain.YEARLY:
            wall = datetime(local.year, 1, 1)
    part = Partition(grain, wall, tz)
    # A wall time inside a skipped hour cannot come from astimezone(); an instant just before a
    # jump can still land in an empty hour's neighbour, so walk to the window that holds it.
    while not part.window.contains(instant):
        part = part.next() if instant >= part.window.end else part.previous()
    return part


def partition_range(first: Partition, last: Partition) -> Iterator[Partition]:
    """Every partition from ``first`` to ``last`` inclusive, skipping empty (skipped) hours."""
    if last < first:
        raise PlanError(
            f"the range ends ({last.value}) before it starts ({first.value})",
            hint="give --start before --end",
        )
    part = first
    while part <= last:
        if part.window.duration > timedelta(0):
            yield part
        part = part.next()


def latest_complete(grain: Grain, now: datetime, tz: str = "UTC") -> Partition:
    """The latest partition whose window has fully passed at ``now`` (an aware instant)."""
    return partition_of(grain, now, tz).previous()
