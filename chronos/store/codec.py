"""Binary encoding of a stored message: no JSON around payloads, bytes kept exactly.

Layout of encoding version 1 (big-endian)::

    B  version (1)
    B  flags: 1 key present, 2 value present, 4 repeat present
    Q  first_due_ms
    I  occurrence
    [repeat] B kind, Q interval_ms, I times, I multiplier, Q max_interval_ms
    H  len(topic) + topic
    H  len(id) + id
    [key]   I len + bytes
    [value] I len + bytes
    I  header count, then per header: I len(name) + name, i len(value) (-1 = null) + value
"""

from __future__ import annotations

import struct

from chronos.errors import DecodeError
from chronos.model import DelayMessage
from chronos.repeat import Repeat, RepeatKind
from chronos.types import Headers

CODEC_VERSION = 1
_HEAD = struct.Struct(">BBQI")
_REPEAT = struct.Struct(">BQIIQ")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_I32 = struct.Struct(">i")
_F_KEY, _F_VALUE, _F_REPEAT = 1, 2, 4


def encode(message: DelayMessage) -> bytes:
    """Encode ``message`` for the messages column family."""
    flags = (
        (_F_KEY if message.key is not None else 0)
        | (_F_VALUE if message.value is not None else 0)
        | (_F_REPEAT if message.repeat is not None else 0)
    )
    parts = [_HEAD.pack(CODEC_VERSION, flags, message.first_due_ms, message.occurrence)]
    repeat = message.repeat
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
    topic = message.topic.encode()
    message_id = message.id.encode()
    parts += [_U16.pack(len(topic)), topic, _U16.pack(len(message_id)), message_id]
    if message.key is not None:
        parts += [_U32.pack(len(message.key)), message.key]
    if message.value is not None:
        parts += [_U32.pack(len(message.value)), message.value]
    parts.append(_U32.pack(len(message.headers)))
    for name, value in message.headers:
        raw_name = name.encode()
        parts += [_U32.pack(len(raw_name)), raw_name]
        if value is None:
            parts.append(_I32.pack(-1))
        else:
            parts += [_I32.pack(len(value)), value]
    return b"".join(parts)


def decode(raw: bytes) -> DelayMessage:
    """Decode a stored message; raises DecodeError on any inconsistency."""
    try:
        return _decode(raw)
    except (struct.error, UnicodeDecodeError, ValueError, IndexError) as exc:
        raise DecodeError(f"corrupt stored message: {exc}") from exc


def _decode(raw: bytes) -> DelayMessage:
    # Flat code on purpose: this runs for every delivery, and nested helpers cost a call each.
    version, flags, first_due, occurrence = _HEAD.unpack_from(raw, 0)
    if version != CODEC_VERSION:
        raise DecodeError(f"unknown stored message version {version}")
    pos = _HEAD.size
    repeat = None
    if flags & _F_REPEAT:
        kind, interval, times, multiplier, max_interval = _REPEAT.unpack_from(raw, pos)
        repeat = Repeat(RepeatKind(kind), interval, times, multiplier, max_interval)
        pos += _REPEAT.size
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
