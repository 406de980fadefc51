"""Every write to the schedule goes through the ledger.

Ingest (adds, cancels), progress (seek timestamp, next repeat occurrences) and the delete
worker all change the same keys; doing it in one place, one writer at a time, keeps the index
consistent with the messages and the seek timestamp atomic with what it covers. Writes that
place messages reserve their slots on the push frontier (see ``frontier.py``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import structlog

from chronos.clock import Clock
from chronos.model import DecodedRequest, DelayMessage, InnerRequest
from chronos.node.frontier import Frontier
from chronos.settings import DeleteSettings
from chronos.store import codec, keys
from chronos.store.rocks import RocksBatch, RocksStore
from chronos.types import EpochMs

log = structlog.get_logger(__name__)

_CHUNK = 10_000
#: Fewest seconds between two range deletes of covered arrivals (see ``_forget_arrivals``).
_FORGET_ARRIVALS_S = 1.0


@dataclass(frozen=True, slots=True)
class RepeatState:
    """Where a master put a repeat's next occurrence, as its progress record says.

    Parameters:
        message_id: the repeat's id.
        message: its next occurrence, None once it finished.
        slot_ms: the slot that occurrence was given (``max(due, seek + 1)`` of its record).
    """

    message_id: str
    message: DelayMessage | None
    slot_ms: EpochMs


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


class Ledger:
    """Writes to the store that must agree with the push frontier.

    Parameters:
        store: the node store.
        frontier: the push frontier (writes that place messages reserve their slots on it).
        clock: time source, for tombstone expiry.
        retention: delete-worker settings (tombstone lifetime).
    """

    def __init__(
        self,
        store: RocksStore,
        frontier: Frontier,
        clock: Clock,
        retention: DeleteSettings,
        track_arrivals: bool = False,
        leading: bool = True,
    ) -> None:
        self._store = store
        self._track_arrivals = track_arrivals
        #: False on a replica that follows a master (see ``set_leading``).
        self.leading = leading
        self._arrivals_forgotten_at = -_FORGET_ARRIVALS_S
        self._frontier = frontier
        self._clock = clock
        self._tombstone_ms = int(retention.tombstone_retention_s * 1000)
        self._seek = store.read_seek() or 0
        # One writer at a time: each write reads index entries and writes them back. The push
        # worker never takes this lock.
        self._lock = threading.Lock()

    def set_leading(self, leading: bool) -> None:
        """Switch placement between a node that delivers and a replica that follows.

        A following replica places every add at its due time and applies every cancel: its
        store must say "delivered" for exactly what the committed progress covers, which is
        decided by due times and inner offsets alone (``frontier.py``, ``chronos/group/``).
        """
        with self._lock:
            self.leading = leading

    @property
    def seek_ms(self) -> EpochMs:
        """The persisted seek timestamp: every message with slot <= seek was acknowledged."""
        return self._seek

    def inner_offsets(self, partitions: list[int]) -> dict[int, int]:
        """Where ingest resumes: the next inner offset per partition the store has applied."""
        return self._store.read_inner_offsets(partitions)

    def apply(
        self,
        requests: Sequence[InnerRequest],
        offsets: Mapping[int, int] | None = None,
        encoded: Sequence[bytes | None] | None = None,
    ) -> ApplyOutcome:
        """``apply_decoded`` for request objects: for callers that hold those (tests, and
        ``scripts/store_ingest_bench.py``, which passes ``encoded``: each add's stored value)."""
        if encoded is None:
            encoded = [codec.encode(r) if isinstance(r, DelayMessage) else None for r in requests]
        items = [
            (r.id, r.due_ms if isinstance(r, DelayMessage) else 0, value)
            for r, value in zip(requests, encoded, strict=True)
        ]
        return self.apply_decoded(items, offsets)

    def apply_decoded(
        self,
        items: Sequence[DecodedRequest],
        offsets: Mapping[int, int] | None = None,
        origins: Sequence[tuple[int, int]] | None = None,
    ) -> ApplyOutcome:
        """Apply decoded requests in order as one atomic batch (durable after ``sync``).

        Each item is (id, due ms, stored value) for an add, (id, 0, None) for a cancel.
        ``offsets`` (inner partition -> next offset) are written in the same batch, so the
        store alone says where ingest resumes and a replay never skips or re-applies: a batch
        lost before its WAL was synced is read again from Kafka. ``origins`` (partition,
        offset per item) are recorded for each stored add when the ledger tracks arrivals.
        """
        outcome = ApplyOutcome()
        if not items and not offsets:
            return outcome
        # Each id encoded once: the index lookup, the message key and the index key share it.
        raw_ids = {item[0]: item[0].encode() for item in items}
        earliest_due = min((due for _, due, value in items if value is not None), default=None)
        earliest: EpochMs | None = None
        with self._lock:
            state = dict(
                zip(raw_ids, self._store.get_index_raw(list(raw_ids.values())), strict=True)
            )
            # A cancel reserves the slot it deletes too: the push worker cannot scan it while
            # the delete is in flight, so "cancelled" vs "raced" is decided against a frontier
            # that holds still.
            for message_id, _, value in items:
                if value is None:
                    current = state[message_id]
                    if current is not None and current[:1] == keys.INDEX_PENDING:
                        slot = keys.slot_of(current[1:])
                        earliest_due = slot if earliest_due is None else min(earliest_due, slot)
            batch = self._store.batch()
            now = self._clock.now_ms()
            slot_for = self._frontier.slot_for
            # (messages key, index key, stored value, index value) of every add, one store call.
            placed: list[tuple[bytes, bytes, bytes, bytes]] = []
            # The reservation lasts from reading the frontier to the write being visible.
            leading = self.leading
            arrivals = origins if self._track_arrivals and origins else None
            with self._frontier.placing(earliest_due, offsets) as frontier:
                for n, (message_id, due, value) in enumerate(items):
                    current = state[message_id]
                    if value is not None:
                        if current is not None:
                            outcome.duplicates += 1  # idempotent: first add of an id wins
                            continue
                        slot = slot_for(frontier, due) if leading else due
                        if slot != due:
                            outcome.late += 1
                        raw_id = raw_ids[message_id]
                        key = keys.message_key_raw(slot, raw_id)
                        pending = keys.index_pending(key)
                        state[message_id] = pending
                        placed.append((key, raw_id, value, pending))
                        if arrivals is not None:
                            batch.put_arrival(keys.arrival_key(*arrivals[n]), raw_id)
                        if earliest is None or slot < earliest:
                            earliest = slot
                    else:
                        # Batch order is apply order: adds before this cancel go in first.
                        outcome.added += len(placed)
                        batch.put_scheduled_many(placed)
                        placed = []
                        state[message_id] = self._cancel(
                            batch, message_id, current, frontier, now, outcome
                        )
                outcome.added += len(placed)
                batch.put_scheduled_many(placed)
                for partition, offset in (offsets or {}).items():
                    batch.set_inner_offset(partition, offset)
                self._store.write(batch)
        if earliest is not None:
            self._frontier.notify(earliest)
        return outcome

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
    ) -> bytes | None:
        if current is not None and current[:1] == keys.INDEX_CANCELLED:
            return current  # already cancelled
        if current is not None:
            key = current[1:]
            slot = keys.slot_of(key)
            # A follower cannot tell a delivered add from one the master has not reached yet
            # (both may sit behind its seek); deleting either is right.
            if slot <= self._seek and self.leading:
                outcome.cancel_too_late += 1
                log.info("cancel_too_late", id=message_id, slot_ms=slot)
                return current
            batch.delete_message(key)
            if slot <= frontier and self.leading:
                outcome.cancel_raced += 1  # already handed to a sender: may still be delivered
                log.warning("cancel_raced_delivery", id=message_id, slot_ms=slot)
            else:
                outcome.cancelled += 1
        else:
            outcome.cancel_unknown += 1  # remembered so a later replay of its add stays cancelled
        tombstone = keys.index_cancelled(now)
        batch.put_index(message_id, tombstone)
        batch.put_expiry(keys.expiry_key(now + self._tombstone_ms, message_id))
        return tombstone

    def commit_progress(
        self, seek_ms: EpochMs, followups: list[tuple[bytes, DelayMessage]]
    ) -> None:
        """Persist the seek timestamp and the next occurrences of repeats it passed, atomically.

        ``followups`` pairs the key of a delivered occurrence with its next occurrence; the next
        one is written only while the index still points at the delivered key (not cancelled,
        not already rescheduled by an earlier delivery of the same key).
        """
        earliest_due = min((m.due_ms for _key, m in followups), default=None)
        earliest: EpochMs | None = None
        with self._lock:
            batch = self._store.batch()
            ids = [message.id for _key, message in followups]
            current = self._store.get_index(ids)
            with self._frontier.placing(earliest_due) as frontier:
                for (old_key, message), state in zip(followups, current, strict=True):
                    if state != keys.index_pending(old_key):
                        continue
                    slot = self._frontier.slot_for(frontier, message.due_ms)
                    key = keys.message_key(slot, message.id)
                    batch.put_scheduled(
                        key, message.id, codec.encode(message), keys.index_pending(key)
                    )
                    earliest = slot if earliest is None else min(earliest, slot)
                if seek_ms > self._seek:
                    batch.set_seek(seek_ms)
                self._store.write(batch)
            self._seek = max(self._seek, seek_ms)
        if earliest is not None:
            self._frontier.notify(earliest)

    def apply_cut(
        self, seek_ms: EpochMs, states: Sequence[RepeatState], covered: Mapping[int, int]
    ) -> None:
        """Apply one committed progress record: the next occurrences of repeats at the slots
        the master gave them, the seek, and forget arrivals the record covers.

        A state moves its repeat only forward (a later occurrence than the stored one) and
        never revives a cancelled or unknown id, so applying records again or out of date is
        harmless. ``state.message`` None means the repeat finished: nothing to schedule."""
        with self._lock:
            live = [st for st in states if st.message is not None]
            current = self._store.get_index([st.message_id for st in live])
            old_keys = [c[1:] for c in current if c is not None and c[:1] == keys.INDEX_PENDING]
            stored = dict(zip(old_keys, self._store.get_messages(old_keys), strict=True))
            batch = self._store.batch()
            earliest: EpochMs | None = None
            with self._frontier.placing(min((st.slot_ms for st in live), default=None)):
                for st, index in zip(live, current, strict=True):
                    message = st.message
                    if message is None or index is None or index[:1] != keys.INDEX_PENDING:
                        continue
                    old_key = index[1:]
                    raw = stored.get(old_key)
                    if raw is not None and codec.decode(raw).occurrence >= message.occurrence:
                        continue
                    key = keys.message_key(st.slot_ms, message.id)
                    if raw is not None and key != old_key:
                        batch.delete_message(old_key)
                    batch.put_scheduled(
                        key, message.id, codec.encode(message), keys.index_pending(key)
                    )
                    earliest = st.slot_ms if earliest is None else min(earliest, st.slot_ms)
                if seek_ms > self._seek:
                    batch.set_seek(seek_ms)
                self._store.write(batch)
            self._seek = max(self._seek, seek_ms)
        self._forget_arrivals(covered)
        if earliest is not None:
            self._frontier.notify(earliest)

    def lead(self, seek_ms: EpochMs, partitions: list[int]) -> EpochMs:
        """Start placing as the node that delivers, from the committed ``seek_ms``: the
        frontier restarts there, its cut at what the store holds. Returns the seek used."""
        with self._lock:
            seek = max(self._seek, seek_ms)
            self._frontier.reset(seek, self._store.read_inner_offsets(partitions))
            self._seek = seek
            self.leading = True
        return seek

    def _forget_arrivals(self, covered: Mapping[int, int]) -> None:
        """Range-delete arrivals below a cut, at most once a second: a range tombstone per
        transaction (tens a second) would pile up for nothing, as a takeover reads arrivals
        only from the cut's offsets on."""
        now = time.monotonic()
        if now - self._arrivals_forgotten_at < _FORGET_ARRIVALS_S:
            return
        self._arrivals_forgotten_at = now
        for partition, offset in covered.items():
            self._store.delete_arrivals(
                keys.arrival_key(partition, 0), keys.arrival_key(partition, offset)
            )

    def relocate_uncovered(
        self, seek_ms: EpochMs, covered: Mapping[int, int], partitions: list[int]
    ) -> int:
        """Move behind-the-seek adds that the committed progress does not cover past it.

        Called once by a replica taking over, after ingest caught up with the cut ``covered``:
        an add at or above its partition's offset there was not delivered by the old master
        whatever its due time, so one stored at or before ``seek_ms`` moves to ``seek_ms + 1``
        (delivered at once). Returns how many moved."""
        moved = 0
        for partition in partitions:
            start = keys.arrival_key(partition, covered.get(partition, 0))
            stop = keys.arrival_key(partition + 1, 0)
            while True:
                rows = self._store.scan_arrivals(start, stop, _CHUNK)
                if not rows:
                    break
                moved += self._relocate([raw_id.decode() for _, raw_id in rows], seek_ms)
                start = rows[-1][0] + b"\x00"
        return moved

    def _relocate(self, message_ids: list[str], seek_ms: EpochMs) -> int:
        with self._lock:
            current = self._store.get_index(message_ids)
            behind = [
                (message_id, c[1:])
                for message_id, c in zip(message_ids, current, strict=True)
                if c is not None and c[:1] == keys.INDEX_PENDING and keys.slot_of(c[1:]) <= seek_ms
            ]
            values = self._store.get_messages([key for _, key in behind])
            batch = self._store.batch()
            moved = 0
            for (message_id, old_key), value in zip(behind, values, strict=True):
                if value is None:
                    continue  # purged: delivered long ago by an earlier master
                key = keys.message_key(seek_ms + 1, message_id)
                batch.delete_message(old_key)
                batch.put_scheduled(key, message_id, value, keys.index_pending(key))
                moved += 1
            self._store.write(batch)
        return moved

    def is_current(self, pairs: list[tuple[str, bytes]]) -> list[bool]:
        """Whether each (id, key) is still what the index schedules (false when superseded)."""
        states = self._store.get_index([message_id for message_id, _ in pairs])
        return [
            state == keys.index_pending(key) for (_, key), state in zip(pairs, states, strict=True)
        ]

    def purge_delivered(self, cutoff_ms: EpochMs) -> int:
        """Drop messages with slot <= cutoff (must be <= seek) and the index entries of those ids.

        Returns how many message keys were dropped. Index entries that moved on (a repeat's
        later occurrence) are kept.
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
                for (key, _), message_id, state in zip(rows, ids, states, strict=True):
                    if state == keys.index_pending(key):
                        batch.delete_index(message_id)
                self._store.write(batch)
            dropped += len(rows)
            start = rows[-1][0] + b"\x00"
        if dropped:
            self._store.delete_messages_before(stop)
        return dropped

    def expire_tombstones(self) -> int:
        """Forget cancel tombstones whose retention ended."""
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
                for row, message_id, state in zip(rows, ids, states, strict=True):
                    if state is not None and state[:1] == keys.INDEX_CANCELLED:
                        batch.delete_index(message_id)
                    batch.delete_expiry(row)
                self._store.write(batch)
            expired += len(rows)


def next_occurrence(message: DelayMessage) -> DelayMessage | None:
    """The occurrence after ``message``'s, or None when the repeat is finished."""
    if message.repeat is None or message.occurrence >= message.repeat.times:
        return None
    return replace(message, occurrence=message.occurrence + 1)
