"""A cluster node's ``/metrics`` per partition: each hosted replica's role, delivery lag,
stored messages and counters, labelled ``partition`` (the node-wide series merge them)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from chronos.cluster.view import ClusterView

#: Counters exported per partition: what an operator compares across partitions.
_COUNTERS = ("ingested", "delivered", "cancelled", "dead_lettered", "promotions", "fenced")
_ROLES = ("master", "backup", "starting")


class PartitionCollector(Collector):
    """Collects per-partition series at each scrape.

    Parameters:
        view: the cluster node.
    """

    def __init__(self, view: ClusterView) -> None:
        self._view = view

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
        for partition, (shard, probes) in sorted(self._view.hosted().items()):
            label = str(partition)
            for name in _ROLES:
                role.add_metric([label, name], 1.0 if shard.role == name else 0.0)
            gauges = probes.gauges()
            lag.add_metric([label], gauges.delivery_lag_ms / 1000.0)
            stored.add_metric([label], gauges.stored_messages)
            totals = probes.metrics.totals()
            for name, family in counters.items():
                family.add_metric([label], totals.get(name, 0))
        yield role
        yield lag
        yield stored
        yield from counters.values()
