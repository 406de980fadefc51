"""A cluster member's one delete thread over every hosted partition (runtime/member_delete.py)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from chronos import wire
from chronos.clock import FakeClock
from chronos.group.hosted import Hosted
from chronos.kafka.publishers.stub import StubPublisher
from chronos.metrics import CountingMetrics
from chronos.model import DelayMessage, Expiry
from chronos.node.delete import SPREAD
from chronos.node.expiry import ExpiryWriter
from chronos.runtime.member_delete import MemberDeleter
from chronos.schedule.frontier import Wake
from chronos.settings import DeleteSettings, StoreSettings
from chronos.store import keys
from chronos.store.database import RocksDatabase

T0 = 1_700_000_000_000


def _delivered_and_pending(hosted: Hosted, prefix: str) -> None:
    """Two messages, the first behind the seek (delivered), the second ahead of it."""
    hosted.ledger.apply(
        [
            DelayMessage(f"{prefix}-done", "t", None, b"v", [], T0 + 1_000),
            DelayMessage(f"{prefix}-later", "t", None, b"v", [], T0 + 9_000),
        ]
    )
    hosted.frontier.advance(T0 + 2_000)
    hosted.ledger.commit_progress(T0 + 2_000, [])


def _ids(hosted: Hosted) -> list[str]:
    rows = hosted.store.scan(b"", keys.slot_bound(2**62), 100)
    return [keys.split_message_key(key)[1] for key, _ in rows]


def test_one_pass_purges_what_each_hosted_partition_delivered(tmp_path: Path) -> None:
    """Mutant caught: a pass over the first partition only (the others grow for ever)."""
    database = RocksDatabase(tmp_path / "db", StoreSettings(wal_sync_interval_ms=60_000))
    clock = FakeClock(T0)
    hosted = {
        p: Hosted.open(database, p, f"progress.p{p}", Wake(), clock, DeleteSettings())
        for p in (1, 2, 5)
    }
    try:
        for partition, schedule in hosted.items():
            _delivered_and_pending(schedule, f"p{partition}")
        deleter = MemberDeleter(
            lambda: {p: h.ledger for p, h in hosted.items()},
            DeleteSettings(retention_s=0, interval_s=60),
        )
        deleter.run_once()
        assert {p: _ids(h) for p, h in hosted.items()} == {p: [f"p{p}-later"] for p in hosted}
    finally:
        for schedule in hosted.values():
            schedule.store.close()
        database.close()


class _Spreads(ExpiryWriter):
    """An expiry writer that records each spread it is asked for."""

    def __init__(self, publisher: StubPublisher) -> None:
        super().__init__(
            publisher=publisher,
            inner_topic="inner",
            partition=lambda _id: 99,  # never the right one: each partition names its own
            delivering=lambda: True,
            rate=10**9,
            metrics=CountingMetrics(),
        )
        self.spreads: list[tuple[int, float]] = []

    def spread(self, count: int, seconds: float) -> None:
        self.spreads.append((count, seconds))
        super().spread(count, seconds)


class _LockWatch(StubPublisher):
    """A publisher that notes whether the member's store lock was held at each record."""

    def __init__(self, lock: threading.Lock) -> None:
        super().__init__(auto=True)
        self.lock = lock
        self.under_lock: list[bool] = []

    def publish(self, *args: Any, **kwargs: Any) -> None:
        self.under_lock.append(self.lock.locked())
        super().publish(*args, **kwargs)


def test_compact_mode_writes_tombstones_of_delivered_partitions_to_each_own_one(
    tmp_path: Path,
) -> None:
    """Mutants caught: a standby's copy writing tombstones too (its deliverer writes them:
    two per id); a tombstone to where the member's writer would put it (murmur2 of the id
    over the wrong count, or one partition for all); the pass spread per partition over the
    whole window (16 partitions' passes would last 16 windows); tombstones sent, and paced,
    while the pass holds the store lock (a drop of a partition, on the host thread, waited
    for most of the window)."""
    database = RocksDatabase(tmp_path / "db", StoreSettings(wal_sync_interval_ms=60_000))
    clock = FakeClock(T0)
    delete = DeleteSettings(retention_s=0, interval_s=60)
    hosted = {
        p: Hosted.open(database, p, f"progress.p{p}", Wake(), clock, delete, restates=True)
        for p in (1, 2, 5)
    }
    lock = threading.Lock()
    publisher = _LockWatch(lock)
    writer = _Spreads(publisher)
    try:
        for partition, schedule in hosted.items():
            _delivered_and_pending(schedule, f"p{partition}")
        deleter = MemberDeleter(
            lambda: {p: h.ledger for p, h in hosted.items()},
            delete,
            lock,
            expiry=writer,
            delivering=lambda: frozenset({1, 5}),
        )
        deleter.run_once()
        assert {p: _ids(h) for p, h in hosted.items()} == {p: [f"p{p}-later"] for p in hosted}
        sent = {(r.partition, wire.decode(r.value, r.headers)) for r in publisher.published}
        assert sent == {(1, Expiry("p1-done", T0 + 1_000)), (5, Expiry("p5-done", T0 + 1_000))}
        assert writer.spreads == [(2, 60 * SPREAD)], "one spread for the whole pass"
        assert publisher.under_lock == [False, False], "sent once the store lock was let go"
    finally:
        for schedule in hosted.values():
            schedule.store.close()
        database.close()
