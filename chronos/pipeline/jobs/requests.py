"""The schedule job's task: check each input row, produce the valid ones, return the rest.

Runs inside Spark tasks (``mapInArrow``) and applies exactly the proxy's rules
(``chronos.validation``), so a row the job accepts is a request the proxy would accept. Rows
are checked and produced in one pass: no cached copy of the input, one conversion to Python.
The task's output is small: the rejected rows with their reasons, then one row counting what
was produced (``produced`` set, everything else null).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from datetime import datetime

import pyarrow as pa

from chronos.clock import SystemClock, ceil_ms, floor_ms
from chronos.errors import ValidationError
from chronos.model import DelayMessage
from chronos.names import TopicNames
from chronos.pipeline.inner_producer import InnerProducer
from chronos.pipeline.options import settings_from_options
from chronos.pipeline.schema import HEADER_TYPE
from chronos.repeat import Repeat
from chronos.settings import LimitSettings
from chronos.types import EpochMs, Headers
from chronos.validation import (
    first_due_for,
    parse_duration_ms,
    resolve_due,
    validate_message,
)

#: The canonical input columns (``normalize`` casts any supported input to these).
INPUT_COLUMNS = (
    "id", "topic", "key", "value", "headers", "deliver_at", "delay", "cron", "zone", "times",
    "until",
)  # fmt: skip

REJECTS = pa.schema(
    [
        ("id", pa.string()),
        ("topic", pa.string()),
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("headers", HEADER_TYPE),
        ("deliver_at", pa.string()),
        ("delay", pa.string()),
        ("cron", pa.string()),
        ("zone", pa.string()),
        ("times", pa.string()),
        ("until", pa.string()),
        ("reason", pa.string()),
        ("field", pa.string()),
        ("produced", pa.int64()),
    ]
)
REJECTS_DDL = (
    "id string, topic string, key binary, value binary, "
    "headers array<struct<name: string, value: binary>>, deliver_at string, "
    "delay string, cron string, zone string, times string, until string, reason string, "
    "field string, produced bigint"
)


def content_id(
    topic: str, key: bytes | None, value: bytes | None, headers: Headers, when: str
) -> str:
    """A stable id for a row without one: re-running the same input yields the same ids, so
    the node keeps the first add and nothing is delivered twice. Identical rows share an id
    (give an ``id`` column to schedule identical messages more than once)."""
    digest = hashlib.blake2b(digest_size=16)
    for part in (topic.encode(), key, value, when.encode()):
        digest.update(b"-" if part is None else b"+%d:" % len(part))
        digest.update(part or b"")
    for name, raw in headers:
        digest.update(b"h%d:" % len(name) + name.encode())
        digest.update(b"-" if raw is None else b"+%d:" % len(raw))
        digest.update(raw or b"")
    return "r-" + digest.hexdigest()


def deliver_at_ms(text: str, field: str = "deliver_at", *, round_up: bool = True) -> EpochMs:
    """Epoch milliseconds, or ISO 8601 with a UTC offset (as the HTTP API takes it); a
    fraction of a millisecond rounds up (a due time: never before the instant given), or
    down with ``round_up`` False (an ``until``: no occurrence after the instant given)."""
    stripped = text.strip()
    if stripped.lstrip("-").isdigit():
        return int(stripped)
    try:
        moment = datetime.fromisoformat(stripped)
    except ValueError as exc:
        raise ValidationError(
            field, f"{text!r} is neither epoch ms nor ISO 8601 with an offset"
        ) from exc
    if moment.tzinfo is None:
        raise ValidationError(field, f"{text!r} has no UTC offset (e.g. +00:00 or Z)")
    return ceil_ms(moment) if round_up else floor_ms(moment)


def _cron_of(fields: tuple[object, ...]) -> Repeat | None:
    """The cron repeat of a row's ``cron``, ``zone``, ``times`` and ``until`` columns (None
    without a cron expression)."""
    expression, zone, times_text, until_text = fields
    if expression is None:
        if times_text is not None or until_text is not None:
            raise ValidationError("times", "times and until go with a cron expression")
        return None
    if times_text is None or not str(times_text).strip().isdigit():
        raise ValidationError("times", f"{times_text!r} is not a count of occurrences")
    return Repeat.calendar(
        str(expression),
        "UTC" if zone is None else str(zone),
        times=int(str(times_text)),
        until_ms=0
        if until_text is None
        else deliver_at_ms(str(until_text), "until", round_up=False),
    )


def check_row(
    row: tuple[object, ...], limits: LimitSettings, names: TopicNames, now: EpochMs
) -> DelayMessage:
    """The add request of one canonical row (``INPUT_COLUMNS`` order), or ValidationError."""
    message_id, topic, key, value, raw_headers, at_text, delay_text = row[:7]
    headers = [(h["name"], h["value"]) for h in raw_headers or []]  # type: ignore[attr-defined]
    if topic is None:
        raise ValidationError("topic", "missing")
    due = resolve_due(
        now,
        delay_ms=None if delay_text is None else parse_duration_ms(str(delay_text)),
        deliver_at_ms=None if at_text is None else deliver_at_ms(str(at_text)),
    )
    repeat = _cron_of(row[7:])
    if message_id is None:
        when = f"at:{at_text}" if at_text is not None else f"in:{delay_text}"
        if repeat is not None:
            when += f" cron:{repeat.cron} {repeat.zone} {repeat.times} {repeat.until_ms}"
        message_id = content_id(str(topic), key, value, headers, when)  # type: ignore[arg-type]
    first_due = first_due_for(repeat, due)
    message = DelayMessage(str(message_id), str(topic), key, value, headers, first_due, repeat)  # type: ignore[arg-type]
    validate_message(message, limits, names, now)
    return message


def schedule_batches(
    batches: Iterator[pa.RecordBatch], settings_json: str
) -> Iterator[pa.RecordBatch]:
    """Check every row, produce the valid ones to the inner topic, yield the rejected ones and,
    once Kafka acknowledged everything, the count produced."""
    settings = settings_from_options({"settings": settings_json})
    limits, names = settings.limits, settings.topics.names
    clock = SystemClock()
    producer = InnerProducer(settings)
    for batch in batches:
        now = clock.now_ms()
        data = batch.to_pydict()
        rejected: list[int] = []
        reasons: list[str] = []
        fields: list[str] = []
        for index, row in enumerate(zip(*(data[c] for c in INPUT_COLUMNS), strict=True)):
            try:
                message = check_row(row, limits, names, now)
            except ValidationError as exc:
                rejected.append(index)
                reasons.append(exc.message)
                fields.append(exc.field)
                continue
            producer.send(message)
        if rejected:
            picked = batch.take(pa.array(rejected, pa.int64()))
            columns = [picked.column(c) for c in INPUT_COLUMNS]
            columns[4] = columns[4].cast(HEADER_TYPE)
            yield pa.RecordBatch.from_arrays(
                [
                    *columns,
                    pa.array(reasons, pa.string()),
                    pa.array(fields, pa.string()),
                    pa.nulls(len(rejected), pa.int64()),
                ],
                schema=REJECTS,
            )
    produced = producer.finish()
    stats = {name: pa.nulls(1, REJECTS.field(name).type) for name in REJECTS.names}
    stats["produced"] = pa.array([produced], pa.int64())
    yield pa.RecordBatch.from_pydict(stats, schema=REJECTS)
