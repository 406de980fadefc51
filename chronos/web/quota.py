"""Pending-message quotas: how many messages a token may have waiting, as this proxy counts.

A tenant that schedules a million messages a year ahead fills the nodes' disks for everyone;
``max_pending`` in the tokens file bounds it. The proxy answers only after Kafka acknowledged,
so it knows each message it accepted and when it falls due; it counts a message from then
until its due time (a repeat: its last occurrence), rounded up to the minute (an hour when
more than a day ahead, which bounds the memory to ~10,000 buckets a token), so it never
counts less than is pending.

What it cannot see, and so does not count: messages sent through another proxy or straight
to the inner topic, and those scheduled before this proxy started. A cancel frees nothing
until the due time passes (the proxy does not know whose message an id is). Several proxies
each allow ``max_pending``.
"""

from __future__ import annotations

import heapq
import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from chronos.types import EpochMs

_MINUTE_MS = 60_000
_HOUR_MS = 3_600_000
_DAY_MS = 86_400_000


def counted_until(due_ms: EpochMs, now_ms: EpochMs) -> EpochMs:
    """When a message due at ``due_ms`` stops counting: the end of its minute, or of its hour
    when it lies more than a day ahead."""
    bucket = _MINUTE_MS if due_ms - now_ms <= _DAY_MS else _HOUR_MS
    return -(-max(due_ms, now_ms + 1) // bucket) * bucket


@dataclass
class _Ledger:
    """One token's counted messages: how many stop counting at each instant."""

    ends: Counter[int] = field(default_factory=Counter)
    heap: list[int] = field(default_factory=list)  # the distinct instants, soonest first
    total: int = 0
    reserved: int = 0  # admitted, not yet acknowledged by Kafka

    def expire(self, now_ms: EpochMs) -> None:
        while self.heap and self.heap[0] <= now_ms:
            self.total -= self.ends.pop(heapq.heappop(self.heap))

    def add(self, ends: Iterable[tuple[EpochMs, int]]) -> None:
        """Messages counted until each ``end``, ``weight`` of them (a repeat's occurrences)."""
        for end, weight in ends:
            if end not in self.ends:
                heapq.heappush(self.heap, end)
            self.ends[end] += weight
            self.total += weight

    def wait_ms(self, now_ms: EpochMs, excess: int) -> int:
        """Time until ``excess`` counted messages have stopped counting."""
        freed = 0
        for end in sorted(self.ends):
            freed += self.ends[end]
            if freed >= excess:
                return end - now_ms
        return _MINUTE_MS  # only reservations in the way: they settle within seconds


class PendingQuota:
    """Counts per token name; thread-safe (the proxy's handlers run on a thread pool)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ledgers: dict[str, _Ledger] = {}

    def admit(self, name: str, limit: int, count: int, now_ms: EpochMs) -> float:
        """0 when ``count`` more messages fit ``limit`` (they are then reserved: ``settle``
        or ``release`` them), else the seconds until they would."""
        with self._lock:
            ledger = self._ledgers.setdefault(name, _Ledger())
            ledger.expire(now_ms)
            excess = ledger.total + ledger.reserved + count - limit
            if excess <= 0:
                ledger.reserved += count
                return 0.0
            if count > limit:
                return float("inf")
            return ledger.wait_ms(now_ms, excess) / 1000

    def settle(
        self, name: str, due_ms: Iterable[EpochMs], now_ms: EpochMs, weights: Iterable[int] = ()
    ) -> None:
        """Kafka acknowledged the reserved messages, falling due at ``due_ms`` (a repeat: its
        last occurrence), each counted ``weights`` times (a repeat: its occurrences; 1 for
        each when not given), as ``admit`` reserved them."""
        dues = list(due_ms)
        counts = list(weights) or [1] * len(dues)
        ends = [(counted_until(due, now_ms), n) for due, n in zip(dues, counts, strict=True)]
        with self._lock:
            ledger = self._ledgers[name]
            ledger.reserved -= sum(counts)
            ledger.add(ends)

    def release(self, name: str, count: int) -> None:
        """The reserved messages were not accepted (Kafka did not acknowledge)."""
        with self._lock:
            self._ledgers[name].reserved -= count

    def pending(self, name: str, now_ms: EpochMs) -> int:
        """Messages of ``name`` counted now (tests, status)."""
        with self._lock:
            ledger = self._ledgers.get(name)
            if ledger is None:
                return 0
            ledger.expire(now_ms)
            return ledger.total
