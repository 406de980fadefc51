"""The Spark session the jobs run in, with chronos' data sources registered."""

from __future__ import annotations

import os
import sys

from chronos.pipeline import require_spark

require_spark()

from pyspark.sql import SparkSession  # noqa: E402

from chronos.pipeline.checkpoint_source import CheckpointDataSource  # noqa: E402
from chronos.pipeline.inner_writer import InnerTopicDataSource  # noqa: E402
from chronos.pipeline.kafka_source import KafkaDataSource  # noqa: E402


def register_sources(spark: SparkSession) -> None:
    """Make ``chronos-kafka``, ``chronos-inner`` and ``chronos-checkpoint`` usable as formats."""
    for source in (KafkaDataSource, InnerTopicDataSource, CheckpointDataSource):
        spark.dataSource.register(source)


def spark_session(master: str | None = None, app_name: str = "chronos-pipeline") -> SparkSession:
    """Get or create the session; ``master`` None keeps what spark-submit chose (else local[*]).

    Python workers must run the interpreter that has chronos installed, hence PYSPARK_PYTHON.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if master is None and not _submitted():
        master = "local[*]"
    if master is not None:
        builder = builder.master(master)
    if master is not None and master.startswith("local"):
        # One JVM does everything locally; the default 1 GiB heap is tight for millions of rows.
        builder = builder.config("spark.driver.memory", os.environ.get("SPARK_DRIVER_MEMORY", "2g"))
        # Spark's 200 shuffle partitions cost more in task overhead than they give on a few
        # cores: the audit of 1M+1M messages took 3x longer with them.
        cores = os.cpu_count() or 2
        builder = builder.config("spark.sql.shuffle.partitions", str(max(8, 4 * cores)))
    spark = (
        builder.config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .getOrCreate()
    )
    register_sources(spark)
    return spark


def _submitted() -> bool:
    """True under spark-submit, which passes the master through the JVM's system properties."""
    return "PYSPARK_GATEWAY_PORT" in os.environ
