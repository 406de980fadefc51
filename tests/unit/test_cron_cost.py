"""A cron repeat's cost to the proxy and the node is bounded by arithmetic (issue 62): an
every-second repeat of 10,000 occurrences took 10,000 croniter steps to validate, in the proxy
and again in every node's ingest, which cannot refuse a record for taking long. Counted, not
timed: croniter steps, and the walk never called. An expression of the documented grammar is
read without croniter at all (issue 63): no step; one an earlier release stored outside it
(``R``, say) is parsed by croniter, one step to check that it matches some date."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from croniter import croniter

from chronos import cron, wire
from chronos.cron import CronSchedule
from chronos.inner import accept_inner
from chronos.model import DelayMessage
from chronos.names import TopicNames
from chronos.repeat import Repeat
from chronos.settings import LimitSettings
from chronos.validation import first_due_for, validate_message

LIMITS = LimitSettings()
NAMES = TopicNames("chronos")
NOW = int(datetime.fromisoformat("2027-03-28T00:30:00+01:00").timestamp() * 1000)
#: Inside the hour Berlin repeats on 2027-10-31 (its second pass), which the old first-fire
#: search walked second by second.
REPEATED_HOUR = int(datetime.fromisoformat("2027-10-31T02:20:00+01:00").timestamp() * 1000)


@pytest.fixture
def steps(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """croniter steps taken (each ``get_next``), and the walk made to fail if called."""
    taken = [0]
    get_next = croniter.get_next

    def counting(self: Any, *args: Any, **kwargs: Any) -> Any:
        taken[0] += 1
        return get_next(self, *args, **kwargs)

    def no_walk(self: Any, instant_ms: int) -> int:
        raise AssertionError("walked")

    monkeypatch.setattr(croniter, "get_next", counting)
    monkeypatch.setattr(CronSchedule, "_walk_next_after", no_walk)
    cron.clear_caches()
    yield taken
    cron.clear_caches()


def _message(start: int, expression: str = "* * * * * *", times: int = 10_000) -> DelayMessage:
    repeat = Repeat.calendar(expression, "Europe/Berlin", times=times)
    first = first_due_for(repeat, start)
    return DelayMessage("m", "t", b"m", b"v", first_due_ms=first, repeat=repeat)


@pytest.mark.parametrize("start", [NOW, REPEATED_HOUR], ids=["spring-night", "repeated-hour"])
def test_the_proxy_validates_10000_every_second_occurrences_without_walking(
    steps: list[int], start: int
) -> None:
    validate_message(_message(start), LIMITS, NAMES, start)
    assert steps[0] == 0  # the documented grammar: read without croniter
    for offset in range(1, 50):  # more messages of the schedule: no step at all
        validate_message(_message(start + offset * 1000), LIMITS, NAMES, start)
    assert steps[0] == 0


def test_the_node_accepts_10000_every_second_occurrences_without_walking(
    steps: list[int],
) -> None:
    key, value, headers = wire.encode_add(_message(NOW))
    accepted = accept_inner(key, value, headers, LIMITS, NAMES, NOW)
    assert isinstance(accepted, DelayMessage) and accepted.repeat is not None
    assert steps[0] == 0
    repeat, first = accepted.repeat, accepted.first_due_ms
    # What the node and the proxy ask of it afterwards: the last occurrence, the 10,000th,
    # catching up from far behind.
    # Every second is a fire, the skipped hour's included (collapsed into the jump's).
    assert repeat.last_due(first) == repeat.due_of(first, 10_000) == first + 9_999_000
    assert repeat.latest_due(first, 1, first + 10**9) == (10_000, repeat.last_due(first))
    assert steps[0] == 0


def test_the_work_of_a_validation_does_not_grow_with_times(
    steps: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fires turned into instants (``_fire``: zoneinfo's conversions): the same few for 2
    occurrences as for 10,000, daily or every second."""
    fired = [0]
    fire = CronSchedule._fire

    def counting(self: CronSchedule, wall: int) -> int:
        fired[0] += 1
        return fire(self, wall)

    monkeypatch.setattr(CronSchedule, "_fire", counting)
    for expression, times in [("* * * * * *", 2), ("* * * * * *", 10_000), ("0 9 * * *", 365)]:
        fired[0] = 0
        validate_message(_message(NOW, expression, times), LIMITS, NAMES, NOW)
        assert fired[0] <= 3, (expression, times)


def test_an_expression_read_as_before_costs_one_croniter_step_to_parse(
    steps: list[int],
) -> None:
    """``R`` (an earlier release accepted it; stored ones must still load): croniter parses
    it, once, and counting answers the rest."""
    repeat = Repeat.calendar("R * * * * *", "Europe/Berlin", times=10_000)
    first = cron.schedule_of(repeat.cron, repeat.zone).at_or_after(NOW)
    message = DelayMessage("m", "t", b"m", b"v", first_due_ms=first, repeat=repeat)
    validate_message(message, LIMITS, NAMES, NOW)
    assert steps[0] == 1
    assert repeat.last_due(first) == repeat.due_of(first, 10_000) > first
    assert steps[0] == 1
