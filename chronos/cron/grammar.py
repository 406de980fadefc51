"""The documented grammar of a cron expression: Vixie cron's, a few extensions, nothing
drawn at random (issue 63; docs/guarantees.md lists it)."""

from __future__ import annotations

import re
from calendar import monthrange
from dataclasses import dataclass
from datetime import date

from chronos.cron.days import _nearest_weekday, _nth_weekdays, _TimesOfDay

#: The shape of an expression: 5 or 6 fields of printable ASCII, separated by spaces (the
#: proxy's OpenAPI schema states the same pattern).
EXPRESSION_SHAPE = r"^ *[!-~]+( +[!-~]+){4,5} *$"
_SHAPE = re.compile(EXPRESSION_SHAPE)


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
