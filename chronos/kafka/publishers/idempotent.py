"""The idempotent publisher: a node alone's deliveries, dead letters, and every request producer
(proxy, client library, pipeline)."""

from __future__ import annotations

import threading
import time

import structlog
from confluent_kafka import KafkaError, KafkaException, Producer

from chronos.kafka.errors import ErrorKind, classify, describe
from chronos.kafka.librdkafka import ClientErrors, OnFatal, lists_topic, producer
from chronos.kafka.publisher import ANY_PARTITION, DeliveryCallback
from chronos.logs import Throttle
from chronos.threadname import name_this_thread
from chronos.types import Headers, KafkaConfig

log = structlog.get_logger(__name__)
#: Fewest seconds between two replacements of a producer (see ``note_error``).
RENEW_INTERVAL_S = 5.0


class IdempotentPublisher:
    """An idempotent producer with its own poll thread, so callbacks run without help.

    ``publish`` never raises for a record: synchronous refusals (record too large, bad topic)
    are reported through the callback like asynchronous ones, so callers have one path.

    A producer the broker will not take records from again (``ErrorKind.FENCED``: fenced, or a
    fatal idempotence error) is replaced by a new one on the poll thread: callers report the
    errors they get (:meth:`note_error`); the old producer's queued and in-flight records are
    purged, so their callbacks report ``_PURGE_*`` errors, which callers retry like an outage.

    Parameters:
        config: librdkafka producer config (see ``KafkaClients.producer_config``).
        name: component name for logs.
        on_fatal: told when Kafka refuses chronos' credentials (see ``KafkaClients``).
        error_log: the throttle its client error lines share with the process' other clients.
    """

    def __init__(
        self,
        config: KafkaConfig,
        name: str = "publisher",
        on_fatal: OnFatal | None = None,
        error_log: Throttle | None = None,
        stop_flush_s: float = 30.0,
    ) -> None:
        self.name = name
        self._config = config
        self._errors = ClientErrors(name, on_fatal, self.note_error, error_log)
        self._producer = producer(config, self._errors)
        #: Replaced producers, polled until their purged records have reported back.
        self._retiring: list[Producer] = []
        #: Why the producer must be replaced (set by any thread, acted on by the poll thread).
        self._renew_reason: str | None = None
        self._renewed_at = -RENEW_INTERVAL_S
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll_loop, name=name, daemon=True)
        #: How long ``stop`` waits for what is in flight (a user that flushed already: 0).
        self._flush_timeout_s = stop_flush_s
        #: Set when no replacement producer could be created: this publisher can never deliver
        #: again (a fatal error of librdkafka's only leads to a replacement).
        self.fatal_error: KafkaError | None = None

    def note_error(self, error: KafkaError) -> None:
        """A record failed with ``error``: replace the producer when it cannot recover.

        Errors of the records the last replacement purged arrive right after it: one
        replacement per :data:`RENEW_INTERVAL_S` at most."""
        if classify(error) is ErrorKind.FENCED and self._renew_reason is None:
            self._renew_reason = describe(error)

    def _renew(self) -> None:
        reason, self._renew_reason = self._renew_reason, None
        if time.monotonic() - self._renewed_at < RENEW_INTERVAL_S:
            return
        self._renewed_at = time.monotonic()
        old = self._producer
        try:
            self._producer = producer(self._config, self._errors)
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
        # Its stage in the benchmark: this thread runs the delivery callbacks.
        name_this_thread(f"{self.name}-acks")
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
                log.exception("publisher_callback_failed", producer=self.name)

    def publish(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: Headers,
        on_done: DeliveryCallback,
        partition: int = ANY_PARTITION,
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
                    partition=partition,
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

    def topic_exists(self, topic: str, timeout_s: float) -> bool:
        """Whether the broker's metadata has ``topic`` with partitions (KafkaException when it
        does not answer)."""
        return lists_topic(self._producer.list_topics(topic, timeout=timeout_s), topic)

    def partitions(self, topic: str, timeout_s: float) -> int | None:
        """How many partitions ``topic`` has by the broker's metadata; None when it does not
        answer within ``timeout_s`` or has no such topic."""
        try:
            metadata = self._producer.list_topics(topic, timeout=timeout_s)
        except KafkaException:
            return None
        if not lists_topic(metadata, topic):
            return None
        return len(metadata.topics[topic].partitions)

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
