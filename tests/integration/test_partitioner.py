"""chronos' murmur2 (``kafka/partitioner.py``) names the partition librdkafka's
``murmur2_random`` partitioner (what the proxy and chronos produce with, and Java's default)
puts a keyed record in: an expiry tombstone must land beside the id's other records."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from chronos.kafka.partitioner import partition_of

PARTITIONS = 7


@pytest.mark.embedded
def test_partition_of_matches_the_producers_murmur2_partitioner(
    kafka_bootstrap: str, admin: AdminClient, namespace: str
) -> None:
    topic = f"{namespace}.partitioned"
    for future in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "partitioner": "murmur2_random"})
    # Every tail length (0-3 bytes past a multiple of 4), non-ASCII ids, and the empty key.
    keys = [f"id-{n}".encode() for n in range(150)] + ["é-ü-ø".encode(), b"", b"\xff" * 9]
    landed: dict[bytes, int] = {}

    def done(error: object, message: object) -> None:
        assert error is None, error
        landed[message.key()] = message.partition()  # type: ignore[attr-defined]

    for key in keys:
        producer.produce(topic, key=key, value=b"v", on_delivery=done)
    assert producer.flush(30) == 0
    assert len(landed) == len(keys)
    assert {key: partition_of(key, PARTITIONS) for key in keys} == landed
    assert len(set(landed.values())) == PARTITIONS  # the keys spread: the check can fail
