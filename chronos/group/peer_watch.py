"""One failure detector per node: heartbeats on a shared topic, and which peers fell silent.

Why not the progress logs (``master_watch.py`` watches one group's): a cluster node of the
second shape (``docs/design/cluster-v2.md``) owns many partitions and commits them in one
transaction; watching every partition's log would cost a question per partition, and a node
that owns nothing due commits nothing. So every node sends a small heartbeat every
``group.progress_interval_ms`` to one topic of the cluster, keyed by node, **outside its
transactions** (a node frozen with a transaction open must not hold the topic's last stable
offset and silence every peer at once for the watchers), carrying the count of its successful
delivery commits and whether it owns something due.

A peer is suspected when its heartbeats stop, or when its commit count stands still while it
says it owns something due (alive but unable to deliver: fenced, or its transactions
failing), for ``group.suspect_after_ms``. The watcher's own heartbeats, read back from the
same topic, are its proof of watching: silence is counted only while its own beats keep
arriving without a gap longer than ``max_gap_s`` (``gap_for`` the beat interval). A watcher
starved of CPU, or cut off from Kafka, or a broker that stalls, breaks that chain; the
silence of the others is then counted again from the chain's new start, so a frozen or
lagging watcher never suspects everyone at once when it thaws (``master_watch.py`` does the
same with its chain of answers).

What a suspicion costs: the watcher fences the suspect and claims its partitions
(``claims.py``); a false one costs a handover, never a duplicate.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import structlog
from confluent_kafka import OFFSET_END, KafkaError, TopicPartition

from chronos.errors import DecodeError
from chronos.kafka.batches import AssignedConsumer, read_ready
from chronos.kafka.librdkafka import ClientErrors
from chronos.kafka.publisher import Publisher
from chronos.lifecycle import LoopWorker
from chronos.settings import KafkaValue

log = structlog.get_logger(__name__)

#: Longest gap between two of the watcher's own heartbeats read back that still counts as
#: continuous watching, at the least (``gap_for``), and in beat intervals.
_MAX_GAP_S = 0.6
_GAP_PER_INTERVAL = 2.4
#: How long a peer silent by the clock counts as heard while this node did not watch it
#: (``heard_within``): a node whose own heartbeats do not come back still finds a peer gone.
_UNWATCHED_SILENCE_S = 30.0
_VERSION = 1
_POLL_S = 0.05


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """What a node says of itself, every ``group.progress_interval_ms``.

    Parameters:
        node: its id (the record's key).
        commits: its successful delivery commits since it started.
        due: whether a partition it owns has something due (its commits must move).
        at_ms: its clock when it sent this (for the logs; arrival time is what counts).
    """

    node: str
    commits: int
    due: bool
    at_ms: int


def encode_heartbeat(beat: Heartbeat) -> tuple[bytes, bytes]:
    """(key, value) of a heartbeat record."""
    body = {"v": _VERSION, "commits": beat.commits, "due": beat.due, "at_ms": beat.at_ms}
    return beat.node.encode(), json.dumps(body, separators=(",", ":")).encode()


def decode_heartbeat(key: bytes | None, value: bytes | None) -> Heartbeat:
    """A heartbeat record; DecodeError for anything else."""
    if key is None or value is None:
        raise DecodeError("a heartbeat has a key and a value")
    try:
        body = json.loads(value)
        if body.get("v") != _VERSION:
            raise DecodeError(f"heartbeat version {body.get('v')!r} is not {_VERSION}")
        return Heartbeat(key.decode(), int(body["commits"]), bool(body["due"]), int(body["at_ms"]))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise DecodeError(f"undecodable heartbeat: {exc}") from exc


@dataclass
class _Peer:
    heard_at: float
    commits: int
    due: bool
    #: When its commit count last moved, or it last owned nothing due.
    progressed_at: float


def gap_for(interval_s: float) -> float:
    """The longest gap between two of a watcher's own heartbeats, sent every ``interval_s``,
    that still counts as continuous watching: 0.6 s at the default 250 ms, more for a longer
    interval (a fixed 0.6 s never let a chain form at 600 ms or more: nobody was ever
    suspected)."""
    return max(_MAX_GAP_S, _GAP_PER_INTERVAL * interval_s)


class PeerWatch:
    """Which peers fell silent, judged from the heartbeats this node reads.

    Parameters:
        node: this node's id (its own heartbeats are its proof of watching).
        suspect_after_s: how long a peer must be silent (or stalled), watched without a break.
        now: monotonic time source.
        max_gap_s: the longest gap in the watcher's own beats that still counts as watching
            (``gap_for`` the beat interval).
    """

    def __init__(
        self,
        node: str,
        suspect_after_s: float,
        now: Callable[[], float] = time.monotonic,
        max_gap_s: float = _MAX_GAP_S,
    ) -> None:
        self.node = node
        self.suspect_after_s = suspect_after_s
        self._now = now
        self._max_gap_s = max_gap_s
        #: ``heard`` runs on the heartbeat thread, ``suspects`` on the delivery thread.
        self._lock = threading.Lock()
        self._peers: dict[str, _Peer] = {}
        #: The last of this node's own heartbeats read back, and when the chain of them began.
        self._own_at: float | None = None
        self._chain_since: float | None = None

    def heard(self, beat: Heartbeat) -> None:
        """A heartbeat read from the topic (this node's own included), as it arrived."""
        with self._lock:
            self._heard(beat)

    def _heard(self, beat: Heartbeat) -> None:
        now = self._now()
        if beat.node == self.node:
            if self._own_at is None or now - self._own_at > self._max_gap_s:
                self._chain_since = now  # a new chain: what happened meanwhile is unknown
            self._own_at = now
            return
        peer = self._peers.get(beat.node)
        if peer is None:
            self._peers[beat.node] = _Peer(now, beat.commits, beat.due, now)
            return
        if beat.commits != peer.commits or not beat.due:
            peer.progressed_at = now
        peer.heard_at, peer.commits, peer.due = now, beat.commits, beat.due

    def _watched_since(self, at: float) -> float:
        """How long, up to this node's last own heartbeat, it watched without a break since
        ``at`` (0 without a chain)."""
        if self._own_at is None or self._chain_since is None:
            return 0.0
        if self._now() - self._own_at > self._max_gap_s:
            return 0.0  # the chain broke: this node is not watching now
        return max(0.0, self._own_at - max(at, self._chain_since))

    def silent_s(self, node: str) -> float:
        """How long ``node``'s heartbeats have stopped, watched without a break."""
        peer = self._peers.get(node)
        return 0.0 if peer is None else self._watched_since(peer.heard_at)

    def stalled_s(self, node: str) -> float:
        """How long ``node`` said it owns something due without committing it."""
        peer = self._peers.get(node)
        if peer is None or not peer.due:
            return 0.0
        return self._watched_since(peer.progressed_at)

    def suspects(self) -> list[str]:
        """The peers silent or stalled for ``suspect_after_s``, in name order."""
        limit = self.suspect_after_s
        with self._lock:
            return sorted(
                node
                for node in self._peers
                if self.silent_s(node) >= limit or self.stalled_s(node) >= limit
            )

    def forget(self, node: str) -> None:
        """Stop watching ``node`` (it left, or its partitions were claimed): heard again, it
        is watched afresh."""
        with self._lock:
            self._peers.pop(node, None)

    def heard_within(self, seconds: float) -> frozenset[str]:
        """The peers not watched silent for ``seconds``: heard from within them, or silent
        only while this node was not watching. A broker's restart silences every node at
        once; counted on the wall clock, right after it every peer whose beats had not come
        back yet was "not heard", and a round took the partitions of those the group's
        member list did not name yet either (its members rejoin one by one): a handover
        back for nothing, after a fence of a live owner. A peer silent by the clock for
        ``_UNWATCHED_SILENCE_S`` is not heard either way (a node whose own heartbeats do not
        come back watches nothing). A peer never heard from is not listed."""
        now = self._now()
        with self._lock:
            return frozenset(
                node
                for node, peer in self._peers.items()
                if self.silent_s(node) < seconds and now - peer.heard_at < _UNWATCHED_SILENCE_S
            )

    @property
    def peers(self) -> list[str]:
        """The peers heard from, in name order."""
        with self._lock:
            return sorted(self._peers)


#: Builds a consumer: (group id, error handler, options) -> consumer (``KafkaClients.consumer``).
OpenBeatConsumer = Callable[[str, ClientErrors, Mapping[str, KafkaValue]], AssignedConsumer]


class HeartbeatWorker(LoopWorker):
    """Sends this node's heartbeats and reads everyone's into a ``PeerWatch``.

    Parameters:
        watch: where the heartbeats read go.
        topic: the cluster's heartbeat topic (one partition).
        publisher: an idempotent publisher (started by the caller), never a transactional one.
        open_consumer: builds the topic's reader (assigned from the end, never joined).
        reader_group: its group id.
        errors: the reader's error handler.
        interval_s: between two heartbeats (``group.progress_interval_ms``).
        progress: this node's (commits so far, whether it owns something due).
        clock_ms: wall clock for ``at_ms``.
    """

    def __init__(
        self,
        *,
        watch: PeerWatch,
        topic: str,
        publisher: Publisher,
        open_consumer: OpenBeatConsumer,
        reader_group: str,
        errors: ClientErrors,
        interval_s: float,
        progress: Callable[[], tuple[int, bool]],
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        super().__init__("heartbeats")
        self.watch = watch
        self._topic = topic
        self._publisher = publisher
        self._open_consumer = open_consumer
        self._reader_group = reader_group
        self._errors = errors
        self._interval_s = interval_s
        self._progress = progress
        self._clock_ms = clock_ms
        self._consumer: AssignedConsumer | None = None
        self._beat_at = 0.0

    def step(self) -> None:
        if self._consumer is None:
            options: dict[str, KafkaValue] = {"enable.auto.commit": False}
            self._consumer = self._open_consumer(self._reader_group, self._errors, options)
            self._consumer.assign([TopicPartition(self._topic, 0, OFFSET_END)])
        if time.monotonic() - self._beat_at >= self._interval_s:
            self._beat_at = time.monotonic()
            commits, due = self._progress()
            key, value = encode_heartbeat(
                Heartbeat(self.watch.node, commits, due, self._clock_ms())
            )
            self._publisher.publish(self._topic, key, value, [], _beat_sent, 0)
        for message in read_ready(self._consumer, 100, _POLL_S):
            error = message.error()
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    self._errors(error)
                continue
            try:
                self.watch.heard(decode_heartbeat(message.key(), message.value()))
            except DecodeError as exc:
                log.warning("heartbeat_undecodable", offset=message.offset(), reason=str(exc))

    def finish(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            consumer.close()


def _beat_sent(error: KafkaError | None, _message: object) -> None:
    """A heartbeat lost is the next one's job; an outage shows as the watcher's own silence."""
