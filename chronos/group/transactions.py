"""The master's delivery loop: what is due, and the progress that covers it, in one transaction.

Each transaction moves the push frontier to F (at most ``group.transaction_max_records`` due
messages ahead), takes the frontier's cut O, and publishes every message with a slot in
(previous F, F], the dead letters among them, and the progress record (term, F, O, the next
occurrences of the repeats it delivered). Kafka commits all of them or none; only then does
the local store move its seek (a cache of the committed progress). Why one thread: a
transaction is one producer's, its records must all be sent before its commit, and a
``read_committed`` consumer sees nothing of it until then, so overlapping transactions would
buy little and complicate the cut (see ``chronos/group/__init__.py``).

A transaction is three steps, each its own module: **plan** (``plan.py``: each due message
sent, deferred to its next attempt, held back by its topic's rate, followed by its next
occurrence), **execute** (``execute.py``: the plan's records and Kafka's answers) and
**commit** (``commit.py``: an abort's failures judged, or a commit's outcomes recorded). What
the master remembers of failures between transactions is ``verdicts.py``. This loop decides
when a transaction runs and what it covers.

What goes to the dead-letter topic is the shared policy's call (``delivery/deadletter.py``), as
for a node alone. A record refused at once is dead-lettered in the same transaction; one refused
in its acknowledgement aborts the transaction, and the redo (at once) dead-letters it, or, when
its topic's retry policy says to try again later, *defers* it: the redo moves it to the slot of
its next attempt, as a repeat's next occurrence is moved (a progress state), so one refusing
topic never holds back the others, nor a takeover forgets it. A topic chronos may not write
shows inside a transaction only as purged records; Kafka is then asked which of their topics
it refuses (``kafka.admin.unwritable_topics``). An outage aborts and retries the same range
after a backoff. A fenced producer (another master's ``init``, or Kafka aborting a transaction
left open past ``transaction_timeout_ms``) ends this loop: the node turns into a backup
(``replica.py``). An authorization failure ends the node.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import structlog
from confluent_kafka import KafkaError, KafkaException

from chronos.clock import Clock
from chronos.delivery.attempts import Attempts
from chronos.delivery.deadletter import UNKNOWN_TOPIC_CONFIRM_S, DeadLetterPolicy
from chronos.delivery.job import DeliveryJob, jobs_for
from chronos.delivery.policies import Policies
from chronos.delivery.rate_plan import RatePlan
from chronos.group.commit import judge_abort, observe_paced, outcomes
from chronos.group.execute import BatchRecords
from chronos.group.placement import ReplicaStore
from chronos.group.plan import (
    AheadRow,
    BatchPlan,
    TopicNotYet,
    in_due_order,
    limited_rows,
    plan_ahead,
    plan_batch,
)
from chronos.group.spec import GroupSpec
from chronos.group.verdicts import Verdicts
from chronos.kafka.errors import Fenced, NotAuthorized, TransactionAborted, describe
from chronos.kafka.publisher import TransactionalPublisher
from chronos.lifecycle import LoopWorker
from chronos.metrics import Metrics
from chronos.schedule.floor import RebuildFloor
from chronos.schedule.frontier import Frontier
from chronos.schedule.ledger import Ledger, Move
from chronos.schedule.progress_record import Cut, RepeatState
from chronos.settings import DeliverySettings
from chronos.store import keys
from chronos.store.rocks import RocksStore
from chronos.types import EpochMs

log = structlog.get_logger(__name__)

#: Longest sleep while idle, so the loop notices a stop or a clock jump.
_MAX_WAIT_S = 1.0
#: How soon a loop held back by the cancel gate looks again.
_GATE_RECHECK_S = 0.01
#: Most messages the rate's look-ahead reads per transaction: each one it moves costs about
#: 50 µs on the master, so a transaction stays short and other topics go on meanwhile.
_AHEAD_ROWS = 1_000
#: Longest a look-ahead waits for the writes it may have seen to end (``Frontier.settled``).
_SETTLE_S = 0.05


@dataclass
class _ReadAhead:
    """What the rate's look-ahead read before a transaction: the rows of limited topics past
    the frontier, in key order, and the offsets of the writes that stored them
    (``Frontier.settled``): the
    transaction's cut must cover these, or a backup could apply a move before it stored the
    message (``group/follower.py`` applies a cut once its ingest covers the cut's offsets)."""

    rows: list[AheadRow]
    covered: dict[int, int]
    next_key: bytes
    through_ms: EpochMs


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


class TransactionLoop(LoopWorker):
    """Delivers through one fenced transactional publisher until stopped or fenced.

    Parameters:
        spec: the group's names and timings.
        publisher: initialised (``init`` done: the old master is fenced).
        store: the schedule, scanned.
        ledger: the store's writer (owner of the seek; repeat checks).
        replica: applies the committed progress to the store.
        frontier: the push frontier (reset to the seek by the takeover).
        policy: when a delivery goes to the dead-letter topic (shared with a node alone).
        retry: backoff between failed transactions.
        clock: time source.
        metrics: counters.
        state: term and callbacks.
        horizon: the last slot that may be delivered at a given now (the cancel gate,
            ``node/watermark.py``); None: now.
        keep_outcomes: record where each committed delivery went (``store/outcome.py``).
        attempts: where failed attempts are kept for the status lookup.
        policies: each target topic's policy, for its rate (``delivery/rate_plan.py``);
            None: no rates.
    """

    def __init__(
        self,
        *,
        spec: GroupSpec,
        publisher: TransactionalPublisher,
        store: RocksStore,
        ledger: Ledger,
        replica: ReplicaStore,
        frontier: Frontier,
        policy: DeadLetterPolicy,
        retry: DeliverySettings,
        clock: Clock,
        metrics: Metrics,
        state: MasterState,
        horizon: Callable[[EpochMs], EpochMs] | None = None,
        keep_outcomes: bool = False,
        attempts: Attempts | None = None,
        policies: Policies | None = None,
    ) -> None:
        super().__init__("transactions")
        self._verdicts = Verdicts(policy, clock, attempts)
        self._rates = None if policies is None else RatePlan(policies, state.paced, state.ahead_ms)
        self._horizon = horizon
        self._keep_outcomes = keep_outcomes
        group = spec.settings
        self._spec = spec
        self._max_records = group.transaction_max_records
        self._interval_s = group.transaction_interval_ms / 1000.0
        self._heartbeat_s = group.progress_interval_ms / 1000.0
        self._timeout_s = group.transaction_timeout_ms / 1000.0
        self._backoff_ms = retry.retry_backoff_initial_ms
        self._backoff_max_ms = retry.retry_backoff_max_ms
        self._catch_up_ms = int(retry.catch_up_window_s * 1000)
        self._lookahead_ms = group.rate_lookahead_ms
        self._publisher = publisher
        self._store = store
        self._ledger = ledger
        self._replica = replica
        self._frontier = frontier
        self._clock = clock
        self._metrics = metrics
        self._state = state
        self.term = state.term
        #: The last abort judged every failure (no outage): the redo need not wait.
        self._redo_at_once = False
        self._last_commit = 0.0
        self._failures = 0
        #: Why this loop stopped delivering for good (fenced, or not authorized), else None.
        self.fenced: str | None = None
        #: The progress topic offset of this term's last committed cut (None before one).
        self.cut_offset: int | None = None
        #: Monotonic time of the first committed transaction (failover measurements).
        self.first_commit_at: float | None = None
        #: The replica to hand the delivery to with the next commit (``release``).
        self._release_to: str | None = None
        #: Set once a commit handed the delivery over: this loop delivers no more.
        self.released = threading.Event()

    def stop(self) -> None:
        super().stop()
        self._frontier.stop()
        self._publisher.interrupt()

    def release(self, successor: str) -> None:
        """Hand the delivery to ``successor`` (a replica's node id): the next transaction
        delivers what is due, commits a cut naming it, and is this loop's last
        (``released``). The successor takes over on reading it, without waiting for the
        progress topic to stand still: a handover's gap is one commit and one takeover."""
        self._release_to = successor
        self._frontier.notify(0)  # wake a wait for the next due message

    def step(self) -> None:
        if self.fenced is not None or self.released.is_set():
            self._stop.wait(0.1)
            return
        try:
            self._deliver_once()
        except Fenced as exc:
            self.fenced = str(exc)
            log.error("master_fenced", term=self.term, reason=self.fenced)
            self._metrics.incr("fenced")
            self._state.on_fenced(self.fenced)
        except NotAuthorized as exc:
            self.fenced = str(exc)
            self._quiet_abort()
            self._state.on_fatal(str(exc))

    def finish(self) -> None:
        # Nothing of an open transaction may become visible later; Kafka would also abort it
        # after transaction_timeout_ms, and the next master's init at once.
        self._quiet_abort()

    def close(self) -> None:
        """Release the publisher once the loop has ended: a node demoted and promoted again
        must not keep one per term."""
        self._publisher.close()

    def _quiet_abort(self) -> None:
        try:
            self._publisher.abort()
        except (Fenced, NotAuthorized, KafkaException):
            pass

    def _deliver_once(self) -> None:
        now = self._clock.now_ms()
        since = time.monotonic() - self._last_commit
        if since < self._interval_s:
            self._stop.wait(self._interval_s - since)
            return
        limit = now if self._horizon is None else self._horizon(now)
        # Before the frontier moves: the rows it reads must be covered by this cut.
        ahead = self._read_ahead(now, limit)
        target = self._target(limit)
        self._frontier.advance(target)
        upto, covered = self._frontier.cut()
        if ahead is not None and any(covered.get(p, 0) < o for p, o in ahead.covered.items()):
            # The frontier did not move since the read (the cancel gate held it, or the clock
            # did not tick): its cut may not cover the moves' adds, and raising its offsets
            # would count as delivered an add that was already due when it arrived (stored
            # past the frontier, due before it). The next transaction reads again.
            ahead = None
        rows = self._rows_through(upto)
        # After the cut: every reschedule whose write the cut covers is among these; the rest
        # wait for a cut that covers them (``Move``).
        moves = self._ledger.moves(covered)
        releasing = self._release_to
        if (
            not rows
            and not moves
            and since < self._heartbeat_s
            and releasing is None
            and ahead is None
        ):
            upcoming = self._store.first_key_from(keys.slot_bound(upto + 1))
            wake = None if upcoming is None else keys.slot_of(upcoming)
            wait_s = min(_MAX_WAIT_S, self._heartbeat_s - since)
            if wake is not None and wake <= now:
                # Due, and held by the cancel gate: ingest has not applied up to it yet.
                self._metrics.observe("cancel_gate_held_ms", now - max(limit, wake))
                wait_s = min(wait_s, _GATE_RECHECK_S)
                wake = None
            self._frontier.wait(wake, self._clock.now_ms(), wait_s)
            return
        jobs = jobs_for(rows, now, self._ledger, self._catch_up_ms)
        rates = self._rates
        if rates is not None and rates.active:
            in_due_order(jobs, rates)
        try:
            committed = self._transact(jobs, upto, covered, moves, releasing, ahead)
        except TransactionAborted:
            committed = False
        except TopicNotYet as exc:
            # Asked again shortly: a cluster that creates topics on demand has by then.
            self._publisher.abort()
            log.info("transaction_waits_for_topic", topic=str(exc), wait_s=UNKNOWN_TOPIC_CONFIRM_S)
            self._stop.wait(UNKNOWN_TOPIC_CONFIRM_S)
            return
        except (Fenced, NotAuthorized):
            raise
        except KafkaException as exc:
            # An outage (a broker killed) or a stop mid-transaction: nothing of it may stay
            # open; one line, no traceback, and the same range again after the backoff.
            self._quiet_abort()
            error = exc.args[0] if exc.args else None
            reason = describe(error) if isinstance(error, KafkaError) else str(exc)
            log.warning("transaction_failed", term=self.term, error=reason)
            committed = False
        except Exception:
            # Whatever broke, no transaction may stay open: the next one could not begin.
            self._quiet_abort()
            raise
        finally:
            if rates is not None:
                rates.aborted()  # nothing after a commit: it settled the plan
        if committed:
            self._failures = 0
            if releasing is not None:
                self.released.set()
                log.info(
                    "master_released",
                    node=self._spec.node_id,
                    term=self.term,
                    successor=releasing,
                    seek_ms=upto,
                )
        elif self._redo_at_once:
            self._redo_at_once = False
            self._metrics.incr("transactions_aborted")
            self._metrics.incr("transactions_redone")
        else:
            self._failures += 1
            backoff = min(self._backoff_ms << min(self._failures - 1, 10), self._backoff_max_ms)
            self._metrics.incr("transactions_aborted")
            self._stop.wait(backoff / 1000.0)

    def _read_ahead(self, now: EpochMs, limit: EpochMs) -> _ReadAhead | None:
        """Plan the rows past ``limit`` (what this transaction may deliver) up to
        ``rate_lookahead_ms`` ahead, from where the last look-ahead stopped, when some topic
        has a rate (``_AHEAD_ROWS`` at most). What is due by ``limit`` is planned as it falls
        due: its earliest time is now, not its slot.

        What stays in place is only remembered, at once. When something must move, the
        transaction publishes the moves: this returns the rows and the offsets that cover
        their adds, or None when the writes it may have seen did not end in time (the next
        transaction reads again)."""
        rates = self._rates
        if rates is None or not self._lookahead_ms or not rates.active:
            return None
        start = keys.slot_bound(max(self._ledger.seek_ms, limit) + 1)
        if rates.ahead_key is not None and rates.ahead_key > start:
            start = rates.ahead_key
        end = now + self._lookahead_ms
        rows = self._store.scan(start, keys.slot_bound(end + 1), _AHEAD_ROWS)
        if not rows:
            return None
        # What a successor may take as planned: up to the last row read, not to ``end`` (a
        # message that arrives later before ``end`` was not), and short of the last slot
        # when the read stopped inside it.
        last = keys.slot_of(rows[-1][0])
        through = last if len(rows) < _AHEAD_ROWS else last - 1
        # Every row read lies past ``limit``, so past what this transaction delivers.
        ahead = _ReadAhead(limited_rows(rows, rates), {}, rows[-1][0] + b"\x00", through)
        trial = BatchPlan()
        plan_ahead(ahead.rows, rates, trial, self._verdicts.retry_at)
        if not trial.states:
            rates.read_ahead(ahead.next_key, ahead.through_ms)
            rates.committed([])
            return None
        rates.aborted()  # planned again inside the transaction
        covered = self._frontier.settled(_SETTLE_S)
        if covered is None:
            return None
        ahead.covered = covered
        return ahead

    def _skipped_ahead(self, moves: Mapping[str, Move]) -> set[str]:
        """Ids the look-ahead leaves alone: moved by a reschedule or deferred to a retry."""
        return set(moves) | set(self._verdicts.retry_at)

    def _target(self, now: EpochMs) -> EpochMs:
        """How far this transaction may move the frontier: to now, or short of the slot where
        the due messages pass ``transaction_max_records`` (a whole slot at least)."""
        seek = self._ledger.seek_ms
        rows = self._store.scan(
            keys.slot_bound(seek + 1), keys.slot_bound(now + 1), self._max_records + 1
        )
        if len(rows) <= self._max_records:
            return now
        slot = keys.slot_of(rows[self._max_records][0])
        return slot - 1 if slot - 1 > seek else slot

    def _rows_through(self, upto: EpochMs) -> list[tuple[bytes, bytes]]:
        """Every stored message with a slot in (seek, upto]: all of them, or the cut lies.

        A second scan after ``_target``'s on purpose: writes that completed between that one
        and the frontier's move may hold slots in range."""
        rows: list[tuple[bytes, bytes]] = []
        start, stop = keys.slot_bound(self._ledger.seek_ms + 1), keys.slot_bound(upto + 1)
        while True:
            chunk = self._store.scan(start, stop, 10_000)
            rows += chunk
            if len(chunk) < 10_000:
                return rows
            start = chunk[-1][0] + b"\x00"

    def _transact(
        self,
        jobs: list[DeliveryJob],
        upto: EpochMs,
        covered: dict[int, int],
        moves: Mapping[str, Move],
        released_to: str | None = None,
        ahead: _ReadAhead | None = None,
    ) -> bool:
        """One transaction; True once committed. Raises Fenced, NotAuthorized,
        TransactionAborted, TopicNotYet.

        Its three steps: plan (``plan.py``: each job sent, deferred, paced, followed by its
        next occurrence), execute (``execute.py``: the records, in the plan's order) and
        commit (``commit.py``: judge the failures of an abort, or settle what was
        delivered). ``moves`` (reschedules applied since the last commit) go out as repeat
        states before the delivered repeats' next occurrences, which are always later ones:
        followers and a store rebuilt from Kafka move the message where this store has it.
        ``released_to``: this commit hands the delivery over (``release``), as read once
        before the transaction, so the loop stops after exactly the commit that says so."""
        publisher = self._publisher
        verdicts = self._verdicts
        verdicts.judged = set()
        refused = verdicts.refused_now(jobs, upto)
        rates = self._rates if self._rates is not None and self._rates.active else None
        now = self._clock.now_ms()
        began = time.monotonic()
        publisher.begin()
        plan = plan_batch(jobs, upto, now, verdicts, rates, refused)
        if ahead is not None and rates is not None:
            plan_ahead(ahead.rows, rates, plan, self._skipped_ahead(moves))
            rates.read_ahead(ahead.next_key, ahead.through_ms)
        moved = [RepeatState(i, m.message, m.slot_ms) for i, m in moves.items()]

        def cut() -> Cut:
            return Cut(
                self.term,
                upto,
                covered,
                self._spec.node_id,
                self._clock.now_ms(),
                self._state.floor.current,
                released_to=released_to,
                paced={} if rates is None else rates.backlog(now),
                ahead_ms=None if rates is None else rates.ahead_ms,
            )

        records = BatchRecords(publisher, verdicts, self._spec.dead_letter_topic, self._metrics)
        records.publish(plan, moved, cut, self._spec.progress_topic)
        produced_at = time.monotonic()
        left = publisher.flush(self._timeout_s)
        if records.failures or left:
            self._abort(jobs, records.failures, left)
            return False
        flushed_at = time.monotonic()
        publisher.commit()
        committed_at = time.monotonic()
        if records.cut_at:
            self.cut_offset = records.cut_at[0]
        # Where a transaction's time goes (node_stats): producing, acknowledgements, commit.
        self._metrics.observe("transaction_produce_ms", round((produced_at - began) * 1000))
        self._metrics.observe("transaction_flush_ms", round((flushed_at - produced_at) * 1000))
        self._metrics.observe("transaction_commit_ms", round((committed_at - flushed_at) * 1000))
        self._committed(jobs, plan, records, upto, covered, moves, rates)
        return True

    def _committed(
        self,
        jobs: list[DeliveryJob],
        plan: BatchPlan,
        records: BatchRecords,
        upto: EpochMs,
        covered: dict[int, int],
        moves: Mapping[str, Move],
        rates: RatePlan | None,
    ) -> None:
        """What a commit settles: the store follows it, the verdicts of what it tried are
        forgotten, and its outcomes and metrics are recorded."""
        now = self._clock.now_ms()
        if self.first_commit_at is None:
            self.first_commit_at = time.monotonic()
            log.info("master_first_commit", node=self._spec.node_id, term=self.term, seek_ms=upto)
        self._last_commit = time.monotonic()
        # Not the moves: this store made them (and may have moved a message again since).
        self._replica.apply_cut(upto, plan.states, covered, plan.ahead)
        self._ledger.forget_moves(moves)
        targets = records.targets
        if self._keep_outcomes:
            found = outcomes(jobs, targets, records.placed, self._verdicts.dead, now)
            self._ledger.record_outcomes(found)
        tried = self._verdicts.settled(jobs, upto)
        if rates is not None:
            observe_paced(self._metrics, rates, jobs, targets, now)
            rates.committed(tried, upto)
            rates.forget_before(now)
        if targets:
            self._metrics.incr("delivered", len(targets))
        if records.oldest is not None:
            # Due -> committed, which is when read_committed consumers can see it.
            self._metrics.observe("ack_lateness_ms", now - records.oldest)
        self._metrics.incr("transactions")

    def _abort(self, jobs: list[DeliveryJob], failures: dict[int, KafkaError], left: int) -> None:
        """Abort; judge each failure (dead-letter or defer in the redo), and say whether the
        redo may follow at once (``_redo_at_once``: every failure was the record's own)."""
        topics = (self._spec.progress_topic, self._spec.dead_letter_topic)
        try:
            self._redo_at_once = judge_abort(
                jobs, failures, left, self._verdicts, topics, self.term
            )
        except Fenced:
            self._quiet_abort()
            raise
        self._publisher.abort()
