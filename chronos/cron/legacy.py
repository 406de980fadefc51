"""Days of an expression outside the grammar that an earlier release accepted (and so may
have stored), read as croniter read it: such a repeat keeps its meaning after an upgrade."""

from __future__ import annotations

from calendar import monthrange
from dataclasses import dataclass
from datetime import date
from typing import Any

from chronos.cron.days import _nearest_weekday, _nth_weekdays
from chronos.cron.errors import CronError


@dataclass(frozen=True, slots=True)
class _DaySpec:
    """Which calendar days an expression outside the documented grammar matches, as croniter
    reads its fields (its ``_calc``: month, then day-of-month or ``W``, then day-of-week or
    ``#``/``L``; both day fields restricted: the union of the two sides), as releases before
    issue 63 read them; the walk asks croniter, and ``tests/unit/test_cron_arithmetic.py``
    holds the two equal. The documented grammar's days are ``_VixieDays``."""

    months: frozenset[int] | None  # None: every month
    days: frozenset[int] | None  # day-of-month; None: "*"
    last_day: bool  # day-of-month "L"
    weekdays: frozenset[int] | None  # cron's weekday, 0 = Sunday; None: "*"
    nth: tuple[tuple[int, tuple[int | str, ...]], ...]  # weekday -> nths ("l": the last)
    nearest: tuple[int, ...]  # day-of-month "W"
    either: bool  # both day fields restricted: either matches

    @classmethod
    def of(cls, matches: Any) -> _DaySpec:
        if getattr(matches, "_day_or", True) is not True or getattr(
            matches, "_implement_cron_bug", False
        ):
            raise CronError("unexpected croniter day rule")
        expanded = matches.expanded
        day_field, month_field, dow_field = expanded[2], expanded[3], expanded[4]
        nth: dict[int, set[int | str]] = {}
        for weekday, which in dict(matches.nth_weekday_of_month).items():
            for wd in range(7) if weekday == "*" else (weekday,):
                nth.setdefault(int(wd), set()).update(which)
        for values in (day_field, month_field, dow_field):
            if not all(v == "*" or v == "l" or isinstance(v, int) for v in values):
                raise CronError(f"unexpected day field {values!r}")
        return cls(
            months=None if "*" in month_field else frozenset(month_field),
            days=None if "*" in day_field else frozenset(v for v in day_field if v != "l"),
            last_day="l" in day_field and "*" not in day_field,
            weekdays=None if "*" in dow_field else frozenset(dow_field),
            nth=tuple(sorted((wd, tuple(sorted(ns, key=str))) for wd, ns in nth.items())),
            nearest=tuple(sorted(getattr(matches, "nearest_weekday", ()) or ())),
            either=day_field[0] != "*" and dow_field[0] != "*",
        )

    @property
    def every_day(self) -> bool:
        return (
            self.months is None
            and self.days is None
            and not self.last_day
            and self.weekdays is None
            and not self.nth
            and not self.nearest
        )

    def days_of_month(self, year: int, month: int) -> list[int]:
        """The matching days of one month, sorted."""
        if self.months is not None and month not in self.months:
            return []
        if self.either:
            found = self._side(year, month, True, False) | self._side(year, month, False, True)
        else:
            found = self._side(year, month, True, True)
        return sorted(found)

    def _side(self, year: int, month: int, by_day: bool, by_weekday: bool) -> set[int]:
        last = monthrange(year, month)[1]
        found = set(range(1, last + 1))
        if self.nearest:
            found &= {_nearest_weekday(year, month, d) for d in self.nearest}
        elif by_day and self.days is not None:
            found &= set(self.days) | ({last} if self.last_day else set())
        if self.nth:
            chosen: set[int] = set()
            for weekday, nths in self.nth:
                days = _nth_weekdays(year, month, weekday)
                for n in nths:
                    if n == "l":
                        chosen.add(days[-1])
                    elif isinstance(n, int) and n <= len(days):
                        chosen.add(days[n - 1])
            found &= chosen
        elif by_weekday and self.weekdays is not None:
            first = date(year, month, 1).isoweekday() % 7
            found = {d for d in found if (first + d - 1) % 7 in self.weekdays}
        return found
