"""A cluster of the node shape (``cluster.shape = "node"``, ``runtime/member.py``) on Apache
Kafka, end to end: requests through the proxy's client, one ingest, one store and one
producer per member, ownership by claims. A first member delivers every partition; a second
joins and takes its share by handovers; the first leaves and hands the rest over (its
successor waits for that, not fencing a member that left the group but still beats); each
message is delivered once and never early at ``read_committed``. Mutant caught: a holder out
of the member list claimed from while still heard (b fences a during its leave).

Kafka only: exactly once for ``read_committed`` consumers needs aborted records hidden.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import OFFSET_END, TopicPartition
from confluent_kafka.admin import AdminClient

from chronos.cli.cluster import lines
from chronos.cli.main import main as chronos_main
from chronos.cluster.placement import Placement
from chronos.cluster.status import ClusterStatus, cluster_status
from chronos.kafka.clients import KafkaClients
from chronos.kafka.partitioner import partition_of
from chronos.runtime.member import ClusterMember
from chronos.settings import ChronosSettings
from chronos.store import codec
from chronos.store.checkpoint import CheckpointReader
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
    """Members of one test cluster, each stopped once at the end."""

    def __init__(self, bootstrap: str, namespace: str, tmp_path: Path) -> None:
        self.bootstrap, self.namespace, self.tmp_path = bootstrap, namespace, tmp_path
        self.members: dict[str, ClusterMember] = {}

    def settings(self, name: str, **sections: dict[str, Any]) -> ChronosSettings:
        return make_settings(
            self.bootstrap,
            self.namespace,
            self.tmp_path / name,
            node={"node_id": name, "data_dir": self.tmp_path / name, "ingest_threads": 1},
            # Drops soon after a partition moves: what the drop test checks.
            cluster={
                "name": "c",
                "standby_replicas": 1,
                "shape": "node",
                "drop_unhosted_after_s": 1.0,
            },
            **sections,
        )

    def start(self, name: str, **sections: dict[str, Any]) -> ClusterMember:
        member = ClusterMember(self.settings(name, **sections))
        member.start()
        self.members[name] = member
        return member

    def stop(self, name: str) -> None:
        assert self.members.pop(name).stop(), f"{name} did not stop cleanly"

    def settled(self, owners: dict[str, int]) -> bool:
        """Every partition is delivered by one member, each delivering as many as ``owners``."""
        delivering = {
            name: member.ownership.delivering if member.ownership else frozenset()
            for name, member in self.members.items()
        }
        every = [p for partitions in delivering.values() for p in partitions]
        return (
            sorted(every) == list(range(_PARTITIONS))
            and {name: len(partitions) for name, partitions in delivering.items()} == owners
        )

    def stop_all(self) -> None:
        for member in self.members.values():
            member.stop()


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


def test_members_share_the_partitions_and_a_leaving_member_hands_them_over(
    cluster: Cluster, namespace: str
) -> None:
    cluster.start("a")
    wait_until(lambda: cluster.settled({"a": _PARTITIONS}), 60, "a delivers every partition")
    b = cluster.start("b")
    wait_until(lambda: cluster.settled({"a": 2, "b": 2}), 60, "a and b deliver two each")
    assert b.host is not None
    owned = sorted(Placement.of({"a", "b"}, _PARTITIONS, 1).owned_by("b"))
    # Mutant caught: a cold member reading its standby copies before the partitions it owns.
    assert b.host.first_read == owned, "b restored what it is to deliver first"
    wait_until(lambda: b.host is not None and b.host.restores == 1, 60, "then the rest")
    topic = f"{namespace}-target"
    settings = cluster.members["a"].settings
    with Inbox(settings, [topic]) as inbox, DelayClient(settings) as client:
        shared = _send(client, topic, _spread("shared-", 10), 0.5)
        exactly_once_after_markers(inbox, client, topic, shared, "m1-")
        ports = {name: member.admin_port for name, member in cluster.members.items()}
        wait_until(lambda: _all_ready(ports), 60, "both members ready")
        admin_api_answers_for_the_cluster(ports, "b", shared, _PARTITIONS)
        _status_shows_what_runs(cluster, settings)
        pending = _send(client, topic, _spread("pending-", 10), 4.0)
        cluster.stop("a")
        wait_until(lambda: cluster.settled({"b": _PARTITIONS}), 60, "b delivers every partition")
        ownership = cluster.members["b"].ownership
        assert ownership is not None and ownership.claimant is not None
        assert ownership.claimant.fenced == [], "a join and a leave are handovers, not fences"
        exactly_once_after_markers(inbox, client, topic, pending, "m2-")


def test_a_member_that_hosts_more_after_a_leave_restores_them_beside_its_ingest(
    cluster: Cluster, namespace: str
) -> None:
    """c, the last to join, hosts partitions 1 and 2 of the four (a and b two or three each,
    having dropped what c took); once a leaves, c hosts them all and restores 0 and 3 in an
    ingest of their own (its lanes go on meanwhile), then may deliver them: every message once.
    Mutant caught: a restore that never hands its partitions to the member's ingest (c
    never stands for 0 and 3, and no restore finishes)."""
    for name in ("a", "b", "c"):
        cluster.start(name)
    wait_until(
        lambda: cluster.settled(_counts(cluster)) and min(_counts(cluster).values()) >= 1,
        60,
        "three members deliver the four partitions, each one at least",
    )
    topic = f"{namespace}-target"
    settings = cluster.members["b"].settings
    with Inbox(settings, [topic]) as inbox, DelayClient(settings) as client:
        before = _send(client, topic, _spread("before-", 5), 3.0)
        cluster.stop("a")
        wait_until(
            lambda: cluster.settled(_counts(cluster)) and len(cluster.members) == 2,
            60,
            "a and b deliver every partition",
        )
        member = cluster.members["c"]
        c, ownership = member.host, member.ownership
        assert c is not None and ownership is not None
        assert c.restores == 1, "c restored 0 and 3 beside its ingest"
        wait_until(
            lambda: c.standing() | ownership.delivering == frozenset(range(_PARTITIONS)),
            60,
            "c stands for or delivers every partition",
        )
        after = _send(client, topic, _spread("after-", 5), 0.5)
        exactly_once_after_markers(inbox, client, topic, before | after, "m3-")


def test_a_member_drops_the_partitions_it_no_longer_hosts_once_their_hosts_stand(
    cluster: Cluster, namespace: str
) -> None:
    """a and b host all four partitions; c joins, and the placement keeps each partition on
    two of the three: a and b drop what they no longer host once c stands for it and its log
    names another holder (no schedule of it left in their database), and every message is
    delivered once. Mutant caught: nothing dropped (a member kept every partition it ever
    hosted, its ingest and disk growing with them)."""
    cluster.start("a")
    b = cluster.start("b")
    wait_until(lambda: cluster.settled({"a": 2, "b": 2}), 60, "a and b deliver two each")
    assert b.host is not None
    owned = sorted(Placement.of({"a", "b"}, _PARTITIONS, 1).owned_by("b"))
    # Mutant caught: a cold member reading its standby copies before the partitions it owns.
    assert b.host.first_read == owned, "b restored what it is to deliver first"
    wait_until(lambda: b.host is not None and b.host.restores == 1, 60, "then the rest")
    topic = f"{namespace}-target"
    settings = cluster.members["a"].settings
    with Inbox(settings, [topic]) as inbox, DelayClient(settings) as client:
        before = _send(client, topic, _spread("before-", 5), 3.0)
        cluster.start("c")
        placement = Placement.of(frozenset({"a", "b", "c"}), _PARTITIONS, 1)
        hosts = {name: cluster.members[name].host for name in ("a", "b", "c")}

        def placed() -> bool:
            """Each member hosts what the placement over three gives it, a and b having
            dropped the rest (a drop is counted once done)."""
            return all(
                host is not None
                and set(host.hosted) == placement.hosted_by(name)
                and (name == "c" or host.dropped == _PARTITIONS - len(host.hosted))
                for name, host in hosts.items()
            )

        wait_until(placed, 60, "a and b dropped what c hosts now")
        for name in ("a", "b"):
            host = hosts[name]
            assert host is not None
            stored = cluster.members[name].stored_partitions()
            assert stored == sorted(host.hosted), f"{name} keeps the schedules it hosts only"
        after = _send(client, topic, _spread("after-", 5), 0.5)
        exactly_once_after_markers(inbox, client, topic, before | after, "m4-")


def _status_shows_what_runs(cluster: Cluster, settings: ChronosSettings) -> None:
    """``chronos cluster`` names, per partition, the member that delivers it (the members'
    own view), its owner and standby, and their states (said on the readiness board every
    second: asked again until they are in). Mutant caught: the partition shape's reading (a
    partition's own log moves only at claims: it reported nothing delivered)."""
    clients = KafkaClients(settings.kafka, "test-cluster-status")
    seen: list[ClusterStatus] = []

    def shows_them() -> bool:
        delivered_by = {
            p: name
            for name, member in cluster.members.items()
            for p in (member.ownership.delivering if member.ownership else ())
        }
        status = cluster_status(settings, clients)
        seen[:] = [status]
        return status.members == ["a", "b"] and all(
            view.delivering == delivered_by.get(view.partition) == view.owner
            and view.standbys == [n for n in ("a", "b") if n != view.owner]
            and {r.node: r.state for r in view.replicas}
            == {view.owner: "master", view.standbys[0]: "eligible"}
            and (view.term or 0) >= 1
            for view in status.partitions
        )

    wait_until(shows_them, 60, "the status shows owners, standbys and states")
    assert [v.partition for v in seen[0].partitions] == list(range(_PARTITIONS))
    assert lines(seen[0])[-1] == f"every partition is delivered ({_PARTITIONS})"


def _all_ready(ports: dict[str, int | None]) -> bool:
    """Every member's ``/readyz`` answers 200 (each partition placed on it delivered there or
    standing)."""
    return all(
        port is not None and httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=10).is_success
        for port in ports.values()
    )


def _counts(cluster: Cluster) -> dict[str, int]:
    """How many partitions each member delivers now."""
    return {
        name: len(member.ownership.delivering) if member.ownership else 0
        for name, member in cluster.members.items()
    }


def test_a_member_whose_copy_began_past_removed_records_never_stands_for_it(
    cluster: Cluster, namespace: str, kafka_bootstrap: str
) -> None:
    """a delivers every partition; partition 0's records are removed (DeleteRecords, as
    retention does); b joins on an empty disk. Its copy of 0 begins past them and may lack a
    message only they held (no refresh pass re-appended them since), so b does not stand for 0
    and a goes on delivering it; b stands for the others. Mutant caught: b's
    copy of 0 standing (0 handed to b without the removed messages)."""
    a = cluster.start("a")
    wait_until(lambda: cluster.settled({"a": _PARTITIONS}), 60, "a delivers every partition")
    # Each lane's first refresh pass (at once, on an empty store: floor at offset 0) done
    # before the records are written and removed: the next one is a day later.
    wait_until(lambda: _passes(a) >= _PARTITIONS, 60, "a refreshed each partition once")
    topic = f"{namespace}-target"
    with DelayClient(a.settings) as client:
        _send(client, topic, _spread("later-", 3), 600.0)
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    inner = a.settings.topics.names.inner
    for future in admin.delete_records([TopicPartition(inner, 0, OFFSET_END)]).values():
        future.result(30)
    b = cluster.start("b")
    others = frozenset(range(1, _PARTITIONS))

    def b_covers_the_others() -> bool:
        # Standing, or delivering once a handed it over (a delivered partition stands no more).
        delivering = b.ownership.delivering if b.ownership else frozenset()
        return b.host is not None and b.host.standing() | delivering == others

    wait_until(b_covers_the_others, 60, "b stands for (or delivers) 1..3")
    wait_until(
        lambda: cluster.settled(_counts(cluster)) and min(_counts(cluster).values()) >= 1,
        60,
        "a and b share the partitions",
    )
    assert a.ownership is not None and 0 in a.ownership.delivering, "a keeps 0"
    assert b.host is not None and 0 not in b.host.standing()


def test_a_copy_that_began_past_removed_records_stands_once_a_refresh_floor_reaches_it(
    cluster: Cluster, namespace: str, kafka_bootstrap: str
) -> None:
    """As above, with refresh passes every 2 s: a's next pass re-appends partition 0's
    messages past the removed records, its floor reaches where b's copy began, and b's copy
    holds them and stands. Mutant caught: an incomplete copy never checked against the floors
    its follower reads (b never stands for 0)."""
    fast = {"refresh_interval_s": 2.0}
    a = cluster.start("a", rebuild=fast)
    wait_until(lambda: cluster.settled({"a": _PARTITIONS}), 60, "a delivers every partition")
    topic = f"{namespace}-target"
    later = _spread("later-", 3)
    with DelayClient(a.settings) as client:
        _send(client, topic, later, 600.0)
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    inner = a.settings.topics.names.inner
    for future in admin.delete_records([TopicPartition(inner, 0, OFFSET_END)]).values():
        future.result(30)
    b = cluster.start("b", rebuild=fast)

    def b_covers_every_partition() -> bool:
        # Standing, or delivering once a handed it over (a delivered partition stands no more).
        delivering = b.ownership.delivering if b.ownership else frozenset()
        return b.host is not None and b.host.standing() | delivering == set(range(_PARTITIONS))

    wait_until(
        b_covers_every_partition,
        60,
        "b stands for (or delivers) every partition, 0 once a floor reached where it began",
    )
    zero = [i for i in later if partition_of(i.encode(), _PARTITIONS) == 0]
    assert zero
    # Complete once the floor is read; the refresh records themselves are ingested after.
    wait_until(
        lambda: b.host is not None and all(b.host.hosted[0].store.get_index(zero)),
        60,
        "b's copy of 0 holds them",
    )


def _passes(member: ClusterMember) -> int:
    return 0 if member.refresh is None else member.refresh.passes


def test_chronos_checkpoint_copies_a_running_member_s_every_partition(
    cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    """``chronos checkpoint`` on a member's configuration: the running member writes a copy of
    its one database, every partition's schedule in it, each read after its own seek (what
    the pipeline's backlog job reads). Mutants caught: no checkpoint worker on a member (the
    command waits for an answer and fails), a reader of the default schedule alone (nothing
    pending)."""
    member = cluster.start("a")
    wait_until(lambda: cluster.settled({"a": _PARTITIONS}), 60, "a delivers every partition")
    settings = member.settings
    config = tmp_path / "a.toml"
    config.write_text(
        f'[kafka]\nbootstrap_servers = "{settings.kafka.bootstrap_servers}"\n'
        f'[topics]\nnamespace = "{namespace}"\ninner_partitions = {_PARTITIONS}\n'
        f'[node]\ndata_dir = "{settings.node.data_dir}"\nnode_id = "a"\n'
        '[cluster]\nname = "c"\nshape = "node"\n'
    )
    topic = f"{namespace}-target"
    with Inbox(settings, [topic]) as inbox, DelayClient(settings) as client:
        delivered = _send(client, topic, _spread("now-", 2), 0.5)
        assert inbox.wait_for(delivered, 60)
        pending = _send(client, topic, _spread("later-", 3), 3_600.0)
    taken: list[set[str]] = []

    def pending_in_a_checkpoint() -> bool:
        out = tmp_path / f"checkpoint-{len(taken)}"
        assert chronos_main(["checkpoint", "--config", str(config), "--out", str(out)]) == 0
        with CheckpointReader(out) as reader:
            assert reader.partitions() == list(range(_PARTITIONS))
            found = {codec.decode(raw).id for _key, raw in reader.messages(0, 2**62, True)}
        taken.append(found)
        return pending <= found

    wait_until(pending_in_a_checkpoint, 60, "a checkpoint holds every pending message")
    assert not delivered & taken[-1], "delivered before the checkpoint: not pending in it"


def test_a_topic_s_rate_is_the_cluster_s_each_partition_pacing_its_share(
    cluster: Cluster, namespace: str
) -> None:
    """``delivery.topics.<t>.rate`` is the topic's rate, not each partition owner's: each
    lane paces its share (4/s over 4 partitions: one a second each). Mutant caught: the share
    ignored (each partition's three messages went 250 ms apart: four times the rate)."""
    topic = f"{namespace}-paced"
    member = cluster.start("a", delivery={"topics": {topic: {"rate": 4, "burst": 1}}})
    wait_until(lambda: cluster.settled({"a": _PARTITIONS}), 60, "a delivers every partition")
    per_partition = 3
    ids = _spread("paced-", per_partition)
    with Inbox(member.settings, [topic]) as inbox, DelayClient(member.settings) as client:
        sent = _send(client, topic, ids, 1.0)
        assert inbox.wait_for(sent, 60)
        for start in range(0, len(ids), per_partition):
            # The k-th of a partition goes k seconds after the first was due, or later (not
            # after the first was produced: a transaction produces a few ms after its slot).
            delivered = [inbox.first(i) for i in ids[start : start + per_partition]]
            first_due = min(d.due_ms for d in delivered)
            went = sorted(d.produced_ms - first_due for d in delivered)
            assert all(w >= k * 1000 - 5 for k, w in enumerate(went)), (ids[start], went)
