"""Expanding repeats into their occurrences (audit: what should arrive; backlog: what will)."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from chronos import cron
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
    "repeat_cron",
    "repeat_zone",
    "repeat_until_ms",
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


def _repeat_of(row: tuple[object, ...]) -> Repeat | None:
    """The repeat of an ``INPUT`` row, None for a one-shot or a malformed repeat."""
    kind, interval, times, mult, cap, expression, zone, until = row[5:]
    if not isinstance(times, int) or times < 1:
        return None
    if kind == "cron" and isinstance(expression, str):
        repeat = Repeat.calendar(
            expression,
            zone if isinstance(zone, str) else "UTC",
            times=times,
            until_ms=until if isinstance(until, int) else 0,
        )
        try:
            cron.schedule_of(repeat.cron, repeat.zone)
        except cron.CronError:
            return None
        return repeat
    repeat_kind = _KINDS.get(kind) if isinstance(kind, str) else None
    if repeat_kind is None or not isinstance(interval, int) or not interval:
        return None
    multiplier = mult if isinstance(mult, int) and mult else 1
    return Repeat(repeat_kind, interval, times, multiplier, cap if isinstance(cap, int) else 0)


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
            message_id, topic, occurrence, due, first = row[:5]
            occurrence = occurrence or 1
            repeat = _repeat_of(row)
            if repeat is not None and repeat.kind is RepeatKind.CRON and first is not None:
                # An inner-topic add carries when the repeat may start; it starts at the fire.
                first = repeat.first_due(first)
                due = first if occurrence == 1 and due is not None and due < first else due
            if due is None or due >= until_ms:
                continue
            out["id"].append(message_id)
            out["topic"].append(topic)
            out["occurrence"].append(occurrence)
            out["due_ms"].append(due)
            if repeat is None or first is None:
                continue
            number, scheduled = occurrence, repeat.due_of(first, occurrence)
            while not repeat.is_last(first, number):
                scheduled = repeat.next_due(first, number, scheduled)
                number += 1
                if scheduled >= until_ms:
                    break
                out["id"].append(message_id)
                out["topic"].append(topic)
                out["occurrence"].append(number)
                out["due_ms"].append(scheduled)
        yield pa.RecordBatch.from_pydict(out, schema=OUTPUT)
