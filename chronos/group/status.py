"""What ``chronos group`` reports: members, the master, the committed progress, replica lag.

Two halves: :func:`ask_kafka` gathers the facts (the election group as the coordinator
describes it, what each replica last announced of itself, the last committed cut, each
member's committed inner offsets and the inner topic's ends) and :func:`build_status` turns
facts into the view, without Kafka.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from chronos.errors import ConfigError
from chronos.group import announcement
from chronos.group.announcement import Announcement
from chronos.group.follower import ProgressLog, read_to_end
from chronos.group.spec import GroupSpec
from chronos.kafka.admin import stable_end
from chronos.kafka.clients import KafkaClients
from chronos.schedule.progress_record import Cut
from chronos.types import EpochMs


@dataclass
class Member:
    """One live replica: in the election group, or announcing itself while it is not eligible
    yet (``group/announcement.py``)."""

    node: str
    host: str
    #: Delivering: it committed the latest progress, recently (``GroupStatus.master``).
    master: bool
    #: Assigned the election partition: the member that should deliver. It waits while
    #: another master still commits (a live master is never preempted), so the two can differ.
    elected: bool = False
    #: Inner records not yet stored by this replica (from the offsets it reports after fsync).
    ingest_lag: int | None = None
    #: What it last said of itself: restoring, incomplete, eligible, master (None: it said
    #: nothing recently, e.g. a node of an earlier release).
    state: str | None = None
    #: What that state depends on (where its store began, the floor, what it waits for).
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class GroupStatus:
    """The group as Kafka sees it now."""

    group: str
    state: str
    members: list[Member] = field(default_factory=list)
    #: The replica delivering now: the one whose progress commit is the latest and younger
    #: than ``silent_after_ms``; None while no one delivers (a takeover under way).
    master: str | None = None
    #: The member assigned the election partition.
    elected: str | None = None
    term: int | None = None
    committed_seek_ms: int | None = None
    committed_by: str | None = None
    committed_age_ms: int | None = None
    #: The inner topic's first offset per partition (retention and DeleteRecords move it).
    inner_starts: dict[int, int] = field(default_factory=dict)
    #: The rebuild floor the master last published (``schedule/floor.py``), and its age.
    rebuild_floor: dict[int, int] | None = None
    floor_age_ms: int | None = None
    #: Whether a replica with an empty store could rebuild everything from the inner topic
    #: now: every partition starts at 0 or at most at the floor.
    rebuildable: bool = False

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class MemberFacts:
    """One member of the election group as the coordinator describes it.

    Parameters:
        client_id: its ``client.id``: the replica's node id (``KafkaClients``).
        host: where it connects from.
        assigned_topics: the topics of the partitions assigned to it.
    """

    client_id: str
    host: str
    assigned_topics: tuple[str, ...]


@dataclass(frozen=True)
class GroupFacts:
    """What Kafka says about a group, gathered by :func:`ask_kafka`.

    Parameters:
        state: the election group's state (``stable``, ``empty``, ...).
        members: its members.
        cut: the last committed progress record, None before any.
        committed: per node id, its ingest group's committed offset per inner partition.
        ends: the inner topic's end offset per partition.
        starts: the inner topic's first offset per partition.
        announced: each replica's last announcement, by node id.
    """

    state: str
    members: tuple[MemberFacts, ...]
    cut: Cut | None
    committed: dict[str, dict[int, int]]
    ends: dict[int, int]
    starts: dict[int, int] = field(default_factory=dict)
    announced: dict[str, Announcement] = field(default_factory=dict)


#: A master commits progress at least every group.progress_interval_ms (250 ms by default),
#: and backups suspect it after group.suspect_after_ms (1.5 s): a latest commit older than
#: this means no one is delivering.
SILENT_AFTER_MS = 5_000


def build_status(
    spec: GroupSpec, facts: GroupFacts, now_ms: EpochMs, silent_after_ms: int = SILENT_AFTER_MS
) -> GroupStatus:
    """The view of a group: the master is who commits the progress (fencing lets only one
    do so), the elected member is who is assigned the election topic. They differ while an
    elected member waits for a live master to fall silent, or a takeover is under way."""
    status = GroupStatus(group=spec.name, state=facts.state)
    cut = facts.cut
    if cut is not None:
        status.term = cut.term
        status.committed_seek_ms = cut.seek_ms
        status.committed_by = cut.node
        status.committed_age_ms = now_ms - cut.committed_at_ms
        if status.committed_age_ms <= silent_after_ms:
            status.master = cut.node
    live = _live_announcements(facts.announced, now_ms)
    for facts_of in facts.members:
        elected = spec.election_topic in facts_of.assigned_topics
        delivering = facts_of.client_id == status.master
        member = Member(facts_of.client_id, facts_of.host, delivering, elected)
        said = live.pop(facts_of.client_id, None)
        if said is not None:
            member.state, member.detail = said.state, dict(said.detail)
        status.members.append(member)
        if elected:
            status.elected = facts_of.client_id
    for said in live.values():  # not in the election: restoring, incomplete, or joining
        status.members.append(
            Member(
                node=said.node,
                host="",
                master=said.node == status.master,
                state=said.state,
                detail=dict(said.detail),
            )
        )
    floor = None if cut is None else cut.floor
    status.inner_starts = dict(facts.starts)
    if floor is not None:
        status.rebuild_floor = dict(floor.offsets)
        status.floor_age_ms = now_ms - floor.at_ms
    status.rebuildable = all(
        start == 0 or (floor is not None and start <= floor.offsets.get(p, 0))
        for p, start in facts.starts.items()
    )
    ends = {p: end for p, end in facts.ends.items() if not spec.partitions or p in spec.partitions}
    for member in status.members:
        committed = facts.committed.get(member.node)
        if committed is not None and ends:
            member.ingest_lag = sum(end - max(committed.get(p, 0), 0) for p, end in ends.items())
    status.members.sort(key=lambda m: (not m.master, not m.elected, m.node))
    return status


def _live_announcements(
    announced: dict[str, Announcement], now_ms: EpochMs
) -> dict[str, Announcement]:
    """Announcements of replicas that run: recent, and not their last word at a stop."""
    return {
        node: said
        for node, said in announced.items()
        if said.state != announcement.STOPPED and now_ms - said.at_ms <= announcement.STALE_AFTER_MS
    }


#: The inner topic's first and end offsets per partition (``inner_watermarks``).
Watermarks = tuple[dict[int, int], dict[int, int]]


def group_status(
    spec: GroupSpec,
    clients: KafkaClients,
    timeout_s: float = 10.0,
    silent_after_ms: int = SILENT_AFTER_MS,
    watermarks: Watermarks | None = None,
) -> GroupStatus:
    """Ask Kafka about ``spec``'s group and build its view (``watermarks``: the inner topic's,
    when the caller asked once for many groups)."""
    facts = ask_kafka(spec, clients, timeout_s, watermarks)
    return build_status(spec, facts, int(time.time() * 1000), silent_after_ms)


def ask_kafka(
    spec: GroupSpec,
    clients: KafkaClients,
    timeout_s: float,
    watermarks: Watermarks | None = None,
) -> GroupFacts:
    """The election group's description, the last cut, and each member's ingest offsets."""
    admin = clients.admin()
    election = spec.election_group
    try:
        described = admin.describe_consumer_groups([election])[election].result(timeout_s)
    except KafkaException as exc:
        raise ConfigError(f"cannot describe the election group {election}: {exc}") from exc
    members = tuple(
        MemberFacts(
            member.client_id,
            member.host,
            tuple(
                tp.topic for tp in (member.assignment.topic_partitions if member.assignment else [])
            ),
        )
        for member in described.members
    )
    starts, ends = watermarks or inner_watermarks(spec, clients, timeout_s)
    announced = _announcements(spec, clients, timeout_s)
    # Only replicas listed get their offsets read: a compacted members topic keeps the last
    # word of every node that ever ran, long gone ones included.
    live = _live_announcements(announced, int(time.time() * 1000))
    nodes = {m.client_id for m in members} | set(live)
    committed = _committed(spec, clients, sorted(nodes), timeout_s)
    return GroupFacts(
        state=str(described.state).split(".")[-1].lower(),
        members=members,
        cut=_last_cut(spec, clients, timeout_s),
        committed=committed,
        ends=ends,
        starts=starts,
        announced=announced,
    )


def _announcements(
    spec: GroupSpec, clients: KafkaClients, timeout_s: float
) -> dict[str, Announcement]:
    """Each replica's last announcement: the members topic read to its end (a group of an
    earlier release has no such topic: no announcements)."""
    topic = spec.members_topic
    consumer = clients.consumer(
        spec.progress_reader_group(f"members-{time.time_ns()}"),
        clients.errors("status"),
        {"enable.partition.eof": True},  # compaction may leave the last offsets empty
    )
    announced: dict[str, Announcement] = {}
    try:
        meta = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
        if meta is None or meta.error is not None or not meta.partitions:
            return announced
        deadline = time.monotonic() + timeout_s
        low, high = watermark(consumer, TopicPartition(topic, 0), deadline)
        if high <= low:
            return announced
        consumer.assign([TopicPartition(topic, 0, low)])
        position = low
        while position < high:
            if time.monotonic() >= deadline:
                raise ConfigError(f"{topic} was not read to its end in {timeout_s} s")
            for message in consumer.consume(500, 0.2):
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        position = high
                    continue
                position = max(position, (message.offset() or 0) + 1)
                said = announcement.decode(message.key(), message.value())
                if said is not None:
                    announced[said.node] = said
        return announced
    finally:
        consumer.close()


def _last_cut(spec: GroupSpec, clients: KafkaClients, timeout_s: float) -> Cut | None:
    log = ProgressLog(
        spec.progress_topic,
        spec.progress_reader_group(f"status-{time.time_ns()}"),
        clients.consumer,
        clients.errors("progress-status"),
    )
    try:
        return read_to_end(log, timeout_s, stable_end(clients.admin(), spec.progress_topic))[0]
    finally:
        log.close()


def inner_watermarks(spec: GroupSpec, clients: KafkaClients, timeout_s: float) -> Watermarks:
    """The inner topic's first and end offsets per partition."""
    inner = spec.inner_topic
    consumer = clients.consumer(spec.progress_reader_group("status"), clients.errors("status"))
    try:
        meta = consumer.list_topics(inner, timeout=timeout_s).topics.get(inner)
        starts: dict[int, int] = {}
        ends: dict[int, int] = {}
        deadline = time.monotonic() + timeout_s
        for p in sorted(meta.partitions if meta is not None else ()):
            starts[p], ends[p] = watermark(consumer, TopicPartition(inner, p), deadline)
        return starts, ends
    finally:
        consumer.close()


#: What a partition answers while its leader is being elected (a broker just started, a topic
#: just created, a leader moving): asked again until the deadline, not reported as a failure.
_LEADER_MOVING = {
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
}


def watermark(consumer: Any, partition: TopicPartition, deadline: float) -> tuple[int, int]:
    """A partition's first and end offsets, asked again while its leader is moving."""
    while True:
        try:
            low, high = consumer.get_watermark_offsets(
                partition, timeout=max(0.1, deadline - time.monotonic())
            )
            return int(low), int(high)
        except KafkaException as exc:
            if exc.args[0].code() not in _LEADER_MOVING or time.monotonic() >= deadline:
                raise
            time.sleep(0.1)


def _committed(
    spec: GroupSpec, clients: KafkaClients, nodes: list[str], timeout_s: float
) -> dict[str, dict[int, int]]:
    """Each node's committed ingest offsets (advisory, fsynced)."""
    inner = spec.inner_topic
    committed: dict[str, dict[int, int]] = {}
    errors = clients.errors("status")
    for node in nodes:
        consumer = clients.consumer(spec.names.node_group(node), errors)
        try:
            meta = consumer.list_topics(inner, timeout=timeout_s).topics.get(inner)
            if meta is None or not meta.partitions:
                continue
            partitions = [TopicPartition(inner, p) for p in sorted(meta.partitions)]
            found = consumer.committed(partitions, timeout=timeout_s)
            committed[node] = {tp.partition: tp.offset for tp in found}
        finally:
            consumer.close()
    return committed
