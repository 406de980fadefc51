"""The node's counters and histograms as Prometheus metrics, read when scraped.

Why a collector over ``CountingMetrics`` instead of ``prometheus_client`` counters in the code:
the hot path keeps adding to per-thread shards without a lock (measured as the node's hottest
spot when it had one); a scrape merges them, as the ``node_stats`` log line does. Names are
``chronos_<counter>_total`` and ``chronos_<histogram>_seconds`` (histograms are kept in ms and
exported in seconds, Prometheus' base unit).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from chronos.admin.view import NodeView
from chronos.metrics import BOUNDS_MS, HistogramSnapshot

#: What the counters count; others are exported as "<name> since the node started".
_COUNTER_HELP = {
    "ingested": "Inner records ingested (adds, cancels, refresh records).",
    "delivered": "Messages delivered to their target topics (acknowledged or committed).",
    "dead_lettered": "Messages and inner records sent to the dead-letter topic.",
    "cancelled": "Pending messages removed by a cancel.",
    "rescheduled": "Pending messages moved to a new due time by a reschedule.",
    "reschedule_too_late": "Reschedules of messages already delivered or being delivered.",
    "fenced": "Times this node's transactional producer was fenced.",
    "promotions": "Times this node became its group's master (failovers it took).",
    "demotions": "Times this node stopped being master.",
    "retakes": "Times this node's master took over again at once after its producer broke "
    "without another taking over (a broker restart).",
    "transactions": "Delivery transactions committed.",
    "transactions_aborted": "Delivery transactions aborted.",
    "transactions_redone": "Aborted delivery transactions done again at once: each failure "
    "was a record's own (dead-lettered or deferred in the redo).",
}
_HISTOGRAM_HELP = {
    "send_lateness": "Due time to Kafka's acknowledgement of a delivery (node alone).",
    "ack_lateness": "Due time to the acknowledgement of a delivery: Kafka's for a node alone, "
    "the delivering transaction's commit for a group's master.",
    "cancel_gate_held": "How long delivery waited for ingest to apply cancels (cancel gate).",
    "ingest_lag": "Inner record's timestamp to its ingest.",
    "failover_gap": "Previous master's last commit to this node's takeover.",
    "transaction_produce": "Producing one transaction's records.",
    "transaction_flush": "Waiting for one transaction's acknowledgements.",
    "transaction_commit": "Committing one transaction.",
    "topic_lateness": "Due time to the send of a delivery to a topic with a rate (node alone: "
    "what its rate makes messages wait shows here), by topic.",
}
_ROLES = ("alone", "master", "backup")
_UNSAFE = re.compile(r"[^a-zA-Z0-9_]")


class ChronosCollector(Collector):
    """Collects a node's metrics at each scrape.

    Parameters:
        view: the node.
    """

    def __init__(self, view: NodeView) -> None:
        self._view = view

    def collect(self) -> Iterator[Metric]:
        metrics = self._view.metrics
        # Every documented counter from the first scrape, at 0 until it counts: a rate() or
        # an alert on a series that appears only with its first event misses that event.
        totals = {name: 0 for name in _COUNTER_HELP} | metrics.totals()
        for name, value in sorted(totals.items()):
            safe = _UNSAFE.sub("_", name)
            help_text = _COUNTER_HELP.get(name, f"{name} since the node started.")
            yield CounterMetricFamily(f"chronos_{safe}", help_text, value=value)
        labelled: dict[str, list[tuple[str, HistogramSnapshot]]] = {}
        for name, snapshot in sorted(metrics.histograms().items()):
            base, colon, topic = name.partition(":")
            if colon:  # one series of a family labelled by topic (``delivery/pacing.py``)
                labelled.setdefault(base, []).append((topic, snapshot))
                continue
            yield _histogram(_UNSAFE.sub("_", name.removesuffix("_ms")), snapshot)
        for base, series in labelled.items():
            yield _by_topic(_UNSAFE.sub("_", base.removesuffix("_ms")), series)
        yield from self._gauges()

    def _gauges(self) -> Iterator[Metric]:
        g = self._view.gauges()
        role = GaugeMetricFamily("chronos_role", "1 for this node's role.", labels=["role"])
        for name in _ROLES:
            role.add_metric([name], 1.0 if name == g.role else 0.0)
        yield role
        yield GaugeMetricFamily("chronos_term", "Term led, or last seen committed.", value=g.term)
        lag_s = max(0, g.now_ms - g.seek_ms) / 1000.0 if g.seek_ms else 0.0
        yield GaugeMetricFamily(
            "chronos_seek_lag_seconds", "Now minus the persisted seek timestamp.", value=lag_s
        )
        yield GaugeMetricFamily(
            "chronos_delivery_lag_seconds",
            "How late the oldest stored message past the seek is (0: none due yet): what "
            "consumers wait for; an idle node's seek lag grows between scans, this does not.",
            value=g.delivery_lag_ms / 1000.0,
        )
        yield GaugeMetricFamily(
            "chronos_stored_messages",
            "Messages the store holds, RocksDB's estimate: pending ones, and delivered ones kept "
            "for delete.retention_s.",
            value=g.stored_messages,
        )
        yield GaugeMetricFamily("chronos_ready", "1 when /readyz answers 200.", value=g.ready)


def _buckets(snapshot: HistogramSnapshot) -> list[tuple[str, float]]:
    """Cumulative buckets in seconds, as Prometheus wants them."""
    buckets: list[tuple[str, float]] = []
    seen = 0
    for bound_ms, count in zip(BOUNDS_MS, snapshot.buckets, strict=False):
        seen += count
        buckets.append((repr(bound_ms / 1000.0), float(seen)))
    buckets.append(("+Inf", float(sum(snapshot.buckets))))
    return buckets


def _histogram(name: str, snapshot: HistogramSnapshot) -> HistogramMetricFamily:
    """A millisecond histogram in seconds."""
    help_text = _HISTOGRAM_HELP.get(name, f"{name}, seconds.")
    return HistogramMetricFamily(
        f"chronos_{name}_seconds",
        help_text,
        buckets=_buckets(snapshot),
        sum_value=snapshot.sum_ms / 1000.0,
    )


def _by_topic(name: str, series: list[tuple[str, HistogramSnapshot]]) -> HistogramMetricFamily:
    """Millisecond histograms of one name, a series per target topic."""
    help_text = _HISTOGRAM_HELP.get(name, f"{name} by target topic, seconds.")
    family = HistogramMetricFamily(f"chronos_{name}_seconds", help_text, labels=["topic"])
    for topic, snapshot in series:
        family.add_metric([topic], _buckets(snapshot), sum_value=snapshot.sum_ms / 1000.0)
    return family
