"""Benchmark summaries: percentiles, sustained rate and the lateness-over-time series."""

from __future__ import annotations

from chronos.bench.load import Observation, summarize_arrivals
from chronos.bench.stats import p99_per_bucket, percentiles, summarize


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


def test_arrivals_are_counted_per_second_of_their_production_with_the_worst_lateness() -> None:
    seen = summarize_arrivals(
        produced_ms=[100_900, 100_100, 101_500, 101_999, 103_000],
        lateness_ms=[9, 3, -2, 250, 4],
    )
    assert seen.unique == 5
    assert seen.early == 1
    assert seen.per_second == {100: 2, 101: 2, 103: 1}
    assert seen.worst_per_second == {100: 9, 101: 250, 103: 4}
    assert (seen.first_ms, seen.last_ms) == (100_100, 103_000)
    assert seen.lateness_ms == [9, 3, -2, 250, 4]


def test_no_arrivals_summarize_to_an_empty_observation() -> None:
    seen = summarize_arrivals([], [])
    assert (seen.unique, seen.first_ms, seen.last_ms, seen.per_second) == (0, 0, 0, {})


def test_p99_per_bucket_groups_records_by_when_they_arrived() -> None:
    """A late stretch shows in its own bucket even when the run's whole p99 hides it
    (mutant caught: bucketing by lateness or by order read instead of arrival)."""
    arrived = [100_000 + n * 10 for n in range(1000)] + [110_500 + n for n in range(100)]
    lateness = [5] * 1000 + [400] * 100
    shuffled = list(zip(arrived, lateness, strict=True))[::-1]  # read order is not time order
    seen = summarize_arrivals([a for a, _ in shuffled], [late for _, late in shuffled])
    assert p99_per_bucket(seen) == {100: 5, 110: 400}
    assert p99_per_bucket(seen, width_s=20) == {100: 400}
