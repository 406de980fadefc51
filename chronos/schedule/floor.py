"""The rebuild floor: the inner offsets below which no record is needed to rebuild a store.

A refresh pass (``chronos/node/refresh.py``) notes the inner offsets its store had ingested
when it started, then re-appends everything the store holds. Once Kafka acknowledged all of
it, every message and tombstone the store holds has a record at or above those offsets, and so
does everything ingested since: they are the floor. Retention (or ``DeleteRecords``) may
remove what lies below it, and a store that read the topic from at most the floor on holds
everything it must (``StoreOrigin.complete``).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from chronos.types import EpochMs


@dataclass(frozen=True)
class Floor:
    """One completed pass's floor.

    Parameters:
        offsets: next inner offset per partition the store had ingested when the pass began.
        at_ms: when the pass began (the next one is due a refresh interval later).
    """

    offsets: dict[int, int]
    at_ms: EpochMs


class RebuildFloor:
    """The latest floor, shared between the refresh worker that moves it and the writer of
    the progress records that publish it."""

    def __init__(self, initial: Floor | None = None) -> None:
        self._lock = threading.Lock()
        self._floor = initial

    @property
    def current(self) -> Floor | None:
        with self._lock:
            return self._floor

    def advance(self, floor: Floor) -> None:
        """Take a newer floor (an older one, e.g. from a slower pass, is ignored)."""
        with self._lock:
            if self._floor is None or floor.at_ms > self._floor.at_ms:
                self._floor = floor
