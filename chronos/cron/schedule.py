"""One expression in one zone: its fires counted from the day and zone tables (issue 62),
walked only where a zone year is irregular."""

from __future__ import annotations

import functools
import threading
from bisect import bisect_left, bisect_right
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from chronos.cron.days import (
    _DAY_S,
    _EPOCH,
    _MAX_YEARS,
    _epoch_day,
    _instant_ms,
    _TimesOfDay,
    _year_of_day,
)
from chronos.cron.errors import CronError
from chronos.cron.grammar import _HASHED, _SHAPE, _Refused, _vixie, _VixieDays
from chronos.cron.legacy import _DaySpec
from chronos.cron.zones import _Irregular, _utc_year, _zone_year, _ZoneYear
from chronos.types import EpochMs


@functools.lru_cache(maxsize=1024)
def _year_days(spec: _DaySpec | _VixieDays, year: int) -> tuple[int, ...]:
    """The matching days of a calendar year, as days since 1970-01-01, sorted."""
    days: list[int] = []
    for month in range(1, 13):
        start = _epoch_day(year, month) - 1
        days.extend(start + d for d in spec.days_of_month(year, month))
    return tuple(days)


class CronSchedule:
    """One expression in one zone: instants of its fires after a given instant."""

    def __init__(self, expression: str, zone: str) -> None:
        if not _SHAPE.match(expression):
            raise CronError(
                f"{expression!r} is not a cron expression: give 5 fields (minute hour day "
                "month weekday) or 6 (seconds first), separated by spaces"
            )
        fields = expression.split()
        self.expression = " ".join(fields)
        self.has_seconds = len(fields) == 6
        try:
            self._zone = ZoneInfo(zone)
        except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
            # ZoneInfo reads a file the input names: a folder ("Europe"), a name too long for
            # the file system or a NUL each fail in their own way (IsADirectoryError, OSError,
            # ValueError); the OSErrors were a 500 with a traceback (issue 62). Not checked
            # against a list of names: what an earlier release accepted and stored (a
            # "posixrules", a "right/UTC") must still load.
            shown = zone if len(zone) <= 64 else zone[:64] + "..."
            raise CronError(f"{shown!r} is not an IANA time zone (like Europe/Berlin)") from exc
        self.zone = zone
        self._lock = threading.Lock()
        self._matches: Any = None  # croniter's parse: only for an expression read as before
        #: Why a new request may not use this expression (None: it may): an expression
        #: outside the documented grammar that an earlier release accepted, and so may have
        #: stored, still loads, read as that release read it.
        self.refused: str | None = None
        self._times: _TimesOfDay
        self._days: _DaySpec | _VixieDays
        try:
            self._times, self._days = _vixie(fields)
        except _Refused as exc:
            self.refused = f"{expression!r} is not a cron expression: {exc}"
            self._read_as_before()
        else:
            # Some day of 1970-2020 (the calendar repeats within 28 years), or none ever:
            # read month by month, no year's table cached for an expression refused.
            days = self._days
            if not any(
                days.days_of_month(year, month)
                for year in range(1970, 1971 + _MAX_YEARS)
                for month in range(1, 13)
            ):  # February 30th, say
                raise CronError(f"{expression!r} never matches a date")
        #: The shortest gap between two fires on the wall clock (the module's docstring).
        self.min_gap_ms = self._times.min_gap_s() * 1000

    def _read_as_before(self) -> None:
        """An expression outside the documented grammar, read as releases before issue 63
        read it (croniter, either day field matching when both are restricted), so that what
        they acknowledged fires as it did; ``refused`` keeps new requests from using it.
        ``R`` and ``H`` are pinned: each process drew its own ``R`` (and croniter refuses
        ``H`` without a job to hash), so the value is now croniter's hash of the expression,
        the same in every process."""
        assert self.refused is not None
        # Imported here: croniter costs ~85 ms at import, which every process that imports
        # chronos.repeat would pay without a single such expression. Its errors are
        # ValueErrors.
        from croniter import croniter

        fields = self.expression.split()
        hashed = [_HASHED.fullmatch(f.lower()) is not None for f in fields]
        text = " ".join("H" + f[1:] if h else f for f, h in zip(fields, hashed, strict=True))
        hash_id = self.expression.encode() if any(hashed) else None
        try:
            # Parsed once; each search moves it (set_current is a fifth of a new parse).
            self._matches = croniter(
                text, datetime(2000, 1, 1), second_at_beginning=self.has_seconds, hash_id=hash_id
            )
            self._matches.get_next(datetime)
        except (ValueError, KeyError) as exc:  # not even then: say what the grammar says
            raise CronError(self.refused) from exc
        # What counting reads of croniter's parse: the times of day and the day rule.
        self._times = _TimesOfDay.of(self._matches.expanded, self.has_seconds)
        self._days = _DaySpec.of(self._matches)

    # -- the public questions, counted ---------------------------------------------------

    def next_after(self, instant_ms: EpochMs) -> EpochMs:
        """The first fire strictly after ``instant_ms``; CronError when there is none before
        the year 9999 (datetime's end)."""
        return self.after(instant_ms, 1)

    def at_or_after(self, instant_ms: EpochMs) -> EpochMs:
        """The first fire at or after ``instant_ms``: a cron repeat's first occurrence."""
        return self.next_after(instant_ms - 1)

    def after(self, first_ms: EpochMs, count: int) -> EpochMs:
        """The ``count``-th fire strictly after ``first_ms`` (``first_ms`` itself for 0): a
        repeat's occurrence ``count + 1`` when ``first_ms`` is its first due."""
        if count <= 0:
            return first_ms
        try:
            try:
                return self._after(first_ms, count)
            except _Irregular:
                due = first_ms
                for _ in range(count):
                    due = self._walk_next_after(due)
                return due
        except (OverflowError, ValueError, OSError) as exc:
            raise CronError(f"no fire of {self.expression!r} after {first_ms} ms") from exc

    def fires_between(self, after_ms: EpochMs, until_ms: EpochMs, most: int) -> int:
        """How many fires lie in (``after_ms``, ``until_ms``], counting to ``most`` at most."""
        if until_ms <= after_ms or most <= 0:
            return 0
        try:
            try:
                return min(most, self._count(after_ms, until_ms, most))
            except _Irregular:
                count, due = 0, after_ms
                while count < most:
                    due = self._walk_next_after(due)
                    if due > until_ms:
                        break
                    count += 1
                return count
        except (OverflowError, ValueError, OSError) as exc:
            raise CronError(f"cannot count the fires of {self.expression!r}") from exc

    # -- the walk: the rules, one croniter step per fire -----------------------------------

    def walk_next_after(self, instant_ms: EpochMs) -> EpochMs:
        """``next_after`` by walking the matching wall times one by one: the fallback for a
        zone year counting cannot be sure of."""
        try:
            return self._walk_next_after(instant_ms)
        except (OverflowError, ValueError, OSError) as exc:
            raise CronError(f"no fire of {self.expression!r} after {instant_ms} ms") from exc

    def _walk_next_after(self, instant_ms: EpochMs) -> EpochMs:
        local = datetime.fromtimestamp(instant_ms / 1000, self._zone).replace(tzinfo=None)
        if self._matches is None:  # the documented grammar: the day tables, a wall time a step
            wall = (local - _EPOCH) // timedelta(seconds=1)
            while True:
                wall = self._wall_after(wall, 1)
                fire = self._fire(wall)
                if fire > instant_ms:
                    return fire
        with self._lock:
            self._matches.set_current(local, force=True)
            while True:  # ends: every expression matches some date (checked when parsed)
                # A start inside a repeated hour's second pass sees matches whose first
                # instant is already behind it: those fired in the first pass.
                fire = self._instant(self._matches.get_next(datetime))
                if fire > instant_ms:
                    return fire

    def _instant(self, wall: datetime) -> EpochMs:
        """The instant a matching wall-clock time fires at (the module's rules)."""
        first = wall.replace(tzinfo=self._zone)  # fold 0: the earlier of a repeated time
        instant = first.astimezone(UTC)
        if instant.astimezone(self._zone).replace(tzinfo=None) == wall:
            return _instant_ms(instant)
        return self._gap_end(wall)

    def _gap_end(self, wall: datetime) -> EpochMs:
        """The instant the clocks jumped over ``wall``: between its two readings (offset
        before and after the jump), the first second whose local time is past ``wall``."""
        readings = (
            int(wall.replace(tzinfo=self._zone, fold=0).timestamp()),
            int(wall.replace(tzinfo=self._zone, fold=1).timestamp()),
        )
        low, high = min(readings), max(readings)
        while low < high:
            middle = (low + high) // 2
            if datetime.fromtimestamp(middle, self._zone).replace(tzinfo=None) > wall:
                high = middle
            else:
                low = middle + 1
        return low * 1000

    # -- counting ----------------------------------------------------------------------
    #
    # A wall time is a second of local time counted from 1970-01-01 00:00 (naive); W is the
    # set of wall times the expression matches. Every fire is the instant of some w in W,
    # instants grow with w, and only a change forward maps several w to one instant.

    def _zone_year(self, year: int) -> _ZoneYear:
        table = _zone_year(self._zone, year)
        if not table.regular:
            raise _Irregular
        return table

    def _bound(self, instant_ms: EpochMs) -> int:
        """The last wall time whose fire is at or before ``instant_ms``."""
        second = instant_ms // 1000  # fires are whole seconds
        year = _utc_year(second)
        table = self._zone_year(year)
        index = bisect_right(table.times, second)
        if index:
            change: tuple[int, int, int] | None = table.changes[index - 1]
            offset = table.changes[index - 1][2]
        else:
            offset, change = table.offset, None
            if second - _epoch_day(year) * _DAY_S < _DAY_S:  # a repeated stretch since?
                earlier = self._zone_year(year - 1)
                change = earlier.changes[-1] if earlier.changes else None
        if change is not None:
            at, before, after = change
            if after < before and second + offset < at + before:
                # The second pass of a repeated stretch: its wall times fired in the first.
                return at + before - 1
        return second + offset

    def _has(self, day: int) -> bool:
        if self._days.every_day:
            return True
        days = _year_days(self._days, _year_of_day(day))
        index = bisect_left(days, day)
        return index < len(days) and days[index] == day

    def _days_in(self, start: int, end: int) -> int:
        """Matching days in [start, end) (days since 1970-01-01)."""
        if end <= start:
            return 0
        if self._days.every_day:
            return end - start
        count = 0
        for year in range(_year_of_day(start), _year_of_day(end - 1) + 1):
            days = _year_days(self._days, year)
            count += bisect_left(days, end) - bisect_left(days, start)
        return count

    def _day_from(self, start: int, index: int) -> int:
        """The ``index``-th (0-based) matching day at or after ``start``."""
        if self._days.every_day:
            return start + index
        year = _year_of_day(start)
        empty = 0  # years in a row without a matching day
        while empty <= _MAX_YEARS:
            days = _year_days(self._days, year)
            skipped = bisect_left(days, start)
            if index < len(days) - skipped:
                return days[skipped + index]
            index -= len(days) - skipped
            empty = 0 if len(days) > skipped else empty + 1
            year += 1
        raise ValueError(f"no matching day within {_MAX_YEARS} years")

    def _walls(self, low: int, high: int) -> int:
        """How many wall times of W lie in (low, high]."""
        if high <= low:
            return 0
        times = self._times
        day_low, second_low = divmod(low, _DAY_S)
        day_high, second_high = divmod(high, _DAY_S)
        if day_low == day_high:
            if not self._has(day_low):
                return 0
            return times.count_to(second_high) - times.count_to(second_low)
        count = self._days_in(day_low + 1, day_high) * times.per_day
        if self._has(day_low):
            count += times.per_day - times.count_to(second_low)
        if self._has(day_high):
            count += times.count_to(second_high)
        return count

    def _wall_after(self, low: int, n: int) -> int:
        """The ``n``-th (1-based) wall time of W after ``low``."""
        times = self._times
        day, second = divmod(low, _DAY_S)
        if self._has(day):
            left = times.per_day - times.count_to(second)
            if n <= left:
                return day * _DAY_S + times.at(times.per_day - left + n - 1)
            n -= left
        skip, index = divmod(n - 1, times.per_day)
        return self._day_from(day + 1, skip) * _DAY_S + times.at(index)

    def _collapsed(self, change: tuple[int, int, int]) -> int:
        """How many of W a change forward skips, with the one it jumps to, less one: the
        fires the collapse into one costs."""
        at, before, after = change
        return max(0, self._walls(at + before - 1, at + after) - 1)

    def _fire(self, wall: int) -> EpochMs:
        return self._instant(_EPOCH + timedelta(seconds=wall))

    def _after(self, first_ms: EpochMs, count: int) -> EpochMs:
        first = first_ms // 1000
        low = self._bound(first_ms)
        extra = 0  # wall times that collapsed into a fire already counted
        wall = self._wall_after(low, count)
        year = _utc_year(first)
        while (_epoch_day(year) - 1) * _DAY_S <= wall:  # later changes come after `wall`
            if self._quiet(year):
                year += 1
                continue
            for change in self._zone_year(year).changes:
                at, before, after = change
                if at <= first or after <= before:
                    continue
                if at + before > wall:
                    return self._fire(wall)
                collapsed = self._collapsed(change)
                if collapsed and self._walls(at + before - 1, wall) > 1:
                    extra += collapsed  # `wall` is not the collapse's first: count past it
                    wall = self._wall_after(low, count + extra)
            year += 1
        return self._fire(wall)

    def _count(self, after_ms: EpochMs, until_ms: EpochMs, most: int) -> int:
        """Fires in (after_ms, until_ms], a UTC year at a time, until ``most`` are found: a
        first due far in the past costs the years its ``times`` span, not all since."""
        count, low, year = 0, after_ms, _utc_year(after_ms // 1000)
        while low < until_ms and count < most:
            high = min(until_ms, _epoch_day(year + 1) * _DAY_S * 1000 - 1)
            if not self._quiet(year):
                count += self._count_in_year(year, low, high)
            low, year = high, year + 1
        return count

    def _count_in_year(self, year: int, after_ms: EpochMs, until_ms: EpochMs) -> int:
        low, high = after_ms // 1000, until_ms // 1000
        count = self._walls(self._bound(after_ms), self._bound(until_ms))
        for change in self._zone_year(year).changes:
            at, before, after = change
            if low < at <= high and after > before:
                count -= self._collapsed(change)
        return count

    def _quiet(self, year: int) -> bool:
        """Whether W has no wall time within two days of UTC year ``year``: no fire in it,
        and none of its offset changes collapses anything (its table is not needed)."""
        if self._days.every_day:
            return False
        return self._days_in(_epoch_day(year) - 2, _epoch_day(year + 1) + 2) == 0


@functools.lru_cache(maxsize=256)
def schedule_of(expression: str, zone: str) -> CronSchedule:
    """Parsed once per expression and zone: messages of one schedule share it."""
    return CronSchedule(expression, zone)


def due_of(expression: str, zone: str, first_ms: EpochMs, occurrence: int) -> EpochMs:
    """Due time of ``occurrence`` (1-based) of a cron repeat whose first fire is ``first_ms``:
    the (occurrence-1)-th fire after it, counted (a few bisections, whatever the
    occurrence)."""
    if occurrence == 1:
        return first_ms
    return schedule_of(expression, zone).after(first_ms, occurrence - 1)


def fires_between(
    expression: str, zone: str, after_ms: EpochMs, until_ms: EpochMs, most: int
) -> int:
    """How many fires of the schedule lie in (``after_ms``, ``until_ms``], up to ``most``."""
    if until_ms <= after_ms or most <= 0:
        return 0
    return schedule_of(expression, zone).fires_between(after_ms, until_ms, most)


def clear_caches(zones: bool = True) -> None:
    """Empties the caches of this module (a benchmark's cold start; tests): the parsed
    schedules and their day tables, and with ``zones`` the zones' tables too."""
    schedule_of.cache_clear()
    _year_days.cache_clear()
    if zones:
        _zone_year.cache_clear()
