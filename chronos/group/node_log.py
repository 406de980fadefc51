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
from collections.abc import Callable
from dataclasses import dataclass

from chronos.schedule.progress_record import Cut, later


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
    """What a node's one reader of the node log (``standbys.ProgressLogs``) has read: the
    newest cut of every partition, and how far it read each partition of the topic. Written
    by that reader's thread; read by the claims, on the delivery thread (``NodeLogCuts``).
    """

    def __init__(self) -> None:
        self._changed = threading.Condition(threading.Lock())
        self._cuts: dict[int, Cut] = {}
        self._positions: dict[int, int] = {}

    def take(self, partition: int, cut: Cut) -> None:
        """A cut of ``partition`` read: kept when it is that partition's newest."""
        with self._changed:
            self._cuts[partition] = later(self._cuts.get(partition), cut) or cut

    def newest(self, partition: int) -> Cut | None:
        """The newest cut of ``partition`` read so far (None: none)."""
        with self._changed:
            return self._cuts.get(partition)

    def read_to(self, positions: dict[int, int]) -> None:
        """The reader's next offset in each partition of the topic."""
        with self._changed:
            self._positions.update(positions)
            self._changed.notify_all()

    def wait_read(self, node_partition: int, end: int, timeout_s: float) -> bool:
        """Wait until partition ``node_partition`` of the topic was read up to ``end``;
        False when ``timeout_s`` passed first."""
        with self._changed:
            return self._changed.wait_for(
                lambda: self._positions.get(node_partition, -1) >= end, timeout_s
            )


#: Where a partition of a topic may be read up to now (its last stable offset).
StableEnd = Callable[[str, int], int]


class NodeLogCuts:
    """A claimant's view of the node log: the last cut a holder committed of a partition.

    Parameters:
        state: what the node's reader of the node log read.
        topic: the node-log topic.
        partitions: its partition count.
        stable_end: a partition's last stable offset now.
    """

    def __init__(
        self, state: NodeLogState, topic: str, partitions: int, stable_end: StableEnd
    ) -> None:
        self._state = state
        self._topic = topic
        self._partitions = partitions
        self._stable_end = stable_end

    def last_cut(self, holder: str, partition: int, timeout_s: float) -> Cut | None:
        """``partition``'s newest cut once ``holder``'s node-log partition was read to its
        last stable offset as of now: called after the holder was fenced (or handed the
        partition over), it holds every cut the holder will ever commit of it. None: it
        wrote none there. TimeoutError when the read did not get there in ``timeout_s``
        (a transaction of another node sharing that partition holds its stable end)."""
        node_partition = NodeLog.of(self._topic, holder, self._partitions).partition
        end = self._stable_end(self._topic, node_partition)
        if not self._state.wait_read(node_partition, end, timeout_s):
            raise TimeoutError(
                f"{self._topic}[{node_partition}] was not read to {end} in {timeout_s} s"
            )
        return self._state.newest(partition)
