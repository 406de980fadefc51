"""Summaries of latency samples and delivery series."""

from __future__ import annotations

from chronos.bench.load import Observation
from chronos.quantiles import nearest_rank


def percentiles(values: list[int]) -> dict[str, int]:
    """p50/p99/p99.9/max (nearest rank) of ``values``, in their unit."""
    if not values:
        return {"p50": 0, "p99": 0, "p999": 0, "max": 0}
    ordered = sorted(values)
    return {
        "p50": nearest_rank(ordered, 0.5),
        "p99": nearest_rank(ordered, 0.99),
        "p999": nearest_rank(ordered, 0.999),
        "max": ordered[-1],
    }


def p99_per_bucket(
    observation: Observation, width_s: int = 10, stamped: bool = False
) -> dict[int, int]:
    """p99 lateness (nearest rank) of the records that arrived in each ``width_s`` interval,
    keyed by the interval's first second: a run's worst stretch, not only its whole.
    ``stamped``: of the records' timestamps instead (observed at visibility)."""
    buckets: dict[int, list[int]] = {}
    late = observation.stamped_lateness_ms if stamped else observation.lateness_ms
    for arrived, lateness in zip(observation.arrived_ms, late, strict=True):
        start = arrived // 1000 // width_s * width_s
        buckets.setdefault(start, []).append(lateness)
    return {start: nearest_rank(sorted(v), 0.99) for start, v in sorted(buckets.items())}


def sustained_rate(observation: Observation) -> float:
    """Median deliveries per second over the full seconds of the run (edges dropped)."""
    seconds = sorted(observation.per_second)[1:-1]
    counts = sorted(observation.per_second[s] for s in seconds)
    return float(counts[len(counts) // 2]) if counts else float(observation.unique)


def summarize(observation: Observation, expected: int) -> dict[str, object]:
    """The numbers every delivery scenario reports."""
    summary = _summarize(observation, expected)
    if observation.stamped_lateness_ms:
        summary["stamped_lateness_ms"] = percentiles(observation.stamped_lateness_ms)
    return summary


def _summarize(observation: Observation, expected: int) -> dict[str, object]:
    return {
        "expected": expected,
        "delivered": observation.unique,
        "missing": expected - observation.unique,
        "duplicates": observation.duplicates,
        "early": observation.early,
        "lateness_ms": percentiles(observation.lateness_ms),
        "delivery_rate_sustained": sustained_rate(observation),
        "worst_lateness_per_second_ms": {
            second - min(observation.worst_per_second): worst
            for second, worst in sorted(observation.worst_per_second.items())
        },
    }
