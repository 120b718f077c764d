"""Edges of partition windows that mutation testing (docs/testing.md) found untested: windows sort by
time (``Window`` is an ordered dataclass), the supported years end exactly at 0002 and 9998 (and stepping
past the years a datetime holds is a PlanError), and an
unknown time zone's hint suggests a name only when one is close."""

from __future__ import annotations

import itertools
import random
from datetime import datetime, timezone

import pytest

from lakewrap.errors import PlanError
from lakewrap.partitions import Grain, parse_partition, partition_of, partition_range


def test_windows_sort_by_start_across_a_clock_change() -> None:
    first, last = parse_partition(Grain.HOURLY, "2024-03-31T00", "Europe/Berlin"), \
        parse_partition(Grain.HOURLY, "2024-03-31T05", "Europe/Berlin")
    windows = [p.window for p in partition_range(first, last)]
    assert len(windows) == 5  # 02:00 does not exist that night
    shuffled = windows[:]
    random.Random(5).shuffle(shuffled)
    assert sorted(shuffled) == windows
    assert all(a.end == b.start for a, b in itertools.pairwise(windows))
    assert min(shuffled) == windows[0] and max(shuffled) == windows[-1]


@pytest.mark.parametrize("grain", list(Grain), ids=lambda g: g.value)
def test_the_supported_years_are_0002_to_9998(grain: Grain) -> None:
    first = {Grain.HOURLY: "{y}-01-02T00", Grain.DAILY: "{y}-01-02", Grain.WEEKLY: "{y}-W02",
             Grain.MONTHLY: "{y}-02", Grain.YEARLY: "{y}"}[grain]
    for year in ("0002", "9998"):
        assert parse_partition(grain, first.format(y=year)).value == first.format(y=year)
    for year in ("0001", "9999"):
        with pytest.raises(PlanError, match=r"outside the supported years 0002\.\.9998"):
            parse_partition(grain, first.format(y=year))


@pytest.mark.parametrize("grain", list(Grain))
@pytest.mark.parametrize("tz", ["America/New_York", "Pacific/Kiritimati", "UTC"])
def test_the_partition_of_an_instant_at_the_ends_of_time_is_a_plan_error(grain: Grain, tz: str) -> None:
    """``--now`` at the ends of what datetime holds: the partition that contains it (or the one after
    it, whose window a run needs) is refused with a PlanError, never Python's OverflowError; where it
    exists (year 1 in UTC) it is returned."""
    late = datetime(9999, 12, 31, 23, tzinfo=timezone.utc)
    with pytest.raises(PlanError, match="supported"):
        partition_of(grain, late, tz).window  # noqa: B018  (the window's end is past year 9999)
    early = datetime(1, 1, 1, 1, tzinfo=timezone.utc)
    if tz == "UTC":
        assert partition_of(grain, early, tz).window.contains(early)
    else:  # the local time is in year 0 (west of UTC) or the window's start is (east)
        with pytest.raises(PlanError, match="outside the supported range of instants"):
            partition_of(grain, early, tz)


def test_a_window_bound_past_the_last_instant_is_a_plan_error() -> None:
    """A wall time whose instant datetime cannot hold (New York's 9999-12-31T19:00, an hour whose end
    is 10000-01-01 UTC) is refused by the window's own conversion."""
    with pytest.raises(PlanError, match=r"9999-12-31T19:00:00 in America/New_York is outside the supported range"):
        partition_of(Grain.HOURLY, datetime(9999, 12, 31, 23, tzinfo=timezone.utc), "America/New_York")


def test_an_unknown_time_zone_suggests_a_close_name_only_when_there_is_one() -> None:
    from lakewrap.partitions import zone

    with pytest.raises(PlanError) as typo:
        zone("Europe/Berln")
    assert typo.value.hint is not None and typo.value.hint.startswith("did you mean `Europe/Berlin`?")
    with pytest.raises(PlanError) as empty:
        zone("")
    assert empty.value.hint == "use an IANA name such as `UTC` or `Europe/Berlin`"


@pytest.mark.parametrize(("grain", "first", "last"),
                         [(Grain.MONTHLY, "0002-01", "9998-12"), (Grain.YEARLY, "0002", "9998")])
def test_stepping_past_the_years_datetime_holds_is_a_plan_error(grain: Grain, first: str, last: str) -> None:
    """Walking back before year 1 or on past 9999 (a lookback from the first supported partition):
    a PlanError naming the supported years, not Python's ValueError."""
    for value, step in ((first, "previous"), (last, "next")):
        part = parse_partition(grain, value)
        with pytest.raises(PlanError, match="leaves the supported years"):
            for _ in range(14):
                part = getattr(part, step)()
