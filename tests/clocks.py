"""A monotonic clock that moves only when a test moves it.

For code that takes ``monotonic`` (seconds, as ``time.monotonic``): a rate, a window or a
pause is then checked by moving the clock, not by sleeping, so no machine is too slow for it.
(``chronos.clock.FakeClock`` is the wall clock in epoch milliseconds.)
"""

from __future__ import annotations


class ManualClock:
    """``time.monotonic`` at ``now``, which starts at 100 s (not 0, which code may treat as
    "never")."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now
