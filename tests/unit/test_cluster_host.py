"""The cluster host: which replicas a node runs, which it leads, and when it hands one over."""

from __future__ import annotations

import math
import time
from typing import Any, cast

from chronos.cluster.placement import Placement
from chronos.runtime.shard import Shard
from chronos.runtime.shard_host import ShardHost


class FakeShard:
    """A replica as the host sees it: its role, whether it leads, its handovers."""

    def __init__(self, partition: int) -> None:
        self.partition = partition
        self.role = "backup"
        self.leads: bool | None = None
        self.handed_to: list[str] = []
        self.ready = True
        self.started = self.discarded = self.stopped = False

    def start(self) -> None:
        self.started = True

    def lead(self, owner: bool) -> None:
        self.leads = owner

    def hand_over(self, successor: str) -> None:
        self.handed_to.append(successor)

    def wait_handed_over(self, timeout_s: float) -> bool:
        self.role = "backup"
        return True

    def discard(self) -> None:
        self.discarded = True

    def stop(self) -> bool:
        self.stopped = True
        return True


class Host:
    """A host of node ``a`` over 4 partitions with 1 standby, and what it built."""

    def __init__(self) -> None:
        self.built: dict[int, FakeShard] = {}
        #: When each (node, partition) last said its replica stands (monotonic).
        self.heard: dict[tuple[str, int], float] = {}
        self.host = ShardHost(
            node_id="a",
            partitions=4,
            standbys=1,
            new_shard=self._new,
            grace_s=0.0,
            handover_timeout_s=1.0,
            on_fatal=lambda reason: None,
            ready=lambda node, p, since: self.heard.get((node, p), -math.inf) > since,
        )

    def _new(self, partition: int) -> Shard:
        shard = FakeShard(partition)
        self.built[partition] = shard
        return cast(Shard, shard)

    def members(self, *names: str) -> Placement:
        self.host.members_changed(frozenset(names))
        self.host.step()
        assert self.host.placement is not None
        return self.host.placement

    def shard(self, partition: int) -> FakeShard:
        return cast(FakeShard, cast(Any, self.host.shards[partition]))


def test_a_node_runs_a_replica_of_what_it_hosts_and_leads_what_it_owns() -> None:
    h = Host()
    placement = h.members("a", "b", "c")
    assert set(h.host.shards) == placement.hosted_by("a")
    for partition, shard in h.host.shards.items():
        assert cast(Any, shard).leads == (placement.owner(partition) == "a")


def test_a_partition_moved_away_is_handed_over_only_once_its_new_owner_stands() -> None:
    h = Host()
    h.members("a")
    moving = next(p for p in range(4) if Placement.of({"a", "b"}, 4, 1).owner(p) == "b")
    h.shard(moving).role = "master"
    h.members("a", "b")
    shard = h.shard(moving)
    assert shard.handed_to == [] and shard.leads is True, "handed to a node still restoring"
    h.heard[("b", moving)] = time.monotonic()
    h.host.step()
    assert shard.handed_to == ["b"] and shard.leads is False


def test_a_partition_taken_over_is_not_handed_back_on_the_old_owner_s_last_word() -> None:
    """A standby took over from a node killed a moment ago, which the member list still names
    owner and whose last word said ready: handing back would leave nobody delivering."""
    h = Host()
    placement = h.members("a", "b")
    taken = next(p for p in range(4) if placement.owner(p) == "b")
    h.heard[("b", taken)] = time.monotonic()
    h.shard(taken).role = "master"  # took over on suspicion
    h.host.step()
    assert h.shard(taken).handed_to == [] and h.shard(taken).leads is True
    h.heard[("b", taken)] = time.monotonic() + 1  # b is back and says so
    h.host.step()
    assert h.shard(taken).handed_to == ["b"]


def test_a_replica_no_longer_hosted_is_discarded_once_it_does_not_deliver() -> None:
    """... and once every node now placed for its partition stands: until then it is the
    partition's only warm replica besides the owner. Mutant caught: dropped at once (the
    churn run's 25 s without delivery when the owner froze)."""
    h = Host()
    h.members("a")
    chains = Placement.of({"a", "b", "c", "d"}, 4, 1).hosts
    gone = next(p for p, chain in chains.items() if "a" not in chain)
    h.shard(gone).role = "master"
    h.members("a", "b", "c", "d")
    h.heard[(chains[gone][0], gone)] = time.monotonic()
    h.host.step()
    shard = h.built[gone]
    assert not shard.discarded, "a replica that delivers was stopped before its handover"
    shard.role = "backup"
    h.host.step()
    assert not shard.discarded, "dropped while the partition's new standby still restores"
    h.heard[(chains[gone][1], gone)] = time.monotonic()
    h.host.step()
    assert shard.discarded and gone not in h.host.shards


def test_a_leaving_node_hands_what_it_delivers_to_the_next_owner_then_stops() -> None:
    h = Host()
    h.members("a", "b")
    owned = [p for p, s in h.host.shards.items() if cast(Any, s).leads]
    for p in owned:
        h.shard(p).role = "master"
    shards = dict(h.host.shards)
    h.host.finish()
    for p in owned:
        assert cast(Any, shards[p]).handed_to == ["b"]
    assert all(cast(Any, s).stopped for s in shards.values())
