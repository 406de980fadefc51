"""Every topic, consumer-group and column-family name chronos uses, built in one place."""

from __future__ import annotations

from dataclasses import dataclass

#: Column families of the node store.
CF_MESSAGES = "messages"  # slot_ms|id -> encoded message (the delivery schedule)
CF_INDEX = "index"  # id -> slot key or tombstone (idempotency and cancel lookups)
CF_EXPIRY = "expiry"  # expire_ms|id -> b"" (when a tombstone may be forgotten)
CF_META = "meta"  # format version, seek timestamp
CF_ARRIVALS = "arrivals"  # partition|offset -> id of each add a replica stored (replica groups)
CF_OUTCOMES = "outcomes"  # id -> where its last delivered occurrence went (store/outcome.py)

#: Header prefix reserved for chronos' own fields, on the inner topic and on delivered records.
HEADER_PREFIX = "chronos-"


@dataclass(frozen=True)
class TopicNames:
    """Names derived from one namespace, so two chronos installations can share a cluster.

    Parameters:
        namespace: prefix of every internal topic, e.g. ``chronos``.
    """

    namespace: str = "chronos"

    @property
    def inner(self) -> str:
        """The inner topic: the write-ahead log of delay requests."""
        return f"{self.namespace}.inner"

    @property
    def dead_letter(self) -> str:
        """Where undeliverable and undecodable records go, with the reason in a header."""
        return f"{self.namespace}.deadletter"

    @property
    def policy(self) -> str:
        """One-partition compacted topic of the delivery policies set live, a record per target
        topic (``chronos policy``, ``delivery/policies.py``)."""
        return f"{self.namespace}.policy"

    def node_group(self, node_id: str) -> str:
        """Each node consumes the whole inner topic in a consumer group of its own."""
        return f"{self.namespace}.node.{node_id}"

    def election(self, group: str) -> str:
        """One-partition topic whose consumer-group assignment names a replica group's master."""
        return f"{self.namespace}.election.{group}"

    def election_group(self, group: str) -> str:
        """The consumer group of a replica group's election."""
        return f"{self.namespace}.election.{group}"

    def progress(self, group: str) -> str:
        """One-partition compacted topic of a replica group's committed progress."""
        return f"{self.namespace}.progress.{group}"

    def members(self, group: str) -> str:
        """One-partition compacted topic where each replica of a group says its state."""
        return f"{self.namespace}.members.{group}"

    def cluster(self, cluster: str) -> str:
        """One-partition topic a cluster's nodes subscribe to in its consumer group: the group
        is their membership (who is alive), never read."""
        return f"{self.namespace}.cluster.{cluster}"

    def cluster_status(self, cluster: str) -> str:
        """One-partition compacted topic where each node of a cluster says which partitions it
        could deliver now (``cluster/readiness.py``)."""
        return f"{self.namespace}.cluster-status.{cluster}"

    def cluster_group(self, cluster: str) -> str:
        """The consumer group of a cluster's members."""
        return f"{self.namespace}.cluster.{cluster}"

    @staticmethod
    def shard_group(cluster: str, partition: int) -> str:
        """The replica group of one inner partition of a cluster: its progress topic,
        members topic and transactional id (one per partition, so a new owner fences)."""
        return f"{cluster}.p{partition}"

    def node_log(self, cluster: str) -> str:
        """Compacted topic of a few partitions where each member of a cluster of the node
        shape puts the cuts that carry nothing else (``group/node_log.py``)."""
        return f"{self.namespace}.progress.{cluster}.nodes"

    def heartbeats(self, cluster: str) -> str:
        """One-partition topic of a cluster's heartbeats (``group/peer_watch.py``), outside
        every transaction, kept a minute."""
        return f"{self.namespace}.heartbeats.{cluster}"

    def member_transactional_id(self, cluster: str, node_id: str) -> str:
        """The ``transactional.id`` of a member of a cluster of the node shape: one producer
        per node, fenced by claims (``group/claims.py``). ``node.`` keeps it apart from the
        per-partition ids of the partition shape (``<cluster>.p<N>``)."""
        return f"{self.namespace}.delivery.{cluster}.node.{node_id}"

    def alone_progress(self, node_id: str) -> str:
        """One-partition compacted topic of a node alone's published progress: what a store
        rebuilt from the inner topic must not deliver again."""
        return f"{self.namespace}.progress-alone.{node_id}"

    def progress_reader_group(self, node_id: str, reader: str) -> str:
        """Group id of a progress-topic reader (assigned, never joined: librdkafka wants one)."""
        return f"{self.namespace}.progress-reader.{node_id}.{reader}"

    def transactional_id(self, group: str) -> str:
        """The delivery producer's ``transactional.id``: one per group, so a new master's
        ``init_transactions`` fences the old one."""
        return f"{self.namespace}.delivery.{group}"

    def is_internal(self, topic: str) -> bool:
        """True for chronos' own topics and Kafka's internal ones; never a delivery target."""
        return topic.startswith("__") or topic.startswith(f"{self.namespace}.")
