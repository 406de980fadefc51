"""Creating chronos' internal topics; what Kafka says about topics and chronos' rights."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from typing import TypeVar

import structlog
from confluent_kafka import (
    IsolationLevel,
    KafkaError,
    KafkaException,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._acl import AclOperation  # not re-exported explicitly
from confluent_kafka.admin._listoffsets import OffsetSpec  # not re-exported explicitly
from confluent_kafka.admin._metadata import TopicMetadata  # not re-exported explicitly

# Defined in cimpl; confluent_kafka.admin re-exports the same class only implicitly, which
# strict mypy (no_implicit_reexport) rejects.
from confluent_kafka.cimpl import NewTopic

from chronos.errors import ConfigError
from chronos.kafka import compacted_config
from chronos.kafka.clients import KafkaClients
from chronos.kafka.librdkafka import lists_topic
from chronos.settings import ChronosSettings

log = structlog.get_logger(__name__)

_T = TypeVar("_T")

#: How long one wait for Kafka's first answer lasts before a stop is looked for.
_STOP_CHECK_S = 1.0


def _admin(settings: ChronosSettings) -> AdminClient:
    return KafkaClients(settings.kafka, settings.node.node_id).admin()


def ensure_topics(
    settings: ChronosSettings,
    timeout_s: float = 30.0,
    stopped: Callable[[], bool] = lambda: False,
) -> None:
    """Create the inner and dead-letter topics, and a replica group's election and progress
    topics, when missing (idempotent). Waiting for Kafka to answer ends early once
    ``stopped`` says so (a stop signal during start-up)."""
    names = settings.topics.names
    admin = _admin(settings)
    # Internal topics must take the largest request the proxy accepts, with chronos' headers.
    config = {"max.message.bytes": str(settings.limits.max_message_bytes + 64 * 1024)}
    # A pending message's record must outlive its next refresh (kafka.topic_config): no
    # compaction, no size-based deletion; retention.ms stays the broker's default.
    inner_config = {
        **config,
        "cleanup.policy": "delete",
        "retention.bytes": "-1",
        # The broker's append time on every record: the cancel gate's proof without a round
        # trip (node/watermark.py).
        "message.timestamp.type": "LogAppendTime",
    }
    if settings.rebuild.mode == "compact":
        # The last record of every id kept (kafka/compacted_config.py).
        inner_config = {**config, **compacted_config.creation_config()}
    wanted = [
        NewTopic(
            names.inner,
            settings.topics.inner_partitions,
            settings.topics.replication_factor,
            config=inner_config,
        ),
        NewTopic(names.dead_letter, 1, settings.topics.replication_factor, config=config),
    ]
    existing = _existing_topics(admin, settings, timeout_s, stopped)
    # One cut and one state per live repeat survive compaction.
    compacted = _COMPACTED
    replication = settings.topics.replication_factor
    wanted.append(_policy_topic(settings))
    cluster = settings.cluster.name
    if cluster is not None:
        # Each inner partition is a replica group of its own (runtime/shard.py); as many as
        # the inner topic has, whoever created it.
        inner = existing.get(names.inner)
        count = settings.topics.inner_partitions if inner is None else len(inner.partitions)
        wanted += [
            NewTopic(names.cluster(cluster), 1, replication),
            NewTopic(names.cluster_status(cluster), 1, replication, config=compacted),
        ]
        node_shape = settings.cluster.shape == "node"
        for partition in range(count):
            shard = names.shard_group(cluster, partition)
            wanted.append(NewTopic(names.progress(shard), 1, replication, config=compacted))
            if not node_shape:
                wanted.append(NewTopic(names.members(shard), 1, replication, config=compacted))
        if node_shape:
            # The members' node logs (group/node_log.py: a member reads its count back) and
            # heartbeats (group/peer_watch.py: only the last seconds matter).
            node_log = NewTopic(
                names.node_log(cluster), _NODE_LOG_PARTITIONS, replication, config=compacted
            )
            beats = NewTopic(names.heartbeats(cluster), 1, replication, config=_HEARTBEATS)
            wanted += [node_log, beats]
    elif settings.group.name is not None:
        group = settings.group.name
        wanted += [
            NewTopic(names.election(group), 1, replication),
            NewTopic(names.progress(group), 1, replication, config=compacted),
            # One announcement per replica survives compaction (group/announcement.py).
            NewTopic(names.members(group), 1, replication, config=compacted),
        ]
    else:
        progress = names.alone_progress(settings.node.node_id)
        wanted.append(NewTopic(progress, 1, settings.topics.replication_factor, config=compacted))
    _create_missing(admin, [t for t in wanted if t.topic not in existing], timeout_s)


#: Partitions of a cluster's node-log topic: nodes hash onto them, a few suffice.
_NODE_LOG_PARTITIONS = 4
#: The heartbeat topic keeps a minute (records are read from its end).
_HEARTBEATS = {"retention.ms": str(60 * 1000), "segment.ms": str(60 * 1000)}

#: A topic whose last record per key is what counts (progress, announcements, policies).
_COMPACTED = {"cleanup.policy": "compact", "segment.ms": str(3600 * 1000)}


def _policy_topic(settings: ChronosSettings) -> NewTopic:
    """The policy topic: the last policy set live for each target topic survives compaction."""
    names = settings.topics.names
    return NewTopic(names.policy, 1, settings.topics.replication_factor, config=_COMPACTED)


def ensure_policy_topic(settings: ChronosSettings, timeout_s: float = 30.0) -> None:
    """Create the policy topic alone when missing (a client setting a policy: a broker that
    creates topics on demand would make it without compaction, and forget policies past its
    retention)."""
    admin = _admin(settings)
    wanted = _policy_topic(settings)
    if wanted.topic not in _existing_topics(admin, settings, timeout_s, lambda: False):
        _create_missing(admin, [wanted], timeout_s)


def _existing_topics(
    admin: AdminClient, settings: ChronosSettings, timeout_s: float, stopped: Callable[[], bool]
) -> dict[str, TopicMetadata]:
    """The topics Kafka lists, asked again until ``timeout_s`` (or ``stopped``)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            wait_s = max(0.1, min(_STOP_CHECK_S, deadline - time.monotonic()))
            return dict(admin.list_topics(timeout=wait_s).topics)
        except KafkaException as exc:
            if stopped() or time.monotonic() >= deadline:
                raise ConfigError(
                    f"cannot reach Kafka at {settings.kafka.bootstrap_servers}: {exc.args[0]}"
                ) from exc


def _create_missing(admin: AdminClient, missing: list[NewTopic], timeout_s: float) -> None:
    """Create ``missing`` (one already made meanwhile is fine) and wait until Kafka lists them."""
    if not missing:
        return
    for topic, future in admin.create_topics(missing, request_timeout=timeout_s).items():
        try:
            future.result(timeout_s)
            log.info("topic_created", topic=topic)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise ConfigError(f"cannot create topic {topic}: {exc.args[0]}") from exc
    _await_metadata(admin, [t.topic for t in missing], timeout_s)


def _await_metadata(admin: AdminClient, topics: list[str], timeout_s: float) -> None:
    """Wait until the broker's metadata lists ``topics`` with partitions: a created topic can
    be missing from it for a moment after CreateTopics returned (seen on Apache Kafka 4.1 in
    KRaft mode), and a node reading its partition count then would refuse to start."""
    deadline = time.monotonic() + timeout_s
    waiting = set(topics)
    while waiting:
        metadata = admin.list_topics(timeout=timeout_s)
        waiting = {t for t in waiting if not lists_topic(metadata, t)}
        if waiting and time.monotonic() > deadline:
            raise ConfigError(
                f"topics {sorted(waiting)} were created but Kafka's metadata does not list "
                "them: chronos' principal may lack DESCRIBE on them"
            )
        if waiting:
            time.sleep(0.05)


def create_topic(
    settings: ChronosSettings, topic: str, partitions: int = 1, timeout_s: float = 30.0
) -> None:
    """Create a (target) topic; no error when it exists."""
    admin = _admin(settings)
    new = NewTopic(topic, partitions, settings.topics.replication_factor)
    for name, future in admin.create_topics([new], request_timeout=timeout_s).items():
        try:
            future.result(timeout_s)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise ConfigError(f"cannot create topic {name}: {exc.args[0]}") from exc


def log_start_offsets(
    settings: ChronosSettings, topic: str, partitions: list[int], timeout_s: float = 30.0
) -> dict[int, int]:
    """The first offset Kafka still holds per partition of ``topic`` (retention and
    ``DeleteRecords`` move it up)."""
    admin = _admin(settings)
    earliest = OffsetSpec.earliest()  # type: ignore[no-untyped-call]
    wanted = {TopicPartition(topic, p): earliest for p in partitions}
    try:
        futures = admin.list_offsets(wanted, request_timeout=timeout_s)
        return {tp.partition: int(f.result(timeout_s).offset) for tp, f in futures.items()}
    except KafkaException as exc:
        raise ConfigError(f"cannot read where {topic} starts: {exc.args[0]}") from exc


#: Pause before asking again about a partition whose leader is not known yet.
_LEADER_WAIT_S = 0.1
#: What a partition without a leader yet answers (a topic created a moment ago).
_LEADERLESS = frozenset({KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE})


def stable_end(admin: AdminClient, topic: str, timeout_s: float = 30.0) -> int:
    """The last stable offset of a one-partition topic: where a ``read_committed`` reader can
    read up to now (an open transaction's first record, else the end)."""
    latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
    tp = TopicPartition(topic, 0)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            futures = admin.list_offsets(
                {tp: latest},
                isolation_level=IsolationLevel.READ_COMMITTED,
                request_timeout=timeout_s,
            )
            return int(futures[tp].result(timeout_s).offset)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            # A topic created a moment ago may not have its leader yet (NOT_LEADER_FOR_PARTITION
            # on a loaded Apache Kafka): asked again until the deadline.
            retriable = isinstance(error, KafkaError) and (
                error.retriable() or error.code() in _LEADERLESS
            )
            if not retriable or time.monotonic() > deadline:
                raise ConfigError(f"cannot read where {topic} ends: {error}") from exc
            time.sleep(_LEADER_WAIT_S)


def stable_ends(
    admin: AdminClient,
    topic: str,
    partitions: list[int],
    timeout_s: float,
    committed: bool = True,
) -> dict[int, int]:
    """The last stable offset of each of ``partitions`` (one ListOffsets per broker): what a
    ``read_committed`` reader reaches (``committed`` False: the high watermark, which also
    moves with records of open transactions); KafkaException when Kafka does not answer."""
    latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
    wanted = {TopicPartition(topic, p): latest for p in partitions}
    isolation = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
    futures = admin.list_offsets(wanted, isolation_level=isolation, request_timeout=timeout_s)
    return {tp.partition: int(f.result(timeout_s).offset) for tp, f in futures.items()}


class RenewedAdmin:
    """An admin client asked again and again, dropped after a failed question and made anew
    for the next: librdkafka answers from its metadata cache, which after a broker restart
    kept answering FENCED_LEADER_EPOCH ("leader epoch is older than broker epoch") for minutes
    while the broker was long back (a cluster member's claims failed for 2 minutes, nothing
    delivered). Used from one thread at a time.

    Parameters:
        open_admin: builds an admin client.
    """

    def __init__(self, open_admin: Callable[[], AdminClient]) -> None:
        self._open_admin = open_admin
        self._admin: AdminClient | None = None

    def ask(self, question: Callable[[AdminClient], _T]) -> _T:
        """``question``'s answer from the client; a failure drops it (raised on). One that
        says the client's metadata is stale (``FENCED_LEADER_EPOCH``, after a broker's
        restart) is asked once more at once, of a new client: a claim round that failed on
        it waited for the next one (a broker-kill run read it on every member's first round
        after each restart, and the new client's answer a moment later)."""
        for last in (False, True):
            if self._admin is None:
                self._admin = self._open_admin()
            try:
                return question(self._admin)
            except BaseException as exc:
                self._admin = None
                if last or not _says_stale(exc):
                    raise
        raise AssertionError("unreachable")  # pragma: no cover


def _says_stale(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it was raised from) is Kafka's ``FENCED_LEADER_EPOCH``."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, KafkaException) and seen.args:
            error = seen.args[0]
            if isinstance(error, KafkaError) and error.code() == KafkaError.FENCED_LEADER_EPOCH:
                return True
        seen = seen.__cause__
    return False


class StableEnds:
    """``stable_ends`` of some partitions, asked again and again (the cancel gate's probe).

    A failed question drops the admin client: librdkafka answers from its metadata cache, and
    after a broker restart that cache said "no leader" for minutes (until its periodic refresh)
    while the broker was long back; a new client asks afresh.

    Parameters:
        open_admin: builds an admin client.
        topic: the topic.
        partitions: the partitions asked about.
        timeout_s: longest wait for one answer.
        committed: stable offsets (True) or high watermarks.
    """

    def __init__(
        self,
        open_admin: Callable[[], AdminClient],
        topic: str,
        partitions: list[int],
        timeout_s: float,
        committed: bool = True,
    ) -> None:
        self._committed = committed
        self._open_admin = open_admin
        self._topic = topic
        self._partitions = partitions
        self._timeout_s = timeout_s
        self._admin: AdminClient | None = None

    def __call__(self) -> dict[int, int]:
        if self._admin is None:
            self._admin = self._open_admin()
        try:
            return stable_ends(
                self._admin, self._topic, self._partitions, self._timeout_s, self._committed
            )
        except BaseException:
            self._admin = None
            raise


def partition_count(settings: ChronosSettings, topic: str, timeout_s: float = 30.0) -> int:
    """Number of partitions of ``topic``; ConfigError when it does not exist."""
    admin = _admin(settings)
    metadata = admin.list_topics(topic, timeout=timeout_s)
    if not lists_topic(metadata, topic):
        raise ConfigError(f"topic {topic} does not exist (run with topics.create = true)")
    return len(metadata.topics[topic].partitions)


def unwritable_topics(admin: AdminClient, topics: Collection[str], timeout_s: float) -> set[str]:
    """Which of ``topics`` Kafka's authorizer says chronos may not write.

    Why ask: inside a transaction a refused topic shows only as the transaction's error, and
    every record of it, of any topic, comes back purged; the topic's description lists what
    chronos may do with it (KIP-430). A topic chronos may not even describe is refused too
    (writing implies describing, so a topic without any ACL for chronos answers that). A topic
    Kafka does not know, or a broker that does not list operations, is not counted: its own
    errors say what it is. Raises ``KafkaException`` when Kafka does not answer."""
    if not topics:
        return set()
    described = admin.describe_topics(
        TopicCollection(sorted(topics)),
        request_timeout=timeout_s,
        include_authorized_operations=True,
    )
    refused: set[str] = set()
    for topic, future in described.items():
        try:
            operations = future.result(timeout_s).authorized_operations
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            code = error.code() if isinstance(error, KafkaError) else None
            if code == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                refused.add(topic)
                continue
            if code in _NOT_DESCRIBED:
                continue
            raise
        if operations is not None and AclOperation.WRITE not in operations:
            refused.add(topic)
    return refused


#: Answers that say nothing about chronos' rights on a topic.
_NOT_DESCRIBED = frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC})
