"""Placement of a cluster's partitions: balanced, stable, and the first standby is the next
owner (what makes a crashed owner's takeover need no restore)."""

from __future__ import annotations

import math

import pytest

from chronos.cluster.placement import Placement, rank

_MEMBERS = [f"node-{i}" for i in range(6)]


@pytest.mark.parametrize("count", [1, 2, 3, 4, 5, 6])
@pytest.mark.parametrize("partitions", [1, 4, 16, 48])
def test_every_partition_has_one_owner_and_no_node_owns_more_than_its_share(
    count: int, partitions: int
) -> None:
    members = _MEMBERS[:count]
    placement = Placement.of(members, partitions, standbys=1)
    owned = [len(placement.owned_by(m)) for m in members]
    assert sum(owned) == partitions
    assert max(owned) <= math.ceil(partitions / count)
    for partition in range(partitions):
        chain = placement.hosts[partition]
        assert len(chain) == min(2, count) and len(set(chain)) == len(chain)


@pytest.mark.parametrize("count", [2, 3, 4, 6])
def test_a_lost_owner_s_partitions_go_to_their_first_standby(count: int) -> None:
    members = _MEMBERS[:count]
    before = Placement.of(members, 16, standbys=1)
    for lost in members:
        after = Placement.of([m for m in members if m != lost], 16, standbys=1)
        for partition in before.owned_by(lost):
            assert after.owner(partition) == before.hosts[partition][1]


def test_a_joining_node_takes_its_share_and_moves_few_others() -> None:
    """Bounded-load rendezvous: a cap that changes with the member count displaces a few
    partitions besides those the new member takes (measured in placement.py's docstring)."""
    members = _MEMBERS[:4]
    before = Placement.of(members, 16, standbys=1)
    joined = Placement.of([*members, "node-9"], 16, standbys=1)
    assert len(joined.owned_by("node-9")) in (3, 4)  # 16 / 5 members
    displaced = [p for p in range(16) if joined.owner(p) not in {before.owner(p), "node-9"}]
    assert len(displaced) <= 2


def test_every_member_computes_the_same_placement_whatever_order_it_lists_members_in() -> None:
    shuffled = [_MEMBERS[i] for i in (3, 0, 5, 1, 4, 2)]
    assert Placement.of(shuffled, 16, 2) == Placement.of(_MEMBERS, 16, 2)
    assert rank(shuffled, 7) == rank(_MEMBERS, 7)


def test_no_members_place_nothing() -> None:
    placement = Placement.of([], 4, standbys=1)
    assert placement.owner(0) is None
    assert placement.hosted_by("node-0") == set()
