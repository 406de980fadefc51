"""``chronos-inner``: a Spark writer that produces rows as delay requests to the inner topic.

Each row is one add request in wire format v1 (``chronos.wire``), produced with the same
durable producer settings as the proxy (idempotent, acks=all, murmur2 partitioning by id). A
task returns only after Kafka acknowledged all its records, and fails on any refusal; Spark
then retries the task, which re-produces some records: harmless, because the node keeps the
first add of an id. That is also why every row needs an id.

Columns: id, topic, key (binary), value (binary), headers (array<struct<name, value>>),
due_ms (epoch ms). Options: ``validate`` (default true: apply the proxy's rules to each row
and fail the task on the first bad one), ``settings`` | ``bootstrap`` | ``namespace``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from chronos.clock import SystemClock
from chronos.errors import ConfigError, ValidationError
from chronos.model import DelayMessage
from chronos.pipeline.inner_producer import InnerProducer
from chronos.pipeline.options import settings_from_options
from chronos.pipeline.schema import INNER_WRITE_COLUMNS
from chronos.settings import ChronosSettings
from chronos.validation import validate_message


@dataclass
class ProducedCount(WriterCommitMessage):
    """What one task produced (summed on the driver)."""

    records: int


def check_columns(schema: StructType) -> None:
    """Fail on the driver, before any task runs, when a column is missing."""
    missing = [c for c in INNER_WRITE_COLUMNS if c not in schema.fieldNames()]
    if missing:
        raise ConfigError(
            f"the chronos-inner writer needs columns {list(INNER_WRITE_COLUMNS)}; missing {missing}"
        )


def produce_batches(
    settings: ChronosSettings, batches: Iterator[pa.RecordBatch], validate: bool
) -> int:
    """Produce every row of ``batches`` to the inner topic; returns the count once acknowledged."""
    limits, names = settings.limits, settings.topics.names
    producer = InnerProducer(settings)
    now = SystemClock().now_ms()
    for batch in batches:
        data = batch.select(list(INNER_WRITE_COLUMNS)).to_pydict()
        for message_id, topic, key, value, headers, due in zip(
            *(data[c] for c in INNER_WRITE_COLUMNS), strict=True
        ):
            pairs = [(h["name"], h["value"]) for h in headers or []]
            message = DelayMessage(message_id, topic, key, value, pairs, due)
            if validate:
                try:
                    validate_message(message, limits, names, now)
                except ValidationError as exc:
                    raise ValidationError(
                        exc.field, f"{exc.message} (row id {message_id})"
                    ) from exc
            producer.send(message)
    return producer.finish()


class InnerTopicWriter(DataSourceArrowWriter):
    """Runs in every task; Arrow batches avoid a Python object per cell on the way in."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self._settings = settings_from_options(options)
        self._validate = options.get("validate", "true").lower() != "false"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return ProducedCount(produce_batches(self._settings, iterator, self._validate))


class InnerTopicDataSource(DataSource):
    """``df.write.format("chronos-inner").mode("append").save()``."""

    @classmethod
    def name(cls) -> str:
        return "chronos-inner"

    def writer(self, schema: StructType, overwrite: bool) -> InnerTopicWriter:
        check_columns(schema)
        return InnerTopicWriter(self.options)
