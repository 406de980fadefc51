"""Calendar schedules: a cron expression read in an IANA time zone.

An expression names wall-clock times; this module turns them into instants, which is where
daylight-saving time bites. The rules
(documented in docs/guarantees.md and checked against a brute-force walk in
``tests/unit/test_cron.py``):

- a local time that does not exist (the hour skipped when clocks go forward) fires at the next
  valid instant, the moment the clocks jumped (02:30 on the spring-forward night in Berlin
  fires at 03:00 CEST); several skipped matches fire once there, together with a match at
  that instant itself;
- a local time that exists twice (the hour repeated when clocks go back) fires once, at its
  first instant; the repeated hour's second pass fires nothing;
- every other match fires at its instant.

So "0 9 * * 1-5" in Europe/Berlin is 09:00 local all year, and a fixed 24 h interval, which
drifts by an hour at each change, is no longer the only way to say "daily".

**The grammar (issue 63)** is Vixie cron's, listed in docs/guarantees.md and read here
(``_vixie``), not by croniter: 5 fields (minute hour day-of-month month day-of-week), or 6 with
a seconds field first; day-of-week 0-7, 0 and 7 Sunday (Vixie's numbering, not Quartz's). A
day field starting with ``*`` leaves the day to the other: when either starts with ``*`` a day
must match both, when neither does, either (so ``0 12 */10 * 1`` is the 1st, 11th, 21st or
31st when it is a Monday). Beyond Vixie: ``L`` and ``nW`` in day-of-month, ``d#n`` in
day-of-week, ``v/step``, names in ranges. Refused, with the field and why: ``R`` and ``H`` (a
value each process draws), Quartz's ``?``, ``L`` in day-of-week, ranges that wrap or name one
value, ``*`` in a list, ``W`` or ``#`` beside a restricted other day field, a step of 0 or
wider than its field: what has no one meaning, or one croniter read otherwise than Vixie.

An expression outside the grammar that an earlier release accepted, and so may have stored,
still loads, read as it read it (croniter; ``R`` and ``H`` pinned to a hash of the
expression): ``CronSchedule.refused`` says why a new request may not use it
(``validation.first_due_for``). Inside the grammar, earlier releases read one kind
differently: a day field starting with ``*`` other than ``*`` itself (``*/10``) beside a
restricted other fired when either matched; it now fires by Vixie's rule, stored ones too,
since the expression is all that every reader of a repeat (the node's store, the inner topic,
the pipeline) has to go by (docs/guarantees.md).

**Counted, not walked (issue 62).** A repeat's occurrence k, the count of its fires in a span
and the first fire after an instant cost a few bisections, whatever k: walking the fires one
croniter step at a time cost a validation 10,000 steps for an every-second repeat of 10,000
occurrences, in the proxy and again in every node's ingest. The fires of an expression are
its matching days times the same set T of times of day (its hour, minute and second fields),
so up to a wall-clock time they are counted as (matching days before it) x |T| plus the times
of its own day (``_TimesOfDay``, ``_VixieDays`` or ``_DaySpec``, one table of matching days
per year). Wall clock to instant is linear between two changes of the zone's offset
(``_ZoneYear``, one table per zone and year); a change forward collapses the wall times it
skips, with the one it jumps to, into one fire (their count is known, so is the collapse); a
change back fires its repeated wall times once (the earlier instant), so it collapses
nothing. The walk (``walk_next_after``: one wall time of the day tables at a time, or
croniter's steps for an expression read as before) is the fallback for a zone year whose
offset changes come too close together for the table to be sure of them (none in tzdata
since 1970).

**The minimum gap** (``min_gap_ms``) is read on the wall clock: the shortest distance between
two consecutive times of day in T, and from the last to the next day's first as if the next
day matched too. A night the clocks go forward can bring two fires closer than that, by up to
the length of the jump (``0 1,3 * * *`` in Berlin fires 1 h apart that night: 02:00 does not
exist, so 03:00 is an hour after 01:00); fires are whole seconds and a skipped stretch fires
once, so no two fires are ever under 1 s apart.
"""

from __future__ import annotations

import functools
import re
import threading
from bisect import bisect_left, bisect_right
from calendar import monthrange
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from chronos.types import EpochMs

#: The shape of an expression: 5 or 6 fields of printable ASCII, separated by spaces (the
#: proxy's OpenAPI schema states the same pattern).
EXPRESSION_SHAPE = r"^ *[!-~]+( +[!-~]+){4,5} *$"
_SHAPE = re.compile(EXPRESSION_SHAPE)

_DAY_S = 86_400
_EPOCH = datetime(1970, 1, 1)
_EPOCH_ORDINAL = _EPOCH.toordinal()
#: A zone's offset is read once a day (at local noon) to find its changes, so two changes
#: within a day that cancel out would go unseen; each change seen is then found to the second
#: in a window of 5 days, so a year whose changes come closer than this is walked instead.
#: tzdata's closest since 1970 are 7 days apart (tests/unit/test_cron_arithmetic.py checks
#: every zone).
_CLOSEST_CHANGES_S = 6 * _DAY_S
#: croniter gives up when no date matches within 50 years; so does counting.
_MAX_YEARS = 50


class CronError(ValueError):
    """An expression or zone chronos cannot read; the message says which and why."""


class _Irregular(Exception):
    """A zone year whose offset changes the table cannot be sure of: walk instead."""


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


# -- the documented grammar: Vixie cron's, a few extensions, nothing drawn at random ----------
#
# docs/guarantees.md ("Cron repeats") lists it; ``tests/unit/test_cron_vixie.py`` holds the
# fires of what it accepts equal to a brute-force walk that owes nothing to this module or to
# croniter, and what it accepts equal to croniter's reading apart from the day rule (what an
# earlier release stored keeps its meaning, but for that rule: see ``CronSchedule``).

_MONTH_NAMES = {
    name: number
    for number, name in enumerate(
        ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"),
        start=1,
    )
}
_WEEKDAY_NAMES = {
    name: number for number, name in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))
}
_DIGITS = re.compile(r"[0-9]{1,2}")
_HASHED = re.compile(r"[rh](?:\([0-9]+-[0-9]+\))?(?:/[0-9]+)?")
_NTH = re.compile(r"([0-9a-z]+)#([0-9]+)")
_NEAREST = re.compile(r"([0-9]{1,2})w")


@dataclass(frozen=True, slots=True)
class _Field:
    """One field of an expression: its name, its values and the names it takes."""

    name: str
    low: int
    high: int
    names: tuple[tuple[str, int], ...] = ()


_SECOND = _Field("second", 0, 59)
_MINUTE = _Field("minute", 0, 59)
_HOUR = _Field("hour", 0, 23)
_DAY = _Field("day-of-month", 1, 31)
_MONTH = _Field("month", 1, 12, tuple(_MONTH_NAMES.items()))
_WEEKDAY = _Field("day-of-week", 0, 7, tuple(_WEEKDAY_NAMES.items()))  # 0 and 7: Sunday


class _Refused(Exception):
    """An expression outside the documented grammar; the message names the field and why."""

    def __init__(self, field: _Field, text: str, why: str) -> None:
        super().__init__(f"{field.name} {text!r}: {why}")


def _value(field: _Field, text: str, whole: str) -> int:
    """One value of ``field``: digits or one of its names."""
    if _DIGITS.fullmatch(text):
        value = int(text)
    else:
        value = dict(field.names).get(text, -1)
        if value < 0:
            raise _Refused(field, whole, f"{text!r} is not a value of the {field.name}")
    if not field.low <= value <= field.high:
        raise _Refused(field, whole, f"{value} is out of range {field.low}-{field.high}")
    return value


def _item(field: _Field, item: str, whole: str) -> set[int]:
    """The values one list item names: ``*``, ``v``, ``a-b``, each optionally ``/step``, or
    ``v/step`` (``v-high/step``)."""
    if item == "*" and whole != "*":
        raise _Refused(
            field,
            whole,
            "'*' names every value: write it alone (as a day field's first item it also "
            "changes which day rule applies)",
        )
    base, slash, step_text = item.partition("/")
    step = 1
    if slash:
        width = field.high - field.low + 1
        if not _DIGITS.fullmatch(step_text) or not 1 <= int(step_text) <= width:
            raise _Refused(field, whole, f"a step is a number from 1 to {width}")
        step = int(step_text)
    if base == "*":
        low, high = field.low, field.high
    elif "-" in base:
        first, _, last = base.partition("-")
        low, high = _value(field, first, whole), _value(field, last, whole)
        if low > high:
            raise _Refused(
                field,
                whole,
                f"a range runs upwards: {first}-{last} wraps around in some crons and is empty "
                "or an error in others; write it as two ranges",
            )
        if low == high:
            raise _Refused(
                field,
                whole,
                f"write {first} alone: croniter, which earlier releases read expressions with, "
                f"read {first}-{last} as the whole field",
            )
    else:
        low = high = _value(field, base, whole)
        if slash:
            if field is _WEEKDAY:
                raise _Refused(
                    field,
                    whole,
                    f"{base}/{step_text} runs to 6 in some crons and to 7 in others: write the "
                    f"range ({base}-6/{step_text} or {base}-7/{step_text})",
                )
            high = field.high
    return set(range(low, high + 1, step))


def _special(field: _Field, text: str) -> str:
    """Refuses what no field takes (a random or hashed value, Quartz's ``?``); the field in
    lower case (names and letters are read in either)."""
    lower = text.lower()
    if "?" in text:
        raise _Refused(
            field,
            text,
            "'?' is Quartz's; chronos reads Vixie cron's fields, where '*' says the same. Mind "
            "the day-of-week numbering: Vixie's 0 and 7 are Sunday, 1 Monday ... 6 Saturday "
            "(Quartz's 1 is Sunday, 7 Saturday)",
        )
    if _HASHED.fullmatch(lower):
        why = (
            "R stands for a value drawn at random by each process that reads it, so replicas "
            "and restarts would disagree about when a message is due"
            if lower[0] == "r"
            else "H stands for a value hashed from a job's name, which a repeat does not have"
        )
        raise _Refused(field, text, f"{why}; write the value")
    return lower


def _numbers(field: _Field, text: str) -> set[int]:
    """A field of list items, none of the day fields' extensions."""
    values: set[int] = set()
    for item in _special(field, text).split(","):
        if not item:
            raise _Refused(field, text, "an empty list item")
        values |= _item(field, item, text)
    return values


def _month_days(text: str, weekday_star: bool) -> tuple[frozenset[int] | None, bool, int | None]:
    """Day-of-month: its days (None: every day), whether ``L`` (the month's last day) is one
    of them, and the day of ``nW`` (the weekday nearest day n)."""
    field = _DAY
    lower = _special(field, text)
    nearest = _NEAREST.fullmatch(lower)
    if nearest:
        if not weekday_star:
            raise _Refused(
                field,
                text,
                "W takes a day-of-week of '*' (no cron combines it with a day-of-week; Quartz "
                "forbids it)",
            )
        return frozenset(), False, _value(field, nearest.group(1), text)
    days: set[int] = set()
    last = False
    for item in lower.split(","):
        if not item:
            raise _Refused(field, text, "an empty list item")
        if item == "l":
            last = True
            continue
        if "l" in item or "w" in item:
            raise _Refused(
                field,
                text,
                "L stands alone in a list (the month's last day), W in a field of its own (nW, "
                "the weekday nearest day n); no LW, L-n or ranges of them",
            )
        days |= _item(field, item, text)
    every = not last and days == set(range(1, 32))
    return (None if every else frozenset(days)), last, None


def _weekdays(
    text: str, month_day_star: bool
) -> tuple[frozenset[int] | None, tuple[tuple[int, int], ...]]:
    """Day-of-week: its weekdays, 0 = Sunday (None: every day), and its ``d#n`` (the n-th
    weekday d of the month)."""
    field = _WEEKDAY
    lower = _special(field, text)
    if "l" in lower:
        raise _Refused(
            field,
            text,
            "L in day-of-week has no spelling crons agree on (Quartz's L is Saturday and its 6L "
            "the last Friday, croniter's L5 the last Friday): chronos takes none",
        )
    items = lower.split(",")
    nths = [_NTH.fullmatch(item) for item in items]
    if any(nths):
        if not all(nths):
            raise _Refused(field, text, "a day-of-week with d#n holds only d#n items")
        if not month_day_star:
            raise _Refused(
                field,
                text,
                "d#n takes a day-of-month of '*' (no cron combines it with a day-of-month; "
                "Quartz forbids it)",
            )
        found: set[tuple[int, int]] = set()
        for match in nths:
            assert match is not None
            which = int(match.group(2)) if _DIGITS.fullmatch(match.group(2)) else 0
            if not 1 <= which <= 5:
                raise _Refused(field, text, "the n of d#n is 1 to 5")
            found.add((_value(field, match.group(1), text) % 7, which))
        return frozenset(), tuple(sorted(found))
    values: set[int] = set()
    for item in items:
        if not item:
            raise _Refused(field, text, "an empty list item")
        values |= _item(field, item, text)
    weekdays = frozenset(v % 7 for v in values)
    return (None if len(weekdays) == 7 else weekdays), ()


def _vixie(fields: list[str]) -> tuple[_TimesOfDay, _VixieDays]:
    """An expression of the documented grammar: its times of day and its days; _Refused for
    anything else."""
    if len(fields) == 6:
        seconds = tuple(sorted(_numbers(_SECOND, fields[0])))
        fields = fields[1:]
    else:
        seconds = (0,)
    minutes = tuple(sorted(_numbers(_MINUTE, fields[0])))
    hours = tuple(sorted(_numbers(_HOUR, fields[1])))
    day_text, month_text, weekday_text = fields[2], fields[3], fields[4]
    months = _numbers(_MONTH, month_text)
    days, last_day, nearest = _month_days(day_text, weekday_text == "*")
    weekdays, nth = _weekdays(weekday_text, day_text == "*")
    spec = _VixieDays(
        months=None if len(months) == 12 else frozenset(months),
        days=days,
        last_day=last_day,
        nearest=nearest,
        weekdays=weekdays,
        nth=nth,
        # Vixie cron: a day field starting with '*' leaves the day to the other (both must
        # match); when neither does, either matches.
        either=not day_text.startswith("*") and not weekday_text.startswith("*"),
    )
    return _TimesOfDay(hours, minutes, seconds), spec


@dataclass(frozen=True, slots=True)
class _VixieDays:
    """Which calendar days an expression of the documented grammar matches: day-of-month's
    days (with ``L`` and ``nW``) and day-of-week's (with ``d#n``), each within the month, then
    Vixie cron's rule: both when either field starts with ``*``, either otherwise."""

    months: frozenset[int] | None  # None: every month
    days: frozenset[int] | None  # None: every day of the month
    last_day: bool  # "L"
    nearest: int | None  # "nW"
    weekdays: frozenset[int] | None  # 0 = Sunday; None: every weekday
    nth: tuple[tuple[int, int], ...]  # (weekday, n) of "d#n"
    either: bool

    @property
    def every_day(self) -> bool:
        month_all = self.days is None and self.nearest is None
        week_all = self.weekdays is None and not self.nth
        if self.months is not None:
            return False
        return (month_all or week_all) if self.either else (month_all and week_all)

    def days_of_month(self, year: int, month: int) -> list[int]:
        """The matching days of one month, sorted."""
        if self.months is not None and month not in self.months:
            return []
        last = monthrange(year, month)[1]
        every = set(range(1, last + 1))
        if self.nearest is not None:
            by_day = {_nearest_weekday(year, month, self.nearest)}
        else:
            by_day = every if self.days is None else {d for d in self.days if d <= last}
            if self.last_day:
                by_day = by_day | {last}
        if self.weekdays is None and not self.nth:
            by_weekday = every
        else:
            first = date(year, month, 1).isoweekday() % 7
            weekdays = self.weekdays or frozenset()
            by_weekday = {d for d in every if (first + d - 1) % 7 in weekdays}
            for weekday, which in self.nth:
                found = _nth_weekdays(year, month, weekday)
                if which <= len(found):
                    by_weekday.add(found[which - 1])
        return sorted(by_day | by_weekday if self.either else by_day & by_weekday)


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


@functools.lru_cache(maxsize=1024)
def _year_days(spec: _DaySpec | _VixieDays, year: int) -> tuple[int, ...]:
    """The matching days of a calendar year, as days since 1970-01-01, sorted."""
    days: list[int] = []
    for month in range(1, 13):
        start = _epoch_day(year, month) - 1
        days.extend(start + d for d in spec.days_of_month(year, month))
    return tuple(days)


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
