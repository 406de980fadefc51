"""Compact mode on Apache Kafka (``rebuild.mode = "compact"``, issue 38): the inner topic is
created compacted; after re-sent adds, a cancel before its add, a reschedule, a null payload
and a delivered message forgotten past retention, each id's last record in the real topic (what
the cleaner keeps; a null value is removed too) states what the node holds, in the id's own
partition; a wiped store restored from the topic holds the same. Both for a node alone and for
a member of the node shape (``cluster.shape = "node"``: a schedule per partition, one
restater and one expiry writer for all).

The cleaner itself is not waited for (it runs every 15 s at best): the test compacts what it
reads as the cleaner does; ``tests/unit/test_restatement.py`` checks random histories.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin._config import AlterConfigOpType, ConfigEntry, ConfigResource
from confluent_kafka.admin._resource import ResourceType
from confluent_kafka.cimpl import NewTopic

from chronos import wire
from chronos.kafka import compacted_config
from chronos.kafka.admin import log_start_offsets
from chronos.kafka.clients import KafkaClients
from chronos.kafka.partitioner import partition_of
from chronos.kafka.topic_config import read_topic_config
from chronos.runtime.member import ClusterMember
from chronos.runtime.node import Node
from chronos.schedule import restatement
from chronos.settings import ChronosSettings
from chronos.types import Headers
from proxy.client import DelayClient
from tests.integration.harness import INNER_PARTITIONS, Inbox, make_settings, wait_until

pytestmark = pytest.mark.kafka_only(
    reason="Tansu does not compact and skips records under load (gaps are trusted here)"
)

HOUR_S = 3600.0
#: (partition, value, headers) of a record.
Record = tuple[int, bytes | None, Headers]


def _last_records(settings: ChronosSettings) -> dict[str, list[Record]]:
    """Every record of the inner topic by id, in offset order, read from its start to its end."""
    topic = settings.topics.names.inner
    consumer = Consumer(
        {
            "bootstrap.servers": settings.kafka.bootstrap_servers,
            "group.id": "compacted-reader",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    try:
        partitions = range(settings.topics.inner_partitions)
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), 10)[1] for p in partitions
        }
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        found: dict[str, list[Record]] = {}
        done = {p for p, end in ends.items() if end == 0}
        while len(done) < len(ends):
            record = consumer.poll(1.0)
            if record is None or record.error() is not None:
                continue
            partition, offset = record.partition(), record.offset()
            assert partition is not None and offset is not None
            key = record.key()
            assert key is not None
            headers = record.headers() or []
            found.setdefault(key.decode(), []).append((partition, record.value(), headers))  # type: ignore[arg-type]
            if offset + 1 >= ends[partition]:
                done.add(partition)
        return found
    finally:
        consumer.close()


def _kept(records: dict[str, list[Record]]) -> dict[str, Record]:
    """What the cleaner leaves once it ran: each id's last record, unless its value is null."""
    return {i: rs[-1] for i, rs in records.items() if rs[-1][1] is not None}


def _header(record: Record, name: str) -> bytes | None:
    return dict(record[2]).get(name)


def _held(node: Node | ClusterMember, ids: list[str]) -> dict[str, object]:
    """What the node's store holds of each id (a member: its id's partition's schedule)."""
    if isinstance(node, ClusterMember):
        assert node.host is not None
        hosted = node.host.hosted
        return {
            i: restatement.current(
                hosted[partition_of(i.encode(), INNER_PARTITIONS)].store, i, None
            )
            for i in ids
        }
    assert node.context is not None
    store = node.context.store
    return {i: restatement.current(store, i, None) for i in ids}


def _started(settings: ChronosSettings) -> Node | ClusterMember:
    """A node alone ready, or a member delivering every partition."""
    if settings.cluster.name is None:
        node = Node(settings)
        node.start()
        assert node.wait_ready(60)
        return node
    member = ClusterMember(settings)
    member.start()

    def delivering() -> bool:
        ownership = member.ownership
        return ownership is not None and len(ownership.delivering) == INNER_PARTITIONS

    wait_until(delivering, 60, "the member delivers every partition")
    return member


@pytest.mark.parametrize("shape", ["alone", "member"])
def test_each_ids_last_record_states_it_and_a_wiped_store_restores_it(
    kafka_bootstrap: str, namespace: str, tmp_path: Path, shape: str
) -> None:
    cluster = {"name": "c", "shape": "node"} if shape == "member" else {}
    settings = make_settings(
        kafka_bootstrap,
        namespace,
        tmp_path / "store",
        rebuild={"mode": "compact"},
        delete={"retention_s": 1.0, "interval_s": 0.5},
        cluster=cluster,
    )
    topic = f"{namespace}-target"
    ids = ["dup", "cancelled", "moved", "null", "plain", "gone"]
    node = _started(settings)
    try:
        config = read_topic_config(
            KafkaClients(settings.kafka, "test").admin(), settings.topics.names.inner, 30
        )
        assert config is not None and config["cleanup.policy"] == "compact"
        with Inbox(settings, [topic]) as inbox, DelayClient(settings) as client:
            client.send_delay(topic, b"first", delay=HOUR_S, id="dup")
            client.send_delay(topic, b"second", delay=2 * HOUR_S, id="dup")
            client.cancel("cancelled")
            client.send_delay(topic, b"never", delay=1.0, id="cancelled")
            client.send_delay(topic, b"m", delay=HOUR_S, id="moved")
            client.reschedule("moved", delay=2 * HOUR_S)
            client.send_delay(topic, None, delay=HOUR_S, id="null")
            client.send_delay(topic, b"p", delay=HOUR_S, id="plain")
            client.send_delay(topic, b"g", delay=0.1, id="gone")
            assert inbox.wait_for({"gone"}, 60)

            def settled() -> bool:
                kept = _kept(_last_records(settings))
                return (
                    "gone" not in kept
                    and all(
                        _header(kept[i], wire.H_SLOT) is not None
                        for i in ("dup", "moved", "null")
                        if i in kept
                    )
                    and _header(kept.get("cancelled", (0, None, [])), wire.H_CANCELLED) is not None
                )

            wait_until(settled, 60, "restatements and the expiry tombstone are in the topic")
            records = _last_records(settings)
            kept = _kept(records)
            for message_id, rs in records.items():
                # Every record of an id in the partition the proxy's partitioner chose.
                assert {r[0] for r in rs} == {
                    partition_of(message_id.encode(), INNER_PARTITIONS)
                }, message_id
            assert set(kept) == set(ids) - {"gone"}
            assert kept["dup"][1] == b"first", "the first add wins, in the topic too"
            assert kept["null"][1] == b"" and _header(kept["null"], wire.H_NULL_VALUE) == b"1"
            assert kept["plain"][1] == b"p" and _header(kept["plain"], wire.H_SLOT) is None
            held = _held(node, ids)
            moved = held["moved"]
            assert isinstance(moved, restatement.Restatement)
            assert _header(kept["moved"], wire.H_SLOT) == str(moved.slot_ms).encode()
            assert held["gone"] is None and held["cancelled"] is not None
            node.stop()
            shutil.rmtree(settings.node.data_dir)
            node = _started(settings)
            if isinstance(node, Node):
                assert node.context is not None and node.context.rebuild is not None
            # The restore read g's add and its tombstone: its delete pass forgets it again.
            try:
                wait_until(lambda: _held(node, ids) == held, 60, "the restored store holds it")
            except AssertionError:
                assert _held(node, ids) == held  # says what differs
                raise
            client.send_delay(topic, b"a", delay=0.1, id="after")
            assert inbox.wait_for({"after"}, 60)
            assert inbox.count("gone") == 1 and inbox.count("cancelled") == 0
    finally:
        node.stop()


def _compacted_past_its_head(settings: ChronosSettings) -> dict[int, int]:
    """The inner topic as a node alone's leaves it after ``chronos topics migrate``: created
    with retention, its head removed (``DeleteRecords`` stands in for retention), then made
    compact. Returns where each partition now starts (past 0)."""
    admin = KafkaClients(settings.kafka, "test").admin()
    inner = settings.topics.names.inner
    wanted = compacted_config.creation_config() | {"cleanup.policy": "delete"}
    created = NewTopic(inner, INNER_PARTITIONS, 1, config=wanted)
    for future in admin.create_topics([created]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": settings.kafka.bootstrap_servers})
    for partition in range(INNER_PARTITIONS):
        producer.produce(inner, b"removed", key=b"removed", partition=partition)
    assert producer.flush(30) == 0
    heads = [TopicPartition(inner, p, 1) for p in range(INNER_PARTITIONS)]
    for future in admin.delete_records(heads).values():
        future.result(30)
    compact = ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ResourceType.TOPIC, inner, incremental_configs=[compact])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)
    return log_start_offsets(settings, inner, list(range(INNER_PARTITIONS)))


@pytest.mark.parametrize("shape", ["alone", "member"])
def test_a_store_that_began_past_the_start_of_a_compacted_topic_delivers(
    kafka_bootstrap: str, namespace: str, tmp_path: Path, shape: str
) -> None:
    """On a compacted topic every id's last record is kept, so a store that read it from where
    it now starts holds everything: no refresh floor is published in compact mode, and a
    member's copy that waited for one never stood for its partition (nothing delivered)."""
    cluster = {"name": "c", "shape": "node"} if shape == "member" else {}
    settings = make_settings(
        kafka_bootstrap, namespace, tmp_path / "store", rebuild={"mode": "compact"}, cluster=cluster
    )
    starts = _compacted_past_its_head(settings)
    assert all(start == 1 for start in starts.values()), starts
    topic = f"{namespace}-target"
    node = _started(settings)
    try:
        with Inbox(settings, [topic]) as inbox, DelayClient(settings) as client:
            sent = {client.send_delay(topic, b"v", delay=0.1, id=f"m{n}").id for n in range(8)}
            assert inbox.wait_for(sent, 60)
    finally:
        node.stop()
