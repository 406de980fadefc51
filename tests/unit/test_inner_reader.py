"""Decoding consumed inner records into what the store writes, apart from any Kafka."""

from __future__ import annotations

import pickle

from confluent_kafka import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    KafkaError,
    Message,
)

from chronos import wire
from chronos.model import DecodedRequest, DelayMessage, Op
from chronos.names import TopicNames
from chronos.node.inner_reader import DecodedBatch, decode_batch
from chronos.settings import LimitSettings
from chronos.store import codec
from chronos.types import Headers

NOW = 1_700_000_000_000
NAMES = TopicNames("chronos")


def _record(
    partition: int,
    offset: int,
    value: bytes | None,
    headers: Headers,
    timestamp: int = NOW,
    key: bytes | None = b"k",
    kind: int = TIMESTAMP_CREATE_TIME,
) -> Message:
    return Message(
        topic="chronos.inner",
        partition=partition,
        offset=offset,
        key=key,
        value=value,
        headers=headers,  # type: ignore[arg-type]  # the stub's list is invariant
        timestamp=(kind, timestamp),
    )


def _add(
    message: DelayMessage,
    partition: int,
    offset: int,
    timestamp: int = NOW,
    kind: int = TIMESTAMP_CREATE_TIME,
) -> Message:
    key, value, headers = wire.encode_add(message)
    return _record(partition, offset, value, headers, timestamp, key, kind)


def test_adds_and_cancels_become_store_items_in_order() -> None:
    message = DelayMessage("a", "orders", b"key", b"payload", [("trace", b"1")], NOW + 5000)
    _key, _value, cancel_headers = wire.encode_cancel("b")
    batch = decode_batch(
        [_add(message, 0, 7, NOW - 40), _record(1, 3, None, cancel_headers, NOW - 10, b"b")],
        LimitSettings(),
        NAMES,
        NOW,
    )
    assert [(op, i, due) for op, i, due, _ in batch.items] == [
        (Op.ADD, "a", NOW + 5000),
        (Op.CANCEL, "b", 0),
    ]
    stored = batch.items[0][3]
    assert stored is not None and codec.decode(stored) == message
    assert batch.items[1][3] is None  # a cancel stores no message
    # Plain tuples: a decoder child pickles them, and a NamedTuple costs ten times as much.
    assert {type(item) for item in batch.items} == {tuple}
    assert batch.hazard  # the cancel removes a pending message
    assert batch.offsets == {0: 8, 1: 4}
    assert batch.oldest_ms == NOW - 40
    assert not batch.rejected and not batch.errors and not batch.empty
    assert batch.appended == {}  # producers' times prove nothing
    assert batch.hazard  # the cancel: the gate waits until it is applied
    adds_only = decode_batch([_add(message, 0, 8)], LimitSettings(), NAMES, NOW)
    assert not adds_only.hazard
    adds_only.merge(batch)
    assert adds_only.hazard


def test_append_times_are_the_last_record_of_each_partition_and_survive_a_merge() -> None:
    message = DelayMessage("a", "orders", None, b"v", [], NOW + 5000)
    appended = TIMESTAMP_LOG_APPEND_TIME
    bad = _record(0, 9, b"not json", [], NOW - 5, b"x", appended)
    batch = decode_batch(
        [_add(message, 0, 7, NOW - 30, appended), _add(message, 1, 2, NOW - 20, appended), bad],
        LimitSettings(),
        NAMES,
        NOW,
    )
    # A rejected record is read all the same: what came before it is read too.
    assert batch.appended == {0: NOW - 5, 1: NOW - 20}
    later = decode_batch([_add(message, 1, 3, NOW - 1, appended)], LimitSettings(), NAMES, NOW)
    batch.merge(later)
    assert batch.appended == {0: NOW - 5, 1: NOW - 1}


def test_bad_records_are_set_aside_with_their_reason_and_still_passed() -> None:
    good = DelayMessage("ok", "orders", None, b"v", [], NOW + 1000)
    internal = DelayMessage("bad", "chronos.inner", None, b"v", [], NOW + 1000)
    garbage = _record(0, 5, b"x", [("chronos-version", b"9")])
    batch = decode_batch(
        [_add(good, 0, 4), garbage, _add(internal, 0, 6)], LimitSettings(), NAMES, NOW
    )
    assert [item[1] for item in batch.items] == ["ok"]
    reasons = [reason for _k, _v, _h, reason, _o in batch.rejected]
    assert "unsupported chronos-version" in reasons[0]
    assert reasons[1].startswith("invalid topic")
    assert [origin for *_rest, origin in batch.rejected] == [
        "chronos.inner[0]@5",
        "chronos.inner[0]@6",
    ]
    assert batch.offsets == {0: 7}  # past the rejected records too: they go to dead letters


def test_consumer_errors_are_reported_not_decoded() -> None:
    error = Message(error=KafkaError(KafkaError._TRANSPORT))
    batch = decode_batch([error], LimitSettings(), NAMES, NOW)
    assert batch.items == [] and batch.offsets == {}
    assert len(batch.errors) == 1
    assert not batch.empty  # a read that met an error is not idle
    assert batch.not_authorized is None


def test_a_refused_inner_topic_is_flagged_for_the_node_to_end() -> None:
    refused = Message(error=KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))
    batch = decode_batch([refused], LimitSettings(), NAMES, NOW)
    assert batch.not_authorized is not None
    assert batch.not_authorized.startswith("TOPIC_AUTHORIZATION_FAILED")
    later = DecodedBatch()
    later.merge(batch)
    assert later.not_authorized == batch.not_authorized


def test_a_batch_survives_the_trip_to_another_process() -> None:
    message = DelayMessage("a", "orders", None, b"\x00\xff" * 100, [], NOW + 5000)
    batch = decode_batch([_add(message, 2, 9)], LimitSettings(), NAMES, NOW)
    assert pickle.loads(pickle.dumps(batch)) == batch
    assert DecodedBatch(positions={0: 3}).empty


def test_merged_batches_read_as_one() -> None:
    add: DecodedRequest = (Op.ADD, "a", NOW, b"x")
    cancel: DecodedRequest = (Op.CANCEL, "b", 0, None)
    first = DecodedBatch(items=[add], offsets={0: 4}, oldest_ms=NOW - 5)
    later = DecodedBatch(
        items=[cancel], offsets={0: 6, 1: 2}, errors=["e"], oldest_ms=NOW, positions={1: 3}
    )
    first.merge(later)
    assert first.items == [add, cancel]
    assert first.offsets == {0: 6, 1: 2}
    assert first.errors == ["e"] and first.positions == {1: 3}
    assert first.oldest_ms == NOW - 5  # the lag is the oldest record's
    idle = DecodedBatch()
    idle.merge(first)
    assert idle.oldest_ms == NOW - 5


def test_a_record_whose_key_is_not_its_id_is_refused() -> None:
    """The wire format keys a record by its id: that keeps an id's add and cancel on one
    partition, and a record's key as small as an id (not 400 KB of anything)."""
    message = DelayMessage("m1", "orders", None, b"v", [], NOW + 1000)
    _key, value, headers = wire.encode_add(message)
    for key in (b"not-the-id", b"x" * 400_000, None):
        batch = decode_batch([_record(0, 1, value, headers, NOW, key)], LimitSettings(), NAMES, NOW)
        assert not batch.items
        ((_k, _v, _h, reason, _origin),) = batch.rejected
        assert reason.startswith("invalid id: the record key must be the message id"), reason


def test_an_offset_no_longer_in_the_topic_is_flagged_as_a_gap() -> None:
    """With ``auto.offset.reset=error`` librdkafka reports a next offset that retention (or
    DeleteRecords) removed instead of jumping over the records silently."""
    removed = Message(error=KafkaError(KafkaError._AUTO_OFFSET_RESET))
    batch = decode_batch([removed], LimitSettings(), NAMES, NOW)
    assert batch.gap is not None and batch.not_authorized is None
    later = DecodedBatch()
    later.merge(batch)
    assert later.gap == batch.gap
