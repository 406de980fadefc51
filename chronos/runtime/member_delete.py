"""A cluster member's delete worker: one thread for every hosted partition's schedule.

A node alone or a replica runs one ``DeleteWorker`` over its one schedule; a member of the
node shape hosts many, and a thread each would make its cost follow its partitions. This runs
each hosted partition's pass (``DeleteWorker.run_once``: delivered data behind the seek and
the retention window, expired cancel tombstones) one after the other, every
``delete.interval_s``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from chronos.lifecycle import LoopWorker
from chronos.node.delete import DeleteWorker
from chronos.schedule.ledger import Ledger
from chronos.settings import DeleteSettings


class MemberDeleter(LoopWorker):
    """Every ``settings.interval_s``, one delete pass over each hosted partition.

    Parameters:
        ledgers: the hosted partitions' ledgers now (asked at each pass: the set grows).
        settings: interval and retention.
    """

    def __init__(self, ledgers: Callable[[], Mapping[int, Ledger]], settings: DeleteSettings):
        super().__init__("delete")
        self._ledgers = ledgers
        self._settings = settings
        self._passes: dict[int, DeleteWorker] = {}
        self._next_pass = time.monotonic() + settings.interval_s

    def step(self) -> None:
        if self._stop.wait(max(0.0, self._next_pass - time.monotonic())):
            return
        self._next_pass = time.monotonic() + self._settings.interval_s
        self.run_once()

    def run_once(self) -> None:
        """One pass over every hosted partition (also used by tests)."""
        for partition, ledger in sorted(self._ledgers().items()):
            worker = self._passes.get(partition)
            if worker is None:
                # Never started: its pass is run from this thread.
                worker = self._passes[partition] = DeleteWorker(ledger, self._settings)
            if self.stopping:
                return
            worker.run_once()
