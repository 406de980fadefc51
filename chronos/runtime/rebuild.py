"""A node alone whose store starts empty rebuilds it from the inner topic and its published
progress, instead of delivering again everything the topic still holds.

The store is filled as a replica follows (each add at its due time, arrivals recorded); once
ingest caught up, the last published cut is applied as a replica's takeover applies the
committed one (``group/replica.py``): the seek moves to the cut's frontier, repeats move to
their published next occurrence, and adds the cut does not cover that lie behind it move past
it (they may not have been delivered). Then the node places as a node alone again and
delivers. Only after that does the push worker start (its start gate).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import structlog

from chronos.group.placement import ReplicaPlacement, ReplicaStore
from chronos.group.published import Published
from chronos.store import keys
from chronos.store.rocks import RocksStore

log = structlog.get_logger(__name__)


class AloneRebuild:
    """Finishes a node alone's rebuild once ingest caught up (the push worker's start gate).

    Parameters:
        published: the cut and repeat states to apply.
        store: the store (its arrivals are dropped once applied).
        replica_store: applies the cut, relocates, switches to leading.
        placement: the placement used while rebuilding.
        partitions: the inner partitions the node owns.
        compacted: the inner topic is compacted (``rebuild.mode = "compact"``).
    """

    def __init__(
        self,
        published: Published,
        store: RocksStore,
        replica_store: ReplicaStore,
        placement: ReplicaPlacement,
        partitions: list[int],
        compacted: bool = False,
    ) -> None:
        self._published = published
        self._compacted = compacted
        self._store = store
        self._replica_store = replica_store
        self._placement = placement
        self._partitions = partitions
        self._started = time.monotonic()
        self.done = False

    def gate(self, caught_up: Callable[[], bool]) -> Callable[[], bool]:
        """The push worker's start gate: ingest caught up, then the rebuild finished."""

        def ready() -> bool:
            if self.done:
                return True
            if not caught_up():
                return False
            self.finish()
            return True

        return ready

    def finish(self) -> None:
        cut = self._published.cut
        seek = 0 if cut is None else cut.seek_ms
        offsets = {} if cut is None else cut.offsets
        states = list(self._published.repeats.values())
        if self._compacted:
            # A one-shot's state is a reschedule's move, which the restatement of the moved
            # message carries; the state outlives the id (a re-sent id forgotten in between
            # would be taken back to it).
            states = [st for st in states if st.message is None or st.message.repeat is not None]
        self._replica_store.apply_cut(seek, states, {})
        seek = self._replica_store.lead(seek, self._partitions)
        moved = self._replica_store.relocate_uncovered(seek, offsets, self._partitions)
        self._placement.tracks_arrivals = False
        for partition in self._partitions:
            self._store.delete_arrivals(
                keys.arrival_key(partition, 0), keys.arrival_key(partition + 1, 0)
            )
        self.done = True
        log.info(
            "store_rebuilt_from_kafka",
            seek_ms=seek,
            relocated=moved,
            repeats=len(self._published.repeats),
            seconds=round(time.monotonic() - self._started, 3),
        )
