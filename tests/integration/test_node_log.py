"""A cluster node's progress log on Apache Kafka (``group/node_log.py``): an owner delivers two
partitions through one transaction loop whose cuts go to its node log unless they carry
repeat states; a standby of both, reading each partition's own log and the node log through
one consumer (``group/standbys.py``), ends with the owner's seek and the same schedule, the
repeats' next occurrences included (issue 61, step a').

Kafka only: Tansu's ``read_committed`` readers also see aborted records.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from chronos.clock import SystemClock
from chronos.delivery.deadletter import DeadLetterPolicy
from chronos.group.follower import Follower
from chronos.group.lane import Lane, MasterState
from chronos.group.node_log import NodeLog
from chronos.group.placement import ReplicaPlacement, ReplicaStore
from chronos.group.spec import GroupSpec
from chronos.group.standbys import ProgressLogs, StandbysWorker
from chronos.group.transactions import TransactionLoop
from chronos.kafka.clients import KafkaClients
from chronos.metrics import CountingMetrics
from chronos.model import DelayMessage, Op
from chronos.repeat import Repeat, RepeatKind
from chronos.schedule.frontier import Frontier, Wake
from chronos.schedule.ledger import Ledger
from chronos.schedule.progress_record import Cut, encode_cut, encode_node_cut
from chronos.settings import ChronosSettings, KafkaSettings, StoreSettings
from chronos.store import codec, keys
from chronos.store.database import RocksDatabase
from chronos.store.rocks import RocksStore
from chronos.types import EpochMs
from tests.waiting import wait_until

pytestmark = pytest.mark.kafka_only(reason="Tansu's read_committed readers see aborted records")

WAIT_S = 60.0
PARTITIONS = (1, 2)
NODE_LOG_PARTITIONS = 2


@dataclass
class Schedule:
    """One partition's schedule in a node's database."""

    store: RocksStore
    frontier: Frontier
    ledger: Ledger
    replica: ReplicaStore


def _schedule(database: RocksDatabase, partition: int, wake: Wake) -> Schedule:
    store = RocksStore.of_partition(database, partition)
    frontier = Frontier(0, wake)
    placement = ReplicaPlacement()
    ledger = Ledger(store, frontier, SystemClock(), ChronosSettings().delete, placement)
    return Schedule(store, frontier, ledger, ReplicaStore(store, frontier, ledger, placement))


def _pending(schedule: Schedule) -> list[bytes]:
    """The key (slot and id) of every message stored past the seek, in order (what lies
    behind it was delivered; no delete worker runs here to drop it)."""
    start = keys.slot_bound(schedule.ledger.seek_ms + 1)
    return [key for key, _ in schedule.store.scan(start, keys.slot_bound(2**62), 10_000)]


def _requests(partition: int, target: str, now: EpochMs) -> list[tuple[Op, str, int, bytes]]:
    """What each partition's ingest stores: one-shots due now and soon, a repeat every
    300 ms (three times: two next occurrences, then its end, as repeat states), and one
    message an hour ahead that stays pending."""
    messages = [
        DelayMessage(f"p{partition}-{n}", target, None, b"v", [], now + 100 * n) for n in range(8)
    ]
    every = Repeat(RepeatKind.FIXED, interval_ms=300, times=3)
    messages.append(DelayMessage(f"tick-{partition}", target, None, b"t", [], now + 50, every))
    messages.append(DelayMessage(f"later-{partition}", target, None, b"l", [], now + 3_600_000))
    return [(Op.ADD, m.id, m.first_due_ms, codec.encode(m)) for m in messages]


def _standbys(bootstrap: str, namespace: str, node_log: NodeLog) -> StandbysWorker:
    """A node's standbys' worker reading the node log too (nothing followed yet)."""
    clients = KafkaClients(KafkaSettings(bootstrap_servers=bootstrap), "standby")
    logs = ProgressLogs(
        f"{namespace}.reader.standby",
        clients.consumer,
        clients.errors("s"),
        node_log=(node_log.topic, NODE_LOG_PARTITIONS),
    )
    return StandbysWorker(logs)


@pytest.fixture
def topics(admin: AdminClient, namespace: str) -> tuple[dict[int, str], NodeLog, str]:
    progress = {p: f"{namespace}.progress.c.p{p}" for p in PARTITIONS}
    node_topic = f"{namespace}.progress.c.nodes"
    target = f"{namespace}-target"
    compact = {"cleanup.policy": "compact"}
    made = [NewTopic(t, 1, 1, config=compact) for t in progress.values()]
    made += [NewTopic(node_topic, NODE_LOG_PARTITIONS, 1, config=compact), NewTopic(target, 2, 1)]
    made.append(NewTopic(f"{namespace}.deadletter.c", 1, 1))
    for future in admin.create_topics(made).values():
        future.result(timeout=30)
    return progress, NodeLog.of(node_topic, "owner", NODE_LOG_PARTITIONS), target


@pytest.fixture
def databases(tmp_path: Path) -> Iterator[tuple[RocksDatabase, RocksDatabase]]:
    fast = StoreSettings(wal_sync_interval_ms=60_000)
    owner, standby = RocksDatabase(tmp_path / "o", fast), RocksDatabase(tmp_path / "s", fast)
    yield owner, standby
    owner.close()
    standby.close()


def test_a_standby_ends_with_its_owners_schedule_from_the_partitions_logs_and_the_node_log(
    kafka_bootstrap: str,
    namespace: str,
    topics: tuple[dict[int, str], NodeLog, str],
    databases: tuple[RocksDatabase, RocksDatabase],
) -> None:
    """Mutants caught (each made the standby's schedule differ from its owner's, or never
    reach its seek): node-log cuts not read (the seek stays at the last own-log cut); a
    node-log cut routed to the partition the consumer read first."""
    progress, node_log, target = topics
    settings = ChronosSettings.model_validate(
        {
            "kafka": {"bootstrap_servers": kafka_bootstrap},
            "topics": {"namespace": namespace},
            "group": {"name": "c"},
            "node": {"node_id": "owner"},
        }
    )
    spec = GroupSpec.of(settings)
    assert spec is not None
    clock, metrics = SystemClock(), CountingMetrics()
    owner_db, standby_db = databases
    owner_wake, standby_wake = Wake(), Wake()
    owned = {p: _schedule(owner_db, p, owner_wake) for p in PARTITIONS}
    standing = {p: _schedule(standby_db, p, standby_wake) for p in PARTITIONS}
    for p in PARTITIONS:
        owned[p].replica.lead(clock.now_ms() - 1000, [p])
        standing[p].replica.follow()

    standbys = _standbys(kafka_bootstrap, namespace, node_log)
    for p in PARTITIONS:
        standby = standing[p]
        follower = Follower(
            standby.replica.apply_cut,
            lambda standby=standby, p=p: standby.ledger.inner_offsets([p]),  # type: ignore[misc]
        )
        standbys.add(p, progress[p], follower)
    standbys.start()

    publisher = KafkaClients(settings.kafka, "owner").transactional(
        f"{namespace}.delivery.owner", 30_000
    )
    publisher.init(30)
    policy = DeadLetterPolicy.of(settings.delivery, publisher)
    lanes = [
        Lane(
            progress_topic=progress[p],
            store=owned[p].store,
            ledger=owned[p].ledger,
            replica=owned[p].replica,
            frontier=owned[p].frontier,
            state=MasterState(2, print, print),
            policy=policy,
            clock=clock,
            partition=p,
        )
        for p in PARTITIONS
    ]
    loop = TransactionLoop(
        spec=spec,
        publisher=publisher,
        lanes=lanes,
        retry=settings.delivery,
        clock=clock,
        metrics=metrics,
        idle_cuts=False,
        node_log=node_log,
    )
    loop.start()
    now = clock.now_ms()
    try:
        for p in PARTITIONS:
            requests = _requests(p, target, now)
            origins = [(p, n) for n in range(len(requests))]
            for schedule in (owned[p], standing[p]):  # both nodes' ingest
                schedule.ledger.apply_decoded(requests, {p: len(requests)}, origins)
        wait_until(
            lambda: all(len(_pending(owned[p])) == 1 for p in PARTITIONS),
            WAIT_S,
            "the owner delivered all but the message an hour ahead",
        )
        wait_until(
            lambda: all(standing[p].replica.seek_ms == owned[p].ledger.seek_ms for p in PARTITIONS),
            WAIT_S,
            "the standby reached its owner's seek in both partitions",
        )
        for p in PARTITIONS:
            assert _pending(standing[p]) == _pending(owned[p]), f"partition {p}"
            assert [keys.slot_of(k) for k in _pending(owned[p])] == [now + 3_600_000]
    finally:
        loop.stop()
        loop.join(30)
        loop.close()
        standbys.stop()
        standbys.join(30)
        for schedule in (*owned.values(), *standing.values()):
            schedule.store.close()
    # Both logs were written: each lane's own log (its term's first cut, the repeat
    # states' cuts) and the node log (every other cut).
    assert all(lane.logged is not None and 0 < lane.logged < lane.cuts - 1 for lane in lanes)


def test_a_partition_followed_after_its_node_log_cut_was_read_gets_it_at_once(
    kafka_bootstrap: str,
    namespace: str,
    topics: tuple[dict[int, str], NodeLog, str],
    databases: tuple[RocksDatabase, RocksDatabase],
) -> None:
    """The node log is read once, from its beginning, by a node's one consumer: a partition
    that starts being followed later (a new standby) must not wait for its owner's next cut
    to learn its last one. Partition 2 is followed from the start; its node-log cut lies
    after partition 1's in the same node-log partition, so once it is applied partition 1's
    was read. Mutant caught: no newest cut kept per partition (partition 1 stays at its
    own-log cut)."""
    progress, node_log, _target = topics
    clients = KafkaClients(KafkaSettings(bootstrap_servers=kafka_bootstrap), "owner")
    owner = clients.transactional(f"{namespace}.delivery.owner", 30_000, name="owner")
    owner.init(30)
    t0 = SystemClock().now_ms()
    records = []
    for p in PARTITIONS:
        records.append((progress[p], *encode_cut(Cut(1, t0, {p: 0}, "owner", t0, seq=0)), -1))
    for p in PARTITIONS:
        node_cut = Cut(1, t0 + 10 * p, {p: 0}, "owner", t0, seq=1, logged=0)
        records.append((node_log.topic, *encode_node_cut(p, node_cut), node_log.partition))
    owner.begin()
    for topic, key, value, partition in records:
        owner.publish(topic, key, value, [], lambda _e, _m: None, partition)
    assert owner.flush(30) == 0
    owner.commit()
    owner.close()

    _owner_db, standby_db = databases
    wake = Wake()
    standing = {p: _schedule(standby_db, p, wake) for p in PARTITIONS}
    applied: dict[int, list[EpochMs]] = {p: [] for p in PARTITIONS}
    followers = {}
    for p, standby in standing.items():
        standby.replica.follow()

        def apply(seek: EpochMs, states: object, covered: dict[int, int], p: int = p) -> None:
            applied[p].append(seek)

        followers[p] = Follower(apply, lambda: {1: 0, 2: 0})  # type: ignore[arg-type]
    worker = _standbys(kafka_bootstrap, namespace, node_log)
    worker.add(2, progress[2], followers[2])
    worker.start()
    try:
        wait_until(lambda: applied[2][-1:] == [t0 + 20], WAIT_S, "partition 2's node-log cut")
        worker.add(1, progress[1], followers[1])
        wait_until(lambda: applied[1][-1:] == [t0 + 10], WAIT_S, "partition 1's node-log cut")
    finally:
        worker.stop()
        worker.join(30)
        for schedule in standing.values():
            schedule.store.close()
