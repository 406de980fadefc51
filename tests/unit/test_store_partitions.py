"""One database, one schedule per inner partition (``store/database.py``): each partition's
store reads and writes only its own column families, and one is restored, dropped or handed
over alone while the others keep theirs (issue 61, step 2)."""

from __future__ import annotations

from pathlib import Path

import pytest
from rocksdict import Options, Rdict

from chronos.errors import StoreError
from chronos.names import CF_INDEX, CF_MESSAGES
from chronos.settings import StoreSettings
from chronos.store import keys
from chronos.store.database import FORMAT_VERSION, RocksDatabase, family_name
from chronos.store.rocks import RocksStore

FAST = StoreSettings(wal_sync_interval_ms=60_000)


def _schedule(store: RocksStore, slots: list[int], tag: str) -> None:
    batch = store.batch()
    for slot in slots:
        key = keys.message_key(slot, f"{tag}-{slot}")
        batch.put_scheduled(key, f"{tag}-{slot}", tag.encode(), keys.index_pending(key))
    batch.set_seek(min(slots) - 1)
    batch.set_inner_offset(0, len(slots))
    store.write(batch)


def _held(store: RocksStore) -> list[str]:
    return [keys.split_message_key(k)[1] for k, _ in store.scan(b"", b"\xff" * 9, 100)]


def test_each_partition_reads_only_its_own_schedule(tmp_path: Path) -> None:
    database = RocksDatabase(tmp_path / "s", FAST)
    default = RocksStore(database.path, FAST, database)
    p1, p2 = RocksStore.of_partition(database, 1), RocksStore.of_partition(database, 2)
    _schedule(p1, [10, 20], "a")
    _schedule(p2, [15], "b")
    assert _held(p1) == ["a-10", "a-20"] and _held(p2) == ["b-15"] and _held(default) == []
    assert (p1.read_seek(), p2.read_seek(), default.read_seek()) == (9, 14, None)
    assert p1.read_inner_offsets([0]) == {0: 2} and p2.read_inner_offsets([0]) == {0: 1}
    assert p1.get_index(["b-15"]) == [None], "an id of another partition is unknown here"
    assert database.partitions() == [1, 2]
    for store in (default, p1, p2):
        store.close()
    database.close()


def test_a_partition_dropped_is_gone_and_the_others_survive_a_reopen(tmp_path: Path) -> None:
    """Mutant caught: the database opened with the default families only (RocksDB refuses a
    database whose families are not all named: a node with partitions could not restart)."""
    database = RocksDatabase(tmp_path / "s", FAST)
    for partition in (1, 2, 3):
        store = RocksStore.of_partition(database, partition)
        _schedule(store, [10 * partition], f"p{partition}")
        store.close()
    database.drop(2)
    database.close()
    reopened = RocksDatabase(tmp_path / "s", FAST)
    assert reopened.partitions() == [1, 3]
    p1, p3 = RocksStore.of_partition(reopened, 1), RocksStore.of_partition(reopened, 3)
    assert _held(p1) == ["p1-10"] and _held(p3) == ["p3-30"]
    p2 = RocksStore.of_partition(reopened, 2)  # handed back later: starts empty
    assert _held(p2) == [] and p2.read_seek() is None
    for store in (p1, p2, p3):
        store.close()
    reopened.close()


def test_a_partition_restored_alone_leaves_the_others_alone(tmp_path: Path) -> None:
    """``clear`` (a partition that missed inner records starts over) touches its own
    families only; the default schedule keeps the store's format version."""
    database = RocksDatabase(tmp_path / "s", FAST)
    default = RocksStore(database.path, FAST, database)
    p1, p2 = RocksStore.of_partition(database, 1), RocksStore.of_partition(database, 2)
    _schedule(p1, [10], "a")
    _schedule(p2, [20], "b")
    p1.clear()
    assert _held(p1) == [] and p1.read_seek() is None
    assert _held(p2) == ["b-20"] and p2.read_seek() == 19
    for store in (default, p1, p2):
        store.close()
    database.close()
    plain = RocksStore(tmp_path / "s", FAST)  # today's node alone opens it as before
    assert _held(plain) == []
    plain.close()


def test_a_store_of_an_earlier_release_opens_with_partitions_added(tmp_path: Path) -> None:
    """A node alone's store (the default families) keeps its schedule when partitions join
    the database, and opens alone again afterwards."""
    alone = RocksStore(tmp_path / "s", FAST)
    _schedule(alone, [5], "x")
    alone.close()
    database = RocksDatabase(tmp_path / "s", FAST)
    p0 = RocksStore.of_partition(database, 0)
    _schedule(p0, [7], "y")
    p0.close()
    database.close()
    again = RocksStore(tmp_path / "s", FAST)
    assert _held(again) == ["x-5"] and again.read_seek() == 4
    again.close()


def test_a_partition_open_cannot_be_dropped_nor_its_database_closed(tmp_path: Path) -> None:
    """Mutants caught: a drop under an open store (its next write failed, and RocksDB kept
    the error for every write of every schedule until a reopen); a close that left the LOCK
    held by the open stores' families."""
    database = RocksDatabase(tmp_path / "s", FAST)
    p1, p2 = RocksStore.of_partition(database, 1), RocksStore.of_partition(database, 2)
    with pytest.raises(StoreError, match="open: close it first"):
        database.drop(1)
    with pytest.raises(StoreError, match=r"still open on the database: \[1, 2\]"):
        database.close()
    p1.close()
    database.drop(1)
    _schedule(p2, [5], "b")  # the others keep writing
    assert _held(p2) == ["b-5"] and database.partitions() == [2]
    p2.close()
    database.close()


def test_a_partition_whose_families_were_cut_short_opens_again(tmp_path: Path) -> None:
    """A creation cut short (a crash, a full disk) leaves some of a partition's families:
    each missing one is created at the next open, and a drop skips those absent."""
    database = RocksDatabase(tmp_path / "s", FAST)
    database.db.create_column_family(family_name(CF_MESSAGES, 4), Options(raw_mode=True)).close()
    database.close()
    reopened = RocksDatabase(tmp_path / "s", FAST)
    assert reopened.partitions() == [], "an empty family is no schedule"
    p4 = RocksStore.of_partition(reopened, 4)
    _schedule(p4, [9], "c")
    assert _held(p4) == ["c-9"] and reopened.partitions() == [4]
    p4.close()
    reopened.drop(4)
    assert reopened.partitions() == []
    reopened.close()
    half = RocksDatabase(tmp_path / "t", FAST)
    half.db.create_column_family(family_name(CF_INDEX, 6), Options(raw_mode=True)).close()
    half.drop(6)  # only its index family exists
    assert half.partitions() == []
    half.close()


def test_families_made_at_the_open_stay_when_their_schedule_is_dropped(tmp_path: Path) -> None:
    """A member's partitions' families are made when its database opens, and a drop empties
    them: RocksDB rewrites its whole OPTIONS file at each family created or dropped (60 ms
    each at 64 partitions). Mutants caught: a drop that removes the families (they leave
    the database's list), one that leaves keys behind (the schedule reads back), one that
    empties a neighbour."""
    path = tmp_path / "s"
    database = RocksDatabase(path, FAST, range(3))
    made = set(Rdict.list_cf(str(path), Options(raw_mode=True)))
    assert {family_name(CF_MESSAGES, p) for p in range(3)} <= made
    assert database.partitions() == [], "families alone hold no schedule"
    for partition in (0, 1):
        store = RocksStore.of_partition(database, partition)
        _schedule(store, [10 + partition], f"p{partition}")
        store.close()
    assert database.partitions() == [0, 1]
    database.drop(0)
    assert database.partitions() == [1]
    assert set(Rdict.list_cf(str(path), Options(raw_mode=True))) == made
    database.close()
    reopened = RocksDatabase(path, FAST, range(3))
    p0, p1 = RocksStore.of_partition(reopened, 0), RocksStore.of_partition(reopened, 1)
    assert _held(p0) == [] and p0.read_seek() is None and p0.read_inner_offsets([0]) == {}
    assert _held(p1) == ["p1-11"] and p1.read_seek() == 10
    _schedule(p0, [30], "again")  # hosted again later: the emptied families take it
    assert _held(p0) == ["again-30"] and reopened.partitions() == [0, 1]
    for store in (p0, p1):
        store.close()
    reopened.close()


def test_a_database_of_a_newer_format_is_refused_whichever_schedule_opens_it(
    tmp_path: Path,
) -> None:
    """The format version lives in the database (the default schedule's meta): a cluster
    node opening partitions only checks it too, and leaves the LOCK free when it refuses."""
    alone = RocksStore(tmp_path / "s", FAST)
    alone._meta.put(keys.META_FORMAT_VERSION, str(FORMAT_VERSION + 1).encode())
    alone.close()
    with pytest.raises(StoreError, match="format version"):
        RocksDatabase(tmp_path / "s", FAST)
    with pytest.raises(StoreError, match="format version"):
        RocksDatabase(tmp_path / "s", FAST)  # the LOCK was released by the refusal


def test_small_writes_to_many_partitions_flush_nothing(tmp_path: Path) -> None:
    """Every memtable counts its arena blocks against the database's one write budget (twice
    ``write_buffer_mb``), used or not: with RocksDB's default block (an eighth of the write
    buffer, taken once a memtable outgrows its first 2 KiB) 32 partitions written a few KiB
    each passed the budget, and RocksDB flushed a memtable of a few KiB after every write (a
    quarter of a core at 2,000 msg/s over 16 partitions). Mutant caught: the partitions'
    families with the default arena block (a table file per flush)."""
    database = RocksDatabase(tmp_path / "s", FAST, range(32))
    stores = [RocksStore.of_partition(database, p) for p in range(32)]
    before = set(database.path.glob("*.sst"))
    for round_ in range(3):
        for p, store in enumerate(stores):
            _schedule(store, [1000 * round_ + p + 1 + 32 * n for n in range(40)], f"r{round_}")
    flushed = set(database.path.glob("*.sst")) - before
    for store in stores:
        store.close()
    database.close()
    assert not flushed, f"{len(flushed)} memtables flushed for a few KiB each"
