"""Watching target topics: what was delivered, when, and how late (demo, tail, e2e checks)."""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from chronos.types import Headers
from chronos.wire import H_DUE, H_ID, H_OCCURRENCE, H_SKIPPED

#: Deliveries a ``Collected`` keeps between two freezes of the cyclic collector.
FREEZE_EVERY = 10_000


@dataclass(frozen=True, slots=True)
class Delivered:
    """One delivered record. ``produced_ms`` is the record timestamp set by the node's producer,
    so ``lateness_ms`` measures the broker, not this consumer."""

    topic: str
    id: str
    due_ms: int
    occurrence: int
    produced_ms: int
    key: bytes | None
    value: bytes | None
    headers: Headers
    #: Overdue repeat occurrences collapsed into this one (``chronos-skipped``).
    skipped: int = 0
    #: When this consumer received it (epoch ms): visibility, for read_committed readers.
    received_ms: int = 0
    #: Where it was read (what a status lookup says it was delivered to).
    partition: int = -1
    offset: int = -1

    @property
    def lateness_ms(self) -> int:
        return self.produced_ms - self.due_ms


def _header(headers: Headers, name: str) -> bytes | None:
    for key, value in headers:
        if key == name:
            return value
    return None


def topic_partitions(bootstrap: str, topic: str, timeout_s: float = 10.0) -> list[int]:
    """Partition ids of ``topic`` (waits for it to exist)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "chronos-watch"})
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            meta = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
            if meta is not None and meta.partitions and meta.error is None:
                return sorted(meta.partitions)
            if time.monotonic() > deadline:
                raise TimeoutError(f"topic {topic} has no partitions")
            time.sleep(0.2)
    finally:
        consumer.close()


class DeliveryWatcher:
    """Reads target topics from the beginning on a thread, by ``assign`` (no group join wait).

    Parameters:
        bootstrap: Kafka bootstrap servers.
        topics: topics to read (they must exist).
        on_delivered: called for every record that carries chronos headers.
        isolation: ``read_committed`` (what a librdkafka consumer does by default) or
            ``read_uncommitted`` (the Java consumer's default: records of aborted
            transactions too).
    """

    def __init__(
        self,
        bootstrap: str,
        topics: list[str],
        on_delivered: Callable[[Delivered], None],
        isolation: str = "read_committed",
    ) -> None:
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "chronos-watch",
                "enable.auto.commit": False,
                "isolation.level": isolation,
            }
        )
        self._consumer.assign(
            [
                TopicPartition(topic, p, OFFSET_BEGINNING)
                for topic in topics
                for p in topic_partitions(bootstrap, topic)
            ]
        )
        self._on_delivered = on_delivered
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="watch", daemon=True)

    def start(self) -> DeliveryWatcher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._consumer.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            # consume() returns after 1,000 records or the timeout, whichever first: a short
            # timeout keeps received_ms close to when the record became readable.
            for record in self._consumer.consume(1000, 0.01):
                if record.error() is not None:
                    continue
                topic = record.topic()
                if topic is None:  # librdkafka sets it on every record without an error
                    continue
                # Consumed records carry headers as a list of (str, bytes | None) pairs; the
                # stub's union also covers the dict/str forms that produce() accepts.
                headers = cast("Headers | None", record.headers()) or []
                raw_id, raw_due = _header(headers, H_ID), _header(headers, H_DUE)
                if raw_id is None or raw_due is None:
                    continue
                occurrence = _header(headers, H_OCCURRENCE) or b"1"
                skipped = _header(headers, H_SKIPPED) or b"0"
                self._on_delivered(
                    Delivered(
                        topic=topic,
                        id=raw_id.decode(),
                        due_ms=int(raw_due),
                        occurrence=int(occurrence),
                        produced_ms=record.timestamp()[1],
                        key=record.key(),
                        value=record.value(),
                        headers=headers,
                        skipped=int(skipped),
                        received_ms=int(time.time() * 1000),
                        partition=_or_unknown(record.partition()),
                        offset=_or_unknown(record.offset()),
                    )
                )


def _or_unknown(number: int | None) -> int:
    return -1 if number is None else number


class Collected:
    """Every delivery a watcher saw, by topic (its ``on_delivered``), for checks to count.

    Every ``FREEZE_EVERY`` deliveries it freezes the process's cyclic collector (``gc.freeze``,
    which costs nothing): what it kept lives to the check's end and is taken out of every
    later collection. Why: a check keeps hundreds of thousands of deliveries, and each full
    collection walked them all while holding the GIL, so the watcher stamped ``received_ms``
    up to 300 ms late in bursts every 10-15 s. Those stalls were most of the p99 lateness a
    check reported: a replica group of two read p99 127 ms with them and 49 ms with the
    collector off (``scripts/cluster_load_cost.py``, 2,000 msg/s)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_topic: dict[str, list[Delivered]] = {}
        self._by_id: dict[str, list[Delivered]] = {}
        self._since_freeze = 0

    def add(self, delivered: Delivered) -> None:
        with self._lock:
            self._by_topic.setdefault(delivered.topic, []).append(delivered)
            self._by_id.setdefault(delivered.id, []).append(delivered)
            self._since_freeze += 1
            if self._since_freeze >= FREEZE_EVERY:
                self._since_freeze = 0
                gc.freeze()

    def of(self, topic: str) -> list[Delivered]:
        """Every copy delivered to ``topic``, in arrival order."""
        with self._lock:
            return list(self._by_topic.get(topic, ()))

    def ids(self, topic: str) -> set[str]:
        return {d.id for d in self.of(topic)}

    def every(self) -> list[Delivered]:
        """Every copy delivered, of every topic."""
        with self._lock:
            return [d for delivered in self._by_topic.values() for d in delivered]

    def by_id(self) -> dict[str, list[Delivered]]:
        """Every copy delivered, by message id (of every topic)."""
        with self._lock:
            return {i: list(delivered) for i, delivered in self._by_id.items()}

    def copies(self, message_id: str) -> list[Delivered]:
        """Every copy of one message delivered, in arrival order."""
        with self._lock:
            return list(self._by_id.get(message_id, ()))


def waited(condition: Callable[[], bool], timeout_s: float, pause_s: float = 0.1) -> bool:
    """Whether ``condition`` came true within ``timeout_s`` (a check's patience)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(pause_s)
    return False


def lateness_summary(delivered: list[Delivered]) -> dict[str, int]:
    """Record timestamp minus due time: count, p50, p99, max, the worst second's p99 (by due
    second, seconds with at least 10 deliveries) and how many were early."""
    from chronos.quantiles import percentile

    if not delivered:
        return {"count": 0}
    late = [d.lateness_ms for d in delivered]
    by_second: dict[int, list[int]] = {}
    for d in delivered:
        by_second.setdefault(d.due_ms // 1000, []).append(d.lateness_ms)
    busy = [percentile(v, 0.99) for v in by_second.values() if len(v) >= 10]
    return {
        "count": len(late),
        "p50_ms": percentile(late, 0.5),
        "p99_ms": percentile(late, 0.99),
        "max_ms": max(late),
        "worst_second_p99_ms": max(busy, default=0),
        "early": sum(1 for x in late if x < 0),
    }
