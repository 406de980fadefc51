"""The rules a delay request must meet, shared by the proxy, the node's ingest and the pipeline."""

from __future__ import annotations

import functools
import re

from chronos import cron
from chronos.errors import ValidationError
from chronos.model import DelayMessage
from chronos.names import HEADER_PREFIX, TopicNames
from chronos.repeat import Repeat, RepeatKind
from chronos.settings import LimitSettings
from chronos.types import EpochMs

#: The characters of a Kafka topic name and of a message id; the OpenAPI schema states the
#: same patterns (proxy/http/openapi_rules.py).
TOPIC_CHARS = r"[A-Za-z0-9._-]"
ID_CHARS = r"[A-Za-z0-9._:-]"
_TOPIC_RE = re.compile(TOPIC_CHARS + "{1,249}")
_ID_RE = re.compile(ID_CHARS + "+")
MAX_MULTIPLIER = 1000
_PREFIX_LEN = len(HEADER_PREFIX)
_DURATION_RE = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)?")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, None: 1000}


@functools.lru_cache(maxsize=1024)
def _duration(text: str) -> int | None:
    match = _DURATION_RE.fullmatch(text.strip())
    return None if match is None else round(float(match.group(1)) * _UNIT_MS[match.group(2)])


def parse_duration_ms(text: str, field: str = "delay") -> int:
    """``250ms``, ``5s``, ``2m``, ``1h``, ``1d``; a bare number is seconds."""
    value = _duration(text)
    if value is None:
        raise ValidationError(field, f"{text!r} is not a duration like 250ms, 5s, 2m, 1h")
    return value


@functools.lru_cache(maxsize=4096)
def _topic_problem(topic: str, namespace: str) -> str | None:
    """Cached: a few topic names recur across millions of requests (bulk jobs, ingest). Keyed by
    the namespace string, whose hash Python caches, not by the TopicNames object."""
    if not _TOPIC_RE.fullmatch(topic) or topic in (".", ".."):
        return f"{topic!r} is not a valid Kafka topic name (1-249 of [A-Za-z0-9._-])"
    if TopicNames(namespace).is_internal(topic):
        return f"{topic!r} is an internal topic and cannot be a target"
    return None


def validate_topic(topic: str, names: TopicNames, field: str = "topic") -> None:
    """Kafka's topic-name rules, and never one of chronos' or Kafka's internal topics."""
    problem = _topic_problem(topic, names.namespace)
    if problem is not None:
        raise ValidationError(field, problem)


def validate_id(message_id: str, limits: LimitSettings, field: str = "id") -> None:
    """Ids are printable tokens so they can appear in URLs, logs and record keys unchanged."""
    # The pattern admits ASCII only, so once it matched, characters and bytes count the same.
    if _ID_RE.fullmatch(message_id) and len(message_id) <= limits.max_id_bytes:
        return
    if not message_id:
        raise ValidationError(field, "must not be empty")
    if len(message_id.encode()) > limits.max_id_bytes:
        raise ValidationError(field, f"longer than {limits.max_id_bytes} bytes")
    raise ValidationError(field, "may contain only letters, digits and . _ : -")


def resolve_due(
    now_ms: EpochMs, *, delay_ms: int | None = None, deliver_at_ms: EpochMs | None = None
) -> EpochMs:
    """Exactly one of delay or deliver_at; a deliver_at in the past means "deliver now"."""
    if (delay_ms is None) == (deliver_at_ms is None):
        raise ValidationError("delay", "give exactly one of delay and deliver_at")
    if delay_ms is not None:
        if delay_ms < 0:
            raise ValidationError("delay", "must not be negative (use deliver_at for a time)")
        return now_ms + delay_ms
    assert deliver_at_ms is not None
    if deliver_at_ms < 0:
        raise ValidationError("deliver_at", "must not be before 1970-01-01")
    return deliver_at_ms


def validate_reschedule(
    message_id: str, due_ms: EpochMs, limits: LimitSettings, now_ms: EpochMs
) -> None:
    """The rules of a reschedule: a valid id and a due time within the horizon."""
    validate_id(message_id, limits)
    if due_ms < 0:
        raise ValidationError("deliver_at", "must not be before 1970-01-01")
    if due_ms > now_ms + limits.max_delay_s * 1000:
        raise ValidationError("deliver_at", f"more than {limits.max_delay_s} s ahead")


def first_due_for(repeat: Repeat | None, start: EpochMs) -> EpochMs:
    """Occurrence 1's due time for a new request that may start at ``start``: a cron repeat's
    first fire at or after it (an unreadable expression is the caller's error).

    Every producer of new requests (the proxy, the client library, the pipeline) asks this
    first, so here a cron expression is held to the documented grammar (``R``, ``H``, ``?``
    and the rest of ``cron.CronSchedule.refused`` are a 422 naming ``repeat.cron``).
    ``validate_message``, which a node's ingest also runs on records an earlier release
    acknowledged, only asks that the expression loads."""
    if repeat is None or repeat.kind is not RepeatKind.CRON:
        return start
    try:
        refused = cron.schedule_of(repeat.cron, repeat.zone).refused
        if refused is not None:
            raise cron.CronError(refused)
        return repeat.first_due(start)
    except cron.CronError as exc:
        raise ValidationError("repeat.cron", str(exc)) from exc


def validate_repeat(repeat: Repeat, limits: LimitSettings) -> None:
    """Bounds that keep a repeat from flooding a topic or living forever."""
    if not 1 <= repeat.times <= limits.repeat_max_times:
        raise ValidationError("repeat.times", f"must be 1..{limits.repeat_max_times}")
    if repeat.kind is RepeatKind.CRON:
        try:
            cron.schedule_of(repeat.cron, repeat.zone)
        except cron.CronError as exc:
            raise ValidationError("repeat.cron", str(exc)) from exc
        if repeat.until_ms < 0:
            raise ValidationError("repeat.until", "must not be before 1970-01-01")
        return
    lo, hi = limits.repeat_min_interval_ms, limits.repeat_max_interval_ms
    if not lo <= repeat.interval_ms <= hi:
        raise ValidationError("repeat.interval_ms", f"must be {lo}..{hi} ms")
    if repeat.kind is RepeatKind.EXPONENTIAL:
        if not 2 <= repeat.multiplier <= MAX_MULTIPLIER:
            raise ValidationError("repeat.multiplier", f"must be 2..{MAX_MULTIPLIER}")
        if not repeat.interval_ms <= repeat.max_interval_ms <= hi:
            raise ValidationError(
                "repeat.max_interval_ms", f"must be between interval_ms and {hi} ms"
            )


def _cron_last_due(repeat: Repeat, first: EpochMs, limits: LimitSettings, horizon: int) -> int:
    """A cron repeat's last occurrence's due time, or a fire past the horizon when not all of
    its ``times`` fit before it; its fires no closer than the shortest repeat interval.

    Counted, not walked (issue 62): the proxy and every node's ingest run this, and the
    node's cost per record must not grow with ``times``. The gap is the expression's shortest
    on the wall clock (``CronSchedule.min_gap_ms``: a night the clocks go forward can bring
    two fires closer, by up to the jump), checked when the repeat has a second occurrence.
    """
    if repeat.until_ms and repeat.until_ms < first:
        raise ValidationError("repeat.until", "is before the first occurrence")
    if first > horizon:
        return first
    try:
        schedule = cron.schedule_of(repeat.cron, repeat.zone)
        bounded = bool(repeat.until_ms) and repeat.until_ms <= horizon
        end = repeat.until_ms if bounded else horizon
        more = schedule.fires_between(first, end, repeat.times - 1)  # after the first, in time
        last = schedule.after(first, more)
        if more < repeat.times - 1 and not bounded:
            following = schedule.after(last, 1)  # the first past the horizon
            if not repeat.until_ms or following <= repeat.until_ms:
                last = following
    except cron.CronError as exc:
        raise ValidationError("repeat.cron", str(exc)) from exc
    if last != first and schedule.min_gap_ms < limits.repeat_min_interval_ms:
        raise ValidationError(
            "repeat.cron",
            f"fires {schedule.min_gap_ms} ms apart, less than {limits.repeat_min_interval_ms} ms",
        )
    return last


def validate_message(
    message: DelayMessage, limits: LimitSettings, names: TopicNames, now_ms: EpochMs
) -> None:
    """Every rule for an add request; raises ValidationError naming the first bad field.

    The size limit counts key + value + header names and values, in one pass over the headers.
    """
    validate_id(message.id, limits)
    validate_topic(message.topic, names)
    key, value = message.key, message.value
    size = (0 if key is None else len(key)) + (0 if value is None else len(value))
    for index, (name, header_value) in enumerate(message.headers):
        if not name:
            raise ValidationError(f"headers[{index}]", "header name must not be empty")
        if "\x00" in name:
            # Kafka clients in C (librdkafka, so every confluent-kafka) end a name there.
            raise ValidationError(f"headers[{index}]", "header name must not contain NUL")
        if name[:_PREFIX_LEN].lower() == HEADER_PREFIX:
            raise ValidationError(
                f"headers[{index}]", f"names starting with {HEADER_PREFIX!r} are reserved"
            )
        size += len(name.encode()) + (0 if header_value is None else len(header_value))
    if size > limits.max_message_bytes:
        raise ValidationError(
            "value",
            f"key + value + headers is {size} bytes, more than {limits.max_message_bytes}",
            status=413,
        )
    due = message.first_due_ms
    if due < 0:
        raise ValidationError("deliver_at", "must not be before 1970-01-01")
    horizon = now_ms + limits.max_delay_s * 1000
    if message.repeat is not None:
        validate_repeat(message.repeat, limits)
        if message.repeat.kind is RepeatKind.CRON:
            last_due = _cron_last_due(message.repeat, due, limits, horizon)
        else:
            last_due = message.repeat.due_of(due, message.repeat.times)
        if last_due > horizon:
            raise ValidationError(
                "repeat", f"last occurrence is more than {limits.max_delay_s} s ahead"
            )
    if due > horizon:
        raise ValidationError("deliver_at", f"more than {limits.max_delay_s} s ahead")
