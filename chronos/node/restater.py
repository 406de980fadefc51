"""The restater: sends the outbox's restatements while this node delivers (issue 38).

Every replica notes in its store's outbox the ids whose last inner record stopped stating
their state (``schedule/restatement.py``); only the node that delivers sends them, each to the
inner partition its id came from, with what the store holds when it sends. An entry stays until
a restatement of its id is read back from the inner topic (the ledger clears it then), so a
record lost on the way, or a master that dies before sending, leaves it for the next try or the
next master. Sent and not yet read back: not sent again by this node.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import partial

import structlog
from confluent_kafka import KafkaError

from chronos import wire
from chronos.clock import Clock
from chronos.kafka.publisher import ANY_PARTITION, Publisher
from chronos.lifecycle import LoopWorker
from chronos.schedule import restatement
from chronos.schedule.ledger import Ledger
from chronos.schedule.restatement import Restatement
from chronos.store import codec
from chronos.store.rocks import RocksStore
from chronos.types import Headers

log = structlog.get_logger(__name__)

#: A cancel whose tombstone expires within this is not restated: read back after the expiry,
#: it would cancel a new add of the id that came in between (as refresh passes do).
EXPIRY_MARGIN_MS = 60_000


def encode(found: Restatement) -> tuple[bytes, bytes | None, Headers]:
    """The inner record (key, value, headers) of a restatement."""
    if found.is_cancel:
        return wire.encode_cancel(found.message_id, found.cancelled_ms)
    assert found.value is not None and found.slot_ms is not None
    return wire.encode_refresh(codec.decode(found.value), found.slot_ms)


class Restater(LoopWorker):
    """Sends what the outbox holds, every ``interval_s``.

    Parameters:
        store: where the outbox is.
        ledger: drops entries whose id the store no longer holds.
        publisher: the producer for restatements (started and stopped by its owner).
        inner_topic: where they go.
        clock: time source (tombstone expiry).
        tombstone_retention_ms: how long a cancel tombstone is kept.
        interval_s: pause between two looks at the outbox.
        ready: whether the store's slots are the delivering node's own yet (a node alone
            rebuilding its store has not applied its published cut).
    """

    def __init__(
        self,
        *,
        store: RocksStore,
        ledger: Ledger,
        publisher: Publisher,
        inner_topic: str,
        clock: Clock,
        tombstone_retention_ms: int,
        interval_s: float = 0.2,
        ready: Callable[[], bool] = lambda: True,
    ) -> None:
        super().__init__("restater")
        self._ready = ready
        self._store = store
        self._ledger = ledger
        self._publisher = publisher
        self._topic = inner_topic
        self._clock = clock
        self._retention_ms = tombstone_retention_ms
        self._interval_s = interval_s
        self._lock = threading.Lock()
        #: Outbox keys sent and not read back yet.
        self._sent: set[bytes] = set()
        self.sent = 0

    def step(self) -> None:
        if self._ready():
            self.send_due()
        self._stop.wait(self._interval_s)

    def send_due(self) -> int:
        """Send every entry not sent yet; how many went out."""
        now = self._clock.now_ms()
        # An id moved by a reschedule no commit carries yet waits: what the store holds of it
        # is this node's decision alone (a restatement read back would make it every
        # replica's, committed or not; issue 59).
        entries = [
            (key, found)
            for key, found in restatement.pending(self._store)
            if found is None or not self._ledger.unpublished(found.message_id)
        ]
        with self._lock:
            self._sent &= {key for key, _ in entries}  # read back: cleared by the ledger
            todo = [(key, found) for key, found in entries if key not in self._sent]
            self._sent.update(key for key, _ in todo)
        sent = 0
        for key, found in todo:
            if found is None or (
                found.is_cancel
                and found.cancelled_ms + self._retention_ms - EXPIRY_MARGIN_MS <= now
            ):
                self._ledger.drop_restatement(key)
                continue
            record_key, value, headers = encode(found)
            done: Callable[[KafkaError | None, object], None] = partial(self._done, key)
            partition = ANY_PARTITION if found.partition is None else found.partition
            self._publisher.publish(self._topic, record_key, value, headers, done, partition)
            sent += 1
        self.sent += sent
        return sent

    def _done(self, key: bytes, error: KafkaError | None, _message: object) -> None:
        if error is None:
            return
        with self._lock:
            self._sent.discard(key)  # sent again at the next look
        log.warning("restatement_failed", error=str(error))
