"""Request rules shared by proxy and node."""

from __future__ import annotations

import pytest

from chronos.errors import ValidationError
from chronos.model import DelayMessage
from chronos.names import TopicNames
from chronos.repeat import Repeat, RepeatKind
from chronos.settings import LimitSettings
from chronos.validation import (
    first_due_for,
    resolve_due,
    validate_id,
    validate_message,
    validate_repeat,
    validate_topic,
)

NOW = 1_700_000_000_000
NAMES = TopicNames()
LIMITS = LimitSettings(
    max_delay_s=3600,
    max_message_bytes=100,
    max_id_bytes=16,
    repeat_max_times=10,
    repeat_min_interval_ms=1000,
    repeat_max_interval_ms=60_000,
)


def _field(call, *args, **kwargs) -> ValidationError:  # type: ignore[no-untyped-def]
    with pytest.raises(ValidationError) as info:
        call(*args, **kwargs)
    return info.value


def _msg(**changes: object) -> DelayMessage:
    message = DelayMessage(
        id="m-1", topic="orders", key=b"k", value=b"v", headers=[], first_due_ms=NOW + 1000
    )
    for name, value in changes.items():
        setattr(message, name, value)
    return message


# --- topics -------------------------------------------------------------------------------


@pytest.mark.parametrize("topic", ["orders", "a", "A-b_c.9", "x" * 249, "...", "a..b"])
def test_valid_topics(topic: str) -> None:
    validate_topic(topic, NAMES)


@pytest.mark.parametrize("topic", ["", "a b", "a/b", "tøpic", "a,b", "x" * 250, ".", "..", "a\tb"])
def test_invalid_topics(topic: str) -> None:
    err = _field(validate_topic, topic, NAMES)
    assert err.field == "topic" and err.status == 422
    assert "not a valid Kafka topic name" in err.message


def test_invalid_topic_field_name_is_passed_through() -> None:
    assert _field(validate_topic, "a b", NAMES, field="items[3].topic").field == "items[3].topic"


@pytest.mark.parametrize(
    "topic",
    [
        "chronos.inner",
        "chronos.deadletter",
        "chronos.anything",
        "__consumer_offsets",
        "__transaction_state",
    ],
)
def test_internal_topics_rejected(topic: str) -> None:
    err = _field(validate_topic, topic, NAMES)
    assert err.field == "topic" and "internal" in err.message


def test_internal_topics_follow_namespace() -> None:
    names = TopicNames("other")
    validate_topic("chronos.inner", names)
    assert "internal" in _field(validate_topic, "other.inner", names).message
    # 'chronosX' is not under the 'chronos.' namespace
    validate_topic("chronosX", NAMES)


@pytest.mark.parametrize("topic", ["orders\n", "x" * 249 + "\n"])
def test_topic_with_trailing_newline_rejected(topic: str) -> None:
    """BUG: chronos/validation.py _TOPIC_RE uses ``$`` with ``re.match``; ``$`` also matches
    before a trailing newline, so 'orders\\n' passes validation (Kafka would reject it)."""
    err = _field(validate_topic, topic, NAMES)
    assert err.field == "topic"


# --- ids ----------------------------------------------------------------------------------


@pytest.mark.parametrize("message_id", ["a", "A-z_0.9:x", "x" * 16])
def test_valid_ids(message_id: str) -> None:
    validate_id(message_id, LIMITS)


def test_empty_id() -> None:
    err = _field(validate_id, "", LIMITS)
    assert err.field == "id" and "empty" in err.message


def test_id_too_long_counts_bytes() -> None:
    assert "16 bytes" in _field(validate_id, "x" * 17, LIMITS).message
    # 9 characters but 18 UTF-8 bytes
    assert "16 bytes" in _field(validate_id, "é" * 9, LIMITS).message


@pytest.mark.parametrize("message_id", ["a b", "a/b", "a?b", "é", "a\tb", "a%20"])
def test_id_bad_characters(message_id: str) -> None:
    err = _field(validate_id, message_id, LIMITS)
    assert err.field == "id" and "letters, digits" in err.message


def test_id_with_trailing_newline_rejected() -> None:
    """BUG: chronos/validation.py _ID_RE uses ``$`` with ``re.match``; 'abc\\n' is accepted
    although ids must be printable tokens (newline breaks URLs/logs)."""
    err = _field(validate_id, "abc\n", LIMITS)
    assert err.field == "id"


# --- headers, size, due --------------------------------------------------------------------


def test_valid_message() -> None:
    validate_message(_msg(headers=[("trace", b"1"), ("x", None)]), LIMITS, NAMES, NOW)


@pytest.mark.parametrize("name", ["chronos-id", "Chronos-Foo", "CHRONOS-x"])
def test_reserved_header_prefix(name: str) -> None:
    err = _field(validate_message, _msg(headers=[("ok", b""), (name, b"1")]), LIMITS, NAMES, NOW)
    assert err.field == "headers[1]" and "reserved" in err.message


def test_empty_header_name() -> None:
    err = _field(validate_message, _msg(headers=[("", b"1")]), LIMITS, NAMES, NOW)
    assert err.field == "headers[0]"


@pytest.mark.parametrize("name", ["\x00", "\x00trace", "trace\x00id"])
def test_header_name_with_nul_is_refused(name: str) -> None:
    """librdkafka cuts a header name at its NUL: the node would see another (or no) name.
    Found by the schema fuzz test."""
    err = _field(validate_message, _msg(headers=[(name, b"1")]), LIMITS, NAMES, NOW)
    assert err.field == "headers[0]" and "NUL" in err.message


def test_size_limit_inclusive() -> None:
    # key 1 + value 90 + header name 4 + header value 5 = 100 = limit
    validate_message(_msg(value=b"v" * 90, headers=[("name", b"12345")]), LIMITS, NAMES, NOW)


def test_size_limit_exceeded_is_413_on_value() -> None:
    message = _msg(value=b"v" * 90, headers=[("name", b"123456")])
    err = _field(validate_message, message, LIMITS, NAMES, NOW)
    assert err.field == "value" and err.status == 413
    assert "101 bytes" in err.message


def test_null_key_and_value_count_zero() -> None:
    message = _msg(key=None, value=None, headers=[("h" * 100, None)])
    validate_message(message, LIMITS, NAMES, NOW)


def test_max_delay_inclusive() -> None:
    validate_message(_msg(first_due_ms=NOW + 3600 * 1000), LIMITS, NAMES, NOW)
    err = _field(validate_message, _msg(first_due_ms=NOW + 3600 * 1000 + 1), LIMITS, NAMES, NOW)
    assert err.field == "deliver_at" and "3600 s" in err.message


def test_negative_due_rejected() -> None:
    err = _field(validate_message, _msg(first_due_ms=-1), LIMITS, NAMES, NOW)
    assert err.field == "deliver_at"


def test_past_due_accepted() -> None:
    validate_message(_msg(first_due_ms=0), LIMITS, NAMES, NOW)


def test_message_id_and_topic_checked() -> None:
    assert _field(validate_message, _msg(id="a b"), LIMITS, NAMES, NOW).field == "id"
    err = _field(validate_message, _msg(topic="chronos.inner"), LIMITS, NAMES, NOW)
    assert err.field == "topic"


# --- resolve_due ---------------------------------------------------------------------------


def test_resolve_due() -> None:
    assert resolve_due(NOW, delay_ms=0) == NOW
    assert resolve_due(NOW, delay_ms=250) == NOW + 250
    assert resolve_due(NOW, deliver_at_ms=5) == 5
    assert resolve_due(NOW, deliver_at_ms=NOW + 10) == NOW + 10


def test_negative_delay() -> None:
    err = _field(resolve_due, NOW, delay_ms=-1)
    assert err.field == "delay" and "negative" in err.message


def test_negative_deliver_at() -> None:
    assert _field(resolve_due, NOW, deliver_at_ms=-1).field == "deliver_at"


@pytest.mark.parametrize("kwargs", [{}, {"delay_ms": 1, "deliver_at_ms": NOW}])
def test_exactly_one_of_delay_and_deliver_at(kwargs: dict[str, int]) -> None:
    err = _field(resolve_due, NOW, **kwargs)
    assert err.field == "delay" and "exactly one" in err.message


# --- repeat --------------------------------------------------------------------------------


def _fixed(interval: int = 1000, times: int = 3) -> Repeat:
    return Repeat(RepeatKind.FIXED, interval, times)


def _expo(interval: int = 1000, times: int = 3, mult: int = 2, cap: int = 10_000) -> Repeat:
    return Repeat(RepeatKind.EXPONENTIAL, interval, times, mult, cap)


@pytest.mark.parametrize(
    "repeat",
    [_fixed(1000, 1), _fixed(60_000, 10), _expo(1000, 10, 2, 1000), _expo(1000, 3, 1000, 60_000)],
)
def test_valid_repeats(repeat: Repeat) -> None:
    validate_repeat(repeat, LIMITS)


@pytest.mark.parametrize(
    ("repeat", "field"),
    [
        (_fixed(times=0), "repeat.times"),
        (_fixed(times=11), "repeat.times"),
        (_fixed(interval=999), "repeat.interval_ms"),
        (_fixed(interval=60_001), "repeat.interval_ms"),
        (_expo(mult=1), "repeat.multiplier"),
        (_expo(mult=1001), "repeat.multiplier"),
        (_expo(interval=2000, cap=1999), "repeat.max_interval_ms"),
        (_expo(cap=60_001), "repeat.max_interval_ms"),
    ],
)
def test_repeat_bounds(repeat: Repeat, field: str) -> None:
    assert _field(validate_repeat, repeat, LIMITS).field == field


def test_fixed_repeat_ignores_multiplier() -> None:
    validate_repeat(Repeat(RepeatKind.FIXED, 1000, 3, multiplier=0, max_interval_ms=0), LIMITS)


def test_repeat_checked_by_validate_message() -> None:
    err = _field(validate_message, _msg(repeat=_fixed(times=0)), LIMITS, NAMES, NOW)
    assert err.field == "repeat.times"


def test_last_occurrence_beyond_horizon() -> None:
    # 10 occurrences every 60 s from now: last at now + 540 s, within 3600 s
    validate_message(_msg(first_due_ms=NOW, repeat=_fixed(60_000, 10)), LIMITS, NAMES, NOW)
    # last at exactly the horizon is fine
    start = NOW + 3600 * 1000 - 9 * 60_000
    validate_message(_msg(first_due_ms=start, repeat=_fixed(60_000, 10)), LIMITS, NAMES, NOW)
    # one ms later: the first occurrence is fine but the last is beyond the horizon
    err = _field(
        validate_message,
        _msg(first_due_ms=start + 1, repeat=_fixed(60_000, 10)),
        LIMITS,
        NAMES,
        NOW,
    )
    assert err.field == "repeat" and "last occurrence" in err.message


def test_last_exponential_occurrence_beyond_horizon() -> None:
    # gaps 1000, 2000, 4000, 8000, then capped at 60000: sum of 9 gaps = 15000 + 5*60000
    repeat = _expo(1000, 10, 2, 60_000)
    last = 1000 + 2000 + 4000 + 8000 + 16000 + 32000 + 3 * 60_000
    start = NOW + 3600 * 1000 - last
    validate_message(_msg(first_due_ms=start, repeat=repeat), LIMITS, NAMES, NOW)
    err = _field(validate_message, _msg(first_due_ms=start + 1, repeat=repeat), LIMITS, NAMES, NOW)
    assert err.field == "repeat"


def _cron(expression: str, times: int = 3, until_ms: int = 0, zone: str = "UTC") -> Repeat:
    return Repeat.calendar(expression, zone, times=times, until_ms=until_ms)


@pytest.mark.parametrize(
    ("repeat", "problem"),
    [
        (_cron("0 9 * * 8"), "not a cron expression"),
        (_cron("0 9 * * 1", zone="Europe/Nowhere"), "not an IANA time zone"),
        (_cron("0 0 31 2 *"), "never matches"),
        (_cron("0 9 * * *", times=11), "must be 1..10"),
    ],
)
def test_cron_repeats_that_cannot_be_scheduled_name_the_reason(
    repeat: Repeat, problem: str
) -> None:
    err = _field(validate_repeat, repeat, LIMITS)
    assert err.field.startswith("repeat.") and problem in err.message


def test_a_cron_repeat_firing_closer_than_the_shortest_interval_is_refused() -> None:
    start = first_due_for(_cron("*/30 * * * * *"), NOW)
    validate_message(_msg(first_due_ms=start, repeat=_cron("*/30 * * * * *")), LIMITS, NAMES, NOW)
    tight = LimitSettings(**{**LIMITS.model_dump(), "repeat_min_interval_ms": 60_000})
    err = _field(
        validate_message,
        _msg(first_due_ms=start, repeat=_cron("*/30 * * * * *")),
        tight,
        NAMES,
        NOW,
    )
    assert (err.field, err.message) == ("repeat.cron", "fires 30000 ms apart, less than 60000 ms")


def test_a_cron_repeats_last_fire_and_its_until_are_held_to_the_horizon() -> None:
    hourly = _cron("0 * * * *", times=2)
    start = first_due_for(hourly, NOW)  # the next whole hour, within the 3600 s horizon
    err = _field(validate_message, _msg(first_due_ms=start, repeat=hourly), LIMITS, NAMES, NOW)
    assert err.field == "repeat" and "last occurrence" in err.message
    # Until the first fire only: one occurrence, within the horizon.
    once = _cron("0 * * * *", times=2, until_ms=start)
    validate_message(_msg(first_due_ms=start, repeat=once), LIMITS, NAMES, NOW)
    early = _cron("0 * * * *", times=2, until_ms=start - 1)
    err = _field(validate_message, _msg(first_due_ms=start, repeat=early), LIMITS, NAMES, NOW)
    assert (err.field, err.message) == ("repeat.until", "is before the first occurrence")


def test_the_first_due_of_a_cron_repeat_is_its_first_fire_at_or_after_the_start() -> None:
    assert first_due_for(_cron("0 * * * *"), NOW) == (NOW // 3_600_000 + 1) * 3_600_000
    assert first_due_for(_cron("0 * * * *"), 3_600_000) == 3_600_000
    assert first_due_for(_fixed(), NOW + 7) == NOW + 7
    assert _field(first_due_for, _cron("0 9 * *"), NOW).field == "repeat.cron"
