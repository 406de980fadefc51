"""One inner partition hosted by a cluster node: a replica group of its own, in-process.

A cluster's partition is today's replica group narrowed to one partition: its own store
(``<data_dir>/p<N>``), its own progress topic and its own transactional id
(``TopicNames.shard_group``), so each partition has exactly one fenced writer and its own
committed cut, and every takeover rule of a replica group (the cut, repeats, reschedules,
cancels, the idempotency window) holds per partition unchanged. What differs: whether it
should lead comes from the cluster's placement (``ShardElection``), not from an election group
of its own; its standbys' master watch still takes over a silent owner within
``group.suspect_after_ms``, before Kafka drops the dead member.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable

import structlog

from chronos.clock import Clock
from chronos.cluster.shard_settings import shard_settings
from chronos.kafka.shared_ends import EndsFor
from chronos.runtime.node import Node
from chronos.settings import ChronosSettings

log = structlog.get_logger(__name__)


class ShardElection:
    """Tells a partition's replica whether this node should deliver it: whether the cluster's
    placement names it the owner. Kafka's consumer group is joined once per node
    (``membership.py``), not per partition; this only relays the placement."""

    def __init__(self, on_change: Callable[[bool], None]) -> None:
        self._on_change = on_change
        self._elected = threading.Event()

    @property
    def elected(self) -> bool:
        return self._elected.is_set()

    def set(self, owner: bool) -> None:
        """The placement named this node the owner (True) or not."""
        if owner == self._elected.is_set():
            return
        if owner:
            self._elected.set()
        else:
            self._elected.clear()
        self._on_change(owner)

    def start(self) -> None:
        """Nothing to join: the node's membership is the cluster's."""

    def stop(self) -> None:
        """Nothing to leave."""

    def join(self, timeout: float) -> None:
        """No thread of its own."""


class Shard:
    """Partition ``partition``'s replica on this node, and whether it should lead.

    Parameters:
        settings: the cluster node's settings.
        partition: the inner partition.
        clock: time source.
        ends_for: the node's shared questions about partition ends.
    """

    def __init__(
        self, settings: ChronosSettings, partition: int, clock: Clock, ends_for: EndsFor
    ) -> None:
        self.partition = partition
        self._elections: list[ShardElection] = []
        self._owner = False
        self.node = Node(
            shard_settings(settings, partition),
            clock,
            "replica",
            open_election=self._election,
            ends_for=ends_for,
            serves_admin=False,
        )

    def _election(self, on_change: Callable[[bool], None]) -> ShardElection:
        election = ShardElection(on_change)
        election.set(self._owner)
        self._elections.append(election)
        return election

    def lead(self, owner: bool) -> None:
        """Whether the placement names this node the partition's owner."""
        self._owner = owner
        for election in self._elections:
            election.set(owner)

    def hand_over(self, successor: str) -> None:
        """Hand the delivery of this partition to node ``successor`` (its replica there
        takes over on reading the last commit, ``group/replica.py``)."""
        replica = self.node.replica
        if replica is not None:
            replica.hand_over(f"{successor}.p{self.partition}")

    def wait_handed_over(self, timeout_s: float) -> bool:
        """True once this replica no longer delivers after ``hand_over``."""
        replica = self.node.replica
        return replica is None or replica.handed_over.wait(timeout_s)

    @property
    def ready(self) -> bool:
        """Whether its replica stands: caught up, store complete (it may deliver)."""
        replica = self.node.replica
        return replica is not None and replica.standing

    @property
    def role(self) -> str:
        """``master``, ``backup``, or ``starting`` before its replica runs."""
        replica = self.node.replica
        return "starting" if replica is None else replica.role

    def start(self) -> None:
        self.node.start()

    def stop(self) -> bool:
        """Stop the replica (a master's transaction is aborted; a standby takes over)."""
        return self.node.stop()

    def discard(self) -> None:
        """Stop and remove the store: a partition this node no longer hosts is restored
        from Kafka if it comes back (its offsets may since have left the topic)."""
        clean = self.stop()
        if not clean:
            log.warning("shard_store_kept", partition=self.partition, reason="unclean stop")
            return
        shutil.rmtree(self.node.settings.node.data_dir, ignore_errors=True)
        log.info("shard_discarded", partition=self.partition)
