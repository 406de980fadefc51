"""backlog: from a store checkpoint, how many deliveries each topic faces per minute (or hour).

A cluster's backlog: every member's checkpoint, each inner partition read from the copy that
delivered furthest (``store.checkpoint.freshest_copies``, which the command runs before
Spark starts).

Counts every pending message at its slot (when the node will push it; the due time, or later
for a late arrival) and the later occurrences of repeats, over ``[now, now + horizon)``.
Messages already overdue at ``now`` (the node is behind, or the checkpoint is old) count in
their own bucket and in ``overdue``.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from chronos.errors import ConfigError
from chronos.pipeline.jobs import charts
from chronos.pipeline.jobs.occurrences import OUTPUT_DDL, expand_batches
from chronos.store.checkpoint import CheckpointRead

BUCKETS = {"minute": 60_000, "hour": 3_600_000}
_CHART_TOPICS = 8


@dataclass
class BacklogSummary:
    """Totals and the busiest bucket."""

    #: The first checkpoint read (an earlier release's one field), and each one read with the
    #: inner partitions read from it (None: all of it).
    checkpoint: str
    checkpoints: dict[str, list[int] | None]
    from_ms: int
    until_ms: int
    bucket: str
    bucket_ms: int
    pending: int
    overdue: int
    per_topic: dict[str, int]
    peak_at: str | None
    peak_count: int
    seconds: float

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)


def pending(spark: SparkSession, reads: Sequence[CheckpointRead], until_ms: int) -> DataFrame:
    """(id, topic, occurrence, due_ms) of every delivery before ``until_ms`` in what ``reads``
    names; ``due_ms`` is the slot for stored occurrences."""
    stored: DataFrame | None = None
    for path, partitions in reads:
        reader = (
            spark.read.format("chronos-checkpoint")
            .option("path", str(path))
            .option("payload", "false")
        )
        if partitions is not None:
            reader = reader.option("partitions", ",".join(map(str, partitions)))
        frame = reader.load()
        stored = frame if stored is None else stored.unionByName(frame)
    if stored is None:
        raise ConfigError("no checkpoint given")
    stored = stored.withColumn("due_ms", F.col("slot_ms"))
    single = stored.where(F.col("repeat").isNull()).select("id", "topic", "occurrence", "due_ms")
    repeats = stored.where(F.col("repeat").isNotNull()).mapInArrow(
        partial(expand_batches, until_ms=until_ms), OUTPUT_DDL
    )
    return single.unionByName(repeats).where(F.col("due_ms") < until_ms)


def run_backlog(
    spark: SparkSession,
    reads: Sequence[CheckpointRead],
    out_dir: Path,
    *,
    bucket: str = "minute",
    horizon_ms: int = 86_400_000,
    now_ms: int | None = None,
) -> BacklogSummary:
    """Write ``backlog/`` (Parquet: topic, bucket_start, count, overdue), ``summary.json`` and
    ``backlog.png`` to ``out_dir``, from what ``reads`` names (``freshest_copies``: one
    checkpoint, or a cluster's members', each partition from the copy that delivered
    furthest)."""
    started = time.monotonic()
    size = BUCKETS[bucket]
    start = now_ms if now_ms is not None else int(time.time() * 1000)
    until = start + horizon_ms
    counts = (
        pending(spark, reads, until)
        .groupBy("topic", (F.floor(F.col("due_ms") / size) * size).alias("bucket_ms"))
        .agg(
            F.count("*").alias("count"),
            F.sum(F.when(F.col("due_ms") < start, 1).otherwise(0)).alias("overdue"),
        )
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    counts.select(
        "topic",
        F.timestamp_millis("bucket_ms").alias("bucket_start"),
        "bucket_ms",
        "count",
        "overdue",
    ).orderBy("bucket_ms", "topic").write.mode("overwrite").parquet(str(out_dir / "backlog"))
    rows = spark.read.parquet(str(out_dir / "backlog")).collect()
    per_topic: dict[str, int] = {}
    per_bucket: dict[int, int] = {}
    for row in rows:
        per_topic[row["topic"]] = per_topic.get(row["topic"], 0) + row["count"]
        per_bucket[row["bucket_ms"]] = per_bucket.get(row["bucket_ms"], 0) + row["count"]
    peak = max(per_bucket.items(), key=lambda kv: (kv[1], -kv[0]), default=None)
    summary = BacklogSummary(
        str(reads[0][0]),
        {str(path): partitions for path, partitions in reads},
        start,
        until,
        bucket,
        size,
        sum(per_topic.values()),
        sum(row["overdue"] for row in rows),
        dict(sorted(per_topic.items(), key=lambda kv: -kv[1])),
        None if peak is None else _iso(peak[0]),
        0 if peak is None else peak[1],
        round(time.monotonic() - started, 3),
    )
    (out_dir / "summary.json").write_text(summary.to_json())
    charts.backlog_chart(summary, _series(rows, list(summary.per_topic)), out_dir / "backlog.png")
    return summary


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).isoformat()


def _series(rows: list, ranked: list[str]) -> dict[str, list[tuple[int, int]]]:  # type: ignore[type-arg]
    """Per chart topic: (bucket, count); topics beyond the largest eight merge into other."""
    shown = set(ranked[:_CHART_TOPICS])
    series: dict[str, dict[int, int]] = {}
    for row in rows:
        name = row["topic"] if row["topic"] in shown else "other"
        points = series.setdefault(name, {})
        points[row["bucket_ms"]] = points.get(row["bucket_ms"], 0) + row["count"]
    return {name: sorted(points.items()) for name, points in series.items()}
