"""What became of a delivered message, kept by the node that delivered it (``outcomes`` family).

The seek alone says *that* a message went out; a user asking "where is my message?" wants
*where*: the target's partition and offset, or the dead-letter reason. The delivering node
records it with the progress that covers the delivery; backups, which deliver nothing, do not
have it (their status answer says delivered, without partition and offset).

Layout (big-endian): ``b"D" | at_ms:>Q | partition:>i | offset:>q | occurrence:>I`` for a
delivery, ``b"X" | at_ms:>Q | occurrence:>I | reason:utf8`` for a dead letter, each under the
message's id.

One-shot deliveries, nearly all of them, go in *blocks* instead: one record per progress commit
(up to ``BLOCK_MAX`` deliveries) under ``BLOCK | last message key``, valued
``b"B" | at_ms:>Q`` then per delivery ``key length:>H | partition:>i | offset:>q | key`` in key
order. Why: a record per delivery cost the progress thread a RocksDB put each (~4 us per message
on the 2-core reference machine against ~1 us in blocks) and the store a memtable entry each. A
status lookup finds a one-shot's block from the message key the index still holds: commits
cover increasing key ranges (jobs are collected in key order), so the first block whose last
key is at or after it is the only one that can hold it. A repeat keeps a record under its id,
since its index moves on to the next occurrence.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from chronos.types import EpochMs

_DELIVERED = struct.Struct(">cQiqI")
_DEAD = struct.Struct(">cQI")
DELIVERED = b"D"
DEAD_LETTERED = b"X"
#: First byte of a block's key; no message id has it (ids are printable, ``validation``).
BLOCK = b"\x00"
#: Most deliveries in one block: a lookup reads one block.
BLOCK_MAX = 1024
_BLOCK_HEAD = struct.Struct(">cQ")
_BLOCK_ENTRY = struct.Struct(">Hiq")
_BLOCKED = b"B"


@dataclass(frozen=True, slots=True)
class Outcome:
    """One occurrence's end.

    Parameters:
        at_ms: when Kafka acknowledged it (node alone) or the transaction committed (master).
        occurrence: which occurrence (1 for a one-shot message).
        partition: target partition, None for a dead letter.
        offset: target offset, None for a dead letter.
        dead_reason: why it went to the dead-letter topic, None when delivered.
    """

    at_ms: EpochMs
    occurrence: int
    partition: int | None = None
    offset: int | None = None
    dead_reason: str | None = None


def delivered(at_ms: EpochMs, partition: int, offset: int, occurrence: int) -> bytes:
    """The value of a delivery."""
    return _DELIVERED.pack(DELIVERED, at_ms, partition, offset, occurrence)


def dead_lettered(at_ms: EpochMs, occurrence: int, reason: str) -> bytes:
    """The value of a dead letter."""
    return _DEAD.pack(DEAD_LETTERED, at_ms, occurrence) + reason.encode()


def decode(raw: bytes) -> Outcome | None:
    """An outcome value; None for one this release does not know (written by a later one)."""
    if raw[:1] == DELIVERED and len(raw) == _DELIVERED.size:
        _, at_ms, partition, offset, occurrence = _DELIVERED.unpack(raw)
        return Outcome(at_ms, occurrence, partition, offset)
    if raw[:1] == DEAD_LETTERED and len(raw) >= _DEAD.size:
        _, at_ms, occurrence = _DEAD.unpack_from(raw)
        return Outcome(at_ms, occurrence, dead_reason=raw[_DEAD.size :].decode(errors="replace"))
    return None


#: A one-shot delivery for a block: (message key, target partition, target offset).
BlockEntry = tuple[bytes, int, int]


def blocks(at_ms: EpochMs, entries: list[BlockEntry]) -> list[tuple[bytes, bytes]]:
    """(key, value) records holding ``entries`` (in key order), ``BLOCK_MAX`` per record."""
    head = _BLOCK_HEAD.pack(_BLOCKED, at_ms)
    pack = _BLOCK_ENTRY.pack
    found: list[tuple[bytes, bytes]] = []
    for start in range(0, len(entries), BLOCK_MAX):
        chunk = entries[start : start + BLOCK_MAX]
        value = head + b"".join([pack(len(k), p, o) + k for k, p, o in chunk])
        found.append((BLOCK + chunk[-1][0], value))
    return found


def find_in_block(raw: bytes, key: bytes) -> Outcome | None:
    """The delivery of the message at ``key`` in block value ``raw``, None when absent."""
    if raw[:1] != _BLOCKED or len(raw) < _BLOCK_HEAD.size:
        return None
    _, at_ms = _BLOCK_HEAD.unpack_from(raw)
    at, end, entry = _BLOCK_HEAD.size, len(raw), _BLOCK_ENTRY
    while at + entry.size <= end:
        length, partition, offset = entry.unpack_from(raw, at)
        at += entry.size
        if raw[at : at + length] == key:
            return Outcome(at_ms, 1, partition, offset)
        at += length
    return None
