"""A cluster member's delete worker: one thread for every hosted partition's schedule.

A node alone or a replica runs one ``DeleteWorker`` over its one schedule; a member of the
node shape hosts many, and a thread each would make its cost follow its partitions. This runs
each hosted partition's pass (``DeleteWorker.run_once``: delivered data behind the seek and
the retention window, expired cancel tombstones) one after the other, every
``delete.interval_s``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping

from chronos.lifecycle import LoopWorker
from chronos.node.delete import DeleteWorker
from chronos.schedule.ledger import Ledger
from chronos.settings import DeleteSettings


class MemberDeleter(LoopWorker):
    """Every ``settings.interval_s``, one delete pass over each hosted partition.

    Parameters:
        ledgers: the hosted partitions' ledgers now (asked at each pass, under ``lock``: the
            set changes).
        settings: interval and retention.
        lock: held during a pass (the member drops a partition under it).
    """

    def __init__(
        self,
        ledgers: Callable[[], Mapping[int, Ledger]],
        settings: DeleteSettings,
        lock: threading.Lock | None = None,
    ):
        super().__init__("delete")
        self._lock = lock or threading.Lock()
        self._ledgers = ledgers
        self._settings = settings
        self._passes: dict[int, tuple[Ledger, DeleteWorker]] = {}
        self._next_pass = time.monotonic() + settings.interval_s

    def step(self) -> None:
        if self._stop.wait(max(0.0, self._next_pass - time.monotonic())):
            return
        self._next_pass = time.monotonic() + self._settings.interval_s
        self.run_once()

    def run_once(self) -> None:
        """One pass over every hosted partition (also used by tests)."""
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
                    return
                known = self._passes.get(partition)
                if known is None:
                    # Never started: its pass is run from this thread.
                    known = self._passes[partition] = (ledger, DeleteWorker(ledger, self._settings))
                known[1].run_once()
