"""The delete worker: drops delivered data older than the retention window behind the seek."""

from __future__ import annotations

import threading

import structlog

from chronos.lifecycle import LoopWorker
from chronos.schedule.ledger import Gone, Ledger
from chronos.settings import DeleteSettings

log = structlog.get_logger(__name__)


class DeleteWorker(LoopWorker):
    """Every ``interval_s``: range-delete messages with slot <= seek - retention, compact,
    drop their index entries and expired cancel tombstones.

    Parameters:
        ledger: owns the schedule writes.
        settings: interval and retention.
        on_gone: hears the ids the store forgot (compact mode: ``node/expiry.py``).
        stop: the event that stops this worker, when ``on_gone`` waits on it too.
    """

    def __init__(
        self,
        ledger: Ledger,
        settings: DeleteSettings,
        on_gone: Gone | None = None,
        stop: threading.Event | None = None,
    ) -> None:
        super().__init__("delete", stop=stop)
        self._ledger = ledger
        self._settings = settings
        self._on_gone = on_gone
        self._done_through = -1

    def step(self) -> None:
        if self._stop.wait(self._settings.interval_s):
            return
        self.run_once()

    def run_once(self) -> None:
        """One pass (also used by tests)."""
        cutoff = self._ledger.seek_ms - int(self._settings.retention_s * 1000)
        dropped = 0
        if cutoff > self._done_through:
            dropped = self._ledger.purge_delivered(cutoff, self._on_gone)
            self._done_through = cutoff
        expired = self._ledger.expire_tombstones(self._on_gone)
        if dropped or expired:
            log.info("delete_pass", dropped=dropped, tombstones_expired=expired, cutoff_ms=cutoff)
