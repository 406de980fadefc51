"""Claims: who may deliver a partition is decided in its progress log, by a compare-and-set.

A cluster node of the second shape (``docs/design/cluster-v2.md``) delivers every partition
it owns through one transactional producer of its own, so a new owner can no longer fence
the old one by sharing its transactional id. Instead the partition's progress log names its
holder, and a node that wants the partition:

1. reads the log: its highest term t, the offset X of its last record, its holder N;
2. makes sure N can commit nothing more: N is the claimant itself (a retake), or N handed the
   partition to it (``released_to``), or the claimant fences N's producer first
   (``init_transactions`` on N's transactional id; a transaction N had in ``PrepareCommit``
   completes as a commit before that returns, so its records precede the claim);
3. commits the claim ``(t + 1, itself, after X)`` alone in a transaction of its own producer;
4. reads the log up to the claim's own offset (not "to the end": at ``read_committed`` the end
   is the last stable offset, which a competing claim in a still-open transaction at a lower
   offset holds below one's own) and **wins** when no record of a term above t came first;
5. a winner delivers from the last cut before its claim (``Decision.cut``), in the claim's
   term (every cut it writes carries that term). A cluster node's cuts are mostly in its node
   log (``node_log.py``), not in the partition's: the claimant reads the holder's there
   after the fence, and its claim carries the later of the two (``Claim.cut``), which is
   where a winner starts and what a later claimant finds when the winner wrote no cut.

Two claims of one term cannot both win: the log orders them, and each is decided only by
the records before it. ``Ownership`` applies that rule to any reading of the log, so every
reader (claimant, follower, status) names the same holder. Only winners write cuts, so a
follower applies cuts without looking at claims (``follower.ProgressLog`` skips them).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

import structlog
from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from chronos.errors import DecodeError
from chronos.kafka.batches import AssignedConsumer, read_ready
from chronos.kafka.errors import TransactionAborted
from chronos.kafka.librdkafka import ClientErrors
from chronos.kafka.publisher import TransactionalPublisher
from chronos.kafka.start import FROM_START
from chronos.schedule.progress_record import (
    Claim,
    Cut,
    RepeatState,
    decode,
    encode_claim,
    later,
)
from chronos.settings import KafkaValue

log = structlog.get_logger(__name__)

_BATCH = 1000
_POLL_S = 0.05
#: Most fences of one round in flight at once.
_FENCE_WORKERS = 16


@dataclass(frozen=True)
class Holding:
    """What a partition's progress log says of its holder, as last read (what a cluster
    member's round decides from: ``cluster/rounds.py``).

    Parameters:
        node: the holder (the winner of the last claim, or the node of the last cut of a
            log without claims); None when the log names nobody.
        released_to: the node the holder handed the partition to with its last cut.
    """

    node: str | None
    released_to: str | None = None


class Ownership:
    """Who holds a partition, as its progress log says: fed every record in log order.

    The holder of a term is the winner of its claim, or, for a log written by today's
    per-partition replica groups (no claims), the node of its last cut. A claim wins when its
    term is above every term of the records before it, losing claims included (their
    claimants read a term no higher than the claim's ``after`` allowed them to, so a
    correctly built claim has nothing above its term before ``after``; whatever lies between
    is a competitor's).
    """

    def __init__(self) -> None:
        #: The highest term of any record read (a losing claim's included), 0 for none.
        self.max_term = 0
        #: The holder's term, its node (None before any), and how it got there.
        self.term = 0
        self.node: str | None = None
        #: True when the holder won a claim; False when a cut of a log without claims names it
        #: (a per-partition replica group's: fenced by that group's transactional id).
        self.claimed = False
        #: The node the holder handed the partition to with its last cut, if it did.
        self.released_to: str | None = None
        #: The offset of the last record read, -1 before any.
        self.last_offset = -1
        #: The last cut read, and the offset of the holder's winning claim.
        self.cut: Cut | None = None
        self.claim_offset: int | None = None
        #: The last cut before the holder's winning claim: where the holder delivers from.
        self.cut_at_claim: Cut | None = None

    def take(self, offset: int, record: Cut | RepeatState | Claim) -> None:
        """One record of the log, in order."""
        self.last_offset = offset
        if isinstance(record, Claim):
            if record.term > self.max_term:
                self.term, self.node, self.claimed = record.term, record.node, True
                self.released_to = None
                self.claim_offset = offset
                # Where the winner starts: a cut of its predecessor's node log, maybe.
                self.cut = later(self.cut, record.cut)
                self.cut_at_claim = self.cut
            self.max_term = max(self.max_term, record.term)
        elif isinstance(record, Cut):
            self.cut = record
            if record.term > self.term or (record.term == self.term and not self.claimed):
                # A log without claims (or before its first): the cut's master holds it.
                self.term, self.node, self.claimed = record.term, record.node, False
                self.claim_offset = None
            if record.term == self.term:
                self.released_to = record.released_to
            self.max_term = max(self.max_term, record.term)

    @property
    def holding(self) -> Holding:
        """The holder as read so far."""
        return Holding(self.node, self.released_to)

    def fences_needed(self, claimant: str) -> list[str]:
        """Whom ``claimant`` must fence before its claim, as node ids (``""``: the partition's
        shared transactional id of the last release, named by the caller).

        When a claim made the holder: nobody if that is the claimant (a retake) or the holder
        handed the partition to it, else the holder's node. When no claim did (an empty log,
        or a log of the last release's replica group, whose master fences by the shared id):
        the shared id always, whatever the claimant's name (a node of the new shape is often
        named as the old master was, which says nothing about who holds the shared
        producer), and the named node's own id too (a cut whose claim compaction or a
        ``delete`` policy removed)."""
        if not self.claimed:
            return [""] if self.node is None or self.node == claimant else [self.node, ""]
        if self.node == claimant or self.released_to == claimant:
            return []
        return [self.node] if self.node is not None else []


@dataclass(frozen=True)
class Decision:
    """How a claim ended.

    Parameters:
        won: the claimant may deliver the partition from ``cut`` on, in ``claim.term``.
        claim: the claim it committed (None when it could not commit one).
        offset: the claim's offset in the log (-1 when none was committed).
        cut: the last cut before the claim: where a winner delivers from (None: none yet).
        holder: the holder the log names after the claim was read (the winner, when lost).
        reason: why it lost or did not decide, for the log line.
        undecided: the claim is in the log but could not be read back in time (an earlier
            transaction held the log's stable end): it may yet win; ``Claimant.resume``
            reads on and decides it. Neither delivering nor claiming again before that.
    """

    won: bool
    claim: Claim | None
    offset: int
    cut: Cut | None
    holder: str | None
    reason: str = ""
    undecided: bool = False


#: Builds a consumer: (group id, error handler, options) -> consumer (``KafkaClients.consumer``).
OpenClaimConsumer = Callable[[str, ClientErrors, Mapping[str, KafkaValue]], AssignedConsumer]


class NodeCutSource(Protocol):
    """Where a claimant finds a holder's last cut of a partition in its node log
    (``node_log.NodeLogCuts``)."""

    def last_cut(self, holder: str, partition: int, timeout_s: float) -> Cut | None: ...


class ClaimLog:
    """One partition's progress log read from its start at ``read_committed``, into an
    ``Ownership``; a claimant keeps it between claims and reads on from where it stopped.

    Parameters:
        topic, partition: the progress log.
        reader_group: its consumer's group id (assigned, never joined).
        open_consumer: builds its consumer.
        errors: the consumer's error handler.
        inner: the inner partition whose log it is (a node log keys its cuts by it); None:
            no node log is read for it.
    """

    def __init__(
        self,
        topic: str,
        partition: int,
        reader_group: str,
        open_consumer: OpenClaimConsumer,
        errors: ClientErrors,
        inner: int | None = None,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.inner = inner
        self._errors = errors
        options: dict[str, KafkaValue] = {
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
        self._consumer = open_consumer(reader_group, errors, options)
        self._consumer.assign([TopicPartition(topic, partition, FROM_START)])
        self.ownership = Ownership()

    def read_until(self, done: Callable[[], bool], timeout_s: float) -> bool:
        """Read on until ``done()`` holds; False when ``timeout_s`` passed first."""
        deadline = time.monotonic() + timeout_s
        while not done():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            for message in read_ready(self._consumer, _BATCH, min(_POLL_S, left)):
                self._take(message)
        return True

    def read_to(self, end: int, timeout_s: float) -> bool:
        """Read everything before offset ``end`` (the log's last stable offset)."""
        return self.read_until(lambda: self.position() >= end, timeout_s)

    def position(self) -> int:
        """The next offset this reader fetches: past control records too, which a record's
        own offset plus one is not (a transaction's end marker follows its last record)."""
        placed = self._consumer.position([TopicPartition(self.topic, self.partition)])
        offset = placed[0].offset if placed else -1
        return max(offset, self.ownership.last_offset + 1)

    def close(self) -> None:
        self._consumer.close()

    def _take(self, message: Message) -> None:
        error = message.error()
        if error is not None:
            if error.code() != KafkaError._PARTITION_EOF:
                self._errors(error)
            return
        offset = message.offset() or 0
        if offset <= self.ownership.last_offset:
            return  # read again (a consumer reset): the log's order is what decides
        try:
            record = decode(message.key(), message.value())
        except DecodeError as exc:
            log.error("progress_record_undecodable", offset=offset, reason=str(exc))
            return
        self.ownership.take(offset, record)


@dataclass(frozen=True)
class _Bid:
    """A claim a round means to make, before its fences: the log, whom it names, what to
    fence, and what the claim will say."""

    claim_log: ClaimLog
    holder: str | None
    fenced: tuple[str, ...]
    max_term: int
    after: int
    #: A claim made the holder (else a cut of the last release's replica group names it,
    #: which wrote no node log).
    claimed: bool


class ClaimFailed(Exception):
    """The claim could not be committed (a fence or the claim's transaction failed)."""


class EndUnknown(ClaimFailed):
    """Where a claim's log ends was not learned: nothing was fenced or claimed. A broker just
    back answered a progress log's end with ``FENCED_LEADER_EPOCH`` once (its client is made
    anew for the next question, ``kafka/admin.RenewedAdmin``), and the next question a moment
    later was answered."""


#: Where a log of ``topic`` and ``partition`` may be read up to now (its last stable offset).
StableEnd = Callable[[str, int], int]
#: A transactional publisher for a transactional id (``KafkaClients.transactional``).
OpenTransactional = Callable[[str], TransactionalPublisher]


class Claimant:
    """Claims partitions for one node, through the node's own transactional producer.

    Parameters:
        node: this node's id (what its claims and cuts name).
        publisher: this node's transactional producer (``init`` done).
        open_transactional: builds a throw-away producer to fence another node's id.
        transactional_id: a node's transactional id, by node id.
        shared_id: the transactional id of a partition's replica group of the last release
            (fenced before the first claim of a log that has none).
        stable_end: the log's last stable offset now.
        timeout_s: longest wait of each step (a fence, the read-back).
        node_cuts: the holders' node logs (a cluster node's); None: cuts are in each
            partition's log only.
    """

    def __init__(
        self,
        *,
        node: str,
        publisher: TransactionalPublisher,
        open_transactional: OpenTransactional,
        transactional_id: Callable[[str], str],
        shared_id: Callable[[str, int], str],
        stable_end: StableEnd,
        timeout_s: float,
        node_cuts: NodeCutSource | None = None,
    ) -> None:
        self.node = node
        self._node_cuts = node_cuts
        self._publisher = publisher
        self._open_transactional = open_transactional
        self._transactional_id = transactional_id
        self._shared_id = shared_id
        self._stable_end = stable_end
        self._timeout_s = timeout_s
        #: Transactional ids fenced so far, in order (a false suspicion shows as an extra one).
        self.fenced: list[str] = []

    def claim(self, claim_log: ClaimLog, expected: str | None) -> Decision:
        """Claim the partition of ``claim_log``; ClaimFailed when no claim was committed,
        ``Fenced`` when this node's own producer was fenced meanwhile.

        ``expected``: the holder the caller means to take the partition from: a watcher's
        suspect, or this node itself for a retake (after its producer was fenced). When the
        log names another (somebody claimed it since), nothing is fenced or claimed: a
        watcher whose view is stale, or a node that lost its partition to a false
        suspicion, must not fence a live owner. None only for a placement move, which takes
        the partition from whoever holds it.

        The publisher must have no transaction open: the caller runs claims on its delivery
        thread, between two delivery transactions (the claim is alone in its own)."""
        return self.claim_all([claim_log], expected)[0]

    def claim_all(
        self, claim_logs: Sequence[ClaimLog], expected: str | None, handed: bool = False
    ) -> list[Decision]:
        """``claim`` for several partitions at once, one decision per log in order: a round
        of a watcher that suspects a node holding many partitions.

        ``handed``: claims of partitions ``expected`` handed to this node. One whose log no
        longer says so when read (the holder took it back since: a stale view) is not made:
        it would fence a live holder.

        Each id to fence is fenced once for the round, not once per partition (16 serial
        fences of 40-280 ms would break a 3 s failover), and every claim goes in one
        transaction; each is then read back and decided alone. Every fence ends before the
        commit, so each claim still follows the fence its log needs; a claim whose fence
        failed is not made (its decision says why), the others are. ClaimFailed when a log
        cannot be read or the claims' transaction fails: nothing of the round was claimed
        then, or its outcome is unknown (the next round reads the logs, which name this
        node where a claim of it won); and for a round of one whose fence failed (``claim``)."""
        began = time.monotonic()
        decisions: list[Decision | None] = []
        bids: list[_Bid] = []
        fences: list[str] = []
        for claim_log in claim_logs:
            ownership = self._read(claim_log)
            holder = ownership.node
            if expected is not None and holder not in (expected, self.node, None):
                reason = f"held by {holder}, not {expected}"
                decisions.append(Decision(False, None, -1, ownership.cut, holder, reason))
                continue
            if handed and ownership.released_to != self.node:
                reason = f"{holder} no longer hands it to {self.node}"
                decisions.append(Decision(False, None, -1, ownership.cut, holder, reason))
                continue
            shared = self._shared_id(claim_log.topic, claim_log.partition)
            fenced = tuple(
                self._transactional_id(node) if node else shared
                for node in ownership.fences_needed(self.node)
            )
            fences += [f for f in fenced if f not in fences]
            bids.append(
                _Bid(
                    claim_log,
                    holder,
                    fenced,
                    ownership.max_term,
                    ownership.last_offset,
                    ownership.claimed,
                )
            )
            decisions.append(None)
        read_at = time.monotonic()
        failed = self._fence_all(fences)
        if len(claim_logs) == 1 and failed:
            raise ClaimFailed(next(iter(failed.values())))
        # A claim whose fence failed is not made; the others go on (a round is not lost
        # whole to one holder that could not be fenced in time). Nor is one whose holder's
        # node log could not be read: it would start from an older cut (duplicates).
        claims: list[tuple[ClaimLog, Claim]] = []
        why: list[str | None] = []
        for bid in bids:
            refused: str | None = next((failed[f] for f in bid.fenced if f in failed), None)
            start: Cut | None = None
            if refused is None:
                try:
                    start = self._start(bid)
                except (TimeoutError, KafkaException) as exc:
                    refused = f"the holder's node log was not read: {exc}"
            why.append(refused)
            if refused is None:
                claim = Claim(
                    term=bid.max_term + 1,
                    node=self.node,
                    after=bid.after,
                    nonce=uuid.uuid4().hex[:12],
                    fenced=bid.fenced,
                    cut=start,
                )
                claims.append((bid.claim_log, claim))
        if len(claim_logs) == 1 and why and why[0] is not None:
            raise ClaimFailed(why[0])
        started_at = time.monotonic()
        offsets = iter(self._commit(claims))
        committed_at = time.monotonic()
        made = iter(claims)
        slots = [n for n, decision in enumerate(decisions) if decision is None]
        for n, bid, refused in zip(slots, bids, why, strict=True):
            if refused is not None:
                cut = bid.claim_log.ownership.cut
                decisions[n] = Decision(False, None, -1, cut, bid.holder, refused)
                continue
            claim_log, claim = next(made)
            decision = Decision(False, claim, next(offsets), None, bid.holder)
            decisions[n] = self.resume(claim_log, decision)
        log.info(
            "claims_round",
            claims=len(claims),
            fenced=fences,
            # Where a round's time goes (ms): the logs read, fences and start cuts, the
            # claims' transaction, their read-back.
            phases_ms={
                "read": round((read_at - began) * 1000),
                "fence_and_start": round((started_at - read_at) * 1000),
                "commit": round((committed_at - started_at) * 1000),
                "decide": round((time.monotonic() - committed_at) * 1000),
            },
        )
        return [d for d in decisions if d is not None]

    def _start(self, bid: _Bid) -> Cut | None:
        """Where the claimant delivers from if it wins: the later of the log's last cut and
        the holder's last in its node log, read now that it can commit nothing more."""
        start = bid.claim_log.ownership.cut
        inner = bid.claim_log.inner
        if self._node_cuts is None or bid.holder is None or not bid.claimed:
            return start
        if inner is None:
            # Starting from the partition's log alone would deliver again what the holder's
            # node log says it delivered.
            raise ValueError(f"{bid.claim_log.topic}: a node log is read by inner partition")
        return later(start, self._node_cuts.last_cut(bid.holder, inner, self._timeout_s))

    def _read(self, claim_log: ClaimLog) -> Ownership:
        """Read ``claim_log`` to its last stable offset now: who holds it."""
        try:
            end = self._stable_end(claim_log.topic, claim_log.partition)
        except Exception as exc:
            raise EndUnknown(f"where {claim_log.topic} ends is unknown: {exc}") from exc
        if not claim_log.read_to(end, self._timeout_s):
            raise ClaimFailed(f"{claim_log.topic} was not read to {end} in {self._timeout_s} s")
        return claim_log.ownership

    def resume(self, claim_log: ClaimLog, decision: Decision) -> Decision:
        """Decide a committed claim: read the log on past its offset (an undecided one:
        again). It won when the log names this node the holder through a claim once read
        past it: this one, or an earlier undecided one of this node that a retry's claim
        lost to (both were committed by this node with nobody's claim after them)."""
        claim, offset = decision.claim, decision.offset
        if claim is None:
            return decision
        ownership = claim_log.ownership
        if not claim_log.read_until(lambda: ownership.last_offset >= offset, self._timeout_s):
            reason = "undecided: not read back"
            return Decision(False, claim, offset, None, ownership.node, reason, undecided=True)
        # A read past the claim may name a later winner: it fenced this node before its
        # claim, so this node may not deliver either way.
        won = ownership.claimed and ownership.node == self.node
        holder = ownership.node
        cut = ownership.cut_at_claim if won else ownership.cut
        log.info(
            "claim_decided",
            topic=claim_log.topic,
            term=claim.term,
            won=won,
            holder=holder,
            offset=offset,
            fenced=list(claim.fenced),
        )
        return Decision(won, claim, offset, cut, holder)

    def _fence_all(self, transactional_ids: list[str]) -> dict[str, str]:
        """Fence every id at once (a new cluster's first round fences each partition's id of
        the last release: one after the other, 64 took seconds); why each that failed did."""
        failed: dict[str, str] = {}
        if len(transactional_ids) <= 1:
            for transactional_id in transactional_ids:
                try:
                    self.fence(transactional_id)
                except ClaimFailed as exc:
                    failed[transactional_id] = str(exc)
            return failed
        workers = min(_FENCE_WORKERS, len(transactional_ids))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="fence") as pool:
            done = {tid: pool.submit(self._fence, tid) for tid in transactional_ids}
        for transactional_id, future in done.items():  # recorded in the round's order
            error = future.exception()
            if isinstance(error, ClaimFailed):
                failed[transactional_id] = str(error)
            elif error is not None:
                raise error
            else:
                self.fenced.append(transactional_id)
        return failed

    def fence(self, transactional_id: str) -> None:
        """Make the producer of ``transactional_id`` unable to commit: ``init_transactions``
        on a throw-away producer, which aborts an open transaction of it (or lets one in
        ``PrepareCommit`` complete) before it returns."""
        self._fence(transactional_id)
        self.fenced.append(transactional_id)

    def _fence(self, transactional_id: str) -> None:
        """``fence`` without recording it (``_fence_all`` records a round's in its order)."""
        producer = self._open_transactional(transactional_id)
        try:
            producer.init(self._timeout_s)
        except Exception as exc:
            raise ClaimFailed(f"could not fence {transactional_id}: {exc}") from exc
        finally:
            producer.close()

    def _commit(self, claims: Sequence[tuple[ClaimLog, Claim]]) -> list[int]:
        """Commit ``claims`` alone in one transaction; their offsets in their logs, in order."""
        if not claims:
            return []
        placed: dict[int, int] = {}
        failed: list[KafkaError] = []

        def on_done(n: int, error: KafkaError | None, message: Any) -> None:
            if error is not None:
                failed.append(error)
            else:
                placed[n] = int(message.offset())

        publisher = self._publisher
        try:
            publisher.begin()
            for n, (claim_log, claim) in enumerate(claims):
                key, value = encode_claim(claim)
                topic, partition = claim_log.topic, claim_log.partition
                publisher.publish(topic, key, value, [], partial(on_done, n), partition)
            publisher.flush(self._timeout_s)
            if failed or len(placed) < len(claims):
                publisher.abort()
                written = failed[0] if failed else "no answer"
                raise ClaimFailed(f"the claim was not written: {written}")
            publisher.commit()
        except TransactionAborted as exc:
            raise ClaimFailed(f"the claim's transaction was aborted: {exc}") from exc
        except KafkaException as exc:
            # Its outcome may be unknown (a commit that failed after Kafka took it): the
            # next claim reads the log, which names this node if it won. Nothing may stay
            # open: the next transaction (a claim, a delivery) could not begin.
            try:
                publisher.abort()
            except (KafkaException, TransactionAborted):
                pass
            raise ClaimFailed(f"the claim's transaction failed: {exc}") from exc
        return [placed[n] for n in range(len(claims))]
