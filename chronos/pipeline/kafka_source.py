"""``chronos-kafka``: a Spark data source reading Kafka topics in parallel by partition and offset.

The JVM Kafka connector is not needed: planning (which offsets) runs on the driver with
confluent-kafka, and every split (one partition's offset range, at most
``maxRecordsPerSplit`` records) is read by one task with its own assigned consumer, so the
same code scales from ``local[*]`` to a cluster.

Options:
    topics: comma-separated topic names (required).
    startingOffsets / endingOffsets: ``earliest``, ``latest`` or JSON ``{"topic": {"0": 42}}``
        (default earliest / latest; the end is exclusive).
    startingTimestamp / endingTimestamp: epoch ms; the first offset at or after the time
        (they override the offset options).
    maxRecordsPerSplit: records per task (default 250000).
    payload: ``false`` leaves key, value and headers null (cheaper, for jobs that only need
        the chronos_* columns; the chronos- headers are still decoded). Default true.
    settings | bootstrap: where Kafka is (see ``chronos.pipeline.options``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import cast

import pyarrow as pa
from confluent_kafka import OFFSET_END, Consumer, KafkaError, TopicPartition
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from chronos import wire
from chronos.errors import ConfigError, DecodeError
from chronos.inner import accept_inner
from chronos.kafka.clients import KafkaClients
from chronos.kafka.librdkafka import ClientErrors
from chronos.kafka.librdkafka import consumer as kafka_consumer
from chronos.pipeline.options import int_option, settings_from_options
from chronos.pipeline.schema import KAFKA_COLUMNS, arrow_schema, ddl
from chronos.settings import ChronosSettings
from chronos.types import Headers

_ARROW = arrow_schema(KAFKA_COLUMNS)
_REJECTED = [name for name, _a, _s in KAFKA_COLUMNS].index("chronos_rejected")
_BATCH_ROWS = 20_000
_STALL_S = 30.0


@dataclass(frozen=True)
class OffsetRange:
    """Offsets ``[start, end)`` of one partition; ``end`` None reads to the partition's end as
    it is when the task runs (the end offset some brokers report is not trustworthy: Tansu's is
    the last batch's base offset + 1)."""

    topic: str
    partition: int
    start: int
    end: int | None


@dataclass(frozen=True)
class TimeFilter:
    """Keep records with ``start_ms <= timestamp < end_ms`` (None: unbounded)."""

    start_ms: int | None = None
    end_ms: int | None = None


class KafkaSplit(InputPartition):
    """One task's work: a single offset range."""

    def __init__(self, span: OffsetRange) -> None:
        super().__init__(span)
        self.span = span


def split_range(span: OffsetRange, estimate_end: int, max_records: int) -> list[OffsetRange]:
    """Cut a range into pieces of at most ``max_records`` offsets; an open end (None) stays
    open on the last piece, split by the estimate."""
    end = span.end if span.end is not None else estimate_end
    pieces = [
        OffsetRange(span.topic, span.partition, start, min(start + max_records, end))
        for start in range(span.start, end, max_records)
    ]
    if span.end is None:
        last = pieces.pop().start if pieces else span.start
        pieces.append(OffsetRange(span.topic, span.partition, last, None))
    return pieces


def _reader_config(settings: ChronosSettings) -> dict[str, str | int | float | bool]:
    """A consumer that only reads assigned partitions: no group membership, no commits."""
    config = KafkaClients(settings.kafka, "chronos-pipeline").consumer_config(
        "chronos-pipeline-reader",
        **{
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 100,
            "fetch.max.bytes": 64 << 20,
            "max.partition.fetch.bytes": 16 << 20,
            "queued.max.messages.kbytes": 262144,
        },
    )
    return config


def _position(spec: str | None, default: str) -> str | dict[str, dict[str, int]]:
    text = spec or default
    if text in ("earliest", "latest"):
        return text
    try:
        parsed = json.loads(text)
        return {t: {str(p): int(o) for p, o in parts.items()} for t, parts in parsed.items()}
    except (ValueError, AttributeError) as exc:
        raise ConfigError(
            f'offsets {text!r}: expected earliest, latest or JSON like {{"topic": {{"0": 42}}}}'
        ) from exc


def time_filter(options: Mapping[str, str]) -> TimeFilter:
    """The record-time bounds the options ask for."""
    return TimeFilter(
        int_option(options, "startingTimestamp"), int_option(options, "endingTimestamp")
    )


def plan_splits(settings: ChronosSettings, options: Mapping[str, str]) -> list[OffsetRange]:
    """Resolve the options to offset ranges of at most ``maxRecordsPerSplit`` (on the driver).

    A starting timestamp becomes an offset through the broker's time index (records before it
    are also filtered out while reading, so a broker with a coarse index stays correct); an
    ending timestamp only filters.
    """
    topics = [t.strip() for t in options.get("topics", "").split(",") if t.strip()]
    if not topics:
        raise ConfigError("the chronos-kafka source needs option topics=<t1,t2,...>")
    max_records = int_option(options, "maxRecordsPerSplit", 250_000) or 250_000
    start_ts = time_filter(options).start_ms
    start_spec = _position(options.get("startingOffsets"), "earliest")
    end_spec = _position(options.get("endingOffsets"), "latest")
    consumer = kafka_consumer(_reader_config(settings), ClientErrors("pipeline-reader"))
    try:
        metadata = consumer.list_topics(timeout=10)
        splits: list[OffsetRange] = []
        for topic in topics:
            found = metadata.topics.get(topic)
            if found is None or found.error is not None or not found.partitions:
                raise ConfigError(f"topic {topic!r} does not exist")
            for partition in sorted(found.partitions):
                tp = TopicPartition(topic, partition)
                low, high = consumer.get_watermark_offsets(tp, timeout=10, cached=False)
                start = _resolve(consumer, tp, start_spec, start_ts, low, high)
                end = (
                    None
                    if end_spec == "latest"
                    else _resolve(consumer, tp, end_spec, None, low, high)
                )
                if end is None or end > start:
                    splits += split_range(
                        OffsetRange(topic, partition, start, end), high, max_records
                    )
        return splits
    finally:
        consumer.close()


def _resolve(
    consumer: Consumer,
    tp: TopicPartition,
    spec: str | dict[str, dict[str, int]],
    timestamp: int | None,
    low: int,
    high: int,
) -> int:
    """One bound: a timestamp wins over an offset spec; clamped to the partition's offsets."""
    if timestamp is not None:
        found = consumer.offsets_for_times([TopicPartition(tp.topic, tp.partition, timestamp)], 10)[
            0
        ].offset
        return high if found < 0 or found == OFFSET_END else max(low, found)
    if spec == "earliest":
        return low
    if spec == "latest":
        return high
    assert isinstance(spec, dict)
    offset = spec.get(tp.topic, {}).get(str(tp.partition))
    if offset is None:
        raise ConfigError(f"offsets give no position for {tp.topic}[{tp.partition}]")
    if offset < 0:  # Spark's convention: -2 earliest, -1 latest
        return low if offset == -2 else high
    return max(low, offset)


class _Columns:
    """Column buffers of one Arrow batch, filled record by record."""

    def __init__(self) -> None:
        self.cols: list[list[object]] = [[] for _ in KAFKA_COLUMNS]

    def __len__(self) -> int:
        return len(self.cols[0])

    def batch(self) -> pa.RecordBatch:
        arrays = [
            pa.array(values, type=arrow)
            for values, (_n, arrow, _s) in zip(self.cols, KAFKA_COLUMNS, strict=True)
        ]
        self.cols = [[] for _ in KAFKA_COLUMNS]
        return pa.RecordBatch.from_arrays(arrays, schema=_ARROW)


def _number(raw: bytes | None) -> int | None:
    """A decimal header value as the node parses it; None when absent, malformed or beyond 64
    bits (the source never fails on data)."""
    return wire.decimal_or_none(raw)


def _int32(raw: bytes | None) -> int | None:
    """:func:`_number` for the 32-bit columns: None beyond their range too."""
    number = wire.decimal_or_none(raw)
    return number if number is not None and -(1 << 31) <= number < 1 << 31 else None


def _text(raw: bytes | None) -> str | None:
    if raw is None:
        return None
    return raw.decode("utf-8", "replace")


def read_range(
    settings: ChronosSettings, span: OffsetRange, times: TimeFilter, payload: bool = True
) -> Iterator[pa.RecordBatch]:
    """Every record of ``span`` (within ``times``) as Arrow batches; raises when the broker
    stops answering before the end."""
    consumer = kafka_consumer(_reader_config(settings), ClientErrors("pipeline-reader"))
    consumer.assign([TopicPartition(span.topic, span.partition, span.start)])
    columns = _Columns()
    cols = columns.cols
    end = span.end
    lo = times.start_ms if times.start_ms is not None else -(1 << 63)
    hi = times.end_ms if times.end_ms is not None else 1 << 63
    prefix = "chronos-"
    inner = span.topic == settings.topics.names.inner
    last_progress = time.monotonic()
    done = end is not None and span.start >= end
    try:
        while not done:
            records = consumer.consume(10_000, 0.5)
            if not records:
                if time.monotonic() - last_progress > _STALL_S:
                    raise TimeoutError(
                        f"no records from {span.topic}[{span.partition}] for {_STALL_S} s "
                        f"(range {span.start}..{end})"
                    )
                continue
            last_progress = time.monotonic()
            for record in records:
                error = record.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        # The end of what exists now; with an exact end only control records
                        # (transaction markers) can be left, so this is the end too.
                        done = True
                        break
                    raise RuntimeError(f"reading {span.topic}[{span.partition}]: {error}")
                offset = cast(int, record.offset())
                if end is not None and offset >= end:
                    done = True
                    break
                timestamp = record.timestamp()[1]
                if not lo <= timestamp < hi:
                    continue
                headers = cast("list[tuple[str, bytes | None]] | None", record.headers())
                fields: dict[str, bytes | None] = {}
                if headers:
                    for name, raw in headers:
                        if name.startswith(prefix):
                            fields[name] = raw
                cols[0].append(span.topic)
                cols[1].append(span.partition)
                cols[2].append(offset)
                cols[3].append(timestamp)
                if payload:
                    cols[4].append(record.key())
                    cols[5].append(record.value())
                    cols[6].append(headers or [])
                else:
                    cols[4].append(None)
                    cols[5].append(None)
                    cols[6].append(None)
                if fields:
                    _append_fields(cols, fields)
                else:
                    for column in cols[7:_REJECTED]:
                        column.append(None)
                cols[_REJECTED].append(
                    _rejection(record.key(), record.value(), headers, settings, timestamp)
                    if inner
                    else None
                )
                if len(cols[0]) >= _BATCH_ROWS:
                    yield columns.batch()
                    cols = columns.cols
        if len(columns):
            yield columns.batch()
    finally:
        consumer.close()


def _rejection(
    key: bytes | None,
    value: bytes | None,
    headers: Headers | None,
    settings: ChronosSettings,
    timestamp: int,
) -> str | None:
    """Why a node refuses this inner record, None when it accepts it. Judged at the record's
    timestamp, which is when a node reading along would have ingested it."""
    try:
        accept_inner(key, value, headers, settings.limits, settings.topics.names, timestamp)
    except DecodeError as exc:
        return exc.reason
    return None


def _append_fields(cols: list[list[object]], fields: dict[str, bytes | None]) -> None:
    get = fields.get
    cols[7].append(_text(get(wire.H_OP)))
    cols[8].append(_text(get(wire.H_ID)))
    cols[9].append(_text(get(wire.H_TOPIC)))
    cols[10].append(_number(get(wire.H_DUE)))
    cols[11].append(get(wire.H_KEY))
    cols[12].append(_int32(get(wire.H_OCCURRENCE)))
    cols[13].append(_int32(get(wire.H_SKIPPED)))
    cols[14].append(_text(get(wire.H_REPEAT)))
    cols[15].append(_number(get(wire.H_REPEAT_INTERVAL)))
    cols[16].append(_int32(get(wire.H_REPEAT_TIMES)))
    cols[17].append(_int32(get(wire.H_REPEAT_MULTIPLIER)))
    cols[18].append(_number(get(wire.H_REPEAT_MAX_INTERVAL)))
    cols[19].append(_text(get(wire.H_REPEAT_CRON)))
    cols[20].append(_text(get(wire.H_REPEAT_ZONE)))
    cols[21].append(_number(get(wire.H_REPEAT_UNTIL)))


class KafkaReader(DataSourceReader):
    """Plans splits on the driver; each task reads one."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self._options = options  # case-insensitive: Spark lowercases the names
        self._settings = settings_from_options(options)

    def partitions(self) -> Sequence[InputPartition]:
        splits = plan_splits(self._settings, self._options)
        # Spark needs at least one partition; an empty range reads nothing.
        return [KafkaSplit(r) for r in splits] or [KafkaSplit(OffsetRange("", 0, 0, 0))]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, KafkaSplit)
        span = partition.span
        if span.end is not None and span.end <= span.start:
            return iter(())
        payload = self._options.get("payload", "true").lower() != "false"
        return read_range(self._settings, span, time_filter(self._options), payload)


class KafkaDataSource(DataSource):
    """``spark.read.format("chronos-kafka").option("topics", "a,b").load()``."""

    @classmethod
    def name(cls) -> str:
        return "chronos-kafka"

    def schema(self) -> str:
        return ddl(KAFKA_COLUMNS)

    def reader(self, schema: StructType) -> DataSourceReader:
        return KafkaReader(self.options)
