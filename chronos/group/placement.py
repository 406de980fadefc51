"""What a replica does to its store beyond ingest: follow or lead, apply committed progress,
and relocate at takeover what the committed progress does not cover.

The core writer (``schedule/ledger.py``) knows nothing of groups: it asks its ``Placement``
where an add goes, and this module injects one (``ReplicaPlacement``) and writes through
``Ledger.writing``. The argument these rules rest on is in ``chronos/group/__init__.py``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from chronos.model import DecodedRequest, DelayMessage, Op
from chronos.schedule.frontier import Frontier
from chronos.schedule.ledger import Ledger
from chronos.schedule.progress_record import RepeatState
from chronos.store import codec, keys
from chronos.store.rocks import RocksStore
from chronos.types import EpochMs

_CHUNK = 10_000
#: Fewest seconds between two range deletes of covered arrivals (see ``_forget_arrivals``).
_FORGET_ARRIVALS_S = 1.0


class ReplicaPlacement:
    """A replica's ``Placement``: records every add's arrival; places at the due time while
    following, after the frontier while leading. Switched only under ``Ledger.locked``.

    A node alone rebuilding its store from the inner topic places the same way until it has
    applied its published progress, then stops recording arrivals (``stop_tracking``)."""

    def __init__(self) -> None:
        #: A replica starts following.
        self.leading = False
        self.tracks_arrivals = True
        #: The inner offsets the last applied committed progress covers (None before one).
        self.covered: Mapping[int, int] | None = None


class ReplicaStore:
    """A replica's writes to its store beyond ingest.

    Parameters:
        store: the replica's store.
        frontier: its push frontier.
        ledger: the store's writer, built with ``placement``.
        placement: the placement this class switches.
    """

    def __init__(
        self, store: RocksStore, frontier: Frontier, ledger: Ledger, placement: ReplicaPlacement
    ) -> None:
        self._store = store
        self._frontier = frontier
        self._ledger = ledger
        self._placement = placement
        self._arrivals_forgotten_at = -_FORGET_ARRIVALS_S

    @property
    def seek_ms(self) -> EpochMs:
        """The store's seek (the ledger owns it)."""
        return self._ledger.seek_ms

    @property
    def leading(self) -> bool:
        return self._placement.leading

    def inner_offsets(self, partitions: list[int]) -> dict[int, int]:
        """The next inner offset per partition ingest stored."""
        return self._ledger.inner_offsets(partitions)

    def follow(self) -> None:
        """Place as a follower: every add at its due time, every cancel applied. Its store must
        say "delivered" for exactly what the committed progress covers, which is decided by due
        times and inner offsets alone: the moves it made leading that no commit carries are
        undone (``Ledger.undo_moves``), at a demotion and at a start after a crash alike."""
        with self._ledger.locked():
            self._placement.leading = False
        self._ledger.undo_moves()

    def lead(self, seek_ms: EpochMs, partitions: list[int]) -> EpochMs:
        """Place as the node that delivers, from the committed ``seek_ms``: the frontier
        restarts there, its cut at what the store holds. Returns the seek used.

        Moves of an earlier term of this node that never committed were undone when it began
        following (``follow``: every replica starts following, and a demotion or a retake goes
        through it): ``relocate_uncovered`` decides their requests again, from the reschedules'
        arrivals. Not here: the committed progress was applied since, and an undo now would
        take back what it says."""
        with self._ledger.writing() as write:
            seek = max(write.seek_ms, seek_ms)
            write.seek_ms = seek
            self._frontier.reset(seek, self._store.read_inner_offsets(partitions))
            self._placement.leading = True
        return seek

    def apply_cut(
        self,
        seek_ms: EpochMs,
        states: Sequence[RepeatState],
        covered: Mapping[int, int],
        unchanged: Mapping[str, bytes] | None = None,
    ) -> None:
        """Apply one committed progress record: the next occurrences of repeats at the slots
        the master gave them, the seek, and forget arrivals the record covers.

        ``unchanged`` (the master's own store): states that move a message only while it
        is still stored as these bytes, by id, with no reschedule of it unpublished; a
        message the master planned ahead of its frontier may have been cancelled or
        rescheduled since it was read (even to the same time: the same bytes), and the
        reschedule's own state follows in a later record for the backups.

        A state moves its repeat only forward (a later occurrence than the stored one, or the
        same one rescheduled or at another slot: ``_not_newer``) and never revives a cancelled
        or unknown id, so applying records again is harmless. ``state.message`` None means the
        repeat finished: nothing to schedule."""
        live = [st for st in states if st.message is not None]
        with self._ledger.writing(min((st.slot_ms for st in live), default=None)) as write:
            current = [
                keys.pending_key(c) for c in self._store.get_index([st.message_id for st in live])
            ]
            old_keys = [key for key in current if key is not None]
            stored = dict(zip(old_keys, self._store.get_messages(old_keys), strict=True))
            for st, old_key in zip(live, current, strict=True):
                message = st.message
                if message is None or old_key is None:
                    continue
                raw = stored.get(old_key)
                if unchanged and message.id in unchanged:
                    if raw != unchanged[message.id] or self._ledger.moving(message.id):
                        continue  # changed since it was read: the change wins
                key = keys.message_key(st.slot_ms, message.id)
                if raw is not None and _not_newer(message, codec.decode(raw), key == old_key):
                    continue
                # Nothing to delete when the message at the old key was purged (delivered).
                write.batch.move_scheduled(
                    old_key if raw is not None else None, key, message.id, codec.encode(message)
                )
                write.placed(st.slot_ms)
            write.seek_ms = max(write.seek_ms, seek_ms)
            self._placement.covered = dict(covered)
        self._forget_arrivals(covered)

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
                moved += self._replay(rows, seek_ms)
                start = rows[-1][0] + b"\x00"
        return moved

    def _replay(self, rows: list[tuple[bytes, bytes]], seek_ms: EpochMs) -> int:
        """Relocate the uncovered adds of ``rows`` and decide their reschedules, in offset
        order: a reschedule the old master applied but did not commit is decided again, now
        by this store leading (``Ledger._reschedule``: too late exactly when the committed
        progress delivered the message, moved otherwise), as the old master's decision never
        reached a reader."""
        moved = 0
        adds: list[str] = []
        for key, value in rows:
            raw_id, due = keys.split_arrival(value)
            if due is None:
                adds.append(raw_id.decode())
                continue
            moved += self._relocate(adds, seek_ms)
            adds = []
            origin = keys.split_arrival_key(key)
            request: DecodedRequest = (Op.RESCHEDULE, raw_id.decode(), due, None)
            self._ledger.apply_decoded([request], origins=[origin])
        return moved + self._relocate(adds, seek_ms)

    def _relocate(self, message_ids: list[str], seek_ms: EpochMs) -> int:
        with self._ledger.writing() as write:
            current = [keys.pending_key(c) for c in self._store.get_index(message_ids)]
            behind = [
                (message_id, key)
                for message_id, key in zip(message_ids, current, strict=True)
                if key is not None and keys.slot_of(key) <= seek_ms
            ]
            values = self._store.get_messages([key for _, key in behind])
            moved = 0
            for (message_id, old_key), value in zip(behind, values, strict=True):
                if value is None:
                    continue  # purged: delivered long ago by an earlier master
                key = keys.message_key(seek_ms + 1, message_id)
                write.batch.move_scheduled(old_key, key, message_id, value)
                moved += 1
        return moved


def _not_newer(state: DelayMessage, stored: DelayMessage, same_slot: bool) -> bool:
    """Whether a progress state says nothing new about the stored message: an earlier
    occurrence, or the same one, not rescheduled (a reschedule sets a one-shot's first due
    time, a repeat occurrence's moved one), at the same slot. A different slot for the same
    message is the master's word: a demoted master's own uncommitted move of it put it
    elsewhere."""
    if stored.occurrence != state.occurrence:
        return stored.occurrence > state.occurrence
    return (
        stored.first_due_ms == state.first_due_ms
        and stored.moved_due_ms == state.moved_due_ms
        and same_slot
    )
