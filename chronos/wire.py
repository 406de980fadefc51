"""Inner-topic wire format, version 1: the contract any Kafka client may produce directly.

A delay request is one Kafka record on the inner topic:

* record key   = the message id (UTF-8). Partitioning by id with the Java-default murmur2
                 partitioner puts add and cancel of one id on the same partition, in order.
* record value = the payload, untouched bytes (null allowed).
* headers      = the user's headers, untouched, plus chronos fields (ASCII values):

  ======================================  ========  =========================================
  header                                  required  meaning
  ======================================  ========  =========================================
  chronos-version                         yes       ``1``
  chronos-op                              yes       ``add``, ``cancel`` or ``reschedule``
  chronos-id                              yes       message id
  chronos-topic                           add       target topic
  chronos-due-ms                          add,      due time, epoch milliseconds (decimal);
                                          resched.  a reschedule's new due time
  chronos-key                             no        target record key (raw bytes); absent=null
  chronos-repeat                          no        ``fixed``, ``exponential`` or ``cron``
  chronos-repeat-interval-ms              fixed,    gap between occurrences (first gap)
                                          expo.
  chronos-repeat-times                    repeat    total occurrences
  chronos-repeat-multiplier               expo.     gap growth factor (integer >= 2)
  chronos-repeat-max-interval-ms          expo.     cap of the gap
  chronos-repeat-catch-up                 no        ``all`` (default) or ``latest``: overdue
                                                    occurrences each delivered, or only the
                                                    latest (see ``chronos.repeat.CatchUp``)
  chronos-repeat-cron                     cron      5 fields, or 6 with seconds first
  chronos-repeat-zone                     no        IANA time zone of the cron expression
                                                    (default ``UTC``)
  chronos-repeat-until-ms                 no        cron: no occurrence after this instant
  chronos-slot-ms                         refresh   the slot the delivering node stored it at
  chronos-occurrence                      refresh   the pending occurrence (1-based)
  chronos-moved-due-ms                    no        refresh: the due time a reschedule gave
                                                    the pending occurrence of a repeat
  chronos-cancelled-ms                    no        a restated cancel: when it was first
                                                    applied (compact mode)
  chronos-null-value                      no        ``1``: a refresh of a null payload (the
                                                    record's value is empty instead)
  ======================================  ========  =========================================

An *expiry* (op ``expire``, compact mode only: ``docs/design/live-state.md``) has a null value
and carries version, op, id and what it ends: ``chronos-slot-ms``, the slot of the delivered
message whose id left the delivering node's store, or ``chronos-cancelled-ms``, the time of
the cancel whose tombstone expired. Only chronos writes it; a node
holding the id otherwise (a newer add or cancel) restates it, any other node ignores it.
Restated cancels and refreshes in compact mode always carry a non-null (empty) value, so the
cleaner keeps them.

A *cron* repeat (added in release 0.25, wire version still 1: nodes of earlier releases
refuse ``chronos-repeat: cron`` as an unknown repeat and dead-letter the record, so upgrade
every node before a producer sends one) fires at the times its expression matches in its zone
(``chronos/cron.py`` has the daylight-saving rules). Its ``chronos-due-ms`` is when it may
start: occurrence 1 is the first fire at or after it.

A *reschedule* (op added in release 0.24, wire version still 1: nodes of earlier releases
dead-letter it as an unknown op, so upgrade every node before a producer sends one) carries
only version, op, id and the new due time, keyed by the id like add and cancel. It moves the
pending occurrence of a message the node still holds; see ``chronos/schedule/ledger.py`` for
who decides whether it came too late.

A *refresh* is an add that chronos itself re-appends for a message its store still holds
(``chronos/node/refresh.py``), so the message outlives its first record's retention. It
carries the slot the delivering node gave it and its current occurrence; a node that knows the
id ignores it (or moves a repeat forward to it), a node rebuilding from the topic stores it at
that slot. Only chronos writes these two headers; an add from any other producer must not.
A refresh of a repeat whose pending occurrence a reschedule moved also carries
``chronos-moved-due-ms`` (added after release 0.25, issue 63: a node of an earlier release
dead-letters such a refresh), and its ``chronos-due-ms`` stays the schedule's start.

Delivered records carry the user's key, value and headers plus ``chronos-id``,
``chronos-due-ms`` and ``chronos-occurrence`` (and ``chronos-skipped`` when overdue repeat
occurrences were collapsed).
"""

from __future__ import annotations

import re

from chronos import cron
from chronos.errors import DecodeError
from chronos.model import (
    CancelRequest,
    DelayMessage,
    Expiry,
    InnerRequest,
    Refresh,
    RescheduleRequest,
)
from chronos.names import HEADER_PREFIX
from chronos.repeat import CatchUp, Repeat, RepeatKind
from chronos.types import Headers

WIRE_VERSION = b"1"

H_VERSION = "chronos-version"
H_OP = "chronos-op"
H_ID = "chronos-id"
H_TOPIC = "chronos-topic"
H_DUE = "chronos-due-ms"
H_KEY = "chronos-key"
H_REPEAT = "chronos-repeat"
H_REPEAT_INTERVAL = "chronos-repeat-interval-ms"
H_REPEAT_TIMES = "chronos-repeat-times"
H_REPEAT_MULTIPLIER = "chronos-repeat-multiplier"
H_REPEAT_MAX_INTERVAL = "chronos-repeat-max-interval-ms"
#: Added in release 0.23 (wire version still 1: optional, and only sent for ``latest``; nodes
#: of earlier releases refuse records that carry it).
H_REPEAT_CATCH_UP = "chronos-repeat-catch-up"
#: Added in release 0.25 with ``chronos-repeat: cron``.
H_REPEAT_CRON = "chronos-repeat-cron"
H_REPEAT_ZONE = "chronos-repeat-zone"
H_REPEAT_UNTIL = "chronos-repeat-until-ms"
H_OCCURRENCE = "chronos-occurrence"
#: A refresh of a repeat whose pending occurrence was rescheduled: its new due time
#: (``DelayMessage.moved_due_ms``).
H_MOVED = "chronos-moved-due-ms"
H_SKIPPED = "chronos-skipped"
H_SLOT = "chronos-slot-ms"
#: A restated cancel's (``schedule/restatement.py``): when the cancel was first applied.
H_CANCELLED = "chronos-cancelled-ms"
#: A refresh of a message whose payload is null: the record's value is empty instead (a null
#: value is a tombstone to a compacted topic's cleaner, which would remove it).
H_NULL_VALUE = "chronos-null-value"
H_DLQ_REASON = "chronos-dlq-reason"
H_DLQ_SOURCE = "chronos-dlq-source"
H_DLQ_TARGET = "chronos-dlq-target"
H_DLQ_TRUNCATED = "chronos-dlq-truncated"

_INT_RE = re.compile(r"-?[0-9]{1,19}")

#: The chronos- headers an inner record may carry; any other chronos- name is refused, as the
#: proxy refuses it in a request (validation.py), instead of being dropped on delivery.
INNER_HEADERS = frozenset(
    {
        H_VERSION,
        H_OP,
        H_ID,
        H_TOPIC,
        H_DUE,
        H_KEY,
        H_REPEAT,
        H_REPEAT_INTERVAL,
        H_REPEAT_TIMES,
        H_REPEAT_MULTIPLIER,
        H_REPEAT_MAX_INTERVAL,
        H_REPEAT_CATCH_UP,
        H_REPEAT_CRON,
        H_REPEAT_ZONE,
        H_REPEAT_UNTIL,
        H_SLOT,
        H_OCCURRENCE,
        H_MOVED,
        H_CANCELLED,
        H_NULL_VALUE,
    }
)

OP_ADD = b"add"
OP_CANCEL = b"cancel"
OP_RESCHEDULE = b"reschedule"
#: An expiry tombstone (compact mode): the id left the delivering node's store.
OP_EXPIRE = b"expire"
#: The value of chronos' own records that must not be tombstones (a restated cancel, a refresh
#: of a null payload): present, empty.
KEPT = b""
_REPEAT_NAMES = {
    b"fixed": RepeatKind.FIXED,
    b"exponential": RepeatKind.EXPONENTIAL,
    b"cron": RepeatKind.CRON,
}
_REPEAT_WIRE = {kind: name for name, kind in _REPEAT_NAMES.items()}
_CATCH_UP_NAMES = {b"all": CatchUp.ALL, b"latest": CatchUp.LATEST}
_CATCH_UP_WIRE = {policy: name for name, policy in _CATCH_UP_NAMES.items()}


def _num(value: int) -> bytes:
    return str(value).encode()


def encode_add(message: DelayMessage) -> tuple[bytes, bytes | None, Headers]:
    """The inner record (key, value, headers) that schedules ``message``."""
    headers: Headers = list(message.headers)
    headers += [
        (H_VERSION, WIRE_VERSION),
        (H_OP, OP_ADD),
        (H_ID, message.id.encode()),
        (H_TOPIC, message.topic.encode()),
        (H_DUE, _num(message.first_due_ms)),
    ]
    if message.key is not None:
        headers.append((H_KEY, message.key))
    repeat = message.repeat
    if repeat is not None:
        headers += [(H_REPEAT, _REPEAT_WIRE[repeat.kind]), (H_REPEAT_TIMES, _num(repeat.times))]
        if repeat.kind is RepeatKind.CRON:
            headers += [
                (H_REPEAT_CRON, repeat.cron.encode()),
                (H_REPEAT_ZONE, repeat.zone.encode()),
            ]
            if repeat.until_ms:
                headers.append((H_REPEAT_UNTIL, _num(repeat.until_ms)))
        else:
            headers.append((H_REPEAT_INTERVAL, _num(repeat.interval_ms)))
        if repeat.kind is RepeatKind.EXPONENTIAL:
            headers += [
                (H_REPEAT_MULTIPLIER, _num(repeat.multiplier)),
                (H_REPEAT_MAX_INTERVAL, _num(repeat.max_interval_ms)),
            ]
        if repeat.catch_up is not CatchUp.ALL:
            headers.append((H_REPEAT_CATCH_UP, _CATCH_UP_WIRE[repeat.catch_up]))
    return message.id.encode(), message.value, headers


def encode_refresh(message: DelayMessage, slot_ms: int) -> tuple[bytes, bytes | None, Headers]:
    """The refresh record of a stored ``message`` (its current occurrence) held at ``slot_ms``."""
    key, value, headers = encode_add(message)
    headers += [(H_SLOT, _num(slot_ms)), (H_OCCURRENCE, _num(message.occurrence))]
    if message.moved_due_ms:
        headers.append((H_MOVED, _num(message.moved_due_ms)))
    if value is None:
        headers.append((H_NULL_VALUE, b"1"))
        value = KEPT
    return key, value, headers


def encode_cancel(message_id: str, cancelled_ms: int = 0) -> tuple[bytes, bytes | None, Headers]:
    """The inner record (key, value, headers) that cancels ``message_id``; a restatement's
    carries ``cancelled_ms``, when the cancel was first applied."""
    headers: Headers = [
        (H_VERSION, WIRE_VERSION),
        (H_OP, OP_CANCEL),
        (H_ID, message_id.encode()),
    ]
    if not cancelled_ms:
        return message_id.encode(), None, headers
    # A restatement stays in a compacted topic: a null value would be a tombstone.
    headers.append((H_CANCELLED, _num(cancelled_ms)))
    return message_id.encode(), KEPT, headers


def encode_expiry(
    message_id: str, slot_ms: int, cancelled_ms: int = 0
) -> tuple[bytes, bytes | None, Headers]:
    """The expiry tombstone of ``message_id`` (compact mode): a null value, so the cleaner
    removes the id's earlier records and, after ``delete.retention.ms``, this one. It names the
    state it ends: the delivered message's ``slot_ms``, or the cancel of ``cancelled_ms``; a
    store that holds the id otherwise (a newer add, a newer cancel) restates it."""
    headers: Headers = [
        (H_VERSION, WIRE_VERSION),
        (H_OP, OP_EXPIRE),
        (H_ID, message_id.encode()),
        (H_CANCELLED, _num(cancelled_ms)) if cancelled_ms else (H_SLOT, _num(slot_ms)),
    ]
    return message_id.encode(), None, headers


def encode_reschedule(message_id: str, due_ms: int) -> tuple[bytes, bytes | None, Headers]:
    """The inner record (key, value, headers) that moves ``message_id`` to ``due_ms``."""
    headers: Headers = [
        (H_VERSION, WIRE_VERSION),
        (H_OP, OP_RESCHEDULE),
        (H_ID, message_id.encode()),
        (H_DUE, _num(due_ms)),
    ]
    return message_id.encode(), None, headers


def _text(fields: dict[str, bytes | None], name: str, origin: str) -> str:
    raw = fields.get(name)
    if raw is None:
        raise DecodeError(f"missing header {name}", origin=origin)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DecodeError(f"header {name} is not UTF-8", origin=origin) from exc


def _int(fields: dict[str, bytes | None], name: str, origin: str) -> int:
    text = _text(fields, name, origin)
    if not _INT_RE.fullmatch(text):
        raise DecodeError(f"header {name}={text!r} is not a decimal integer", origin=origin)
    return int(text)


_INT64 = range(-(1 << 63), 1 << 63)


def decimal_or_none(raw: bytes | None) -> int | None:
    """A chronos- header's integer as the node reads it, None when the node would refuse it
    (absent, signs, spaces, underscores, over 19 digits) or when it leaves 64 bits: for readers
    that must never fail on data (the pipeline's columns are 64-bit)."""
    if raw is None:
        return None
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        return None
    if not _INT_RE.fullmatch(text):
        return None
    number = int(text)
    return number if number in _INT64 else None


def _due(raw: bytes | None, origin: str) -> int:
    # Plain ASCII digits, the only form producers send, take the short way; anything else
    # (signs, missing, non-UTF-8) goes through the checked one for its error message.
    if raw is not None and raw.isdigit() and len(raw) <= 19:
        return int(raw)
    return _int({H_DUE: raw} if raw is not None else {}, H_DUE, origin)


def decode(value: bytes | None, headers: Headers | None, origin: str = "") -> InnerRequest:
    """Decode one inner record; raises DecodeError with the reason (``origin`` names the offset).

    Rule checks (limits, topic names) are left to ``chronos.validation`` so that the proxy and
    the node apply the same ones. Flat on purpose: it runs once per ingested record.
    """
    fields: dict[str, bytes | None] = {}
    user: Headers = []
    for pair in headers or ():
        name = pair[0]
        if name.startswith(HEADER_PREFIX):
            if name in fields:
                raise DecodeError(f"header {name} appears twice", origin=origin)
            if name not in INNER_HEADERS:
                raise DecodeError(
                    f"header {name}: names starting with {HEADER_PREFIX!r} are reserved",
                    origin=origin,
                )
            fields[name] = pair[1]
        else:
            user.append(pair)
    version = fields.get(H_VERSION)
    if version != WIRE_VERSION:
        raise DecodeError(f"unsupported {H_VERSION} {version!r}, expected 1", origin=origin)
    op = fields.get(H_OP)
    # The id and topic the short way (no call per field); a missing, null or non-UTF-8 one
    # goes through _text for its error.
    try:
        message_id = fields[H_ID].decode()  # type: ignore[union-attr]
    except (KeyError, AttributeError, UnicodeDecodeError):
        message_id = _text(fields, H_ID, origin)
    if op == OP_ADD:
        repeat = None if H_REPEAT not in fields else _decode_repeat(fields, origin)
        due = _due(fields.get(H_DUE), origin)
        try:
            topic = fields[H_TOPIC].decode()  # type: ignore[union-attr]
        except (KeyError, AttributeError, UnicodeDecodeError):
            topic = _text(fields, H_TOPIC, origin)
        message = DelayMessage(
            message_id,
            topic,
            fields.get(H_KEY),
            value,
            user,
            due if repeat is None else _first_fire(repeat, due, origin),
            repeat,
        )
        if H_SLOT not in fields and H_OCCURRENCE not in fields and H_MOVED not in fields:
            return message
        return _refresh(message, fields, origin)
    if op == OP_CANCEL:
        if H_CANCELLED not in fields:
            return CancelRequest(message_id)
        cancelled_ms = _int(fields, H_CANCELLED, origin)
        if cancelled_ms <= 0:
            raise DecodeError(f"header {H_CANCELLED}={cancelled_ms} is not a time", origin=origin)
        return CancelRequest(message_id, cancelled_ms)
    if op == OP_RESCHEDULE:
        return RescheduleRequest(message_id, _due(fields.get(H_DUE), origin))
    if op == OP_EXPIRE:
        if H_CANCELLED in fields:
            return Expiry(message_id, 0, _int(fields, H_CANCELLED, origin))
        return Expiry(message_id, _int(fields, H_SLOT, origin))
    raise DecodeError(f"unknown {H_OP} {op!r}, expected add, cancel or reschedule", origin=origin)


def _refresh(message: DelayMessage, fields: dict[str, bytes | None], origin: str) -> Refresh:
    """An add carrying a slot: chronos' own copy of a message it still holds."""
    if (
        H_SLOT not in fields
        or H_OCCURRENCE not in fields
        or (H_NULL_VALUE in fields and message.value != KEPT)
    ):
        raise DecodeError(
            f"headers {H_SLOT} and {H_OCCURRENCE} come together (refresh records only)",
            origin=origin,
        )
    occurrence = _int(fields, H_OCCURRENCE, origin)
    times = 1 if message.repeat is None else message.repeat.times
    if not 1 <= occurrence <= times:
        raise DecodeError(f"header {H_OCCURRENCE}={occurrence} is not in 1..{times}", origin=origin)
    message.occurrence = occurrence
    if H_MOVED in fields:
        if message.repeat is None:
            raise DecodeError(f"header {H_MOVED} belongs to a repeat's refresh", origin=origin)
        moved = _int(fields, H_MOVED, origin)
        if moved <= 0:
            raise DecodeError(f"header {H_MOVED}={moved} is not a time", origin=origin)
        message.moved_due_ms = moved
    if H_NULL_VALUE in fields:
        message.value = None
    slot = _int(fields, H_SLOT, origin)
    if slot < message.due_ms:
        raise DecodeError(f"header {H_SLOT}={slot} is before the due time", origin=origin)
    return Refresh(message, slot)


def _decode_repeat(fields: dict[str, bytes | None], origin: str) -> Repeat | None:
    name = fields.get(H_REPEAT)
    if name is None:
        return None
    kind = _REPEAT_NAMES.get(name)
    if kind is None:
        raise DecodeError(f"unknown {H_REPEAT} {name!r}", origin=origin)
    times = _int(fields, H_REPEAT_TIMES, origin)
    raw_catch_up = fields.get(H_REPEAT_CATCH_UP)
    catch_up = CatchUp.ALL if raw_catch_up is None else _CATCH_UP_NAMES.get(raw_catch_up)
    if catch_up is None:
        raise DecodeError(
            f"unknown {H_REPEAT_CATCH_UP} {raw_catch_up!r} (all or latest)", origin=origin
        )
    if kind is RepeatKind.CRON:
        return _decode_cron(fields, times, catch_up, origin)
    interval = _int(fields, H_REPEAT_INTERVAL, origin)
    if kind is RepeatKind.FIXED:
        return Repeat(kind, interval, times, catch_up=catch_up)
    return Repeat(
        kind,
        interval,
        times,
        multiplier=_int(fields, H_REPEAT_MULTIPLIER, origin),
        max_interval_ms=_int(fields, H_REPEAT_MAX_INTERVAL, origin),
        catch_up=catch_up,
    )


def _first_fire(repeat: Repeat, due: int, origin: str) -> int:
    try:
        return repeat.first_due(due)
    except cron.CronError as exc:
        raise DecodeError(str(exc), origin=origin) from exc


def _decode_cron(
    fields: dict[str, bytes | None], times: int, catch_up: CatchUp, origin: str
) -> Repeat:
    """A cron repeat; an expression or zone chronos cannot read is a decode error (the
    record is dead-lettered with the reason)."""
    repeat = Repeat.calendar(
        _text(fields, H_REPEAT_CRON, origin),
        _text(fields, H_REPEAT_ZONE, origin) if H_REPEAT_ZONE in fields else "UTC",
        times=times,
        until_ms=_int(fields, H_REPEAT_UNTIL, origin) if H_REPEAT_UNTIL in fields else 0,
        catch_up=catch_up,
    )
    try:
        cron.schedule_of(repeat.cron, repeat.zone)
    except cron.CronError as exc:
        raise DecodeError(str(exc), origin=origin) from exc
    return repeat


def delivery_headers(message: DelayMessage, due_ms: int, skipped: int) -> Headers:
    """Headers of the delivered record: the user's, then chronos' own."""
    headers: Headers = [
        *message.headers,
        (H_ID, message.id.encode()),
        (H_DUE, b"%d" % due_ms),
        (H_OCCURRENCE, b"%d" % message.occurrence),
    ]
    if skipped:
        headers.append((H_SKIPPED, _num(skipped)))
    return headers
