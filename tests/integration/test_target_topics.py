"""Target topics that do not exist: dead-lettered when the cluster will not create them,
delivered when it creates topics on demand, in both delivery modes (one policy).

Apache Kafka creates a topic when a producer first asks for it (``auto.create.topics.enable``,
its default) and answers that first question "unknown"; the tests' shared broker has it off, as
production clusters mostly do, so these tests start one that creates on demand. Tansu creates
every topic asked for: a topic there never stays unknown.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from chronos.devstack.kafka import KafkaBroker
from chronos.devstack.watch import Delivered, DeliveryWatcher
from chronos.runtime.node import Node
from chronos.settings import ChronosSettings
from proxy.client import DelayClient
from tests.integration.harness import Inbox, make_settings, running_node

pytestmark = pytest.mark.kafka_only(
    reason="Tansu creates every topic asked for: none stays unknown"
)


@pytest.fixture(scope="module")
def creating() -> Iterator[str]:
    """A broker that creates topics on demand."""
    broker = KafkaBroker(properties={"auto.create.topics.enable": "true"}).start()
    try:
        yield broker.bootstrap
    finally:
        broker.stop()


def _arrived(settings: ChronosSettings, topic: str, message_id: str, timeout_s: float) -> bool:
    """True once ``message_id`` was delivered to ``topic``, which chronos' delivery creates:
    the watcher waits for the topic before it reads it from the beginning."""
    seen: list[Delivered] = []
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            watcher = DeliveryWatcher(settings.kafka.bootstrap_servers, [topic], seen.append)
            break
        except TimeoutError:
            assert time.monotonic() < deadline, f"{topic} was never created"
    watcher.start()
    try:
        while time.monotonic() < deadline:
            if any(d.id == message_id for d in seen):
                return True
            time.sleep(0.05)
        return False
    finally:
        watcher.stop()


def test_a_node_alone_delivers_to_a_topic_the_cluster_creates_on_demand(
    creating: str, namespace: str, tmp_path: Path
) -> None:
    settings = make_settings(creating, namespace, tmp_path)
    topic = f"{namespace}-created-on-demand"
    with running_node(settings), DelayClient(settings) as client:
        client.send_delay(topic, b"v", delay=0.2, id="fresh")
        assert _arrived(settings, topic, "fresh", 60)


def test_a_master_delivers_to_a_topic_the_cluster_creates_on_demand(
    creating: str, namespace: str, tmp_path: Path
) -> None:
    """Before the one policy, a master dead-lettered such a message: Kafka's first answer,
    "unknown", was taken for the last."""
    settings = make_settings(
        creating, namespace, tmp_path, node={"ingest_threads": 1}, group={"name": "g"}
    )
    node = Node(settings)
    node.start()
    try:
        deadline = time.monotonic() + 60
        while node.replica is None or node.replica.role != "master":
            assert time.monotonic() < deadline, "never became master"
            time.sleep(0.05)
        topic = f"{namespace}-created-on-demand"
        with DelayClient(settings) as client:
            client.send_delay(topic, b"v", delay=0.2, id="fresh")
        assert _arrived(settings, topic, "fresh", 60)
    finally:
        node.stop()


def test_a_node_alone_dead_letters_a_topic_that_does_not_exist_within_seconds(
    kafka_bootstrap: str, namespace: str, tmp_path: Path
) -> None:
    """On the shared broker (no creation on demand). librdkafka alone would hold the record,
    and with it the seek, for its metadata timeout (30 s)."""
    settings = make_settings(kafka_bootstrap, namespace, tmp_path)
    dead = settings.topics.names.dead_letter
    with running_node(settings), DelayClient(settings) as client:
        with Inbox(settings, [dead], partitions=1) as dlq:
            sent_at = time.monotonic()
            client.send_delay(f"{namespace}-missing", b"v", delay=0.2, id="lost")
            assert dlq.wait_for({"lost"}, 60)
            assert time.monotonic() - sent_at < 5
            reason = dict(dlq.first("lost").headers).get("chronos-dlq-reason") or b""
            assert reason.startswith(b"UNKNOWN_TOPIC_OR_PART")
