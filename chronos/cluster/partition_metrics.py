"""A cluster node's ``/metrics`` per partition: each hosted partition's role, delivery lag,
stored messages and, where each partition has counters of its own (the partition shape's
replicas), its counters, labelled ``partition`` (the node-wide series merge them)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

#: Counters exported per partition: what an operator compares across partitions.
_COUNTERS = ("ingested", "delivered", "cancelled", "dead_lettered", "promotions", "fenced")
_ROLES = ("master", "backup", "starting")


@dataclass(frozen=True)
class PartitionGauges:
    """One hosted partition as a scrape reads it.

    Parameters:
        partition: the inner partition.
        role: "master" (delivered here), "backup" (standing) or "starting".
        delivery_lag_ms: how late its oldest stored message past the seek is (0 unless
            delivered here).
        stored_messages: RocksDB's estimate of its schedule's messages.
        seek_ms: its seek (epoch ms).
        totals: its own counters, None where the node counts for all its partitions at once.
    """

    partition: int
    role: str
    delivery_lag_ms: int
    stored_messages: int
    seek_ms: int
    totals: Mapping[str, int] | None = None


class PartitionCollector(Collector):
    """Collects per-partition series at each scrape.

    Parameters:
        rows: the hosted partitions now.
    """

    def __init__(self, rows: Callable[[], list[PartitionGauges]]) -> None:
        self._rows = rows

    def collect(self) -> Iterator[Metric]:
        role = GaugeMetricFamily(
            "chronos_partition_role",
            "1 for the role of this node's replica of the partition.",
            labels=["partition", "role"],
        )
        lag = GaugeMetricFamily(
            "chronos_partition_delivery_lag_seconds",
            "How late the oldest stored message past the partition's seek is (its master).",
            labels=["partition"],
        )
        stored = GaugeMetricFamily(
            "chronos_partition_stored_messages",
            "Messages this node's store of the partition holds (RocksDB's estimate).",
            labels=["partition"],
        )
        counters = {
            name: CounterMetricFamily(
                f"chronos_partition_{name}",
                f"{name} by this node's replica of the partition, since it started.",
                labels=["partition"],
            )
            for name in _COUNTERS
        }
        counted = False
        for row in self._rows():
            label = str(row.partition)
            for name in _ROLES:
                role.add_metric([label, name], 1.0 if row.role == name else 0.0)
            lag.add_metric([label], row.delivery_lag_ms / 1000.0)
            stored.add_metric([label], row.stored_messages)
            if row.totals is not None:
                counted = True
                for name, family in counters.items():
                    family.add_metric([label], row.totals.get(name, 0))
        yield role
        yield lag
        yield stored
        if counted:
            yield from counters.values()
