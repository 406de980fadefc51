"""One partition a cluster node hosts: its schedule in the node's database, and the two things
the node does with it, following its holder's progress or delivering it as a lane.

A node of the second shape (``docs/design/cluster-v2.md``) keeps every hosted partition in
one ``RocksDatabase`` (a set of column families each, ``RocksStore.of_partition``), with a
frontier of its own that shares the node's ``Wake``, so that a write to any partition wakes
the node's one delivery loop. A partition starts following (its store says "delivered" for
exactly what its committed progress covers); a won claim makes it a ``Lane`` from the
claim's start cut, as a replica group's takeover does (``replica.py``), without the fence
and the read of the log: the claim did both (``claims.py``), and the standbys' reader
applied everything before it (``StandbysWorker.hand_in``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from chronos.clock import Clock
from chronos.delivery.deadletter import DeadLetterPolicy
from chronos.delivery.policies import Policies
from chronos.group.follower import Follower
from chronos.group.lane import Lane, MasterState
from chronos.group.placement import ReplicaPlacement, ReplicaStore
from chronos.schedule.cancel_gate import CancelGate
from chronos.schedule.floor import Floor, RebuildFloor
from chronos.schedule.frontier import Frontier, Wake
from chronos.schedule.ledger import Ledger
from chronos.schedule.progress_record import Cut
from chronos.settings import DeleteSettings
from chronos.store.database import RocksDatabase
from chronos.store.rocks import RocksStore


@dataclass
class Hosted:
    """A hosted partition's schedule and its writers.

    Parameters:
        partition: the inner partition.
        progress_topic: its own progress log.
        store: its schedule (a column-family set of the node's database).
        frontier: its push frontier (the node's wake).
        ledger: the schedule's writer.
        replica: follows or leads it.
        following: its follower now, the last ``follower`` made (None before one).
    """

    partition: int
    progress_topic: str
    store: RocksStore
    frontier: Frontier
    ledger: Ledger
    replica: ReplicaStore
    following: Follower | None = None

    @classmethod
    def open(
        cls,
        database: RocksDatabase,
        partition: int,
        progress_topic: str,
        wake: Wake,
        clock: Clock,
        delete: DeleteSettings,
        restates: bool = False,
    ) -> Hosted:
        """Open (or create) ``partition``'s schedule in ``database``, following; ``restates``
        (compact mode): every copy notes in its outbox what its deliverer must restate, as
        every replica of a group does."""
        store = RocksStore.of_partition(database, partition)
        frontier = Frontier(0, wake)
        placement = ReplicaPlacement()
        ledger = Ledger(store, frontier, clock, delete, placement, restates=restates)
        replica = ReplicaStore(store, frontier, ledger, placement)
        replica.follow()
        return cls(partition, progress_topic, store, frontier, ledger, replica)

    def follower(self) -> Follower:
        """A follower of its holder's committed progress (read by ``StandbysWorker``). The
        store is placed as a follower's first: a lane that was handed over or fenced left
        moves no commit carries, which this undoes (``ReplicaStore.follow``)."""
        self.replica.follow()
        partition = self.partition
        follower = Follower(self.replica.apply_cut, lambda: self.ledger.inner_offsets([partition]))
        self.following = follower
        return follower

    def latest_floor(self) -> Floor | None:
        """The rebuild floor of the newest cut its follower read (None: no cut read, or none
        published one): what says whether a copy that began past removed records holds
        everything (``StoreOrigin.complete``)."""
        following = self.following
        cut = None if following is None else following.latest
        return None if cut is None else cut.floor

    def lane(
        self,
        term: int,
        start: Cut | None,
        policy: DeadLetterPolicy,
        clock: Clock,
        on_fenced: Callable[[str], None],
        on_fatal: Callable[[str], None],
        policies: Policies | None = None,
        cancel_gate: CancelGate | None = None,
    ) -> Lane:
        """Deliver this partition in ``term`` from ``start`` (a won claim's cut, applied to
        the store already): the frontier restarts at its seek, and the adds it does not
        cover that lie behind the seek move past it (delivered at once, never skipped)."""
        partition = self.partition
        seek = self.replica.lead(
            start.seek_ms if start is not None else self.replica.seek_ms, [partition]
        )
        self.replica.relocate_uncovered(
            seek, start.offsets if start is not None else {}, [partition]
        )
        state = MasterState(
            term,
            on_fenced,
            on_fatal,
            RebuildFloor(start.floor if start is not None else None),
            paced=start.paced if start is not None else {},
            ahead_ms=start.ahead_ms if start is not None else None,
        )
        return Lane(
            progress_topic=self.progress_topic,
            store=self.store,
            ledger=self.ledger,
            replica=self.replica,
            frontier=self.frontier,
            state=state,
            policy=policy,
            clock=clock,
            policies=policies,
            cancel_gate=cancel_gate,
            partition=partition,
        )
