"""Refresh passes: keep every message a store holds in the inner topic, whatever its retention.

Why: a message scheduled further ahead than the inner topic's retention would otherwise live
only in the replicas' stores, and a replaced disk would lose it (docs/rebuild.md).
Once per ``rebuild.refresh_interval_s`` the node that delivers re-appends, in key order, every
message its store holds (pending ones, and delivered ones still inside the idempotency window,
as ``wire.encode_refresh`` records with the slot they are stored at) and every live cancel
tombstone (as a plain cancel). When Kafka acknowledged all of them, the offsets the store had
ingested when the pass began become the rebuild floor (``chronos/schedule/floor.py``).

Costs: one record per held message and tombstone per interval (at the default of a day, a
million pending messages are 12 records a second on average, produced at most
``refresh_rate`` a second), and every replica ingests them (duplicates of what it holds).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

import structlog

from chronos.clock import Clock
from chronos.kafka.acks import Acks
from chronos.kafka.publisher import OwnedPublisher, Publisher
from chronos.lifecycle import LoopWorker
from chronos.metrics import Metrics
from chronos.schedule.floor import Floor, RebuildFloor
from chronos.settings import KafkaValue, RebuildSettings
from chronos.store import codec, keys
from chronos.store.rocks import RocksStore
from chronos.types import Headers
from chronos.wire import encode_cancel, encode_refresh

log = structlog.get_logger(__name__)

#: A refresh pass is bulk and off the delivery path: compressed, in full batches (a pass over
#: 1 M messages of 100 bytes wrote 282 MB uncompressed to the broker).
REFRESH_PRODUCER: dict[str, KafkaValue] = {"compression.type": "lz4", "linger.ms": 50}
_CHUNK = 1_000
#: A tombstone this close to its expiry is not refreshed: its cancel record would outlive it
#: and could cancel an add of the same id accepted after the expiry.
_TOMBSTONE_MARGIN_MS = 60_000
#: After a failed pass, try again this much later.
_RETRY_S = 60.0
#: Longest wait for the acknowledgements of one pass's last records.
_FLUSH_TIMEOUT_S = 60.0
_MAX_KEY = keys.slot_bound(keys.MAX_MS)

#: A scanned row: a key, or a key and its value.
R = TypeVar("R")


class RefreshWorker(LoopWorker):
    """Runs refresh passes while this node delivers (a node alone, or its group's master).

    Parameters:
        store: the store re-appended.
        inner_offsets: the next inner offset per owned partition the store has ingested.
        open_publisher: a new producer for one pass (partitioned by id, as the proxy does;
            compressed: a pass is bulk, off the delivery path), started and stopped by it.
        inner_topic: where refresh records go.
        floor: published floor; the next pass is due a refresh interval after its ``at_ms``.
        settings: interval and rate.
        clock: time source.
        metrics: counters.
        ready: whether the store's slots are the delivering node's own yet (a node alone
            rebuilding its store has not applied its published cut: a refresh written then
            would record slots that cut has not settled).
    """

    def __init__(
        self,
        *,
        store: RocksStore,
        inner_offsets: Callable[[], dict[int, int]],
        open_publisher: Callable[[], OwnedPublisher],
        inner_topic: str,
        floor: RebuildFloor,
        settings: RebuildSettings,
        clock: Clock,
        metrics: Metrics,
        ready: Callable[[], bool] = lambda: True,
    ) -> None:
        super().__init__("refresh")
        self._ready = ready
        self._store = store
        self._inner_offsets = inner_offsets
        self._open_publisher = open_publisher
        self._topic = inner_topic
        self._floor = floor
        self._interval_ms = int(settings.refresh_interval_s * 1000)
        self._rate = settings.refresh_rate
        self._clock = clock
        self._metrics = metrics
        self._retry_at_ms = 0

    def step(self) -> None:
        if not self._ready():
            self._stop.wait(1.0)
            return
        now = self._clock.now_ms()
        current = self._floor.current
        due = max(self._retry_at_ms, 0 if current is None else current.at_ms + self._interval_ms)
        if now < due:
            self._stop.wait(min(1.0, (due - now) / 1000.0))
            return
        try:
            floor = self.run_pass()
        except Exception as exc:  # any failure: the pass is simply tried again later
            log.error("refresh_pass_failed", error=str(exc), retry_in_s=_RETRY_S)
            self._retry_at_ms = now + int(_RETRY_S * 1000)
            return
        if floor is not None:
            self._floor.advance(floor)

    def run_pass(self) -> Floor | None:
        """One pass; the floor it proves, None when stopped before the end. Raises when Kafka
        refused a record or did not acknowledge them in time."""
        started_ms = self._clock.now_ms()
        began = time.monotonic()
        offsets = self._inner_offsets()
        acks = Acks()
        publisher = self._open_publisher()
        publisher.start()
        try:
            counted = RefreshPass(self._store, self._topic, self._rate, self._stop).run(
                publisher, acks, started_ms
            )
            publisher.flush(_FLUSH_TIMEOUT_S)
        finally:
            publisher.stop()
            publisher.join(_FLUSH_TIMEOUT_S)
        if counted is None:
            return None  # a scan ended early: the store was not read whole
        settle(acks)
        messages, tombstones = counted
        self._metrics.incr("refreshed_records", messages + tombstones)
        log.info(
            "refresh_pass_done",
            messages=messages,
            tombstones=tombstones,
            seconds=round(time.monotonic() - began, 3),
            floor=offsets,
        )
        return Floor(offsets, started_ms)


def settle(acks: Acks) -> None:
    """Wait for every record of a pass to be acknowledged; raises when one was refused or
    they were not all acknowledged in time (the pass then proves no floor)."""
    if not acks.wait(_FLUSH_TIMEOUT_S):
        raise RuntimeError(f"{acks.pending} refresh records not acknowledged in time")
    if acks.failure is not None:
        raise RuntimeError(f"Kafka refused a refresh record: {acks.failure}")


class RefreshPass:
    """One pass over one store: every message it holds (pending ones, and delivered ones still
    inside the idempotency window) and every live cancel tombstone, re-appended in key order at
    most ``rate`` records a second (a node's worker, or a cluster member's per partition).

    Parameters:
        store: the store read.
        topic: the inner topic written to (each record partitioned by its id).
        rate: most records a second.
        stop: set to end the pass early (it then proves no floor).
        cancelled: also ends it early when true, checked between chunks (a cluster member's
            lane handed over meanwhile: its successor refreshes the partition).
    """

    def __init__(
        self,
        store: RocksStore,
        topic: str,
        rate: int,
        stop: threading.Event,
        cancelled: Callable[[], bool] = lambda: False,
    ) -> None:
        self._store = store
        self._topic = topic
        self._rate = rate
        self._stop = stop
        self._cancelled = cancelled

    def _ended(self) -> bool:
        return self._stop.is_set() or self._cancelled()

    def run(self, publisher: Publisher, acks: Acks, started_ms: int) -> tuple[int, int] | None:
        """Produce the pass through ``publisher``, each record counted in ``acks``; the
        messages and tombstones it sent, None when stopped before the end."""
        messages = self._refresh_messages(publisher, acks)
        tombstones = self._refresh_tombstones(publisher, acks, started_ms)
        return None if self._ended() else (messages, tombstones)

    def _refresh_messages(self, publisher: Publisher, acks: Acks) -> int:
        count = 0
        for rows in self._paced(acks, b"", self._scan_messages, lambda row: row[0]):
            ids = [keys.split_message_key(key)[1] for key, _ in rows]
            for (key, raw), state in zip(rows, self._store.get_index(ids), strict=True):
                # An earlier occurrence of a repeat stays until purged; its id has moved on.
                if state == keys.index_pending(key):
                    record_key, value, headers = encode_refresh(
                        codec.decode(raw), keys.slot_of(key)
                    )
                    self._send(publisher, acks, record_key, value, headers)
                    count += 1
        return count

    def _refresh_tombstones(self, publisher: Publisher, acks: Acks, now_ms: int) -> int:
        count = 0
        start = keys.slot_bound(now_ms + _TOMBSTONE_MARGIN_MS)
        for rows in self._paced(acks, start, self._scan_expiry, lambda key: key):
            ids = [key[keys.MS_WIDTH :].decode() for key in rows]
            for message_id, state in zip(ids, self._store.get_index(ids), strict=True):
                if keys.is_cancelled(state):
                    self._send(publisher, acks, *encode_cancel(message_id))
                    count += 1
        return count

    def _scan_messages(self, start: bytes) -> list[tuple[bytes, bytes]]:
        return self._store.scan(start, _MAX_KEY, _CHUNK)

    def _scan_expiry(self, start: bytes) -> list[bytes]:
        return self._store.scan_expiry(_MAX_KEY, _CHUNK, start)

    def _paced(
        self,
        acks: Acks,
        start: bytes,
        read: Callable[[bytes], Sequence[R]],
        key_of: Callable[[R], bytes],
    ) -> Iterator[Sequence[R]]:
        """The chunks ``read`` returns from ``start`` on, in key order, each one after the
        previous one's records were paced (``_pace``); ends early once stopping (then the pass
        proves no floor)."""
        pace = _Pace(self._rate)
        while rows := read(start):
            yield rows
            if not self._pace(pace, acks, len(rows)):
                return
            start = key_of(rows[-1]) + b"\x00"

    def _send(
        self, publisher: Publisher, acks: Acks, key: bytes, value: bytes | None, headers: Headers
    ) -> None:
        acks.sent()
        publisher.publish(self._topic, key, value, headers, acks.done)

    def _pace(self, pace: _Pace, acks: Acks, sent: int) -> bool:
        """Hold the pass to ``rate`` and a bounded number of records in flight; False once
        stopping."""
        if self._ended():
            return False
        self._stop.wait(pace.wait_after(sent))
        acks.wait(_FLUSH_TIMEOUT_S, below=10 * _CHUNK)
        return not self._ended()


class _Pace:
    """When the next chunk may go, at ``rate`` records a second from the first one: the time
    spent producing counts (a sleep per chunk on top of it held 1 M records to 13,298 a
    second at a rate of 20,000)."""

    def __init__(self, rate: int) -> None:
        self._rate = rate
        self._due = time.monotonic()

    def wait_after(self, sent: int) -> float:
        """Seconds to wait once ``sent`` more records went out."""
        self._due += sent / self._rate
        return max(0.0, self._due - time.monotonic())
