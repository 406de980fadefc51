"""Kafka transactions as master/backup delivery will rely on them, on the broker under test.

Two properties: a ``read_committed`` consumer never sees the records of an aborted (or still
open) transaction, and a second producer with the same ``transactional.id`` fences the first.
Tansu 0.6 fences zombies but hands aborted records to ``read_committed`` consumers, so the
isolation test runs on Apache Kafka only.
"""

from __future__ import annotations

import logging
import time

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from chronos.kafka.librdkafka import TRANSACTION_FAILED, TransactionFailures
from chronos.kafka.publishers.transactional import TransactionalProducer

TXN_TIMEOUT_MS = 10_000


def one_partition_topic(admin: AdminClient, topic: str) -> str:
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(
        timeout=30
    )
    return topic


def transactional(bootstrap: str, transactional_id: str) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id,
            "transaction.timeout.ms": TXN_TIMEOUT_MS,
        }
    )
    producer.init_transactions(30)
    return producer


def read_values(bootstrap: str, topic: str, isolation: str, until: bytes) -> list[bytes]:
    """Every value of partition 0 from the start, up to and including ``until``."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{topic}.{isolation}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        values: list[bytes] = []
        deadline = time.monotonic() + 60
        while until not in values and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                values.append(msg.value() or b"")
        assert until in values, f"{until!r} not read within 60 s ({isolation}); got {values}"
        return values
    finally:
        consumer.close()


@pytest.mark.kafka_only(reason="Tansu 0.6 read_committed consumers also see aborted records")
def test_read_committed_hides_aborted_transactions(
    kafka_bootstrap: str, admin: AdminClient, namespace: str
) -> None:
    topic = one_partition_topic(admin, f"{namespace}.txn")
    producer = transactional(kafka_bootstrap, f"{namespace}.txn-1")
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, f"aborted-{i}".encode())
    producer.flush(30)  # written to the log, then thrown away
    producer.abort_transaction(30)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, f"committed-{i}".encode())
    producer.commit_transaction(30)

    uncommitted = read_values(kafka_bootstrap, topic, "read_uncommitted", b"committed-4")
    committed = read_values(kafka_bootstrap, topic, "read_committed", b"committed-4")

    assert [v for v in uncommitted if v.startswith(b"aborted")], (
        "the aborted records never reached the log"
    )
    assert committed == [f"committed-{i}".encode() for i in range(5)]


def test_second_producer_with_the_same_transactional_id_fences_the_first(
    kafka_bootstrap: str, admin: AdminClient, namespace: str
) -> None:
    topic = one_partition_topic(admin, f"{namespace}.fence")
    zombie = transactional(kafka_bootstrap, f"{namespace}.txn-1")
    zombie.begin_transaction()
    zombie.produce(topic, b"zombie")
    zombie.flush(30)

    successor = transactional(kafka_bootstrap, f"{namespace}.txn-1")  # fences the zombie
    successor.begin_transaction()
    successor.produce(topic, b"successor")
    successor.commit_transaction(30)

    with pytest.raises(KafkaException) as raised:
        zombie.produce(topic, b"zombie again")
        zombie.commit_transaction(30)
    error = raised.value.args[0]
    assert error.fatal() or error.txn_requires_abort(), error
    assert "FENCED" in error.name() or error.code() < 0, error


def test_a_flush_stops_once_librdkafka_says_the_transaction_failed(
    kafka_bootstrap: str, namespace: str
) -> None:
    """After a broker restart a transaction can fail on skipped sequence numbers while
    librdkafka keeps the failed request's records queued until the abort purges them: the
    flush waited its whole timeout (10 s) for them. Here the records wait for a topic that
    does not exist (auto-creation is off), and the failure is librdkafka's line as it says
    it: the flush returns them unanswered instead of waiting for the topic to be given up."""
    failures = TransactionFailures()
    publisher = TransactionalProducer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "transactional.id": f"{namespace}.flush",
            "transaction.timeout.ms": TXN_TIMEOUT_MS,
        },
        "flush",
        30.0,
        failures=failures,
    )
    answers: list[KafkaError | None] = []
    try:
        publisher.init(30)
        publisher.begin()
        for i in range(3):
            publisher.publish(
                f"{namespace}.no-such-topic", None, b"%d" % i, [], lambda e, _m: answers.append(e)
            )
        failures.log(
            logging.ERROR,
            "%s [%s] %s",
            TRANSACTION_FAILED,
            "rdkafka#producer-1",
            "Current transaction failed in state InTransaction: skipped sequence numbers "
            "(OUT_OF_ORDER_SEQUENCE_NUMBER, requires epoch bump)",
        )
        # Without the stop, the flush waits until librdkafka gives the topic up (30 s) and
        # answers every record with an error: none would be left.
        assert publisher.flush(60) == 3
        assert answers == []
        publisher.abort()
        assert publisher.in_flight() == 0
        assert failures.reason is not None
        publisher.begin()  # a new transaction: the failure is over
        assert failures.reason is None
        publisher.abort()
    finally:
        publisher.close()
