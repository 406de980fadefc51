"""The message model shared by the proxy, the wire format, the store and the node."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

from chronos.repeat import Repeat
from chronos.types import EpochMs, Headers


@dataclass(slots=True)
class DelayMessage:
    """One scheduled message (one occurrence of it, for repeats).

    Parameters:
        id: caller-given or generated id; unique per message, the idempotency key.
        topic: the real topic to deliver to.
        key: record key bytes, None for a null key.
        value: record value bytes, None for a null value.
        headers: user headers, passed through untouched.
        first_due_ms: due time of occurrence 1 (epoch ms).
        repeat: the repeat schedule, None for a one-shot message.
        occurrence: which occurrence this is (1-based).
        moved_due_ms: the due time a reschedule gave this occurrence of a repeat; 0 when it is
            where the repeat's schedule puts it. The schedule itself (``first_due_ms``) stays:
            the occurrences after a moved one are due where it puts them, and those it puts
            at or before the moved one's new time are passed over (``schedule.ledger.
            next_occurrence``; docs/using.md, Reschedule). A one-shot is moved by its
            ``first_due_ms``.
    """

    id: str
    topic: str
    key: bytes | None
    value: bytes | None
    headers: Headers = field(default_factory=list)
    first_due_ms: EpochMs = 0
    repeat: Repeat | None = None
    occurrence: int = 1
    moved_due_ms: EpochMs = 0

    @property
    def due_ms(self) -> EpochMs:
        """Due time of this occurrence (``scheduled_due_ms`` inlined: a delivery asks it a
        few times per repeat)."""
        if self.moved_due_ms:
            return self.moved_due_ms
        if self.repeat is None or self.occurrence == 1:
            return self.first_due_ms
        return self.repeat.due_of(self.first_due_ms, self.occurrence)

    @property
    def scheduled_due_ms(self) -> EpochMs:
        """Where the repeat's schedule puts this occurrence, moved or not."""
        if self.repeat is None or self.occurrence == 1:
            return self.first_due_ms
        return self.repeat.due_of(self.first_due_ms, self.occurrence)


@dataclass(frozen=True, slots=True)
class CancelRequest:
    """Cancel the message with ``id`` (all its remaining occurrences).

    ``cancelled_ms``: set only in a restatement (``schedule/restatement.py``): when the cancel
    was first applied, so a store restored from it expires the tombstone when the original
    would have; 0 means when applied."""

    id: str
    cancelled_ms: EpochMs = 0


@dataclass(frozen=True, slots=True)
class RescheduleRequest:
    """Move the pending occurrence of message ``id`` to ``due_ms``: that occurrence alone; a
    repeat's later occurrences stay where its schedule puts them, those at or before
    ``due_ms`` passed over (``DelayMessage.moved_due_ms``). A node that delivers decides: a
    message already due and handed to Kafka is not moved (see ``chronos/schedule/ledger.py``)."""

    id: str
    due_ms: EpochMs


@dataclass(frozen=True, slots=True)
class Refresh:
    """chronos' own copy of a message its store holds (``wire.encode_refresh``).

    Parameters:
        message: the message at its pending (or last delivered) occurrence.
        slot_ms: where the node that wrote it had stored it: delivered once the seek passes.
    """

    message: DelayMessage
    slot_ms: EpochMs

    @property
    def id(self) -> str:
        return self.message.id


@dataclass(frozen=True, slots=True)
class Expiry:
    """An expiry tombstone (``wire.encode_expiry``, compact mode): ``id`` left the delivering
    node's store; it ends the delivered message at ``slot_ms`` or the cancel of
    ``cancelled_ms`` (then ``slot_ms`` is 0). Decoded for the store with ``due_field``."""

    id: str
    slot_ms: EpochMs
    cancelled_ms: EpochMs = 0

    @property
    def due_field(self) -> EpochMs:
        """What the store's decoded request carries (see above)."""
        return -self.cancelled_ms if self.cancelled_ms else self.slot_ms


InnerRequest = DelayMessage | CancelRequest | RescheduleRequest | Refresh | Expiry


class Op(IntEnum):
    """What a decoded inner request does to the store (``DecodedRequest``'s first field)."""

    ADD = 0
    CANCEL = 1
    RESCHEDULE = 2
    #: chronos' own copy of a message (``Refresh``).
    REFRESH = 3
    #: an expiry tombstone (``Expiry``, compact mode).
    EXPIRY = 4


#: An inner request as the store takes it, ``(op, id, due field, stored value)``: a plain tuple,
#: since ingest builds one per record and decoding may run in another process, which pickles
#: it (a NamedTuple would cost ten times as much there: ``Ledger.apply_decoded``'s notes).
#:
#: - op: what it does (``Op``).
#: - id: the message id.
#: - due field: an add's due time; a reschedule's new due time; a refresh's slot (where the
#:   delivering node stored it); a cancel's 0, or in a restatement the time it was first
#:   applied; an expiry's slot it ends, or minus the time of the cancel it ends.
#: - stored value (``store/codec.py``): an add's or a refresh's message; None otherwise.
DecodedRequest = tuple[Op, str, EpochMs, bytes | None]
