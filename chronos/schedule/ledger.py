"""Every write to the schedule goes through the ledger.

Ingest (adds, cancels), progress (seek timestamp, next repeat occurrences) and the delete
worker all change the same keys; doing it in one place, one writer at a time, keeps the index
consistent with the messages and the seek timestamp atomic with what it covers. Writes that
place messages reserve their slots on the push frontier (see ``frontier.py``).

The ledger owns the seek timestamp (``seek_ms``); every other component reads it here. Where an
add goes is its ``Placement``'s call: a node alone and a master place after the frontier, a
following replica at the due time (``chronos/group/placement.py`` builds on ``writing``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Protocol

import structlog

from chronos.clock import Clock
from chronos.model import (
    DecodedRequest,
    DelayMessage,
    InnerRequest,
    Op,
    RescheduleRequest,
)
from chronos.schedule.frontier import Frontier
from chronos.schedule.restatement import OutboxIndex
from chronos.settings import DeleteSettings
from chronos.store import codec, keys
from chronos.store.rocks import RocksBatch, RocksStore
from chronos.types import EpochMs

log = structlog.get_logger(__name__)

_CHUNK = 10_000


class Placement(Protocol):
    """Where the ledger puts an add and what a cancel may conclude; read once per write, under
    the ledger's lock, so a switch made under ``Ledger.locked`` applies from the next write."""

    @property
    def leading(self) -> bool:
        """True: adds go after the frontier (``Frontier.slot_for``) and a cancel behind the
        seek is "too late". False (a following replica): adds go to their due time and every
        cancel deletes, since the store cannot tell delivered from not yet reached."""
        ...

    @property
    def tracks_arrivals(self) -> bool:
        """True: each add's inner ``partition|offset`` is recorded (the arrivals column)."""
        ...

    @property
    def covered(self) -> Mapping[int, int] | None:
        """A following replica: the inner offsets its last applied committed progress covers
        (an add below them at or behind the seek was delivered); None when not known."""
        ...


@dataclass(frozen=True)
class FixedPlacement:
    """A placement that never changes."""

    leading: bool = True
    tracks_arrivals: bool = False
    covered: Mapping[int, int] | None = None


#: A node alone: places after the frontier, records no arrivals.
ALONE = FixedPlacement()


@dataclass
class LedgerWrite:
    """One atomic write under the ledger's lock (see ``Ledger.writing``).

    Parameters:
        batch: the write batch, written when the block ends.
        frontier: the frontier as of the write's start (its slots are reserved after it).
        seek_ms: the seek; raise it to move the seek in the same batch.
        earliest: the earliest slot placed, to wake the push worker for.
    """

    batch: RocksBatch
    frontier: EpochMs
    seek_ms: EpochMs
    earliest: EpochMs | None = None

    def placed(self, slot_ms: EpochMs) -> None:
        """A message was put at ``slot_ms``."""
        if self.earliest is None or slot_ms < self.earliest:
            self.earliest = slot_ms


@dataclass(frozen=True, slots=True)
class Move:
    """A reschedule the node that delivers applied: where the message went, and the inner
    record that asked (None when not known).

    Published only in progress whose cut covers ``origin`` (``covered_by``): a follower applies
    a committed cut once its ingest reached the cut's offsets, so it then holds the message
    the move is about (a state for an id it has not stored yet would be ignored and lost).
    """

    message: DelayMessage
    slot_ms: EpochMs
    origin: tuple[int, int] | None

    def covered_by(self, offsets: Mapping[int, int]) -> bool:
        """Whether a cut with these inner offsets covers the reschedule's record."""
        if self.origin is None:
            return True
        partition, offset = self.origin
        return offset < offsets.get(partition, 0)


@dataclass(slots=True)
class ApplyOutcome:
    """What one ingest batch did (for metrics and tests)."""

    added: int = 0
    duplicates: int = 0
    cancelled: int = 0
    cancel_raced: int = 0
    cancel_too_late: int = 0
    cancel_unknown: int = 0
    late: int = 0
    refreshed: int = 0
    rescheduled: int = 0
    reschedule_too_late: int = 0
    reschedule_unknown: int = 0
    reschedule_deferred: int = 0
    #: Ids noted in the outbox: their last inner record must be restated (``restates``).
    restated: int = 0


#: Every outbox key (the outbox is read whole once, at start).
_ALL = 1 << 62

#: Hears ids a store forgot, with the slot they were delivered at (a cancel's tombstone: minus
#: the time of the cancel).
Gone = Callable[[list[tuple[str, EpochMs]]], None]


def resume_frontier(store: RocksStore) -> EpochMs:
    """Where a store's push frontier starts: at the seek, or at the cursor's slot when that
    slot was partly delivered (``Ledger.cursor``), so that no new add is placed into it behind
    the cursor, where it would count as delivered."""
    seek = store.read_seek() or 0
    cursor = store.read_cursor()
    return seek if cursor is None else max(seek, keys.slot_of(cursor))


#: The kinds the per-item code compares with, read once: an enum member's lookup on its class
#: costs more than the comparison.
_ADD, _REFRESH, _RESCHEDULE = Op.ADD, Op.REFRESH, Op.RESCHEDULE


def _survey(items: Sequence[DecodedRequest]) -> tuple[dict[str, bytes], EpochMs | None, list[int]]:
    """One pass over a batch: each id encoded once (the index lookup, the message key and the
    index key share it), the earliest due time of its adds and refreshes, and the indexes of
    the requests other than adds, in order (usually none)."""
    raw_ids: dict[str, bytes] = {}
    earliest: EpochMs | None = None
    others: list[int] = []
    for n, (op, message_id, due, _value) in enumerate(items):
        raw_ids[message_id] = message_id.encode()
        if op is not _ADD:
            others.append(n)
            if op is not _REFRESH:
                continue
        if earliest is None or due < earliest:
            earliest = due
    return raw_ids, earliest, others


def _reserved(
    items: Sequence[DecodedRequest],
    others: list[int],
    state: Mapping[str, bytes | None],
    earliest: EpochMs | None,
) -> EpochMs | None:
    """The earliest slot a batch writes to or deletes from: ``earliest`` (its adds' due
    times), the slot of a pending message it cancels, reschedules or forgets, or the due time
    a reschedule asks for (its new slot is at or after it). A delete reserves its slot too: the
    push worker cannot scan it while the delete is in flight, so "cancelled" vs "raced" (a
    reschedule: moved vs too late) is decided against a frontier that holds still. And a
    reschedule to a sooner time reserves where it moves to: with only its old slot reserved,
    the frontier passed the new one while the write was in flight, the deliverer's scan missed
    the message and its seek passed it (lost; issue 59's acceptance run)."""
    for n in others:
        op, message_id, due, _value = items[n]
        if op is _REFRESH:
            continue
        if op is _RESCHEDULE and (earliest is None or due < earliest):
            earliest = due
        pending = keys.pending_key(state[message_id])
        if pending is not None:
            slot = keys.slot_of(pending)
            if earliest is None or slot < earliest:
                earliest = slot
    return earliest


class _Applying:
    """One ``Ledger.apply_decoded`` call: its batch, the ids' index values as the batch leaves
    them, and one method per request kind.

    Adds are collected in ``placed`` and put with one store call; any other request first
    ``flush``es them, since batch order is apply order. A reschedule or refresh of a message
    this batch stored cannot read it from the store yet: ``written`` keeps what was put.
    """

    def __init__(
        self,
        *,
        ledger: Ledger,
        items: Sequence[DecodedRequest],
        origins: Sequence[tuple[int, int]] | None,
        state: dict[str, bytes | None],
        raw_ids: Mapping[str, bytes],
        frontier: EpochMs,
        others: list[int],
    ) -> None:
        self.ledger = ledger
        self.others = others
        self.items = items
        self.origins = origins
        self.state = state
        self.raw_ids = raw_ids
        self.frontier = frontier
        self.slot_for = ledger._frontier.slot_for
        self.outcome = ApplyOutcome()
        self.batch = ledger._store.batch()
        self.now = ledger._clock.now_ms()
        placement = ledger._placement
        self.leading = placement.leading
        #: Where adds came from, when the placement records arrivals.
        self.arrivals = origins if placement.tracks_arrivals and origins else None
        self.restating = ledger._restates
        #: The earliest slot written, to wake the push worker for.
        self.earliest: EpochMs | None = None
        #: Ids added by this batch: not covered by any progress.
        self.fresh: set[str] = set()
        #: (messages key, index key, stored value, index value) of the adds not yet put.
        self.placed: list[tuple[bytes, bytes, bytes, bytes]] = []
        moving = any(items[n][0] is _RESCHEDULE or items[n][0] is _REFRESH for n in others)
        #: Messages key -> stored value of what this batch put, when it moves messages.
        self.written: dict[bytes, bytes] | None = {} if moving else None
        #: Outbox keys this batch puts, and deletes.
        self.noted: list[bytes] = []
        self.cleared: list[bytes] = []
        #: The reschedules this batch moves, by id: known to ``Ledger.moves`` once written.
        self.moved: dict[str, list[Move]] = {}
        #: A replica journals its moves (``Ledger.undo_moves``); the ids this batch journals.
        self.journal = placement.tracks_arrivals
        self.journaled: set[str] = set()

    def run(self) -> None:
        """Apply every item in order: the adds between two other requests at once (the hot
        path), any other request by its kind's method."""
        items = self.items
        apply = {
            Op.CANCEL: self.cancel,
            Op.RESCHEDULE: self.reschedule,
            Op.REFRESH: self.refresh,
            Op.EXPIRY: self.expire,
        }
        start = 0
        for n in self.others:
            if start < n:
                self.adds(start, n)
            item = items[n]
            apply[item[0]](n, item)
            start = n + 1
        if start < len(items):
            self.adds(start, len(items))
        self.flush()

    def origin(self, n: int) -> tuple[int, int] | None:
        return self.origins[n] if self.origins else None

    def placed_at(self, message_id: str, slot: EpochMs) -> None:
        """``message_id`` is now pending at ``slot``."""
        self.state[message_id] = keys.index_pending(keys.message_key(slot, message_id))
        if self.earliest is None or slot < self.earliest:
            self.earliest = slot

    def restate(self, n: int, message_id: str) -> None:
        """Note ``message_id`` in the outbox, at the record that left it unstated."""
        partition, offset = self.origin(n) or (0, 0)
        key = keys.outbox_key(partition, offset, message_id)
        self.batch.put_outbox(key)
        self.noted.append(key)
        self.outcome.restated += 1

    def flush(self) -> None:
        """Put the adds collected so far, before a write that must follow them."""
        placed = self.placed
        if not placed:
            return
        self.outcome.added += len(placed)
        self.batch.put_scheduled_many(placed)
        if self.written is not None:
            self.written.update((entry[0], entry[2]) for entry in placed)
        placed.clear()

    def adds(self, start: int, end: int) -> None:
        """The adds ``items[start:end]``. The first add of an id wins (idempotent); the node
        that delivers places it after its frontier, a follower at its due time."""
        items, state, raw_ids, placed = self.items, self.state, self.raw_ids, self.placed
        outcome, fresh, batch, arrivals = self.outcome, self.fresh, self.batch, self.arrivals
        slot_for, frontier, leading = self.slot_for, self.frontier, self.leading
        restating = self.restating
        earliest = self.earliest
        for n in range(start, end):
            _op, message_id, due, value = items[n]
            assert value is not None
            if state[message_id] is not None:
                outcome.duplicates += 1
                if restating:
                    self.restate(n, message_id)
                continue
            slot = slot_for(frontier, due) if leading else due
            if slot != due:
                outcome.late += 1
            raw_id = raw_ids[message_id]
            key = keys.message_key_raw(slot, raw_id)
            pending = keys.index_pending(key)
            state[message_id] = pending
            fresh.add(message_id)
            placed.append((key, raw_id, value, pending))
            if arrivals is not None:
                batch.put_arrival(keys.arrival_key(*arrivals[n]), raw_id)
            if earliest is None or slot < earliest:
                earliest = slot
            if restating and codec.null_payload(value):
                self.restate(n, message_id)  # a null value is a tombstone to the cleaner
        self.earliest = earliest

    def cancel(self, n: int, item: DecodedRequest) -> None:
        """A client's cancel, or a restated one read back (``due_ms``: when it was first
        applied)."""
        self.flush()
        _op, message_id, due, _value = item
        current = self.state[message_id]
        if self.restating and due:
            self.cleared += self.ledger._read_back(self.batch, message_id, self.origin(n))
        after = self.ledger._cancel(
            self.batch,
            message_id,
            current,
            self.frontier,
            due or self.now,
            self.outcome,
            self.leading,
            message_id in self.fresh,
            restated=bool(due),
        )
        self.state[message_id] = after
        if self.restating and _cancel_left_unstated(current, after, due):
            self.restate(n, message_id)

    def reschedule(self, n: int, item: DecodedRequest) -> None:
        """Decided by the node that delivers (``Ledger._reschedule``). A follower records it
        with the arrivals: the master's progress moves the message, or, for one it had not
        committed, the next master decides it at takeover (``relocate_uncovered``)."""
        self.flush()
        _op, message_id, due, _value = item
        current = self.state[message_id]
        request = RescheduleRequest(message_id, due)
        if self.arrivals is not None:
            # A replica records every reschedule, leading or not: the one a leader moves may
            # be undone (it stops leading before a commit carries it), and whoever leads next,
            # this replica too, decides it again from this record (``relocate_uncovered``).
            self.batch.put_arrival(
                keys.arrival_key(*self.arrivals[n]),
                keys.arrival_reschedule(self.raw_ids[message_id], due),
            )
        if self.leading:
            assert self.written is not None
            at = self.ledger._reschedule(self, request, current, self.origin(n))
            self.ledger._count_reschedule(self.outcome, request, current, at)
            if at is not None:
                self.placed_at(message_id, at)
        elif self.arrivals is not None:
            self.outcome.reschedule_deferred += 1
        if self.restating and current is not None:  # a reschedule states no message
            self.restate(n, message_id)

    def refresh(self, n: int, item: DecodedRequest) -> None:
        """chronos' own copy of a message (see ``Ledger._refresh``)."""
        self.flush()
        _op, message_id, due, value = item
        assert value is not None
        current = self.state[message_id]
        if self.restating:
            self.cleared += self.ledger._read_back(self.batch, message_id, self.origin(n))
        at = self.ledger._refresh(
            self.batch, message_id, due, value, current, self.frontier, self.written
        )
        if at is None:
            self.outcome.duplicates += 1
            if self.restating and not _states(current, due):
                self.restate(n, message_id)
            return
        if self.written is not None:
            self.written[keys.message_key(at, message_id)] = value
        self.outcome.refreshed += 1
        self.placed_at(message_id, at)

    def expire(self, n: int, item: DecodedRequest) -> None:
        """An expiry tombstone (compact mode): a store holding the id as the deliverer did
        when it forgot it forgets it too; one that holds it otherwise (a newer add or cancel)
        restates it. The id is then forgotten here at the same record, so an add of it read
        next is a new message here too."""
        _op, message_id, ends, _value = item
        current = self.state[message_id]
        if self.restating and _expiry_left_unstated(current, ends):
            self.restate(n, message_id)
        if current is not None and _expiry_ends(current, ends):
            self.flush()
            self.ledger._forget(self.batch, message_id, current)
            self.state[message_id] = None


class Ledger:
    """Writes to the store that must agree with the push frontier.

    Parameters:
        store: the node store.
        frontier: the push frontier (writes that place messages reserve their slots on it).
        clock: time source, for tombstone expiry.
        retention: delete-worker settings (tombstone lifetime).
        placement: where adds go (a replica group injects its own).
        restates: note in the store's outbox each id whose last inner record stops stating
            its state (a compacted inner topic keeps only that record: ``restatement.py``),
            leading or following; off, nothing is noted.
    """

    def __init__(
        self,
        store: RocksStore,
        frontier: Frontier,
        clock: Clock,
        retention: DeleteSettings,
        placement: Placement = ALONE,
        restates: bool = False,
    ) -> None:
        self._store = store
        self._restates = restates
        #: The outbox's keys by id (empty unless ``restates``).
        self._outbox = OutboxIndex(store.scan_outbox(_ALL) if restates else ())
        self._placement = placement
        self._frontier = frontier
        self._clock = clock
        self._tombstone_ms = int(retention.tombstone_retention_s * 1000)
        self._seek = store.read_seek() or 0
        self._cursor = store.read_cursor()
        # One writer at a time: each write reads index entries and writes them back. The push
        # worker never takes this lock.
        self._lock = threading.Lock()
        #: Reschedules applied while leading and not yet published, oldest first per id.
        #: See ``moves``.
        self._moves: dict[str, list[Move]] = {}
        # Its own lock: the deliverer reads the moves every round, and must not wait for an
        # ingest write holding the ledger's.
        self._moves_lock = threading.Lock()
        #: Ids with an entry in the undo journal (``_reschedule``, ``undo_moves``); changed
        #: under both locks.
        self._journaled: set[str] = set()

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold off every write: for switching the placement or resetting the frontier."""
        with self._lock:
            yield

    @contextmanager
    def writing(self, earliest_slot: EpochMs | None = None) -> Iterator[LedgerWrite]:
        """One atomic write of its own (a replica applying committed progress, relocating):
        the batch is written, with the seek if it was raised, when the block ends without an
        exception. ``earliest_slot`` is reserved on the frontier as in ``Frontier.placing``."""
        with self._lock:
            with self._frontier.placing(earliest_slot) as frontier:
                write = LedgerWrite(self._store.batch(), frontier, self._seek)
                yield write
                if write.seek_ms > self._seek:
                    write.batch.set_seek(write.seek_ms)
                self._store.write(write.batch)
            self._seek = max(self._seek, write.seek_ms)
        if write.earliest is not None:
            self._frontier.notify(write.earliest)

    @property
    def seek_ms(self) -> EpochMs:
        """The persisted seek timestamp: every message with slot <= seek was acknowledged."""
        return self._seek

    @property
    def cursor(self) -> bytes | None:
        """The persisted delivery cursor past the seek: every key <= it was acknowledged too.

        A millisecond can hold any number of messages (a burst due at once); the seek alone
        would deliver a partly delivered one again after a clean stop. None when the seek
        says it all."""
        cursor = self._cursor
        if cursor is None or keys.slot_of(cursor) <= self._seek:
            return None
        return cursor

    def inner_offsets(self, partitions: list[int]) -> dict[int, int]:
        """Where ingest resumes: the next inner offset per partition the store has applied."""
        return self._store.read_inner_offsets(partitions)

    def apply(
        self,
        requests: Sequence[InnerRequest],
        offsets: Mapping[int, int] | None = None,
        encoded: Sequence[bytes | None] | None = None,
        origins: Sequence[tuple[int, int]] | None = None,
    ) -> ApplyOutcome:
        """``apply_decoded`` for request objects: for callers that hold those (tests, and
        ``scripts/store_ingest_bench.py``, which passes ``encoded``: each add's stored value)."""
        if encoded is None:
            items = [codec.decoded_request(r) for r in requests]
        else:
            pairs = zip(requests, encoded, strict=True)
            items = [codec.decoded_request(r, value) for r, value in pairs]
        return self.apply_decoded(items, offsets, origins)

    def apply_decoded(
        self,
        items: Sequence[DecodedRequest],
        offsets: Mapping[int, int] | None = None,
        origins: Sequence[tuple[int, int]] | None = None,
    ) -> ApplyOutcome:
        """Apply decoded requests in order as one atomic batch (durable after ``sync``).

        ``offsets`` (inner partition -> next offset) are written in the same batch, so the
        store alone says where ingest resumes and a replay never skips or re-applies: a batch
        lost before its WAL was synced is read again from Kafka. ``origins`` (partition,
        offset per item) are recorded for each stored add when the ledger tracks arrivals,
        and name the record an outbox entry restates. Each request kind is applied by its
        method of ``_Applying``.
        """
        if not items and not offsets:
            return ApplyOutcome()
        raw_ids, earliest_due, others = _survey(items)
        with self._lock:
            state = dict(
                zip(raw_ids, self._store.get_index_raw(list(raw_ids.values())), strict=True)
            )
            earliest_due = _reserved(items, others, state, earliest_due)
            # The reservation lasts from reading the frontier to the write being visible.
            with self._frontier.placing(earliest_due, offsets) as frontier:
                applying = _Applying(
                    ledger=self,
                    items=items,
                    origins=origins,
                    state=state,
                    raw_ids=raw_ids,
                    frontier=frontier,
                    others=others,
                )
                applying.run()
                for partition, offset in (offsets or {}).items():
                    applying.batch.set_inner_offset(partition, offset)
                self._store.write(applying.batch)
                if applying.moved:
                    # Once written (a failed write is read again: its moves must not count
                    # twice, nor skip their journal), and before the write's offsets count
                    # as completed: a cut that covers a reschedule finds its move.
                    self._register(applying.moved, applying.journaled)
            if applying.noted or applying.cleared:
                for key in applying.cleared:
                    self._outbox.remove(key)
                for key in applying.noted:
                    self._outbox.add(key)
        if applying.earliest is not None:
            self._frontier.notify(applying.earliest)
        return applying.outcome

    def _forget(self, batch: RocksBatch, message_id: str, current: bytes) -> None:
        """Drop ``message_id`` as the delete worker would (an expiry tombstone read)."""
        batch.delete_index(message_id)
        entry = keys.read_index(current)
        if isinstance(entry, keys.Pending):
            batch.delete_message(entry.key)
            batch.delete_outcome(entry.key[keys.MS_WIDTH :])
        elif isinstance(entry, keys.Cancelled):
            batch.delete_expiry(keys.expiry_key(entry.at_ms + self._tombstone_ms, message_id))

    def _read_back(
        self, batch: RocksBatch, message_id: str, origin: tuple[int, int] | None
    ) -> list[bytes]:
        """A restatement of ``message_id`` was read back at ``origin``: the outbox entries of
        the id decided before it are done (whoever wrote it); the keys deleted."""
        done = self._outbox.before(message_id, origin)
        for key in done:
            batch.delete_outbox(key)
        return done

    def drop_restatement(self, key: bytes) -> None:
        """Forget an outbox entry whose id the store no longer holds (nothing to restate)."""
        with self._lock:
            batch = self._store.batch()
            batch.delete_outbox(key)
            self._store.write(batch)
            self._outbox.remove(key)

    def _refresh(
        self,
        batch: RocksBatch,
        message_id: str,
        slot_ms: EpochMs,
        value: bytes,
        current: bytes | None,
        frontier: EpochMs,
        written: Mapping[bytes, bytes] | None = None,
    ) -> EpochMs | None:
        """Apply a refresh record; the slot it stored the message at, None when it changed
        nothing. ``written``: what this batch stored before it, when it reschedules.

        Unknown id (a store rebuilt from the topic, whose first record is gone): stored at the
        slot the delivering node gave it, so it counts as delivered exactly when that node's
        seek passed it, and no arrival is recorded (the committed progress covered it before it
        was refreshed). A node that delivers places one still ahead of its seek after its
        frontier, as any add. Known id: ignored, except a repeat at a later occurrence than the
        stored one, which moves forward (a rebuilt store reads refreshes of several passes),
        and, in compact mode, a store that does not deliver taking a restatement of a message
        the deliverer moved (a reschedule it decided; this store deferred the reschedule and
        holds the message as first sent). Cancelled id: ignored, as any add.
        """
        old_key = keys.pending_key(current)
        if current is not None and old_key is None:
            return None
        if old_key is not None:
            stored = self._store.get_messages([old_key])[0]
            if stored is None and written is not None:
                stored = written.get(old_key)
            if stored is None:
                return None  # written by this batch: its own record decides
            if codec.occurrence_of(value) <= codec.occurrence_of(stored) and not (
                self._restates and not self._placement.leading and _moved(value, stored)
            ):
                return None
        slot = slot_ms
        if self._placement.leading and slot_ms > self._seek:
            slot = self._frontier.slot_for(frontier, slot_ms)
        batch.move_scheduled(old_key, keys.message_key(slot, message_id), message_id, value)
        return slot

    def _reschedule(
        self,
        applying: _Applying,
        request: RescheduleRequest,
        current: bytes | None,
        origin: tuple[int, int] | None,
    ) -> EpochMs | None:
        """Move a pending message to its new due time; the slot it now has, None when it did
        not move.

        Only the node that delivers decides, from its frontier: a message whose slot the
        frontier passed was delivered or is being delivered, so it is not moved (too late;
        moving one in flight would deliver it twice). Every other pending one moves to
        ``slot_for(frontier, due)``, like an add received now, and is kept in ``moves`` for
        the progress record that tells followers and a rebuilt store where it went.

        A one-shot's due time is its ``first_due_ms``; a repeat's pending occurrence alone
        moves (``moved_due_ms``): its schedule stays, so the occurrences after it are due
        where the schedule puts them (``next_occurrence``: those at or before the new time
        are passed over). Shifting the schedule instead made a cron repeat's moved
        occurrence report the fire after the shifted start (issue 63).

        A replica (``_Applying.journal``: it may stop leading before a commit carries the move)
        journals, for the first move of an id since its last published one, where the message
        was, in the same batch, so ``undo_moves`` can put it back.
        """
        batch, frontier, written = applying.batch, applying.frontier, applying.written
        assert written is not None
        old_key = keys.pending_key(current)
        if old_key is None:
            return None  # unknown or cancelled: nothing to move
        if keys.slot_of(old_key) <= frontier:
            return None
        stored = written.get(old_key) or self._store.get_messages([old_key])[0]
        if stored is None:  # pragma: no cover - the index points at a stored key
            return None
        message = codec.decode(stored)
        # 0 (or any time past) means "now"; a moved due time is never 0, which says "not
        # moved" (``DelayMessage.moved_due_ms``).
        due = request.due_ms
        if message.repeat is None:
            moved = replace(message, first_due_ms=due)
        else:
            due = max(due, 1)
            moved = replace(message, moved_due_ms=due)
        slot = self._frontier.slot_for(frontier, due)
        key = keys.message_key(slot, request.id)
        value = codec.encode(moved)
        batch.move_scheduled(old_key, key, request.id, value)
        written[key] = value
        earlier = applying.moved.setdefault(request.id, [])
        # The ledger's lock is held: ``_journaled`` changes only under it.
        if applying.journal and not earlier and request.id not in self._journaled:
            batch.put_undo(request.id.encode(), keys.slot_of(old_key), stored)
            applying.journaled.add(request.id)
        earlier.append(Move(moved, slot, origin))
        return slot

    def _register(self, moved: Mapping[str, list[Move]], journaled: set[str]) -> None:
        """Make a written batch's moves known to ``moves`` (its journal entries to
        ``forget_moves``), before the frontier's cut can cover their records
        (``TransactionLoop`` and ``CutPublisher`` read them after taking their cut)."""
        with self._moves_lock:
            for message_id, moves in moved.items():
                self._moves.setdefault(message_id, []).extend(moves)
            self._journaled |= journaled

    def _count_reschedule(
        self,
        outcome: ApplyOutcome,
        request: RescheduleRequest,
        current: bytes | None,
        at: EpochMs | None,
    ) -> None:
        if at is not None:
            outcome.rescheduled += 1
            log.info("rescheduled", id=request.id, due_ms=request.due_ms, slot_ms=at)
            return
        entry = keys.read_index(current)
        if isinstance(entry, keys.Pending):
            outcome.reschedule_too_late += 1
            log.info("reschedule_too_late", id=request.id, slot_ms=entry.slot_ms)
        else:
            outcome.reschedule_unknown += 1
            log.info("reschedule_unknown", id=request.id)

    def moves(self, covered: Mapping[int, int] | None = None) -> dict[str, Move]:
        """The newest reschedule of each id applied while leading that no progress record
        carries yet and whose record ``covered`` (a cut's offsets; None: any) covers. The
        deliverer asks after taking its cut and calls ``forget_moves`` once they are committed.

        The newest covered one, not the newest: a later reschedule still in flight at the cut
        is published with a later cut, and until then the cut's seek must not pass the
        message where followers hold it (it would count as delivered)."""
        with self._moves_lock:
            found: dict[str, Move] = {}
            for message_id, moves in self._moves.items():
                for move in reversed(moves):
                    if covered is None or move.covered_by(covered):
                        found[message_id] = move
                        break
            return found

    @property
    def has_moves(self) -> bool:
        """Whether any reschedule applied while leading waits to be published (covered by a
        cut or not): a deliverer that skips an idle schedule's scans must not skip these."""
        return bool(self._moves)

    def moving(self, message_id: str) -> bool:
        """Whether a reschedule of ``message_id`` applied while leading is not yet published
        (covered by a cut or not). Asked under the ledger's lock (``writing``), as the
        reschedule registers its move under it."""
        with self._moves_lock:
            return message_id in self._moves

    def forget_moves(self, published: Mapping[str, Move]) -> None:
        """Drop moves a committed progress record carries, and the older ones of their ids.

        A journaled id's undo entry follows: gone when no move of it is left, else where the
        published move put the message (the committed state a later move's undo returns to).
        Under the ledger's lock then, so that a reschedule applied meanwhile finds the moves
        and the journal agreeing (it journals only an id without an entry)."""
        if self._journaled.isdisjoint(published):
            # No entry to change: a node alone's moves, or none. (A journaled id stays in the
            # set while a move of it is unpublished, so none of these can be journaled now.)
            with self._moves_lock:
                self._drop_moves(published)
            return
        with self._lock:
            batch = self._store.batch()
            with self._moves_lock:
                self._drop_moves(published)
                for message_id, move in published.items():
                    if message_id not in self._journaled:
                        continue  # undone meanwhile (a loop that outlived its demotion)
                    raw_id = message_id.encode()
                    if message_id in self._moves:
                        batch.put_undo(raw_id, move.slot_ms, codec.encode(move.message))
                    else:
                        batch.delete_undo(raw_id)
                        self._journaled.discard(message_id)
            self._store.write(batch)

    def _drop_moves(self, published: Mapping[str, Move]) -> None:
        for message_id, move in published.items():
            moves = self._moves.get(message_id, [])
            done = next((n for n, m in enumerate(moves) if m is move), None)
            if done is not None:
                del moves[: done + 1]
            if not moves:
                self._moves.pop(message_id, None)

    def undo_moves(self) -> int:
        """Put back every move the undo journal holds, and forget every unpublished one: the
        store stops or starts leading (a demotion, a retake, a start after a crash).

        Why: a move no committed progress carries is this store's decision alone. Kept, the
        store disagrees with every other replica (they hold the message where the committed
        progress says) and, leading again, delivers it where no reader was told it went,
        once more after a successor delivered it at its first slot. Undone, the store holds
        what the committed progress says, and the reschedule's arrival (recorded leading too)
        lets whoever leads next decide it again (``ReplicaStore.relocate_uncovered``); a
        published move undone because a crash came between its commit and the journal's
        update is moved again when the progress topic is read from its start. A message
        cancelled since (its index no longer pending) stays cancelled; one the seek passed
        where it was moved (delivered there, so its move was committed) or gone from there
        (purged) stays too. Returns how many messages moved back."""
        undone = 0
        with self.writing() as write:
            entries = self._store.scan_undo(_ALL)
            current = self._store.get_index([message_id for message_id, _, _ in entries])
            for (message_id, slot, value), state in zip(entries, current, strict=True):
                write.batch.delete_undo(message_id.encode())
                moved_to = keys.pending_key(state)
                key = keys.message_key(slot, message_id)
                if moved_to is None or moved_to == key or keys.slot_of(moved_to) <= self._seek:
                    continue
                if self._store.get_messages([moved_to])[0] is None:
                    continue
                write.batch.move_scheduled(moved_to, key, message_id, value)
                write.placed(slot)
                undone += 1
            with self._moves_lock:
                self._moves.clear()
                self._journaled.clear()
        if undone:
            log.warning("uncommitted_moves_undone", messages=undone)
        return undone

    def unpublished(self, message_id: str) -> bool:
        """Whether ``message_id`` has a move no progress record carries yet: what the store
        holds of it is this node's decision alone until then (the restater waits)."""
        with self._moves_lock:
            return message_id in self._moves

    def sync(self) -> None:
        """fsync everything applied so far."""
        self._store.sync()

    def sync_if_due(self) -> bool:
        """fsync what was applied when the sync interval has passed; True if it did."""
        return self._store.sync_if_due()

    def _cancel(
        self,
        batch: RocksBatch,
        message_id: str,
        current: bytes | None,
        frontier: EpochMs,
        now: EpochMs,
        outcome: ApplyOutcome,
        leading: bool,
        fresh: bool = False,
        restated: bool = False,
    ) -> bytes | None:
        """Apply a cancel at ``now`` (a ``restated`` one's: when it was first applied); the
        id's index value after it."""
        entry = keys.read_index(current)
        if isinstance(entry, keys.Cancelled):
            if not restated or entry.at_ms <= now:
                return current  # already cancelled
            # A restore read the client's cancel, then its restatement: the first time holds.
            batch.delete_expiry(keys.expiry_key(entry.at_ms + self._tombstone_ms, message_id))
            tombstone = keys.index_cancelled(now, entry.how or keys.CANCEL_UNKNOWN)
            batch.put_index(message_id, tombstone)
            batch.put_expiry(keys.expiry_key(now + self._tombstone_ms, message_id))
            return tombstone
        if entry is not None:
            key = entry.key
            slot = entry.slot_ms
            # A follower stores adds at their due time; behind its seek, one the committed
            # progress covers was delivered, but an add the master received after its cut may
            # sit there undelivered (placed after the master's frontier). Only a covered one
            # is too late; when unsure, deleting is right (an acknowledged cancel wins).
            too_late = slot <= self._seek and (leading or self._surely_delivered(key, fresh))
            if too_late:
                outcome.cancel_too_late += 1
                log.info("cancel_too_late", id=message_id, slot_ms=slot)
                return current
            batch.delete_message(key)
            how = keys.CANCEL_REMOVED if leading else keys.CANCEL_FOLLOWER
            if slot <= frontier and leading:
                outcome.cancel_raced += 1  # already handed to a sender: may still be delivered
                how = keys.CANCEL_RACED
                # Info, not a warning: the slot was being delivered; the message may or may not
                # have gone out (a scan that had not read it yet leaves it undelivered).
                log.info("cancel_raced_delivery", id=message_id, slot_ms=slot)
            else:
                outcome.cancelled += 1
        else:
            outcome.cancel_unknown += 1  # remembered so a later replay of its add stays cancelled
            how = keys.CANCEL_UNKNOWN
        tombstone = keys.index_cancelled(now, how)
        batch.put_index(message_id, tombstone)
        batch.put_expiry(keys.expiry_key(now + self._tombstone_ms, message_id))
        return tombstone

    def _surely_delivered(self, key: bytes, fresh: bool) -> bool:
        """A follower: whether the add stored at ``key`` (behind the seek) is covered by the
        last applied committed progress, i.e. not among the arrivals since its cut."""
        covered = self._placement.covered
        if fresh or not covered:
            return False
        raw_id = key[keys.MS_WIDTH :]
        # Arrivals hold the adds since about the last cut (covered ones are forgotten within a
        # second), so this reads little; it runs only for a cancel behind a follower's seek.
        start, stop = b"", b"\xff" * 16
        while True:
            rows = self._store.scan_arrivals(start, stop, _CHUNK)
            for arrival, value in rows:
                if value == raw_id:
                    partition, offset = keys.split_arrival_key(arrival)
                    if offset >= covered.get(partition, 0):
                        return False
            if len(rows) < _CHUNK:
                break
            start = rows[-1][0] + b"\x00"
        return True

    def commit_progress(
        self,
        seek_ms: EpochMs,
        followups: list[tuple[bytes, DelayMessage]],
        cursor: bytes | None = None,
        rewrite: bool = False,
        outcomes: Sequence[tuple[bytes, bytes]] = (),
    ) -> list[tuple[DelayMessage, EpochMs]]:
        """Persist the seek timestamp and the next occurrences of repeats it passed, atomically.

        ``followups`` pairs the key of a delivered occurrence with its next occurrence; the next
        one is written only while the index still points at the delivered key (not cancelled,
        not already rescheduled by an earlier delivery of the same key). Returns the next
        occurrences written and their slots (a node alone publishes them). ``cursor`` is the
        last acknowledged key past ``seek_ms`` (see ``cursor``). ``rewrite`` writes seek and
        cursor even when unchanged: it proves the store accepts writes again (a full disk
        freed). ``outcomes`` are (raw id, ``store/outcome.py`` value) of the deliveries the
        seek passes, written in the same batch.
        """
        earliest_due = min((m.due_ms for _key, m in followups), default=None)
        written: list[tuple[DelayMessage, EpochMs]] = []
        with self.writing(earliest_due) as write:
            current = self._store.get_index([message.id for _key, message in followups])
            for (old_key, message), state in zip(followups, current, strict=True):
                if state != keys.index_pending(old_key):
                    continue
                slot = self._frontier.slot_for(write.frontier, message.due_ms)
                key = keys.message_key(slot, message.id)
                write.batch.put_scheduled(
                    key, message.id, codec.encode(message), keys.index_pending(key)
                )
                write.placed(slot)
                written.append((message, slot))
            for raw_id, value in outcomes:
                write.batch.put_outcome(raw_id, value)
            write.seek_ms = max(write.seek_ms, seek_ms)
            if rewrite:
                write.batch.set_seek(write.seek_ms)
            if cursor != self._cursor or rewrite:
                write.batch.set_cursor(cursor or b"")
        self._cursor = cursor
        return written

    def record_outcomes(self, outcomes: Sequence[tuple[bytes, bytes]]) -> None:
        """Keep where delivered messages went (a master, once their transaction committed)."""
        if outcomes:
            with self.writing() as write:
                for raw_id, value in outcomes:
                    write.batch.put_outcome(raw_id, value)

    def is_current(self, pairs: list[tuple[str, bytes]]) -> list[bool]:
        """Whether each (id, key) is still what the index schedules (false when superseded)."""
        states = self._store.get_index([message_id for message_id, _ in pairs])
        return [
            state == keys.index_pending(key) for (_, key), state in zip(pairs, states, strict=True)
        ]

    def deletes_due(self, cutoff_ms: EpochMs) -> int:
        """At most how many ids ``purge_delivered(cutoff_ms)`` and ``expire_tombstones()``
        would forget now (a scan of keys): what a delete pass spreads its expiry tombstones
        over."""
        stop = keys.slot_bound(min(cutoff_ms, self._seek) + 1)
        expiring = self._store.count_expiry(keys.slot_bound(self._clock.now_ms() + 1))
        return self._store.count_messages(b"", stop) + expiring

    def purge_delivered(self, cutoff_ms: EpochMs, on_gone: Gone | None = None) -> int:
        """Drop messages with slot <= cutoff (must be <= seek) and the index entries of those ids.

        Returns how many message keys were dropped. Index entries that moved on (a repeat's
        later occurrence) are kept. ``on_gone`` hears, chunk by chunk once written, the ids
        the store forgot, with their slot (compact mode's expiry tombstones).
        """
        cutoff_ms = min(cutoff_ms, self._seek)
        stop = keys.slot_bound(cutoff_ms + 1)
        start = b""
        dropped = 0
        while True:
            rows = self._store.scan(start, stop, _CHUNK)
            if not rows:
                break
            with self._lock:
                ids = [keys.split_message_key(k)[1] for k, _ in rows]
                states = self._store.get_index(ids)
                batch = self._store.batch()
                gone: list[tuple[str, EpochMs]] = []
                for (key, _), message_id, state in zip(rows, ids, states, strict=True):
                    if state == keys.index_pending(key):
                        batch.delete_index(message_id)
                        batch.delete_outcome(key[keys.MS_WIDTH :])
                        gone.append((message_id, keys.slot_of(key)))
                self._store.write(batch)
            if on_gone is not None and gone:
                on_gone(gone)
            dropped += len(rows)
            start = rows[-1][0] + b"\x00"
        if dropped:
            self._store.delete_messages_before(stop)
        return dropped

    def expire_tombstones(self, on_gone: Gone | None = None) -> int:
        """Forget cancel tombstones whose retention ended; ``on_gone`` as in
        ``purge_delivered``, with minus the cancel's time for the slot."""
        stop = keys.slot_bound(self._clock.now_ms() + 1)
        expired = 0
        while True:
            rows = self._store.scan_expiry(stop, _CHUNK)
            if not rows:
                return expired
            with self._lock:
                ids = [row[keys.MS_WIDTH :].decode() for row in rows]
                states = self._store.get_index(ids)
                batch = self._store.batch()
                gone: list[tuple[str, EpochMs]] = []
                for row, message_id, state in zip(rows, ids, states, strict=True):
                    # Only the cancel this entry was written for: a newer one of the id has
                    # its own.
                    entry = keys.read_index(state)
                    expires_ms = keys.unpack_ms(row[: keys.MS_WIDTH])
                    if (
                        isinstance(entry, keys.Cancelled)
                        and entry.at_ms + self._tombstone_ms == expires_ms
                    ):
                        batch.delete_index(message_id)
                        gone.append((message_id, -entry.at_ms))
                    batch.delete_expiry(row)
                self._store.write(batch)
            if on_gone is not None and gone:
                on_gone(gone)
            expired += len(rows)


def _states(current: bytes | None, slot_ms: EpochMs) -> bool:
    """Whether a refresh record at ``slot_ms`` states what the index value ``current``
    says: the message pending (or delivered) at that very slot."""
    entry = keys.read_index(current)
    return isinstance(entry, keys.Pending) and entry.slot_ms == slot_ms


def _cancel_left_unstated(before: bytes | None, after: bytes | None, due: EpochMs) -> bool:
    """Whether a cancel record (``due``: the time a restated one carries, 0 for a client's)
    leaves its id's state unstated: a client's that leaves the id cancelled (its null value is
    a tombstone to the cleaner, which removes it after ``delete.retention.ms``), one that came
    too late (the message stays), or the id was cancelled before at another time (the first
    cancel's time holds)."""
    if not due and keys.is_cancelled(after):
        return True
    if before is None or after is not before:
        return False
    entry = keys.read_index(before)
    return not isinstance(entry, keys.Cancelled) or entry.at_ms != due


def _expiry_left_unstated(current: bytes | None, ends: EpochMs) -> bool:
    """Whether an expiry tombstone would remove a state this store holds for its id other
    than the one it ends (``ends``: the delivered message's slot, or minus the time of the
    cancel): a newer add, a newer cancel. The same state is forgotten here too."""
    entry = keys.read_index(current)
    if entry is None:
        return False
    if isinstance(entry, keys.Cancelled):
        return -ends != entry.at_ms
    return entry.slot_ms != ends


def _moved(restated: bytes, stored: bytes) -> bool:
    """Whether a restatement states the stored message moved: the same occurrence with
    another due time (a reschedule sets a one-shot's first due time, a repeat's moved one;
    stores of earlier releases shifted a repeat's first due time)."""
    return codec.occurrence_of(restated) == codec.occurrence_of(stored) and (
        codec.first_due_of(restated) != codec.first_due_of(stored)
        or codec.moved_due_of(restated) != codec.moved_due_of(stored)
    )


def _expiry_ends(current: bytes | None, ends: EpochMs) -> bool:
    """Whether an expiry tombstone ends the state this store holds: the cancel of that time,
    or a message stored at or before the slot it was delivered at (a follower stores an add
    at its due time, the deliverer at that or later). A newer add taken for it is forgotten
    too, and restated by the deliverer, which holds it elsewhere (``_expiry_left_unstated``)."""
    entry = keys.read_index(current)
    if entry is None:
        return False
    if isinstance(entry, keys.Cancelled):
        return -ends == entry.at_ms
    return ends > 0 and entry.slot_ms <= ends


def next_occurrence(message: DelayMessage) -> DelayMessage | None:
    """The occurrence after ``message``'s, or None when the repeat is finished.

    After an occurrence a reschedule moved, the schedule's first occurrence due after the
    moved one's new time: those it puts at or before that time are passed over (counted for
    fixed and cron repeats, as catch-up counts them), and ``times`` and ``until`` still end
    the schedule where they did."""
    repeat = message.repeat
    if repeat is None:
        return None
    first, occurrence = message.first_due_ms, message.occurrence
    if message.moved_due_ms:
        occurrence, _due = repeat.latest_due(first, occurrence, message.moved_due_ms)
    if repeat.is_last(first, occurrence):
        return None
    return replace(message, occurrence=occurrence + 1, moved_due_ms=0)
