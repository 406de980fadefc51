"""The push worker: scans the schedule from the frontier up to now into the bounded queue."""

from __future__ import annotations

import queue
import time
from collections.abc import Callable

import structlog

from chronos.clock import Clock
from chronos.delivery.job import CATCH_UP_WINDOW_MS, DeliveryJob, jobs_for
from chronos.lifecycle import LoopWorker
from chronos.metrics import Metrics
from chronos.node.progress import ProgressTracker
from chronos.schedule.cancel_gate import CancelGate
from chronos.schedule.frontier import Frontier
from chronos.schedule.ledger import Ledger
from chronos.store import keys
from chronos.store.rocks import RocksStore
from chronos.types import EpochMs

log = structlog.get_logger(__name__)

#: How long the cancel gate holds a due message before ``delivery_paused`` is logged.
_HELD_LOG_MS = 5_000

# Upper bound on one sleep, so a wall-clock jump is noticed within this many seconds.
_MAX_SLEEP_S = 30.0
# Upper bound on a wait behind a write in progress (its end normally wakes the worker first).
_HELD_BACK_RECHECK_MS = 10

JobQueue = queue.Queue[list[DeliveryJob]]


class PushWorker(LoopWorker):
    """Single scanner of the schedule. Sleeps until the next key is due or ingest wakes it.

    Parameters:
        store: the schedule.
        ledger: index checks for repeat occurrences.
        frontier: moved forward before every scan, which covers slots up to it only
            (see ``frontier.py``).
        tracker: told about every dispatched job and how far the scan got.
        jobs: bounded queue to the senders; a full queue blocks the scan (back-pressure).
        clock: time source.
        batch_max: most jobs per queued batch.
        metrics: counters.
        start_gate: delivery starts once this returns True (ingest caught up after a restart)
            or ``gate_timeout_s`` passed, whichever comes first.
        max_in_flight: most jobs dispatched and not yet collected.
        max_unpersisted_s: pause dispatching once the progress could not be persisted for
            this long (``node.max_unpersisted_s``).
        catch_up_window_ms: how far overdue a repeat occurrence is still delivered on its own
            (``delivery.catch_up_window_s``).
        scan_gap_ms: least time from a scan that dispatched messages to the next scan
            (``delivery.scan_gap_ms``).
        cancel_gate: the last slot that may be delivered at a given now, told the next slot
            waited for (``node/watermark.py``); None: everything due may go.
    """

    def __init__(
        self,
        *,
        store: RocksStore,
        ledger: Ledger,
        frontier: Frontier,
        tracker: ProgressTracker,
        jobs: JobQueue,
        clock: Clock,
        batch_max: int,
        metrics: Metrics,
        start_gate: Callable[[], bool] | None = None,
        gate_timeout_s: float = 60.0,
        max_in_flight: int = 200_000,
        max_unpersisted_s: float = 5.0,
        cancel_gate: CancelGate | None = None,
        catch_up_window_ms: int = CATCH_UP_WINDOW_MS,
        scan_gap_ms: int = 0,
    ) -> None:
        super().__init__("push")
        self._scan_gap_s = scan_gap_ms / 1000.0
        #: When the last scan that dispatched something started (monotonic), None after a
        #: scan that found nothing: a message due after a quiet spell goes out at its slot.
        self._busy_scan_at: float | None = None
        self._catch_up_ms = catch_up_window_ms
        self._cancel_gate = cancel_gate
        self._max_in_flight = max_in_flight
        self._max_unpersisted_s = max_unpersisted_s
        self._paused = False
        #: Whether a due message has waited for the cancel gate past ``_HELD_LOG_MS`` (logged).
        self._gate_paused = False
        # Resume point inside an interrupted scan, so a failed scan never dispatches twice.
        self._cursor = b"" if ledger.cursor is None else ledger.cursor + b"\x00"
        self._gate = start_gate
        self._gate_deadline = time.monotonic() + gate_timeout_s
        self._store = store
        self._ledger = ledger
        self._frontier = frontier
        self._tracker = tracker
        self._jobs = jobs
        self._clock = clock
        self._batch_max = batch_max
        self._metrics = metrics
        self._scanned = ledger.seek_ms

    def stop(self) -> None:
        super().stop()
        self._frontier.stop()

    def step(self) -> None:
        if self._gate is not None:
            if not self._gate() and time.monotonic() < self._gate_deadline:
                self._stop.wait(0.02)
                return
            caught_up = self._gate()
            if not caught_up:
                log.warning("push_started_before_ingest_caught_up")
            log.info("push_started", seek_ms=self._ledger.seek_ms, caught_up=caught_up)
            self._gate = None
            # The gate may have moved the seek (a store rebuilt from Kafka applies its
            # published progress there): everything up to it was delivered.
            self._scanned = max(self._scanned, self._ledger.seek_ms)
        if self._busy_scan_at is not None:
            # While messages keep falling due, a scan per slot (per millisecond) paid a store
            # iterator, a hand-off to a sender and a wake-up of each of them every time;
            # scanning every few milliseconds carries the same messages in fewer, larger
            # batches, each at most the gap later.
            pause = self._busy_scan_at + self._scan_gap_s - time.monotonic()
            if pause > 0 and self._stop.wait(pause):
                return
        next_slot = self.scan_due()
        self._frontier.wait(next_slot, self._clock.now_ms(), _MAX_SLEEP_S)

    def scan_due(self) -> EpochMs | None:
        """Dispatch everything due up to now; returns the next slot waiting, if any."""
        now = self._clock.now_ms()
        cancel_gate = self._cancel_gate
        limit = now if cancel_gate is None else cancel_gate.horizon(now)
        if limit < now:
            self._note_held(limit, now)
        elif self._gate_paused:
            self._tell_held(False, limit, now)
        upto = self._frontier.advance(limit)
        start = max(keys.slot_bound(self._scanned + 1), self._cursor)
        stop = keys.slot_bound(upto + 1)
        started, found = time.monotonic(), False
        while True:
            rows = self._store.scan(start, stop, self._batch_max)
            if not rows:
                break
            jobs = jobs_for(rows, now, self._ledger, self._catch_up_ms)
            found = True
            if not self._put(jobs):
                return None  # stopping: the scan did not complete, the seek will not pass it
            start = self._cursor = rows[-1][0] + b"\x00"
            if len(rows) < self._batch_max:
                break  # the range is exhausted: another scan (a store iterator) finds nothing
        self._scanned = max(self._scanned, upto)
        self._tracker.scanned_through(self._scanned)
        self._busy_scan_at = started if found and self._scan_gap_s else None
        if upto < now:
            # Held back by a write in progress: its end wakes us; look again soon regardless.
            return now + _HELD_BACK_RECHECK_MS
        upcoming = self._store.first_key_from(stop)
        if upcoming is None:
            return None
        slot = keys.slot_of(upcoming)
        if cancel_gate is not None:
            cancel_gate.want(slot)
        return slot

    def _note_held(self, limit: EpochMs, now: EpochMs) -> None:
        """Sample how late the cancel gate makes a message that is due (lateness, not loss),
        and say so once it has held a due message ``_HELD_LOG_MS``: ingest stopped applying
        the inner topic (a full disk, Kafka silent) holds delivery here, before any job
        exists, and was otherwise seen only in a histogram."""
        waiting = self._store.first_key_from(keys.slot_bound(limit + 1))
        if waiting is not None and self._cancel_gate is not None:
            self._cancel_gate.want(keys.slot_of(waiting))
        held = waiting is not None and keys.slot_of(waiting) <= now
        if held:
            assert waiting is not None
            # How late the first held message is made, at most: with no watermark yet (the
            # horizon is 0 after a start whose first probe failed) ``now - limit`` was the
            # epoch, and one such sample made the histogram's max meaningless.
            self._metrics.observe("cancel_gate_held_ms", now - max(limit, keys.slot_of(waiting)))
        self._tell_held(held, limit, now)

    def _tell_held(self, held: bool, limit: EpochMs, now: EpochMs) -> None:
        if held and not self._gate_paused and now - limit >= _HELD_LOG_MS:
            self._gate_paused = True
            log.error(
                "delivery_paused",
                reason="the cancel gate waits for ingest to apply the inner topic (ingest "
                "paused or behind, or Kafka silent)",
                held_ms=now - limit,
            )
        elif not held and self._gate_paused:
            self._gate_paused = False
            log.info("delivery_resumed", reason="the cancel gate caught up")

    def _put(self, jobs: list[DeliveryJob]) -> bool:
        """Hand jobs to the senders; blocks while the queue is full, too much is in flight, or
        the progress has not been persisted for ``max_unpersisted_s`` (a full disk): what is
        delivered meanwhile would all be delivered again after a restart."""
        while not self.stopping and (
            self._tracker.in_flight() >= self._max_in_flight or self._progress_stalled()
        ):
            self._stop.wait(0.01)
        self._tracker.dispatched(jobs)
        while not self.stopping:
            try:
                self._jobs.put(jobs, timeout=0.1)
                self._metrics.incr("dispatched", len(jobs))
                return True
            except queue.Full:
                continue
        return False

    def _progress_stalled(self) -> bool:
        since = self._tracker.persist_failing_since
        stalled = since is not None and time.monotonic() - since > self._max_unpersisted_s
        if stalled != self._paused:
            self._paused = stalled
            if stalled:
                log.error(
                    "delivery_paused",
                    reason="progress not persisted",
                    for_s=round(time.monotonic() - (since or 0.0), 1),
                )
            else:
                log.info("delivery_resumed")
        return stalled
