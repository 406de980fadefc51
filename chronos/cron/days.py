"""Day arithmetic of cron schedules: days since 1970-01-01, the times of day an expression
names, and weekdays of a month (``chronos/cron/__init__.py`` says how they combine)."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from calendar import monthrange
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from chronos.cron.errors import CronError
from chronos.types import EpochMs

_DAY_S = 86_400
_EPOCH = datetime(1970, 1, 1)
_EPOCH_ORDINAL = _EPOCH.toordinal()
#: croniter gives up when no date matches within 50 years; so does counting.
_MAX_YEARS = 50


def _instant_ms(moment: datetime) -> EpochMs:
    return int(moment.timestamp() * 1000)


def _epoch_day(year: int, month: int = 1, day: int = 1) -> int:
    return date(year, month, day).toordinal() - _EPOCH_ORDINAL


def _year_of_day(day: int) -> int:
    return date.fromordinal(day + _EPOCH_ORDINAL).year


@dataclass(frozen=True, slots=True)
class _TimesOfDay:
    """T: the seconds of the day an expression's hour, minute and second fields name, sorted
    (hour, then minute, then second), counted and indexed without being listed."""

    hours: tuple[int, ...]
    minutes: tuple[int, ...]
    seconds: tuple[int, ...]

    @classmethod
    def of(cls, expanded: list[list[Any]], has_seconds: bool) -> _TimesOfDay:
        def field(values: list[Any], top: int) -> tuple[int, ...]:
            if "*" in values:
                return tuple(range(top))
            if not all(isinstance(v, int) and 0 <= v < top for v in values):
                raise CronError(f"unexpected time field {values!r}")
            return tuple(sorted(set(values)))

        seconds = field(expanded[5], 60) if has_seconds else (0,)
        return cls(field(expanded[1], 24), field(expanded[0], 60), seconds)

    @property
    def per_day(self) -> int:
        return len(self.hours) * len(self.minutes) * len(self.seconds)

    def count_to(self, second: int) -> int:
        """How many of T are at or before ``second`` of the day (0..86399)."""
        hour, rest = divmod(second, 3600)
        minute, sec = divmod(rest, 60)
        per_hour = len(self.minutes) * len(self.seconds)
        index = bisect_left(self.hours, hour)
        count = index * per_hour
        if index < len(self.hours) and self.hours[index] == hour:
            index = bisect_left(self.minutes, minute)
            count += index * len(self.seconds)
            if index < len(self.minutes) and self.minutes[index] == minute:
                count += bisect_right(self.seconds, sec)
        return count

    def at(self, index: int) -> int:
        """T's ``index``-th (0-based) second of the day."""
        hour, rest = divmod(index, len(self.minutes) * len(self.seconds))
        minute, sec = divmod(rest, len(self.seconds))
        return self.hours[hour] * 3600 + self.minutes[minute] * 60 + self.seconds[sec]

    def min_gap_s(self) -> int:
        """The shortest distance between consecutive times of T, the wrap past midnight
        included (as if the next day matched too)."""
        seconds, minutes, hours = self.seconds, self.minutes, self.hours
        first, last = self.at(0), self.at(self.per_day - 1)
        gaps = [_DAY_S - (last - first)]
        gaps += [b - a for a, b in zip(seconds, seconds[1:], strict=False)]
        span_s = seconds[-1] - seconds[0]
        gaps += [(b - a) * 60 - span_s for a, b in zip(minutes, minutes[1:], strict=False)]
        span_m = (minutes[-1] - minutes[0]) * 60 + span_s
        gaps += [(b - a) * 3600 - span_m for a, b in zip(hours, hours[1:], strict=False)]
        return min(gaps)


def _nth_weekdays(year: int, month: int, weekday: int) -> list[int]:
    """The days of a month that fall on ``weekday`` (cron's: 0 = Sunday), in order."""
    first = date(year, month, 1).isoweekday() % 7
    return list(range(1 + (weekday - first) % 7, monthrange(year, month)[1] + 1, 7))


def _nearest_weekday(year: int, month: int, day: int) -> int:
    """croniter's ``W``: the weekday nearest ``day``, within the month."""
    last = monthrange(year, month)[1]
    day = min(day, last)
    weekday = date(year, month, day).weekday()  # 0 = Monday
    if weekday < 5:
        return day
    if weekday == 5:
        return day - 1 if day > 1 else day + 2
    return day + 1 if day < last else day - 2
