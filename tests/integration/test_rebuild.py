"""Nothing lives on one disk alone: a replica whose disk is replaced rebuilds from Kafka.

The inner topic's first records are removed (``DeleteRecords`` up to the rebuild floor the
master publishes, what retention would do after days), the backup's store is deleted and the
backup started again; once it says it is complete the master stops and the rebuilt backup must
deliver every pending message exactly once, none that was cancelled, none early. Before the
refresh passes, such a backup started from the topic's new head and delivered none of them.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from chronos.errors import ConfigError
from chronos.group.published import read_published
from chronos.group.replica import Replica
from chronos.group.spec import GroupSpec
from chronos.group.status import group_status
from chronos.kafka.clients import KafkaClients
from chronos.repeat import Repeat, RepeatKind
from chronos.runtime.node import Node
from chronos.settings import ChronosSettings
from proxy.client import DelayClient
from tests.integration.harness import (
    Group,
    Inbox,
    make_settings,
    role_of,
    running_node,
    wait_until,
)

KAFKA_ONLY = pytest.mark.kafka_only(
    reason="DeleteRecords and exactly once for read_committed consumers need Apache Kafka"
)

#: Passes every 2 s, so the test sees several.
REFRESH = {"refresh_interval_s": 2.0}


@pytest.fixture
def group(kafka_bootstrap: str, namespace: str, tmp_path: Path) -> Iterator[Group]:
    g = Group(kafka_bootstrap, namespace, tmp_path, rebuild=REFRESH)
    try:
        yield g
    finally:
        g.stop_all()


def _floor_above(
    settings: ChronosSettings, ends: dict[int, int], timeout_s: float
) -> dict[int, int]:
    """Wait until the published floor is at or above ``ends`` in every partition."""
    spec = GroupSpec.of(settings)
    assert spec is not None
    clients = KafkaClients(settings.kafka, "test-status")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        floor = group_status(spec, clients).rebuild_floor
        if floor is not None and all(floor.get(p, 0) >= end for p, end in ends.items()):
            return floor
        time.sleep(0.5)
    raise AssertionError(f"no floor reached {ends} within {timeout_s} s")


def _ends(admin: Any, topic: str, partitions: int) -> dict[int, int]:
    from confluent_kafka.admin._listoffsets import OffsetSpec

    latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
    futures = admin.list_offsets({TopicPartition(topic, p): latest for p in range(partitions)})
    return {tp.partition: f.result(30).offset for tp, f in futures.items()}


@KAFKA_ONLY
def test_a_replaced_backup_disk_is_rebuilt_from_kafka_and_takes_over_without_loss(
    group: Group, namespace: str, admin: Any
) -> None:
    a = group.start("a")
    wait_until(lambda: group.masters() == ["a"], 60, "a is master")
    b = group.start("b")
    topic = f"{namespace}-target"
    inner = a.settings.topics.names.inner
    repeat = Repeat(RepeatKind.FIXED, interval_ms=2000, times=3)
    with Inbox(a.settings, [topic]) as inbox, DelayClient(a.settings) as client:
        ids = {
            client.send_delay(topic, b"v", delay=40.0, id=f"m{i}", key=b"k").id for i in range(40)
        }
        rep_receipts = [
            client.send_delay(topic, b"r", delay=40.0, id=f"r{i}", repeat=repeat) for i in range(3)
        ]
        reps = {receipt.id for receipt in rep_receipts}
        cancelled = {f"m{i}" for i in range(0, 40, 10)}
        client.cancel_batch(sorted(cancelled))
        # Cancels of ids never scheduled: a rebuilt store must remember them as live ones do.
        client.cancel_batch(["early"])
        ends = _ends(admin, inner, 4)
        floor = _floor_above(a.settings, ends, 30)
        # What retention would remove after days: every record below the floor.
        deleted = admin.delete_records([TopicPartition(inner, p, o) for p, o in floor.items()])
        for future in deleted.values():
            future.result(30)
        assert any(o > 0 for o in floor.values())
        # The backup's disk is replaced.
        b.stop()
        shutil.rmtree(b.settings.node.data_dir)
        b = group.start("b")
        replica = b.replica
        assert isinstance(replica, Replica)
        wait_until(lambda: replica.complete, 60, "the rebuilt backup says it is complete")
        assert b.context is not None and any(o > 0 for o in b.context.origin.began.values())
        wait_until(lambda: role_of(b) == "backup", 60, "b follows")
        client.send_delay(topic, b"v", delay=0.0, id="early")  # cancelled before it was sent
        a.stop()
        wait_until(lambda: group.masters() == ["b"], 60, "the rebuilt backup took over")
        expected = ids - cancelled
        assert inbox.wait_for(expected | reps, 60), sorted(expected - inbox.by_id.keys())[:5]
        wait_until(lambda: all(inbox.count(r) >= 3 for r in reps), 60, "every occurrence")
        # Duplicates, cancelled ones and a fourth occurrence (+6 s) come before markers due
        # after them.
        last = max(receipt.deliver_at_ms for receipt in rep_receipts)
        inbox.settle(client, topic, 4, deliver_at_ms=last + 6_500)
    assert not [i for i in expected if inbox.count(i) != 1]
    assert not [i for i in cancelled | {"early"} if inbox.count(i)]
    for r in reps:
        with inbox._lock:
            assert sorted(d.occurrence for d in inbox.by_id[r]) == [1, 2, 3]
    for message_id in expected:
        first = inbox.first(message_id)
        assert first.produced_ms >= first.due_ms, f"{message_id} delivered early"


@KAFKA_ONLY
def test_chronos_group_lists_a_replica_that_cannot_stand_for_election_and_why(
    kafka_bootstrap: str, namespace: str, tmp_path: Path, admin: Any
) -> None:
    """A replaced disk whose store begins above the published floor is listed as
    ``incomplete`` with where it began, beside the master, though it is not in the election
    (before, ``chronos group`` left it out)."""
    group = Group(kafka_bootstrap, namespace, tmp_path, rebuild={"refresh_interval_s": 3600.0})
    try:
        a = group.start("a")
        wait_until(lambda: group.masters() == ["a"], 60, "a is master")
        spec = GroupSpec.of(a.settings)
        assert spec is not None
        clients = KafkaClients(a.settings.kafka, "test-members")
        # a's first pass ran when it took over: its floor lies below what comes now.
        wait_until(lambda: group_status(spec, clients).rebuild_floor is not None, 60, "floor")
        with DelayClient(a.settings) as client:
            for i in range(8):
                client.send_delay(f"{namespace}-target", b"v", delay=600.0, id=f"m{i}")
        inner = a.settings.topics.names.inner
        ends = _ends(admin, inner, 4)
        for future in admin.delete_records(
            [TopicPartition(inner, p, o) for p, o in ends.items()]
        ).values():
            future.result(30)
        b = group.start("b")

        def listed() -> dict[str, Any]:
            return {m.node: m for m in group_status(spec, clients).members}

        wait_until(lambda: getattr(listed().get("b"), "state", None) == "incomplete", 60, "b")
        members = listed()
        assert members["a"].state == "master" and members["a"].master
        assert not members["b"].elected and not members["b"].master
        began = {int(p): o for p, o in members["b"].detail["began"].items()}
        assert began == {p: o for p, o in ends.items() if o > 0}
        assert role_of(b) == "backup"
    finally:
        group.stop_all()


def _trim_to_floor(settings: ChronosSettings, admin: Any, ends: dict[int, int]) -> None:
    """Wait for a node alone's published floor to pass ``ends``; delete every record below."""
    clients = KafkaClients(settings.kafka, "test-floor")
    deadline = time.monotonic() + 60
    while True:
        cut = read_published(settings, clients).cut
        floor = None if cut is None or cut.floor is None else cut.floor.offsets
        if floor is not None and all(floor.get(p, 0) >= e for p, e in ends.items()):
            break
        assert time.monotonic() < deadline, f"no published floor reached {ends}"
        time.sleep(0.5)
    inner = settings.topics.names.inner
    for future in admin.delete_records(
        [TopicPartition(inner, p, o) for p, o in floor.items()]
    ).values():
        future.result(30)


@KAFKA_ONLY
def test_a_node_alone_with_a_wiped_store_delivers_what_was_pending_and_nothing_again(
    kafka_bootstrap: str, namespace: str, tmp_path: Path, admin: Any
) -> None:
    """The disk of a node alone is replaced after a clean stop: what it had delivered stays
    delivered (its published cut says so), what was pending (one-shots, the rest of a repeat)
    is delivered once, a cancel still holds; and the inner topic no longer holds the first
    records either (what retention does after days), only the refresh records.

    One case: an untrimmed topic takes the same steps without the trim (it ran in the Tansu
    pass until that pass kept only the embedded default's tests, issue 60)."""
    settings = make_settings(kafka_bootstrap, namespace, tmp_path / "store", rebuild=REFRESH)
    topic = f"{namespace}-target"
    repeat = Repeat(RepeatKind.FIXED, interval_ms=4000, times=4)
    node = Node(settings)
    node.start()
    try:
        assert node.wait_ready(60)
        with Inbox(settings, [topic]) as inbox, DelayClient(settings) as client:
            soon = {client.send_delay(topic, b"s", delay=0.3, id=f"s{i}").id for i in range(20)}
            later = {client.send_delay(topic, b"l", delay=20.0, id=f"l{i}").id for i in range(20)}
            client.send_delay(topic, b"r", delay=0.3, id="rep", repeat=repeat)
            cancelled = {"l0", "l1", "l2"}
            client.cancel_batch(sorted(cancelled))
            assert inbox.wait_for(soon | {"rep"}, 60)
            _trim_to_floor(settings, admin, _ends(admin, settings.topics.names.inner, 4))
            node.stop()
            shutil.rmtree(settings.node.data_dir)
            node = Node(settings)
            node.start()
            assert node.context is not None and node.context.rebuild is not None
            expected = later - cancelled
            assert inbox.wait_for(expected, 60), sorted(expected - inbox.by_id.keys())[:5]
            wait_until(lambda: inbox.count("rep") >= 4, 60, "every occurrence of the repeat")
            # Anything delivered again was due before markers due now.
            inbox.settle(client, topic, settings.topics.inner_partitions)
        again = sorted(i for i in soon | expected if inbox.count(i) != 1)
        assert not again, f"delivered {[inbox.count(i) for i in again[:5]]} times: {again[:5]}"
        assert not [i for i in cancelled if inbox.count(i)]
        with inbox._lock:
            assert sorted(d.occurrence for d in inbox.by_id["rep"]) == [1, 2, 3, 4]
    finally:
        node.stop()


@KAFKA_ONLY
def test_a_store_the_topic_left_behind_is_cleared_and_a_node_alone_refuses_to_start_without_it(
    kafka_bootstrap: str, namespace: str, tmp_path: Path, admin: Any
) -> None:
    """The node was down while records it had not read were removed (and no refresh pass had
    re-appended what it held): its store is stale (it may miss a cancel), so it is cleared;
    a node alone then cannot prove it holds every pending message and says so instead of
    starting, unless told to accept the loss."""
    settings = make_settings(
        kafka_bootstrap, namespace, tmp_path / "store", rebuild={"refresh_interval_s": 3600}
    )
    inner = settings.topics.names.inner
    with running_node(settings) as running, DelayClient(settings) as client:
        client.send_delay(f"{namespace}-target", b"v", delay=600.0, id="held")
        assert running.context is not None
        store = running.context.store
        wait_until(lambda: store.get_index(["held"]) != [None], 60, "held is stored")
    with DelayClient(settings) as client:
        client.cancel_batch([f"unseen{i}" for i in range(20)])
    ends = _ends(admin, inner, 4)
    for future in admin.delete_records(
        [TopicPartition(inner, p, o) for p, o in ends.items()]
    ).values():
        future.result(30)
    with pytest.raises(ConfigError, match="began reading the inner topic at"):
        Node(settings).start()
    accepting = settings.model_copy(
        update={"rebuild": settings.rebuild.model_copy(update={"accept_incomplete": True})}
    )
    node = Node(accepting)
    node.start()
    try:
        # The refused start cleared the stale store already: this one begins where the topic
        # starts now.
        assert node.context is not None and node.context.origin.fresh
        assert node.context.origin.began == ends
        assert node.context.store.get_index(["held"]) == [None], "the stale store was cleared"
    finally:
        node.stop()
