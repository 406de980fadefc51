"""The ingest thread's part: apply what a source read, store offsets with it, restart on failure.

The source here is scripted (the Kafka side is covered by the integration tests); the ledger
and the store are real.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import KafkaError

from chronos.clock import FakeClock
from chronos.delivery.deadletter import DeadLetters, Rejected
from chronos.kafka.publishers.stub import StubPublisher
from chronos.metrics import CountingMetrics
from chronos.model import DecodedRequest, DelayMessage, Op
from chronos.node.ingest import IngestWorker
from chronos.node.inner_reader import DecodedBatch
from chronos.node.watermark import IngestWatermark
from chronos.schedule.frontier import Frontier
from chronos.schedule.ledger import Ledger
from chronos.settings import DeleteSettings, StoreSettings
from chronos.store import codec
from chronos.store.disk_guard import StoreFull
from chronos.store.rocks import RocksStore

T0 = 1_700_000_000_000


class ScriptedSource:
    """Hands out the batches it was given, then empty reads; remembers what it was told."""

    def __init__(self, batches: list[DecodedBatch], targets: dict[int, int]) -> None:
        self._batches = batches
        self._targets = targets
        self.opened_at: dict[int, int] | None = None
        self.stored: list[dict[int, int]] = []
        self.closed = False

    def open(self, start: dict[int, int]) -> dict[int, int]:
        self.opened_at = dict(start)
        return dict(self._targets)

    def read(self, timeout_s: float) -> DecodedBatch:
        return self._batches.pop(0) if self._batches else DecodedBatch()

    def store_offsets(self, offsets: dict[int, int]) -> None:
        self.stored.append(dict(offsets))

    def close(self) -> None:
        self.closed = True


class Rig:
    """An ingest worker on a real ledger; each (re)start takes the next scripted source."""

    def __init__(
        self,
        path: Path,
        sources: list[ScriptedSource],
        watermark: IngestWatermark | None = None,
    ) -> None:
        self.store = RocksStore(path, StoreSettings())
        self.ledger = Ledger(self.store, Frontier(0), FakeClock(T0), DeleteSettings())
        self.sources = sources
        self.opened: list[ScriptedSource] = []
        #: The dead-letter topic: acknowledges at once (set ``outcome`` to refuse).
        self.dead_letter_topic = StubPublisher(auto=True)
        self.fatal: list[str] = []
        metrics = CountingMetrics()
        self.worker = IngestWorker(
            index=0,
            partitions=[0],
            open_source=self._next_source,
            ledger=self.ledger,
            dead_letters=DeadLetters(self.dead_letter_topic, "ns.deadletter", metrics),
            clock=FakeClock(T0),
            poll_timeout_ms=100,
            metrics=metrics,
            on_fatal=self.fatal.append,
            watermark=watermark,
        )

    def _next_source(self) -> ScriptedSource:
        source = self.sources.pop(0)
        self.opened.append(source)
        return source

    def stored_offset(self) -> int | None:
        return self.ledger.inner_offsets([0]).get(0)


def _adds(*ids: str) -> list[DecodedRequest]:
    due = T0 + 60_000
    return [
        (Op.ADD, i, due, codec.encode(DelayMessage(i, "orders", None, b"v", [], due))) for i in ids
    ]


def _batch(offset: int, *ids: str) -> DecodedBatch:
    return DecodedBatch(items=_adds(*ids), offsets={0: offset}, oldest_ms=T0)


def test_a_failed_write_restarts_the_source_where_the_store_stands(tmp_path: Path) -> None:
    first = ScriptedSource([_batch(2, "a", "b"), _batch(4, "c", "d")], {})
    rig = Rig(tmp_path, [first, ScriptedSource([_batch(4, "c", "d")], {})])
    real_apply = rig.ledger.apply_decoded
    calls = {"n": 0}

    def fail_second(
        items: list[DecodedRequest],
        offsets: dict[int, int],
        origins: object = None,
    ) -> object:
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError("injected store failure")
        return real_apply(items, offsets)

    rig.ledger.apply_decoded = fail_second  # type: ignore[assignment,method-assign]
    rig.worker.step()
    with pytest.raises(OSError):
        rig.worker.step()
    assert first.closed  # it had read past the failed batch
    assert rig.stored_offset() == 2
    rig.worker.step()
    assert rig.opened[1].opened_at == {0: 2}  # re-read from the first record not stored
    rig.worker.step()
    assert rig.stored_offset() == 4
    assert rig.store.get_index(["a", "b", "c", "d"]).count(None) == 0


def test_offsets_pass_rejected_records_only_once_they_are_dead_lettered(tmp_path: Path) -> None:
    rejected: Rejected = (None, b"x", [], "bad", "inner[0]@2")
    batch = DecodedBatch(items=_adds("a"), offsets={0: 3}, rejected=[rejected], oldest_ms=T0)
    rig = Rig(tmp_path, [ScriptedSource([batch], {}), ScriptedSource([], {})])
    rig.dead_letter_topic.outcome = lambda _r: KafkaError(KafkaError._MSG_TIMED_OUT)
    with pytest.raises(RuntimeError, match="dead-letter"):
        rig.worker.step()
    assert rig.stored_offset() is None  # nothing stored: the record is read again
    assert rig.store.get_index(["a"]) == [None]
    assert rig.opened[0].closed


def test_catching_up_counts_applied_offsets_and_positions(tmp_path: Path) -> None:
    source = ScriptedSource(
        [_batch(8, "a"), DecodedBatch(), DecodedBatch(positions={0: 10})], {0: 10}
    )
    rig = Rig(tmp_path, [source])
    rig.worker.step()
    rig.worker.step()
    assert not rig.worker.caught_up.is_set()  # 8 of 10: a transaction marker may follow
    rig.worker.step()
    assert rig.worker.caught_up.is_set()


def test_finish_closes_the_source_even_when_the_last_sync_fails(tmp_path: Path) -> None:
    source = ScriptedSource([_batch(1, "a")], {})
    rig = Rig(tmp_path, [source])
    rig.worker.step()

    def broken_sync() -> None:
        raise OSError("disk gone")

    rig.ledger.sync = broken_sync  # type: ignore[method-assign]
    with pytest.raises(OSError):
        rig.worker.finish()
    assert source.closed  # a decoder child must not outlive the node


def test_an_inner_topic_chronos_may_not_read_ends_the_node(tmp_path: Path) -> None:
    """Logged as a consumer error every poll, a refused inner topic kept a node up that could
    never ingest anything."""
    refused = DecodedBatch(errors=["TOPIC_AUTHORIZATION_FAILED"], not_authorized="denied")
    rig = Rig(tmp_path, [ScriptedSource([refused], {})])
    rig.worker.step()
    assert rig.fatal == ["Kafka refused reading the inner topic: denied"]


def test_records_removed_before_the_store_read_them_end_the_node(tmp_path: Path) -> None:
    """Going on would leave the store without what they said (a cancel); the next start
    clears and rebuilds it."""
    gap = DecodedBatch(errors=["_AUTO_OFFSET_RESET"], gap="offset 3 out of range")
    rig = Rig(tmp_path, [ScriptedSource([gap], {})])
    rig.worker.step()
    assert len(rig.fatal) == 1 and "removed before this node read them" in rig.fatal[0]


def _fill_disk(rig: Rig) -> dict[str, bool]:
    """The store's disk below its reserve until the returned flag's ``now`` is set False."""
    real_check = rig.store._guard.check
    full = {"now": True}

    def check() -> None:
        if full["now"]:
            raise StoreFull("the store's disk has 1 MiB free")
        real_check()

    rig.store._guard.check = check  # type: ignore[method-assign]
    return full


def test_a_full_disk_holds_the_batch_and_applies_it_once_space_is_back(tmp_path: Path) -> None:
    """Below the disk reserve the store refuses writes; ingest keeps the batch it read (no
    source restart, no growing backoff) and applies it as soon as a write succeeds."""
    source = ScriptedSource([_batch(2, "a", "b"), _batch(3, "c")], {})
    rig = Rig(tmp_path, [source])
    full = _fill_disk(rig)
    rig.worker.step()
    rig.worker.step()
    assert rig.stored_offset() is None and not source.closed
    full["now"] = False
    rig.worker.step()  # the held batch
    assert rig.stored_offset() == 2
    rig.worker.step()
    assert rig.stored_offset() == 3
    assert rig.opened == [source]
    assert rig.store.get_index(["a", "b", "c"]).count(None) == 0


def test_the_disk_reserve_refuses_writes_before_rocksdb_sees_them(tmp_path: Path) -> None:
    store = RocksStore(tmp_path / "store", StoreSettings(min_free_mb=1 << 40))
    try:
        batch = store.batch()
        batch.set_seek(5)
        with pytest.raises(StoreFull, match="min_free_mb"):
            store.write(batch)
        assert store.read_seek() is None
    finally:
        store.close()


def test_ingest_tells_the_watermark_what_it_read_before_it_writes(tmp_path: Path) -> None:
    """A batch without a cancel moves the gate as soon as it is read, even while the store
    refuses the write (a full disk); one with a cancel only once written (the watermark's
    rules are tested in test_watermark.py)."""
    adds = _batch(8, "a")
    adds.appended = {0: T0 - 20}
    cancels = DecodedBatch(items=[(Op.CANCEL, "a", 0, None)], offsets={0: 9}, appended={0: T0 - 10})
    cancels.hazard = True
    watermark = IngestWatermark({}, margin_ms=100, partitions=[0], clock=FakeClock(T0))
    watermark.probed(T0 - 500, {0: 0})
    rig = Rig(tmp_path, [ScriptedSource([adds, cancels], {})], watermark)
    full = _fill_disk(rig)
    rig.worker.step()
    assert rig.stored_offset() is None
    assert watermark.value == T0 - 20  # read, not written
    full["now"] = False
    rig.worker.step()  # the held batch
    rig.worker.step()
    assert rig.stored_offset() == 9
    assert watermark.value == T0 - 10
