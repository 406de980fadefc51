"""A node's standbys: the committed progress of every partition it hosts and does not deliver,
read through one consumer and applied to each partition's schedule.

A cluster node of the second shape (``docs/design/cluster-v2.md``) keeps each partition it
stands by for warm, as a replica group's backup does (``follower.py``): its one ingest stores
every add (``schedule/partition_ledgers.py``), and this applies the owner's committed cuts, so
that a takeover starts from a store that says "delivered" for exactly what the log covers.
Before, each hosted partition had a reader of its own (one consumer and its fetch session per
partition); here one consumer is assigned every followed progress topic, and a partition
joins or leaves it (``incremental_assign``) without a rebalance: the reader never joins its
group.

Each partition keeps its own ``Follower``: a cut waits until that partition's ingest covers
its offsets, whatever the others do.

The same consumer reads the cluster's node-log topic (``node_log.py``), where owners put the
cuts that carry nothing else: every partition of it, from its beginning. It routes a cut to
its partition's follower by the record's key alone (others are not decoded) and keeps the
last record of every partition's cut (``NodeLogState``, for the claims), so that a
partition that starts being followed later gets its newest cut at once instead of waiting
for its owner's next. A partition is then followed from its own log's beginning: a node-log
cut waits for the own-log cut it names (``Follower.take_node_cuts``).

Reading every record of a followed partition's own log, it also keeps what the log says of
the partition's holder (``claims.Ownership``: claims, and the last cut's ``released_to``), so
that a cluster member's round knows whom it would claim each partition from without a reader
per partition (``cluster/rounds.py``).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

import structlog
from confluent_kafka import KafkaError, Message, TopicPartition

from chronos.errors import DecodeError
from chronos.group.claims import Holding, Ownership
from chronos.group.follower import READER_OPTIONS, Follower, decoded
from chronos.group.node_log import NodeLogState
from chronos.kafka.batches import read_ready
from chronos.kafka.clients import lingering_fetch
from chronos.kafka.librdkafka import ClientErrors
from chronos.kafka.start import FROM_START
from chronos.lifecycle import LoopWorker
from chronos.schedule.progress_record import (
    Claim,
    Cut,
    RepeatState,
    cut_order,
    decode_node_cut,
    node_cut_partition,
)
from chronos.settings import KafkaValue

log = structlog.get_logger(__name__)

#: How long one read waits for a record: also how soon a partition added or left is seen.
_POLL_S = 0.05
_BATCH = 1000


class ProgressLogsConsumer(Protocol):
    """What ``ProgressLogs`` needs of a consumer (confluent-kafka's)."""

    def incremental_assign(self, partitions: list[TopicPartition]) -> None: ...
    def incremental_unassign(self, partitions: list[TopicPartition]) -> None: ...
    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]: ...
    def poll(self, timeout: float = ...) -> Message | None: ...
    def consume(self, num_messages: int = ..., timeout: float = ...) -> list[Message]: ...
    def close(self) -> None: ...


class OpenProgressLogsConsumer(Protocol):
    """Builds the consumer (``KafkaClients.consumer``)."""

    def __call__(
        self,
        group_id: str,
        errors: ClientErrors,
        overrides: Mapping[str, KafkaValue] | None = ...,
    ) -> ProgressLogsConsumer: ...


@dataclass
class Read:
    """What one read returned for one partition: its records in order, whether the read
    reached the end of its progress topic, and its cuts from the node log, in that order."""

    records: list[Cut | RepeatState] = field(default_factory=list)
    end_reached: bool = False
    node_cuts: list[Cut] = field(default_factory=list)


class ProgressLogs:
    """Reads the progress topics of several partitions with ``read_committed``, through one
    consumer: what committed delivery transactions wrote, nothing of an aborted or open one.
    Only the thread that reads may call ``follow`` and ``leave``.

    Parameters:
        reader_group: the consumer's group id (never joined: librdkafka wants one).
        open_consumer: builds its consumer.
        errors: the consumer's error handler (an authorization failure ends the node).
        node_log: the cluster's node-log topic and its partition count; None: none read.
        node_state: where what it reads of the node log is kept for the claims
            (``node_log.NodeLogCuts``); a new one by default.
        linger_ms: once a fetch returned records, the logs are fetched again this long
            later (``kafka.clients.lingering_fetch``; 0: at once). Every member reads every
            member's node log, and each committed transaction answers its fetch: under load
            one fetch per commit of any member, each read and routed here.
    """

    def __init__(
        self,
        reader_group: str,
        open_consumer: OpenProgressLogsConsumer,
        errors: ClientErrors,
        node_log: tuple[str, int] | None = None,
        node_state: NodeLogState | None = None,
        linger_ms: int = 0,
    ) -> None:
        self._errors = errors
        self._consumer = open_consumer(
            reader_group, errors, {**READER_OPTIONS, **lingering_fetch(linger_ms)}
        )
        #: The inner partition whose progress each followed topic holds.
        self._partitions: dict[str, int] = {}
        #: The newest node-log cut of every partition seen, followed or not, and how far
        #: each partition of the node log was read.
        self.node_state = node_state or NodeLogState()
        #: Partitions followed since the last read: their newest node-log cut goes out with it.
        self._joined: list[int] = []
        #: Who holds each followed partition, as its log says so far; the latest reading of
        #: each is published under the lock for other threads (``holdings``).
        self._ownerships: dict[int, Ownership] = {}
        self._holdings: dict[int, Holding] = {}
        self._holdings_lock = threading.Lock()
        #: Followed partitions whose log was read to its end once: only their holder is
        #: published (an empty reading of a log not read yet would name nobody).
        self._read_once: set[int] = set()
        self._node_topic: str | None = None
        self._node_partitions: list[TopicPartition] = []
        if node_log is not None:
            topic, count = node_log
            self._node_topic = topic
            self._node_partitions = [TopicPartition(topic, n) for n in range(count)]
            every = [TopicPartition(topic, n, FROM_START) for n in range(count)]
            self._consumer.incremental_assign(every)

    @property
    def followed(self) -> list[int]:
        """The partitions whose progress is read, in order."""
        return sorted(self._partitions.values())

    def follow(self, partition: int, topic: str, offset: int = FROM_START) -> None:
        """Read ``partition``'s progress topic from ``offset`` (its beginning by default)."""
        if topic in self._partitions:
            return
        self._consumer.incremental_assign([TopicPartition(topic, 0, offset)])
        self._partitions[topic] = partition
        self._joined.append(partition)
        self._ownerships[partition] = Ownership()
        self._read_once.discard(partition)

    def leave(self, partition: int) -> None:
        """Stop reading ``partition``'s progress; records of it still in flight are dropped."""
        for topic, followed in list(self._partitions.items()):
            if followed == partition:
                del self._partitions[topic]
                self._consumer.incremental_unassign([TopicPartition(topic, 0)])
        self._ownerships.pop(partition, None)
        self._read_once.discard(partition)
        with self._holdings_lock:
            self._holdings.pop(partition, None)

    def position(self, partition: int) -> int:
        """The next offset to read of ``partition``'s own log, past control records (-1:
        not followed, or no position yet)."""
        for topic, followed in self._partitions.items():
            if followed == partition:
                placed = self._consumer.position([TopicPartition(topic, 0)])
                offset = placed[0].offset if placed else -1
                ownership = self._ownerships.get(partition)
                return max(offset, -1 if ownership is None else ownership.last_offset + 1)
        return -1

    def holdings(self) -> dict[int, Holding]:
        """What each followed partition's log says of its holder, as read so far: only
        partitions whose log was read to its end once (before that, an empty reading would
        name nobody where somebody holds it). Any thread may ask."""
        with self._holdings_lock:
            return dict(self._holdings)

    def read(self, timeout_s: float) -> dict[int, Read]:
        """What arrived, by partition, in each topic's order (at most a batch in all)."""
        out: dict[int, Read] = {}
        followed = set(self._partitions.values())
        for partition in self._joined:
            known = self.node_state.newest(partition)
            if known is not None and partition in followed:
                out.setdefault(partition, Read()).node_cuts.append(known)
        self._joined = []
        held: set[int] = set()
        for message in read_ready(self._consumer, _BATCH, timeout_s):
            topic = message.topic() or ""
            if topic == self._node_topic:
                self._node_record(message, followed, out)
                continue
            owner = self._partitions.get(topic)
            if owner is None:
                continue  # left meanwhile
            read = out.setdefault(owner, Read())
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    read.end_reached = True
                    self._read_once.add(owner)
                    held.add(owner)
                else:
                    self._errors(error)
                continue
            record = decoded(message)
            if record is None:
                continue
            ownership = self._ownerships.get(owner)
            if ownership is not None:
                ownership.take(message.offset() or 0, record)
                held.add(owner)
            if not isinstance(record, Claim):
                read.records.append(record)
        held &= self._read_once
        if held:
            with self._holdings_lock:
                for partition in held:
                    self._holdings[partition] = self._ownerships[partition].holding
        if self._node_partitions:
            # After the records: a claimant waiting for a position finds their cuts kept.
            placed = self._consumer.position(self._node_partitions)
            self.node_state.read_to({tp.partition: tp.offset for tp in placed if tp.offset >= 0})
        return out

    def _node_record(self, message: Message, followed: set[int], out: dict[int, Read]) -> None:
        """A node-log record: kept for the claims, and read out when its partition is
        followed (decoded only then)."""
        error = message.error()
        node_partition = message.partition() or 0
        if error is not None:
            if error.code() == KafkaError._PARTITION_EOF:
                # An empty partition has no position before a record: its end says it.
                self.node_state.read_to({node_partition: message.offset() or 0})
            else:
                self._errors(error)
            return
        partition = node_cut_partition(message.key())
        value = message.value()
        if partition is None or value is None:
            return
        self.node_state.take(partition, node_partition, value)
        if partition not in followed:
            return
        try:
            _, cut = decode_node_cut(message.key(), value)
        except DecodeError as exc:
            log.error("node_log_record_undecodable", offset=message.offset(), reason=str(exc))
            return
        out.setdefault(partition, Read()).node_cuts.append(cut)

    def close(self) -> None:
        self._consumer.close()


class StandbysWorker(LoopWorker):
    """Applies each followed partition's committed progress to its schedule, as ingest
    covers it. Partitions join (``add``) and leave (``remove``) between two reads.

    Parameters:
        logs: the reader of every followed progress topic.
    """

    def __init__(self, logs: ProgressLogs) -> None:
        super().__init__("standbys")
        self._logs = logs
        self._followers: dict[int, Follower] = {}
        self._lock = threading.Lock()
        #: Joins (partition, topic, follower, offset) and leaves (partition, done), in the
        #: order asked: a leave right after a join must not be undone by it.
        self._changes: list[_Join | _Leave] = []
        #: Partitions being handed to this node's delivery (``hand_in``), not done yet.
        self._hand_ins: list[HandIn] = []

    def add(self, partition: int, topic: str, follower: Follower, offset: int = FROM_START) -> None:
        """Follow ``partition``'s progress ``topic`` from ``offset`` into ``follower``."""
        with self._lock:
            self._changes.append(_Join(partition, topic, follower, offset))

    def remove(self, partition: int) -> threading.Event:
        """Stop following ``partition``; the event is set once no read of this worker
        applies anything to it any more (a takeover waits for it before it relocates)."""
        done = threading.Event()
        with self._lock:
            if self.is_alive():
                self._changes.append(_Leave(partition, done))
                return done
            # No read runs (not started, or ended): nothing to wait for.
            self._changes = [
                c for c in self._changes if not (isinstance(c, _Join) and c.partition == partition)
            ]
            self._followers.pop(partition, None)
        done.set()
        return done

    def holdings(self) -> dict[int, Holding]:
        """What each followed partition's log says of its holder (``ProgressLogs.holdings``)."""
        return self._logs.holdings()

    def hand_in(self, partition: int, past: int, cut: Cut | None) -> HandIn:
        """Hand ``partition`` to this node's delivery after a won claim at offset ``past`` of
        its own log, whose start is ``cut`` (``claims.Decision``): read its log past the
        claim (the repeat states committed before it), apply ``cut`` once ingest covers it,
        then stop following. The claim was read by another reader: without this, a state
        this follower had not read yet would be missing from the store the lane delivers
        from. ``HandIn.done`` is set once no read of this worker applies anything to the
        partition any more; ``cancel`` gives up a hand-in that took too long (the
        partition is followed on)."""
        hand_in = HandIn(partition, past, cut)
        with self._lock:
            self._hand_ins.append(hand_in)
        return hand_in

    def cancel(self, hand_in: HandIn) -> bool:
        """Give up ``hand_in``; False when it was done meanwhile (the partition left)."""
        with self._lock:
            if hand_in.done.is_set():
                return False
            self._hand_ins = [h for h in self._hand_ins if h is not hand_in]
            return True

    def follower(self, partition: int) -> Follower | None:
        """The follower of ``partition`` (None: not followed)."""
        return self._followers.get(partition)

    def step(self) -> None:
        self._membership()
        for partition, read in self._logs.read(_POLL_S).items():
            follower = self._followers.get(partition)
            if follower is None:
                continue
            follower.take(read.records, read.end_reached)
            follower.take_node_cuts(read.node_cuts)
        for follower in self._followers.values():
            follower.apply_covered()
        with self._lock:
            hand_ins = list(self._hand_ins)
        for hand_in in hand_ins:
            self._hand_in(hand_in)

    def _hand_in(self, hand_in: HandIn) -> None:
        """One step of a hand-in: done once the log was read past the claim and every
        record read, the claim's start cut included, was applied."""
        partition = hand_in.partition
        follower = self._followers.get(partition)
        if follower is not None:
            if self._logs.position(partition) <= hand_in.past:
                return
            if not hand_in.cut_taken:
                hand_in.cut_taken = True
                if hand_in.cut is not None:
                    follower.take_node_cuts([hand_in.cut])
                follower.apply_covered()
            if follower.waiting or not _applied(follower, hand_in.cut):
                return
            hand_in.applied = follower.applied
        with self._lock:
            if hand_in not in self._hand_ins:
                return  # cancelled meanwhile
            self._hand_ins = [h for h in self._hand_ins if h is not hand_in]
            self._logs.leave(partition)
            self._followers.pop(partition, None)
            hand_in.followed = follower is not None
            hand_in.done.set()
        log.info("standby_handed_in", partition=partition, past=hand_in.past)

    def finish(self) -> None:
        self._membership()
        self._logs.close()

    def _membership(self) -> None:
        with self._lock:
            changes, self._changes = self._changes, []
        for change in changes:
            if isinstance(change, _Leave):
                self._logs.leave(change.partition)
                self._followers.pop(change.partition, None)
                change.done.set()
            else:
                self._followers[change.partition] = change.follower
                self._logs.follow(change.partition, change.topic, change.offset)
                log.info("standby_following", partition=change.partition, topic=change.topic)


@dataclass(eq=False)
class HandIn:
    """A followed partition being handed to this node's delivery (``StandbysWorker.hand_in``).

    Parameters:
        partition: the inner partition.
        past: the won claim's offset in the partition's own log.
        cut: where the claim's winner delivers from (the decision's cut).
    """

    partition: int
    past: int
    cut: Cut | None
    #: Set once the partition left the worker (read past the claim, everything applied).
    done: threading.Event = field(default_factory=threading.Event)
    #: The newest cut applied to its store when it left (None: none).
    applied: Cut | None = None
    #: False when the partition was not followed: nothing was read for it.
    followed: bool = True
    cut_taken: bool = False


def _applied(follower: Follower, cut: Cut | None) -> bool:
    """Whether ``follower`` applied ``cut`` or a later one (None: nothing to apply)."""
    if cut is None:
        return True
    applied = follower.applied
    return applied is not None and cut_order(applied) >= cut_order(cut)


@dataclass(frozen=True)
class _Join:
    partition: int
    topic: str
    follower: Follower
    offset: int


@dataclass(frozen=True)
class _Leave:
    partition: int
    done: threading.Event
