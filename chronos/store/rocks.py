"""RocksDB store (rocksdict, raw mode): one schedule, one column family per concern, in a
``RocksDatabase`` it may share with other partitions' schedules (``database.py``)."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import cast

from rocksdict import ColumnFamily, Rdict, ReadOptions, WriteBatch

from chronos.names import CF_ARRIVALS, CF_EXPIRY, CF_INDEX, CF_MESSAGES, CF_META, CF_OUTCOMES
from chronos.settings import StoreSettings
from chronos.store import keys, outcome
from chronos.store.database import EVERY_KEY, RocksDatabase
from chronos.store.disk_guard import StoreFull
from chronos.store.due_counts import MINUTE_MS, DueCounts
from chronos.types import EpochMs

#: Keys the initial due count reads per hold of the write lock (about 3 ms).
_COUNT_CHUNK = 10_000


def _range(cf: Rdict, start: bytes, stop: bytes, limit: int) -> list[tuple[bytes, bytes]]:
    """Up to ``limit`` (key, value) pairs of ``cf`` with ``start <= key < stop``, in key order."""
    read = ReadOptions()
    read.set_iterate_upper_bound(stop)
    # items() walks in Rust and yields pairs: a third cheaper per row than iter() with a
    # key(), value() and next() call each.
    rows = cast("Iterator[tuple[bytes, bytes]]", cf.items(from_key=start, read_opt=read))
    return list(itertools.islice(rows, limit))


class RocksBatch:
    """A rocksdict WriteBatch addressed by concern instead of by column-family handle."""

    def __init__(self, store: RocksStore) -> None:
        self._wb = WriteBatch(raw_mode=True)
        self._s = store
        self._count = 0
        #: Message keys put and deleted, for the due counts (``due_counts.py``).
        self.added: list[bytes] = []
        self.removed: list[bytes] = []

    def _put(self, key: bytes, value: bytes, cf: ColumnFamily) -> None:
        self._wb.put(key, value, cf)
        self._count += 1

    def put_message(self, key: bytes, value: bytes) -> None:
        self._put(key, value, self._s.h_messages)
        self.added.append(key)

    def put_scheduled(self, key: bytes, message_id: str, value: bytes, pending: bytes) -> None:
        """A message and its index entry, the write of every add."""
        self.put_scheduled_many([(key, message_id.encode(), value, pending)])

    def put_scheduled_many(self, placed: list[tuple[bytes, bytes, bytes, bytes]]) -> None:
        """Many adds: (messages key, raw id, stored value, index value) each; the ingest path."""
        put, messages, index = self._wb.put, self._s.h_messages, self._s.h_index
        added = self.added
        for key, raw_id, value, pending in placed:
            put(key, value, messages)
            put(raw_id, pending, index)
            added.append(key)
        self._count += 2 * len(placed)

    def move_scheduled(
        self, old_key: bytes | None, key: bytes, message_id: str, value: bytes
    ) -> None:
        """Schedule ``message_id`` at ``key``, no longer at ``old_key`` (None: it was not
        stored): the one way a pending message moves between slots, whoever moves it (a
        reschedule, a refresh of a later occurrence, a master's progress state, a relocation
        at takeover). The index follows in the same batch, so the two never disagree. The old
        key is deleted even when it is ``key`` (the put then wins): the due counts see one
        message leave and one come."""
        if old_key is not None:
            self.delete_message(old_key)
        self.put_scheduled(key, message_id, value, keys.index_pending(key))

    def delete_message(self, key: bytes) -> None:
        self._wb.delete(key, self._s.h_messages)
        self._count += 1
        self.removed.append(key)

    def put_outcome(self, raw_id: bytes, value: bytes) -> None:
        """Where a message's delivered occurrence went (``store/outcome.py``)."""
        self._put(raw_id, value, self._s.h_outcomes)

    def delete_outcome(self, raw_id: bytes) -> None:
        self._wb.delete(raw_id, self._s.h_outcomes)
        self._count += 1

    def put_index(self, message_id: str, value: bytes) -> None:
        self._put(message_id.encode(), value, self._s.h_index)

    def delete_index(self, message_id: str) -> None:
        self._wb.delete(message_id.encode(), self._s.h_index)
        self._count += 1

    def put_expiry(self, key: bytes) -> None:
        self._put(key, b"", self._s.h_expiry)

    def delete_expiry(self, key: bytes) -> None:
        self._wb.delete(key, self._s.h_expiry)
        self._count += 1

    def put_outbox(self, key: bytes) -> None:
        """Note an id to restate (``keys.outbox_key``)."""
        self._put(key, b"", self._s.h_meta)

    def delete_outbox(self, key: bytes) -> None:
        self._wb.delete(key, self._s.h_meta)
        self._count += 1

    def put_undo(self, raw_id: bytes, slot_ms: EpochMs, value: bytes) -> None:
        """Journal where a message was before a move that may have to be undone."""
        self._put(keys.undo_key(raw_id), keys.undo_value(slot_ms, value), self._s.h_meta)

    def delete_undo(self, raw_id: bytes) -> None:
        self._wb.delete(keys.undo_key(raw_id), self._s.h_meta)
        self._count += 1

    def put_arrival(self, key: bytes, raw_id: bytes) -> None:
        self._put(key, raw_id, self._s.h_arrivals)

    def delete_arrival(self, key: bytes) -> None:
        self._wb.delete(key, self._s.h_arrivals)
        self._count += 1

    def set_seek(self, seek_ms: EpochMs) -> None:
        self._put(keys.META_SEEK, keys.pack_ms(seek_ms), self._s.h_meta)

    def set_cursor(self, key: bytes) -> None:
        """The last delivered key of a partly delivered slot (b"": none), see ``Ledger``."""
        self._put(keys.META_CURSOR, key, self._s.h_meta)

    def set_inner_offset(self, partition: int, offset: int) -> None:
        self._put(keys.inner_offset_key(partition), keys.pack_ms(offset), self._s.h_meta)

    def __len__(self) -> int:
        return self._count

    @property
    def raw(self) -> WriteBatch:
        """The underlying rocksdict batch."""
        return self._wb


class RocksStore:
    """The node store on RocksDB: one schedule (a node alone's, a replica's, or one inner
    partition's of a cluster node).

    Parameters:
        path: directory of the database (created when missing).
        settings: compression, cache and durability options.
        database: the database to hold this schedule in (shared with other partitions'),
            None to open its own at ``path`` (closed with this store).
        partition: the inner partition whose schedule this is, None for the default one (a
            node alone's or a replica group's, as every earlier release stored it).
    """

    def __init__(
        self,
        path: Path,
        settings: StoreSettings,
        database: RocksDatabase | None = None,
        partition: int | None = None,
    ) -> None:
        self._owns_database = database is None
        self._database = RocksDatabase(path, settings) if database is None else database
        self.partition = partition
        self._families = self._database.families(partition)
        handles, tables = self._families.handles, self._families.tables
        self.h_messages = handles[CF_MESSAGES]
        self.h_index = handles[CF_INDEX]
        self.h_expiry = handles[CF_EXPIRY]
        self.h_meta = handles[CF_META]
        self.h_arrivals = handles[CF_ARRIVALS]
        self.h_outcomes = handles[CF_OUTCOMES]
        self._messages = tables[CF_MESSAGES]
        self._index = tables[CF_INDEX]
        self._expiry = tables[CF_EXPIRY]
        self._meta = tables[CF_META]
        self._arrivals = tables[CF_ARRIVALS]
        self._outcomes = tables[CF_OUTCOMES]
        #: Messages per minute, once ``start_due_counts`` ran (the forecast reads them).
        self.due_counts = DueCounts()
        # Serialises writes with the due count's scan chunks (see ``due_counts.py``).
        self._write_lock = self._database.write_lock
        self._closed = False
        self._write_opts = self._database.write_options
        self._guard = self._database.guard

    @classmethod
    def of_partition(cls, database: RocksDatabase, partition: int) -> RocksStore:
        """The schedule of ``partition`` in ``database`` (created when missing)."""
        return cls(database.path, database.settings, database, partition)

    def batch(self) -> RocksBatch:
        """A new, empty batch."""
        return RocksBatch(self)

    def messages_estimate(self) -> int:
        """Messages RocksDB estimates the store holds (pending, and delivered ones kept for
        ``delete.retention_s``): a property read, no scan."""
        value = self._messages.property_int_value("rocksdb.estimate-num-keys")
        return int(value or 0)

    def disk_problem(self) -> str | None:
        """Why a write would be refused now (below the disk reserve), or None."""
        try:
            self._guard.check()
        except StoreFull as exc:
            return str(exc)
        return None

    def write(self, batch: RocksBatch) -> None:
        """Apply ``batch`` atomically (visible at once, durable after ``sync``).

        Raises ``StoreFull`` below the disk reserve (nothing written) or when RocksDB met a
        full disk (``disk_guard.py``)."""
        if len(batch):
            self._guard.check()
            with self._write_lock:
                self._database.write(batch.raw)
                if batch.added or batch.removed:
                    self.due_counts.changed(batch.added, batch.removed)

    def start_due_counts(self) -> threading.Thread:
        """Count the stored messages per minute in the background (``due_counts.py``); the
        counts follow every write from now on. Returns the counting thread (a daemon)."""
        self.due_counts.start()
        thread = threading.Thread(target=self._count_due, name="due-counts", daemon=True)
        thread.start()
        return thread

    def _count_due(self) -> None:
        start = b""
        while not self._closed:
            with self._write_lock:
                if self._closed:
                    return
                read = ReadOptions()
                # One pass over everything: keep the cache for reads (the stub lacks the flag).
                read.fill_cache(False)  # type: ignore[call-arg]
                chunk = cast(
                    "list[bytes]",
                    list(
                        itertools.islice(
                            self._messages.keys(from_key=start, read_opt=read), _COUNT_CHUNK
                        )
                    ),
                )
                if not chunk:
                    self.due_counts.finish()
                    return
                self.due_counts.scanned(chunk)
            start = chunk[-1] + b"\x00"

    def count_messages(self, start: bytes, stop: bytes) -> int:
        """Messages with ``start <= key < stop``, by a scan of their keys (short ranges)."""
        read = ReadOptions()
        read.set_iterate_upper_bound(stop)
        return sum(1 for _ in self._messages.keys(from_key=start, read_opt=read))

    def get_outcome(self, message_id: str) -> bytes | None:
        """The outcome value of ``message_id`` (``store/outcome.py``), None without one."""
        raw = self._outcomes.get(message_id.encode())
        return cast("bytes | None", raw)

    def get_block_outcome(self, key: bytes) -> bytes | None:
        """The outcome block that may hold the delivery of the message at ``key``: the first
        block whose last key is at or after it (``store/outcome.py``), None without one."""
        read = ReadOptions()
        read.set_iterate_upper_bound(outcome.BLOCK + b"\xff")
        blocks = self._outcomes.items(from_key=outcome.BLOCK + key, read_opt=read)
        found = next(iter(cast("Iterator[tuple[bytes, bytes]]", blocks)), None)
        return None if found is None else found[1]

    def sync(self) -> None:
        """Make every write so far durable: fsync the WAL (the whole database's)."""
        self._database.sync()

    def sync_if_due(self) -> bool:
        """``sync`` when the last one is older than ``wal_sync_interval_ms``; True if it ran
        (``RocksDatabase.sync_if_due``)."""
        return self._database.sync_if_due()

    def get_index(self, message_ids: list[str]) -> list[bytes | None]:
        """Index values of ``message_ids`` (None where unknown), in one multi-get."""
        return self.get_index_raw([m.encode() for m in message_ids])

    def get_index_raw(self, raw_ids: list[bytes]) -> list[bytes | None]:
        """``get_index`` for ids already encoded."""
        if not raw_ids:
            return []
        # A list key makes rocksdict return a list (raw mode: bytes or None per key); the stub
        # types every get() as ``Any | None``.
        keys_: list[str | int | float | bytes | bool] = list(raw_ids)  # the stub's key type
        return cast("list[bytes | None]", self._index.get(keys_))

    def get_messages(self, message_keys: list[bytes]) -> list[bytes | None]:
        """Stored values of ``message_keys`` (None where absent), in one multi-get."""
        if not message_keys:
            return []
        keys_: list[str | int | float | bytes | bool] = list(message_keys)
        return cast("list[bytes | None]", self._messages.get(keys_))

    def read_inner_offsets(self, partitions: list[int]) -> dict[int, int]:
        """Next inner offset to read per partition, for those the store has seen."""
        raw = cast(
            "list[bytes | None]",  # a list key always returns a list
            self._meta.get([keys.inner_offset_key(p) for p in partitions]),
        )
        return {p: keys.unpack_ms(v) for p, v in zip(partitions, raw, strict=True) if v is not None}

    def read_began_offsets(self, partitions: list[int]) -> dict[int, int]:
        """Where this store's ingest began per partition, for those recorded."""
        raw = cast(
            "list[bytes | None]",
            self._meta.get([keys.began_offset_key(p) for p in partitions]),
        )
        return {p: keys.unpack_ms(v) for p, v in zip(partitions, raw, strict=True) if v is not None}

    def write_began_offsets(self, began: dict[int, int]) -> None:
        """Record where ingest began per partition (synced at once: it is written once)."""
        batch = self.batch()
        for partition, offset in began.items():
            batch._put(keys.began_offset_key(partition), keys.pack_ms(offset), self.h_meta)
        self.write(batch)
        self.sync()

    def write_inner_offsets(self, offsets: dict[int, int]) -> None:
        """Set where ingest resumes, per partition, without any record (an empty store that
        starts reading past the topic's start)."""
        batch = self.batch()
        for partition, offset in offsets.items():
            batch.set_inner_offset(partition, offset)
        self.write(batch)
        self.sync()

    def clear(self) -> None:
        """Delete everything but the format version: a store that missed inner records starts
        over (``chronos/runtime/origin.py``). Ids are UTF-8 and other keys binary of fixed
        layout (``database.EVERY_KEY``)."""
        everything = EVERY_KEY
        for cf in (self._messages, self._index, self._expiry, self._arrivals, self._outcomes):
            cf.delete_range(b"", everything, self._write_opts)
        if self.due_counts.started:
            self.start_due_counts()
        version = self._meta.get(keys.META_FORMAT_VERSION)
        self._meta.delete_range(b"", everything, self._write_opts)
        if version is not None:
            self._meta.put(keys.META_FORMAT_VERSION, version, self._write_opts)
        self.sync()

    def read_seek(self) -> EpochMs | None:
        """The persisted seek timestamp, None for a new store."""
        raw = self._meta.get(keys.META_SEEK)
        return None if raw is None else keys.unpack_ms(raw)

    def read_cursor(self) -> bytes | None:
        """The persisted delivery cursor (``RocksBatch.set_cursor``), None without one."""
        raw = self._meta.get(keys.META_CURSOR)
        return raw or None

    def scan(self, start: bytes, stop: bytes, limit: int) -> list[tuple[bytes, bytes]]:
        """Up to ``limit`` messages with ``start <= key < stop``, in key order."""
        return _range(self._messages, start, stop, limit)

    def first_key_from(self, start: bytes) -> bytes | None:
        """The first messages key at or after ``start``."""
        it = self._messages.iter(ReadOptions())
        it.seek(start)
        return it.key() if it.valid() else None

    def scan_expiry(self, stop: bytes, limit: int, start: bytes = b"") -> list[bytes]:
        """Up to ``limit`` expiry keys in ``[start, stop)``."""
        read = ReadOptions()
        read.set_iterate_upper_bound(stop)
        it = self._expiry.iter(read)
        it.seek(start)
        out: list[bytes] = []
        while it.valid() and len(out) < limit:
            out.append(it.key())
            it.next()
        return out

    def count_expiry(self, stop: bytes) -> int:
        """Expiry keys below ``stop``, by a scan of their keys."""
        read = ReadOptions()
        read.set_iterate_upper_bound(stop)
        return sum(1 for _ in self._expiry.keys(read_opt=read))

    def scan_outbox(self, limit: int) -> list[bytes]:
        """Up to ``limit`` outbox keys, in the order they were decided."""
        return [key for key, _ in _range(self._meta, keys.OUTBOX_START, keys.OUTBOX_STOP, limit)]

    def scan_undo(self, limit: int) -> list[tuple[str, EpochMs, bytes]]:
        """Up to ``limit`` entries of the undo journal: (id, slot ms, stored value)."""
        rows = _range(self._meta, keys.UNDO_START, keys.UNDO_STOP, limit)
        return [keys.split_undo(key, value) for key, value in rows]

    def scan_arrivals(self, start: bytes, stop: bytes, limit: int) -> list[tuple[bytes, bytes]]:
        """Up to ``limit`` arrivals (key, raw id) with ``start <= key < stop``, in key order."""
        return _range(self._arrivals, start, stop, limit)

    def delete_arrivals(self, start: bytes, stop: bytes) -> None:
        """Range-delete arrivals keys in ``[start, stop)``."""
        self._arrivals.delete_range(start, stop, self._write_opts)

    def delete_messages_before(self, stop: bytes) -> None:
        """Range-delete every message key below ``stop`` and compact the range away."""
        self._messages.delete_range(b"", stop, self._write_opts)
        self._messages.compact_range(None, stop)
        # Outcome blocks wholly below ``stop`` (keyed by their last message key) go with them.
        self._outcomes.delete_range(outcome.BLOCK, outcome.BLOCK + stop, self._write_opts)
        # Minutes wholly below ``stop`` are gone; the partly deleted one is behind the seek,
        # where the forecast scans instead of reading counts.
        self.due_counts.forget_before(keys.unpack_ms(stop) // MINUTE_MS)

    def create_checkpoint(self, dest: Path) -> None:
        """A consistent copy of the whole store at ``dest`` (hard links where possible): the
        whole database, every partition's schedule in it.

        ``dest`` must not exist yet; its parent must.
        """
        self._database.create_checkpoint(dest)

    def close(self) -> None:
        """Flush memtables and close the database (when this store opened it); the directory
        can be reopened at once.

        Every column-family object and handle keeps RocksDB alive (and its LOCK held), so all
        of them are dropped, not only the database object.
        """
        with self._write_lock:
            self._closed = True
        try:
            self._families.close()
        finally:
            self._database.closed(self._families)
        del self._messages, self._index, self._expiry, self._meta, self._arrivals, self._outcomes
        del self.h_messages, self.h_index, self.h_expiry, self.h_meta, self.h_arrivals
        del self.h_outcomes
        if self._owns_database:
            self._database.close()
