"""Fresh message ids that put a proxy's records in one inner partition at a time.

Why: a record's inner partition is its id's (murmur2 of the id: ``chronos/wire.py``), so
random ids spread a proxy's records over every partition. At 2,000 requests/s over 16
partitions with the producer's 2 ms linger, each produce request carried about one record per
partition, and the broker paid per partition batch: 117 µs of broker CPU per record against 56
over one partition (``scripts/inner_partitions_cost.py``; docs/design/cluster-v2.md). Kafka's
producers solve the same for keyless records with the sticky partitioner (KIP-480): fill one
partition's batch, then move on. Here the key is the id, and the proxy chooses it: an id it
makes up is one that lands in the partition it sticks to for ``stick_ms``. Over time every
partition gets its share, because every id made is used (below).

What does not change: an id is still a random UUID (hex), the producer's partitioner still
places the record by it, and a cancel or reschedule of that id goes where the message went.
A caller-given id is used as it is (and lands where it hashes). When the partition count is
unknown or wrong (the topic was given partitions since), ids are only less sticky.

Cost: an id is made by hashing random UUIDs until one lands in the partition wanted. The ones
that land elsewhere are kept (up to ``keep`` per partition), and the next partition stuck to
is the one with the most kept, so nearly every UUID hashed is used: about one hash per id
(7 µs in Python), not one per partition.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Callable

from chronos.kafka.partitioner import partition_of

#: Kept ids per partition and id space (``keep``): enough to cover a stick's worth of others.
_KEEP = 64
#: Id spaces (tenant prefixes) with kept ids; the least recently used is dropped beyond it.
_SPACES = 32


class _Space:
    """One id prefix's state: the partition it sticks to since when, and ids kept for each."""

    def __init__(self, partitions: int) -> None:
        self.partitions = partitions
        self.kept: list[list[str]] = [[] for _ in range(partitions)]
        self.sticks_to = -1
        self.since = 0.0


class StickyIds:
    """Makes fresh ids for the inner topic, sticking to one partition for ``stick_ms``.

    Parameters:
        partitions: the inner topic's partition count, or None when unknown; asked for every
            id, so it must not ask Kafka (``DelayClient`` looks it up after a publish).
        stick_ms: how long ids land in one partition (0: plain random ids).
        clock: monotonic seconds.
        new_uuid: a fresh random id (hex).
        keep: ids kept per partition and prefix.
        rng: chooses among partitions with as many ids kept.
    """

    def __init__(
        self,
        partitions: Callable[[], int | None],
        stick_ms: float,
        clock: Callable[[], float] = time.monotonic,
        new_uuid: Callable[[], str] = lambda: uuid.uuid4().hex,
        keep: int = _KEEP,
        rng: random.Random | None = None,
    ) -> None:
        self._partitions = partitions
        self._stick_s = stick_ms / 1000.0
        self._clock = clock
        self._new_uuid = new_uuid
        self._keep = keep
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self._spaces: dict[str, _Space] = {}

    def new(self, prefix: str = "") -> str:
        """A fresh id, ``prefix`` in front (a tenant's id space: the whole id is hashed)."""
        if self._stick_s <= 0:
            return prefix + self._new_uuid()
        with self._lock:
            now = self._clock()
            count = self._partitions()
            if count is None or count <= 1:
                return prefix + self._new_uuid()
            space = self._space(prefix, count)
            if space.sticks_to < 0 or now - space.since >= self._stick_s:
                space.sticks_to = self._fullest(space)
                space.since = now
            return self._id_in(space, prefix)

    def _space(self, prefix: str, count: int) -> _Space:
        space = self._spaces.pop(prefix, None)  # popped and put back: the last used is last
        if space is None or space.partitions != count:
            space = _Space(count)
        self._spaces[prefix] = space
        if len(self._spaces) > _SPACES:
            del self._spaces[next(iter(self._spaces))]
        return space

    def _fullest(self, space: _Space) -> int:
        """The partition with the most kept ids (one at random among equals): sticking there
        uses up what the last stick left, so hardly a UUID hashed is thrown away."""
        most = max(len(kept) for kept in space.kept)
        return self._rng.choice([p for p, kept in enumerate(space.kept) if len(kept) == most])

    def _id_in(self, space: _Space, prefix: str) -> str:
        wanted = space.kept[space.sticks_to]
        if wanted:
            return wanted.pop()
        while True:
            candidate = prefix + self._new_uuid()
            partition = partition_of(candidate.encode(), space.partitions)
            if partition == space.sticks_to:
                return candidate
            kept = space.kept[partition]
            if len(kept) < self._keep:
                kept.append(candidate)
