"""A cluster member's round (``chronos/cluster/rounds.py``): which partitions it claims, from
whom, and which it hands over, from its view of members, suspects, logs and the board."""

from __future__ import annotations

import math
from dataclasses import replace

from chronos.cluster.placement import Placement, rank
from chronos.cluster.rounds import STAND_IN_AFTER_S, Rounds, RoundView
from chronos.group.claims import Holding

PARTITIONS = 16
MEMBERS = frozenset({"a", "b", "c"})


class Board:
    """A readiness board: node -> partition -> monotonic time it said its replica stands."""

    def __init__(self) -> None:
        self.said: dict[str, dict[int, float]] = {}
        self.asked_since: list[float] = []

    def say(self, node: str, partitions: range | list[int], at: float) -> None:
        for partition in partitions:
            self.said.setdefault(node, {})[partition] = at

    def ready(self, node: str, partition: int, since: float) -> bool:
        self.asked_since.append(since)
        at = self.said.get(node, {}).get(partition)
        return at is not None and at > since


def _rounds(node: str, board: Board | None = None, standbys: int = 1) -> Rounds:
    return Rounds(node, PARTITIONS, standbys, (board or Board()).ready)


def _view(
    *,
    members: frozenset[str] = MEMBERS,
    suspects: frozenset[str] = frozenset(),
    delivering: frozenset[int] = frozenset(),
    standing: frozenset[int] | None = None,
    holdings: dict[int, Holding] | None = None,
    undecided: frozenset[int] = frozenset(),
) -> RoundView:
    return RoundView(
        members=members,
        suspects=suspects,
        delivering=delivering,
        standing=frozenset(range(PARTITIONS)) if standing is None else standing,
        holdings={p: Holding(None) for p in range(PARTITIONS)} if holdings is None else holdings,
        undecided=undecided,
    )


def test_a_new_cluster_s_members_each_claim_their_placed_partitions_from_nobody() -> None:
    placement = Placement.of(MEMBERS, PARTITIONS, 1)
    claimed: list[int] = []
    for node in sorted(MEMBERS):
        plan = _rounds(node).plan(_view(), 0.0)
        assert set(plan.claims) == {None}
        assert set(plan.claims[None]) == placement.owned_by(node)
        assert not plan.releases and not plan.resume
        claimed += plan.claims[None]
    assert sorted(claimed) == list(range(PARTITIONS))  # each once


def test_a_suspect_s_partitions_are_claimed_by_their_first_standby_only() -> None:
    placement = Placement.of(MEMBERS, PARTITIONS, 1)
    held = {p: Holding(placement.hosts[p][0]) for p in range(PARTITIONS)}
    lost = placement.owned_by("b")
    assert lost
    claims: dict[str, list[int]] = {}
    for node in ("a", "c"):
        mine = frozenset(placement.owned_by(node))
        plan = _rounds(node).plan(
            _view(suspects=frozenset({"b"}), delivering=mine, holdings=held), 0.0
        )
        assert set(plan.claims) <= {"b"}
        claims[node] = plan.claims.get("b", [])
        for partition in claims[node]:
            assert placement.hosts[partition][1] == node  # its warm standby
    assert sorted(claims["a"] + claims["c"]) == sorted(lost)


def test_a_live_holder_keeps_its_partition_until_it_hands_it_over() -> None:
    """A node placed as the owner of a partition another live node holds (a join, or a
    false suspicion undone) waits for its handover, then claims from it."""
    partition = 5
    held = {partition: Holding("old")}
    members = MEMBERS | {"old"}
    owner = Placement.of(members, PARTITIONS, 1).owner(partition)
    assert owner is not None and owner != "old"
    rounds = _rounds(owner)
    assert rounds.plan(_view(members=members, holdings=held), 0.0).empty
    released = {partition: Holding("old", released_to=owner)}
    plan = rounds.plan(_view(members=members, holdings=released), 1.0)
    assert plan.handed == {"old": [partition]} and not plan.claims


def test_a_node_that_lost_its_lanes_retakes_what_it_held_and_a_gone_holders_are_taken() -> None:
    placement = Placement.of(MEMBERS, PARTITIONS, 1)
    mine = sorted(placement.owned_by("a"))
    held = {p: Holding("a") for p in mine}
    held[mine[0]] = Holding("gone")  # held by a node no longer in the member list
    plan = _rounds("a").plan(_view(holdings=held), 0.0)
    assert plan.claims == {"a": mine[1:], "gone": [mine[0]]}


def test_nothing_is_claimed_without_a_standing_store_a_read_log_or_over_an_undecided_claim() -> (
    None
):
    placement = Placement.of(MEMBERS, PARTITIONS, 1)
    mine = sorted(placement.owned_by("a"))
    assert len(mine) >= 3
    restoring, unread, undecided = mine[:3]
    holdings = {p: Holding(None) for p in mine if p != unread}
    plan = _rounds("a").plan(
        _view(
            standing=frozenset(mine) - {restoring},
            holdings=holdings,
            undecided=frozenset({undecided}),
        ),
        0.0,
    )
    assert plan.claims == {None: mine[3:]}
    assert plan.resume == [undecided]


def test_a_lane_placed_elsewhere_is_released_once_its_successor_said_after_the_move() -> None:
    board = Board()
    members = MEMBERS | {"new"}
    placement = Placement.of(members, PARTITIONS, 1)
    moved = sorted(placement.owned_by("new"))
    assert moved
    # "a" delivered every partition "new" now owns; "new" said ready before the move was seen.
    board.say("new", moved, at=1.0)
    rounds = _rounds("a", board)
    delivering = frozenset(moved)
    view = _view(members=members, delivering=delivering, holdings={})
    assert rounds.plan(view, 2.0).releases == {}
    board.say("new", moved, at=3.0)
    assert rounds.plan(view, 4.0).releases == dict.fromkeys(moved, "new")
    assert set(board.asked_since) == {2.0}  # since the round that first saw each move


def test_a_move_undone_and_made_again_counts_from_the_second_time() -> None:
    board = Board()
    members = MEMBERS | {"new"}
    moved = min(Placement.of(members, PARTITIONS, 1).owned_by("new"))
    rounds = _rounds("a", board)
    lane = frozenset({moved})
    rounds.plan(_view(members=members, delivering=lane, holdings={}), 1.0)
    rounds.plan(_view(members=MEMBERS | {"a"}, delivering=lane, holdings={}), 2.0)
    board.say("new", [moved], at=2.5)
    plan = rounds.plan(_view(members=members, delivering=lane, holdings={}), 3.0)
    assert plan.releases == {}  # said at 2.5, before the move was seen again at 3.0


def test_a_false_suspicion_ends_in_a_handover_back() -> None:
    board = Board()
    placement = Placement.of(MEMBERS, PARTITIONS, 1)
    taken = [p for p in placement.owned_by("b") if placement.hosts[p][1] == "a"]
    assert taken
    held = {p: Holding("b") for p in taken}
    rounds = _rounds("a", board)
    plan = rounds.plan(_view(suspects=frozenset({"b"}), holdings=held), 1.0)
    assert plan.claims == {"b": sorted(taken)}
    # Won: "a" delivers them; "b" is heard again and says its replicas stand.
    delivering = frozenset(taken)
    won = {p: Holding("a") for p in taken}
    assert rounds.plan(_view(delivering=delivering, holdings=won), 2.0).releases == {}
    board.say("b", taken, at=2.5)
    plan = rounds.plan(_view(delivering=delivering, holdings=won), 3.0)
    assert plan.releases == dict.fromkeys(taken, "b")
    assert not plan.claims


def test_a_node_outside_the_member_list_claims_nothing_and_hands_its_lanes_on() -> None:
    board = Board()
    others = frozenset({"b", "c"})
    placement = Placement.of(others, PARTITIONS, 1)
    board.say("b", list(placement.owned_by("b")), at=math.inf)
    rounds = _rounds("a", board)
    delivering = frozenset({0, 1, 2})
    plan = rounds.plan(_view(members=others, delivering=delivering), 1.0)
    assert not plan.claims
    assert plan.releases == {p: "b" for p in delivering if placement.owner(p) == "b"}


def test_each_member_set_s_placement_is_computed_once() -> None:
    rounds = _rounds("a")
    first = rounds.placement(MEMBERS)
    assert rounds.placement(frozenset(MEMBERS)) is first
    rounds.placement(MEMBERS - {"c"})
    assert rounds.placement(MEMBERS) is first


def test_a_holder_that_left_the_group_and_still_beats_hands_over_and_a_silent_one_is_taken() -> (
    None
):
    """A graceful leave: the leaver is out of the member list but still heard while it hands
    its partitions over; its successor waits for the handover instead of fencing it. Heard
    no more, it is claimed from (it died before handing over)."""
    others = frozenset({"b", "c"})
    placement = Placement.of(others, PARTITIONS, 1)
    mine = sorted(placement.owned_by("b"))
    held = {p: Holding("a") for p in mine}
    rounds = _rounds("b")
    heard = replace(_view(members=others, holdings=held), heard=frozenset({"a"}))
    assert rounds.plan(heard, 0.0).empty
    plan = rounds.plan(_view(members=others, holdings=held), 1.0)
    assert plan.claims == {"a": mine}


def test_a_partition_handed_to_this_node_is_claimed_whatever_its_member_list_says() -> None:
    """A leaving node hands over while the group still rebalances: its successor's member
    list may still name the leaver as the owner. Mutant caught: released partitions claimed
    only where this node's placement names it (the handover waited for the rebalance)."""
    placement = Placement.of(MEMBERS, PARTITIONS, 1)
    theirs = sorted(placement.owned_by("b"))
    held = {p: Holding("b", released_to="a") for p in theirs}
    plan = _rounds("a").plan(_view(holdings=held), 0.0)
    assert plan.handed == {"b": theirs} and not plan.claims


def test_a_partition_handed_to_a_node_that_is_gone_is_retaken_by_its_holder() -> None:
    """The holder handed p over and its successor died or left before claiming it: the
    holder takes it back, whoever the placement names (it then hands it over as usual).
    Mutant caught: a holder that retakes only where the placement names it (p stranded: the
    new owner waits for a handover nobody makes)."""
    placement = Placement.of(MEMBERS - {"b"}, PARTITIONS, 1)
    theirs = sorted(placement.owned_by("c"))
    held = {p: Holding("a", released_to="b") for p in theirs}
    # b is no longer a member and not heard: gone.
    plan = _rounds("a").plan(_view(members=MEMBERS - {"b"}, holdings=held), 0.0)
    assert plan.claims == {"a": theirs}
    # b suspected while still listed: the same.
    plan = _rounds("a").plan(_view(suspects=frozenset({"b"}), holdings=held), 0.0)
    assert plan.claims == {"a": theirs}
    # b alive: its claim is waited for.
    heard = replace(_view(holdings=held), heard=frozenset({"b"}))
    assert _rounds("a").plan(heard, 0.0).empty


def test_a_partition_the_log_says_this_node_holds_and_it_does_not_deliver_is_retaken() -> None:
    """A won claim whose lane never started (a hand-in that timed out, a fence during the
    move): the log names this node, which retakes it whatever the placement says, and hands
    it over from there. Mutant caught: the retake only where the placement names this node."""
    placement = Placement.of(MEMBERS, PARTITIONS, 1)
    theirs = sorted(placement.owned_by("b"))
    held = {p: Holding("a") for p in theirs}
    plan = _rounds("a").plan(_view(holdings=held), 0.0)
    assert plan.claims == {"a": theirs}


def test_a_leaving_node_hands_over_on_its_successors_last_word() -> None:
    """A leave needs no word said after the move (a second's wait): its successors are
    live. Mutant caught: a leaving node waiting for a word after the move."""
    board = Board()
    others = frozenset({"b", "c"})
    placement = Placement.of(others, PARTITIONS, 1)
    mine = frozenset(range(PARTITIONS))
    for node in others:
        board.say(node, sorted(placement.owned_by(node)), at=0.5)
    view = replace(_view(members=others, delivering=mine, holdings={}), leaving=True)
    plan = _rounds("a", board).plan(view, 1.0)
    assert plan.releases == {p: placement.hosts[p][0] for p in mine}
    staying = replace(view, leaving=False)
    assert _rounds("a", board).plan(staying, 1.0).releases == {}


def _orphan(members: frozenset[str]) -> tuple[int, tuple[str, ...], list[str]]:
    """A partition b held, b suspected: its placement chain over the others (owner first)
    and the members outside the chain in the partition's order."""
    survivors = members - {"b"}
    placed = Placement.of(survivors, PARTITIONS, 1)
    partition = next(
        p for p in range(PARTITIONS) if Placement.of(members, PARTITIONS, 1).owner(p) == "b"
    )
    chain = placed.hosts[partition]
    return partition, chain, rank(survivors - set(chain), partition)


def test_a_gone_holders_partition_whose_placed_owner_does_not_stand_is_claimed_by_a_stand_in() -> (
    None
):
    """Mutants: no stand-in (the churn run's 20 s gap); one at once (no wait for the placed
    owner's own takeover); one while the owner stands; a later node while an earlier stands."""
    members = MEMBERS | {"d"}
    partition, chain, others = _orphan(members)
    owner, standby = chain
    (outside,) = others
    held = {partition: Holding("b")}
    view = _view(members=members, suspects=frozenset({"b"}), holdings=held)
    board = Board()
    rounds = _rounds(standby, board)
    assert rounds.plan(view, 0.0).empty, "the placed owner gets its own takeover first"
    assert rounds.plan(view, STAND_IN_AFTER_S - 0.1).empty
    stood_in = rounds.plan(view, STAND_IN_AFTER_S)
    assert stood_in.claims == {"b": [partition]} and stood_in.stand_ins == [partition]
    # Outside the chain: only while no node before it in the order stands.
    later = _rounds(outside, board)
    later.plan(view, 0.0)
    assert later.plan(view, STAND_IN_AFTER_S).claims == {"b": [partition]}
    board.say(standby, [partition], 1.0)
    assert later.plan(view, STAND_IN_AFTER_S + 1).empty
    # The placed owner stands: it claims, nobody stands in.
    board.say(owner, [partition], 2.0)
    assert rounds.plan(view, STAND_IN_AFTER_S + 2).empty
    assert _rounds(owner, board).plan(view, 0.0).claims == {"b": [partition]}


def test_no_stand_in_for_a_live_holder_or_a_partition_nobody_held() -> None:
    members = MEMBERS | {"d"}
    partition, chain, _others = _orphan(members)
    standby = chain[1]
    for held, suspects in (
        ({partition: Holding("b")}, frozenset[str]()),  # alive: it hands over when it goes
        ({partition: Holding(None)}, frozenset({"b"})),  # a new cluster: its owner claims
    ):
        rounds = _rounds(standby)
        view = _view(members=members, suspects=suspects, holdings=held)
        for now in (0.0, STAND_IN_AFTER_S, 2 * STAND_IN_AFTER_S):
            assert partition not in rounds.plan(view, now).claims.get("b", [])
            assert partition not in rounds.plan(view, now).claims.get(None, [])
