"""Malformed inner records and undeliverable messages are dead-lettered; valid ones flow on."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TypeAlias, cast

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from chronos import wire
from chronos.model import DelayMessage
from chronos.settings import ChronosSettings
from chronos.types import Headers
from proxy.client import DelayClient
from tests.broker import is_tansu
from tests.integration.harness import Inbox, make_settings, running_node

#: Headers as this test produces them: confluent-kafka's stub takes an invariant list of
#: str | bytes | None values, which chronos' Headers (bytes | None) is not.
KafkaHeaders: TypeAlias = list[tuple[str, str | bytes | None]]


def read_dead_letters(
    settings: ChronosSettings, expected: int, timeout_s: float = 20
) -> list[dict[str, bytes | None]]:
    consumer = Consumer(
        {"bootstrap.servers": settings.kafka.bootstrap_servers, "group.id": "dlq-reader"}
    )
    consumer.assign([TopicPartition(settings.topics.names.dead_letter, 0, OFFSET_BEGINNING)])
    found: list[dict[str, bytes | None]] = []
    deadline = time.monotonic() + timeout_s
    while len(found) < expected and time.monotonic() < deadline:
        for record in consumer.consume(100, 0.2):
            if record.error() is None:
                headers = dict(cast(Headers, record.headers() or []))
                headers["__value__"] = record.value()
                found.append(headers)
    consumer.close()
    return found


def valid(namespace: str, topic: str, index: int) -> tuple[bytes, bytes | None, KafkaHeaders]:
    message = DelayMessage(
        f"ok-{namespace}-{index}",
        topic,
        b"k",
        f"ok {index}".encode(),
        [],
        int(time.time() * 1000) + 300,
    )
    return cast("tuple[bytes, bytes | None, KafkaHeaders]", wire.encode_add(message))


@pytest.mark.embedded
def test_malformed_inner_records_are_dead_lettered_and_do_not_block(
    kafka_bootstrap: str, namespace: str, tmp_path: Path
) -> None:
    settings = make_settings(kafka_bootstrap, namespace, tmp_path / "store")
    topic = f"{namespace}-target"
    now = int(time.time() * 1000)
    good_add = valid(namespace, topic, 0)[2]

    def without(name: str) -> KafkaHeaders:
        return [h for h in good_add if h[0] != name]

    def replaced(name: str, value: bytes) -> KafkaHeaders:
        return [(n, value if n == name else v) for n, v in good_add]

    malformed: list[tuple[str, KafkaHeaders | None, bytes | None]] = [
        ("random bytes, no headers", None, bytes(range(200))),
        ("no version", without(wire.H_VERSION), b"x"),
        ("wrong version", replaced(wire.H_VERSION, b"9"), b"x"),
        ("unknown op", replaced(wire.H_OP, b"explode"), b"x"),
        ("no topic", without(wire.H_TOPIC), b"x"),
        ("no due", without(wire.H_DUE), b"x"),
        ("text due", replaced(wire.H_DUE, b"soon"), b"x"),
        ("double minus due", replaced(wire.H_DUE, b"--5"), b"x"),
        ("absurd due", replaced(wire.H_DUE, str(now + 10**15).encode()), b"x"),
        ("negative due", replaced(wire.H_DUE, b"-1000"), b"x"),
        ("internal target", replaced(wire.H_TOPIC, settings.topics.names.inner.encode()), b"x"),
        ("invalid target", replaced(wire.H_TOPIC, b"no spaces allowed"), b"x"),
        ("non-utf8 id", replaced(wire.H_ID, b"\xff\xfe"), b"x"),
        ("reserved user header", [("chronos-trace", b"t"), *good_add], b"x"),
        ("reserved user header, other case", [("Chronos-Trace", b"t"), *good_add], b"x"),
    ]
    with running_node(settings) as node, Inbox(settings, [topic]) as inbox:
        producer = Producer(settings.kafka.producer())
        inner = settings.topics.names.inner
        expected_ok: set[str] = set()
        for index, (_name, headers, value) in enumerate(malformed):
            key, good_value, good_headers = valid(namespace, topic, index)
            producer.produce(inner, key=key, value=good_value, headers=good_headers, partition=0)
            expected_ok.add(key.decode())
            producer.produce(inner, key=b"bad", value=value, headers=headers, partition=0)
        producer.flush(10)
        assert inbox.wait_for(expected_ok), "valid records around malformed ones were not delivered"
        dead = read_dead_letters(settings, len(malformed))
        assert node.context is not None
        assert node.context.metrics.totals().get("inner_rejected") == len(malformed)
    assert len(dead) == len(malformed)
    for letter in dead:
        assert letter[wire.H_DLQ_REASON], "dead letter without a reason"
        assert cast(bytes, letter[wire.H_DLQ_SOURCE]).decode().startswith(f"{inner}[0]@")
    reasons = b" | ".join(h[wire.H_DLQ_REASON] or b"" for h in dead).decode()
    for needle in (
        "chronos-version",
        "chronos-op",
        "chronos-topic",
        "chronos-due-ms",
        "not a decimal integer",
        "deliver_at",
        "internal topic",
        "not a valid Kafka topic",
        "not UTF-8",
        "header chronos-trace: names starting with 'chronos-' are reserved",
        "invalid headers[0]: names starting with 'chronos-' are reserved",
    ):
        assert needle in reasons, f"no dead letter mentions {needle!r}: {reasons}"
    assert bytes(range(200)) in [h["__value__"] for h in dead], "raw bytes not kept"


def test_permanent_delivery_error_goes_to_dead_letter_topic(
    kafka_bootstrap: str, namespace: str, tmp_path: Path
) -> None:
    # The node's producer refuses records over 20 kB: a permanent error for that message only.
    settings = make_settings(
        kafka_bootstrap,
        namespace,
        tmp_path / "store",
        kafka={"producer_config": {"message.max.bytes": 20_000}},
    )
    client_settings = make_settings(kafka_bootstrap, namespace, tmp_path / "unused")
    topic = f"{namespace}-target"
    with (
        running_node(settings),
        Inbox(settings, [topic]) as inbox,
        DelayClient(client_settings) as client,
    ):
        big = client.send_delay(topic, b"x" * 50_000, delay=0.2, id=f"{namespace}-big")
        small = [client.send_delay(topic, b"fine", delay=0.2).id for _ in range(5)]
        assert inbox.wait_for(set(small))
        dead = read_dead_letters(settings, 1)
        assert inbox.count(big.id) == 0
    assert len(dead) == 1
    assert dead[0][wire.H_ID] == big.id.encode()
    assert dead[0][wire.H_DLQ_TARGET] == topic.encode()
    assert b"MSG_SIZE_TOO_LARGE" in (dead[0][wire.H_DLQ_REASON] or b"")
    # The dead-letter record is refused at full size by the same producer: the value is
    # dropped and its size recorded, the rest kept.
    assert dead[0]["__value__"] is None
    truncated = dead[0][wire.H_DLQ_TRUNCATED] or b""
    assert truncated.startswith(b"value=50000 key=0 headers=")


def test_a_poison_record_too_large_to_dead_letter_whole_does_not_stop_intake(
    kafka_bootstrap: str, namespace: str, tmp_path: Path
) -> None:
    """Its bulk is in its key and headers, so dropping the value does not make it fit the
    dead-letter topic: the shrunk dead letter must, and no dead letter is sent twice."""
    settings = make_settings(kafka_bootstrap, namespace, tmp_path / "store")
    names = settings.topics.names
    # An operator's inner topic that takes 2 MB records; the dead-letter topic keeps chronos'
    # default limit (the request limit + 64 KiB).
    admin = AdminClient(settings.kafka.admin())
    inner = NewTopic(names.inner, 1, 1, config={"max.message.bytes": "2000000"})
    admin.create_topics([inner])[names.inner].result(30)
    topic = f"{namespace}-target"
    poison_key = b"k" * 300_000
    poison_headers: KafkaHeaders = [("bulk", b"h" * 1_200_000), ("note", b"kept")]
    with running_node(settings), Inbox(settings, [topic]) as inbox:
        producer = Producer(settings.kafka.producer(max_message_bytes=2_000_000))
        expected_ok: set[str] = set()
        bad = [
            (b"bad-1", None, b"x"),
            (poison_key, poison_headers, b"v"),  # no chronos-version: rejected
            (b"bad-2", None, b"y"),
        ]
        for index, (key, headers, value) in enumerate(bad):
            ok_key, ok_value, ok_headers = valid(namespace, topic, index)
            producer.produce(names.inner, key=ok_key, value=ok_value, headers=ok_headers)
            expected_ok.add(ok_key.decode())
            producer.produce(names.inner, key=key, value=value, headers=headers)
        ok_key, ok_value, ok_headers = valid(namespace, topic, len(bad))
        producer.produce(names.inner, key=ok_key, value=ok_value, headers=ok_headers)
        expected_ok.add(ok_key.decode())
        assert producer.flush(30) == 0
        assert inbox.wait_for(expected_ok, timeout_s=60), "records after the poison were stuck"
        # More than were rejected: a dead letter sent twice would show up here.
        dead = read_dead_letters(settings, len(bad) + 1, timeout_s=5)
    assert len(dead) == len(bad), [h.get(wire.H_DLQ_SOURCE) for h in dead]
    assert len({h[wire.H_DLQ_SOURCE] for h in dead}) == len(bad)
    (shrunk,) = [h for h in dead if h.get("note") == b"kept"]
    assert b"chronos-version" in (shrunk[wire.H_DLQ_REASON] or b"")
    if not is_tansu():  # Tansu enforces no size limit: there the whole record fits
        assert shrunk["__value__"] is None and "bulk" not in shrunk
        assert shrunk[wire.H_DLQ_TRUNCATED] == b"value=1 key=300000 headers=1200012"
