"""Periodic metrics report to the log (only when something changed, so an idle node is quiet)."""

from __future__ import annotations

import structlog

from chronos.lifecycle import LoopWorker
from chronos.metrics import CountingMetrics
from chronos.schedule.ledger import Ledger

log = structlog.get_logger(__name__)


class MetricsReporter(LoopWorker):
    """Logs counters, lateness and seek lag every ``interval_s``.

    Parameters:
        metrics: the node's counters.
        ledger: for the seek timestamp.
        interval_s: report period.
    """

    def __init__(self, metrics: CountingMetrics, ledger: Ledger, interval_s: float = 10.0) -> None:
        super().__init__("reporter")
        self._metrics = metrics
        self._ledger = ledger
        self._interval_s = interval_s
        self._last: dict[str, int] = {}

    def step(self) -> None:
        if self._stop.wait(self._interval_s):
            return
        self.report()

    def finish(self) -> None:
        self.report()

    def report(self) -> None:
        """Log once if anything changed."""
        totals = self._metrics.totals()
        if totals == self._last:
            return
        self._last = totals
        log.info("node_stats", seek_ms=self._ledger.seek_ms, **self._metrics.summaries(), **totals)
