"""What ``chronos group`` reports: members, the master, the committed progress, replica lag."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from chronos.errors import ConfigError
from chronos.group.follower import ProgressLog
from chronos.group.record import Cut
from chronos.settings import ChronosSettings

#: The election consumer's client.id is this prefix plus the node id (``election.py``).
ELECTION_CLIENT_PREFIX = "chronos-election-"


@dataclass
class Member:
    """One replica in the election group."""

    node: str
    host: str
    master: bool
    #: Inner records not yet stored by this replica (from the offsets it reports after fsync).
    ingest_lag: int | None = None


@dataclass
class GroupStatus:
    """The group as Kafka sees it now."""

    group: str
    state: str
    members: list[Member] = field(default_factory=list)
    master: str | None = None
    term: int | None = None
    committed_seek_ms: int | None = None
    committed_by: str | None = None
    committed_age_ms: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def group_status(settings: ChronosSettings, timeout_s: float = 10.0) -> GroupStatus:
    """Ask Kafka: the election group's members and assignment, the last committed cut, and
    each member's ingest lag on the inner topic."""
    group = settings.group.name
    if group is None:
        raise ConfigError("group.name is not set: this node is not in a replica group")
    names = settings.topics.names
    admin = AdminClient(settings.kafka.admin())
    election = names.election_group(group)
    try:
        described = admin.describe_consumer_groups([election])[election].result(timeout_s)
    except KafkaException as exc:
        raise ConfigError(f"cannot describe the election group {election}: {exc}") from exc
    status = GroupStatus(group=group, state=str(described.state).split(".")[-1].lower())
    for member in described.members:
        node = member.client_id.removeprefix(ELECTION_CLIENT_PREFIX)
        assigned = member.assignment.topic_partitions if member.assignment else []
        is_master = any(tp.topic == names.election(group) for tp in assigned)
        status.members.append(Member(node, member.host, is_master))
        if is_master:
            status.master = node
    cut = _last_cut(settings, timeout_s)
    if cut is not None:
        status.term = cut.term
        status.committed_seek_ms = cut.seek_ms
        status.committed_by = cut.node
        status.committed_age_ms = int(time.time() * 1000) - cut.committed_at_ms
    _fill_lag(settings, status.members, timeout_s)
    status.members.sort(key=lambda m: (not m.master, m.node))
    return status


def _last_cut(settings: ChronosSettings, timeout_s: float) -> Cut | None:
    log = ProgressLog(settings, reader=f"status-{time.time_ns()}")
    try:
        end = log.end_offset(timeout_s)
        last: Cut | None = None
        deadline = time.monotonic() + timeout_s
        while log.end_reached < end and time.monotonic() < deadline:
            for record in log.read(0.2):
                if isinstance(record, Cut):
                    last = record
        return last
    finally:
        log.close()


def _fill_lag(settings: ChronosSettings, members: list[Member], timeout_s: float) -> None:
    names = settings.topics.names
    for member in members:
        consumer = Consumer(settings.kafka.consumer(names.node_group(member.node)))
        try:
            meta = consumer.list_topics(names.inner, timeout=timeout_s).topics.get(names.inner)
            if meta is None or not meta.partitions:
                continue
            partitions = [TopicPartition(names.inner, p) for p in sorted(meta.partitions)]
            committed = consumer.committed(partitions, timeout=timeout_s)
            lag = 0
            for tp in committed:
                _low, high = consumer.get_watermark_offsets(tp, timeout=timeout_s)
                lag += high - max(tp.offset, 0)
            member.ingest_lag = lag
        finally:
            consumer.close()
