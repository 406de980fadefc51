"""Time source: the node reads time only through a Clock, so tests can drive it."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Protocol

from chronos.types import EpochMs

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MICROSECOND = timedelta(microseconds=1)


def ceil_ms(moment: datetime) -> EpochMs:
    """Epoch milliseconds of an aware ``moment``, rounded up: a due time given to the
    microsecond is never delivered before it (rounding to the nearest was up to 0.5 ms early,
    issue 62), and exact (``timestamp()`` is a float: 2.6 ms of 2100 may come out 2.5999).
    """
    micros = (moment - _EPOCH) // _ONE_MICROSECOND
    return -(-micros // 1000)


def floor_ms(moment: datetime) -> EpochMs:
    """Epoch milliseconds of an aware ``moment``, rounded down (an ``until``: no occurrence
    after the instant given), exact as ``ceil_ms``."""
    return ((moment - _EPOCH) // _ONE_MICROSECOND) // 1000


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
