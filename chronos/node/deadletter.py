"""The dead-letter topic: records that can never be delivered, with the reason in a header."""

from __future__ import annotations

import threading
import time
from typing import Any

import structlog
from confluent_kafka import KafkaError

from chronos.kafka.errors import describe, is_permanent
from chronos.kafka.producer import Delivery, DeliveryCallback
from chronos.metrics import Metrics
from chronos.types import Headers
from chronos.wire import H_DLQ_REASON, H_DLQ_SOURCE, H_DLQ_TARGET, H_DLQ_TRUNCATED

log = structlog.get_logger(__name__)

#: (key, value, headers, reason, source) of a rejected inner record.
Rejected = tuple[bytes | None, bytes | None, Headers, str, str]


def dead_letter_headers(
    headers: Headers, reason: str, source: str, target: str | None, truncated: int | None
) -> Headers:
    """The record's headers plus why it was dead-lettered, from where, and where it was going."""
    extra: Headers = [(H_DLQ_REASON, reason.encode()), (H_DLQ_SOURCE, source.encode())]
    if target is not None:
        extra.append((H_DLQ_TARGET, target.encode()))
    if truncated is not None:
        extra.append((H_DLQ_TRUNCATED, str(truncated).encode()))
    return [*headers, *extra]


class DeadLetters:
    """Produces to the dead-letter topic. One attempt per call: callers own the retries, so no
    produce ever runs inside a delivery callback and no thread is spawned per failure.

    A record the dead-letter topic refuses permanently (too large, most likely) is sent again
    without its value, with ``chronos-dlq-truncated: <size>``: the evidence survives.

    Parameters:
        delivery: the shared producer.
        topic: the dead-letter topic name.
        metrics: counts dead letters.
    """

    def __init__(self, delivery: Delivery, topic: str, metrics: Metrics) -> None:
        self._delivery = delivery
        self._topic = topic
        self._metrics = metrics

    def send(
        self,
        key: bytes | None,
        value: bytes | None,
        headers: Headers,
        *,
        reason: str,
        source: str,
        target: str | None,
        truncate: bool,
        on_result: DeliveryCallback,
    ) -> None:
        """Dead-letter one record (without its value when ``truncate``)."""
        truncated = len(value or b"") if truncate else None
        self._delivery.send(
            self._topic,
            key,
            None if truncate else value,
            dead_letter_headers(headers, reason, source, target, truncated),
            self._counted(on_result),
        )

    def _counted(self, on_result: DeliveryCallback) -> DeliveryCallback:
        def done(error: KafkaError | None, message: Any = None) -> None:
            if error is None:
                self._metrics.incr("dead_lettered")
            else:
                log.error("dead_letter_failed", error=describe(error))
            on_result(error, message)

        return done

    def send_and_wait(self, records: list[Rejected], timeout_s: float) -> bool:
        """Dead-letter rejected inner records; True once every one is acknowledged.

        Records refused permanently are tried once more without their value.
        """
        pending = [(record, False) for record in records]
        deadline = time.monotonic() + timeout_s
        while pending:
            results = _Results(len(pending))
            for index, ((key, value, headers, reason, source), truncate) in enumerate(pending):
                self.send(
                    key,
                    value,
                    headers,
                    reason=reason,
                    source=source,
                    target=None,
                    truncate=truncate,
                    on_result=results.callback(index),
                )
            if not results.wait(deadline - time.monotonic()):
                return False
            errors = results.errors
            retry = [
                (record, True)
                for (record, truncate), error in zip(pending, errors, strict=True)
                if error is not None and is_permanent(error) and not truncate
            ]
            if len(retry) != sum(error is not None for error in errors):
                return False  # a transient failure, or a truncated record refused again
            pending = retry
        return True


class _Results:
    """Collects the outcome of ``count`` sends."""

    def __init__(self, count: int) -> None:
        self.errors: list[KafkaError | None] = [None] * count
        self._remaining = count
        self._lock = threading.Lock()
        self._done = threading.Event()
        if count == 0:
            self._done.set()

    def callback(self, index: int) -> DeliveryCallback:
        def done(error: KafkaError | None, _message: Any = None) -> None:
            with self._lock:
                self.errors[index] = error
                self._remaining -= 1
                if self._remaining == 0:
                    self._done.set()

        return done

    def wait(self, timeout_s: float) -> bool:
        return self._done.wait(max(0.0, timeout_s))
