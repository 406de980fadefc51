"""The seam every record chronos produces goes through: one Protocol, its drivers beside it.

Drivers (``publishers/``): ``IdempotentPublisher`` (a node alone, ingest's dead letters, the
proxy, the client library, the pipeline), ``TransactionalPublisher`` (a replica group's master)
and ``StubPublisher`` (tests: in memory, every outcome decided by the test). All are built by
``chronos/kafka/clients.py``, so they route librdkafka's logs and classify errors alike
(``errors.classify``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from confluent_kafka import KafkaError

from chronos.lifecycle import Component
from chronos.types import Headers

#: Called once per record with (error or None, the confluent Message or None).
DeliveryCallback = Callable[[KafkaError | None, Any], None]

#: ``publish``'s partition when the producer's partitioner chooses (librdkafka's
#: ``RD_KAFKA_PARTITION_UA``, which ``Producer.produce`` takes as well).
ANY_PARTITION = -1


class Publisher(Protocol):
    """Produces records; each one's outcome arrives through its callback, never as an exception
    (synchronous refusals such as a record too large included), so callers have one path."""

    def publish(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: Headers,
        on_done: DeliveryCallback,
        partition: int = ANY_PARTITION,
    ) -> None:
        """Queue one record; ``on_done`` runs once Kafka answered (or the record failed).

        ``partition``: where it goes when it must sit beside other records whatever the
        partitioner (restatements and expiry tombstones go where their id's records are)."""
        ...

    def flush(self, timeout_s: float) -> int:
        """Wait for queued records' outcomes; how many are still unanswered."""
        ...

    def in_flight(self) -> int:
        """Records queued and not answered yet."""
        ...

    def note_error(self, error: KafkaError) -> None:
        """A record failed with ``error``: a driver that can heal (a new producer) does so."""
        ...

    def topic_exists(self, topic: str, timeout_s: float) -> bool:
        """Whether Kafka's metadata knows ``topic`` (asked of the broker, not cached)."""
        ...


class OwnedPublisher(Publisher, Component, Protocol):
    """A publisher its user starts and stops (``IdempotentPublisher``, ``StubPublisher``)."""


class TransactionalPublisher(Publisher, Protocol):
    """A publisher whose records become visible together, with the ones of one transaction.

    Every method raises ``Fenced`` once this producer may not deliver any more, and
    ``NotAuthorized`` when Kafka refuses its transactional id or the cluster right.
    """

    def init(self, timeout_s: float) -> None:
        """Register the transactional id: fences any earlier producer with it and aborts (or
        completes) the transaction it left open."""
        ...

    def begin(self) -> None: ...

    def commit(self) -> None:
        """Commit everything published since ``begin``; raises ``TransactionAborted`` when Kafka
        needs an abort instead (done here: the caller tries the range again)."""
        ...

    def abort(self) -> None:
        """Abort the open transaction, if any; what it published never becomes visible."""
        ...

    def interrupt(self) -> None:
        """Stop retrying: a call in progress raises instead of retrying a retriable error (a
        stopping master must not wait on a commit for ever)."""
        ...

    def close(self) -> None:
        """Release the producer (threads, connections); unusable afterwards."""
        ...
