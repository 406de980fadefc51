"""Progress: which dispatched jobs Kafka acknowledged, and how far the seek timestamp may move."""

from __future__ import annotations

import threading
from collections import deque

from chronos.model import DelayMessage
from chronos.node.component import LoopWorker
from chronos.node.job import DeliveryJob
from chronos.node.ledger import Ledger
from chronos.store import keys
from chronos.types import EpochMs

_IDLE_WAIT_S = 1.0


class ProgressTracker:
    """Jobs in dispatch order (which is key order); the seek may pass only acknowledged ones.

    Parameters:
        start_ms: the persisted seek timestamp.
    """

    def __init__(self, start_ms: EpochMs) -> None:
        self._lock = threading.Lock()
        self._jobs: deque[DeliveryJob] = deque()
        self._scanned = start_ms
        self._changed = threading.Event()

    def dispatched(self, jobs: list[DeliveryJob]) -> None:
        """Jobs handed to the senders, in key order, before any of them can complete."""
        with self._lock:
            self._jobs.extend(jobs)

    def completed(self, job: DeliveryJob) -> None:
        """Kafka acknowledged the job (on its target or the dead-letter topic)."""
        job.done = True
        # Only key and follow-up are needed from here on: drop the payload so jobs held behind
        # a slow one cost little memory.
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

    def collect(self) -> tuple[EpochMs, list[tuple[bytes, DelayMessage]]]:
        """The seek candidate and the follow-ups of the acknowledged prefix of jobs."""
        followups: list[tuple[bytes, DelayMessage]] = []
        with self._lock:
            jobs = self._jobs
            while jobs and jobs[0].done:
                job = jobs.popleft()
                if job.followup is not None:
                    followups.append((job.key, job.followup))
            seek = self._scanned if not jobs else min(self._scanned, keys.slot_of(jobs[0].key) - 1)
        return seek, followups


class ProgressWorker(LoopWorker):
    """Persists the seek timestamp (with repeat follow-ups) as acknowledgements come in.

    Parameters:
        tracker: where acknowledgements are collected.
        ledger: writes seek and follow-ups atomically.
        interval_ms: how often to collect.
    """

    def __init__(self, tracker: ProgressTracker, ledger: Ledger, interval_ms: int) -> None:
        super().__init__("progress")
        self._tracker = tracker
        self._ledger = ledger
        self._interval_s = interval_ms / 1000.0
        # Follow-ups collected but not yet written survive a failed write and are retried.
        self._unwritten: list[tuple[bytes, DelayMessage]] = []

    def step(self) -> None:
        # Sleep while nothing happens (an idle node stays idle); once something did, wait the
        # interval so one write covers many acknowledgements.
        if self._tracker.wait_for_change(_IDLE_WAIT_S):
            self._stop.wait(self._interval_s)
            self.commit()

    def stop(self) -> None:
        super().stop()
        self._tracker.wake()

    def finish(self) -> None:
        self.commit()

    def commit(self) -> None:
        """Collect and persist once."""
        seek, followups = self._tracker.collect()
        self._unwritten += followups
        if self._unwritten or seek > self._ledger.seek_ms:
            self._ledger.commit_progress(seek, self._unwritten)
            self._unwritten = []
