"""A cluster node's progress log: where its delivery transactions put the cuts of the
partitions it delivers, so that a transaction touches one progress partition however many
partitions it carries (``docs/design/cluster-v2.md``, "Progress per node").

Measured before (``scripts/lanes_cost_check.py``): with every partition's cut in its own
progress topic, a transaction over 16 partitions at 2,000 msg/s touched about 10 progress
partitions, and the broker paid for each (its share of ``AddPartitionsToTxn`` and a commit
marker): 1.7× a node alone's CPU per message. What stays in a partition's own log: its claims
(the compare-and-set of ownership needs one log per partition), its repeat states (a
partition's whole history in one place, as a store rebuilt from Kafka needs it), and the cut of
each transaction that carried such states, of the first transaction of a term and of a
handover. Every other cut goes here, keyed ``cut:<partition>``: compaction keeps each
partition's last.

The topic has a few partitions; a node's records go to the one its id hashes to (stable:
``zlib.crc32``, the same on every node and release), so nodes do not share one partition's
last stable offset more than they must.
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Mapping
from dataclasses import dataclass

import structlog

from chronos.errors import DecodeError
from chronos.kafka.admin import RenewedAdmin, stable_ends
from chronos.schedule.progress_record import Cut, decode_cut_value, later

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class NodeLog:
    """Where one node's cuts go: a partition of the cluster's node-log topic.

    Parameters:
        topic: the node-log topic (``<ns>.progress.<cluster>.nodes``).
        partition: this node's partition of it.
    """

    topic: str
    partition: int

    @classmethod
    def of(cls, topic: str, node_id: str, partitions: int) -> NodeLog:
        """The partition of ``topic`` (of ``partitions``) that ``node_id`` writes to."""
        if partitions < 1:
            raise ValueError(f"a node-log topic has at least one partition, not {partitions}")
        return cls(topic, zlib.crc32(node_id.encode()) % partitions)


class NodeLogState:
    """What a node's one reader of the node log (``standbys.ProgressLogs``) has read: the last
    record of every partition's cut in each partition of the topic, and how far it read each
    partition of the topic. Written by that reader's thread; read by the claims, on the
    delivery thread (``NodeLogCuts``).

    Records are kept as read and decoded only when asked for: every node reads every node's
    cuts, and most of them are of partitions it will never claim. Within one partition of
    the topic a later record of ``cut:<p>`` is a later cut (its writer held p later, or
    wrote it later); across partitions the newest is decided by ``cut_order``.
    """

    def __init__(self) -> None:
        self._changed = threading.Condition(threading.Lock())
        #: partition -> node-log partition -> the last value of ``cut:<partition>`` there.
        self._records: dict[int, dict[int, bytes]] = {}
        self._positions: dict[int, int] = {}

    def take(self, partition: int, node_partition: int, value: bytes) -> None:
        """The value of a ``cut:<partition>`` record read from ``node_partition``."""
        with self._changed:
            self._records.setdefault(partition, {})[node_partition] = value

    def newest(self, partition: int) -> Cut | None:
        """The newest cut of ``partition`` read so far (None: none; an undecodable record,
        logged, counts as none)."""
        with self._changed:
            values = list(self._records.get(partition, {}).values())
        newest: Cut | None = None
        for value in values:
            try:
                cut = decode_cut_value(value)
            except DecodeError as exc:
                log.error("node_log_record_undecodable", partition=partition, reason=str(exc))
                continue
            newest = later(newest, cut)
        return newest

    def read_to(self, positions: Mapping[int, int]) -> None:
        """How far the reader got in some partitions of the topic: its next offset there (a
        position never moves back: an end reported before a position is fine)."""
        with self._changed:
            for node_partition, offset in positions.items():
                if offset > self._positions.get(node_partition, -1):
                    self._positions[node_partition] = offset
            self._changed.notify_all()

    def wait_read(self, node_partition: int, end: int, timeout_s: float) -> bool:
        """Wait until partition ``node_partition`` of the topic was read up to ``end`` (an
        empty partition, ``end`` 0, at once); False when ``timeout_s`` passed first."""
        with self._changed:
            return self._changed.wait_for(
                lambda: self._positions.get(node_partition, 0) >= end, timeout_s
            )


class NodeLogCuts:
    """A claimant's view of the node log: the last cut a holder committed of a partition.

    Parameters:
        state: what the node's reader of the node log read.
        topic: the node-log topic.
        partitions: its partition count.
        admin: asks Kafka where a partition ends (made anew after a failed question).
    """

    def __init__(
        self, state: NodeLogState, topic: str, partitions: int, admin: RenewedAdmin
    ) -> None:
        self._state = state
        self._topic = topic
        self._partitions = partitions
        self._admin = admin

    def last_cut(self, holder: str, partition: int, timeout_s: float) -> Cut | None:
        """``partition``'s newest cut once ``holder``'s node-log partition was read past
        every record it held when asked: called after the holder was fenced (or handed the
        partition over), everything the holder will ever commit of it lies below that. None:
        it wrote none there. TimeoutError when the read did not get there in ``timeout_s``.

        The high watermark, not the last stable offset: nodes hashed to one partition share
        it, and another node's open transaction holds the stable offset below records the
        holder already committed (a reader at the stable offset would take an older cut and
        the claimant deliver again what the holder had). A ``read_committed`` reader passes
        an offset only once every transaction below it ended, so its position at the high
        watermark of then says all of them were read: a live node's end within
        milliseconds, a frozen one's at its fence or its transaction timeout."""
        node_partition = NodeLog.of(self._topic, holder, self._partitions).partition
        ends = self._admin.ask(
            lambda admin: stable_ends(
                admin, self._topic, [node_partition], timeout_s, committed=False
            )
        )
        end = ends[node_partition]
        if not self._state.wait_read(node_partition, end, timeout_s):
            raise TimeoutError(
                f"{self._topic}[{node_partition}] was not read to {end} in {timeout_s} s"
            )
        return self._state.newest(partition)
