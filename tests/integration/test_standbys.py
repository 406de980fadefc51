"""A node's standbys on Apache Kafka (``group/standbys.py``): one consumer follows the progress
topics of several partitions at ``read_committed`` and applies each one's committed cuts to
that partition's schedule, nothing of an aborted transaction; a partition leaves without
disturbing the others (issue 61, step 5 c).

Kafka only: Tansu's ``read_committed`` readers also see aborted records.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from chronos.clock import FakeClock
from chronos.group.claims import Holding
from chronos.group.follower import Follower
from chronos.group.placement import ReplicaPlacement, ReplicaStore
from chronos.group.standbys import ProgressLogs, StandbysWorker
from chronos.kafka.clients import KafkaClients
from chronos.kafka.publisher import TransactionalPublisher
from chronos.schedule.frontier import Frontier, Wake
from chronos.schedule.ledger import Ledger
from chronos.schedule.progress_record import (
    Claim,
    Cut,
    RepeatState,
    encode_claim,
    encode_cut,
    encode_repeat,
)
from chronos.settings import DeleteSettings, KafkaSettings, StoreSettings
from chronos.store.database import RocksDatabase
from chronos.store.rocks import RocksStore
from chronos.types import EpochMs
from tests.waiting import wait_until

pytestmark = pytest.mark.kafka_only(reason="Tansu's read_committed readers see aborted records")

T0 = 1_700_000_000_000
WAIT_S = 30.0


@dataclass
class Standby:
    """One partition's schedule, following its owner's cuts; the seeks applied, in order."""

    store: RocksStore
    ledger: Ledger
    replica: ReplicaStore
    follower: Follower
    applied: list[EpochMs] = field(default_factory=list)


def _standby(database: RocksDatabase, partition: int, wake: Wake) -> Standby:
    store = RocksStore.of_partition(database, partition)
    frontier = Frontier(0, wake)
    placement = ReplicaPlacement()
    ledger = Ledger(store, frontier, FakeClock(T0), DeleteSettings(), placement)
    replica = ReplicaStore(store, frontier, ledger, placement)
    replica.follow()
    applied: list[EpochMs] = []

    def apply(seek: EpochMs, states: Sequence[RepeatState], covered: Mapping[int, int]) -> None:
        applied.append(seek)
        replica.apply_cut(seek, states, covered)

    follower = Follower(apply, lambda: ledger.inner_offsets([partition]))
    return Standby(store, ledger, replica, follower, applied)


@pytest.fixture
def topics(admin: AdminClient, namespace: str) -> dict[int, str]:
    names = {p: f"{namespace}.progress.c.p{p}" for p in (1, 2)}
    config = {"cleanup.policy": "compact"}
    created = admin.create_topics([NewTopic(n, 1, 1, config=config) for n in names.values()])
    for future in created.values():
        future.result(timeout=30)
    return names


@pytest.fixture
def owner(kafka_bootstrap: str, namespace: str) -> Iterator[TransactionalPublisher]:
    """The owner of both partitions: one producer, one transaction for both cuts."""
    clients = KafkaClients(KafkaSettings(bootstrap_servers=kafka_bootstrap), "owner")
    publisher = clients.transactional(f"{namespace}.delivery.owner", 30_000, name="owner")
    publisher.init(30)
    yield publisher
    publisher.close()


def _cuts(
    publisher: TransactionalPublisher,
    topics: dict[int, str],
    seeks: dict[int, int],
    commit: bool,
    offsets: dict[int, int] | None = None,
) -> None:
    """One transaction with a cut per partition (seek ``seeks[p]``, covering inner offsets
    up to ``offsets[p]``, 0 by default), committed or aborted."""
    publisher.begin()
    for partition, seek in seeks.items():
        covered = {partition: (offsets or {}).get(partition, 0)}
        key, value = encode_cut(Cut(1, seek, covered, "owner", seek))
        publisher.publish(topics[partition], key, value, [], lambda _e, _m: None)
    assert publisher.flush(30) == 0
    if commit:
        publisher.commit()
    else:
        publisher.abort()


@pytest.fixture
def following(
    tmp_path: Path, kafka_bootstrap: str, namespace: str, topics: dict[int, str]
) -> Iterator[tuple[dict[int, Standby], StandbysWorker]]:
    """Partitions 1 and 2's schedules in one database, followed by one started worker."""
    clients = KafkaClients(KafkaSettings(bootstrap_servers=kafka_bootstrap), "standby")
    database = RocksDatabase(tmp_path / "s", StoreSettings(wal_sync_interval_ms=60_000))
    wake = Wake()
    standbys = {p: _standby(database, p, wake) for p in (1, 2)}
    logs = ProgressLogs(f"{namespace}.reader.standby", clients.consumer, clients.errors("s"))
    worker = StandbysWorker(logs)
    for partition, standby in standbys.items():
        worker.add(partition, topics[partition], standby.follower)
    worker.start()
    yield standbys, worker
    worker.stop()
    worker.join(10)
    for standby in standbys.values():
        standby.store.close()
    database.close()


def test_one_consumer_applies_each_partitions_committed_cuts_and_lets_one_leave(
    following: tuple[dict[int, Standby], StandbysWorker],
    topics: dict[int, str],
    owner: TransactionalPublisher,
) -> None:
    """Mutants caught: a record applied to the partition the consumer read first (a topic's
    records routed by arrival, not by topic); an aborted cut applied (read_uncommitted); a
    partition that left still applied."""
    standbys, worker = following
    _cuts(owner, topics, {1: T0 + 10, 2: T0 + 20}, commit=True)
    _cuts(owner, topics, {1: T0 + 30, 2: T0 + 40}, commit=True)
    wait_until(
        lambda: standbys[1].applied[-1:] == [T0 + 30] and standbys[2].applied[-1:] == [T0 + 40],
        WAIT_S,
        "both partitions' last committed cuts applied",
    )
    _cuts(owner, topics, {1: T0 + 99}, commit=False)
    _cuts(owner, topics, {2: T0 + 45}, commit=True)
    wait_until(lambda: standbys[2].applied[-1:] == [T0 + 45], WAIT_S, "a commit after the abort")
    assert T0 + 99 not in standbys[1].applied, "an aborted cut was applied"
    assert standbys[1].replica.seek_ms == T0 + 30 and standbys[2].replica.seek_ms == T0 + 45
    assert worker.follower(1) is standbys[1].follower

    left = worker.remove(1)
    assert left.wait(WAIT_S)
    _cuts(owner, topics, {1: T0 + 50, 2: T0 + 60}, commit=True)
    wait_until(lambda: standbys[2].applied[-1:] == [T0 + 60], WAIT_S, "partition 2 goes on alone")
    # Partition 1's cut of the same transaction was read by now, had it been followed.
    assert standbys[1].applied[-1] == T0 + 30 and standbys[1].replica.seek_ms == T0 + 30
    assert worker.follower(1) is None


def test_a_cut_waits_for_its_own_partitions_ingest_not_anothers(
    following: tuple[dict[int, Standby], StandbysWorker],
    topics: dict[int, str],
    owner: TransactionalPublisher,
) -> None:
    """A cut is applied once *its* partition's ingest stored every add below it: partition
    1's waits for partition 1's ingest while partition 2's, covered, goes on, and is applied
    once that ingest caught up, with nothing more read. Mutant caught: only the partitions a
    read returned records for applied (partition 1's cut waited for its owner's next one)."""
    standbys, worker = following
    standbys[2].ledger.apply_decoded([], {2: 5}, [])  # partition 2's ingest is ahead
    _cuts(owner, topics, {1: T0 + 10, 2: T0 + 20}, commit=True, offsets={1: 3, 2: 3})
    wait_until(lambda: standbys[2].applied == [T0 + 20], WAIT_S, "partition 2's cut")
    follower = worker.follower(1)
    assert follower is not None
    wait_until(lambda: follower.waiting == 1, WAIT_S, "partition 1's cut read")
    assert standbys[1].applied == [], "applied before partition 1's ingest stored its adds"
    standbys[1].ledger.apply_decoded([], {1: 3}, [])  # partition 1's ingest catches up
    wait_until(lambda: standbys[1].applied == [T0 + 10], WAIT_S, "partition 1's cut")


def _publish(
    publisher: TransactionalPublisher,
    topic: str,
    records: list[tuple[bytes, bytes | None]],
    commit: bool,
) -> None:
    publisher.begin()
    for key, value in records:
        publisher.publish(topic, key, value, [], lambda _e, _m: None)
    assert publisher.flush(30) == 0
    if commit:
        publisher.commit()
    else:
        publisher.abort()


def test_the_reader_names_each_followed_partitions_holder_from_its_committed_claims_and_cuts(
    following: tuple[dict[int, Standby], StandbysWorker],
    topics: dict[int, str],
    owner: TransactionalPublisher,
) -> None:
    """What a cluster member's round decides from (``cluster/rounds.py``): an empty log names
    nobody once read to its end; a claim and its winner's handover name the holder and its
    successor; an aborted claim names nobody. Mutants caught: an aborted claim counted (the
    second partition's holder stays the zombie); an empty log never published (no holding
    for either partition before the first records)."""
    _standbys, worker = following
    wait_until(
        lambda: worker.holdings() == {1: Holding(None), 2: Holding(None)},
        WAIT_S,
        "both empty logs read to their end",
    )
    claim = Claim(term=1, node="owner", after=-1, nonce="n1")
    handover = Cut(1, T0 + 10, {1: 0}, "owner", T0, released_to="next")
    _publish(owner, topics[1], [encode_claim(claim), encode_cut(handover)], commit=True)
    zombie = Claim(term=1, node="zombie", after=-1, nonce="z1")
    _publish(owner, topics[2], [encode_claim(zombie)], commit=False)
    _publish(owner, topics[2], [encode_cut(Cut(1, T0 + 20, {2: 0}, "owner", T0))], commit=True)
    wait_until(
        lambda: worker.holdings() == {1: Holding("owner", "next"), 2: Holding("owner")},
        WAIT_S,
        "the holders the committed records name",
    )


def test_a_hand_in_reads_past_the_claim_and_applies_its_start_before_the_partition_leaves(
    tmp_path: Path,
    kafka_bootstrap: str,
    namespace: str,
    topics: dict[int, str],
    owner: TransactionalPublisher,
) -> None:
    """A won claim's partition leaves the standbys only once everything committed before the
    claim was applied: here the claim's start is a cut whose repeat state the worker had not
    read when the hand-in was asked. Mutant caught: a hand-in that does not wait to read
    past the claim (the start cut is applied without its state, and the partition leaves)."""
    clients = KafkaClients(KafkaSettings(bootstrap_servers=kafka_bootstrap), "standby")
    applied: list[tuple[EpochMs, list[str]]] = []

    def apply(seek: EpochMs, states: Sequence[RepeatState], covered: Mapping[int, int]) -> None:
        applied.append((seek, [state.message_id for state in states]))

    follower = Follower(apply, lambda: {1: 0})
    worker = StandbysWorker(
        ProgressLogs(f"{namespace}.reader.standby", clients.consumer, clients.errors("s"))
    )
    worker.add(1, topics[1], follower)
    worker.start()
    try:
        first = Cut(1, T0 + 10, {1: 0}, "owner", T0, seq=0)
        _publish(owner, topics[1], [encode_cut(first)], commit=True)  # offsets 0, marker 1
        wait_until(lambda: applied == [(T0 + 10, [])], WAIT_S, "the first cut applied")
        start = Cut(1, T0 + 20, {1: 0}, "owner", T0, seq=1)
        state = RepeatState("r", None, 0)
        # The claim's offset is known before it is written: states and cut at 2 and 3, a
        # marker at 4, the claim at 5.
        hand_in = worker.hand_in(1, 5, start)
        _publish(owner, topics[1], [encode_repeat(state), encode_cut(start)], commit=True)
        claim = Claim(term=2, node="b", after=3, nonce="b1")
        _publish(owner, topics[1], [encode_claim(claim)], commit=True)
        assert hand_in.done.wait(WAIT_S), "the partition was handed in"
        assert applied == [(T0 + 10, []), (T0 + 20, ["r"])]
        assert hand_in.applied == start and hand_in.followed
        assert worker.follower(1) is None
    finally:
        worker.stop()
        worker.join(10)
