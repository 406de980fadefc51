"""Producing add requests to the inner topic from a Spark task: wire format v1, durable settings.

Shared by the ``chronos-inner`` writer and the schedule job. A task counts as done only after
Kafka acknowledged every record; any refusal fails it. Spark then retries the task and some
records are produced twice: harmless, because the node keeps the first add of an id.
"""

from __future__ import annotations

from confluent_kafka import KafkaError

from chronos import wire
from chronos.errors import NotAcknowledged
from chronos.kafka.clients import KafkaClients
from chronos.kafka.errors import describe
from chronos.model import DelayMessage
from chronos.settings import ChronosSettings

_FLUSH_TIMEOUT_S = 120.0


class InnerProducer:
    """One idempotent producer per task; ``finish`` waits for every acknowledgement.

    Parameters:
        settings: Kafka connection, inner topic name and size limit.
    """

    def __init__(self, settings: ChronosSettings) -> None:
        self._topic = settings.topics.names.inner
        # A longer linger than the proxy's: a batch job wants full batches, not low latency.
        # Only failures call back: success is what flush() returning with nothing left means,
        # which spares a Python callback per row.
        clients = KafkaClients(
            settings.kafka, "chronos-pipeline", settings.limits.max_message_bytes
        )
        self._publisher = clients.idempotent(
            "pipeline-requests", {"linger.ms": 20, "delivery.report.only.error": True}
        )
        self._publisher.start()
        self.sent = 0
        self._failed = 0
        self._first_error: KafkaError | None = None

    def _on_delivery(self, error: KafkaError | None, _msg: object) -> None:
        if error is not None:
            self._failed += 1
            if self._first_error is None:
                self._first_error = error

    def send(self, message: DelayMessage) -> None:
        """Queue ``message``'s add request (waits while the local queue is full)."""
        key, value, headers = wire.encode_add(message)
        self._publisher.publish(self._topic, key, value, headers, self._on_delivery)
        self.sent += 1

    def finish(self) -> int:
        """Wait for every acknowledgement; the count sent, or NotAcknowledged."""
        remaining = self._publisher.flush(_FLUSH_TIMEOUT_S)
        self._publisher.stop()
        self._publisher.join(5.0)
        if remaining:
            raise NotAcknowledged(f"{remaining} records not acknowledged in {_FLUSH_TIMEOUT_S} s")
        if self._failed:
            assert self._first_error is not None
            raise NotAcknowledged(
                f"Kafka refused {self._failed} records: {describe(self._first_error)}"
            )
        return self.sent
