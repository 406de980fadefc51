"""A node alone becomes a cluster (``chronos cluster migrate``), of either shape: what it
delivered is not delivered again, what was pending is delivered once, a repeat goes on from
its next occurrence.

Without the migration the cluster's partitions would restore from the inner topic with no cut:
every retained add past due would be delivered again (the test's "delivered" ids).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from chronos.cluster.migrate import migrate
from chronos.errors import ConfigError
from chronos.repeat import Repeat, RepeatKind
from chronos.runtime.cluster_node import ClusterNode
from chronos.runtime.member import ClusterMember
from chronos.settings import ChronosSettings
from proxy.client import DelayClient
from tests.integration.harness import Inbox, make_settings, running_node, wait_until

pytestmark = pytest.mark.kafka_only(
    reason="exactly once for read_committed consumers needs aborted records hidden"
)


def _deliver_some_leave_some(
    inbox: Inbox, client: DelayClient, topic: str
) -> tuple[set[str], set[str]]:
    """Before the move: 20 ids delivered and a repeat's first occurrence, then 20 ids due in
    6 s (pending when the old nodes stop). Returns (delivered, pending)."""
    delivered = {client.send_delay(topic, b"x", delay=0.2, id=f"d{n}").id for n in range(20)}
    client.send_delay(topic, b"t", delay=0.2, id="tick", repeat=Repeat(RepeatKind.FIXED, 4000, 3))
    assert inbox.wait_for(delivered | {"tick"}, 60)
    pending = {client.send_delay(topic, b"p", delay=6.0, id=f"p{n}").id for n in range(20)}
    return delivered, pending


def _delivers_the_rest(inbox: Inbox, client: DelayClient, topic: str, pending: set[str]) -> None:
    """After the move: the pending ids, the repeat's last occurrences and a new message."""
    wait_until(lambda: inbox.wait_for(pending, 1), 60, "the pending ids delivered")
    wait_until(lambda: inbox.count("tick") == 3, 60, "the repeat's last occurrence")
    marker = client.send_delay(topic, b"m", delay=0.2, id="after").id
    assert inbox.wait_for({marker}, 60), "a message sent after the others"


def _each_once(inbox: Inbox, delivered: set[str], pending: set[str]) -> None:
    twice = sorted(i for i in delivered | pending | {"after"} if inbox.count(i) != 1)
    assert not twice, f"not delivered exactly once: {twice[:5]}"
    occurrences = sorted(d.occurrence for d in inbox.by_id["tick"])
    assert occurrences == [1, 2, 3]


@pytest.mark.parametrize("shape", ["partition", "node"])
def test_a_node_alone_migrated_into_a_cluster_delivers_nothing_twice(
    kafka_bootstrap: str, namespace: str, tmp_path: Path, shape: str
) -> None:
    alone = make_settings(kafka_bootstrap, namespace, tmp_path / "alone", node={"node_id": "old"})
    cluster = make_settings(
        kafka_bootstrap,
        namespace,
        tmp_path / "a",
        node={"node_id": "a", "data_dir": tmp_path / "a", "ingest_threads": 1},
        cluster={"name": "c", "shape": shape},
    )
    topic = f"{namespace}-target"
    with Inbox(alone, [topic]) as inbox, DelayClient(alone) as client:
        with running_node(alone):
            delivered, pending = _deliver_some_leave_some(inbox, client, topic)
        done = migrate(alone, cluster)
        assert done.source == "node old" and done.seek_ms is not None and done.repeats == 1
        node = ClusterNode(cluster) if shape == "partition" else ClusterMember(cluster)
        node.start()
        try:
            _delivers_the_rest(inbox, client, topic, pending)
        finally:
            node.stop()
        with pytest.raises(ConfigError, match="progress already"):
            migrate(alone, cluster)  # a cluster that ran is not migrated into again
    _each_once(inbox, delivered, pending)


def test_a_partition_shape_cluster_restarted_in_the_node_shape_delivers_nothing_twice(
    kafka_bootstrap: str, namespace: str, tmp_path: Path
) -> None:
    """Stop all, start all: a cluster of the partition shape (a replica group per partition)
    restarted as members of the node shape on the same data directory. Each partition's own
    progress log keeps the old shape's cuts and repeat states; a member's first claim over a
    partition fences the old shape's transactional id of that partition and starts from its
    last cut, so what the old shape delivered is not delivered again (its stores are not read:
    the member restores from the inner topic). Mutant run: a follower that skips the old
    shape's cuts (those without a ``seq``) never lets the member deliver the pending ids."""
    topic = f"{namespace}-target"

    def settings(shape: str) -> ChronosSettings:
        return make_settings(
            kafka_bootstrap,
            namespace,
            tmp_path / "a",
            node={"node_id": "a", "data_dir": tmp_path / "a", "ingest_threads": 1},
            cluster={"name": "c", "shape": shape},
        )

    old = settings("partition")
    with Inbox(old, [topic]) as inbox, DelayClient(old) as client:
        node = ClusterNode(old)
        node.start()
        try:
            delivered, pending = _deliver_some_leave_some(inbox, client, topic)
        finally:
            assert node.stop(), "the partition shape's node did not stop cleanly"
        member = ClusterMember(settings("node"))
        member.start()
        try:
            _delivers_the_rest(inbox, client, topic, pending)
        finally:
            assert member.stop(), "the member did not stop cleanly"
    _each_once(inbox, delivered, pending)
