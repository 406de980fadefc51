"""Smoke test: the test broker round-trips keys, binary values and binary headers exactly.

Chronos passes user headers through byte for byte and produces with enable.idempotence and
acks=all; if the broker under test could not do this, every other integration test would be
meaningless.
"""

from __future__ import annotations

import hashlib
import time

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

N_RECORDS = 100
Headers = list[tuple[str, str | bytes | None]]  # what Producer.produce accepts


def record(i: int) -> tuple[bytes, bytes, Headers]:
    """Key, value and headers of record ``i``: every byte value, NULs, duplicate header keys."""
    value = hashlib.sha256(i.to_bytes(4, "big")).digest() * 8 + b"\x00\xff\x00"
    headers: Headers = [
        ("bin", bytes(range(256))),
        ("idx", i.to_bytes(8, "big")),
        ("dup", b"\x00"),
        ("dup", b"\xff\xfe"),
    ]
    return f"key-{i}".encode(), value, headers


@pytest.mark.embedded
def test_produce_and_read_back_binary_headers(
    kafka_bootstrap: str, admin: AdminClient, namespace: str
) -> None:
    topic = f"{namespace}.smoke"
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(
        timeout=30
    )

    producer = Producer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
        }
    )
    failures: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            failures.append(err)

    for i in range(N_RECORDS):
        key, value, headers = record(i)
        producer.produce(topic, value=value, key=key, headers=headers, on_delivery=on_delivery)
    assert producer.flush(30) == 0, "records still undelivered after 30 s"
    assert failures == []

    consumer = Consumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": f"{namespace}.reader",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        received: list[Message] = []
        deadline = time.monotonic() + 60
        while len(received) < N_RECORDS and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            received.append(msg)
    finally:
        consumer.close()

    assert len(received) == N_RECORDS
    for i, msg in enumerate(received):
        key, value, headers = record(i)
        assert msg.offset() == i
        assert msg.key() == key
        assert msg.value() == value
        assert msg.headers() == headers
