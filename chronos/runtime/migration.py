"""Moving a refresh-mode deployment to compact mode (``chronos topics migrate``, issue 38).

A compacted inner topic keeps each id's last record, and compact mode relies on that record
stating the id's state (``docs/design/live-state.md``). A topic written in refresh mode does
not: a client's cancel and a reschedule have null values, which the cleaner takes for
deletions (a moved pending message would go with its reschedule), and ids a store forgot (a
delivered message past ``delete.retention_s``) still end in their add, which every restore
would read again. So, once, with the nodes stopped and before the cleaner runs:

1. the inner topic is read from its start up to the offsets the store ingested, and every id
   found there that the store no longer holds gets an expiry tombstone in its partition
   (ids with a record the store has not ingested yet are left to the nodes);
2. every id the store holds gets its restatement (``schedule/restatement.held``), in the
   partition its records are in (murmur2 by id, the wire format's partitioner, for one whose
   records retention already removed);
3. once Kafka acknowledged all of them, the topic gets compact mode's configuration
   (``fix_inner_topic``).

Records appended after the read (a client's add while this runs) come before those
restatements and tombstones in the log; the nodes, started in compact mode, read both and
restate what a tombstone would wrongly end (as they do for any expiry tombstone).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from chronos.clock import Clock
from chronos.kafka.acks import Acks
from chronos.kafka.clients import KafkaClients
from chronos.kafka.partitioner import partition_of
from chronos.kafka.publisher import Publisher
from chronos.kafka.topic_config import fix_inner_topic
from chronos.node.restater import EXPIRY_MARGIN_MS, encode
from chronos.schedule import restatement
from chronos.settings import ChronosSettings
from chronos.store.rocks import RocksStore
from chronos.wire import encode_expiry

_BATCH = 5_000
_TIMEOUT_S = 60.0


@dataclass
class Migrated:
    """What a migration wrote."""

    #: Records read from the inner topic (below the store's offsets, and after them).
    records_read: int = 0
    #: Of those, records at or past the offsets the store ingested: the nodes read them in
    #: compact mode. Another store that ingested them in refresh mode would not restate them,
    #: which is why the migration runs on the store that ingested furthest (the master's).
    unread_records: int = 0
    #: Messages (pending, or delivered inside the idempotency window) restated.
    messages: int = 0
    #: Live cancel tombstones restated.
    cancels: int = 0
    #: Ids the store no longer holds, ended with an expiry tombstone.
    tombstones: int = 0
    #: The topic settings changed to compact mode's.
    topic_changes: dict[str, str] = field(default_factory=dict)


def _settle(acks: Acks) -> None:
    """Wait until Kafka answered every record sent; raises when one was refused or time ran
    out (the topic is then left as it was: the migration can run again)."""
    if not acks.wait(_TIMEOUT_S):
        raise RuntimeError(f"{acks.pending} migration records not acknowledged in time")
    if acks.failure is not None:
        raise RuntimeError(f"Kafka refused a migration record: {acks.failure}")


def migrate_to_compact(settings: ChronosSettings, clock: Clock) -> Migrated:
    """Migrate the inner topic of ``settings`` using the store at ``node.data_dir`` (no node
    may have it open); ``settings.rebuild.mode`` must be ``compact``."""
    if settings.rebuild.mode != "compact":
        raise ValueError("set rebuild.mode = compact first: the migration applies its settings")
    store = RocksStore(settings.node.data_dir, settings.store)
    try:
        clients = KafkaClients(settings.kafka, f"{settings.node.node_id}-migration")
        publisher = clients.idempotent("migration", {"linger.ms": 50, "compression.type": "lz4"})
        publisher.start()
        try:
            migrated = _write(settings, store, publisher, clients, clock)
        finally:
            publisher.flush(_TIMEOUT_S)
            publisher.stop()
            publisher.join(_TIMEOUT_S)
    finally:
        store.close()
    migrated.topic_changes = fix_inner_topic(settings)
    return migrated


def _write(
    settings: ChronosSettings,
    store: RocksStore,
    publisher: Publisher,
    clients: KafkaClients,
    clock: Clock,
) -> Migrated:
    topic = settings.topics.names.inner
    count = settings.topics.inner_partitions
    ingested = store.read_inner_offsets(list(range(count)))
    migrated = Migrated()
    acks = Acks()
    where: dict[str, int] = {}
    unread: set[str] = set()
    for partition, message_id, below in _read(clients, topic, count, ingested, migrated):
        if not below:
            unread.add(message_id)
            migrated.unread_records += 1
        elif message_id not in where:
            where[message_id] = partition
    candidates = [i for i in where if i not in unread]
    for start in range(0, len(candidates), _BATCH):
        chunk = candidates[start : start + _BATCH]
        for message_id, index in zip(chunk, store.get_index(chunk), strict=True):
            if index is not None:
                continue  # held: restated below
            # Slot 0 ends nothing a store could still hold: one that holds the id (a
            # backup behind) restates it instead of forgetting it.
            key, value, headers = encode_expiry(message_id, 0)
            acks.sent()
            publisher.publish(topic, key, value, headers, acks.done, where[message_id])
            migrated.tombstones += 1
        _settle(acks)
    now = clock.now_ms()
    retention_ms = int(settings.delete.tombstone_retention_s * 1000)
    for found in restatement.held(store):
        if found.is_cancel:
            if found.cancelled_ms + retention_ms - EXPIRY_MARGIN_MS <= now:
                continue  # read back after its expiry, it would cancel a new add of the id
            migrated.cancels += 1
        else:
            migrated.messages += 1
        seen_in = where.get(found.message_id)
        to = partition_of(found.message_id.encode(), count) if seen_in is None else seen_in
        key, value, headers = encode(found)
        acks.sent()
        publisher.publish(topic, key, value, headers, acks.done, to)
        _throttle(acks, migrated.messages + migrated.cancels)
    _settle(acks)
    return migrated


def _throttle(acks: Acks, sent: int) -> None:
    """Every ``_BATCH`` records, wait for them: a store of millions is not queued at once."""
    if sent % _BATCH == 0:
        _settle(acks)


def _read(
    clients: KafkaClients,
    topic: str,
    count: int,
    ingested: dict[int, int],
    migrated: Migrated,
) -> Iterator[tuple[int, str, bool]]:
    """(partition, id, below the store's offsets) of every keyed record of ``topic`` from its
    start to the end it had when the read began."""
    errors = clients.errors("migration-reader")
    consumer = clients.consumer(f"{clients.client_id}-read", errors, {"enable.auto.commit": False})
    try:
        ends: dict[int, int] = {}
        for number in range(count):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, number), 30.0)
            if high > low:
                ends[number] = high
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
        deadline = _Deadline(_TIMEOUT_S)
        while ends:
            records = consumer.consume(_BATCH, 1.0)
            if records:
                deadline.renew()
            elif deadline.passed():
                raise RuntimeError(f"the inner topic {topic} gave nothing for {_TIMEOUT_S} s")
            for record in records:
                at, offset, key = record.partition(), record.offset(), record.key()
                if record.error() is not None or at is None or offset is None:
                    continue
                partition: int = at
                if partition not in ends or offset >= ends[partition]:
                    continue
                migrated.records_read += 1
                if key:
                    yield (
                        partition,
                        key.decode(errors="replace"),
                        offset < ingested.get(partition, 0),
                    )
                if offset + 1 >= ends[partition]:
                    del ends[partition]
            _drop_finished(consumer.position, topic, ends)
    finally:
        consumer.close()


def _drop_finished(
    position: Callable[[list[TopicPartition]], list[TopicPartition]],
    topic: str,
    ends: dict[int, int],
) -> None:
    """Partitions whose last offsets are transaction markers: read past their end."""
    if not ends:
        return
    for tp in position([TopicPartition(topic, p) for p in ends]):
        if tp.offset >= ends.get(tp.partition, tp.offset + 1):
            ends.pop(tp.partition, None)


class _Deadline:
    def __init__(self, seconds: float) -> None:
        self._seconds = seconds
        self._at = time.monotonic() + seconds

    def renew(self) -> None:
        self._at = time.monotonic() + self._seconds

    def passed(self) -> bool:
        return time.monotonic() > self._at
