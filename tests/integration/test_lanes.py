"""One delivery transaction over several partitions (lanes) on Apache Kafka (issue 61, step
5 a): a read_committed consumer sees every message of both partitions once across an abort
that one partition's refused record caused, and each partition's progress topic holds its own
cuts.

Kafka only: Tansu's ``read_committed`` readers also see aborted records.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Message
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from chronos.clock import SystemClock
from chronos.delivery.deadletter import DeadLetterPolicy
from chronos.group.lane import Lane, MasterState
from chronos.group.placement import ReplicaPlacement, ReplicaStore
from chronos.group.spec import GroupSpec
from chronos.group.transactions import TransactionLoop
from chronos.kafka.clients import KafkaClients
from chronos.metrics import CountingMetrics
from chronos.model import DelayMessage, Op
from chronos.schedule.frontier import Frontier, Wake
from chronos.schedule.ledger import Ledger
from chronos.schedule.progress_record import Cut, decode
from chronos.settings import ChronosSettings, StoreSettings
from chronos.store import codec
from chronos.store.database import RocksDatabase
from chronos.store.rocks import RocksStore
from chronos.wire import H_ID

pytestmark = pytest.mark.kafka_only(reason="Tansu's read_committed readers see aborted records")

WAIT_S = 60.0


def _read_all(bootstrap: str, topic: str, want: int) -> list[Message]:
    """Every record of ``topic`` at read_committed, once ``want`` arrived (a minute at most)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    records: list[Message] = []
    deadline = time.monotonic() + WAIT_S
    try:
        while len(records) < want and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                records.append(message)
        # What else is there: a duplicate would come with or soon after the last one.
        while (message := consumer.poll(1.0)) is not None:
            if message.error() is None:
                records.append(message)
    finally:
        consumer.close()
    return records


def _id_of(message: Message) -> str:
    raw = dict(message.headers() or []).get(H_ID) or b""
    return raw.decode() if isinstance(raw, bytes) else raw


def test_two_lanes_deliver_once_across_an_abort_one_of_them_caused(
    tmp_path: Path, kafka_bootstrap: str, admin: AdminClient, namespace: str
) -> None:
    """Partition 2 holds a record the broker refuses (over its topic's
    ``max.message.bytes``): the transaction carrying both partitions' deliveries aborts, the
    redo dead-letters it, and every other message of both partitions is seen once.
    Regression guard of the lanes on a real broker: the stub publisher of
    ``tests/unit/test_lanes.py`` models what Kafka does; this checks it."""
    settings = ChronosSettings.model_validate(
        {
            "kafka": {"bootstrap_servers": kafka_bootstrap},
            "topics": {"namespace": namespace},
            "group": {"name": "c"},
        }
    )
    spec = GroupSpec.of(settings)
    assert spec is not None
    target, small = f"{namespace}-target", f"{namespace}-small"
    progress = {p: f"{namespace}.progress.c.p{p}" for p in (1, 2)}
    topics = [NewTopic(t, 1, 1, config={"cleanup.policy": "compact"}) for t in progress.values()]
    topics += [
        NewTopic(target, 2, 1),
        NewTopic(small, 1, 1, config={"max.message.bytes": "2000"}),
        NewTopic(spec.dead_letter_topic, 1, 1),
    ]
    for future in admin.create_topics(topics).values():
        future.result(timeout=30)
    clients = KafkaClients(settings.kafka, "lanes")
    publisher = clients.transactional(f"{namespace}.delivery.n", 30_000)
    publisher.init(30)
    database = RocksDatabase(tmp_path / "s", StoreSettings(wal_sync_interval_ms=60_000))
    clock, wake, metrics = SystemClock(), Wake(), CountingMetrics()
    policy = DeadLetterPolicy.of(settings.delivery, publisher)
    stores: list[RocksStore] = []
    lanes: list[Lane] = []
    now = clock.now_ms()
    for p in (1, 2):
        store = RocksStore.of_partition(database, p)
        stores.append(store)
        frontier = Frontier(0, wake)
        placement = ReplicaPlacement()
        ledger = Ledger(store, frontier, clock, settings.delete, placement)
        replica = ReplicaStore(store, frontier, ledger, placement)
        replica.lead(now - 1000, [p])
        items = []
        for n in range(10):
            message = DelayMessage(f"p{p}-{n}", target, None, b"v", [], now - 500 + n)
            items.append((Op.ADD, message.id, message.first_due_ms, codec.encode(message)))
        if p == 2:
            big = DelayMessage("too-large", small, None, b"x" * 5000, [], now - 495)
            items.append((Op.ADD, big.id, big.first_due_ms, codec.encode(big)))
        ledger.apply_decoded(items, {p: len(items)}, [(p, n) for n in range(len(items))])
        lanes.append(
            Lane(
                progress_topic=progress[p],
                store=store,
                ledger=ledger,
                replica=replica,
                frontier=frontier,
                state=MasterState(3, print, print),
                policy=policy,
                clock=clock,
                partition=p,
            )
        )
    loop = TransactionLoop(
        spec=spec,
        publisher=publisher,
        lanes=lanes,
        retry=settings.delivery,
        clock=clock,
        metrics=metrics,
        idle_cuts=False,
    )
    loop.start()
    try:
        delivered = _read_all(kafka_bootstrap, target, 20)
        dead = _read_all(kafka_bootstrap, spec.dead_letter_topic, 1)
    finally:
        loop.stop()
        loop.join(30)
        loop.close()
        for store in stores:
            store.close()
        database.close()
    counts = Counter(_id_of(m) for m in delivered)
    assert set(counts) == {f"p{p}-{n}" for p in (1, 2) for n in range(10)}
    assert max(counts.values()) == 1, counts
    assert [_id_of(m) for m in dead] == ["too-large"]
    assert metrics.totals().get("transactions_aborted", 0) >= 1, "the refusal aborted both"
    for p in (1, 2):
        cuts = [
            c
            for m in _read_all(kafka_bootstrap, progress[p], 1)
            if isinstance(c := decode(m.key(), m.value()), Cut)
        ]
        assert cuts and all(c.term == 3 for c in cuts)
        assert cuts[-1].offsets == {p: 10 + (p == 2)}, "each cut covers its own partition"
