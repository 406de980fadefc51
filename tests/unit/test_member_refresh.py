"""A cluster member's refresh passes (``runtime/member_refresh.py``): each partition it
delivers re-appended once per interval, its floor moved only by a pass Kafka acknowledged
whole. On Apache Kafka: ``tests/integration/test_cluster_node_shape.py`` (a copy that began
past removed records stands once a floor reaches it)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from confluent_kafka import KafkaError

from chronos import wire
from chronos.clock import FakeClock
from chronos.group.lane import Lane
from chronos.kafka.publishers.stub import StubPublisher, StubRecord
from chronos.metrics import CountingMetrics
from chronos.model import DelayMessage
from chronos.runtime.member_refresh import MemberRefresh
from chronos.schedule.floor import Floor, RebuildFloor
from chronos.schedule.frontier import Frontier
from chronos.schedule.ledger import Ledger
from chronos.settings import DeleteSettings, RebuildSettings, StoreSettings
from chronos.store.database import RocksDatabase
from chronos.store.rocks import RocksStore

T0 = 1_700_000_000_000
INNER = "ns.inner"
DAY_MS = 86_400_000


@dataclass
class _State:
    floor: RebuildFloor = field(default_factory=RebuildFloor)


@dataclass
class _Lane:
    """What the worker reads of a lane: its store, ledger, floor and whether it was handed
    over."""

    store: RocksStore
    ledger: Ledger
    state: _State = field(default_factory=_State)
    released: threading.Event = field(default_factory=threading.Event)


def _lane(database: RocksDatabase, partition: int, clock: FakeClock, ids: list[str]) -> _Lane:
    store = RocksStore.of_partition(database, partition)
    ledger = Ledger(store, Frontier(0), clock, DeleteSettings(tombstone_retention_s=3600))
    messages = [DelayMessage(i, "t", None, b"v", [], T0 + 60_000) for i in ids]
    ledger.apply(messages, {partition: 10 * (partition + 1)})
    return _Lane(store, ledger)


def _worker(lanes: dict[int, _Lane], publisher: StubPublisher, clock: FakeClock) -> MemberRefresh:
    return MemberRefresh(
        lanes=lambda: {p: cast(Lane, lane) for p, lane in lanes.items()},
        open_publisher=lambda: publisher,
        inner_topic=INNER,
        settings=RebuildSettings(refresh_rate=1_000_000, refresh_interval_s=DAY_MS / 1000),
        clock=clock,
        metrics=CountingMetrics(),
    )


def _close(database: RocksDatabase, lanes: dict[int, _Lane]) -> None:
    for lane in lanes.values():
        lane.store.close()
    database.close()


def test_each_delivered_partition_is_refreshed_once_per_interval(tmp_path: Path) -> None:
    """Mutants caught: one floor for every partition (a pass of one moving another's), a
    floor taken after the pass (records ingested meanwhile would sit below it unrefreshed),
    a handed-over lane refreshed (its successor does)."""
    clock = FakeClock(T0)
    database = RocksDatabase(tmp_path / "db", StoreSettings(wal_sync_interval_ms=60_000))
    lanes = {0: _lane(database, 0, clock, ["a", "b"]), 1: _lane(database, 1, clock, ["c"])}
    handed = _lane(database, 2, clock, ["d"])
    handed.released.set()
    lanes[2] = handed
    ingested_meanwhile: list[int] = []

    def meanwhile(_record: StubRecord) -> None:
        # While the pass runs, time passes and ingest goes on: the floor is what held
        # when the pass began.
        clock.advance(1)
        if not ingested_meanwhile:
            ingested_meanwhile.append(1)
            late = DelayMessage("late", "t", None, b"v", [], T0 + 90_000)
            lanes[0].ledger.apply([late], {0: 15})

    publisher = StubPublisher(auto=True, outcome=lambda r: meanwhile(r))
    worker = _worker(lanes, publisher, clock)
    assert [p for p, _ in worker.due()] == [0, 1], "a lane without a floor is due at once"
    worker.step()
    refreshed = {wire.decode(r.value, r.headers).id for r in publisher.published}
    assert {"a", "b", "c"} <= refreshed
    assert lanes[0].state.floor.current == Floor({0: 10}, T0)
    floor_1 = lanes[1].state.floor.current
    assert floor_1 is not None and floor_1.offsets == {1: 20} and floor_1.at_ms > T0
    assert handed.state.floor.current is None
    clock.ms = T0 + DAY_MS - 1
    assert worker.due() == []
    clock.advance(1)
    assert [p for p, _ in worker.due()] == [0]
    _close(database, lanes)


def test_a_pass_whose_lane_is_handed_over_meanwhile_ends_and_moves_no_floor(
    tmp_path: Path,
) -> None:
    """Its successor refreshes the partition, and this copy may be dropped soon after.
    Mutant caught: the pass run to its end on a released lane (its floor moved)."""
    clock = FakeClock(T0)
    database = RocksDatabase(tmp_path / "db", StoreSettings(wal_sync_interval_ms=60_000))
    lanes = {0: _lane(database, 0, clock, ["a", "b"])}

    def hand_over(_record: StubRecord) -> None:
        lanes[0].released.set()

    publisher = StubPublisher(auto=True, outcome=lambda r: hand_over(r))
    worker = _worker(lanes, publisher, clock)
    worker.step()
    assert publisher.published, "the pass began"
    assert lanes[0].state.floor.current is None
    assert worker.passes == 0
    _close(database, lanes)


def test_a_refused_record_moves_no_floor_and_the_pass_is_tried_again_later(
    tmp_path: Path,
) -> None:
    clock = FakeClock(T0)
    database = RocksDatabase(tmp_path / "db", StoreSettings(wal_sync_interval_ms=60_000))
    lanes = {0: _lane(database, 0, clock, ["a"])}
    refused = KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)
    publisher = StubPublisher(auto=True, outcome=lambda _r: refused)
    worker = _worker(lanes, publisher, clock)
    worker.step()
    assert lanes[0].state.floor.current is None
    assert worker.due() == [], "not again at once"
    clock.advance(60_000)
    assert [p for p, _ in worker.due()] == [0]
    _close(database, lanes)
