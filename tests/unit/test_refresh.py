"""Refresh passes on a real store: what a rebuilt store gets back from the records alone."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import KafkaError

from chronos import wire
from chronos.clock import FakeClock
from chronos.kafka.publishers.stub import StubPublisher, StubRecord
from chronos.metrics import CountingMetrics
from chronos.model import CancelRequest, DelayMessage, InnerRequest, Refresh
from chronos.node import refresh
from chronos.node.refresh import RefreshWorker
from chronos.repeat import Repeat, RepeatKind
from chronos.schedule.floor import Floor, RebuildFloor
from chronos.schedule.frontier import Frontier
from chronos.schedule.ledger import Ledger
from chronos.settings import DeleteSettings, RebuildSettings, StoreSettings
from chronos.store.rocks import RocksStore

T0 = 1_700_000_000_000
INNER = "ns.inner"
ALL = b"\xff" * 16


def _ledger(path: Path, clock: FakeClock) -> tuple[RocksStore, Ledger]:
    store = RocksStore(path, StoreSettings(wal_sync_interval_ms=60_000))
    frontier = Frontier(store.read_seek() or 0)
    return store, Ledger(store, frontier, clock, DeleteSettings(tombstone_retention_s=3600))


def _worker(
    store: RocksStore,
    ledger: Ledger,
    publisher: StubPublisher,
    clock: FakeClock,
    ready: Callable[[], bool] = lambda: True,
) -> RefreshWorker:
    return RefreshWorker(
        store=store,
        inner_offsets=lambda: ledger.inner_offsets([0]),
        open_publisher=lambda: publisher,
        inner_topic=INNER,
        floor=RebuildFloor(),
        settings=RebuildSettings(refresh_rate=1_000_000),
        clock=clock,
        metrics=CountingMetrics(),
        ready=ready,
    )


def _current(store: RocksStore) -> list[tuple[bytes, bytes]]:
    """Stored messages the index points to (an earlier occurrence stays until purged)."""
    rows = store.scan(b"", ALL, 100)
    ids = [key[8:].decode() for key, _ in rows]
    return [
        row for row, state in zip(rows, store.get_index(ids), strict=True) if state == b"P" + row[0]
    ]


def _decoded(records: list[StubRecord]) -> list[InnerRequest]:
    return [wire.decode(r.value, r.headers) for r in records]


def test_a_store_rebuilt_from_one_pass_holds_what_the_original_held(tmp_path: Path) -> None:
    """Pending, delivered (still in the idempotency window), a repeat part-way through and a
    cancel tombstone: applying the pass's records to an empty store gives the same messages
    at the same slots, the same seek-relative state and the tombstone. Mutants caught:
    refreshing only what is ahead of the seek (a re-sent delivered id scheduled again after a
    rebuild), or leaving tombstones out (a later add of a cancelled id delivered)."""
    clock = FakeClock(T0)
    store, ledger = _ledger(tmp_path / "a", clock)
    repeat = Repeat(RepeatKind.FIXED, interval_ms=1000, times=4)
    ledger.apply(
        [
            DelayMessage("done", "t", None, b"1", [], T0 - 50),
            DelayMessage("ahead", "t", b"k", b"2", [("h", b"x")], T0 + 9000),
            DelayMessage("rep", "t", None, b"3", [], T0 - 2500, repeat),
            CancelRequest("gone"),
        ],
        {0: 4},
    )
    rep = DelayMessage("rep", "t", None, b"3", [], T0 - 2500, repeat, occurrence=3)
    ledger.commit_progress(T0 - 40, [])
    (old_key,) = [k for k, _ in store.scan(b"", ALL, 10) if k.endswith(b"rep")]
    ledger.commit_progress(T0 - 40, [(old_key, rep)])
    publisher = StubPublisher(auto=True)
    floor = _worker(store, ledger, publisher, clock).run_pass()
    assert floor == Floor({0: 4}, T0)
    assert {r.topic for r in publisher.published} == {INNER}

    rebuilt, rebuilt_ledger = _ledger(tmp_path / "b", clock)
    rebuilt_ledger.apply(_decoded(publisher.published))
    assert _current(rebuilt) == _current(store)
    assert len(_current(store)) == 3, "the superseded occurrence of the repeat is not current"
    assert rebuilt.get_index(["done", "ahead", "rep", "gone"]) == store.get_index(
        ["done", "ahead", "rep", "gone"]
    )
    store.close()
    rebuilt.close()


def test_a_tombstone_about_to_expire_is_not_refreshed(tmp_path: Path) -> None:
    """Its cancel record would outlive it and cancel an add of the id accepted after it
    expired (live stores forget it then)."""
    clock = FakeClock(T0)
    store, ledger = _ledger(tmp_path / "a", clock)
    ledger.apply([CancelRequest("old")])
    clock.advance(3600_000 - 30_000)
    ledger.apply([CancelRequest("young")])
    publisher = StubPublisher(auto=True)
    _worker(store, ledger, publisher, clock).run_pass()
    assert _decoded(publisher.published) == [CancelRequest("young")]
    store.close()


def test_a_pass_with_a_refused_record_proves_no_floor(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    store, ledger = _ledger(tmp_path / "a", clock)
    ledger.apply([DelayMessage("a", "t", None, b"1", [], T0 + 10)], {0: 1})
    refused = KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)
    publisher = StubPublisher(auto=True, outcome=lambda _r: refused)
    with pytest.raises(RuntimeError, match="refused a refresh record"):
        _worker(store, ledger, publisher, clock).run_pass()
    store.close()


def test_no_pass_runs_before_the_store_is_the_delivering_nodes_own(tmp_path: Path) -> None:
    """A node alone rebuilding its store: a pass then would record slots its published cut has
    not settled yet (a later rebuild would take a relocated message for delivered)."""
    clock = FakeClock(T0)
    store, ledger = _ledger(tmp_path / "a", clock)
    ledger.apply([DelayMessage("a", "t", None, b"1", [], T0 + 10)], {0: 1})
    publisher = StubPublisher(auto=True)
    ready = {"now": False}
    worker = _worker(store, ledger, publisher, clock, ready=lambda: ready["now"])
    worker.stop()  # its waits return at once; a pass still sends its first chunk
    worker.step()
    assert publisher.published == []
    ready["now"] = True
    worker.step()
    assert len(publisher.published) == 1
    store.close()


def test_a_pass_stopped_between_chunks_proves_no_floor(tmp_path: Path) -> None:
    """Each scan sends its first chunk, then sees the stop: no floor (the store was not read
    whole), and not a record past the chunk it was in."""
    clock = FakeClock(T0)
    store, ledger = _ledger(tmp_path / "a", clock)
    count = refresh._CHUNK + 5
    ledger.apply([DelayMessage(f"m{n:05}", "t", None, b"1", [], T0 + n) for n in range(count)])
    ledger.apply([CancelRequest(f"c{n:05}") for n in range(count)], {0: 2 * count})
    publisher = StubPublisher(auto=True)
    worker = _worker(store, ledger, publisher, clock)
    whole = worker.run_pass()
    assert whole is not None and len(publisher.published) == 2 * count
    publisher.published.clear()
    worker.stop()
    assert worker.run_pass() is None
    sent = _decoded(publisher.published)
    assert len(sent) == 2 * refresh._CHUNK
    assert {type(r) for r in sent[: refresh._CHUNK]} == {Refresh}
    assert {type(r) for r in sent[refresh._CHUNK :]} == {CancelRequest}
    store.close()
