"""Ingest: write decoded batches of the inner topic, with their offsets, to the store."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

import structlog

from chronos.clock import Clock
from chronos.delivery.deadletter import DeadLetters
from chronos.lifecycle import LoopWorker
from chronos.metrics import Metrics
from chronos.model import DecodedRequest
from chronos.node.inner_reader import BatchSource, DecodedBatch
from chronos.node.watermark import IngestWatermark
from chronos.schedule.ledger import ApplyOutcome
from chronos.store.disk_guard import StoreFull

log = structlog.get_logger(__name__)

_DEAD_LETTER_TIMEOUT_S = 30.0
#: How often a batch the full disk refused is tried again.
_DISK_RETRY_S = 0.02


class IngestTarget(Protocol):
    """Where an ingest writes: a ``Ledger`` (one schedule), or ``PartitionLedgers`` (one
    schedule per inner partition, ``schedule/partition_ledgers.py``)."""

    def inner_offsets(self, partitions: list[int]) -> dict[int, int]: ...

    def apply_decoded(
        self,
        items: Sequence[DecodedRequest],
        offsets: Mapping[int, int] | None = None,
        origins: Sequence[tuple[int, int]] | None = None,
    ) -> ApplyOutcome: ...

    def sync(self) -> None: ...

    def sync_if_due(self) -> bool: ...


class IngestWorker(LoopWorker):
    """One ingest thread: applies what its source reads from a fixed share of the inner topic.

    The source consumes and decodes (in this thread or in a child process, see
    ``inner_reader``); this thread writes. The store keeps the next offset of every partition
    in the same write batch as the records before it, and reading resumes from there: a crash
    or a failed write replays, never skips, and a new store reads the topic from its beginning.
    Offsets are also offered to the node's group once fsynced, for lag monitoring only.

    Parameters:
        index: thread number.
        partitions: the inner partitions this worker owns.
        open_source: builds a new, unopened source for these partitions.
        ledger: applies decoded requests (one schedule, or one per partition).
        dead_letters: where undecodable records go.
        clock: time source, for the ingest lag.
        poll_timeout_ms: how long one read waits.
        metrics: counters.
        on_fatal: told when Kafka refuses chronos reading the inner topic (the node ends).
        watermark: told what each batch read holds and how far each partition is applied
            (the cancel gate, ``node/watermark.py``).
    """

    def __init__(
        self,
        *,
        index: int,
        partitions: list[int],
        open_source: Callable[[], BatchSource],
        ledger: IngestTarget,
        dead_letters: DeadLetters,
        clock: Clock,
        poll_timeout_ms: int,
        metrics: Metrics,
        on_fatal: Callable[[str], None] | None = None,
        watermark: IngestWatermark | None = None,
    ) -> None:
        super().__init__(f"ingest-{index}")
        self._watermark = watermark
        self._partitions = partitions
        self._new_source = open_source
        self._ledger = ledger
        self._dead = dead_letters
        self._clock = clock
        self._timeout_s = poll_timeout_ms / 1000.0
        self._metrics = metrics
        self._on_fatal = on_fatal
        self._source: BatchSource | None = None
        #: Set once this worker has applied its partitions up to their end offsets as of its
        #: start: the push worker waits for it after a restart, so cancels that Kafka accepted
        #: before a crash are applied before anything is delivered.
        self.caught_up = threading.Event()
        self._catch_up_targets: dict[int, int] = {}
        #: Next offsets applied but not yet known to be fsynced (then offered to the group).
        self._unsynced: dict[int, int] = {}
        #: Sources of dead letters acknowledged since the last stored batch (see ingest()).
        self._dead_lettered: set[str] = set()
        #: A decoded batch the store refused for lack of disk space: applied before reading on.
        self._held: DecodedBatch | None = None
        self._disk_full_since: float | None = None

    def _open(self) -> BatchSource:
        """The source, (re)started at the offsets the store holds."""
        if self._source is None:
            source = self._new_source()
            stored = self._ledger.inner_offsets(self._partitions)
            targets = source.open(stored)
            if not self.caught_up.is_set():
                self._catch_up_targets = targets
            log.info("ingest_assigned", worker=self.name, resume_at=stored, catch_up=targets)
            self._source = source
            self._check_caught_up({})
        return self._source

    def _check_caught_up(self, reached: dict[int, int]) -> None:
        for partition, offset in reached.items():
            if self._catch_up_targets.get(partition, offset + 1) <= offset:
                del self._catch_up_targets[partition]
        if not self._catch_up_targets and not self.caught_up.is_set():
            log.info("ingest_caught_up", worker=self.name)
            self.caught_up.set()

    def step(self) -> None:
        source = self._open()
        batch = self._held
        try:
            if batch is not None:
                self._held = None
                self.ingest(source, batch)
                self._disk_writable_again()
                return
            batch = source.read(self._timeout_s)
            if batch.empty:
                if batch.positions and self._watermark is not None:
                    self._watermark.applied(batch.positions)
                if not self.caught_up.is_set():
                    # By position: it also moves past transaction markers.
                    self._check_caught_up(batch.positions)
                if self._unsynced and self._ledger.sync_if_due():
                    self._commit_synced(source)
                return
            self.ingest(source, batch)
        except StoreFull as exc:
            # Kept, not read again: the disk fills and frees without a source restart (a
            # decoder process each time) or a growing error backoff.
            self._held = batch
            if self._disk_full_since is None:
                self._disk_full_since = time.monotonic()
                log.error("ingest_paused", worker=self.name, reason=str(exc))
            self._stop.wait(_DISK_RETRY_S)
        except Exception:
            # The source has already moved past what failed: start it again where the store
            # stands, or the next batch's offsets would cover (and so skip) those records.
            self._restart_source()
            raise

    def _disk_writable_again(self) -> None:
        if self._disk_full_since is not None:
            paused_s = round(time.monotonic() - self._disk_full_since, 2)
            log.info("ingest_resumed", worker=self.name, paused_s=paused_s)
            self._disk_full_since = None

    def _restart_source(self) -> None:
        source, self._source = self._source, None
        if source is not None:
            try:
                source.close()
            except Exception:
                log.exception("ingest_source_close_failed", worker=self.name)
        log.warning("ingest_source_restarted", worker=self.name)

    def ingest(self, source: BatchSource, batch: DecodedBatch) -> None:
        """Apply one decoded batch: dead letters first, then the store with the offsets."""
        for error in batch.errors:
            log.warning("ingest_consumer_error", error=error)
        if batch.not_authorized is not None and self._on_fatal is not None:
            self._on_fatal(f"Kafka refused reading the inner topic: {batch.not_authorized}")
        if batch.gap is not None and self._on_fatal is not None:
            # Going on would leave the store without what those records said (a cancel):
            # a restart clears the store and rebuilds it from the topic and the floor.
            self._on_fatal(
                f"inner records were removed before this node read them ({batch.gap}): "
                "restart it to rebuild its store from Kafka"
            )
        for _key, _value, _headers, reason, origin in batch.rejected:
            self._metrics.incr("inner_rejected")
            log.warning("inner_record_rejected", origin=origin, reason=reason)
        # One lag sample per batch (its oldest record), not one per record: cheap under load.
        if batch.oldest_ms is not None:
            self._metrics.observe("ingest_lag_ms", self._clock.now_ms() - batch.oldest_ms)
        # Dead letters are acknowledged before the offsets that pass them are stored. Those
        # acknowledged are remembered until then: a batch read again sends only the rest.
        dead = self._dead_lettered
        if self._watermark is not None:
            # Read: without a cancel or reschedule in it, nothing waits for the write.
            self._watermark.read(batch.offsets, batch.appended, batch.hazard)
        if not self._dead.send_and_wait(batch.rejected, _DEAD_LETTER_TIMEOUT_S, dead):
            raise RuntimeError("dead-letter topic did not acknowledge rejected inner records")
        outcome = self._ledger.apply_decoded(batch.items, batch.offsets, batch.origins)
        dead.clear()
        self._count(outcome)
        if self._watermark is not None:
            # Applied and visible to the push scan: cancels in it now hold.
            self._watermark.applied(batch.offsets, batch.appended)
            if batch.positions:
                self._watermark.applied(batch.positions)
        if not self.caught_up.is_set():
            # Positions (from an idle read merged in) come after the records: they win.
            self._check_caught_up(batch.offsets | batch.positions)
        self._unsynced.update(batch.offsets)
        if self._ledger.sync_if_due():
            self._commit_synced(source)

    def _commit_synced(self, source: BatchSource) -> None:
        """Offer the group the offsets of what is now fsynced (advisory: for lag monitoring)."""
        source.store_offsets(dict(self._unsynced))
        self._unsynced.clear()

    def _count(self, outcome: ApplyOutcome) -> None:
        for name in (
            "added",
            "duplicates",
            "cancelled",
            "cancel_raced",
            "cancel_too_late",
            "cancel_unknown",
            "late",
            "refreshed",
            "rescheduled",
            "reschedule_too_late",
            "reschedule_unknown",
            "reschedule_deferred",
        ):
            amount = getattr(outcome, name)
            if amount:
                self._metrics.incr("ingested" if name == "added" else name, amount)

    def finish(self) -> None:
        source, self._source = self._source, None
        if source is None:
            return
        try:
            if self._unsynced:
                self._ledger.sync()
                self._commit_synced(source)
        finally:
            source.close()  # commits the advisory group offsets; a child must never outlive us
