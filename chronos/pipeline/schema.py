"""Column layouts of the data sources, as Spark DDL and as the matching Arrow types."""

from __future__ import annotations

import pyarrow as pa

HEADER_TYPE = pa.list_(pa.struct([("name", pa.string()), ("value", pa.binary())]))
HEADERS_DDL = "array<struct<name: string, value: binary>>"

#: Records of any topic; the chronos_* columns decode the chronos- headers when present
#: (inner-topic requests and delivered records), null otherwise or when malformed (read as the
#: node reads them: ``chronos.wire.decimal_or_none``).
KAFKA_COLUMNS: list[tuple[str, pa.DataType, str]] = [
    ("topic", pa.string(), "string"),
    ("partition", pa.int32(), "int"),
    ("offset", pa.int64(), "bigint"),
    ("timestamp", pa.int64(), "bigint"),
    ("key", pa.binary(), "binary"),
    ("value", pa.binary(), "binary"),
    ("headers", HEADER_TYPE, HEADERS_DDL),
    ("chronos_op", pa.string(), "string"),
    ("chronos_id", pa.string(), "string"),
    ("chronos_topic", pa.string(), "string"),
    ("chronos_due_ms", pa.int64(), "bigint"),
    ("chronos_key", pa.binary(), "binary"),
    ("chronos_occurrence", pa.int32(), "int"),
    ("chronos_skipped", pa.int32(), "int"),
    ("chronos_repeat", pa.string(), "string"),
    ("chronos_repeat_interval_ms", pa.int64(), "bigint"),
    ("chronos_repeat_times", pa.int32(), "int"),
    ("chronos_repeat_multiplier", pa.int32(), "int"),
    ("chronos_repeat_max_interval_ms", pa.int64(), "bigint"),
    ("chronos_repeat_cron", pa.string(), "string"),
    ("chronos_repeat_zone", pa.string(), "string"),
    ("chronos_repeat_until_ms", pa.int64(), "bigint"),
    # Inner topic only: why a node refuses the record (it dead-letters it), null when it
    # accepts it; ``chronos.inner.accept_inner`` decides for both. Null on other topics.
    ("chronos_rejected", pa.string(), "string"),
]

#: Messages of a store checkpoint; ``slot_ms`` >= ``due_ms`` (a late arrival's slot is later).
CHECKPOINT_COLUMNS: list[tuple[str, pa.DataType, str]] = [
    ("id", pa.string(), "string"),
    ("topic", pa.string(), "string"),
    ("due_ms", pa.int64(), "bigint"),
    ("slot_ms", pa.int64(), "bigint"),
    ("occurrence", pa.int32(), "int"),
    ("first_due_ms", pa.int64(), "bigint"),
    ("repeat", pa.string(), "string"),
    ("repeat_interval_ms", pa.int64(), "bigint"),
    ("repeat_times", pa.int32(), "int"),
    ("repeat_multiplier", pa.int32(), "int"),
    ("repeat_max_interval_ms", pa.int64(), "bigint"),
    ("repeat_cron", pa.string(), "string"),
    ("repeat_zone", pa.string(), "string"),
    ("repeat_until_ms", pa.int64(), "bigint"),
    ("key", pa.binary(), "binary"),
    ("value", pa.binary(), "binary"),
    ("headers", HEADER_TYPE, HEADERS_DDL),
]

#: What the inner-topic writer takes: one validated-or-to-validate add request per row.
INNER_WRITE_COLUMNS = ("id", "topic", "key", "value", "headers", "due_ms")


def ddl(columns: list[tuple[str, pa.DataType, str]]) -> str:
    """Spark DDL of a column list."""
    return ", ".join(f"`{name}` {spark_type}" for name, _arrow, spark_type in columns)


def arrow_schema(columns: list[tuple[str, pa.DataType, str]]) -> pa.Schema:
    """Arrow schema of a column list."""
    return pa.schema([(name, arrow) for name, arrow, _spark in columns])
