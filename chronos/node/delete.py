"""The delete worker: drops delivered data older than the retention window behind the seek."""

from __future__ import annotations

import threading
import time

import structlog

from chronos.lifecycle import LoopWorker
from chronos.node.expiry import Expiry
from chronos.schedule.ledger import Ledger
from chronos.settings import DeleteSettings

log = structlog.get_logger(__name__)


#: Share of the interval a pass spreads its expiry tombstones over (the rest is slack, so a
#: pass ends before the next is due).
SPREAD = 0.8


class DeleteWorker(LoopWorker):
    """Every ``interval_s`` (from the start of one pass to the next): range-delete messages
    with slot <= seek - retention, compact, drop their index entries and expired cancel
    tombstones.

    Parameters:
        ledger: owns the schedule writes.
        settings: interval and retention.
        on_gone: hears the ids the store forgot (compact mode: ``node/expiry.py``), told
            before each pass how many there are at most.
        stop: the event that stops this worker, when ``on_gone`` waits on it too.
    """

    def __init__(
        self,
        ledger: Ledger,
        settings: DeleteSettings,
        on_gone: Expiry | None = None,
        stop: threading.Event | None = None,
    ) -> None:
        super().__init__("delete", stop=stop)
        self._ledger = ledger
        self._settings = settings
        self._on_gone = on_gone
        self._done_through = -1
        self._next_pass = time.monotonic() + settings.interval_s

    def step(self) -> None:
        if self._stop.wait(max(0.0, self._next_pass - time.monotonic())):
            return
        self._next_pass = time.monotonic() + self._settings.interval_s
        self.run_once()

    def run_once(self) -> None:
        """One pass (also used by tests)."""
        cutoff = self._ledger.seek_ms - int(self._settings.retention_s * 1000)
        if self._on_gone is not None and self._on_gone.writing:  # a backup sends none
            due = self._ledger.deletes_due(cutoff)
            self._on_gone.spread(due, self._settings.interval_s * SPREAD)
        dropped = 0
        if cutoff > self._done_through:
            dropped = self._ledger.purge_delivered(cutoff, self._on_gone)
            self._done_through = cutoff
        expired = self._ledger.expire_tombstones(self._on_gone)
        if dropped or expired:
            log.info("delete_pass", dropped=dropped, tombstones_expired=expired, cutoff_ms=cutoff)
