"""A cluster member's ownership on Apache Kafka (``cluster/ownership.py``, ``cluster/delivery.py``):
two members, each with one database, one standbys' reader, one producer and one delivery loop
over the partitions it owns, decide by their rounds who delivers which partition. The first
member claims every partition of a new cluster; the second joins and the first hands its
share over; the first stops without a word and the second, suspecting it, fences it and
claims the rest. Every message is delivered exactly once at ``read_committed``.

What is not here yet (issue 61, step c): the members' ingest (the test writes each request
into both members' stores, as their ingest would), the membership and the heartbeats (the
test says who is a member and whom each suspects), the readiness board (a member is ready for
a partition once its reader read that partition's log to its end).

Kafka only: Tansu's ``read_committed`` readers also see aborted records.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from chronos.clock import SystemClock
from chronos.cluster.delivery import MemberDelivery
from chronos.cluster.ownership import OwnershipRound
from chronos.cluster.placement import Placement
from chronos.cluster.rounds import Rounds
from chronos.delivery.deadletter import DeadLetterPolicy
from chronos.group.claims import Claimant, ClaimLog
from chronos.group.hosted import Hosted
from chronos.group.lane import Lane
from chronos.group.node_log import NodeLog, NodeLogCuts
from chronos.group.spec import GroupSpec
from chronos.group.standbys import ProgressLogs, StandbysWorker
from chronos.group.transactions import TransactionLoop
from chronos.kafka.admin import RenewedAdmin, stable_end
from chronos.kafka.clients import KafkaClients
from chronos.kafka.publisher import TransactionalPublisher
from chronos.metrics import CountingMetrics
from chronos.model import DelayMessage, Op
from chronos.schedule.frontier import Wake
from chronos.schedule.progress_record import Cut
from chronos.settings import ChronosSettings, DeleteSettings, StoreSettings
from chronos.store import codec
from chronos.store.database import RocksDatabase
from chronos.types import EpochMs
from tests.waiting import wait_until

pytestmark = pytest.mark.kafka_only(reason="Tansu's read_committed readers see aborted records")

PARTITIONS = 4
NODE_LOG_PARTITIONS = 2
PER_PARTITION = 24
WAIT_S = 60.0


@dataclass
class Cluster:
    """What the test decides for the members: the member list and each one's suspects."""

    bootstrap: str
    namespace: str
    admin: AdminClient
    target: str
    members: frozenset[str] = frozenset()
    suspects: dict[str, frozenset[str]] = field(default_factory=dict)
    running: dict[str, Member] = field(default_factory=dict)
    #: The nodes whose board says anything (a node's word is held back to let it run rounds).
    speaking: set[str] = field(default_factory=set)

    def progress(self, partition: int) -> str:
        return f"{self.namespace}.progress.c.p{partition}"

    @property
    def node_log(self) -> str:
        return f"{self.namespace}.progress.c.nodes"

    def transactional_id(self, node: str) -> str:
        return f"{self.namespace}.delivery.c.{node}"

    def ready(self, node: str, partition: int, _since: float) -> bool:
        """The readiness board's answer: the node's reader read the partition's log."""
        member = self.running.get(node)
        return (
            node in self.speaking and member is not None and partition in member.standbys.holdings()
        )


class Member:
    """One cluster member of the second shape, without its ingest, membership and watch."""

    def __init__(self, name: str, cluster: Cluster, data_dir: Path) -> None:
        self.name = name
        settings = ChronosSettings.model_validate(
            {
                "kafka": {"bootstrap_servers": cluster.bootstrap},
                "topics": {"namespace": cluster.namespace},
                "group": {"name": "c", "transaction_interval_ms": 5},
                "node": {"node_id": name},
            }
        )
        spec = GroupSpec.of(settings)
        assert spec is not None
        self.clock = SystemClock()
        self.clients = KafkaClients(settings.kafka, name)
        self.database = RocksDatabase(data_dir, StoreSettings(wal_sync_interval_ms=60_000))
        self.wake = Wake()
        self.hosted = {
            p: Hosted.open(
                self.database, p, cluster.progress(p), self.wake, self.clock, DeleteSettings()
            )
            for p in range(PARTITIONS)
        }
        errors = self.clients.errors(name)
        logs = ProgressLogs(
            f"{cluster.namespace}.reader.{name}",
            self.clients.consumer,
            errors,
            node_log=(cluster.node_log, NODE_LOG_PARTITIONS),
        )
        self.standbys = StandbysWorker(logs)
        for partition in self.hosted:
            self.follow(partition, cluster)
        admin = self.clients.admin()
        node_cuts = NodeLogCuts(
            logs.node_state, cluster.node_log, NODE_LOG_PARTITIONS, RenewedAdmin(lambda: admin)
        )
        self.publisher: TransactionalPublisher | None = None

        def new_claimant(publisher: TransactionalPublisher) -> Claimant:
            return Claimant(
                node=name,
                publisher=publisher,
                open_transactional=lambda tid: self.clients.transactional(
                    tid, 30_000, name="fence"
                ),
                transactional_id=cluster.transactional_id,
                shared_id=lambda topic, _p: (
                    f"{cluster.namespace}.delivery.c.{topic.rsplit('.', 1)[1]}"
                ),
                stable_end=lambda topic, _p: stable_end(admin, topic),
                timeout_s=10.0,
                node_cuts=node_cuts,
            )

        def lead(partition: int, term: int, start: Cut | None) -> Lane:
            assert self.publisher is not None
            policy = DeadLetterPolicy.of(settings.delivery, self.publisher)
            return self.hosted[partition].lane(term, start, policy, self.clock, print, print)

        self.ownership = OwnershipRound(
            rounds=Rounds(name, PARTITIONS, 1, cluster.ready),
            members=lambda: cluster.members,
            suspects=lambda: cluster.suspects.get(name, frozenset()),
            standing=lambda: frozenset(range(PARTITIONS)),
            standbys=self.standbys,
            open_claim_log=lambda p: ClaimLog(
                cluster.progress(p),
                0,
                f"{cluster.namespace}.claims.{name}",
                self.clients.consumer,
                errors,
                inner=p,
            ),
            lead=lead,
            follow=lambda p: self.follow(p, cluster),
            hand_in_timeout_s=10.0,
            interval_s=0.05,
        )

        def new_loop(publisher: TransactionalPublisher) -> TransactionLoop:
            self.publisher = publisher
            return TransactionLoop(
                spec=spec,
                publisher=publisher,
                lanes=[],
                retry=settings.delivery,
                clock=self.clock,
                metrics=CountingMetrics(),
                between=self.ownership,
                idle_cuts=False,
                node_log=NodeLog.of(cluster.node_log, name, NODE_LOG_PARTITIONS),
                wake=self.wake,
                max_idle_s=0.05,
            )

        self.delivery = MemberDelivery(
            open_publisher=lambda: self.clients.transactional(
                cluster.transactional_id(name), 30_000, name=name
            ),
            new_claimant=new_claimant,
            new_loop=new_loop,
            ownership=self.ownership,
            init_timeout_s=30.0,
            on_fatal=print,
            wake=self.wake,
        )

    def follow(self, partition: int, cluster: Cluster) -> None:
        hosted = self.hosted[partition]
        self.standbys.add(partition, cluster.progress(partition), hosted.follower())

    def ingest(self, requests: dict[int, list[DelayMessage]]) -> None:
        """What the member's ingest would store: each partition's requests at offsets 0.."""
        for partition, messages in requests.items():
            items = [(Op.ADD, m.id, m.first_due_ms, codec.encode(m)) for m in messages]
            origins = [(partition, n) for n in range(len(items))]
            self.hosted[partition].ledger.apply_decoded(items, {partition: len(items)}, origins)

    def start(self) -> None:
        self.standbys.start()
        self.delivery.start()

    def stop(self) -> None:
        """Stops without a handover: what a killed member leaves (its open transaction is
        aborted; its producer stays unfenced until a claim fences it)."""
        self.delivery.stop()
        self.delivery.join(30)
        self.standbys.stop()
        self.standbys.join(30)

    def close(self) -> None:
        for hosted in self.hosted.values():
            hosted.store.close()
        self.database.close()


@pytest.fixture
def cluster(kafka_bootstrap: str, namespace: str, admin: AdminClient) -> Cluster:
    made = Cluster(kafka_bootstrap, namespace, admin, f"{namespace}-target")
    compact = {"cleanup.policy": "compact"}
    topics = [NewTopic(made.progress(p), 1, 1, config=compact) for p in range(PARTITIONS)]
    topics.append(NewTopic(made.node_log, NODE_LOG_PARTITIONS, 1, config=compact))
    topics += [NewTopic(made.target, 1, 1), NewTopic(f"{namespace}.deadletter.c", 1, 1)]
    for future in admin.create_topics(topics).values():
        future.result(timeout=30)
    return made


@pytest.fixture
def members(cluster: Cluster, tmp_path: Path) -> Iterator[dict[str, Member]]:
    made = {name: Member(name, cluster, tmp_path / name) for name in ("a", "b")}
    yield made
    for member in made.values():
        member.stop()
        member.close()


def _requests(target: str, now: EpochMs) -> dict[int, list[DelayMessage]]:
    """Each partition's messages, due one every 250 ms from now on."""
    return {
        p: [
            DelayMessage(f"p{p}-{n}", target, f"p{p}-{n}".encode(), b"v", [], now + 250 * n)
            for n in range(PER_PARTITION)
        ]
        for p in range(PARTITIONS)
    }


def _delivered(cluster: Cluster, count: int, to_end: bool = False) -> list[str]:
    """The keys of the target's committed records, read from its start until ``count`` were
    read, or (``to_end``) until its end once they were."""
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": f"{cluster.namespace}.check",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(cluster.target, 0, 0)])
    keys: list[str] = []
    at_end = [False]

    def read() -> bool:
        for message in consumer.consume(1000, 0.2):
            error = message.error()
            if error is None:
                keys.append((message.key() or b"").decode())
                at_end[0] = False
            elif error.code() == KafkaError._PARTITION_EOF:
                at_end[0] = True
        return len(keys) >= count and (at_end[0] or not to_end)

    try:
        wait_until(read, WAIT_S, f"{count} deliveries read")
        return keys
    finally:
        consumer.close()


def test_members_claim_hand_over_and_take_over_a_silent_member_delivering_each_message_once(
    cluster: Cluster, members: dict[str, Member]
) -> None:
    """Mutants caught: a round that claims from a live holder (b fences a and takes its share
    before a hands it over); releases never asked (b never delivers while a lives)."""
    a, b = members["a"], members["b"]
    now = SystemClock().now_ms()
    requests = _requests(cluster.target, now + 500)
    for member in (a, b):
        member.ingest(requests)

    cluster.members = frozenset({"a"})
    cluster.running["a"] = a
    cluster.speaking.add("a")
    a.start()
    every = frozenset(range(PARTITIONS))
    wait_until(lambda: a.ownership.delivering == every, WAIT_S, "a delivers every partition")

    cluster.members = frozenset({"a", "b"})
    cluster.running["b"] = b
    b.start()
    # b runs whole rounds over every partition's log, naming a live a, before it says it is
    # ready: it must wait for a's handover, not claim.
    wait_until(lambda: len(b.standbys.holdings()) == PARTITIONS, WAIT_S, "b read every log")
    seen = b.ownership.rounds
    wait_until(lambda: b.ownership.rounds >= seen + 2, WAIT_S, "a whole round of b since")
    assert not b.ownership.delivering
    cluster.speaking.add("b")
    placement = Placement.of(cluster.members, PARTITIONS, 1)
    share = frozenset(placement.owned_by("b"))
    assert share and share != every
    wait_until(
        lambda: b.ownership.delivering == share and a.ownership.delivering == every - share,
        WAIT_S,
        "a handed b its share",
    )
    claimant = b.ownership.claimant
    assert claimant is not None and claimant.fenced == [], "a handover fences nobody"

    a.stop()  # silent from now on; its producer is not fenced yet
    cluster.suspects["b"] = frozenset({"a"})
    wait_until(lambda: b.ownership.delivering == every, WAIT_S, "b took a's partitions over")
    assert claimant.fenced == [cluster.transactional_id("a")], "b fenced a, once"

    total = PARTITIONS * PER_PARTITION
    _delivered(cluster, total)  # every message, once b delivered the last
    b.stop()
    delivered = _delivered(cluster, total, to_end=True)
    expected = sorted(m.id for messages in requests.values() for m in messages)
    assert sorted(delivered) == expected, "each message once"


def test_a_false_suspicion_costs_a_handover_back_and_no_duplicate(
    cluster: Cluster, members: dict[str, Member]
) -> None:
    """b suspects a live a: it fences a and claims a's share. a's loop is fenced: its
    partitions go back to following and it starts a new producer, but b holds them now, so a
    waits. Once b hears a again, it hands a's share back. Mutants caught: a fenced loop whose
    lanes are not followed again (a never says its share is ready, so b never hands it
    back); a loop kept after its fence (a's member never counts it)."""
    a, b = members["a"], members["b"]
    now = SystemClock().now_ms()
    requests = _requests(cluster.target, now + 500)
    for member in (a, b):
        member.ingest(requests)
    cluster.members = frozenset({"a", "b"})
    for name, member in members.items():
        cluster.running[name] = member
        cluster.speaking.add(name)
        member.start()
    placement = Placement.of(cluster.members, PARTITIONS, 1)
    every = frozenset(range(PARTITIONS))
    share = {name: frozenset(placement.owned_by(name)) for name in members}
    settled = lambda: all(m.ownership.delivering == share[n] for n, m in members.items())  # noqa: E731
    wait_until(settled, WAIT_S, "each member delivers its share")

    cluster.suspects["b"] = frozenset({"a"})
    wait_until(
        lambda: b.ownership.delivering == every and a.delivery.fenced == 1,
        WAIT_S,
        "b took a's share and a's loop was fenced",
    )
    cluster.suspects["b"] = frozenset()
    wait_until(settled, WAIT_S, "b handed a's share back")
    assert a.delivery.fenced == 1

    total = PARTITIONS * PER_PARTITION
    _delivered(cluster, total)
    for member in members.values():
        member.stop()
    delivered = _delivered(cluster, total, to_end=True)
    expected = sorted(m.id for messages in requests.values() for m in messages)
    assert sorted(delivered) == expected, "each message once"
