"""A node alone or a replica group becomes a cluster, without losing or delivering again.

What a cluster's partition must know before it delivers anything: which retained adds were
delivered already. A node alone or a group keeps that in its progress topic (the last cut:
seek and inner offsets covered; the rebuild floor; each repeat's state). Migrating writes, per
inner partition, that partition's share of it to the cluster's progress topic of the partition
(``TopicNames.shard_group``), once, while the old nodes are stopped; each partition's replica
then restores its store from the inner topic and takes over from that cut, as a replica that
replaced its disk would (docs/rebuild.md).

Refused: a cluster whose progress topics already hold records (it ran: its own cuts decide),
and a source that published nothing while the inner topic holds records (nothing would say
what was delivered).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import structlog
from confluent_kafka import TopicPartition

from chronos.errors import ConfigError
from chronos.group.published import Published, read_published
from chronos.group.status import watermark
from chronos.kafka.admin import ensure_topics, partition_count, stable_ends
from chronos.kafka.clients import KafkaClients
from chronos.kafka.partitioner import partition_of
from chronos.schedule.floor import Floor
from chronos.schedule.progress_record import Cut, RepeatState, encode_cut, encode_repeat
from chronos.settings import ChronosSettings

log = structlog.get_logger(__name__)

_FLUSH_S = 30.0


@dataclass(frozen=True)
class Migrated:
    """What a migration wrote."""

    source: str
    partitions: int
    seek_ms: int | None
    repeats: int


def shares(
    published: Published, partitions: int, node: str, now_ms: int
) -> dict[int, list[Cut | RepeatState]]:
    """Per partition, the records its progress topic starts with: the repeat states of its ids,
    then the source's cut narrowed to it (none when the source published no cut)."""
    out: dict[int, list[Cut | RepeatState]] = {p: [] for p in range(partitions)}
    for message_id, state in sorted(published.repeats.items()):
        out[partition_of(message_id.encode(), partitions)].append(state)
    cut = published.cut
    if cut is None:
        return out
    for partition in range(partitions):
        floor = None
        if cut.floor is not None:
            floor = Floor({partition: cut.floor.offsets.get(partition, 0)}, cut.floor.at_ms)
        out[partition].append(
            Cut(
                term=cut.term,
                seek_ms=cut.seek_ms,
                offsets={partition: cut.offsets.get(partition, 0)},
                node=node,
                committed_at_ms=now_ms,
                floor=floor,
            )
        )
    return out


def migrate(source: ChronosSettings, cluster: ChronosSettings) -> Migrated:
    """Write the progress of ``source`` (a node alone: ``node.node_id``; a replica group:
    ``group.name``) to ``cluster``'s partitions. The source's nodes must be stopped."""
    name = cluster.cluster.name
    if name is None:
        raise ConfigError("the target settings name no cluster (cluster.name)")
    described = source.group.name or f"node {source.node.node_id}"
    clients = KafkaClients(cluster.kafka, "chronos-migrate")
    ensure_topics(cluster)
    names = cluster.topics.names
    partitions = partition_count(cluster, names.inner)
    admin = clients.admin()
    written = _with_records(
        clients, [names.progress(names.shard_group(name, p)) for p in range(partitions)]
    )
    if written:
        raise ConfigError(
            f"cluster {name} has progress already ({written[:4]}): it ran, and its "
            "own cuts decide what it delivered; migrate into a cluster before its first start"
        )
    published = read_published(source, clients)
    inner_end = sum(stable_ends(admin, names.inner, list(range(partitions)), _FLUSH_S).values())
    if published.cut is None and inner_end > 0:
        raise ConfigError(
            f"{described} published no progress in {names.inner}'s namespace, but the inner "
            "topic holds records: nothing would say which were delivered (is the node id or "
            "group name the one it ran with, and was it stopped cleanly?)"
        )
    publisher = clients.idempotent("migrate", stop_flush_s=_FLUSH_S)
    publisher.start()
    failures: list[str] = []

    def done(error: object, _message: object) -> None:
        if error is not None:
            failures.append(str(error))

    try:
        now_ms = int(time.time() * 1000)
        for partition, records in shares(
            published, partitions, f"migrated:{described}", now_ms
        ).items():
            topic = names.progress(names.shard_group(name, partition))
            for record in records:
                key, value = (
                    encode_cut(record) if isinstance(record, Cut) else encode_repeat(record)
                )
                publisher.publish(topic, key, value, [], done)
        unanswered = publisher.flush(_FLUSH_S)
    finally:
        publisher.stop()
        publisher.join(_FLUSH_S)
    if failures or unanswered:
        raise ConfigError(
            f"the migration's records were not all written ({unanswered} unanswered, "
            f"{failures[:3]}): run it again (the cluster has not started)"
        )
    seek = None if published.cut is None else published.cut.seek_ms
    log.info("cluster_migrated", source=described, cluster=name, seek_ms=seek)
    return Migrated(described, partitions, seek, len(published.repeats))


def _with_records(clients: KafkaClients, topics: list[str]) -> list[str]:
    """The one-partition ``topics`` holding any record (asked again while a topic just made
    has no leader yet)."""
    consumer = clients.consumer("chronos-migrate", clients.errors("migrate"))
    deadline = time.monotonic() + _FLUSH_S
    try:
        return [t for t in topics if watermark(consumer, TopicPartition(t, 0), deadline)[1] > 0]
    finally:
        consumer.close()
