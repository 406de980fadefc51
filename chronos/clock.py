"""Time source: the node reads time only through a Clock, so tests can drive it."""

from __future__ import annotations

import time
from typing import Protocol

from chronos.types import EpochMs


class Clock(Protocol):
    """Wall-clock milliseconds."""

    def now_ms(self) -> EpochMs: ...


class SystemClock:
    """The machine's wall clock."""

    def now_ms(self) -> EpochMs:
        return time.time_ns() // 1_000_000


class FakeClock:
    """A clock that moves only when told to (for tests).

    Parameters:
        start_ms: the initial time.
    """

    def __init__(self, start_ms: EpochMs = 1_700_000_000_000) -> None:
        self.ms = start_ms

    def now_ms(self) -> EpochMs:
        return self.ms

    def advance(self, delta_ms: int) -> None:
        """Move time forward."""
        self.ms += delta_ms
