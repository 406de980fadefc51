"""Heartbeats on Apache Kafka (``group/peer_watch.py``): three nodes beat and watch; one
stops and the two others suspect it, nobody else. (A frozen watcher's thaw is the unit
test's, on a fake clock: ``tests/unit/test_peer_watch.py``.)"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from chronos.group.peer_watch import HeartbeatWorker, PeerWatch
from chronos.kafka.clients import KafkaClients
from chronos.settings import KafkaSettings

pytestmark = pytest.mark.kafka_only(reason="the cluster's failure detector runs on Apache Kafka")

SUSPECT_S = 1.5


class _Beating:
    """One node's heartbeat worker, its publisher and its watch."""

    def __init__(self, node: str, bootstrap: str, namespace: str, topic: str) -> None:
        self.clients = KafkaClients(KafkaSettings(bootstrap_servers=bootstrap), node)
        self.publisher = self.clients.idempotent(f"heartbeats-{node}")
        self.publisher.start()
        self.watch = PeerWatch(node, SUSPECT_S)
        self.worker = HeartbeatWorker(
            watch=self.watch,
            topic=topic,
            publisher=self.publisher,
            open_consumer=self.clients.consumer,
            reader_group=f"{namespace}.beats.{node}",
            errors=self.clients.errors(node),
            interval_s=0.25,
            progress=lambda: (0, False),
        )
        self.worker.start()

    def stop(self) -> None:
        self.worker.stop()
        self.worker.join(30)
        self.publisher.stop()


@pytest.fixture
def beating(
    kafka_bootstrap: str, admin: AdminClient, namespace: str
) -> Iterator[Callable[[str], _Beating]]:
    topic = f"{namespace}.heartbeats"
    config = {"retention.ms": "60000"}
    admin.create_topics([NewTopic(topic, 1, 1, config=config)])[topic].result(timeout=30)
    made: list[_Beating] = []

    def make(node: str) -> _Beating:
        made.append(_Beating(node, kafka_bootstrap, namespace, topic))
        return made[-1]

    yield make
    for node in made:
        if node.worker.is_alive():
            node.stop()


def _until(condition: Callable[[], bool], what: str, timeout_s: float = 60.0) -> float:
    """Seconds until ``condition`` held (AssertionError naming ``what`` after the timeout)."""
    began = time.monotonic()
    while not condition():
        assert time.monotonic() - began < timeout_s, what
        time.sleep(0.02)
    return time.monotonic() - began


def test_a_node_that_stops_beating_is_suspected_by_every_peer_and_nobody_else(
    beating: Callable[[str], _Beating],
) -> None:
    a, b, c = beating("a"), beating("b"), beating("c")
    _until(
        lambda: all(len(n.watch.peers) == 2 for n in (a, b, c)), "every node hears the two others"
    )
    stopped_at = time.monotonic()
    c.stop()
    _until(lambda: a.watch.suspects() == ["c"] and b.watch.suspects() == ["c"], "c suspected")
    # Its last beat left at most one interval before the stop began, read back a little later.
    waited = time.monotonic() - stopped_at
    assert waited >= SUSPECT_S - 0.5, f"suspected after {waited:.2f} s: before its silence"
    assert a.watch.silent_s("b") < SUSPECT_S and b.watch.silent_s("a") < SUSPECT_S
