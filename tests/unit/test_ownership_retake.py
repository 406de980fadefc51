"""A member whose delivery loop was fenced retakes its partitions without waiting for its
standbys' reader to read their logs again (``cluster/ownership.py``), and never one it was
handing over. Drives ``OwnershipRound`` over the real ``Rounds`` with a claimant and a
standbys' reader that only record what they are asked."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, cast

from chronos.cluster.ownership import OwnershipRound
from chronos.cluster.rounds import Rounds
from chronos.group.claims import Claimant, ClaimLog, Decision, Holding
from chronos.group.lane import Lane
from chronos.group.standbys import HandIn, StandbysWorker
from chronos.group.transactions import TransactionLoop
from chronos.schedule.progress_record import Claim


class _Log:
    def __init__(self, partition: int) -> None:
        self.partition = partition

    def close(self) -> None:
        pass


class _Standbys:
    """What the reader read: ``read`` (nothing while it reads the logs from their start)."""

    def __init__(self) -> None:
        self.read: dict[int, Holding] = {}
        self.followed: list[int] = []

    def holdings(self) -> dict[int, Holding]:
        return dict(self.read)

    def hand_in(self, partition: int, past: int, cut: Any) -> HandIn:
        hand_in = HandIn(partition, past, cut)
        hand_in.done.set()
        return hand_in

    def cancel(self, hand_in: HandIn) -> bool:
        return False


class _Claimant:
    """Wins every claim, and records each round's partitions and whom they are taken from."""

    def __init__(self, node: str) -> None:
        self.node = node
        self.asked: list[tuple[list[int], str | None]] = []

    def claim_all(
        self, claim_logs: Sequence[Any], expected: str | None, handed: bool = False
    ) -> list[Decision]:
        self.asked.append(([log.partition for log in claim_logs], expected))
        claim = Claim(term=len(self.asked), node=self.node, after=-1, nonce="n")
        return [Decision(True, claim, 0, None, self.node) for _ in claim_logs]


class _Replica:
    seek_ms = 0


class _Lane:
    def __init__(self) -> None:
        self.released = threading.Event()
        self.release_to: str | None = None
        self.replica = _Replica()

    def release(self, successor: str) -> None:
        self.release_to = successor


class _Loop:
    def add_lane(self, lane: Any) -> None:
        pass


def _member(standbys: _Standbys, claimant: _Claimant, clock: list[float]) -> OwnershipRound:
    lanes: dict[int, _Lane] = {}

    def lead(partition: int, _term: int, _cut: Any) -> Lane:
        lanes[partition] = _Lane()
        return cast(Lane, lanes[partition])

    ownership = OwnershipRound(
        rounds=Rounds("a", 2, 0, lambda _n, _p, _s: True),
        members=lambda: frozenset({"a"}),
        suspects=frozenset,
        standing=lambda: frozenset({0, 1}),
        standbys=cast(StandbysWorker, standbys),
        open_claim_log=lambda p: cast(ClaimLog, _Log(p)),
        lead=lead,
        follow=standbys.followed.append,
        hand_in_timeout_s=10.0,
        interval_s=0.1,
        clock=lambda: clock[0],
    )
    ownership.attach(cast(TransactionLoop, _Loop()), cast(Claimant, claimant))
    return ownership


def test_a_fenced_member_retakes_its_partitions_before_its_reader_read_them_again() -> None:
    """After a broker's restart every member's producer was fenced at its first abort; its
    partitions then waited up to 1.3 s for the standbys' reader to read their logs from the
    start before any round claimed them back. Mutant caught: the holdings as read only."""
    standbys, claimant, clock = _Standbys(), _Claimant("a"), [100.0]
    ownership = _member(standbys, claimant, clock)
    standbys.read = {0: Holding(None), 1: Holding(None)}
    ownership()
    assert claimant.asked == [([0, 1], None)]
    assert ownership.delivering == {0, 1}

    standbys.read = {}  # the reader follows them again, from their start
    assert ownership.lanes_lost() == [0, 1]
    assert standbys.followed == [0, 1]
    assert ownership.retaking == {0, 1}, "what the member stands for meanwhile"
    clock[0] += 0.2
    ownership()
    assert claimant.asked[1] == ([0, 1], "a"), "retaken from this node, as a retake is"
    assert ownership.delivering == {0, 1}
    assert ownership.retaking == frozenset(), "the claims read the logs: their word counts"


def test_a_partition_being_handed_over_is_not_retaken_before_its_log_is_read() -> None:
    """Its log may name the successor already: the rounds decide it from the log as read."""
    standbys, claimant, clock = _Standbys(), _Claimant("a"), [100.0]
    ownership = _member(standbys, claimant, clock)
    standbys.read = {0: Holding(None), 1: Holding(None)}
    ownership()
    lanes = cast(Any, ownership)._lanes
    lanes[1].release("b")
    standbys.read = {}
    ownership.lanes_lost()
    clock[0] += 0.2
    ownership()
    assert claimant.asked[1:] == [([0], "a")]
    assert ownership.delivering == {0}
