"""Cron as Vixie defines it (issue 63), held to a reference that owes nothing to croniter or to
``chronos.cron``.

The reference reads the documented grammar (docs/guarantees.md, "Cron repeats") with a matcher
of its own, value by value: an item ``*``, ``v``, ``a-b``, each optionally ``/step``, or
``v/step``; names for months and weekdays; 7 for Sunday; ``L`` (a month's last day), ``nW``
(the Monday-Friday day of the month nearest day n, day n read as the month's last when the
month is shorter) and ``d#n`` (the n-th weekday d of the month). A day matches by Vixie's rule:
when either day field starts with ``*``, both must match; when neither does, either.

It walks every day of 2026 and 2027 and, in each day that matches, every hour, minute and
second, each checked by the matcher: a second of the two years matches when its day, hour,
minute and second do, so this is every second of the two years, the days that do not match
skipped whole. Each matching local time becomes an instant with ``zoneinfo`` by the documented
rules: one that exists fires at its first instant (a repeated one once), one the clocks skip
fires at the first local second after it that exists, and matches that land on one instant
fire once. Seven zones: Berlin, New York, Sydney, Lord Howe (30-minute shifts), Kolkata (+05:30),
Santiago (changes at midnight), UTC.

Then: what the grammar refuses is a 422 naming ``repeat.cron`` and the cron field, while what
an earlier release accepted and stored still loads, read as before (``R`` pinned, the same in
every process); and inside the grammar, croniter's reading (the earlier releases') differs from
Vixie's only where a day field starts with ``*`` beside a restricted other.
"""

from __future__ import annotations

import functools
import random
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from chronos import cron, wire
from chronos.cron import CronError, CronSchedule, due_of
from chronos.errors import ValidationError
from chronos.inner import accept_inner
from chronos.model import DelayMessage
from chronos.names import TopicNames
from chronos.repeat import Repeat
from chronos.settings import ChronosSettings, LimitSettings
from chronos.validation import first_due_for, validate_message
from proxy.client import DelayClient
from proxy.http.app import create_app

ZONES = [
    "Europe/Berlin",
    "America/New_York",
    "Australia/Sydney",
    "Australia/Lord_Howe",  # 30-minute shifts
    "Asia/Kolkata",  # +05:30, no changes
    "America/Santiago",  # changes at midnight
    "UTC",
]
START = date(2026, 1, 1)
END = date(2028, 1, 1)
SECOND = timedelta(seconds=1)

_MONTHS = {
    name: number
    for number, name in enumerate(
        "jan feb mar apr may jun jul aug sep oct nov dec".split(), start=1
    )
}
_WEEKDAYS = {name: number for number, name in enumerate("sun mon tue wed thu fri sat".split())}


# -- the reference ---------------------------------------------------------------------------


def _number(text: str, names: dict[str, int]) -> int:
    return names[text] if text in names else int(text)


def _item_has(item: str, value: int, low: int, high: int, names: dict[str, int]) -> bool:
    """Whether one list item (``*``, ``v``, ``a-b``, with ``/step``; ``v/step``) names
    ``value``."""
    base, _, step = item.partition("/")
    if base == "*":
        first, last = low, high
    elif "-" in base:
        a, b = base.split("-")
        first, last = _number(a, names), _number(b, names)
    else:
        first = _number(base, names)
        last = high if step else first
    return first <= value <= last and (value - first) % int(step or 1) == 0


def _field_has(
    text: str, value: int, low: int, high: int, names: dict[str, int] | None = None
) -> bool:
    return any(_item_has(i, value, low, high, names or {}) for i in text.lower().split(","))


def _days_of(day: date) -> list[date]:
    first = day.replace(day=1)
    return [
        first + timedelta(days=n)
        for n in range(31)
        if (first + timedelta(days=n)).month == day.month
    ]


def _day_of_month_has(text: str, day: date) -> bool:
    month = _days_of(day)
    for item in text.lower().split(","):
        if item == "l":
            if day == month[-1]:
                return True
        elif item.endswith("w"):
            target = min(int(item[:-1]), len(month))
            weekdays = [d for d in month if d.weekday() < 5]
            if day == min(weekdays, key=lambda d: abs(d.day - target)):
                return True
        elif _item_has(item, day.day, 1, 31, {}):
            return True
    return False


def _day_of_week_has(text: str, day: date) -> bool:
    weekday = day.isoweekday() % 7  # 0 = Sunday
    for item in text.lower().split(","):
        if "#" in item:
            which, nth = item.split("#")
            if _number(which, _WEEKDAYS) % 7 == weekday and (day.day - 1) // 7 + 1 == int(nth):
                return True
        elif _item_has(item, weekday, 0, 7, _WEEKDAYS):
            return True
        elif weekday == 0 and _item_has(item, 7, 0, 7, _WEEKDAYS):
            return True
    return False


def _day_has(fields: list[str], day: date) -> bool:
    """Month, then Vixie's rule for the two day fields."""
    day_of_month, month, day_of_week = fields[-3:]
    if not _field_has(month, day.month, 1, 12, _MONTHS):
        return False
    by_day = _day_of_month_has(day_of_month, day)
    by_weekday = _day_of_week_has(day_of_week, day)
    if day_of_month.startswith("*") or day_of_week.startswith("*"):
        return by_day and by_weekday
    return by_day or by_weekday


def reference_match(expression: str, wall: datetime) -> bool:
    """Whether ``expression`` names the local wall time ``wall`` (to the second), by the
    reference's own rules (a five-field expression fires at second 0)."""
    fields = expression.split()
    seconds_field = fields[0] if len(fields) == 6 else "0"
    return (
        _field_has(seconds_field, wall.second, 0, 59)
        and _field_has(fields[-5], wall.minute, 0, 59)
        and _field_has(fields[-4], wall.hour, 0, 23)
        and _day_has(fields, wall.date())
    )


@functools.cache
def reference_walls(expression: str) -> tuple[datetime, ...]:
    """Every local second of 2026-2027 the expression matches, in order."""
    fields = expression.split()
    seconds_field = fields[0] if len(fields) == 6 else "0"
    minute, hour = fields[-5], fields[-4]
    hours = [h for h in range(24) if _field_has(hour, h, 0, 23)]
    minutes = [m for m in range(60) if _field_has(minute, m, 0, 59)]
    seconds = [s for s in range(60) if _field_has(seconds_field, s, 0, 59)]
    walls: list[datetime] = []
    day = START
    while day < END:
        if _day_has(fields, day):
            walls += (
                datetime(day.year, day.month, day.day, h, m, s)
                for h in hours
                for m in minutes
                for s in seconds
            )
        day += timedelta(days=1)
    return tuple(walls)


def _exists(wall: datetime, zone: ZoneInfo) -> bool:
    return wall.replace(tzinfo=zone).astimezone(UTC).astimezone(zone).replace(tzinfo=None) == wall


def reference_fires(expression: str, zone_name: str) -> list[int]:
    """The instants (ms) of the matches, by the documented rules."""
    zone = ZoneInfo(zone_name)
    fires: list[int] = []
    for wall in reference_walls(expression):
        moment = wall
        while not _exists(moment, zone):  # skipped: the first local second that exists
            moment += SECOND
        instant = int(moment.replace(tzinfo=zone).timestamp()) * 1000  # fold 0: the first
        if not fires or instant > fires[-1]:
            fires.append(instant)
        else:
            assert instant == fires[-1], (wall, zone_name)  # collapsed into one fire
    return fires


def _span_ms(zone_name: str) -> tuple[int, int]:
    zone = ZoneInfo(zone_name)
    low, high = (datetime(d.year, d.month, d.day, tzinfo=zone) for d in (START, END))
    return int(low.timestamp()) * 1000, int(high.timestamp()) * 1000


def _compare(expression: str, zone: str) -> int:
    """chronos' fires over the two years equal the reference's, each of them, found fire by
    fire, counted, and as occurrence k of a repeat; the count compared."""
    expected = reference_fires(expression, zone)
    start, end = _span_ms(zone)
    schedule = CronSchedule(expression, zone)
    assert schedule.refused is None, schedule.refused
    got: list[int] = []
    fire = schedule.at_or_after(start)
    while fire < end:
        got.append(fire)
        fire = schedule.next_after(fire)
    assert got == expected
    assert schedule.fires_between(start - 1, end - 1, 10**9) == len(expected)
    if expected:
        rng = random.Random(expression)
        for k in {
            1,
            len(expected),
            *rng.sample(range(1, len(expected) + 1), min(20, len(expected))),
        }:
            assert due_of(expression, zone, expected[0], k) == expected[k - 1], k
    return len(expected)


# -- fires equal the reference's -------------------------------------------------------------

FIXED = [
    "0 12 */10 * 1",  # the issue's: the 1st, 11th, 21st or 31st when it is a Monday
    "0 12 1,11,21,31 * 1",  # neither starts with '*': either
    "30 2 */2 * 0",  # odd days that are Sundays, at a time the spring change skips
    "*/30 1-3 * 3,4,9,10 */3",  # Sundays, Wednesdays, Saturdays around the changes
    "0 0 1-7 * 5",  # the first seven days or Fridays
    "0 0 */7 * 5-7",  # Fridays to Sundays that are the 1st, 8th, 15th, 22nd or 29th
    "15 9 L * *",  # the last day of each month
    "0 23 1,L * sat",  # the 1st, the last, and Saturdays
    "0 2 15W * *",  # the weekday nearest the 15th
    "0 0 31W * *",  # the weekday nearest the last day
    "0 8 * * 1#1,5#3",  # the first Monday and the third Friday
    "0 0 * jan-mar,oct sun#5",  # a fifth Sunday, when the month has one
    "0 30 2 * * mon-fri",  # six fields: 02:30:00 on weekdays
    "10,40 0 0-3 */5 * */2",  # six fields, both day fields starting with '*'
    "0 0 29 2 *",  # once in the two years (2028 is past them): none
]


@pytest.mark.parametrize("expression", FIXED)
@pytest.mark.parametrize("zone", ZONES)
def test_every_fire_over_two_years_equals_the_reference(expression: str, zone: str) -> None:
    if expression == "0 0 29 2 *":
        assert reference_walls(expression) == ()
    _compare(expression, zone)


def test_the_issues_example_fires_on_mondays_that_are_the_1st_11th_21st_or_31st() -> None:
    """``0 12 */10 * 1``: chronos fired on every 1st, 11th, 21st, 31st and every Monday (531
    messages differed from Vixie cron); Vixie fires when both match."""
    start, end = _span_ms("UTC")
    schedule = CronSchedule("0 12 */10 * 1", "UTC")
    fires = [schedule.at_or_after(start)]
    while (fire := schedule.next_after(fires[-1])) < end:
        fires.append(fire)
    days = [datetime.fromtimestamp(f / 1000, UTC).date().isoformat() for f in fires]
    assert days == [
        "2026-05-11", "2026-06-01", "2026-08-31", "2026-09-21", "2026-12-21", "2027-01-11",
        "2027-02-01", "2027-03-01", "2027-05-31", "2027-06-21", "2027-10-11", "2027-11-01",
    ]  # fmt: skip
    # Neither field starting with '*': either, as before.
    either = CronSchedule("0 12 1,11,21,31 * 1", "UTC")
    # 86 days are a 1st, 11th, 21st or 31st, 104 are Mondays, 12 are both.
    assert either.fires_between(start - 1, end - 1, 10**9) == 86 + 104 - 12


# -- the grammar, random expressions -----------------------------------------------------------


def _value(draw: Any, low: int, high: int, names: dict[str, int] | None) -> tuple[int, str]:
    value = draw(st.integers(low, high))
    spelled = [n for n, v in (names or {}).items() if v == value]
    if spelled and draw(st.booleans()):
        return value, draw(st.sampled_from(spelled)).capitalize()
    return value, str(value)


@st.composite
def _item(
    draw: Any, low: int, high: int, names: dict[str, int] | None = None, start: bool = True
) -> str:
    """One list item: *, */s, v, a-b, a-b/s, v/s (a < b; s at most the field's width)."""
    shape = draw(st.sampled_from(["*", "star_step", "one", "range", "range_step", "start_step"]))
    step = draw(st.integers(1, high - low + 1))
    if shape == "*":
        return "*"
    if shape == "star_step":
        return f"*/{step}"
    a, a_text = _value(draw, low, high - 1, names)
    if shape == "one":
        return a_text
    if shape == "start_step" and start:
        return f"{a_text}/{step}"
    _, b_text = _value(draw, a + 1, high, names)
    return f"{a_text}-{b_text}" + (f"/{step}" if shape == "range_step" else "")


@st.composite
def _list(
    draw: Any, low: int, high: int, names: dict[str, int] | None = None, start: bool = True
) -> str:
    """One to three items; '*' only alone (the grammar refuses it in a list)."""
    items = draw(st.lists(_item(low, high, names, start), min_size=1, max_size=3))
    return ",".join([i for i in items if i != "*"] or ["*"])


@st.composite
def _few(draw: Any, top: int, likely: tuple[int, ...]) -> str:
    """Seconds or minutes: one or two values (the span's fires stay countable)."""
    values = draw(
        st.lists(
            st.one_of(st.sampled_from(likely), st.integers(0, top)),
            min_size=1,
            max_size=2,
            unique=True,
        )
    )
    return ",".join(str(v) for v in values)


@st.composite
def _hours(draw: Any) -> str:
    likely = st.sampled_from([0, 1, 2, 3, 23])
    shape = draw(st.sampled_from(["one", "list", "field"]))
    if shape == "one":
        return str(draw(likely))
    if shape == "list":
        values = draw(
            st.lists(st.one_of(likely, st.integers(0, 23)), min_size=2, max_size=3, unique=True)
        )
        return ",".join(str(v) for v in values)
    return str(draw(_list(0, 23)))


@st.composite
def _day_of_month(draw: Any) -> str:
    shape = draw(st.sampled_from(["*", "starred", "starred", "list", "list", "L", "with_L", "W"]))
    if shape == "*":
        return "*"
    if shape == "starred":  # Vixie's rule: both must match
        return f"*/{draw(st.integers(1, 31))}" + str(draw(st.sampled_from(["", ",L", ",15"])))
    if shape == "L":
        return "L"
    if shape == "with_L":
        days = draw(_list(1, 31))
        return "L" if days == "*" else f"{days},L"
    if shape == "W":
        return f"{draw(st.integers(1, 31))}W"
    return str(draw(_list(1, 31)))


@st.composite
def _day_of_week(draw: Any) -> str:
    shape = draw(st.sampled_from(["*", "starred", "list", "list", "nth"]))
    if shape == "*":
        return "*"
    if shape == "starred":
        return f"*/{draw(st.integers(1, 8))}" + str(draw(st.sampled_from(["", ",1", ",sat"])))
    if shape == "nth":
        nths = draw(
            st.lists(st.tuples(st.integers(0, 7), st.integers(1, 5)), min_size=1, max_size=2)
        )
        return ",".join(f"{d}#{n}" for d, n in nths)
    return str(draw(_list(0, 7, _WEEKDAYS, start=False)))


@st.composite
def expressions(draw: Any) -> str:
    """5 or 6 fields of the grammar; either day field, both or neither restricted, starting
    with '*' or not."""
    day_of_month, day_of_week = draw(_day_of_month()), draw(_day_of_week())
    if day_of_month.endswith("W"):
        day_of_week = "*"  # W takes a day-of-week of '*'
    if "#" in day_of_week:
        day_of_month = "*"  # and d#n a day-of-month of '*'
    month = draw(st.one_of(st.just("*"), _list(1, 12, _MONTHS)))
    fields = [draw(_few(59, (0, 30, 59))), draw(_hours()), day_of_month, month, day_of_week]
    if draw(st.booleans()):
        fields.insert(0, draw(_few(59, (0, 59))))
    return " ".join(fields)


def _accepted(expression: str) -> None:
    """Of the grammar, so accepted; one that matches no date at all is refused as such."""
    try:
        assert CronSchedule(expression, "UTC").refused is None, expression
    except CronError as exc:
        assert "never matches a date" in str(exc), exc
        assume(False)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expression=expressions(), zone=st.sampled_from(ZONES))
@example(expression="0 12 */10 * 1", zone="Europe/Berlin")
@example(expression="0 30 2 */3 * 0", zone="America/New_York")
def test_random_expressions_fire_as_the_reference_over_two_years(
    expression: str, zone: str
) -> None:
    _accepted(expression)
    assume(len(reference_walls(expression)) <= 40_000)  # a few are every minute of a day
    _compare(expression, zone)


def _croniter_walls(expression: str, count: int) -> list[datetime]:
    """The first ``count`` matches from 2026 as croniter reads the expression by default, as
    releases before issue 63 did."""
    walls = croniter(
        expression,
        datetime(2025, 12, 31, 23, 59, 59),
        second_at_beginning=len(expression.split()) == 6,
    )
    found: list[datetime] = []
    while len(found) < count:
        wall = walls.get_next(datetime)
        if wall >= datetime(END.year, END.month, END.day):
            break
        found.append(wall)
    return found


def _star_beside_restricted(expression: str) -> bool:
    """A day field holding a '*' item that is not '*' itself (``*/10``, ``1,*/2``), beside
    another that is not '*' either: the one kind Vixie's rule reads differently from
    croniter's (croniter leaves the day to the other for a '*' anywhere in the field, Vixie
    only for a leading one; a leading '*/n' beside a restricted field differs too)."""
    day_of_month, _, day_of_week = expression.split()[-3:]
    starred = [f for f in (day_of_month, day_of_week) if "*" in f]
    return any(f != "*" for f in starred) and "*" not in (day_of_month, day_of_week)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expression=expressions())
@example(expression="0 12 */10 * 1")
@example(expression="0 0 */1 * 1")
@example(expression="0 0 1 * */2")
@example(expression="0 12 1-31/10 * 1")  # the '*' written out: read alike by both
@example(expression="0 0 1 * 0-6/2")
@example(expression="0 0 1,*/2 * 0-7")  # croniter: odd days; Vixie: every day (either field)
def test_the_grammar_reads_as_croniter_did_but_for_a_starred_day_field(expression: str) -> None:
    """What an earlier release stored keeps its meaning, but for the one kind whose day rule
    changed (docs/guarantees.md): their first 100 matches from 2026 differ only there."""
    _accepted(expression)
    ours = list(reference_walls(expression)[:100])
    before = _croniter_walls(expression, len(ours) or 1)
    if ours != before[: len(ours)] or (not ours and before):
        assert _star_beside_restricted(expression), (ours[:3], before[:3])


# -- refused, and what was stored before still loads -----------------------------------------

REFUSED = [
    ("R R * * *", "minute 'R'", "random"),
    ("0 R(0-30) * * *", "hour 'R(0-30)'", "random"),
    ("H H * * *", "minute 'H'", "hashed"),
    ("H/15 * * * *", "minute 'H/15'", "hashed"),
    ("0 0 9 ? * 2-6", "day-of-month '?'", "Quartz"),  # Quartz's Monday-Friday
    ("0 0 ? * 5#3", "day-of-month '?'", "Quartz"),
    ("0 0 * * L", "day-of-week 'L'", "no spelling"),
    ("0 0 * * 5L", "day-of-week '5L'", "no spelling"),
    ("0 0 * * L5", "day-of-week 'L5'", "no spelling"),
    ("5-1 * * * *", "minute '5-1'", "runs upwards"),
    ("0 9 * * fri-mon", "day-of-week 'fri-mon'", "runs upwards"),
    ("0 9 * * mon-sun", "day-of-week 'mon-sun'", "runs upwards"),
    ("0 0 1-1 * *", "day-of-month '1-1'", "write 1 alone"),
    ("0 0 15W * 1", "day-of-month '15W'", "day-of-week of '*'"),
    ("0 0 LW * *", "day-of-month 'LW'", "no LW"),
    ("0 0 L-3 * *", "day-of-month 'L-3'", "no LW, L-n"),
    ("0 0 1,15W * *", "day-of-month '1,15W'", "W in a field of its own"),
    ("0 0 1 * 5#3", "day-of-week '5#3'", "day-of-month of '*'"),
    ("0 0 * * 1,5#3", "day-of-week '1,5#3'", "only d#n items"),
    ("0 0 * * 5#6", "day-of-week '5#6'", "1 to 5"),
    ("0 0 * * 1/2", "day-of-week '1/2'", "runs to 6 in some crons"),
    ("0-59/61 * * * *", "minute '0-59/61'", "a step is a number from 1 to 60"),
    ("0 0 1,,2 * *", "day-of-month '1,,2'", "empty list item"),
    ("0 0 * * 8", "day-of-week '8'", "out of range 0-7"),
    ("0 0 * foo *", "month 'foo'", "not a value of the month"),
]


@pytest.mark.parametrize(("expression", "field", "why"), REFUSED)
def test_a_new_request_outside_the_grammar_is_refused_naming_the_field(
    expression: str, field: str, why: str
) -> None:
    repeat = Repeat.calendar(expression, "Europe/Berlin", times=3)
    with pytest.raises(ValidationError) as caught:
        first_due_for(repeat, 1_767_225_600_000)
    assert caught.value.field == "repeat.cron"
    assert "is not a cron expression" in caught.value.message  # the schema fuzzer's rule
    assert field in caught.value.message and why in caught.value.message, caught.value.message


@pytest.fixture(scope="module")
def http() -> Iterator[TestClient]:
    settings = ChronosSettings()
    # Nothing listens at the Kafka these settings name: a request taken would wait for no
    # acknowledgement long (only the refusals are the question).
    settings = settings.model_copy(
        update={"proxy": settings.proxy.model_copy(update={"ack_timeout_s": 0.05})}
    )
    app = create_app(DelayClient(settings), settings)
    with TestClient(app) as client:
        yield client
    app.state.lane.close()


@pytest.mark.parametrize("expression", ["R R * * *", "H H * * *", "0 0 9 ? * 2-6"])
def test_the_http_api_answers_422_naming_repeat_cron(http: TestClient, expression: str) -> None:
    body = {
        "topic": "t",
        "value": "v",
        "delay_ms": 0,
        "repeat": {"kind": "cron", "cron": expression, "times": 3},
    }
    for path, sent in (("/v1/messages", body), ("/v1/messages/batch", {"messages": [body]})):
        answer = http.post(path, json=sent)
        assert answer.status_code == 422, answer.text
        assert answer.json()["field"].endswith("repeat.cron")
        assert "is not a cron expression" in answer.json()["error"]


@pytest.mark.parametrize(
    "expression",
    [
        "0 9 * * mon-fri",
        "0 0 1 JAN *",
        "0 0 * * 7",
        "5/15 * * * *",
        "0 0 9 * * 1-5",
        "0 12 */10 * 1",
    ],
)
def test_the_documented_forms_are_accepted(expression: str) -> None:
    repeat = Repeat.calendar(expression, "Europe/Berlin", times=3)
    assert first_due_for(repeat, 1_767_225_600_000) >= 1_767_225_600_000


@pytest.mark.parametrize(
    "expression",
    ["0 0 ? * 5#3", "0 0 * * L5", "0 0 15W * 1", "0 0 1-1 * *", "5-1 * * * *", "0 0 9 ? * 2-6"],
)
def test_what_an_earlier_release_stored_outside_the_grammar_loads_as_it_read_it(
    expression: str,
) -> None:
    """A node's store and the inner topic hold what earlier releases acknowledged: it must
    load, and fire as croniter read it then (a change would move an acknowledged due time)."""
    schedule = CronSchedule(expression, "UTC")
    assert schedule.refused is not None
    walls = _croniter_walls(expression, 20)
    assert len(walls) == 20
    start, _ = _span_ms("UTC")
    fires = [schedule.at_or_after(start)]
    while len(fires) < 20:
        fires.append(schedule.next_after(fires[-1]))
    assert fires == [int(w.replace(tzinfo=UTC).timestamp()) * 1000 for w in walls]


_PINNED = "from chronos.cron import CronSchedule; print(CronSchedule('{}', 'UTC').next_after(0))"


@pytest.mark.parametrize("expression", ["R R * * *", "0 R/7 * * *", "R 0 * * * *"])
def test_a_stored_r_is_the_same_value_in_every_process(expression: str) -> None:
    """Each process drew its own ``R`` (replicas and restarts disagreed); one stored by an
    earlier release now loads with croniter's hash of the expression, in any process."""
    cron.clear_caches(zones=False)
    here = CronSchedule(expression, "UTC").next_after(0)
    assert CronSchedule(expression, "UTC").next_after(0) == here
    there = subprocess.run(
        [sys.executable, "-c", _PINNED.format(expression)],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    assert int(there.stdout) == here


def test_a_node_still_ingests_an_r_an_earlier_proxy_acknowledged() -> None:
    """The node's ingest checks records with the proxy's rules; a tightened grammar must not
    dead-letter what an earlier release acknowledged (nor a replica rebuilding from the
    topic)."""
    now = 1_767_225_600_000
    repeat = Repeat.calendar("R R * * *", "Europe/Berlin", times=5)
    first = cron.schedule_of(repeat.cron, repeat.zone).at_or_after(now)
    message = DelayMessage("m-1", "orders", None, b"v", first_due_ms=first, repeat=repeat)
    accepted = accept_inner(*wire.encode_add(message), LimitSettings(), TopicNames("chronos"), now)
    assert isinstance(accepted, DelayMessage) and accepted.first_due_ms == first
    validate_message(accepted, LimitSettings(), TopicNames("chronos"), now)
    with pytest.raises(ValidationError, match="is not a cron expression"):
        first_due_for(repeat, now)
