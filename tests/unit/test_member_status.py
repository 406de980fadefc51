"""``chronos cluster`` over the node shape (``cluster/member_status.py``): who delivers a
partition and each placed node's state, from the holder its log names and the readiness
board. Read from Kafka in ``tests/integration/test_cluster_node_shape.py``."""

from __future__ import annotations

from chronos.cluster.member_status import BoardEntry, Held, delivering, replica_states

_MEMBERS = frozenset({"a", "b", "c"})


def test_the_holder_delivers_while_a_member_that_did_not_hand_the_partition_over() -> None:
    assert delivering(Held("a", 3, None), _MEMBERS) == "a"
    assert delivering(Held("a", 3, "b"), _MEMBERS) is None, "handed over: b claims next"
    assert delivering(Held("d", 3, None), _MEMBERS) is None, "gone from the group"
    assert delivering(Held(None, 0, None), _MEMBERS) is None, "never claimed"


def test_a_standby_is_eligible_only_while_what_it_said_is_fresh_and_names_the_partition() -> None:
    board = {
        "b": BoardEntry(frozenset({1, 2}), age_ms=500),
        "c": BoardEntry(frozenset({1}), age_ms=9_000),
    }
    states = replica_states(1, ["a", "b", "c"], Held("a", 2, None), _MEMBERS, board, 4_000)
    assert states == {"a": "master", "b": "eligible", "c": None}
    assert replica_states(3, ["b", "c"], Held("b", 2, "c"), _MEMBERS, board, 4_000) == {
        "b": None,
        "c": None,
    }


def test_a_holder_outside_the_placement_is_listed_as_the_master() -> None:
    """A partition not moved to its new owner yet: its holder shows beside the placed nodes."""
    states = replica_states(0, ["b", "c"], Held("a", 5, None), _MEMBERS, {}, 4_000)
    assert states == {"b": None, "c": None, "a": "master"}
