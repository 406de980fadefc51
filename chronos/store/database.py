"""One RocksDB and the schedules it holds: a node alone's or a replica's (the default set of
column families), or one per inner partition of a cluster node (issue 61,
``docs/design/cluster-v2.md``).

Why one database for many partitions instead of one per partition: one write-ahead log, one
fsync, one block cache, one set of background threads and one memtable budget for the node,
whatever the partitions it hosts; and RocksDB lets a write batch span column families
atomically, which a transaction's cut of several partitions will need (``RocksStore.write``
keeps one schedule's due counts for now: issue 61's step 5). Why a set of column families per
partition instead of a key prefix: a partition is restored, dropped or handed over alone, and
its keys keep the layout a node alone's have, so every reader of a store reads a partition's
unchanged.

Why every partition's families are made when the database opens, and a drop empties them
instead of removing them: RocksDB rewrites its whole OPTIONS file (every family's options,
1.16 MB at 64 partitions of six families) at each family it creates or drops, and at its open
only once. Made one by one, 384 families took 15 CPU-s and dropping 192 of them 11.4 CPU-s
(about 60 ms each); made at the open, 0.12 CPU-s. A member's drop of 32 unhosted partitions
took a core for 10 s.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable
from pathlib import Path

from rocksdict import (
    BlockBasedIndexType,
    BlockBasedOptions,
    Cache,
    Checkpoint,
    ColumnFamily,
    DBCompressionType,
    Options,
    Rdict,
    WriteBatch,
    WriteOptions,
)

from chronos.errors import StoreError
from chronos.names import CF_ARRIVALS, CF_EXPIRY, CF_INDEX, CF_MESSAGES, CF_META, CF_OUTCOMES
from chronos.settings import StoreSettings
from chronos.store import keys
from chronos.store.disk_guard import DiskGuard, StoreFull

#: Bump when the key layout or the value codec changes incompatibly. 2: stored-message codec
#: v2. A version 1 store is upgraded on open (this release reads both codecs); older releases
#: refuse a version 2 store instead of dead-lettering every message they cannot decode.
FORMAT_VERSION = 2
_UPGRADABLE = {1}

#: The concerns of a schedule, each a column family (``chronos/names.py``).
CONCERNS = (CF_MESSAGES, CF_INDEX, CF_EXPIRY, CF_META, CF_ARRIVALS, CF_OUTCOMES)
#: Families read by key: the index (every add looks its id up), meta and outcomes (status
#: lookups). The others are scanned.
_POINT_READ_FAMILIES = frozenset({CF_INDEX, CF_META, CF_OUTCOMES})
_PARTITION_SUFFIX = ".p"
#: Above every key of a schedule: ids are UTF-8 and other keys binary of fixed layout, so
#: no key reaches 64 bytes of 0xff.
EVERY_KEY = b"\xff" * 64
#: Memtable arena block of a partition's families. RocksDB's default is an eighth of the
#: write buffer (4 MiB here), and the shared write buffer budget counts every block a
#: memtable took, used or not: 16 partitions, four families written each, took 256 MiB of a
#: 64 MiB budget with a few KiB in each, and RocksDB flushed a memtable of ~30 KiB every
#: 20 ms (1,122 flushes in 45 s, a quarter of a core; ``scripts/lanes_cost_check.py``).
_PARTITION_ARENA_BYTES = 64 << 10

_COMPRESSION = {
    "lz4": DBCompressionType.lz4,
    "zstd": DBCompressionType.zstd,
    "snappy": DBCompressionType.snappy,
    "none": DBCompressionType.none,
}


def lower_compaction_priority(nice: int) -> list[int]:
    """Renice RocksDB's compaction threads (``rocksdb:low*``) of this process; their ids.

    RocksDB has this (``Env::LowerThreadPoolCPUPriority``) but rocksdict does not expose it; on
    Linux a thread's niceness is set by its id. Elsewhere (no ``/proc``) it does nothing.
    Compactions then run in the time the node's own threads leave, instead of taking the cores
    from under a delivery (see ``StoreSettings.compaction_nice``).
    """
    tasks = Path("/proc/self/task")
    if not tasks.is_dir():
        return []
    reniced: list[int] = []
    for task in tasks.iterdir():
        try:
            if not (task / "comm").read_text().startswith("rocksdb:low"):
                continue
            thread_id = int(task.name)
            if os.getpriority(os.PRIO_PROCESS, thread_id) < nice:
                os.setpriority(os.PRIO_PROCESS, thread_id, nice)
            reniced.append(thread_id)
        except (OSError, ValueError):  # the thread ended meanwhile
            continue
    return reniced


def member_store_dir(data_dir: Path) -> Path:
    """Where a cluster member of the node shape keeps its one database under ``node.data_dir``
    (the partition shape's stores are ``p<N>`` beside it)."""
    return data_dir / "node"


def family_name(concern: str, partition: int | None) -> str:
    """The column family of ``concern`` in the schedule of ``partition`` (None: the default
    schedule, named as every earlier release named it)."""
    return concern if partition is None else f"{concern}{_PARTITION_SUFFIX}{partition}"


def partition_of_family(name: str) -> int | None:
    """The partition whose schedule the column family ``name`` belongs to (None: the
    default schedule's, or no schedule's)."""
    concern, sep, number = name.rpartition(_PARTITION_SUFFIX)
    if not sep or concern not in CONCERNS or not number.isdigit():
        return None
    return int(number)


class Families:
    """One schedule's column families: objects (to read) and handles (to write in a batch)."""

    def __init__(self, db: Rdict, partition: int | None) -> None:
        self.partition = partition
        names = {concern: family_name(concern, partition) for concern in CONCERNS}
        self.tables: dict[str, Rdict] = {c: db.get_column_family(n) for c, n in names.items()}
        self.handles: dict[str, ColumnFamily] = {
            c: db.get_column_family_handle(n) for c, n in names.items()
        }

    def close(self) -> None:
        """Drop every object and handle: each keeps RocksDB alive (and its LOCK held). Every
        one is closed even when one of them refuses."""
        failures: list[Exception] = []
        for table in self.tables.values():
            try:
                table.close()
            except Exception as exc:  # rocksdict raises plain Exceptions
                failures.append(exc)
        self.tables.clear()
        self.handles.clear()
        if failures:
            raise StoreError(f"closing the schedule's column families: {failures[0]}")


class RocksDatabase:
    """The RocksDB of a node: options, the block cache, durability and the disk reserve.

    Parameters:
        path: directory of the database (created when missing, owner-only).
        settings: compression, cache and durability options.
        partitions: the partitions whose schedules' families are made at the open, all at
            once (a cluster member's: every inner partition; see the module's docstring).
    """

    def __init__(self, path: Path, settings: StoreSettings, partitions: Iterable[int] = ()) -> None:
        # Owner-only: the store holds every pending payload, and its requests folder takes
        # checkpoint requests (``checkpoint.py``) from whoever may write into it.
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        if path.stat().st_mode & 0o077:
            path.chmod(0o700)
        self.path = path
        self.settings = settings
        # One block cache for every column family (index and filter blocks included), and one
        # budget for every memtable: memory stays bounded whatever the number of pending messages.
        # Options per family used to bring their own cache each (4 x block_cache_mb), and each
        # family's memtables grew on their own (10 M pending: 515 MiB RSS).
        self._cache = Cache(settings.block_cache_mb << 20)
        options = self._options()
        options.set_db_write_buffer_size(2 * settings.write_buffer_mb << 20)
        names = {family_name(c, p) for c in CONCERNS for p in (None, *partitions)}
        if (path / "CURRENT").exists():
            try:
                names |= {n for n in Rdict.list_cf(str(path), Options(raw_mode=True))}
            except Exception as exc:  # rocksdict raises plain Exceptions
                raise StoreError(f"cannot open store at {path}: {exc}") from exc
        names.discard("default")
        families = {name: self._family_options(name) for name in sorted(names)}
        try:
            self.db = Rdict(str(path), options, column_families=families)
        except Exception as exc:  # rocksdict raises plain Exceptions for open failures
            raise StoreError(f"cannot open store at {path}: {exc}") from exc
        #: Every column family of the database, kept here rather than read from the MANIFEST.
        self._names = set(names)
        #: The schedules open now, by partition (None: the default one), how many times each.
        self._open: dict[int | None, int] = {}
        #: Serialises writes with the due counts' scan chunks (see ``due_counts.py``).
        self.write_lock = threading.Lock()
        # Writes are visible at once without waiting for the disk; ``sync`` makes them durable,
        # every ``wal_sync_interval_ms`` (see ``sync_if_due``).
        self.write_options = WriteOptions()
        self.write_options.sync = False
        self._sync_interval_s = settings.wal_sync_interval_ms / 1000.0
        self._synced_at = time.monotonic()
        self._sync_lock = threading.Lock()
        self.guard = DiskGuard(path, settings.min_free_mb << 20)
        self._families_lock = threading.Lock()
        try:
            self._check_format()
        except StoreError:
            self.db.close()
            raise
        if settings.compaction_nice:
            lower_compaction_priority(settings.compaction_nice)

    def _check_format(self) -> None:
        """The database's format version, on the default schedule's meta family: written
        when new, upgraded when an earlier one this release reads, else refused (every
        schedule of the database shares the key layout and the codec)."""
        meta = self.db.get_column_family(family_name(CF_META, None))
        try:
            raw = meta.get(keys.META_FORMAT_VERSION)
            if raw is None or int(raw) in _UPGRADABLE:
                meta.put(keys.META_FORMAT_VERSION, str(FORMAT_VERSION).encode(), self.write_options)
            elif int(raw) != FORMAT_VERSION:
                raise StoreError(
                    f"store format version {int(raw)} is not supported (expected {FORMAT_VERSION})"
                )
        finally:
            meta.close()

    def _options(self, point_reads: bool = False) -> Options:
        """Options of one column family; ``point_reads`` for those read by key (a filter pays).

        Index and filter blocks are partitioned (two-level) and live in the bounded cache. A
        whole-file filter did not stay there: the cache is split in shards of 1 MiB (64 MiB /
        64) and a full filter larger than a shard is dropped as soon as it is used, so every
        lookup of a new id read its file's filter again. Ingest (ledger alone) fell from
        162,635 records/s to 86,885-102,713 at 1.5-2.4 M ids (index lookup 0.6 -> 4.1-5.1 us
        per id) and to 58,541-61,753 at 2.7-3 M (9.5-9.8 us); with 4 KiB partitions the lookup
        stays 1.0-1.1 us per id up to 100 M (docs/benchmarks/store-ingest-*.json).
        The messages and expiry families are only scanned, so they build no filter at all.
        """
        settings = self.settings
        options = Options(raw_mode=True)
        options.create_if_missing(True)
        options.create_missing_column_families(True)
        options.set_compression_type(_COMPRESSION[settings.compression]())
        options.set_write_buffer_size(settings.write_buffer_mb << 20)
        options.set_max_background_jobs(settings.max_background_jobs)
        # RocksDB's defaults are 4, 20 and 36; see StoreSettings.l0_compaction_trigger.
        trigger = settings.l0_compaction_trigger
        slowdown = max(20, 4 * trigger)
        options.set_level_zero_file_num_compaction_trigger(trigger)
        options.set_level_zero_slowdown_writes_trigger(slowdown)
        options.set_level_zero_stop_writes_trigger(slowdown + 16)
        table = BlockBasedOptions()
        table.set_block_cache(self._cache)
        table.set_index_type(BlockBasedIndexType.two_level_index_search())
        if point_reads:
            table.set_bloom_filter(10, False)
            table.set_partition_filters(True)
        # Partitions come and go through the cache; the top level of each file stays pinned,
        # and L0's (every read checks each L0 file) stay whole.
        table.set_cache_index_and_filter_blocks(True)
        table.set_pin_top_level_index_and_filter(True)
        table.set_pin_l0_filter_and_index_blocks_in_cache(True)
        options.set_block_based_table_factory(table)
        return options

    def _family_options(self, name: str) -> Options:
        if partition_of_family(name) is None:
            return self._options(point_reads=name in _POINT_READ_FAMILIES)
        concern = name.rpartition(_PARTITION_SUFFIX)[0]
        options = self._options(point_reads=concern in _POINT_READ_FAMILIES)
        options.set_arena_block_size(_PARTITION_ARENA_BYTES)
        return options

    def families(self, partition: int | None) -> Families:
        """The column families of ``partition``'s schedule (None: the default one), created
        when missing (each one that is: a creation cut short leaves some)."""
        with self._families_lock:
            for concern in CONCERNS:
                name = family_name(concern, partition)
                if name not in self._names:
                    self.db.create_column_family(name, self._family_options(name)).close()
                    self._names.add(name)
            families = Families(self.db, partition)
            self._open[partition] = self._open.get(partition, 0) + 1
            return families

    def closed(self, families: Families) -> None:
        """A schedule's families were closed (``Families.close``)."""
        with self._families_lock:
            left = self._open.get(families.partition, 0) - 1
            if left > 0:
                self._open[families.partition] = left
            else:
                self._open.pop(families.partition, None)

    def partitions(self) -> list[int]:
        """The partitions with a schedule in this database, in order: those whose families
        hold a key (a partition's families exist, empty, before it is hosted and after it
        is dropped)."""
        with self._families_lock:
            names = sorted(self._names)
        found = {partition_of_family(name) for name in names if self._holds_keys(name)}
        return sorted(p for p in found if p is not None)

    def _holds_keys(self, name: str) -> bool:
        table = self.db.get_column_family(name)
        try:
            return next(iter(table.keys()), None) is not None
        finally:
            table.close()

    def drop(self, partition: int) -> None:
        """Remove ``partition``'s schedule, every concern of it, in one atomic write, and
        compact its families so that the disk space is given back; the emptied families
        stay (the module's docstring says why). Refused while a store of it is open: its
        readers would see their schedule vanish under them."""
        with self._families_lock:
            if partition in self._open:
                raise StoreError(f"partition {partition}'s store is open: close it first")
            present = [
                name
                for name in (family_name(concern, partition) for concern in CONCERNS)
                if name in self._names
            ]
            batch = WriteBatch(raw_mode=True)
            for name in present:
                batch.delete_range(b"", EVERY_KEY, self.db.get_column_family_handle(name))
            self.write(batch)
            self.sync()
            for name in present:
                table = self.db.get_column_family(name)
                try:
                    table.compact_range(None, None)
                finally:
                    table.close()

    def disk_problem(self) -> str | None:
        """Why a write would be refused now (below the disk reserve), or None."""
        try:
            self.guard.check()
        except StoreFull as exc:
            return str(exc)
        return None

    def write(self, batch: WriteBatch) -> None:
        """Apply ``batch`` atomically (visible at once, durable after ``sync``); the caller
        holds ``write_lock``. Raises ``StoreFull`` when RocksDB met a full disk."""
        try:
            self.db.write(batch, self.write_options)
        except Exception as exc:  # rocksdict raises plain Exceptions
            if "No space left" in str(exc) or "NoSpace" in str(exc):
                raise StoreFull(f"RocksDB met a full disk: {exc}") from exc
            raise

    def sync(self) -> None:
        """Make every write so far durable: fsync the WAL."""
        with self._sync_lock:
            self.db.flush_wal(True)
            self._synced_at = time.monotonic()

    def sync_if_due(self) -> bool:
        """``sync`` when the last one is older than ``wal_sync_interval_ms``; True if it ran.

        Why not after every batch: the inner offsets live in the same WAL as the data they
        cover, so an unsynced tail lost in a power cut is re-read from Kafka, never skipped;
        and a killed process loses nothing, since written data is in the OS already. An fsync
        per ingest batch made ingest wait on the disk most of its time (37 % at 10,000 msg/s).
        """
        if time.monotonic() - self._synced_at < self._sync_interval_s:
            return False
        self.sync()
        return True

    def create_checkpoint(self, dest: Path) -> None:
        """A consistent copy of the whole database at ``dest`` (hard links where possible).

        ``dest`` must not exist yet; its parent must.
        """
        if dest.exists():
            raise StoreError(f"checkpoint destination {dest} already exists")
        if not dest.parent.is_dir():
            raise StoreError(f"checkpoint destination's folder {dest.parent} does not exist")
        try:
            Checkpoint(self.db).create_checkpoint(str(dest))
        except Exception as exc:  # rocksdict raises plain Exceptions
            raise StoreError(f"cannot create checkpoint at {dest}: {exc}") from exc

    def close(self) -> None:
        """Flush memtables and close the database; the directory can be reopened at once.
        Refused while a schedule's store is open: its families would keep RocksDB alive and
        its LOCK held."""
        with self._families_lock:
            if self._open:
                open_ = sorted(self._open, key=lambda p: -1 if p is None else p)
                raise StoreError(f"stores still open on the database: {open_}")
        self.db.close()
        del self.db
