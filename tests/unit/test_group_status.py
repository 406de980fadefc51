"""What ``chronos group`` shows, built from facts as Kafka states them (no broker).

Each test names the mutant it was seen to catch.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from chronos.clock import FakeClock
from chronos.group import announcement
from chronos.group.announcement import Announcement, Announcer
from chronos.group.spec import GroupSpec
from chronos.group.status import GroupFacts, GroupStatus, MemberFacts, build_status, watermark
from chronos.schedule.floor import Floor
from chronos.schedule.progress_record import Cut
from chronos.settings import ChronosSettings

T0 = 1_700_000_000_000


def _spec() -> GroupSpec:
    settings = ChronosSettings.model_validate(
        {"topics": {"namespace": "ns"}, "group": {"name": "g"}}
    )
    spec = GroupSpec.of(settings)
    assert spec is not None
    return spec


def test_the_master_is_the_member_assigned_the_election_partition() -> None:
    """Mutant caught: any member with an assignment taken for the master (during a
    cooperative rebalance a backup holds an empty assignment object)."""
    spec = _spec()
    facts = GroupFacts(
        state="stable",
        members=(
            MemberFacts("b", "/10.0.0.2", ()),
            MemberFacts("a", "/10.0.0.1", (spec.election_topic,)),
        ),
        cut=Cut(term=3, seek_ms=T0, offsets={0: 10}, node="a", committed_at_ms=T0 - 40),
        committed={"a": {0: 10, 1: 5}, "b": {0: 7, 1: -1001}},
        ends={0: 12, 1: 5},
    )
    status = build_status(spec, facts, now_ms=T0)
    assert status.master == "a" and status.group == "g" and status.state == "stable"
    assert [(m.node, m.master) for m in status.members] == [("a", True), ("b", False)]
    assert (status.term, status.committed_seek_ms, status.committed_by) == (3, T0, "a")
    assert status.committed_age_ms == 40


def test_ingest_lag_counts_what_each_replica_has_not_stored() -> None:
    """Mutant caught: a partition without a committed offset (OFFSET_INVALID, -1001) counted
    as 1,001 records *ahead*: a replica that never stored it looked caught up."""
    spec = _spec()
    facts = GroupFacts(
        state="stable",
        members=(MemberFacts("a", "h", (spec.election_topic,)), MemberFacts("b", "h", ())),
        cut=None,
        committed={"a": {0: 10, 1: 5}, "b": {0: 7, 1: -1001}},
        ends={0: 12, 1: 5},
    )
    status = build_status(spec, facts, now_ms=T0)
    lags = {m.node: m.ingest_lag for m in status.members}
    assert lags == {"a": 2, "b": 5 + 5}
    assert status.term is None and status.committed_seek_ms is None


def test_a_group_without_members_has_no_master() -> None:
    spec = _spec()
    status = build_status(spec, GroupFacts("empty", (), None, {}, {}), now_ms=T0)
    assert status.master is None and status.members == []


def test_a_group_is_rebuildable_only_while_the_floor_covers_where_the_topic_starts() -> None:
    """A new replica reads from the topic's start (or the floor): rebuildable when every
    partition starts at 0 or at most at the floor. Mutant caught: a partition the floor does
    not name counted as covered."""
    spec = _spec()

    def status(starts: dict[int, int], floor: Floor | None) -> GroupStatus:
        cut = Cut(3, T0, {0: 10}, "a", T0, floor)
        facts = GroupFacts("stable", (), cut, {}, {0: 20, 1: 20}, starts)
        return build_status(spec, facts, now_ms=T0 + 5)

    assert status({0: 0, 1: 0}, None).rebuildable
    assert not status({0: 4, 1: 0}, None).rebuildable
    covered = status({0: 4, 1: 0}, Floor({0: 4, 1: 9}, T0 - 100))
    assert covered.rebuildable and covered.rebuild_floor == {0: 4, 1: 9}
    assert covered.floor_age_ms == 105 and covered.inner_starts == {0: 4, 1: 0}
    assert not status({0: 4, 1: 2}, Floor({0: 4}, T0)).rebuildable


def test_the_master_is_who_commits_while_the_elected_member_waits() -> None:
    """Seen on a compose restart: both replicas took over at once, b fenced a, a was then
    assigned the election partition and waits for b to fall silent. Mutant caught: `chronos
    group` naming the elected a master while b delivers."""
    spec = _spec()
    members = (
        MemberFacts("a", "/10.0.0.1", (spec.election_topic,)),
        MemberFacts("b", "/10.0.0.2", ()),
    )
    cut = Cut(term=2, seek_ms=T0, offsets={0: 10}, node="b", committed_at_ms=T0 - 60)
    status = build_status(spec, GroupFacts("stable", members, cut, {}, {}), now_ms=T0)
    assert (status.master, status.elected) == ("b", "a")
    roles = [(m.node, m.master, m.elected) for m in status.members]
    assert roles == [("b", True, False), ("a", False, True)]


def test_no_master_while_no_one_commits() -> None:
    """A latest commit older than silent_after_ms: a takeover is under way, no one delivers.
    Mutant caught: a dead master shown delivering from its last commit."""
    spec = _spec()
    members = (MemberFacts("b", "h", (spec.election_topic,)),)
    cut = Cut(term=2, seek_ms=T0, offsets={0: 10}, node="a", committed_at_ms=T0 - 6_000)
    status = build_status(spec, GroupFacts("stable", members, cut, {}, {}), now_ms=T0)
    assert (status.master, status.elected, status.committed_by) == (None, "b", "a")


class _MovingLeader:
    """A consumer whose partition answers ``errors`` first, then its offsets."""

    def __init__(self, *errors: int) -> None:
        self.errors = list(errors)
        self.asked = 0

    def get_watermark_offsets(self, partition: TopicPartition, timeout: float) -> tuple[int, int]:
        self.asked += 1
        if self.errors:
            raise KafkaException(KafkaError(self.errors.pop(0)))
        return 3, 17


def test_watermarks_are_asked_again_while_the_leader_moves() -> None:
    """Right after a broker start the inner topic's leader is still being elected: ``chronos
    group`` (and the container failover test asking it) failed with NOT_LEADER_FOR_PARTITION
    instead of answering a moment later. Mutant caught: no second ask."""
    moving = _MovingLeader(KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE)
    partition = TopicPartition("inner", 0)
    assert watermark(moving, partition, time.monotonic() + 30) == (3, 17)
    assert moving.asked == 3
    refused = _MovingLeader(KafkaError.TOPIC_AUTHORIZATION_FAILED)
    with pytest.raises(KafkaException):  # not a moving leader: said at once
        watermark(refused, partition, time.monotonic() + 30)
    assert refused.asked == 1
    stuck = _MovingLeader(*[KafkaError.NOT_LEADER_FOR_PARTITION] * 1000)
    with pytest.raises(KafkaException):  # past the deadline: said
        watermark(stuck, partition, time.monotonic())


def test_a_replica_not_in_the_election_is_listed_with_what_it_said_of_itself() -> None:
    """A replaced disk restores, or waits for a floor, before it joins the election: the
    operator sees it with its state and lag. One that stopped, or whose last word is stale
    (killed), is not listed. Mutants caught: announced members left out (the listing before
    this change); a stale or stopped announcement listed as a live member."""
    spec = _spec()
    stale = T0 - announcement.STALE_AFTER_MS - 1
    facts = GroupFacts(
        state="stable",
        members=(MemberFacts("a", "h", (spec.election_topic,)),),
        cut=Cut(term=2, seek_ms=T0, offsets={0: 10}, node="a", committed_at_ms=T0 - 40),
        committed={"a": {0: 12}, "c": {0: 4}},
        ends={0: 12},
        announced={
            "a": Announcement("a", announcement.MASTER, T0 - 100, {"term": 2}),
            "c": Announcement("c", announcement.RESTORING, T0 - 100, {"waits_for": "ingest"}),
            "d": Announcement("d", announcement.INCOMPLETE, stale, {"began": {0: 5}}),
            "e": Announcement("e", announcement.STOPPED, T0 - 100),
        },
    )
    status = build_status(spec, facts, now_ms=T0)
    listed = [(m.node, m.master, m.elected, m.state, m.ingest_lag) for m in status.members]
    assert listed == [("a", True, True, "master", 0), ("c", False, False, "restoring", 8)]
    assert status.members[1].detail == {"waits_for": "ingest"}


def test_an_announcement_says_a_change_at_once_and_the_same_state_once_an_interval() -> None:
    """Mutants caught: every tick producing a record (the replica steps every 50 ms); an
    unchanged state never said again (a reader would drop the live replica as stale)."""
    clock = FakeClock(T0)
    said: list[Announcement | None] = []
    announcer = Announcer("b", lambda k, v: said.append(announcement.decode(k, v)), clock, 5.0)
    announcer.say(announcement.RESTORING, {"waits_for": "ingest"})
    announcer.say(announcement.RESTORING, {"waits_for": "ingest"})
    clock.advance(1000)
    announcer.say(announcement.ELIGIBLE)
    clock.advance(4_999)
    announcer.say(announcement.ELIGIBLE)
    clock.advance(1)
    announcer.say(announcement.ELIGIBLE)
    assert said == [
        Announcement("b", announcement.RESTORING, T0, {"waits_for": "ingest"}),
        Announcement("b", announcement.ELIGIBLE, T0 + 1000),
        Announcement("b", announcement.ELIGIBLE, T0 + 6000),
    ]
    assert announcement.decode(b"b", b"not json") is None
    assert announcement.decode(b"b", None) is None


def test_chronos_group_prints_what_a_member_not_eligible_waits_for() -> None:
    """Mutant caught: the state or its reason left out of the printed line (an operator reads
    the text, not the JSON)."""
    from chronos.cli.group import _member_line
    from chronos.group.status import Member

    waiting = Member("c", "", False, state="incomplete", detail={"began": {"0": 5}, "floor": None})
    line = _member_line(waiting)
    assert "incomplete" in line and "began at {'0': 5}, waits for a floor" in line
    restoring = Member("d", "", False, state="restoring", detail={"waits_for": "ingest"})
    assert "restoring" in _member_line(restoring) and "waits for ingest" in _member_line(restoring)
    assert _member_line(Member("a", "h", True, True)).split()[:2] == ["a", "master"]


def test_the_lag_of_a_group_of_some_partitions_counts_only_those() -> None:
    """A cluster's partition is a group of one partition: its replicas store nothing of the
    others. Mutant caught: the lag summed over every inner partition (each standby looked
    thousands of records behind)."""
    settings = ChronosSettings.model_validate(
        {"topics": {"namespace": "ns"}, "group": {"name": "g"}, "node": {"owned_partitions": [1]}}
    )
    spec = GroupSpec.of(settings)
    assert spec is not None and spec.partitions == (1,)
    facts = GroupFacts(
        state="empty",
        members=(MemberFacts("a", "/10.0.0.1", ()),),
        cut=None,
        committed={"a": {1: 40}},
        ends={0: 5_000, 1: 42, 2: 7_000},
    )
    (member,) = build_status(spec, facts, now_ms=T0).members
    assert member.ingest_lag == 2
