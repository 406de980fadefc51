"""What ``chronos cluster`` reports: the members, and per partition its owner and standbys as
the placement names them, who actually delivers it, and each replica's state and ingest lag.

The placement is what every node computes from the member list (``placement.py``); what a
partition's replicas do is read from Kafka like a replica group's (``group/status.py``: each
partition is a group of one partition). The two differ while a partition moves: a new owner
restores or waits for its replica to stand, and the old one delivers until it hands over.
"""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from confluent_kafka import KafkaException

from chronos.cluster.member_status import (
    delivering,
    holders,
    placed_chain,
    read_board,
    replica_states,
)
from chronos.cluster.placement import Placement
from chronos.cluster.shard_settings import shard_settings
from chronos.errors import ConfigError
from chronos.group.spec import GroupSpec
from chronos.group.status import SILENT_AFTER_MS, GroupStatus, group_status, inner_watermarks
from chronos.kafka.admin import partition_count
from chronos.kafka.clients import KafkaClients
from chronos.settings import ChronosSettings

#: Partitions asked about at once (each asks Kafka a few questions).
_PARALLEL = 8


@dataclass
class ReplicaView:
    """One node's replica of a partition, as it announced itself."""

    node: str
    #: restoring, incomplete, eligible, master (None: it said nothing recently).
    state: str | None
    ingest_lag: int | None
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class PartitionView:
    """One inner partition: where the placement puts it, and what happens there."""

    partition: int
    owner: str | None
    standbys: list[str]
    #: The node whose replica committed the partition's progress recently (None: nobody
    #: delivers it now: a takeover or a restore under way, or no member at all).
    delivering: str | None
    term: int | None
    committed_age_ms: int | None
    replicas: list[ReplicaView] = field(default_factory=list)


@dataclass
class ClusterStatus:
    """The cluster as Kafka shows it now."""

    cluster: str
    members: list[str]
    standby_replicas: int
    partitions: list[PartitionView] = field(default_factory=list)

    @property
    def undelivered(self) -> list[int]:
        """The partitions nobody delivers now."""
        return [p.partition for p in self.partitions if p.delivering is None]

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "undelivered": self.undelivered}


def node_of(replica: str) -> str:
    """The cluster node of a partition's replica id (``<node>.p<N>``, ``shard.py``)."""
    node, _, suffix = replica.rpartition(".p")
    return node if node and suffix.isdigit() else replica


def partition_view(partition: int, placement: Placement, group: GroupStatus) -> PartitionView:
    """A partition's line: the placement's intent beside its group's state."""
    chain = placement.hosts.get(partition, ())
    return PartitionView(
        partition=partition,
        owner=chain[0] if chain else None,
        standbys=list(chain[1:]),
        delivering=None if group.master is None else node_of(group.master),
        term=group.term,
        committed_age_ms=group.committed_age_ms,
        replicas=[
            ReplicaView(node_of(m.node), m.state, m.ingest_lag, dict(m.detail))
            for m in group.members
        ],
    )


def cluster_status(
    settings: ChronosSettings, clients: KafkaClients, timeout_s: float = 10.0
) -> ClusterStatus:
    """Ask Kafka about ``cluster.name``: its members, then every partition's group."""
    name = settings.cluster.name
    if name is None:
        raise ConfigError("cluster.name is not set: this node is not in a cluster")
    names = settings.topics.names
    group = names.cluster_group(name)
    admin = clients.admin()  # held: a client dropped before its answer never answers
    try:
        described = admin.describe_consumer_groups([group])[group].result(timeout_s)
    except KafkaException as exc:
        raise ConfigError(f"cannot describe the cluster's group {group}: {exc}") from exc
    members = frozenset(member.client_id for member in described.members)
    partitions = partition_count(settings, names.inner)
    placement = Placement.of(members, partitions, settings.cluster.standby_replicas)
    if settings.cluster.shape == "node":
        return ClusterStatus(
            cluster=name,
            members=sorted(members),
            standby_replicas=settings.cluster.standby_replicas,
            partitions=_member_views(settings, clients, members, placement, partitions, timeout_s),
        )
    specs = [_spec(settings, p) for p in range(partitions)]
    watermarks = inner_watermarks(specs[0], clients, timeout_s)
    silent_after_ms = max(SILENT_AFTER_MS, 4 * settings.group.progress_interval_ms)
    with ThreadPoolExecutor(max_workers=_PARALLEL, thread_name_prefix="cluster-status") as pool:
        groups = list(
            pool.map(
                lambda spec: group_status(spec, clients, timeout_s, silent_after_ms, watermarks),
                specs,
            )
        )
    return ClusterStatus(
        cluster=name,
        members=sorted(members),
        standby_replicas=settings.cluster.standby_replicas,
        partitions=[partition_view(p, placement, g) for p, g in enumerate(groups)],
    )


def _member_views(
    settings: ChronosSettings,
    clients: KafkaClients,
    members: frozenset[str],
    placement: Placement,
    partitions: int,
    timeout_s: float,
) -> list[PartitionView]:
    """The node shape's partitions (``member_status.py``): holders from the claims, states
    from the readiness board."""
    name = settings.cluster.name
    assert name is not None
    names = settings.topics.names
    reader = names.progress_reader_group(f"status-{uuid.uuid4().hex[:8]}", "cli")
    held = holders(
        clients,
        lambda p: names.progress(names.shard_group(name, p)),
        partitions,
        reader,
        timeout_s,
    )
    board = read_board(clients, names.cluster_status(name), reader, timeout_s)
    stale_after_ms = max(SILENT_AFTER_MS, 4 * settings.group.progress_interval_ms)
    views: list[PartitionView] = []
    for partition in range(partitions):
        chain = placed_chain(placement, partition)
        states = replica_states(partition, chain, held[partition], members, board, stale_after_ms)
        views.append(
            PartitionView(
                partition=partition,
                owner=chain[0] if chain else None,
                standbys=chain[1:],
                delivering=delivering(held[partition], members),
                term=held[partition].term or None,
                committed_age_ms=None,
                replicas=[ReplicaView(node, state, None) for node, state in states.items()],
            )
        )
    return views


def _spec(settings: ChronosSettings, partition: int) -> GroupSpec:
    spec = GroupSpec.of(shard_settings(settings, partition))
    if spec is None:  # shard settings always name the partition's group
        raise ConfigError(f"partition {partition} has no group")
    return spec
