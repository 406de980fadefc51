"""The partitions a cluster node hosts, kept in step with the placement.

On every change of the member list the node computes the placement (``placement.py``) and:

* starts a replica for each partition it now hosts (owner or standby) that it does not run:
  an empty store restores the partition from Kafka first, and the replica stands for
  leadership only once it caught up and its store is complete (``group/replica.py``);
* tells each replica whether it owns its partition: a new owner that finds the partition's
  progress topic moving waits for it to stand still (``group/master_watch.py``), so it never
  fences a live master on its way out;
* stops a replica whose partition it no longer hosts, once that lasted ``grace_s`` (member
  lists seen mid-rebalance) and every node now placed for it says its replica stands (until
  then the old replica, warm, can still take over), and removes its store.

A node that is not in the member list yet (its join is under way) hosts nothing.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import structlog

from chronos.cluster.placement import Placement
from chronos.lifecycle import LoopWorker
from chronos.runtime.shard import Shard

log = structlog.get_logger(__name__)

_TICK_S = 0.1

#: Builds partition ``p``'s replica on this node (not started).
NewShard = Callable[[int], Shard]


class ShardHost(LoopWorker):
    """Starts, leads and stops this node's partitions as the placement says.

    Parameters:
        node_id: this node's member name.
        partitions: how many partitions the inner topic has.
        standbys: standby replicas per partition (``cluster.standby_replicas``).
        new_shard: builds a partition's replica.
        grace_s: how long a partition must stay unhosted before its replica stops.
        handover_timeout_s: how long a leaving node waits for its handovers (a master that
            cannot commit one is stopped anyway: its successor takes over on silence).
        on_fatal: told when a replica failed to start (the node ends: a store it cannot open
            or a topic it may not read will not mend with retries).
        ready: whether a node said, after a (monotonic) time, that its replica of a partition
            stands (``readiness.py``): a partition this node delivers moves to its new owner
            only then. "After": a standby that took over from a node killed a moment ago must
            not hand the partition straight back on that node's last word.
    """

    def __init__(
        self,
        *,
        node_id: str,
        partitions: int,
        standbys: int,
        new_shard: NewShard,
        grace_s: float,
        handover_timeout_s: float,
        on_fatal: Callable[[str], None],
        ready: Callable[[str, int, float], bool],
    ) -> None:
        super().__init__("cluster-host")
        self._node_id = node_id
        self._partitions = partitions
        self._standbys = standbys
        self._new_shard = new_shard
        self._grace_s = grace_s
        self._handover_timeout_s = handover_timeout_s
        self._on_fatal = on_fatal
        self._ready = ready
        self._changed = threading.Event()
        self._lock = threading.Lock()
        self._members: frozenset[str] | None = None
        self._unhosted_since: dict[int, float] = {}
        #: When this host first saw a replica deliver a partition the placement gives another
        #: node (monotonic): that node's word must be later for a handover.
        self._master_since: dict[int, float] = {}
        self.shards: dict[int, Shard] = {}
        self.placement: Placement | None = None
        #: The member list ``placement`` was computed from.
        self._placed_for: frozenset[str] | None = None

    @property
    def partitions(self) -> int:
        """How many partitions the inner topic has."""
        return self._partitions

    def members_changed(self, members: frozenset[str]) -> None:
        """The membership's callback: recompute at the next tick."""
        with self._lock:
            self._members = members
        self._changed.set()

    def stop(self) -> None:
        super().stop()
        self._changed.set()

    def step(self) -> None:
        self._changed.wait(_TICK_S)
        self._changed.clear()
        if self.stopping:
            return
        with self._lock:
            members = self._members
        if members is None:
            return
        placement = self.placement
        if members != self._placed_for or placement is None:
            # Computed when the member list changed, not every tick.
            placement = Placement.of(members, self._partitions, self._standbys)
            self._placed_for = members
        if placement != self.placement:
            log.info(
                "cluster_placement",
                node=self._node_id,
                owns=sorted(placement.owned_by(self._node_id)),
                hosts=sorted(placement.hosted_by(self._node_id)),
                members=sorted(members),
            )
            self.placement = placement
        self._apply(placement)

    def _apply(self, placement: Placement) -> None:
        hosted = placement.hosted_by(self._node_id)
        owned = placement.owned_by(self._node_id)
        # Owned partitions first, all at once: one by one, a node hosting seven took 12 s to
        # start the last (each start opens a store and asks Kafka a few questions).
        missing = sorted(hosted - set(self.shards), key=lambda p: (p not in owned, p))
        if missing and not self.stopping:
            self._start(missing)
        now = time.monotonic()
        for partition, shard in list(self.shards.items()):
            owner = placement.owner(partition)
            leads = owner == self._node_id
            if shard.role != "master":
                self._master_since.pop(partition, None)
            elif owner is not None and not leads:
                since = self._master_since.setdefault(partition, now)
                if self._ready(owner, partition, since):
                    # Before it stops leading: a handover, not a silence its successor waits
                    # out.
                    shard.hand_over(owner)
                else:
                    leads = True  # delivers on until the new owner's replica stands
            shard.lead(leads)
            if partition in hosted:
                self._unhosted_since.pop(partition, None)
                continue
            unhosted = self._unhosted_since.setdefault(partition, now)
            if (
                now - unhosted >= self._grace_s
                and shard.role != "master"
                and self._placed_replicas_stand(placement, partition)
            ):
                del self.shards[partition]
                self._unhosted_since.pop(partition, None)
                log.info("shard_stopping", node=self._node_id, partition=partition, role=shard.role)
                shard.discard()

    def _placed_replicas_stand(self, placement: Placement, partition: int) -> bool:
        """Whether every node the placement puts ``partition`` on says its replica stands.

        Until then a replica this node no longer hosts is kept, warm: it still takes over a
        silent owner (its master watch), where the new standby could not before its restore
        ends. Measured without it: an owner frozen while its partition's new standby restored
        and the old one was already dropped left the partition undelivered for 25 s (10-minute
        churn, ``cluster_check.py``)."""
        chain = placement.hosts.get(partition, ())
        return all(self._ready(node, partition, -math.inf) for node in chain)

    def _start(self, partitions: list[int]) -> None:
        """Start a replica of each of ``partitions``, in parallel."""
        shards = {p: self._new_shard(p) for p in partitions}
        with ThreadPoolExecutor(max_workers=len(shards), thread_name_prefix="shard-start") as pool:
            started = {p: pool.submit(shard.start) for p, shard in shards.items()}
        for partition, future in started.items():
            shard = shards[partition]
            error = future.exception()
            if error is not None:
                log.error("shard_start_failed", partition=partition, error=repr(error))
                shard.stop()
                self._on_fatal(f"partition {partition}'s replica did not start: {error}")
                continue
            self.shards[partition] = shard
            log.info("shard_started", node=self._node_id, partition=partition)

    def finish(self) -> None:
        """Hand what this node delivers to the nodes that deliver it once this one left, then
        stop every replica; their stores stay (a restarted node gets its partitions back)."""
        self._hand_over_all()
        for partition, shard in sorted(self.shards.items()):
            if not shard.stop():
                log.warning("shard_stop_incomplete", partition=partition)
        self.shards.clear()

    def _hand_over_all(self) -> None:
        """All handovers at once, then wait for them: each costs one commit, not a silence."""
        with self._lock:
            members = self._members
        if not members:
            return
        after = Placement.of(members - {self._node_id}, self._partitions, self._standbys)
        handing = []
        for partition, shard in self.shards.items():
            successor = after.owner(partition)
            if shard.role == "master" and successor is not None:
                shard.hand_over(successor)
                handing.append(shard)
        deadline = time.monotonic() + self._handover_timeout_s
        for shard in handing:
            if not shard.wait_handed_over(max(0.0, deadline - time.monotonic())):
                log.warning("handover_incomplete", partition=shard.partition)

    def ready_partitions(self) -> frozenset[int]:
        """The partitions whose replica on this node stands (said on the readiness board)."""
        return frozenset(p for p, shard in list(self.shards.items()) if shard.ready)

    def fatal_error(self) -> str | None:
        """Why one of the replicas cannot go on, or None."""
        for partition, shard in list(self.shards.items()):
            reason = shard.node.fatal_error()
            if reason is not None:
                return f"partition {partition}: {reason}"
        return None
