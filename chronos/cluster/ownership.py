"""A cluster member's ownership, carried out on its delivery thread between two transactions.

Each round (``rounds.py`` decides it) this:

1. takes back the partitions whose handover committed (``Lane.released``): they are followed
   again, as a standby, from their log's beginning;
2. reads on the claims left undecided (``Claimant.resume``), then makes the round's claims,
   one ``claim_all`` per holder they are taken from (each holder fenced once);
3. turns each won claim into a lane: the standbys' reader reads the partition's log past the
   claim and applies the claim's start cut (``StandbysWorker.hand_in``), the store leads from
   it (``Hosted.lane``), and the delivery loop takes the lane in before its next
   transaction (``TransactionLoop.add_lane``);
4. hands over the lanes the round says (``Lane.release``): the loop's next commit names the
   successor, whose claim follows.

On the delivery thread because a claim is a transaction of the node's one producer, and only
between two delivery transactions is none open. A won claim whose hand-in does not end in
time is left: its partition is still followed, and the next round retakes it (the log names
this node). A fenced loop loses every lane (``lanes_lost``); its member starts a new producer
and the next rounds claim them back (``delivery.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

import structlog

from chronos.cluster.rounds import Rounds, RoundView
from chronos.group.claims import Claimant, ClaimFailed, ClaimLog, Decision
from chronos.group.lane import Lane
from chronos.group.standbys import HandIn, StandbysWorker
from chronos.group.transactions import TransactionLoop
from chronos.schedule.progress_record import Cut

log = structlog.get_logger(__name__)

#: Partition, term and start cut -> the lane that delivers it (``Hosted.lane``, bound).
Lead = Callable[[int, int, Cut | None], Lane]
#: Follows a partition again as a standby (``StandbysWorker.add`` with ``Hosted.follower``).
Follow = Callable[[int], None]
#: A reader of a partition's progress log for one claim (``ClaimLog``).
OpenClaimLog = Callable[[int], ClaimLog]


class OwnershipRound:
    """The ``between`` of a member's delivery loop: one round at most every ``interval_s``.

    Parameters:
        rounds: decides each round.
        members: the member list (None before the first: no round runs).
        suspects: the peers the watch suspects now.
        standing: the hosted partitions whose store is complete (the only ones claimed).
        standbys: the reader of every followed partition's log.
        open_claim_log: a reader of a partition's log for a claim.
        lead: makes a won partition's lane.
        follow: follows a partition again.
        hand_in_timeout_s: longest wait for the standbys' reader to hand a won partition in.
        interval_s: fewest seconds between two rounds (the loop calls between before every
            transaction).
        clock: monotonic seconds.
        heard: the peers whose heartbeats arrive now.
    """

    def __init__(
        self,
        *,
        rounds: Rounds,
        members: Callable[[], frozenset[str] | None],
        suspects: Callable[[], frozenset[str]],
        standing: Callable[[], frozenset[int]],
        standbys: StandbysWorker,
        open_claim_log: OpenClaimLog,
        lead: Lead,
        follow: Follow,
        hand_in_timeout_s: float,
        interval_s: float,
        clock: Callable[[], float] = time.monotonic,
        heard: Callable[[], frozenset[str]] = frozenset,
    ) -> None:
        self._heard = heard
        self._rounds = rounds
        self._members = members
        self._suspects = suspects
        self._standing = standing
        self._standbys = standbys
        self._open_claim_log = open_claim_log
        self._lead = lead
        self._follow = follow
        self._hand_in_timeout_s = hand_in_timeout_s
        self._interval_s = interval_s
        self._clock = clock
        self._loop: TransactionLoop | None = None
        self._claimant: Claimant | None = None
        #: The lanes this member delivers, by partition (handed over ones until taken back).
        self._lanes: dict[int, Lane] = {}
        #: Claims committed and not decided yet: their log reader and decision so far.
        self._undecided: dict[int, tuple[ClaimLog, Decision]] = {}
        self._last = -float("inf")
        #: Rounds run (tests and metrics).
        self.rounds = 0

    def attach(self, loop: TransactionLoop, claimant: Claimant) -> None:
        """The delivery loop whose ``between`` this is, and the claimant of its producer."""
        self._loop, self._claimant = loop, claimant

    @property
    def claimant(self) -> Claimant | None:
        """The claimant of the running loop's producer (None before one)."""
        return self._claimant

    @property
    def delivering(self) -> frozenset[int]:
        """The partitions this member delivers (a handover not committed yet included)."""
        return frozenset(p for p, lane in self._lanes.items() if not lane.released.is_set())

    def __call__(self) -> None:
        now = self._clock()
        if now - self._last < self._interval_s:
            return
        members = self._members()
        if members is None or self._loop is None or self._claimant is None:
            return
        self._last = now
        self.rounds += 1
        self._take_back_released()
        view = RoundView(
            members=members,
            suspects=self._suspects(),
            delivering=self.delivering,
            standing=self._standing(),
            holdings=self._standbys.holdings(),
            undecided=frozenset(self._undecided),
            heard=self._heard(),
        )
        plan = self._rounds.plan(view, now)
        if plan.claims or plan.resume:
            log.info("round_claims", claims=plan.claims, resume=plan.resume)
        won: list[tuple[int, Decision]] = []
        for partition in plan.resume:
            claim_log, decision = self._undecided.pop(partition)
            decided = self._claimant.resume(claim_log, decision)
            won += self._decided(partition, claim_log, decided)
        for expected, partitions in plan.claims.items():
            won += self._claim(self._claimant, expected, partitions)
        if won:
            self._take_over(won)
        for partition, successor in plan.releases.items():
            lane = self._lanes[partition]
            if lane.release_to != successor:
                log.info("handover_asked", partition=partition, successor=successor)
                lane.release(successor)

    def _take_back_released(self) -> None:
        for partition, lane in list(self._lanes.items()):
            if lane.released.is_set():
                del self._lanes[partition]
                self._follow(partition)

    def _claim(
        self, claimant: Claimant, expected: str | None, partitions: list[int]
    ) -> list[tuple[int, Decision]]:
        logs = [self._open_claim_log(p) for p in partitions]
        try:
            decisions = claimant.claim_all(logs, expected)
        except ClaimFailed as exc:
            log.warning("claims_failed", partitions=partitions, holder=expected, error=str(exc))
            for claim_log in logs:
                claim_log.close()
            return []
        won: list[tuple[int, Decision]] = []
        for partition, claim_log, decision in zip(partitions, logs, decisions, strict=True):
            won += self._decided(partition, claim_log, decision)
        return won

    def _decided(
        self, partition: int, claim_log: ClaimLog, decision: Decision
    ) -> list[tuple[int, Decision]]:
        if decision.undecided:
            self._undecided[partition] = (claim_log, decision)
            return []
        claim_log.close()
        if not decision.won:
            log.info(
                "claim_lost", partition=partition, holder=decision.holder, reason=decision.reason
            )
            return []
        return [(partition, decision)]

    def _take_over(self, won: list[tuple[int, Decision]]) -> None:
        """Every won partition handed in by the standbys' reader at once, then led."""
        asked: list[tuple[int, Decision, HandIn]] = [
            (p, decision, self._standbys.hand_in(p, decision.offset, decision.cut))
            for p, decision in won
        ]
        deadline = self._clock() + self._hand_in_timeout_s
        loop = self._loop
        assert loop is not None
        for partition, decision, hand_in in asked:
            if not hand_in.done.wait(max(0.0, deadline - self._clock())):
                if self._standbys.cancel(hand_in):
                    log.warning("takeover_incomplete", partition=partition, offset=decision.offset)
                    continue
            claim = decision.claim
            assert claim is not None  # a won decision's
            try:
                lane = self._lead(partition, claim.term, decision.cut)
                loop.add_lane(lane)
            except Exception:
                # Won and not delivered: followed again, the next round retakes it.
                log.exception("takeover_failed", partition=partition, term=claim.term)
                self._follow(partition)
                continue
            self._lanes[partition] = lane
            log.info(
                "partition_delivering",
                partition=partition,
                term=claim.term,
                seek_ms=lane.replica.seek_ms,
                followed=hand_in.followed,
            )

    def lanes_lost(self) -> list[int]:
        """The delivery loop was fenced: every partition it delivered is followed again
        (its store undoes the moves no commit carries), and the claims left undecided are
        dropped (the next rounds read the logs again). Returns those partitions."""
        lost = sorted(self._lanes)
        self._lanes.clear()
        for partition in lost:
            self._follow(partition)
        self.close()
        return lost

    def close(self) -> None:
        """Close the readers of undecided claims."""
        for claim_log, _decision in self._undecided.values():
            claim_log.close()
        self._undecided.clear()

    def lanes(self) -> Mapping[int, Lane]:
        """The lanes this member delivers, by partition (a copy)."""
        return dict(self._lanes)
