"""Partition windows sort by time (``Window`` is an ordered dataclass: by start, then end), across a
clock change, so a list of windows a run collected can be put in order without a key function.

Found by mutation testing (docs/testing.md): ``order=False`` survived the partition tests."""

from __future__ import annotations

import itertools
import random

from lakewrap.partitions import Grain, parse_partition, partition_range


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
