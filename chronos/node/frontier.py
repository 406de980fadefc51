"""The push frontier: the one lock that makes the ingest/push hand-off race-free.

DDMQ Chronos loses a message when its push thread advances the seek timestamp past a window
while an ingest batch holding a message due in that window is still being written (DESIGN
§3.1). Here the push worker moves the frontier *before* it scans, under this lock, and every
store write that places a message happens under the same lock and uses the frontier it read
there: a message due at or before the frontier is written to the first slot after it, so
the next scan finds it. A message is therefore either visible to a scan that covers its
slot, or lands in a slot that a later scan will cover.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from chronos.types import EpochMs


class Frontier:
    """The push worker's scan frontier plus the wake-up channel from ingest to push.

    Parameters:
        start_ms: the initial frontier, the persisted seek timestamp.
    """

    def __init__(self, start_ms: EpochMs) -> None:
        self._lock = threading.Lock()
        self._wake = threading.Condition(threading.Lock())
        self._value = start_ms
        self._earliest: EpochMs | None = None
        self._stopped = False

    @contextmanager
    def held(self) -> Iterator[EpochMs]:
        """Hold the frontier still while writing; yields its value."""
        with self._lock:
            yield self._value

    @property
    def value(self) -> EpochMs:
        """The current frontier (informational; decisions must use ``held``)."""
        return self._value

    def advance(self, to_ms: EpochMs) -> EpochMs:
        """Move the frontier forward to ``to_ms`` (never back); returns the previous value."""
        with self._lock:
            previous = self._value
            if to_ms > previous:
                self._value = to_ms
            return previous

    def slot_for(self, frontier: EpochMs, due_ms: EpochMs) -> EpochMs:
        """Where a message due at ``due_ms`` must be stored given the held ``frontier``."""
        return due_ms if due_ms > frontier else frontier + 1

    def notify(self, slot_ms: EpochMs) -> None:
        """Tell the push worker a message now waits at ``slot_ms`` (wakes it if earlier)."""
        with self._wake:
            if self._earliest is None or slot_ms < self._earliest:
                self._earliest = slot_ms
                self._wake.notify_all()

    def wait(self, until_ms: EpochMs | None, now_ms: EpochMs, max_wait_s: float) -> None:
        """Sleep until ``until_ms``, an earlier ``notify``, ``stop`` or ``max_wait_s``."""
        with self._wake:
            if self._stopped:
                return
            if self._earliest is not None and (until_ms is None or self._earliest < until_ms):
                until_ms = self._earliest
            timeout = max_wait_s if until_ms is None else (until_ms - now_ms) / 1000.0
            if timeout > 0:
                self._wake.wait(min(timeout, max_wait_s))
            self._earliest = None

    def stop(self) -> None:
        """Wake a waiting push worker for shutdown."""
        with self._wake:
            self._stopped = True
            self._wake.notify_all()
