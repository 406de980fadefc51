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

import zlib
from dataclasses import dataclass


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
