"""Stored-message codec: exact round trip, and corrupt input always raises DecodeError."""

from __future__ import annotations

import struct
from typing import Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chronos.errors import DecodeError
from chronos.model import (
    CancelRequest,
    DelayMessage,
    Expiry,
    Op,
    Refresh,
    RescheduleRequest,
)
from chronos.repeat import Repeat, RepeatKind
from chronos.store import codec

SURROGATES: tuple[Literal["Cs"]] = ("Cs",)  # hypothesis wants category literals
TEXT = st.text(alphabet=st.characters(blacklist_categories=SURROGATES), max_size=30)
U32 = st.integers(min_value=0, max_value=2**32 - 1)
U64 = st.integers(min_value=0, max_value=2**64 - 1)


def _repeats(
    kinds: list[RepeatKind], **cron_fields: st.SearchStrategy[object]
) -> st.SearchStrategy[Repeat]:
    return st.builds(
        Repeat,
        kind=st.sampled_from(kinds),
        interval_ms=U64,
        times=U32,
        multiplier=U32,
        max_interval_ms=U64,
        **cron_fields,
    )


NOT_MOVED = st.just(0)


def _messages(
    repeats: st.SearchStrategy[Repeat], moved: st.SearchStrategy[int] = NOT_MOVED
) -> st.SearchStrategy[DelayMessage]:
    return st.builds(
        DelayMessage,
        id=TEXT,
        topic=TEXT,
        key=st.none() | st.binary(max_size=64),
        value=st.none() | st.binary(max_size=256),
        headers=st.lists(st.tuples(TEXT, st.none() | st.binary(max_size=32)), max_size=6),
        first_due_ms=U64,
        repeat=st.none() | repeats,
        occurrence=st.integers(min_value=1, max_value=2**32 - 1),
        moved_due_ms=moved,
    )


#: Version 1 (stores of earlier releases) knew no cron repeats.
REPEATS_V1 = _repeats([RepeatKind.FIXED, RepeatKind.EXPONENTIAL])
REPEATS = REPEATS_V1 | _repeats([RepeatKind.CRON], cron=TEXT, zone=TEXT, until_ms=U64)
#: A moved occurrence (issue 63) is stored by version 2 only; 0 is "not moved".
MESSAGES = _messages(REPEATS, st.just(0) | U64)
MESSAGES_V1 = _messages(REPEATS_V1)


def _sample() -> DelayMessage:
    return DelayMessage(
        id="id-1",
        topic="tøpic",
        key=b"",
        value=b"\x00\xff payload",
        headers=[("a", b""), ("b", None), ("a", b"\x00")],
        first_due_ms=1_700_000_000_123,
        repeat=Repeat(RepeatKind.EXPONENTIAL, 1000, 5, 3, 60_000),
        occurrence=2,
    )


@settings(max_examples=300, deadline=None)
@given(message=MESSAGES)
def test_round_trip(message: DelayMessage) -> None:
    decoded = codec.decode(codec.encode(message))
    assert decoded == message
    # None and b"" must stay distinct
    assert (decoded.key is None) == (message.key is None)
    assert (decoded.value is None) == (message.value is None)
    assert [v is None for _, v in decoded.headers] == [v is None for _, v in message.headers]


def test_round_trip_sample_distinguishes_empty_and_null() -> None:
    message = _sample()
    decoded = codec.decode(codec.encode(message))
    assert decoded.key == b""
    assert decoded.headers == [("a", b""), ("b", None), ("a", b"\x00")]
    assert decoded.repeat == Repeat(RepeatKind.EXPONENTIAL, 1000, 5, 3, 60_000)
    assert decoded.occurrence == 2
    nulls = DelayMessage("x", "t", None, None)
    back = codec.decode(codec.encode(nulls))
    assert back.key is None and back.value is None and back.repeat is None


@settings(max_examples=80, deadline=None)
@given(message=MESSAGES, data=st.data())
def test_truncated_input_raises(message: DelayMessage, data: st.DataObject) -> None:
    raw = codec.encode(message)
    cut = data.draw(st.integers(min_value=0, max_value=len(raw) - 1))
    with pytest.raises(DecodeError):
        codec.decode(raw[:cut])


def test_every_prefix_of_sample_raises() -> None:
    raw = codec.encode(_sample())
    for cut in range(len(raw)):
        with pytest.raises(DecodeError):
            codec.decode(raw[:cut])


@settings(max_examples=80, deadline=None)
@given(message=MESSAGES, garbage=st.binary(min_size=1, max_size=16))
def test_trailing_garbage_raises(message: DelayMessage, garbage: bytes) -> None:
    with pytest.raises(DecodeError, match="trailing"):
        codec.decode(codec.encode(message) + garbage)


def test_unknown_version_raises() -> None:
    raw = bytearray(codec.encode(_sample()))
    raw[0] = 7
    with pytest.raises(DecodeError, match="version"):
        codec.decode(bytes(raw))


def test_unknown_repeat_kind_raises() -> None:
    raw = bytearray(codec.encode(_sample()))
    # the repeat kind is the first byte after the 30-byte head
    assert raw[30] == RepeatKind.EXPONENTIAL
    raw[30] = 9
    with pytest.raises(DecodeError):
        codec.decode(bytes(raw))


def test_invalid_utf8_topic_raises() -> None:
    message = DelayMessage("id", "ab", None, None)
    raw = codec.encode(message)
    bad = raw.replace(b"abid", b"\xff\xfeid")
    assert bad != raw
    with pytest.raises(DecodeError):
        codec.decode(bad)


def _encode_v1(message: DelayMessage) -> bytes:
    """Version 1, as releases before the two-call layout wrote it (test fixture)."""
    flags = (message.key is not None) | (message.value is not None) << 1
    flags |= (message.repeat is not None) << 2
    parts = [struct.pack(">BBQI", 1, flags, message.first_due_ms, message.occurrence)]
    if message.repeat is not None:
        r = message.repeat
        parts.append(
            struct.pack(">BQIIQ", r.kind, r.interval_ms, r.times, r.multiplier, r.max_interval_ms)
        )
    for text in (message.topic, message.id):
        parts += [struct.pack(">H", len(text.encode())), text.encode()]
    for blob in (message.key, message.value):
        if blob is not None:
            parts += [struct.pack(">I", len(blob)), blob]
    parts.append(struct.pack(">I", len(message.headers)))
    for name, value in message.headers:
        parts += [struct.pack(">I", len(name.encode())), name.encode()]
        parts.append(struct.pack(">i", -1) if value is None else struct.pack(">i", len(value)))
        parts.append(value or b"")
    return b"".join(parts)


@settings(max_examples=200, deadline=None)
@given(message=MESSAGES_V1)
def test_version_1_values_still_decode(message: DelayMessage) -> None:
    """Stores written before version 2 keep working."""
    decoded = codec.decode(_encode_v1(message))
    assert decoded == message
    assert (decoded.key is None) == (message.key is None)
    assert [v is None for _, v in decoded.headers] == [v is None for _, v in message.headers]


def test_absurd_header_count_raises_without_allocating() -> None:
    raw = bytearray(codec.encode(DelayMessage("id", "t", None, None)))
    raw[26:30] = (2**32 - 1).to_bytes(4, "big")  # the header count field of the head
    with pytest.raises(DecodeError, match="headers cannot fit"):
        codec.decode(bytes(raw))


def test_empty_input_raises() -> None:
    with pytest.raises(DecodeError):
        codec.decode(b"")


def test_catch_up_policy_is_stored() -> None:
    from chronos.model import (
        DelayMessage,
    )
    from chronos.repeat import CatchUp, Repeat, RepeatKind
    from chronos.store import codec

    for policy in CatchUp:
        repeat = Repeat(RepeatKind.EXPONENTIAL, 1000, 5, 2, 60_000, policy)
        message = DelayMessage("r", "t", b"k", b"v", [("h", b"1")], 5, repeat, occurrence=2)
        assert codec.decode(codec.encode(message)) == message


def test_decoded_request_maps_each_kind_to_its_fields() -> None:
    """The one mapping ingest and ``Ledger.apply`` share: kind, id, due field, stored value."""
    repeat = Repeat(kind=RepeatKind.FIXED, interval_ms=1_000, times=3)
    later = DelayMessage("r", "t", None, b"v", first_due_ms=5_000, repeat=repeat, occurrence=2)
    one = DelayMessage("a", "t", b"k", b"v", first_due_ms=7_000)
    assert codec.decoded_request(one) == (Op.ADD, "a", 7_000, codec.encode(one))
    assert codec.decoded_request(later)[2] == 6_000  # the occurrence's due time
    assert codec.decoded_request(one, b"given") == (Op.ADD, "a", 7_000, b"given")
    assert codec.decoded_request(CancelRequest("c")) == (Op.CANCEL, "c", 0, None)
    assert codec.decoded_request(CancelRequest("c", 42)) == (Op.CANCEL, "c", 42, None)
    assert codec.decoded_request(RescheduleRequest("m", 9_000)) == (
        Op.RESCHEDULE,
        "m",
        9_000,
        None,
    )
    refresh = Refresh(one, slot_ms=7_003)
    assert codec.decoded_request(refresh) == (Op.REFRESH, "a", 7_003, codec.encode(one))
    assert codec.decoded_request(Expiry("x", 8_000)) == (Op.EXPIRY, "x", 8_000, None)
    assert codec.decoded_request(Expiry("x", 0, cancelled_ms=8_000)) == (
        Op.EXPIRY,
        "x",
        -8_000,
        None,
    )


def test_decoded_request_refuses_what_is_not_a_request() -> None:
    with pytest.raises(TypeError, match="not an inner request: str"):
        codec.decoded_request("a")  # type: ignore[arg-type]


def test_a_moved_occurrence_keeps_its_schedule_and_is_read_without_decoding() -> None:
    """Issue 63: the moved due time is a field of its own (flag 16), the first due time
    stays; ``moved_due_of`` reads it where a restatement compares two stored values."""
    message = _sample()
    assert codec.moved_due_of(codec.encode(message)) == 0
    message.moved_due_ms = 1_700_000_123_457
    raw = codec.encode(message)
    back = codec.decode(raw)
    assert (back.moved_due_ms, back.due_ms, back.first_due_ms) == (
        1_700_000_123_457,
        1_700_000_123_457,
        1_700_000_000_123,
    )
    assert back.scheduled_due_ms == message.repeat.due_of(1_700_000_000_123, 2)  # type: ignore[union-attr]
    assert codec.moved_due_of(raw) == 1_700_000_123_457
    assert (codec.first_due_of(raw), codec.occurrence_of(raw)) == (1_700_000_000_123, 2)
    assert codec.has_repeat(raw)
