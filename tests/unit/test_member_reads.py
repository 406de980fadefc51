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
from chronos.runtime.member_host import MemberHost, _Generation, restore_next
from chronos.settings import ChronosSettings, NodeSettings
from chronos.types import EpochMs

PARTITIONS = 16
NODE = "c"


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
            settings=ChronosSettings(node=NodeSettings(node_id=NODE)),
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
    return sorted(Placement.of(members, PARTITIONS, 1).owned_by(NODE))


def hosted(*members: str) -> list[int]:
    return sorted(Placement.of(members, PARTITIONS, 1).hosted_by(NODE))


def test_a_partition_placed_on_a_member_during_its_first_read_joins_that_read() -> None:
    """c starts among four, and one leaves before c's first read caught up: c now owns a
    partition it held as a standby copy. Its first read starts again over what it owns now
    (before the fix, that partition waited for the restore of every standby copy: 57 s
    against 18 s, ``scripts/scale_out_check.py --shape node``)."""
    four, three = ("a", "b", "c", "d"), ("a", "b", "c")
    assert set(owned(*three)) - set(owned(*four)), "the leave gives c a partition to own"
    host = Host()
    host.place(*four)
    assert host.started == [(owned(*four), True)]
    host.place(*three)
    assert host.first_read == owned(*three)
    assert host.started[-1] == (owned(*three), True), "the first read, started again"
    assert host.ingests[0].stopped
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
