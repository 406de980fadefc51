"""``chronos cluster``'s view: the placement's intent beside what each partition's group does."""

from __future__ import annotations

from chronos.cli.cluster import lines
from chronos.cluster.placement import Placement
from chronos.cluster.status import ClusterStatus, node_of, partition_view
from chronos.group.status import GroupStatus, Member


def test_a_replica_id_names_its_node() -> None:
    """Mutant caught: splitting at the first dot (node ids may hold dots)."""
    assert node_of("n0.p3") == "n0"
    assert node_of("host.example.p12") == "host.example"
    assert node_of("plain") == "plain"
    assert node_of("a.pb") == "a.pb"


def _group(master: str | None, members: list[Member]) -> GroupStatus:
    return GroupStatus(
        group="g", state="empty", members=members, master=master, term=4, committed_age_ms=120
    )


def test_a_partition_delivered_by_its_owner_shows_owner_standby_and_replica_states() -> None:
    placement = Placement.of(frozenset({"a", "b"}), 2, 1)
    owner = placement.owner(0)
    assert owner is not None
    standby = "b" if owner == "a" else "a"
    group = _group(
        f"{owner}.p0",
        [
            Member(f"{owner}.p0", "", True, state="master", ingest_lag=0),
            Member(
                f"{standby}.p0",
                "",
                False,
                state="restoring",
                ingest_lag=900,
                detail={"waits_for": "ingest"},
            ),
        ],
    )
    view = partition_view(0, placement, group)
    assert (view.owner, view.standbys, view.delivering) == (owner, [standby], owner)
    assert [(r.node, r.state, r.ingest_lag) for r in view.replicas] == [
        (owner, "master", 0),
        (standby, "restoring", 900),
    ]
    status = ClusterStatus("c", ["a", "b"], 1, [view])
    shown = lines(status)
    assert shown[0] == "cluster c: 2 members (a, b), 1 partitions, 1 standby each"
    assert f"delivered by {owner} (term 4, 120 ms ago)" in shown[1]
    assert f"{standby} restoring lag 900 waits for ingest" in shown[1]
    assert shown[-1] == "every partition is delivered (1)" and not status.undelivered


def test_a_partition_nobody_delivers_is_reported_and_fails_the_command() -> None:
    """Mutant caught: a silent partition shown as delivered by its owner (the placement's
    intent taken for the fact)."""
    placement = Placement.of(frozenset({"a"}), 1, 1)
    view = partition_view(0, placement, _group(None, []))
    status = ClusterStatus("c", ["a"], 1, [view])
    assert view.owner == "a" and view.delivering is None
    assert status.undelivered == [0]
    assert "nobody delivers" in lines(status)[1]
    assert lines(status)[-1].startswith("NOT DELIVERED NOW: partitions [0]")
    assert status.as_dict()["undelivered"] == [0]


def test_a_partition_still_delivered_by_its_previous_owner_says_it_moves() -> None:
    placement = Placement.of(frozenset({"a", "b"}), 1, 1)
    owner = placement.owner(0)
    other = "b" if owner == "a" else "a"
    view = partition_view(0, placement, _group(f"{other}.p0", []))
    assert view.delivering == other
    assert f"delivered by {other}" in lines(ClusterStatus("c", ["a", "b"], 1, [view]))[1]
    assert "moving to its owner" in lines(ClusterStatus("c", ["a", "b"], 1, [view]))[1]
