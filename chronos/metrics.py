"""Metrics through one interface: counters and a lateness distribution, reported to logs."""

from __future__ import annotations

import bisect
import threading
from collections import Counter
from typing import Protocol


class Metrics(Protocol):
    """What components report to."""

    def incr(self, name: str, amount: int = 1) -> None: ...
    def observe(self, name: str, value_ms: int) -> None: ...


class NullMetrics:
    """Discards everything (tools and tests that do not look)."""

    def incr(self, name: str, amount: int = 1) -> None:
        pass

    def observe(self, name: str, value_ms: int) -> None:
        pass


# Lateness buckets (ms upper bounds); a fixed histogram keeps memory constant.
_BOUNDS = [0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000, 60_000]


class _Histogram:
    """Fixed buckets keep memory constant whatever the message count."""

    def __init__(self) -> None:
        self.buckets = [0] * (len(_BOUNDS) + 1)
        self.max = 0

    def add(self, value: int) -> None:
        self.buckets[bisect.bisect_left(_BOUNDS, value)] += 1
        self.max = max(self.max, value)

    def summary(self) -> dict[str, int]:
        """Bucket upper bounds of p50/p99 and the exact max, in ms."""
        total = sum(self.buckets)
        summary = {"count": total, "max": self.max}
        for label, q in (("p50", 0.5), ("p99", 0.99)):
            seen, bound = 0, -1
            for index, count in enumerate(self.buckets):
                seen += count
                if total and seen >= q * total:
                    bound = min(_BOUNDS[index], self.max) if index < len(_BOUNDS) else self.max
                    break
            summary[label] = bound
        return summary


class CountingMetrics:
    """Thread-safe counters plus bucketed millisecond histograms, read by the reporter."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._histograms: dict[str, _Histogram] = {}

    def incr(self, name: str, amount: int = 1) -> None:
        with self._lock:
            self._counts[name] += amount

    def observe(self, name: str, value_ms: int) -> None:
        with self._lock:
            histogram = self._histograms.get(name)
            if histogram is None:
                histogram = self._histograms[name] = _Histogram()
            histogram.add(value_ms)

    def totals(self) -> dict[str, int]:
        """Counters since start."""
        with self._lock:
            return dict(self._counts)

    def summaries(self) -> dict[str, dict[str, int]]:
        """Every histogram's summary (since start)."""
        with self._lock:
            return {name: h.summary() for name, h in self._histograms.items()}
