"""Time partitions: calendar windows, DST, odd offsets, bad values, ranges and lookback."""

from __future__ import annotations

import itertools
from datetime import date, datetime, timedelta, timezone
from functools import cache
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakewrap.errors import PlanError
from lakewrap.partitions import (
    Grain,
    Partition,
    latest_complete,
    parse_partition,
    partition_of,
    partition_range,
    zone,
)
from lakewrap.plan import bind_time
from lakewrap.spec import TimePartitioning

UTC = timezone.utc
ZONES = (
    "UTC",
    "America/New_York",
    "Europe/Berlin",
    "Australia/Lord_Howe",  # 30-minute DST shift
    "Asia/Kathmandu",  # +05:45
    "America/Santiago",  # DST jumps at local midnight
    "Pacific/Apia",  # skipped 2011-12-30 entirely
    "Europe/London",
    "America/St_Johns",  # -03:30; until 2011 its clocks changed at 00:01, inside an hour
)
GRAINS = tuple(Grain)

grains = st.sampled_from(GRAINS)
zones = st.sampled_from(ZONES)
# Aware instants over 1990..2040, expressed in UTC or in one of the zones (including fold=1 times).
instants = st.datetimes(
    min_value=datetime(1990, 1, 1),
    max_value=datetime(2040, 12, 31, 23, 59, 59),
    timezones=st.sampled_from([UTC, *(ZoneInfo(z) for z in ZONES)]),
    allow_imaginary=False,
)


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[arg-type,misc]


FAST = settings(max_examples=300, deadline=None)


@cache
def transitions(tz: str) -> tuple[datetime, ...]:
    """Every UTC-offset change of ``tz`` in 1990..2040, found by day steps and bisection."""
    zi = ZoneInfo(tz)
    found: list[datetime] = []
    day = utc(1990, 1, 1)
    offset = day.astimezone(zi).utcoffset()
    while day.year <= 2040:
        nxt = day + timedelta(days=1)
        new = nxt.astimezone(zi).utcoffset()
        if new != offset:
            lo, hi = day, nxt
            while hi - lo > timedelta(seconds=1):
                mid = lo + timedelta(seconds=(hi - lo) // timedelta(seconds=2))
                lo, hi = (lo, mid) if mid.astimezone(zi).utcoffset() == new else (mid, hi)
            found.append(hi)
            offset = new
        day = nxt
    return tuple(found)


# Instants within a few hours of a clock change, where calendar arithmetic goes wrong.
def _near(tz: str) -> st.SearchStrategy[tuple[str, datetime]]:
    shift = st.integers(-4 * 3600, 4 * 3600).map(lambda s: timedelta(seconds=s))
    return st.tuples(st.just(tz), st.builds(lambda t, d: t + d, st.sampled_from(transitions(tz)), shift))


near_transitions = st.sampled_from([z for z in ZONES if transitions(z)]).flatmap(_near)
zoned = st.one_of(st.tuples(zones, instants), near_transitions)


def wall_value(grain: Grain, local: datetime) -> str:
    """The value of the partition holding a local wall time, computed independently of the module."""
    match grain:
        case Grain.HOURLY:
            return f"{local.year:04d}-{local.month:02d}-{local.day:02d}T{local.hour:02d}"
        case Grain.DAILY:
            return f"{local.year:04d}-{local.month:02d}-{local.day:02d}"
        case Grain.WEEKLY:
            year, week, _ = local.isocalendar()
            return f"{year:04d}-W{week:02d}"
        case Grain.MONTHLY:
            return f"{local.year:04d}-{local.month:02d}"
        case Grain.YEARLY:
            return f"{local.year:04d}"
    raise AssertionError(grain)


def ambiguous(local: datetime) -> bool:
    """Whether a local wall time occurs twice (a DST fall-back repeats it)."""
    other = local.replace(fold=1 - local.fold)
    return other.astimezone(UTC) != local.astimezone(UTC)


def back(p: Partition, n: int) -> Partition:
    """``n`` real partitions before ``p``, found through instants (not through ``previous``)."""
    for _ in range(n):
        p = partition_of(p.grain, p.window.start.astimezone(UTC) - timedelta(microseconds=1), p.tz)
    return p


def expect_plan_error(grain: Grain, value: str, tz: str = "UTC") -> PlanError:
    with pytest.raises(PlanError) as info:
        parse_partition(grain, value, tz)
    return info.value


# --- properties -----------------------------------------------------------------------------------


@FAST
@given(grain=grains, zi=zoned)
def test_instant_lies_in_exactly_its_partition(grain: Grain, zi: tuple[str, datetime]) -> None:
    tz, instant = zi
    p = partition_of(grain, instant, tz)
    w = p.window
    assert w.contains(instant)
    assert w.duration > timedelta(0)
    assert not p.previous().window.contains(instant)
    assert not p.next().window.contains(instant)
    # No gap, no overlap with the neighbours.
    assert p.previous().window.end == w.start
    assert w.end == p.next().window.start
    # The partition is the one named by the instant's local wall clock. A wall time repeated by a
    # fall-back that is not aligned to the grain (St John's 00:01 → 23:01) can only name the
    # partition of its first occurrence; the second occurrence lies in a later window.
    local = instant.astimezone(ZoneInfo(tz))
    if ambiguous(local):
        assert parse_partition(grain, wall_value(grain, local), tz).window.start <= instant
    else:
        assert p.value == wall_value(grain, local)
    assert parse_partition(grain, p.value, tz) == p


@FAST
@given(grain=grains, zi=zoned)
def test_consecutive_partitions_tile_time(grain: Grain, zi: tuple[str, datetime]) -> None:
    tz, instant = zi
    p = partition_of(grain, instant, tz)
    for _ in range(12):
        q = p.next()
        assert p.window.end == q.window.start
        assert q.window.duration > timedelta(0)
        assert q.value > p.value  # canonical values sort like time
        assert q.previous() == p
        assert parse_partition(grain, q.value, tz) == q
        p = q


@FAST
@given(grain=grains, zi=zoned)
def test_window_bounds_are_exact_instants(grain: Grain, zi: tuple[str, datetime]) -> None:
    """Window bounds subtract and compare as instants, whatever tzinfo they carry."""
    tz, instant = zi
    w = partition_of(grain, instant, tz).window
    start_utc, end_utc = w.start.astimezone(UTC), w.end.astimezone(UTC)
    assert w.duration == end_utc - start_utc
    assert w.contains(instant.astimezone(UTC))
    assert w.contains(instant.astimezone(ZoneInfo(tz)))
    # The local wall time at the window start is the partition's start (or the DST jump past it).
    local = w.start.astimezone(ZoneInfo(tz)).replace(tzinfo=None)
    assert local >= partition_of(grain, instant, tz).wall


@FAST
@given(
    grain=grains,
    tz=zones,
    day=st.dates(min_value=date(1990, 1, 1), max_value=date(2040, 12, 31)),
    hour=st.integers(0, 23),
)
def test_parse_accepts_every_existing_value(grain: Grain, tz: str, day: date, hour: int) -> None:
    """A value parses unless its whole window is skipped; it round-trips through `.value`."""
    wall = datetime(day.year, day.month, day.day, hour)
    value = wall_value(grain, wall)
    try:
        p = parse_partition(grain, value, tz)
    except PlanError as exc:
        assert grain in (Grain.HOURLY, Grain.DAILY)
        assert "skips it" in exc.message and exc.hint is not None
        return
    assert p.value == value
    assert p.window.duration > timedelta(0)
    assert parse_partition(grain, p.value, tz) == p


@FAST
@given(grain=grains, zi=zoned)
def test_latest_complete_is_just_before_now(grain: Grain, zi: tuple[str, datetime]) -> None:
    tz, now = zi
    current = partition_of(grain, now, tz)
    done = latest_complete(grain, now, tz)
    assert done.window.end == current.window.start
    assert done.window.end <= now
    assert done.window.duration > timedelta(0)
    assert done.next() == current


@settings(max_examples=200, deadline=None)
@given(grain=grains, zi=zoned, lookback=st.integers(0, 6))
def test_lookback_widens_the_start_by_n_partitions(grain: Grain, zi: tuple[str, datetime], lookback: int) -> None:
    tz, instant = zi
    p = partition_of(grain, instant, tz)
    b = bind_time(TimePartitioning(grain=grain, key="ts", tz=tz, lookback=lookback), p.value)
    assert b.value == p.value
    assert b.end == p.window.end
    first = p
    for _ in range(lookback):
        first = first.previous()
    assert b.start == first.window.start == back(p, lookback).window.start
    # N whole (non-empty) partitions before p, plus p itself.
    covered = list(partition_range(first, p))
    assert len(covered) == lookback + 1
    assert all(c.window.duration > timedelta(0) for c in covered)


@settings(max_examples=150, deadline=None)
@given(grain=st.sampled_from([Grain.HOURLY, Grain.DAILY]), zi=near_transitions, lookback=st.integers(1, 6))
def test_lookback_over_clock_changes(grain: Grain, zi: tuple[str, datetime], lookback: int) -> None:
    """Skipped hours (and Apia's skipped day) are not partitions: lookback never counts them."""
    tz, instant = zi
    p = partition_of(grain, instant, tz)
    b = bind_time(TimePartitioning(grain=grain, key="ts", tz=tz, lookback=lookback), p.value)
    assert b.start == back(p, lookback).window.start
    covered = list(partition_range(partition_of(grain, b.start, tz), p))
    assert len(covered) == lookback + 1


# --- DST and odd offsets --------------------------------------------------------------------------


def test_new_york_spring_forward_day_lasts_23_hours() -> None:
    p = parse_partition(Grain.DAILY, "2024-03-10", "America/New_York")
    assert p.window.duration == timedelta(hours=23)
    assert p.window.start == utc(2024, 3, 10, 5)
    assert p.window.end == utc(2024, 3, 11, 4)


def test_new_york_fall_back_day_lasts_25_hours() -> None:
    p = parse_partition(Grain.DAILY, "2024-11-03", "America/New_York")
    assert p.window.duration == timedelta(hours=25)
    assert p.window.start == utc(2024, 11, 3, 4)
    assert p.window.end == utc(2024, 11, 4, 5)


def test_window_bounds_keep_the_local_offset() -> None:
    w = parse_partition(Grain.DAILY, "2024-03-10", "America/New_York").window
    assert w.start.isoformat() == "2024-03-10T00:00:00-05:00"
    assert w.end.isoformat() == "2024-03-11T00:00:00-04:00"


def test_new_york_skipped_hour_is_an_error_with_a_hint() -> None:
    err = expect_plan_error(Grain.HOURLY, "2024-03-10T02", "America/New_York")
    assert "does not exist" in err.message
    assert err.hint is not None and "2024-03-10T03" in err.hint
    # The neighbours meet at the jump.
    one = parse_partition(Grain.HOURLY, "2024-03-10T01", "America/New_York")
    three = parse_partition(Grain.HOURLY, "2024-03-10T03", "America/New_York")
    assert one.window.end == three.window.start == utc(2024, 3, 10, 7)
    assert one.next() == three and three.previous() == one


def test_new_york_repeated_hour_lasts_2_hours() -> None:
    p = parse_partition(Grain.HOURLY, "2024-11-03T01", "America/New_York")
    assert p.window.duration == timedelta(hours=2)
    assert p.window.start == utc(2024, 11, 3, 5)
    assert p.window.end == utc(2024, 11, 3, 7)
    # Both 01:30s (EDT and EST) are in it.
    assert partition_of(Grain.HOURLY, utc(2024, 11, 3, 5, 30), "America/New_York") == p
    assert partition_of(Grain.HOURLY, utc(2024, 11, 3, 6, 30), "America/New_York") == p


def test_lord_howe_half_hour_shifts() -> None:
    # 2024-10-06 02:00 +10:30 → 02:30 +11:00: hour 02 has 30 minutes.
    spring = parse_partition(Grain.HOURLY, "2024-10-06T02", "Australia/Lord_Howe")
    assert spring.window.duration == timedelta(minutes=30)
    assert spring.window.start == utc(2024, 10, 5, 15, 30)
    day = parse_partition(Grain.DAILY, "2024-10-06", "Australia/Lord_Howe")
    assert day.window.duration == timedelta(hours=23, minutes=30)
    # 2024-04-07 02:00 +11:00 → 01:30 +10:30: hour 01 lasts 90 minutes.
    autumn = parse_partition(Grain.HOURLY, "2024-04-07T01", "Australia/Lord_Howe")
    assert autumn.window.duration == timedelta(minutes=90)
    assert parse_partition(Grain.DAILY, "2024-04-07", "Australia/Lord_Howe").window.duration == timedelta(
        hours=24, minutes=30
    )


def test_kathmandu_days_start_at_18_15_utc() -> None:
    p = parse_partition(Grain.DAILY, "2024-01-02", "Asia/Kathmandu")
    assert p.window.start == utc(2024, 1, 1, 18, 15)
    assert p.window.end == utc(2024, 1, 2, 18, 15)
    assert partition_of(Grain.DAILY, utc(2024, 1, 1, 18, 14, 59), "Asia/Kathmandu").value == "2024-01-01"
    assert partition_of(Grain.DAILY, utc(2024, 1, 1, 18, 15), "Asia/Kathmandu").value == "2024-01-02"


def test_apia_skipped_a_whole_day() -> None:
    err = expect_plan_error(Grain.DAILY, "2011-12-30", "Pacific/Apia")
    assert err.hint is not None and "2011-12-31" in err.hint
    before = parse_partition(Grain.DAILY, "2011-12-29", "Pacific/Apia")
    after = parse_partition(Grain.DAILY, "2011-12-31", "Pacific/Apia")
    assert before.next() == after and after.previous() == before
    assert before.window.end == after.window.start == utc(2011, 12, 30, 10)
    assert [p.value for p in partition_range(before, after)] == ["2011-12-29", "2011-12-31"]
    hours = list(
        partition_range(
            parse_partition(Grain.HOURLY, "2011-12-29T23", "Pacific/Apia"),
            parse_partition(Grain.HOURLY, "2011-12-31T00", "Pacific/Apia"),
        )
    )
    assert [p.value for p in hours] == ["2011-12-29T23", "2011-12-31T00"]


def test_santiago_midnight_jump() -> None:
    # 2024-09-08 00:00 -04:00 → 01:00 -03:00: the day starts at the jump and lasts 23 hours.
    p = parse_partition(Grain.DAILY, "2024-09-08", "America/Santiago")
    assert p.window.start == utc(2024, 9, 8, 4)
    assert p.window.duration == timedelta(hours=23)
    expect_plan_error(Grain.HOURLY, "2024-09-08T00", "America/Santiago")


def test_st_johns_jump_inside_an_hour() -> None:
    # 2010-03-14 00:01 -03:30 → 01:01 -02:30: hour 00 keeps one minute, hour 01 has 59.
    zero = parse_partition(Grain.HOURLY, "2010-03-14T00", "America/St_Johns")
    one = parse_partition(Grain.HOURLY, "2010-03-14T01", "America/St_Johns")
    assert zero.window.duration == timedelta(minutes=1)
    assert one.window.start == utc(2010, 3, 14, 3, 31)
    assert one.window.duration == timedelta(minutes=59)
    assert partition_of(Grain.HOURLY, utc(2010, 3, 14, 4), "America/St_Johns") == one


def test_weekly_uses_iso_years() -> None:
    p = parse_partition(Grain.WEEKLY, "2020-W53")
    assert p.window.start == utc(2020, 12, 28)
    assert p.next().value == "2021-W01"
    assert partition_of(Grain.WEEKLY, utc(2021, 1, 3, 23), "UTC") == p
    assert parse_partition(Grain.WEEKLY, "2025-W01").window.start == utc(2024, 12, 30)


# --- bad values -----------------------------------------------------------------------------------

SHAPES = {
    Grain.HOURLY: "YYYY-MM-DDTHH",
    Grain.DAILY: "YYYY-MM-DD",
    Grain.WEEKLY: "YYYY-Www",
    Grain.MONTHLY: "YYYY-MM",
    Grain.YEARLY: "YYYY",
}


@pytest.mark.parametrize(
    ("grain", "value"),
    [
        (Grain.HOURLY, "2024-01-02"),
        (Grain.HOURLY, "2024-01-02T5"),
        (Grain.HOURLY, "2024-01-02T24"),
        (Grain.HOURLY, "2024-01-02T05:30"),
        (Grain.DAILY, "2024-1-2"),
        (Grain.DAILY, "2024/01/02"),
        (Grain.DAILY, "2024-02-30"),
        (Grain.DAILY, "2023-02-29"),
        (Grain.DAILY, "2024-13-01"),
        (Grain.DAILY, "2024-00-10"),
        (Grain.DAILY, "٢٠٢٤-٠١-٠٢"),  # non-ASCII digits
        (Grain.DAILY, ""),
        (Grain.WEEKLY, "2024-W54"),
        (Grain.WEEKLY, "2024-W53"),  # 2024 has 52 ISO weeks
        (Grain.WEEKLY, "2024-W00"),
        (Grain.WEEKLY, "2024-10"),
        (Grain.MONTHLY, "2024-13"),
        (Grain.MONTHLY, "2024-00"),
        (Grain.MONTHLY, "2024-03-01"),
        (Grain.YEARLY, "24"),
        (Grain.YEARLY, "0000"),
        (Grain.YEARLY, "9999"),
        (Grain.YEARLY, "2024-01"),
    ],
)
def test_bad_values_are_plan_errors_showing_the_format(grain: Grain, value: str) -> None:
    err = expect_plan_error(grain, value)
    assert value in err.message
    assert err.hint is not None and SHAPES[grain] in err.hint


@FAST
@given(grain=grains, value=st.text(max_size=16))
def test_arbitrary_text_parses_or_is_a_plan_error(grain: Grain, value: str) -> None:
    try:
        p = parse_partition(grain, value)
    except PlanError as exc:
        assert exc.hint is not None
    else:
        assert parse_partition(grain, p.value) == p


def test_unknown_zone_suggests_a_close_name() -> None:
    with pytest.raises(PlanError) as info:
        zone("Europe/Berlim")
    assert info.value.hint is not None and "Europe/Berlin" in info.value.hint


def test_partition_of_needs_an_aware_instant() -> None:
    with pytest.raises(ValueError):
        partition_of(Grain.DAILY, datetime(2024, 1, 1))


def test_values_of_early_years_are_zero_padded() -> None:
    for grain, value in [
        (Grain.HOURLY, "0999-01-02T03"),
        (Grain.DAILY, "0999-01-02"),
        (Grain.MONTHLY, "0999-01"),
        (Grain.YEARLY, "0999"),
        (Grain.WEEKLY, "0999-W02"),
    ]:
        assert parse_partition(grain, value).value == value


# --- ranges, latest complete, lookback ------------------------------------------------------------


def test_partition_range_is_inclusive() -> None:
    first = parse_partition(Grain.DAILY, "2024-02-27")
    last = parse_partition(Grain.DAILY, "2024-03-01")
    assert [p.value for p in partition_range(first, last)] == ["2024-02-27", "2024-02-28", "2024-02-29", "2024-03-01"]
    assert list(partition_range(first, first)) == [first]


def test_partition_range_skips_empty_hours() -> None:
    first = parse_partition(Grain.HOURLY, "2024-03-10T00", "America/New_York")
    last = parse_partition(Grain.HOURLY, "2024-03-10T04", "America/New_York")
    values = [p.value for p in partition_range(first, last)]
    assert values == ["2024-03-10T00", "2024-03-10T01", "2024-03-10T03", "2024-03-10T04"]
    # Even from and to a skipped hour built by hand.
    empty = Partition(Grain.HOURLY, datetime(2024, 3, 10, 2), "America/New_York")
    assert empty.window.duration == timedelta(0)
    assert [p.value for p in partition_range(empty, empty)] == []
    assert [p.value for p in partition_range(first, empty)] == ["2024-03-10T00", "2024-03-10T01"]


def test_partition_range_end_before_start_is_a_plan_error() -> None:
    first = parse_partition(Grain.MONTHLY, "2024-03")
    with pytest.raises(PlanError) as info:
        list(partition_range(first, first.previous()))
    assert info.value.hint is not None


@settings(max_examples=150, deadline=None)
@given(grain=grains, zi=zoned, steps=st.integers(0, 40))
def test_partition_range_matches_walking(grain: Grain, zi: tuple[str, datetime], steps: int) -> None:
    tz, instant = zi
    walked = [partition_of(grain, instant, tz)]
    for _ in range(steps):
        walked.append(walked[-1].next())
    assert list(partition_range(walked[0], walked[-1])) == walked
    for p, q in itertools.pairwise(walked):
        assert p.window.end == q.window.start


def test_latest_complete_examples() -> None:
    assert latest_complete(Grain.DAILY, utc(2024, 3, 10, 12)).value == "2024-03-09"
    assert latest_complete(Grain.DAILY, utc(2024, 3, 10)).value == "2024-03-09"
    assert latest_complete(Grain.DAILY, utc(2024, 3, 10, 4, 59), "America/New_York").value == "2024-03-08"
    assert latest_complete(Grain.DAILY, utc(2024, 3, 10, 5), "America/New_York").value == "2024-03-09"
    # At 03:30 EDT the latest complete hour is 01 (02 never happened).
    assert latest_complete(Grain.HOURLY, utc(2024, 3, 10, 7, 30), "America/New_York").value == "2024-03-10T01"
    assert latest_complete(Grain.WEEKLY, utc(2024, 1, 3)).value == "2023-W52"
    assert latest_complete(Grain.MONTHLY, utc(2024, 3, 1)).value == "2024-02"
    assert latest_complete(Grain.YEARLY, utc(2024, 6, 1)).value == "2023"


def test_lookback_examples() -> None:
    spec = TimePartitioning(grain=Grain.MONTHLY, key="ts", tz="UTC", lookback=2)
    b = bind_time(spec, "2024-03")
    assert (b.start, b.end, b.lookback) == (utc(2024, 1, 1), utc(2024, 4, 1), 2)
    # Over a skipped hour: lookback=1 from 03:00 reaches back to 01:00, not to the empty 02.
    ny = TimePartitioning(grain=Grain.HOURLY, key="ts", tz="America/New_York", lookback=1)
    b = bind_time(ny, "2024-03-10T03")
    assert b.start == utc(2024, 3, 10, 6)
    assert b.end == utc(2024, 3, 10, 8)
    # Default value: the latest complete partition.
    b = bind_time(TimePartitioning(grain=Grain.DAILY, key="ts", lookback=0), None, now=utc(2024, 3, 10, 12))
    assert b.value == "2024-03-09"
    assert b.params()["partition_start"].python() == utc(2024, 3, 9)
