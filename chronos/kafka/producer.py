"""The one producer abstraction every delivery goes through (targets and dead letters)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import structlog
from confluent_kafka import KafkaError, KafkaException, Producer

from chronos.kafka.errors import describe, needs_new_producer
from chronos.types import Headers, KafkaConfig

#: Called with (error or None, the confluent Message or None).
DeliveryCallback = Callable[[KafkaError | None, Any], None]

_librdkafka_log = logging.getLogger("librdkafka")
log = structlog.get_logger(__name__)
#: Seconds between two log lines of the same client error (see Delivery._on_client_error).
ERROR_LOG_INTERVAL_S = 10.0
#: Fewest seconds between two replacements of a producer (see Delivery.note_error).
RENEW_INTERVAL_S = 5.0


class Delivery:
    """An idempotent producer with its own poll thread, so callbacks run without help.

    ``send`` never raises for a record: synchronous refusals (record too large, bad topic)
    are reported through the callback like asynchronous ones, so callers have one path.

    A producer the broker will not take records from again (fenced, a fatal idempotence error;
    see ``needs_new_producer``) is replaced by a new one on the poll thread: callers report the
    errors they get (:meth:`note_error`); the old producer's queued and in-flight records are
    purged, so their callbacks report ``_PURGE_*`` errors, which callers retry like an outage.

    Parameters:
        config: librdkafka producer config (see ``KafkaSettings.producer``).
        name: component name for logs.
    """

    def __init__(self, config: KafkaConfig, name: str = "delivery") -> None:
        self.name = name
        self._config: dict[str, Any] = {
            **config,
            "logger": _librdkafka_log,
            "error_cb": self._on_client_error,
        }
        self._producer = Producer(self._config)
        #: Replaced producers, polled until their purged records have reported back.
        self._retiring: list[Producer] = []
        #: Why the producer must be replaced (set by any thread, acted on by the poll thread).
        self._renew_reason: str | None = None
        self._renewed_at = -RENEW_INTERVAL_S
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll_loop, name=name, daemon=True)
        self._flush_timeout_s = 30.0
        #: Per distinct client error: when it was last logged and how often it came since.
        self._errors_seen: dict[str, tuple[float, int]] = {}
        #: Set when no replacement producer could be created: this Delivery can never deliver
        #: again (a fatal error of librdkafka's only leads to a replacement).
        self.fatal_error: KafkaError | None = None

    def _on_client_error(self, error: KafkaError) -> None:
        """librdkafka's client-level errors; a fatal one means this producer is done for.

        librdkafka repeats an outage's error every few hundred ms: each distinct error is
        logged once per :data:`ERROR_LOG_INTERVAL_S`, with how often it came meanwhile."""
        if error.fatal():
            log.critical("producer_fatal_error", producer=self.name, error=str(error))
            self.note_error(error)
            return
        text = str(error)
        now = time.monotonic()
        last, repeated = self._errors_seen.get(text, (-ERROR_LOG_INTERVAL_S, 0))
        if now - last < ERROR_LOG_INTERVAL_S:
            self._errors_seen[text] = (last, repeated + 1)
            return
        self._errors_seen[text] = (now, 0)
        log.warning("producer_error", producer=self.name, error=text, repeated=repeated)

    def note_error(self, error: KafkaError) -> None:
        """A delivery failed with ``error``: replace the producer when it cannot recover.

        Errors of the records the last replacement purged arrive right after it: one
        replacement per :data:`RENEW_INTERVAL_S` at most."""
        if needs_new_producer(error) and self._renew_reason is None:
            self._renew_reason = describe(error)

    def _renew(self) -> None:
        reason, self._renew_reason = self._renew_reason, None
        if time.monotonic() - self._renewed_at < RENEW_INTERVAL_S:
            return
        self._renewed_at = time.monotonic()
        old = self._producer
        try:
            self._producer = Producer(self._config)
        except KafkaException as exc:
            self.fatal_error = exc.args[0]
            log.critical("producer_not_replaced", producer=self.name, error=str(exc))
            return
        log.warning("producer_replaced", producer=self.name, reason=reason, purged=len(old))
        old.purge()  # queued and in-flight records report _PURGE_* and are retried by callers
        self._retiring.append(old)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Flush what is in flight (callbacks run), then stop polling."""
        self.flush(self._flush_timeout_s)
        self._stop.set()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def _poll_loop(self) -> None:
        while not self._stop.is_set():
            try:
                if self._renew_reason is not None:
                    self._renew()
                if self._retiring:
                    self._poll_retiring()
                self._producer.poll(0.05)
            except Exception:
                # confluent-kafka re-raises callback exceptions here; the thread must live on or
                # no acknowledgement would ever arrive again.
                log.exception("delivery_callback_failed", producer=self.name)

    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: Headers,
        on_done: DeliveryCallback,
    ) -> None:
        """Produce one record; ``on_done(None, msg)`` after Kafka acknowledged it, else
        ``on_done(error, msg)``. The callback goes to librdkafka as it is: no wrapper object is
        built per record on this hot path."""
        while True:
            try:
                self._producer.produce(
                    topic,
                    value=value,
                    key=key,
                    # Widening only: the stub's list is invariant in its value type, and
                    # produce() just reads it (no cast(): this runs once per record).
                    headers=headers,  # type: ignore[arg-type]
                    on_delivery=on_done,
                )
                return
            except BufferError:
                # librdkafka's queue is full: wait for acknowledgements to make room.
                self._producer.poll(0.01)
            except KafkaException as exc:
                on_done(exc.args[0], None)
                return

    def _poll_retiring(self) -> None:
        for old in list(self._retiring):
            old.poll(0)
            if len(old) == 0:
                self._retiring.remove(old)

    def flush(self, timeout_s: float) -> int:
        """Wait for in-flight records; returns how many are still unacknowledged."""
        for old in list(self._retiring):
            old.flush(0)
        remaining: int = self._producer.flush(timeout_s)
        return remaining + sum(len(old) for old in self._retiring)

    def in_flight(self) -> int:
        """Records handed to librdkafka and not yet acknowledged."""
        return len(self._producer) + sum(len(old) for old in self._retiring)

    def ping(self, timeout_s: float) -> bool:
        """True when the cluster answered a metadata request within ``timeout_s`` and this
        producer can deliver (not waiting to be replaced, not failed for good)."""
        if self._renew_reason is not None or self.fatal_error is not None:
            return False
        try:
            self._producer.list_topics(timeout=timeout_s)
            return True
        except KafkaException:
            return False
