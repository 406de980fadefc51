"""Which inner partitions a node reads, and how its ingest threads share them."""

from __future__ import annotations

from chronos.errors import ConfigError


def owned_partitions(configured: list[int], count: int) -> list[int]:
    """The inner partitions a node reads: those configured (all when none), each existing."""
    if not configured:
        return list(range(count))
    missing = sorted({p for p in configured if not 0 <= p < count})
    if missing:
        raise ConfigError(
            f"node.owned_partitions {missing} do not exist: the inner topic has {count} "
            f"partitions (0-{count - 1})"
        )
    return sorted(set(configured))


def thread_shares(owned: list[int], threads: int) -> list[list[int]]:
    """Partitions per ingest thread, round robin; no more threads than partitions."""
    threads = min(threads, len(owned))
    return [owned[i::threads] for i in range(threads)]
