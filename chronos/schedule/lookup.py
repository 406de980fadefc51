"""Read-only questions about the schedule: where is a message, what is pending, what comes due.

The answers come from the store as it is (no Kafka round trip): the index says whether an id is
scheduled or cancelled (and what its cancel found), the seek and cursor whether its slot was
delivered, the outcomes family where it went. A backup answers from the committed progress it
follows: the same states, without partition and offset (only the delivering node saw those).

Only the node that delivered a message recorded where it went; another replica (a backup, or
the master after a failover) answers ``delivered`` with ``outcome_recorded: false``, which may
also mean dead-lettered.

A message's states: ``pending`` (stored, slot not yet passed), ``delivered``, ``dead_lettered``,
``cancelled`` and ``unknown`` (never seen, or forgotten: a delivered message after
``delete.retention_s``, a cancel tombstone after ``delete.tombstone_retention_s``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from chronos.errors import DecodeError, NotReady
from chronos.listing import ListState, PageQuery
from chronos.model import DelayMessage
from chronos.repeat import Repeat
from chronos.schedule.ledger import Ledger, next_occurrence
from chronos.store import codec, keys, outcome
from chronos.store.due_counts import MINUTE_MS
from chronos.store.rocks import RocksStore
from chronos.types import EpochMs

State = Literal["pending", "delivered", "dead_lettered", "cancelled", "unknown"]
__all__ = ["Lookup", "NotReady"]

#: What a cancel tombstone says the cancel found (``keys.CANCEL_*``).
CANCEL_FINDINGS = {
    keys.CANCEL_REMOVED: "removed",
    keys.CANCEL_RACED: "removed_while_delivering",
    keys.CANCEL_UNKNOWN: "nothing_to_cancel",
    keys.CANCEL_FOLLOWER: "removed_on_backup",
}
MAX_PAGE = 1_000
#: How many of a repeat's next occurrences status lists.
UPCOMING = 5
#: How many moves of one id status follows while it reads (``Lookup._entry``); a message
#: rescheduled more often than that within one status call is answered without its fields.
REREADS = 3


@dataclass
class MessageStatus:
    """One message as the store knows it; JSON through ``as_json``."""

    id: str
    state: State
    topic: str | None = None
    due_ms: EpochMs | None = None
    slot_ms: EpochMs | None = None
    occurrence: int | None = None
    times: int | None = None
    next_due_ms: EpochMs | None = None
    #: A repeat's next occurrences after the pending one (up to ``UPCOMING``).
    upcoming_ms: list[EpochMs] | None = None
    delivered_ms: EpochMs | None = None
    partition: int | None = None
    offset: int | None = None
    dead_letter_reason: str | None = None
    cancelled_ms: EpochMs | None = None
    cancel: str | None = None
    last_delivery: dict[str, int | None] | None = None
    #: False for a delivered message whose outcome this node did not record (another replica
    #: delivered it): it may also have gone to the dead-letter topic.
    outcome_recorded: bool | None = None
    #: Failed delivery attempts as the node that delivers saw them (``delivery/attempts.py``):
    #: attempts, last_error, failed_at_ms, retry_at_ms (None once dead-lettered).
    delivery_attempts: dict[str, object] | None = None

    def as_json(self) -> dict[str, object]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


@dataclass
class Page:
    """One listing page: rows in slot order and where the next page starts (None: the end)."""

    rows: list[dict[str, object]] = field(default_factory=list)
    cursor: str | None = None
    scanned: int = 0

    def as_json(self) -> dict[str, object]:
        return {"rows": self.rows, "cursor": self.cursor, "scanned": self.scanned}


@dataclass(frozen=True)
class Forecast:
    """Deliveries per bucket from ``from_ms`` (a whole minute): pending messages and, when
    asked for, the later occurrences of repeats in the horizon (``repeats`` of them;
    ``repeats_complete`` false when more pending messages lay in the horizon than one forecast
    reads), and those overdue."""

    from_ms: EpochMs
    bucket_s: int
    counts: list[int]
    overdue: int
    repeats: int = 0
    repeats_complete: bool = True

    def as_json(self) -> dict[str, object]:
        return {
            "from_ms": self.from_ms,
            "bucket_s": self.bucket_s,
            "counts": self.counts,
            "total": sum(self.counts),
            "overdue": self.overdue,
            "repeats": self.repeats,
            "repeats_complete": self.repeats_complete,
        }


class Lookup:
    """Answers status, listing and forecast questions about one node's store.

    Parameters:
        store: the node store (its due counts must have been started for ``forecast``).
        ledger: the owner of the seek and cursor.
        scan_max: most stored messages a listing page reads (``admin.list_scan_max``).
        attempts_of: a message's failed delivery attempts as this node saw them, JSON
            (``delivery.attempts.Attempts.json_of``), None when it saw none.
    """

    def __init__(
        self,
        store: RocksStore,
        ledger: Ledger,
        scan_max: int = 100_000,
        attempts_of: Callable[[str], dict[str, object] | None] | None = None,
    ) -> None:
        self._attempts_of = attempts_of
        self._store = store
        self._ledger = ledger
        self._scan_max = scan_max

    def _passed(self, key: bytes) -> bool:
        """Whether the delivery of the message at ``key`` is behind the seek (or cursor)."""
        if keys.slot_of(key) <= self._ledger.seek_ms:
            return True
        cursor = self._ledger.cursor
        return cursor is not None and key <= cursor

    def status(self, message_id: str) -> MessageStatus:
        """Where ``message_id`` is now, with its failed delivery attempts if this node saw any."""
        status = self._status(message_id)
        if self._attempts_of is not None:
            status.delivery_attempts = self._attempts_of(message_id)
        return status

    def _entry(self, message_id: str) -> tuple[bytes | None, bytes | None]:
        """The id's index value and, when it points at a slot, the message stored there.

        These are two reads, and a reschedule applied between them moves the message
        (``RocksBatch.move_scheduled``: the index and the message in one batch), so the key
        the first read gave finds nothing. So the index is read again and the message looked
        for where it says now, up to ``REREADS`` times; the delete worker removes a delivered
        message's index entry no later than the message, so a message that is gone shows as
        an index that changed too (unknown). Without this, status answered a moved message as
        pending with no topic, and the proxy refused a topic-limited token's cancel right
        after its own reschedule (403)."""
        state = self._store.get_index([message_id])[0]
        for _ in range(REREADS):
            key = keys.pending_key(state)
            if key is None:
                return state, None
            raw = self._store.get_messages([key])[0]
            if raw is not None:
                return state, raw
            state = self._store.get_index([message_id])[0]
        return state, None

    def _status(self, message_id: str) -> MessageStatus:
        state, raw = self._entry(message_id)
        entry = keys.read_index(state)
        if entry is None:
            return MessageStatus(message_id, "unknown")
        if isinstance(entry, keys.Cancelled):
            return MessageStatus(
                message_id,
                "cancelled",
                cancelled_ms=entry.at_ms,
                cancel=CANCEL_FINDINGS.get(entry.how or b"", "removed"),
            )
        key = entry.key
        found = self._store.get_outcome(message_id)
        last = None if found is None else outcome.decode(found)
        status = MessageStatus(message_id, "pending", slot_ms=keys.slot_of(key))
        message = _decoded(raw)
        if message is not None:
            status.topic = message.topic
            status.due_ms = message.due_ms
            status.occurrence = message.occurrence
            status.times = 1 if message.repeat is None else message.repeat.times
        if not self._passed(key):
            if message is not None:
                following = next_occurrence(message)
                status.next_due_ms = None if following is None else following.due_ms
                if message.repeat is not None:
                    status.upcoming_ms = _upcoming(message.repeat, following)
            if last is not None:
                status.last_delivery = _outcome_json(last)
            return status
        if last is None:
            # A one-shot's delivery (a repeat of one time too) is kept in a block
            # (``store/outcome.py``).
            block = self._store.get_block_outcome(key)
            last = None if block is None else outcome.find_in_block(block, key)
        if last is not None and last.dead_reason is not None:
            status.state = "dead_lettered"
            status.dead_letter_reason = last.dead_reason
            status.delivered_ms = last.at_ms
            return status
        status.state = "delivered"
        status.outcome_recorded = last is not None
        if last is not None and (message is None or last.occurrence == message.occurrence):
            status.delivered_ms = last.at_ms
            status.partition = (
                None if last.partition is None or last.partition < 0 else last.partition
            )
            status.offset = None if last.offset is None or last.offset < 0 else last.offset
        return status

    def page(self, query: PageQuery) -> Page:
        """Stored messages with a slot in ``[from_ms, to_ms)``, in slot order, filtered by
        target ``topic`` and ``state``; at most ``limit`` rows (up to ``MAX_PAGE``).

        ``cursor`` is the previous page's. A page reads at most ``scan_max`` stored messages:
        one that matches few of them may end early with a cursor to go on from. Cancelled
        messages are not stored, so they are not listed (ask ``status`` by id)."""
        topic, state, cursor = query.topic, query.state, query.cursor
        limit = max(1, min(query.limit, MAX_PAGE))
        seek = self._ledger.seek_ms
        low = query.from_ms
        high = query.to_ms
        if state == "pending":
            low = max(low, seek + 1)  # a partly delivered slot is listed from its first key
        elif state in ("delivered", "dead_lettered"):
            high = min(high, seek + 1)
        start = keys.slot_bound(low)
        if cursor is not None:
            start = max(start, bytes.fromhex(cursor) + b"\x00")
        stop = keys.slot_bound(high)
        page = Page()
        while page.scanned < self._scan_max and len(page.rows) < limit:
            rows = self._store.scan(start, stop, min(limit * 4, self._scan_max - page.scanned))
            if not rows:
                return page
            page.scanned += len(rows)
            outcomes = self._outcomes_of(rows) if state in ("dead_lettered", "any") else None
            for n, (key, raw) in enumerate(rows):
                start = key + b"\x00"
                row = self._row(key, raw, topic, state, outcomes[n] if outcomes else None)
                if row is not None:
                    page.rows.append(row)
                    if len(page.rows) == limit:
                        break
        if start < stop:
            page.cursor = start[:-1].hex()
        return page

    def _outcomes_of(self, rows: list[tuple[bytes, bytes]]) -> list[outcome.Outcome | None]:
        ids = [key[keys.MS_WIDTH :].decode() for key, _ in rows]
        found: list[outcome.Outcome | None] = []
        for message_id in ids:
            raw = self._store.get_outcome(message_id)
            found.append(None if raw is None else outcome.decode(raw))
        return found

    def _row(
        self,
        key: bytes,
        raw: bytes,
        topic: str | None,
        state: ListState,
        last: outcome.Outcome | None,
    ) -> dict[str, object] | None:
        message = _decoded(raw)
        if topic is not None and (message is None or message.topic != topic):
            return None
        row_state: State = "pending"
        if self._passed(key):
            dead = last is not None and last.dead_reason is not None
            row_state = "dead_lettered" if dead else "delivered"
        if state != "any" and row_state != state:
            return None
        slot, message_id = keys.split_message_key(key)
        row: dict[str, object] = {"id": message_id, "slot_ms": slot, "state": row_state}
        if message is not None:
            row.update(topic=message.topic, due_ms=message.due_ms, occurrence=message.occurrence)
        return row

    def forecast(
        self, now_ms: EpochMs, horizon_s: int, bucket_s: int, repeats: bool = False
    ) -> Forecast:
        """Pending messages per ``bucket_s`` (a multiple of 60) over ``horizon_s`` from the
        minute ``now_ms`` falls in, and how many are overdue (due before that minute, not yet
        delivered). With ``repeats``, also the later occurrences of repeats in the horizon:
        that reads the stored messages there (up to ``scan_max``), where the counts alone cost
        the same at any number of pending messages. Raises NotReady while the due counts are
        being built; ValueError for a bucket that is not whole minutes."""
        if bucket_s < 60 or bucket_s % 60:
            raise ValueError("bucket_s must be a whole number of minutes (60, 300, 3600, ...)")
        counts = self._store.due_counts
        if not counts.ready:
            raise NotReady("the due counts are being built")
        per_bucket = bucket_s // 60
        buckets = max(1, -(-horizon_s // bucket_s))
        first = now_ms // MINUTE_MS
        from_ms = first * MINUTE_MS
        after = self._ledger.seek_ms + 1  # the first slot not delivered
        minutes = counts.between(first, first + buckets * per_bucket)
        after_minute = after // MINUTE_MS
        overdue = 0
        if after < from_ms:
            # Behind now: the seek's own minute by a scan, the whole ones after it by counts.
            partial_end = min((after_minute + 1) * MINUTE_MS, from_ms)
            overdue = self._count(after, partial_end)
            overdue += counts.total(after_minute + 1, first)
        elif after_minute == first:
            minutes[0] = self._count(after, (first + 1) * MINUTE_MS)
        elif after_minute > first:  # the seek ahead of this clock (another node's, a backup)
            for m in range(first, min(after_minute, first + len(minutes))):
                minutes[m - first] = 0
            if after_minute < first + len(minutes):
                minutes[after_minute - first] = self._count(after, (after_minute + 1) * MINUTE_MS)
        grouped = [sum(minutes[i : i + per_bucket]) for i in range(0, len(minutes), per_bucket)]
        if not repeats:
            return Forecast(from_ms, bucket_s, grouped, overdue)
        end_ms = from_ms + buckets * bucket_s * 1000
        added, complete = self._add_later_occurrences(grouped, after, from_ms, end_ms, bucket_s)
        return Forecast(from_ms, bucket_s, grouped, overdue, added, complete)

    def _add_later_occurrences(
        self, buckets: list[int], after: EpochMs, from_ms: EpochMs, end_ms: EpochMs, bucket_s: int
    ) -> tuple[int, bool]:
        """Add the occurrences after the pending one of every repeat pending before
        ``end_ms`` (only those can have more in the horizon) to their buckets; returns how
        many, and whether every pending message there was read (``scan_max`` bounds it)."""
        rows = self._store.scan(keys.slot_bound(after), keys.slot_bound(end_ms), self._scan_max + 1)
        added = 0
        for _key, raw in rows[: self._scan_max]:
            if not codec.has_repeat(raw):
                continue
            message = _decoded(raw)
            if message is None or message.repeat is None:
                continue
            following = next_occurrence(message)  # after a moved one: the schedule's next
            if following is None:
                continue
            repeat, first = message.repeat, message.first_due_ms
            occurrence, due = following.occurrence, following.due_ms
            while True:
                if due >= end_ms:
                    break
                if due >= from_ms:
                    buckets[(due - from_ms) // (bucket_s * 1000)] += 1
                    added += 1
                if repeat.is_last(first, occurrence):
                    break
                due = repeat.next_due(first, occurrence, due)
                occurrence += 1
        return added, len(rows) <= self._scan_max

    def _count(self, start_ms: EpochMs, end_ms: EpochMs) -> int:
        if end_ms <= start_ms:
            return 0
        return self._store.count_messages(keys.slot_bound(start_ms), keys.slot_bound(end_ms))


def _upcoming(repeat: Repeat, following: DelayMessage | None) -> list[EpochMs]:
    """Due times of up to ``UPCOMING`` occurrences from ``following`` (the pending one's
    next, ``next_occurrence``) on."""
    if following is None:
        return []
    first, occurrence = following.first_due_ms, following.occurrence
    return [following.due_ms, *repeat.following(first, occurrence, UPCOMING - 1)]


def _decoded(raw: bytes | None) -> DelayMessage | None:
    if raw is None:
        return None
    try:
        return codec.decode(raw)
    except DecodeError:
        return None


def _outcome_json(last: outcome.Outcome) -> dict[str, int | None]:
    return {
        "occurrence": last.occurrence,
        "at_ms": last.at_ms,
        "partition": last.partition,
        "offset": last.offset,
    }
