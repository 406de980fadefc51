"""Election through Kafka alone: the member of the group's election consumer group that is
assigned the one partition of the election topic should be master.

Why a consumer group: Kafka already runs membership, liveness (the session timeout) and
assignment for them, with no other service. Dynamic membership (no ``group.instance.id``), so a
killed master's partition moves after one session timeout instead of waiting for it to come
back; the cooperative-sticky assignor, so a backup joining or leaving never takes the partition
from a live master.

Failure cases, and why they are safe: an assignment is not a lease. A master frozen or cut off
from the coordinator keeps believing it is assigned until it polls again, so two nodes can both
"win" for a while; only one of them can commit a delivery transaction, because the winner's
``init_transactions`` fences the other's producer (``transactional.py``). The group only picks
who should try.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import structlog
from confluent_kafka import Consumer, KafkaError, TopicPartition

from chronos.node.component import LoopWorker
from chronos.settings import ChronosSettings, KafkaValue

log = structlog.get_logger(__name__)

_POLL_S = 0.1


class Election(LoopWorker):
    """Keeps this node a member of its group's election and reports when it wins or loses.

    Parameters:
        settings: the settings tree (group name, session timeout).
        on_change: called with True when this node was assigned the election partition, False
            when it lost it (revoked, or the coordinator dropped this member); from this
            worker's thread, so it must not block.
    """

    def __init__(self, settings: ChronosSettings, on_change: Callable[[bool], None]) -> None:
        super().__init__("election")
        group = settings.group
        if group.name is None:
            raise ValueError("an election needs group.name")
        names = settings.topics.names
        self._topic = names.election(group.name)
        options: dict[str, KafkaValue] = {
            "session.timeout.ms": group.session_timeout_ms,
            "heartbeat.interval.ms": group.heartbeat_interval_ms,
            "partition.assignment.strategy": "cooperative-sticky",
            "enable.auto.commit": False,
            "auto.offset.reset": "latest",
            "client.id": f"chronos-election-{settings.node.node_id}",
        }
        self._config = settings.kafka.consumer(names.election_group(group.name), **options)
        self._on_change = on_change
        self._consumer: Consumer | None = None
        self._elected = threading.Event()

    @property
    def elected(self) -> bool:
        """True while this node holds the election partition (as far as it knows)."""
        return self._elected.is_set()

    def _assigned(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if any(tp.topic == self._topic for tp in partitions) and not self._elected.is_set():
            self._elected.set()
            log.info("election_won", topic=self._topic)
            self._on_change(True)

    def _revoked(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if any(tp.topic == self._topic for tp in partitions) and self._elected.is_set():
            self._elected.clear()
            log.warning("election_lost", topic=self._topic)
            self._on_change(False)

    def step(self) -> None:
        if self._consumer is None:
            consumer = Consumer(self._config)
            consumer.subscribe(
                [self._topic],
                on_assign=self._assigned,
                on_revoke=self._revoked,
                on_lost=self._revoked,
            )
            self._consumer = consumer
        message = self._consumer.poll(_POLL_S)
        error = None if message is None else message.error()
        if error is not None:
            if error.code() != KafkaError._PARTITION_EOF:
                log.warning("election_consumer_error", error=str(error))

    def finish(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            # Leaving the group hands the partition to a backup at once, not after a session.
            consumer.close()
        if self._elected.is_set():
            self._elected.clear()
            self._on_change(False)
