"""A cluster node as the admin API sees it (``admin.view.NodeView``): health, readiness,
gauges and metrics over the partitions it hosts, and lookups across the cluster.

Health: the node's own workers and every hosted replica healthy. Readiness: it is a member,
it hosts a replica of every partition the placement gives it, and each of them stands (caught
up, store complete): what a rolling restart waits for before the next node, so that every
partition has a warm standby again. Metrics merge the replicas' (per-partition series come
from ``partition_metrics.py``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from chronos.admin.view import Check, Gauges, Report, ScheduleReader
from chronos.cluster.lookup import ClusterLookup, LocalLookup
from chronos.cluster.partition_metrics import PartitionGauges
from chronos.cluster.peers import Peers
from chronos.delivery.policies import Policies
from chronos.metrics import MergedMetrics, MetricsReader
from chronos.runtime.probes import NodeProbes
from chronos.runtime.shard import Shard
from chronos.runtime.shard_host import ShardHost

ROLE = "cluster"


class ClusterView:
    """Answers the admin API's questions about one cluster node.

    Parameters:
        node_id: this node.
        host: its partitions' replicas.
        members: the cluster's members as last read (None before the first answer).
        fatal: why the node cannot go on, or None.
        peers: the other nodes' admin APIs.
        partitions_problem: why the inner topic's partition count is not the one placed for,
            or None (``partitions.py``).
    """

    def __init__(
        self,
        *,
        node_id: str,
        host: ShardHost,
        members: Callable[[], frozenset[str] | None],
        fatal: Callable[[], str | None],
        peers: Peers,
        partitions_problem: Callable[[], str | None] = lambda: None,
        policies: Policies | None = None,
    ) -> None:
        self._policies = policies or Policies({})
        self._node_id = node_id
        self._host = host
        self._members = members
        self._fatal = fatal
        self._partitions_problem = partitions_problem
        self._lock = threading.Lock()
        #: Each hosted replica's probes, built once its node runs (keyed by the shard object:
        #: a partition stopped and hosted again is a new replica with new counters).
        self._probes: dict[int, tuple[Shard, NodeProbes]] = {}
        self.local_lookup = LocalLookup(host.partitions, self._standing, self._delivering)
        self.lookup = ClusterLookup(
            node_id, self.local_lookup, peers, self._member_list, self._hosts_of
        )
        self.metrics: MetricsReader = MergedMetrics(
            lambda: [probes.metrics for _, probes in self.hosted().values()]
        )

    def hosted(self) -> dict[int, tuple[Shard, NodeProbes]]:
        """Partition -> (its replica here, its probes), for every replica that runs."""
        shards = dict(self._host.shards)
        with self._lock:
            for partition in list(self._probes):
                if self._probes[partition][0] is not shards.get(partition):
                    del self._probes[partition]
            for partition, shard in shards.items():
                context = shard.node.context
                if partition in self._probes or context is None or not shard.node.started:
                    continue
                # The forecast's per-minute counts, kept from now on (as a node's admin API
                # starts them).
                context.store.start_due_counts()
                self._probes[partition] = (shard, NodeProbes(shard.node, context))
            return dict(self._probes)

    def _standing(self, partition: int) -> ScheduleReader | None:
        found = self.hosted().get(partition)
        if found is None or not found[0].ready:
            return None
        return found[1].lookup

    def _delivering(self) -> dict[int, ScheduleReader]:
        return {
            p: probes.lookup
            for p, (shard, probes) in self.hosted().items()
            if shard.role == "master"
        }

    def _member_list(self) -> list[str]:
        return sorted(self._members() or ())

    def _hosts_of(self, partition: int) -> list[str]:
        placement = self._host.placement
        return [] if placement is None else list(placement.hosts.get(partition, ()))

    def _facts(self) -> dict[str, object]:
        placement = self._host.placement
        hosted = self.hosted()
        return {
            "node": self._node_id,
            "role": ROLE,
            "term": 0,
            "owns": [] if placement is None else sorted(placement.owned_by(self._node_id)),
            "hosts": sorted(hosted),
            "delivers": sorted(p for p, (shard, _) in hosted.items() if shard.role == "master"),
            "standing": sorted(p for p, (shard, _) in hosted.items() if shard.ready),
        }

    def health(self) -> Report:
        fatal = self._fatal()
        sick = {
            p: [c.name for c in report.checks if not c.ok]
            for p, (_, probes) in self.hosted().items()
            if not (report := probes.health()).ok
        }
        checks = [
            Check("kafka_clients", fatal is None, fatal or "no fatal error"),
            Check(
                "partitions",
                not sick,
                f"failing checks by partition: {sick}" if sick else "every replica healthy",
            ),
        ]
        return Report(checks, self._facts())

    def readiness(self) -> Report:
        members = self._members()
        placement = self._host.placement
        member = members is not None and self._node_id in members
        wanted = set() if placement is None else placement.hosted_by(self._node_id)
        hosted = self.hosted()
        missing = sorted(wanted - set(hosted))
        restoring = sorted(p for p, (shard, _) in hosted.items() if p in wanted and not shard.ready)
        changed = self._partitions_problem()
        checks = [
            Check("healthy", self.health().ok, "see /healthz"),
            Check("member", member, "in the cluster's group" if member else "not a member yet"),
            Check(
                "replicas_running",
                member and not missing,
                f"not started yet: partitions {missing}" if missing else "every hosted partition",
            ),
            Check(
                "replicas_standing",
                member and not restoring,
                f"restoring or catching up: partitions {restoring}"
                if restoring
                else "every hosted replica caught up and complete",
            ),
            Check("inner_partitions", changed is None, changed or "as placed"),
        ]
        return Report(checks, self._facts())

    def gauges(self) -> Gauges:
        """Node-wide numbers: the oldest seek and the latest delivery lag of the partitions it
        delivers, the messages of every hosted store."""
        every = [probes.gauges() for _, probes in self.hosted().values()]
        delivering = [g for g in every if g.role == "master"]
        stored = sum(g.stored_messages for g in every)
        now_ms = max((g.now_ms for g in delivering), default=0)
        return Gauges(
            role=ROLE,
            term=0,
            seek_ms=min((g.seek_ms for g in delivering), default=0),
            now_ms=now_ms,
            stored_messages=stored,
            ready=self.readiness().ok,
            delivery_lag_ms=max((g.delivery_lag_ms for g in delivering), default=0),
        )

    def policies(self) -> dict[str, object]:
        """A cluster's partitions deliver with the configured policies (none set live)."""
        return self._policies.as_json()

    def partition_gauges(self) -> list[PartitionGauges]:
        """Per hosted replica: its role, delivery lag, stored messages and counters."""
        rows: list[PartitionGauges] = []
        for partition, (shard, probes) in sorted(self.hosted().items()):
            g = probes.gauges()
            rows.append(
                PartitionGauges(
                    partition,
                    shard.role,
                    g.delivery_lag_ms,
                    g.stored_messages,
                    g.seek_ms,
                    probes.metrics.totals(),
                )
            )
        return rows

    def replicas(self) -> list[dict[str, object]]:
        """One row per hosted partition's replica (the dashboard's table)."""
        rows: list[dict[str, object]] = []
        for partition, (shard, probes) in sorted(self.hosted().items()):
            g = probes.gauges()
            rows.append(
                {
                    "node": f"{self._node_id}.p{partition}",
                    "partition": partition,
                    "role": shard.role,
                    "term": g.term,
                    "ingest_lag": None,
                    "seek_lag_s": max(0, g.now_ms - g.seek_ms) / 1000.0 if g.seek_ms else None,
                }
            )
        return rows
