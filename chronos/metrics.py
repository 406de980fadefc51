"""Metrics through one interface: counters and a lateness distribution, reported to logs."""

from __future__ import annotations

import bisect
import threading
from collections import Counter
from typing import Protocol


class Metrics(Protocol):
    """What components report to."""

    def incr(self, name: str, amount: int = 1) -> None: ...
    def observe_lateness(self, lateness_ms: int) -> None: ...


class NullMetrics:
    """Discards everything (tools and tests that do not look)."""

    def incr(self, name: str, amount: int = 1) -> None:
        pass

    def observe_lateness(self, lateness_ms: int) -> None:
        pass


# Lateness buckets (ms upper bounds); a fixed histogram keeps memory constant.
_BOUNDS = [0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000, 60_000]


class CountingMetrics:
    """Thread-safe counters plus a bucketed lateness histogram, drained by a reporter."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._buckets = [0] * (len(_BOUNDS) + 1)
        self._max_lateness = 0

    def incr(self, name: str, amount: int = 1) -> None:
        with self._lock:
            self._counts[name] += amount

    def observe_lateness(self, lateness_ms: int) -> None:
        with self._lock:
            self._buckets[bisect.bisect_left(_BOUNDS, lateness_ms)] += 1
            self._max_lateness = max(self._max_lateness, lateness_ms)

    def totals(self) -> dict[str, int]:
        """Counters since start."""
        with self._lock:
            return dict(self._counts)

    def lateness_summary(self) -> dict[str, int]:
        """Bucket upper bounds of p50/p99 and the exact max, in ms (since start)."""
        with self._lock:
            total = sum(self._buckets)
            summary = {"max": self._max_lateness, "count": total}
            for label, q in (("p50", 0.5), ("p99", 0.99)):
                seen, bound = 0, -1
                for index, count in enumerate(self._buckets):
                    seen += count
                    if total and seen >= q * total:
                        bound = _BOUNDS[index] if index < len(_BOUNDS) else self._max_lateness
                        break
                summary[label] = bound
            return summary
