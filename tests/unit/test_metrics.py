"""Counting metrics: counters and bucketed histograms whose quantiles never exceed the max."""

from __future__ import annotations

from chronos.metrics import CountingMetrics


def test_counters_add_up() -> None:
    metrics = CountingMetrics()
    metrics.incr("delivered")
    metrics.incr("delivered", 4)
    assert metrics.totals() == {"delivered": 5}


def test_quantiles_are_bucket_bounds_capped_by_the_max() -> None:
    metrics = CountingMetrics()
    for value in [1] * 98 + [40, 522]:
        metrics.observe("lateness", value)
    summary = metrics.summaries()["lateness"]
    assert summary == {"count": 100, "max": 522, "p50": 1, "p99": 50}
    single = CountingMetrics()
    single.observe("lag", 522)
    assert single.summaries()["lag"]["p50"] == 522


def test_counts_from_many_threads_add_up() -> None:
    import threading

    metrics = CountingMetrics()

    def work() -> None:
        for _ in range(10_000):
            metrics.incr("delivered")
            metrics.observe("lateness", 3)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert metrics.totals() == {"delivered": 40_000}
    assert metrics.summaries()["lateness"] == {"count": 40_000, "max": 3, "p50": 3, "p99": 3}
