"""A zone's offset changes, one table per zone and UTC year: where wall clock to instant stops
being linear (a change forward collapses the wall times it skips into one fire)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from chronos.cron.days import _DAY_S, _epoch_day, _year_of_day

#: A zone's offset is read once a day (at local noon) to find its changes, so two changes
#: within a day that cancel out would go unseen; each change seen is then found to the second
#: in a window of 5 days, so a year whose changes come closer than this is walked instead.
#: tzdata's closest since 1970 are 7 days apart (tests/unit/test_cron_arithmetic.py checks
#: every zone).
_CLOSEST_CHANGES_S = 6 * _DAY_S


class _Irregular(Exception):
    """A zone year whose offset changes the table cannot be sure of: walk instead."""


@dataclass(frozen=True, slots=True)
class _ZoneYear:
    """A zone's offset changes in one UTC year: (instant, offset before, offset after), in
    seconds, found by reading the offset once a day and bisecting each change."""

    offset: int  # the offset just before the year starts
    times: tuple[int, ...]
    changes: tuple[tuple[int, int, int], ...]
    regular: bool


def _offset(zone: ZoneInfo, second: int) -> int:
    offset = datetime.fromtimestamp(second, zone).utcoffset()
    assert offset is not None
    return offset.days * _DAY_S + offset.seconds


@functools.lru_cache(maxsize=16_384)  # ~600 zones x 27 years; a few MB when full
def _zone_year(zone: ZoneInfo, year: int) -> _ZoneYear:
    start, end = _epoch_day(year) * _DAY_S, _epoch_day(year + 1) * _DAY_S
    # The offset at each local noon from two days before the year to two days after (the
    # cheap reading: a wall time's, no instant built). A noon the clocks skip reads the
    # offset before the jump, so a change seen between two noons is looked for from the
    # noon before them to the noon after.
    first_day = _epoch_day(year) - 2
    noons = _epoch_day(year + 1) + 2 - first_day
    wall, day, read = (
        datetime(year, 1, 1, 12) - 2 * timedelta(days=1),
        timedelta(days=1),
        zone.utcoffset,
    )
    readings: list[timedelta | None] = []
    for _ in range(noons):
        readings.append(read(wall))
        wall += day
    changes: list[tuple[int, int, int]] = []
    regular = True
    for index in range(1, noons):
        if readings[index] == readings[index - 1]:
            continue
        # From the start (UTC) of the day before the noon before, to the end of the day
        # after the noon after: whatever the offset, those noons lie within.
        low = (first_day + index - 3) * _DAY_S
        high = (first_day + index + 2) * _DAY_S
        before, after = _offset(zone, low), _offset(zone, high)
        if before == after:  # two changes in five days cancelled out
            regular = False
            continue
        while high - low > 1:  # one change in between (`_CLOSEST_CHANGES_S`)
            middle = (low + high) // 2
            reading = _offset(zone, middle)
            if reading == before:
                low = middle
            else:
                regular = regular and reading == after
                high = middle
        if start <= high < end and (not changes or changes[-1][0] != high):
            changes.append((high, before, after))
    for (t0, _, _), (t1, _, _) in zip(changes, changes[1:], strict=False):
        regular = regular and t1 - t0 >= _CLOSEST_CHANGES_S
    # A change back of a day or more would repeat a stretch longer than `_bound` looks back.
    regular = regular and all(o0 - o1 < _DAY_S for _, o0, o1 in changes)
    offset = _offset(zone, start - 1)
    return _ZoneYear(offset, tuple(c[0] for c in changes), tuple(changes), regular)


def _utc_year(second: int) -> int:
    return _year_of_day(second // _DAY_S)
