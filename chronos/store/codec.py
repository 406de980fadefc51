"""Binary encoding of a stored message: no JSON around payloads, bytes kept exactly.

Layout of encoding version 2 (big-endian): every length first, then every byte string, so a
decode is two ``struct`` calls and slices::

    B  version (2)
    B  flags: 1 key present, 2 value present, 4 repeat present, 8 repeat catches up with the
       latest occurrence only (``CatchUp.LATEST``; unset: all, which older stores meant too),
       16 the occurrence was moved by a reschedule (``DelayMessage.moved_due_ms``)
    Q  first_due_ms
    I  occurrence
    H  len(topic)     H  len(id)     I  len(key)     I  len(value)     I  header count
    [moved] Q moved_due_ms
    [repeat] B kind, Q interval_ms, I times, I multiplier, Q max_interval_ms
    [cron repeat] Q until_ms, H len(expression), H len(zone), expression, zone
    per header: I len(name), i len(value) (-1 = null)
    topic, id, [key], [value], then per header: name, [value]

Version 1 (lengths in front of each field) is still decoded: stores written by earlier
releases keep working. (A moved occurrence, flag 16, is new in version 2: an earlier release
cannot read a store holding one.)
"""

from __future__ import annotations

import functools
import struct

from chronos.errors import DecodeError
from chronos.model import (
    CancelRequest,
    DecodedRequest,
    DelayMessage,
    Expiry,
    InnerRequest,
    Op,
    Refresh,
    RescheduleRequest,
)
from chronos.repeat import CatchUp, Repeat, RepeatKind
from chronos.types import Headers

CODEC_VERSION = 2
_HEAD = struct.Struct(">BBQIHHIII")
_HEAD_V1 = struct.Struct(">BBQI")
_REPEAT = struct.Struct(">BQIIQ")
_CRON = struct.Struct(">QHH")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_I32 = struct.Struct(">i")
_U64 = struct.Struct(">Q")
_F_KEY, _F_VALUE, _F_REPEAT, _F_LATEST, _F_MOVED = 1, 2, 4, 8, 16


@functools.lru_cache(maxsize=64)
def _header_lengths(count: int) -> struct.Struct:
    return struct.Struct(">" + "Ii" * count)


#: Read once: an enum member's lookup on its class costs more than building the tuple.
_ADD, _CANCEL, _RESCHEDULE, _REFRESH, _EXPIRY = (
    Op.ADD,
    Op.CANCEL,
    Op.RESCHEDULE,
    Op.REFRESH,
    Op.EXPIRY,
)


def decoded_request(request: InnerRequest, value: bytes | None = None) -> DecodedRequest:
    """``request`` as the store takes it (``model.DecodedRequest``): the one mapping of a request
    object to its kind and fields, for ingest (``node/inner_reader.py``) and for callers that
    hold objects (``Ledger.apply``).

    ``value``: an add's or a refresh's stored value when the caller encoded it already (a
    benchmark encodes once); None encodes it here."""
    if isinstance(request, DelayMessage):
        # first_due_ms is the due time of occurrence 1 (every add read from the wire): no
        # property call per record.
        due = request.first_due_ms if request.occurrence == 1 else request.due_ms
        return _ADD, request.id, due, encode(request) if value is None else value
    if isinstance(request, CancelRequest):
        return _CANCEL, request.id, request.cancelled_ms, None
    if isinstance(request, RescheduleRequest):
        return _RESCHEDULE, request.id, request.due_ms, None
    if isinstance(request, Refresh):
        stored = encode(request.message) if value is None else value
        return _REFRESH, request.id, request.slot_ms, stored
    if isinstance(request, Expiry):
        return _EXPIRY, request.id, request.due_field, None
    raise TypeError(f"not an inner request: {type(request).__name__}")


def encode(message: DelayMessage) -> bytes:
    """Encode ``message`` for the messages column family."""
    topic = message.topic.encode()
    message_id = message.id.encode()
    key, value, headers, repeat = message.key, message.value, message.headers, message.repeat
    flags = (
        (_F_KEY if key is not None else 0)
        | (_F_VALUE if value is not None else 0)
        | (_F_REPEAT if repeat is not None else 0)
        | (_F_LATEST if repeat is not None and repeat.catch_up is CatchUp.LATEST else 0)
        | (_F_MOVED if message.moved_due_ms else 0)
    )
    parts = [
        _HEAD.pack(
            CODEC_VERSION,
            flags,
            message.first_due_ms,
            message.occurrence,
            len(topic),
            len(message_id),
            0 if key is None else len(key),
            0 if value is None else len(value),
            len(headers),
        )
    ]
    if message.moved_due_ms:
        parts.append(_U64.pack(message.moved_due_ms))
    if repeat is not None:
        parts.append(
            _REPEAT.pack(
                repeat.kind,
                repeat.interval_ms,
                repeat.times,
                repeat.multiplier,
                repeat.max_interval_ms,
            )
        )
        if repeat.kind is RepeatKind.CRON:
            expression, zone = repeat.cron.encode(), repeat.zone.encode()
            parts += (_CRON.pack(repeat.until_ms, len(expression), len(zone)), expression, zone)
    tail: list[bytes] = []
    if headers:
        lengths: list[int] = []
        for name, header_value in headers:
            raw_name = name.encode()
            tail.append(raw_name)
            if header_value is None:
                lengths += (len(raw_name), -1)
            else:
                lengths += (len(raw_name), len(header_value))
                tail.append(header_value)
        parts.append(_header_lengths(len(headers)).pack(*lengths))
    parts += (topic, message_id)
    if key is not None:
        parts.append(key)
    if value is not None:
        parts.append(value)
    parts += tail
    return b"".join(parts)


def decode(raw: bytes) -> DelayMessage:
    """Decode a stored message; raises DecodeError on any inconsistency."""
    try:
        if raw[:1] == b"\x02":
            return _decode(raw)
        if raw[:1] == b"\x01":
            return _decode_v1(raw)
    except (struct.error, UnicodeDecodeError, ValueError, IndexError) as exc:
        raise DecodeError(f"corrupt stored message: {exc}") from exc
    raise DecodeError(f"unknown stored message version {raw[:1]!r}")


def null_payload(raw: bytes) -> bool:
    """Whether a stored message's payload is null, without decoding it (both versions keep
    the flags at the same place)."""
    return not raw[1] & _F_VALUE


def has_repeat(raw: bytes) -> bool:
    """Whether a stored message repeats, without decoding it (both versions keep the flags at
    the same place)."""
    return bool(raw[1] & _F_REPEAT)


_FIRST_DUE = struct.Struct(">Q")


def first_due_of(raw: bytes) -> int:
    """The first due time of a stored message without decoding the rest (both versions)."""
    first_due: int = _FIRST_DUE.unpack_from(raw, 2)[0]
    return first_due


def moved_due_of(raw: bytes) -> int:
    """The due time a reschedule gave a stored message's occurrence, 0 when none (version 1
    never has one), without decoding the rest."""
    if not raw[1] & _F_MOVED:
        return 0
    moved: int = _U64.unpack_from(raw, _HEAD.size)[0]
    return moved


_OCCURRENCE_AT = struct.calcsize(">BBQ")


def occurrence_of(raw: bytes) -> int:
    """The occurrence of a stored message without decoding the rest (both versions keep it
    at the same place)."""
    try:
        occurrence: int = _U32.unpack_from(raw, _OCCURRENCE_AT)[0]
    except struct.error as exc:
        raise DecodeError(f"corrupt stored message: {exc}") from exc
    return occurrence


def _repeat_at(raw: bytes, pos: int, flags: int) -> tuple[Repeat, int]:
    """The repeat block at ``pos`` and where the next field starts."""
    kind, interval, times, multiplier, max_interval = _REPEAT.unpack_from(raw, pos)
    catch_up = CatchUp.LATEST if flags & _F_LATEST else CatchUp.ALL
    pos += _REPEAT.size
    if kind != RepeatKind.CRON:
        return Repeat(RepeatKind(kind), interval, times, multiplier, max_interval, catch_up), pos
    until, expression_len, zone_len = _CRON.unpack_from(raw, pos)
    pos += _CRON.size
    end = pos + expression_len
    expression = raw[pos:end].decode()
    pos, end = end, end + zone_len
    zone = raw[pos:end].decode()
    repeat = Repeat(
        RepeatKind.CRON, interval, times, multiplier, max_interval, catch_up, expression, zone,
        until,
    )  # fmt: skip
    return repeat, end


def _decode(raw: bytes) -> DelayMessage:
    # Flat code on purpose: this runs for every delivery, and nested helpers cost a call each.
    _, flags, first_due, occurrence, topic_len, id_len, key_len, value_len, count = (
        _HEAD.unpack_from(raw, 0)
    )
    pos = _HEAD.size
    moved = 0
    if flags & _F_MOVED:
        (moved,) = _U64.unpack_from(raw, pos)
        pos += 8
    repeat = None
    if flags & _F_REPEAT:
        repeat, pos = _repeat_at(raw, pos, flags)
    if count:
        if 8 * count > len(raw) - pos:  # before building a struct for a corrupt count
            raise ValueError(f"{count} headers cannot fit in {len(raw)} bytes")
        lengths = _header_lengths(count).unpack_from(raw, pos)
        pos += 8 * count
    end = pos + topic_len
    topic = raw[pos:end].decode()
    pos, end = end, end + id_len
    message_id = raw[pos:end].decode()
    pos = end
    key = value = None
    if flags & _F_KEY:
        end = pos + key_len
        key = raw[pos:end]
        pos = end
    if flags & _F_VALUE:
        end = pos + value_len
        value = raw[pos:end]
        pos = end
    headers: Headers = []
    for index in range(0, 2 * count, 2):
        end = pos + lengths[index]
        name = raw[pos:end].decode()
        size = lengths[index + 1]
        if size < 0:
            headers.append((name, None))
            pos = end
        else:
            pos = end + size
            headers.append((name, raw[end:pos]))
    if pos != len(raw):
        raise ValueError(f"truncated or {len(raw) - pos} trailing bytes")
    return DelayMessage(
        message_id, topic, key, value, headers, first_due, repeat, occurrence, moved
    )


def _decode_v1(raw: bytes) -> DelayMessage:
    """Version 1: a length in front of every field."""
    _, flags, first_due, occurrence = _HEAD_V1.unpack_from(raw, 0)
    pos = _HEAD_V1.size
    repeat = None
    if flags & _F_REPEAT:
        repeat, pos = _repeat_at(raw, pos, flags)
    size = len(raw)
    (length,) = _U16.unpack_from(raw, pos)
    end = pos + 2 + length
    topic = raw[pos + 2 : end].decode()
    (length,) = _U16.unpack_from(raw, end)
    pos, end = end + 2, end + 2 + length
    message_id = raw[pos:end].decode()
    pos = end
    key = value = None
    if flags & _F_KEY:
        (length,) = _U32.unpack_from(raw, pos)
        pos, end = pos + 4, pos + 4 + length
        key = raw[pos:end]
        pos = end
    if flags & _F_VALUE:
        (length,) = _U32.unpack_from(raw, pos)
        pos, end = pos + 4, pos + 4 + length
        value = raw[pos:end]
        pos = end
    (count,) = _U32.unpack_from(raw, pos)
    pos += 4
    headers: Headers = []
    for _ in range(count):
        (length,) = _U32.unpack_from(raw, pos)
        pos, end = pos + 4, pos + 4 + length
        name = raw[pos:end].decode()
        (length,) = _I32.unpack_from(raw, end)
        pos = end + 4
        if length < 0:
            headers.append((name, None))
        else:
            headers.append((name, raw[pos : pos + length]))
            pos += length
    if pos != size:
        raise ValueError(f"truncated or {size - pos} trailing bytes")
    return DelayMessage(message_id, topic, key, value, headers, first_due, repeat, occurrence)
