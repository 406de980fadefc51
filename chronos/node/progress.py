"""Progress: which dispatched jobs Kafka acknowledged, and how far the seek timestamp may move."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

import structlog

from chronos.clock import Clock
from chronos.delivery.job import DeliveryJob
from chronos.lifecycle import LoopWorker
from chronos.metrics import Metrics, NullMetrics
from chronos.model import DelayMessage
from chronos.schedule.ledger import Ledger
from chronos.store import keys, outcome
from chronos.types import EpochMs

log = structlog.get_logger(__name__)
_IDLE_WAIT_S = 1.0


class ProgressTracker:
    """Jobs in dispatch order (which is key order); the seek may pass only acknowledged ones.

    Acknowledged jobs only mark themselves done (see ``DeliveryJob``); counting them and
    sampling their lateness happens here, once per collected prefix instead of once per record.

    Parameters:
        start_ms: the persisted seek timestamp.
        metrics: where ``delivered`` and ``ack_lateness_ms`` go.
        clock: time source for the lateness sample.
    """

    def __init__(
        self,
        start_ms: EpochMs,
        metrics: Metrics | None = None,
        clock: Clock | None = None,
        keep_outcomes: bool = False,
    ) -> None:
        #: Record where each acknowledged job went (``store/outcome.py``; the status lookup).
        self.keep_outcomes = keep_outcomes
        self._outcomes: list[tuple[bytes, bytes]] = []
        self._metrics = metrics or NullMetrics()
        self._clock = clock
        self._lock = threading.Lock()
        self._jobs: deque[DeliveryJob] = deque()
        self._scanned = start_ms
        #: Key of the last job of the acknowledged prefix (jobs are dispatched in key order).
        self._last_done: bytes | None = None
        self._changed = threading.Event()
        #: Monotonic time since which the progress could not be persisted, None while it can.
        self.persist_failing_since: float | None = None

    def dispatched(self, jobs: list[DeliveryJob]) -> None:
        """Jobs handed to the senders, in key order, before any of them can complete."""
        with self._lock:
            self._jobs.extend(jobs)
        if not self._changed.is_set():
            self._changed.set()  # the progress worker polls while jobs are in flight

    def completed(self, job: DeliveryJob) -> None:
        """Kafka acknowledged the job on the dead-letter topic (or, in tests, anywhere)."""
        job.done = True
        # Only key and follow-up are needed from here on: drop the payload so jobs held behind
        # a slow one cost little memory.
        if job.message is not None:
            job.occurrence = job.message.occurrence
        job.message = None
        job.raw = None
        if not self._changed.is_set():  # a lock-free read spares a lock per acknowledgement
            self._changed.set()

    def scanned_through(self, ms: EpochMs) -> None:
        """Every message with slot <= ``ms`` has been dispatched."""
        with self._lock:
            if ms > self._scanned:
                self._scanned = ms
                self._changed.set()

    def wake(self) -> None:
        """Wake a waiting progress worker (shutdown)."""
        self._changed.set()

    def wait_for_change(self, timeout_s: float) -> bool:
        """Block until a job completed or the scan moved on (or the timeout); resets the flag."""
        changed = self._changed.wait(timeout_s)
        self._changed.clear()
        return changed

    def in_flight(self) -> int:
        """Jobs dispatched and not yet collected."""
        return len(self._jobs)

    def collect(self) -> tuple[EpochMs, bytes | None, list[tuple[bytes, DelayMessage]]]:
        """The seek candidate, the cursor past it (the last acknowledged key when its slot is
        only partly acknowledged, see ``Ledger.cursor``) and the follow-ups of the
        acknowledged prefix of jobs."""
        followups: list[tuple[bytes, DelayMessage]] = []
        delivered = 0
        oldest_due: EpochMs | None = None
        outcomes = self._outcomes if self.keep_outcomes else None
        one_shots: list[outcome.BlockEntry] = []
        now = self._clock.now_ms() if self._clock is not None else 0
        with self._lock:
            jobs = self._jobs
            while jobs and jobs[0].done:
                job = jobs.popleft()
                # Produced and not dead-lettered (a superseded repeat is done without an attempt).
                if job.attempts > 0 and job.dead_reason is None:
                    delivered += 1
                    if oldest_due is None:
                        oldest_due = job.lateness_base_ms
                    if outcomes is None:
                        pass
                    elif job.followup is None and job.occurrence == 1:
                        one_shots.append((job.key, job.partition, job.offset))
                    else:  # a repeat: its index moves on, its outcome is kept by id
                        outcomes.append(
                            (
                                job.key[keys.MS_WIDTH :],
                                outcome.delivered(now, job.partition, job.offset, job.occurrence),
                            )
                        )
                elif outcomes is not None and job.dead_reason is not None:
                    outcomes.append(
                        (
                            job.key[keys.MS_WIDTH :],
                            outcome.dead_lettered(now, job.occurrence, job.dead_reason),
                        )
                    )
                if job.followup is not None:
                    followups.append((job.key, job.followup))
                self._last_done = job.key
            seek = self._scanned if not jobs else min(self._scanned, keys.slot_of(jobs[0].key) - 1)
            last = self._last_done
            cursor = last if last is not None and keys.slot_of(last) > seek else None
            if one_shots and outcomes is not None:
                outcomes += outcome.blocks(now, one_shots)
        if delivered:
            self._metrics.incr("delivered", delivered)
        if oldest_due is not None and self._clock is not None:
            # Due -> collected, an upper bound of due -> acknowledged (by the collect interval).
            self._metrics.observe("ack_lateness_ms", now - oldest_due)
        return seek, cursor, followups

    def take_outcomes(self) -> list[tuple[bytes, bytes]]:
        """Outcomes of the jobs collected so far (raw id, ``store/outcome.py`` value); empty
        unless ``keep_outcomes``."""
        with self._lock:
            taken, self._outcomes = self._outcomes, []
        return taken


class ProgressWorker(LoopWorker):
    """Persists the seek timestamp (with repeat follow-ups) as acknowledgements come in.

    Parameters:
        tracker: where acknowledgements are collected.
        ledger: writes seek and follow-ups atomically.
        interval_ms: how often to collect.
        on_committed: told the next occurrences (and slots) each commit wrote.
    """

    def __init__(
        self,
        tracker: ProgressTracker,
        ledger: Ledger,
        interval_ms: int,
        on_committed: Callable[[list[tuple[DelayMessage, EpochMs]]], None] | None = None,
    ) -> None:
        super().__init__("progress")
        self._tracker = tracker
        self._ledger = ledger
        self._on_committed = on_committed
        self._interval_s = interval_ms / 1000.0
        # Follow-ups collected but not yet written survive a failed write and are retried.
        self._unwritten: list[tuple[bytes, DelayMessage]] = []
        self._outcomes: list[tuple[bytes, bytes]] = []

    def step(self) -> None:
        # Sleep while nothing is in flight (an idle node stays idle); otherwise collect every
        # interval, so one write covers many acknowledgements (acks do not wake this thread:
        # a wake-up per record would cost more than the poll).
        # A failed write is retried every interval even then: delivery waits for it (a full
        # disk freed must resume it without any new acknowledgement).
        idle = self._tracker.in_flight() == 0 and not self._unwritten
        if idle and self._tracker.persist_failing_since is None:
            if not self._tracker.wait_for_change(_IDLE_WAIT_S):
                return
        self._stop.wait(self._interval_s)
        self.commit()

    def stop(self) -> None:
        super().stop()
        self._tracker.wake()

    def finish(self) -> None:
        self.commit()

    def commit(self) -> None:
        """Collect and persist once. A failed write (a full disk) is kept to retry and marks
        the tracker, so the push worker can pause instead of delivering what a restart would
        deliver again."""
        seek, cursor, followups = self._tracker.collect()
        self._unwritten += followups
        self._outcomes += self._tracker.take_outcomes()
        failing = self._tracker.persist_failing_since is not None
        ledger = self._ledger
        changed = seek > ledger.seek_ms or cursor != ledger.cursor
        if self._unwritten or self._outcomes or changed or failing:
            try:
                written = ledger.commit_progress(
                    seek, self._unwritten, cursor, rewrite=failing, outcomes=self._outcomes
                )
                # Ingest syncs the WAL while it writes; an idle ingest must not leave the seek
                # unsynced (a power cut would then re-deliver more than the last interval).
                self._ledger.sync_if_due()
            except Exception as exc:
                tracker = self._tracker
                if tracker.persist_failing_since is None:
                    tracker.persist_failing_since = time.monotonic()
                    log.error("progress_not_persisted", error=str(exc), seek_ms=seek)
                return  # logged once; tried again every interval until it works
            self._unwritten = []
            self._outcomes = []
            if written and self._on_committed is not None:
                self._on_committed(written)
        if self._tracker.persist_failing_since is not None:
            log.info("progress_persisted_again", seek_ms=self._ledger.seek_ms)
            self._tracker.persist_failing_since = None
