"""A cluster member's one database with made-up schedules, for tests of what reads it
(checkpoints, the pipeline's source and backlog job) without a running member."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from chronos.model import DelayMessage
from chronos.settings import StoreSettings
from chronos.store import codec, keys
from chronos.store.database import RocksDatabase
from chronos.store.rocks import RocksStore

#: No WAL sync in the background: the tests close or checkpoint the store themselves.
FAST = StoreSettings(wal_sync_interval_ms=60_000)


def member_database(
    path: Path, seeks: Mapping[int, int], slots: range = range(100, 120), partitions: int = 4
) -> RocksDatabase:
    """A member's database over ``partitions`` inner partitions (each with its families, as a
    member's has), hosting ``seeks``' partitions: ``p<partition>-<slot>`` of topic ``t`` at
    every fourth slot of ``slots`` from ``slots.start + partition``, delivered up to its seek."""
    database = RocksDatabase(path, FAST, range(partitions))
    for partition, seek in seeks.items():
        store = RocksStore.of_partition(database, partition)
        batch = store.batch()
        for slot in range(slots.start + partition, slots.stop, 4):
            ident = f"p{partition}-{slot}"
            message = DelayMessage(ident, "t", None, b"v", first_due_ms=slot)
            batch.put_message(keys.message_key(slot, ident), codec.encode(message))
        batch.set_seek(seek)
        store.write(batch)
        store.close()
    return database
