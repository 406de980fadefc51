"""PNG charts of the audit and the backlog (matplotlib, headless)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from pyspark.sql import DataFrame  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

if TYPE_CHECKING:
    from chronos.pipeline.jobs.audit import AuditSummary
    from chronos.pipeline.jobs.backlog import BacklogSummary

_BIN_MS = 10


def lateness_histogram(details: DataFrame, bin_ms: int = _BIN_MS) -> list[tuple[int, int]]:
    """(bin start ms, count) of first-delivery lateness, computed in Spark (no rows collected)."""
    rows = (
        details.where(F.col("lateness_ms").isNotNull())
        .groupBy((F.floor(F.col("lateness_ms") / bin_ms) * bin_ms).alias("bin"))
        .count()
        .orderBy("bin")
        .collect()
    )
    return [(int(r["bin"]), int(r["count"])) for r in rows]


def audit_chart(summary: AuditSummary, histogram: Sequence[tuple[int, int]], path: Path) -> None:
    """Statuses per topic (left) and the lateness distribution (right)."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    topics = [t.topic for t in summary.topics]
    bottom = [0] * len(topics)
    for status in summary.counts:
        values = [t.counts[status] for t in summary.topics]
        if any(values):
            left.bar(topics, values, bottom=bottom, label=status)
            bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    left.set_title("messages due in the window, by status")
    left.legend(fontsize=8)
    left.tick_params(axis="x", labelrotation=30, labelsize=8)
    if histogram:
        right.bar([b for b, _ in histogram], [c for _, c in histogram], width=_BIN_MS)
        right.set_yscale("log")
    right.set_title(f"lateness of first delivery (ms, {_BIN_MS} ms bins)")
    right.set_xlabel("delivered - due (ms)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def backlog_chart(
    summary: BacklogSummary, series: dict[str, list[tuple[int, int]]], path: Path
) -> None:
    """Pending messages per bucket, stacked by topic (the largest eight; the rest as other)."""
    import datetime as dt

    fig, ax = plt.subplots(figsize=(12, 4.5))
    buckets = sorted({b for points in series.values() for b, _ in points})
    # matplotlib takes datetimes on a date axis; its stub only admits numbers.
    stamps: Any = [dt.datetime.fromtimestamp(b / 1000, tz=dt.UTC) for b in buckets]
    bottom = [0] * len(buckets)
    width = summary.bucket_ms / 86_400_000  # matplotlib dates are in days
    for topic, points in series.items():
        counts = dict(points)
        values = [counts.get(b, 0) for b in buckets]
        ax.bar(stamps, values, bottom=bottom, width=width, label=topic, align="edge")
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    ax.set_title(
        f"pending deliveries per {summary.bucket} (peak {summary.peak_count} at {summary.peak_at})"
    )
    ax.legend(fontsize=8)
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
