"""The dead-letter topic: records that can never be delivered, with the reason in a header."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import structlog
from confluent_kafka import KafkaError

from chronos.kafka.errors import describe, is_permanent
from chronos.kafka.producer import Delivery
from chronos.metrics import Metrics
from chronos.types import Headers
from chronos.wire import H_DLQ_REASON, H_DLQ_SOURCE, H_DLQ_TARGET, H_DLQ_TRUNCATED

log = structlog.get_logger(__name__)


class DeadLetters:
    """Produces to the dead-letter topic, retrying until Kafka acknowledges (it is our topic).

    Parameters:
        delivery: the shared producer.
        topic: the dead-letter topic name.
        metrics: counts dead letters by source.
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
        on_done: Callable[[], None],
    ) -> None:
        """Dead-letter one record; ``on_done`` runs once it is acknowledged."""
        extra: Headers = [(H_DLQ_REASON, reason.encode()), (H_DLQ_SOURCE, source.encode())]
        if target is not None:
            extra.append((H_DLQ_TARGET, target.encode()))
        all_headers = [*headers, *extra]
        attempt = 0
        body = value

        def done(error: KafkaError | None) -> None:
            nonlocal attempt, body, all_headers
            if error is None:
                self._metrics.incr("dead_lettered")
                on_done()
                return
            attempt += 1
            log.error("dead_letter_failed", error=describe(error), attempt=attempt, source=source)
            if is_permanent(error):
                if body is None:
                    # Nothing smaller to try: waiting would wedge the seek timestamp forever.
                    self._metrics.incr("dead_letter_dropped")
                    log.critical("dead_letter_dropped", source=source, error=describe(error))
                    on_done()
                    return
                # Most likely too large for the dead-letter topic too: keep the evidence
                # (key, headers, reason) and the original size instead of the value.
                all_headers = [*all_headers, (H_DLQ_TRUNCATED, str(len(body)).encode())]
                body = None
            # Retry from a timer so the producer's poll thread is never blocked by a sleep.
            timer = threading.Timer(min(0.1 * 2**attempt, 5.0), produce)
            timer.daemon = True
            timer.start()

        def produce() -> None:
            self._delivery.send(self._topic, key, body, all_headers, done)

        produce()

    def send_and_wait(
        self,
        records: list[tuple[bytes | None, bytes | None, Headers, str, str]],
        timeout_s: float,
    ) -> bool:
        """Dead-letter (key, value, headers, reason, source) records; True once all are acked."""
        if not records:
            return True
        remaining = len(records)
        all_done = threading.Event()
        lock = threading.Lock()

        def one_done() -> None:
            nonlocal remaining
            with lock:
                remaining -= 1
                if remaining == 0:
                    all_done.set()

        for key, value, headers, reason, source in records:
            self.send(
                key, value, headers, reason=reason, source=source, target=None, on_done=one_done
            )
        deadline = time.monotonic() + timeout_s
        return all_done.wait(max(0.0, deadline - time.monotonic()))
