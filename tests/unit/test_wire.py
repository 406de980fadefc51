"""Inner-topic wire format: round trip and decode errors with their reasons."""

from __future__ import annotations

from typing import Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chronos import wire
from chronos.errors import DecodeError, ValidationError
from chronos.model import CancelRequest, DelayMessage, Expiry, Refresh
from chronos.names import TopicNames
from chronos.repeat import CatchUp, Repeat, RepeatKind
from chronos.settings import LimitSettings
from chronos.types import Headers
from chronos.validation import validate_message

SURROGATES: tuple[Literal["Cs"]] = ("Cs",)  # hypothesis wants category literals
TEXT = st.text(alphabet=st.characters(blacklist_categories=SURROGATES), max_size=30)
USER_HEADER_NAMES = TEXT.filter(lambda n: not n.startswith("chronos-"))
NUM = st.integers(min_value=0, max_value=2**62)

REPEATS = st.one_of(
    st.builds(Repeat, kind=st.just(RepeatKind.FIXED), interval_ms=NUM, times=NUM),
    st.builds(
        Repeat,
        kind=st.just(RepeatKind.EXPONENTIAL),
        interval_ms=NUM,
        times=NUM,
        multiplier=NUM,
        max_interval_ms=NUM,
    ),
)

MESSAGES = st.builds(
    DelayMessage,
    id=TEXT,
    topic=TEXT,
    key=st.none() | st.binary(max_size=64),
    value=st.none() | st.binary(max_size=256),
    headers=st.lists(st.tuples(USER_HEADER_NAMES, st.none() | st.binary(max_size=32)), max_size=6),
    first_due_ms=NUM,
    repeat=st.none() | REPEATS,
)


@settings(max_examples=300, deadline=None)
@given(message=MESSAGES)
def test_add_round_trip(message: DelayMessage) -> None:
    record_key, value, headers = wire.encode_add(message)
    assert record_key == message.id.encode()
    assert value is message.value or value == message.value
    decoded = wire.decode(value, headers)
    assert decoded == message
    assert isinstance(decoded, DelayMessage)
    assert decoded.headers == message.headers  # user headers, order kept
    assert (decoded.key is None) == (message.key is None)
    assert (decoded.value is None) == (message.value is None)


CRONS = st.builds(
    Repeat.calendar,
    expression=st.sampled_from(["0 9 * * 1-5", "*/10 * * * * *", "30 2 * * *"]),
    zone=st.sampled_from(["UTC", "Europe/Berlin", "Australia/Lord_Howe"]),
    times=NUM,
    until_ms=st.sampled_from([0, 1, 2**62]),
    catch_up=st.sampled_from(list(CatchUp)),
)


@settings(max_examples=100, deadline=None)
@given(repeat=CRONS, start=st.integers(min_value=0, max_value=4_102_444_800_000))
def test_a_cron_add_round_trips_and_starts_at_its_first_fire(repeat: Repeat, start: int) -> None:
    message = DelayMessage("c-1", "orders", None, b"v", first_due_ms=start, repeat=repeat)
    decoded = wire.decode(*wire.encode_add(message)[1:])
    assert isinstance(decoded, DelayMessage)
    assert decoded.repeat == repeat
    assert decoded.first_due_ms == repeat.first_due(start) >= start  # snapped to a fire
    again = wire.decode(*wire.encode_add(decoded)[1:])
    assert again == decoded  # a fire stays where it is


@pytest.mark.parametrize(
    ("header", "value", "problem"),
    [
        (wire.H_REPEAT_CRON, b"0 9 * * 8", "not a cron expression"),
        (wire.H_REPEAT_ZONE, b"Mars/Olympus", "not an IANA time zone"),
        (wire.H_DUE, b"9223372036854775807", "no fire"),
    ],
)
def test_a_cron_add_nobody_can_schedule_is_a_decode_error(
    header: str, value: bytes, problem: str
) -> None:
    message = DelayMessage(
        "c-1", "orders", None, b"v", first_due_ms=0, repeat=Repeat.calendar("0 9 * * *", times=3)
    )
    _, payload, headers = wire.encode_add(message)
    headers = [(n, value if n == header else v) for n, v in headers]
    if header not in dict(headers):
        headers.append((header, value))
    with pytest.raises(DecodeError, match=problem):
        wire.decode(payload, headers)


@settings(max_examples=100, deadline=None)
@given(message_id=TEXT)
def test_cancel_round_trip(message_id: str) -> None:
    record_key, value, headers = wire.encode_cancel(message_id)
    assert record_key == message_id.encode()
    assert value is None
    assert wire.decode(value, headers) == CancelRequest(message_id)


def test_a_restated_cancel_carries_the_time_it_was_first_applied() -> None:
    """Mutants caught: the time dropped on either side (a restored tombstone would live a
    whole retention from the restore); a zero or negative time accepted."""
    _, value, headers = wire.encode_cancel("m", 1_700_000_000_123)
    assert (wire.H_CANCELLED, b"1700000000123") in headers
    assert value == b"", "not null: a compacted topic's cleaner keeps it"
    assert wire.decode(value, headers) == CancelRequest("m", 1_700_000_000_123)
    assert wire.H_CANCELLED not in dict(wire.encode_cancel("m")[2])
    for bad in (b"0", b"-5", b"soon"):
        refused = [*wire.encode_cancel("m")[2], (wire.H_CANCELLED, bad)]
        with pytest.raises(DecodeError, match=wire.H_CANCELLED):
            wire.decode(None, refused)


def test_binary_key_and_header_values_preserved() -> None:
    message = DelayMessage(
        id="m1",
        topic="orders",
        key=b"\x00\xff\x80",
        value=b"",
        headers=[("z", b"\xff"), ("a", None), ("z", b"")],
        first_due_ms=5,
    )
    _, value, headers = wire.encode_add(message)
    decoded = wire.decode(value, headers)
    assert isinstance(decoded, DelayMessage)
    assert decoded.key == b"\x00\xff\x80"
    assert decoded.value == b""
    assert decoded.headers == [("z", b"\xff"), ("a", None), ("z", b"")]


def test_user_headers_interleaved_with_chronos_headers_keep_order() -> None:
    headers: Headers = [
        ("first", b"1"),
        ("chronos-version", b"1"),
        ("second", b"2"),
        ("chronos-op", b"add"),
        ("chronos-id", b"x"),
        ("third", None),
        ("chronos-topic", b"t"),
        ("chronos-due-ms", b"42"),
    ]
    decoded = wire.decode(b"v", headers)
    assert isinstance(decoded, DelayMessage)
    assert decoded.headers == [("first", b"1"), ("second", b"2"), ("third", None)]
    assert decoded.first_due_ms == 42
    assert decoded.key is None
    assert decoded.repeat is None


def _add_headers(**changes: bytes | None) -> Headers:
    fields: dict[str, bytes | None] = {
        "chronos-version": b"1",
        "chronos-op": b"add",
        "chronos-id": b"m1",
        "chronos-topic": b"orders",
        "chronos-due-ms": b"1000",
    }
    for name, value in changes.items():
        header = "chronos-" + name.replace("_", "-")
        if value is None:
            fields.pop(header, None)
        else:
            fields[header] = value
    return list(fields.items())


def _reason(headers: Headers) -> str:
    with pytest.raises(DecodeError) as info:
        wire.decode(b"payload", headers, origin="inner/3@17")
    assert info.value.origin == "inner/3@17"
    assert "inner/3@17" in str(info.value)
    return info.value.reason


def test_valid_base_headers_decode() -> None:
    decoded = wire.decode(b"payload", _add_headers())
    assert isinstance(decoded, DelayMessage)
    assert (decoded.id, decoded.topic, decoded.first_due_ms) == ("m1", "orders", 1000)


def test_missing_version() -> None:
    assert "chronos-version" in _reason(_add_headers(version=None))


def test_wrong_version() -> None:
    reason = _reason(_add_headers(version=b"2"))
    assert "chronos-version" in reason and "b'2'" in reason


def test_missing_op() -> None:
    assert "chronos-op" in _reason(_add_headers(op=None))


def test_unknown_op() -> None:
    reason = _reason(_add_headers(op=b"delete"))
    assert "chronos-op" in reason and "delete" in reason


def test_missing_id() -> None:
    assert _reason(_add_headers(id=None)) == "missing header chronos-id"


def test_missing_id_on_cancel() -> None:
    headers: Headers = [("chronos-version", b"1"), ("chronos-op", b"cancel")]
    assert _reason(headers) == "missing header chronos-id"


def test_missing_topic() -> None:
    assert _reason(_add_headers(topic=None)) == "missing header chronos-topic"


def test_missing_due() -> None:
    assert _reason(_add_headers(due_ms=None)) == "missing header chronos-due-ms"


@pytest.mark.parametrize(
    "due",
    [b"soon", b"12.5", b"", b"+5", b"1e3", b" 5", b"-", b"12345678901234567890", "\u0665".encode()],
)
def test_non_numeric_due(due: bytes) -> None:
    reason = _reason(_add_headers(due_ms=due))
    assert "chronos-due-ms" in reason and "not a decimal integer" in reason


def test_non_utf8_id() -> None:
    assert "not UTF-8" in _reason(_add_headers(id=b"\xff\xfe"))


def test_non_utf8_topic() -> None:
    assert _reason(_add_headers(topic=b"\xff\xfe")) == "header chronos-topic is not UTF-8"


@pytest.mark.parametrize("name", ["chronos-id", "chronos-topic"])
def test_a_header_present_with_a_null_value_is_missing(name: str) -> None:
    headers = [(key, None if key == name else value) for key, value in _add_headers()]
    assert _reason(headers) == f"missing header {name}"


def test_duplicated_chronos_header() -> None:
    headers = _add_headers() + [("chronos-due-ms", b"2000")]
    assert _reason(headers) == "header chronos-due-ms appears twice"


@pytest.mark.parametrize("name", ["chronos-trace", "chronos-dlq-reason"])
def test_unknown_chronos_header_is_refused_not_dropped(name: str) -> None:
    """The proxy refuses a user header named chronos-*; the node must not deliver it silently
    stripped either."""
    assert _reason(_add_headers() + [(name, b"x")]) == (
        f"header {name}: names starting with 'chronos-' are reserved"
    )


def test_mixed_case_chronos_header_is_refused_by_the_shared_rules() -> None:
    decoded = wire.decode(b"v", [("Chronos-Trace", b"x"), *_add_headers()])
    assert isinstance(decoded, DelayMessage)
    with pytest.raises(ValidationError, match="reserved"):
        validate_message(decoded, LimitSettings(), TopicNames("chronos"), 0)


def test_duplicated_user_header_is_fine() -> None:
    headers = [("x", b"1"), ("x", b"2")] + _add_headers()
    decoded = wire.decode(None, headers)
    assert isinstance(decoded, DelayMessage)
    assert decoded.headers == [("x", b"1"), ("x", b"2")]
    assert decoded.value is None


def test_unknown_repeat_kind() -> None:
    headers = _add_headers(repeat=b"linear", repeat_interval_ms=b"1000", repeat_times=b"3")
    reason = _reason(headers)
    assert "chronos-repeat" in reason and "linear" in reason


def test_repeat_missing_times() -> None:
    headers = _add_headers(repeat=b"fixed", repeat_interval_ms=b"1000")
    assert _reason(headers) == "missing header chronos-repeat-times"


def test_exponential_repeat_needs_multiplier() -> None:
    headers = _add_headers(
        repeat=b"exponential",
        repeat_interval_ms=b"1000",
        repeat_times=b"3",
        repeat_max_interval_ms=b"9000",
    )
    assert _reason(headers) == "missing header chronos-repeat-multiplier"


def test_decode_repeat_headers() -> None:
    headers = _add_headers(
        repeat=b"exponential",
        repeat_interval_ms=b"1000",
        repeat_times=b"4",
        repeat_multiplier=b"3",
        repeat_max_interval_ms=b"9000",
    )
    decoded = wire.decode(None, headers)
    assert isinstance(decoded, DelayMessage)
    assert decoded.repeat == Repeat(RepeatKind.EXPONENTIAL, 1000, 4, 3, 9000)


def test_null_headers_is_missing_version() -> None:
    with pytest.raises(DecodeError, match="chronos-version"):
        wire.decode(b"x", None)


@pytest.mark.parametrize("header", ["due_ms", "repeat_times"])
def test_double_minus_integer_raises_decode_error(header: str) -> None:
    """BUG: chronos/wire.py _int: ``text.lstrip("-").isdigit()`` accepts ``--5``, then
    ``int("--5")`` raises a bare ValueError instead of DecodeError, escaping the
    decoder's error contract (the record would not be dead-lettered with a reason)."""
    headers = _add_headers(repeat=b"fixed", repeat_interval_ms=b"1000", repeat_times=b"3")
    headers = [(n, b"--5" if n == "chronos-" + header.replace("_", "-") else v) for n, v in headers]
    with pytest.raises(DecodeError):
        wire.decode(b"payload", headers)


def test_delivery_headers() -> None:
    message = DelayMessage(
        "m1", "t", None, None, [("u", b"1")], 100, Repeat(RepeatKind.FIXED, 10, 3), occurrence=3
    )
    assert wire.delivery_headers(message, 120, 0) == [
        ("u", b"1"),
        ("chronos-id", b"m1"),
        ("chronos-due-ms", b"120"),
        ("chronos-occurrence", b"3"),
    ]
    assert wire.delivery_headers(message, 120, 2)[-1] == ("chronos-skipped", b"2")
    assert message.headers == [("u", b"1")]  # not mutated


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"1795000000000", 1795000000000),
        (b"-5", -5),
        (b"9223372036854775807", (1 << 63) - 1),
        (b"9999999999999999999", None),  # 19 digits, past 64 bits
        (b"99999999999999999999", None),
        (b"+5", None),
        (b" 5 ", None),
        (b"1_795", None),
        (b"\xff", None),
        (None, None),
    ],
)
def test_decimal_or_none_reads_numbers_as_the_node_does(
    raw: bytes | None, expected: int | None
) -> None:
    assert wire.decimal_or_none(raw) == expected
    if expected is not None:  # what it reads, the node's decoder reads the same
        decoded = wire.decode(b"v", _add_headers(due_ms=raw))
        assert isinstance(decoded, DelayMessage) and decoded.first_due_ms == expected


def test_a_refresh_round_trips_with_its_slot_and_occurrence() -> None:
    repeat = Repeat(RepeatKind.FIXED, interval_ms=1000, times=5)
    message = DelayMessage("r", "orders", b"k", b"v", [("h", b"1")], 2000, repeat, occurrence=3)
    key, value, headers = wire.encode_refresh(message, 4500)
    decoded = wire.decode(value, headers)
    assert key == b"r" and decoded == Refresh(message, 4500)


def test_a_refresh_of_a_moved_occurrence_carries_its_new_due_time_and_the_schedule() -> None:
    """Issue 63: a cron repeat's refresh kept only the first due time, which a reschedule
    had shifted off the schedule; read back, it snapped to the next fire. The moved due time
    travels on its own header; the first due time stays a fire."""
    repeat = Repeat.calendar("*/10 * * * * *", "UTC", times=5)
    fire = 1_795_852_600_000
    message = DelayMessage("c", "orders", b"k", b"v", [], fire, repeat, 2, fire + 23_007)
    key, value, headers = wire.encode_refresh(message, fire + 23_007)
    assert (wire.H_MOVED, b"%d" % (fire + 23_007)) in headers
    decoded = wire.decode(value, headers)
    assert key == b"c" and decoded == Refresh(message, fire + 23_007)
    assert isinstance(decoded, Refresh) and decoded.message.due_ms == fire + 23_007
    plain = DelayMessage("c", "orders", b"k", b"v", [], fire, repeat, 2)
    assert all(name != wire.H_MOVED for name, _ in wire.encode_refresh(plain, fire + 10_000)[2])


def test_a_refresh_of_a_null_payload_is_not_a_tombstone_and_reads_back_null() -> None:
    """Mutants caught: the null value written as is (the cleaner would remove the message);
    the marker ignored when read (an empty payload delivered instead of null)."""
    message = DelayMessage("n", "orders", None, None, [], 2000)
    _, value, headers = wire.encode_refresh(message, 2500)
    assert value == b"" and (wire.H_NULL_VALUE, b"1") in headers
    assert wire.decode(value, headers) == Refresh(message, 2500)
    with_payload = wire.encode_refresh(DelayMessage("p", "orders", None, b"", [], 2000), 2000)
    assert wire.H_NULL_VALUE not in dict(with_payload[2]), "an empty payload stays empty"
    with pytest.raises(DecodeError, match="come together"):
        wire.decode(b"not empty", headers)


def test_an_expiry_tombstone_has_a_null_value_and_names_what_it_ends() -> None:
    key, value, headers = wire.encode_expiry("gone", 1_700_000_000_000)
    assert key == b"gone" and value is None
    assert wire.decode(value, headers) == Expiry("gone", 1_700_000_000_000)
    _, value, headers = wire.encode_expiry("c", 0, 1_700_000_000_001)
    assert value is None and wire.decode(value, headers) == Expiry("c", 0, 1_700_000_000_001)


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        ([("chronos-occurrence", b"2")], "come together"),
        ([("chronos-slot-ms", b"2000")], "come together"),
        ([("chronos-slot-ms", b"999"), ("chronos-occurrence", b"1")], "before the due time"),
        ([("chronos-slot-ms", b"2000"), ("chronos-occurrence", b"2")], "not in 1..1"),
        ([("chronos-slot-ms", b"2000"), ("chronos-occurrence", b"0")], "not in 1..1"),
        ([("chronos-moved-due-ms", b"2000")], "come together"),
        (
            [
                ("chronos-slot-ms", b"2000"),
                ("chronos-occurrence", b"1"),
                ("chronos-moved-due-ms", b"2000"),
            ],
            "belongs to a repeat",
        ),
    ],
)
def test_a_refresh_that_cannot_be_right_is_refused(extra: Headers, reason: str) -> None:
    """An occurrence without a slot (or the reverse), a slot before the due time or an
    occurrence outside the repeat would place a message where no node put it."""
    assert reason in _reason(_add_headers() + extra)


def test_catch_up_policy_travels_and_defaults_to_all() -> None:
    latest = DelayMessage(
        "r1", "t", None, b"v", [], 1_000, Repeat(RepeatKind.FIXED, 1000, 3, catch_up=CatchUp.LATEST)
    )
    _key, value, headers = wire.encode_add(latest)
    assert (wire.H_REPEAT_CATCH_UP, b"latest") in headers
    assert wire.decode(value, headers) == latest
    plain = DelayMessage("r2", "t", None, b"v", [], 1_000, Repeat(RepeatKind.FIXED, 1000, 3))
    _key, value, headers = wire.encode_add(plain)
    assert all(name != wire.H_REPEAT_CATCH_UP for name, _ in headers)  # older nodes read it
    decoded = wire.decode(value, headers)
    assert isinstance(decoded, DelayMessage) and decoded.repeat is not None
    assert decoded.repeat.catch_up is CatchUp.ALL


def test_unknown_catch_up_policy_is_refused() -> None:
    message = DelayMessage("r3", "t", None, b"v", [], 1_000, Repeat(RepeatKind.FIXED, 1000, 3))
    _key, value, headers = wire.encode_add(message)
    with pytest.raises(DecodeError, match="catch-up"):
        wire.decode(value, [*headers, (wire.H_REPEAT_CATCH_UP, b"some")])
