"""Cron schedules against a brute-force reference: every local minute of two years walked with
``zoneinfo``, matched against field sets written out by hand (no cron parser), each match
turned into an instant by the documented rules (a skipped time fires when the clocks jumped
over it, a repeated time fires once, at its first instant)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from chronos.cron import CronError, CronSchedule, due_of, schedule_of

ZONES = [
    "Europe/Berlin",  # northern DST, changes at 02:00/03:00 local
    "America/New_York",  # northern DST, other dates, changes at 02:00 local
    "Australia/Sydney",  # southern hemisphere DST
    "Australia/Lord_Howe",  # southern, a 30-minute DST shift
    "Asia/Kolkata",  # a 30-minute offset, no DST
    "UTC",
]
START = datetime(2026, 1, 1)
END = datetime(2028, 1, 1)
MINUTE = timedelta(minutes=1)


def _every(step: int, top: int) -> frozenset[int]:
    return frozenset(range(0, top, step))


@dataclass(frozen=True)
class Case:
    """An expression and the same schedule as explicit sets (cron's weekday: 0 = Sunday)."""

    expression: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int] | None = None  # None: "*"
    months: frozenset[int] | None = None
    weekdays: frozenset[int] | None = None

    def day_matches(self, day: datetime) -> bool:
        if self.months is not None and day.month not in self.months:
            return False
        weekday = (day.weekday() + 1) % 7
        if self.days is not None and self.weekdays is not None:
            return day.day in self.days or weekday in self.weekdays  # Vixie cron: either
        if self.days is not None:
            return day.day in self.days
        return self.weekdays is None or weekday in self.weekdays


CASES = [
    Case("30 2 * * *", frozenset({30}), frozenset({2})),
    Case("0 9 * * 1-5", frozenset({0}), frozenset({9}), weekdays=frozenset(range(1, 6))),
    Case("*/15 1-3 * * *", _every(15, 60), frozenset({1, 2, 3})),
    Case("0 0 1,15 * *", frozenset({0}), frozenset({0}), days=frozenset({1, 15})),
    Case(
        "45 23 * 2,10 0", frozenset({45}), frozenset({23}), None, frozenset({2, 10}), frozenset({0})
    ),  # fmt: skip
    Case("0 12 13 * 5", frozenset({0}), frozenset({12}), frozenset({13}), None, frozenset({5})),
    Case(
        "*/5 * * 3,4,9,10 0",
        _every(5, 60),
        _every(1, 24),
        None,
        frozenset({3, 4, 9, 10}),
        frozenset({0}),
    ),  # fmt: skip
]


def _matching_minutes(case: Case) -> list[datetime]:
    """Every local minute of the span that the sets match, walked one minute at a time."""
    found: list[datetime] = []
    moment = START
    while moment < END:
        if moment.minute in case.minutes and moment.hour in case.hours and case.day_matches(moment):
            found.append(moment)
        moment += MINUTE
    return found


def _exists(wall: datetime, zone: ZoneInfo) -> bool:
    for fold in (0, 1):
        aware = wall.replace(tzinfo=zone, fold=fold)
        if aware.astimezone(UTC).astimezone(zone).replace(tzinfo=None) == wall:
            return True
    return False


def _reference_fires(walls: list[datetime], zone: ZoneInfo) -> list[int]:
    fires: list[int] = []
    for wall in walls:
        moment = wall
        while not _exists(moment, zone):  # skipped: the first local minute that exists
            moment += MINUTE
        instant = int(moment.replace(tzinfo=zone, fold=0).timestamp() * 1000)
        if not fires or instant > fires[-1]:  # a repeated wall time appears once in the walk
            fires.append(instant)
        else:
            assert instant == fires[-1], (wall, zone)
    return fires


def _fires(schedule: CronSchedule, start_ms: int, end_ms: int) -> list[int]:
    fires: list[int] = []
    fire = schedule.at_or_after(start_ms)
    while fire < end_ms:
        fires.append(fire)
        fire = schedule.next_after(fire)
    return fires


@pytest.fixture(scope="module")
def matches() -> Callable[[Case], list[datetime]]:
    cache: dict[str, list[datetime]] = {}

    def get(case: Case) -> list[datetime]:
        if case.expression not in cache:
            cache[case.expression] = _matching_minutes(case)
        return cache[case.expression]

    return get


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.expression)
@pytest.mark.parametrize("zone_name", ZONES)
def test_every_fire_over_two_years_equals_the_brute_force_walk(
    case: Case, zone_name: str, matches: Callable[[Case], list[datetime]]
) -> None:
    zone = ZoneInfo(zone_name)
    expected = _reference_fires(matches(case), zone)
    start_ms = int(START.replace(tzinfo=zone).timestamp() * 1000)
    end_ms = int(END.replace(tzinfo=zone).timestamp() * 1000)
    got = _fires(CronSchedule(case.expression, zone_name), start_ms, end_ms)
    assert len(got) == len(expected) > 0
    assert got == expected


def _ms(text: str) -> int:
    return int(datetime.fromisoformat(text).timestamp() * 1000)


@pytest.mark.parametrize(
    ("zone", "start", "fires"),
    [
        # Spring forward: 02:30 does not exist, fires when the clocks jump (03:00 CEST).
        ("Europe/Berlin", "2026-03-28T12:00+01:00",
         ["2026-03-29T03:00+02:00", "2026-03-30T02:30+02:00"]),
        # Fall back: 02:30 exists twice, fires once, at the first (summer time) instant.
        ("Europe/Berlin", "2026-10-24T12:00+02:00",
         ["2026-10-25T02:30+02:00", "2026-10-26T02:30+01:00"]),
        # Lord Howe moves its clocks by 30 minutes: 02:00-02:29 are skipped in October.
        ("Australia/Lord_Howe", "2026-10-03T12:00+10:30",
         ["2026-10-04T02:30+11:00", "2026-10-05T02:30+11:00"]),
    ],
)  # fmt: skip
def test_daylight_saving_changes_fire_as_documented(
    zone: str, start: str, fires: list[str]
) -> None:
    schedule = CronSchedule("30 2 * * *", zone)
    first = schedule.at_or_after(_ms(start))
    assert [first, schedule.next_after(first)] == [_ms(f) for f in fires]


def test_a_start_inside_the_repeated_hour_skips_what_its_first_pass_fired() -> None:
    schedule = CronSchedule("*/20 * * * *", "Europe/Berlin")
    second_pass = _ms("2026-10-25T02:10+01:00")  # 02:10 CET, the repeated hour's 2nd pass
    assert schedule.next_after(second_pass) == _ms("2026-10-25T03:00+01:00")


def test_seconds_come_first_in_six_fields() -> None:
    schedule = CronSchedule("*/10 * * * * *", "Asia/Kolkata")
    start = _ms("2026-05-01T09:00:05+05:30")
    assert schedule.at_or_after(start) == _ms("2026-05-01T09:00:10+05:30")
    assert schedule.at_or_after(_ms("2026-05-01T09:00:10+05:30")) == start + 5000


def test_due_of_counts_occurrences_from_the_first_fire_in_any_order() -> None:
    schedule = CronSchedule("0 9 * * 1-5", "Europe/Berlin")
    first = schedule.at_or_after(_ms("2026-03-27T10:00+01:00"))  # a Friday, after 09:00
    walked = [first]
    for _ in range(9):
        walked.append(schedule.next_after(walked[-1]))
    assert [due_of("0 9 * * 1-5", "Europe/Berlin", first, k) for k in range(1, 11)] == walked
    assert due_of("0 9 * * 1-5", "Europe/Berlin", first, 3) == walked[2]  # backwards too
    assert walked[0] == _ms("2026-03-30T09:00+02:00")  # Monday, summer time already


@pytest.mark.parametrize(
    ("expression", "zone", "problem"),
    [
        ("0 9 * *", "UTC", "give 5 fields"),
        ("0 9 * * * * *", "UTC", "give 5 fields"),
        ("0\t9 * * *", "UTC", "separated by spaces"),
        ("61 9 * * *", "UTC", "not a cron expression"),
        ("0 9 * * 1-5", "Mars/Olympus", "not an IANA time zone"),
        ("0 9 * * 1-5", "../etc/passwd", "not an IANA time zone"),
        # Issue 62: each of these was a 500 with a traceback (IsADirectoryError, OSError).
        ("0 9 * * *", "Europe", "not an IANA time zone"),
        ("0 9 * * *", "Etc", "not an IANA time zone"),
        ("0 9 * * *", "America/Argentina", "not an IANA time zone"),
        ("0 9 * * *", "A" * 300, "not an IANA time zone"),
        ("0 9 * * *", "Europe/Berlin\x00", "not an IANA time zone"),
        ("0 9 * * *", "Europe//Berlin", "not an IANA time zone"),
        ("0 9 * * *", "", "not an IANA time zone"),
    ],
)
def test_bad_expressions_and_zones_say_what_is_wrong(
    expression: str, zone: str, problem: str
) -> None:
    with pytest.raises(CronError, match=problem):
        CronSchedule(expression, zone)


def test_an_expression_that_never_matches_is_refused() -> None:
    with pytest.raises(CronError, match="never matches"):
        CronSchedule("0 0 30 2 *", "UTC")


def test_one_schedule_is_parsed_once() -> None:
    """Mutant caught (it happened: a helper inserted under the decorator took its cache):
    every message of a schedule parsing its expression again."""
    assert schedule_of("0 9 * * 1-5", "Europe/Berlin") is schedule_of(
        "0 9 * * 1-5", "Europe/Berlin"
    )


@pytest.mark.parametrize("zone", ["posixrules", "right/UTC", "posix/Europe/Berlin"])
def test_a_zone_an_earlier_release_accepted_still_loads(zone: str) -> None:
    """Not a list of names (a review of issue 62's first fix): a stored repeat whose zone
    ``ZoneInfo`` loads but ``available_timezones`` leaves out must not turn into a record
    that stops its partition's delivery."""
    try:
        ZoneInfo(zone)
    except (OSError, ValueError):
        pytest.skip(f"this machine's zone database has no {zone}")
    assert CronSchedule("0 9 * * *", zone).next_after(0) > 0
