"""Metrics through one interface: counters and millisecond histograms, reported to logs and to
Prometheus (``chronos/admin/prometheus.py`` reads them; the hot path only adds to them)."""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable
from dataclasses import dataclass
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
#: The histograms' bucket upper bounds, ms (a last bucket takes everything above).
BOUNDS_MS: tuple[int, ...] = tuple(_BOUNDS)


@dataclass(frozen=True)
class HistogramSnapshot:
    """One histogram as of a moment: counts per bucket of ``BOUNDS_MS`` (one more: above the
    last bound), the sum and the largest value, in ms."""

    buckets: tuple[int, ...]
    sum_ms: int
    max_ms: int


class _Histogram:
    """Fixed buckets keep memory constant whatever the message count."""

    def __init__(self) -> None:
        self.buckets = [0] * (len(_BOUNDS) + 1)
        self.max = 0
        self.sum = 0

    def add(self, value: int) -> None:
        self.buckets[bisect.bisect_left(_BOUNDS, value)] += 1
        self.sum += value
        if value > self.max:
            self.max = value

    def merge(self, other: _Histogram) -> None:
        for index, count in enumerate(list(other.buckets)):
            self.buckets[index] += count
        self.max = max(self.max, other.max)
        self.sum += other.sum

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


class _Shard:
    """One thread's counters and histograms: written by that thread only, so without a lock."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.histograms: dict[str, _Histogram] = {}


class CountingMetrics:
    """Counters plus bucketed millisecond histograms, sharded per thread.

    A shared lock was the node's hottest spot under load (every ingested and every delivered
    message reported through it, from five threads); each thread now writes its own shard and
    readers merge the shards. Reads are as of a moment, which is all a report needs.
    """

    def __init__(self) -> None:
        self._local = threading.local()
        self._lock = threading.Lock()  # guards the list of shards only
        self._shards: list[_Shard] = []

    def _shard(self) -> _Shard:
        shard: _Shard | None = getattr(self._local, "shard", None)
        if shard is None:
            shard = self._local.shard = _Shard()
            with self._lock:
                self._shards.append(shard)
        return shard

    def incr(self, name: str, amount: int = 1) -> None:
        counts = self._shard().counts
        counts[name] = counts.get(name, 0) + amount

    def observe(self, name: str, value_ms: int) -> None:
        histograms = self._shard().histograms
        histogram = histograms.get(name)
        if histogram is None:
            histogram = histograms[name] = _Histogram()
        histogram.add(value_ms)

    def totals(self) -> dict[str, int]:
        """Counters since start, summed over threads."""
        with self._lock:
            shards = list(self._shards)
        totals: dict[str, int] = {}
        for shard in shards:
            for name, count in dict(shard.counts).items():  # dict(): an atomic copy
                totals[name] = totals.get(name, 0) + count
        return totals

    def summaries(self) -> dict[str, dict[str, int]]:
        """Every histogram's summary (since start), merged over threads."""
        return {name: h.summary() for name, h in self._merged().items()}

    def histograms(self) -> dict[str, HistogramSnapshot]:
        """Every histogram's buckets, sum and max (since start), merged over threads."""
        return {
            name: HistogramSnapshot(tuple(h.buckets), h.sum, h.max)
            for name, h in self._merged().items()
        }

    def _merged(self) -> dict[str, _Histogram]:
        with self._lock:
            shards = list(self._shards)
        merged: dict[str, _Histogram] = {}
        for shard in shards:
            for name, histogram in dict(shard.histograms).items():
                merged.setdefault(name, _Histogram()).merge(histogram)
        return merged


class MetricsReader(Protocol):
    """What the admin API reads of a node's metrics: ``CountingMetrics``, or ``MergedMetrics``
    over a cluster node's partitions."""

    def totals(self) -> dict[str, int]: ...
    def histograms(self) -> dict[str, HistogramSnapshot]: ...


class MergedMetrics:
    """Several readers' metrics as one (a cluster node: one ``CountingMetrics`` per partition
    it hosts, read when asked).

    Parameters:
        readers: the readers to merge, asked at each read (partitions come and go).
    """

    def __init__(self, readers: Callable[[], list[MetricsReader]]) -> None:
        self._readers = readers

    def totals(self) -> dict[str, int]:
        totals: dict[str, int] = {}
        for reader in self._readers():
            for name, count in reader.totals().items():
                totals[name] = totals.get(name, 0) + count
        return totals

    def histograms(self) -> dict[str, HistogramSnapshot]:
        merged: dict[str, HistogramSnapshot] = {}
        for reader in self._readers():
            for name, snapshot in reader.histograms().items():
                have = merged.get(name)
                merged[name] = snapshot if have is None else _sum(have, snapshot)
        return merged


def _sum(a: HistogramSnapshot, b: HistogramSnapshot) -> HistogramSnapshot:
    buckets = tuple(x + y for x, y in zip(a.buckets, b.buckets, strict=True))
    return HistogramSnapshot(buckets, a.sum_ms + b.sum_ms, max(a.max_ms, b.max_ms))
