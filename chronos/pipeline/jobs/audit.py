"""audit: was everything due in a time window delivered once, on time, never early?

Scheduled = the inner topic's adds that a node accepts (``chronos.inner``, the node's own check:
what it dead-letters was never scheduled; the first add of an id wins, as on the node) expanded
into their repeat occurrences, minus nothing: a cancel (anywhere in the inner topic, before or
after the add, as the node applies it) turns a missing message into ``cancelled``. Delivered = the
target topics' records, matched by the ``chronos-id`` and ``chronos-occurrence`` headers, timed
by the record timestamp (set by the node's producer when it hands the record to Kafka).

Per message (id, occurrence) the status is, first match wins: ``early`` (a delivery before its
due time), ``duplicated`` (more than one delivery), ``late`` (first delivery more than
``late_ms`` after due), ``on_time``, ``collapsed`` (an overdue repeat occurrence folded into a
later one, by design), ``cancelled``, ``missing``.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from chronos.pipeline.jobs import charts
from chronos.pipeline.jobs.occurrences import OUTPUT_DDL, expand_batches
from chronos.pipeline.options import SETTINGS_OPTION, settings_to_option
from chronos.settings import ChronosSettings

STATUSES = ("on_time", "late", "early", "duplicated", "missing", "cancelled", "collapsed")
FAILING = ("missing", "early")


@dataclass(frozen=True)
class AuditWindow:
    """Messages due in ``[start_ms, end_ms)``."""

    start_ms: int
    end_ms: int


@dataclass
class TopicAudit:
    """Counts per status and lateness of the first deliveries, for one topic."""

    topic: str
    counts: dict[str, int]
    lateness_p50_ms: float | None
    lateness_p99_ms: float | None
    lateness_max_ms: int | None


@dataclass
class AuditSummary:
    """What the audit found; ``ok`` is false when anything is missing or early."""

    window_start_ms: int
    window_end_ms: int
    late_ms: int
    messages: int
    counts: dict[str, int]
    unexpected_deliveries: int
    topics: list[TopicAudit] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not any(self.counts.get(status, 0) for status in FAILING)

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "ok": self.ok}, indent=2)


def _kafka(spark: SparkSession, settings: ChronosSettings, topics: list[str]) -> DataFrame:
    """Records without key, value and headers: the audit needs only the chronos- fields."""
    return (
        spark.read.format("chronos-kafka")
        .option(SETTINGS_OPTION, settings_to_option(settings))
        .option("topics", ",".join(topics))
        .option("payload", "false")
        .load()
    )


def scheduled(spark: SparkSession, settings: ChronosSettings, window: AuditWindow) -> DataFrame:
    """(id, topic, occurrence, due_ms, cancelled) of every occurrence due in the window.

    One pass over the inner topic: per id, the first add (by offset) and whether any cancel
    exists.
    """
    is_add = (
        (F.col("chronos_op") == "add")
        & F.col("chronos_due_ms").isNotNull()
        & F.col("chronos_topic").isNotNull()
    )
    adds = (
        _kafka(spark, settings, [settings.topics.names.inner])
        # What the node dead-letters was never scheduled (one rule: chronos.inner).
        .where(F.col("chronos_id").isNotNull() & F.col("chronos_rejected").isNull())
        .groupBy(F.col("chronos_id").alias("id"))
        .agg(
            F.min_by(
                F.struct(
                    F.col("chronos_topic").alias("topic"),
                    F.col("chronos_due_ms").alias("due_ms"),
                    F.col("chronos_repeat").alias("repeat"),
                    F.col("chronos_repeat_interval_ms").alias("repeat_interval_ms"),
                    F.col("chronos_repeat_times").alias("repeat_times"),
                    F.col("chronos_repeat_multiplier").alias("repeat_multiplier"),
                    F.col("chronos_repeat_max_interval_ms").alias("repeat_max_interval_ms"),
                    F.col("chronos_repeat_cron").alias("repeat_cron"),
                    F.col("chronos_repeat_zone").alias("repeat_zone"),
                    F.col("chronos_repeat_until_ms").alias("repeat_until_ms"),
                ),
                F.when(is_add, F.struct("partition", "offset")),
            ).alias("first"),
            F.max(F.col("chronos_op") == "cancel").alias("cancelled"),
        )
        .where(F.col("first.due_ms").isNotNull())
        .select("id", "cancelled", "first.*")
        # Materialized once: both branches below (and the join) would otherwise each scan
        # the inner topic again.
        .localCheckpoint()
    )
    single = adds.where(F.col("repeat").isNull()).select(
        "id", "topic", F.lit(1).alias("occurrence"), "due_ms", "cancelled"
    )
    repeats = (
        adds.where(F.col("repeat").isNotNull())
        .withColumn("occurrence", F.lit(1))
        .withColumn("first_due_ms", F.col("due_ms"))
        .mapInArrow(partial(expand_batches, until_ms=window.end_ms), OUTPUT_DDL)
        .join(adds.select("id", "cancelled"), "id")
    )
    return single.unionByName(repeats).where(
        (F.col("due_ms") >= window.start_ms) & (F.col("due_ms") < window.end_ms)
    )


def delivered(
    spark: SparkSession, settings: ChronosSettings, topics: list[str], since_ms: int
) -> DataFrame:
    """Per (id, occurrence): deliveries, first delivery time, whether a later one collapsed it."""
    records = (
        _kafka(spark, settings, topics)
        .where(F.col("timestamp") >= since_ms)
        .where(F.col("chronos_id").isNotNull() & F.col("chronos_occurrence").isNotNull())
        .select(
            F.col("chronos_id").alias("id"),
            F.col("chronos_occurrence").alias("delivered_occurrence"),
            F.coalesce("chronos_skipped", F.lit(0)).alias("skipped"),
            "timestamp",
            F.col("chronos_due_ms").alias("delivered_due_ms"),
        )
    )
    covered = records.withColumn(
        "occurrence",
        F.explode(
            F.sequence(F.col("delivered_occurrence") - F.col("skipped"), "delivered_occurrence")
        ),
    )
    own = F.col("occurrence") == F.col("delivered_occurrence")
    return covered.groupBy("id", "occurrence").agg(
        F.sum(F.when(own, 1).otherwise(0)).alias("deliveries"),
        F.min(F.when(own, F.col("timestamp"))).alias("first_delivered_ms"),
        F.max(F.when(own, F.col("delivered_due_ms"))).alias("delivered_due_ms"),
        F.max(~own).alias("collapsed"),
    )


def classify(expected: DataFrame, deliveries: DataFrame, late_ms: int) -> DataFrame:
    """One row per expected occurrence with its status and lateness."""
    joined = expected.join(deliveries, ["id", "occurrence"], "left").withColumn(
        "deliveries", F.coalesce("deliveries", F.lit(0))
    )
    lateness = F.col("first_delivered_ms") - F.col("due_ms")
    status = (
        F.when((F.col("deliveries") > 0) & (lateness < 0), "early")
        .when(F.col("deliveries") > 1, "duplicated")
        .when((F.col("deliveries") > 0) & (lateness > late_ms), "late")
        .when(F.col("deliveries") > 0, "on_time")
        .when(F.coalesce("collapsed", F.lit(False)), "collapsed")
        .when(F.col("cancelled"), "cancelled")
        .otherwise("missing")
    )
    return joined.select(
        "id",
        "topic",
        "occurrence",
        "due_ms",
        "first_delivered_ms",
        lateness.alias("lateness_ms"),
        "deliveries",
        "cancelled",
        status.alias("status"),
    )


def _topic_stats(details: DataFrame) -> list[TopicAudit]:
    counts = [F.sum(F.when(F.col("status") == s, 1).otherwise(0)).alias(s) for s in STATUSES]
    lateness = F.col("lateness_ms")
    rows = (
        details.groupBy("topic")
        .agg(
            *counts,
            F.percentile(lateness, 0.5).alias("p50"),
            F.percentile(lateness, 0.99).alias("p99"),
            F.max(lateness).alias("max"),
        )
        .orderBy("topic")
        .collect()
    )
    return [
        TopicAudit(
            row["topic"],
            {s: int(row[s]) for s in STATUSES},
            None if row["p50"] is None else float(row["p50"]),
            None if row["p99"] is None else float(row["p99"]),
            None if row["max"] is None else int(row["max"]),
        )
        for row in rows
    ]


def run_audit(
    spark: SparkSession,
    settings: ChronosSettings,
    window: AuditWindow,
    out_dir: Path,
    *,
    late_ms: int = 1000,
    early_slack_ms: int = 3_600_000,
    targets: list[str] | None = None,
) -> AuditSummary:
    """Audit ``window``; writes ``details/`` (Parquet), ``summary.json`` and ``audit.png``.

    Deliveries are read from ``window.start_ms - early_slack_ms`` on, so an early delivery up
    to that much before its due time is seen as early (earlier still, it shows as missing).
    """
    started = time.monotonic()
    expected = scheduled(spark, settings, window).persist(StorageLevel.MEMORY_AND_DISK)
    topics = targets or sorted(r["topic"] for r in expected.select("topic").distinct().collect())
    details: DataFrame
    if topics:
        deliveries = delivered(spark, settings, topics, window.start_ms - early_slack_ms)
        deliveries = deliveries.persist(StorageLevel.MEMORY_AND_DISK)
        details = classify(expected, deliveries, late_ms)
        unexpected = (
            deliveries.where(
                (F.col("deliveries") > 0)
                & (F.col("delivered_due_ms") >= window.start_ms)
                & (F.col("delivered_due_ms") < window.end_ms)
            )
            .join(expected, ["id", "occurrence"], "left_anti")
            .count()
        )
    else:
        details = classify(expected, _no_deliveries(spark), late_ms)
        unexpected = 0
    out_dir.mkdir(parents=True, exist_ok=True)
    details.write.mode("overwrite").parquet(str(out_dir / "details"))
    written = spark.read.parquet(str(out_dir / "details"))
    per_topic = _topic_stats(written)
    totals = {s: sum(t.counts[s] for t in per_topic) for s in STATUSES}
    histogram = charts.lateness_histogram(written)
    expected.unpersist()
    summary = AuditSummary(
        window.start_ms,
        window.end_ms,
        late_ms,
        sum(totals.values()),
        totals,
        unexpected,
        per_topic,
        round(time.monotonic() - started, 3),
    )
    (out_dir / "summary.json").write_text(summary.to_json())
    charts.audit_chart(summary, histogram, out_dir / "audit.png")
    return summary


def _no_deliveries(spark: SparkSession) -> DataFrame:
    return spark.createDataFrame(
        [],
        "id string, occurrence int, deliveries bigint, first_delivered_ms bigint, "
        "delivered_due_ms bigint, collapsed boolean",
    )
