"""A cluster member of the node shape as the admin API sees it (``admin.view.NodeView``):
health, readiness, gauges and metrics of the one engine, and status, listing and forecast
across the cluster (``cluster/lookup.py``: the hosted partitions' schedules here, the others
asked of the members delivering them).

Health: every worker of the member runs, no fatal error, the database's disk above its
reserve. Readiness: it is a member, its ingest caught up, Kafka answers its cancel gate, and
every partition the placement gives it is delivered here or stands (caught up, complete):
what a rolling restart waits for before the next node, so that every partition has a warm
standby again. One ``/metrics`` for the node (one engine: its counters are the node's), and
per partition its role, delivery lag and stored messages (``partition_metrics.py``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

import structlog

from chronos.admin.view import Check, Gauges, Report, ScheduleReader
from chronos.clock import Clock
from chronos.cluster.lookup import ClusterLookup, LocalLookup
from chronos.cluster.partition_metrics import PartitionGauges
from chronos.cluster.peers import Peers
from chronos.cluster.placement import Placement
from chronos.delivery.policies import Policies
from chronos.group.claims import Holding
from chronos.group.hosted import Hosted
from chronos.lifecycle import Component
from chronos.metrics import MetricsReader
from chronos.runtime.probes import delivery_lag_ms, kafka_check
from chronos.schedule.lookup import Lookup

log = structlog.get_logger(__name__)

ROLE = "cluster"


class HostState(Protocol):
    """What the view reads of the member's host (``member_host.MemberHost``)."""

    @property
    def hosted(self) -> Mapping[int, Hosted]: ...

    def placement(self) -> Placement | None: ...
    def standing(self) -> frozenset[int]: ...
    def caught_up(self) -> bool: ...
    def proven_ms(self) -> int | None: ...


class MemberView:
    """Answers the admin API's questions about one member.

    Parameters:
        node_id: this member.
        partitions: the inner topic's partition count.
        host: its hosted partitions' schedules and its ingest.
        delivering: the partitions its delivery loop holds lanes of now.
        holdings: who holds each followed partition, as its log says (``StandbysWorker``).
        members: the cluster's members as last read (None before the first answer).
        components: the member's workers (each must run).
        fatal: why the member cannot go on, or None.
        disk_problem: why its database refuses writes now (below the disk reserve), or None.
        peers: the other members' admin APIs.
        metrics: the member's counters.
        policies: the delivery policies it delivers with.
        clock: time source.
        scan_max: most stored messages a listing page reads (``admin.list_scan_max``).
        kafka_silence_s: how long the cancel gate may go unproven before readiness fails.
    """

    def __init__(
        self,
        *,
        node_id: str,
        partitions: int,
        host: HostState,
        delivering: Callable[[], frozenset[int]],
        holdings: Callable[[], Mapping[int, Holding]],
        members: Callable[[], frozenset[str] | None],
        components: Callable[[], Sequence[Component]],
        fatal: Callable[[], str | None],
        disk_problem: Callable[[], str | None],
        peers: Peers,
        metrics: MetricsReader,
        policies: Policies,
        clock: Clock,
        scan_max: int,
        kafka_silence_s: float,
    ) -> None:
        self._node_id = node_id
        self._host = host
        self._delivering = delivering
        self._holdings = holdings
        self._members = members
        self._components = components
        self._fatal = fatal
        self._disk_problem = disk_problem
        self._metrics = metrics
        self._policies = policies
        self._clock = clock
        self._scan_max = scan_max
        self._kafka_silence_s = kafka_silence_s
        self._lock = threading.Lock()
        #: Each hosted schedule's reader, keyed by partition with the ``Hosted`` it reads (a
        #: partition dropped and hosted again is a new schedule).
        self._readers: dict[int, tuple[Hosted, Lookup]] = {}
        self._local = LocalLookup(partitions, self._standing_reader, self._delivering_readers)
        self._lookup = ClusterLookup(node_id, self._local, peers, self._member_list, self._hosts_of)

    @property
    def metrics(self) -> MetricsReader:
        return self._metrics

    @property
    def lookup(self) -> ClusterLookup:
        return self._lookup

    @property
    def local_lookup(self) -> LocalLookup:
        return self._local

    def policies(self) -> dict[str, object]:
        return self._policies.as_json()

    # -- readers ------------------------------------------------------------------------------

    def _readers_now(self) -> dict[int, tuple[Hosted, Lookup]]:
        """A reader per hosted schedule, made once per schedule; the forecast's per-minute
        counts of a schedule start with its reader (as a node's admin API starts them)."""
        hosted = dict(self._host.hosted)
        with self._lock:
            for partition in list(self._readers):
                if self._readers[partition][0] is not hosted.get(partition):
                    del self._readers[partition]
            for partition, schedule in hosted.items():
                if partition not in self._readers:
                    schedule.store.start_due_counts()
                    lookup = Lookup(schedule.store, schedule.ledger, self._scan_max)
                    self._readers[partition] = (schedule, lookup)
            return dict(self._readers)

    def _standing_reader(self, partition: int) -> ScheduleReader | None:
        """A status is answered by a schedule delivered or standing here: complete."""
        if partition not in self._delivering() and partition not in self._host.standing():
            return None
        found = self._readers_now().get(partition)
        return None if found is None else found[1]

    def _delivering_readers(self) -> dict[int, ScheduleReader]:
        delivering = self._delivering()
        return {p: lookup for p, (_, lookup) in self._readers_now().items() if p in delivering}

    def _member_list(self) -> list[str]:
        return sorted(self._members() or ())

    def _placement(self) -> Placement | None:
        return self._host.placement()

    def _hosts_of(self, partition: int) -> list[str]:
        """Whom to ask about ``partition``, the one delivering it first (its outcomes are
        recorded there; a standby knows every state, not where a delivery went): this
        member when it delivers it, else the holder its log names, then the placement's."""
        order: list[str] = []
        if partition in self._delivering():
            order.append(self._node_id)
        holding = self._holdings().get(partition)
        if holding is not None and holding.node:
            order.append(holding.node)
        placement = self._placement()
        if placement is not None:
            order.extend(placement.hosts.get(partition, ()))
        return list(dict.fromkeys(order))

    # -- reports ------------------------------------------------------------------------------

    def _facts(self) -> dict[str, object]:
        placement = self._placement()
        return {
            "node": self._node_id,
            "role": ROLE,
            "shape": "node",
            "term": 0,
            "owns": [] if placement is None else sorted(placement.owned_by(self._node_id)),
            "hosts": sorted(self._host.hosted),
            "delivers": sorted(self._delivering()),
            "standing": sorted(self._host.standing()),
        }

    def health(self) -> Report:
        stopped = [c.name for c in self._components() if not c.is_alive()]
        fatal = self._fatal()
        disk = self._disk_problem()
        checks = [
            Check(
                "components",
                not stopped,
                f"not running: {', '.join(stopped)}" if stopped else "all running",
            ),
            Check("kafka_clients", fatal is None, fatal or "no fatal error"),
            Check("disk", disk is None, disk or "above the reserve"),
        ]
        return Report(checks, self._facts())

    def _kafka(self) -> Check:
        """Kafka as the member's cancel gate sees it (``probes.kafka_check``)."""
        return kafka_check(self._host.proven_ms(), self._clock.now_ms(), self._kafka_silence_s)

    def readiness(self) -> Report:
        members = self._members()
        member = members is not None and self._node_id in members
        placement = self._placement()
        wanted = set() if placement is None else placement.hosted_by(self._node_id)
        covered = self._delivering() | self._host.standing()
        behind = sorted(wanted - covered)
        caught_up = self._host.caught_up()
        checks = [
            Check("healthy", self.health().ok, "see /healthz"),
            Check("member", member, "in the cluster's group" if member else "not a member yet"),
            Check(
                "placed",
                placement is not None,
                "placed over the members" if placement is not None else "not placed yet",
            ),
            Check(
                "ingest_caught_up",
                caught_up,
                "applied the inner topic up to its end" if caught_up else "catching up",
            ),
            self._kafka(),
            Check(
                "partitions_standing",
                member and placement is not None and not behind,
                f"neither delivered nor standing yet: partitions {behind}"
                if behind
                else "every partition placed here delivered or standing",
            ),
        ]
        return Report(checks, self._facts())

    def partition_gauges(self) -> list[PartitionGauges]:
        """Per hosted partition: its role here, delivery lag and stored messages."""
        delivering = self._delivering()
        standing = self._host.standing()
        now_ms = self._clock.now_ms()
        rows: list[PartitionGauges] = []
        for partition, (schedule, _) in sorted(self._readers_now().items()):
            role = (
                "master"
                if partition in delivering
                else ("backup" if partition in standing else "starting")
            )
            stored, lag = self._read_gauges(schedule, role == "master", now_ms)
            rows.append(PartitionGauges(partition, role, lag, stored, schedule.ledger.seek_ms))
        return rows

    @staticmethod
    def _read_gauges(schedule: Hosted, delivered: bool, now_ms: int) -> tuple[int, int]:
        """Stored messages and delivery lag of one schedule: (0, 0) for one dropped between
        the list and the read (its families closed)."""
        try:
            stored = schedule.store.messages_estimate()
            lag = delivery_lag_ms(schedule.store, schedule.ledger.seek_ms, now_ms)
        except Exception:  # rocksdict raises plain Exceptions on a closed family
            return 0, 0
        return stored, lag if delivered else 0

    def gauges(self) -> Gauges:
        """Node-wide numbers: the oldest seek and the latest delivery lag of the partitions it
        delivers, the messages of every hosted schedule."""
        rows = self.partition_gauges()
        delivering = [r for r in rows if r.role == "master"]
        return Gauges(
            role=ROLE,
            term=0,
            seek_ms=min((r.seek_ms for r in delivering), default=0),
            now_ms=self._clock.now_ms(),
            stored_messages=sum(r.stored_messages for r in rows),
            ready=self.readiness().ok,
            delivery_lag_ms=max((r.delivery_lag_ms for r in delivering), default=0),
        )

    def replicas(self) -> list[dict[str, object]]:
        """One row per hosted partition (the dashboard's table)."""
        now_ms = self._clock.now_ms()
        return [
            {
                "node": f"{self._node_id}.p{row.partition}",
                "partition": row.partition,
                "role": row.role,
                "term": None,
                "ingest_lag": None,
                "seek_lag_s": max(0, now_ms - row.seek_ms) / 1000.0 if row.seek_ms else None,
            }
            for row in self.partition_gauges()
        ]
