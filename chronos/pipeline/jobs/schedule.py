"""schedule: a table of messages -> validated add requests on the inner topic, rejects aside.

Input columns: ``topic``; ``value`` and ``key`` (string or binary; strings are UTF-8);
``headers`` (map, array of {name, value}, or a JSON object string in CSV); exactly one of
``deliver_at`` (timestamp, epoch ms, or ISO 8601 with offset) and ``delay`` (seconds or a
duration like ``30s``/``5m``); optional ``id``; optional ``cron`` (an expression, repeating
the message at its fires from the first at or after the due time) with ``times`` and optional
``zone`` (IANA, default UTC) and ``until`` (as ``deliver_at``). Rows without an id get one
derived from their content, so re-running the same input schedules nothing twice (the node
keeps the first add of an id for as long as it remembers the id: until ``delete.retention_s``
after delivery).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    DateType,
    MapType,
    NumericType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from chronos.errors import ConfigError
from chronos.pipeline.jobs.io import read_table, write_table
from chronos.pipeline.jobs.requests import INPUT_COLUMNS, REJECTS_DDL, schedule_batches
from chronos.pipeline.options import settings_to_option
from chronos.settings import ChronosSettings


@dataclass(frozen=True)
class ScheduleReport:
    """What a schedule run did."""

    rows: int
    accepted: int
    rejected: int
    seconds: float

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds if self.seconds else 0.0


def _bytes(column: Column, kind: DataType) -> Column:
    if isinstance(kind, BinaryType):
        return column
    return column.cast("string").cast("binary")


def _headers(column: Column, kind: DataType) -> Column:
    """Any supported headers column as array<struct<name: string, value: binary>>."""
    if isinstance(kind, StringType):
        column, kind = (
            F.from_json(column, "map<string,string>"),
            MapType(StringType(), StringType()),
        )
    if isinstance(kind, MapType):
        value_kind = kind.valueType
        return F.transform(
            F.map_entries(column),
            lambda e: F.struct(
                e["key"].cast("string").alias("name"), _bytes(e["value"], value_kind).alias("value")
            ),
        )
    if isinstance(kind, ArrayType) and isinstance(kind.elementType, StructType):
        names = kind.elementType.fieldNames()
        if {"name", "value"} <= set(names):
            value_kind = kind.elementType["value"].dataType
            return F.transform(
                column,
                lambda e: F.struct(
                    e["name"].cast("string").alias("name"),
                    _bytes(e["value"], value_kind).alias("value"),
                ),
            )
    raise ConfigError(
        f"headers column of type {kind.simpleString()}: expected a map, an array of "
        "{name, value} or a JSON object string"
    )


def _when_text(column: Column, kind: DataType) -> Column:
    """deliver_at as text for the row check: timestamps and numbers become epoch ms."""
    if isinstance(kind, TimestampType | TimestampNTZType | DateType):
        return F.unix_millis(column.cast("timestamp")).cast("string")
    if isinstance(kind, NumericType):
        return column.cast("bigint").cast("string")
    return column.cast("string")


def normalize(df: DataFrame) -> DataFrame:
    """Cast any supported input to the canonical columns (``INPUT_COLUMNS``)."""
    types = {f.name.lower(): (f.name, f.dataType) for f in df.schema.fields}
    if "topic" not in types:
        raise ConfigError(f"input has no topic column (columns: {df.columns})")

    def col(name: str) -> tuple[Column, DataType] | None:
        found = types.get(name)
        return None if found is None else (F.col(f"`{found[0]}`"), found[1])

    out: dict[str, Column] = {}
    for name in ("id", "topic"):
        found = col(name)
        out[name] = F.lit(None).cast("string") if found is None else found[0].cast("string")
    for name in ("key", "value"):
        found = col(name)
        out[name] = F.lit(None).cast("binary") if found is None else _bytes(*found)
    found = col("headers")
    empty = F.array().cast("array<struct<name: string, value: binary>>")
    out["headers"] = empty if found is None else F.coalesce(_headers(*found), empty)
    found = col("deliver_at")
    out["deliver_at"] = F.lit(None).cast("string") if found is None else _when_text(*found)
    found = col("delay")
    out["delay"] = F.lit(None).cast("string") if found is None else found[0].cast("string")
    for name in ("cron", "zone", "times"):
        found = col(name)
        out[name] = F.lit(None).cast("string") if found is None else found[0].cast("string")
    found = col("until")
    out["until"] = F.lit(None).cast("string") if found is None else _when_text(*found)
    if col("deliver_at") is None and col("delay") is None:
        raise ConfigError("input needs a deliver_at or a delay column")
    return df.select(*(out[name].alias(name) for name in INPUT_COLUMNS))


def run_schedule(
    spark: SparkSession,
    settings: ChronosSettings,
    input_path: str,
    rejects_path: str | None,
    fmt: str | None = None,
) -> ScheduleReport:
    """One pass over the input: tasks check rows and produce the valid ones; their small output
    (rejects plus a count per task) is cached, then the rejects are written out."""
    started = time.monotonic()
    outcome = (
        normalize(read_table(spark, input_path, fmt))
        .mapInArrow(
            partial(schedule_batches, settings_json=settings_to_option(settings)), REJECTS_DDL
        )
        .persist(StorageLevel.MEMORY_AND_DISK)
    )
    try:
        totals = outcome.agg(
            F.sum("produced").alias("produced"),
            F.count(F.col("reason")).alias("rejected"),
        ).first()
        assert totals is not None
        accepted, rejected = int(totals["produced"] or 0), int(totals["rejected"])
        if rejected and rejects_path is not None:
            write_table(outcome.where(F.col("reason").isNotNull()).drop("produced"), rejects_path)
    finally:
        outcome.unpersist()
    return ScheduleReport(accepted + rejected, accepted, rejected, time.monotonic() - started)
