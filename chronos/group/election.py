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
from collections.abc import Callable, Mapping
from typing import Protocol

import structlog
from confluent_kafka import KafkaError, Message, TopicPartition

from chronos.group.spec import GroupSpec
from chronos.kafka.clients import MEMBERSHIP_CONSUMER
from chronos.kafka.librdkafka import ClientErrors
from chronos.lifecycle import LoopWorker
from chronos.settings import KafkaValue

log = structlog.get_logger(__name__)

_POLL_S = 0.1

RebalanceCallback = Callable[..., None]


class ElectionConsumer(Protocol):
    """What the election needs of a consumer (confluent-kafka's ``Consumer``, or a test's)."""

    def subscribe(
        self,
        topics: list[str],
        on_assign: RebalanceCallback | None = ...,
        on_revoke: RebalanceCallback | None = ...,
        on_lost: RebalanceCallback | None = ...,
    ) -> None: ...

    def poll(self, timeout: float = ...) -> Message | None: ...

    def close(self) -> None: ...


#: Builds the election's consumer: (group id, its error handler, options) -> consumer
#: (``KafkaClients.consumer``).
OpenConsumer = Callable[[str, ClientErrors, Mapping[str, KafkaValue]], ElectionConsumer]


class Election(LoopWorker):
    """Keeps this node a member of its group's election and reports when it wins or loses.

    Parameters:
        spec: the group (election topic and consumer group, session timeout).
        open_consumer: builds the election consumer.
        errors: the consumer's error handler (an authorization failure ends the node).
        on_change: called with True when this node was assigned the election partition, False
            when it lost it (revoked, or the coordinator dropped this member); from this
            worker's thread, so it must not block.
    """

    def __init__(
        self,
        spec: GroupSpec,
        open_consumer: OpenConsumer,
        errors: ClientErrors,
        on_change: Callable[[bool], None],
    ) -> None:
        super().__init__("election")
        self._topic = spec.election_topic
        self._group = spec.election_group
        self._options: dict[str, KafkaValue] = {
            "session.timeout.ms": spec.settings.session_timeout_ms,
            "heartbeat.interval.ms": spec.settings.heartbeat_interval_ms,
            **MEMBERSHIP_CONSUMER,
        }
        self._open_consumer = open_consumer
        self._errors = errors
        self._on_change = on_change
        self._consumer: ElectionConsumer | None = None
        self._elected = threading.Event()

    @property
    def elected(self) -> bool:
        """True while this node holds the election partition (as far as it knows)."""
        return self._elected.is_set()

    def _assigned(self, _consumer: object, partitions: list[TopicPartition]) -> None:
        if any(tp.topic == self._topic for tp in partitions) and not self._elected.is_set():
            self._elected.set()
            log.info("election_won", topic=self._topic)
            self._on_change(True)

    def _revoked(self, _consumer: object, partitions: list[TopicPartition]) -> None:
        if any(tp.topic == self._topic for tp in partitions) and self._elected.is_set():
            self._elected.clear()
            log.warning("election_lost", topic=self._topic)
            self._on_change(False)

    def step(self) -> None:
        if self._consumer is None:
            consumer = self._open_consumer(self._group, self._errors, self._options)
            consumer.subscribe(
                [self._topic],
                on_assign=self._assigned,
                on_revoke=self._revoked,
                on_lost=self._revoked,
            )
            self._consumer = consumer
        message = self._consumer.poll(_POLL_S)
        error = None if message is None else message.error()
        if error is not None and error.code() != KafkaError._PARTITION_EOF:
            self._errors(error)  # logged once per interval; an authorization failure is fatal

    def finish(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            # Leaving the group hands the partition to a backup at once, not after a session.
            consumer.close()
        if self._elected.is_set():
            self._elected.clear()
            self._on_change(False)
