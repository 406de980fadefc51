"""What a cold member reads, and in which order (``runtime/member_host.py``): the partitions it
owns by the placement of now before its standby copies, and none the placement took away.

The member's ingests are replaced by fakes whose catching up the test decides; the placements
are the real ones (``cluster/placement.py``), and each test first checks that its member lists
give the case it is about."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import cast

from chronos.clock import SystemClock
from chronos.cluster.placement import Placement
from chronos.delivery.deadletter import DeadLetters
from chronos.group.hosted import Hosted
from chronos.group.standbys import StandbysWorker
from chronos.kafka.clients import KafkaClients
from chronos.metrics import NullMetrics
from chronos.node.ingest import IngestWorker
from chronos.runtime.member_host import MemberHost, _Generation, restore_goes_on, restore_next
from chronos.settings import ChronosSettings, ClusterSettings, NodeSettings
from chronos.types import EpochMs

PARTITIONS = 16
NODE = "c"
STANDBYS = 1


class FakeIngest:
    """An ingest whose catching up the test decides."""

    def __init__(self) -> None:
        self.caught_up = threading.Event()
        self.stopped = False

    def start(self) -> None:
        pass

    def stop(self) -> None:
        self.stopped = True

    def join(self, timeout: float | None = None) -> None:
        pass


class FakeHosted:
    progress_topic = "progress"

    def follower(self) -> None:
        return None


class FakeStandbys:
    def add(self, partition: int, topic: str, follower: object, offset: int = -2) -> None:
        pass

    def holdings(self) -> dict[int, object]:
        return {}


class Host(MemberHost):
    """A member host whose schedules and ingests are fakes: it records every ingest started,
    as (partitions, gated: the member's own, else a restore)."""

    def __init__(self) -> None:
        super().__init__(
            settings=ChronosSettings(
                node=NodeSettings(node_id=NODE),
                cluster=ClusterSettings(standby_replicas=STANDBYS),
            ),
            partitions=PARTITIONS,
            open_hosted=lambda _p: cast(Hosted, FakeHosted()),
            standbys=cast(StandbysWorker, FakeStandbys()),
            delivering=frozenset,
            clients=cast(KafkaClients, None),
            dead_letters=cast(DeadLetters, None),
            clock=SystemClock(),
            metrics=NullMetrics(),
            on_fatal=lambda _reason: None,
        )
        self.started: list[tuple[list[int], bool]] = []
        self.ingests: list[FakeIngest] = []

    def _open_with_origin(self, partition: int, start: int) -> Hosted:
        return self._open_hosted(partition)

    def _new_generation(
        self,
        partitions: list[int],
        number: int,
        gated: bool = True,
        carried: Mapping[int, EpochMs] | None = None,
    ) -> _Generation:
        self.started.append((partitions, gated))
        ingest = FakeIngest()
        self.ingests.append(ingest)
        return _Generation(partitions, None, cast(IngestWorker, ingest), None)

    def place(self, *members: str) -> None:
        self.members_changed(frozenset(members))
        self.step()

    def catch_up(self) -> None:
        """The last ingest started caught up; the host's next tick sees it."""
        self.ingests[-1].caught_up.set()
        self.step()


def owned(*members: str) -> list[int]:
    return sorted(Placement.of(members, PARTITIONS, STANDBYS).owned_by(NODE))


def hosted(*members: str) -> list[int]:
    return sorted(Placement.of(members, PARTITIONS, STANDBYS).hosted_by(NODE))


def test_a_partition_placed_on_a_member_during_its_first_read_joins_that_read() -> None:
    """c starts among four, and one leaves before c's first read caught up: c now owns a
    partition it held as a standby copy. Its first read starts again over what it owns now
    (before the fix, that partition waited for the restore of every standby copy: 57 s
    against 18 s, ``scripts/scale_out_check.py --shape node``)."""
    four, three = ("a", "b", "c", "d"), ("a", "b", "c")
    gained = set(owned(*three)) - set(owned(*four))
    assert gained and gained <= set(hosted(*four)), "the leave makes a copy of c's its own"
    host = Host()
    host.place(*four)
    assert host.started == [(owned(*four), True)]
    host.place(*three)
    assert host.first_read == owned(*three)
    assert host.started[-1] == (owned(*three), True), "the first read, started again"
    assert host.ingests[0].stopped
    host.step()
    host.step()
    assert len(host.started) == 2, "started again once, not at every tick"
    host.catch_up()
    assert host.started[-1] == (sorted(set(hosted(*three)) - set(owned(*three))), False)


def test_a_member_restores_what_it_owns_before_its_standby_copies() -> None:
    """c's first read caught up and it restores its standby copies, when the placement gives
    it a partition it never hosted to own: that restore gives way to one of the new partition
    alone; the member's ingest then reads it with what it read before (the standby copies
    left out), and once that caught up the copies still placed here are restored, none the
    placement took away."""
    three, five = ("a", "b", "c"), ("a", "b", "c", "d", "e")
    new_owned = set(owned(*five)) - set(hosted(*three))
    assert new_owned, "the join gives c a partition to own that it never hosted"
    host = Host()
    host.place(*three)
    first = owned(*three)
    host.catch_up()
    copies = sorted(set(hosted(*three)) - set(first))
    assert host.started[-1] == (copies, False), "its standby copies, once the first read did"
    host.place(*five)
    assert host.started[-1] == (sorted(new_owned), False), "what it owns, before the copies"
    assert host.ingests[-2].stopped, "the copies' restore gave way"
    host.catch_up()
    assert host.started[-1] == (sorted(set(first) | new_owned), True)
    host.catch_up()
    placed = set(hosted(*five))
    rest = sorted((set(hosted(*three)) | placed) - set(first) - new_owned)
    assert host.started[-1] == (sorted(p for p in rest if p in placed), False)
    assert any(p not in placed for p in rest), "the placement took some copies away"


def test_restore_next_takes_owned_partitions_first_and_none_unplaced() -> None:
    assert restore_next({1, 2, 3}, frozenset({2}), frozenset({1, 2})) == [2]
    assert restore_next({1, 3}, frozenset({2}), frozenset({1, 2})) == [1]
    assert restore_next({3}, frozenset({2}), frozenset({1, 2})) == []


def test_a_copy_made_owned_during_its_restore_is_restored_alone_first() -> None:
    """c restores its standby copies when the placement makes two of them its own: that
    restore gives way to one of those two alone, the other copies after."""
    two, other = ("a", "c"), ("b", "c")
    copies = sorted(set(hosted(*two)) - set(owned(*two)))
    made_owned = set(owned(*other)) & set(copies)
    assert made_owned and not set(owned(*other)) - set(hosted(*two)), "only copies made owned"
    host = Host()
    host.place(*two)
    host.catch_up()
    assert host.started[-1] == (copies, False)
    host.place(*other)
    assert host.started[-1] == (sorted(made_owned), False), "those alone"
    host.catch_up()
    read = sorted(set(owned(*two)) | made_owned)
    assert host.started[-1] == (read, True)
    host.catch_up()
    assert host.started[-1] == (sorted(set(hosted(*other)) - set(read)), False)


def test_a_restore_goes_on_while_it_reads_what_comes_next_and_no_copy_holds_up_an_owner() -> None:
    owned_ = frozenset({1, 2})
    assert restore_goes_on([3, 4], [3], owned_), "a copy among the copies it reads"
    assert not restore_goes_on([3, 4], [3, 5], owned_), "a copy it does not read"
    assert restore_goes_on([1, 2], [1, 2], owned_), "the owned ones, exactly"
    assert not restore_goes_on([1, 3], [1], owned_), "an owned one read with a copy"


def test_a_partition_delivered_until_a_fence_stands_while_its_log_is_read_again() -> None:
    """A fenced member follows its partitions' logs again from their start; until its reader
    read them, only the partitions it delivered until the fence stand (their store is its
    own commits'), and only while its ingest has caught up. Mutant caught: ``delivered``
    ignored (every member of a broker-kill run waited up to 1.3 s for its reader)."""
    members = ("a", "c")
    host = Host()
    host.place(*members)
    mine = owned(*members)
    assert host.standing(frozenset(mine)) == frozenset(), "the first read has not caught up"
    host.catch_up()
    assert host.standing() == frozenset(), "no log read yet"
    assert host.standing(frozenset(mine[:2])) == frozenset(mine[:2])
    assert host.standing(frozenset({PARTITIONS + 1})) == frozenset(), "not hosted here"
