"""Counting a cron repeat's fires equals walking them (issue 62).

``chronos.cron`` counts: occurrence k, the fires in a span and the first fire after an instant
cost a few bisections. The reference here walks: croniter lists the wall-clock matches one by
one from the local time just before the start, and each becomes an instant by the documented
rules, written out again (a skipped local time fires when the clocks jumped, a repeated one
once, at its first instant; equal instants are one fire). croniter reads an expression of the
documented grammar with Vixie's day rule (its ``implement_cron_bug``: a day field starting
with ``*`` makes a day match only when both fields do), one outside it as releases before
issue 63 did (its default); which of the two applies is the one thing asked of
``chronos.cron`` (``CronSchedule.refused``), and ``tests/unit/test_cron_vixie.py`` holds the
grammar's reading to a walk that owes nothing to croniter either. Zones: the changes that
bite (30-minute and 2-hour shifts, changes at midnight, a skipped calendar day), starts
around their 2027-2028 changes (or the years they last had some) and random ones.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import random
import struct
import zoneinfo
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from chronos.cron import CronError, CronSchedule, due_of, fires_between, zones
from chronos.cron import schedule as schedule_module
from chronos.errors import ValidationError
from chronos.model import DelayMessage
from chronos.names import TopicNames
from chronos.repeat import Repeat
from chronos.settings import LimitSettings
from chronos.validation import validate_message

ZONES = [
    "Europe/Berlin",
    "America/New_York",
    "Australia/Sydney",
    "Australia/Lord_Howe",  # a 30-minute shift
    "Asia/Kolkata",  # +05:30, no changes
    "America/Santiago",  # changes at midnight
    "Asia/Tehran",  # changes at midnight, until 2022
    "America/Havana",  # changes at midnight
    "Antarctica/Troll",  # a 2-hour shift
    "Pacific/Apia",  # skipped 2011-12-30 whole; DST until 2021
    "UTC",
]
#: The years whose offset changes the starts gather around.
_YEARS = {"Asia/Tehran": (2021, 2022), "Pacific/Apia": (2011, 2012, 2021)}
_DAY_MS = 86_400_000


def _ms(text: str) -> int:
    return int(datetime.fromisoformat(text).timestamp() * 1000)


# -- the reference -------------------------------------------------------------------------


def _reference_instant(wall: datetime, zone: ZoneInfo) -> int:
    """A wall time's fire: its first instant, or for a skipped one the instant of the jump
    (the first second whose local time is past it)."""
    aware = wall.replace(tzinfo=zone)
    if aware.astimezone(UTC).astimezone(zone).replace(tzinfo=None) == wall:
        return int(aware.timestamp()) * 1000
    before = int(wall.replace(tzinfo=zone, fold=1).timestamp())  # read with the later offset
    after = int(wall.replace(tzinfo=zone, fold=0).timestamp())  # with the earlier one
    while after - before > 1:
        middle = (before + after) // 2
        if datetime.fromtimestamp(middle, zone).replace(tzinfo=None) > wall:
            after = middle
        else:
            before = middle
    return after * 1000


def reference_fires(
    expression: str, zone_name: str, start_ms: int, count: int, zone: ZoneInfo | None = None
) -> list[int]:
    """The first ``count`` fires at or after ``start_ms``, walked."""
    zone = zone or ZoneInfo(zone_name)
    local = datetime.fromtimestamp((start_ms - 1) / 1000, zone).replace(tzinfo=None)
    walls = croniter(
        expression,
        local,
        second_at_beginning=len(expression.split()) == 6,
        implement_cron_bug=_documented(expression),
    )
    fires: list[int] = []
    while len(fires) < count:
        fire = _reference_instant(walls.get_next(datetime), zone)
        if fire >= start_ms and (not fires or fire > fires[-1]):
            fires.append(fire)
    return fires


@functools.cache
def _documented(expression: str) -> bool:
    """Whether the expression is of the documented grammar (a new request may use it), so
    read with Vixie's day rule; otherwise as releases before issue 63 read it."""
    return CronSchedule(expression, "UTC").refused is None


@functools.cache
def _changes(zone_name: str) -> list[int]:
    """The instants (ms) a zone's offset changes in its interesting years, hour by hour."""
    zone = ZoneInfo(zone_name)
    found: list[int] = []
    for year in _YEARS.get(zone_name, (2027, 2028)):
        start = int(datetime(year, 1, 1, tzinfo=UTC).timestamp())
        previous = datetime.fromtimestamp(start, zone).utcoffset()
        for hour in range(1, 366 * 24):
            offset = datetime.fromtimestamp(start + hour * 3600, zone).utcoffset()
            if offset != previous:
                found.append((start + hour * 3600) * 1000)
            previous = offset
    return found


# -- expressions ---------------------------------------------------------------------------


def _values(low: int, high: int, likely: tuple[int, ...] = ()) -> st.SearchStrategy[int]:
    if likely:
        return st.one_of(st.sampled_from(likely), st.integers(low, high))
    return st.integers(low, high)


@st.composite
def _field(draw: Any, low: int, high: int, likely: tuple[int, ...] = ()) -> str:
    """One field: *, */n, a, a,b,c, a-b, a-b/n."""
    value = _values(low, high, likely)
    shape = draw(st.sampled_from(["*", "step", "one", "list", "range", "range_step"]))
    if shape == "*":
        return "*"
    if shape == "step":
        return f"*/{draw(st.integers(1, high - low + 1))}"
    if shape == "one":
        return str(draw(value))
    if shape == "list":
        return ",".join(str(v) for v in draw(st.lists(value, min_size=2, max_size=4)))
    a, b = sorted((draw(value), draw(value)))
    if shape == "range":
        return f"{a}-{b}"
    return f"{a}-{b}/{draw(st.integers(1, 20))}"


@st.composite
def _day_of_month(draw: Any) -> str:
    special = draw(st.sampled_from(["field", "field", "field", "L", "W", "L-list"]))
    if special == "L":
        return "L"
    if special == "W":
        return f"{draw(st.integers(1, 31))}W"
    if special == "L-list":
        return f"{draw(st.integers(1, 28))},L"
    return str(draw(_field(1, 31, (1, 15, 28, 29, 30, 31))))


@st.composite
def _day_of_week(draw: Any) -> str:
    special = draw(st.sampled_from(["field", "field", "field", "nth", "last"]))
    if special == "nth":
        return f"{draw(st.integers(0, 6))}#{draw(st.integers(1, 5))}"
    if special == "last":
        return f"L{draw(st.integers(0, 6))}"
    return str(draw(_field(0, 7)))


@st.composite
def expressions(draw: Any) -> str:
    """5 or 6 fields; the hours a change happens at more likely; either day field, both or
    neither restricted."""
    fields = [
        draw(_field(0, 59, (0, 30, 59))),
        draw(_field(0, 23, (0, 1, 2, 3, 23))),
        draw(st.one_of(st.just("*"), _day_of_month())),
        draw(st.one_of(st.just("*"), _field(1, 12))),
        draw(st.one_of(st.just("*"), _day_of_week())),
    ]
    if draw(st.booleans()):
        fields.insert(0, draw(_field(0, 59, (0, 59))))
    return " ".join(fields)


@st.composite
def starts(draw: Any, zone: str) -> int:
    """Near one of the zone's changes (a little before it, mostly), or anywhere 1971-2037."""
    changes = _changes(zone)
    if changes and draw(st.integers(0, 3)):
        before = draw(st.sampled_from([10, 600, 3600, 6 * 3600, 2 * 86_400, 40 * 86_400]))
        change: int = draw(st.sampled_from(changes))
        return change - int(draw(st.integers(-1000, before * 1000)))
    return int(draw(st.integers(_ms("1971-01-01T00:00Z"), _ms("2037-12-31T00:00Z"))))


def _schedule(expression: str, zone: str) -> CronSchedule:
    try:
        return CronSchedule(expression, zone)
    except CronError:
        assume(False)
        raise


def _first_after(fires: list[int], instant: int) -> int | None:
    return next((f for f in fires if f > instant), None)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), expression=expressions(), zone=st.sampled_from(ZONES))
def test_counted_fires_equal_the_walked_ones(
    data: st.DataObject, expression: str, zone: str
) -> None:
    schedule = _schedule(expression, zone)
    start = data.draw(starts(zone), "start")
    count = data.draw(st.integers(1, 150), "count")
    walked = reference_fires(expression, zone, start, count)
    first = walked[0]
    assert schedule.at_or_after(start) == first
    assert [due_of(expression, zone, first, k) for k in range(1, count + 1)] == walked
    rng = random.Random(data.draw(st.integers(0, 2**32), "seed"))
    for _ in range(20):  # the first fire after any instant, and counts between any two
        a = rng.choice(walked) + rng.choice([-1000, -1, 0, 1, 999])
        following = _first_after(walked, a)
        if following is not None:
            assert schedule.next_after(a) == following, a
        b = rng.choice(walked) + rng.choice([-1, 0, 1, 999])
        if b < walked[-1]:
            expected = sum(1 for f in walked if a < f <= b)
            assert schedule.fires_between(a, b, 10**9) == expected, (a, b)
            most = rng.randint(0, 5)
            assert fires_between(expression, zone, a, b, most) == min(expected, most)
    # From a first due that is not a fire (a start), occurrence k is still the (k-1)-th fire
    # strictly after it.
    later = [f for f in walked if f > start]
    for k in range(2, len(later) + 2):
        assert due_of(expression, zone, start, k) == later[k - 2]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), expression=expressions(), zone=st.sampled_from(ZONES))
def test_until_the_last_occurrence_and_catch_up_equal_the_walked_ones(
    data: st.DataObject, expression: str, zone: str
) -> None:
    _schedule(expression, zone)
    start = data.draw(starts(zone), "start")
    walked = reference_fires(expression, zone, start, data.draw(st.integers(2, 120), "n"))
    first = walked[0]
    times = data.draw(st.integers(1, len(walked)), "times")
    until = data.draw(st.one_of(st.just(0), st.sampled_from(walked)), "until")
    until += data.draw(st.sampled_from([-1, 0])) if until else 0
    repeat = Repeat.calendar(expression, zone, times=times, until_ms=until)
    last = times if not until else max(1, min(times, sum(1 for f in walked if f <= until)))
    assert repeat.last_due(first) == walked[last - 1]
    assert [repeat.is_last(first, k) for k in range(1, last + 1)] == [False] * (last - 1) + [True]
    for _ in range(10):
        occurrence = data.draw(st.integers(1, last), "occurrence")
        now = data.draw(st.sampled_from(walked), "now") + data.draw(st.sampled_from([-1, 0, 1]))
        expected = occurrence
        while expected < last and walked[expected] <= now:  # walked[k] is occurrence k+1
            expected += 1
        assert repeat.latest_due(first, occurrence, now) == (expected, walked[expected - 1])


# -- 10,000 occurrences, across changes -------------------------------------------------

LONG = [
    ("* * * * * *", "Europe/Berlin", "2027-03-28T01:00:00+01:00"),  # through the skipped hour
    ("* * * * * *", "Europe/Berlin", "2027-10-31T01:00:00+02:00"),  # through the repeated hour
    ("*/3 * * * * *", "Australia/Lord_Howe", "2027-10-03T01:00:00+10:30"),  # 30 minutes
    ("7 */2 * * * *", "Australia/Lord_Howe", "2027-04-03T12:00:00+11:00"),
    ("0 * * * *", "Antarctica/Troll", "2027-01-01T00:00:00+00:00"),  # 2-hour shifts
    ("*/30 23,0,1 * * *", "America/Santiago", "2027-01-01T00:00:00-03:00"),  # at midnight
    ("0 */20 * * * *", "Asia/Tehran", "2021-03-01T00:00:00+03:30"),
    ("30 0-2 * * *", "America/Havana", "2027-01-01T00:00:00-05:00"),
    ("0 0 * * *", "Pacific/Apia", "2011-01-01T00:00:00-11:00"),  # the skipped day
    ("*/10 * 29-31 12 *", "Pacific/Apia", "2011-12-29T00:00:00-10:00"),
    ("15 2 * * 1-5", "America/New_York", "2027-01-01T00:00:00-05:00"),
    ("0 */10 2-3 L,15 * 0", "Europe/Berlin", "2027-01-01T00:00:00+01:00"),
    ("0 0 * * *", "UTC", "2027-01-01T00:00:00+00:00"),
]


@pytest.mark.parametrize(("expression", "zone", "start"), LONG)
def test_ten_thousand_occurrences_equal_the_walked_ones(
    expression: str, zone: str, start: str
) -> None:
    walked = reference_fires(expression, zone, _ms(start), 10_000)
    first = walked[0]
    assert [due_of(expression, zone, first, k) for k in range(1, 10_001)] == walked
    schedule = CronSchedule(expression, zone)
    rng = random.Random(62)
    for _ in range(300):
        a, b = sorted(rng.sample(walked, 2))
        a += rng.choice([-1, 0, 1])
        assert schedule.fires_between(a, b, 10**9) == sum(1 for f in walked if a < f <= b)
    until = walked[rng.randrange(10_000)]
    assert Repeat.calendar(expression, zone, times=10_000, until_ms=until).last_due(first) == until
    repeat = Repeat.calendar(expression, zone, times=10_000)
    assert repeat.last_due(first) == walked[-1]
    assert repeat.latest_due(first, 1, walked[-2] + 1) == (9_999, walked[-2])


def _reference_accepts(repeat: Repeat, first: int, horizon: int) -> str | None:
    """What validation decided before counting, with the default shortest interval (1 s:
    fires are whole seconds and never collapse into one, so no gap was ever refused)."""
    if repeat.until_ms and repeat.until_ms < first:
        return "repeat.until"
    walked = reference_fires(repeat.cron, repeat.zone, first, repeat.times)
    dues = [f for f in walked if not repeat.until_ms or f <= repeat.until_ms] or walked[:1]
    return "repeat" if dues[-1] > horizon else None


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), expression=expressions(), zone=st.sampled_from(ZONES))
def test_validation_decides_as_the_walk_did(
    data: st.DataObject, expression: str, zone: str
) -> None:
    _schedule(expression, zone)
    start = data.draw(starts(zone), "start")
    walked = reference_fires(expression, zone, start, 60)
    first = walked[0]
    times = data.draw(st.integers(1, 60), "times")
    until = data.draw(st.one_of(st.just(0), st.sampled_from(walked)), "until")
    until += data.draw(st.sampled_from([-1, 0, 1])) if until else 0
    horizon = data.draw(st.sampled_from(walked), "horizon") + data.draw(st.sampled_from([-1, 0]))
    limits = LimitSettings(max_delay_s=max(1, (horizon - first) // 1000 + 1))
    now = horizon - limits.max_delay_s * 1000
    repeat = Repeat.calendar(expression, zone, times=times, until_ms=until)
    message = DelayMessage("m", "t", None, b"v", first_due_ms=first, repeat=repeat)
    try:
        validate_message(message, limits, TopicNames("chronos"), now)
        decided: str | None = None
    except ValidationError as exc:
        decided = exc.field
    assert decided == _reference_accepts(repeat, first, horizon)


def test_an_until_between_the_horizon_and_the_next_fire_leaves_one_occurrence() -> None:
    """Found by the test above: a second occurrence past the horizon but also past the until
    does not exist, so nothing lies past the horizon."""
    first = _ms("1971-01-01T00:00Z")
    repeat = Repeat.calendar("* * * * *", "Europe/Berlin", times=2, until_ms=first + 1)
    message = DelayMessage("m", "t", None, b"v", first_due_ms=first, repeat=repeat)
    validate_message(message, LimitSettings(max_delay_s=1), TopicNames("chronos"), first - 1000)
    later = Repeat.calendar("* * * * *", "Europe/Berlin", times=2, until_ms=first + 60_000)
    message = DelayMessage("m", "t", None, b"v", first_due_ms=first, repeat=later)
    with pytest.raises(ValidationError, match="last occurrence"):
        validate_message(message, LimitSettings(max_delay_s=1), TopicNames("chronos"), first)


# -- the day rule, the shortest gap, the zone tables -------------------------------------


@pytest.mark.parametrize(
    ("expression", "gap_s"),
    [
        ("* * * * * *", 1),
        ("*/30 * * * * *", 30),
        ("0 9 * * *", 86_400),
        ("0 1,3 * * *", 2 * 3600),
        ("0 23,1 * * *", 2 * 3600),  # 23:00 to the next day's 01:00
        ("50 59 23 * * *", 86_400),
        ("0,50 59 0,23 * * *", 50),
        ("10,50 0,59 5 * * *", 40),
        ("0 0 * * 1", 86_400),  # as if the next day matched too
    ],
)
def test_the_shortest_gap_is_read_on_the_wall_clock(expression: str, gap_s: int) -> None:
    schedule = CronSchedule(expression, "UTC")
    assert schedule.min_gap_ms == gap_s * 1000
    walked = reference_fires(expression, "UTC", _ms("2027-01-04T00:00Z"), 50)
    if expression != "0 0 * * 1":
        assert min(b - a for a, b in zip(walked, walked[1:], strict=False)) == gap_s * 1000


def test_a_night_the_clocks_go_forward_shortens_a_gap_as_documented() -> None:
    """``0 1,3 * * *`` in Berlin: 2 h on the wall clock; that night 03:00 is 1 h after 01:00
    (02:00 does not exist). The rule is the wall clock's, so a shortest interval of 2 h
    accepts it."""
    walked = reference_fires("0 1,3 * * *", "Europe/Berlin", _ms("2027-03-28T00:00+01:00"), 2)
    assert walked[1] - walked[0] == 3_600_000
    limits = LimitSettings(repeat_min_interval_ms=7_200_000)
    repeat = Repeat.calendar("0 1,3 * * *", "Europe/Berlin", times=4)
    message = DelayMessage("m", "t", None, b"v", first_due_ms=walked[0], repeat=repeat)
    validate_message(message, limits, TopicNames("chronos"), walked[0])
    tighter = LimitSettings(repeat_min_interval_ms=7_200_001)
    with pytest.raises(ValidationError, match="fires 7200000 ms apart, less than 7200001 ms"):
        validate_message(message, tighter, TopicNames("chronos"), walked[0])


@pytest.mark.parametrize(
    ("expression", "zone", "start", "fires"),
    [
        # Apia skipped 2011-12-30: its midnight and noon fire once, at the jump, which is
        # also 12-31's midnight.
        ("0 0,12 * * *", "Pacific/Apia", "2011-12-29T11:00-10:00",
         ["2011-12-29T12:00-10:00", "2011-12-31T00:00+14:00", "2011-12-31T12:00+14:00"]),
        # Santiago's clocks go from 24:00 to 01:00: 00:15 fires at 01:00.
        ("15 0,1 * * *", "America/Santiago", "2027-09-04T12:00-04:00",
         ["2027-09-05T01:00-03:00", "2027-09-05T01:15-03:00", "2027-09-06T00:15-03:00"]),
        # and back from 24:00 to 23:00: 23:30 fires once, the first time.
        ("30 23 * * *", "America/Santiago", "2027-04-03T12:00-03:00",
         ["2027-04-03T23:30-03:00", "2027-04-04T23:30-04:00"]),
        # Troll jumps 2 hours.
        ("0 * * * *", "Antarctica/Troll", "2027-03-29T00:30+00:00",
         ["2027-03-29T03:00+02:00", "2027-03-29T04:00+02:00"]),
    ],
)  # fmt: skip
def test_the_odd_changes_count_as_they_walk(
    expression: str, zone: str, start: str, fires: list[str]
) -> None:
    expected = [_ms(f) for f in fires]
    assert reference_fires(expression, zone, _ms(start), len(fires)) == expected
    first = CronSchedule(expression, zone).at_or_after(_ms(start))
    assert [due_of(expression, zone, first, k) for k in range(1, len(fires) + 1)] == expected


def test_a_zone_year_counting_cannot_trust_is_walked(monkeypatch: pytest.MonkeyPatch) -> None:
    """Offset changes closer than the table can be sure of: the walk answers, the same."""
    regular = zones._zone_year

    def irregular(zone: ZoneInfo, year: int) -> Any:
        return dataclasses.replace(regular(zone, year), regular=False)

    monkeypatch.setattr(schedule_module, "_zone_year", irregular)
    schedule = CronSchedule("*/20 * * * *", "Europe/Berlin")
    start = _ms("2027-10-31T01:30+02:00")
    walked = reference_fires("*/20 * * * *", "Europe/Berlin", start, 20)
    assert [schedule.after(walked[0], k) for k in range(20)] == walked
    assert schedule.fires_between(walked[0], walked[-1], 10**9) == 19
    assert schedule.fires_between(walked[0], walked[-1], 5) == 5


def _tzif(changes: list[tuple[str, int]], first_offset: int) -> ZoneInfo:
    """A zone of our own (TZif version 1): ``first_offset`` seconds, then each (UTC instant,
    offset) of ``changes``."""
    offsets = [first_offset] + [offset for _, offset in changes]
    times = [int(datetime.fromisoformat(at).timestamp()) for at, _ in changes]
    head = struct.pack(">4sc15x6l", b"TZif", b"\0", 0, 0, 0, len(times), len(offsets), 4)
    body = b"".join(struct.pack(">l", t) for t in times)
    body += bytes(range(1, len(times) + 1))
    body += b"".join(struct.pack(">lBB", offset, 0, 0) for offset in offsets) + b"ZZZ\0"
    return ZoneInfo.from_file(io.BytesIO(head + body), key="Test/Zone")


def test_a_change_back_across_the_new_year_counts_as_it_walks() -> None:
    """No zone of tzdata since 1970 has it, so one of our own: its clocks go back an hour at
    23:30 UTC on 2027-12-31, so early 2028 (UTC) is still the repeated stretch's second pass,
    whose change is in 2027's table."""
    zone = _tzif([("2027-12-31T23:30Z", 0), ("2028-03-26T01:00Z", 3600)], 3600)
    schedule = CronSchedule("*/10 * * * *", "UTC")
    schedule._zone = zone
    start = _ms("2027-12-31T21:55Z")
    walked = reference_fires("*/10 * * * *", "", start, 40, zone)
    assert [schedule.after(walked[0], k) for k in range(40)] == walked
    for instant in range(_ms("2027-12-31T23:00Z"), _ms("2028-01-01T01:00Z"), 299_000):
        assert schedule.next_after(instant) == _first_after(walked, instant), instant
        assert schedule.fires_between(start, instant, 10**9) == sum(
            1 for f in walked if start < f <= instant
        )


def _python_changes(key: str, start: int, end: int) -> list[tuple[int, int, int]]:
    """A zone's offset changes in [start, end): the instants from zoneinfo's pure-Python
    reading of its file (the explicit transitions, then its POSIX rule year by year), the
    offsets from the zone chronos reads."""
    from zoneinfo._zoneinfo import ZoneInfo as PythonZoneInfo

    python = PythonZoneInfo.no_cache(key)
    zone = ZoneInfo(key)
    candidates = {t for t in python._trans_utc if start <= t < end}
    rule = python._tz_after
    if hasattr(rule, "transitions"):
        for year in range(1969, 2201):
            on, off = rule.transitions(year)
            candidates.add(int(on - rule.std.utcoff.total_seconds()))
            candidates.add(int(off - rule.dst.utcoff.total_seconds()))
    changes = []
    for t in sorted(c for c in candidates if start <= c < end):
        before = datetime.fromtimestamp(t - 1, zone).utcoffset()
        after = datetime.fromtimestamp(t, zone).utcoffset()
        assert before is not None and after is not None
        if before != after:
            changes.append((t, before // timedelta(seconds=1), after // timedelta(seconds=1)))
    return changes


def test_no_zone_changes_its_offset_twice_within_the_tables_sampling() -> None:
    """The premise of the zone tables, for every zone of this tzdata: offset changes since
    1970 (to 2200) are never closer than ``_CLOSEST_CHANGES_S`` (the closest: 7 days), so
    reading the offset once a day finds each; and the tables of 1970-2039 hold exactly
    them."""
    low, high = 0, int(datetime(2200, 1, 1, tzinfo=UTC).timestamp())
    table_low = int(datetime(1970, 1, 1, tzinfo=UTC).timestamp())
    table_high = int(datetime(2040, 1, 1, tzinfo=UTC).timestamp())
    for key in sorted(zoneinfo.available_timezones()):
        changes = _python_changes(key, low, high)
        for (a, _, _), (b, _, _) in zip(changes, changes[1:], strict=False):
            assert b - a >= zones._CLOSEST_CHANGES_S, (key, datetime.fromtimestamp(a, UTC))
        tables = [
            change
            for year in range(1970, 2040)
            for change in zones._zone_year(ZoneInfo(key), year).changes
        ]
        assert tables == [c for c in changes if table_low <= c[0] < table_high], key
