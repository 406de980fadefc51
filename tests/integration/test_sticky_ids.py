"""Ids the proxy makes up land in one inner partition while it sticks to it
(``proxy/sticky_ids.py``), on a real broker's partitioner; a caller's ids, and ids made with
``proxy.sticky_ids_ms = 0``, spread by their hash."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from chronos.kafka.admin import ensure_topics
from chronos.settings import ChronosSettings
from proxy.client import DelayClient, DelayRequest
from tests.integration.harness import INNER_PARTITIONS, make_settings


def _partitions_of(settings: ChronosSettings, ids: set[str]) -> dict[str, int]:
    """Where each of ``ids``' add records lies in the inner topic."""
    inner = settings.topics.names.inner
    consumer = Consumer(
        {"bootstrap.servers": settings.kafka.bootstrap_servers, "group.id": "sticky-ids-test"}
    )
    consumer.assign([TopicPartition(inner, p, 0) for p in range(INNER_PARTITIONS)])
    found: dict[str, int] = {}
    try:
        while not ids <= found.keys():
            message = consumer.poll(30)
            assert message is not None, f"not read: {len(ids - found.keys())} of {len(ids)}"
            assert message.error() is None, message.error()
            key = (message.key() or b"").decode()
            partition = message.partition()
            if key in ids and partition is not None:
                found[key] = partition
    finally:
        consumer.close()
    return found


def _sent(settings: ChronosSettings, given_ids: bool) -> dict[str, int]:
    ensure_topics(settings)
    with DelayClient(settings) as client:
        # The first publish teaches the client the partition count (ids before it are random).
        client.send_delay("sticky-target", "first", delay=3600)
        requests = [
            DelayRequest(
                "sticky-target", f"v{n}", delay=3600, id=f"given-{n}" if given_ids else None
            )
            for n in range(40)
        ]
        ids = {receipt.id for receipt in client.send_batch(requests)}
    return _partitions_of(settings, ids)


def test_ids_made_within_a_stick_land_in_one_partition(
    kafka_bootstrap: str, namespace: str, tmp_path: Path
) -> None:
    # A stick longer than the batch takes, whatever the machine's speed.
    settings = make_settings(kafka_bootstrap, namespace, tmp_path, proxy={"sticky_ids_ms": 60_000})
    assert len(set(_sent(settings, given_ids=False).values())) == 1


def test_given_ids_and_ids_made_without_sticking_spread(
    kafka_bootstrap: str, namespace: str, tmp_path: Path
) -> None:
    sticky = make_settings(kafka_bootstrap, namespace, tmp_path, proxy={"sticky_ids_ms": 60_000})
    assert len(set(_sent(sticky, given_ids=True).values())) > 1
    plain = make_settings(
        kafka_bootstrap, f"{namespace}-plain", tmp_path, proxy={"sticky_ids_ms": 0}
    )
    assert len(set(_sent(plain, given_ids=False).values())) > 1
