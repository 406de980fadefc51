"""One owned partition's share of a node's delivery transactions: a *lane*.

A replica group delivers one schedule; a cluster node of the second shape
(``docs/design/cluster-v2.md``) delivers every partition it owns through one transactional
producer, each partition's deliveries and progress in the same transaction. What belongs to a
partition is a lane: its schedule and the ledger that writes it, its push frontier and cut, its
progress topic and term, the rate plans and failure verdicts of its messages (a topic's rate is
planned per partition, as each partition's replica group planned it before: an id lives in one
partition). What belongs to the node is the loop that runs the transactions
(``transactions.py``): the producer, its pacing, and the redo of an abort, which redoes every
lane (one transaction, one outcome).

Everything a lane reads before a transaction (how far its frontier moves, the rows that
covers, the rows its rate's look-ahead plans) is here; the loop plans, executes and commits
the lanes' batches together.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from chronos.clock import Clock
from chronos.delivery.attempts import Attempts
from chronos.delivery.deadletter import DeadLetterPolicy
from chronos.delivery.job import DeliveryJob
from chronos.delivery.policies import Policies
from chronos.delivery.rate_plan import RatePlan
from chronos.group.execute import BatchRecords
from chronos.group.placement import ReplicaStore
from chronos.group.plan import AheadRow, BatchPlan, limited_rows, plan_ahead
from chronos.group.verdicts import Verdicts
from chronos.schedule.cancel_gate import CancelGate
from chronos.schedule.floor import RebuildFloor
from chronos.schedule.frontier import Frontier
from chronos.schedule.ledger import Ledger, Move
from chronos.store import keys
from chronos.store.rocks import RocksStore
from chronos.types import EpochMs

#: Most messages the rate's look-ahead reads per transaction: each one it moves costs about
#: 50 µs on the master, so a transaction stays short and other topics go on meanwhile.
AHEAD_ROWS = 1_000
#: Longest a look-ahead waits for the writes it may have seen to end (``Frontier.settled``).
SETTLE_S = 0.05
#: Rows per scan of ``Lane.rows_through``.
_CHUNK = 10_000


@dataclass(frozen=True)
class MasterState:
    """What one term of a master is: passed to its loop by the takeover.

    Parameters:
        term: this master's term.
        on_fenced: called once, from the loop's thread, when it may not deliver any more.
        on_fatal: called once when Kafka refuses chronos' credentials (the node ends).
        floor: the rebuild floor each progress record publishes (moved by the refresh worker).
    """

    term: int
    on_fenced: Callable[[str], None]
    on_fatal: Callable[[str], None]
    floor: RebuildFloor = field(default_factory=RebuildFloor)
    #: The rate plans of the last committed cut (``Cut.paced``): where this term's start.
    paced: Mapping[str, float] = field(default_factory=dict)
    #: How far the last committed cut's master had planned ahead (``Cut.ahead_ms``).
    ahead_ms: EpochMs | None = None


@dataclass
class ReadAhead:
    """What the rate's look-ahead read before a transaction: the rows of limited topics past
    the frontier, in key order, and the offsets of the writes that stored them
    (``Frontier.settled``): the transaction's cut must cover these, or a backup could apply a
    move before it stored the message (``group/follower.py`` applies a cut once its ingest
    covers the cut's offsets)."""

    rows: list[AheadRow]
    covered: dict[int, int]
    next_key: bytes
    through_ms: EpochMs


class Lane:
    """One partition a node delivers: its schedule, frontier, progress topic and term.

    Parameters:
        progress_topic: where its cuts and repeat states go.
        store: its schedule.
        ledger: the schedule's writer (owner of the seek; repeat checks).
        replica: applies the committed progress to the schedule.
        frontier: its push frontier (reset to the seek by the takeover).
        state: its term, callbacks and what the last committed cut passed on.
        policy: when a delivery goes to the dead-letter topic (the node's).
        clock: time source.
        attempts: where failed attempts are kept for the status lookup.
        policies: each target topic's policy, for its rate; None: no rates.
        cancel_gate: the last slot that may be delivered at a given now, told the next slot
            waited for (``node/watermark.py``); None: everything due may go.
        partition: the inner partition it delivers (None: a replica group's one schedule).
    """

    def __init__(
        self,
        *,
        progress_topic: str,
        store: RocksStore,
        ledger: Ledger,
        replica: ReplicaStore,
        frontier: Frontier,
        state: MasterState,
        policy: DeadLetterPolicy,
        clock: Clock,
        attempts: Attempts | None = None,
        policies: Policies | None = None,
        cancel_gate: CancelGate | None = None,
        partition: int | None = None,
    ) -> None:
        self.partition = partition
        self.progress_topic = progress_topic
        self.store = store
        self.ledger = ledger
        self.replica = replica
        self.frontier = frontier
        self.state = state
        self.term = state.term
        self.verdicts = Verdicts(policy, clock, attempts)
        self.rates = None if policies is None else RatePlan(policies, state.paced, state.ahead_ms)
        self._cancel_gate = cancel_gate
        #: The progress topic offset of this term's last committed cut (None before one).
        self.cut_offset: int | None = None
        #: Monotonic time of this lane's last commit: an idle lane publishes its cut once
        #: every ``group.progress_interval_ms`` (0: its first transaction does at once).
        self.last_commit = 0.0
        #: The replica to hand this partition to with the next commit (``release``).
        self.release_to: str | None = None
        #: Set once a commit handed this partition over: the loop leaves it out from then on.
        self.released = threading.Event()
        #: Cuts this lane committed in its term: the next one's ``Cut.seq`` (a node log's).
        self.cuts = 0
        #: ``seq`` of the term's last cut committed to the partition's own log (None: none
        #: yet, so the next cut goes there: its log shows the term at once).
        self.logged: int | None = None
        #: The first slot stored past the frontier as last read (``next_slot``), and whether
        #: it is known: an idle lane of a node delivering many costs no scan per transaction.
        self._next_known = False
        self._next_slot: EpochMs | None = None

    def release(self, successor: str) -> None:
        """Hand this partition to ``successor``: the next transaction delivers what is due,
        commits a cut naming it, and is this lane's last."""
        self.release_to = successor
        self.frontier.notify(0)  # wake the loop's wait for the next due message

    def limit(self, now: EpochMs) -> EpochMs:
        """The last slot this lane may deliver at ``now`` (the cancel gate's, or now)."""
        return now if self._cancel_gate is None else self._cancel_gate.horizon(now)

    def want(self, slot: EpochMs) -> None:
        """This lane waits for ``slot``: the cancel gate is asked to reach it by then."""
        if self._cancel_gate is not None:
            self._cancel_gate.want(slot)

    def active_rates(self) -> RatePlan | None:
        """The rate plans when some topic has a rate now, else None."""
        rates = self.rates
        return rates if rates is not None and rates.active else None

    def target(self, limit: EpochMs, max_records: int) -> EpochMs:
        """How far a transaction may move the frontier: to ``limit``, or short of the slot
        where the due messages pass ``max_records`` (a whole slot at least)."""
        seek = self.ledger.seek_ms
        rows = self.store.scan(
            keys.slot_bound(seek + 1), keys.slot_bound(limit + 1), max_records + 1
        )
        if len(rows) <= max_records:
            return limit
        slot = keys.slot_of(rows[max_records][0])
        return slot - 1 if slot - 1 > seek else slot

    def rows_through(self, upto: EpochMs) -> list[tuple[bytes, bytes]]:
        """Every stored message with a slot in (seek, upto]: all of them, or the cut lies.

        A second scan after ``target``'s on purpose: writes that completed between that one
        and the frontier's move may hold slots in range."""
        rows: list[tuple[bytes, bytes]] = []
        start, stop = keys.slot_bound(self.ledger.seek_ms + 1), keys.slot_bound(upto + 1)
        while True:
            chunk = self.store.scan(start, stop, _CHUNK)
            rows += chunk
            if len(chunk) < _CHUNK:
                return rows
            start = chunk[-1][0] + b"\x00"

    def next_slot(self, upto: EpochMs) -> EpochMs | None:
        """The slot of the first message stored past ``upto`` (None: none), the frontier of
        a transaction that found nothing due: read once, then kept, and lowered by every
        write to this schedule (``quiet``), until this lane's next commit
        (``forget_next``)."""
        stale = self._next_slot is not None and self._next_slot <= upto
        if not self._next_known or stale:
            # Stale: a cancel or an expiry deleted the message it named without a write
            # that places (no notification); this lane was just read through ``upto``.
            first = self.store.first_key_from(keys.slot_bound(upto + 1))
            self._next_slot = None if first is None else keys.slot_of(first)
            self._next_known = True
        return self._next_slot

    def forget_next(self) -> None:
        """A commit wrote to this schedule (next occurrences, deferrals): read again."""
        self._next_known = False

    def quiet(self, limit: EpochMs) -> bool:
        """Whether this lane has nothing to publish by ``limit``, known without a scan: its
        next stored slot lies past ``limit`` and nothing was written since it was read, no
        reschedule waits to be published, and no topic's rate plans ahead. A node that
        delivers many partitions then scans only those a write touched or whose time came
        (three scans per lane per transaction otherwise, its cost growing with the lanes).

        Safe against a write racing it: a write notifies its slot after it is visible, so a
        notification taken here lowers the next slot, and one that comes later is taken by
        the next transaction (which the write's wake starts)."""
        notified = self.frontier.take_notified()
        if not self._next_known:
            return False
        if notified is not None and (self._next_slot is None or notified < self._next_slot):
            self._next_slot = notified
        if self.ledger.has_moves or self.active_rates() is not None:
            return False
        return self._next_slot is None or limit < self._next_slot

    def read_ahead(self, now: EpochMs, limit: EpochMs, lookahead_ms: int) -> ReadAhead | None:
        """Plan the rows past ``limit`` (what this transaction may deliver) up to
        ``lookahead_ms`` ahead, from where the last look-ahead stopped, when some topic has a
        rate (``AHEAD_ROWS`` at most). What is due by ``limit`` is planned as it falls due:
        its earliest time is now, not its slot.

        What stays in place is only remembered, at once. When something must move, the
        transaction publishes the moves: this returns the rows and the offsets that cover
        their adds, or None when the writes it may have seen did not end in time (the next
        transaction reads again)."""
        rates = self.active_rates()
        if rates is None or not lookahead_ms:
            return None
        start = keys.slot_bound(max(self.ledger.seek_ms, limit) + 1)
        if rates.ahead_key is not None and rates.ahead_key > start:
            start = rates.ahead_key
        rows = self.store.scan(start, keys.slot_bound(now + lookahead_ms + 1), AHEAD_ROWS)
        if not rows:
            return None
        # What a successor may take as planned: up to the last row read, not to the look-ahead's
        # end (a message that arrives later before it was not), and short of the last slot
        # when the read stopped inside it.
        last = keys.slot_of(rows[-1][0])
        through = last if len(rows) < AHEAD_ROWS else last - 1
        # Every row read lies past ``limit``, so past what this transaction delivers.
        ahead = ReadAhead(limited_rows(rows, rates), {}, rows[-1][0] + b"\x00", through)
        trial = BatchPlan()
        plan_ahead(ahead.rows, rates, trial, self.verdicts.retry_at)
        if not trial.states:
            rates.read_ahead(ahead.next_key, ahead.through_ms)
            rates.committed([])
            return None
        rates.aborted()  # planned again inside the transaction
        covered = self.frontier.settled(SETTLE_S)
        if covered is None:
            return None
        ahead.covered = covered
        return ahead

    def skipped_ahead(self, moves: Mapping[str, Move]) -> set[str]:
        """Ids the look-ahead leaves alone: moved by a reschedule or deferred to a retry."""
        return set(moves) | set(self.verdicts.retry_at)


@dataclass
class LaneBatch:
    """One lane's share of one transaction: what its frontier's move covers, and, once
    planned and published, its plan and records.

    ``upto``/``covered`` are the cut (F, O); ``moves`` the reschedules the cut covers;
    ``releasing`` the successor this commit names (read once before the transaction);
    ``ahead`` what the rate's look-ahead read; ``rates`` the lane's rate plans when some
    topic had a rate as the batch was read (kept for the whole transaction: a policy changed
    meanwhile must not leave a committed plan unsettled)."""

    lane: Lane
    upto: EpochMs
    covered: dict[int, int]
    moves: Mapping[str, Move]
    jobs: list[DeliveryJob]
    releasing: str | None
    ahead: ReadAhead | None
    rates: RatePlan | None = None
    plan: BatchPlan = field(default_factory=BatchPlan)
    records: BatchRecords | None = None
    #: Its cut went to the partition's own log (always without a node log), not the node's.
    own_log: bool = True
