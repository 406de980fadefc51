"""``chronos-checkpoint``: a Spark data source over a node store checkpoint.

Splits are due-time ranges (``splits`` of them, equal in time, default 8) read by separate
tasks, each opening the checkpoint read-only. By default only pending messages are read (slot
after the checkpoint's seek timestamp): what the node still has to deliver. A cluster member's
checkpoint holds a schedule per inner partition it hosts, each with its own seek timestamp,
its standby copies' too (their seek trails their holder's: a message the holder delivered can
still be pending there). ``partitions`` (comma-separated inner partitions) reads only those:
for a whole cluster, each partition from the checkpoint of the member delivering it.

Options: ``path`` (required; on a cluster, a directory every executor can read),
``splits``, ``includeDelivered`` (default false), ``payload`` (default true; false leaves key,
value and headers null, for jobs that only count), ``partitions`` (default: every schedule).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from chronos.errors import ConfigError
from chronos.pipeline.options import int_option
from chronos.pipeline.schema import CHECKPOINT_COLUMNS, arrow_schema, ddl
from chronos.repeat import RepeatKind
from chronos.store import codec, keys
from chronos.store.checkpoint import CheckpointReader

_ARROW = arrow_schema(CHECKPOINT_COLUMNS)
_BATCH_ROWS = 20_000
_REPEAT_NAMES = {
    RepeatKind.FIXED: "fixed",
    RepeatKind.EXPONENTIAL: "exponential",
    RepeatKind.CRON: "cron",
}


class SlotRange(InputPartition):
    """Messages with ``start_ms <= slot < stop_ms``."""

    def __init__(self, start_ms: int, stop_ms: int) -> None:
        super().__init__((start_ms, stop_ms))
        self.start_ms = start_ms
        self.stop_ms = stop_ms


def split_slots(first: int, last: int, splits: int) -> list[SlotRange]:
    """``splits`` contiguous ranges covering ``[first, last]`` (fewer when the span is short)."""
    span = last - first + 1
    splits = max(1, min(splits, span))
    bounds = [first + span * i // splits for i in range(splits + 1)]
    return [SlotRange(a, b) for a, b in zip(bounds, bounds[1:], strict=False) if b > a]


def read_slots(
    path: Path,
    start_ms: int,
    stop_ms: int,
    payload: bool,
    pending: bool = False,
    partitions: Sequence[int] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Decoded messages of one slot range as Arrow batches (``pending``: only those after
    their schedule's seek timestamp; ``partitions``: only those schedules)."""
    with CheckpointReader(path, partitions) as reader:
        cols: list[list[object]] = [[] for _ in CHECKPOINT_COLUMNS]
        for key, raw in reader.messages(start_ms, stop_ms, pending):
            message = codec.decode(raw)
            repeat = message.repeat
            row = [
                message.id,
                message.topic,
                message.due_ms,
                keys.slot_of(key),
                message.occurrence,
                message.first_due_ms,
                None if repeat is None else _REPEAT_NAMES[repeat.kind],
                None if repeat is None else repeat.interval_ms,
                None if repeat is None else repeat.times,
                None if repeat is None else repeat.multiplier,
                None if repeat is None else repeat.max_interval_ms,
                repeat.cron if repeat is not None and repeat.cron else None,
                repeat.zone if repeat is not None and repeat.cron else None,
                repeat.until_ms if repeat is not None and repeat.until_ms else None,
                message.key if payload else None,
                message.value if payload else None,
                message.headers if payload else None,
            ]
            for column, value in zip(cols, row, strict=True):
                column.append(value)
            if len(cols[0]) >= _BATCH_ROWS:
                yield _batch(cols)
                cols = [[] for _ in CHECKPOINT_COLUMNS]
        if cols[0]:
            yield _batch(cols)


def _batch(cols: list[list[object]]) -> pa.RecordBatch:
    arrays = [
        pa.array(values, type=arrow)
        for values, (_n, arrow, _s) in zip(cols, CHECKPOINT_COLUMNS, strict=True)
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=_ARROW)


class CheckpointSourceReader(DataSourceReader):
    """Plans slot ranges from the checkpoint's first and last key, on the driver."""

    def __init__(self, options: Mapping[str, str]) -> None:
        if "path" not in options:
            raise ConfigError("the chronos-checkpoint source needs option path=<checkpoint dir>")
        self._path = Path(options["path"])
        self._splits = int_option(options, "splits", 8) or 8
        self._delivered = options.get("includeDelivered", "false").lower() == "true"
        self._payload = options.get("payload", "true").lower() != "false"
        self._partitions = _partitions_option(options.get("partitions"))

    def partitions(self) -> Sequence[InputPartition]:
        with CheckpointReader(self._path, self._partitions) as reader:
            found = reader.slot_range()
            first = 0 if self._delivered else reader.seek_ms() + 1
        if found is None or found[1] < max(first, found[0]):
            return [SlotRange(0, 0)]
        return split_slots(max(first, found[0]), found[1], self._splits)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, SlotRange)
        if partition.stop_ms <= partition.start_ms:
            return iter(())
        return read_slots(
            self._path,
            partition.start_ms,
            partition.stop_ms,
            self._payload,
            not self._delivered,
            self._partitions,
        )


def _partitions_option(raw: str | None) -> list[int] | None:
    """The ``partitions`` option: comma-separated inner partitions; None when not given."""
    if raw is None or not raw.strip():
        return None
    try:
        found = [int(part) for part in raw.split(",") if part.strip()]
    except ValueError as exc:
        raise ConfigError(f"partitions must be comma-separated numbers, not {raw!r}") from exc
    if any(p < 0 for p in found):
        raise ConfigError(f"partitions must not be negative: {raw!r}")
    return found


class CheckpointDataSource(DataSource):
    """``spark.read.format("chronos-checkpoint").option("path", dir).load()``."""

    @classmethod
    def name(cls) -> str:
        return "chronos-checkpoint"

    def schema(self) -> str:
        return ddl(CHECKPOINT_COLUMNS)

    def reader(self, schema: StructType) -> DataSourceReader:
        return CheckpointSourceReader(self.options)
