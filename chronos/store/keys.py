"""The one module that owns storage keys.

Layout (all integers fixed-width big-endian, so byte order is numeric order):

* ``messages``: ``slot_ms:>Q | id:utf8`` -> encoded message. ``slot_ms`` is the due time, or
  for a late arrival (due at or before the push frontier) the first millisecond after the
  frontier, so the push worker's next scan sees it. ``slot_ms >= due`` always.
* ``index``: ``id:utf8`` -> ``b"P" | messages key`` (scheduled or delivered) or
  ``b"C" | cancelled_ms:>Q | how:1`` (cancel tombstone; ``how`` says what the cancel found:
  ``R`` removed a pending message, ``M`` removed one already handed to a sender, which may
  have gone out, ``U`` found nothing, ``F`` removed it on a following replica, which cannot
  tell; tombstones written before release 0.24 have no ``how``).
* ``outcomes``: ``id:utf8`` -> where its last delivered occurrence went (``outcome.py``).
* ``expiry``: ``expire_ms:>Q | id:utf8`` -> ``b""``, when a tombstone may be forgotten.
* ``arrivals`` (replica groups only): ``partition:>I | offset:>Q`` -> id of each add the store
  took, until a committed progress record covers that offset (see ``chronos/group/``).
* ``meta``: ``b"format-version"`` -> ASCII decimal; ``b"seek"`` -> ``seek_ms:>Q``;
  ``b"inner-offset:" | partition:>I`` -> next inner offset to read ``:>Q``, written in the same
  batch as the records it covers, so the store alone says where ingest resumes;
  ``b"began:" | partition:>I`` -> the inner offset this store's ingest began at ``:>Q`` (0 when
  it read the partition from its first record; see ``chronos/runtime/origin.py``);
  ``b"outbox:" | partition:>I | offset:>Q | id:utf8`` -> ``b""``: an id whose last inner record
  must be restated, decided on the record at that offset (``schedule/restatement.py``);
  ``b"undo:" | id:utf8`` -> ``slot_ms:>Q | encoded message``: a replica that leads moved the
  message by a reschedule no committed progress carries yet; where it was before (the undo
  journal, ``schedule/ledger.py``).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from chronos.types import EpochMs

_MS = struct.Struct(">Q")
MS_WIDTH = _MS.size
MAX_MS = (1 << 64) - 1

META_FORMAT_VERSION = b"format-version"
META_SEEK = b"seek"
#: The last delivered key of a partly delivered slot past the seek (empty: none).
META_CURSOR = b"cursor"
_META_INNER_OFFSET = b"inner-offset:"
_META_BEGAN = b"began:"
_PARTITION = struct.Struct(">I")

_INDEX_PENDING = b"P"
_INDEX_CANCELLED = b"C"

#: What a cancel found, the last byte of its tombstone (see the module docstring).
CANCEL_REMOVED = b"R"
CANCEL_RACED = b"M"
CANCEL_UNKNOWN = b"U"
CANCEL_FOLLOWER = b"F"


def pack_ms(ms: EpochMs) -> bytes:
    """Fixed-width big-endian milliseconds."""
    return _MS.pack(ms)


def unpack_ms(raw: bytes) -> EpochMs:
    """Inverse of pack_ms (reads the first 8 bytes)."""
    value: int = _MS.unpack_from(raw)[0]
    return value


def message_key(slot_ms: EpochMs, message_id: str) -> bytes:
    """Key of one scheduled message: sorts by slot, then id."""
    return message_key_raw(slot_ms, message_id.encode())


def message_key_raw(slot_ms: EpochMs, raw_id: bytes) -> bytes:
    """``message_key`` for an id already encoded (the ingest path encodes each id once)."""
    return _MS.pack(slot_ms) + raw_id


def split_message_key(key: bytes) -> tuple[EpochMs, str]:
    """(slot_ms, id) of a messages key."""
    return unpack_ms(key), key[MS_WIDTH:].decode()


def slot_of(key: bytes) -> EpochMs:
    """The slot of a messages key without decoding its id."""
    return unpack_ms(key)


def slot_bound(slot_ms: EpochMs) -> bytes:
    """The smallest key of ``slot_ms``: every key of an earlier slot sorts before it."""
    return _MS.pack(slot_ms)


@dataclass(frozen=True, slots=True)
class Pending:
    """An id's index entry while its message is scheduled (or delivered, until the delete
    worker removes it): where the message is stored."""

    key: bytes

    @property
    def slot_ms(self) -> EpochMs:
        """The slot the message is stored at."""
        return unpack_ms(self.key)


@dataclass(frozen=True, slots=True)
class Cancelled:
    """An id's cancel tombstone: when it was cancelled, and what the cancel found (one of the
    ``CANCEL_*`` bytes; None for a tombstone of a release before 0.24)."""

    at_ms: EpochMs
    how: bytes | None


def read_index(value: bytes | None) -> Pending | Cancelled | None:
    """What an index value says (None: the store knows nothing of the id). Callers outside
    this module read index values only through this, so the byte layout stays here."""
    if value is None:
        return None
    if value[:1] == _INDEX_PENDING:
        return Pending(value[1:])
    return Cancelled(unpack_ms(value[1:]), value[1 + MS_WIDTH :] or None)


def is_cancelled(value: bytes | None) -> bool:
    """Whether an index value is a cancel tombstone (without building an entry)."""
    return value is not None and value[:1] == _INDEX_CANCELLED


def index_pending(key: bytes) -> bytes:
    """Index value of a scheduled (or delivered) message."""
    return _INDEX_PENDING + key


def pending_key(index_value: bytes | None) -> bytes | None:
    """The messages key an index value schedules its id at; None for an unknown or cancelled
    id."""
    if index_value is None or index_value[:1] != _INDEX_PENDING:
        return None
    return index_value[1:]


def index_cancelled(cancelled_ms: EpochMs, how: bytes = CANCEL_REMOVED) -> bytes:
    """Index value of a cancel tombstone: when, and what the cancel found."""
    return _INDEX_CANCELLED + _MS.pack(cancelled_ms) + how


def expiry_key(expire_ms: EpochMs, message_id: str) -> bytes:
    """Key of an expiry entry."""
    return _MS.pack(expire_ms) + message_id.encode()


def inner_offset_key(partition: int) -> bytes:
    """Meta key holding the next inner offset to read on ``partition``."""
    return _META_INNER_OFFSET + _PARTITION.pack(partition)


def began_offset_key(partition: int) -> bytes:
    """Meta key holding the inner offset this store's ingest of ``partition`` began at."""
    return _META_BEGAN + _PARTITION.pack(partition)


_META_OUTBOX = b"outbox:"
#: The outbox's key range in ``meta`` (``;`` sorts right after ``:``).
OUTBOX_START, OUTBOX_STOP = _META_OUTBOX, b"outbox;"
_OUTBOX_AT = struct.Struct(">IQ")


def outbox_key(partition: int, offset: int, message_id: str) -> bytes:
    """Meta key of ``message_id`` to restate, decided on the record at ``offset`` of inner
    ``partition``: entries sort in the order they were decided."""
    return _META_OUTBOX + _OUTBOX_AT.pack(partition, offset) + message_id.encode()


def split_outbox_key(key: bytes) -> tuple[int, int, str]:
    """(partition, offset, id) of an outbox key."""
    start = len(_META_OUTBOX)
    end = start + _OUTBOX_AT.size
    partition, offset = _OUTBOX_AT.unpack(key[start:end])
    return int(partition), int(offset), key[end:].decode()


_META_UNDO = b"undo:"
#: The undo journal's key range in ``meta`` (``;`` sorts right after ``:``).
UNDO_START, UNDO_STOP = _META_UNDO, b"undo;"


def undo_key(raw_id: bytes) -> bytes:
    """Meta key of the undo journal's entry of an id (``schedule/ledger.py``)."""
    return _META_UNDO + raw_id


def undo_value(slot_ms: EpochMs, value: bytes) -> bytes:
    """An undo entry: the slot and stored value the message had before its first move that
    no committed progress carries."""
    return _MS.pack(slot_ms) + value


def split_undo(key: bytes, value: bytes) -> tuple[str, EpochMs, bytes]:
    """(id, slot ms, stored value) of an undo entry."""
    return key[len(_META_UNDO) :].decode(), unpack_ms(value), value[MS_WIDTH:]


_ARRIVAL = struct.Struct(">IQ")


def arrival_key(partition: int, offset: int) -> bytes:
    """Key of the add stored from inner ``partition`` at ``offset``: sorts by partition, offset."""
    return _ARRIVAL.pack(partition, offset)


def split_arrival_key(key: bytes) -> tuple[int, int]:
    """(partition, offset) of an arrivals key."""
    partition, offset = _ARRIVAL.unpack(key)
    return int(partition), int(offset)


#: First byte of an arrivals value that records a reschedule rather than an add (ids are
#: printable ASCII, ``validation.validate_id``, so no id starts with it).
ARRIVAL_RESCHEDULE = b"\x00"


def arrival_reschedule(raw_id: bytes, due_ms: EpochMs) -> bytes:
    """Arrivals value of a reschedule of ``raw_id`` to ``due_ms`` a follower has not decided."""
    return ARRIVAL_RESCHEDULE + pack_ms(due_ms) + raw_id


def split_arrival(value: bytes) -> tuple[bytes, EpochMs | None]:
    """(raw id, reschedule due ms) of an arrivals value; due None for an add."""
    if value[:1] == ARRIVAL_RESCHEDULE:
        return value[1 + MS_WIDTH :], unpack_ms(value[1:])
    return value, None
