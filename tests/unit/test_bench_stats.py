"""Benchmark summaries: percentiles, sustained rate and the lateness-over-time series."""

from __future__ import annotations

from chronos.bench.load import Observation
from chronos.bench.stats import percentiles, summarize


def test_summary_keeps_the_worst_lateness_of_each_second_from_the_first() -> None:
    seen = Observation(
        unique=6,
        lateness_ms=[3, 9, 1, 250, 4, 2],
        per_second={100: 2, 101: 3, 103: 1},
        worst_per_second={100: 9, 101: 250, 103: 2},
    )
    summary = summarize(seen, expected=7)
    assert summary["missing"] == 1
    assert summary["worst_lateness_per_second_ms"] == {0: 9, 1: 250, 3: 2}


def test_summary_of_nothing_delivered_is_empty_not_an_error() -> None:
    summary = summarize(Observation(), expected=3)
    assert summary["missing"] == 3
    assert summary["worst_lateness_per_second_ms"] == {}
    assert summary["lateness_ms"] == {"p50": 0, "p99": 0, "p999": 0, "max": 0}


def test_percentiles_use_nearest_rank() -> None:
    values = list(range(1, 1001))
    assert percentiles(values) == {"p50": 500, "p99": 990, "p999": 999, "max": 1000}
