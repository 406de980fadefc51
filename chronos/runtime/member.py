"""A cluster member of the node shape (``cluster.shape = "node"``): one ingest, one store, one
producer and one delivery loop for every partition it hosts (``docs/design/cluster-v2.md``,
"The member").

What it runs, whatever the partition count:

* **membership** (``cluster/membership.py``): the cluster's consumer group, whose members every
  node places the partitions over (``cluster/placement.py``);
* **the host** (``member_host.py``): the hosted partitions' schedules in one database, followed
  by **the standbys' reader** (``group/standbys.py``), and one ingest over all of them;
* **the readiness board** (``cluster/readiness.py``): which partitions each node could deliver;
* **heartbeats and the watch** (``group/peer_watch.py``): whom this node suspects;
* **delivery** (``cluster/delivery.py``): one producer and one ``TransactionLoop``, whose
  rounds between transactions claim, take over and hand over partitions
  (``cluster/ownership.py``, ``cluster/rounds.py``).

A stop leaves the group first, then hands every partition it delivers to its successor (the
rounds do, once the others no longer count it a member), then stops.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import TYPE_CHECKING

import structlog
from confluent_kafka.admin import AdminClient

from chronos.clock import Clock, SystemClock
from chronos.cluster.delivery import MemberDelivery
from chronos.cluster.membership import GroupDescriber, Membership
from chronos.cluster.ownership import OwnershipRound
from chronos.cluster.readiness import ReadinessBoard
from chronos.cluster.rounds import Rounds
from chronos.delivery.deadletter import TOPIC_CHECK_TIMEOUT_S, DeadLetterPolicy, DeadLetters
from chronos.delivery.policies import Policies
from chronos.errors import ConfigError
from chronos.group.claims import Claimant, ClaimLog
from chronos.group.hosted import Hosted
from chronos.group.lane import Lane
from chronos.group.node_log import NodeLog, NodeLogCuts, NodeLogState
from chronos.group.peer_watch import HeartbeatWorker, PeerWatch, gap_for
from chronos.group.spec import GroupSpec
from chronos.group.standbys import ProgressLogs, StandbysWorker
from chronos.group.transactions import TransactionLoop
from chronos.kafka.admin import (
    RenewedAdmin,
    ensure_topics,
    log_start_offsets,
    partition_count,
    stable_end,
    unwritable_topics,
)
from chronos.kafka.clients import KafkaClients
from chronos.kafka.publisher import TransactionalPublisher
from chronos.kafka.topic_config import check_inner_topic
from chronos.lifecycle import Component, Fatal
from chronos.metrics import CountingMetrics
from chronos.node.checkpointer import CheckpointWorker
from chronos.node.expiry import ExpiryWriter
from chronos.node.refresh import REFRESH_PRODUCER
from chronos.runtime.foreground import run_foreground
from chronos.runtime.member_delete import MemberDeleter
from chronos.runtime.member_host import MemberHost
from chronos.runtime.member_refresh import MemberRefresh
from chronos.runtime.member_restate import MemberRestater
from chronos.schedule.frontier import Wake
from chronos.schedule.ledger import Ledger
from chronos.schedule.progress_record import Cut
from chronos.settings import ChronosSettings
from chronos.store.database import RocksDatabase, member_store_dir

if TYPE_CHECKING:
    from chronos.admin.server import AdminServer

log = structlog.get_logger(__name__)

#: How long a description of the group may take before the last member list stands.
_DESCRIBE_TIMEOUT_S = 5.0
#: How often a node says its ready partitions when nothing changed, and how long another
#: node's word counts.
_BOARD_INTERVAL_S = 1.0
_BOARD_STALE_S = 3.5
#: Fewest seconds between two ownership rounds, and the delivery loop's longest idle wait.
_ROUND_S = 0.1
#: How long a member's idempotent producers wait at stop for what is in flight.
_STOP_FLUSH_S = 2.0
#: How long a member's delivery loop must have been stuck in a pass, or failing every
#: transaction, before its heartbeat says it owes deliveries (``due``): its peers then suspect
#: it after ``group.suspect_after_ms`` more. Well above a slow commit or claim round, so that
#: a broker's hiccup does not move partitions; a stalled member is found within seconds.
_STALLED_S = 5.0


def _ignored(error: object, message: object) -> None:
    """A board record's outcome: the next one replaces a lost one."""


def _note_partition_shape_stores(data_dir: Path) -> list[str]:
    """Say so when ``data_dir`` still holds the partition shape's stores (``p<N>``, a cluster
    restarted in this shape: docs/clusters.md). They are not read (a member restores each
    partition from the inner topic and starts from its last cut) and not removed: the
    operator removes them once the members deliver, or keeps them to go back. Returns their
    names."""
    left = sorted(
        d.name for d in data_dir.iterdir() if d.is_dir() and re.fullmatch(r"p\d+", d.name)
    )
    if left:
        log.warning(
            "partition_shape_stores_left",
            data_dir=str(data_dir),
            stores=left,
            action="not read: each partition is restored from the inner topic; remove them "
            "once every partition delivers",
        )
    return left


class ClusterMember:
    """One member of ``cluster.name`` in the node shape.

    Parameters:
        settings: the settings tree (``cluster.name`` set, ``cluster.shape`` "node").
        clock: time source (the system clock outside tests).
    """

    def __init__(self, settings: ChronosSettings, clock: Clock | None = None) -> None:
        name = settings.cluster.name
        if name is None:
            raise ConfigError("a cluster member needs cluster.name")
        self.settings = settings
        self._cluster = name
        self._node = settings.node.node_id
        self._clock = clock or SystemClock()
        self._fatal = Fatal()
        self._clients = KafkaClients(
            settings.kafka,
            self._node,
            settings.limits.max_message_bytes,
            self._fatal.report,
        )
        self.metrics = CountingMetrics()
        self._components: list[Component] = []
        self._database: RocksDatabase | None = None
        self.host: MemberHost | None = None
        self.ownership: OwnershipRound | None = None
        self.delivery: MemberDelivery | None = None
        self.watch: PeerWatch | None = None
        #: What keeps every live message in Kafka (``rebuild.mode``): refresh passes, or the
        #: restater of a compacted inner topic.
        self.refresh: MemberRefresh | None = None
        self.restater: MemberRestater | None = None
        self._membership: Membership | None = None
        self._stopped = threading.Event()
        self._stop_requested = threading.Event()
        self._leaving = threading.Event()
        self._topic_admin: AdminClient | None = None
        self._admin: AdminServer | None = None

    # -- start --------------------------------------------------------------------------------

    def start(self) -> None:
        """Create and check the topics, open the store, join the cluster."""
        s = self.settings
        names = s.topics.names
        if s.topics.create:
            ensure_topics(s, stopped=self._stop_requested.is_set)
        if s.rebuild.check_inner_topic:
            check_inner_topic(s)
        partitions = partition_count(s, names.inner)
        node_log_partitions = partition_count(s, names.node_log(self._cluster))
        spec = GroupSpec.of(
            s.model_copy(update={"group": s.group.model_copy(update={"name": self._cluster})})
        )
        if spec is None:
            raise ConfigError("a cluster member needs its group timings")
        data_dir = member_store_dir(s.node.data_dir)
        data_dir.mkdir(parents=True, exist_ok=True)
        _note_partition_shape_stores(s.node.data_dir)
        database = RocksDatabase(data_dir, s.store, range(partitions))
        self._database = database
        wake = Wake()
        publisher = self._clients.idempotent("member", stop_flush_s=_STOP_FLUSH_S)
        dead_letters = DeadLetters(publisher, names.dead_letter, self.metrics, self._fatal.report)
        # Each partition's lane paces its share of a topic's rate (the rate is the cluster's).
        policies = Policies(s.delivery.topics, rate_share=1 / partitions)
        node_state = NodeLogState()
        standbys = StandbysWorker(
            ProgressLogs(
                names.progress_reader_group(self._node, "standbys"),
                self._clients.waiting_consumer,
                self._clients.errors("standbys"),
                node_log=(names.node_log(self._cluster), node_log_partitions),
                node_state=node_state,
                linger_ms=s.cluster.progress_linger_ms,
            )
        )
        progress_topics = {p: self._progress_topic(p) for p in range(partitions)}
        inner_of = {topic: p for p, topic in progress_topics.items()}

        ownership_ref: list[OwnershipRound] = []
        board_ref: list[ReadinessBoard] = []

        def delivering() -> frozenset[int]:
            return ownership_ref[0].delivering if ownership_ref else frozenset()

        def busy() -> frozenset[int]:
            return ownership_ref[0].busy() if ownership_ref else frozenset()

        def rounds_run() -> int:
            return ownership_ref[0].rounds if ownership_ref else 0

        def stands(node: str, partition: int) -> bool:
            return bool(board_ref) and board_ref[0].ready(node, partition)

        host = MemberHost(
            settings=s,
            partitions=partitions,
            open_hosted=lambda p: Hosted.open(
                database,
                p,
                progress_topics[p],
                wake,
                self._clock,
                s.delete,
                restates=s.rebuild.mode == "compact",
            ),
            standbys=standbys,
            delivering=delivering,
            clients=self._clients,
            dead_letters=dead_letters,
            clock=self._clock,
            metrics=self.metrics,
            on_fatal=self._fatal.report,
            busy=busy,
            rounds_run=rounds_run,
            stands=stands,
            drop_store=database.drop,
            grace_s=s.cluster.drop_unhosted_after_s,
            log_starts=lambda ps: log_start_offsets(s, names.inner, ps),
        )
        self.host = host
        admin_url = (
            self._start_admin(host, partitions, standbys, delivering, database, board_ref, policies)
            if s.admin.enabled
            else None
        )
        board = ReadinessBoard(
            node_id=self._node,
            topic=names.cluster_status(self._cluster),
            consumer=self._clients.waiting_consumer(
                names.progress_reader_group(self._node, "cluster-status"),
                self._clients.errors("readiness"),
                {"enable.auto.commit": False},
            ),
            errors=self._clients.errors("readiness"),
            produce=lambda key, value: publisher.publish(
                names.cluster_status(self._cluster), key, value, [], _ignored
            ),
            ready_now=self._standing,
            interval_s=_BOARD_INTERVAL_S,
            stale_after_s=_BOARD_STALE_S,
            admin_url=admin_url,
        )
        board_ref.append(board)
        watch = PeerWatch(
            self._node,
            s.group.suspect_after_ms / 1000.0,
            max_gap_s=gap_for(s.group.progress_interval_ms / 1000.0),
        )
        self.watch = watch
        admin = RenewedAdmin(self._clients.admin)
        node_cuts = NodeLogCuts(
            node_state, names.node_log(self._cluster), node_log_partitions, admin
        )
        claim_errors = self._clients.errors("claims")

        def lead(partition: int, term: int, start: Cut | None) -> Lane:
            delivery = self.delivery
            loop = None if delivery is None else delivery.loop
            if loop is None:
                raise RuntimeError("a lane is made for a running loop only")
            policy = DeadLetterPolicy.of(
                s.delivery, loop.publisher, unwritable=self._unwritable, policies=policies
            )
            return host.hosted[partition].lane(
                term,
                start,
                policy,
                self._clock,
                on_fenced=lambda reason: None,  # the loop's fence is the member's to handle
                on_fatal=self._fatal.report,
                policies=policies,
                cancel_gate=host.gate(partition),
            )

        ownership = OwnershipRound(
            rounds=Rounds(self._node, partitions, s.cluster.standby_replicas, board.ready),
            members=self._members,
            suspects=lambda: frozenset(watch.suspects()),
            heard=lambda: watch.heard_within(s.group.suspect_after_ms / 1000.0),
            leaving=self._leaving.is_set,
            standing=self._standing_to_claim,
            standbys=standbys,
            open_claim_log=lambda p: ClaimLog(
                progress_topics[p],
                0,
                names.progress_reader_group(self._node, "claims"),
                self._clients.consumer,
                claim_errors,
                inner=p,
            ),
            lead=lead,
            follow=lambda p: standbys.add(p, progress_topics[p], host.hosted[p].follower()),
            hand_in_timeout_s=s.group.takeover_catch_up_s,
            interval_s=_ROUND_S,
        )
        ownership_ref.append(ownership)
        self.ownership = ownership
        timeout_ms = s.group.transaction_timeout_ms

        def new_claimant(producer: TransactionalPublisher) -> Claimant:
            return Claimant(
                node=self._node,
                publisher=producer,
                open_transactional=lambda tid: self._clients.transactional(
                    tid, timeout_ms, name="fence"
                ),
                transactional_id=lambda node: names.member_transactional_id(self._cluster, node),
                shared_id=lambda topic, _p: names.transactional_id(
                    names.shard_group(self._cluster, inner_of[topic])
                ),
                stable_end=lambda topic, _p: admin.ask(lambda client: stable_end(client, topic)),
                timeout_s=timeout_ms / 1000.0,
                node_cuts=node_cuts,
            )

        node_log = NodeLog.of(names.node_log(self._cluster), self._node, node_log_partitions)

        def new_loop(producer: TransactionalPublisher) -> TransactionLoop:
            return TransactionLoop(
                spec=spec,
                publisher=producer,
                lanes=[],
                retry=s.delivery,
                clock=self._clock,
                metrics=self.metrics,
                keep_outcomes=s.admin.keeps_outcomes,
                between=ownership,
                idle_cuts=False,
                node_log=node_log,
                wake=wake,
                max_idle_s=_ROUND_S,
                fence_check_s=s.cluster.fence_check_ms / 1000.0,
                linger_s=s.cluster.transaction_linger_ms / 1000.0,
            )

        delivery = MemberDelivery(
            open_publisher=lambda: self._clients.transactional(
                names.member_transactional_id(self._cluster, self._node), timeout_ms
            ),
            new_claimant=new_claimant,
            new_loop=new_loop,
            ownership=ownership,
            init_timeout_s=timeout_ms / 1000.0,
            on_fatal=self._fatal.report,
            wake=wake,
        )
        self.delivery = delivery

        def progress() -> tuple[int, bool]:
            loop = delivery.loop
            if loop is None:
                return 0, False
            return loop.commits, bool(loop.lanes) and loop.stalled_s() >= _STALLED_S

        heartbeats = HeartbeatWorker(
            watch=watch,
            topic=names.heartbeats(self._cluster),
            publisher=publisher,
            open_consumer=self._clients.waiting_consumer,
            reader_group=names.progress_reader_group(self._node, "heartbeats"),
            errors=self._clients.errors("heartbeats"),
            interval_s=s.group.progress_interval_ms / 1000.0,
            progress=progress,
        )
        group = names.cluster_group(self._cluster)
        membership = Membership(
            node_id=self._node,
            topic=names.cluster(self._cluster),
            group=group,
            options={
                "session.timeout.ms": s.group.session_timeout_ms,
                "heartbeat.interval.ms": s.group.heartbeat_interval_ms,
            },
            open_consumer=self._clients.waiting_consumer,
            errors=self._clients.errors("membership"),
            describe=GroupDescriber(self._clients.admin, group, _DESCRIBE_TIMEOUT_S),
            interval_s=s.cluster.membership_interval_ms / 1000.0,
            on_change=host.members_changed,
        )
        self._membership = membership
        deleting, keeping = self._keepers(ownership, host, delivering)
        # ``chronos checkpoint`` (the pipeline's input): the whole database, every schedule.
        checkpointer = CheckpointWorker(
            database,
            data_dir,
            root=s.node.checkpoint_dir or s.node.data_dir.resolve().parent,
        )
        self._components = [
            publisher,
            standbys,
            host,
            *deleting,
            board,
            heartbeats,
            delivery,
            *keeping,
            membership,
            checkpointer,
        ]
        for component in self._components:
            component.start()
        log.info(
            "cluster_member_started",
            node=self._node,
            cluster=self._cluster,
            partitions=partitions,
            data_dir=str(data_dir),
        )

    def _start_admin(
        self,
        host: MemberHost,
        partitions: int,
        standbys: StandbysWorker,
        delivering: Callable[[], frozenset[int]],
        database: RocksDatabase,
        board_ref: list[ReadinessBoard],
        policies: Policies,
    ) -> str:
        """The admin API over this member and, through the other members', the cluster;
        returns where the other members reach it (said on the readiness board). A port it
        cannot take ends the start with nothing running."""
        # Only when served (a web stack and Prometheus' client).
        from chronos.admin.server import serve_admin
        from chronos.cluster.partition_metrics import PartitionCollector
        from chronos.cluster.peers import Peers, admin_url_of
        from chronos.runtime.member_view import MemberView

        s = self.settings
        token = s.cluster.peer_token
        peers = Peers(
            lambda node: board_ref[0].admin_url(node) if board_ref else None,
            None if token is None else token.get_secret_value(),
        )
        view = MemberView(
            node_id=self._node,
            partitions=partitions,
            host=host,
            delivering=delivering,
            holdings=standbys.holdings,
            members=self._members,
            components=lambda: self._components,
            fatal=self.fatal_error,
            disk_problem=database.disk_problem,
            peers=peers,
            metrics=self.metrics,
            policies=policies,
            clock=self._clock,
            scan_max=s.admin.list_scan_max,
            kafka_silence_s=s.admin.kafka_silence_s,
        )
        admin = serve_admin(view, s, [PartitionCollector(view.partition_gauges)])
        self._admin = admin
        return s.cluster.admin_url or admin_url_of(s, admin.port)

    @property
    def admin_port(self) -> int | None:
        """Where the admin API listens, None when it does not run."""
        return None if self._admin is None else self._admin.port

    def stored_partitions(self) -> list[int]:
        """The partitions with a schedule in this member's database, in order."""
        return self._database.partitions() if self._database is not None else []

    def _keepers(
        self, ownership: OwnershipRound, host: MemberHost, delivering: Callable[[], frozenset[int]]
    ) -> tuple[list[Component], list[Component]]:
        """The delete worker (with, in compact mode, the producer of its expiry tombstones),
        and what keeps every live message in Kafka while the member delivers: refresh passes,
        or on a compacted inner topic the restater and its producer (``rebuild.mode``), as a
        node alone's (``roles.py``). The second list is started after delivery and stopped
        before it. Restatements have a producer of their own: a burst of them (a mass
        reschedule, a slow broker) must not fill the queue the member's heartbeats use."""
        s = self.settings
        names = s.topics.names

        def ledgers() -> dict[int, Ledger]:
            return {p: hosted.ledger for p, hosted in list(host.hosted.items())}

        if s.rebuild.mode != "compact":
            self.refresh = MemberRefresh(
                lanes=ownership.lanes,
                open_publisher=lambda: self._clients.idempotent("refresh", REFRESH_PRODUCER),
                inner_topic=names.inner,
                settings=s.rebuild,
                clock=self._clock,
                metrics=self.metrics,
            )
            return [MemberDeleter(ledgers, s.delete, host.store_lock)], [self.refresh]
        restatements = self._clients.idempotent("restater", stop_flush_s=_STOP_FLUSH_S)
        self.restater = MemberRestater(
            lanes=ownership.lanes,
            publisher=restatements,
            inner_topic=names.inner,
            clock=self._clock,
            tombstone_retention_ms=int(s.delete.tombstone_retention_s * 1000),
        )
        tombstones = self._clients.idempotent(
            "expiry", REFRESH_PRODUCER, stop_flush_s=_STOP_FLUSH_S
        )
        stopping = threading.Event()
        expiry = ExpiryWriter(
            publisher=tombstones,
            inner_topic=names.inner,
            partition=lambda _message_id: 0,  # unused: each partition's share names its own
            delivering=lambda: bool(delivering()),
            rate=s.rebuild.refresh_rate,
            metrics=self.metrics,
            stopping=stopping,
        )
        deleter = MemberDeleter(
            ledgers, s.delete, host.store_lock, expiry, delivering, stop=stopping
        )
        return [tombstones, deleter], [restatements, self.restater]

    def _standing(self) -> frozenset[int]:
        """The partitions this member could deliver: none once it is leaving (it claims
        nothing then, and nobody hands it anything)."""
        if self._leaving.is_set() or self.host is None:
            return frozenset()
        return self.host.standing()

    def _standing_to_claim(self) -> frozenset[int]:
        """What the rounds may claim: the standing partitions and, after a fence, those this
        member delivered until then (``OwnershipRound.retaking``), not yet read again. Not
        said on the readiness board: other nodes hand over to, and drop copies for, a node
        whose replica stands, and a thawed node's may lack what another committed since."""
        if self._leaving.is_set() or self.host is None:
            return frozenset()
        ownership = self.ownership
        return self.host.standing(frozenset() if ownership is None else ownership.retaking)

    def _members(self) -> frozenset[str] | None:
        """The member list the rounds place over: without this node once it is leaving, so
        that they hand each partition it delivers to its successor."""
        membership = self._membership
        members = None if membership is None else membership.members
        if members is not None and self._leaving.is_set():
            return members - {self._node}
        return members

    def _progress_topic(self, partition: int) -> str:
        names = self.settings.topics.names
        return names.progress(names.shard_group(self._cluster, partition))

    def _unwritable(self, topics: Collection[str]) -> set[str]:
        """Which of ``topics`` Kafka refuses this member (a dead letter's question), through
        one admin client made at the first question: most members never ask one."""
        if self._topic_admin is None:
            self._topic_admin = self._clients.admin()
        return unwritable_topics(self._topic_admin, topics, TOPIC_CHECK_TIMEOUT_S)

    # -- stop ---------------------------------------------------------------------------------

    def stop(self) -> bool:
        """Leave the group, hand every partition over once the others see it gone (bounded by
        ``node.shutdown_timeout_s``), then stop everything in reverse order."""
        if self._stopped.is_set():
            return True
        self._stopped.set()
        timeout_s = self.settings.node.shutdown_timeout_s
        deadline = time.monotonic() + timeout_s
        membership = self._membership
        others: frozenset[str] = frozenset()
        if membership is not None:
            others = (membership.members or frozenset()) - {self._node}
            self._leaving.set()
            membership.stop()
            membership.join(10.0)
            membership.wait_seen_gone(max(0.0, deadline - time.monotonic()))
        ownership = self.ownership
        while (
            others
            and ownership is not None
            and ownership.delivering
            and time.monotonic() < deadline
        ):
            time.sleep(0.05)  # the rounds hand each partition to its successor once it stands
        if others and ownership is not None and ownership.delivering:
            log.warning("handover_incomplete", partitions=sorted(ownership.delivering))
        clean = True
        for component in reversed(self._components):
            if component is membership:
                continue
            component.stop()
            component.join(max(0.1, deadline - time.monotonic()))
            if component.is_alive():
                clean = False
        if self._admin is not None:
            self._admin.stop()
            self._admin.join(5.0)
        if self._database is not None and clean:
            if self.host is not None:
                for hosted in self.host.hosted.values():
                    hosted.store.close()
            self._database.close()
        log.info("cluster_member_stopped", node=self._node, clean=clean)
        return clean

    def fatal_error(self) -> str | None:
        """Why this member cannot go on, or None."""
        return self._fatal.reason

    def run(self) -> int:
        """Run until SIGTERM or SIGINT; returns the process exit code."""
        return run_foreground(self.start, self.stop, self.fatal_error, self._stop_requested)
