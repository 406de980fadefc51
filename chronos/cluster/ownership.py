"""A cluster member's ownership, carried out on its delivery thread between two transactions.

Each round (``rounds.py`` decides it) this:

1. takes back the partitions whose handover committed (``Lane.released``): they are followed
   again, as a standby, from their log's beginning;
2. reads on the claims left undecided (``Claimant.resume``), then makes the round's claims,
   one ``claim_all`` per holder they are taken from (each holder fenced once);
3. turns each won claim into a lane: the standbys' reader reads the partition's log past the
   claim and applies the claim's start cut (``StandbysWorker.hand_in``, waited for across
   rounds, never on one: the other lanes go on meanwhile), the store leads from it
   (``Hosted.lane``), and the delivery loop takes the lane in before its next transaction
   (``TransactionLoop.add_lane``);
4. hands over the lanes the round says (``Lane.release``): the loop's next commit names the
   successor, whose claim follows; a handover the round no longer asks for is withdrawn
   before it commits (its successor may have gone meanwhile).

On the delivery thread because a claim is a transaction of the node's one producer, and only
between two delivery transactions is none open. A won claim whose hand-in does not end in
time is left: its partition is still followed, and a later round retakes it (the log names
this node). A partition whose claim failed or was lost is not claimed again for
``_RETRY_S`` (``ClaimBackoff``: sooner after a log's end was not learned). A fenced loop
loses every lane (``lanes_lost``); its member starts a new producer and the next rounds claim
them back (``delivery.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

import structlog

from chronos.cluster.rounds import Rounds, RoundView
from chronos.group.claims import (
    Claimant,
    ClaimFailed,
    ClaimLog,
    Decision,
    EndUnknown,
    Holding,
)
from chronos.group.lane import Lane
from chronos.group.standbys import HandIn, StandbysWorker
from chronos.group.transactions import TransactionLoop
from chronos.schedule.progress_record import Cut

log = structlog.get_logger(__name__)

#: How long a partition whose claim failed, was lost or whose takeover did not end is left
#: alone before it is claimed again.
_RETRY_S = 1.0
#: The first wait after a claim failed because its log's end was not learned (doubled on
#: each such failure in a row, up to ``_RETRY_S``).
_REREAD_S = 0.2


class ClaimBackoff:
    """When each partition may be claimed again (monotonic seconds).

    A claim that failed, was lost or whose takeover did not end waits ``_RETRY_S``. One
    whose log's end was not learned (``EndUnknown``: nothing fenced, nothing claimed) waits
    ``_REREAD_S``, doubled on each such failure in a row: after a broker's restart the first
    question of a progress log's end failed (``FENCED_LEADER_EPOCH``) and its retry a
    second later was most of a 5.6 s recovery, while a broker still away is not asked five
    times a second for long.
    """

    def __init__(self) -> None:
        self._not_before: dict[int, float] = {}
        self._unread: dict[int, int] = {}

    def waiting(self, now: float) -> frozenset[int]:
        """The partitions not to be claimed at ``now`` (and forgets the others' waits)."""
        self._not_before = {p: at for p, at in self._not_before.items() if at > now}
        return frozenset(self._not_before)

    def failed(self, partition: int, now: float, end_unknown: bool = False) -> None:
        """``partition``'s claim came to nothing at ``now``."""
        if not end_unknown:
            self._unread.pop(partition, None)
            self._not_before[partition] = now + _RETRY_S
            return
        times = self._unread.get(partition, 0)
        self._unread[partition] = times + 1
        self._not_before[partition] = now + min(_RETRY_S, _REREAD_S * 2**times)

    def decided(self, partition: int) -> None:
        """``partition``'s log was read and its claim made: failures in a row start over."""
        self._unread.pop(partition, None)


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
        leaving: whether this member is leaving (``RoundView.leaving``).
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
        leaving: Callable[[], bool] = lambda: False,
    ) -> None:
        self._leaving = leaving
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
        #: Won claims whose partition the standbys' reader is handing in: the decision, the
        #: hand-in and until when (monotonic) it is waited for.
        self._handing: dict[int, tuple[Decision, HandIn, float]] = {}
        #: When each partition may be claimed again.
        self._backoff = ClaimBackoff()
        #: Partitions this member delivered until its loop was fenced, while the standbys'
        #: reader reads their logs again (``lanes_lost``): planned as held by this node.
        self._retaking: set[int] = set()
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
        # A copy first: other threads ask while the delivery thread changes the lanes.
        lanes = list(self._lanes.items())
        return frozenset(p for p, lane in lanes if not lane.released.is_set())

    @property
    def retaking(self) -> frozenset[int]:
        """The partitions this member delivered until its loop was fenced, not claimed back
        yet, while the standbys' reader reads their logs again (``_holdings``): their store
        is complete (its own commits kept it), so the member stands for them meanwhile."""
        return frozenset(self._retaking)

    def busy(self) -> frozenset[int]:
        """The partitions this member's rounds may still act on: its lanes (handed over ones
        until taken back and followed again), its undecided claims and its hand-ins."""
        while True:
            try:
                return (
                    frozenset(self._lanes) | frozenset(self._undecided) | frozenset(self._handing)
                )
            except RuntimeError:  # changed by the delivery thread while copied: again
                continue

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
        self._lead_handed_in(now)
        waiting = self._backoff.waiting(now)
        view = RoundView(
            members=members,
            suspects=self._suspects(),
            delivering=self.delivering,
            standing=self._standing() - waiting,
            holdings=self._holdings(),
            undecided=frozenset(self._undecided) | frozenset(self._handing),
            heard=self._heard(),
            leaving=self._leaving(),
        )
        plan = self._rounds.plan(view, now)
        if plan.claims or plan.handed or plan.resume:
            log.info(
                "round_claims",
                claims=plan.claims,
                handed=plan.handed,
                resume=plan.resume,
                stand_ins=plan.stand_ins,
            )
        for partition in plan.resume:
            if partition not in self._undecided:
                continue  # being handed in
            claim_log, decision = self._undecided.pop(partition)
            decided = self._claimant.resume(claim_log, decision)
            self._decided(partition, claim_log, decided, now)
        for expected, partitions in plan.claims.items():
            self._claim(self._claimant, expected, partitions, now, handed=False)
        for holder, partitions in plan.handed.items():
            self._claim(self._claimant, holder, partitions, now, handed=True)
        self._lead_handed_in(now)
        for partition, lane in list(self._lanes.items()):
            successor = plan.releases.get(partition)
            if successor is None and lane.release_to is not None and not lane.released.is_set():
                # Asked no more (the successor went, or the placement moved back): withdrawn
                # before it commits.
                log.info("handover_withdrawn", partition=partition, successor=lane.release_to)
                lane.release_to = None
            elif successor is not None and lane.release_to != successor:
                log.info("handover_asked", partition=partition, successor=successor)
                lane.release(successor)

    def _holdings(self) -> dict[int, Holding]:
        """What each followed partition's log says of its holder; a partition this member
        delivered until its loop was fenced counts as held by it until the standbys' reader
        read its log again. A fence after a broker's restart (every member's producer
        failed its first abort with ``INVALID_TXN_STATE`` or was fenced by the coordinator's
        timeout) left each member's partitions unclaimed for up to 1.3 s in broker-kill
        runs while that reader read them from their start. The retake's claim reads the log
        to its end itself and makes no claim where another node holds it now (a thawed
        node's lost lanes), so the guess costs at most a read of the log."""
        holdings = self._standbys.holdings()
        self._retaking -= holdings.keys()
        for partition in list(self._retaking):
            holdings[partition] = Holding(self._rounds.node)
        return holdings

    def _take_back_released(self) -> None:
        for partition, lane in list(self._lanes.items()):
            if lane.released.is_set():
                del self._lanes[partition]
                self._follow(partition)

    def _claim(
        self,
        claimant: Claimant,
        expected: str | None,
        partitions: list[int],
        now: float,
        handed: bool,
    ) -> None:
        logs = [self._open_claim_log(p) for p in partitions]
        try:
            decisions = claimant.claim_all(logs, expected, handed=handed)
        except ClaimFailed as exc:
            log.warning("claims_failed", partitions=partitions, holder=expected, error=str(exc))
            for partition, claim_log in zip(partitions, logs, strict=True):
                claim_log.close()
                self._backoff.failed(partition, now, isinstance(exc, EndUnknown))
            return
        except BaseException:
            for claim_log in logs:
                claim_log.close()
            raise
        for partition, claim_log, decision in zip(partitions, logs, decisions, strict=True):
            self._decided(partition, claim_log, decision, now)

    def _decided(self, partition: int, claim_log: ClaimLog, decision: Decision, now: float) -> None:
        self._backoff.decided(partition)
        self._retaking.discard(partition)  # the claim read the log: its word counts now
        if decision.undecided:
            self._undecided[partition] = (claim_log, decision)
            return
        claim_log.close()
        if not decision.won:
            log.info(
                "claim_lost", partition=partition, holder=decision.holder, reason=decision.reason
            )
            self._backoff.failed(partition, now)
            return
        # The standbys' reader reads its log past the claim and applies its start: waited
        # for by the next rounds, not here (the other lanes go on meanwhile).
        hand_in = self._standbys.hand_in(partition, decision.offset, decision.cut)
        self._handing[partition] = (decision, hand_in, now + self._hand_in_timeout_s)

    def _lead_handed_in(self, now: float) -> None:
        """Lead every won partition the standbys' reader handed in; give up those that took
        too long (followed on: a later round retakes them)."""
        loop = self._loop
        for partition, (decision, hand_in, until) in list(self._handing.items()):
            if not hand_in.done.is_set():
                if now < until or not self._standbys.cancel(hand_in):
                    continue
                del self._handing[partition]
                log.warning("takeover_incomplete", partition=partition, offset=decision.offset)
                self._backoff.failed(partition, now)
                continue
            del self._handing[partition]
            claim = decision.claim
            assert claim is not None and loop is not None  # a won decision's, a round's loop
            try:
                lane = self._lead(partition, claim.term, decision.cut)
                loop.add_lane(lane)
            except Exception:
                # Won and not delivered: followed again, a later round retakes it.
                log.exception("takeover_failed", partition=partition, term=claim.term)
                self._follow(partition)
                self._backoff.failed(partition, now)
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
        # Not those being handed over: their logs may name the successor (the rounds decide
        # them once the reader read them again, as before).
        held = [p for p, lane in self._lanes.items() if lane.release_to is None]
        self._lanes.clear()
        for partition in lost:
            self._follow(partition)
        self._retaking.update(held)
        for partition, (_decision, hand_in, _until) in list(self._handing.items()):
            if not self._standbys.cancel(hand_in):
                self._follow(partition)  # it had left the standbys: back to following
        self._handing.clear()
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
