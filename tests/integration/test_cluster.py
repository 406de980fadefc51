"""A cluster on the real broker: partitions placed from the consumer group's members, each
delivered by one fenced owner, moved when nodes join and leave, exactly once throughout.

Nodes run in this process (separate stores, node ids and Kafka clients). What today's hand
split does instead (``node.owned_partitions``): two nodes given overlapping partitions deliver
those twice, a partition nobody was given is never delivered, and a node added to a topic with
retained past-due records delivers them again; here no partition list is set at all.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.cimpl import NewPartitions

from chronos.cli.cluster import lines
from chronos.cluster.status import ClusterStatus, PartitionView, cluster_status
from chronos.errors import ConfigError
from chronos.kafka.admin import ensure_topics
from chronos.kafka.clients import KafkaClients
from chronos.runtime.cluster_node import ClusterNode
from chronos.settings import ChronosSettings
from proxy.client import DelayClient
from tests.integration.harness import (
    Inbox,
    admin_api_answers_for_the_cluster,
    exactly_once_after_markers,
    ids_per_partition,
    make_settings,
    send_ids,
    wait_until,
)

pytestmark = pytest.mark.kafka_only(
    reason="exactly once for read_committed consumers needs aborted records hidden"
)

_PARTITIONS = 4


class Cluster:
    """Nodes of one test cluster, each stopped once at the end."""

    def __init__(self, bootstrap: str, namespace: str, tmp_path: Path) -> None:
        self.bootstrap, self.namespace, self.tmp_path = bootstrap, namespace, tmp_path
        self.nodes: dict[str, ClusterNode] = {}

    def settings(self, name: str, **sections: dict[str, Any]) -> ChronosSettings:
        return make_settings(
            self.bootstrap,
            self.namespace,
            self.tmp_path / name,
            node={"node_id": name, "data_dir": self.tmp_path / name, "ingest_threads": 1},
            cluster={"name": "c", "standby_replicas": 1},
            **sections,
        )

    def start(self, name: str) -> ClusterNode:
        node = ClusterNode(self.settings(name))
        node.start()
        self.nodes[name] = node
        return node

    def stop(self, name: str) -> None:
        assert self.nodes.pop(name).stop(), f"{name} did not stop cleanly"

    def masters(self) -> dict[int, list[str]]:
        """Per partition, the nodes whose replica of it delivers now."""
        found: dict[int, list[str]] = {p: [] for p in range(_PARTITIONS)}
        for name, node in self.nodes.items():
            host = node.host
            assert host is not None
            for partition, shard in list(host.shards.items()):
                if shard.role == "master":
                    found[partition].append(name)
        return found

    def settled(self, owners: dict[str, int]) -> bool:
        """Every partition has one master, and each node masters as many as ``owners``."""
        masters = self.masters()
        if any(len(m) != 1 for m in masters.values()):
            return False
        counts = {name: 0 for name in self.nodes}
        for (master,) in masters.values():
            counts[master] += 1
        return counts == owners

    def stop_all(self) -> None:
        for node in self.nodes.values():
            node.stop()


@pytest.fixture
def cluster(kafka_bootstrap: str, namespace: str, tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(kafka_bootstrap, namespace, tmp_path)
    try:
        yield c
    finally:
        c.stop_all()


def _send(client: DelayClient, topic: str, ids: list[str], delay_s: float) -> set[str]:
    return send_ids(client, topic, ids, delay_s)


def _spread(prefix: str, per_partition: int) -> list[str]:
    """Ids that land ``per_partition`` on each inner partition."""
    return ids_per_partition(prefix, _PARTITIONS, per_partition)


def _status_shows_what_runs(cluster: Cluster, settings: ChronosSettings) -> None:
    """``chronos cluster`` names, per partition, the node that delivers it (the nodes' own
    view, ``Cluster.masters``), its owner and standby, and the replicas' states (announced
    every few seconds: asked again until they are in)."""
    clients = KafkaClients(settings.kafka, "test-cluster-status")
    masters = {p: names[0] for p, names in cluster.masters().items()}
    seen: list[ClusterStatus] = []

    def shows_them() -> bool:
        status = cluster_status(settings, clients)
        seen[:] = [status]
        return status.members == ["a", "b"] and all(
            view.delivering == masters[view.partition] == view.owner
            and view.standbys == [n for n in ("a", "b") if n != view.owner]
            and {r.node: r.state for r in view.replicas}
            == {view.owner: "master", view.standbys[0]: "eligible"}
            for view in view_list(status)
        )

    wait_until(shows_them, 60, "the status shows owners, standbys and states")
    assert lines(seen[0])[-1] == f"every partition is delivered ({_PARTITIONS})"


def view_list(status: ClusterStatus) -> list[PartitionView]:
    assert [v.partition for v in status.partitions] == list(range(_PARTITIONS))
    return status.partitions


def test_nodes_of_a_cluster_share_the_partitions_and_a_leaving_node_hands_them_over(
    cluster: Cluster, namespace: str
) -> None:
    cluster.start("a")
    wait_until(lambda: cluster.settled({"a": _PARTITIONS}), 60, "a delivers every partition")
    cluster.start("b")
    wait_until(lambda: cluster.settled({"a": 2, "b": 2}), 60, "a and b deliver two each")
    topic = f"{namespace}-target"
    settings = cluster.nodes["a"].settings
    _status_shows_what_runs(cluster, settings)
    with Inbox(settings, [topic]) as inbox, DelayClient(settings) as client:
        shared = _send(client, topic, _spread("shared-", 10), 0.5)
        exactly_once_after_markers(inbox, client, topic, shared, "m1-")
        ports = {name: node.admin_port for name, node in cluster.nodes.items()}
        admin_api_answers_for_the_cluster(ports, "b", shared, _PARTITIONS)
        # Pending across the handover: due after a leaves.
        pending = _send(client, topic, _spread("pending-", 10), 4.0)
        cluster.stop("a")
        wait_until(lambda: cluster.settled({"b": _PARTITIONS}), 60, "b delivers every partition")
        exactly_once_after_markers(inbox, client, topic, pending, "m2-")


def test_a_node_added_under_load_takes_its_share_without_delivering_the_past_again(
    cluster: Cluster, namespace: str
) -> None:
    cluster.start("a")
    wait_until(lambda: cluster.settled({"a": _PARTITIONS}), 60, "a delivers every partition")
    topic = f"{namespace}-target"
    settings = cluster.nodes["a"].settings
    with Inbox(settings, [topic]) as inbox, DelayClient(settings) as client:
        # Delivered before b exists: retained in the inner topic, past due when b restores.
        past = _send(client, topic, _spread("past-", 10), 0.2)
        assert inbox.wait_for(past, 60)
        later = _send(client, topic, _spread("later-", 10), 6.0)
        cluster.start("b")
        wait_until(lambda: cluster.settled({"a": 2, "b": 2}), 180, "b took its share")
        exactly_once_after_markers(inbox, client, topic, past | later, "m-")


def test_a_node_refuses_to_start_once_partitions_were_added_to_its_clusters_topic(
    cluster: Cluster,
) -> None:
    """Adding partitions sends a later cancel of an id elsewhere than its add; Kafka cannot
    refuse an operator's ``--alter``, so the next node of the cluster does, naming both
    counts (today's hand split starts and mis-delivers). The cluster's topics are made as its
    first node makes them (``ensure_topics``), without running one."""
    settings = cluster.settings("b")
    ensure_topics(settings)
    admin = KafkaClients(settings.kafka, "test-alter").admin()
    inner = settings.topics.names.inner
    admin.create_partitions([NewPartitions(inner, _PARTITIONS + 2)])[inner].result(30)
    wait_until(
        lambda: (
            len(admin.list_topics(inner, timeout=10).topics[inner].partitions) == _PARTITIONS + 2
        ),
        60,
        "the broker lists the added partitions",
    )
    node = ClusterNode(settings)
    with pytest.raises(ConfigError, match=f"has {_PARTITIONS + 2} partitions, but cluster c"):
        node.start()
    node.stop()
