"""Which partitions each node could deliver now: the cluster's readiness board, in Kafka.

Why: a partition must not move to a node still restoring it, or nobody delivers it until the
restore ends (seconds to minutes for a full partition). Kafka Streams warms a task on its new
node before moving it (KIP-441); here the placement may name a cold node owner at once, and the
node delivering the partition hands it over only once the new owner says, on this board, that
its replica stands (caught up, store complete). Until then it keeps delivering, and the new
owner, seeing the progress topic move, does not fence it (``group/master_watch.py``).

Each node says the partitions whose replica stands, keyed by its id, in a one-partition
compacted topic (``TopicNames.cluster_status``), on each change and every ``interval_s``;
every node reads the topic from its start. What a node said counts while it is fresh (heard
within ``stale_after_s`` on this node's clock): a node killed stops being ready for anything.

Advisory, like the members topic of a replica group: a lost or late record delays a handover,
never makes two nodes deliver one partition (fencing decides that).
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable

import structlog
from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

from chronos.group.follower import ProgressConsumer
from chronos.kafka.batches import read_ready
from chronos.kafka.librdkafka import ClientErrors
from chronos.lifecycle import LoopWorker

log = structlog.get_logger(__name__)

_POLL_S = 0.1

#: (key, value): produce one board record without waiting for Kafka's answer.
Produce = Callable[[bytes, bytes], None]


def encode(partitions: frozenset[int], admin_url: str | None = None) -> bytes:
    """A node's record: the partitions whose replica stands, and where its admin API answers
    other nodes (``cluster.admin_url``; absent: it serves none)."""
    body: dict[str, object] = {"ready": sorted(partitions)}
    if admin_url is not None:
        body["admin"] = admin_url
    return json.dumps(body, separators=(",", ":")).encode()


def decode(value: bytes | None) -> frozenset[int] | None:
    """A record's partitions; None for a tombstone or a record this release cannot read."""
    if not value:
        return None
    try:
        return frozenset(int(p) for p in json.loads(value)["ready"])
    except (ValueError, KeyError, TypeError):
        return None


def decode_admin(value: bytes | None) -> str | None:
    """A record's admin API address, None without one."""
    try:
        url = json.loads(value or b"{}").get("admin")
    except (ValueError, AttributeError):
        return None
    return url if isinstance(url, str) else None


class ReadinessBoard(LoopWorker):
    """Says this node's ready partitions and knows every other node's.

    Parameters:
        node_id: this node.
        topic: the board's topic.
        consumer: reads the topic (assigned here, never joins a group).
        errors: the consumer's error handler.
        produce: writes this node's record.
        ready_now: this node's ready partitions now.
        interval_s: how often it says them when nothing changed.
        stale_after_s: how long another node's word counts.
        admin_url: this node's admin API for the other nodes, None when it serves none.
    """

    def __init__(
        self,
        *,
        node_id: str,
        topic: str,
        consumer: ProgressConsumer,
        errors: ClientErrors,
        produce: Produce,
        ready_now: Callable[[], frozenset[int]],
        interval_s: float,
        stale_after_s: float,
        admin_url: str | None = None,
    ) -> None:
        super().__init__("readiness")
        self._node_id = node_id
        self._topic = topic
        self._consumer = consumer
        self._errors = errors
        self._produce = produce
        self._ready_now = ready_now
        self._interval_s = interval_s
        self._stale_after_s = stale_after_s
        self._admin_url = admin_url
        #: node -> its admin API, as it last said.
        self._admin: dict[str, str] = {}
        self._lock = threading.Lock()
        #: node -> (its ready partitions, monotonic time heard).
        self._heard: dict[str, tuple[frozenset[int], float]] = {}
        self._said: frozenset[int] | None = None
        self._said_at = 0.0
        self._assigned = False

    def ready(self, node: str, partition: int, since: float = -math.inf) -> bool:
        """Whether ``node`` said recently, and after ``since`` (monotonic), that its replica of
        ``partition`` stands."""
        if node == self._node_id:
            return partition in self._ready_now()
        with self._lock:
            heard = self._heard.get(node)
        if heard is None:
            return False
        partitions, at = heard
        return (
            partition in partitions and since < at and time.monotonic() - at <= self._stale_after_s
        )

    def step(self) -> None:
        if not self._assigned:
            self._consumer.assign([TopicPartition(self._topic, 0, OFFSET_BEGINNING)])
            self._assigned = True
        self._say()
        for message in read_ready(self._consumer, 100, _POLL_S):
            error = message.error()
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    self._errors(error)
                continue
            key = message.key()
            if key is None:
                continue
            node, value = key.decode(), message.value()
            partitions = decode(value)
            admin = decode_admin(value)
            with self._lock:
                if partitions is None:
                    self._heard.pop(node, None)
                else:
                    self._heard[node] = (partitions, time.monotonic())
                if admin is None:
                    self._admin.pop(node, None)
                else:
                    self._admin[node] = admin

    def _say(self) -> None:
        now = time.monotonic()
        ready = self._ready_now()
        if ready == self._said and now - self._said_at < self._interval_s:
            return
        self._said, self._said_at = ready, now
        self._produce(self._node_id.encode(), encode(ready, self._admin_url))

    def admin_url(self, node: str) -> str | None:
        """Where ``node``'s admin API answers, as it last said (None: not said)."""
        if node == self._node_id:
            return self._admin_url
        with self._lock:
            return self._admin.get(node)

    def finish(self) -> None:
        # Ready for nothing: a node that stops must not be handed partitions.
        self._produce(self._node_id.encode(), encode(frozenset(), self._admin_url))
        self._consumer.close()
