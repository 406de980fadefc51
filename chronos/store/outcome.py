"""What became of a delivered message, kept by the node that delivered it (``outcomes`` family).

The seek alone says *that* a message went out; a user asking "where is my message?" wants
*where*: the target's partition and offset, or the dead-letter reason. The delivering node
records it with the progress that covers the delivery; backups, which deliver nothing, do not
have it (their status answer says delivered, without partition and offset).

Layout (big-endian): ``b"D" | at_ms:>Q | partition:>i | offset:>q | occurrence:>I`` for a
delivery, ``b"X" | at_ms:>Q | occurrence:>I | reason:utf8`` for a dead letter.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from chronos.types import EpochMs

_DELIVERED = struct.Struct(">cQiqI")
_DEAD = struct.Struct(">cQI")
DELIVERED = b"D"
DEAD_LETTERED = b"X"


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
