"""Expanding repeats into their occurrences (audit: what should arrive; backlog: what will)."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from chronos.repeat import Repeat, RepeatKind

#: Input columns: the message, the occurrence to start from and its due time, the repeat.
INPUT = (
    "id",
    "topic",
    "occurrence",
    "due_ms",
    "first_due_ms",
    "repeat",
    "repeat_interval_ms",
    "repeat_times",
    "repeat_multiplier",
    "repeat_max_interval_ms",
)
OUTPUT = pa.schema(
    [
        ("id", pa.string()),
        ("topic", pa.string()),
        ("occurrence", pa.int32()),
        ("due_ms", pa.int64()),
    ]
)
OUTPUT_DDL = "id string, topic string, occurrence int, due_ms bigint"
_KINDS = {"fixed": RepeatKind.FIXED, "exponential": RepeatKind.EXPONENTIAL}


def expand_batches(batches: Iterator[pa.RecordBatch], until_ms: int) -> Iterator[pa.RecordBatch]:
    """One row per occurrence from the given one on, while due before ``until_ms``.

    The given occurrence keeps its given due time (a stored message's slot may be later than
    its due); later ones follow the repeat schedule from ``first_due_ms``. Rows without a
    (well-formed) repeat give just their own occurrence.
    """
    for batch in batches:
        data = batch.to_pydict()
        out: dict[str, list[object]] = {name: [] for name in OUTPUT.names}
        for row in zip(*(data[c] for c in INPUT), strict=True):
            message_id, topic, occurrence, due, first, kind, interval, times, mult, cap = row
            occurrence = occurrence or 1
            if due is None or due >= until_ms:
                continue
            out["id"].append(message_id)
            out["topic"].append(topic)
            out["occurrence"].append(occurrence)
            out["due_ms"].append(due)
            repeat_kind = _KINDS.get(kind) if kind is not None else None
            if repeat_kind is None or not interval or not times or first is None:
                continue
            repeat = Repeat(repeat_kind, interval, times, mult or 1, cap or 0)
            scheduled = repeat.due_of(first, occurrence)
            for number in range(occurrence + 1, times + 1):
                scheduled += repeat.gap_after(number - 1)
                if scheduled >= until_ms:
                    break
                next_due = scheduled
                out["id"].append(message_id)
                out["topic"].append(topic)
                out["occurrence"].append(number)
                out["due_ms"].append(next_due)
        yield pa.RecordBatch.from_pydict(out, schema=OUTPUT)
