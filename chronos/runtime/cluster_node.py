"""A cluster node: a member of the cluster's consumer group, hosting the partitions the
placement gives it, each as a replica of its own (``shard.py``)."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

import structlog
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from chronos.clock import Clock, SystemClock
from chronos.cluster.membership import GroupDescriber, Membership
from chronos.cluster.partitions import PartitionWatch, check_unchanged
from chronos.cluster.readiness import ReadinessBoard
from chronos.errors import ConfigError
from chronos.kafka.admin import ensure_topics, partition_count
from chronos.kafka.clients import KafkaClients
from chronos.kafka.shared_ends import Ends, EndsFor, SharedEnds
from chronos.kafka.topic_config import check_inner_topic
from chronos.lifecycle import Component, Fatal
from chronos.runtime.foreground import run_foreground
from chronos.runtime.shard import Shard
from chronos.runtime.shard_host import ShardHost
from chronos.settings import ChronosSettings

if TYPE_CHECKING:
    from chronos.admin.server import AdminServer

log = structlog.get_logger(__name__)

#: How often a running node asks the inner topic's partition count (``partitions.py``).
_PARTITION_CHECK_S = 30.0
#: How long a description of the group may take before the last member list stands.
_DESCRIBE_TIMEOUT_S = 5.0
#: How often a node says its ready partitions when nothing changed, and how long another
#: node's word counts (a few intervals: a killed node is ready for nothing soon).
_BOARD_INTERVAL_S = 1.0
_BOARD_STALE_S = 3.5
#: How old the master watches' shared answer may be (each watch asks every 90 ms).
_WATCH_AGE_S = 0.08


def _ignored(error: object, message: object) -> None:
    """A board record's outcome: the next one replaces a lost one."""


class ClusterNode:
    """One node of ``cluster.name``.

    Parameters:
        settings: the settings tree (``cluster.name`` set).
        clock: time source (the system clock outside tests).
    """

    def __init__(self, settings: ChronosSettings, clock: Clock | None = None) -> None:
        name = settings.cluster.name
        if name is None:
            raise ConfigError("a cluster node needs cluster.name")
        self.settings = settings
        self._name = name
        self._clock = clock or SystemClock()
        self._fatal = Fatal()
        self._clients = KafkaClients(
            settings.kafka,
            settings.node.node_id,
            settings.limits.max_message_bytes,
            self._fatal.report,
        )
        self._membership: Membership | None = None
        self._board: ReadinessBoard | None = None
        self._partition_watch: PartitionWatch | None = None
        self._watch_admin: AdminClient | None = None
        self._workers: list[Component] = []
        self.host: ShardHost | None = None
        self._admin: AdminServer | None = None
        self._stopped = threading.Event()
        self._stop_requested = threading.Event()

    def start(self) -> None:
        """Create and check the topics, join the cluster, host what the placement says."""
        s = self.settings
        names = s.topics.names
        self._check_partition_count()
        if s.topics.create:
            ensure_topics(s, stopped=self._stop_requested.is_set)
        if s.rebuild.check_inner_topic:
            check_inner_topic(s)
        partitions = partition_count(s, names.inner)
        self._partition_watch = PartitionWatch(
            partitions, self._inner_partitions, _PARTITION_CHECK_S
        )
        ends_for = self._shared_ends()
        host = ShardHost(
            node_id=s.node.node_id,
            partitions=partitions,
            standbys=s.cluster.standby_replicas,
            new_shard=lambda p: Shard(s, p, self._clock, ends_for),
            grace_s=s.group.suspect_after_ms / 1000.0,
            handover_timeout_s=s.group.transaction_timeout_ms / 1000.0,
            on_fatal=self._fatal.report,
            ready=lambda node, partition, since: board.ready(node, partition, since),
        )
        status = self._clients.idempotent("cluster-status", stop_flush_s=2.0)
        admin_url = self._start_admin(host) if s.admin.enabled else None
        board = ReadinessBoard(
            node_id=s.node.node_id,
            topic=names.cluster_status(self._name),
            consumer=self._clients.consumer(
                names.progress_reader_group(s.node.node_id, "cluster-status"),
                self._clients.errors("readiness"),
                {"enable.auto.commit": False},
            ),
            errors=self._clients.errors("readiness"),
            produce=lambda key, value: status.publish(
                names.cluster_status(self._name), key, value, [], _ignored
            ),
            ready_now=host.ready_partitions,
            interval_s=_BOARD_INTERVAL_S,
            stale_after_s=_BOARD_STALE_S,
            admin_url=admin_url,
        )
        self._board = board
        group = names.cluster_group(self._name)

        describe = GroupDescriber(self._clients.admin, group, _DESCRIBE_TIMEOUT_S)

        membership = Membership(
            node_id=s.node.node_id,
            topic=names.cluster(self._name),
            group=group,
            options={
                "session.timeout.ms": s.group.session_timeout_ms,
                "heartbeat.interval.ms": s.group.heartbeat_interval_ms,
            },
            open_consumer=self._clients.consumer,
            errors=self._clients.errors("membership"),
            describe=describe,
            interval_s=s.cluster.membership_interval_ms / 1000.0,
            on_change=host.members_changed,
        )
        self.host, self._membership = host, membership
        self._workers = [status, board, host, membership, self._partition_watch]
        for worker in self._workers:
            worker.start()
        log.info(
            "cluster_node_started", node=s.node.node_id, cluster=self._name, partitions=partitions
        )

    def _check_partition_count(self) -> None:
        """Before any topic is made: refuse an inner topic whose partition count is not the
        one this cluster was created with (``partitions.py``)."""
        names = self.settings.topics.names
        admin = self._clients.admin()
        try:
            topics = admin.list_topics(timeout=_DESCRIBE_TIMEOUT_S).topics
        except KafkaException:
            return  # ensure_topics or partition_count says what is wrong with Kafka
        inner = topics.get(names.inner)
        if inner is not None and inner.error is None:
            check_unchanged(len(inner.partitions), topics, names, self._name)

    def _inner_partitions(self) -> int:
        """The inner topic's partition count now (the partition watch's question)."""
        if self._watch_admin is None:
            self._watch_admin = self._clients.admin()
        inner = self.settings.topics.names.inner
        metadata = self._watch_admin.list_topics(inner, timeout=_DESCRIBE_TIMEOUT_S)
        return len(metadata.topics[inner].partitions)

    def _start_admin(self, host: ShardHost) -> str:
        """The admin API over this node's partitions and, through the other nodes', the
        cluster; returns where the other nodes reach it. A port it cannot take ends the start
        with nothing running."""
        # Only when served (a web stack and Prometheus' client).
        from chronos.admin.server import serve_admin
        from chronos.cluster.partition_metrics import PartitionCollector
        from chronos.cluster.peers import Peers, admin_url_of
        from chronos.delivery.policies import Policies
        from chronos.runtime.cluster_view import ClusterView

        s = self.settings
        token = s.cluster.peer_token
        peers = Peers(
            lambda node: None if self._board is None else self._board.admin_url(node),
            None if token is None else token.get_secret_value(),
        )
        view = ClusterView(
            node_id=s.node.node_id,
            host=host,
            members=lambda: None if self._membership is None else self._membership.members,
            fatal=self.fatal_error,
            peers=peers,
            partitions_problem=lambda: (
                None if self._partition_watch is None else self._partition_watch.problem()
            ),
            policies=Policies(s.delivery.topics),
        )
        admin = serve_admin(view, s, [PartitionCollector(view.partition_gauges)])
        self._admin = admin
        return s.cluster.admin_url or admin_url_of(s, admin.port)

    @property
    def admin_port(self) -> int | None:
        """Where the admin API listens, None when it does not run."""
        return None if self._admin is None else self._admin.port

    def _shared_ends(self) -> EndsFor:
        """One question about partition ends for all replicas of this node, per interval: the
        cancel gates' (stable offsets, as often as ``node.watermark_interval_ms``) and the
        master watches' (high watermarks, about ten a second)."""
        watermark_s = self.settings.node.watermark_interval_ms / 1000.0
        stable = SharedEnds(
            self._clients.admin,
            min(30.0, max(1.0, 20 * watermark_s)),
            committed=True,
            max_age_s=0.8 * watermark_s,
        )
        high = SharedEnds(self._clients.admin, 0.5, committed=False, max_age_s=_WATCH_AGE_S)

        def ends_for(topic: str, partitions: list[int], committed: bool) -> Ends:
            return (stable if committed else high).asker(topic, partitions)

        return ends_for

    def stop(self) -> bool:
        """Leave the group, let the others see it, hand every partition this node delivers to
        its next owner, then stop the replicas.

        Leaving first: a successor whose member list still names this node would hand the
        partition straight back. Delivery goes on meanwhile; the gap is the handover alone."""
        if self._stopped.is_set():
            return True
        self._stopped.set()
        timeout_s = self.settings.node.shutdown_timeout_s
        clean = True
        if self._membership is not None:
            began = time.monotonic()
            self._membership.stop()
            self._membership.join(10.0)
            left = time.monotonic()
            seen = self._membership.wait_seen_gone(timeout_s)
            log.info(
                "cluster_left",
                node=self.settings.node.node_id,
                leave_ms=round((left - began) * 1000),
                seen_gone_ms=round((time.monotonic() - left) * 1000),
                seen_gone=seen,
            )
        if self.host is not None:
            self.host.stop()
            self.host.join(timeout_s * max(1, len(self.host.shards)))
            clean = not self.host.is_alive()
        for worker in reversed(self._workers[:2]):  # the board, then its publisher
            worker.stop()
            worker.join(5.0)
        if self._admin is not None:
            self._admin.stop()
            self._admin.join(5.0)
        log.info("cluster_node_stopped", node=self.settings.node.node_id, clean=clean)
        return clean

    def fatal_error(self) -> str | None:
        """Why this node cannot go on, or None."""
        if self._fatal.reason is not None:
            return self._fatal.reason
        return None if self.host is None else self.host.fatal_error()

    def run(self) -> int:
        """Run until SIGTERM or SIGINT; returns the process exit code."""
        return run_foreground(self.start, self.stop, self.fatal_error, self._stop_requested)
