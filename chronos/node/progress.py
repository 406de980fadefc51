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


class ProgressTracker:
    """Jobs in dispatch order (which is key order); the seek may pass only acknowledged ones.

    Parameters:
        start_ms: the persisted seek timestamp.
    """

    def __init__(self, start_ms: EpochMs) -> None:
        self._lock = threading.Lock()
        self._jobs: deque[DeliveryJob] = deque()
        self._scanned = start_ms

    def dispatched(self, jobs: list[DeliveryJob]) -> None:
        """Jobs handed to the senders, in key order, before any of them can complete."""
        with self._lock:
            self._jobs.extend(jobs)

    def completed(self, job: DeliveryJob) -> None:
        """Kafka acknowledged the job (on its target or the dead-letter topic)."""
        job.done = True

    def scanned_through(self, ms: EpochMs) -> None:
        """Every message with slot <= ``ms`` has been dispatched."""
        with self._lock:
            self._scanned = max(self._scanned, ms)

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
        self.commit()
        self._stop.wait(self._interval_s)

    def finish(self) -> None:
        self.commit()

    def commit(self) -> None:
        """Collect and persist once."""
        seek, followups = self._tracker.collect()
        self._unwritten += followups
        if self._unwritten or seek > self._ledger.seek_ms:
            self._ledger.commit_progress(seek, self._unwritten)
            self._unwritten = []
