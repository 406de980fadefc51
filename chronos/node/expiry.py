"""Expiry tombstones (compact mode): when an id leaves the delivering node's store, a null
record keyed by it tells Kafka's cleaner to drop the id's earlier records, so a restore reads
about the live state and not every id ever sent (``docs/design/live-state.md``).

Only the node that delivers writes them (a node alone; a group's master), off the delivery
path: the delete worker hands over each chunk it removed, and they go out spread over most of
its interval (``spread``), at most ``rate`` a second. Every node reads them back from the inner
topic: at the rate they were delivered that costs ingest about one record per delivery, while a
pass sent at once (``rate``, 20,000 a second) held a node alone's ingest seconds behind
(``scripts/upkeep_check.py``: p99 5.4 s in the 10 s after a pass began).

A tombstone lost (a failed send, a crash before it went) leaves the id's last record in
the topic: a restore reads it as a message delivered long ago or an expired cancel, its own
delete worker forgets the id again and writes the tombstone then. Nothing is retried.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol

import structlog
from confluent_kafka import KafkaError

from chronos.kafka.partitioner import partition_of
from chronos.kafka.publisher import Publisher
from chronos.metrics import Metrics
from chronos.types import EpochMs
from chronos.wire import encode_expiry

log = structlog.get_logger(__name__)

#: Tombstones produced between two waits of the pacing: small, so that ingest, which reads
#: them back, never meets a burst.
_BATCH = 200

#: The slowest a pass's tombstones go (per second), so a handful is not spread over minutes.
_MIN_RATE = 50.0


def id_partition(owned: list[int], partitions: int) -> Callable[[str], int]:
    """Where an id's records are: a store holds ids of its owned partitions only, so one owned
    partition says it; otherwise the wire format's partitioning by id (murmur2) does."""
    if len(owned) == 1:
        only = owned[0]
        return lambda _message_id: only
    return lambda message_id: partition_of(message_id.encode(), partitions)


class Expiry(Protocol):
    """What a delete pass tells of the ids its store forgot (``DeleteWorker``'s ``on_gone``)."""

    @property
    def writing(self) -> bool:
        """Whether tombstones go out now."""
        ...

    def spread(self, count: int, seconds: float) -> None:
        """The pass about to run forgets at most ``count`` ids, over about ``seconds``."""
        ...

    def __call__(self, gone: list[tuple[str, EpochMs]]) -> None:
        """Ids forgotten, with how each ended."""
        ...


class ExpiryWriter:
    """Hands each id the store forgot to Kafka as an expiry tombstone, while ``delivering``.

    Parameters:
        publisher: produces to a given partition.
        inner_topic: where tombstones go.
        partition: the inner partition of an id (``id_partition``).
        delivering: whether this node delivers now (a backup's store forgets ids too).
        rate: most tombstones a second (``spread`` sets each pass's rate below it).
        metrics: counters ``expiry_tombstones`` and ``expiry_tombstones_failed``.
        stopping: set when the delete worker that calls this is asked to stop; the pacing
            waits on it, so a stop is not held up by a long pass (the rest goes out unpaced).
        monotonic: the clock the pacing plans by (a test's frozen one sees the plan alone).
    """

    def __init__(
        self,
        *,
        publisher: Publisher,
        inner_topic: str,
        partition: Callable[[str], int],
        delivering: Callable[[], bool],
        rate: int,
        metrics: Metrics,
        stopping: threading.Event | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._publisher = publisher
        self._topic = inner_topic
        self._partition = partition
        self._delivering = delivering
        self._rate = rate
        self._metrics = metrics
        self._monotonic = monotonic
        self._due = monotonic()
        self._pass_rate = float(rate)
        self._stopping = threading.Event() if stopping is None else stopping

    @property
    def writing(self) -> bool:
        """Whether tombstones go out now (this node delivers)."""
        return self._delivering()

    def spread(self, count: int, seconds: float) -> None:
        """The next ``count`` ids go out evenly over ``seconds`` (at most ``rate`` a second):
        a delete pass's tombstones at about the rate their ids were delivered."""
        self._pass_rate = min(float(self._rate), max(count / seconds, _MIN_RATE))

    def __call__(self, gone: list[tuple[str, EpochMs]]) -> None:
        if not self.writing:
            return
        self.send(gone, self._partition)

    def send(self, gone: list[tuple[str, EpochMs]], partition: Callable[[str], int]) -> None:
        """Write ``gone``'s tombstones, each to ``partition(id)``, at the pass's pace (whoever
        asks: a member's partitions share one writer and its pace)."""
        for start in range(0, len(gone), _BATCH):
            batch = gone[start : start + _BATCH]
            for message_id, ends in batch:
                key, value, headers = encode_expiry(message_id, max(ends, 0), max(-ends, 0))
                self._publisher.publish(
                    self._topic, key, value, headers, self._done, partition(message_id)
                )
            self._metrics.incr("expiry_tombstones", len(batch))
            self._pace(len(batch))

    def _pace(self, sent: int) -> None:
        """Hold the writer to the pass's rate: the delete worker's thread waits until the
        next batch may go, or until it is asked to stop (the rest then goes unpaced)."""
        now = self._monotonic()
        self._due = max(self._due, now) + sent / self._pass_rate
        self._stopping.wait(self._due - now)

    def _done(self, error: KafkaError | None, _message: object) -> None:
        if error is None:
            return
        self._metrics.incr("expiry_tombstones_failed")
        log.warning("expiry_tombstone_failed", error=str(error))


class PartitionExpiry:
    """One hosted partition's share of a cluster member's ``ExpiryWriter``: its tombstones go to
    that partition (its schedule holds no other's ids), while the member delivers it.

    A member passes over its partitions one after another, so the member spreads the whole
    pass over the writer (``spread`` here does nothing): a spread per partition over the
    whole window would make the passes together last a window per partition. And the pass
    runs under the member's store lock (a partition is dropped under it), which the pacing
    must not hold for most of the window: the ids are held here and sent (``send_held``) once
    the member let go of the lock.
    """

    def __init__(
        self, writer: ExpiryWriter, partition: int, delivering: Callable[[], bool]
    ) -> None:
        self._writer = writer
        self._partition = partition
        self._delivering = delivering
        self._held: list[tuple[str, EpochMs]] = []

    @property
    def writing(self) -> bool:
        """Whether this member delivers the partition now (a standby's copy forgets ids too)."""
        return self._delivering()

    def spread(self, count: int, seconds: float) -> None:
        """Nothing: the member spread its pass over every partition (``MemberDeleter``)."""

    def __call__(self, gone: list[tuple[str, EpochMs]]) -> None:
        if self.writing:
            self._held.extend(gone)

    @property
    def held(self) -> int:
        """Ids held for ``send_held``."""
        return len(self._held)

    def send_held(self) -> int:
        """Send the tombstones of the ids held since the last call, paced; how many."""
        held, self._held = self._held, []
        partition = self._partition
        self._writer.send(held, lambda _message_id: partition)
        return len(held)
