"""Waiting for an event in tests: poll a condition, fail with what never happened.

The timeout is a safety net for a test that would otherwise hang, not a bound on speed: give
one a machine several times slower still meets (timing bounds live in the benchmarks).
"""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s} s waiting until {what}")
