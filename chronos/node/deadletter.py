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
from chronos.node.job import DeliveryJob
from chronos.types import Headers
from chronos.wire import (
    H_DLQ_REASON,
    H_DLQ_SOURCE,
    H_DLQ_TARGET,
    H_DLQ_TRUNCATED,
    delivery_headers,
)

log = structlog.get_logger(__name__)

#: (key, value, headers, reason, source) of a rejected inner record.
Rejected = tuple[bytes | None, bytes | None, Headers, str, str]


#: What a truncated dead letter keeps of the original: its key and each header up to this size.
KEPT_PART_BYTES = 1024
#: ... and at most this much of the original headers in all.
KEPT_HEADERS_BYTES = 16 * 1024
#: Longest reason kept (a reason quotes what failed, which is not bounded by itself).
REASON_BYTES = 1024


def dead_letter_headers(
    headers: Headers, reason: str, source: str, target: str | None, truncated: str | None
) -> Headers:
    """The record's headers plus why it was dead-lettered, from where, and where it was going."""
    extra: Headers = [
        (H_DLQ_REASON, reason.encode()[:REASON_BYTES]),
        (H_DLQ_SOURCE, source.encode()),
    ]
    if target is not None:
        extra.append((H_DLQ_TARGET, target.encode()))
    if truncated is not None:
        extra.append((H_DLQ_TRUNCATED, truncated.encode()))
    return [*headers, *extra]


def shrink(
    key: bytes | None, value: bytes | None, headers: Headers
) -> tuple[bytes | None, Headers, str]:
    """A form of a record that fits any dead-letter topic: no value, the key and headers only
    when small (:data:`KEPT_PART_BYTES` each, :data:`KEPT_HEADERS_BYTES` in all), and the
    original sizes (``value=V key=K headers=H``, bytes; headers count names and values)."""
    kept: Headers = []
    budget = KEPT_HEADERS_BYTES
    header_bytes = 0
    for name, raw in headers:
        size = len(name.encode()) + len(raw or b"")
        header_bytes += size
        if size <= KEPT_PART_BYTES and size <= budget:
            kept.append((name, raw))
            budget -= size
    key_bytes = len(key or b"")
    sizes = f"value={len(value or b'')} key={key_bytes} headers={header_bytes}"
    return (key if key_bytes <= KEPT_PART_BYTES else None), kept, sizes


def job_record(
    job: DeliveryJob,
) -> tuple[bytes | None, bytes | None, Headers, str, str | None]:
    """(key, value, headers, source, target) of a delivery job's dead letter: the record as it
    would have been delivered, or the raw stored bytes of one that could not be decoded."""
    message = job.message
    if message is None:
        return None, job.raw, [], "store:" + job.key.hex(), None
    headers = delivery_headers(message, job.due_ms, job.skipped)
    return message.key, message.value, headers, "delivery", message.topic


class DeadLetters:
    """Produces to the dead-letter topic. One attempt per call: callers own the retries, so no
    produce ever runs inside a delivery callback and no thread is spawned per failure.

    A record the dead-letter topic refuses permanently (too large, most likely) is sent again
    in the form :func:`shrink` gives, which any topic takes, with ``chronos-dlq-truncated``
    giving the original sizes: the evidence survives and the dead letter always fits.

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
        """Dead-letter one record (in its :func:`shrink` form when ``truncate``)."""
        truncated: str | None = None
        if truncate:
            key, headers, truncated = shrink(key, value, headers)
            value = None
        self._delivery.send(
            self._topic,
            key,
            value,
            dead_letter_headers(headers, reason, source, target, truncated),
            self._counted(on_result),
        )

    def _counted(self, on_result: DeliveryCallback) -> DeliveryCallback:
        def done(error: KafkaError | None, message: Any = None) -> None:
            if error is None:
                self._metrics.incr("dead_lettered")
            else:
                self._delivery.note_error(error)
                log.error("dead_letter_failed", error=describe(error))
            on_result(error, message)

        return done

    def send_and_wait(
        self, records: list[Rejected], timeout_s: float, acknowledged: set[str] | None = None
    ) -> bool:
        """Dead-letter rejected inner records; True once every one is acknowledged.

        Records refused permanently are tried once more in their :func:`shrink` form. The
        source of each acknowledged record is added to ``acknowledged``, and records whose
        source is in it are not sent: a caller that retries a batch passes the same set, so no
        dead letter is sent twice.
        """
        if acknowledged is not None:
            records = [record for record in records if record[4] not in acknowledged]
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
            if acknowledged is not None:
                acknowledged.update(
                    record[4]
                    for (record, _truncate), error in zip(pending, errors, strict=True)
                    if error is None
                )
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
