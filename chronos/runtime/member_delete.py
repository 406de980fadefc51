"""A cluster member's delete worker: one thread for every hosted partition's schedule.

A node alone or a replica runs one ``DeleteWorker`` over its one schedule; a member of the
node shape hosts many, and a thread each would make its cost follow its partitions. This runs
each hosted partition's pass (``DeleteWorker.run_once``: delivered data behind the seek and
the retention window, expired cancel tombstones) one after the other, every
``delete.interval_s``.

In compact mode (``rebuild.mode = "compact"``) each partition the member delivers hands the ids
its pass forgot to one ``ExpiryWriter`` for the member, as a node alone's delete worker does
(``node/expiry.py``): the member spreads its whole pass (every delivered partition's ids) over
the writer's window, so the passes of many partitions together last one window, not one each.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping

from chronos.lifecycle import LoopWorker
from chronos.node.delete import SPREAD, DeleteWorker
from chronos.node.expiry import ExpiryWriter, PartitionExpiry
from chronos.schedule.ledger import Ledger
from chronos.settings import DeleteSettings


class MemberDeleter(LoopWorker):
    """Every ``settings.interval_s``, one delete pass over each hosted partition.

    Parameters:
        ledgers: the hosted partitions' ledgers now (asked at each pass, under ``lock``: the
            set changes).
        settings: interval and retention.
        lock: held during a pass (the member drops a partition under it).
        expiry: compact mode: the member's expiry tombstone writer (None: refresh mode).
        delivering: the partitions the member delivers now (whose tombstones it writes).
        stop: the event that stops this worker, which ``expiry``'s pacing waits on too.
    """

    def __init__(
        self,
        ledgers: Callable[[], Mapping[int, Ledger]],
        settings: DeleteSettings,
        lock: threading.Lock | None = None,
        expiry: ExpiryWriter | None = None,
        delivering: Callable[[], frozenset[int]] = frozenset,
        stop: threading.Event | None = None,
    ):
        super().__init__("delete", stop=stop)
        self._lock = lock or threading.Lock()
        self._ledgers = ledgers
        self._settings = settings
        self._expiry = expiry
        self._delivering = delivering
        self._passes: dict[int, tuple[Ledger, DeleteWorker, PartitionExpiry | None]] = {}
        self._next_pass = time.monotonic() + settings.interval_s

    def step(self) -> None:
        if self._stop.wait(max(0.0, self._next_pass - time.monotonic())):
            return
        self._next_pass = time.monotonic() + self._settings.interval_s
        self.run_once()

    def run_once(self) -> None:
        """One pass over every hosted partition (also used by tests); in compact mode the
        tombstones of what it forgot go out after it, paced, without the store lock."""
        with self._lock:
            hosted = self._ledgers()
            # A partition dropped, or dropped and hosted again (a new schedule): its pass goes.
            self._passes = {
                p: known
                for p, known in self._passes.items()
                if p in hosted and known[0] is hosted[p]
            }
            for partition, ledger in sorted(hosted.items()):
                if self.stopping:
                    break
                known = self._passes.get(partition)
                if known is None:
                    # Never started: its pass is run from this thread.
                    known = self._passes[partition] = self._worker(ledger, partition)
                known[1].run_once()
            shares = [share for _, _, share in self._passes.values() if share is not None]
        if self._expiry is not None:
            # What the pass forgot, known once it ran: spread over one window together.
            held = sum(share.held for share in shares)
            self._expiry.spread(held, self._settings.interval_s * SPREAD)
        for share in shares:
            share.send_held()

    def _worker(
        self, ledger: Ledger, partition: int
    ) -> tuple[Ledger, DeleteWorker, PartitionExpiry | None]:
        if self._expiry is None:
            return ledger, DeleteWorker(ledger, self._settings), None
        share = PartitionExpiry(self._expiry, partition, lambda: partition in self._delivering())
        return ledger, DeleteWorker(ledger, self._settings, share, self._stop), share
