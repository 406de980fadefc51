"""Restatements: what keeps an id's last inner record stating what the store holds for it.

On a compacted inner topic Kafka keeps only the last record of each id, so a store restored
from the topic sees that record alone (``docs/design/live-state.md``). Most records state
their id's state by themselves (a first add, a cancel of a pending or unknown id); a few leave
it stated wrongly, and the node that delivers then appends a *restatement*:

- an add of an id the store holds (first add wins, cancel before add, a re-sent id inside the
  dedupe window): the stored message at its slot, or the cancel;
- a cancel that came too late (delivered), or of an id already cancelled (the first cancel's
  time holds): the stored state again;
- a reschedule (it carries no payload): the moved message at its new slot, or the state it
  left unchanged;
- a restatement read back after the id's state changed again (a cancel between): the state now.

A restatement of an id a store holds in the same state changes nothing there, so one written
twice (by a master and its successor) is harmless. The ledger notes the ids while applying a
batch, in the store's outbox, in the same write (``Ledger(restates=True)``, on every replica);
the node that delivers sends them (``node/restater.py``) with the content the store holds when
it sends (``pending``); reading a restatement back clears the id's earlier entries. A message
restatement is a refresh record (``wire.encode_refresh``), a cancel one a cancel with the time
it was first applied (``wire.encode_cancel``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from chronos.store import keys
from chronos.store.rocks import RocksStore
from chronos.types import EpochMs


@dataclass(frozen=True, slots=True)
class Restatement:
    """One record to append so that ``message_id``'s last record states its state.

    Parameters:
        message_id: the id.
        partition: the inner partition the record that caused it came from (the id's own);
            None when not known (a producer partitioning by id then places it).
        slot_ms: the message's slot (a message restatement); None for a cancel.
        value: the stored message (codec-encoded) for a message restatement.
        cancelled_ms: when the cancel was first applied, for a cancel restatement.
    """

    message_id: str
    partition: int | None
    slot_ms: EpochMs | None = None
    value: bytes | None = None
    cancelled_ms: EpochMs = 0

    @property
    def is_cancel(self) -> bool:
        return self.slot_ms is None


def current(store: RocksStore, message_id: str, partition: int | None) -> Restatement | None:
    """What restates ``message_id`` now; None when the store no longer holds it."""
    entry = keys.read_index(store.get_index([message_id])[0])
    if entry is None:
        return None
    if isinstance(entry, keys.Cancelled):
        return Restatement(message_id, partition, cancelled_ms=entry.at_ms)
    value = store.get_messages([entry.key])[0]
    if value is None:  # pragma: no cover - the index points at a stored key
        return None
    return Restatement(message_id, partition, entry.slot_ms, value)


def pending(store: RocksStore, limit: int = 10_000) -> list[tuple[bytes, Restatement | None]]:
    """Each outbox entry (its key) with what restates its id now, in the order decided."""
    found: list[tuple[bytes, Restatement | None]] = []
    for key in store.scan_outbox(limit):
        partition, _, message_id = keys.split_outbox_key(key)
        found.append((key, current(store, message_id, partition)))
    return found


_CHUNK = 1_000
_MAX_KEY = keys.slot_bound(keys.MAX_MS)


def held(store: RocksStore) -> Iterator[Restatement]:
    """What restates every id ``store`` holds (partition unknown): each message its id still
    points at (pending, or delivered inside the idempotency window: a restore takes one
    behind its cut for delivered), then each live cancel tombstone. For moving a store's
    state into a topic that never held restatements (``runtime/migration.py``)."""
    start = b""
    while rows := store.scan(start, _MAX_KEY, _CHUNK):
        ids = [keys.split_message_key(key)[1] for key, _ in rows]
        for (key, value), message_id, index in zip(rows, ids, store.get_index(ids), strict=True):
            # An earlier occurrence of a repeat stays until purged; its id has moved on.
            if index == keys.index_pending(key):
                yield Restatement(message_id, None, keys.slot_of(key), value)
        start = rows[-1][0] + b"\x00"
    start = b""
    while expiring := store.scan_expiry(_MAX_KEY, _CHUNK, start):
        ids = [row[keys.MS_WIDTH :].decode() for row in expiring]
        for message_id, index in zip(ids, store.get_index(ids), strict=True):
            entry = keys.read_index(index)
            if isinstance(entry, keys.Cancelled):
                yield Restatement(message_id, None, cancelled_ms=entry.at_ms)
        start = expiring[-1] + b"\x00"


class OutboxIndex:
    """The outbox's keys by id, in memory (built from the store at start): a restatement read
    back finds its id's entries without scanning the outbox, which grows on a follower and on a
    node that cannot send (a failover check with 200 cancels a second left 17,000-23,000
    entries, and a scan per read-back made a restarting replica's ingest fall minutes
    behind). Changed only after the write that changed the store."""

    def __init__(self, stored: Iterable[bytes] = ()) -> None:
        self._by_id: dict[str, list[bytes]] = {}
        for key in stored:
            self.add(key)

    def add(self, key: bytes) -> None:
        self._by_id.setdefault(keys.split_outbox_key(key)[2], []).append(key)

    def remove(self, key: bytes) -> None:
        message_id = keys.split_outbox_key(key)[2]
        entries = self._by_id.get(message_id)
        if entries is not None and key in entries:
            entries.remove(key)
            if not entries:
                del self._by_id[message_id]

    def before(self, message_id: str, origin: tuple[int, int] | None) -> list[bytes]:
        """The entries of ``message_id`` decided at records before ``origin`` (all: None)."""
        return [
            key
            for key in self._by_id.get(message_id, ())
            if origin is None or keys.split_outbox_key(key)[:2] < origin
        ]

    def __len__(self) -> int:
        return sum(len(entries) for entries in self._by_id.values())
