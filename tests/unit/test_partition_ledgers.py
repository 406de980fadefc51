"""One ingest for several partitions (issue 61, step 5 b): an ``IngestWorker`` reading inner
partitions 1 and 2 writes each record to its partition's schedule in one database, with that
partition's offset, and resumes each partition from its own schedule.

The source is scripted (``test_ingest_worker.ScriptedSource``); ledgers and stores are real.
Each test names the mutant it was seen to catch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from chronos.clock import FakeClock
from chronos.delivery.deadletter import DeadLetters, Rejected
from chronos.kafka.publishers.stub import StubPublisher
from chronos.metrics import CountingMetrics
from chronos.model import DecodedRequest, DelayMessage, Op
from chronos.node.ingest import IngestWorker
from chronos.node.inner_reader import DecodedBatch
from chronos.schedule.frontier import Frontier, Wake
from chronos.schedule.ledger import Ledger
from chronos.schedule.partition_ledgers import PartitionLedgers
from chronos.settings import DeleteSettings, StoreSettings
from chronos.store import codec, keys
from chronos.store.database import RocksDatabase
from chronos.store.disk_guard import StoreFull
from chronos.store.rocks import RocksStore
from tests.unit.test_ingest_worker import ScriptedSource

T0 = 1_700_000_000_000
FAST = StoreSettings(wal_sync_interval_ms=60_000)


def _add(message_id: str) -> DecodedRequest:
    due = T0 + 60_000
    message = DelayMessage(message_id, "orders", None, b"v", [], due)
    return (Op.ADD, message_id, due, codec.encode(message))


def _held(store: RocksStore) -> list[str]:
    return sorted(keys.split_message_key(k)[1] for k, _ in store.scan(b"", b"\xff" * 9, 100))


def _batch(records: list[tuple[int, int, str]]) -> DecodedBatch:
    """(partition, offset, id) per record, in the order read."""
    batch = DecodedBatch(oldest_ms=T0)
    for partition, offset, message_id in records:
        batch.items.append(_add(message_id))
        batch.origins.append((partition, offset))
        batch.offsets[partition] = offset + 1
    return batch


@dataclass
class Rig:
    database: RocksDatabase
    stores: dict[int, RocksStore]
    ledgers: dict[int, Ledger]
    sources: list[ScriptedSource]
    opened: list[ScriptedSource]
    metrics: CountingMetrics
    worker: IngestWorker

    def held(self, partition: int) -> list[str]:
        return _held(self.stores[partition])

    def offsets(self) -> dict[int, int]:
        return {p: self.ledgers[p].inner_offsets([p]).get(p, 0) for p in self.ledgers}


MakeRig = Callable[[list[ScriptedSource]], Rig]


@pytest.fixture
def make_rig(tmp_path: Path) -> Iterator[MakeRig]:
    made: list[Rig] = []

    def make(sources: list[ScriptedSource]) -> Rig:
        database = RocksDatabase(tmp_path / "s", FAST)
        wake, clock = Wake(), FakeClock(T0)
        stores = {p: RocksStore.of_partition(database, p) for p in (1, 2)}
        ledgers = {
            p: Ledger(store, Frontier(0, wake), clock, DeleteSettings())
            for p, store in stores.items()
        }
        opened: list[ScriptedSource] = []

        def next_source() -> ScriptedSource:
            opened.append(sources.pop(0))
            return opened[-1]

        metrics = CountingMetrics()
        worker = IngestWorker(
            index=0,
            partitions=[1, 2],
            open_source=next_source,
            ledger=PartitionLedgers(ledgers),
            dead_letters=DeadLetters(StubPublisher(auto=True), "ns.deadletter", metrics),
            clock=clock,
            poll_timeout_ms=100,
            metrics=metrics,
        )
        rig = Rig(database, stores, ledgers, sources, opened, metrics, worker)
        made.append(rig)
        return rig

    yield make
    for rig in made:
        for store in rig.stores.values():
            store.close()
        rig.database.close()


def test_each_record_goes_to_its_partitions_schedule_with_that_partitions_offset(
    make_rig: MakeRig,
) -> None:
    """Mutants caught: every record written to the first partition's schedule; the whole
    batch's offsets stored in every partition's schedule (a partition then resumes past
    records it never stored); every partition's offset read from the first's schedule."""
    batch = _batch([(1, 0, "a"), (2, 0, "b"), (1, 1, "c"), (2, 1, "d"), (2, 2, "e")])
    rig = make_rig([ScriptedSource([batch], {})])
    rig.worker.step()
    assert rig.held(1) == ["a", "c"] and rig.held(2) == ["b", "d", "e"]
    assert rig.offsets() == {1: 2, 2: 3}
    assert PartitionLedgers(rig.ledgers).inner_offsets([1, 2]) == {1: 2, 2: 3}  # resumes there
    assert rig.stores[1].read_inner_offsets([2]) == {}, "partition 2's offset is not 1's"
    assert rig.metrics.totals()["ingested"] == 5  # the outcomes of both writes, added


def test_a_write_that_fails_in_the_second_partition_resumes_each_from_its_own_offset(
    make_rig: MakeRig,
) -> None:
    """A crash between two partitions' writes of one batch: the first partition's records
    and offset stand, the second's are read again from its stored offset. Mutant caught: the
    batch's offsets stored with its first partition's write (partition 2 then resumes past
    the record it never stored)."""
    first = ScriptedSource([_batch([(1, 0, "a"), (2, 0, "b")])], {})
    again = ScriptedSource([_batch([(2, 0, "b")])], {})
    rig = make_rig([first, again])
    real = rig.ledgers[2].apply_decoded
    failing = {"left": 1}

    def fail_once(*args: object, **kwargs: object) -> object:
        if failing["left"]:
            failing["left"] -= 1
            raise OSError("injected: the store failed in partition 2's write")
        return real(*args, **kwargs)  # type: ignore[arg-type]

    rig.ledgers[2].apply_decoded = fail_once  # type: ignore[assignment,method-assign]
    with pytest.raises(OSError):
        rig.worker.step()
    assert rig.held(1) == ["a"] and rig.held(2) == []
    rig.worker.step()
    assert again.opened_at == {1: 1}, "partition 2 resumes from its start: no offset stored"
    assert rig.held(2) == ["b"] and rig.offsets() == {1: 1, 2: 1}


def test_a_partition_with_only_rejected_records_still_moves_its_offset(make_rig: MakeRig) -> None:
    """Mutant caught: offsets written only for partitions with items (a rejected record read
    and dead-lettered again after every restart)."""
    rejected: Rejected = (None, b"x", [], "bad", "inner[2]@0")
    batch = _batch([(1, 0, "a")])
    batch.rejected.append(rejected)
    batch.offsets[2] = 1
    rig = make_rig([ScriptedSource([batch], {})])
    rig.worker.step()
    assert rig.offsets() == {1: 1, 2: 1}


def test_a_record_of_a_partition_not_hosted_writes_nothing(tmp_path: Path) -> None:
    """Mutant caught: partitions written one by one until the unknown one (partition 1's
    records stored, the batch then read again whole)."""
    database = RocksDatabase(tmp_path / "s", FAST)
    store = RocksStore.of_partition(database, 1)
    ledgers = PartitionLedgers({1: Ledger(store, Frontier(0), FakeClock(T0), DeleteSettings())})
    batch = _batch([(1, 0, "a"), (5, 0, "z")])
    with pytest.raises(KeyError, match="partition 5"):
        ledgers.apply_decoded(batch.items, batch.offsets, batch.origins)
    assert _held(store) == [] and ledgers.inner_offsets([1]) == {}
    store.close()
    database.close()


def test_a_batch_held_by_a_full_disk_is_applied_again_without_the_partitions_stored(
    make_rig: MakeRig,
) -> None:
    """The disk fills between two partitions' writes of one batch: ingest holds the batch
    and applies it again once space is back (``StoreFull``); the partition stored already is
    not applied twice. Mutant caught: every partition applied again (partition 1's add
    counted as a duplicate: its cancels, reschedules and refreshes would be applied twice)."""
    rig = make_rig([ScriptedSource([_batch([(1, 0, "a"), (2, 0, "b")])], {})])
    real = rig.ledgers[2].apply_decoded
    failing = {"left": 1}

    def full_once(*args: object, **kwargs: object) -> object:
        if failing["left"]:
            failing["left"] -= 1
            raise StoreFull("injected: below the disk reserve")
        return real(*args, **kwargs)  # type: ignore[arg-type]

    rig.ledgers[2].apply_decoded = full_once  # type: ignore[assignment,method-assign]
    rig.worker.step()  # partition 1 written, partition 2 refused: the batch is held
    assert rig.held(1) == ["a"] and rig.held(2) == []
    rig.worker.step()  # applied again
    assert rig.held(2) == ["b"] and rig.offsets() == {1: 1, 2: 1}
    # The refused try counted nothing (its outcome went with the exception): b alone here.
    totals = rig.metrics.totals()
    assert totals["ingested"] == 1 and "duplicates" not in totals, totals
